//! Snapshots whose Rapier state was changed under valid hashes (the FNV hashes of a snapshot
//! are no MAC: any sender can frame changed bytes again): every such snapshot is refused with a
//! typed error or loads and simulates; none panics, at load or in the ticks after
//! ([snapshots are untrusted input] in the crate's rules).

use std::sync::{Arc, Mutex};

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use bevy_rapier3d::rapier::prelude::TriMeshFlags;
use serde::{Deserialize, Serialize};
use simsync::deterministic::{DEFAULT_MAX_SNAPSHOT_BYTES, FRAME_BYTES, SessionMode, SnapshotError};
use simsync::prelude::*;

use super::snapshots::header_len;
use crate::common::{self, TestGame};

// --- The snapshot body's serde shape (the test's mirror of the crate's own format) -------------

#[derive(Serialize, Deserialize, Clone)]
pub(crate) struct Body {
    world: WorldState,
    continue_from: i32,
    events_settled_through: i32,
}

#[derive(Serialize, Deserialize, Clone)]
struct WorldState {
    slots: Vec<(u32, bool)>,
    contexts: Vec<Entity>,
    components: Vec<Vec<(Entity, Stored)>>,
    relationships: Vec<Vec<SavedTarget>>,
    resources: Vec<Option<Stored>>,
}

/// A relationship target, the change ticks of its collection, and its sources with theirs.
type SavedTarget = (Entity, (i32, i32), Vec<(Entity, (i32, i32))>);

