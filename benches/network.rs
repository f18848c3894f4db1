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
//! 3. Late join at 1,000 bodies over UDP on 127.0.0.1: two clients of the tests' game (1,000
//!    boxes in resting piles, 3 player slots) play 150 ticks; a third joins; printed is the time
//!    from its join request (the App's first update) to its first verified tick: wall time (the
//!    server and all three clients stepped in this one thread, so it includes their simulation)
//!    and updates (the apps' network clock advances 1/64 s per update). The snapshot's size and
//!    tick are printed with it.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/network/harness.rs"]
#[allow(dead_code)] // the tests' harness; the bench uses part of it
mod harness;

use std::time::{Duration, Instant};

use bevy::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};
use harness::PeersExt;
use simsync::deterministic::{NetworkSessionConfig, SnapshotLimits};
use simsync::prelude::*;
use simsync::relay::{
    DeterministicServerPlugin, RelayLimits, RelayServer, RelayServerConfig, RelayStats,
    SnapshotServing, read_snapshot_header,
};
use simsync_net::prelude::*;
use simsync_net::{
    ClientMessage, Hello, MemoryClientTransport, MemoryNetwork, MemoryServerTransport, Protocols,
    ServerMessage, SessionClientMessage, SessionServerMessage, connection_config,
};
use simsync_net::{LinkConditionerConfig, MatchMessage};
use simsync_net::{NETCODE_PROTOCOL_ID, UdpClientTransport, UdpServerConfig, UdpServerTransport};

const HZ: u16 = 64;
const DT: Duration = Duration::from_nanos(15_625_000);

fn bytes_per_tick() {
    let game = common::TestGame {
        boxes: 0,
        players: 4,
        ..common::TestGame::default()
    };
    let link = LinkConditionerConfig::PERFECT.with_latency(30, 5);
    let mut h = harness::peers(game, link).build().expect("peers");
    h.verify(64, 400);
    let relay0 = h.relay_stats();
    let up0: Vec<u64> = (0..4).map(|c| h.net_of(c).input_bytes_sent).collect();
    h.run_frames(640).expect("playing");
    let relay = h.relay_stats();
    let ticks = (relay.server_tick - relay0.server_tick) as f64;
    let clients = 4.0;
    let confirmed =
        (relay.confirmed_bytes_sent - relay0.confirmed_bytes_sent) as f64 / ticks / clients;
    let clock = (relay.clock_bytes_sent - relay0.clock_bytes_sent) as f64 / ticks / clients;
    let up: f64 = (0..4)
        .map(|c| (h.net_of(c).input_bytes_sent - up0[c]) as f64)
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
            max_input_bytes: simsync::net::DEFAULT_MAX_INPUT_BYTES,
            checksum_timeout_ms: simsync::relay::DEFAULT_CHECKSUM_TIMEOUT_MS,
            input_history_ticks: 10 * u32::from(HZ),
            resend_bytes_per_update: 24_000,
            limits,
            silence_timeout_ms: simsync::relay::DEFAULT_SILENCE_TIMEOUT_MS,
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
                    Ok(ServerMessage::Session(MatchMessage {
                        message: SessionServerMessage::Start { .. },
                        ..
                    })) => {
                        fake.started_at = Some(self.frame);
                    }
                    Ok(ServerMessage::Session(MatchMessage {
                        message: SessionServerMessage::ConfirmedInputs { first_tick, sets },
                        ..
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
                let _ = fake.client.send_msg(&ClientMessage::session(
                    MatchId::FIRST,
                    SessionClientMessage::Inputs {
                        first_tick: (tick - 2).max(1),
                        inputs: vec![fake.input.clone(); 3],
                        ack_tick: fake.acked,
                    },
                ));
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

/// A relay App on a UDP socket bound to 127.0.0.1 serving snapshots (3 slots, 2 to start).
fn udp_relay() -> (App, std::net::SocketAddr) {
    let relay = DeterministicServerPlugin::new::<PackedInput>(3, 64)
        .start_players(2)
        .snapshots(SnapshotServing::default())
        .header_reader(read_snapshot_header);
    let transport = UdpServerTransport::bind(UdpServerConfig::unsecure(loopback())).expect("bind");
    let addr = transport.local_addr();
    let mut server = harness::server_app_with(relay);
    server.insert_net_server(transport);
    server.finish();
    server.cleanup();
    (server, addr)
}

fn loopback() -> std::net::SocketAddr {
    "127.0.0.1:0".parse().expect("address")
}

/// A client of `game` with snapshots on, over UDP to `server` as netcode client `id`.
fn udp_snapshot_client(game: &common::TestGame, server: std::net::SocketAddr, id: u64) -> App {
    let net = NetworkSessionConfig {
        snapshots: true,
        ..NetworkSessionConfig::default()
    };
    let mut client = harness::client_app_configured(game.clone(), game.players, net, 60, 64, |p| {
        p.snapshots(SnapshotLimits::default())
    });
    let transport = UdpClientTransport::unsecure(server, id, NETCODE_PROTOCOL_ID, loopback())
        .expect("client socket");
    client.insert_net_client(transport);
    client.finish();
    client.cleanup();
    client
}

fn session_stats(app: &App) -> SessionStats {
    app.world().resource::<SessionStats>().clone()
}

fn step_all(server: &mut App, clients: &mut [App]) {
    server.update();
    for client in clients.iter_mut() {
        client.update();
    }
}

/// Time from a late joiner's join request to its first verified tick, 1,000 bodies, UDP.
fn late_join_time() {
    let game = common::TestGame {
        boxes: 1_000,
        players: 3,
        ..common::TestGame::default()
    };
    let (mut server, addr) = udp_relay();
    let mut clients: Vec<App> = (1..=2)
        .map(|id| udp_snapshot_client(&game, addr, id))
        .collect();
    let mut frames = 0;
    while clients.iter().any(|c| session_stats(c).verified_tick < 150) {
        step_all(&mut server, &mut clients);
        frames += 1;
        assert!(frames < 5_000, "the two players never reached tick 150");
    }
    clients.push(udp_snapshot_client(&game, addr, 3));
    let started = Instant::now();
    let mut updates = 0u32;
    while session_stats(&clients[2]).checksum_history.is_empty() {
        step_all(&mut server, &mut clients);
        updates += 1;
        assert!(updates < 5_000, "the joiner never verified a tick");
    }
    let wall = started.elapsed();
    let joiner = session_stats(&clients[2]);
    let net = joiner.network.expect("networked");
    let relay = server.world().resource::<RelayStats>().clone();
    println!(
        "late join at 1,000 bodies over UDP 127.0.0.1: join request → first verified tick {} in          {wall:?} wall ({updates} updates = {:.0} ms of network clock at 64 Hz, 3 clients + relay          stepped in one thread); snapshot of tick {:?}, {} bytes forwarded, {} loaded",
        joiner.checksum_history[0].tick,
        f64::from(updates) * 1000.0 / 64.0,
        net.snapshots.loaded_tick,
        relay.snapshots.bytes_forwarded,
        net.snapshots.loaded,
    );
}

fn network(c: &mut Criterion) {
    bytes_per_tick();
    late_join_time();

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
