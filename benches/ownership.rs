//! Ownership at scale (issue 14's scale table): P participants, each simulating the same N
//! bodies in its own Rapier world, and the entity server, in this process over the in-memory
//! transport with a link conditioner (40 ± 5 ms one way, 1 % loss), stepped at 64 Hz of
//! simulated time, for upload budgets of 32, 64 and 128 kB/s (the relay budget per participant
//! twice the upload budget).
//!
//! The scene: a ground; N 0.5 m boxes resting on it in a grid; one floating avatar per
//! participant that circles its part of the grid (always held, GRAB). Every second each
//! participant pokes a new 1/8 of its own part of the bodies up and sideways (rule 8), so about
//! 1/8 of the bodies are moving at any time: they fly, land, come to rest and are released
//! (rule 12). After the scripted seconds, a settling time with no pokes.
//!
//! Printed per budget (numbers, never asserted on time):
//! - up, down: state bytes per second per participant (batches sent, relays received), means
//!   over the scripted seconds;
//! - bytes/body: mean bytes per body state sent;
//! - server µs/tick: the entity server's update (receive, arbitrate, relay under the budgets),
//!   mean and max;
//! - bids/s: bids sent by all participants per second;
//! - deferred: body states the budgets left for a later frame, per second (participants,
//!   relay);
//! - moving div: the largest distance between a moving body's copy on its owner and on any
//!   other participant, sampled every 1/4 s (p50 and max over samples);
//! - resting div: the largest distance between two copies of any body after settling (target
//!   ≤ 1 cm).
//!
//! `SIMSYNC_OWNERSHIP_SCALE=8x2000` sets participants × bodies (default `8x500`),
//! `SIMSYNC_OWNERSHIP_SECONDS=6` the scripted seconds (default 4; 4 s of settling follow),
//! `SIMSYNC_OWNERSHIP_BUDGETS=32000,64000` the upload budgets, `SIMSYNC_OWNERSHIP_DELTA=0` turns
//! deltas against acknowledged states off (ownership rule 20; on by default).
//!
//! The `relay_path` group times the entity server's relay alone ([`RelayLoad`]: the server App
//! as `simsync-server` hosts it, fake participants without physics that move every body every
//! tick — the load test's worst case): `SIMSYNC_RELAY_SCALE=4x200` sets participants × bodies
//! (default 4 × 200, one room of the load test), `SIMSYNC_RELAY_BUDGET=72000` the relay budget
//! per receiver in B/s (default 128,000: the 4 × 200 room stays under it, so its passes never
//! rank; below about 80,000 they rank every pass, as the load test's do). Printed: µs per
//! relayed body state, and the same as a ratio to copying the same bytes in the same run (the
//! floor: each state's bytes copied into its receiver's packet buffer), so the figure holds on
//! any machine. The at-scale table above does not run with `SIMSYNC_OWNERSHIP_BUDGETS=none`.

use std::time::{Duration, Instant};

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};
use simsync_net::prelude::*;
use simsync_net::{LinkConditionerConfig, MemoryNetwork};
use simsync_ownership::prelude::*;
use simsync_ownership::testing::RelayLoad;
use simsync_ownership::{EntityServer, StateBatch, StateBudgetConfig};

const DT: Duration = Duration::from_nanos(15_625_000);
const HZ: u32 = 64;
const SPACING: f32 = 1.5;

/// Participants × bodies of the at-scale table (`SIMSYNC_OWNERSHIP_SCALE=PxN`).
fn scale() -> (usize, u64) {
    env_setting("SIMSYNC_OWNERSHIP_SCALE", (8, 500), participants_by_bodies)
}

/// Scripted seconds of the at-scale table (`SIMSYNC_OWNERSHIP_SECONDS`).
fn seconds() -> u32 {
    env_setting("SIMSYNC_OWNERSHIP_SECONDS", 4, |s| s.parse().ok())
}

/// `PxN` read as participants × bodies.
fn participants_by_bodies(s: &str) -> Option<(usize, u64)> {
    let (p, n) = s.split_once('x')?;
    Some((p.trim().parse().ok()?, n.trim().parse().ok()?))
}

/// Whether deltas against acknowledged states are on (`SIMSYNC_OWNERSHIP_DELTA=0`: off).
fn delta() -> bool {
    std::env::var("SIMSYNC_OWNERSHIP_DELTA")
        .ok()
        .is_none_or(|s| s.trim() != "0")
}