#[derive(Serialize, Deserialize, Clone)]
struct Stored {
    changed: i32,
    added: i32,
    bytes: Vec<u8>,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// The decoded body of encoded snapshot `bytes`.
pub(crate) fn body_of(bytes: &[u8]) -> Body {
    let stored = &bytes[FRAME_BYTES + header_len(bytes)..];
    let raw = if bytes[8] & 1 == 0 {
        stored.to_vec()
    } else {
        let raw_len = u64::from_le_bytes(bytes[21..29].try_into().expect("8 bytes"));
        lz4_flex::block::decompress(stored, raw_len as usize).expect("our own LZ4 payload")
    };
    bincode::serde::decode_from_slice(&raw, config())
        .expect("our own body")
        .0
}

/// `bytes` with its body replaced by `body` (uncompressed) under a valid frame: lengths and
/// both FNV-1a hashes recomputed, the header kept.
pub(crate) fn reframed(bytes: &[u8], body: &Body) -> Vec<u8> {
    let body = bincode::serde::encode_to_vec(body, config()).expect("encode");
    super::snapshots::reframed(bytes, &body)
}

/// The component blocks of Rapier's state on the context entity: the rigid-body, collider and
/// joint sets and the simulation (islands, broad and narrow phase, CCD).
pub(crate) fn physics_blocks(registered_types: &[String]) -> Vec<usize> {
    const SETS: [&str; 4] = [
        "RapierRigidBodySet",
        "RapierContextColliders",
        "RapierContextJoints",
        "RapierContextSimulation",
    ];
    let blocks: Vec<usize> = registered_types
        .iter()
        .enumerate()
        .filter(|(_, name)| SETS.iter().any(|set| name.ends_with(set)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(blocks.len(), SETS.len(), "{registered_types:?}");
    blocks
}

/// A xorshift generator: mutations are reproducible from their seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Changes one to three bytes of one of the Rapier values of `body`: a flipped bit, a
/// single-byte integer set to another small value (a varint below 251 is one byte), or a byte
/// set to 0 or 250. Returns what it did.
pub(crate) fn mutate(body: &mut Body, blocks: &[usize], rng: &mut Rng) -> String {
    let block = blocks[rng.below(blocks.len())];
    let values = &mut body.world.components[block];
    let value = rng.below(values.len());
    let what = format!("block {block}:");
    mutate_bytes(&mut values[value].1.bytes, rng, what)
}

/// [`mutate`] choosing the value of the block by its size (the largest values, such as a
/// triangle mesh's or a compound's collider, are the likeliest).
fn mutate_by_size(body: &mut Body, blocks: &[usize], rng: &mut Rng) -> String {
    let block = blocks[rng.below(blocks.len())];
    let values = &mut body.world.components[block];
    let total: usize = values.iter().map(|(_, v)| v.bytes.len()).sum();
    let mut at = rng.below(total.max(1));
    let value = values
        .iter()
        .position(|(_, v)| {
            let inside = at < v.bytes.len();
            at = at.saturating_sub(v.bytes.len());
            inside
        })
        .unwrap_or(0);
    let what = format!("block {block} value {value}:");
    mutate_bytes(&mut values[value].1.bytes, rng, what)
}

/// Changes one to three bytes of `bytes` (see [`mutate`]); appends what it did to `what`.
fn mutate_bytes(bytes: &mut [u8], rng: &mut Rng, mut what: String) -> String {
    let changes = 1 + rng.below(3);
    for _ in 0..changes {
        let mut at = rng.below(bytes.len());
        let mode = rng.below(5);
        if mode == 4 {
            // An index-like byte: a small value (short varint, enum tag, bool) made another.
            for _ in 0..64 {
                if bytes[at] < 8 {
                    break;
                }
                at = rng.below(bytes.len());
            }
        }
        let old = bytes[at];
        bytes[at] = match mode {
            0 => old ^ (1 << rng.below(8)),
            1 if old < 251 => rng.below(251) as u8,
            1 => old ^ 1,
            2 => (old as usize + 1 + rng.below(3)).min(250) as u8,
            3 => [0, 250][rng.below(2)],
            _ => ((old as usize + 1 + rng.below(7)) % 8) as u8,
        };
        what.push_str(&format!(" [{at}] {old}->{}", bytes[at]));
    }
    what
}

/// What happened to one mutated snapshot.
#[derive(Debug, Default)]
pub(crate) struct Outcomes {
    pub tried: u32,
    pub refused_decode: u32,
    pub refused_load: u32,
    pub loaded_and_stepped: u32,
    pub panics: Vec<String>,
    pub reasons: std::collections::BTreeMap<String, u32>,
}

/// The scene: 2 balls and 50 boxes in piles (contacts, islands, sleeping).
fn scene() -> TestGame {
    TestGame {
        boxes: 50,
        players: 2,
        ..TestGame::default()
    }
}

/// An error's kind (and the structure or type it names), for counting.
fn reason(error: &SnapshotError) -> String {
    match error {
        SnapshotError::InconsistentPhysics { structure, .. } => {
            format!("inconsistent physics: {structure}")
        }
        SnapshotError::Value { type_name, .. } => format!("value of {type_name} does not decode"),
        SnapshotError::InvalidShape { .. } => "invalid shape".into(),
        SnapshotError::ChecksumMismatch { .. } => "checksum mismatch".into(),
        other => other.to_string(),
    }
}

/// Which scene a mutation run uses.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Scene {
    /// [`scene`]: boxes in piles and two balls.
    Piles,
    /// [`ShapesGame`]: every composite shape and a multibody.
    Shapes,
}

impl Scene {
    fn app(self) -> App {
        match self {
            Scene::Piles => common::app(scene(), 0, SessionMode::Lockstep, false),
            Scene::Shapes => common::app_with_game(ShapesGame, 2, 0, |plugin| {
                plugin.edit_config(|c| c.mode = SessionMode::Lockstep)
            }),
        }
    }

    /// A snapshot of the scene at tick 40 (some boxes asleep, the pendulum swinging).
    fn snapshot(self) -> Vec<u8> {
        let mut app = self.app();
        common::run_until_verified(&mut app, 40);
        app.capture_snapshot::<PackedInput>()
            .expect("capture")
            .encode()
    }
}

/// Loads `bytes` into a fresh App and steps it `ticks` ticks.
fn load_and_step(bytes: &[u8], ticks: i32, out: &mut Outcomes) {
    load_and_step_in(Scene::Piles, bytes, ticks, out);
}

/// Loads `bytes` into a fresh App of `scene` and steps it `ticks` ticks.
fn load_and_step_in(scene: Scene, bytes: &[u8], ticks: i32, out: &mut Outcomes) {
    let snapshot = match WorldSnapshot::decode(bytes, DEFAULT_MAX_SNAPSHOT_BYTES) {
        Ok(s) => s,
        Err(e) => {
            out.refused_decode += 1;
            *out.reasons.entry(reason(&e)).or_default() += 1;
            return;
        }
    };
    let mut app = scene.app();
    match app.load_snapshot::<PackedInput>(&snapshot) {
        Ok(tick) => {
            common::run_until_verified(&mut app, tick + ticks);
            out.loaded_and_stepped += 1;
        }
        Err(e) => {
            out.refused_load += 1;
            *out.reasons.entry(reason(&e)).or_default() += 1;
        }
    }
}

/// Tries `count` mutations (seeds `first..first + count`) of the scene's snapshot, each loaded
/// and stepped `ticks` ticks. A panic is caught only to be counted (the test asserts none).
pub(crate) fn run_mutations(first: u64, count: u64, ticks: i32) -> Outcomes {
    run_mutations_in(Scene::Piles, first, count, ticks)
}

/// [`run_mutations`] in `scene`. In [`Scene::Shapes`], the mutated values are also the
/// `Collider` and `MultibodyJoint` components, each value picked by its size.
pub(crate) fn run_mutations_in(scene: Scene, first: u64, count: u64, ticks: i32) -> Outcomes {
    let bytes = scene.snapshot();
    let header = WorldSnapshot::decode_header(&bytes, DEFAULT_MAX_SNAPSHOT_BYTES).expect("header");
    let mut blocks = physics_blocks(&header.registered_types);
    if scene == Scene::Shapes {
        blocks.extend(shape_blocks(&header.registered_types));
    }
    let honest = body_of(&bytes);
    let messages = Arc::new(Mutex::new(Vec::<String>::new()));
    let previous = std::panic::take_hook();
    {
        let messages = messages.clone();
        std::panic::set_hook(Box::new(move |info| {
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let payload = info
                .payload()
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            messages
                .lock()
                .expect("lock")
                .push(format!("{location}: {payload}"));
        }));
    }
    let mut out = Outcomes::default();
    for seed in first..first + count {
        let mut rng = Rng::new(seed);
        let mut body = honest.clone();
        let what = match scene {
            Scene::Piles => mutate(&mut body, &blocks, &mut rng),
            Scene::Shapes => mutate_by_size(&mut body, &blocks, &mut rng),
        };
        let framed = reframed(&bytes, &body);
        out.tried += 1;
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut partial = Outcomes::default();
            load_and_step_in(scene, &framed, ticks, &mut partial);
            partial
        }));
        match run {
            Ok(partial) => {
                out.refused_decode += partial.refused_decode;
                out.refused_load += partial.refused_load;
                out.loaded_and_stepped += partial.loaded_and_stepped;
                for (k, v) in partial.reasons {
                    *out.reasons.entry(k).or_default() += v;
                }
            }
            Err(_) => {
                let message = messages.lock().expect("lock").pop().unwrap_or_default();
                out.panics.push(format!("seed {seed} ({what}): {message}"));
            }
        }
    }
    std::panic::set_hook(previous);
    out
}

