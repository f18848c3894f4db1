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

use crate::divergence::{
    MismatchCause, PredictionMismatch, UnregisteredComponent, UnsimulatedEntity,
};
use crate::session::{SessionLifecycle, SessionState, SessionStateReason};
use crate::source::{DesyncDetected, StallReason};
use crate::stats::{SessionStalled, SessionStats};
use crate::tick::Tick;
use crate::warning::SessionSetupError;

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

/// Why [`run_until_verified`] stopped before the verified tick reached its target. Every
/// variant's text (its `Display`) names the cause and, where there is one, the fix.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RunUntilError {
    /// The App has no deterministic session: the plugin is missing or its configuration was
    /// refused (`setup_error`).
    #[error("no deterministic session in this app: {}", match .setup_error {
        Some(error) => format!("its setup failed: {error}"),
        None => "add a DeterministicPlugin first".to_string(),
    })]
    NotInstalled {
        /// The [`SessionSetupError`], when there is one.
        setup_error: Option<SessionError>,
    },
    /// The App has a session, but its setup reported an error ([`SessionSetupError`]): the
    /// plugin was added twice, or the simulation worlds could not be built as configured.
    #[error("the session's setup failed: {0}")]
    SetupFailed(SessionError),
    /// `max_updates` updates ran; the session was still verifying, too slowly.
    #[error(
        "verified tick {verified_tick} of {target} after {updates} updates: the session verifies \
         more slowly than that (allow more updates, or more ticks per update with a stepped clock)"
    )]
    Timeout {
        /// The tick asked for.
        target: Tick,
        /// The verified tick reached.
        verified_tick: Tick,
        /// Updates run.
        updates: u32,
    },
    /// The verified tick did not move for `updates` consecutive updates of a running session.
    #[error(
        "the verified tick stayed at {verified_tick} for {updates} updates of a running session: \
         no confirmed inputs arrive (a peer or relay not stepped, a hook stopping verification, \
         or a real-time clock whose time does not advance: use SessionClock::Stepped)"
    )]
    NoProgress {
        /// Where it stopped.
        verified_tick: Tick,
        /// Updates without a new verified tick.
        updates: u32,
    },
    /// The session reported a stall ([`SessionStalled`]).
    #[error("the session stalled after tick {since_tick}: {reason}")]
    Stalled {
        /// The last verifiable tick before the stall.
        since_tick: Tick,
        /// Why.
        reason: StallReason,
    },
    /// The relay judged a tick's checksums and named this client's player desynced
    /// ([`DesyncDetected`]; a report naming only other players is theirs to stop on).
    #[error(
        "desync at tick {}: judged by {}, the relay named this client desynced (players {:?}; \
         the simulation is not deterministic across peers)",
        .0.tick, .0.judge, .0.players
    )]
    Desync(DesyncDetected),
    /// A predicted tick with the right inputs did not give the verified state
    /// ([`PredictionMismatch`], with `verify_predictions` on): its text names the cause, the
    /// first differing entity and component when known, and the hashes.
    #[error("{0}")]
    PredictionMismatch(PredictionMismatch),
    /// A component on a simulation entity is not registered for rollback
    /// ([`UnregisteredComponent`]): a rollback does not restore its value.
    #[error(
        "component `{}` on a simulation entity is not registered for rollback, so a rollback \
         does not restore it: register it with rollback_component (or ignore_rollback_component \
         if it never affects the simulation)",
        .0.type_name
    )]
    UnregisteredComponent(UnregisteredComponent),
    /// Entities without [`SimEntity`](crate::SimEntity) are in a simulation world
    /// ([`UnsimulatedEntity`]): a rollback neither restores nor removes them.
    #[error(
        "{} entities without SimEntity in the {:?} world at tick {} (e.g. {}: {}), which a \
         rollback neither restores nor removes: spawn simulation entities with SimCommands, or \
         mark them NotSimulated",
        .0.entities, .0.world, .0.tick, .0.entity, .0.components.join(", ")
    )]
    UnsimulatedEntity(UnsimulatedEntity),
    /// A simulation world emitted events of a type the main app did not register with
    /// [`add_sim_event`](crate::SimEventAppExt::add_sim_event); they were dropped
    /// ([`UnregisteredSimEvent`]).
    #[error(
        "simulation events of type {} were dropped ({} so far): register it with \
         app.add_sim_event::<{}>()",
        .0.type_name, .0.dropped, .0.type_name
    )]
    UnregisteredSimEvent(UnregisteredSimEvent),
    /// The session reached a state it cannot verify from: `Rejected` or `Disconnected`
    /// (`reason`: why, as the [`SessionLifecycle`] says).
    #[error("the session is {state:?} at verified tick {verified_tick}{}", match .reason {
        Some(reason) => format!(" ({reason:?})"),
        None => String::new(),
    })]
    SessionStopped {
        /// The state.
        state: SessionState,
        /// The verified tick then.
        verified_tick: Tick,
        /// Why the session entered the state.
        reason: Option<SessionStateReason>,
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
/// Before any update: [`RunUntilError::NotInstalled`] when the App has no session,
/// [`RunUntilError::SetupFailed`] when its setup reported an error. After each update, in this
/// order:
/// - [`RunUntilError::SetupFailed`] (the first update may build the worlds);
///   [`RunUntilError::PredictionMismatch`] for a state that differs, [`RunUntilError::Desync`],
///   [`RunUntilError::UnregisteredComponent`], [`RunUntilError::UnsimulatedEntity`],
///   [`RunUntilError::PredictionMismatch`] for uncovered state (the two before name what it
///   is) and [`RunUntilError::UnregisteredSimEvent`], as soon as the session writes one
///   (correctness first, even in the update that reaches the target);
/// - then `Ok` when the verified tick reached `tick`;
/// - [`RunUntilError::SessionStopped`] (rejected, disconnected), [`RunUntilError::Stalled`]
///   (a [`SessionStalled`] message);
/// - [`RunUntilError::NoProgress`] after `max_updates_without_progress` running updates without
///   a new verified tick, [`RunUntilError::Timeout`] after `max_updates`.
pub fn run_until_verified_with(
    app: &mut App,
    tick: Tick,
    limits: RunLimits,
) -> Result<Tick, RunUntilError> {
    let mut watch = SessionWatch::new(app.world())?;
    if watch.verified_tick(app.world()) >= tick {
        return Ok(watch.verified_tick(app.world()));
    }
    let mut last = watch.verified_tick(app.world());
    let mut idle = 0u32;
    for updates in 1..=limits.max_updates {
        app.update();
        let world = app.world();
        watch.check_correctness(world)?;
        let verified = watch.verified_tick(world);
        if verified >= tick {
            return Ok(verified);
        }
        let waiting = watch.check_running(world, verified)?;
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

/// What [`run_until_verified`] checks after each update, for harnesses that step several Apps
/// themselves (the facade crate's peer harness): cursors on the session's problem messages from
/// the moment the watch is made, and its lifecycle state.
pub struct SessionWatch {
    mismatches: MessageCursor<PredictionMismatch>,
    desyncs: MessageCursor<DesyncDetected>,
    stalls: MessageCursor<SessionStalled>,
    events: MessageCursor<UnregisteredSimEvent>,
    components: MessageCursor<UnregisteredComponent>,
    unsimulated: MessageCursor<UnsimulatedEntity>,
}

impl SessionWatch {
    /// A watch on the session of `world` (an App's main world), reading only messages written
    /// from now on.
    ///
    /// # Errors
    /// [`RunUntilError::NotInstalled`] when the world has no deterministic session,
    /// [`RunUntilError::SetupFailed`] when its setup reported an error.
    pub fn new(world: &World) -> Result<Self, RunUntilError> {
        let setup_error = world
            .get_resource::<SessionSetupError>()
            .map(|e| e.0.clone());
        if !world.contains_resource::<SessionStats>() {
            return Err(RunUntilError::NotInstalled { setup_error });
        }
        if let Some(error) = setup_error {
            return Err(RunUntilError::SetupFailed(error));
        }
        Ok(Self {
            mismatches: cursor(world),
            desyncs: cursor(world),
            stalls: cursor(world),
            events: cursor(world),
            components: cursor(world),
            unsimulated: cursor(world),
        })
    }

    /// The session's verified tick (0 without a session).
    pub fn verified_tick(&self, world: &World) -> Tick {
        world
            .get_resource::<SessionStats>()
            .map_or(0, |stats| stats.verified_tick)
    }

    /// After an update: the first problem [`run_until_verified_with`] stops on — a setup
    /// error, a message (in the order [`run_until_verified_with`] lists them, a stall last) or a
    /// lifecycle state it cannot verify from (`Rejected`, `Disconnected`).
    ///
    /// # Errors
    /// That problem as a [`RunUntilError`].
    pub fn check(&mut self, world: &World) -> Result<(), RunUntilError> {
        self.check_correctness(world)?;
        self.check_running(world, self.verified_tick(world))
            .map(|_| ())
    }

    /// The first problem with the simulation's correctness the session reported since the last
    /// call, most specific first (see [`run_until_verified_with`]).
    fn check_correctness(&mut self, world: &World) -> Result<(), RunUntilError> {
        if let Some(error) = world.get_resource::<SessionSetupError>() {
            return Err(RunUntilError::SetupFailed(error.0.clone()));
        }
        let mismatch = read_first(&mut self.mismatches, world);
        if let Some(m) = mismatch.filter(|m| m.cause == MismatchCause::StateDiffers) {
            return Err(RunUntilError::PredictionMismatch(m));
        }
        if let Some(d) = read_first(&mut self.desyncs, world) {
            return Err(RunUntilError::Desync(d));
        }
        if let Some(c) = read_first(&mut self.components, world) {
            return Err(RunUntilError::UnregisteredComponent(c));
        }
        if let Some(u) = read_first(&mut self.unsimulated, world) {
            return Err(RunUntilError::UnsimulatedEntity(u));
        }
        if let Some(m) = mismatch {
            return Err(RunUntilError::PredictionMismatch(m));
        }
        if let Some(e) = read_first(&mut self.events, world) {
            return Err(RunUntilError::UnregisteredSimEvent(e));
        }
        Ok(())
    }

    /// A session that stopped or stalled is an error; returns whether it is still connecting
    /// or waiting for players (those updates do not count as updates without progress).
    fn check_running(&mut self, world: &World, verified: Tick) -> Result<bool, RunUntilError> {
        let lifecycle = world.get_resource::<SessionLifecycle>();
        let state = lifecycle.map(|l| l.state);
        if let Some(state @ (SessionState::Rejected | SessionState::Disconnected)) = state {
            return Err(RunUntilError::SessionStopped {
                state,
                verified_tick: verified,
                reason: lifecycle.and_then(|l| l.reason.clone()),
            });
        }
        if let Some(s) = read_first(&mut self.stalls, world) {
            return Err(RunUntilError::Stalled {
                since_tick: s.since_tick,
                reason: s.reason,
            });
        }
        Ok(matches!(
            state,
            Some(SessionState::Connecting | SessionState::WaitingForPlayers)
        ))
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

    fn mismatch(cause: MismatchCause) -> String {
        RunUntilError::PredictionMismatch(PredictionMismatch {
            tick: 12,
            predicted: 0xab,
            verified: 0xab,
            cause,
            first_difference: None,
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

    #[test]
    fn a_mismatch_with_a_known_difference_names_the_component_and_entity() {
        let text = RunUntilError::PredictionMismatch(PredictionMismatch {
            tick: 15,
            predicted: 1,
            verified: 2,
            cause: MismatchCause::StateDiffers,
            first_difference: Some(crate::StateDifference::Component {
                type_name: "game::Score",
                slot: 4,
                generation: 2,
            }),
        })
        .to_string();
        assert!(
            text.contains(
                "; first difference: component `game::Score` differs on simulation entity slot 4 \
                 (generation 2) (hashes: predicted 0000000000000001, verified 0000000000000002)"
            ),
            "{text}"
        );
    }

    #[test]
    fn every_run_error_names_its_cause() {
        let cases: Vec<(RunUntilError, &[&str])> = vec![
            (
                RunUntilError::NotInstalled { setup_error: None },
                &["no deterministic session", "add a DeterministicPlugin"],
            ),
            (
                RunUntilError::NotInstalled {
                    setup_error: Some(SessionError::WorldsNotBuilt),
                },
                &["its setup failed: the simulation worlds are not built"],
            ),
            (
                RunUntilError::SetupFailed(SessionError::PluginInGame { plugin: "Rapier" }),
                &["setup failed", "remove it from the game plugin"],
            ),
            (
                RunUntilError::Timeout {
                    target: 90,
                    verified_tick: 40,
                    updates: 50,
                },
                &[
                    "verified tick 40 of 90 after 50 updates",
                    "allow more updates",
                ],
            ),
            (
                RunUntilError::NoProgress {
                    verified_tick: 7,
                    updates: 30,
                },
                &["stayed at 7 for 30 updates", "SessionClock::Stepped"],
            ),
            (
                RunUntilError::Stalled {
                    since_tick: 9,
                    reason: StallReason::NoConfirmedInputs,
                },
                &["stalled after tick 9", "did not arrive"],
            ),
            (
                RunUntilError::Stalled {
                    since_tick: 9,
                    reason: StallReason::NeedsSnapshot {
                        oldest_available: 3,
                    },
                },
                &["history starts at tick 3", "needs a snapshot"],
            ),
            (
                RunUntilError::UnregisteredComponent(UnregisteredComponent {
                    type_name: "game::Hp".into(),
                }),
                &[
                    "`game::Hp`",
                    "rollback_component",
                    "ignore_rollback_component",
                ],
            ),
            (
                RunUntilError::SessionStopped {
                    state: SessionState::Disconnected,
                    verified_tick: 5,
                    reason: Some(SessionStateReason::ReconnectFailed { attempts: 3 }),
                },
                &[
                    "Disconnected at verified tick 5",
                    "ReconnectFailed { attempts: 3 }",
                ],
            ),
        ];
        for (error, phrases) in cases {
            let text = error.to_string();
            for phrase in phrases {
                assert!(text.contains(phrase), "{phrase:?} not in {text:?}");
            }
        }
    }
}
