//! The session's desync dump triggers ([desync dumps](crate::rules#desync-dumps)): the first
//! failed prediction check dumps the predicted and the verified world of the tick; the first
//! desync the relay reports dumps the verified world with the breakdowns of recent checksum
//! ticks, and sends the relay the breakdown of the desynced tick (the per-verified-tick part is
//! the [`DesyncDumps`] hook). A replay's first checksum mismatch dumps the verified world of the
//! mismatching tick (the replay check hook does).

use bevy::prelude::*;

use super::hooks::HookFlow;
use super::state::{DeterministicSession, VerifiedTick, VerifiedTickHook};
use crate::dump::capture::{self, DumpContext};
use std::path::{Path, PathBuf};

use crate::dump::{
    ComponentBreakdown, DEFAULT_MAX_DUMP_BYTES, DesyncDump, DesyncDumpWritten, DumpError,
    DumpReason, DumpedWorld, dumped_inputs, write_and_report, write_dump_file, writer_of,
};
use crate::input::{InputStatus, SimInput};
use crate::tick::Tick;
use crate::worlds::SimulationWorlds;

/// After predicting `tick` (inputs in the session's scratch set): keeps a dump of the predicted
/// world for the prediction check, while the first mismatch is not dumped yet.
pub(super) fn keep_predicted<I: SimInput>(
    main: &World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    tick: Tick,
) {
    if session.dumps.config.is_none()
        || !session.config.verify_predictions
        || session.dumps.prediction_written
    {
        return;
    }
    let dump = capture::capture(
        &mut worlds.predicted,
        &worlds.registry,
        DumpContext {
            world: DumpedWorld::Predicted,
            reason: DumpReason::PredictionMismatch,
            inputs: dumped_inputs(&session.inputs, &session.status),
            breakdowns: Vec::new(),
            writer: writer_of(main),
        },
    );
    session.dumps.predicted.insert(tick, dump);
}

/// The prediction check of `tick` failed (the verified world is at `tick`): writes the predicted
/// and the verified dump of the tick, the first time.
pub(super) fn on_prediction_mismatch<I: SimInput>(
    main: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    tick: Tick,
) {
    let Some(config) = session.dumps.config.clone() else {
        return;
    };
    if session.dumps.prediction_written {
        return;
    }
    session.dumps.prediction_written = true;
    let predicted = session.dumps.predicted.remove(&tick);
    session.dumps.predicted.clear();
    let verified = capture::capture(
        &mut worlds.verified,
        &worlds.registry,
        DumpContext {
            world: DumpedWorld::Verified,
            reason: DumpReason::PredictionMismatch,
            inputs: dumped_inputs(&session.inputs, &session.status),
            breakdowns: Vec::new(),
            writer: writer_of(main),
        },
    );
    if let Some(predicted) = predicted {
        write_and_report(main, &config, &predicted);
    }
    write_and_report(main, &config, &verified);
}

/// Desync dumps as a verified-tick hook (installed with a dump directory): keeps the
/// per-component breakdown of every checksum tick, and writes the scheduled server-desync dump
/// when its tick is verified.
pub(crate) struct DesyncDumps;

impl<I: SimInput> VerifiedTickHook<I> for DesyncDumps {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow {
        if verified.checksum.is_some() {
            keep_breakdown(verified.worlds, verified.session);
        }
        dump_if_due(
            verified.main,
            verified.worlds,
            verified.session,
            verified.tick,
        );
        HookFlow::Continue
    }
}

/// After verifying a checksum tick: keeps its per-component breakdown.
fn keep_breakdown<I: SimInput>(
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
) {
    let Some(config) = &session.dumps.config else {
        return;
    };
    let keep = config.recent_breakdowns;
    let breakdown = capture::breakdown(&mut worlds.verified, &worlds.registry);
    session.dumps.keep_breakdown(breakdown, keep);
}

/// Ticks a server-desync dump is aligned to: every client dumps the first multiple of this at
/// least this far after the desynced tick, so the dumps of all clients are of the same tick.
pub(crate) const DESYNC_DUMP_ALIGN: Tick = 32;

