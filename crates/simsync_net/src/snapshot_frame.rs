//! The container of an encoded snapshot ([`SnapshotFrame`]): a fixed frame, the
//! [`SnapshotHeader`] and the body, whatever the body holds. The deterministic session puts its
//! verified world in the body; the relay reads only the frame and the header, so it needs no
//! simulation to check a buddy's snapshot.

use std::borrow::Cow;
use std::hash::Hasher;

use bevy::prelude::Entity;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::codec::{MAX_MESSAGE_BYTES, decode_bounded_from_reader};
use crate::session_proto::{PlayerIndex, Tick};
use crate::state_hash::StateHasher;

/// The format version this build writes and reads (of the frame, the header and the body: a
/// change to any of them bumps it). A snapshot of another version is refused with
/// [`SnapshotError::WrongVersion`] (version 1, before the frame hashed its own lengths,
/// included). Version 3: Bevy 0.20 and Rapier 0.36 (their serialized physics state, and the
/// character controller's excluded entities and hit sub-shapes); version 2 was Bevy 0.19.
pub const SNAPSHOT_FORMAT_VERSION: u32 = 3;

/// The first four bytes of every encoded snapshot.
pub const SNAPSHOT_MAGIC: [u8; 4] = *b"SSNP";

/// Bytes of the fixed frame before the header.
pub const FRAME_BYTES: usize = 45;

/// Offset of the header length in the frame.
const HEADER_LEN_OFFSET: usize = 9;

/// Offset of the stored body length in the frame.
const STORED_LEN_OFFSET: usize = 13;

/// Offset of the decompressed body length in the frame.
const RAW_LEN_OFFSET: usize = 21;

/// Offset of the payload hash in the frame (where a payload that fails its hash is reported).
const HASH_OFFSET: usize = 29;

/// Offset of the frame hash (where a frame that fails its own hash is reported).
const FRAME_HASH_OFFSET: usize = 37;

/// Flag bit: the body is LZ4-compressed.
const FLAG_LZ4: u8 = 1;

/// The largest encoded snapshot header (64 KiB, the wire's message limit): what the relay reads
/// of a buddy's snapshot, so its header read never allocates more.
pub const MAX_SNAPSHOT_HEADER_BYTES: usize = MAX_MESSAGE_BYTES;

/// LZ4's block format makes at most this many bytes of one stored byte (a match length grows by
/// 255 per extension byte): a compressed body may not claim a decompressed length above
/// `LZ4_MAX_EXPANSION` × stored + [`LZ4_SLACK_BYTES`].
pub const LZ4_MAX_EXPANSION: u64 = 255;

/// Slack over [`LZ4_MAX_EXPANSION`] × stored for the last sequences of an LZ4 block.
pub const LZ4_SLACK_BYTES: u64 = 64;

/// Memory a decoded part may take in one collection buffer, per byte of the part: every element
/// of a list takes at least one encoded byte and at most 32 bytes in memory (an absent resource
/// value), and a `Vec` doubles its buffer, so an honest snapshot never needs more.
pub const DECODE_MEMORY_PER_BYTE: usize = 64;

