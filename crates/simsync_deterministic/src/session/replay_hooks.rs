//! The replays' verified-tick hooks ([replays](crate::rules#replays)): [`ReplayRecording`]
//! records every verified tick into the App's [`ReplayRecorder`], [`ReplayCheck`] compares a
//! playback's recorded checksums and stops verification at the first mismatch.

use super::{HookFlow, VerifiedTick, VerifiedTickHook};
use crate::dump::capture::{self, DumpContext};
use crate::dump::{DumpReason, DumpedWorld, dumped_inputs, write_and_report, writer_of};
use crate::input::SimInput;
use crate::replay::ReplayRecorder;
use crate::replay::{PlaybackHandle, ReplayMismatch, ReplayPlayback};
use crate::tick::Tick;

/// Records the frame of every verified tick — the confirmed inputs, the disconnected players,
/// the checksum of a checksum tick — into the App's [`ReplayRecorder`] resource, when there is
/// one (it may be inserted at any time before the first session update).
pub(crate) struct ReplayRecording;

impl<I: SimInput> VerifiedTickHook<I> for ReplayRecording {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow {
        let (tick, disconnected, checksum) =
            (verified.tick, verified.disconnected, verified.checksum);
        if let Some(mut recorder) = verified.main.get_resource_mut::<ReplayRecorder>() {
            recorder.record_frame(tick, &verified.session.inputs, disconnected, checksum);
        }
        HookFlow::Continue
    }
}

/// Checks a playback's verified ticks against the recorded checksums: at the first mismatch
/// it writes a [`ReplayMismatch`] message, dumps the verified world of the tick when desync
/// dumps are on, and stops verification.
pub(crate) struct ReplayCheck<I: SimInput> {
    playback: PlaybackHandle<I>,
}

impl<I: SimInput> ReplayCheck<I> {
    /// The check of `playback`.
    pub(crate) fn new(playback: &ReplayPlayback<I>) -> Self {
        Self {
            playback: playback.handle().clone(),
        }
    }
}

impl<I: SimInput> VerifiedTickHook<I> for ReplayCheck<I> {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow {
        let Some(mismatch) = self.playback.verified(verified.tick, verified.checksum) else {
            return HookFlow::Continue;
        };
        verified.main.write_message(mismatch);
        dump_mismatch(verified, &mismatch);
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
fn dump_mismatch<I: SimInput>(verified: &mut VerifiedTick<'_, I>, mismatch: &ReplayMismatch) {
    let Some(config) = verified.session.dumps.config.clone() else {
        return;
    };
    let inputs = dumped_inputs(verified.inputs(), verified.input_status());
    let writer = writer_of(verified.main);
    let worlds = &mut *verified.worlds;
    let dump = capture::capture(
        &mut worlds.verified,
        &worlds.registry,
        DumpContext {
            world: DumpedWorld::Verified,
            reason: DumpReason::ReplayMismatch {
                recorded: mismatch.expected,
                replayed: mismatch.found,
            },
            inputs,
            breakdowns: Vec::new(),
            writer,
        },
    );
    write_and_report(verified.main, &config, &dump);
}
