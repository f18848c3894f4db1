//! Disconnected players: the relay notices a silent client and every survivor's simulation
//! sees it through `PlayerInputs::is_connected`, at the same confirmed tick.

use bevy::prelude::*;
use simsync::deterministic::{
    NetworkSessionConfig, PlayerInputs, SimHash, SimulationWorlds, StateHasher,
};
use simsync::prelude::*;
use simsync::relay::RelayStats;
use simsync_net::prelude::*;
use simsync_net::{LinkConditionerConfig, MemoryNetwork};

use super::harness::{client_app_of, server_app};
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

fn first_disconnected(client: &App, verified: bool) -> Vec<Option<i32>> {
    let worlds = client.world().resource::<SimulationWorlds>();
    let world = if verified {
        worlds.verified()
    } else {
        worlds.predicted()
    };
    world.resource::<FirstDisconnected>().0.clone()
}

fn stats(client: &App) -> SessionStats {
    client.world().resource::<SessionStats>().clone()
}

fn relay(server: &App) -> RelayStats {
    server.world().resource::<RelayStats>().clone()
}

/// A relay and three clients of the watched game over a 20 ms link, run until every client
/// verified tick `tick`. The network is returned to keep the transports alive.
fn three_players_verified_through(tick: i32) -> (MemoryNetwork, App, Vec<App>) {
    let game = TestGame {
        boxes: 20,
        players: 3,
        ..TestGame::default()
    };
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let network = MemoryNetwork::new(99, link).expect("valid link");
    let mut server = server_app(3);
    server.insert_net_server(network.server_transport().expect("server"));
    let mut clients: Vec<App> = (0..3u64)
        .map(|id| {
            let net = NetworkSessionConfig::default();
            let mut client = client_app_of(Watched(game.clone()), 3, net, 60, 64);
            client.insert_net_client(network.client_transport(id + 1).expect("client"));
            client.finish();
            client.cleanup();
            client
        })
        .collect();
    server.finish();
    server.cleanup();
    let mut frames = 0;
    while clients.iter().any(|c| stats(c).verified_tick < tick) {
        server.update();
        for client in &mut clients {
            client.update();
        }
        frames += 1;
        assert!(frames < 2_000, "not verified: {:?}", relay(&server));
    }
    (network, server, clients)
}

#[test]
fn a_client_that_stops_updating_is_disconnected_within_two_seconds() {
    let (_network, mut server, mut clients) = three_players_verified_through(100);
    // Client 2's App stops updating: the relay hears nothing from it any more.
    let silent_from = relay(&server).server_tick;
    let mut detected_after = None;
    for frame in 1..=600u32 {
        server.update();
        clients[0].update();
        clients[1].update();
        if detected_after.is_none() && relay(&server).silent_disconnects[2] > 0 {
            detected_after = Some(frame);
        }
    }
    let r = relay(&server);
    let detected_after = detected_after.expect("the relay noticed the silence");
    // Measured: 130 frames of 1/64 s: the 2 s timeout (128 frames) after the last message in
    // flight (20 ms link) arrived.
    assert!(detected_after <= 131, "{detected_after} frames");
    assert_eq!(r.silent_disconnects, vec![0, 0, 1], "{r:?}");
    let at = r.disconnected_at[2].expect("marked");
    assert!(at - silent_from <= 131, "{silent_from} → {at}");
    eprintln!("silent from server tick {silent_from}, disconnected at {at}");
    // The survivors see it from one confirmed tick on, the same in both worlds of both.
    let first = first_disconnected(&clients[0], true);
    assert_eq!(first[..2], [None, None], "{first:?}");
    let tick = first[2].expect("player 2 seen disconnected");
    assert!(
        tick > silent_from - 10 && tick <= at,
        "{tick} {silent_from} {at}"
    );
    eprintln!("player 2 disconnected from confirmed tick {tick}");
    for (c, client) in clients.iter().enumerate().take(2) {
        assert_eq!(first_disconnected(client, true), first, "client {c}");
        assert_eq!(first_disconnected(client, false), first, "client {c}");
    }
    // Only the survivors keep verifying, and they agree on every checksum.
    let (s0, s1) = (stats(&clients[0]), stats(&clients[1]));
    assert!(s0.verified_tick >= 600 && s1.verified_tick >= 600, "{s0:?}");
    assert!(stats(&clients[2]).verified_tick < 110);
    let n = s0.checksum_history.len().min(s1.checksum_history.len());
    assert!(n >= 600, "{n}");
    assert_eq!(s0.checksum_history[..n], s1.checksum_history[..n]);
}

#[test]
fn a_paused_client_counts_as_connected_again_once_heard_and_all_agree() {
    let (_network, mut server, mut clients) = three_players_verified_through(100);
    // Client 2 pauses for 3 s (192 frames), then runs again.
    for _ in 0..192 {
        server.update();
        clients[0].update();
        clients[1].update();
    }
    assert_eq!(relay(&server).silent_disconnects[2], 1);
    let target = stats(&clients[0]).verified_tick + 300;
    let mut frames = 0;
    while clients.iter().any(|c| stats(c).verified_tick < target) {
        server.update();
        for client in &mut clients {
            client.update();
        }
        frames += 1;
        assert!(frames < 2_000, "not caught up: {:?}", relay(&server));
    }
    let r = relay(&server);
    assert_eq!(r.silent_disconnects, vec![0, 0, 1], "{r:?}");
    // Every client, the paused one too, saw player 2 leave at the same confirmed tick.
    let first = first_disconnected(&clients[0], true);
    assert!(first[2].is_some(), "{first:?}");
    for client in &clients {
        assert_eq!(first_disconnected(client, true), first);
    }
    // Heard from again: the sets confirmed now mark it connected.
    let inputs = |c: &App| {
        let worlds = c.world().resource::<SimulationWorlds>();
        worlds
            .verified()
            .resource::<PlayerInputs<PackedInput>>()
            .is_connected(2)
    };
    assert!(clients.iter().all(inputs));
    let histories: Vec<_> = clients.iter().map(|c| stats(c).checksum_history).collect();
    let n = histories.iter().map(Vec::len).min().unwrap_or(0);
    assert!(n >= 400, "{n}");
    for history in &histories[1..] {
        assert_eq!(history[..n], histories[0][..n]);
    }
}
