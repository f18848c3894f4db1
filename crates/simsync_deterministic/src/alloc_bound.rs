//! The decoders' allocation bounds, measured ([snapshots](crate::rules#snapshots),
//! [replays](crate::rules#replays), [desync dumps](crate::rules#desync-dumps)): a global
//! allocator of this crate's unit-test binary records the largest single allocation (or
//! reallocation) made on an armed thread while a decode runs. Other tests run unarmed and are
//! only forwarded to the system allocator.
//!
//! Cases: a crafted snapshot whose frame claims 64 MiB decompressed from one stored byte (the
//! 34-byte file of format version 1, and its version-2 equivalent with valid hashes), every bit
//! of the decompressed-length field of an honest ~800 KB snapshot flipped, a payload with valid
//! hashes announcing a list of 2³² slots, seeded random mutations of snapshots, replays and
//! dumps, and the relay's snapshot header read.

use std::hash::Hasher;

use bevy::prelude::Entity;
use simsync_net::SplitMix64;

use crate::checksum::StateHasher;
use crate::dump::{
    ComponentBreakdown, DEFAULT_MAX_DUMP_BYTES, DesyncDump, DumpHeader, DumpReason, DumpedEntity,
    DumpedField, DumpedValue, DumpedWorld, GameFingerprint,
};
use crate::replay::{Replay, ReplayFrame, ReplayHeader, ReplayLimits, ReplayWriter};
use crate::snapshot::format::{ComponentBlock, SlotState, SnapshotBody, StoredValue, WorldState};
use crate::{
    DECODE_MEMORY_PER_BYTE, DEFAULT_MAX_SNAPSHOT_BYTES, FRAME_BYTES, LZ4_MAX_EXPANSION,
    LZ4_SLACK_BYTES, MAX_SNAPSHOT_HEADER_BYTES, SNAPSHOT_FORMAT_VERSION, SnapshotError,
    SnapshotHeader, WorldSnapshot,
};

// The counting allocator is shared with `simsync_net`'s decoder test (one file, included by path).
#[path = "../../simsync_net/tests/support/counting_alloc.rs"]
pub(crate) mod counting_alloc;

use counting_alloc::largest_allocation;

/// The largest allocation a typed error may make (its message text).
const ERROR_BYTES: usize = 1024;

fn below(rng: &mut SplitMix64, n: usize) -> usize {
    (rng.next_u64() % n.max(1) as u64) as usize
}

/// One to three random mutations: bit flips, byte replacements, truncations, inserted bytes.
fn mutate(rng: &mut SplitMix64, bytes: &mut Vec<u8>) {
    for _ in 0..=below(rng, 3) {
        let at = below(rng, bytes.len() + 1);
        match below(rng, 4) {
            0 if at < bytes.len() => bytes[at] ^= 1 << below(rng, 8),
            1 if at < bytes.len() => bytes[at] = rng.next_u64() as u8,
            2 => bytes.truncate(at),
            _ => {
                let extra: Vec<u8> = (0..=below(rng, 9)).map(|_| rng.next_u64() as u8).collect();
                bytes.splice(at..at, extra);
            }
        }
    }
}

fn state_hash(parts: &[&[u8]]) -> u64 {
    let mut hasher = StateHasher::default();
    for part in parts {
        hasher.write(part);
    }
    hasher.finish()
}

// --- Snapshots ------------------------------------------------------------------------------

fn header() -> SnapshotHeader {
    SnapshotHeader {
        format_version: SNAPSHOT_FORMAT_VERSION,
        tick_rate: 64,
        tick: 600,
        checksum: 0xABCD,
        players: 2,
        registered_types: (0..40).map(|i| format!("game::Component{i}")).collect(),
        game_fingerprint: 7,
    }
}

/// A snapshot of `entities` entities with one 64-byte value each, half of it noise: LZ4
/// compresses it to about two thirds, as it does a real world.
fn snapshot(entities: u32) -> WorldSnapshot {
    let mut rng = SplitMix64::new(entities.into());
    let values = (0..entities)
        .map(|i| {
            let bytes = (0..64)
                .map(|b| if b < 32 { rng.next_u64() as u8 } else { 0 })
                .collect();
            let value = StoredValue {
                changed: -1,
                added: -3,
                bytes,
            };
            (Entity::from_raw_u32(i).expect("a valid index"), value)
        })
        .collect();
    WorldSnapshot {
        header: header(),
        body: SnapshotBody {
            world: WorldState {
                slots: vec![
                    SlotState {
                        generation: 1,
                        live: true
                    };
                    entities as usize
                ],
                contexts: vec![],
                components: vec![ComponentBlock { values }],
                relationships: vec![],
                resources: vec![None; 8],
            },
            continue_from: 601,
            events_settled_through: 600,
        },
    }
}

