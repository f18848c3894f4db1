//! Network cost of the relay session.
//!
//! 1. Bytes per client per tick, down (confirmed input sets + clock report) and up (the client's
//!    redundant inputs), measured from the encoded messages of a short in-memory run: 4 players
//!    at 64 Hz, redundancy 3, `PackedInput` (8 buttons + 2 axes). Target ≤ 64 B/tick/client
//!    downstream. Printed, not timed.
//! 2. Server CPU per tick (renet receive + relay + send) with 64 clients and the default rate
//!    limits on, as a ratio to one client, and to 64 clients without rate limits (the cost of
//!    the token buckets), measured in alternating rounds of the same run. The clients are
//!    lightweight fakes (a `RenetClient` each on a `MemoryNetwork`, sending typed `Inputs`
//!    messages directly), not simulation Apps.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/network/harness.rs"]
#[allow(dead_code)] // the tests' harness; the bench uses part of it
mod harness;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use simsync::deterministic::{NetworkSessionConfig, RelayLimits, RelayServer, RelayServerConfig};
use simsync::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_net::prelude::*;
use simsync_net::{
    ClientMessage, Hello, MemoryClientTransport, MemoryNetwork, MemoryServerTransport, Protocols,
    ServerMessage, SessionClientMessage, SessionServerMessage, connection_config,
};

const HZ: u16 = 64;
const DT: Duration = Duration::from_nanos(15_625_000);

fn bytes_per_tick() {
    let game = common::TestGame {
        boxes: 0,
        players: 4,
        ..common::TestGame::default()
    };
    let mut h = harness::Harness::new(
        game,
        LinkConditionerConfig::PERFECT.with_latency(30, 5),
        NetworkSessionConfig::default(),
    );
    h.run_until_verified(64, 400);
    let relay0 = h.relay();
    let up0: Vec<u64> = (0..4)
        .map(|c| h.stats(c).network.expect("networked").input_bytes_sent)
        .collect();
    let frames = 640u64;
    for _ in 0..frames {
        h.step();
    }
    let relay = h.relay();
    let ticks = (relay.server_tick - relay0.server_tick) as f64;
    let clients = 4.0;
    let confirmed =
        (relay.confirmed_bytes_sent - relay0.confirmed_bytes_sent) as f64 / ticks / clients;
    let clock = (relay.clock_bytes_sent - relay0.clock_bytes_sent) as f64 / ticks / clients;
    let up: f64 = (0..4)
        .map(|c| (h.stats(c).network.expect("networked").input_bytes_sent - up0[c]) as f64)
        .sum::<f64>()
        / ticks
        / clients;
    let input = simsync_net::encode(&PackedInput::default())
        .expect("encodes")
        .len();
    println!(
        "bytes/tick/client (4 players, 64 Hz, redundancy 3, PackedInput = {input} B encoded): \
         down {:.2} (confirmed sets {confirmed:.2} + clock reports {clock:.2}), up {up:.2} (inputs); \
         message payloads, before renet/UDP headers",
        confirmed + clock
    );
    // The target (≤ 64 B/tick/client) is on the confirmed input sets, RelayStats'
    // `confirmed_bytes_sent`; the clock reports come on top and are printed.
    assert!(
        confirmed <= 64.0,
        "confirmed sets above 64 B/tick/client: {confirmed:.2}"
    );
}

/// A fake player: a renet client that joins and then sends its inputs every frame.
struct FakeClient {
    client: RenetClient,
    transport: MemoryClientTransport,
    hello_sent: bool,
    started_at: Option<i32>,
    acked: i32,
    stats: simsync_net::DecodeStats,
    input: Vec<u8>,
}

struct Rig {
    server: RenetServer,
    transport: MemoryServerTransport,
    relay: RelayServer,
    clients: Vec<FakeClient>,
    frame: i32,
}

impl Rig {
    /// A session of `players` fake clients with the default rate limits.
    fn new(players: u8) -> Self {
        Self::with_limits(players, RelayLimits::for_tick_rate(HZ))
    }

    fn with_limits(players: u8, limits: RelayLimits) -> Self {
        let network = MemoryNetwork::perfect(7);
        let transport = network.server_transport().expect("server");
        let relay = RelayServer::new::<PackedInput>(RelayServerConfig {
            players,
            tick_rate_hz: HZ,
            input_hard_tolerance: 8,
            input_redundancy: 3,
            default_input: simsync_net::encode(&PackedInput::default()).expect("encodes"),
            ping_interval_ms: 250,
            max_input_bytes: simsync::deterministic::DEFAULT_MAX_INPUT_BYTES,
            checksum_timeout_ms: simsync::deterministic::DEFAULT_CHECKSUM_TIMEOUT_MS,
            input_history_ticks: 10 * u32::from(HZ),
            resend_bytes_per_update: 24_000,
            limits,
            silence_timeout_ms: simsync::deterministic::DEFAULT_SILENCE_TIMEOUT_MS,
            reconnect_seed: Some(7),
            start_players: players,
            snapshots: None,
        });
        let clients = (0..players)
            .map(|i| {
                let mut input = PackedInput::default();
                let _ = input.set_axis(0, f32::from(i) / 64.0);
                FakeClient {
                    client: RenetClient::new(connection_config()),
                    transport: network.client_transport(u64::from(i) + 1).expect("client"),
                    hello_sent: false,
                    started_at: None,
                    acked: 0,
                    stats: Default::default(),
                    input: simsync_net::encode(&input).expect("encodes"),
                }
            })
            .collect();
        let mut rig = Self {
            server: RenetServer::new(connection_config()),
            transport,
            relay,
            clients,
            frame: 0,
        };
        for _ in 0..200 {
            rig.step();
            if rig.relay.started() && rig.clients.iter().all(|c| c.started_at.is_some()) {
                for _ in 0..64 {
                    rig.step();
                }
                return rig;
            }
        }
        panic!("the fake session never started");
    }

