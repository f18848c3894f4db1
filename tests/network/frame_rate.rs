//! A client rendering far faster than the tick rate: it sends at most one input message per
//! tick, and the relay, which counts inputs in ticks, never refuses one of them.

use std::time::Duration;

use bevy::time::TimeUpdateStrategy;
use simsync::deterministic::{NetworkSessionConfig, SessionClock};
use simsync_net::prelude::*;
use simsync_net::{LinkConditionerConfig, MemoryNetwork, NetClock};

use super::harness::{Harness, client_app_clocked, server_app};
use crate::common::TestGame;

/// Two clients updated at `fps` frames per second of virtual time (one millisecond a frame at
/// 1,000), a relay at 64 Hz, 20 ms each way.
fn harness_at_fps(fps: u32) -> Harness {
    let game = TestGame {
        boxes: 10,
        ..TestGame::default()
    };
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let network = MemoryNetwork::new(99, link).expect("valid link");
    let mut server = server_app(game.players);
    server.insert_net_server(network.server_transport().expect("server"));
    server.finish();
    server.cleanup();
    let frame = Duration::from_secs(1) / fps;
    let clients = (0..game.players)
        .map(|id| {
            let mut client = client_app_clocked(
                game.clone(),
                game.players,
                NetworkSessionConfig::default(),
                60,
                64,
                NetClock::Fixed(frame),
                |plugin| {
                    plugin.edit_config(|c| {
                        c.clock = SessionClock::RealTime;
                    })
                },
            );
            client.insert_resource(TimeUpdateStrategy::ManualDuration(frame));
            client.insert_net_client(network.client_transport(u64::from(id) + 1).expect("client"));
            client.finish();
            client.cleanup();
            client
        })
        .collect();
    Harness {
        network,
        server,
        clients,
    }
}

#[test]
fn a_client_at_1000_frames_per_second_sends_one_input_message_per_tick_and_none_is_refused() {
    let mut h = harness_at_fps(1_000);
    // Ten seconds of virtual time: 10,000 client frames, the relay updated every 1/64 s.
    let server_step = Duration::from_nanos(15_625_000);
    let mut server_time = Duration::ZERO;
    for frame in 1..=10_000u64 {
        let now = Duration::from_millis(frame);
        while server_time + server_step <= now {
            server_time += server_step;
            h.server.update();
        }
        for client in &mut h.clients {
            client.update();
        }
    }
    let relay = h.relay();
    for c in 0..2 {
        let stats = h.stats(c);
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
    let (compared, mismatches) = h.checksums_agree();
    assert!(compared >= 550, "{compared}");
    assert_eq!(mismatches, 0);
}
