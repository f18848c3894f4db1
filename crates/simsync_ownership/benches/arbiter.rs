//! Entity-server arbitration throughput: bids per second on one thread.
//!
//! 10,000 registered bodies (1 % static, 1 % locked) plus ids that were never registered;
//! 100,000 precomputed bids from 32 participants at a mix of priorities (VOLUNTEER, RECRUIT,
//! POKE, GRAB, and some above the maximum), 20 µs apart, so every outcome occurs: grants,
//! lower-priority and equal-priority-lockout refusals, locked, not-ownable, unknown and
//! too-high. Each run starts from a fresh copy of the table (the copy is not timed).
//! Target: ≥ 1,000,000 bids/s.
//!
//! Also the wire cost of one body's state: the encoded size of a
//! `ClientMessage::Ownership(StateBatch)` of one body (owner → server) and of the
//! `ServerMessage::Ownership(StateBatch)` relaying it (server → the others) for small and large
//! body ids and batch numbers (target ≤ 48 bytes), and the time to pack and encode one.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bevy::math::{Quat, Vec3};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use simsync_net::{ClientMessage, OwnershipClientMessage, OwnershipServerMessage, ServerMessage};
use simsync_ownership::{
    BodyId, BodyKind, BodyState, OwnershipArbiter, ParticipantId, Priority, StateBatch,
};

const BODIES: u64 = 10_000;
const BIDS: usize = 100_000;

struct Bid {
    from: ParticipantId,
    body: BodyId,
    priority: Priority,
    now: Duration,
}

/// A small deterministic generator (xorshift64*), so every run bids the same sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn table() -> OwnershipArbiter {
    let mut a = OwnershipArbiter::default();
    for i in 0..BODIES {
        let kind = if i % 100 == 7 {
            BodyKind::Static
        } else {
            BodyKind::Dynamic
        };
        a.register_body(BodyId(i), kind).unwrap();
        if i % 100 == 13 {
            a.set_locked(BodyId(i), true).unwrap();
        }
    }
    a
}

fn bids() -> Vec<Bid> {
    let mut rng = Rng(0x5eed_0f0b_1d00);
    (0..BIDS)
        .map(|k| {
            let r = rng.next();
            let priority = match r % 100 {
                0..40 => Priority::VOLUNTEER,
                40..50 => Priority::RECRUIT,
                50..80 => Priority::POKE,
                80..96 => Priority::GRAB,
                _ => Priority(200),
            };
            Bid {
                from: ParticipantId((r >> 8) as u16 % 32),
                // ~3 % of ids were never registered.
                body: BodyId((r >> 24) % (BODIES + BODIES / 32)),
                priority,
                now: Duration::from_micros(20 * k as u64),
            }
        })
        .collect()
}

fn run(a: &mut OwnershipArbiter, bids: &[Bid]) -> u64 {
    let mut granted = 0;
    for bid in bids {
        granted += u64::from(a.bid(bid.from, bid.body, bid.priority, bid.now).is_ok());
    }
    granted
}

fn bench(c: &mut Criterion) {
    let fresh = table();
    let bids = bids();

    let mut group = c.benchmark_group("arbiter");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(BIDS as u64));
    group.bench_function("bid_10k_bodies", |b| {
        b.iter_batched_ref(
            || fresh.clone(),
            |a| black_box(run(a, black_box(&bids))),
            BatchSize::LargeInput,
        )
    });
    group.finish();

    // Bids per second from the median of timed passes, each on a fresh table.
    let mut times: Vec<Duration> = (0..21)
        .map(|_| {
            let mut a = fresh.clone();
            let t = Instant::now();
            black_box(run(&mut a, black_box(&bids)));
            t.elapsed()
        })
        .collect();
    times.sort();
    let median = times[times.len() / 2];
    let rate = BIDS as f64 / median.as_secs_f64();

    let mut a = fresh.clone();
    run(&mut a, &bids);
    let stats = a.stats();
    let outcomes: Vec<String> = a
        .refusals_by_reason()
        .iter()
        .map(|(reason, n)| format!("{reason:?} {n}"))
        .collect();
    println!(
        "arbiter: {BIDS} bids over {BODIES} bodies in {median:?} (median of 21) → {rate:.0} bids/s \
         single thread (target ≥ 1,000,000)"
    );
    println!(
        "outcomes: granted {} (ownership changes {}); refused {}",
        stats.grants,
        stats.ownership_changes,
        outcomes.join(", ")
    );
}

fn state() -> BodyState {
    BodyState {
        position: Vec3::new(12.5, 0.4, -7.25),
        rotation: Quat::from_rotation_y(1.3),
        linear_velocity: Vec3::new(1.0, -2.0, 0.5),
        angular_velocity: Vec3::new(0.0, 3.0, 0.0),
    }
}

/// One body's state as the batch of one body a participant sends.
fn batch_of_one(body: u64, seq: u32, state: &BodyState) -> Vec<u8> {
    StateBatch {
        seq,
        focus: None,
        bodies: vec![(BodyId(body), *state)],
    }
    .encode()
    .expect("encodes")
}

fn update_message(body: u64, seq: u32, state: &BodyState) -> ClientMessage {
    ClientMessage::Ownership(OwnershipClientMessage::StateBatch(batch_of_one(
        body, seq, state,
    )))
}

fn wire_bytes(c: &mut Criterion) {
    let s = state();
    println!("wire bytes per body state, a batch of one body (target ≤ 48):");
    for (body, seq) in [
        (7, 3),
        (250, 250),
        (7, 251),
        (250, 65_535),
        (251, 3),
        (10_000, u32::MAX),
    ] {
        let update = simsync_net::encode(&update_message(body, seq, &s)).expect("encodes");
        let relay = simsync_net::encode(&ServerMessage::Ownership(
            OwnershipServerMessage::StateBatch(batch_of_one(body, seq, &s)),
        ))
        .expect("encodes");
        println!(
            "  body id {body:>6}, batch {seq:>10}: sent {:>2} B, relayed {:>2} B",
            update.len(),
            relay.len()
        );
    }
    let mut group = c.benchmark_group("wire");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(1));
    group.bench_function("pack_and_encode_batch_of_one", |b| {
        b.iter(|| simsync_net::encode(&update_message(black_box(42), black_box(300), &s)))
    });
    let bytes = simsync_net::encode(&update_message(42, 300, &s)).expect("encodes");
    group.bench_function("decode_and_check_batch_of_one", |b| {
        b.iter(
            || match simsync_net::decode_client_message(black_box(&bytes)) {
                Ok(ClientMessage::Ownership(OwnershipClientMessage::StateBatch(batch))) => {
                    StateBatch::decode(&batch).is_ok()
                }
                _ => false,
            },
        )
    });
    group.finish();
}

criterion_group!(benches, bench, wire_bytes);
criterion_main!(benches);
