//! Hostile and broken traffic: undecodable messages in both directions, and messages from a
//! connection that holds no player slot. Typed errors are counted; the session goes on.

use bevy::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_net::prelude::*;
use simsync_net::{
    ClientMessage, Hello, InputSet, MAX_MESSAGE_BYTES, NetChannel, NetClock, ParticipantId,
    Protocols, ServerMessage, SessionClientMessage, SessionServerMessage, Welcome,
};

use super::harness::{Peers, PeersExt, peers};
use crate::common::TestGame;

fn game() -> TestGame {
    TestGame {
        boxes: 10,
        ..TestGame::default()
    }
}

fn harness() -> Peers {
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let mut h = peers(game(), link).build().expect("peers");
    h.verify(60, 300);
    h
}

/// Undecodable byte strings, each with the channel it is sent on: garbage, a truncated message,
/// a message with trailing bytes, one above the codec limit, and a handshake of another
/// protocol version. Send them one per frame: renet drops unreliable messages that do not fit
/// in a frame's bandwidth, which the 64 KiB message uses up.
fn bad_messages(valid: Vec<u8>, wrong_version: Vec<u8>) -> Vec<(NetChannel, Vec<u8>)> {
    let mut trailing = valid.clone();
    trailing.push(0);
    vec![
        (NetChannel::Inputs, vec![0xff; 17]),
        (NetChannel::Inputs, valid[..valid.len() / 2].to_vec()),
        (NetChannel::Inputs, trailing),
        // Reliable: renet slices it; the codec refuses it whole. (Not zeros: those start like a
        // version-0 `Hello` and are reported as a version mismatch.)
        (NetChannel::Control, vec![0xab; MAX_MESSAGE_BYTES + 100]),
        (NetChannel::Control, wrong_version),
    ]
}

#[test]
fn undecodable_client_messages_are_rejected_and_counted() {
    let mut h = harness();
    let valid = simsync_net::encode(&ClientMessage::session(
        MatchId::FIRST,
        SessionClientMessage::Inputs {
            first_tick: 1,
            inputs: vec![vec![1, 2, 3, 4]; 3],
            ack_tick: 0,
        },
    ))
    .expect("encodes");
    let mut hello = Hello::new(Protocols::SESSION, "from the future");
    hello.protocol_version = simsync_net::PROTOCOL_VERSION + 1;
    let wrong_version = simsync_net::encode(&ClientMessage::Hello(hello)).expect("encodes");
    let bad = bad_messages(valid, wrong_version);
    let before = h.relay_stats();
    for (channel, bytes) in &bad {
        h.send_raw(0, *channel, bytes.clone());
        h.step();
    }
    let verified = h.stats_of(0).verified_tick;
    h.verify(verified + 200, 400);
    let relay = h.relay_stats();
    assert_eq!(
        relay.rejected_messages,
        before.rejected_messages + bad.len() as u64,
        "{relay:?}"
    );
    // The connection survived: still connected, still in its slot, its inputs on time.
    let client = h.client(0).expect("running");
    assert!(client.world().resource::<RenetClient>().is_connected());
    assert_eq!(relay.replaced_inputs, before.replaced_inputs, "{relay:?}");
    let net = h.net_of(0);
    assert_eq!(net.rejected, None);
    assert_eq!(relay.desyncs, 0);
    h.assert_all_agree();
}

#[test]
fn undecodable_server_messages_are_rejected_and_counted() {
    let mut h = harness();
    let valid = simsync_net::encode(&ServerMessage::session(
        MatchId::FIRST,
        SessionServerMessage::ConfirmedInputs {
            first_tick: 1,
            sets: vec![InputSet::default(); 3],
        },
    ))
    .expect("encodes");
    let wrong_version = simsync_net::encode(&ServerMessage::Welcome(Welcome {
        protocol_version: simsync_net::PROTOCOL_VERSION + 1,
        participant: ParticipantId(9),
        player_slot: Some(1),
        protocols: Protocols::SESSION,
        tick_rate_hz: 64,
        server_tick: 0,
        players: 0,
        reconnect_token: None,
    }))
    .expect("encodes");
    let bad = bad_messages(valid, wrong_version);
    let before = h.net_of(1);
    for (channel, bytes) in &bad {
        // Client 1 is renet client id 2 on the memory network.
        h.relay_mut()
            .world_mut()
            .resource_mut::<RenetServer>()
            .send_message(2, *channel, bytes.clone());
        h.step();
    }
    let verified = h.stats_of(1).verified_tick;
    h.verify(verified + 200, 400);
    let net = h.net_of(1);
    assert_eq!(
        net.rejected_messages,
        before.rejected_messages + bad.len() as u64,
        "{net:?}"
    );
    // Still the same player, still verifying with everyone else's inputs.
    assert_eq!(net.slot, Some(1));
    assert_eq!(net.rejected, None);
    assert_eq!(net.rejected_inputs, 0, "{net:?}");
    assert_eq!(h.net_of(0).rejected_messages, 0);
    assert_eq!(h.relay_stats().desyncs, 0);
    h.assert_all_agree();
}

#[test]
fn messages_from_a_connection_without_a_slot_are_ignored_and_counted() {
    let mut h = harness();
    // A third connection that never sends Hello: a bare client on the same network, stepped by
    // hand (it has no session).
    let mut stranger = App::new();
    stranger
        .add_plugins(MinimalPlugins)
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::fixed_hz(64)))
        .insert_net_client(h.network().client_transport(3).expect("transport"));
    stranger.finish();
    stranger.cleanup();
    let mut frames = 0;
    while !stranger.world().resource::<RenetClient>().is_connected() {
        h.step();
        stranger.update();
        frames += 1;
        assert!(frames < 100, "the stranger never connected");
    }
    let before = h.relay_stats();
    let sent = 20;
    for i in 0..sent {
        let tick = h.relay_stats().server_tick + 2;
        let messages = [
            ClientMessage::session(
                MatchId::FIRST,
                SessionClientMessage::Inputs {
                    first_tick: tick,
                    inputs: vec![vec![0xff, 0x7f, 0x7f]; 3],
                    ack_tick: 0,
                },
            ),
            ClientMessage::session(
                MatchId::FIRST,
                SessionClientMessage::Checksum {
                    tick: tick - 10,
                    checksum: i,
                },
            ),
        ];
        {
            let mut client = stranger.world_mut().resource_mut::<RenetClient>();
            for message in &messages {
                client.send_msg(message).expect("sent");
            }
        }
        h.step();
        stranger.update();
    }
    for _ in 0..20 {
        h.step();
        stranger.update();
    }
    let relay = h.relay_stats();
    assert_eq!(
        relay.ignored_messages,
        before.ignored_messages + 2 * sent,
        "{relay:?}"
    );
    // Nothing of it reached a slot or the desync check.
    assert_eq!(relay.replaced_inputs, before.replaced_inputs);
    assert_eq!(relay.desyncs, 0);
    h.assert_all_agree();
    for c in 0..2 {
        assert_eq!(h.net_of(c).desyncs + h.net_of(c).others_desynced, 0);
    }
}
