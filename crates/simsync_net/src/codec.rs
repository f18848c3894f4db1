//! The codec: bincode 2 through serde, with a size limit ([`encode`], [`decode`]), and a counter
//! of rejected messages ([`DecodeStats`]).
//!
//! # The allocation bound
//!
//! No decode allocates more than [`MAX_MESSAGE_BYTES`] in one allocation, whatever the bytes.
//! bincode claims the length of a string or byte buffer against the limit before allocating,
//! but its serde path does not claim sequence lengths: it reports the announced length as the
//! size hint, from which serde's `Vec` pre-allocates up to 1 MiB (8 bytes, `04 00 00 FC FF FF FF
//! FF`, made a 1 MiB allocation). [`decode`] therefore runs every `Deserialize` impl through a
//! wrapper of bincode's deserializer (the private `bounded` module) that hides those hints and
//! claims each element's memory before the collection grows for it. We chose the wrapper over
//! claiming lengths in a pre-pass because it needs no knowledge of the types: it also covers a
//! game's input type decoded with [`decode`]. It changes no byte of the wire format; it refuses a
//! collection that would need a buffer above the limit in memory (a `Vec` of `k` elements of
//! `s` bytes needs `k` rounded up to a power of two, times `s`: at most [`max_decoded_len`]
//! elements, e.g. 2,048 inputs, 1,024 input sets or 4,096 [`crate::OwnerRecord`]s, in one message)
//! with [`NetError::Oversized`]. [`encode`] does not apply this bound (serde hands a serializer
//! references to elements, not their types): a sender of long lists splits them by
//! [`max_decoded_len`].

use std::marker::PhantomData;

use bevy::prelude::{Reflect, ReflectDefault, ReflectResource, Resource};
use bincode::config::{Configuration, LittleEndian, Varint};
use serde::{Serialize, de::DeserializeOwned};

use crate::bounded::{BoundedSeed, Budget};
use crate::error::NetError;

/// Largest encoded message, in bytes (64 KiB). [`encode`] refuses to produce a longer one
/// ([`NetError::MessageTooLarge`]) and [`decode`] refuses to read one
/// ([`NetError::Oversized`]), including a short message whose length prefixes announce more.
///
/// renet splits messages above 1,200 bytes into slices; keep messages sent on unreliable
/// channels well under that (see [`crate::UNRELIABLE_MESSAGE_BUDGET`]).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The most elements of type `T` one list in a decoded message may hold ([wire rule
/// 3](crate::rules)): the largest power of two `k` with `k × size_of::<T>()` at most
/// [`MAX_MESSAGE_BYTES`] (a zero-sized `T` counts as one byte). A list one longer is refused
/// with [`NetError::Oversized`], since the buffer it grows into would pass the limit; a sender
/// of long tables splits them into messages of at most this many elements.
///
/// For example 4,096 [`crate::OwnerRecord`]s, 2,048 inputs, 1,024 [`crate::InputSet`]s, 65,536
/// bytes.
pub const fn max_decoded_len<T>() -> usize {
    let size = if size_of::<T>() == 0 {
        1
    } else {
        size_of::<T>()
    };
    let fit = MAX_MESSAGE_BYTES / size;
    if fit == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - fit.leading_zeros())
    }
}

/// The bincode configuration of every message ([codec rules](crate::rules)): `standard()` with
/// the [`MAX_MESSAGE_BYTES`] limit.
///
/// Layout: little endian, variable-length integers (an integer below 251 takes one byte, below
/// 2¹⁶ three, below 2³² five), `f32` as 4 raw bytes, enum tags as varints, sequences and strings
/// as a varint length followed by the elements. There is no header: the protocol version is
/// checked once, in the handshake ([`crate::peek_handshake_version`]), and on UDP by netcode's
/// protocol id ([`crate::NETCODE_PROTOCOL_ID`]).
///
/// Decoding never panics and never allocates more than the limit allows: every bad input —
/// garbage, truncated bytes, bytes past the limit, bytes left over after a complete message —
/// comes back as a typed [`NetError`], and [`DecodeStats`] counts them by kind.
pub type WireConfig =
    Configuration<LittleEndian, Varint, bincode::config::Limit<MAX_MESSAGE_BYTES>>;