/// A version-2 snapshot written by hand with valid hashes: `flags`, a header, a stored body and
/// the decompressed length the frame claims.
fn framed(flags: u8, header: &[u8], stored: &[u8], raw_len: u64) -> Vec<u8> {
    let mut out = b"SSNP".to_vec();
    out.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_le_bytes());
    out.push(flags);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&(stored.len() as u64).to_le_bytes());
    out.extend_from_slice(&raw_len.to_le_bytes());
    out.extend_from_slice(&state_hash(&[header, stored]).to_le_bytes());
    let frame_hash = state_hash(&[&out]);
    out.extend_from_slice(&frame_hash.to_le_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(stored);
    out
}

fn encoded_header() -> Vec<u8> {
    bincode::serde::encode_to_vec(header(), bincode::config::standard()).unwrap()
}

/// Decodes `bytes` as a snapshot and as the relay reads its header; the largest allocation of
/// each.
fn decode_both(bytes: &[u8]) -> (Result<WorldSnapshot, SnapshotError>, usize, usize) {
    let (decoded, largest) =
        largest_allocation(|| WorldSnapshot::decode(bytes, DEFAULT_MAX_SNAPSHOT_BYTES));
    let ((), relay) = largest_allocation(|| {
        let _ = WorldSnapshot::decode_header(bytes, DEFAULT_MAX_SNAPSHOT_BYTES);
    });
    (decoded, largest, relay)
}

#[test]
fn the_34_byte_snapshot_claiming_64_mib_allocates_nothing_of_that_size() {
    // Format version 1's crafted file: frame (33 bytes) claiming 64 MiB from one LZ4 byte.
    let mut v1 = b"SSNP".to_vec();
    v1.extend_from_slice(&1u32.to_le_bytes());
    v1.push(1);
    v1.extend_from_slice(&1u64.to_le_bytes());
    v1.extend_from_slice(&(64u64 << 20).to_le_bytes());
    v1.extend_from_slice(&state_hash(&[&[0]]).to_le_bytes());
    v1.push(0);
    assert_eq!(v1.len(), 34);
    let (result, largest, relay) = decode_both(&v1);
    assert_eq!(
        result,
        Err(SnapshotError::WrongVersion {
            found: 1,
            expected: SNAPSHOT_FORMAT_VERSION
        })
    );
    assert!(
        largest <= ERROR_BYTES && relay <= ERROR_BYTES,
        "{largest} {relay}"
    );
    println!("34-byte version-1 snapshot: largest allocation {largest} B, relay {relay} B");

    // The same claim in version 2, both hashes valid: refused by the LZ4 bound, before any
    // buffer of the claimed size.
    let header = encoded_header();
    let crafted = framed(1, &header, &[0], (64 << 20) - header.len() as u64);
    let (result, largest, relay) = decode_both(&crafted);
    assert!(
        matches!(result, Err(SnapshotError::Corrupt { offset: 21, .. })),
        "{result:?}"
    );
    assert!(largest <= ERROR_BYTES, "{largest}");
    assert!(relay <= MAX_SNAPSHOT_HEADER_BYTES, "{relay}");
    println!(
        "{}-byte version-2 snapshot claiming 64 MiB: largest allocation {largest} B, relay {relay} B",
        crafted.len()
    );
}

#[test]
fn a_flipped_bit_in_the_decompressed_length_of_an_honest_snapshot_allocates_nothing_large() {
    let bytes = snapshot(19_500).encode();
    assert!(bytes.len() > 700_000, "{}", bytes.len());
    assert_eq!(bytes[8] & 1, 1, "compressed");
    let ((), honest) = largest_allocation(|| {
        WorldSnapshot::decode(&bytes, DEFAULT_MAX_SNAPSHOT_BYTES).unwrap();
    });
    let raw_len = u64::from_le_bytes(bytes[21..29].try_into().unwrap()) as usize;
    assert!(honest <= DECODE_MEMORY_PER_BYTE * raw_len, "{honest}");
    let mut worst = 0;
    for bit in 0..64 {
        let mut bad = bytes.clone();
        bad[21 + bit / 8] ^= 1 << (bit % 8);
        let (result, largest, relay) = decode_both(&bad);
        assert!(
            matches!(result, Err(SnapshotError::Corrupt { offset: 37, .. })),
            "bit {bit}: {result:?}"
        );
        assert!(largest <= ERROR_BYTES && relay <= ERROR_BYTES, "bit {bit}");
        worst = worst.max(largest).max(relay);
    }
    println!(
        "{}-byte snapshot ({raw_len} B decompressed, honest decode's largest allocation {honest} \
         B): every flipped bit of its decompressed length allocates at most {worst} B",
        bytes.len()
    );
}

