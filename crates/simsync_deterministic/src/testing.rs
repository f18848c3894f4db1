//! Helpers for a game's own tests and CI: step an App until its session has verified a tick,
//! and get a typed error when it cannot ([running until a verified
//! tick](crate::rules#running-until-a-verified-tick)).
//!
//! ```no_run
//! # use bevy::prelude::*;
//! # use simsync_deterministic::prelude::*;
//! # use simsync_deterministic::testing::run_until_verified;
//! # #[derive(Clone)] struct MyGame;
//! # impl Plugin for MyGame { fn build(&self, _: &mut App) {} }
//! let mut app = App::new();
//! app.add_plugins(MinimalPlugins).add_plugins(
//!     DeterministicPlugin::<PackedInput>::new(MyGame)
//!         .edit_config(|c| {
//!             c.clock = SessionClock::Stepped { ticks_per_update: 1 };
//!             c.verify_predictions = true;
//!         }),
//! );
//! let reached = run_until_verified(&mut app, 600, 2_000).expect("deterministic to tick 600");
//! assert!(reached >= 600);
//! ```

use bevy::ecs::message::MessageCursor;
use bevy::prelude::*;
use thiserror::Error;

use crate::error::SessionError;
use crate::events::UnregisteredSimEvent;
use crate::plugin::SessionSetupError;
use crate::session::{
    PredictionMismatch, SessionLifecycle, SessionStalled, SessionState, SessionStats,
};
use crate::source::{DesyncDetected, StallReason};
use crate::tick::Tick;

/// How long [`run_until_verified_with`] may step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// App updates at most.
    pub max_updates: u32,
    /// Consecutive updates of a running session without a new verified tick before
    /// [`RunUntilError::NoProgress`] (updates while the session connects or waits for players
    /// are not counted).
    pub max_updates_without_progress: u32,
}

impl RunLimits {
    /// `max_updates` updates; no progress for all of them is [`RunUntilError::NoProgress`].
    pub fn new(max_updates: u32) -> Self {
        Self {
            max_updates,
            max_updates_without_progress: max_updates,
        }
    }

    /// The same limit with a shorter patience for a verified tick that stops moving.
    pub fn without_progress(mut self, updates: u32) -> Self {
        self.max_updates_without_progress = updates;
        self
    }
}

/// Why [`run_until_verified`] stopped before the verified tick reached its target.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RunUntilError {
    /// The App has no deterministic session: the plugin is missing or its configuration was
    /// refused (`setup_error`).
    #[error("no deterministic session in this app (setup error: {setup_error:?})")]
    NotInstalled {
        /// The [`SessionSetupError`], when there is one.
        setup_error: Option<SessionError>,
    },
    /// `max_updates` updates ran; the session was still verifying, too slowly.
    #[error("verified tick {verified_tick} of {target} after {updates} updates")]
    Timeout {
        /// The tick asked for.
        target: Tick,
        /// The verified tick reached.
        verified_tick: Tick,
        /// Updates run.
        updates: u32,
    },
    /// The verified tick did not move for `updates` consecutive updates of a running session.
    #[error("the verified tick stayed at {verified_tick} for {updates} updates")]
    NoProgress {
        /// Where it stopped.
        verified_tick: Tick,
        /// Updates without a new verified tick.
        updates: u32,
    },
    /// The session reported a stall ([`SessionStalled`]).
    #[error("the session stalled after tick {since_tick}: {reason:?}")]
    Stalled {
        /// The last verifiable tick before the stall.
        since_tick: Tick,
        /// Why.
        reason: StallReason,
    },
    /// The relay judged a tick's checksums and they disagree ([`DesyncDetected`], whoever it
    /// names).
    #[error("desync at tick {}: players {:?} differ", .0.tick, .0.players)]
    Desync(DesyncDetected),
    /// A predicted tick with the right inputs did not give the verified state
    /// ([`PredictionMismatch`], with `verify_predictions` on).
    #[error(
        "prediction check failed at tick {}: {} (hashes: predicted {:016x}, verified {:016x})",
        .0.tick, .0.cause, .0.predicted, .0.verified
    )]
    PredictionMismatch(PredictionMismatch),
    /// A simulation world emitted events of a type the main app did not register with
    /// [`add_sim_event`](crate::SimEventAppExt::add_sim_event); they were dropped
    /// ([`UnregisteredSimEvent`]).
    #[error(
        "simulation events of type {} were dropped ({} so far): register it with \
         app.add_sim_event::<{}>()",
        .0.type_name, .0.dropped, .0.type_name
    )]
    UnregisteredSimEvent(UnregisteredSimEvent),
    /// The session reached a state it cannot verify from: `Rejected` or `Disconnected`.
    #[error("the session is {state:?} at verified tick {verified_tick}")]
    SessionStopped {
        /// The state.
        state: SessionState,
        /// The verified tick then.
        verified_tick: Tick,
    },
}

/// Steps `app` (one `app.update()` at a time, at most `max_updates`) until its session's
/// verified tick reaches `tick`; returns the verified tick reached (≥ `tick`; an update may
/// verify several ticks). The App needs no `finish()`/`cleanup()` first.
///
/// # Errors
/// See [`run_until_verified_with`]; here a session that verifies nothing for all
/// `max_updates` updates is [`RunUntilError::NoProgress`].
pub fn run_until_verified(
    app: &mut App,
    tick: Tick,
    max_updates: u32,
) -> Result<Tick, RunUntilError> {
    run_until_verified_with(app, tick, RunLimits::new(max_updates))
}

