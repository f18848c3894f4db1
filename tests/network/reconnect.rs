//! Reconnecting by itself over real UDP on 127.0.0.1: a client away longer than its netcode
//! timeout comes back into its slot with its reconnect token and agrees with the other client
//! afterwards; a client whose server is gone ends `Disconnected` with `ReconnectFailed` after
//! the policy's attempts. The Apps run on the harness's fixed 1/64 s clock, so "away 30 s" is
//! 1,920 frames of the others, not 30 s of wall time; the code path is the real one (netcode
//! times the connection out, the session reconnects). In memory, a client whose connection the
//! relay closed comes back the same way.

use std::net::SocketAddr;
use std::time::Duration;

use bevy::prelude::*;
use simsync::deterministic::{
    NetworkSessionConfig, ReconnectPhase, SessionLifecycle, SessionState, SessionStateChanged,
    SessionStateReason, SnapshotLimits,
};
use simsync::prelude::*;
use simsync::relay::{
    DeterministicServerPlugin, RelayStats, SnapshotServing, read_snapshot_header,
};
use simsync_net::prelude::*;
use simsync_net::{
    DEFAULT_TOKEN_EXPIRE_SECONDS, NETCODE_PROTOCOL_ID, ReconnectPolicy, UdpClientTransport,
    UdpServerConfig, UdpServerTransport, generate_connect_token, generate_private_key,
};

use super::harness::{client_app_configured, server_app_with};
use super::udp::{loopback, run_until_verified, run_until_verified_within, stats};
use crate::common::TestGame;

/// The netcode timeout of the short tests' connect tokens, in seconds.
const SHORT_TIMEOUT_SECONDS: i32 = 1;

/// netcode's default timeout, in seconds (what a game's tokens usually carry).
const NETCODE_DEFAULT_TIMEOUT_SECONDS: i32 = 15;

/// Frames of the 64 Hz fixed network clock in `seconds`.
fn frames(seconds: f64) -> u32 {
    (seconds * 64.0).ceil() as u32
}

/// The `SessionStateChanged` messages an App wrote.
#[derive(Resource, Default)]
struct Changes(Vec<SessionStateChanged>);

fn keep_changes(mut read: MessageReader<SessionStateChanged>, mut changes: ResMut<Changes>) {
    changes.0.extend(read.read().cloned());
}

fn changes(app: &App) -> Vec<(SessionState, SessionState, SessionStateReason)> {
    app.world()
        .resource::<Changes>()
        .0
        .iter()
        .map(|c| (c.from, c.to, c.reason.clone()))
        .collect()
}

/// Asserts that `app`'s last two lifecycle changes are the lost connection (`Running` →
/// `Reconnecting`) and then `Reconnecting` → `to` for `reason`; returns every change.
fn assert_lost_then(
    app: &App,
    to: SessionState,
    reason: SessionStateReason,
) -> Vec<(SessionState, SessionState, SessionStateReason)> {
    let seen = changes(app);
    assert!(seen.len() >= 2, "{seen:?}");
    assert_eq!(
        seen[seen.len() - 2..],
        [
            (
                SessionState::Running,
                SessionState::Reconnecting,
                SessionStateReason::ConnectionLost
            ),
            (SessionState::Reconnecting, to, reason),
        ],
        "{seen:?}"
    );
    seen
}

fn state(app: &App) -> SessionState {
    app.world().resource::<SessionLifecycle>().state
}

/// A secure relay for two players on 127.0.0.1 serving snapshots (as the sandbox's does), its
/// address and key.
fn secure_server() -> (App, SocketAddr, [u8; 32]) {
    let key = generate_private_key();
    let transport =
        UdpServerTransport::bind(UdpServerConfig::secure(loopback(), key)).expect("bind");
    let addr = transport.local_addr();
    let relay = DeterministicServerPlugin::new::<PackedInput>(2, 64)
        .reconnect_seed(26)
        .snapshots(SnapshotServing::default())
        .header_reader(read_snapshot_header);
    let mut server = server_app_with(relay);
    server.insert_net_server(transport);
    server.finish();
    server.cleanup();
    (server, addr, key)
}