    /// The clients' side of a frame (not measured): receive, send inputs 2 ticks ahead.
    fn clients_step(&mut self) {
        self.frame += 1;
        for fake in &mut self.clients {
            fake.client.update(DT);
            let _ = fake.transport.update(DT, &mut fake.client);
            for received in fake.client.receive_msgs(&mut fake.stats) {
                match received.message {
                    Ok(ServerMessage::Session(SessionServerMessage::Start { .. })) => {
                        fake.started_at = Some(self.frame);
                    }
                    Ok(ServerMessage::Session(SessionServerMessage::ConfirmedInputs {
                        first_tick,
                        sets,
                    })) => fake.acked = fake.acked.max(first_tick + sets.len() as i32 - 1),
                    Ok(ServerMessage::Ping { t }) => {
                        let _ = fake.client.send_msg(&ClientMessage::Pong { t });
                    }
                    _ => {}
                }
            }
            if fake.client.is_connected() && !fake.hello_sent {
                fake.hello_sent = fake
                    .client
                    .send_msg(&ClientMessage::Hello(Hello::new(
                        Protocols::SESSION,
                        "fake",
                    )))
                    .is_ok();
            }
            if let Some(start) = fake.started_at {
                let tick = self.frame - start + 2;
                let _ =
                    fake.client
                        .send_msg(&ClientMessage::Session(SessionClientMessage::Inputs {
                            first_tick: (tick - 2).max(1),
                            inputs: vec![fake.input.clone(); 3],
                            ack_tick: fake.acked,
                        }));
            }
            fake.transport.send_packets(&mut fake.client);
        }
    }

    /// The server's side of a frame (measured): renet receive, relay update, renet send.
    fn server_step(&mut self) {
        self.server.update(DT);
        self.transport.update(DT, &mut self.server);
        self.relay.update(&mut self.server, DT, 1);
        self.transport.send_packets(&mut self.server);
    }

    fn step(&mut self) {
        self.clients_step();
        self.server_step();
    }
}

fn server_time(rig: &mut Rig, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        rig.clients_step();
        let start = Instant::now();
        rig.server_step();
        total += start.elapsed();
    }
    total
}

fn network(c: &mut Criterion) {
    bytes_per_tick();

    let mut one = Rig::new(1);
    let mut many = Rig::new(64);
    let mut unlimited = Rig::with_limits(64, RelayLimits::UNLIMITED);
    let mut group = c.benchmark_group("relay server tick");
    group.sample_size(10);
    group.bench_function("1 client", |b| {
        b.iter_custom(|iters| server_time(&mut one, iters))
    });
    group.bench_function("64 clients", |b| {
        b.iter_custom(|iters| server_time(&mut many, iters))
    });
    group.bench_function("64 clients, no rate limits", |b| {
        b.iter_custom(|iters| server_time(&mut unlimited, iters))
    });
    group.finish();

    // The ratios, measured in the same run over the same number of ticks, in alternating
    // rounds so that a change of machine load falls on every case alike.
    let (rounds, n) = (4, 500);
    let (mut t1, mut t64, mut t64u) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        t1 += server_time(&mut one, n);
        t64 += server_time(&mut many, n);
        t64u += server_time(&mut unlimited, n);
    }
    let ticks = (rounds * n) as f64;
    let us = |t: Duration| t.as_secs_f64() * 1e6 / ticks;
    let stats = many.relay.stats();
    let limited: u64 = stats.rate_limited.iter().map(|r| r.total()).sum();
    println!(
        "relay server CPU per tick: 1 client {:.1} µs, 64 clients with rate limits {:.1} µs \
         (ratio {:.1} to 1 client, {:.2} µs per client), 64 clients without rate limits {:.1} µs \
         (rate limits cost ×{:.3}); confirmed {} / {} ticks, replaced {}, rate limited {limited}",
        us(t1),
        us(t64),
        t64.as_secs_f64() / t1.as_secs_f64(),
        us(t64) / 64.0,
        us(t64u),
        t64.as_secs_f64() / t64u.as_secs_f64(),
        stats.confirmed_tick,
        stats.server_tick,
        stats.replaced_inputs.iter().sum::<u64>(),
    );
}

criterion_group!(benches, network);
criterion_main!(benches);
