//! Messages about state a rollback would not restore or a prediction check could not compare
//! ([no silent divergence](crate::rules#no-silent-divergence)).

use bevy::prelude::*;

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
