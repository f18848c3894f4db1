//! Frame-phase costs, each compared with a baseline measured in the same run.
//!
//! - `object_tick/*`: one object tick of 100,000 steering objects (each reads its 4 neighbours'
//!   `Current` position and velocity, writes its `Next` velocity): `par_iter_mut` against the
//!   same work in a single-threaded `iter_mut` loop. Printed: sequential / parallel (the
//!   speed-up; bounded by the compute pool's threads).
//! - `advance_frame/*`: the `AdvanceFrame` copy of 100,000 `Next<Position>` into
//!   `Current<Position>` (the only registered type). Printed: ns per object, as (touch + copy) −
//!   (touch only), where "touch" is the object tick that writes every `Next`; and the cost per
//!   object of a whole frame in which no `Next` changed (the `Changed` scan, markers, timing).
//! - `event_queue/*`: `VirtualEventQueue` push + pop throughput against a `std` `BinaryHeap` of
//!   `Reverse((instant, seq, payload))`, same instants, same 32-byte payload. Printed: queue
//!   throughput / heap throughput (target ≥ 0.9).
//! - `dispatch/*`: 1,000,000 events at spread instants dispatched through `VirtualTimePlugin`
//!   (`AdvancePolicy::NextEvent`, one frame, a reader summing the payloads) against popping the
//!   same queue bare in a loop that sums them. Printed: events/s through the plugin / events/s of
//!   the bare queue (target ≥ 0.8), for Messages and for observer delivery.
//!
//! `cargo bench --ignore-rust-version --bench frame_phases`. Kept short (10 samples, ~2 s each) for small machines.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use bevy::ecs::schedule::{ScheduleLabel, SingleThreadedExecutor};
use bevy::prelude::*;
use bevy::tasks::{ComputeTaskPool, TaskPoolBuilder};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use simsync::time::prelude::*;

const OBJECTS: usize = 100_000;

#[derive(Clone, Copy, PartialEq, Debug)]
struct Position(Vec2);

#[derive(Clone, Copy, PartialEq, Debug)]
struct Velocity(Vec2);

#[derive(Component, Clone, Copy)]
struct Neighbours([Entity; 4]);

#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
struct Frame;

fn pool() {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    ComputeTaskPool::get_or_init(|| TaskPoolBuilder::new().num_threads(threads).build());
}

/// An App whose `Frame` schedule runs the frame phases single-threaded at the schedule level
/// (so only `par_iter_mut` inside systems uses threads), with 100,000 grid objects and no
/// double-buffered type registered yet.
fn objects_app() -> App {
    pool();
    let mut app = App::new();
    app.add_plugins(FramePhasesPlugin::in_schedule(Frame));
    app.edit_schedule(Frame, |s| {
        s.set_executor(SingleThreadedExecutor::new());
    });
    let width = (OBJECTS as f64).sqrt() as usize;
    let world = app.world_mut();
    let entities: Vec<Entity> = (0..OBJECTS)
        .map(|i| {
            let p = Vec2::new((i % width) as f32, (i / width) as f32) * 2.0;
            let v = Vec2::new((i as f32 * 0.37).sin(), (i as f32 * 0.29).cos());
            world
                .spawn((
                    DoubleBuffered::new(Position(p)),
                    DoubleBuffered::new(Velocity(v)),
                ))
                .id()
        })
        .collect();
    for (i, &e) in entities.iter().enumerate() {
        let n = |o: isize| entities[(i as isize + o).rem_euclid(OBJECTS as isize) as usize];
        let w = width as isize;
        world
            .entity_mut(e)
            .insert(Neighbours([n(-1), n(1), n(-w), n(w)]));
    }
    app
}

fn steer_one(
    others: &Query<(&Current<Position>, &Current<Velocity>)>,
    position: &Current<Position>,
    velocity: &Current<Velocity>,
    neighbours: &Neighbours,
) -> Velocity {
    let (me, v) = (position.0.0, velocity.0.0);
    let mut spring = Vec2::ZERO;
    let mut mean = Vec2::ZERO;
    for &n in &neighbours.0 {
        if let Ok((p, nv)) = others.get(n) {
            let d = p.0.0 - me;
            let len = d.length().max(1e-3);
            spring += d / len * (len - 2.0).clamp(-2.0, 2.0);
            mean += nv.0.0 * 0.25;
        }
    }
    Velocity(v + (spring * 1.5 + (mean - v) * 0.8) / 64.0)
}

