//! The desync dump file: its data ([`DesyncDump`]) and its versioned, checked encoding.
//!
//! Layout of a dump file (all integers little endian):
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | magic `SIMSDUMP` |
//! | 8 | 2 | format version ([`DUMP_FORMAT_VERSION`]) |
//! | 10 | 8 | body length `n` |
//! | 18 | 8 | body hash (SipHash-1-3 with zero keys, [`StateHasher`]) |
//! | 26 | `n` | body: the [`DesyncDump`] in bincode 2 (the wire layout of `simsync_net`) |
//!
//! Why bincode and not RON: a dump holds one value per field of every registered component of
//! every simulation entity, so it is large; bincode keeps it compact and decodes it with the
//! same allocation bound as network messages (`simsync_net::decode_with_limit`). The field
//! values are already text inside the dump, and `diff` / [`Display`](std::fmt::Display) print
//! them for humans, so a text format would add size without adding readability.

use std::fmt;
use std::hash::Hasher;

use serde::{Deserialize, Serialize};

use crate::checksum::{ComponentBreakdown, StateHasher};
pub use crate::config::DEFAULT_MAX_DUMP_BYTES;
use crate::tick::{PlayerIndex, Tick};

/// The format version of dump files this build writes and reads. Version 2: Bevy 0.20 and Rapier
/// 0.36 (their component values); version 1 was Bevy 0.19.
pub const DUMP_FORMAT_VERSION: u16 = 2;

/// The first bytes of every dump file.
pub const DUMP_MAGIC: [u8; 8] = *b"SIMSDUMP";

/// Bytes before the body.
pub const DUMP_HEADER_BYTES: usize = 26;

/// Which world a dump was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DumpedWorld {
    /// The verified world (confirmed inputs only).
    Verified,
    /// The predicted world, as it was after predicting the tick.
    Predicted,
}

/// Why a dump was written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DumpReason {
    /// The prediction check (`verify_predictions`) found the predicted state of the tick unequal
    /// to the verified state with the same inputs.
    PredictionMismatch,
    /// The relay judged the checksums of `tick` unequal and named `players`. The dump holds the
    /// verified world of `tick` or of the tick before it (a pair is written); of a later tick
    /// only when `tick` was no longer kept when the report arrived (see
    /// [`DesyncDump::breakdowns`] for the state of `tick` itself then).
    ServerDesync {
        /// The desynced tick.
        tick: Tick,
        /// The players the relay named.
        players: Vec<PlayerIndex>,
    },
    /// A replay's recorded checksum of the tick differs from the replayed one.
    ReplayMismatch {
        /// The recorded checksum.
        recorded: u64,
        /// The replayed checksum.
        replayed: u64,
    },
    /// Written on request (`write_desync_dump`).
    Requested,
}

/// The registered types of a game, in registration order: two dumps are comparable only when
/// their fingerprints are equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct GameFingerprint {
    /// Registered component type names.
    pub components: Vec<String>,
    /// Registered resource type names.
    pub resources: Vec<String>,
}

impl GameFingerprint {
    /// A 64-bit hash of the fingerprint (for headers and logs).
    pub fn hash64(&self) -> u64 {
        let mut h = StateHasher::default();
        for name in self.components.iter().chain(&self.resources) {
            h.write_str(name);
        }
        h.write_usize(self.components.len());
        h.finish()
    }
}

/// A dump's header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpHeader {
    /// The tick the world had simulated when dumped.
    pub tick: Tick,
    /// The world dumped.
    pub world: DumpedWorld,
    /// Why.
    pub reason: DumpReason,
    /// The registered types.
    pub fingerprint: GameFingerprint,
    /// The world's checksum (hashed registrations only) at `tick`.
    pub checksum: u64,
    /// The player whose App wrote the dump (the first local player), if known.
    pub writer: Option<PlayerIndex>,
}

/// One field of a reflected value: its path (`translation.x`, `0`, `[3]`; empty for the whole
/// value) and its value as `Debug` text (floats in Rust's shortest exact form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedField {
    /// The field's path inside the value.
    pub path: String,
    /// The value.
    pub value: String,
}

/// One registered component of one entity, or one registered resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedValue {
    /// The type's name.
    pub type_name: String,
    /// The value's digest (the full prediction check's: `SimHash`, `Debug` text or reflection);
    /// `None` when the type has none of these and cannot be compared.
    pub hash: Option<u64>,
    /// The value field by field, through Bevy reflection; `None` when the type is not reflected
    /// in the simulation world's type registry (hash only).
    pub fields: Option<Vec<DumpedField>>,
}

