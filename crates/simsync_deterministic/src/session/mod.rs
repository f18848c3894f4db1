//! The session update: one exclusive system, [`session_update`], that takes the session's state
//! out of the main world and runs the steps of [the session update](crate::rules#the-session-update)
//! on it in order.

mod checksums;
mod lifecycle;
mod state;
mod steps;

use bevy::prelude::*;

use crate::config::SessionMode;
use crate::divergence::coverage;
use crate::input::SimInput;
use crate::stats::SessionStats;
use crate::worlds::SimulationWorlds;

pub(crate) use lifecycle::update_lifecycle;
pub use lifecycle::{
    Connection, LeaveSession, LifecycleView, NetworkView, SessionEnd, SessionLifecycle,
    SessionState, SessionStateChanged, SessionStateReason, session_transitions,
};
pub use state::DeterministicSession;

/// The session update system. Runs in
/// [`DeterministicSet::SessionUpdate`](crate::DeterministicSet): poll, begin, verify, decide,
/// rollback, predict, finish.
pub(crate) fn session_update<I: SimInput>(world: &mut World) {
    let Some(mut worlds) = world.remove_resource::<SimulationWorlds>() else {
        if !world.contains_resource::<NoWorldsReported>() {
            world.insert_resource(NoWorldsReported);
            crate::warning::report(world, crate::warning::SessionWarning::WorldsNotBuilt);
        }
        return;
    };
    let Some(mut session) = world.remove_resource::<DeterministicSession<I>>() else {
        world.insert_resource(worlds);
        return;
    };
    if !session.started {
        session.started = true;
        worlds.registry.lock();
        crate::events::start_session(
            world,
            &mut worlds.predicted.world,
            &mut worlds.verified.world,
        );
        coverage::report_setup_errors(world, &worlds.registry);
        if worlds.registry.snapshots_enabled() {
            coverage::report_unserializable(world, &worlds.verified.world, &worlds.registry);
        }
    }
    run_steps(world, &mut worlds, &mut session);
    crate::warning::forward_pending(world, &mut worlds.verified.world);
    world.insert_resource(session);
    world.insert_resource(worlds);
}

/// The steps in order. [`SessionStats`] is out of the main world from the end of `begin` to
/// `finish`, which puts it back before the `AfterPrediction` hooks. Simulation events of both
/// worlds are delivered between prediction and `finish`.
fn run_steps<I: SimInput>(
    world: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
) {
    // One span per stage, for profilers (no cost unless a tracing subscriber enables them).
    let polled = info_span!("simsync_poll").in_scope(|| steps::poll(world, session));
    info_span!("simsync_begin").in_scope(|| steps::begin(world, worlds, session, polled));
    let mut stats = world.remove_resource::<SessionStats>().unwrap_or_default();
    if polled.stalling {
        stats.stalls += 1;
    }
    steps::report_desyncs(world, worlds, session, &mut stats);
    info_span!("simsync_verify").in_scope(|| steps::verify(world, worlds, session, &mut stats));
    info_span!("simsync_decide").in_scope(|| steps::decide(world, session));
    if session.config.mode == SessionMode::Predicted {
        info_span!("simsync_rollback")
            .in_scope(|| steps::rollback(world, worlds, session, &mut stats));
        info_span!("simsync_predict")
            .in_scope(|| steps::predict(world, worlds, session, &mut stats));
    }
    let predicted_runs = std::mem::take(&mut worlds.predicted.ticks_run);
    let verified_runs = std::mem::take(&mut worlds.verified.ticks_run);
    crate::events::deliver(
        world,
        (&predicted_runs, &mut worlds.predicted.world),
        (&verified_runs, &mut worlds.verified.world),
    );
    info_span!("simsync_finish").in_scope(|| steps::finish(world, worlds, session, stats));
}

/// The session update found no worlds and reported it (once).
#[derive(Resource)]
struct NoWorldsReported;
