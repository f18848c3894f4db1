//! The snapshot format: [`WorldSnapshot`] (a [`SnapshotHeader`] and the body), its byte
//! encoding ([`WorldSnapshot::encode`], [`WorldSnapshot::decode`]) and the size limits
//! ([`SnapshotLimits`]) ([snapshots](crate::rules#snapshots)).
//!
//! The container — the frame, the header, [`SnapshotError`] and every check a read makes
//! before it allocates — is `simsync_net`'s [`SnapshotFrame`] (the relay reads headers
//! without this crate); this module holds the body: the verified world and the session
//! position, and the game fingerprint of the header.

use std::hash::Hasher;

use bevy::prelude::*;
use serde::{Deserialize, Serialize};
use simsync_net::SnapshotFrame;

use crate::checksum::StateHasher;
use crate::tick::{PlayerIndex, Tick};

pub use simsync_net::DEFAULT_MAX_DECODED_SNAPSHOT_BYTES as DEFAULT_MAX_SNAPSHOT_BYTES;
pub use simsync_net::{
    DECODE_MEMORY_PER_BYTE, FRAME_BYTES, LZ4_MAX_EXPANSION, LZ4_SLACK_BYTES,
    MAX_SNAPSHOT_HEADER_BYTES, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_MAGIC, SnapshotError,
    SnapshotHeader,
};

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

impl WorldSnapshot {
    /// The snapshot as bytes (the layout of [`SnapshotFrame`]): the body compressed with LZ4
    /// when that makes it smaller.
    ///
    /// A header above [`MAX_SNAPSHOT_HEADER_BYTES`] (tens of thousands of registered types) is
    /// written but refused by [`decode`](Self::decode).
    pub fn encode(&self) -> Vec<u8> {
        SnapshotFrame::encode(&self.header, &self.body)
    }

    /// Decodes a snapshot, refusing one above `max_bytes` (header and body, stored or
    /// decompressed) before allocating for it. Makes no allocation above
    /// [`DECODE_MEMORY_PER_BYTE`] × the decompressed length, nor above `max_bytes`
    /// (the checks of [`SnapshotFrame`]).
    ///
    /// # Errors
    /// [`SnapshotError::Truncated`], [`SnapshotError::Corrupt`] (bad magic, unknown flags, a
    /// frame or payload that fails its hash, a decompressed length LZ4 cannot reach, a payload
    /// that does not decode, bytes left over), [`SnapshotError::WrongVersion`],
    /// [`SnapshotError::TooLarge`]. Never panics.
    pub fn decode(bytes: &[u8], max_bytes: usize) -> Result<Self, SnapshotError> {
        let frame = SnapshotFrame::open(bytes, max_bytes)?;
        let body: SnapshotBody = frame.decode_body(max_bytes)?;
        Ok(WorldSnapshot {
            header: frame.header,
            body,
        })
    }

    /// Decodes only the header of an encoded snapshot (the frame and both hashes are checked,
    /// the body is neither decompressed nor decoded): what the relay reads to check a buddy's
    /// snapshot without knowing the game
    /// ([late join](crate::rules#late-join-and-rejoin-from-a-snapshot);
    /// [`SnapshotFrame::read_header`]). Makes no allocation above
    /// [`MAX_SNAPSHOT_HEADER_BYTES`], whatever the bytes.
    ///
    /// # Errors
    /// As [`decode`](Self::decode), except that a body that would not decompress or decode is
    /// not noticed.
    pub fn decode_header(bytes: &[u8], max_bytes: usize) -> Result<SnapshotHeader, SnapshotError> {
        SnapshotFrame::read_header(bytes, max_bytes)
    }
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