type SteerQuery<'w, 's> = Query<
    'w,
    's,
    (
        &'static Current<Position>,
        &'static Current<Velocity>,
        &'static Neighbours,
        &'static mut Next<Velocity>,
    ),
>;

fn steer_parallel(
    others: Query<(&Current<Position>, &Current<Velocity>)>,
    mut objects: SteerQuery,
) {
    objects.par_iter_mut().for_each(|(p, v, n, mut next)| {
        next.0 = steer_one(&others, p, v, n);
    });
}

fn steer_sequential(
    others: Query<(&Current<Position>, &Current<Velocity>)>,
    mut objects: SteerQuery,
) {
    for (p, v, n, mut next) in &mut objects {
        next.0 = steer_one(&others, p, v, n);
    }
}

fn touch_positions(mut objects: Query<(&Current<Position>, &mut Next<Position>)>) {
    for (current, mut next) in &mut objects {
        next.0 = Position(current.0.0 + Vec2::X);
    }
}

fn median_of(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time_frames(app: &mut App, n: usize) -> Duration {
    median_of(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                app.world_mut().run_schedule(Frame);
                t.elapsed()
            })
            .collect(),
    )
}

fn object_tick(c: &mut Criterion, report: &mut Vec<String>) {
    let mut parallel = objects_app();
    parallel.add_systems(Frame, steer_parallel.in_set(FramePhase::ObjectTick));
    let mut sequential = objects_app();
    sequential.add_systems(Frame, steer_sequential.in_set(FramePhase::ObjectTick));

    let mut group = c.benchmark_group("object_tick");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .throughput(Throughput::Elements(OBJECTS as u64));
    group.bench_function("par_iter_mut_100k", |b| {
        b.iter(|| parallel.world_mut().run_schedule(Frame))
    });
    group.bench_function("sequential_100k", |b| {
        b.iter(|| sequential.world_mut().run_schedule(Frame))
    });
    group.finish();

    let (par, seq) = (
        time_frames(&mut parallel, 30),
        time_frames(&mut sequential, 30),
    );
    report.push(format!(
        "object tick, 100k objects: par_iter_mut {par:?}, sequential {seq:?} → speed-up \
         sequential/parallel = {:.2}× on {} compute threads",
        seq.as_secs_f64() / par.as_secs_f64(),
        ComputeTaskPool::get().thread_num()
    ));
}

fn advance_frame(c: &mut Criterion, report: &mut Vec<String>) {
    // Only `Position` is registered here, so the copy cost is that of one type.
    let mut copy = objects_app();
    copy.register_double_buffered::<Position>()
        .add_systems(Frame, touch_positions.in_set(FramePhase::ObjectTick));
    let mut touch_only = objects_app();
    touch_only.add_systems(Frame, touch_positions.in_set(FramePhase::ObjectTick));
    let mut idle = objects_app();
    idle.register_double_buffered::<Position>();

    let mut group = c.benchmark_group("advance_frame");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .throughput(Throughput::Elements(OBJECTS as u64));
    group.bench_function("touch_and_copy_100k", |b| {
        b.iter(|| copy.world_mut().run_schedule(Frame))
    });
    group.bench_function("touch_only_100k", |b| {
        b.iter(|| touch_only.world_mut().run_schedule(Frame))
    });
    group.bench_function("nothing_changed_100k", |b| {
        b.iter(|| idle.world_mut().run_schedule(Frame))
    });
    group.finish();

    let with_copy = time_frames(&mut copy, 30);
    let without = time_frames(&mut touch_only, 30);
    let nothing = time_frames(&mut idle, 30);
    let per_object = |d: Duration| d.as_secs_f64() * 1e9 / OBJECTS as f64;
    report.push(format!(
        "AdvanceFrame copy: {:.2} ns per changed object ((touch + copy) {with_copy:?} − touch \
         {without:?}); frame with no Next changed: {:.2} ns per object ({nothing:?})",
        per_object(with_copy.saturating_sub(without)),
        per_object(nothing),
    ));
}