/// The tick every client dumps for a desync of `tick`: the first multiple of
/// [`DESYNC_DUMP_ALIGN`] at least [`DESYNC_DUMP_ALIGN`] ticks after it.
pub(crate) fn desync_dump_tick(tick: Tick) -> Tick {
    let after = tick.saturating_add(DESYNC_DUMP_ALIGN);
    after.saturating_add(DESYNC_DUMP_ALIGN - 1) / DESYNC_DUMP_ALIGN * DESYNC_DUMP_ALIGN
}

/// The relay reported a desync of `players` at `tick` (this client's or others'): sends the relay this client's breakdown of the tick (when
/// kept; for the first desync of the session only, the one the relay compares) and, the first time, schedules a dump of the verified world at
/// [`desync_dump_tick`] (or dumps its current tick when already past it).
pub(super) fn on_server_desync<I: SimInput>(
    main: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    tick: Tick,
    players: Vec<crate::tick::PlayerIndex>,
) {
    if session.dumps.config.is_none() {
        return;
    }
    if !session.dumps.breakdown_sent
        && let Some(breakdown) = session.dumps.breakdown_of(tick).cloned()
    {
        session.dumps.breakdown_sent = true;
        if let Some(link) = session.link.as_mut() {
            link.send_breakdown(main, &breakdown);
        }
    }
    if session.dumps.desync_written || session.dumps.scheduled.is_some() {
        return;
    }
    let reason = DumpReason::ServerDesync { tick, players };
    let target = desync_dump_tick(tick);
    let now = worlds.verified.tick();
    if now < target {
        session.dumps.scheduled = Some((target, reason));
        return;
    }
    let inputs = confirmed_inputs(session, now);
    dump_verified(main, worlds, session, reason, inputs);
}

/// The confirmed inputs of `tick` as a dump records them (missing ones marked).
fn confirmed_inputs<I: SimInput>(
    session: &DeterministicSession<I>,
    tick: Tick,
) -> Vec<crate::dump::DumpedInput> {
    let players = session.config.players;
    let mut inputs = Vec::with_capacity(usize::from(players));
    let mut status = Vec::with_capacity(usize::from(players));
    for p in 0..players {
        let input = session.buffer.confirmed(p, tick).cloned();
        status.push(if input.is_some() {
            InputStatus::Confirmed
        } else {
            InputStatus::Missing
        });
        inputs.push(input.unwrap_or_default());
    }
    dumped_inputs(&inputs, &status)
}

/// A resync is about to replace the verified world: a server-desync dump still scheduled for a
/// later tick is written now, of the desynced world at its current tick — at the scheduled
/// tick the world would be the resynced one, and the dump is what a developer needs to find the
/// cause.
pub(super) fn write_scheduled_before_resync<I: SimInput>(main: &mut World) {
    if !main.contains_resource::<SimulationWorlds>()
        || !main.contains_resource::<DeterministicSession<I>>()
    {
        return;
    }
    main.resource_scope(|main, mut worlds: Mut<SimulationWorlds>| {
        main.resource_scope(|main, mut session: Mut<DeterministicSession<I>>| {
            let session = &mut *session;
            let Some((_, reason)) = session.dumps.scheduled.take() else {
                return;
            };
            let now = worlds.verified.tick();
            let inputs = confirmed_inputs(session, now);
            dump_verified(main, &mut worlds, session, reason, inputs);
        });
    });
}

/// After verifying `tick` (its inputs in the session's scratch set): writes the scheduled
/// server-desync dump if it is due.
fn dump_if_due<I: SimInput>(
    main: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    tick: Tick,
) {
    if session
        .dumps
        .scheduled
        .as_ref()
        .is_none_or(|(t, _)| *t != tick)
    {
        return;
    }
    let Some((_, reason)) = session.dumps.scheduled.take() else {
        return;
    };
    let inputs = dumped_inputs(&session.inputs, &session.status);
    dump_verified(main, worlds, session, reason, inputs);
}

