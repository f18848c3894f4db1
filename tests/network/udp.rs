//! The networked session over real UDP sockets on 127.0.0.1.

use std::net::SocketAddr;

use bevy::prelude::*;
use simsync::deterministic::NetworkSessionConfig;
use simsync::prelude::*;
use simsync_net::prelude::*;
use simsync_net::{NETCODE_PROTOCOL_ID, UdpClientTransport, UdpServerConfig, UdpServerTransport};

use super::harness::{client_app, server_app};
use crate::common::TestGame;

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("address")
}

#[test]
fn server_and_two_clients_over_udp_agree_for_300_ticks() {
    let game = TestGame {
        boxes: 10,
        ..TestGame::default()
    };
    let transport = UdpServerTransport::bind(UdpServerConfig::unsecure(loopback())).expect("bind");
    let addr = transport.local_addr();
    let mut server = server_app(game.players);
    server.insert_net_server(transport);
    server.finish();
    server.cleanup();
    let mut clients: Vec<App> = (0..game.players)
        .map(|i| {
            let mut client = client_app(game.clone(), NetworkSessionConfig::default(), 60);
            let transport = UdpClientTransport::unsecure(
                addr,
                u64::from(i) + 1,
                NETCODE_PROTOCOL_ID,
                loopback(),
            )
            .expect("client socket");
            client.insert_net_client(transport);
            client.finish();
            client.cleanup();
            client
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
        .resource::<simsync::deterministic::RelayStats>()
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
        assert_eq!(net.desyncs_reported, 0);
        assert!(client.world().resource::<RenetClient>().is_connected());
    }
}