/// 32 bytes, like a small event record.
type Payload = [u64; 4];

/// Deterministic pseudo-random instants: ticks in `0..1024`, priority in `0..4`.
fn instants(n: usize) -> Vec<VirtualInstant> {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            VirtualInstant::new((x % 1024) as i64, ((x >> 20) % 4) as i64)
        })
        .collect()
}

fn payload(i: usize) -> Payload {
    [i as u64, 1, 2, 3]
}

/// Pushes every instant, then pops them all; returns a checksum of the pop order.
fn run_queue(at: &[VirtualInstant], queue: &mut VirtualEventQueue<Payload>) -> u64 {
    for (i, &t) in at.iter().enumerate() {
        queue.schedule(t, payload(i));
    }
    let mut sum = 0u64;
    while let Some((_, p)) = queue.pop_next() {
        sum = sum.wrapping_mul(31).wrapping_add(p[0]);
    }
    sum
}

fn run_heap(
    at: &[VirtualInstant],
    heap: &mut BinaryHeap<Reverse<(VirtualInstant, u64, Payload)>>,
) -> u64 {
    for (i, &t) in at.iter().enumerate() {
        heap.push(Reverse((t, i as u64, payload(i))));
    }
    let mut sum = 0u64;
    while let Some(Reverse((_, _, p))) = heap.pop() {
        sum = sum.wrapping_mul(31).wrapping_add(p[0]);
    }
    sum
}

fn event_queue(c: &mut Criterion, report: &mut Vec<String>) {
    const N: usize = 10_000;
    let at = instants(N);
    let mut queue = VirtualEventQueue::with_capacity(N);
    let mut heap = BinaryHeap::with_capacity(N);
    assert_eq!(
        run_queue(&at, &mut queue),
        run_heap(&at, &mut heap),
        "both pop in the same order"
    );

    let mut group = c.benchmark_group("event_queue");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .throughput(Throughput::Elements(N as u64));
    group.bench_function(BenchmarkId::new("virtual_event_queue", N), |b| {
        b.iter(|| black_box(run_queue(black_box(&at), &mut queue)))
    });
    group.bench_function(BenchmarkId::new("std_binary_heap", N), |b| {
        b.iter(|| black_box(run_heap(black_box(&at), &mut heap)))
    });
    group.finish();

    let time = |f: &mut dyn FnMut() -> u64| {
        median_of(
            (0..41)
                .map(|_| {
                    let t = Instant::now();
                    black_box(f());
                    t.elapsed()
                })
                .collect(),
        )
    };
    let mut q_times = Vec::new();
    let mut h_times = Vec::new();
    // Interleaved, so both see the same machine state.
    for _ in 0..5 {
        q_times.push(time(&mut || run_queue(black_box(&at), &mut queue)));
        h_times.push(time(&mut || run_heap(black_box(&at), &mut heap)));
    }
    let (q, h) = (median_of(q_times), median_of(h_times));
    let rate = |d: Duration| N as f64 / d.as_secs_f64() / 1e6;
    report.push(format!(
        "event queue push+pop of {N}: VirtualEventQueue {q:?} ({:.1} M events/s), BinaryHeap \
         {h:?} ({:.1} M events/s) → queue/heap throughput = {:.3} (target ≥ 0.9)",
        rate(q),
        rate(h),
        h.as_secs_f64() / q.as_secs_f64(),
    ));
}

/// The sum a dispatch reader or observer builds (same fold as the bare loop).
#[derive(Resource, Default)]
struct Sum(u64);

