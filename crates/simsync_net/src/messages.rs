//! The two message enums, one per direction, and the handshake.
//!
//! [`ClientMessage`] (client → server) and [`ServerMessage`] (server → client) hold the messages
//! every connection uses (handshake, ping/pong, goodbye) and nest the messages of each protocol:
//! [`crate::session_proto`] for the deterministic session (relay server) and
//! [`crate::ownership_proto`] for simulation ownership (entity server). Nesting costs one byte
//! per message and lets one connection carry both.
//!
//! # Handshake
//!
//! 1. The client sends [`ClientMessage::Hello`] with [`PROTOCOL_VERSION`] and the protocols it
//!    wants.
//! 2. The server answers [`ServerMessage::Welcome`] (participant id, player slot, tick rate, ...)
//!    or [`ServerMessage::Rejected`] with a [`RejectReason`]. [`check_hello`] is the version rule.
//!
//! `Hello` is variant 0 of `ClientMessage` and `Welcome` variant 0 of `ServerMessage`, and the
//! version is the first field of both; this layout is frozen across versions so that
//! [`decode_client_message`] / [`decode_server_message`] can read a peer's version even when the
//! rest of its message no longer decodes, and answer [`NetError::VersionMismatch`] instead of
//! [`NetError::Malformed`].
//!
//! # Channels
//!
//! [`ClientMessage::channel`] / [`ServerMessage::channel`] name the [`NetChannel`] each message
//! is meant for; the send helpers of [`crate::ClientNetExt`] / [`crate::ServerNetExt`] use it.

use bevy::reflect::std_traits::ReflectDefault;
use serde::{Deserialize, Serialize};

use crate::ownership_proto::{OwnershipClientMessage, OwnershipServerMessage};
use crate::session_proto::{SessionClientMessage, SessionServerMessage};
use crate::{DecodeStats, NetChannel, NetError, codec};

/// The version of the message layout of this build. Peers with different versions refuse each
/// other in the handshake. Bump it with every change to a message type.
pub const PROTOCOL_VERSION: u16 = 2;

/// Identifies one participant (connected client) of a server, assigned by the server in
/// [`Welcome`]. A varint on the wire: one byte below 251.
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

impl std::fmt::Display for ParticipantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "participant {}", self.0)
    }
}

/// A set of protocols, as bits. A client asks for some in [`Hello`]; the server grants a subset
/// in [`Welcome`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Protocols(pub u8);

impl Protocols {
    /// No protocol (handshake and ping only).
    pub const NONE: Protocols = Protocols(0);
    /// The deterministic session ([`crate::session_proto`]).
    pub const SESSION: Protocols = Protocols(1);
    /// Simulation ownership ([`crate::ownership_proto`]).
    pub const OWNERSHIP: Protocols = Protocols(2);
    /// Both protocols.
    pub const ALL: Protocols = Protocols(3);

    /// Whether every protocol of `other` is in `self`.
    pub const fn contains(self, other: Protocols) -> bool {
        self.0 & other.0 == other.0
    }

    /// The protocols in both sets.
    pub const fn intersection(self, other: Protocols) -> Protocols {
        Protocols(self.0 & other.0)
    }
}

/// The first message of a client. Its layout up to `protocol_version` is frozen (see the
/// [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The client's [`PROTOCOL_VERSION`].
    pub protocol_version: u16,
    /// The protocols the client wants to use.
    pub protocols: Protocols,
    /// A display name; the server may truncate or ignore it. At most a few dozen bytes is
    /// expected; the codec limit bounds it at [`codec::MAX_MESSAGE_BYTES`].
    pub name: String,
}

impl Hello {
    /// A `Hello` for this build's [`PROTOCOL_VERSION`].
    pub fn new(protocols: Protocols, name: impl Into<String>) -> Self {
        Self {
            protocol_version: PROTOCOL_VERSION,
            protocols,
            name: name.into(),
        }
    }
}

