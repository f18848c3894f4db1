//! Disconnected players: the relay notices a silent client and every survivor's simulation
//! sees it through `PlayerInputs::is_connected`, at the same confirmed tick.

use bevy::prelude::*;
use simsync::deterministic::{PlayerInputs, SimHash, SimulationWorlds, StateHasher};
use simsync::prelude::*;
use simsync_net::LinkConditionerConfig;

use super::harness::{Peers, PeersExt, peers_of, plugin};
use crate::common::TestGame;

/// Per player: the first tick its input set said it was disconnected (rolled back and hashed,
/// so the checksums compare it too).
#[derive(Resource, Clone, Debug, Default, PartialEq)]
struct FirstDisconnected(Vec<Option<i32>>);

impl SimHash for FirstDisconnected {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        for first in &self.0 {
            first.unwrap_or(-1).sim_hash(hasher);
        }
    }
}

/// The test game plus a system recording [`FirstDisconnected`].
#[derive(Clone)]
struct Watched(TestGame);

impl Plugin for Watched {
    fn build(&self, app: &mut App) {
        app.add_plugins(self.0.clone())
            .insert_resource(FirstDisconnected(vec![None; usize::from(self.0.players)]))
            .rollback_hashed_resource::<FirstDisconnected>()
            .add_systems(SimulationTick, record.in_set(SimulationSet::Game));
    }
}

fn record(inputs: Res<PlayerInputs<PackedInput>>, mut first: ResMut<FirstDisconnected>) {
    for (player, _) in inputs.iter() {
        let seen = &mut first.0[usize::from(player)];
        if seen.is_none() && !inputs.is_connected(player) {
            *seen = Some(inputs.tick());
        }
    }
}

fn first_disconnected(peers: &Peers, client: usize, verified: bool) -> Vec<Option<i32>> {
    let client = peers.client(client).expect("running");
    let worlds = client.world().resource::<SimulationWorlds>();
    let world = if verified {
        worlds.verified()
    } else {
        worlds.predicted()
    };
    world.resource::<FirstDisconnected>().0.clone()
}

/// A relay and three clients of the watched game over a 20 ms link, run until every client
/// verified tick `tick`.
fn three_players_verified_through(tick: i32) -> Peers {
    let game = TestGame {
        boxes: 20,
        players: 3,
        ..TestGame::default()
    };
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let mut peers = peers_of(3, move |_| plugin(Watched(game.clone())))
        .link(link)
        .build()
        .expect("peers");
    peers.verify(tick, 2_000);
    peers
}

#[test]
fn a_client_that_stops_updating_is_disconnected_within_two_seconds() {
    let mut peers = three_players_verified_through(100);
    // Client 2's App stops updating: the relay hears nothing from it any more.
    peers.pause(2).expect("pause");
    let silent_from = peers.relay_stats().server_tick;
    let mut detected_after = None;
    for frame in 1..=600u32 {
        peers.step();
        if detected_after.is_none() && peers.relay_stats().silent_disconnects[2] > 0 {
            detected_after = Some(frame);
        }
    }
    let r = peers.relay_stats();
    let detected_after = detected_after.expect("the relay noticed the silence");
    // Measured: 130 frames of 1/64 s: the 2 s timeout (128 frames) after the last message in
    // flight (20 ms link) arrived.
    assert!(detected_after <= 131, "{detected_after} frames");
    assert_eq!(r.silent_disconnects, vec![0, 0, 1], "{r:?}");
    let at = r.disconnected_at[2].expect("marked");
    assert!(at - silent_from <= 131, "{silent_from} → {at}");
    eprintln!("silent from server tick {silent_from}, disconnected at {at}");
    // The survivors see it from one confirmed tick on, the same in both worlds of both.
    let first = first_disconnected(&peers, 0, true);
    assert_eq!(first[..2], [None, None], "{first:?}");
    let tick = first[2].expect("player 2 seen disconnected");
    assert!(
        tick > silent_from - 10 && tick <= at,
        "{tick} {silent_from} {at}"
    );
    eprintln!("player 2 disconnected from confirmed tick {tick}");
    for c in 0..2 {
        assert_eq!(first_disconnected(&peers, c, true), first, "client {c}");
        assert_eq!(first_disconnected(&peers, c, false), first, "client {c}");
    }
    // Only the survivors keep verifying, and they agree on every checksum.
    let (s0, s1) = (peers.stats_of(0), peers.stats_of(1));
    assert!(s0.verified_tick >= 600 && s1.verified_tick >= 600, "{s0:?}");
    assert!(peers.stats_of(2).verified_tick < 110);
    let agreement = peers.assert_all_agree();
    assert!(agreement.ticks_compared >= 600, "{agreement:?}");
}

#[test]
fn a_paused_client_counts_as_connected_again_once_heard_and_all_agree() {
    let mut peers = three_players_verified_through(100);
    // Client 2 pauses for 3 s (192 frames), then runs again.
    peers.pause(2).expect("pause");
    peers.run_frames(192).expect("the others play on");
    peers.resume(2).expect("resume");
    assert_eq!(peers.relay_stats().silent_disconnects[2], 1);
    let target = peers.stats_of(0).verified_tick + 300;
    peers.verify(target, 2_000);
    let r = peers.relay_stats();
    assert_eq!(r.silent_disconnects, vec![0, 0, 1], "{r:?}");
    // Every client, the paused one too, saw player 2 leave at the same confirmed tick.
    let first = first_disconnected(&peers, 0, true);
    assert!(first[2].is_some(), "{first:?}");
    for c in 0..3 {
        assert_eq!(first_disconnected(&peers, c, true), first);
    }
    // Heard from again: the sets confirmed now mark it connected.
    for c in 0..3 {
        let worlds = peers.client(c).expect("running").world();
        let verified = worlds.resource::<SimulationWorlds>().verified();
        assert!(
            verified
                .resource::<PlayerInputs<PackedInput>>()
                .is_connected(2)
        );
    }
    let agreement = peers.assert_all_agree();
    assert!(agreement.ticks_compared >= 400, "{agreement:?}");
    let paused = peers.agreement_of(2).unwrap_or_else(|e| panic!("{e}"));
    assert!(paused.ticks_compared >= 400, "{paused:?}");
}