/// The bincode configuration of every message; see [`WireConfig`].
pub const fn wire_config() -> WireConfig {
    bincode::config::standard().with_limit::<MAX_MESSAGE_BYTES>()
}

/// Encodes `value` with the [wire configuration](wire_config).
///
/// # Errors
///
/// - [`NetError::MessageTooLarge`] if the result would be above [`MAX_MESSAGE_BYTES`].
/// - [`NetError::Encode`] if the value's `Serialize` impl fails (never for this crate's message
///   types).
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, NetError> {
    let bytes = bincode::serde::encode_to_vec(value, wire_config())
        .map_err(|error| NetError::Encode(error.to_string()))?;
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(NetError::MessageTooLarge {
            size: bytes.len(),
            limit: MAX_MESSAGE_BYTES,
        });
    }
    Ok(bytes)
}

/// Decodes one whole `T` from `bytes` with the [wire configuration](wire_config).
///
/// All of `bytes` must be used: this is the decoder for one renet message.
///
/// # Errors
///
/// - [`NetError::Oversized`] if `bytes` is longer than [`MAX_MESSAGE_BYTES`], a length inside
///   it announces more than the limit allows, or a collection would need a buffer above the
///   limit in memory ([wire rule 3](crate::rules)).
/// - [`NetError::Truncated`] if the bytes end before the message does.
/// - [`NetError::TrailingBytes`] if bytes are left over after a complete message.
/// - [`NetError::Malformed`] for anything else that is not a valid `T` (bad enum tag, bad
///   varint, invalid UTF-8, ...).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, NetError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(NetError::Oversized {
            limit: MAX_MESSAGE_BYTES,
        });
    }
    let budget = Budget::new(MAX_MESSAGE_BYTES);
    let seed = BoundedSeed {
        seed: PhantomData::<T>,
        budget: &budget,
    };
    match bincode::serde::seed_decode_from_slice(seed, bytes, wire_config()) {
        Ok((value, consumed)) if consumed == bytes.len() => Ok(value),
        Ok((_, consumed)) => Err(NetError::TrailingBytes {
            consumed,
            trailing: bytes.len().saturating_sub(consumed),
        }),
        Err(_) if budget.exceeded() => Err(NetError::Oversized {
            limit: MAX_MESSAGE_BYTES,
        }),
        Err(error) => Err(map_decode_error(error)),
    }
}

/// Decodes like [`decode`] and records the outcome in `stats`.
///
/// # Errors
///
/// As [`decode`].
pub fn decode_counted<T: DeserializeOwned>(
    bytes: &[u8],
    stats: &mut DecodeStats,
) -> Result<T, NetError> {
    let result = decode(bytes);
    stats.record(&result);
    result
}

/// The bincode configuration of files and other payloads larger than one message (desync
/// dumps): the [wire layout](wire_config) without the message limit; [`decode_with_limit`]
/// bounds it at run time instead.
pub type FileConfig = Configuration<LittleEndian, Varint, bincode::config::NoLimit>;

/// Encodes `value` with the [file configuration](FileConfig): the wire layout, no size limit
/// (the caller checks its own limit on the result).
///
/// # Errors
/// [`NetError::Encode`] if the value's `Serialize` impl fails.
pub fn encode_unlimited<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, NetError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
        .map_err(|error| NetError::Encode(error.to_string()))
}