/// The server's acceptance of a [`Hello`]. Its layout up to `protocol_version` is frozen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The server's [`PROTOCOL_VERSION`] (equal to the client's, or the server would have
    /// rejected it).
    pub protocol_version: u16,
    /// The id the server gave this participant; it stamps relayed messages with it.
    pub participant: ParticipantId,
    /// The player slot in a deterministic session (index into confirmed input sets), or `None`
    /// for a spectator or an ownership-only participant.
    pub player_slot: Option<u8>,
    /// The protocols granted (a subset of those asked for).
    pub protocols: Protocols,
    /// Simulation ticks per second (Hz) of the server's clock.
    pub tick_rate_hz: u16,
    /// The server's current tick when it sent this message.
    pub server_tick: i32,
}

/// Why the server refused a [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectReason {
    /// The client's protocol version differs from the server's.
    VersionMismatch {
        /// The server's [`PROTOCOL_VERSION`].
        server: u16,
        /// The version the client sent.
        client: u16,
    },
    /// No free participant or player slot.
    ServerFull,
    /// The session has started and does not take late joiners.
    SessionStarted,
    /// The client asked for protocols this server does not run.
    UnsupportedProtocols(Protocols),
    /// This connection already completed a handshake.
    AlreadyJoined,
    /// Anything else, as text for a log.
    Other(String),
}

/// Applies the version rule of the handshake: a client is accepted only with exactly this build's
/// [`PROTOCOL_VERSION`].
///
/// # Errors
///
/// [`RejectReason::VersionMismatch`] otherwise.
pub fn check_hello(hello: &Hello) -> Result<(), RejectReason> {
    if hello.protocol_version == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(RejectReason::VersionMismatch {
            server: PROTOCOL_VERSION,
            client: hello.protocol_version,
        })
    }
}

/// Messages from a client to the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ClientMessage {
    /// Handshake request (must stay variant 0). Channel: control.
    Hello(Hello),
    /// Round-trip probe; the server answers [`ServerMessage::Pong`] with the same `t`.
    /// Channel: inputs.
    Ping {
        /// The client's clock when sent, in ms (wrapping; see [`crate::clock::millis_u32`]).
        t: u32,
    },
    /// Answer to a [`ServerMessage::Ping`], echoing its `t`. Channel: inputs.
    Pong {
        /// The `t` of the server's ping, unchanged.
        t: u32,
    },
    /// The client is leaving on purpose. Channel: control.
    Goodbye,
    /// A deterministic-session message. Channel: see [`SessionClientMessage::channel`].
    Session(SessionClientMessage),
    /// An ownership message. Channel: see [`OwnershipClientMessage::channel`].
    Ownership(OwnershipClientMessage),
}

impl ClientMessage {
    /// The channel this message is meant to be sent on.
    pub fn channel(&self) -> NetChannel {
        match self {
            ClientMessage::Hello(_) | ClientMessage::Goodbye => NetChannel::Control,
            ClientMessage::Ping { .. } | ClientMessage::Pong { .. } => NetChannel::Inputs,
            ClientMessage::Session(message) => message.channel(),
            ClientMessage::Ownership(message) => message.channel(),
        }
    }
}

/// Messages from the server to a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ServerMessage {
    /// Handshake acceptance (must stay variant 0). Channel: control.
    Welcome(Welcome),
    /// Handshake refusal; the server disconnects the client shortly after. Channel: control.
    Rejected {
        /// Why.
        reason: RejectReason,
    },
    /// Round-trip probe; the client answers [`ClientMessage::Pong`] with the same `t`.
    /// Channel: inputs.
    Ping {
        /// The server's clock when sent, in ms (wrapping).
        t: u32,
    },
    /// Answer to a [`ClientMessage::Ping`]. Channel: inputs.
    Pong {
        /// The `t` of the client's ping, unchanged.
        t: u32,
        /// The server's clock when it answered, in ms (wrapping); with the RTT this gives the
        /// client an estimate of the server clock (`server_time_ms + rtt / 2`).
        server_time_ms: u32,
    },
    /// A deterministic-session message. Channel: see [`SessionServerMessage::channel`].
    Session(SessionServerMessage),
    /// An ownership message. Channel: see [`OwnershipServerMessage::channel`].
    Ownership(OwnershipServerMessage),
}

