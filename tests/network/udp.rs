//! The networked session over real UDP sockets on 127.0.0.1.

use std::net::SocketAddr;

use bevy::prelude::*;
use simsync::deterministic::{NetworkSessionConfig, SnapshotLimits};
use simsync::prelude::*;
use simsync::relay::{
    DeterministicServerPlugin, RelayStats, SnapshotServing, read_snapshot_header,
};
use simsync_net::prelude::*;
use simsync_net::{NETCODE_PROTOCOL_ID, UdpClientTransport, UdpServerConfig, UdpServerTransport};

use super::harness::{client_app, client_app_configured, server_app_with};
use crate::common::TestGame;

pub(super) fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("address")
}

/// A relay server App for `players` on a UDP socket bound to 127.0.0.1, and its address.
fn udp_server(players: u8) -> (App, SocketAddr) {
    udp_server_with(DeterministicServerPlugin::new::<PackedInput>(players, 64))
}

/// [`udp_server`] running the relay plugin `relay`.
fn udp_server_with(relay: DeterministicServerPlugin) -> (App, SocketAddr) {
    let transport = UdpServerTransport::bind(UdpServerConfig::unsecure(loopback())).expect("bind");
    let addr = transport.local_addr();
    let mut server = server_app_with(relay);
    server.insert_net_server(transport);
    server.finish();
    server.cleanup();
    (server, addr)
}

/// A client App of `game` with `net`, over UDP to `server` as netcode client `id`.
fn udp_client(game: &TestGame, net: NetworkSessionConfig, server: SocketAddr, id: u64) -> App {
    let mut client = client_app(game.clone(), net, 60);
    let transport = UdpClientTransport::unsecure(server, id, NETCODE_PROTOCOL_ID, loopback())
        .expect("client socket");
    client.insert_net_client(transport);
    client.finish();
    client.cleanup();
    client
}

pub(super) fn stats(app: &App) -> SessionStats {
    app.world().resource::<SessionStats>().clone()
}

/// Steps the server and every client until each verified `tick` (bounded).
pub(super) fn run_until_verified(server: &mut App, clients: &mut [App], tick: i32) {
    run_until_verified_within(server, clients, tick, 3_000);
}

/// [`run_until_verified`] within `limit` frames; returns the frames it took.
pub(super) fn run_until_verified_within(
    server: &mut App,
    clients: &mut [App],
    tick: i32,
    limit: u32,
) -> u32 {
    let mut frames = 0;
    while clients.iter().any(|c| stats(c).verified_tick < tick) {
        server.update();
        for client in clients.iter_mut() {
            client.update();
        }
        frames += 1;
        assert!(
            frames < limit,
            "not all verified {tick}: {:?}",
            clients.iter().map(|c| stats(c).network).collect::<Vec<_>>()
        );
    }
    frames
}

#[test]
fn server_and_two_clients_over_udp_agree_for_300_ticks() {
    let game = TestGame {
        boxes: 10,
        ..TestGame::default()
    };
    let (mut server, addr) = udp_server(game.players);
    let mut clients: Vec<App> = (0..game.players)
        .map(|i| {
            udp_client(
                &game,
                NetworkSessionConfig::default(),
                addr,
                u64::from(i) + 1,
            )
        })
        .collect();
    let verified = |clients: &[App]| {
        clients
            .iter()
            .map(|c| c.world().resource::<SessionStats>().verified_tick)
            .min()
            .unwrap_or(0)
    };
    // The session logic runs on the fixed 64 Hz clock; datagrams cross the loopback between
    // frames (no sleep: a frame that finds nothing simply steps on). Bounded.
    let mut frames = 0;
    while verified(&clients) < 300 {
        server.update();
        for client in &mut clients {
            client.update();
        }
        frames += 1;
        assert!(
            frames < 3_000,
            "stuck at verified {}: {:?}",
            verified(&clients),
            clients
                .iter()
                .map(|c| c.world().resource::<SessionStats>().network.clone())
                .collect::<Vec<_>>()
        );
    }
    let histories: Vec<Vec<_>> = clients
        .iter()
        .map(|c| {
            c.world()
                .resource::<SessionStats>()
                .checksum_history
                .clone()
        })
        .collect();
    let n = histories.iter().map(Vec::len).min().unwrap_or(0);
    assert!(n >= 300, "{n}");
    assert_eq!(histories[0][..n], histories[1][..n]);
    let relay = server
        .world()
        .resource::<simsync::relay::RelayStats>()
        .clone();
    eprintln!("udp: {frames} frames, relay {relay:?}");
    assert_eq!(relay.desyncs, 0);
    assert_eq!(relay.rejected_messages, 0);
    for client in &clients {
        let net = client
            .world()
            .resource::<SessionStats>()
            .network
            .clone()
            .expect("networked");
        assert!(net.slot.is_some() && net.started, "{net:?}");
        assert_eq!(net.desyncs + net.others_desynced, 0);
        assert!(client.world().resource::<RenetClient>().is_connected());
    }
}