/// Decodes one whole `T` from `bytes` like [`decode`], with `max_bytes` instead of
/// [`MAX_MESSAGE_BYTES`] as the limit of the input and of every collection's buffer (the same
/// allocation bound, [wire rule 3](crate::rules)). For payloads larger than one message, such
/// as desync dump files, encoded with [`encode_unlimited`].
///
/// # Errors
/// As [`decode`], with `max_bytes` as the limit.
pub fn decode_with_limit<T: DeserializeOwned>(
    bytes: &[u8],
    max_bytes: usize,
) -> Result<T, NetError> {
    if bytes.len() > max_bytes {
        return Err(NetError::Oversized { limit: max_bytes });
    }
    let budget = Budget::new(max_bytes);
    let seed = BoundedSeed {
        seed: PhantomData::<T>,
        budget: &budget,
    };
    match bincode::serde::seed_decode_from_slice(seed, bytes, bincode::config::standard()) {
        Ok((value, consumed)) if consumed == bytes.len() => Ok(value),
        Ok((_, consumed)) => Err(NetError::TrailingBytes {
            consumed,
            trailing: bytes.len().saturating_sub(consumed),
        }),
        Err(_) if budget.exceeded() => Err(NetError::Oversized { limit: max_bytes }),
        Err(bincode::error::DecodeError::LimitExceeded) => {
            Err(NetError::Oversized { limit: max_bytes })
        }
        Err(error) => Err(map_decode_error(error)),
    }
}

/// Decodes one `T` from a bincode `reader` with `config`, under the same allocation bound as
/// [`decode`] with `collection_limit` bytes for any one collection's buffer ([wire rule
/// 3](crate::rules)). For formats that frame bincode payloads themselves and want the reader's
/// position when a decode fails (world snapshots); `config` keeps its own limit on string and
/// byte lengths.
///
/// # Errors
/// bincode's [`DecodeError`](bincode::error::DecodeError) (`UnexpectedEnd` for bytes that end
/// early); a collection that would take more than `collection_limit` bytes of memory is a
/// `DecodeError::OtherString` naming the limit, returned before the collection grows past it.
pub fn decode_bounded_from_reader<T, R, C>(
    reader: R,
    config: C,
    collection_limit: usize,
) -> Result<T, bincode::error::DecodeError>
where
    T: DeserializeOwned,
    R: bincode::de::read::Reader,
    C: bincode::config::Config,
{
    use serde::de::DeserializeSeed;
    let budget = Budget::new(collection_limit);
    let seed = BoundedSeed {
        seed: PhantomData::<T>,
        budget: &budget,
    };
    let mut decoder =
        bincode::serde::OwnedSerdeDecoder::<bincode::de::DecoderImpl<R, C, ()>>::from_reader(
            reader, config,
        );
    seed.deserialize(decoder.as_deserializer())
}

fn map_decode_error(error: bincode::error::DecodeError) -> NetError {
    use bincode::error::DecodeError;
    match error {
        DecodeError::UnexpectedEnd { .. } => NetError::Truncated,
        DecodeError::LimitExceeded => NetError::Oversized {
            limit: MAX_MESSAGE_BYTES,
        },
        other => NetError::Malformed(other.to_string()),
    }
}

/// Counts decoded messages, accepted and rejected by kind, so a server or client can report (and
/// a test can check) how much garbage it was sent ([wire rule 3](crate::rules)).
///
/// Fill it with [`decode_counted`], [`DecodeStats::record`], or the receive helpers of
/// [`crate::ClientNetExt`] / [`crate::ServerNetExt`]. It is a Bevy resource so systems can share
/// one per App; it is not inserted by any plugin.
#[derive(Resource, Debug, Default, Clone, Copy, PartialEq, Eq, Hash, Reflect)]
#[reflect(Resource, Debug, Default, PartialEq, Clone)]
pub struct DecodeStats {
    /// Messages decoded successfully.
    pub accepted: u64,
    /// Rejected: bytes ended early ([`NetError::Truncated`]).
    pub truncated: u64,
    /// Rejected: past the size limit ([`NetError::Oversized`]).
    pub oversized: u64,
    /// Rejected: bytes left over ([`NetError::TrailingBytes`]).
    pub trailing: u64,
    /// Rejected: not a valid encoding ([`NetError::Malformed`]).
    pub malformed: u64,
    /// Rejected: another protocol version ([`NetError::VersionMismatch`]).
    pub version_mismatch: u64,
}

