//! Ending a session and starting a new one in the same App: [`restart_session`] rebuilds the
//! session, its input path and both simulation worlds from what the plugin was given
//! ([session lifecycle](crate::rules#session-lifecycle)).

use bevy::prelude::*;
use bevy_state::state::NextState;

use crate::config::SessionConfig;
use crate::context::SimulatorContext;
use crate::error::SessionError;
use crate::input::SimInput;
use crate::session::{
    DeterministicSession, SessionEnd, SessionLifecycle, SessionState, SessionStateChanged,
    SessionStateReason, SessionStats,
};
use crate::source::LocalInputs;
use crate::worlds::{SessionBlueprint, build_worlds};

/// The state a new session starts in: `Connecting` when networked, else `Running`.
pub(crate) fn initial_lifecycle(config: &SessionConfig) -> SessionLifecycle {
    let state = if config.network.is_some() {
        SessionState::Connecting
    } else {
        SessionState::Running
    };
    SessionLifecycle {
        state,
        reason: None,
    }
}

/// Ends the session of [`DeterministicPlugin<I>`](crate::DeterministicPlugin) in `world` and
/// starts a new one with the same game and configuration: a new [`DeterministicSession`]
/// (input buffer, input path, counters; the same [verified-tick
/// hooks](crate::rules#verified-tick-hooks); a replay playback starts over), both simulation
/// worlds rebuilt from the game plugin
/// (startup schedules and tick 0 run again), [`SimulatorContext`], [`SessionStats`],
/// [`LocalInputs`], [`SessionEnd`] and [`SessionLifecycle`] reset; one [`SessionStateChanged`]
/// (reason `Restarted`) is written and the Bevy state set to the new one. The next session update
/// verifies from tick 1. Queue it from a system with
/// `commands.queue(|w: &mut World| { let _ = restart_session::<I>(w); })`.
///
/// A networked session starts `Connecting` again with a new handshake; the relay server must
/// run a new session for it (a started relay refuses a second hello).
///
/// # Errors
/// [`SessionError::WorldsNotBuilt`] when the plugin is not installed;
/// a configuration or world-building error as at build time. On error the old session is left
/// as it was.
pub fn restart_session<I: SimInput>(world: &mut World) -> Result<(), SessionError> {
    let Some(blueprint) = world.get_resource::<SessionBlueprint<I>>() else {
        return Err(SessionError::WorldsNotBuilt);
    };
    let config = SessionConfig::clone(&blueprint.config);
    let replay = blueprint.replay.clone();
    let mut session = DeterministicSession::<I>::new(config.clone(), replay.clone())?;
    let (worlds, error) = build_worlds(blueprint)?;
    if let Some(error) = error {
        return Err(error);
    }
    if let Some(feed) = replay {
        feed.restart();
    }
    if let Some(mut old) = world.get_resource_mut::<DeterministicSession<I>>() {
        // The hooks stay with the App's session (the game's keep what they gathered).
        session.hooks = std::mem::take(&mut old.hooks);
        session.dumps.config = old.dumps.config.clone();
    }
    world.insert_resource(session);
    world.insert_resource(worlds);
    world.insert_resource(SimulatorContext::default());
    world.insert_resource(SessionStats::default());
    world.insert_resource(LocalInputs::<I>::new(config.players));
    world.insert_resource(SessionEnd::default());
    let from = world
        .get_resource::<SessionLifecycle>()
        .map_or(SessionState::Connecting, |l| l.state);
    let mut lifecycle = initial_lifecycle(&config);
    lifecycle.reason = Some(SessionStateReason::Restarted);
    world.write_message(SessionStateChanged {
        from,
        to: lifecycle.state,
        reason: SessionStateReason::Restarted,
    });
    if let Some(mut next) = world.get_resource_mut::<NextState<SessionState>>() {
        next.set(lifecycle.state);
    }
    world.insert_resource(lifecycle);
    Ok(())
}