fn budgets() -> Vec<u32> {
    std::env::var("SIMSYNC_OWNERSHIP_BUDGETS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![32_000, 64_000, 128_000])
}

/// Where body `id` (1-based) rests.
fn grid(id: u64, n: u64) -> Vec3 {
    let side = (n as f32).sqrt().ceil() as u64;
    let (x, z) = ((id - 1) % side, (id - 1) / side);
    let half = side as f32 * SPACING / 2.0;
    Vec3::new(x as f32 * SPACING - half, 0.25, z as f32 * SPACING - half)
}

fn avatar_id(n: u64, i: usize) -> u64 {
    n + 1 + i as u64
}

fn server_app(network: &MemoryNetwork, n: u64, p: usize, budget: StateBudgetConfig) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(NetServerPlugin::default().with_clock(NetClock::Fixed(DT)))
        .add_plugins(OwnershipPlugin::entity_server().with_state_budget(budget))
        .insert_net_server(network.server_transport().expect("one server"));
    for id in 1..=n {
        app.world_mut().spawn((
            BodyNetId(BodyId(id)),
            RigidBody::Dynamic,
            Transform::from_translation(grid(id, n)),
        ));
    }
    for i in 0..p {
        app.world_mut().spawn((
            BodyNetId(BodyId(avatar_id(n, i))),
            RigidBody::Dynamic,
            Transform::from_translation(avatar_start(i, p)),
        ));
    }
    app
}

fn avatar_start(i: usize, p: usize) -> Vec3 {
    let angle = i as f32 / p as f32 * std::f32::consts::TAU;
    Vec3::new(angle.cos() * 8.0, 1.5, angle.sin() * 8.0)
}

fn participant_app(
    network: &MemoryNetwork,
    n: u64,
    p: usize,
    i: usize,
    budget: StateBudgetConfig,
) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins((
            TransformPlugin,
            RapierPhysicsPlugin::<NoUserData>::default(),
        ))
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::Fixed(DT)))
        .add_plugins(
            OwnershipPlugin::participant()
                .with_name(format!("p{i}"))
                .with_state_budget(budget),
        )
        .insert_net_client(network.client_transport(i as u64 + 1).expect("fresh id"));
    let world = app.world_mut();
    world.spawn((
        RigidBody::Fixed,
        Collider::cuboid(500.0, 0.5, 500.0),
        Transform::from_xyz(0.0, -0.5, 0.0),
    ));
    for id in 1..=n {
        world.spawn((
            BodyNetId(BodyId(id)),
            Ownable,
            RigidBody::Dynamic,
            Collider::cuboid(0.25, 0.25, 0.25),
            Transform::from_translation(grid(id, n)),
            Velocity::zero(),
            Sleeping::default(),
        ));
    }
    for j in 0..p {
        let mut avatar = world.spawn((
            BodyNetId(BodyId(avatar_id(n, j))),
            Ownable,
            RigidBody::Dynamic,
            Collider::ball(0.4),
            GravityScale(0.0),
            Transform::from_translation(avatar_start(j, p)),
            Velocity::zero(),
            Sleeping::default(),
        ));
        if j == i {
            avatar.insert(ParticipantAvatar);
        }
    }
    app
}

fn entity(app: &App, body: u64) -> Option<Entity> {
    app.world()
        .resource::<OwnershipClient>()
        .entity_of(BodyId(body))
}

/// One run's measurements.
#[derive(Debug, Default)]
struct Row {
    participants: usize,
    bodies: u64,
    budget: u32,
    up: f64,
    down: f64,
    bytes_per_body: f64,
    server_us_mean: f64,
    server_us_max: f64,
    bids_per_second: f64,
    deferred_up: f64,
    deferred_relay: f64,
    moving_p50: f32,
    moving_max: f32,
    resting_max: f32,
    still_owned: usize,
}

struct Run {
    server: App,
    participants: Vec<App>,
    n: u64,
    server_times: Vec<Duration>,
}

impl Run {
    fn new(p: usize, n: u64, budget: u32) -> Self {
        let link = LinkConditionerConfig {
            loss_percent: 1.0,
            ..LinkConditionerConfig::PERFECT.with_latency(40, 5)
        };
        let network = MemoryNetwork::new(0x5ca1e, link).expect("valid link");
        let budget = StateBudgetConfig {
            upload_bytes_per_second: budget,
            relay_bytes_per_second: budget * 2,
            interest_radius: None,
            delta_encoding: delta(),
        };
        let server = server_app(&network, n, p, budget);
        let participants = (0..p)
            .map(|i| participant_app(&network, n, p, i, budget))
            .collect();
        let mut run = Self {
            server,
            participants,
            n,
            server_times: Vec::new(),
        };
        for _ in 0..(HZ * 10) {
            run.step(0);
            if run
                .participants
                .iter()
                .all(|a| a.world().resource::<OwnershipClient>().me().is_some())
            {
                break;
            }
        }
        run.server_times.clear();
        run
    }