impl DecodeStats {
    /// Records the outcome of one decode. Errors that are not decode errors (see
    /// [`NetError::is_decode_error`]) are not counted.
    pub fn record<T>(&mut self, result: &Result<T, NetError>) {
        match result {
            Ok(_) => self.accepted += 1,
            Err(error) => self.record_error(error),
        }
    }

    /// Records one rejected message. Errors that are not decode errors are not counted.
    pub fn record_error(&mut self, error: &NetError) {
        match error {
            NetError::Truncated => self.truncated += 1,
            NetError::Oversized { .. } => self.oversized += 1,
            NetError::TrailingBytes { .. } => self.trailing += 1,
            NetError::Malformed(_) => self.malformed += 1,
            NetError::VersionMismatch { .. } => self.version_mismatch += 1,
            _ => {}
        }
    }

    /// All rejected messages, of every kind.
    pub fn rejected(&self) -> u64 {
        self.truncated + self.oversized + self.trailing + self.malformed + self.version_mismatch
    }

    /// Accepted plus rejected.
    pub fn total(&self) -> u64 {
        self.accepted + self.rejected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sample {
        a: u32,
        name: String,
        list: Vec<u16>,
    }

    fn sample() -> Sample {
        Sample {
            a: 300,
            name: "abc".into(),
            list: vec![1, 2, 70_000u32 as u16],
        }
    }

    #[test]
    fn decode_with_limit_reads_past_the_message_limit_and_refuses_past_its_own() {
        let big = Sample {
            a: 1,
            name: "x".repeat(MAX_MESSAGE_BYTES + 10),
            list: vec![],
        };
        let bytes = encode_unlimited(&big).unwrap();
        assert!(bytes.len() > MAX_MESSAGE_BYTES);
        assert_eq!(decode_with_limit::<Sample>(&bytes, 1 << 20).unwrap(), big);
        assert!(matches!(
            decode_with_limit::<Sample>(&bytes, MAX_MESSAGE_BYTES),
            Err(NetError::Oversized {
                limit: MAX_MESSAGE_BYTES
            })
        ));
        // A short input announcing a long list is refused by the per-collection bound, whatever
        // the input limit.
        let mut lie = encode_unlimited(&sample()).unwrap();
        let at = lie.len() - 4;
        lie.truncate(at);
        lie.extend_from_slice(&[0xFC, 0xFF, 0xFF, 0xFF, 0x0F]);
        assert!(decode_with_limit::<Sample>(&lie, 1 << 10).is_err());
        assert!(matches!(
            decode_with_limit::<Sample>(&bytes[..bytes.len() - 1], 1 << 20),
            Err(NetError::Truncated)
        ));
    }

    #[test]
    fn round_trip_is_exact_and_varint_sized() {
        let bytes = encode(&sample()).unwrap();
        // 300 → 3 bytes (0xFB + u16), "abc" → 1 + 3, list → 1 + 1 + 1 + 1 (4464 < 65536 → 3).
        assert_eq!(bytes.len(), 3 + 4 + 1 + 1 + 1 + 3);
        assert_eq!(decode::<Sample>(&bytes).unwrap(), sample());
    }

    #[test]
    fn truncated_bytes_are_a_typed_error_and_counted() {
        let bytes = encode(&sample()).unwrap();
        let mut stats = DecodeStats::default();
        for cut in 0..bytes.len() {
            let result = decode_counted::<Sample>(&bytes[..cut], &mut stats);
            assert!(
                matches!(result, Err(NetError::Truncated)),
                "cut {cut}: {result:?}"
            );
        }
        assert_eq!(stats.truncated, bytes.len() as u64);
        assert_eq!(stats.rejected(), bytes.len() as u64);
        assert_eq!(stats.accepted, 0);
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        let mut bytes = encode(&sample()).unwrap();
        let consumed = bytes.len();
        bytes.extend_from_slice(&[0, 0]);
        let mut stats = DecodeStats::default();
        let result = decode_counted::<Sample>(&bytes, &mut stats);
        assert!(matches!(
            result,
            Err(NetError::TrailingBytes { consumed: c, trailing: 2 }) if c == consumed
        ));
        assert_eq!(stats.trailing, 1);
    }

    #[test]
    fn oversized_input_and_oversized_length_prefix_are_rejected() {
        let mut stats = DecodeStats::default();
        let huge = vec![0u8; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(
            decode_counted::<Vec<u8>>(&huge, &mut stats),
            Err(NetError::Oversized {
                limit: MAX_MESSAGE_BYTES
            })
        ));
        // A 5-byte message announcing a 1 MiB string: refused before any allocation.
        let mut prefix = vec![0xFC]; // u32 varint marker
        prefix.extend_from_slice(&(1u32 << 20).to_le_bytes());
        assert!(matches!(
            decode_counted::<String>(&prefix, &mut stats),
            Err(NetError::Oversized { .. })
        ));
        assert_eq!(stats.oversized, 2);
    }

    #[test]
    fn garbage_is_malformed() {
        let mut stats = DecodeStats::default();
        // 0xFF is not a valid varint marker in bincode standard config.
        let result = decode_counted::<u32>(&[0xFF, 1, 2, 3, 4, 5, 6, 7, 8], &mut stats);
        assert!(matches!(result, Err(NetError::Malformed(_))), "{result:?}");
        // Invalid UTF-8 in a string.
        let result = decode_counted::<String>(&[2, 0xC3, 0x28], &mut stats);
        assert!(matches!(result, Err(NetError::Malformed(_))), "{result:?}");
        assert_eq!(stats.malformed, 2);
    }

    #[test]
    fn max_decoded_len_is_the_longest_list_the_bound_admits() {
        use crate::bounded::seq_bytes;
        assert_eq!(max_decoded_len::<u8>(), MAX_MESSAGE_BYTES);
        assert_eq!(max_decoded_len::<()>(), MAX_MESSAGE_BYTES);
        assert_eq!(max_decoded_len::<Vec<u8>>(), 2048);
        // 40 bytes each: the inputs and two bitmasks (replaced, disconnected).
        assert_eq!(max_decoded_len::<crate::InputSet>(), 1024);
        assert_eq!(max_decoded_len::<crate::OwnerRecord>(), 4096);
        assert_eq!(max_decoded_len::<[u8; MAX_MESSAGE_BYTES + 1]>(), 0);
        let cases = [
            (max_decoded_len::<[u8; 3]>(), 3),
            (max_decoded_len::<[u8; 24]>(), 24),
            (max_decoded_len::<[u8; 48]>(), 48),
            (max_decoded_len::<[u8; 1000]>(), 1000),
        ];
        for (len, size) in cases {
            assert!(seq_bytes(len, size).unwrap() <= MAX_MESSAGE_BYTES, "{size}");
            assert!(
                seq_bytes(len + 1, size).unwrap() > MAX_MESSAGE_BYTES,
                "{size}"
            );
        }
    }

    #[test]
    fn encode_refuses_messages_above_the_limit() {
        // 65,536 bytes + a 5-byte length (0xFC marker + u32).
        let big = vec![7u8; MAX_MESSAGE_BYTES];
        let result = encode(&big);
        assert!(
            matches!(
                result,
                Err(NetError::MessageTooLarge { size, limit: MAX_MESSAGE_BYTES })
                    if size == MAX_MESSAGE_BYTES + 5
            ),
            "{result:?}"
        );
        // Exactly the limit is fine (65,533 bytes + a 3-byte length: 0xFB marker + u16).
        assert_eq!(
            encode(&vec![7u8; MAX_MESSAGE_BYTES - 3]).unwrap().len(),
            MAX_MESSAGE_BYTES
        );
    }
}