fn dump_verified<I: SimInput>(
    main: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    reason: DumpReason,
    inputs: Vec<crate::dump::DumpedInput>,
) {
    let Some(config) = session.dumps.config.clone() else {
        return;
    };
    session.dumps.desync_written = true;
    let dump = capture::capture(
        &mut worlds.verified,
        &worlds.registry,
        DumpContext {
            world: DumpedWorld::Verified,
            reason,
            inputs,
            breakdowns: session.dumps.breakdowns.iter().cloned().collect(),
            writer: writer_of(main),
        },
    );
    write_and_report(main, &config, &dump);
}

/// Forgets predicted dumps of ticks through `verified_tick` (their check is done).
pub(super) fn forget_through<I: SimInput>(
    session: &mut DeterministicSession<I>,
    verified_tick: Tick,
) {
    while session
        .dumps
        .predicted
        .first_key_value()
        .is_some_and(|(t, _)| *t <= verified_tick)
    {
        session.dumps.predicted.pop_first();
    }
}

/// Captures a dump of the verified world of the App's session (on the main world) at its
/// current tick, with the confirmed inputs of that tick and the breakdowns the session kept.
///
/// # Errors
/// [`DumpError::NoSession`](crate::DumpError::NoSession) when the App has no running session of input type `I` (or its
/// worlds are not built).
pub fn capture_desync_dump<I: SimInput>(
    world: &mut World,
    reason: DumpReason,
) -> Result<DesyncDump, DumpError> {
    let writer = writer_of(world);
    let Some(session) = world.get_resource::<DeterministicSession<I>>() else {
        return Err(DumpError::NoSession);
    };
    let players = session.config().players;
    let breakdowns: Vec<ComponentBreakdown> = session.dumps.breakdowns.iter().cloned().collect();
    let mut worlds = world
        .remove_resource::<SimulationWorlds>()
        .ok_or(DumpError::NoSession)?;
    let tick = worlds.verified.tick();
    let session = world.resource::<DeterministicSession<I>>();
    let mut inputs = Vec::with_capacity(usize::from(players));
    let mut status = Vec::with_capacity(usize::from(players));
    for p in 0..players {
        match session.buffer().confirmed(p, tick) {
            Some(input) => {
                inputs.push(input.clone());
                status.push(InputStatus::Confirmed);
            }
            None => {
                inputs.push(I::default());
                status.push(InputStatus::Missing);
            }
        }
    }
    let dump = capture::capture(
        &mut worlds.verified,
        &worlds.registry,
        capture::DumpContext {
            world: DumpedWorld::Verified,
            reason,
            inputs: dumped_inputs(&inputs, &status),
            breakdowns,
            writer,
        },
    );
    world.insert_resource(worlds);
    Ok(dump)
}

/// Writes a dump of the verified world of the App's session (captured as the session captures its own dumps)
/// into `dir` and writes a [`DesyncDumpWritten`](crate::DesyncDumpWritten) message; for callers outside the session's
/// own triggers, such as a replay that found a checksum mismatch.
///
/// # Errors
/// The capture's and the file write's [`DumpError`](crate::DumpError)s (the file limited to
/// [`DEFAULT_MAX_DUMP_BYTES`](crate::DEFAULT_MAX_DUMP_BYTES)).
pub fn write_desync_dump<I: SimInput>(
    world: &mut World,
    dir: &Path,
    reason: DumpReason,
) -> Result<PathBuf, DumpError> {
    let dump = capture_desync_dump::<I>(world, reason)?;
    let path = write_dump_file(dir, &dump, DEFAULT_MAX_DUMP_BYTES)?;
    world.write_message(DesyncDumpWritten {
        path: path.clone(),
        tick: dump.header.tick,
        world: dump.header.world,
        reason: dump.header.reason.clone(),
    });
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_client_dumps_the_same_aligned_tick_after_the_desync() {
        assert_eq!(desync_dump_tick(1), 64);
        assert_eq!(desync_dump_tick(32), 64);
        assert_eq!(desync_dump_tick(33), 96);
        assert_eq!(desync_dump_tick(0), 32);
    }
}