/// The default largest snapshot decoded, in bytes, stored and decompressed alike: 64 MiB (a
/// 1,000-body Rapier pile is about 1.6 MB, ≈ 1.6 KB per body). What the deterministic
/// session's snapshot limits default to and the relay reads a header within. (A snapshot
/// *transfer* is bounded apart, by [`DEFAULT_MAX_SNAPSHOT_BYTES`](crate::DEFAULT_MAX_SNAPSHOT_BYTES).)
pub const DEFAULT_MAX_DECODED_SNAPSHOT_BYTES: usize = 64 * 1024 * 1024;

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
    /// The verified checksum of the world at `tick`.
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
        /// The limit (the session's snapshot limit, or the caller's).
        limit: usize,
    },
    /// A registered type present in the world has no snapshot serializer (see the
    /// deterministic session's snapshot rules).
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
    /// The snapshot's physics state is not consistent: an index or count inside Rapier's sets
    /// (islands, contact graph, solver or body indices, joints, broad phase, collider parents)
    /// does not point into the set it names. Such a snapshot passed its hashes (they are no
    /// MAC) but was written wrong or forged; it is refused before any system runs on it.
    #[error("inconsistent physics state in the snapshot: {structure}: {reason}")]
    InconsistentPhysics {
        /// The structure found wrong (such as "island manager" or "narrow phase").
        structure: String,
        /// The first broken rule.
        reason: String,
    },
    /// A collider's shape in the snapshot cannot be simulated: a size negative or not finite,
    /// a mesh index past its vertices, a tree leaf past its elements, a heightfield whose data
    /// is not its dimensions, a compound nesting a composite shape... Like
    /// [`SnapshotError::InconsistentPhysics`], such a snapshot passed its hashes but was written
    /// wrong or forged; it is refused before any system runs on it.
    #[error("invalid collider shape in the snapshot on {entity}: {reason}")]
    InvalidShape {
        /// The entity of the collider (its Rapier collider or its `Collider` component).
        entity: Entity,
        /// Where the shape was found and the first broken rule.
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

/// FNV-1a 64 of `parts` in order (the payload and frame hashes), with [`StateHasher`].
fn hash_of(parts: &[&[u8]]) -> u64 {
    let mut hasher = StateHasher::default();
    for part in parts {
        hasher.write(part);
    }
    hasher.finish()
}

/// Bodies smaller than this are never compressed.
const COMPRESS_FROM: usize = 4096;

/// An encoded snapshot, opened: its frame checked, its header decoded and its body
/// decompressed (not decoded). [`encode`](Self::encode) writes one,
/// [`open`](Self::open) and [`decode_body`](Self::decode_body) read one back,
/// [`read_header`](Self::read_header) reads only the header.
///
/// # Layout (format version 2)
///
/// A fixed frame of [`FRAME_BYTES`] bytes, little endian, then the header and the body:
///
/// | offset | bytes | field |
/// |-------:|------:|-------|
/// | 0 | 4 | magic `SSNP` |
/// | 4 | 4 | format version ([`SNAPSHOT_FORMAT_VERSION`]) |
/// | 8 | 1 | flags: bit 0 = body compressed with LZ4 (block format) |
/// | 9 | 4 | header length `h`, at most [`MAX_SNAPSHOT_HEADER_BYTES`] |
/// | 13 | 8 | stored body length `s` |
/// | 21 | 8 | body length once decompressed (equal to `s` when not compressed) |
/// | 29 | 8 | FNV-1a 64 of the header and the stored body (bytes 45..) |
/// | 37 | 8 | FNV-1a 64 of the frame's bytes 0..37 |
/// | 45 | `h` | header: bincode 2 (`standard()`, serde), never compressed |
/// | 45 + `h` | `s` | body: bincode 2, LZ4-compressed when that makes it smaller |
///
/// Reading allocates nothing before every check of the frame passed: magic and version (a
/// version-1 snapshot is [`SnapshotError::WrongVersion`]), the frame's own hash (a damaged
/// length is [`SnapshotError::Corrupt`] at byte 37, not a truncation), the lengths against the
/// caller's limit ([`SnapshotError::TooLarge`]), the byte count ([`SnapshotError::Truncated`]),
/// the payload hash ([`SnapshotError::Corrupt`] at byte 29), and a decompressed length LZ4 can
/// reach from the stored one (at most [`LZ4_MAX_EXPANSION`] × stored + [`LZ4_SLACK_BYTES`];
/// LZ4's block format expands no more). Then the body is decompressed and the parts decoded
/// with every collection's buffer bounded by [`DECODE_MEMORY_PER_BYTE`] × the part's length. So
/// no read makes one allocation above [`DECODE_MEMORY_PER_BYTE`] × (the decompressed length),
/// nor above the caller's limit, and [`read_header`](Self::read_header) (the relay's read) none
/// above [`MAX_SNAPSHOT_HEADER_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFrame<'a> {
    /// The decoded header.
    pub header: SnapshotHeader,
    /// The body, decompressed.
    body: Cow<'a, [u8]>,
    /// Where the body starts in the encoded bytes (error offsets count from here).
    body_offset: usize,
}

