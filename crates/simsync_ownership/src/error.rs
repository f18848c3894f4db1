//! The one error type of this crate.
//!
//! Configuration checks and the entity server's own (non-participant) operations return
//! [`OwnershipError`]. A participant's message that the server turns down is not an error of
//! this kind: it is a [`Refusal`](crate::Refusal) with a [`RefusalReason`](crate::RefusalReason),
//! a protocol outcome counted and answered on the wire.

use thiserror::Error;

use crate::body::BodyKind;
use crate::priority::{BodyId, Priority};

/// What went wrong in an [`OwnershipConfig`](crate::OwnershipConfig) or in an entity-server
/// operation on the [`OwnershipArbiter`](crate::OwnershipArbiter).
#[derive(Debug, Error, Clone, PartialEq)]
pub enum OwnershipError {
    /// A configuration value out of its range.
    #[error("invalid ownership configuration `{field}` = {value}: {reason}")]
    InvalidConfig {
        /// The field, as named in `OwnershipConfig`.
        field: &'static str,
        /// The value given, as text (durations in ms, priorities as the byte).
        value: String,
        /// What the value must be.
        reason: &'static str,
    },
    /// A participant's physics cannot follow the ownership tick: the App has no fixed network
    /// tick, or Rapier's `TimestepMode` steps by something else
    /// ([`fixed_physics_step`](crate::fixed_physics_step)).
    #[error("participant physics cannot follow the ownership tick ({found}); {fix}")]
    PhysicsTimestep {
        /// What the App has.
        found: String,
        /// How to set it up.
        fix: &'static str,
    },
    /// The body is not registered with the arbiter.
    #[error("{body} is not registered with the ownership arbiter")]
    UnknownBody {
        /// The body asked about.
        body: BodyId,
    },
    /// The body is already registered; ids must be unique.
    #[error("{body} is already registered with the ownership arbiter")]
    BodyAlreadyRegistered {
        /// The body given twice.
        body: BodyId,
    },
    /// Only dynamic bodies can have an owner (static and kinematic bodies move only as the
    /// server says).
    #[error("{body} is {kind:?}; only dynamic bodies can have a simulation owner")]
    NotOwnable {
        /// The body.
        body: BodyId,
        /// Its kind.
        kind: BodyKind,
    },
    /// A priority outside what a participant may hold: from `yield_priority` to
    /// `max_bid_priority` inclusive.
    #[error("priority {priority} is outside {min}..={max}")]
    PriorityOutOfRange {
        /// The priority given.
        priority: Priority,
        /// The lowest a participant may hold (`yield_priority`).
        min: Priority,
        /// The highest a participant may hold (`max_bid_priority`).
        max: Priority,
    },
    /// A body state received from the wire that cannot be applied: a sequence number that does
    /// not fit the 16-bit [`Sequence`](crate::Sequence) owners use, or a position, velocity or
    /// rotation that is not finite or beyond [`MAX_STATE_MAGNITUDE`](crate::MAX_STATE_MAGNITUDE).
    #[error("{body}: invalid body state: {reason}")]
    InvalidBodyState {
        /// The body the state claims to be about.
        body: BodyId,
        /// What is wrong with it.
        reason: &'static str,
    },
}
