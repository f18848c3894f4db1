//! [`SessionWarning`]: the warnings a game must react to, as a message, so they are seen
//! without a `LogPlugin`; [`SessionSetupError`]: why the session could not be set up.

use bevy::prelude::*;

use crate::error::SessionError;
use crate::input::InputError;
use crate::tick::{PlayerIndex, Tick};

/// Why the App's session could not be set up (main-app resource): inserted instead of the
/// session when the plugin's configuration is invalid, or beside it when the plugin was added
/// twice or its simulation worlds could not be built. The first error is kept; each is also
/// written as a [`SessionWarning::Setup`] message.
#[derive(Resource, Debug, Clone, PartialEq)]
pub struct SessionSetupError(pub SessionError);

/// A warning the session logs that the game must react to, also written as a message (main
/// app), so a game or a test sees it without a `LogPlugin`. Each is logged with the same text
/// (its `Display`, which names the fix).
///
/// The warnings with a message of their own are not repeated here: state a rollback does not
/// restore ([`UnregisteredComponent`](crate::UnregisteredComponent),
/// [`UnsimulatedEntity`](crate::UnsimulatedEntity)), state the full prediction check cannot
/// compare ([`UncheckedState`](crate::UncheckedState)), simulation events of an unregistered
/// type ([`UnregisteredSimEvent`](crate::UnregisteredSimEvent)), the determinism guard's
/// findings ([`DeterminismWarning`](crate::DeterminismWarning)), a stopped verification
/// ([`VerificationStopped`](crate::VerificationStopped)), stalls
/// ([`SessionStalled`](crate::SessionStalled)), confirmed inputs that do not decode
/// ([`InputSubstituted`](crate::InputSubstituted)), refused snapshots
/// ([`SnapshotRejected`](crate::SnapshotRejected)), a failed replay recording
/// ([`ReplayWriteFailed`](crate::ReplayWriteFailed)) and a lost connection
/// ([`SessionStateChanged`](crate::SessionStateChanged)). The session's other log lines are
/// about its own bookkeeping or transient network trouble counted in
/// [`RelayClientStats`](crate::RelayClientStats), not something the game must fix.
///
/// ```
/// # use bevy::prelude::*;
/// # use simsync_deterministic::prelude::*;
/// fn show_warnings(mut warnings: MessageReader<SessionWarning>) {
///     for warning in warnings.read() {
///         eprintln!("simsync: {warning}");
///     }
/// }
/// # App::new().add_systems(Update, show_warnings);
/// ```
#[derive(Message, Debug, Clone, PartialEq)]
pub enum SessionWarning {
    /// The session's setup failed: the error is also kept as the [`SessionSetupError`]
    /// resource (written when the plugin is
    /// built, or at the first update that builds the worlds).
    Setup(SessionError),
    /// The session update found no simulation worlds (written once): their setup failed, see
    /// [`SessionSetupError`].
    WorldsNotBuilt,
    /// [`SimCommands::despawn`](crate::SimCommands::despawn) of an entity that is not a live
    /// simulation entity was ignored (reported from the verified world, once per verified tick
    /// it happens in).
    DespawnIgnored {
        /// The entity given.
        entity: Entity,
        /// The verified tick whose simulation asked for it.
        tick: Tick,
        /// Why it was ignored.
        error: SessionError,
    },
    /// A local player's input of a local session was refused: by the input buffer
    /// (prediction) or by the local relay (it will not be confirmed).
    LocalInputRejected {
        /// The player.
        player: PlayerIndex,
        /// The tick the input was for.
        tick: Tick,
        /// Why.
        error: InputError,
    },
    /// [`SimEvents`](crate::SimEvents) written outside a simulation world were dropped
    /// (written the first time; [`SimEventStats::outside_tick`](crate::SimEventStats) counts
    /// them all).
    SimEventsOutsideSimulation {
        /// The event type.
        type_name: &'static str,
        /// Events dropped that time.
        dropped: u64,
    },
    /// A networked client could not serve the snapshot the relay asked for (late join).
    SnapshotNotServed {
        /// Why, as text.
        reason: String,
    },
    /// A networked client could not start a reconnect attempt (the attempt counts as failed).
    ReconnectNotStarted {
        /// Why, as text.
        reason: String,
    },
}

impl core::fmt::Display for SessionWarning {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Setup(error) => write!(f, "the deterministic session's setup failed: {error}"),
            Self::WorldsNotBuilt => write!(f, "{}", SessionError::WorldsNotBuilt),
            Self::DespawnIgnored {
                entity,
                tick,
                error,
            } => write!(
                f,
                "despawn of {entity} at tick {tick} ignored: {error} (despawn only entities \
                 spawned with SimCommands, once)"
            ),
            Self::LocalInputRejected {
                player,
                tick,
                error,
            } => write!(
                f,
                "local input of player {player} for tick {tick} refused: {error} (raise \
                 input_capacity for long stalls or latencies)"
            ),
            Self::SimEventsOutsideSimulation { type_name, dropped } => write!(
                f,
                "{dropped} SimEvents<{type_name}> written outside a simulation world were \
                 dropped: write simulation events from SimulationTick systems"
            ),
            Self::SnapshotNotServed { reason } => {
                write!(
                    f,
                    "the snapshot the relay asked for was not served: {reason}"
                )
            }
            Self::ReconnectNotStarted { reason } => {
                write!(f, "a reconnect attempt did not start: {reason}")
            }
        }
    }
}

/// Logs `warning` and writes it as a message when the world has the message type (the main
/// app of a session).
pub(crate) fn report(world: &mut World, warning: SessionWarning) {
    warn!("{warning}");
    if world.contains_resource::<Messages<SessionWarning>>() {
        world.write_message(warning);
    }
}

/// The session's setup failed with `error`: logged, kept as the [`SessionSetupError`]
/// resource (the first error stays) and
/// written as [`SessionWarning::Setup`].
pub(crate) fn setup_failed(world: &mut World, error: SessionError) {
    error!("DeterministicPlugin: {error}");
    if !world.contains_resource::<SessionSetupError>() {
        world.insert_resource(SessionSetupError(error.clone()));
    }
    if world.contains_resource::<Messages<SessionWarning>>() {
        world.write_message(SessionWarning::Setup(error));
    }
}

/// Warnings found inside the verified simulation world, moved to the main app after each
/// session update (a simulation-world resource, never rolled back).
#[derive(Resource, Default)]
pub(crate) struct PendingWarnings(pub Vec<SessionWarning>);

/// Moves the warnings the verified world found into the main app (logged when found).
pub(crate) fn forward_pending(main: &mut World, verified: &mut World) {
    let Some(mut pending) = verified.get_resource_mut::<PendingWarnings>() else {
        return;
    };
    let warnings = std::mem::take(&mut pending.0);
    if main.contains_resource::<Messages<SessionWarning>>() {
        main.write_message_batch(warnings);
    }
}
