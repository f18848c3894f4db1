//! Late join and rejoin from a snapshot: the relay seats a new player in a free slot of a
//! running session (or a player whose missing confirmed sets are gone), asks a connected
//! client (the buddy) for a snapshot of its verified world, checks it against the others'
//! verified checksum and forwards it; the joiner loads it and agrees with the others from its
//! first verified tick. Hostile chunks are refused, counted and limited.

use bevy::prelude::*;
use simsync::deterministic::{DeterministicServerPlugin, NetworkSessionConfig, SnapshotServing};
use simsync::prelude::*;
use simsync_net::prelude::*;
use simsync_net::{
    ClientMessage, LinkConditionerConfig, NetChannel, SessionClientMessage, SnapshotChunk,
};

use super::harness::{Harness, client_app};
use crate::common::TestGame;

fn game(players: u8) -> TestGame {
    TestGame {
        boxes: 20,
        players,
        ..TestGame::default()
    }
}

/// A relay of `players` slots that starts with `start` of them and serves snapshots, and
/// `start` clients (configured by `net`) over `link`.
fn harness(
    players: u8,
    start: u8,
    net: NetworkSessionConfig,
    link: LinkConditionerConfig,
) -> Harness {
    let relay = DeterministicServerPlugin::new::<PackedInput>(players, 64)
        .reconnect_seed(11)
        .start_players(start)
        .snapshots(SnapshotServing::default());
    let mut h = Harness::with_relay(game(players), link, net, 60, relay);
    h.clients.truncate(usize::from(start));
    h
}

/// A new client App on transport `id` of the harness's network.
fn new_client(h: &Harness, players: u8, net: NetworkSessionConfig, id: u64) -> App {
    let mut client = client_app(game(players), net, 60);
    client.insert_net_client(h.network.client_transport(id).expect("client"));
    client.finish();
    client.cleanup();
    client
}

fn send(h: &mut Harness, client: usize, channel: NetChannel, message: &ClientMessage) {
    let bytes = simsync_net::encode(message).expect("encodes");
    h.clients[client]
        .world_mut()
        .resource_mut::<RenetClient>()
        .send_message(channel, bytes);
}

fn chunk(request: u32, index: u32) -> ClientMessage {
    ClientMessage::Session(SessionClientMessage::SnapshotChunk(SnapshotChunk {
        request,
        tick: 5,
        checksum: 1,
        total_bytes: 10,
        index,
        count: 1,
        bytes: vec![7; 10],
    }))
}

#[test]
fn a_late_joiner_takes_a_free_slot_and_a_buddy_is_asked_for_a_snapshot() {
    // The players serve no snapshots: every request is answered unavailable, so the relay keeps
    // asking (each in turn), and the session goes on for the two who play.
    let mut h = harness(
        3,
        2,
        NetworkSessionConfig::default(),
        LinkConditionerConfig::PERFECT,
    );
    h.run_until_verified(60, 1_000);
    assert!(
        h.server
            .world()
            .resource::<simsync::deterministic::RelayServer>()
            .started()
    );
    let mut late = new_client(&h, 3, NetworkSessionConfig::default(), 9);
    for _ in 0..60 {
        h.step();
        late.update();
    }
    let r = h.relay();
    assert_eq!(r.late_joins, vec![0, 0, 1], "{r:?}");
    let net = late
        .world()
        .resource::<SessionStats>()
        .network
        .clone()
        .expect("networked");
    assert_eq!(net.slot, Some(2));
    assert!(net.started);
    assert!(r.snapshots.requests >= 2, "{:?}", r.snapshots);
    assert!(r.snapshots.abandoned >= 2, "{:?}", r.snapshots);
    assert_eq!(r.snapshots.served, 0);
    let unavailable: u64 = (0..2)
        .map(|c| h.stats(c).network.expect("net").snapshots.unavailable)
        .sum();
    assert!(unavailable >= 2, "both players were asked and said no");
    assert!(
        (0..2).all(|c| h.stats(c).network.expect("net").snapshots.unavailable >= 1),
        "each in turn"
    );
    // The joiner is not sent confirmed sets it could not use; the others play on.
    assert_eq!(late.world().resource::<SessionStats>().verified_tick, 0);
    let before = h.stats(0).verified_tick;
    h.run_until_verified(before + 30, 200);
}

#[test]
fn without_snapshots_a_late_joiner_is_refused() {
    let relay = DeterministicServerPlugin::new::<PackedInput>(2, 64);
    let mut h = Harness::with_relay(
        game(2),
        LinkConditionerConfig::PERFECT,
        NetworkSessionConfig::default(),
        60,
        relay,
    );
    h.run_until_verified(20, 1_000);
    let mut late = new_client(&h, 2, NetworkSessionConfig::default(), 9);
    for _ in 0..20 {
        h.step();
        late.update();
    }
    let net = late
        .world()
        .resource::<SessionStats>()
        .network
        .clone()
        .expect("networked");
    assert_eq!(
        net.rejected,
        Some(simsync_net::RejectReason::SessionStarted)
    );
}

#[test]
fn unasked_snapshot_chunks_are_refused_counted_and_rate_limited() {
    let mut h = harness(
        2,
        2,
        NetworkSessionConfig::default(),
        LinkConditionerConfig::PERFECT,
    );
    h.run_until_verified(20, 1_000);
    for index in 0..3_000 {
        send(&mut h, 0, NetChannel::Snapshot, &chunk(77, index));
        if index % 500 == 499 {
            h.step();
        }
    }
    for _ in 0..5 {
        h.step();
    }
    let r = h.relay();
    let refused = r.snapshots.rejected_chunks;
    let limited = r.rate_limited[0].snapshot_chunks;
    assert_eq!(refused.unasked + limited, 3_000, "{refused:?} {limited}");
    assert!(limited >= 900, "the burst is 2,048 chunks: {limited}");
    assert_eq!(refused.total(), refused.unasked);
    assert_eq!(r.snapshots.served, 0);
    // The flooder is not disconnected and the session goes on.
    let before = h.stats(1).verified_tick;
    h.run_until_verified(before + 20, 200);
}