/// [`run_until_verified`] with explicit [`RunLimits`].
///
/// # Errors
/// After each update, in this order:
/// - [`RunUntilError::PredictionMismatch`], [`RunUntilError::Desync`] or
///   [`RunUntilError::UnregisteredSimEvent`] as soon as the session writes one (correctness
///   first, even in the update that reaches the target);
/// - then `Ok` when the verified tick reached `tick`;
/// - [`RunUntilError::SessionStopped`] (rejected, disconnected), [`RunUntilError::Stalled`]
///   (a [`SessionStalled`] message);
/// - [`RunUntilError::NoProgress`] after `max_updates_without_progress` running updates without
///   a new verified tick, [`RunUntilError::Timeout`] after `max_updates`;
/// - [`RunUntilError::NotInstalled`] before any update when the App has no session.
pub fn run_until_verified_with(
    app: &mut App,
    tick: Tick,
    limits: RunLimits,
) -> Result<Tick, RunUntilError> {
    let mut watch = Watch::new(app.world())?;
    if watch.verified_tick(app.world()) >= tick {
        return Ok(watch.verified_tick(app.world()));
    }
    let mut last = watch.verified_tick(app.world());
    let mut idle = 0u32;
    for updates in 1..=limits.max_updates {
        app.update();
        let world = app.world();
        watch.check_messages(world)?;
        let verified = watch.verified_tick(world);
        if verified >= tick {
            return Ok(verified);
        }
        let state = world.get_resource::<SessionLifecycle>().map(|l| l.state);
        if let Some(state @ (SessionState::Rejected | SessionState::Disconnected)) = state {
            return Err(RunUntilError::SessionStopped {
                state,
                verified_tick: verified,
            });
        }
        let waiting = matches!(
            state,
            Some(SessionState::Connecting | SessionState::WaitingForPlayers)
        );
        if verified > last || waiting {
            last = verified;
            idle = 0;
        } else {
            idle += 1;
        }
        if idle >= limits.max_updates_without_progress {
            return Err(RunUntilError::NoProgress {
                verified_tick: verified,
                updates: idle,
            });
        }
        if updates == limits.max_updates {
            return Err(RunUntilError::Timeout {
                target: tick,
                verified_tick: verified,
                updates,
            });
        }
    }
    Err(RunUntilError::Timeout {
        target: tick,
        verified_tick: last,
        updates: 0,
    })
}

/// Cursors on the session's messages, from the moment the run starts.
struct Watch {
    mismatches: MessageCursor<PredictionMismatch>,
    desyncs: MessageCursor<DesyncDetected>,
    stalls: MessageCursor<SessionStalled>,
    events: MessageCursor<UnregisteredSimEvent>,
}

impl Watch {
    fn new(world: &World) -> Result<Self, RunUntilError> {
        if !world.contains_resource::<SessionStats>() {
            return Err(RunUntilError::NotInstalled {
                setup_error: world
                    .get_resource::<SessionSetupError>()
                    .map(|e| e.0.clone()),
            });
        }
        Ok(Self {
            mismatches: cursor(world),
            desyncs: cursor(world),
            stalls: cursor(world),
            events: cursor(world),
        })
    }

    fn verified_tick(&self, world: &World) -> Tick {
        world
            .get_resource::<SessionStats>()
            .map_or(0, |stats| stats.verified_tick)
    }

    fn check_messages(&mut self, world: &World) -> Result<(), RunUntilError> {
        if let Some(m) = read_first(&mut self.mismatches, world) {
            return Err(RunUntilError::PredictionMismatch(m));
        }
        if let Some(d) = read_first(&mut self.desyncs, world) {
            return Err(RunUntilError::Desync(d));
        }
        if let Some(e) = read_first(&mut self.events, world) {
            return Err(RunUntilError::UnregisteredSimEvent(e));
        }
        if let Some(s) = read_first(&mut self.stalls, world) {
            return Err(RunUntilError::Stalled {
                since_tick: s.since_tick,
                reason: s.reason,
            });
        }
        Ok(())
    }
}

/// A cursor past the messages already written (none when the message type is not added).
fn cursor<M: Message>(world: &World) -> MessageCursor<M> {
    world
        .get_resource::<Messages<M>>()
        .map(Messages::get_cursor_current)
        .unwrap_or_default()
}

fn read_first<M: Message + Clone>(cursor: &mut MessageCursor<M>, world: &World) -> Option<M> {
    let messages = world.get_resource::<Messages<M>>()?;
    let first = cursor.read(messages).next().cloned();
    // Read the rest too, so one problem is reported once.
    cursor.clear(messages);
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::MismatchCause;

    fn mismatch(cause: MismatchCause) -> String {
        RunUntilError::PredictionMismatch(PredictionMismatch {
            tick: 12,
            predicted: 0xab,
            verified: 0xab,
            cause,
        })
        .to_string()
    }

    #[test]
    fn a_prediction_mismatch_names_its_cause() {
        let uncovered = mismatch(MismatchCause::UncoveredState);
        assert!(
            uncovered.starts_with("prediction check failed at tick 12: "),
            "{uncovered}"
        );
        assert!(uncovered.contains("without SimEntity"), "{uncovered}");
        assert!(uncovered.contains("UnregisteredComponent"), "{uncovered}");
        let differs = mismatch(MismatchCause::StateDiffers);
        assert!(differs.contains("not deterministic"), "{differs}");
        assert!(
            differs.contains("predicted 00000000000000ab, verified 00000000000000ab"),
            "{differs}"
        );
    }
}
