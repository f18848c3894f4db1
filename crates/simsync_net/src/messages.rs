//! The two message enums, one per direction ([wire rules](crate::rules)).
//!
//! [`ClientMessage`] (client → server) and [`ServerMessage`] (server → client) hold the messages
//! every connection uses (handshake, ping/pong, goodbye) and nest the messages of each protocol:
//! the deterministic session (relay server) and simulation ownership (entity server). Nesting
//! costs one byte per message and lets one connection carry both.
//!
//! `Hello` is variant 0 of `ClientMessage` and `Welcome` variant 0 of `ServerMessage`, and the
//! version is the first field of both; this layout is frozen across versions so that
//! [`decode_client_message`] / [`decode_server_message`] can read a peer's version even when the
//! rest of its message no longer decodes, and answer [`NetError::VersionMismatch`] instead of
//! [`NetError::Malformed`].

use serde::{Deserialize, Serialize};

use crate::channels::NetChannel;
use crate::codec::{self, DecodeStats};
use crate::error::NetError;
use crate::handshake::{Hello, PROTOCOL_VERSION, RejectReason, Welcome};
use crate::matches::{MatchId, MatchMessage};
use crate::ownership_proto::{OwnershipClientMessage, OwnershipServerMessage};
use crate::session_proto::{SessionClientMessage, SessionServerMessage};

/// Messages from a client to the server ([wire rule 1](crate::rules)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ClientMessage {
    /// Handshake request (must stay variant 0). Channel: control.
    Hello(Hello),
    /// Round-trip probe; the server answers [`ServerMessage::Pong`] with the same `t`.
    /// Channel: inputs.
    Ping {
        /// The client's clock when sent, in ms (wrapping; see [`crate::millis_u32`]).
        t: u32,
    },
    /// Answer to a [`ServerMessage::Ping`], echoing its `t`. Channel: inputs.
    Pong {
        /// The `t` of the server's ping, unchanged.
        t: u32,
    },
    /// The client is leaving on purpose. Channel: control.
    Goodbye,
    /// A deterministic-session message of a match ([wire rule 12](crate::rules)). Channel:
    /// see [`SessionClientMessage::channel`].
    Session(MatchMessage<SessionClientMessage>),
    /// An ownership message. Channel: see [`OwnershipClientMessage::channel`].
    Ownership(OwnershipClientMessage),
}

impl ClientMessage {
    /// The session message `message` of match `match_id`.
    pub fn session(match_id: MatchId, message: SessionClientMessage) -> Self {
        ClientMessage::Session(MatchMessage { match_id, message })
    }

    /// The channel this message is meant to be sent on.
    pub fn channel(&self) -> NetChannel {
        match self {
            ClientMessage::Hello(_) | ClientMessage::Goodbye => NetChannel::Control,
            ClientMessage::Ping { .. } | ClientMessage::Pong { .. } => NetChannel::Inputs,
            ClientMessage::Session(session) => session.message.channel(),
            ClientMessage::Ownership(message) => message.channel(),
        }
    }
}

/// Messages from the server to a client ([wire rule 1](crate::rules)).
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
    /// A deterministic-session message of a match ([wire rule 12](crate::rules)). Channel:
    /// see [`SessionServerMessage::channel`].
    Session(MatchMessage<SessionServerMessage>),
    /// An ownership message. Channel: see [`OwnershipServerMessage::channel`].
    Ownership(OwnershipServerMessage),
}

impl ServerMessage {
    /// The session message `message` of match `match_id`.
    pub fn session(match_id: MatchId, message: SessionServerMessage) -> Self {
        ServerMessage::Session(MatchMessage { match_id, message })
    }

    /// The channel this message is meant to be sent on.
    pub fn channel(&self) -> NetChannel {
        match self {
            ServerMessage::Welcome(_) | ServerMessage::Rejected { .. } => NetChannel::Control,
            ServerMessage::Ping { .. } | ServerMessage::Pong { .. } => NetChannel::Inputs,
            ServerMessage::Session(session) => session.message.channel(),
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

/// Decodes a [`ClientMessage`] (as [`codec::decode`]) and applies the version rule to a `Hello`
/// ([wire rule 2](crate::rules)).
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
