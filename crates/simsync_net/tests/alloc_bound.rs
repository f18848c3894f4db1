//! The decoder's allocation bound, measured ([wire rule 3](simsync_net::rules)): no decode of
//! any bytes makes an allocation above `MAX_MESSAGE_BYTES`.
//!
//! Its own test binary because it installs a global allocator that records the largest single
//! allocation (or reallocation) made on the measuring thread while a decode runs. Valid packets
//! of every message kind are mutated with a seeded SplitMix64 (bit flips, byte replacements,
//! truncations, inserted and overwritten large varints, appended bytes) and decoded through
//! every decode entry point of the crate.
//!
//! `fuzz_ten_million_mutated_packets` is ignored (minutes in a debug build); run it by hand with
//! `cargo test --ignore-rust-version -p simsync_net --test alloc_bound -- --ignored --nocapture`.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use serde::{Deserialize, Serialize, de::DeserializeOwned};
#[path = "support/counting_alloc.rs"]
mod counting_alloc;
#[path = "samples/mod.rs"]
mod samples;

use counting_alloc::largest_allocation;

use simsync_net::{
    BodyId, ChunkError, ClientMessage, DEFAULT_MAX_SNAPSHOT_BYTES, DecodeStats, Hello, InputSet,
    MAX_MESSAGE_BYTES, NetError, OwnerRecord, OwnershipServerMessage, ParticipantId, Protocols,
    SNAPSHOT_CHUNK_BYTES, ServerHandshake, ServerMessage, SnapshotAssembly, SnapshotChunk,
    SplitMix64, Welcome, decode, decode_client_message, decode_client_message_counted,
    decode_counted, decode_server_message, decode_server_message_counted, encode, max_decoded_len,
    peek_handshake_version, wire_config,
};

/// A game's input type as a user would write it: fixed fields, a list, text and maps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct GameInput {
    buttons: u16,
    stick: (i8, i8),
    macros: Vec<u16>,
    chat: String,
    bindings: BTreeMap<u8, Vec<u8>>,
    seen: HashMap<u32, u64>,
    aim: Option<Box<[f32; 3]>>,
}

fn game_input() -> GameInput {
    GameInput {
        buttons: 0b1010,
        stick: (-5, 127),
        macros: vec![1, 300, 65_535],
        chat: "gg".into(),
        bindings: BTreeMap::from([(1, vec![2, 3]), (250, vec![])]),
        seen: HashMap::from([(7, u64::MAX)]),
        aim: Some(Box::new([0.5, -1.0, 2.0])),
    }
}

fn welcome() -> Welcome {
    let mut server = ServerHandshake::new(Protocols::ALL).with_tick_rate_hz(60);
    server
        .on_hello(1, &Hello::new(Protocols::ALL, "ada"), 99, || Ok(Some(1)))
        .expect("a fresh server accepts")
}

fn input_sets() -> Vec<InputSet> {
    vec![
        InputSet {
            inputs: vec![vec![1], vec![2, 2], vec![]],
            replaced: 0b100,
            disconnected: 0,
        };
        3
    ]
}

/// One valid encoded packet of every kind the crate decodes.
fn valid_packets() -> Vec<Vec<u8>> {
    let client = samples::client_samples();
    let server = samples::server_samples();
    let mut packets: Vec<Vec<u8>> = client.iter().map(|m| encode(m).unwrap()).collect();
    packets.extend(server.iter().map(|m| encode(m).unwrap()));
    packets.push(encode(&Hello::new(Protocols::SESSION, "solo")).unwrap());
    packets.push(encode(&welcome()).unwrap());
    packets.push(encode(&input_sets()[0]).unwrap());
    packets.push(encode(&vec![9u8; 300]).unwrap());
    packets.push(encode(&game_input()).unwrap());
    packets
}