impl<'a> SnapshotFrame<'a> {
    /// `header` and `body` as an encoded snapshot: the body compressed with LZ4 when that makes
    /// it smaller.
    ///
    /// A header above [`MAX_SNAPSHOT_HEADER_BYTES`] (tens of thousands of registered types) is
    /// written but refused when read.
    pub fn encode<B: Serialize>(header: &SnapshotHeader, body: &B) -> Vec<u8> {
        let header = bincode::serde::encode_to_vec(header, config())
            .expect("encoding into a Vec cannot fail");
        let body =
            bincode::serde::encode_to_vec(body, config()).expect("encoding into a Vec cannot fail");
        let raw_len = body.len();
        let (flags, stored) = if raw_len >= COMPRESS_FROM {
            let compressed = lz4_flex::block::compress(&body);
            if compressed.len() < raw_len {
                (FLAG_LZ4, compressed)
            } else {
                (0, body)
            }
        } else {
            (0, body)
        };
        let mut out = Vec::with_capacity(FRAME_BYTES + header.len() + stored.len());
        out.extend_from_slice(&SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_le_bytes());
        out.push(flags);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&(stored.len() as u64).to_le_bytes());
        out.extend_from_slice(&(raw_len as u64).to_le_bytes());
        out.extend_from_slice(&hash_of(&[&header, &stored]).to_le_bytes());
        let frame_hash = hash_of(&[&out]);
        out.extend_from_slice(&frame_hash.to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&stored);
        out
    }

    /// Opens an encoded snapshot: checks the frame (refusing one above `max_bytes`, header and
    /// body, stored or decompressed, before allocating for it), decodes the header and
    /// decompresses the body.
    ///
    /// # Errors
    /// [`SnapshotError::Truncated`], [`SnapshotError::Corrupt`] (bad magic, unknown flags, a
    /// frame or payload that fails its hash, a decompressed length LZ4 cannot reach, a header
    /// that does not decode, bytes left over), [`SnapshotError::WrongVersion`],
    /// [`SnapshotError::TooLarge`]. Never panics.
    pub fn open(bytes: &'a [u8], max_bytes: usize) -> Result<Self, SnapshotError> {
        let frame = read_frame(bytes, max_bytes)?;
        let header = decode_header_part(bytes, &frame)?;
        let body = frame.decompressed_body(bytes)?;
        Ok(Self {
            header,
            body,
            body_offset: FRAME_BYTES + frame.header_len,
        })
    }

    /// Decodes the body as a `B`, every collection's buffer within [`DECODE_MEMORY_PER_BYTE`] ×
    /// the body's length and `max_bytes`.
    ///
    /// # Errors
    /// [`SnapshotError::Truncated`] or [`SnapshotError::Corrupt`] (naming the byte offset) for
    /// a body that does not decode or has bytes after it. Never panics.
    pub fn decode_body<B: DeserializeOwned>(&self, max_bytes: usize) -> Result<B, SnapshotError> {
        let mut reader = CountingReader {
            bytes: &self.body,
            at: 0,
        };
        let limit = part_budget(self.body.len(), max_bytes);
        let body: B = decode_part(&mut reader, self.body_offset, limit)?;
        if reader.at != reader.bytes.len() {
            return Err(SnapshotError::Corrupt {
                offset: self.body_offset + reader.at,
                what: format!(
                    "{} body bytes after the body",
                    reader.bytes.len() - reader.at
                ),
            });
        }
        Ok(body)
    }

    /// Decodes only the header of an encoded snapshot (the frame and both hashes are checked,
    /// the body is neither decompressed nor decoded): what the relay reads to check a buddy's
    /// snapshot without knowing the game. Makes no allocation above
    /// [`MAX_SNAPSHOT_HEADER_BYTES`], whatever the bytes.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn read_header(bytes: &[u8], max_bytes: usize) -> Result<SnapshotHeader, SnapshotError> {
        let frame = read_frame(bytes, max_bytes)?;
        decode_header_part(bytes, &frame)
    }
}

