//! The snapshot format: [`WorldSnapshot`] (a [`SnapshotHeader`] and the body), its byte
//! encoding ([`WorldSnapshot::encode`], [`WorldSnapshot::decode`]) and [`SnapshotError`]
//! ([snapshots](crate::rules#snapshots)).
//!
//! # Layout
//!
//! A fixed frame of [`FRAME_BYTES`] bytes, little endian, then the payload:
//!
//! | offset | bytes | field |
//! |-------:|------:|-------|
//! | 0 | 4 | magic `SSNP` |
//! | 4 | 4 | format version ([`SNAPSHOT_FORMAT_VERSION`]) |
//! | 8 | 1 | flags: bit 0 = payload compressed with LZ4 (block format) |
//! | 9 | 8 | stored payload length |
//! | 17 | 8 | payload length once decompressed (equal to the stored length when not compressed) |
//! | 25 | 8 | FNV-1a 64 hash of the stored payload |
//! | 33 | … | payload: bincode 2 (`standard()`, serde) of the header, then of the body |
//!
//! [`WorldSnapshot::decode`] checks the frame before anything else: both lengths against the
//! caller's limit *before allocating* (a snapshot above it is [`SnapshotError::TooLarge`]), the
//! byte count against the stored length ([`SnapshotError::Truncated`]), then the hash
//! ([`SnapshotError::Corrupt`] at the first byte of the hash field, so a flipped byte anywhere in
//! the payload is caught before a value is decoded).

use std::borrow::Cow;
use std::hash::Hasher;

use bevy::prelude::*;
use serde::{Deserialize, Serialize};

use crate::checksum::StateHasher;
use crate::tick::{PlayerIndex, Tick};

/// The format version this build writes and reads. A snapshot of another version is refused
/// with [`SnapshotError::WrongVersion`].
pub const SNAPSHOT_FORMAT_VERSION: u32 = 1;

/// The first four bytes of every encoded snapshot.
pub const SNAPSHOT_MAGIC: [u8; 4] = *b"SSNP";

/// Bytes of the fixed frame before the payload.
pub const FRAME_BYTES: usize = 33;

/// Offset of the payload hash in the frame (where a payload that fails its hash is reported).
const HASH_OFFSET: usize = 25;

/// Flag bit: the payload is LZ4-compressed.
const FLAG_LZ4: u8 = 1;

/// The default largest snapshot [`SnapshotLimits`] accepts: 64 MiB (a 1,000-body Rapier pile is
/// about 1.6 MB, ≈ 1.6 KB per body).
pub const DEFAULT_MAX_SNAPSHOT_BYTES: usize = 64 * 1024 * 1024;

/// Size limits of snapshots (main-app resource, set with
/// [`DeterministicPlugin::snapshots`](crate::DeterministicPlugin::snapshots)).
#[derive(Resource, Debug, Clone, Copy, PartialEq, Eq, Reflect)]
#[reflect(Resource)]
pub struct SnapshotLimits {
    /// The largest snapshot decoded, in bytes, stored and decompressed alike; checked before
    /// anything is allocated for it.
    pub max_bytes: usize,
}

impl Default for SnapshotLimits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_SNAPSHOT_BYTES,
        }
    }
}

/// What a snapshot says about itself and the game it was taken of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    /// The format version ([`SNAPSHOT_FORMAT_VERSION`]).
    pub format_version: u32,
    /// The session's tick rate, in ticks per second.
    pub tick_rate: u32,
    /// The verified tick the snapshot holds: the session that loads it continues from
    /// `tick + 1`.
    pub tick: Tick,
    /// The verified checksum of the world at `tick` ([checksums](crate::rules#checksums)).
    pub checksum: u64,
    /// Players in the session.
    pub players: PlayerIndex,
    /// Every registered type by its stable name (`type_path`-like Rust type name): the
    /// components, the relationships, then the resources, each in registration order.
    pub registered_types: Vec<String>,
    /// A hash of what must match for the snapshot to load: the registered types in order, tick
    /// rate, players and the simulation entity capacity.
    pub game_fingerprint: u64,
}