#[test]
fn the_honest_snapshot_reframed_by_the_mutation_harness_loads_and_simulates() {
    let bytes = Scene::Piles.snapshot();
    let framed = reframed(&bytes, &body_of(&bytes));
    let mut out = Outcomes::default();
    load_and_step(&framed, 5, &mut out);
    assert_eq!(out.loaded_and_stepped, 1, "{out:?}");
}

#[test]
fn mutated_rapier_state_under_valid_hashes_is_refused_or_simulates_never_panics() {
    let out = run_mutations(1, 40, 3);
    assert!(out.panics.is_empty(), "{:#?}", out.panics);
    assert_eq!(
        out.tried,
        out.refused_decode + out.refused_load + out.loaded_and_stepped
    );
    assert!(
        out.reasons
            .keys()
            .any(|r| r.starts_with("inconsistent physics")),
        "{out:?}"
    );
}

/// The long run: `SIMSYNC_SNAPSHOT_MUTATIONS` mutations (default 600), printed.
#[test]
#[ignore = "the long run of the mutation test: run it by name with --ignored --nocapture"]
fn many_mutated_snapshots_report() {
    let count = std::env::var("SIMSYNC_SNAPSHOT_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let first = std::env::var("SIMSYNC_SNAPSHOT_MUTATION_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let out = run_mutations(first, count, 10);
    print_outcomes(&out);
    assert!(out.panics.is_empty());
}

// --- Composite shapes and a multibody -----------------------------------------------------------

/// [`scene`] with 10 boxes, plus a fixed triangle-mesh tile and a fixed heightfield with a ball
/// resting on each, a compound (a box and a ball) and a convex hull on the ground, and a
/// two-link multibody pendulum (revolute, then spherical) swinging from a fixed anchor.
#[derive(Clone)]
struct ShapesGame;

impl Plugin for ShapesGame {
    fn build(&self, app: &mut App) {
        TestGame {
            boxes: 10,
            ..scene()
        }
        .build(app);
        app.add_systems(SimulationStartup, spawn_shapes);
    }
}

/// A 4 × 4 m tile of 3 × 3 quads (18 triangles), centred on the origin.
fn tile() -> Collider {
    let vertices = (0..16)
        .map(|i| Vec3::new((i % 4) as f32 - 1.5, 0.0, (i / 4) as f32 - 1.5))
        .collect();
    let quads = (0..9u32).map(|q| q % 3 + q / 3 * 4);
    let indices = quads
        .flat_map(|v| [[v, v + 4, v + 1], [v + 1, v + 4, v + 5]])
        .collect();
    Collider::trimesh_with_flags(vertices, indices, TriMeshFlags::FIX_INTERNAL_EDGES)
        .expect("a valid tile")
}

fn spawn_shapes(mut sim: SimCommands) {
    let ball = |at: Vec3| {
        (
            RigidBody::Dynamic,
            Collider::ball(0.3),
            Transform::from_translation(at),
            Velocity::zero(),
        )
    };
    let fixed = [
        (tile(), Vec3::new(10.0, 0.05, 10.0)),
        (
            Collider::heightfield(vec![0.0; 16], 4, 4, Vec3::new(4.0, 1.0, 4.0)),
            Vec3::new(10.0, 0.05, -10.0),
        ),
    ];
    for (collider, at) in fixed {
        sim.spawn((RigidBody::Fixed, collider, Transform::from_translation(at)))
            .expect("slot");
        sim.spawn(ball(at + Vec3::new(0.5, 0.4, 0.5)))
            .expect("slot");
    }
    let compound = Collider::compound(vec![
        (
            Vec3::ZERO,
            Quat::IDENTITY,
            Collider::cuboid(0.5, 0.25, 0.25),
        ),
        (
            Vec3::new(0.0, 0.5, 0.0),
            Quat::IDENTITY,
            Collider::ball(0.25),
        ),
    ]);
    let corners = [Vec3::ZERO, Vec3::X, Vec3::Z, Vec3::new(0.3, 0.8, 0.3)];
    let hull = Collider::convex_hull(&corners).expect("a hull");
    for (collider, at) in [
        (compound, Vec3::new(-10.0, 0.3, 10.0)),
        (hull, Vec3::new(-10.0, 0.1, -10.0)),
    ] {
        sim.spawn((
            RigidBody::Dynamic,
            collider,
            Transform::from_translation(at),
            Velocity::zero(),
        ))
        .expect("slot");
    }
    let anchor = sim
        .spawn((RigidBody::Fixed, Transform::from_xyz(0.0, 6.0, 15.0)))
        .expect("slot");
    let hinge = RevoluteJointBuilder::new(Vec3::Z).local_anchor2(Vec3::new(-1.0, 0.0, 0.0));
    let arm = sim
        .spawn((
            ball(Vec3::new(1.0, 6.0, 15.0)),
            MultibodyJoint::new(anchor, hinge),
        ))
        .expect("slot");
    let socket = SphericalJointBuilder::new().local_anchor2(Vec3::new(-1.0, 0.0, 0.0));
    sim.spawn((
        ball(Vec3::new(2.0, 6.0, 15.0)),
        MultibodyJoint::new(arm, socket),
    ))
    .expect("slot");
}

/// The component blocks of the `Collider` and `MultibodyJoint` components.
fn shape_blocks(registered_types: &[String]) -> Vec<usize> {
    let blocks: Vec<usize> = registered_types
        .iter()
        .enumerate()
        .filter(|(_, name)| name.ends_with("::Collider") || name.ends_with("::MultibodyJoint"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(blocks.len(), 2, "{registered_types:?}");
    blocks
}

#[test]
fn the_honest_shapes_snapshot_reframed_loads_and_simulates() {
    let bytes = Scene::Shapes.snapshot();
    let framed = reframed(&bytes, &body_of(&bytes));
    let mut out = Outcomes::default();
    load_and_step_in(Scene::Shapes, &framed, 5, &mut out);
    assert_eq!(out.loaded_and_stepped, 1, "{out:?}");
}

#[test]
fn mutated_shapes_and_multibodies_under_valid_hashes_are_refused_or_simulate_never_panic() {
    let out = run_mutations_in(Scene::Shapes, 1, 40, 3);
    assert!(out.panics.is_empty(), "{:#?}", out.panics);
    assert_eq!(
        out.tried,
        out.refused_decode + out.refused_load + out.loaded_and_stepped
    );
    assert!(out.reasons.keys().any(|r| r == "invalid shape"), "{out:?}");
}

/// The long run of the shapes scene: `SIMSYNC_SNAPSHOT_MUTATIONS` mutations (default 600),
/// printed.
#[test]
#[ignore = "the long run of the shapes mutation test: run it by name with --ignored --nocapture"]
fn many_mutated_shapes_snapshots_report() {
    let count = std::env::var("SIMSYNC_SNAPSHOT_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let out = run_mutations_in(Scene::Shapes, 1000, count, 10);
    print_outcomes(&out);
    assert!(out.panics.is_empty());
}

/// Decoding and loading honest snapshots, timed and printed (no assertion on the times): a
/// pile of 1,000 boxes and the shapes scene, each the median of 5 loads into fresh Apps.
#[test]
#[ignore = "a timing, printed: run it by name with --ignored --nocapture"]
fn honest_snapshot_load_timing() {
    let pile = || {
        common::app(
            TestGame {
                boxes: 1_000,
                ..scene()
            },
            0,
            SessionMode::Lockstep,
            false,
        )
    };
    let mut source = pile();
    common::run_until_verified(&mut source, 40);
    let bytes = source
        .capture_snapshot::<PackedInput>()
        .expect("capture")
        .encode();
    time_loads("1,000 boxes", &bytes, pile);
    time_loads("shapes scene", &Scene::Shapes.snapshot(), || {
        Scene::Shapes.app()
    });
}

/// Prints the median of 5 decodes and loads of `bytes` into fresh Apps made by `app`.
fn time_loads(name: &str, bytes: &[u8], app: impl Fn() -> App) {
    let mut times: Vec<std::time::Duration> = (0..5)
        .map(|_| {
            let mut app = app();
            let start = std::time::Instant::now();
            let snapshot =
                WorldSnapshot::decode(bytes, DEFAULT_MAX_SNAPSHOT_BYTES).expect("decode");
            app.load_snapshot::<PackedInput>(&snapshot).expect("load");
            start.elapsed()
        })
        .collect();
    times.sort();
    println!(
        "{name}: {} bytes, decode + load {:?} (median of 5)",
        bytes.len(),
        times[2]
    );
}

fn print_outcomes(out: &Outcomes) {
    println!(
        "tried {}, refused at decode {}, refused at load {}, loaded and stepped {}, panics {}",
        out.tried,
        out.refused_decode,
        out.refused_load,
        out.loaded_and_stepped,
        out.panics.len()
    );
    for (reason, n) in &out.reasons {
        println!("  {n:5}  {reason}");
    }
    for panic in &out.panics {
        println!("PANIC {panic}");
    }
}

// --- Through `sandbox replay --seek` -----------------------------------------------------------

/// CRC-32 (IEEE, reflected) of `parts`: the replay format's record checksum.
fn crc32(parts: &[&[u8]]) -> u32 {
    let mut crc = !0u32;
    for byte in parts.iter().flat_map(|p| p.iter()) {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                0xEDB8_8320 ^ (crc >> 1)
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The records of a replay file: (offset, kind, payload range).
fn replay_records(file: &[u8]) -> Vec<(u8, std::ops::Range<usize>)> {
    let mut at = 10;
    let mut out = Vec::new();
    while at + 13 <= file.len() {
        let kind = file[at];
        let len = u32::from_le_bytes(file[at + 1..at + 5].try_into().expect("4 bytes")) as usize;
        out.push((kind, at + 13..at + 13 + len));
        at += 13 + len;
    }
    out
}

/// `file` with the record at `range` (of `kind`) replaced by `payload`, CRCs recomputed.
fn replace_record(file: &[u8], kind: u8, range: std::ops::Range<usize>, payload: &[u8]) -> Vec<u8> {
    let head = range.start - 13;
    let len = (payload.len() as u32).to_le_bytes();
    let mut out = file[..head].to_vec();
    out.push(kind);
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc32(&[&[kind], &len]).to_le_bytes());
    out.extend_from_slice(&crc32(&[&[kind], &len, payload]).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&file[range.end..]);
    out
}

/// The long run through the sandbox: `SIMSYNC_REPLAY_FILE` (recorded with `sandbox local
/// --record FILE --snapshot-every N`), `SIMSYNC_SANDBOX_BIN` (the built `sandbox` example),
/// `SIMSYNC_SNAPSHOT_MUTATIONS` copies (default 200) whose last snapshot's Rapier state is
/// mutated under valid hashes and CRCs, each played with `replay --seek` at that snapshot's
/// tick. Prints the exit codes; asserts no exit 101 (a panic).
#[test]
#[ignore = "needs a recorded replay and the built sandbox: see the docstring"]
fn replay_seek_on_mutated_replay_copies() {
    let file = std::fs::read(std::env::var("SIMSYNC_REPLAY_FILE").expect("SIMSYNC_REPLAY_FILE"))
        .expect("read the replay");
    let bin = std::env::var("SIMSYNC_SANDBOX_BIN").expect("SIMSYNC_SANDBOX_BIN");
    let count: u64 = std::env::var("SIMSYNC_SNAPSHOT_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let (kind, range) = replay_records(&file)
        .into_iter()
        .rfind(|(kind, _)| *kind == 3)
        .expect("the replay has a snapshot");
    let payload = &file[range.clone()];
    let tick = i32::from_le_bytes(payload[..4].try_into().expect("4 bytes"));
    let bytes = &payload[4..];
    let header = WorldSnapshot::decode_header(bytes, DEFAULT_MAX_SNAPSHOT_BYTES).expect("header");
    let blocks = physics_blocks(&header.registered_types);
    let honest = body_of(bytes);
    let dir = std::env::temp_dir().join(format!("simsync-mutations-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut codes = std::collections::BTreeMap::<i32, u32>::new();
    let mut crashes = Vec::new();
    for seed in 0..count {
        let mut rng = Rng::new(seed + 5_000);
        let mut body = honest.clone();
        let what = mutate(&mut body, &blocks, &mut rng);
        let mut new_payload = tick.to_le_bytes().to_vec();
        new_payload.extend_from_slice(&reframed(bytes, &body));
        let copy = dir.join(format!("copy-{seed}.replay"));
        std::fs::write(
            &copy,
            replace_record(&file, kind, range.clone(), &new_payload),
        )
        .expect("write the copy");
        let status = std::process::Command::new(&bin)
            .args([
                "replay",
                copy.to_str().expect("utf-8"),
                "--seek",
                &tick.to_string(),
                "--quiet",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run the sandbox");
        let code = status.code().unwrap_or(-1);
        *codes.entry(code).or_default() += 1;
        if code == 101 || code < 0 {
            crashes.push(format!("seed {seed} ({what}): exit {code}"));
        } else {
            let _ = std::fs::remove_file(&copy);
        }
    }
    println!("{count} mutated copies of {tick}'s snapshot, exit codes: {codes:?}");
    for crash in &crashes {
        println!("CRASH {crash} (copy kept in {})", dir.display());
    }
    assert!(crashes.is_empty());
}