fn dispatch_app(delivery: Delivery) -> App {
    let budget = FrameBudget::events(u32::MAX).expect("non-zero");
    let mut app = App::new();
    app.add_plugins(VirtualTimePlugin::default().advance(AdvancePolicy::NextEvent(budget)))
        .add_virtual_events::<Payload>(delivery)
        .init_resource::<Sum>();
    match delivery {
        Delivery::Messages => {
            app.add_systems(
                Update,
                |mut reader: MessageReader<VirtualEvent<Payload>>, mut sum: ResMut<Sum>| {
                    for e in reader.read() {
                        sum.0 = sum.0.wrapping_mul(31).wrapping_add(e.event[0]);
                    }
                },
            );
        }
        Delivery::Observers => {
            app.add_observer(|e: On<VirtualEvent<Payload>>, mut sum: ResMut<Sum>| {
                sum.0 = sum.0.wrapping_mul(31).wrapping_add(e.event[0]);
            });
        }
    }
    app.update();
    app
}

/// Dispatches all of `queue` through the plugin in one frame; returns the readers' sum.
fn run_dispatch(app: &mut App, queue: VirtualEventQueue<Payload>) -> u64 {
    *app.world_mut().resource_mut::<VirtualEventQueue<Payload>>() = queue;
    app.world_mut().resource_mut::<Sum>().0 = 0;
    app.world_mut().resource_mut::<CurrentInstant>().0 = VirtualInstant::ZERO;
    app.update();
    app.world().resource::<Sum>().0
}

fn run_bare(mut queue: VirtualEventQueue<Payload>) -> u64 {
    let mut sum = 0u64;
    while let Some((_, p)) = queue.pop_next() {
        sum = sum.wrapping_mul(31).wrapping_add(p[0]);
    }
    sum
}

fn dispatch(c: &mut Criterion, report: &mut Vec<String>) {
    const N: usize = 1_000_000;
    let mut full = VirtualEventQueue::with_capacity(N);
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for i in 0..N {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        full.schedule(
            VirtualInstant::new((x % 4_000_000) as i64, ((x >> 40) % 4) as i64),
            payload(i),
        );
    }
    let mut messages = dispatch_app(Delivery::Messages);
    let mut observers = dispatch_app(Delivery::Observers);
    let expected = run_bare(full.clone());
    assert_eq!(run_dispatch(&mut messages, full.clone()), expected);
    assert_eq!(run_dispatch(&mut observers, full.clone()), expected);

    let mut group = c.benchmark_group("dispatch");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_millis(500))
        .throughput(Throughput::Elements(N as u64));
    group.bench_function(BenchmarkId::new("bare_queue", N), |b| {
        b.iter_batched(
            || full.clone(),
            run_bare,
            criterion::BatchSize::PerIteration,
        )
    });
    group.bench_function(BenchmarkId::new("plugin_messages", N), |b| {
        b.iter_batched(
            || full.clone(),
            |q| run_dispatch(&mut messages, q),
            criterion::BatchSize::PerIteration,
        )
    });
    group.bench_function(BenchmarkId::new("plugin_observers", N), |b| {
        b.iter_batched(
            || full.clone(),
            |q| run_dispatch(&mut observers, q),
            criterion::BatchSize::PerIteration,
        )
    });
    group.finish();

    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    // Interleaved, so all three see the same machine state; the clone is not timed.
    for _ in 0..7 {
        for (k, t) in times.iter_mut().enumerate() {
            let q = full.clone();
            let start = Instant::now();
            black_box(match k {
                0 => run_bare(q),
                1 => run_dispatch(&mut messages, q),
                _ => run_dispatch(&mut observers, q),
            });
            t.push(start.elapsed());
        }
    }
    let [bare, msg, obs] = times.map(median_of);
    let rate = |d: Duration| N as f64 / d.as_secs_f64() / 1e6;
    report.push(format!(
        "dispatch of {N} events: bare queue {bare:?} ({:.1} M events/s); plugin, Messages \
         {msg:?} ({:.1} M events/s) → {:.3} of bare (target ≥ 0.8); plugin, observers {obs:?} \
         ({:.1} M events/s) → {:.3} of bare",
        rate(bare),
        rate(msg),
        bare.as_secs_f64() / msg.as_secs_f64(),
        rate(obs),
        bare.as_secs_f64() / obs.as_secs_f64(),
    ));
}

fn bench(c: &mut Criterion) {
    let mut report = Vec::new();
    object_tick(c, &mut report);
    advance_frame(c, &mut report);
    event_queue(c, &mut report);
    dispatch(c, &mut report);
    for line in report {
        println!("{line}");
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
