//! Rejoining a running session: a client whose connection dropped comes back into its slot with
//! the reconnect token of its `Welcome`, catches up from the relay's history and agrees with the
//! survivors; a wrong token or a live slot is refused with its reason; a rejoin after the history
//! is gone is told it needs a snapshot.

use bevy::prelude::*;
use simsync::deterministic::{
    NeedsSnapshot, NetworkSessionConfig, PlayerInputs, PlayerLeft, PlayerRejoined,
    SessionLifecycle, SessionRejected, SessionState, SimulationWorlds,
};
use simsync::prelude::*;
use simsync::relay::DeterministicServerPlugin;
use simsync_net::prelude::*;
use simsync_net::{LinkConditionerConfig, ReconnectToken, RejectReason};

use super::harness::{Harness, client_app};
use crate::common::TestGame;

/// What a client App was told about players and its own join.
#[derive(Resource, Default)]
struct Heard {
    left: Vec<PlayerLeft>,
    back: Vec<PlayerRejoined>,
    rejected: Vec<SessionRejected>,
    needs_snapshot: Vec<NeedsSnapshot>,
}

fn listen(
    mut left: MessageReader<PlayerLeft>,
    mut back: MessageReader<PlayerRejoined>,
    mut rejected: MessageReader<SessionRejected>,
    mut needs_snapshot: MessageReader<NeedsSnapshot>,
    mut heard: ResMut<Heard>,
) {
    heard.left.extend(left.read().copied());
    heard.back.extend(back.read().copied());
    heard.rejected.extend(rejected.read().cloned());
    heard.needs_snapshot.extend(needs_snapshot.read().copied());
}

fn record(app: &mut App) {
    app.init_resource::<Heard>().add_systems(Last, listen);
}

fn heard(app: &App) -> &Heard {
    app.world().resource::<Heard>()
}

fn game() -> TestGame {
    TestGame {
        boxes: 20,
        players: 3,
        ..TestGame::default()
    }
}

/// A relay (reconnect tokens seeded, `history_ticks` of history) and three clients over a
/// 20 ms link, every client recording what it hears.
fn harness(history_ticks: u32) -> Harness {
    let relay = DeterministicServerPlugin::new::<PackedInput>(3, 64)
        .reconnect_seed(2024)
        .input_history_ticks(history_ticks);
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let mut h = Harness::with_relay(game(), link, NetworkSessionConfig::default(), 60, relay);
    for client in &mut h.clients {
        record(client);
    }
    h
}

/// A new client App on transport `id`, configured with `net`, recording what it hears.
fn new_client(h: &Harness, net: NetworkSessionConfig, id: u64) -> App {
    let mut client = client_app(game(), net, 60);
    record(&mut client);
    client.insert_net_client(h.network.client_transport(id).expect("client"));
    client.finish();
    client.cleanup();
    client
}

fn token_of(h: &Harness, client: usize) -> ReconnectToken {
    h.stats(client)
        .network
        .and_then(|n| n.reconnect_token)
        .expect("a token from the welcome")
}

/// Drops client 2's App (its transport closes: the relay sees the connection go) and steps
/// the others `frames` frames. Returns the dropped player's token.
fn drop_client_2(h: &mut Harness, frames: u32) -> ReconnectToken {
    let token = token_of(h, 2);
    assert_eq!(token.slot, 2);
    drop(h.clients.remove(2));
    for _ in 0..frames {
        h.step();
    }
    token
}

fn connected_in_verified(app: &App, player: u8) -> bool {
    app.world()
        .resource::<SimulationWorlds>()
        .verified()
        .resource::<PlayerInputs<PackedInput>>()
        .is_connected(player)
}

/// Steps `client` with the harness for `frames` frames (it is not part of the harness).
fn step_with(h: &mut Harness, client: &mut App, frames: u32) {
    for _ in 0..frames {
        h.step();
        client.update();
    }
}

/// The checksum each client recorded for verified tick `tick`.
fn checksums_at(h: &Harness, tick: i32) -> Vec<Option<u64>> {
    (0..h.clients.len())
        .map(|c| {
            h.stats(c)
                .checksum_history
                .iter()
                .find(|t| t.tick == tick)
                .map(|t| t.checksum)
        })
        .collect()
}