/// Varints that announce huge lengths: u16, u32, u64 and u128 markers, all ones.
const LARGE_VARINTS: [&[u8]; 4] = [
    &[0xFB, 0xFF, 0xFF],
    &[0xFC, 0xFF, 0xFF, 0xFF, 0xFF],
    &[0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF],
    &[
        0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        0xFF, 0xFF,
    ],
];

fn below(rng: &mut SplitMix64, n: usize) -> usize {
    (rng.next_u64() % n.max(1) as u64) as usize
}

/// One to three random mutations of `packet`.
fn mutate(rng: &mut SplitMix64, packet: &mut Vec<u8>) {
    for _ in 0..=below(rng, 3) {
        let at = below(rng, packet.len() + 1);
        match below(rng, 6) {
            0 if at < packet.len() => packet[at] ^= 1 << below(rng, 8),
            1 if at < packet.len() => {
                const SPECIAL: [u8; 6] = [0x00, 0x01, 0xFB, 0xFC, 0xFD, 0xFF];
                packet[at] = if rng.next_u64() & 1 == 0 {
                    SPECIAL[below(rng, SPECIAL.len())]
                } else {
                    rng.next_u64() as u8
                };
            }
            2 => packet.truncate(at),
            3 => {
                let varint = LARGE_VARINTS[below(rng, LARGE_VARINTS.len())];
                packet.splice(at..at, varint.iter().copied());
            }
            4 => {
                let varint = LARGE_VARINTS[below(rng, LARGE_VARINTS.len())];
                let end = (at + varint.len()).min(packet.len());
                packet.splice(at..end, varint.iter().copied());
            }
            _ => packet.extend((0..below(rng, 8)).map(|_| rng.next_u64() as u8)),
        }
    }
}

fn decode_as<T: DeserializeOwned>(bytes: &[u8], stats: &mut DecodeStats) {
    let _ = decode::<T>(bytes);
    let _ = decode_counted::<T>(bytes, stats);
}

/// Decodes `bytes` through every entry point and as every message type.
fn decode_everywhere(bytes: &[u8], stats: &mut DecodeStats) {
    let _ = decode_client_message(bytes);
    let _ = decode_client_message_counted(bytes, stats);
    let _ = decode_server_message(bytes);
    let _ = decode_server_message_counted(bytes, stats);
    let _ = peek_handshake_version(bytes);
    decode_as::<Hello>(bytes, stats);
    decode_as::<Welcome>(bytes, stats);
    decode_as::<InputSet>(bytes, stats);
    decode_as::<Vec<u8>>(bytes, stats);
    decode_as::<GameInput>(bytes, stats);
}

struct FuzzReport {
    packets: u64,
    largest: usize,
    accepted: u64,
    rejected: u64,
}

fn fuzz(seed: u64, packets: u64) -> FuzzReport {
    let valid = valid_packets();
    let mut rng = SplitMix64::new(seed);
    let mut stats = DecodeStats::default();
    let mut largest = 0;
    for _ in 0..packets {
        let mut packet = valid[below(&mut rng, valid.len())].clone();
        mutate(&mut rng, &mut packet);
        let ((), size) = largest_allocation(|| decode_everywhere(&packet, &mut stats));
        assert!(
            size <= MAX_MESSAGE_BYTES,
            "{size}-byte allocation decoding {packet:02X?}"
        );
        largest = largest.max(size);
    }
    FuzzReport {
        packets,
        largest,
        accepted: stats.accepted,
        rejected: stats.rejected(),
    }
}

/// `04 01 00 00 FC FF FF FF FF`: `ClientMessage::Session` of match 1, `Inputs` at tick 0
/// announcing 4,294,967,295 inputs in 9 bytes.
const LONG_LIST_PACKET: [u8; 9] = [0x04, 0x01, 0x00, 0x00, 0xFC, 0xFF, 0xFF, 0xFF, 0xFF];

