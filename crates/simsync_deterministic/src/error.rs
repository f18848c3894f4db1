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
    /// An immutable component (or resource) was registered for rollback: a rollback writes
    /// values in place, which Bevy forbids for immutable components
    /// ([hierarchy and relationships](crate::rules#hierarchy-and-relationships)).
    #[error(
        "cannot roll back `{type_name}`: it is immutable, and a rollback writes values in place \
         (a relationship is registered with try_rollback_relationship)"
    )]
    ImmutableComponent {
        /// The type's name.
        type_name: &'static str,
    },
    /// One side of a Bevy relationship (a `Relationship` such as `ChildOf`, or a
    /// `RelationshipTarget` such as `Children`) was registered as a plain component or resource:
    /// copying it would bypass the hooks that keep both sides consistent.
    #[error(
        "cannot roll back `{type_name}` as a plain component: it is one side of a relationship \
         (ChildOf/Children are rolled back built in; register others with try_rollback_relationship)"
    )]
    RelationshipAsComponent {
        /// The type's name.
        type_name: &'static str,
    },
    /// A relationship that a rollback cannot restore exactly
    /// ([hierarchy and relationships](crate::rules#hierarchy-and-relationships)).
    #[error("cannot roll back relationship `{type_name}`: {reason}")]
    UnsupportedRelationship {
        /// The relationship's type name.
        type_name: &'static str,
        /// Why it is refused.
        reason: RelationshipRefusal,
    },
    /// [`DeterministicSession::set_player_connected`](crate::DeterministicSession::set_player_connected)
    /// outside a local session: a networked session's relay decides who is connected
    /// ([`PlayerLeft`](crate::PlayerLeft) / [`PlayerRejoined`](crate::PlayerRejoined)), a
    /// replay plays the recorded marks.
    #[error(
        "only a local session marks its players connected or disconnected: {}",
        if *.replay {
            "a replay plays the marks it recorded"
        } else {
            "in a networked session the relay decides (PlayerLeft / PlayerRejoined)"
        }
    )]
    NotALocalSession {
        /// The session plays a replay (else it is networked).
        replay: bool,
    },
    /// A change asked for a tick the verified world has already simulated: verified ticks
    /// never change.
    #[error(
        "tick {tick} is already verified (verified through {verified_tick}): give a later tick"
    )]
    TickAlreadyVerified {
        /// The tick given.
        tick: crate::tick::Tick,
        /// The session's verified tick.
        verified_tick: crate::tick::Tick,
    },
    /// A second [`DeterministicPlugin`](crate::DeterministicPlugin) was added to an App that
    /// has one: an App holds one session (the first plugin's, which stays). Configure that one
    /// (`config`, `edit_config`), or start a new session with
    /// [`restart_session`](crate::restart_session).
    #[error(
        "DeterministicPlugin added twice ({second} after {first}): an App holds one session; \
         configure the first plugin instead, or start a new session with restart_session"
    )]
    PluginAddedTwice {
        /// The plugin installed first (its type name).
        first: &'static str,
        /// The plugin refused.
        second: &'static str,
    },
    /// The game plugin adds a plugin the simulation worlds have already: Rapier's
    /// `RapierPhysicsPlugin` (in [`SimulationTick`](crate::SimulationTick), with the session's
    /// fixed timestep). Remove it from the game plugin; set gravity and integration parameters
    /// on the Rapier context as usual
    /// ([physics in the simulation worlds](crate::rules#physics-in-the-simulation-worlds)).
    #[error(
        "the game plugin adds {plugin}, but the simulation worlds already have it \
         (DeterministicPlugin adds Rapier in SimulationTick): remove it from the game plugin (a \
         main App that needs physics of its own adds it there)"
    )]
    PluginInGame {
        /// The plugin's type name.
        plugin: &'static str,
    },
    /// Snapshots are enabled and a registered type has no snapshot serializer: register it with
    /// a `_serde` method, or reflect it as a component and register it for reflection first
    /// ([snapshots](crate::rules#snapshots)).
    #[error(
        "`{type_name}` cannot be saved in snapshots: register it with a `_serde` method or make it reflectable (#[reflect(Component)] + register_type)"
    )]
    NotSerializable {
        /// The type's name.
        type_name: &'static str,
    },
}

/// Why a relationship is refused for rollback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, bevy::prelude::Reflect)]
pub enum RelationshipRefusal {
    /// Its target is `linked_spawn`: despawning a target would despawn the sources through Bevy,
    /// outside the simulation entity allocator. Only `ChildOf`/`Children` are handled (a
    /// simulated despawn walks the children itself).
    LinkedSpawn,
    /// Its target's collection keeps neither insertion order nor a canonical order (a hash
    /// set): the order of the sources could differ between the worlds after a rollback.
    UnorderedTarget,
}

impl std::fmt::Display for RelationshipRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::LinkedSpawn => {
                "its target despawns its sources (linked_spawn); only ChildOf/Children are supported so"
            }
            Self::UnorderedTarget => {
                "its target collection has no reproducible order (use a Vec, SmallVec or single entity)"
            }
        })
    }
}