#[test]
fn a_dropped_client_rejoins_with_its_token_catches_up_and_agrees() {
    let mut h = harness(640);
    h.run_until_verified(100, 1_000);
    let live_token = token_of(&h, 0);
    let token = drop_client_2(&mut h, 200);
    let r = h.relay();
    let left_at = r.disconnected_at[2].expect("the relay saw player 2 go");
    for client in &h.clients {
        assert_eq!(
            heard(client).left,
            vec![PlayerLeft {
                player: 2,
                tick: left_at
            }]
        );
        assert!(!connected_in_verified(client, 2), "slot 2 is disconnected");
    }

    // A wrong token, and the right token of a slot whose player is still here, are refused.
    let wrong = NetworkSessionConfig::rejoin(2, token.token ^ 1);
    let mut impostor = new_client(&h, wrong, 10);
    let live = NetworkSessionConfig::rejoin(0, live_token.token);
    let mut usurper = new_client(&h, live, 11);
    for _ in 0..30 {
        h.step();
        impostor.update();
        usurper.update();
    }
    let refusal = |app: &App| {
        heard(app)
            .rejected
            .iter()
            .map(|r| r.reason.clone())
            .collect()
    };
    let refused: Vec<RejectReason> = refusal(&impostor);
    assert_eq!(refused, vec![RejectReason::BadReconnectToken { slot: 2 }]);
    let refused: Vec<RejectReason> = refusal(&usurper);
    assert_eq!(refused, vec![RejectReason::SlotStillConnected { slot: 0 }]);
    for app in [&impostor, &usurper] {
        let state = app.world().resource::<SessionLifecycle>().state;
        assert_eq!(state, SessionState::Rejected);
    }
    assert_eq!(h.relay().refused_rejoins, 2);
    assert_eq!(h.relay().rejoins, vec![0, 0, 0]);
    drop((impostor, usurper));

    // The right token: player 2 is back in its slot, re-simulates from tick 1 and catches up.
    let rejoined = new_client(&h, NetworkSessionConfig::rejoin(2, token.token), 12);
    h.clients.push(rejoined);
    let target = h.stats(0).verified_tick + 200;
    h.run_until_verified(target, 1_500);
    let r = h.relay();
    assert_eq!(r.rejoins, vec![0, 0, 1], "{r:?}");
    let back_at = r.rejoined_at[2].expect("rejoined");
    assert!(back_at > left_at, "{left_at} → {back_at}");
    let net = h.stats(2).network.expect("networked");
    assert_eq!(net.slot, Some(2));
    assert!(net.started);
    assert_eq!(net.needs_snapshot_from, None);
    let next = net.reconnect_token.expect("a new token");
    assert_eq!(next.slot, 2);
    assert_ne!(next.token, token.token, "a token seats once");
    for client in &h.clients {
        let back = &heard(client).back;
        assert_eq!(
            back,
            &vec![PlayerRejoined {
                player: 2,
                tick: back_at
            }]
        );
        assert!(
            connected_in_verified(client, 2),
            "slot 2 is connected again"
        );
        assert_eq!(
            client.world().resource::<SessionLifecycle>().state,
            SessionState::Running
        );
    }
    // The rejoined client verified every tick from 1, with the same checksums as the others.
    let stats = h.stats(2);
    assert_eq!(stats.checksum_history.first().map(|c| c.tick), Some(1));
    assert!(stats.verified_tick >= target, "{}", stats.verified_tick);
    let (n, mismatches) = h.checksums_agree();
    assert!(n >= target as usize, "{n} common checksums");
    assert_eq!(mismatches, 0, "over {n} ticks");
    let at_target = checksums_at(&h, target);
    assert!(at_target[0].is_some(), "{at_target:?}");
    assert!(
        at_target.iter().all(|c| *c == at_target[0]),
        "{at_target:?}"
    );
    assert_eq!(r.desyncs, 0);
    eprintln!(
        "rejoin: left at server tick {left_at}, back at {back_at}, all verified {target}; \
         {n} checksums agree; relay resent {} sets",
        r.resent_sets
    );
}