/// One simulation entity: its slot, generation and registered components.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedEntity {
    /// Its slot in the reserved id range ([`ReservedSlots`](crate::ReservedSlots)).
    pub slot: u32,
    /// Its generation (`Entity::generation().to_bits()`).
    pub generation: u32,
    /// Its registered components (present ones only), in registration order; relationships
    /// last.
    pub components: Vec<DumpedValue>,
}

/// One player's input of the dumped tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedInput {
    /// The player.
    pub player: PlayerIndex,
    /// Confirmed or predicted (as the world simulated it).
    pub status: String,
    /// The input's `Debug` text.
    pub value: String,
}

/// The state of one simulation world at one tick, for finding what differs between two peers
/// or two runs ([desync dumps](crate::rules#desync-dumps)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesyncDump {
    /// What, when, why.
    pub header: DumpHeader,
    /// Every live simulation entity in slot order.
    pub entities: Vec<DumpedEntity>,
    /// Every registered resource that is present.
    pub resources: Vec<DumpedValue>,
    /// The inputs of the tick, every player.
    pub inputs: Vec<DumpedInput>,
    /// Per-component hash breakdowns of recent verified ticks, oldest first (kept by the
    /// session when dumps are on; the state of a desynced tick already past).
    pub breakdowns: Vec<ComponentBreakdown>,
}

/// Why a dump could not be read or written. Offsets are byte offsets in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    /// The bytes end before the header or the body does.
    #[error("dump truncated: {needed} bytes needed at offset {offset}, the file has {len}")]
    Truncated {
        /// Where the missing part starts.
        offset: usize,
        /// How many bytes the part needs.
        needed: usize,
        /// The file's length.
        len: usize,
    },
    /// The file does not start with the dump magic, `SIMSDUMP`.
    #[error("not a desync dump: bad magic at offset 0 ({found:02x?})")]
    NotADump {
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// Another format version.
    #[error("dump format version {found} at offset 8, this build reads {expected}")]
    WrongVersion {
        /// The file's version.
        found: u16,
        /// [`DUMP_FORMAT_VERSION`].
        expected: u16,
    },
    /// The body does not hash to the header's hash, or does not decode.
    #[error("dump corrupt at offset {offset}: {detail}")]
    Corrupt {
        /// Where (the body's start when the body fails as a whole).
        offset: usize,
        /// What.
        detail: String,
    },
    /// The file (or its announced body) is larger than the limit; refused before reading it.
    #[error("dump of {size} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// The size.
        size: u64,
        /// The limit.
        limit: usize,
    },
    /// The two dumps come from games with different registered types.
    #[error(
        "dumps of different games: registered types differ (first difference: {first_difference})"
    )]
    ForeignGame {
        /// The first type name that differs (`a` vs `b`).
        first_difference: String,
    },
    /// There is no session (of that input type, with built worlds) to dump.
    #[error("no running deterministic session to dump")]
    NoSession,
    /// Reading or writing the file failed.
    #[error("dump file {path}: {detail}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        detail: String,
    },
}

