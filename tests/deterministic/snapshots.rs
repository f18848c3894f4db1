//! Snapshots of the verified world: capture, encode, decode, load into a fresh App, and the
//! loaded session continuing with the same checksums ([snapshots] in the crate's rules).

use bevy::prelude::*;
use simsync::deterministic::{DEFAULT_MAX_SNAPSHOT_BYTES, SessionMode, TickChecksum};
use simsync::prelude::*;

use crate::common::{self, TestGame};

/// The verified checksums of `app` for ticks `from..=to`, in tick order.
fn checksums(app: &App, from: i32, to: i32) -> Vec<TickChecksum> {
    let stats = common::stats(app);
    let list: Vec<TickChecksum> = stats
        .checksum_history
        .iter()
        .filter(|c| c.tick >= from && c.tick <= to)
        .copied()
        .collect();
    assert_eq!(
        list.len(),
        (to - from + 1) as usize,
        "checksums {from}..={to}"
    );
    list
}

fn verified_checksum(app: &mut App) -> u64 {
    app.world_mut()
        .resource_mut::<SimulationWorlds>()
        .verified_checksum()
}

#[test]
fn a_loaded_snapshot_reproduces_the_checksum_at_its_tick_and_after() {
    let game = TestGame {
        boxes: 100,
        projectiles: true,
        ..TestGame::default()
    };
    let mut original = common::app(game.clone(), 2, SessionMode::Predicted, false);
    common::run_until_verified(&mut original, 60);
    let snapshot = original.capture_snapshot::<PackedInput>().expect("capture");
    let tick = snapshot.header.tick;
    assert_eq!(snapshot.header.checksum, verified_checksum(&mut original));
    let bytes = snapshot.encode();
    let decoded = WorldSnapshot::decode(&bytes, DEFAULT_MAX_SNAPSHOT_BYTES).expect("decode");
    assert_eq!(decoded, snapshot);

    let mut loaded = common::app(game, 2, SessionMode::Predicted, false);
    assert_eq!(loaded.load_snapshot::<PackedInput>(&decoded), Ok(tick));
    assert_eq!(verified_checksum(&mut loaded), snapshot.header.checksum);
    {
        let worlds = loaded
            .world_mut()
            .resource_mut::<SimulationWorlds>()
            .into_inner();
        assert_eq!(worlds.predicted_checksum(), snapshot.header.checksum);
    }

    common::run_until_verified(&mut original, tick + 120);
    common::run_until_verified(&mut loaded, tick + 120);
    assert_eq!(
        checksums(&loaded, tick + 1, tick + 120),
        checksums(&original, tick + 1, tick + 120)
    );
}

fn small_snapshot_bytes() -> Vec<u8> {
    let game = TestGame {
        boxes: 0,
        players: 1,
        ..TestGame::default()
    };
    let mut app = common::app(game, 0, SessionMode::Lockstep, false);
    common::run_until_verified(&mut app, 5);
    app.capture_snapshot::<PackedInput>()
        .expect("capture")
        .encode()
}

#[test]
fn every_truncation_of_a_snapshot_is_a_typed_error() {
    use simsync::deterministic::SnapshotError;
    let bytes = small_snapshot_bytes();
    for len in 0..bytes.len() {
        match WorldSnapshot::decode(&bytes[..len], DEFAULT_MAX_SNAPSHOT_BYTES) {
            Err(SnapshotError::Truncated { .. }) => {}
            Err(SnapshotError::Corrupt { offset: 0, .. }) if len == 0 => {}
            other => panic!("truncated at {len}: {other:?}"),
        }
    }
}

#[test]
fn every_flipped_byte_of_a_snapshot_is_a_typed_error() {
    let bytes = small_snapshot_bytes();
    for at in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0x5a;
        assert!(
            WorldSnapshot::decode(&bad, DEFAULT_MAX_SNAPSHOT_BYTES).is_err(),
            "flipped byte {at} decoded"
        );
    }
}

#[test]
fn a_snapshot_above_the_limit_is_refused_before_decoding() {
    use simsync::deterministic::SnapshotError;
    let bytes = small_snapshot_bytes();
    let limit = bytes.len() - simsync::deterministic::FRAME_BYTES - 1;
    assert!(matches!(
        WorldSnapshot::decode(&bytes, limit),
        Err(SnapshotError::TooLarge { limit: l, .. }) if l == limit
    ));
}