#[test]
fn a_rejoin_after_the_history_is_gone_needs_a_snapshot() {
    // One second of history: the sets from tick 1 are gone long before player 2 comes back.
    let mut h = harness(64);
    h.run_until_verified(50, 1_000);
    let token = drop_client_2(&mut h, 200);
    let mut rejoined = new_client(&h, NetworkSessionConfig::rejoin(2, token.token), 10);
    step_with(&mut h, &mut rejoined, 60);
    let r = h.relay();
    assert_eq!(r.rejoins, vec![0, 0, 1]);
    assert!(r.behind_reports >= 1, "{r:?}");
    let told = &heard(&rejoined).needs_snapshot;
    assert!(!told.is_empty(), "told it needs a snapshot");
    let oldest = told[0].oldest_available;
    // The relay held 64 ticks ending near its newest confirmed tick.
    assert!(
        oldest > 1 && oldest >= r.confirmed_tick - 64 - 60,
        "{oldest} {r:?}"
    );
    let net = rejoined
        .world()
        .resource::<SessionStats>()
        .network
        .clone()
        .expect("networked");
    assert!(net.needs_snapshot_from.is_some(), "{net:?}");
    assert_eq!(rejoined.world().resource::<SessionStats>().verified_tick, 0);
    // The survivors go on, with player 2 connected again.
    let before = h.stats(0).verified_tick;
    step_with(&mut h, &mut rejoined, 30);
    assert!(h.stats(0).verified_tick > before);
    assert!(connected_in_verified(&h.clients[0], 2));
}

/// A client of the test game with snapshots on (plugin and network), recording what it hears.
fn snapshot_client(h: &Harness, net: NetworkSessionConfig, id: u64) -> App {
    let net = NetworkSessionConfig {
        snapshots: true,
        ..net
    };
    let mut client = super::harness::client_app_configured(game(), 3, net, 60, 64, |p| {
        p.snapshots(simsync::deterministic::SnapshotLimits::default())
    });
    record(&mut client);
    client.insert_net_client(h.network.client_transport(id).expect("client"));
    client.finish();
    client.cleanup();
    client
}

#[test]
fn with_snapshots_a_rejoin_after_the_history_is_gone_loads_a_snapshot_and_agrees() {
    // One second of history, as above, but the relay serves snapshots and every client can be
    // a buddy: the player coming back loads one instead of staying behind.
    let relay = DeterministicServerPlugin::new::<PackedInput>(3, 64)
        .reconnect_seed(2024)
        .input_history_ticks(64)
        .snapshots(simsync::relay::SnapshotServing::default())
        .header_reader(simsync::relay::read_snapshot_header);
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let mut h = Harness::with_relay(game(), link, NetworkSessionConfig::default(), 60, relay);
    h.clients.clear();
    for id in 1..=3 {
        let client = snapshot_client(&h, NetworkSessionConfig::default(), 20 + id);
        h.clients.push(client);
    }
    h.run_until_verified(50, 1_000);
    let token = drop_client_2(&mut h, 200);
    let rejoined = snapshot_client(&h, NetworkSessionConfig::rejoin(2, token.token), 10);
    h.clients.push(rejoined);
    let target = h.stats(0).verified_tick + 200;
    h.run_until_verified(target, 2_000);
    for _ in 0..10 {
        h.step();
    }
    let r = h.relay();
    assert_eq!(r.rejoins, vec![0, 0, 1]);
    assert_eq!(r.snapshots.served, 1, "{:?}", r.snapshots);
    let net = h.stats(2).network.expect("networked");
    assert_eq!(net.snapshots.loaded, 1, "{:?}", net.snapshots);
    let loaded = net.snapshots.loaded_tick.expect("loaded");
    let mine = h.stats(2).checksum_history;
    assert_eq!(mine.first().map(|c| c.tick), Some(loaded + 1));
    let mut common = 0;
    for c in &mine {
        let others = checksums_at(&h, c.tick);
        assert_eq!(others[0], Some(c.checksum), "tick {}", c.tick);
        assert_eq!(others[1], Some(c.checksum), "tick {}", c.tick);
        common += 1;
    }
    assert!(common > 100, "{common}");
}
