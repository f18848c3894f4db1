//! The Bevy messages of ownership: [`OwnershipChanged`] (entity server and participants) and
//! [`BidRefused`] (participants). Game code reads them with `MessageReader`.

use bevy::prelude::*;
use simsync_net::RefusalReason;

use crate::priority::{BodyId, ParticipantId, Priority};

/// A body's owner or priority changed, as the entity server announced it (written on the
/// server when it decides, and on every participant when it hears). `owner: None` (priority
/// [`Priority::NONE`]) when the body became unowned: released at rest ([ownership rule
/// 12](crate::rules)), expired for silence or cleared on a disconnect ([ownership rule
/// 5](crate::rules)).
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnershipChanged {
    /// The body's entity in this App.
    pub entity: Entity,
    /// The body's network id.
    pub body: BodyId,
    /// The new owner.
    pub owner: Option<ParticipantId>,
    /// The new owner's priority.
    pub priority: Priority,
}

/// The entity server refused one of this participant's messages about a body: a bid or a
/// priority change ([ownership rules 1–3, 7](crate::rules)), a release or a state update from a
/// participant that does not own the body ([ownership rule 4](crate::rules)). Written on the
/// participant.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct BidRefused {
    /// The body's entity in this App.
    pub entity: Entity,
    /// The body's network id.
    pub body: BodyId,
    /// Why, exactly as the entity server's arbiter decided it.
    pub reason: RefusalReason,
}