#[test]
fn a_writer_lying_about_the_decompressed_length_allocates_no_more_than_the_stored_bytes_hold() {
    let bytes = snapshot(2_000).encode();
    let stored = &bytes[FRAME_BYTES + encoded_header().len()..];
    let raw_len = u64::from_le_bytes(bytes[21..29].try_into().unwrap());
    let most = (64 << 20) - encoded_header().len() as u64;
    for lie in [raw_len + 1, raw_len * 2, raw_len * 100, most] {
        let bad = framed(1, &encoded_header(), stored, lie);
        let (result, largest, relay) = decode_both(&bad);
        assert!(
            matches!(result, Err(SnapshotError::Corrupt { .. })),
            "{result:?}"
        );
        let reachable = stored.len() as u64 * LZ4_MAX_EXPANSION + LZ4_SLACK_BYTES;
        assert!(
            largest as u64 <= lie.min(reachable) + 64,
            "{lie}: {largest}"
        );
        assert!(relay <= MAX_SNAPSHOT_HEADER_BYTES, "{relay}");
    }
}

#[test]
fn a_short_body_announcing_a_long_list_is_bounded_by_its_length() {
    // A body whose slot list announces u32::MAX slots, under valid hashes.
    let body = [0xFC, 0xFF, 0xFF, 0xFF, 0xFF, 1, 1];
    let bytes = framed(0, &encoded_header(), &body, body.len() as u64);
    let (result, largest, _) = decode_both(&bytes);
    assert!(
        matches!(result, Err(SnapshotError::Truncated { .. })),
        "{result:?}"
    );
    assert!(largest <= DECODE_MEMORY_PER_BYTE * bytes.len(), "{largest}");
    // A header announcing u32::MAX registered types: the relay's read stays within 64 KiB.
    let names: usize = header().registered_types.iter().map(|t| t.len() + 1).sum();
    let mut lying = encoded_header();
    let at = lying.len() - 1 - names - 1;
    assert_eq!(lying[at], 40, "the length of the type list");
    lying.splice(at..at + 1, [0xFC, 0xFF, 0xFF, 0xFF, 0xFF]);
    let bytes = framed(0, &lying, &[], 0);
    let (result, largest, relay) = decode_both(&bytes);
    assert!(result.is_err());
    assert!(largest <= MAX_SNAPSHOT_HEADER_BYTES && relay <= MAX_SNAPSHOT_HEADER_BYTES);
}

#[test]
fn lz4_expands_no_more_than_the_bound() {
    for len in [0usize, 1, 100, 4096, 1 << 20, 16 << 20] {
        let stored = lz4_flex::block::compress(&vec![0u8; len]);
        let reachable = stored.len() as u64 * LZ4_MAX_EXPANSION + LZ4_SLACK_BYTES;
        assert!(
            len as u64 <= reachable,
            "{len} zeros in {} bytes",
            stored.len()
        );
    }
}

#[test]
fn mutated_snapshots_never_allocate_above_the_bound() {
    let honest = [snapshot(3).encode(), snapshot(300).encode()];
    let mut rng = SplitMix64::new(0x5EED_0026);
    let mut worst = (0, 0);
    for _ in 0..3_000 {
        let mut bytes = honest[below(&mut rng, 2)].clone();
        mutate(&mut rng, &mut bytes);
        let (_, largest, relay) = decode_both(&bytes);
        assert!(
            largest <= (DECODE_MEMORY_PER_BYTE * bytes.len()).max(ERROR_BYTES),
            "{largest}"
        );
        assert!(relay <= MAX_SNAPSHOT_HEADER_BYTES, "{relay}");
        worst = (worst.0.max(largest), worst.1.max(relay));
    }
    println!(
        "3,000 mutated snapshots: largest allocation {} B, relay {} B",
        worst.0, worst.1
    );
}

// --- Replays --------------------------------------------------------------------------------