/// A serialized snapshot of the verified world at one tick: header and body.
///
/// Taken with [`capture_snapshot`](crate::capture_snapshot), loaded with
/// [`load_snapshot`](crate::load_snapshot); bytes with [`encode`](Self::encode) and
/// [`decode`](Self::decode).
#[derive(Debug, Clone, PartialEq)]
pub struct WorldSnapshot {
    /// The header.
    pub header: SnapshotHeader,
    pub(crate) body: SnapshotBody,
}

/// Everything of the verified world and the session position at the header's tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SnapshotBody {
    pub world: WorldState,
    /// The tick the session continues from (`tick + 1`: the input-buffer position).
    pub continue_from: Tick,
    /// The tick the simulation event ledgers are settled through (`tick`).
    pub events_settled_through: Tick,
}

/// One simulation world's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WorldState {
    /// Every slot handed out so far, in slot order: its generation and whether it is live.
    pub slots: Vec<SlotState>,
    /// Synchronized entities that are not simulation entities (Rapier context entities), sorted.
    pub contexts: Vec<Entity>,
    /// One block per registered component type, in registration order.
    pub components: Vec<ComponentBlock>,
    /// One block per registered relationship type, in registration order.
    pub relationships: Vec<RelationshipBlock>,
    /// One value (or absence) per registered resource type, in registration order.
    pub resources: Vec<Option<StoredValue>>,
}

/// A simulation entity slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SlotState {
    /// The generation of the slot's entity index.
    pub generation: u32,
    /// Whether a live simulation entity holds the slot.
    pub live: bool,
}

/// A value with its change ticks, as offsets from the world's last tick mark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredValue {
    pub changed: i32,
    pub added: i32,
    pub bytes: Vec<u8>,
}

/// Every value of one component type, by entity (entities in slot order, contexts last).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ComponentBlock {
    pub values: Vec<(Entity, StoredValue)>,
}

/// One relationship type: each target with its sources in the target's order, and the change
/// ticks of both sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RelationshipBlock {
    pub targets: Vec<RelationshipTarget>,
}

/// A relationship target and its sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RelationshipTarget {
    pub target: Entity,
    /// Change ticks of the target's collection component.
    pub ticks: (i32, i32),
    /// The sources in order, with the change ticks of their relationship component.
    pub sources: Vec<(Entity, (i32, i32))>,
}

/// Why a snapshot could not be decoded, captured or loaded. Every variant names what and where
/// (a byte offset into the encoded bytes, a tick, a type or an entity).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// The bytes end before the snapshot does.
    #[error(
        "snapshot truncated: {len} bytes, the snapshot needs at least {needed} (at byte {offset})"
    )]
    Truncated {
        /// Where the missing bytes start.
        offset: usize,
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        needed: usize,
    },
    /// The bytes are not a valid snapshot at `offset`.
    #[error("corrupt snapshot at byte {offset}: {what}")]
    Corrupt {
        /// The first byte found wrong (into the encoded bytes; into the decompressed payload,
        /// counted from [`FRAME_BYTES`], for a compressed one).
        offset: usize,
        /// What is wrong.
        what: String,
    },
    /// A snapshot of another format version.
    #[error("snapshot format version {found}, this build reads version {expected}")]
    WrongVersion {
        /// The version in the snapshot.
        found: u32,
        /// [`SNAPSHOT_FORMAT_VERSION`].
        expected: u32,
    },
    /// A snapshot of another game (registered types, tick rate, players or entity capacity
    /// differ).
    #[error("snapshot of another game: {what} is {found} in the snapshot, {expected} here")]
    ForeignGame {
        /// What differs.
        what: String,
        /// This game's value.
        expected: String,
        /// The snapshot's value.
        found: String,
    },
    /// The snapshot is larger than the configured limit (refused before allocating it).
    #[error("snapshot of {size} bytes is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The size the snapshot declares (or has, when encoding).
        size: u64,
        /// [`SnapshotLimits::max_bytes`].
        limit: usize,
    },
    /// A registered type present in the world has no snapshot serializer
    /// ([registering serializers](crate::rules#snapshots)).
    #[error(
        "`{type_name}` cannot be serialized: register it with a `_serde` method or make it reflectable (#[reflect(Component)] + register_type)"
    )]
    NotSerializable {
        /// The type.
        type_name: String,
    },
    /// A value failed to serialize or deserialize.
    #[error("value of `{type_name}`{} failed: {reason}", entity.map(|e| format!(" on {e}")).unwrap_or_default())]
    Value {
        /// The type.
        type_name: String,
        /// The entity, for a component.
        entity: Option<Entity>,
        /// The serializer's error.
        reason: String,
    },
    /// The loaded world's checksum differs from the snapshot's.
    #[error(
        "checksum mismatch at tick {tick}: the snapshot says {expected:#018x}, the loaded world has {found:#018x}"
    )]
    ChecksumMismatch {
        /// The snapshot's tick.
        tick: Tick,
        /// The snapshot's checksum.
        expected: u64,
        /// The loaded world's.
        found: u64,
    },
    /// No deterministic session with built worlds in this App (plugin missing, not yet
    /// cleaned up, or another input type).
    #[error("no deterministic session with built simulation worlds")]
    NoSession,
    /// The session's verified world is past the snapshot's tick.
    #[error("the session is at verified tick {verified}, past the snapshot's tick {tick}")]
    SessionAhead {
        /// The snapshot's tick.
        tick: Tick,
        /// The session's verified tick.
        verified: Tick,
    },
}