/// A client App reconnecting by `policy`, over UDP with a connect token for netcode client
/// `id` that times out after `timeout_seconds`, with snapshots on, recording its lifecycle
/// changes.
fn secure_client(
    game: &TestGame,
    policy: ReconnectPolicy,
    server: SocketAddr,
    key: &[u8; 32],
    id: u64,
    timeout_seconds: i32,
) -> App {
    let token = generate_connect_token(
        key,
        NETCODE_PROTOCOL_ID,
        id,
        vec![server],
        DEFAULT_TOKEN_EXPIRE_SECONDS,
        timeout_seconds,
        None,
    )
    .expect("token");
    let transport = UdpClientTransport::secure(token, loopback()).expect("client socket");
    let net = NetworkSessionConfig {
        snapshots: true,
        ..NetworkSessionConfig::default()
    }
    .with_reconnect(policy);
    let mut client = client_app_configured(game.clone(), game.players, net, 60, 64, |p| {
        p.snapshots(SnapshotLimits::default())
    });
    client
        .init_resource::<Changes>()
        .add_systems(Last, keep_changes);
    client.insert_net_client(transport);
    client.finish();
    client.cleanup();
    client
}

fn game() -> TestGame {
    TestGame {
        boxes: 10,
        ..TestGame::default()
    }
}

/// Client 1 of two is away `away_seconds` (its App not updated) with connect tokens timing out
/// after `timeout_seconds`: the relay drops it, and once back it notices the lost connection,
/// reconnects by itself within one attempt (back by the relay's history, or by a snapshot when the
/// history no longer reaches its tick) and agrees with client 0 for 200 ticks.
fn away_and_back(timeout_seconds: i32, away_seconds: f64) {
    let policy = ReconnectPolicy {
        attempts: 5,
        first_backoff: Duration::from_millis(200),
        max_backoff: Duration::from_secs(1),
    };
    let (mut server, addr, key) = secure_server();
    let mut clients: Vec<App> = (1..=2)
        .map(|id| secure_client(&game(), policy, addr, &key, id, timeout_seconds))
        .collect();
    run_until_verified(&mut server, &mut clients, 100);
    let paused_at = stats(&clients[1]).verified_tick;
    // Client 1's App is not updated for `away_seconds` of the relay's clock: the relay drops it
    // while client 0 plays on.
    for _ in 0..frames(away_seconds) {
        server.update();
        clients[0].update();
        std::thread::sleep(Duration::from_micros(200));
    }
    let relay = |server: &App| server.world().resource::<RelayStats>().clone();
    let left = relay(&server);
    assert!(left.disconnected_at[1].is_some(), "{left:?}");
    assert_eq!(state(&clients[1]), SessionState::Running);
    // Back: its own netcode clock runs out (`timeout_seconds` of its frames), it waits the
    // backoff, reconnects by itself and catches up.
    let end = stats(&clients[0]).verified_tick + 200;
    let limit = frames(f64::from(timeout_seconds) + away_seconds + 20.0);
    let updates = run_until_verified_within(&mut server, &mut clients, end, limit);
    // Then 200 ticks together (a client back by a snapshot verifies from the snapshot's tick).
    let end = stats(&clients[0])
        .verified_tick
        .max(stats(&clients[1]).verified_tick)
        + 200;
    run_until_verified(&mut server, &mut clients, end);
    let r = relay(&server);
    assert_eq!(r.rejoins, vec![0, 1], "{r:?}");
    assert_eq!(r.desyncs, 0);
    let back = stats(&clients[1]).network.expect("networked");
    assert_eq!(back.reconnects, 1);
    assert_eq!(back.reconnect_attempts, 1);
    assert_eq!(back.reconnect, ReconnectPhase::Idle);
    assert_eq!(back.slot, Some(1));
    assert_lost_then(
        &clients[1],
        SessionState::Running,
        SessionStateReason::Reconnected { slot: 1 },
    );
    // Every checksum the reconnected client verified after the pause equals the other's.
    let (other, rejoined) = (stats(&clients[0]), stats(&clients[1]));
    let theirs: std::collections::HashMap<_, _> = other
        .checksum_history
        .iter()
        .map(|c| (c.tick, c.checksum))
        .collect();
    let after: Vec<_> = rejoined
        .checksum_history
        .iter()
        .filter(|c| c.tick > paused_at)
        .collect();
    assert!(after.len() >= 200, "{}", after.len());
    for c in &after {
        assert_eq!(theirs.get(&c.tick), Some(&c.checksum), "tick {}", c.tick);
    }
    eprintln!(
        "udp reconnect (timeout {timeout_seconds} s, away {away_seconds} s): paused at verified \
         {paused_at}, relay dropped it at {:?}, rejoined at {:?} after {updates} updates; {} \
         checksums after the pause agree through tick {end}; snapshots loaded {}",
        left.disconnected_at[1],
        r.rejoined_at[1],
        after.len(),
        back.snapshots.loaded
    );
}

