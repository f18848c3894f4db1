//! Every ECS component of ownership, read and written by the [`OwnershipPlugin`](crate::OwnershipPlugin)'s
//! systems: what the entity server replicates ([`SimulationOwner`]), what marks a body
//! ([`BodyNetId`], [`Ownable`], [`OwnershipLock`]), a participant's local view
//! ([`OwnershipBid`]) and the marks game code sets on a participant ([`ParticipantAvatar`],
//! [`Poked`], [`Held`], [`Uninterested`], usually through
//! [`OwnershipEntityCommandsExt`](crate::OwnershipEntityCommandsExt)). They hold views of the
//! plain-data state in [`OwnershipArbiter`](crate::OwnershipArbiter) and
//! [`ParticipantOwnership`](crate::ParticipantOwnership); the [rules](crate::rules) live there,
//! not here.

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

/// Marks the participant's own avatar (player body). A body the avatar collides with (a contact
/// that becomes active while the body moves) is *touched by the avatar* and gets a POKE bid
/// ([ownership rule 9](crate::rules)). An avatar that is also [`Ownable`] is always treated as
/// held by its participant ([ownership rule 10](crate::rules)), so each participant owns its
/// own avatar at GRAB and relays its state to the others.
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component, Debug, Default, PartialEq, Clone)]
pub struct ParticipantAvatar;

/// A script changed the body this frame: observed once as a script edit (POKE bid, [ownership
/// rule 8](crate::rules)), then removed. Inserted by
/// [`OwnershipEntityCommandsExt::poke`](crate::OwnershipEntityCommandsExt::poke).
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component, Debug, Default, PartialEq, Clone)]
pub struct Poked;

/// This participant holds the body (GRAB bid, [ownership rule 10](crate::rules)) until the
/// component is removed. Inserted by
/// [`OwnershipEntityCommandsExt::grab`](crate::OwnershipEntityCommandsExt::grab), removed by
/// [`OwnershipEntityCommandsExt::release_grab`](crate::OwnershipEntityCommandsExt::release_grab).
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component, Debug, Default, PartialEq, Clone)]
pub struct Held;

/// This participant no longer wants to simulate the body: as its owner it drops to YIELD
/// ([ownership rule 13](crate::rules)), and it does not volunteer for it ([ownership rules 7
/// and 14](crate::rules)). Pokes and grabs still bid. Inserted by
/// [`OwnershipEntityCommandsExt::yield_ownership`](crate::OwnershipEntityCommandsExt::yield_ownership),
/// removed by
/// [`OwnershipEntityCommandsExt::restore_interest`](crate::OwnershipEntityCommandsExt::restore_interest).
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component, Debug, Default, PartialEq, Clone)]
pub struct Uninterested;

/// Registers every component above for reflection.
pub(crate) fn register_types(app: &mut App) {
    app.register_type::<SimulationOwner>()
        .register_type::<crate::budget::StateBudgetConfig>()
        .register_type::<crate::traffic::StateTraffic>()
        .register_type::<OwnershipBid>()
        .register_type::<Ownable>()
        .register_type::<OwnershipLock>()
        .register_type::<BodyNetId>()
        .register_type::<ParticipantAvatar>()
        .register_type::<Poked>()
        .register_type::<Held>()
        .register_type::<Uninterested>()
        .register_type::<crate::OwnershipConfig>()
        .register_type::<crate::ActivityConfig>();
}