/// FNV-1a 64 of `bytes` (the payload hash of the frame).
fn payload_hash(bytes: &[u8]) -> u64 {
    let mut hasher = StateHasher::default();
    hasher.write(bytes);
    hasher.finish()
}

/// Payloads smaller than this are never compressed.
const COMPRESS_FROM: usize = 4096;

impl WorldSnapshot {
    /// The snapshot as bytes ([layout](crate::snapshot::format)): compressed with LZ4 when that makes it smaller.
    pub fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        bincode::serde::encode_into_std_write(&self.header, &mut payload, config())
            .expect("encoding into a Vec cannot fail");
        bincode::serde::encode_into_std_write(&self.body, &mut payload, config())
            .expect("encoding into a Vec cannot fail");
        let raw_len = payload.len();
        let (flags, stored) = if raw_len >= COMPRESS_FROM {
            let compressed = lz4_flex::block::compress(&payload);
            if compressed.len() < raw_len {
                (FLAG_LZ4, compressed)
            } else {
                (0, payload)
            }
        } else {
            (0, payload)
        };
        let mut out = Vec::with_capacity(FRAME_BYTES + stored.len());
        out.extend_from_slice(&SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_le_bytes());
        out.push(flags);
        out.extend_from_slice(&(stored.len() as u64).to_le_bytes());
        out.extend_from_slice(&(raw_len as u64).to_le_bytes());
        out.extend_from_slice(&payload_hash(&stored).to_le_bytes());
        out.extend_from_slice(&stored);
        out
    }

    /// Decodes a snapshot, refusing one above `max_bytes` (stored or decompressed) before
    /// allocating for it.
    ///
    /// # Errors
    /// [`SnapshotError::Truncated`], [`SnapshotError::Corrupt`] (bad magic, unknown flags, a
    /// payload that fails its hash or does not decode, bytes left over),
    /// [`SnapshotError::WrongVersion`], [`SnapshotError::TooLarge`]. Never panics.
    pub fn decode(bytes: &[u8], max_bytes: usize) -> Result<Self, SnapshotError> {
        decode_payload(&payload(bytes, max_bytes)?)
    }

    /// Decodes only the header of an encoded snapshot (the frame is checked and the payload
    /// decompressed, but the world is not decoded): what the relay reads to check a buddy's
    /// snapshot without knowing the game ([late join](crate::rules#late-join-and-rejoin-from-a-snapshot)).
    ///
    /// # Errors
    /// As [`decode`](Self::decode), except that a body that would not decode is not noticed.
    pub fn decode_header(bytes: &[u8], max_bytes: usize) -> Result<SnapshotHeader, SnapshotError> {
        let payload = payload(bytes, max_bytes)?;
        let payload: &[u8] = &payload;
        let mut reader = CountingReader {
            bytes: payload,
            at: 0,
        };
        let header: SnapshotHeader = decode_part(&mut reader, payload.len())?;
        if header.format_version != SNAPSHOT_FORMAT_VERSION {
            return Err(SnapshotError::WrongVersion {
                found: header.format_version,
                expected: SNAPSHOT_FORMAT_VERSION,
            });
        }
        Ok(header)
    }
}

