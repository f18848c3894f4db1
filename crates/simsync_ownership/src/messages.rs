//! The Bevy messages of ownership: [`OwnershipChanged`] (entity server and participants) and
//! [`BidRefused`] with [`RefusedBy`] (participants). Game code reads them with `MessageReader`.

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

/// Who decided a [`BidRefused`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect)]
pub enum RefusedBy {
    /// The entity server's arbiter, answering a message this participant sent.
    EntityServer,
    /// This participant, without sending anything: the bid cannot win against the owner it
    /// knows of ([ownership rule 6](crate::rules)).
    Participant,
}

/// One of this participant's bids, priority changes, releases or state updates about a body was
/// refused: by the entity server ([ownership rules 1–4, 7](crate::rules)), or by the participant
/// itself for a bid it did not send because it cannot win ([ownership rule 6](crate::rules)),
/// in the same frame as the trigger (a `poke`, a `grab`, an avatar collision). Written on the
/// participant.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct BidRefused {
    /// The body's entity in this App.
    pub entity: Entity,
    /// The body's network id.
    pub body: BodyId,
    /// Why, exactly as the entity server's arbiter decided it (or would have).
    pub reason: RefusalReason,
    /// The body's owner when refused (`None`: unowned), as the server stated it or as this
    /// participant knew it.
    pub owner: Option<ParticipantId>,
    /// That owner's priority ([`Priority::NONE`] when unowned).
    pub priority: Priority,
    /// Who decided.
    pub by: RefusedBy,
}
