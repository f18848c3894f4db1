//! A flooding peer: one client sends about 10,000 messages a second (inputs, checksums, pings)
//! while two honest clients play. The relay's per-connection rate limits drop the flood and
//! count it for the flooder only; the honest clients keep verifying and agree.

use bevy::prelude::*;
use simsync::relay::{RateLimited, RelayLimits};
use simsync_net::prelude::*;
use simsync_net::{ClientMessage, LinkConditionerConfig, NetChannel, SessionClientMessage};

use super::harness::{PeersExt, peers};
use crate::common::TestGame;

/// Messages the flooder sends per 1/64 s frame: 10,048 a second.
const PER_FRAME: u64 = 157;

/// The flood's state on the flooding client: on while `on`, messages sent so far.
#[derive(Resource, Default)]
struct Flood {
    on: bool,
    sent: u64,
}

/// Sends [`PER_FRAME`] messages straight through the flooder's renet client: inputs for ticks
/// ahead of its own, checksums for ticks nobody verified, and pings.
fn flood(mut flood: ResMut<Flood>, mut client: ResMut<RenetClient>) {
    if !flood.on {
        return;
    }
    let base = (flood.sent / PER_FRAME) as i32;
    for i in 0..PER_FRAME {
        let message = match i % 3 {
            0 => ClientMessage::session(
                MatchId::FIRST,
                SessionClientMessage::Inputs {
                    first_tick: base + 5_000,
                    inputs: vec![vec![0; 4]; 4],
                    ack_tick: 0,
                },
            ),
            1 => ClientMessage::session(
                MatchId::FIRST,
                SessionClientMessage::Checksum {
                    tick: base + 5_000 + i as i32,
                    checksum: i,
                },
            ),
            _ => ClientMessage::Ping { t: i as u32 },
        };
        let bytes = simsync_net::encode(&message).expect("encodes");
        client.send_message(NetChannel::Inputs, bytes);
        flood.sent += 1;
    }
}

#[test]
fn a_flooding_peer_is_rate_limited_and_honest_clients_play_on() {
    let game = TestGame {
        boxes: 10,
        players: 3,
        ..TestGame::default()
    };
    let flooder = 2;
    let mut h = peers(game, LinkConditionerConfig::PERFECT.with_latency(20, 0))
        .customize(move |c, client| {
            if c == flooder {
                client
                    .init_resource::<Flood>()
                    .add_systems(PostUpdate, flood);
            }
        })
        .build()
        .expect("peers");
    h.verify(60, 600);
    let before = h.relay_stats();
    let flooding = |h: &mut super::harness::Peers, on: bool| {
        let client = h.client_mut(flooder).expect("running");
        client.world_mut().resource_mut::<Flood>().on = on;
        client.world().resource::<Flood>().sent
    };
    flooding(&mut h, true);
    let verified = [h.stats_of(0).verified_tick, h.stats_of(1).verified_tick];
    let frames = 400u32;
    h.run_frames(frames).expect("the session goes on");
    let sent = flooding(&mut h, false);
    let relay = h.relay_stats();

    // Both honest clients kept verifying through the flood and agree.
    for (c, start) in verified.into_iter().enumerate() {
        let progress = h.stats_of(c).verified_tick - start;
        assert!(progress >= 300, "client {c} verified {progress} ticks");
        let net = h.net_of(c);
        assert_eq!(net.desyncs + net.others_desynced, 0, "{net:?}");
    }
    let agreement = h.assert_all_agree();
    assert!(agreement.ticks_compared >= 300, "{agreement:?}");
    assert_eq!(relay.desyncs, 0, "{relay:?}");
    // No honest input was replaced because of the flood.
    assert_eq!(
        relay.replaced_inputs[..2],
        before.replaced_inputs[..2],
        "{relay:?}"
    );

    // The flood was counted for the flooder only, per kind.
    let limited = relay.rate_limited[flooder];
    assert_eq!(relay.rate_limited[..2], [RateLimited::default(); 2]);
    assert!(limited.inputs > 0 && limited.checksums > 0 && limited.control > 0);
    assert!(
        limited.total() >= sent * 9 / 10,
        "{limited:?} of {sent} sent"
    );

    // The relay's work for the flooder stayed within its limits: what it handled is bounded by
    // the rates over the flood's duration plus one burst of each kind.
    let limits = RelayLimits::for_tick_rate(64);
    let kinds = [limits.inputs, limits.checksums, limits.control];
    let per_second: u64 = kinds.iter().map(|l| u64::from(l.per_second)).sum();
    let bursts: u64 = kinds.iter().map(|l| u64::from(l.burst)).sum();
    let handled = relay.admitted_messages[flooder] - before.admitted_messages[flooder];
    let bound = per_second * u64::from(frames) / 64 + bursts;
    assert!(handled <= bound, "{handled} handled, bound {bound}");
    println!(
        "flood: {sent} sent, {} rate limited ({limited:?}), {handled} handled (bound {bound}); \
         honest: {:?}",
        limited.total(),
        &relay.admitted_messages[..2]
    );
}