    /// One tick; `tick` drives the avatars and the pokes (`u32::MAX`: no script).
    fn step(&mut self, tick: u32) {
        let started = Instant::now();
        self.server.update();
        self.server_times.push(started.elapsed());
        let p = self.participants.len();
        for (i, app) in self.participants.iter_mut().enumerate() {
            if tick != u32::MAX {
                script(app, self.n, p, i, tick);
            }
            app.update();
        }
    }
}

/// Participant `i`'s avatar circles; every second it pokes the next 1/8 of its part of the
/// bodies (ids ≡ i mod p) up and sideways.
fn script(app: &mut App, n: u64, p: usize, i: usize, tick: u32) {
    let t = tick as f32 / HZ as f32;
    if let Some(avatar) = entity(app, avatar_id(n, i)) {
        let angle = t * 0.5 + i as f32;
        let mut v = app
            .world_mut()
            .get_mut::<Velocity>(avatar)
            .expect("velocity");
        v.linear = Vec3::new(-angle.sin(), 0.0, angle.cos()) * 4.0;
    }
    if !tick.is_multiple_of(HZ) {
        return;
    }
    let round = u64::from(tick / HZ);
    let mine: Vec<u64> = (1..=n).filter(|id| id % p as u64 == i as u64).collect();
    for (k, id) in mine.iter().enumerate() {
        if k as u64 % 8 != round % 8 {
            continue;
        }
        let Some(e) = entity(app, *id) else { continue };
        let world = app.world_mut();
        if let Some(mut v) = world.get_mut::<Velocity>(e) {
            let s = (*id as f32).sin();
            v.linear = Vec3::new(s * 2.0, 4.0, (s * 7.0).cos() * 2.0);
            v.angular = Vec3::new(1.0, s * 3.0, 0.5);
        }
        if let Some(mut sleeping) = world.get_mut::<Sleeping>(e) {
            sleeping.sleeping = false;
        }
        world.commands().entity(e).poke();
        world.flush();
    }
}

/// The largest distance between a moving body's copy on its owner and on the others.
fn moving_divergence(run: &Run) -> Option<f32> {
    let server = run.server.world().resource::<EntityServer>();
    let ids: std::collections::HashMap<ParticipantId, usize> = run
        .participants
        .iter()
        .enumerate()
        .filter_map(|(i, a)| Some((a.world().resource::<OwnershipClient>().me()?, i)))
        .collect();
    let mut worst: Option<f32> = None;
    for id in 1..=run.n {
        let Some((owner, _)) = server.arbiter().owner(BodyId(id)) else {
            continue;
        };
        let Some(&o) = ids.get(&owner) else { continue };
        let owner_app = &run.participants[o];
        let Some(e) = entity(owner_app, id) else {
            continue;
        };
        let world = owner_app.world();
        let moving = world
            .get::<Velocity>(e)
            .is_some_and(|v| v.linear.length() > 0.1);
        if !moving {
            continue;
        }
        let at = world.get::<Transform>(e).expect("transform").translation;
        for other in &run.participants {
            if let Some(oe) = entity(other, id) {
                let d = other
                    .world()
                    .get::<Transform>(oe)
                    .expect("transform")
                    .translation
                    .distance(at);
                worst = Some(worst.map_or(d, |w| w.max(d)));
            }
        }
    }
    worst
}

fn resting_divergence(run: &Run) -> f32 {
    let mut worst = 0.0f32;
    for id in 1..=run.n {
        let copies: Vec<Vec3> = run
            .participants
            .iter()
            .filter_map(|a| {
                let e = entity(a, id)?;
                Some(a.world().get::<Transform>(e)?.translation)
            })
            .collect();
        for a in &copies {
            for b in &copies {
                worst = worst.max(a.distance(*b));
            }
        }
    }
    worst
}

fn totals(run: &Run) -> (u64, u64, u64, u64, u64) {
    let mut t = (0, 0, 0, 0, 0);
    for app in &run.participants {
        let s = app.world().resource::<OwnershipClient>().stats();
        t.0 += s.state_update_bytes;
        t.1 += s.state_bytes_received;
        t.2 += s.state_updates_sent;
        t.3 += s.bids_sent;
        t.4 += s.bodies_deferred;
    }
    t
}