/// Decodes the header of checked bytes: every collection within [`DECODE_MEMORY_PER_BYTE`] ×
/// its length and [`MAX_SNAPSHOT_HEADER_BYTES`].
fn decode_header_part(bytes: &[u8], frame: &Frame) -> Result<SnapshotHeader, SnapshotError> {
    let part = &bytes[FRAME_BYTES..FRAME_BYTES + frame.header_len];
    let mut reader = CountingReader { bytes: part, at: 0 };
    let limit = part_budget(part.len(), MAX_SNAPSHOT_HEADER_BYTES);
    let header: SnapshotHeader = decode_part(&mut reader, FRAME_BYTES, limit)?;
    if reader.at != part.len() {
        return Err(SnapshotError::Corrupt {
            offset: FRAME_BYTES + reader.at,
            what: format!("{} header bytes after the header", part.len() - reader.at),
        });
    }
    if header.format_version != SNAPSHOT_FORMAT_VERSION {
        return Err(SnapshotError::WrongVersion {
            found: header.format_version,
            expected: SNAPSHOT_FORMAT_VERSION,
        });
    }
    Ok(header)
}

/// The memory one collection of a `len`-byte part may take: [`DECODE_MEMORY_PER_BYTE`] × `len`,
/// at most `cap`.
fn part_budget(len: usize, cap: usize) -> usize {
    len.saturating_mul(DECODE_MEMORY_PER_BYTE).min(cap)
}

/// The checked frame of an encoded snapshot.
struct Frame {
    flags: u8,
    header_len: usize,
    raw_len: usize,
}

impl Frame {
    /// The body of checked `bytes`, decompressed when it is LZ4 (one allocation of the
    /// decompressed length, which [`read_frame`] bounded).
    fn decompressed_body<'a>(&self, bytes: &'a [u8]) -> Result<Cow<'a, [u8]>, SnapshotError> {
        let stored = &bytes[FRAME_BYTES + self.header_len..];
        if self.flags & FLAG_LZ4 == 0 {
            return Ok(Cow::Borrowed(stored));
        }
        let raw = lz4_flex::block::decompress(stored, self.raw_len).map_err(|error| {
            SnapshotError::Corrupt {
                offset: FRAME_BYTES + self.header_len,
                what: format!("LZ4 body: {error}"),
            }
        })?;
        if raw.len() != self.raw_len {
            return Err(SnapshotError::Corrupt {
                offset: RAW_LEN_OFFSET,
                what: format!(
                    "decompressed to {} bytes, the frame says {}",
                    raw.len(),
                    self.raw_len
                ),
            });
        }
        Ok(Cow::Owned(raw))
    }
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// Checks magic and version, and that the frame is whole: [`SnapshotError::Truncated`] before
/// [`FRAME_BYTES`].
fn check_magic_and_version(bytes: &[u8]) -> Result<(), SnapshotError> {
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
    let truncated = SnapshotError::Truncated {
        offset: bytes.len(),
        len: bytes.len(),
        needed: FRAME_BYTES,
    };
    if bytes.len() < 8 {
        return Err(truncated);
    }
    let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if version != SNAPSHOT_FORMAT_VERSION {
        return Err(SnapshotError::WrongVersion {
            found: version,
            expected: SNAPSHOT_FORMAT_VERSION,
        });
    }
    if bytes.len() < FRAME_BYTES {
        return Err(truncated);
    }
    Ok(())
}

/// Checks the frame before anything is allocated: magic, version, the frame's own hash, flags,
/// the lengths against `max_bytes` and against each other, the byte count and the payload hash.
fn read_frame(bytes: &[u8], max_bytes: usize) -> Result<Frame, SnapshotError> {
    check_magic_and_version(bytes)?;
    if hash_of(&[&bytes[..FRAME_HASH_OFFSET]]) != read_u64(bytes, FRAME_HASH_OFFSET) {
        return Err(SnapshotError::Corrupt {
            offset: FRAME_HASH_OFFSET,
            what: "the frame does not match its hash (a damaged flag or length)".into(),
        });
    }
    let flags = bytes[8];
    if flags & !FLAG_LZ4 != 0 {
        return Err(SnapshotError::Corrupt {
            offset: 8,
            what: format!("unknown flags {flags:#04x}"),
        });
    }
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[HEADER_LEN_OFFSET..HEADER_LEN_OFFSET + 4]);
    let header_len = u64::from(u32::from_le_bytes(word));
    let stored_len = read_u64(bytes, STORED_LEN_OFFSET);
    let raw_len = read_u64(bytes, RAW_LEN_OFFSET);
    check_lengths(flags, header_len, stored_len, raw_len, max_bytes)?;
    // All three are at most `max_bytes`, a `usize`, and so is their sum.
    let (header_len, stored_len, raw_len) =
        (header_len as usize, stored_len as usize, raw_len as usize);
    let total = FRAME_BYTES + header_len + stored_len;
    if bytes.len() < total {
        return Err(SnapshotError::Truncated {
            offset: bytes.len(),
            len: bytes.len(),
            needed: total,
        });
    }
    if bytes.len() > total {
        return Err(SnapshotError::Corrupt {
            offset: total,
            what: format!("{} bytes after the snapshot", bytes.len() - total),
        });
    }
    if hash_of(&[&bytes[FRAME_BYTES..]]) != read_u64(bytes, HASH_OFFSET) {
        return Err(SnapshotError::Corrupt {
            offset: HASH_OFFSET,
            what: "the header and body do not match their hash".into(),
        });
    }
    Ok(Frame {
        flags,
        header_len,
        raw_len,
    })
}

