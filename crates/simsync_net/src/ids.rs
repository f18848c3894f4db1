//! Identifiers shared by the messages of every protocol.

use bevy::reflect::std_traits::ReflectDefault;
use serde::{Deserialize, Serialize};

/// Identifies one participant (connected client) of a server, assigned by the server in the
/// handshake ([`crate::Welcome`], see [`crate::ServerHandshake`]): from 1 up, never reused while
/// the server runs, so `ParticipantId(0)` (the `Default`) is never a joined participant. A varint
/// on the wire: one byte below 251.
///
/// The one participant id of simsync: `simsync_ownership` uses this type too.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    bevy::reflect::Reflect,
)]
#[reflect(Debug, Default, PartialEq, Hash, Clone)]
pub struct ParticipantId(pub u16);

impl ParticipantId {
    /// The entity server itself as the owner of a body: its physics host simulating a body no
    /// participant owns (`simsync_ownership`'s `PhysicsHostConfig`). Id 0, which the handshake
    /// never gives a participant.
    pub const ENTITY_SERVER: ParticipantId = ParticipantId(0);
}

impl std::fmt::Display for ParticipantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == Self::ENTITY_SERVER {
            f.write_str("the entity server")
        } else {
            write!(f, "participant {}", self.0)
        }
    }
}
