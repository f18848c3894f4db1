//! The handshake checks the session config: a client whose tick rate, player count or input
//! type differs from the relay's is refused with a typed reason, seen on both sides.

use bevy::prelude::*;
use simsync::deterministic::{NetworkSessionConfig, SessionRejected};
use simsync::prelude::*;
use simsync::relay::{DeterministicServerPlugin, RelayServer};
use simsync::time::TickRate;
use simsync_net::{InputFingerprint, LinkConditionerConfig, RejectReason};

use super::harness::{PeersExt, peers, peers_of, plugin};
use crate::common::TestGame;

/// The `SessionRejected` messages a client wrote.
#[derive(Resource, Default)]
struct Refusals(Vec<SessionRejected>);

fn keep_refusals(mut read: MessageReader<SessionRejected>, mut refusals: ResMut<Refusals>) {
    refusals.0.extend(read.read().cloned());
}

/// A relay for 2 players at 64 Hz and one client of `game` at `tick_rate_hz`, stepped for
/// 60 frames: returns the client's refusals and stats, and the relay's refused hellos.
fn join(
    game: TestGame,
    tick_rate_hz: u32,
    net: NetworkSessionConfig,
) -> (Vec<SessionRejected>, Option<RejectReason>, u64) {
    let rate = TickRate::new(tick_rate_hz).expect("valid tick rate");
    let mut peers = peers_of(game.players, move |_| {
        plugin(game.clone())
            .networked(net.clone())
            .edit_config(|c| c.tick_rate = rate)
    })
    .relay(DeterministicServerPlugin::new::<PackedInput>(2, 64))
    .clients(1)
    .seed(7)
    .customize(|_, client| {
        client
            .init_resource::<Refusals>()
            .add_systems(Last, keep_refusals);
    })
    .build()
    .expect("peers");
    // Refused clients stop a run: step by hand, to see the relay refuse once only.
    for _ in 0..60 {
        peers.step();
    }
    let stats = peers.net_of(0);
    assert_eq!(stats.slot, None, "a refused client gets no slot");
    let relay = peers.relay().world();
    let refused = relay.resource::<RelayServer>().handshake_stats().rejected;
    let client = peers.client(0).expect("running");
    (
        client.world().resource::<Refusals>().0.clone(),
        stats.rejected,
        refused,
    )
}

/// The client saw `reason` once as a message and in its stats; the relay counted one refusal.
fn assert_refused(
    outcome: &(Vec<SessionRejected>, Option<RejectReason>, u64),
    reason: RejectReason,
) {
    let (messages, stats, refused) = outcome;
    assert_eq!(
        messages,
        &vec![SessionRejected {
            reason: reason.clone()
        }]
    );
    assert_eq!(stats, &Some(reason));
    assert_eq!(*refused, 1);
}

#[test]
fn a_60_hz_client_is_refused_by_a_64_hz_relay() {
    let outcome = join(TestGame::default(), 60, NetworkSessionConfig::default());
    let reason = RejectReason::TickRateMismatch {
        server: 64,
        client: 60,
    };
    assert_refused(&outcome, reason);
}

#[test]
fn a_three_player_client_is_refused_by_a_two_player_relay() {
    let game = TestGame {
        players: 3,
        ..TestGame::default()
    };
    let outcome = join(game, 64, NetworkSessionConfig::default());
    let reason = RejectReason::PlayerCountMismatch {
        server: 2,
        client: 3,
    };
    assert_refused(&outcome, reason);
}

#[test]
fn a_client_expecting_another_input_size_cap_is_refused() {
    let net = NetworkSessionConfig {
        max_input_bytes: 512,
        ..NetworkSessionConfig::default()
    };
    let outcome = join(TestGame::default(), 64, net);
    let name = std::any::type_name::<PackedInput>();
    let reason = RejectReason::InputTypeMismatch {
        server: InputFingerprint::new(name, 256),
        client: InputFingerprint::new(name, 512),
    };
    assert_refused(&outcome, reason);
}

#[test]
fn matching_clients_join_and_verify() {
    let mut h = peers(TestGame::default(), LinkConditionerConfig::PERFECT)
        .build()
        .expect("peers");
    h.verify(30, 400);
    for c in 0..2 {
        let net = h.net_of(c);
        assert_eq!(net.rejected, None);
        assert_eq!(net.slot, Some(c as u8));
    }
    let handshake = h
        .relay()
        .world()
        .resource::<RelayServer>()
        .handshake_stats();
    assert_eq!((handshake.joined, handshake.rejected), (2, 0));
}
