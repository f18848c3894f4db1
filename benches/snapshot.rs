//! Snapshot cost at 1,000 bodies, against one plain tick of the same scene measured in the same
//! run.
//!
//! Scene: the integration tests' game, 1,000 boxes in 20 piles of 5×5×2 resting on the ground
//! (Rapier's sleeping on) and two balls, after 200 ticks (the piles at rest).
//!
//! - Snapshot bytes per body, encoded as the session sends it (LZ4 when it pays) and without
//!   LZ4 (the frame plus the uncompressed payload length the frame declares).
//! - `capture + encode / tick`: capturing the verified world and encoding it, as a ratio to one
//!   plain tick.
//! - `decode + load / tick`: decoding the bytes and loading them into a fresh App's session
//!   (which checks the loaded world's checksum), as a ratio to one plain tick.
//!
//! The plain tick is one `App::update` of a plain Bevy App with the same Rapier configuration
//! (fixed 1/64 s step, one substep) and the same bodies, no session: the cost of simulating the
//! scene without simsync.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};
use simsync::deterministic::{
    DEFAULT_MAX_SNAPSHOT_BYTES, FRAME_BYTES, SessionMode, SnapshotAppExt, WorldSnapshot,
};
use simsync::prelude::*;

use common::TestGame;

const BODIES: u32 = 1_000;
/// Ticks run before the snapshot (and on the plain App): the piles are at rest by then.
const SETTLE_TICKS: i32 = 200;

fn pile() -> TestGame {
    TestGame {
        boxes: BODIES,
        players: 2,
        ..TestGame::default()
    }
}

/// A fresh App of the pile with a lockstep session (nothing simulated yet).
fn session_app() -> App {
    common::app(pile(), 0, SessionMode::Lockstep, false)
}

/// The same bodies in a plain Bevy App with Rapier's fixed 1/64 s step and no session.
fn plain_app() -> App {
    let mut app = App::new();
    app.add_plugins((
        MinimalPlugins,
        bevy::transform::TransformPlugin,
        RapierPhysicsPlugin::<NoUserData>::default(),
    ))
    .insert_resource(TimestepMode::Fixed {
        dt: 1.0 / 64.0,
        substeps: 1,
    })
    .add_systems(Startup, spawn_plain_scene);
    app.finish();
    app.cleanup();
    for _ in 0..SETTLE_TICKS {
        app.update();
    }
    app
}

fn spawn_plain_scene(mut commands: Commands) {
    commands.spawn((
        RigidBody::Fixed,
        Collider::cuboid(40.0, 0.5, 40.0),
        Transform::from_xyz(0.0, -0.5, 0.0),
    ));
    for n in 0..BODIES {
        commands.spawn((
            RigidBody::Dynamic,
            Collider::cuboid(0.5, 0.5, 0.5),
            Transform::from_translation(common::box_position(n)),
            Velocity::zero(),
            Sleeping::default(),
        ));
    }
    for p in 0..2 {
        commands.spawn((
            RigidBody::Dynamic,
            Collider::ball(0.6),
            Transform::from_translation(common::ball_position(p)),
            Velocity::zero(),
            ExternalImpulse::default(),
            Ccd::enabled(),
        ));
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time_plain_ticks(app: &mut App, n: usize) -> Duration {
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                app.update();
                t.elapsed()
            })
            .collect(),
    )
}

fn capture_encode(app: &mut App) -> Vec<u8> {
    app.capture_snapshot::<PackedInput>()
        .expect("capture")
        .encode()
}

fn time_capture_encode(app: &mut App, n: usize) -> Duration {
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(capture_encode(app));
                t.elapsed()
            })
            .collect(),
    )
}

/// Decode + load, each into a fresh App built outside the timing.
fn time_decode_load(bytes: &[u8], n: usize) -> Duration {
    median(
        (0..n)
            .map(|_| {
                let mut fresh = session_app();
                let t = Instant::now();
                let snapshot =
                    WorldSnapshot::decode(bytes, DEFAULT_MAX_SNAPSHOT_BYTES).expect("decode");
                fresh.load_snapshot::<PackedInput>(&snapshot).expect("load");
                t.elapsed()
            })
            .collect(),
    )
}

/// The header and body length the frame declares once decompressed (header length at bytes
/// 9..13, body at 21..29).
fn raw_payload_len(bytes: &[u8]) -> usize {
    let mut header = [0u8; 4];
    header.copy_from_slice(&bytes[9..13]);
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[21..29]);
    u32::from_le_bytes(header) as usize + u64::from_le_bytes(word) as usize
}

fn bench(c: &mut Criterion) {
    let mut plain = plain_app();
    let mut source = session_app();
    common::run_until_verified(&mut source, SETTLE_TICKS);
    let bytes = capture_encode(&mut source);
    let compressed = bytes[8] & 1 != 0;
    let uncompressed = FRAME_BYTES + raw_payload_len(&bytes);

    let mut group = c.benchmark_group("snapshot_1000_bodies");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    group.bench_function("plain_tick", |b| b.iter(|| plain.update()));
    group.bench_function("capture_encode", |b| b.iter(|| capture_encode(&mut source)));
    group.bench_function("decode", |b| {
        b.iter(|| WorldSnapshot::decode(&bytes, DEFAULT_MAX_SNAPSHOT_BYTES).expect("decode"))
    });
    group.finish();

    // Ratios from medians measured back to back in this run.
    let tick = time_plain_ticks(&mut plain, 60);
    let capture = time_capture_encode(&mut source, 20);
    let load = time_decode_load(&bytes, 10);
    let per_body = |n: usize| n as f64 / f64::from(BODIES);
    println!("snapshot at {BODIES} bodies (resting piles, tick {SETTLE_TICKS}):");
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| bytes/body, as sent ({}) | {:.1} ({} B) |",
        if compressed { "LZ4" } else { "LZ4 did not pay" },
        per_body(bytes.len()),
        bytes.len()
    );
    println!(
        "| bytes/body, without LZ4 | {:.1} ({uncompressed} B) |",
        per_body(uncompressed)
    );
    println!("| plain tick (no session) | {tick:?} |");
    println!(
        "| capture + encode | {capture:?} = {:.2} ticks |",
        capture.as_secs_f64() / tick.as_secs_f64()
    );
    println!(
        "| decode + load | {load:?} = {:.2} ticks |",
        load.as_secs_f64() / tick.as_secs_f64()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
