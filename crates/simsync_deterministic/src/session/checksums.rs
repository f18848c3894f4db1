//! Checksum reporting, the verify step's own duty: every checksum tick's checksum is kept in
//! [`SessionStats`], written as [`ChecksumRecorded`] and, in a networked session, reported to
//! the relay server (which judges them,
//! [checksums are judged by majority](../../simsync_relay/rules/index.html#checksums-are-judged-by-majority)).

use bevy::prelude::*;

use crate::checksum::TickChecksum;
use crate::input::SimInput;
use crate::source::RelayLink;
use crate::stats::{ChecksumRecorded, SessionStats, push_bounded};

/// Records `checksum` (the verified world's at its tick): the last checksum and the bounded
/// history (`history` checksums) in `stats`, a [`ChecksumRecorded`] message, and the checksum
/// to the relay through `link` when networked.
pub(super) fn report<I: SimInput>(
    main: &mut World,
    link: Option<&mut RelayLink<I>>,
    stats: &mut SessionStats,
    checksum: TickChecksum,
    history: usize,
) {
    stats.last_checksum = Some(checksum);
    push_bounded(&mut stats.checksum_history, checksum, history);
    main.write_message(ChecksumRecorded(checksum));
    if let Some(link) = link {
        link.send_checksum(main, checksum);
    }
}