fn replay_bytes() -> Vec<u8> {
    let mut writer = ReplayWriter::new(Vec::new(), "");
    writer
        .header(&ReplayHeader {
            tick_rate_hz: 64,
            players: 2,
            input_type: "u16".into(),
            registered_types: vec!["a".into()],
            checksum_interval: 1,
            max_simulation_entities: 1024,
            rollback_window: 8,
            start_tick: 0,
            created_by: "alloc_bound".into(),
        })
        .unwrap();
    for tick in 1..=300 {
        writer
            .frame(&ReplayFrame {
                tick,
                inputs: vec![tick as u16, 7],
                disconnected: 0,
                checksum: Some(tick as u64),
            })
            .unwrap();
        if tick == 150 {
            writer.snapshot(150, &snapshot(3).encode()).unwrap();
        }
    }
    writer.finish().unwrap();
    writer.into_inner()
}

#[test]
fn mutated_replays_never_allocate_above_the_bound() {
    let honest = replay_bytes();
    // A record decode is a wire decode (64 KiB); the frame list at most 8 bytes per file byte.
    let bound = |len: usize| (8 * len).max(simsync_net::MAX_MESSAGE_BYTES);
    let ((), largest) = largest_allocation(|| {
        let replay = Replay::<u16>::from_bytes(&honest, &ReplayLimits::default()).unwrap();
        assert_eq!(replay.frames().len(), 300);
    });
    assert!(largest <= bound(honest.len()), "{largest}");
    let mut rng = SplitMix64::new(0x5EED_0027);
    let mut worst = 0;
    for _ in 0..3_000 {
        let mut bytes = honest.clone();
        mutate(&mut rng, &mut bytes);
        let ((), largest) = largest_allocation(|| {
            let _ = Replay::<u16>::from_bytes(&bytes, &ReplayLimits::default());
        });
        assert!(largest <= bound(bytes.len()), "{largest}");
        worst = worst.max(largest);
    }
    println!(
        "3,000 mutated replays of {} B: largest allocation {worst} B",
        honest.len()
    );
}

// --- Desync dumps ---------------------------------------------------------------------------

fn dump() -> DesyncDump {
    let value = |i: u32| DumpedValue {
        type_name: format!("game::C{}", i % 5),
        hash: Some(u64::from(i)),
        fields: Some(vec![DumpedField {
            path: "x".into(),
            value: i.to_string(),
        }]),
    };
    DesyncDump {
        header: DumpHeader {
            tick: 5,
            world: DumpedWorld::Verified,
            reason: DumpReason::Requested,
            fingerprint: GameFingerprint::default(),
            checksum: 1,
            writer: Some(0),
        },
        entities: (0..100)
            .map(|slot| DumpedEntity {
                slot,
                generation: 1,
                components: vec![value(slot)],
            })
            .collect(),
        resources: vec![value(1)],
        inputs: vec![],
        breakdowns: vec![ComponentBreakdown::default()],
    }
}

#[test]
fn mutated_and_crafted_dumps_never_allocate_above_the_bound() {
    let honest = dump().encode(DEFAULT_MAX_DUMP_BYTES).unwrap();
    let bound = |len: usize| (DECODE_MEMORY_PER_BYTE * len).max(ERROR_BYTES);
    // A body with a valid hash announcing u32::MAX entities.
    let body = {
        let mut body = simsync_net::encode_unlimited(&dump().header).unwrap();
        body.extend_from_slice(&[0xFC, 0xFF, 0xFF, 0xFF, 0xFF, 0, 1, 0]);
        body
    };
    let mut crafted = honest[..10].to_vec();
    crafted.extend_from_slice(&(body.len() as u64).to_le_bytes());
    crafted.extend_from_slice(&state_hash(&[&body]).to_le_bytes());
    crafted.extend_from_slice(&body);
    let (result, largest) =
        largest_allocation(|| DesyncDump::decode(&crafted, DEFAULT_MAX_DUMP_BYTES));
    assert!(result.is_err());
    assert!(largest <= bound(crafted.len()), "{largest}");
    let mut rng = SplitMix64::new(0x5EED_0028);
    let mut worst = 0;
    for _ in 0..3_000 {
        let mut bytes = honest.clone();
        mutate(&mut rng, &mut bytes);
        let (_, largest) =
            largest_allocation(|| DesyncDump::decode(&bytes, DEFAULT_MAX_DUMP_BYTES));
        assert!(largest <= bound(bytes.len()), "{largest}");
        worst = worst.max(largest);
    }
    println!(
        "3,000 mutated dumps of {} B: largest allocation {worst} B",
        honest.len()
    );
}
