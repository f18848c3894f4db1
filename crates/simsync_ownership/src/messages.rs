//! The Bevy messages of ownership: [`OwnershipChanged`] (entity server and participants),
//! [`BidRefused`] with [`RefusedBy`] and [`CountedSilent`] (participants),
//! [`ParticipantGone`] with [`GoneCause`] and [`ParticipantReturned`] (entity server). Game code
//! reads them with `MessageReader`.

use core::time::Duration;

use bevy::prelude::*;
use simsync_net::RefusalReason;
use simsync_net::renet::ClientId;

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

/// Why the entity server counts a participant as gone ([`ParticipantGone`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GoneCause {
    /// It said `Goodbye` or its connection closed.
    Left,
    /// Nothing at all came from it for `participant_silence_timeout` while its connection
    /// stayed open ([ownership rule 5](crate::rules#rule-5--silent-owners-expire)): lost
    /// packets, a stalled process, a dead link without a close.
    Silent {
        /// How long ago the server last heard from it.
        heard_last: Duration,
    },
}

/// A joined participant counts as gone on the entity server: every body it owned was cleared
/// and announced unowned, and keeps moving on the others until someone takes it over
/// ([ownership rule 5](crate::rules#rule-5--silent-owners-expire)). Written on the entity
/// server, once per departure (a silent participant that left before it was heard from again
/// is not written again).
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParticipantGone {
    /// The participant's connection.
    pub client: ClientId,
    /// The participant.
    pub participant: ParticipantId,
    /// Why.
    pub cause: GoneCause,
    /// Bodies it owned, now unowned.
    pub bodies_cleared: u32,
}

/// A participant counted gone for silence was heard from again: it is a participant again,
/// under the same id and connection, and owns nothing until it wins a bid; it was sent a
/// `CountedSilent` ([`CountedSilent`] on its side). Written on the entity server.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParticipantReturned {
    /// The participant's connection.
    pub client: ClientId,
    /// The participant.
    pub participant: ParticipantId,
    /// How long the server heard nothing from it.
    pub silent_for: Duration,
}

/// The entity server counted this participant as gone after hearing nothing from it for its
/// `participant_silence_timeout`, and says so now that it hears from it again: every body this
/// participant owned was cleared (its `OwnershipChanged`s came before this), and it owns nothing
/// until it wins a bid ([ownership rule 5](crate::rules#rule-5--silent-owners-expire)). Written
/// on the participant.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountedSilent {
    /// How long the server heard nothing from this participant.
    pub silent_for: Duration,
    /// Bodies this participant owned that were cleared.
    pub bodies_cleared: u32,
}

/// The entity server's room ends: its server drains (shuts down) or its operator ended the
/// room, and it closes the connection shortly after. Written on the participant, once; also
/// kept in [`OwnershipClient::closing`](crate::OwnershipClient::closing).
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct RoomClosing {
    /// Why, as the server said.
    pub reason: simsync_net::MatchEndReason,
}

/// Why a participant's session with its entity server ended
/// ([`OwnershipClient::ended`](crate::OwnershipClient::ended), [`ParticipantEnded`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParticipantEnd {
    /// The entity server is gone: nothing was heard from it for
    /// [`server_silence_timeout`](crate::OwnershipConfig::server_silence_timeout), or the
    /// connection closed without the server saying the room ends (the server died, or the
    /// network to it did). The session ended early.
    ServerGone,
    /// The server said the room ends (a drain, or its operator ended it), with its reason; then
    /// the connection closed or went silent. The session ended early.
    RoomEnded(simsync_net::MatchEndReason),
    /// This participant closed its connection itself (`RenetClient::disconnect`): the game left,
    /// a normal end.
    Left,
}

impl ParticipantEnd {
    /// Whether the session ended before the game ended it (`ServerGone`, `RoomEnded`): a game
    /// that ran a session to its end reports a failure then (the sandbox's `join` exits
    /// non-zero).
    pub fn is_early(&self) -> bool {
        !matches!(self, ParticipantEnd::Left)
    }
}

/// `the entity server is gone`, `the room ended: <reason>`, `left`.
impl core::fmt::Display for ParticipantEnd {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ParticipantEnd::ServerGone => f.write_str("the entity server is gone"),
            ParticipantEnd::RoomEnded(reason) => write!(f, "the room ended: {reason}"),
            ParticipantEnd::Left => f.write_str("left"),
        }
    }
}

/// This participant's session with its entity server ended, and why. Written on the
/// participant, once; also kept in [`OwnershipClient::ended`](crate::OwnershipClient::ended).
/// The participant sends nothing more; its bodies stay where they are in its world.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct ParticipantEnded {
    /// Why.
    pub reason: ParticipantEnd,
}