fn measure(p: usize, n: u64, budget: u32) -> Row {
    let mut run = Run::new(p, n, budget);
    let ticks = seconds() * HZ;
    let before = totals(&run);
    let relay_deferred_before = run
        .server
        .world()
        .resource::<EntityServer>()
        .stats()
        .relay_bodies_deferred;
    let mut samples = Vec::new();
    for tick in 0..ticks {
        run.step(tick);
        if tick % (HZ / 4) == HZ / 8
            && let Some(d) = moving_divergence(&run)
        {
            samples.push(d);
        }
    }
    let after = totals(&run);
    let relay_deferred = run
        .server
        .world()
        .resource::<EntityServer>()
        .stats()
        .relay_bodies_deferred
        - relay_deferred_before;
    let secs = f64::from(seconds());
    let mut times: Vec<f64> = run
        .server_times
        .iter()
        .map(|t| t.as_secs_f64() * 1e6)
        .collect();
    for _ in 0..(HZ * 4) {
        run.step(u32::MAX);
    }
    samples.sort_by(f32::total_cmp);
    times.sort_by(f64::total_cmp);
    let still_owned = run
        .server
        .world()
        .resource::<EntityServer>()
        .arbiter()
        .records()
        .iter()
        .filter(|r| r.owner.is_some() && r.body.0 <= n)
        .count();
    Row {
        participants: p,
        bodies: n,
        budget,
        up: (after.0 - before.0) as f64 / secs / p as f64,
        down: (after.1 - before.1) as f64 / secs / p as f64,
        bytes_per_body: (after.0 - before.0) as f64 / (after.2 - before.2).max(1) as f64,
        server_us_mean: times.iter().sum::<f64>() / times.len().max(1) as f64,
        server_us_max: times.last().copied().unwrap_or(0.0),
        bids_per_second: (after.3 - before.3) as f64 / secs,
        deferred_up: (after.4 - before.4) as f64 / secs,
        deferred_relay: relay_deferred as f64 / secs,
        moving_p50: samples.get(samples.len() / 2).copied().unwrap_or(0.0),
        moving_max: samples.last().copied().unwrap_or(0.0),
        resting_max: resting_divergence(&run),
        still_owned,
    }
}

impl Row {
    fn print(&self) {
        println!(
            "| {}×{} | {} kB/s | {:.0} | {:.0} | {:.1} | {:.0} / {:.0} | {:.1} | {:.0} / {:.0} | {:.3} / {:.3} m | {:.4} m | {} |",
            self.participants,
            self.bodies,
            self.budget / 1_000,
            self.up,
            self.down,
            self.bytes_per_body,
            self.server_us_mean,
            self.server_us_max,
            self.bids_per_second,
            self.deferred_up,
            self.deferred_relay,
            self.moving_p50,
            self.moving_max,
            self.resting_max,
            self.still_owned,
        );
    }
}

fn bench(c: &mut Criterion) {
    // Criterion's part: encoding and decoding one 1 kB batch (about 45 moving bodies).
    let batch = StateBatch {
        seq: 7,
        focus: Some(Vec3::ONE),
        bodies: (0..45)
            .map(|i| {
                let t = i as f32;
                (
                    BodyId(i * 3),
                    simsync_ownership::BodyState {
                        position: Vec3::new(t * 0.3, 1.0, -t * 0.2),
                        rotation: Quat::from_rotation_y(t),
                        linear_velocity: Vec3::new(1.0, -t * 0.1, 0.5),
                        angular_velocity: Vec3::new(0.0, 2.0, t * 0.05),
                    },
                )
            })
            .collect(),
    };
    let bytes = batch.encode().expect("encodes");
    let mut group = c.benchmark_group("state_batch");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(1));
    group.bench_function("encode_45", |b| b.iter(|| batch.encode()));
    group.bench_function("decode_45", |b| b.iter(|| StateBatch::decode(&bytes)));
    group.finish();

    let (p, n) = scale();
    println!(
        "\nownership at scale: {p} participants × {n} bodies, {} s scripted + 4 s settling, 40 ± 5 ms, 1 % loss; relay budget = 2 × upload; deltas {}",
        seconds(),
        if delta() { "on" } else { "off" }
    );
    println!(
        "| P×N | upload budget | up B/s | down B/s | bytes/body | server µs/tick mean / max | bids/s | deferred/s up / relay | moving div p50 / max | resting div | owned after settling |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for budget in budgets() {
        measure(p, n, budget).print();
    }
}

