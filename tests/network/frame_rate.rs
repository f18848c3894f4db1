//! A client rendering far faster than the tick rate: it sends at most one input message per
//! tick, and the relay, which counts inputs in ticks, never refuses one of them.

use std::time::Duration;

use bevy::prelude::*;
use bevy::time::TimeUpdateStrategy;
use simsync::deterministic::{NetworkSessionConfig, PackedInput, SessionStats};
use simsync::relay::{DeterministicServerPlugin, RelayStats};
use simsync::testing::compare_histories;
use simsync_net::prelude::*;
use simsync_net::{LinkConditionerConfig, MemoryNetwork, NetClock};

use super::harness::{client_app_clocked, server_app_with};
use crate::common::TestGame;

/// A relay at 64 Hz and two clients whose session runs on real time, updated at `fps` frames
/// per second of virtual time (one millisecond a frame at 1,000), 20 ms each way. Built by
/// hand: `RelayPeers` steps its clients one tick per update.
fn peers_at_fps(fps: u32) -> (MemoryNetwork, App, Vec<App>) {
    let game = TestGame {
        boxes: 10,
        ..TestGame::default()
    };
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let network = MemoryNetwork::new(99, link).expect("valid link");
    let mut server = server_app_with(DeterministicServerPlugin::new::<PackedInput>(2, 64));
    server.insert_net_server(network.server_transport().expect("server"));
    server.finish();
    server.cleanup();
    let frame = Duration::from_secs(1) / fps;
    let clients = (1..=2)
        .map(|id| {
            let net = NetworkSessionConfig::default();
            let clock = NetClock::Fixed(frame);
            let mut client = client_app_clocked(game.clone(), 2, net, 60, 64, clock, |p| p);
            client.insert_resource(TimeUpdateStrategy::ManualDuration(frame));
            client.insert_net_client(network.client_transport(id).expect("client"));
            client.finish();
            client.cleanup();
            client
        })
        .collect();
    (network, server, clients)
}

#[test]
fn a_client_at_1000_frames_per_second_sends_one_input_message_per_tick_and_none_is_refused() {
    let (_network, mut server, mut clients) = peers_at_fps(1_000);
    // Ten seconds of virtual time: 10,000 client frames, the relay updated every 1/64 s.
    let server_step = Duration::from_nanos(15_625_000);
    let mut server_time = Duration::ZERO;
    for frame in 1..=10_000u64 {
        let now = Duration::from_millis(frame);
        while server_time + server_step <= now {
            server_time += server_step;
            server.update();
        }
        for client in &mut clients {
            client.update();
        }
    }
    let relay = server.world().resource::<RelayStats>().clone();
    let stats: Vec<SessionStats> = clients
        .iter()
        .map(|c| c.world().resource::<SessionStats>().clone())
        .collect();
    for (c, stats) in stats.iter().enumerate() {
        let net = stats.network.clone().expect("networked");
        assert_eq!(relay.rate_limited[c].inputs, 0, "{relay:?}");
        assert_eq!(relay.rate_limited[c].total(), 0, "{relay:?}");
        // At most one message per tick of the client's clock, and one for (nearly) every tick.
        let ticks = stats.local_tick as u64;
        assert!(ticks >= 600, "{ticks}");
        assert!(
            net.input_messages_sent <= ticks,
            "{} > {ticks}",
            net.input_messages_sent
        );
        assert!(net.input_messages_sent >= ticks * 9 / 10, "{net:?}");
        assert!(stats.verified_tick >= 550, "{}", stats.verified_tick);
        println!(
            "client {c} at 1,000 fps: {} ticks, {} input messages, {} refused",
            ticks, net.input_messages_sent, relay.rate_limited[c].inputs
        );
    }
    let histories = [
        &stats[0].checksum_history[..],
        &stats[1].checksum_history[..],
    ];
    let agreement = compare_histories(&histories).unwrap_or_else(|d| panic!("{d}"));
    assert!(agreement.ticks_compared >= 550, "{agreement:?}");
}