impl DesyncDump {
    /// Encodes the dump as a file: header and bincode body ([desync dumps](crate::rules#desync-dumps)).
    ///
    /// # Errors
    /// [`DumpError::TooLarge`] if the file would exceed `max_bytes`; [`DumpError::Corrupt`] if
    /// the body cannot be encoded (never for this type).
    pub fn encode(&self, max_bytes: usize) -> Result<Vec<u8>, DumpError> {
        let body = simsync_net::encode_unlimited(self).map_err(|e| DumpError::Corrupt {
            offset: DUMP_HEADER_BYTES,
            detail: e.to_string(),
        })?;
        let size = body.len() + DUMP_HEADER_BYTES;
        if size > max_bytes {
            return Err(DumpError::TooLarge {
                size: size as u64,
                limit: max_bytes,
            });
        }
        let mut out = Vec::with_capacity(size);
        out.extend_from_slice(&DUMP_MAGIC);
        out.extend_from_slice(&DUMP_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body_hash(&body).to_le_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Decodes a dump file, refusing more than `max_bytes` before decoding anything; checks the
    /// body's length against the bytes present and its hash before decoding it, and makes no
    /// allocation above [`DECODE_MEMORY_PER_BYTE`](crate::DECODE_MEMORY_PER_BYTE) × the body's
    /// length.
    ///
    /// # Errors
    /// [`DumpError::TooLarge`], [`DumpError::Truncated`], [`DumpError::NotADump`],
    /// [`DumpError::WrongVersion`], [`DumpError::Corrupt`] (hash mismatch, bytes after the
    /// body, or a body that does not decode). Never panics.
    pub fn decode(bytes: &[u8], max_bytes: usize) -> Result<Self, DumpError> {
        if bytes.len() > max_bytes {
            return Err(DumpError::TooLarge {
                size: bytes.len() as u64,
                limit: max_bytes,
            });
        }
        let magic = take(bytes, 0, 8)?;
        if magic != DUMP_MAGIC {
            return Err(DumpError::NotADump {
                found: magic.to_vec(),
            });
        }
        let version = u16::from_le_bytes(take(bytes, 8, 2)?.try_into().unwrap_or_default());
        if version != DUMP_FORMAT_VERSION {
            return Err(DumpError::WrongVersion {
                found: version,
                expected: DUMP_FORMAT_VERSION,
            });
        }
        let body_len = u64::from_le_bytes(take(bytes, 10, 8)?.try_into().unwrap_or_default());
        if body_len > (max_bytes - max_bytes.min(DUMP_HEADER_BYTES)) as u64 {
            return Err(DumpError::TooLarge {
                size: body_len.saturating_add(DUMP_HEADER_BYTES as u64),
                limit: max_bytes,
            });
        }
        let hash = u64::from_le_bytes(take(bytes, 18, 8)?.try_into().unwrap_or_default());
        let body = take(bytes, DUMP_HEADER_BYTES, body_len as usize)?;
        let end = DUMP_HEADER_BYTES + body.len();
        if bytes.len() > end {
            return Err(DumpError::Corrupt {
                offset: end,
                detail: format!("{} bytes after the body", bytes.len() - end),
            });
        }
        if body_hash(body) != hash {
            return Err(DumpError::Corrupt {
                offset: DUMP_HEADER_BYTES,
                detail: "the body does not match the header's hash".into(),
            });
        }
        // Every collection within `DECODE_MEMORY_PER_BYTE` × the body ([desync
        // dumps](crate::rules#desync-dumps)): a short body with a valid hash announcing a long
        // list takes no more.
        let limit = body
            .len()
            .saturating_mul(crate::snapshot::format::DECODE_MEMORY_PER_BYTE)
            .min(max_bytes);
        simsync_net::decode_with_limit(body, limit).map_err(|e| DumpError::Corrupt {
            offset: DUMP_HEADER_BYTES,
            detail: e.to_string(),
        })
    }

    /// The dumped entity in `slot`, if any.
    pub fn entity(&self, slot: u32) -> Option<&DumpedEntity> {
        self.entities.iter().find(|e| e.slot == slot)
    }
}

fn take(bytes: &[u8], offset: usize, needed: usize) -> Result<&[u8], DumpError> {
    offset
        .checked_add(needed)
        .and_then(|end| bytes.get(offset..end))
        .ok_or(DumpError::Truncated {
            offset,
            needed,
            len: bytes.len(),
        })
}

fn body_hash(body: &[u8]) -> u64 {
    let mut h = StateHasher::default();
    h.write(body);
    h.finish()
}

impl fmt::Display for DesyncDump {
    /// A human summary: header, then every entity and resource with its fields.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.header;
        writeln!(
            f,
            "desync dump: {:?} world at tick {}, checksum {:016x}, reason {:?}",
            h.world, h.tick, h.checksum, h.reason
        )?;
        for input in &self.inputs {
            writeln!(
                f,
                "  input player {} ({}): {}",
                input.player, input.status, input.value
            )?;
        }
        for entity in &self.entities {
            writeln!(f, "  entity slot {} gen {}", entity.slot, entity.generation)?;
            for value in &entity.components {
                write_value(f, value, "    ")?;
            }
        }
        for value in &self.resources {
            write_value(f, value, "  resource ")?;
        }
        Ok(())
    }
}

fn write_value(f: &mut fmt::Formatter<'_>, value: &DumpedValue, indent: &str) -> fmt::Result {
    match value.hash {
        Some(hash) => writeln!(f, "{indent}{} #{hash:016x}", value.type_name)?,
        None => writeln!(f, "{indent}{} (unchecked)", value.type_name)?,
    }
    for field in value.fields.iter().flatten() {
        writeln!(f, "{indent}  {} = {}", field.path, field.value)?;
    }
    Ok(())
}