#[test]
fn a_killed_udp_client_rejoins_with_its_token_and_ends_with_the_survivors_checksum() {
    let game = TestGame {
        boxes: 10,
        ..TestGame::default()
    };
    let (mut server, addr) = udp_server(game.players);
    let mut clients: Vec<App> = (1..=2)
        .map(|id| udp_client(&game, NetworkSessionConfig::default(), addr, id))
        .collect();
    run_until_verified(&mut server, &mut clients, 100);
    // Player 1's process dies: its App is dropped without a goodbye. The relay notices the
    // silence (2 s of its clock) while the survivor plays on.
    let token = stats(&clients[1])
        .network
        .and_then(|n| n.reconnect_token)
        .expect("a token from the welcome");
    assert_eq!(token.slot, 1);
    drop(clients.pop());
    for _ in 0..200 {
        server.update();
        clients[0].update();
    }
    let relay = |server: &App| server.world().resource::<RelayStats>().clone();
    let left = relay(&server);
    assert_eq!(left.silent_disconnects, vec![0, 1], "{left:?}");
    let survivor_before = stats(&clients[0]).verified_tick;
    assert!(
        survivor_before >= 250,
        "the survivor went on: {survivor_before}"
    );
    // A new process for player 1 rejoins with the token, on a new netcode client id.
    let net = NetworkSessionConfig::rejoin(token.slot, token.token);
    clients.push(udp_client(&game, net, addr, 3));
    let end = survivor_before + 200;
    run_until_verified(&mut server, &mut clients, end);
    let r = relay(&server);
    assert_eq!(r.rejoins, vec![0, 1], "{r:?}");
    assert_eq!(r.desyncs, 0);
    let (survivor, rejoined) = (stats(&clients[0]), stats(&clients[1]));
    assert_eq!(rejoined.network.as_ref().and_then(|n| n.slot), Some(1));
    assert_eq!(rejoined.checksum_history.first().map(|c| c.tick), Some(1));
    let at_end = |s: &SessionStats| {
        s.checksum_history
            .iter()
            .find(|c| c.tick == end)
            .map(|c| c.checksum)
    };
    assert!(at_end(&survivor).is_some());
    assert_eq!(
        at_end(&rejoined),
        at_end(&survivor),
        "the checksum at tick {end}"
    );
    let n = survivor
        .checksum_history
        .len()
        .min(rejoined.checksum_history.len());
    assert!(n >= end as usize, "{n}");
    assert_eq!(
        survivor.checksum_history[..n],
        rejoined.checksum_history[..n]
    );
    eprintln!(
        "udp rejoin: silent from {:?}, rejoined at {:?}, both verified {end} with checksum {:?}",
        left.disconnected_at[1],
        r.rejoined_at[1],
        at_end(&survivor)
    );
}

/// A client App of `game` with snapshots on (plugin and network), over UDP to `server` as
/// netcode client `id`.
fn udp_snapshot_client(game: &TestGame, server: SocketAddr, id: u64) -> App {
    let net = NetworkSessionConfig {
        snapshots: true,
        ..NetworkSessionConfig::default()
    };
    let mut client = client_app_configured(game.clone(), game.players, net, 60, 64, |p| {
        p.snapshots(SnapshotLimits::default())
    });
    let transport = UdpClientTransport::unsecure(server, id, NETCODE_PROTOCOL_ID, loopback())
        .expect("client socket");
    client.insert_net_client(transport);
    client.finish();
    client.cleanup();
    client
}

