//! Rollback cost against plain simulation, measured in the same run (issue 13's table).
//!
//! `b` is one tick of the same scene in a plain Bevy world: the same bundles, Rapier in a
//! schedule with the same timestep, substeps, transform systems and single-threaded executor
//! as `SimulationTick`, and no session ([`scenes::plain_world`]): the median of its ticks 201 to
//! 318, the window every session timing below falls in, so that both simulate the same state
//! (the `asleep` column compares them at tick 260). Every other number is divided by it:
//!
//! - `copy ÷ b`: one rollback (`SimulationWorlds::rollback_predicted`, the verified world copied
//!   into the predicted world 8 ticks ahead of it). Target ≤ 0.25 (gas) and ≤ 1.0 (pile) at
//!   1,000 bodies.
//! - `update ÷ 9b`: one session update with inputs 8 ticks late (verify 1, roll back, predict
//!   8 = nine ticks simulated). Target ≤ 1.10.
//! - `zero-lat ÷ b`: one session update at zero latency (verify 1; the predicted world must
//!   reach the verified tick), with the rollback skip off (`copy`: every update copies) and on
//!   (the default: the predicted world shares the verified world's state, no copy and no second
//!   tick). Target ≤ 1.1. `zero-lat − frame` subtracts Bevy's own frame cost (an App with
//!   `MinimalPlugins` and no session, measured in the same run), which a session update
//!   includes and the plain tick does not. `zero-lat, main 1 thread` is the same update with
//!   every schedule of the App's main world on Bevy's single-threaded executor (a choice of
//!   the game's; the simulation worlds always run theirs so).
//! - `mem`: peak live heap bytes of the session App ÷ those of the plain world (counting
//!   allocator; the session App includes its main App), and both in MB. Target ≤ 2.2.
//!   `mem − host` subtracts the peak of the App the session lives in without it (`MinimalPlugins`
//!   and the same number of updates, [`host_app_bytes`]): what the two simulation worlds and the
//!   session's own state add to a game's App.
//!
//! Scenes ([`scenes`]): "gas", N balls in zero-g in a closed box, never sleeping; "pile", N boxes
//! in piles of 5×5×2 resting with sleeping on, two pushers driven by the players' scripted
//! inputs. Also: the session's overhead per update with zero bodies (µs) and the copy cost per
//! entity of 10,000 plain entities with two registered components.
//!
//! `SIMSYNC_BENCH_SIZES=100,1000` picks the body counts (default `100,1000,5000`).

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "rollback/scenes.rs"]
mod scenes;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bevy::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};
use simsync::deterministic::SessionMode;
use simsync::prelude::*;
use simsync_net::single_threaded_schedules;

use scenes::{Kind, Scene};

/// Counts live heap bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grow(new_size);
        }
        p
    }
}