/// The payload of an encoded snapshot: the frame checked (size limit before allocating), then
/// decompressed when it is LZ4 and checked against the length the frame states.
fn payload(bytes: &[u8], max_bytes: usize) -> Result<Cow<'_, [u8]>, SnapshotError> {
    let frame = read_frame(bytes, max_bytes)?;
    let stored = &bytes[FRAME_BYTES..];
    if frame.flags & FLAG_LZ4 == 0 {
        return Ok(Cow::Borrowed(stored));
    }
    let raw = lz4_flex::block::decompress(stored, frame.raw_len).map_err(|error| {
        SnapshotError::Corrupt {
            offset: FRAME_BYTES,
            what: format!("LZ4 payload: {error}"),
        }
    })?;
    if raw.len() != frame.raw_len {
        return Err(SnapshotError::Corrupt {
            offset: 17,
            what: format!(
                "decompressed to {} bytes, the frame says {}",
                raw.len(),
                frame.raw_len
            ),
        });
    }
    Ok(Cow::Owned(raw))
}

/// The checked frame of an encoded snapshot.
struct Frame {
    flags: u8,
    raw_len: usize,
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// Checks the frame: magic, version, flags, both lengths against `max_bytes`, the byte count
/// and the payload hash.
fn read_frame(bytes: &[u8], max_bytes: usize) -> Result<Frame, SnapshotError> {
    let truncated = |needed: usize| SnapshotError::Truncated {
        offset: bytes.len(),
        len: bytes.len(),
        needed,
    };
    let magic_len = bytes.len().min(4);
    if bytes[..magic_len] != SNAPSHOT_MAGIC[..magic_len] {
        let offset = (0..magic_len)
            .find(|i| bytes[*i] != SNAPSHOT_MAGIC[*i])
            .unwrap_or(0);
        return Err(SnapshotError::Corrupt {
            offset,
            what: "not a snapshot (magic bytes differ)".into(),
        });
    }
    if bytes.len() < 8 {
        return Err(truncated(FRAME_BYTES));
    }
    let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if version != SNAPSHOT_FORMAT_VERSION {
        return Err(SnapshotError::WrongVersion {
            found: version,
            expected: SNAPSHOT_FORMAT_VERSION,
        });
    }
    if bytes.len() < FRAME_BYTES {
        return Err(truncated(FRAME_BYTES));
    }
    let flags = bytes[8];
    if flags & !FLAG_LZ4 != 0 {
        return Err(SnapshotError::Corrupt {
            offset: 8,
            what: format!("unknown flags {flags:#04x}"),
        });
    }
    let stored_len = read_u64(bytes, 9);
    let raw_len = read_u64(bytes, 17);
    for size in [stored_len, raw_len] {
        if size > max_bytes as u64 {
            return Err(SnapshotError::TooLarge {
                size,
                limit: max_bytes,
            });
        }
    }
    if flags & FLAG_LZ4 == 0 && raw_len != stored_len {
        return Err(SnapshotError::Corrupt {
            offset: 17,
            what: format!("uncompressed payload of {raw_len} bytes stored in {stored_len}"),
        });
    }
    // Both lengths are at most `max_bytes`, a `usize`.
    let (stored_len, raw_len) = (stored_len as usize, raw_len as usize);
    let total = FRAME_BYTES + stored_len;
    if bytes.len() < total {
        return Err(truncated(total));
    }
    if bytes.len() > total {
        return Err(SnapshotError::Corrupt {
            offset: total,
            what: format!("{} bytes after the snapshot", bytes.len() - total),
        });
    }
    let hash = read_u64(bytes, HASH_OFFSET);
    if payload_hash(&bytes[FRAME_BYTES..]) != hash {
        return Err(SnapshotError::Corrupt {
            offset: HASH_OFFSET,
            what: "the payload does not match its hash".into(),
        });
    }
    Ok(Frame { flags, raw_len })
}

/// The bincode configuration of the payload (the crate's codec style).
fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// A bincode reader over a slice that remembers how far it got, so a decode error can name
/// its byte offset.
struct CountingReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl bincode::de::read::Reader for CountingReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> Result<(), bincode::error::DecodeError> {
        let end = self
            .at
            .checked_add(out.len())
            .filter(|end| *end <= self.bytes.len());
        let Some(end) = end else {
            return Err(bincode::error::DecodeError::UnexpectedEnd {
                additional: self.at + out.len() - self.bytes.len(),
            });
        };
        out.copy_from_slice(&self.bytes[self.at..end]);
        self.at = end;
        Ok(())
    }
}

