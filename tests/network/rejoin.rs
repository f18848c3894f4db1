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

use super::harness::{Peers, PeersExt, client_app, peers_of, plugin, snapshot_plugin};
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

/// What client `client` of `h` heard.
fn heard_by(h: &Peers, client: usize) -> &Heard {
    heard(h.client(client).expect("running"))
}

fn game() -> TestGame {
    TestGame {
        boxes: 20,
        players: 3,
        ..TestGame::default()
    }
}

/// A relay (reconnect tokens seeded, `history_ticks` of history, snapshots served when
/// `snapshots`) and three clients running `make(c)` over a 20 ms link, every client recording
/// what it hears.
fn harness_with(
    history_ticks: u32,
    snapshots: bool,
    make: impl Fn(usize) -> DeterministicPlugin<PackedInput> + Send + Sync + 'static,
) -> Peers {
    let mut relay = DeterministicServerPlugin::new::<PackedInput>(3, 64)
        .reconnect_seed(2024)
        .input_history_ticks(history_ticks);
    if snapshots {
        relay = relay
            .snapshots(simsync::relay::SnapshotServing::default())
            .header_reader(simsync::relay::read_snapshot_header);
    }
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    peers_of(3, make)
        .link(link)
        .relay(relay)
        .customize(|_, client| record(client))
        .build()
        .expect("peers")
}

/// [`harness_with`] the test game.
fn harness(history_ticks: u32) -> Peers {
    harness_with(history_ticks, false, |_| plugin(game()))
}

/// A hand-built client (not one of `h`'s) on transport `id`, configured with `net` (a forged
/// or a live slot's token), recording what it hears.
fn new_client(h: &Peers, net: NetworkSessionConfig, id: u64) -> App {
    let mut client = client_app(game(), net, 60);
    record(&mut client);
    client.insert_net_client(h.network().client_transport(id).expect("client"));
    client.finish();
    client.cleanup();
    client
}

fn token_of(h: &Peers, client: usize) -> ReconnectToken {
    h.net_of(client)
        .reconnect_token
        .expect("a token from the welcome")
}

/// Kills client 2 (its App and transport close: the relay sees the connection go) and steps
/// the others `frames` frames. Returns the killed player's token.
fn kill_client_2(h: &mut Peers, frames: u32) -> ReconnectToken {
    let token = token_of(h, 2);
    assert_eq!(token.slot, 2);
    h.kill(2).expect("kill");
    h.run_frames(frames).expect("the others play on");
    token
}

fn connected_in_verified(app: &App, player: u8) -> bool {
    app.world()
        .resource::<SimulationWorlds>()
        .verified()
        .resource::<PlayerInputs<PackedInput>>()
        .is_connected(player)
}