fn grow(size: usize) {
    let now = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result and the peak live heap bytes above what was live before.
fn peak_bytes<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

/// Ticks every app is warmed up for (more than Rapier's 2 s before bodies fall asleep).
const WARM_TICKS: i32 = 200;

/// A session App of `scene` whose inputs arrive `latency` ticks late.
fn session_app(scene: Scene, latency: u32, skip: bool) -> App {
    let mut app = common::app_with_game(scene, 2, latency, |plugin| {
        plugin.edit_config(|c| {
            c.mode = SessionMode::Predicted;
            c.checksum_interval = 60;
            c.skip_rollback_when_predictions_hold = skip;
        })
    });
    common::run_until_verified(&mut app, WARM_TICKS);
    app
}

fn plain_world(scene: Scene) -> App {
    let mut app = scenes::plain_world(scene);
    for _ in 0..WARM_TICKS {
        scenes::plain_tick(&mut app);
    }
    app
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time_each(n: usize, mut f: impl FnMut()) -> Duration {
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

/// Median of `n` rollbacks, each after one session update (the predicted world 8 ticks ahead).
fn time_rollbacks(app: &mut App, n: usize) -> Duration {
    median(
        (0..n)
            .map(|_| {
                app.update();
                let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
                let t = Instant::now();
                worlds.rollback_predicted();
                t.elapsed()
            })
            .collect(),
    )
}

/// One row of the table.
struct Row {
    scene: Scene,
    tick: Duration,
    copy: Duration,
    update: Duration,
    zero_copy: Duration,
    zero: Duration,
    /// The zero-latency update with every main-app schedule on the single-threaded executor.
    zero_single: Duration,
    /// Peak live heap bytes of the plain world and of the session App.
    memory: (usize, usize),
    /// Bodies asleep at tick 260 in the zero-latency session's verified world and in the
    /// plain world.
    sleeping: (usize, usize),
}

impl Row {
    /// One table line; `frame` is Bevy's own frame cost ([`app_frame`]), shown subtracted from
    /// the zero-latency update in the column after it; `host` the host App's peak heap bytes
    /// ([`host_app_bytes`]), shown subtracted from the session's in the column after `mem`.
    fn print(&self, frame: Duration, host: usize) {
        let b = self.tick.as_secs_f64();
        let r = |d: Duration| d.as_secs_f64() / b;
        println!(
            "| {:?} | {} | {:.3} ms | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} ({:.1} / {:.1} MB) | {:.2} | {} / {} |",
            self.scene.kind,
            self.scene.n,
            b * 1e3,
            r(self.copy),
            r(self.update) / 9.0,
            r(self.zero_copy),
            r(self.zero),
            r(self.zero.saturating_sub(frame)),
            r(self.zero_single),
            self.memory.1 as f64 / self.memory.0.max(1) as f64,
            self.memory.1 as f64 / 1e6,
            self.memory.0 as f64 / 1e6,
            self.memory.1.saturating_sub(host) as f64 / self.memory.0.max(1) as f64,
            self.sleeping.0,
            self.sleeping.1,
        );
    }
}

/// Ticks of the window every timing of [`measure`] falls in, after [`WARM_TICKS`]: the
/// zero-latency updates verify ticks 201–260, the rollbacks restore ticks 221–250 and the
/// updates with inputs 8 ticks late verify 251–310 (and predict up to 318).
const TIMED_TICKS: usize = 118;

fn measure(scene: Scene) -> Row {
    let (_, plain_bytes) = peak_bytes(|| {
        let mut app = plain_world(scene);
        for _ in 0..20 {
            scenes::plain_tick(&mut app);
        }
        app
    });
    // The plain world ticks through the same window of ticks as the sessions below, on the
    // same scripted inputs: the same state (the asleep column compares them at tick 260).
    let mut plain = plain_world(scene);
    let mut plain_ticks = Vec::with_capacity(TIMED_TICKS);
    let mut plain_asleep = 0;
    for i in 0..TIMED_TICKS {
        let t = Instant::now();
        scenes::plain_tick(&mut plain);
        plain_ticks.push(t.elapsed());
        if i == 59 {
            plain_asleep = asleep(plain.world_mut());
        }
    }
    drop(plain);
    let (mut late, session_bytes) = peak_bytes(|| {
        let mut app = session_app(scene, 8, false);
        for _ in 0..20 {
            app.update();
        }
        app
    });
    let mut zero_copy = session_app(scene, 0, false);
    let mut zero = session_app(scene, 0, true);
    let mut zero_single = session_app(scene, 0, true);
    single_threaded_schedules(&mut zero_single);
    let tick = median(plain_ticks);
    let copy = time_rollbacks(&mut late, 30);
    let update = time_each(60, || late.update());
    let zero_copy_t = time_each(60, || zero_copy.update());
    let zero_t = time_each(60, || zero.update());
    let zero_single_t = time_each(60, || zero_single.update());
    let sleeping = (sleeping_bodies(&mut zero), plain_asleep);
    Row {
        scene,
        tick,
        copy,
        update,
        zero_copy: zero_copy_t,
        zero: zero_t,
        zero_single: zero_single_t,
        memory: (plain_bytes, session_bytes),
        sleeping,
    }
}

/// Bodies asleep in the verified world.
fn sleeping_bodies(app: &mut App) -> usize {
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    asleep(worlds.verified_mut())
}

/// Bodies asleep in `world`.
fn asleep(world: &mut World) -> usize {
    let mut q = world.query::<&bevy_rapier3d::prelude::Sleeping>();
    q.iter(world).filter(|s| s.sleeping).count()
}

fn sizes() -> Vec<u32> {
    std::env::var("SIMSYNC_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 1_000, 5_000])
}

/// With `SIMSYNC_ROLLBACK_PROFILE=1` (each rollback step's time on stderr): 20 rollbacks of each
/// scene between `profile <scene>` and `profile end` markers on stderr, and nothing else.
fn profile_only() -> bool {
    if std::env::var_os("SIMSYNC_ROLLBACK_PROFILE").is_none() {
        return false;
    }
    for n in sizes() {
        for kind in [Kind::Gas, Kind::Pile] {
            let mut app = session_app(Scene { kind, n }, 8, false);
            eprintln!("profile {kind:?} {n}");
            time_rollbacks(&mut app, 20);
            eprintln!("profile end");
            rapier_parts(&mut app, kind, n);
        }
    }
    true
}

/// A built App with `MinimalPlugins` and nothing else: the App a session lives in, without it.
fn minimal_app() -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    app.finish();
    app.cleanup();
    app
}

/// Peak live heap bytes of the App a session lives in, without the session: `MinimalPlugins`,
/// built and updated as often as [`measure`]'s session App is while its peak is measured.
fn host_app_bytes() -> usize {
    let (_, bytes) = peak_bytes(|| {
        let mut app = minimal_app();
        for _ in 0..WARM_TICKS + 28 {
            app.update();
        }
        app
    });
    bytes
}

/// One update of an App with `MinimalPlugins` and nothing else: the main app's own frame cost
/// (schedules, executor, time), which every session update includes and a plain world tick
/// does not.
fn app_frame(single_threaded: bool) -> Duration {
    let mut app = minimal_app();
    for _ in 0..50 {
        app.update();
    }
    if single_threaded {
        single_threaded_schedules(&mut app);
    }
    time_each(200, || app.update())
}

/// Median time of `clone_from` of one part of Rapier's state, from a fresh clone of it.
fn clone_time<T: Clone>(part: &T) -> Duration {
    let mut to = part.clone();
    time_each(15, || to.clone_from(part))
}

/// The alternative of copying Rapier's parts in parallel on Bevy's compute pool: the narrow
/// phase on one task, islands, broad phase and the rigid-body and collider sets on another,
/// against the same `clone_from`s one after the other; reported through `out`.
fn parallel_parts(
    narrow: &bevy_rapier3d::rapier::geometry::NarrowPhase,
    islands: &bevy_rapier3d::rapier::dynamics::IslandManager,
    broad: &bevy_rapier3d::rapier::geometry::BroadPhaseBvh,
    bodies: &bevy_rapier3d::plugin::context::RapierRigidBodySet,
    colliders: &bevy_rapier3d::plugin::context::RapierContextColliders,
    out: impl Fn(String),
) {
    let mut to = (
        narrow.clone(),
        islands.clone(),
        broad.clone(),
        bodies.bodies.clone(),
        colliders.colliders.clone(),
    );
    let sequential = time_each(15, || {
        to.0.clone_from(narrow);
        to.1.clone_from(islands);
        to.2.clone_from(broad);
        to.3.clone_from(&bodies.bodies);
        to.4.clone_from(&colliders.colliders);
    });
    let pool = bevy::tasks::ComputeTaskPool::get();
    let parallel = time_each(15, || {
        let (n, i, b, r, c) = (&mut to.0, &mut to.1, &mut to.2, &mut to.3, &mut to.4);
        pool.scope(|s| {
            s.spawn(async move { n.clone_from(narrow) });
            s.spawn(async move {
                i.clone_from(islands);
                b.clone_from(broad);
                r.clone_from(&bodies.bodies);
                c.clone_from(&colliders.colliders);
            });
        });
    });
    out(format!(
        "Rapier's parts one after the other {:.3} ms, on two compute-pool tasks {:.3} ms ({} threads)",
        sequential.as_secs_f64() * 1e3,
        parallel.as_secs_f64() * 1e3,
        pool.thread_num()
    ));
}

/// Prints, for the verified world of `app`, the time each part of Rapier's state takes to copy
/// (`clone_from`: a clone and the old value's free, the work a rollback does for it), and the
/// alternative of a serde round trip of the narrow phase through a reused bincode buffer.
fn rapier_parts(app: &mut App, kind: Kind, n: u32) {
    use bevy_rapier3d::plugin::context::{
        RapierContextColliders, RapierContextSimulation, RapierRigidBodySet,
    };
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let world = worlds.verified_mut();
    let mut q = world.query::<(
        &RapierContextSimulation,
        &RapierRigidBodySet,
        &RapierContextColliders,
    )>();
    let Ok((sim, bodies, colliders)) = q.single(world) else {
        return;
    };
    let pairs = sim
        .narrow_phase
        .contact_graph()
        .raw_graph()
        .raw_edges()
        .len();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "parts {kind:?} {n}: contact pairs {pairs}; clone_from ms: narrow phase {:.3}, islands {:.3}, broad phase {:.3}, CCD {:.3}, rigid-body set {:.3}, collider set {:.3}",
        ms(clone_time(&sim.narrow_phase)),
        ms(clone_time(&sim.islands)),
        ms(clone_time(&sim.broad_phase)),
        ms(clone_time(&sim.ccd_solver)),
        ms(clone_time(&bodies.bodies)),
        ms(clone_time(&colliders.colliders)),
    );
    parallel_parts(
        &sim.narrow_phase,
        &sim.islands,
        &sim.broad_phase,
        bodies,
        colliders,
        |d| {
            println!("parts {kind:?} {n}: {d}");
        },
    );
    let config = bincode::config::standard();
    let mut buffer: Vec<u8> = Vec::new();
    let encode = time_each(15, || {
        buffer.clear();
        bincode::serde::encode_into_std_write(&sim.narrow_phase, &mut buffer, config)
            .expect("the narrow phase encodes");
    });
    let decode = time_each(15, || {
        let (phase, _): (bevy_rapier3d::rapier::geometry::NarrowPhase, usize) =
            bincode::serde::decode_from_slice(&buffer, config).expect("and decodes");
        std::hint::black_box(phase);
    });
    println!(
        "parts {kind:?} {n}: narrow phase serde round trip ms: encode {:.3} + decode {:.3} ({} bytes)",
        ms(encode),
        ms(decode),
        buffer.len()
    );
}

/// With `SIMSYNC_ROLLBACK_LOOP=gas` or `=pile`: 2,000 zero-latency session updates of that
/// scene at the first size of `SIMSYNC_BENCH_SIZES` and nothing else, for an outside profiler
/// (`perf record`); with `SIMSYNC_ROLLBACK_LOOP_LATENCY=8` as well, updates with inputs that
/// many ticks late (a rollback every update) instead; with
/// `SIMSYNC_ROLLBACK_LOOP_SINGLE_THREADED=1`, every main-app schedule single-threaded. With
/// `=gas-plain` or `=pile-plain`: 2,000 ticks of the plain world instead, the profile to compare
/// the session's with.
fn loop_only() -> bool {
    let Some(kind) = std::env::var("SIMSYNC_ROLLBACK_LOOP").ok() else {
        return false;
    };
    let n = sizes().first().copied().unwrap_or(1_000);
    let (name, plain) = match kind.strip_suffix("-plain") {
        Some(name) => (name, true),
        None => (kind.as_str(), false),
    };
    let kind = if name == "gas" { Kind::Gas } else { Kind::Pile };
    if plain {
        let mut world = plain_world(Scene { kind, n });
        let t = Instant::now();
        for _ in 0..2_000 {
            scenes::plain_tick(&mut world);
        }
        eprintln!(
            "{kind:?} {n}: {:?} per plain tick, {} bodies asleep",
            t.elapsed() / 2_000,
            asleep(world.world_mut())
        );
        return true;
    }
    let latency = std::env::var("SIMSYNC_ROLLBACK_LOOP_LATENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut app = session_app(Scene { kind, n }, latency, latency == 0);
    if std::env::var_os("SIMSYNC_ROLLBACK_LOOP_SINGLE_THREADED").is_some() {
        single_threaded_schedules(&mut app);
    }
    let t = Instant::now();
    for _ in 0..2_000 {
        app.update();
    }
    eprintln!(
        "{kind:?} {n}: {:?} per update, inputs {latency} ticks late, {} bodies asleep",
        t.elapsed() / 2_000,
        sleeping_bodies(&mut app)
    );
    true
}

fn bench(c: &mut Criterion) {
    if profile_only() || loop_only() {
        return;
    }
    let mut group = c.benchmark_group("1000_bodies_pile");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(2));
    let pile = Scene {
        kind: Kind::Pile,
        n: 1_000,
    };
    let mut app = session_app(pile, 8, false);
    group.bench_function("rollback", |b| {
        b.iter(|| {
            app.world_mut()
                .resource_mut::<SimulationWorlds>()
                .rollback_predicted()
        })
    });
    group.finish();
    drop(app);

    let frame = app_frame(false);
    let host = host_app_bytes();
    println!(
        "| scene | N | plain tick b | copy ÷ b | update ÷ 9b | zero-lat copy ÷ b | zero-lat ÷ b | zero-lat − frame ÷ b | zero-lat, main 1 thread ÷ b | mem ÷ plain (session / plain) | mem − host ÷ plain | asleep at tick 260 (session / plain) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for n in sizes() {
        for kind in [Kind::Gas, Kind::Pile] {
            measure(Scene { kind, n }).print(frame, host);
        }
    }
    println!(
        "Bevy's own frame (an App with MinimalPlugins and no session, one update): {:.1} µs; its peak heap {:.2} MB",
        frame.as_secs_f64() * 1e6,
        host as f64 / 1e6
    );
    for kind in [Kind::Gas, Kind::Pile] {
        let scene = Scene { kind, n: 0 };
        let (mut late, late_bytes) = peak_bytes(|| session_app(scene, 8, false));
        let (_, plain_bytes) = peak_bytes(|| plain_world(scene));
        let mut zero = session_app(scene, 0, true);
        let update = time_each(200, || late.update());
        let zero = time_each(200, || zero.update());
        println!(
            "session overhead, {kind:?} scene with 0 bodies: update (9 ticks) {:.1} µs, zero-latency update {:.1} µs, peak heap {:.1} MB (plain world {:.1} MB)",
            update.as_secs_f64() * 1e6,
            zero.as_secs_f64() * 1e6,
            late_bytes as f64 / 1e6,
            plain_bytes as f64 / 1e6
        );
    }
    let mut zero = session_app(
        Scene {
            kind: Kind::Gas,
            n: 0,
        },
        0,
        true,
    );
    single_threaded_schedules(&mut zero);
    let zero = time_each(200, || zero.update());
    println!(
        "with every main-app schedule single-threaded: zero-latency update with 0 bodies {:.1} µs, Bevy's own frame {:.1} µs",
        zero.as_secs_f64() * 1e6,
        app_frame(true).as_secs_f64() * 1e6
    );
    let plain = Scene {
        kind: Kind::Plain,
        n: 10_000,
    };
    let mut app = session_app(plain, 8, false);
    let copy = time_rollbacks(&mut app, 30);
    println!(
        "10,000 plain entities, two registered components: copy {:?} = {:.1} ns/entity",
        copy,
        copy.as_secs_f64() * 1e9 / 10_000.0
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
