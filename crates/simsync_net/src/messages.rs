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
/// An ownership `StateBatch` as the codec lays it out has its payload copied in one slice
/// rather than decoded a byte at a time: same message, same errors for any other bytes.
///
/// # Errors
///
/// - [`NetError::VersionMismatch`] for a `Hello` with another [`PROTOCOL_VERSION`], whether or
///   not the rest of it decodes (a server answers it with [`RejectReason::VersionMismatch`]).
/// - Otherwise the errors of [`codec::decode`].
pub fn decode_client_message(bytes: &[u8]) -> Result<ClientMessage, NetError> {
    if let Some(payload) = state_batch_payload(bytes) {
        return Ok(ClientMessage::Ownership(
            OwnershipClientMessage::StateBatch(payload.to_vec()),
        ));
    }
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

/// The head of `ClientMessage::Ownership(OwnershipClientMessage::StateBatch(_))` as
/// [`codec::encode`] lays it out: its two enum tags as varints (`Ownership` is variant 5 of
/// `ClientMessage`, `StateBatch` variant 1 of `OwnershipClientMessage`), then comes the
/// payload's length. A test checks it against `encode`.
const STATE_BATCH_HEAD: [u8; 2] = [5, 1];

/// Largest payload [`state_batch_payload`] reads: half a message, far below what
/// [`codec::decode`] accepts (its limit counts each enum tag as 4 bytes and the length as 8,
/// and a byte buffer's memory rounded up to a power of two), and above any state batch sent on
/// an unreliable channel.
const STATE_BATCH_FAST_MAX: usize = codec::MAX_MESSAGE_BYTES / 2;

/// The payload of a well-formed `ClientMessage::Ownership(OwnershipClientMessage::StateBatch(_))`
/// read as one slice (the most frequent message of an entity server), instead of through
/// [`codec::decode`], which reads a byte buffer one byte at a time; `None` for anything else.
///
/// Taken only when the bytes are exactly what [`codec::encode`] makes of such a message with
/// at most [`STATE_BATCH_FAST_MAX`] payload bytes: its head, the payload's length as bincode's
/// shortest varint (one byte below 251, else 251 and two little-endian bytes) and exactly that
/// many bytes. Such bytes decode to the same message either way; any other bytes (truncated,
/// trailing bytes, another length encoding, a longer payload, another message) go through
/// [`codec::decode`] and get its errors.
fn state_batch_payload(bytes: &[u8]) -> Option<&[u8]> {
    let rest = bytes.strip_prefix(STATE_BATCH_HEAD.as_slice())?;
    let (&first, rest) = rest.split_first()?;
    let (len, payload) = match first {
        0..=250 => (usize::from(first), rest),
        251 => {
            let (n, payload) = rest.split_first_chunk::<2>()?;
            let len = usize::from(u16::from_le_bytes(*n));
            // The shortest form: 251 only for lengths it is needed for.
            if len < 251 {
                return None;
            }
            (len, payload)
        }
        _ => return None,
    };
    (len <= STATE_BATCH_FAST_MAX && payload.len() == len).then_some(payload)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn state_batch(payload: Vec<u8>) -> Vec<u8> {
        codec::encode(&ClientMessage::Ownership(
            OwnershipClientMessage::StateBatch(payload),
        ))
        .expect("encodes")
    }

    #[test]
    fn the_state_batch_head_is_the_codecs() {
        let mut empty = state_batch(Vec::new());
        // The empty payload's length, 0, is the last byte.
        assert_eq!(empty.pop(), Some(0));
        assert_eq!(empty, STATE_BATCH_HEAD);
    }

    #[test]
    fn a_state_batch_decodes_in_one_slice_as_the_codec_decodes_it() {
        // Around each length encoding's bounds, up to the largest message.
        let head = STATE_BATCH_HEAD.len();
        for len in [0, 1, 250, 251, 252, 1_000, STATE_BATCH_FAST_MAX] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
            let bytes = state_batch(payload.clone());
            let slow = codec::decode::<ClientMessage>(&bytes).expect("the codec decodes it");
            let expected = ClientMessage::Ownership(OwnershipClientMessage::StateBatch(payload));
            assert_eq!(slow, expected, "length {len}");
            assert_eq!(
                decode_client_message(&bytes).ok(),
                Some(expected),
                "length {len}"
            );
            let fast = state_batch_payload(&bytes).map(<[u8]>::to_vec);
            let ClientMessage::Ownership(OwnershipClientMessage::StateBatch(p)) = slow else {
                unreachable!("checked above");
            };
            assert_eq!(fast, Some(p), "length {len}");
        }
        // Longer payloads, up to past the largest message, are the codec's to decode.
        let show = |r: &Result<ClientMessage, NetError>| format!("{r:?}");
        let largest = codec::MAX_MESSAGE_BYTES - head - 3;
        for len in [STATE_BATCH_FAST_MAX + 1, largest - 20, largest] {
            let bytes = state_batch(vec![3; len]);
            assert_eq!(state_batch_payload(&bytes), None, "length {len}");
            let slow = codec::decode::<ClientMessage>(&bytes);
            assert_eq!(
                show(&decode_client_message(&bytes)),
                show(&slow),
                "length {len}"
            );
        }
    }

    #[test]
    fn malformed_state_batches_get_the_codecs_errors() {
        let show = |r: &Result<ClientMessage, NetError>| format!("{r:?}");
        let good = state_batch(vec![9; 300]);
        let head = STATE_BATCH_HEAD.len();
        let mut cases: Vec<Vec<u8>> = vec![
            // Truncated: in the length, in the payload, the head alone.
            good[..head + 2].to_vec(),
            good[..good.len() - 1].to_vec(),
            good[..head].to_vec(),
            // A trailing byte.
            [good.as_slice(), &[0]].concat(),
            // A length longer than the message (over-long count), and than any message.
            [
                STATE_BATCH_HEAD.as_slice(),
                &[252],
                &u32::MAX.to_le_bytes(),
                &[1, 2, 3],
            ]
            .concat(),
            [STATE_BATCH_HEAD.as_slice(), &[253], &u64::MAX.to_le_bytes()].concat(),
            // A short length in a long encoding (not the shortest form).
            [STATE_BATCH_HEAD.as_slice(), &[251, 3, 0, 1, 2, 3]].concat(),
            [STATE_BATCH_HEAD.as_slice(), &[254]].concat(),
        ];
        // Garbage after the head.
        let mut x: u32 = 0x1234_5678;
        for len in [1, 5, 40] {
            let garbage: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            cases.push([STATE_BATCH_HEAD.as_slice(), &garbage].concat());
        }
        for bytes in cases {
            let slow = codec::decode::<ClientMessage>(&bytes);
            assert_eq!(
                show(&decode_client_message(&bytes)),
                show(&slow),
                "{bytes:?}"
            );
            if slow.is_err() {
                assert_eq!(state_batch_payload(&bytes), None, "{bytes:?}");
            }
        }
        // Anything the codec refuses is refused here too, with its error.
        let short = &good[..head + 2];
        assert!(matches!(
            decode_client_message(short),
            Err(NetError::Truncated | NetError::Malformed(_))
        ));
        assert!(matches!(
            decode_client_message(&[good.as_slice(), &[0]].concat()),
            Err(NetError::TrailingBytes { .. })
        ));
    }
}