#[test]
fn a_dropped_client_rejoins_with_its_token_catches_up_and_agrees() {
    let mut h = harness(640);
    h.verify(100, 1_000);
    let live_token = token_of(&h, 0);
    let token = kill_client_2(&mut h, 200);
    let r = h.relay_stats();
    let left_at = r.disconnected_at[2].expect("the relay saw player 2 go");
    for c in 0..2 {
        let client = h.client(c).expect("running");
        assert_eq!(
            heard(client).left,
            vec![PlayerLeft {
                player: 2,
                tick: left_at
            }]
        );
        assert!(!connected_in_verified(client, 2), "slot 2 is disconnected");
    }

    // A wrong token, and the right token of a slot whose player is still here, are refused
    // (refused clients stop a run: step by hand).
    let wrong = NetworkSessionConfig::rejoin(2, token.token ^ 1);
    let mut impostor = new_client(&h, wrong, 100);
    let live = NetworkSessionConfig::rejoin(0, live_token.token);
    let mut usurper = new_client(&h, live, 101);
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
    assert_eq!(h.relay_stats().refused_rejoins, 2);
    assert_eq!(h.relay_stats().rejoins, vec![0, 0, 0]);
    drop((impostor, usurper));

    // The right token: player 2 is back in its slot, re-simulates from tick 1 and catches up.
    h.rejoin(2).expect("rejoin with its token");
    let target = h.stats_of(0).verified_tick + 200;
    h.verify(target, 1_500);
    let r = h.relay_stats();
    assert_eq!(r.rejoins, vec![0, 0, 1], "{r:?}");
    let back_at = r.rejoined_at[2].expect("rejoined");
    assert!(back_at > left_at, "{left_at} → {back_at}");
    let net = h.net_of(2);
    assert_eq!(net.slot, Some(2));
    assert!(net.started);
    assert_eq!(net.needs_snapshot_from, None);
    let next = net.reconnect_token.expect("a new token");
    assert_eq!(next.slot, 2);
    assert_ne!(next.token, token.token, "a token seats once");
    for c in 0..3 {
        let client = h.client(c).expect("running");
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
    let stats = h.stats_of(2);
    assert_eq!(stats.checksum_history.first().map(|c| c.tick), Some(1));
    assert!(stats.verified_tick >= target, "{}", stats.verified_tick);
    let n = h.assert_all_agree().ticks_compared;
    assert!(n >= target as usize, "{n} common checksums");
    let rejoined = h.agreement_of(2).unwrap_or_else(|e| panic!("{e}"));
    assert!(rejoined.ticks_compared >= target as usize, "{rejoined:?}");
    assert!(
        rejoined.range.is_some_and(|(_, last)| last >= target),
        "{rejoined:?}"
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
    h.verify(50, 1_000);
    kill_client_2(&mut h, 200);
    h.rejoin(2).expect("rejoin with its token");
    h.run_frames(60).expect("behind is a stall");
    let r = h.relay_stats();
    assert_eq!(r.rejoins, vec![0, 0, 1]);
    assert!(r.behind_reports >= 1, "{r:?}");
    let told = &heard_by(&h, 2).needs_snapshot;
    assert!(!told.is_empty(), "told it needs a snapshot");
    let oldest = told[0].oldest_available;
    // The relay held 64 ticks ending near its newest confirmed tick.
    assert!(
        oldest > 1 && oldest >= r.confirmed_tick - 64 - 60,
        "{oldest} {r:?}"
    );
    let net = h.net_of(2);
    assert!(net.needs_snapshot_from.is_some(), "{net:?}");
    assert_eq!(h.stats_of(2).verified_tick, 0);
    // The survivors go on, with player 2 connected again.
    let before = h.stats_of(0).verified_tick;
    h.run_frames(30).expect("behind is a stall");
    assert!(h.stats_of(0).verified_tick > before);
    assert!(connected_in_verified(h.client(0).expect("running"), 2));
}

#[test]
fn with_snapshots_a_rejoin_after_the_history_is_gone_loads_a_snapshot_and_agrees() {
    // One second of history, as above, but the relay serves snapshots and every client can be
    // a buddy: the player coming back loads one instead of staying behind.
    let make = |_| snapshot_plugin(game(), NetworkSessionConfig::default());
    let mut h = harness_with(64, true, make);
    h.verify(50, 1_000);
    kill_client_2(&mut h, 200);
    h.rejoin(2).expect("rejoin with its token");
    let target = h.stats_of(0).verified_tick + 200;
    h.verify(target, 2_000);
    h.run_frames(10).expect("playing");
    let r = h.relay_stats();
    assert_eq!(r.rejoins, vec![0, 0, 1]);
    assert_eq!(r.snapshots.served, 1, "{:?}", r.snapshots);
    let net = h.net_of(2);
    assert_eq!(net.snapshots.loaded, 1, "{:?}", net.snapshots);
    let loaded = net.snapshots.loaded_tick.expect("loaded");
    let mine = h.stats_of(2).checksum_history;
    assert_eq!(mine.first().map(|c| c.tick), Some(loaded + 1));
    // Every checksum it verified is one both others verified too, the same.
    let common = h.agreement_of(2).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(common.ticks_compared, mine.len(), "{common:?}");
    assert!(
        (0..2).all(|c| h.stats_of(c).verified_tick >= mine.last().map_or(0, |t| t.tick)),
        "the others verified its ticks"
    );
    assert!(common.ticks_compared > 100, "{common:?}");
}