/// The setting `name` from the environment read by `parse`, or `default` when it is unset; a
/// value `parse` refuses is said on stderr (what was asked, the default used instead).
fn env_setting<T: std::fmt::Debug>(name: &str, default: T, parse: impl Fn(&str) -> Option<T>) -> T {
    let Ok(raw) = std::env::var(name) else {
        return default;
    };
    parse(raw.trim()).unwrap_or_else(|| {
        eprintln!("{name}={raw:?} is not understood; using {default:?}");
        default
    })
}

/// Participants × bodies of the relay-path group (`SIMSYNC_RELAY_SCALE=PxN`).
fn relay_scale() -> (usize, u64) {
    env_setting("SIMSYNC_RELAY_SCALE", (4, 200), participants_by_bodies)
}

/// The relay budget per receiver of the relay-path group, B/s (`SIMSYNC_RELAY_BUDGET`).
fn relay_budget() -> StateBudgetConfig {
    let default = StateBudgetConfig::default();
    StateBudgetConfig {
        relay_bytes_per_second: env_setting(
            "SIMSYNC_RELAY_BUDGET",
            default.relay_bytes_per_second,
            |s| s.parse().ok(),
        ),
        ..default
    }
}

/// A relay load with every participant owning all of its bodies, after 2 s of steady state.
fn relay_load(p: usize, n: u64, budget: StateBudgetConfig) -> RelayLoad {
    let mut load = RelayLoad::new(p, n, budget, HZ as u16).expect("valid budget");
    for _ in 0..(HZ * 10) {
        load.step();
        if load.all_owned() {
            break;
        }
    }
    assert!(load.all_owned(), "the fake participants own their bodies");
    for _ in 0..(HZ * 2) {
        load.step();
    }
    load
}

/// Copies `states` entries of `bytes` bytes in all (as laid out: a few bytes each) from
/// `source` into `receivers` packet buffers, round robin: the floor of a relay tick.
fn copy_floor(source: &[u8], buffers: &mut [Vec<u8>], states: usize, bytes: usize) {
    for b in buffers.iter_mut() {
        b.clear();
    }
    let receivers = buffers.len();
    let mut at = 0;
    for k in 0..states {
        // The k-th state's share of the bytes, so the total is exactly `bytes`.
        let len = (k + 1) * bytes / states - k * bytes / states;
        if at + len > source.len() {
            at = 0;
        }
        buffers[k % receivers].extend_from_slice(&source[at..at + len]);
        at += len;
    }
    std::hint::black_box(buffers);
}

fn relay_path(c: &mut Criterion) {
    let (p, n) = relay_scale();
    let budget = relay_budget();
    let mut load = relay_load(p, n, budget);
    let ticks = HZ * 4;
    let before = *load.server().stats();
    let mut took = Duration::ZERO;
    for _ in 0..ticks {
        took += load.step();
    }
    let after = *load.server().stats();
    let states = (after.relay_bodies_sent - before.relay_bodies_sent) as usize;
    let bytes = (after.relay_bytes_sent - before.relay_bytes_sent) as usize;
    let per_tick = (states / ticks as usize).max(1);
    let bytes_per_tick = bytes / ticks as usize;
    let source: Vec<u8> = (0..64 * 1024).map(|i| (i * 31 % 251) as u8).collect();
    let mut buffers = vec![Vec::with_capacity(bytes_per_tick); p];
    let rounds = 2_000;
    let started = Instant::now();
    for _ in 0..rounds {
        copy_floor(&source, &mut buffers, per_tick, bytes_per_tick);
    }
    let floor = started.elapsed().as_secs_f64() / f64::from(rounds) / per_tick as f64;
    let per_state = took.as_secs_f64() / states.max(1) as f64;
    println!(
        "\nrelay path, {p} participants × {n} moving bodies, 64 Hz, relay budget {} B/s: \
         {states} body states relayed in {ticks} ticks ({:.1} B each), server {:.3} ms/tick; \
         {:.3} µs per relayed body state; floor (copying the same bytes) {:.1} ns per state; \
         ratio {:.1}",
        budget.relay_bytes_per_second,
        bytes as f64 / states.max(1) as f64,
        took.as_secs_f64() * 1e3 / f64::from(ticks),
        per_state * 1e6,
        floor * 1e9,
        per_state / floor,
    );
    let mut group = c.benchmark_group("relay_path");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    group.bench_function(format!("server_tick_{p}x{n}"), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| load.step()).sum())
    });
    group.bench_function(format!("copy_floor_{p}x{n}"), |b| {
        b.iter(|| copy_floor(&source, &mut buffers, per_tick, bytes_per_tick))
    });
    group.finish();
}

criterion_group!(benches, relay_path, bench);
criterion_main!(benches);
