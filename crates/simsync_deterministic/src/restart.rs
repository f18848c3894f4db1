//! Ending a session and starting a new one in the same App: [`restart_session`] rebuilds the
//! session, its input path and both simulation worlds from what the plugin was given
//! ([session lifecycle](crate::rules#session-lifecycle)); a networked session rebuilds itself
//! the same way when the relay opens its next match, keeping its connection
//! ([what survives a rematch](crate::rules#what-survives-a-rematch)).

use bevy::prelude::*;
use bevy_state::state::NextState;

use crate::config::SessionConfig;
use crate::context::SimulatorContext;
use crate::error::SessionError;
use crate::input::SimInput;
use crate::replay::ReplayRecorder;
use crate::session::{
    DeterministicSession, SessionEnd, SessionLifecycle, SessionState, SessionStateChanged,
    SessionStateReason,
};
use crate::source::{LocalInputs, NextMatch};
use crate::stats::SessionStats;
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
/// [`LocalInputs`], [`SessionEnd`] and [`SessionLifecycle`] reset; a [`ReplayRecorder`] still
/// recording is finished (its file is a complete replay of the ended session); one
/// [`SessionStateChanged`] (reason `Restarted`) is written and the Bevy state set to the new
/// one. The next session update verifies from tick 1. Queue it from a system with
/// `commands.queue(|w: &mut World| { let _ = restart_session::<I>(w); })`.
///
/// A networked session starts `Connecting` again with a new handshake, which a relay refuses on
/// the connection that joined already: a networked match is played again by the relay's
/// rematch (`simsync_relay::RelayCommand`), which its clients follow by themselves, keeping
/// their connections ([what survives a rematch](crate::rules#what-survives-a-rematch)).
///
/// # Errors
/// [`SessionError::WorldsNotBuilt`] when the plugin is not installed;
/// a configuration or world-building error as at build time. On error the old session is left
/// as it was.
pub fn restart_session<I: SimInput>(world: &mut World) -> Result<(), SessionError> {
    let Some(blueprint) = world.get_resource::<SessionBlueprint<I>>() else {
        return Err(SessionError::WorldsNotBuilt);
    };
    let mut lifecycle = initial_lifecycle(&blueprint.config);
    lifecycle.reason = Some(SessionStateReason::Restarted);
    rebuild_session::<I>(world, None, lifecycle)
}

/// Rebuilds the networked session of `world` for the relay's next match once the relay moved
/// on (a rematch): as [`restart_session`], but the new session takes over the old one's
/// connection (slot, reconnect token, round-trip estimate) and starts `WaitingForPlayers` —
/// or `Running` when the relay's match runs already — with the reason `NextMatch`. Runs in the
/// session's frame, after the lifecycle update; nothing happens while the relay did not move
/// on, nor while a change of the lifecycle waits to reach the Bevy state (so `Ended` is
/// entered, `OnEnter` included, before the rebuild, one frame later).
pub(crate) fn follow_next_match<I: SimInput>(world: &mut World) {
    let Some(next) = world
        .get_resource::<DeterministicSession<I>>()
        .and_then(DeterministicSession::next_match)
    else {
        return;
    };
    if matches!(
        world.get_resource::<NextState<SessionState>>(),
        Some(NextState::Pending(_) | NextState::PendingIfDifferent(_))
    ) {
        // The Bevy state has not shown this frame's change yet (the `Ended` of a match that
        // ended in the same update as the next one opened): it does first — its `OnEnter`
        // systems run — and the session is rebuilt at the next frame.
        return;
    }
    let state = if next.running {
        SessionState::Running
    } else {
        SessionState::WaitingForPlayers
    };
    let lifecycle = SessionLifecycle {
        state,
        reason: Some(SessionStateReason::NextMatch {
            match_id: next.match_id,
        }),
    };
    match rebuild_session::<I>(world, Some(next), lifecycle) {
        Ok(()) => info!("session: rebuilt for {}", next.match_id),
        Err(error) => error_once!("session: not rebuilt for {}: {error}", next.match_id),
    }
}

/// Builds a new session and worlds from the blueprint and puts them in place of the old ones
/// (see [`restart_session`]); with `follow`, the new session takes over the old one's
/// connection for that match. The lifecycle becomes `lifecycle`, written as one
/// [`SessionStateChanged`] from the old state.
fn rebuild_session<I: SimInput>(
    world: &mut World,
    follow: Option<NextMatch>,
    lifecycle: SessionLifecycle,
) -> Result<(), SessionError> {
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
        session.hooks.restarted();
        if let Some(next) = follow {
            session.take_connection(&mut old, next);
        }
    }
    if let Some(mut recorder) = world.get_resource_mut::<ReplayRecorder>()
        && recorder.is_recording()
        && let Err(error) = recorder.finish()
    {
        warn!("session: the replay recording was not finished: {error}");
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
    if let Some(reason) = lifecycle.reason.clone() {
        world.write_message(SessionStateChanged {
            from,
            to: lifecycle.state,
            reason,
        });
    }
    if let Some(mut next) = world.get_resource_mut::<NextState<SessionState>>() {
        next.set(lifecycle.state);
    }
    world.insert_resource(lifecycle);
    Ok(())
}
