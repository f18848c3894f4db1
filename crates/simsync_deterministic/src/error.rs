//! Errors of the deterministic session.

use bevy::ecs::entity::Entity;
use thiserror::Error;

use crate::input::InputError;

/// What went wrong in the deterministic session or its configuration.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SessionError {
    /// A type was registered for rollback after the session had started.
    #[error("cannot register `{type_name}` for rollback: the session has already started")]
    SessionStarted {
        /// The type's name.
        type_name: &'static str,
    },
    /// A player index outside `0..players`.
    #[error("unknown player index {player}: the session has {players} players")]
    UnknownPlayer {
        /// The index given.
        player: u8,
        /// Players in the session.
        players: u8,
    },
    /// A configuration value out of its range.
    #[error("invalid configuration `{field}` = {value}: {reason}")]
    InvalidConfig {
        /// The field.
        field: &'static str,
        /// The value given, as text.
        value: String,
        /// What the value must be.
        reason: &'static str,
    },
    /// The tick rate was rejected.
    #[error(transparent)]
    TickRate(#[from] simsync_time::TimeError),
    /// Used outside a simulation world (no `SimTick` / `ReservedSlots` resource).
    #[error(
        "not a simulation world: simulation entities exist only in the verified and predicted worlds"
    )]
    NotASimulationWorld,
    /// Every reserved simulation entity slot is live or waiting out its reuse delay.
    #[error("all {capacity} simulation entity slots are in use (raise max_simulation_entities)")]
    SimulationEntitiesExhausted {
        /// Number of slots.
        capacity: u32,
    },
    /// The entity is not a live simulation entity.
    #[error("{entity} is not a live simulation entity")]
    NotASimulationEntity {
        /// The entity given.
        entity: Entity,
    },
    /// A slot's generation is ahead of the id being restored (the reuse delay prevents this).
    #[error("the slot of {entity} has a newer generation in this world; cannot restore it")]
    GenerationAhead {
        /// The entity that could not be restored.
        entity: Entity,
    },
    /// Bevy's allocator did not give a contiguous range of fresh indices.
    #[error("could not reserve a contiguous range of fresh entity indices")]
    ReservedRangeNotContiguous,
    /// There are no simulation worlds: no [`DeterministicPlugin`](crate::DeterministicPlugin)
    /// of this input type is installed (or its configuration was refused, see
    /// [`SessionSetupError`](crate::SessionSetupError)). The worlds of an installed plugin are
    /// built by `App::cleanup` or, without it, by the first session update.
    #[error(
        "the simulation worlds are not built: no DeterministicPlugin of this input type is installed"
    )]
    WorldsNotBuilt,
    /// The Rapier context entity has different ids in the two worlds.
    #[error("the Rapier context entity differs between worlds ({verified} vs {predicted})")]
    ContextEntityMismatch {
        /// Id in the verified world.
        verified: Entity,
        /// Id in the predicted world.
        predicted: Entity,
    },
    /// An input was rejected.
    #[error(transparent)]
    Input(#[from] InputError),
}
