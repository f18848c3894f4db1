//! Rooms on worker threads: the same rooms turned on 1 and on 2 workers, in process (no
//! socket: the rooms' own work, which is what the workers share out).
//!
//! 16 ownership rooms of 400 bodies each (an entity server's App update per room per turn;
//! `SIMSYNC_BENCH_ROOMS` and `SIMSYNC_BENCH_BODIES` change the numbers); one iteration is one
//! main-loop turn: every worker sent its turn, every report read. The
//! criterion group `rooms_on_workers` gives the time of a turn on 1 and 2 workers; after it,
//! the bench prints the turns per second of each, their ratio (the speedup; the issue asks
//! ≥ 1.7 on 2 cores) and the machine's load average while it ran, since a machine whose cores
//! are busy with other work gives less than its cores.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use simsync_net::ConnectionSink;
use simsync_server::{BodySpec, OwnershipRoomConfig, RoomConfig, RoomId, Rooms};

const ROOMS: u64 = 16;
const BODIES: u64 = 400;
const DT: Duration = Duration::from_millis(4);

/// The environment variable `name` as a number, else `default`.
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn room_count() -> u64 {
    setting("SIMSYNC_BENCH_ROOMS", ROOMS)
}

fn room() -> RoomConfig {
    let bodies = (0..setting("SIMSYNC_BENCH_BODIES", BODIES))
        .map(|i| {
            BodySpec::new(
                i + 1,
                i % 10 == 0,
                [(i % 20) as f32 * 2.0, 1.0 + (i / 20) as f32 * 2.0, 0.0],
            )
        })
        .collect();
    RoomConfig::Ownership(OwnershipRoomConfig {
        tick_rate_hz: 60,
        ..OwnershipRoomConfig::new(4, bodies)
    })
}

/// `ROOMS` rooms on `workers` workers, warmed up by a few turns.
fn rooms(workers: usize) -> Rooms {
    let mut rooms = Rooms::new(Duration::from_secs(3_600)).with_workers(workers);
    for id in 1..=room_count() {
        rooms
            .create(Some(RoomId(id)), room())
            .expect("a valid room");
    }
    for _ in 0..20 {
        turn(&mut rooms);
    }
    rooms
}

/// One main-loop turn of the rooms: sent to every worker, every report read.
fn turn(rooms: &mut Rooms) {
    rooms.dispatch(DT);
    while rooms.collect(None).expect("the workers run") {}
    black_box(rooms.take_turns());
    rooms.drain_packets(&mut |_, _| simsync_net::PacketSent::Sent);
}

fn bench_workers(c: &mut Criterion) {
    let mut group = c.benchmark_group("rooms_on_workers");
    group.throughput(Throughput::Elements(room_count()));
    for workers in [1, 2] {
        let mut set = rooms(workers);
        group.bench_function(BenchmarkId::new("workers", workers), |b| {
            b.iter(|| turn(&mut set));
        });
    }
    group.finish();
}

/// Turns per second of `workers` workers: the median of 7 runs of 200 turns (the median, as
/// other work on the machine takes cores from some runs).
fn turns_per_second(workers: usize) -> f64 {
    let mut set = rooms(workers);
    let mut runs: Vec<f64> = (0..7)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..200 {
                turn(&mut set);
            }
            200.0 / started.elapsed().as_secs_f64()
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench_workers(&mut criterion);
    criterion.final_summary();
    // `cargo test --benches` runs each bench once to see that it works: no measurement then.
    if std::env::args().any(|arg| arg == "--bench") {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let load_before = load_average();
        let one = turns_per_second(1);
        let two = turns_per_second(2);
        println!(
            "rooms_on_workers: {} ownership rooms of {} bodies: 1 worker {one:.0} turns/s, 2 \
             workers {two:.0} turns/s: speedup {:.2}x ({cores} cores; load average \
             {load_before} before, {} after)",
            room_count(),
            setting("SIMSYNC_BENCH_BODIES", BODIES),
            two / one,
            load_average()
        );
    }
}