/// The lengths of a frame that passed its hash: the header within
/// [`MAX_SNAPSHOT_HEADER_BYTES`], header and body (stored and decompressed) within `max_bytes`,
/// and a decompressed length the stored bytes can hold.
fn check_lengths(
    flags: u8,
    header_len: u64,
    stored_len: u64,
    raw_len: u64,
    max_bytes: usize,
) -> Result<(), SnapshotError> {
    if header_len > MAX_SNAPSHOT_HEADER_BYTES as u64 {
        return Err(SnapshotError::TooLarge {
            size: header_len,
            limit: MAX_SNAPSHOT_HEADER_BYTES,
        });
    }
    for size in [
        header_len.saturating_add(stored_len),
        header_len.saturating_add(raw_len),
    ] {
        if size > max_bytes as u64 {
            return Err(SnapshotError::TooLarge {
                size,
                limit: max_bytes,
            });
        }
    }
    if flags & FLAG_LZ4 == 0 && raw_len != stored_len {
        return Err(SnapshotError::Corrupt {
            offset: RAW_LEN_OFFSET,
            what: format!("uncompressed body of {raw_len} bytes stored in {stored_len}"),
        });
    }
    let reachable = stored_len
        .saturating_mul(LZ4_MAX_EXPANSION)
        .saturating_add(LZ4_SLACK_BYTES);
    if flags & FLAG_LZ4 != 0 && raw_len > reachable {
        return Err(SnapshotError::Corrupt {
            offset: RAW_LEN_OFFSET,
            what: format!(
                "a body of {raw_len} bytes cannot decompress from {stored_len} (LZ4 makes at \
                 most {LZ4_MAX_EXPANSION} bytes of one, plus {LZ4_SLACK_BYTES})"
            ),
        });
    }
    Ok(())
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

/// Decodes one part (header or body) starting at `offset` in the encoded bytes (counted in the
/// decompressed body for a compressed one): a string's length is bounded by the part's size,
/// every collection's buffer by `collection_limit` bytes (the codec's bounded decoder).
fn decode_part<T: serde::de::DeserializeOwned>(
    reader: &mut CountingReader<'_>,
    offset: usize,
    collection_limit: usize,
) -> Result<T, SnapshotError> {
    fn run<T: serde::de::DeserializeOwned, const N: usize>(
        reader: &mut CountingReader<'_>,
        collection_limit: usize,
    ) -> Result<T, bincode::error::DecodeError> {
        decode_bounded_from_reader(reader, config().with_limit::<N>(), collection_limit)
    }
    let limit = reader.bytes.len();
    macro_rules! by_limit {
        ($($bits:literal)*) => {
            match limit.saturating_mul(8).saturating_add(64).next_power_of_two().trailing_zeros() {
                $($bits => run::<T, { 1usize << $bits }>(reader, collection_limit),)*
                _ => run::<T, { 1usize << 31 }>(reader, collection_limit),
            }
        };
    }
    let result = by_limit!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30);
    result.map_err(|error| {
        let at = offset + reader.at;
        match error {
            bincode::error::DecodeError::UnexpectedEnd { additional } => SnapshotError::Truncated {
                offset: at,
                len: offset + reader.bytes.len(),
                needed: at + additional,
            },
            other => SnapshotError::Corrupt {
                offset: at,
                what: other.to_string(),
            },
        }
    })
}
