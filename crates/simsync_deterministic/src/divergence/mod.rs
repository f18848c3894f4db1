//! Divergence: what the session reports about state a rollback would not restore, a prediction
//! that did not reproduce the verified state, or state a check could not compare ([no silent
//! divergence](crate::rules#no-silent-divergence)).
//!
//! - This module: the messages ([`UnsimulatedEntity`], [`UnregisteredComponent`],
//!   [`UncheckedState`], [`RollbackSetupFailed`], [`PredictionMismatch`] with its
//!   [`MismatchCause`]).
//! - [`coverage`]: the scans for state a rollback would not restore, and their reports.
//! - [`difference`]: per-component breakdowns of a world's state and the first
//!   [`StateDifference`] between two of them.

pub(crate) mod coverage;
pub(crate) mod difference;

use bevy::prelude::*;

pub use difference::StateDifference;

use crate::error::SessionError;
use crate::snapshot::WorldRole;
use crate::tick::Tick;

/// Entities without [`SimEntity`](crate::SimEntity) were found in a simulation world (spawned
/// with a plain `commands.spawn` instead of [`SimCommands`](crate::SimCommands)): a rollback
/// neither restores nor removes them and checksums do not see them, so the predicted world can
/// drift from the verified one. Written once per component set per world; while such entities
/// exist, every prediction check fails with [`MismatchCause::UncoveredState`]. Mark entities that
/// belong there on purpose with [`NotSimulated`](crate::NotSimulated).
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct UnsimulatedEntity {
    /// The world they were found in.
    pub world: WorldRole,
    /// That world's tick when they were found.
    pub tick: Tick,
    /// One of them.
    pub entity: Entity,
    /// How many entities with the same components the world held then.
    pub entities: u32,
    /// Their components' type names.
    pub components: Vec<String>,
}

/// A registered type that the full prediction check
/// ([`PredictionCheck::AllRegisteredState`](crate::PredictionCheck)) cannot compare: it has no
/// [`SimHash`](crate::SimHash) and is not reflected in the simulation world (derive `Reflect`
/// with `#[reflect(Component)]` or `#[reflect(Resource)]` and call `app.register_type` in the
/// game plugin, or register it hashed). Written once per type; the check compares everything
/// else.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct UncheckedState {
    /// The type's name.
    pub type_name: String,
}

/// A registration through [`RollbackAppExt`](crate::RollbackAppExt) failed (those methods
/// return no `Result`; the `try_` methods of [`TryRollbackAppExt`](crate::TryRollbackAppExt)
/// do). Written when the session starts, once per error, in registration order.
#[derive(Message, Debug, Clone, PartialEq)]
pub struct RollbackSetupFailed {
    /// The error.
    pub error: SessionError,
}

/// Why a prediction check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Reflect)]
pub enum MismatchCause {
    /// The predicted state differs from the verified state of the same tick although the inputs
    /// were the same: the simulation is not deterministic, or reads state that is not rolled
    /// back.
    #[default]
    StateDiffers,
    /// One of the worlds held state a rollback does not restore (an entity without `SimEntity`,
    /// or a component neither registered nor ignored), so the check cannot vouch for the tick
    /// whatever the hashes say.
    UncoveredState,
}

impl core::fmt::Display for MismatchCause {
    /// Why, in words a test failure can show: what differs and where to look.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            MismatchCause::StateDiffers => {
                "the predicted state differs from the verified state of the same tick with the \
                 same inputs: the simulation is not deterministic or reads state that is not \
                 rolled back"
            }
            MismatchCause::UncoveredState => {
                "a world holds state a rollback does not restore (an entity without SimEntity, \
                 or a component neither registered nor ignored; see the UnsimulatedEntity and \
                 UnregisteredComponent messages), so the tick cannot be vouched for whatever \
                 the hashes say"
            }
        })
    }
}

/// A simulation entity carries a component type that rollback does not restore: register it
/// (`rollback_component`) or declare it ignored (`ignore_rollback_component`). Sent once per type.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct UnregisteredComponent {
    /// The component's type name.
    pub type_name: String,
}

/// A predicted tick whose inputs turned out right did not produce the verified state, or could
/// not be vouched for (debug aid: `verify_predictions`). This means the simulation is not
/// deterministic or some state is not registered; `cause` says which the check saw, and
/// `first_difference` where the states differ.
///
/// Its `Display` is one line for a test failure or a log: the tick, the cause, the first
/// difference when known and the two hashes.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PredictionMismatch {
    /// The tick.
    pub tick: Tick,
    /// Hash of the predicted state (checksum or full digest, per
    /// [`PredictionCheck`](crate::PredictionCheck)).
    pub predicted: u64,
    /// Hash of the verified state.
    pub verified: u64,
    /// Why the check failed.
    pub cause: MismatchCause,
    /// Where the predicted and the verified state first differ: the first simulation entity
    /// (slot and generation) and component type, or resource, whose values differ. `None` when
    /// the hashes are equal (an [`MismatchCause::UncoveredState`] failure) or the difference
    /// lies outside what the per-entity and per-type hashes see.
    pub first_difference: Option<StateDifference>,
}

impl core::fmt::Display for PredictionMismatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "prediction check failed at tick {}: {}",
            self.tick, self.cause
        )?;
        if let Some(difference) = &self.first_difference {
            write!(f, "; first difference: {difference}")?;
        }
        write!(
            f,
            " (hashes: predicted {:016x}, verified {:016x})",
            self.predicted, self.verified
        )
    }
}