/// Decodes the header and body from the (decompressed) payload; every length inside is
/// bounded by the payload's own size.
fn decode_payload(payload: &[u8]) -> Result<WorldSnapshot, SnapshotError> {
    let mut reader = CountingReader {
        bytes: payload,
        at: 0,
    };
    let header: SnapshotHeader = decode_part(&mut reader, payload.len())?;
    if header.format_version != SNAPSHOT_FORMAT_VERSION {
        return Err(SnapshotError::WrongVersion {
            found: header.format_version,
            expected: SNAPSHOT_FORMAT_VERSION,
        });
    }
    let body: SnapshotBody = decode_part(&mut reader, payload.len())?;
    if reader.at != payload.len() {
        return Err(SnapshotError::Corrupt {
            offset: FRAME_BYTES + reader.at,
            what: format!("{} payload bytes after the body", payload.len() - reader.at),
        });
    }
    Ok(WorldSnapshot { header, body })
}

fn decode_part<T: serde::de::DeserializeOwned>(
    reader: &mut CountingReader<'_>,
    limit: usize,
) -> Result<T, SnapshotError> {
    fn run<T: serde::de::DeserializeOwned, const N: usize>(
        reader: &mut CountingReader<'_>,
    ) -> Result<T, bincode::error::DecodeError> {
        bincode::serde::decode_from_reader(reader, config().with_limit::<N>())
    }
    macro_rules! by_limit {
        ($($bits:literal)*) => {
            match limit.saturating_mul(8).saturating_add(64).next_power_of_two().trailing_zeros() {
                $($bits => run::<T, { 1usize << $bits }>(reader),)*
                _ => run::<T, { 1usize << 31 }>(reader),
            }
        };
    }
    let result = by_limit!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30);
    result.map_err(|error| {
        let offset = FRAME_BYTES + reader.at;
        match error {
            bincode::error::DecodeError::UnexpectedEnd { additional } => SnapshotError::Truncated {
                offset,
                len: FRAME_BYTES + reader.bytes.len(),
                needed: FRAME_BYTES + reader.at + additional,
            },
            other => SnapshotError::Corrupt {
                offset,
                what: other.to_string(),
            },
        }
    })
}

/// The game fingerprint of a header: FNV-1a 64 over the registered type names, tick rate,
/// players and simulation entity capacity.
pub(crate) fn game_fingerprint(
    registered_types: &[String],
    tick_rate: u32,
    players: PlayerIndex,
    capacity: u32,
) -> u64 {
    let mut hasher = StateHasher::default();
    hasher.write_u64(registered_types.len() as u64);
    for name in registered_types {
        hasher.write_str(name);
    }
    hasher.write_u32(tick_rate);
    hasher.write_u8(players);
    hasher.write_u32(capacity);
    hasher.finish()
}
