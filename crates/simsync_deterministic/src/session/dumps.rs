//! The session's desync dump triggers ([desync dumps](crate::rules#desync-dumps)): the first
//! failed prediction check dumps the predicted and the verified world of the tick; the first
//! desync the relay reports dumps the verified world of the desynced tick and the tick before
//! it, with the breakdowns of recent checksum ticks, and sends the relay the breakdown of the
//! desynced tick (what is kept per verified tick for this is the [`DesyncDumps`] hook). A replay's first checksum mismatch dumps the verified world of the
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
/// per-component breakdown of every checksum tick and, in a networked session until the first
/// server desync is dumped, a dump of the verified world at every checksum tick and the tick
/// before it.
pub(crate) struct DesyncDumps;

impl<I: SimInput> VerifiedTickHook<I> for DesyncDumps {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow {
        if verified.checksum.is_some() {
            keep_breakdown(verified.worlds, verified.session);
        }
        let interval = Tick::try_from(verified.session.config.checksum_interval).unwrap_or(1);
        let next_is_checksum = (verified.tick + 1) % interval.max(1) == 0;
        if verified.checksum.is_some() || next_is_checksum {
            keep_recent(verified.main, verified.worlds, verified.session);
        }
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

/// After verifying a tick a desync may be judged on (its inputs in the session's scratch set):
/// keeps a dump of the verified world, in a networked session that has not dumped a server
/// desync yet.
fn keep_recent<I: SimInput>(
    main: &World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
) {
    let keep = match &session.dumps.config {
        Some(config) if config.recent_dumps > 0 => config.recent_dumps,
        _ => return,
    };
    if session.link.is_none() || session.dumps.desync_written {
        return;
    }
    let dump = capture::capture(
        &mut worlds.verified,
        &worlds.registry,
        DumpContext {
            world: DumpedWorld::Verified,
            reason: DumpReason::Requested,
            inputs: dumped_inputs(&session.inputs, &session.status),
            breakdowns: Vec::new(),
            writer: writer_of(main),
        },
    );
    session.dumps.keep_recent(dump, keep);
}

/// The relay reported a desync of `players` at `tick` (this client's or other players'): sends
/// the relay this client's breakdown of the tick (when kept; for the first desync of the session
/// only, the one the relay compares) and, the first time, writes the dumps of the verified world
/// at the desynced tick and the tick before it (kept by [`DesyncDumps`]), or of its current tick
/// when the desynced tick is no longer kept.
pub(super) fn on_server_desync<I: SimInput>(
    main: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    tick: Tick,
    players: Vec<crate::tick::PlayerIndex>,
) {
    let Some(config) = session.dumps.config.clone() else {
        return;
    };
    if !session.dumps.breakdown_sent
        && let Some(breakdown) = session.dumps.breakdown_of(tick).cloned()
    {
        session.dumps.breakdown_sent = true;
        if let Some(link) = session.link.as_mut() {
            link.send_breakdown(main, &breakdown);
        }
    }
    if session.dumps.desync_written {
        return;
    }
    session.dumps.desync_written = true;
    let reason = DumpReason::ServerDesync { tick, players };
    let kept = session.dumps.recent_for(tick, &reason);
    session.dumps.recent.clear();
    if kept.is_empty() {
        let now = worlds.verified.tick();
        let inputs = confirmed_inputs(session, now);
        dump_verified(main, worlds, session, reason, inputs);
        return;
    }
    for dump in &kept {
        write_and_report(main, &config, dump);
    }
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
    use crate::dump::{ComponentBreakdown, GameFingerprint};
    use crate::dump::{DesyncDump, DumpHeader, DumpReason, DumpState, DumpedWorld};

    fn dump(tick: crate::Tick) -> DesyncDump {
        DesyncDump {
            header: DumpHeader {
                tick,
                world: DumpedWorld::Verified,
                reason: DumpReason::Requested,
                fingerprint: GameFingerprint::default(),
                checksum: tick as u64,
                writer: None,
            },
            entities: Vec::new(),
            resources: Vec::new(),
            inputs: Vec::new(),
            breakdowns: Vec::new(),
        }
    }

    fn breakdown(tick: crate::Tick) -> ComponentBreakdown {
        ComponentBreakdown {
            tick,
            ..Default::default()
        }
    }

    #[test]
    fn a_desync_is_dumped_at_its_tick_and_the_tick_before_from_the_kept_dumps() {
        let mut state = DumpState::default();
        for tick in 1..=300 {
            state.keep_recent(dump(tick), 128);
            state.keep_breakdown(breakdown(tick), 256);
        }
        assert_eq!(state.recent.len(), 128, "bounded");
        let reason = DumpReason::ServerDesync {
            tick: 250,
            players: vec![0],
        };
        let dumps = state.recent_for(250, &reason);
        let ticks: Vec<_> = dumps.iter().map(|d| d.header.tick).collect();
        assert_eq!(ticks, vec![249, 250]);
        assert!(dumps.iter().all(|d| d.header.reason == reason));
        // Each dump carries the breakdowns of its tick and before, not later ones.
        assert_eq!(dumps[1].breakdowns.last().map(|b| b.tick), Some(250));
        assert_eq!(dumps[0].breakdowns.last().map(|b| b.tick), Some(249));
        // A tick no longer kept (or never kept) gives nothing: the caller dumps its current tick.
        assert!(state.recent_for(100, &reason).is_empty());
        // The first kept tick has no kept tick before it.
        assert_eq!(state.recent_for(173, &reason).len(), 1);
    }

    #[test]
    fn a_tick_verified_again_replaces_its_kept_dump() {
        let mut state = DumpState::default();
        state.keep_recent(dump(5), 4);
        let mut again = dump(5);
        again.header.checksum = 99;
        state.keep_recent(again, 4);
        assert_eq!(state.recent.len(), 1);
        assert_eq!(state.recent[&5].header.checksum, 99);
    }
}