#[test]
fn over_udp_a_late_joiner_loads_a_snapshot_and_agrees() {
    let game = TestGame {
        boxes: 20,
        players: 3,
        ..TestGame::default()
    };
    let relay = DeterministicServerPlugin::new::<PackedInput>(3, 64)
        .start_players(2)
        .snapshots(SnapshotServing::default())
        .header_reader(read_snapshot_header);
    let (mut server, addr) = udp_server_with(relay);
    let mut clients: Vec<App> = (1..=2)
        .map(|id| udp_snapshot_client(&game, addr, id))
        .collect();
    run_until_verified(&mut server, &mut clients, 150);
    clients.push(udp_snapshot_client(&game, addr, 3));
    run_until_verified(&mut server, &mut clients, 350);
    let joiner = stats(&clients[2]);
    let net = joiner.network.clone().expect("networked");
    assert_eq!(net.slot, Some(2));
    assert_eq!(net.snapshots.loaded, 1, "{:?}", net.snapshots);
    let loaded = net.snapshots.loaded_tick.expect("loaded");
    assert!(loaded >= 150, "{loaded}");
    assert_eq!(
        joiner.checksum_history.first().map(|c| c.tick),
        Some(loaded + 1)
    );
    let mut common = 0;
    for other in &clients[..2] {
        let theirs: std::collections::HashMap<i32, u64> = stats(other)
            .checksum_history
            .iter()
            .map(|c| (c.tick, c.checksum))
            .collect();
        for c in &joiner.checksum_history {
            if let Some(checksum) = theirs.get(&c.tick) {
                assert_eq!(*checksum, c.checksum, "tick {}", c.tick);
                common += 1;
            }
        }
    }
    assert!(common > 2 * 100, "{common}");
    let relay = server.world().resource::<RelayStats>().clone();
    assert_eq!(relay.snapshots.served, 1, "{:?}", relay.snapshots);
    assert_eq!(relay.desyncs, 0);
}

/// The transport errors a client App was told of.
#[derive(Resource, Default)]
struct TransportErrors(Vec<String>);

fn keep_transport_errors(
    mut read: MessageReader<simsync_net::NetTransportError>,
    mut kept: ResMut<TransportErrors>,
) {
    kept.0.extend(read.read().map(|e| e.error.to_string()));
}

#[test]
fn over_udp_a_client_that_leaves_is_closed_by_the_relay_without_a_transport_error() {
    let game = TestGame::default();
    let (mut server, addr) = udp_server(game.players);
    let mut clients: Vec<App> = (0..game.players)
        .map(|i| {
            udp_client(
                &game,
                NetworkSessionConfig::default(),
                addr,
                u64::from(i) + 1,
            )
        })
        .collect();
    for client in &mut clients {
        client
            .init_resource::<TransportErrors>()
            .add_systems(Last, keep_transport_errors);
    }
    run_until_verified(&mut server, &mut clients, 30);
    clients[0]
        .world_mut()
        .write_message(simsync::deterministic::LeaveSession);
    let mut frames = 0;
    while !clients[0]
        .world()
        .resource::<RenetClient>()
        .is_disconnected()
    {
        server.update();
        for client in &mut clients {
            client.update();
        }
        frames += 1;
        assert!(frames < 200, "the connection never closed");
    }
    for _ in 0..8 {
        server.update();
        clients[0].update();
    }
    // The relay closed the connection (the server's disconnect, which renetcode's own client
    // loop logs as a failed update), and no error was reported for it.
    let transport = clients[0]
        .world()
        .resource::<simsync_net::ClientTransport>();
    let simsync_net::ClientTransport::Udp(udp) = transport else {
        panic!("a UDP client");
    };
    assert_eq!(
        udp.disconnect_reason(),
        Some(simsync_net::renet_netcode::NetcodeDisconnectReason::DisconnectedByServer)
    );
    assert!(transport.close_expected());
    assert_eq!(
        clients[0].world().resource::<TransportErrors>().0,
        Vec::<String>::new()
    );
}
