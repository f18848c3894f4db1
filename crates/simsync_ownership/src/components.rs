//! The ECS side of ownership: components the (later) `OwnershipPlugin` reads and writes. They
//! hold views of the plain-data state in [`OwnershipArbiter`](crate::OwnershipArbiter) and
//! [`ParticipantOwnership`](crate::ParticipantOwnership); the rules live there, not here.

use bevy::prelude::*;
use serde::{Deserialize, Serialize};

use crate::priority::{BodyId, ParticipantId, Priority};

/// Who simulates this body and at which priority, as the entity server last announced it.
/// Replicated to every participant; `owner: None` (priority [`Priority::NONE`]) when unowned.
#[derive(
    Component, Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Reflect, Serialize, Deserialize,
)]
#[reflect(Component, Debug, Default, PartialEq, Hash, Clone)]
pub struct SimulationOwner {
    /// The owning participant, if any.
    pub owner: Option<ParticipantId>,
    /// Its priority (ownership rules 2, 3); never VOLUNTEER (ownership rule 7).
    pub priority: Priority,
}

impl SimulationOwner {
    /// No owner.
    pub const UNOWNED: SimulationOwner = SimulationOwner {
        owner: None,
        priority: Priority::NONE,
    };

    /// Whether `participant` owns the body.
    #[inline]
    pub fn is_owned_by(&self, participant: ParticipantId) -> bool {
        self.owner == Some(participant)
    }
}

/// A bid this participant sent for the body that the server has not answered yet (ownership
/// rule 6: a bid is never assumed won). Local only, never replicated.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect, Serialize, Deserialize)]
#[reflect(Component, Debug, PartialEq, Hash, Clone)]
pub struct OwnershipBid {
    /// The priority bid.
    pub priority: Priority,
}

/// Marks a body that takes part in simulation ownership. It must also carry a [`BodyNetId`];
/// only dynamic rigid bodies can actually be owned.
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component, Debug, Default, PartialEq, Clone)]
pub struct Ownable;

/// On the entity server, locks the body against bids (ownership rule 1). The current owner, if
/// any, keeps it.
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component, Debug, Default, PartialEq, Clone)]
pub struct OwnershipLock;

/// The body's stable network id, the same in every world, used in every ownership message.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect, Serialize, Deserialize)]
#[reflect(Component, Debug, PartialEq, Hash, Clone)]
pub struct BodyNetId(pub BodyId);