#[test]
fn a_nine_byte_packet_no_longer_allocates_one_mebibyte() {
    // bincode's serde path on its own pre-allocates 1 MiB of inputs (43,690 × 24 bytes).
    let (raw, raw_largest) = largest_allocation(|| {
        bincode::serde::decode_from_slice::<ClientMessage, _>(&LONG_LIST_PACKET, wire_config())
    });
    assert!(raw.is_err());
    assert_eq!(raw_largest, 43_690 * 24);
    // Through the crate: no allocation at all, and a typed error.
    let (result, largest) = largest_allocation(|| decode_client_message(&LONG_LIST_PACKET));
    assert!(matches!(result, Err(NetError::Truncated)), "{result:?}");
    assert_eq!(largest, 0);
    let (result, largest) = largest_allocation(|| decode::<Vec<Vec<u8>>>(&LONG_LIST_PACKET[4..]));
    assert!(matches!(result, Err(NetError::Truncated)), "{result:?}");
    assert_eq!(largest, 0);
}

#[test]
fn the_largest_valid_byte_list_decodes_within_the_bound() {
    // 65,000 bytes: the buffer doubles up to exactly the limit.
    let bytes = encode(&vec![7u8; 65_000]).unwrap();
    let (result, largest) = largest_allocation(|| decode::<Vec<u8>>(&bytes));
    assert_eq!(result.unwrap().len(), 65_000);
    assert!(largest <= MAX_MESSAGE_BYTES, "{largest}");
}

#[test]
fn a_list_that_would_need_more_memory_than_the_limit_is_oversized() {
    // 2,048 empty inputs need 2,048 × 24 bytes: accepted. 2,049 would grow the buffer to
    // 4,096 × 24 bytes: refused before it grows.
    let fits = encode(&vec![Vec::<u8>::new(); 2048]).unwrap();
    let (result, largest) = largest_allocation(|| decode::<Vec<Vec<u8>>>(&fits));
    assert_eq!(result.unwrap().len(), 2048);
    assert!(largest <= MAX_MESSAGE_BYTES, "{largest}");
    let too_many = encode(&vec![Vec::<u8>::new(); 2049]).unwrap();
    let mut stats = DecodeStats::default();
    let (result, largest) =
        largest_allocation(|| decode_counted::<Vec<Vec<u8>>>(&too_many, &mut stats));
    assert!(
        matches!(result, Err(NetError::Oversized { .. })),
        "{result:?}"
    );
    assert!(largest <= MAX_MESSAGE_BYTES, "{largest}");
    assert_eq!(stats.oversized, 1);
}

#[test]
fn a_snapshot_of_the_longest_decodable_length_decodes_and_one_more_does_not() {
    let longest = max_decoded_len::<OwnerRecord>();
    assert_eq!(longest, 4096);
    let record = OwnerRecord {
        body: BodyId(1),
        owner: Some(ParticipantId(2)),
        priority: 3,
    };
    let snapshot =
        |len| ServerMessage::Ownership(OwnershipServerMessage::Snapshot(vec![record; len]));
    let bytes = encode(&snapshot(longest)).unwrap();
    let (result, largest) = largest_allocation(|| decode_server_message(&bytes));
    assert_eq!(result.unwrap(), snapshot(longest));
    assert!(largest <= MAX_MESSAGE_BYTES, "{largest}");
    let bytes = encode(&snapshot(longest + 1)).unwrap();
    let (result, largest) = largest_allocation(|| decode_server_message(&bytes));
    assert!(
        matches!(result, Err(NetError::Oversized { .. })),
        "{result:?}"
    );
    assert!(largest <= MAX_MESSAGE_BYTES, "{largest}");
}

#[test]
fn a_large_map_stays_within_the_bound() {
    let map: HashMap<u32, u64> = (0..5_000).map(|k| (k, u64::from(k))).collect();
    let bytes = encode(&map).unwrap();
    let (result, largest) = largest_allocation(|| decode::<HashMap<u32, u64>>(&bytes));
    assert!(
        matches!(result, Err(NetError::Oversized { .. })),
        "{result:?}"
    );
    assert!(largest <= MAX_MESSAGE_BYTES, "{largest}");
    let small: HashMap<u32, u64> = (0..500).map(|k| (k, u64::from(k))).collect();
    let bytes = encode(&small).unwrap();
    let (result, largest) = largest_allocation(|| decode::<HashMap<u32, u64>>(&bytes));
    assert_eq!(result.unwrap(), small);
    assert!(largest <= MAX_MESSAGE_BYTES, "{largest}");
}