#[test]
fn a_udp_client_away_past_its_timeout_reconnects_by_itself_and_agrees() {
    away_and_back(SHORT_TIMEOUT_SECONDS, 3.0);
}

/// The reported case: netcode's default 15 s timeout, the client away 30 s.
#[test]
fn a_udp_client_away_30_s_past_netcodes_15_s_timeout_reconnects_and_agrees() {
    away_and_back(NETCODE_DEFAULT_TIMEOUT_SECONDS, 30.0);
}

#[test]
fn a_udp_client_whose_server_is_gone_ends_disconnected_after_its_attempts() {
    let policy = ReconnectPolicy {
        attempts: 3,
        first_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(100),
    };
    let (mut server, addr, key) = secure_server();
    let mut clients: Vec<App> = (1..=2)
        .map(|id| secure_client(&game(), policy, addr, &key, id, SHORT_TIMEOUT_SECONDS))
        .collect();
    run_until_verified(&mut server, &mut clients, 30);
    drop(server);
    // Bounded: each attempt lasts at most the 1 s timeout, plus the backoffs.
    let mut updates = 0;
    while state(&clients[0]) != SessionState::Disconnected {
        clients[0].update();
        std::thread::sleep(Duration::from_micros(200));
        updates += 1;
        assert!(
            updates < frames(8.0),
            "{:?} {:?}",
            state(&clients[0]),
            changes(&clients[0])
        );
    }
    let net = stats(&clients[0]).network.expect("networked");
    assert_eq!(net.reconnect, ReconnectPhase::Failed { attempts: 3 });
    assert_eq!(net.reconnect_attempts, 3);
    assert_eq!(net.reconnects, 0);
    let seen = assert_lost_then(
        &clients[0],
        SessionState::Disconnected,
        SessionStateReason::ReconnectFailed { attempts: 3 },
    );
    // Final: more updates change nothing.
    for _ in 0..frames(1.0) {
        clients[0].update();
    }
    assert_eq!(changes(&clients[0]).len(), seen.len());
    eprintln!("udp server gone: Disconnected after {updates} updates (3 attempts)");
}

#[test]
fn in_memory_a_client_the_server_dropped_reconnects_by_itself_and_agrees() {
    use simsync_net::LinkConditionerConfig;

    use super::harness::{PeersExt, peers_of, plugin};

    let policy = ReconnectPolicy {
        attempts: 3,
        first_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(200),
    };
    let relay = DeterministicServerPlugin::new::<PackedInput>(2, 64).reconnect_seed(7);
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let net = NetworkSessionConfig::default().with_reconnect(policy);
    let mut h = peers_of(2, move |_| plugin(game()).networked(net.clone()))
        .link(link)
        .relay(relay)
        .build()
        .expect("peers");
    h.verify(60, 600);
    // The relay closes client 1's connection (netcode client id 2): a loss, not a leave.
    h.relay_mut()
        .world_mut()
        .resource_mut::<RenetServer>()
        .disconnect(2);
    let end = h.stats_of(0).verified_tick + 120;
    h.verify(end, 1_200);
    let relay = h.relay_stats();
    assert_eq!(relay.rejoins, vec![0, 1], "{relay:?}");
    assert_eq!(relay.desyncs, 0);
    let back = h.net_of(1);
    assert_eq!(
        (back.reconnects, back.reconnect_attempts, back.reconnect),
        (1, 1, ReconnectPhase::Idle)
    );
    let client = h.client(1).expect("running");
    assert_eq!(
        client.world().resource::<SessionLifecycle>().state,
        SessionState::Running
    );
    let agreement = h.assert_all_agree();
    assert!(agreement.ticks_compared >= end as usize, "{agreement:?}");
}
