//! The replays' verified-tick hooks ([replays](crate::rules#replays)): [`ReplayRecording`]
//! records every verified tick into the App's [`ReplayRecorder`], [`ReplayCheck`] compares a
//! playback's recorded checksums and stops verification at the first mismatch.

use super::ReplayRecorder;
use super::{PlaybackHandle, ReplayMismatch, ReplayPlayback};
use crate::dump::{DesyncDumpConfig, DumpReason, capture_view, write_and_report};
use crate::hooks::{HookFlow, VerifiedTick, VerifiedTickHook};
use crate::input::SimInput;
use crate::tick::Tick;

/// Records the frame of every verified tick — the confirmed inputs, the disconnected players,
/// the checksum of a checksum tick — into the App's [`ReplayRecorder`] resource, when there is
/// one (it may be inserted at any time before the first session update).
pub(crate) struct ReplayRecording;

impl<I: SimInput> VerifiedTickHook<I> for ReplayRecording {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow {
        let (tick, disconnected, checksum) = (
            verified.tick(),
            verified.disconnected(),
            verified.checksum(),
        );
        let (inputs, app) = verified.inputs_and_app_world();
        if let Some(mut recorder) = app.get_resource_mut::<ReplayRecorder>() {
            recorder.record_frame(tick, inputs, disconnected, checksum);
        }
        HookFlow::Continue
    }
}

/// Checks a playback's verified ticks against the recorded checksums: at the first mismatch
/// it writes a [`ReplayMismatch`] message, dumps the verified world of the tick when desync
/// dumps are on, and stops verification.
pub(crate) struct ReplayCheck<I: SimInput> {
    playback: PlaybackHandle<I>,
    dumps: Option<DesyncDumpConfig>,
}

impl<I: SimInput> ReplayCheck<I> {
    /// The check of `playback`, dumping a mismatch with `dumps` when given.
    pub(crate) fn new(playback: &ReplayPlayback<I>, dumps: Option<DesyncDumpConfig>) -> Self {
        Self {
            playback: playback.handle().clone(),
            dumps,
        }
    }
}

impl<I: SimInput> VerifiedTickHook<I> for ReplayCheck<I> {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow {
        let Some(mismatch) = self.playback.verified(verified.tick(), verified.checksum()) else {
            return HookFlow::Continue;
        };
        verified.app_world().write_message(mismatch);
        dump_mismatch(verified, self.dumps.as_ref(), &mismatch);
        HookFlow::Stop(format!(
            "replay mismatch at tick {}: recorded checksum {:#018x}, replayed {:#018x}",
            mismatch.tick, mismatch.expected, mismatch.found
        ))
    }

    fn wants_checksum(&self, tick: Tick) -> bool {
        self.playback.expects_checksum(tick)
    }
}

/// A replay's recorded checksum of `mismatch.tick` differs from the replayed one (the verified
/// world is at that tick): writes the verified world's dump of the tick, when dumps are on.
fn dump_mismatch<I: SimInput>(
    verified: &mut VerifiedTick<'_, I>,
    config: Option<&DesyncDumpConfig>,
    mismatch: &ReplayMismatch,
) {
    let Some(config) = config else {
        return;
    };
    let reason = DumpReason::ReplayMismatch {
        recorded: mismatch.expected,
        replayed: mismatch.found,
    };
    let dump = capture_view(verified, reason, Vec::new());
    write_and_report(verified.app_world(), config, &dump);
}