#[test]
fn a_snapshot_transfer_holds_at_most_twice_the_bytes_received() {
    // A first chunk announcing 32 MiB (the limit) with its 16 KiB of bytes.
    let count = (DEFAULT_MAX_SNAPSHOT_BYTES / SNAPSHOT_CHUNK_BYTES) as u32;
    let chunk = |index| SnapshotChunk {
        request: 1,
        tick: 5,
        checksum: 9,
        total_bytes: DEFAULT_MAX_SNAPSHOT_BYTES as u32,
        index,
        count,
        bytes: vec![index as u8; SNAPSHOT_CHUNK_BYTES],
    };
    let mut assembly = SnapshotAssembly::new(1, DEFAULT_MAX_SNAPSHOT_BYTES);
    let first = chunk(0);
    let (result, largest) = largest_allocation(|| assembly.accept(first));
    assert_eq!(result, Ok(None));
    assert_eq!(
        largest, SNAPSHOT_CHUNK_BYTES,
        "once 32 MiB before this change"
    );
    // Then each chunk: the buffer doubles, never past twice the bytes received.
    for index in 1..count {
        let next = chunk(index);
        let (result, largest) = largest_allocation(|| assembly.accept(next));
        assert!(
            largest <= 2 * (index as usize + 1) * SNAPSHOT_CHUNK_BYTES,
            "{index}"
        );
        assert!(result.is_ok(), "{index}");
        if index + 1 == count {
            let whole = result.unwrap().expect("the last chunk completes it");
            assert_eq!(whole.bytes.len(), DEFAULT_MAX_SNAPSHOT_BYTES);
            assert_eq!(whole.bytes[SNAPSHOT_CHUNK_BYTES * 3], 3);
        }
    }
    // A refused chunk allocates nothing either.
    let mut other = SnapshotAssembly::new(2, DEFAULT_MAX_SNAPSHOT_BYTES);
    let stray = chunk(1);
    let (result, largest) = largest_allocation(|| other.accept(stray));
    assert!(
        matches!(result, Err(ChunkError::Foreign { .. })),
        "{result:?}"
    );
    assert_eq!(largest, 0);
}

#[test]
fn every_valid_packet_round_trips() {
    // The mutations start from packets that decode: the fuzz explores around real messages.
    let mut stats = DecodeStats::default();
    for packet in valid_packets() {
        let ((), largest) = largest_allocation(|| decode_everywhere(&packet, &mut stats));
        assert!(largest <= MAX_MESSAGE_BYTES);
    }
    assert_eq!(
        decode::<GameInput>(&encode(&game_input()).unwrap()).unwrap(),
        game_input()
    );
    assert!(stats.accepted >= valid_packets().len() as u64);
}

#[test]
fn fuzz_mutated_packets_through_every_entry_point() {
    let report = fuzz(0x5EED_0009, 200_000);
    assert_eq!(report.packets, 200_000);
    assert!(report.largest <= MAX_MESSAGE_BYTES);
    // The mutations reach both outcomes.
    assert!(report.accepted > 0 && report.rejected > 0);
}

#[test]
#[ignore = "about ten million packets: run by hand with --ignored --nocapture"]
fn fuzz_ten_million_mutated_packets() {
    let start = Instant::now();
    let report = fuzz(0x5EED_0010, 10_000_000);
    println!(
        "{} packets, largest single allocation during decode {} bytes, {} accepted / {} \
         rejected decodes, {:.1} s",
        report.packets,
        report.largest,
        report.accepted,
        report.rejected,
        start.elapsed().as_secs_f64()
    );
    assert!(report.largest <= MAX_MESSAGE_BYTES);
}
