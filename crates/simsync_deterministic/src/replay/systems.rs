//! The replay systems of the main app: start a recording or a playback before the session
//! update, record snapshots and report recording errors after it. (Frames are recorded and
//! checked inside the session update by verified-tick hooks, tick by tick.)

use bevy::prelude::*;

use super::ReplayHeader;
use super::seek as snapshots;
use super::{ReplayPlayback, ReplayPlaybackFailed};
use super::{ReplayRecorder, ReplayWriteFailed};
use crate::config::SessionConfig;
use crate::input::SimInput;
use crate::session::DeterministicSession;
use crate::snapshot::RollbackRegistry;
use crate::snapshot::capture::registered_type_names;
use crate::stats::SessionStats;
use crate::tick::Tick;
use crate::worlds::SimulationWorlds;

/// The header a session with `config` and `registry` writes when recording starts with the
/// verified world at `start_tick`.
pub(crate) fn header_of<I: SimInput>(
    config: &SessionConfig,
    registry: &RollbackRegistry,
    start_tick: Tick,
) -> ReplayHeader {
    ReplayHeader {
        tick_rate_hz: config.tick_rate.hz(),
        players: config.players,
        input_type: std::any::type_name::<I>().to_string(),
        registered_types: registered_type_names(registry),
        checksum_interval: config.checksum_interval,
        max_simulation_entities: config.max_simulation_entities,
        rollback_window: config.rollback_window,
        start_tick,
        created_by: concat!("simsync_deterministic ", env!("CARGO_PKG_VERSION")).to_string(),
    }
}

/// The header this App's session would write now, if the worlds are built.
fn current_header<I: SimInput>(world: &World) -> Option<ReplayHeader> {
    let worlds = world.get_resource::<SimulationWorlds>()?;
    let session = world.get_resource::<DeterministicSession<I>>()?;
    Some(header_of::<I>(
        session.config(),
        worlds.registry(),
        worlds.verified.tick(),
    ))
}

/// Before the session update: writes a new recorder's header (and initial snapshot), and
/// starts a playback (game check, snapshot to start from).
pub(crate) fn replay_before_update<I: SimInput>(world: &mut World) {
    if world
        .get_resource::<ReplayRecorder>()
        .is_some_and(ReplayRecorder::needs_header)
    {
        start_recording::<I>(world);
    }
    if world
        .get_resource::<ReplayPlayback<I>>()
        .is_some_and(|p| p.handle().waits_for_start())
    {
        start_playback::<I>(world);
        world.resource_mut::<ReplayPlayback<I>>().sync();
    }
}

fn start_recording<I: SimInput>(world: &mut World) {
    let Some(header) = current_header::<I>(world) else {
        return;
    };
    let snapshot = world
        .resource::<ReplayRecorder>()
        .wants_initial_snapshot()
        .then(|| snapshots::capture::<I>(world));
    let mut recorder = world.resource_mut::<ReplayRecorder>();
    recorder.start(&header);
    match snapshot {
        Some(Ok(bytes)) => recorder.record_snapshot(header.start_tick, &bytes),
        Some(Err(error)) => recorder.fail(error),
        None => {}
    }
}

fn start_playback<I: SimInput>(world: &mut World) {
    let Some(game) = current_header::<I>(world) else {
        return;
    };
    let result = world
        .resource::<ReplayPlayback<I>>()
        .replay()
        .header()
        .check_same_game(&game)
        .and_then(|()| snapshots::start_playback::<I>(world).map(|_| ()));
    if let Err(error) = result {
        world
            .resource::<ReplayPlayback<I>>()
            .handle()
            .fail(error.clone());
        world.write_message(ReplayPlaybackFailed(error));
    }
}

/// After the session update: shows the playback's progress in its resource; the periodic
/// snapshot, the flush, and a recording error as a [`ReplayWriteFailed`] message and in
/// [`SessionStats`].
pub(crate) fn replay_after_update<I: SimInput>(world: &mut World) {
    if let Some(mut playback) = world.get_resource_mut::<ReplayPlayback<I>>() {
        playback.sync();
    }
    let Some(recorder) = world.get_resource::<ReplayRecorder>() else {
        return;
    };
    let verified_tick = world
        .get_resource::<SimulationWorlds>()
        .map_or(0, |w| w.verified.tick());
    if recorder.wants_snapshot(verified_tick) {
        let snapshot = snapshots::capture::<I>(world);
        let mut recorder = world.resource_mut::<ReplayRecorder>();
        match snapshot {
            Ok(bytes) => recorder.record_snapshot(verified_tick, &bytes),
            Err(error) => recorder.fail(error),
        }
    }
    let mut recorder = world.resource_mut::<ReplayRecorder>();
    recorder.flush();
    let (frames, snapshots) = (recorder.frames(), recorder.snapshots());
    let failed = recorder.take_unreported();
    if let Some(mut stats) = world.get_resource_mut::<SessionStats>() {
        stats.replay_frames_recorded = frames;
        stats.replay_snapshots_recorded = snapshots;
        if failed.is_some() {
            stats.replay_write_errors += 1;
        }
    }
    if let Some(error) = failed {
        world.write_message(ReplayWriteFailed {
            tick: verified_tick,
            error,
        });
    }
}