impl ServerMessage {
    /// The channel this message is meant to be sent on.
    pub fn channel(&self) -> NetChannel {
        match self {
            ServerMessage::Welcome(_) | ServerMessage::Rejected { .. } => NetChannel::Control,
            ServerMessage::Ping { .. } | ServerMessage::Pong { .. } => NetChannel::Inputs,
            ServerMessage::Session(message) => message.channel(),
            ServerMessage::Ownership(message) => message.channel(),
        }
    }
}

/// Reads the protocol version of a `Hello` / `Welcome` (tag 0, then the version varint) from the
/// start of `bytes`, whatever follows. `None` if the bytes do not start with tag 0 and a valid
/// `u16` varint.
pub fn peek_handshake_version(bytes: &[u8]) -> Option<u16> {
    let (&tag, rest) = bytes.split_first()?;
    if tag != 0 {
        return None;
    }
    bincode::serde::decode_from_slice::<u16, _>(rest, codec::wire_config())
        .ok()
        .map(|(version, _)| version)
}

fn check_version(bytes: &[u8], error: NetError) -> NetError {
    match peek_handshake_version(bytes) {
        Some(theirs) if theirs != PROTOCOL_VERSION => NetError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs,
        },
        _ => error,
    }
}

/// Decodes a [`ClientMessage`] (as [`codec::decode`]) and applies the version rule to a `Hello`.
///
/// # Errors
///
/// - [`NetError::VersionMismatch`] for a `Hello` with another [`PROTOCOL_VERSION`], whether or
///   not the rest of it decodes (a server answers it with [`RejectReason::VersionMismatch`]).
/// - Otherwise the errors of [`codec::decode`].
pub fn decode_client_message(bytes: &[u8]) -> Result<ClientMessage, NetError> {
    match codec::decode::<ClientMessage>(bytes) {
        Ok(ClientMessage::Hello(hello)) if hello.protocol_version != PROTOCOL_VERSION => {
            Err(NetError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: hello.protocol_version,
            })
        }
        Ok(message) => Ok(message),
        Err(error) => Err(check_version(bytes, error)),
    }
}

/// Decodes a [`ServerMessage`] (as [`codec::decode`]) and applies the version rule to a
/// `Welcome`.
///
/// # Errors
///
/// - [`NetError::VersionMismatch`] for a `Welcome` with another [`PROTOCOL_VERSION`], whether or
///   not the rest of it decodes.
/// - Otherwise the errors of [`codec::decode`].
pub fn decode_server_message(bytes: &[u8]) -> Result<ServerMessage, NetError> {
    match codec::decode::<ServerMessage>(bytes) {
        Ok(ServerMessage::Welcome(welcome)) if welcome.protocol_version != PROTOCOL_VERSION => {
            Err(NetError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: welcome.protocol_version,
            })
        }
        Ok(message) => Ok(message),
        Err(error) => Err(check_version(bytes, error)),
    }
}

/// [`decode_client_message`], recording the outcome in `stats`.
///
/// # Errors
///
/// As [`decode_client_message`].
pub fn decode_client_message_counted(
    bytes: &[u8],
    stats: &mut DecodeStats,
) -> Result<ClientMessage, NetError> {
    let result = decode_client_message(bytes);
    stats.record(&result);
    result
}

/// [`decode_server_message`], recording the outcome in `stats`.
///
/// # Errors
///
/// As [`decode_server_message`].
pub fn decode_server_message_counted(
    bytes: &[u8],
    stats: &mut DecodeStats,
) -> Result<ServerMessage, NetError> {
    let result = decode_server_message(bytes);
    stats.record(&result);
    result
}
