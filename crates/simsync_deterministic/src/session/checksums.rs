//! Checksum reporting, a verified-tick hook: every checksum tick's checksum is kept in
//! [`SessionStats`](super::SessionStats), written as [`ChecksumRecorded`] and, in a networked
//! session, reported to the relay server (which judges them,
//! [checksums are judged by majority](../../simsync_relay/rules/index.html#checksums-are-judged-by-majority)).

use super::hooks::HookFlow;
use super::state::{VerifiedTick, VerifiedTickHook};
use super::stats::{ChecksumRecorded, push_bounded};
use crate::checksum::TickChecksum;
use crate::input::SimInput;

/// Keeps, writes and reports the checksum of every checksum tick.
pub(crate) struct ChecksumReport;

impl<I: SimInput> VerifiedTickHook<I> for ChecksumReport {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow {
        let Some(checksum) = verified.checksum else {
            return HookFlow::Continue;
        };
        let checksum = TickChecksum {
            tick: verified.tick,
            checksum,
        };
        let stats = &mut *verified.stats;
        stats.last_checksum = Some(checksum);
        let bound = verified.session.config.checksum_history as usize;
        push_bounded(&mut stats.checksum_history, checksum, bound);
        verified.main.write_message(ChecksumRecorded(checksum));
        if let Some(link) = verified.session.link.as_mut() {
            link.send_checksum(verified.main, checksum);
        }
        HookFlow::Continue
    }
}
