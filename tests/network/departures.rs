//! How a session's connection ends, counted in frames of the harness's 1/64 s clock: a player
//! that leaves with a goodbye is seen gone at once and a match its players all left so ends
//! `Completed`; the relay sends nothing (and serves no snapshot) to a player silent past its
//! silence limit; a client gives a dead relay up within its server timeout (`ServerGone`);
//! a client back from a long pause of its process rejoins at once.

use std::time::Duration;

use bevy::prelude::*;
use bevy::time::TimeUpdateStrategy;
use simsync::deterministic::{
    LeaveSession, NetworkSessionConfig, SessionLifecycle, SessionState, SessionStateReason,
};
use simsync::prelude::*;
use simsync::relay::{
    DeterministicServerPlugin, MatchEndReason, MatchPhase, RelayServer, SnapshotServing,
    read_snapshot_header,
};
use simsync_net::bevy_renet::RenetServer;
use simsync_net::{Direction, LinkConditionerConfig, NetTransportError};

use super::harness::{Peers, PeersExt, peers_of, plugin, snapshot_plugin};
use crate::common::TestGame;

/// One frame of the harness's clocks.
const FRAME: Duration = Duration::from_nanos(15_625_000);

fn game() -> TestGame {
    TestGame {
        boxes: 8,
        ..TestGame::default()
    }
}

fn state(peers: &Peers, client: usize) -> (SessionState, Option<SessionStateReason>) {
    let lifecycle = peers
        .client(client)
        .expect("running")
        .world()
        .resource::<SessionLifecycle>();
    (lifecycle.state, lifecycle.reason.clone())
}

fn relay(peers: &Peers) -> &RelayServer {
    peers.relay().world().resource::<RelayServer>()
}

/// Two players over a 20 ms link, `net` on every client, verified through tick 60.
fn two_players(net: NetworkSessionConfig) -> Peers {
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let relay = DeterministicServerPlugin::new::<PackedInput>(2, 64).reconnect_seed(3);
    let mut peers = peers_of(2, move |_| plugin(game()).networked(net.clone()))
        .link(link)
        .relay(relay)
        .build()
        .expect("peers");
    peers.verify(60, 600);
    peers
}

#[test]
fn players_who_say_goodbye_are_seen_gone_at_once_and_their_match_ends_completed() {
    let mut peers = two_players(NetworkSessionConfig::default());
    for client in 0..2 {
        peers
            .client_mut(client)
            .expect("running")
            .world_mut()
            .write_message(LeaveSession);
    }
    let mut frames = 0;
    while relay(&peers).phase() == MatchPhase::Running {
        peers.step();
        frames += 1;
        assert!(frames < 64, "the relay still runs the match");
    }
    // The goodbye crosses the 20 ms link (2 frames), the relay closes the connection and sees
    // it gone at its next update.
    assert!(frames <= 5, "{frames} frames");
    assert_eq!(relay(&peers).end_reason(), Some(&MatchEndReason::Completed));
    assert!(!relay(&peers).is_connected(0) && !relay(&peers).is_connected(1));
    for client in 0..2 {
        assert_eq!(
            state(&peers, client),
            (SessionState::Ended, Some(SessionStateReason::Left))
        );
        let net = peers.net_of(client);
        assert!(net.left);
        assert_eq!(net.reconnect_attempts, 0, "a leave is no loss");
    }
    eprintln!("both players said goodbye: the match ended `Completed` after {frames} frames");
}

/// The transport errors a client App was told of.
#[derive(Resource, Default)]
struct TransportErrors(Vec<String>);

fn keep_transport_errors(
    mut read: MessageReader<NetTransportError>,
    mut kept: ResMut<TransportErrors>,
) {
    kept.0.extend(read.read().map(|e| e.error.to_string()));
}

fn transport_errors(peers: &Peers, client: usize) -> Vec<String> {
    let app = peers.client(client).expect("running");
    app.world().resource::<TransportErrors>().0.clone()
}

#[test]
fn a_clean_leave_is_no_transport_error_and_a_connection_the_relay_closes_is_one() {
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let relay_plugin = DeterministicServerPlugin::new::<PackedInput>(2, 64);
    let mut peers = peers_of(2, move |_| plugin(game()))
        .link(link)
        .relay(relay_plugin)
        .customize(|_, client| {
            client
                .init_resource::<TransportErrors>()
                .add_systems(Last, keep_transport_errors);
        })
        .build()
        .expect("peers");
    peers.verify(30, 600);
    peers
        .client_mut(0)
        .expect("running")
        .world_mut()
        .write_message(LeaveSession);
    peers.run_frames(32).expect("frames");
    assert!(
        !relay(&peers).is_connected(0),
        "the relay closed the connection"
    );
    assert_eq!(
        state(&peers, 0),
        (SessionState::Ended, Some(SessionStateReason::Left))
    );
    assert_eq!(transport_errors(&peers, 0), Vec::<String>::new());
    // Client 1 (netcode client 2 of the in-memory network) did not leave: the relay closing
    // its connection is one error.
    peers
        .relay_mut()
        .world_mut()
        .resource_mut::<RenetServer>()
        .disconnect(2);
    peers.run_frames(32).expect("frames");
    assert_eq!(
        transport_errors(&peers, 1).len(),
        1,
        "{:?}",
        transport_errors(&peers, 1)
    );
}

#[test]
fn a_match_one_player_left_without_a_goodbye_does_not_end_completed() {
    let mut peers = two_players(NetworkSessionConfig::default());
    peers
        .client_mut(0)
        .expect("running")
        .world_mut()
        .write_message(LeaveSession);
    peers.kill(1).expect("kill");
    peers.run_frames(64).expect("frames");
    assert!(!relay(&peers).is_connected(0) && !relay(&peers).is_connected(1));
    assert_eq!(relay(&peers).phase(), MatchPhase::Running);
    assert_eq!(relay(&peers).end_reason(), None);
}

#[test]
fn a_silent_player_is_sent_nothing_and_no_snapshot_after_its_silence_limit() {
    // Snapshots served and 2 s of history: without the rule the silent player would be
    // served a snapshot once the history passed its acknowledgement.
    let relay_plugin = DeterministicServerPlugin::new::<PackedInput>(2, 64)
        .snapshots(SnapshotServing::default())
        .header_reader(read_snapshot_header)
        .input_history_ticks(128);
    let net = NetworkSessionConfig::default();
    let mut peers = peers_of(2, move |_| snapshot_plugin(game(), net.clone()))
        .relay(relay_plugin)
        .build()
        .expect("peers");
    peers.verify(60, 600);
    peers.pause(1).expect("pause");
    let mut frames = 0;
    while peers.relay_stats().silent_disconnects[1] == 0 {
        peers.step();
        frames += 1;
        assert!(frames < 200, "never counted silent");
    }
    // Client 1 is netcode client 2 of the in-memory network.
    let sent = |peers: &Peers| {
        peers
            .network()
            .link_stats(2, Direction::ToClient)
            .expect("link")
            .sent
    };
    let at_limit = sent(&peers);
    let window = 320;
    peers.run_frames(window).expect("client 0 plays on");
    let after = sent(&peers) - at_limit;
    let r = peers.relay_stats();
    // What still goes out is renet's own acknowledgement of the last packets it received
    // (one tiny packet per update): no input set, clock, ping or snapshot.
    assert!(
        after <= u64::from(window),
        "{after} packets in {window} frames"
    );
    assert_eq!(
        (r.snapshots.requests, r.snapshots.bytes_forwarded),
        (0, 0),
        "{:?}",
        r.snapshots
    );
    eprintln!("silent after {frames} frames; then {after} packets (renet acks) in {window} frames");
    // Heard from again, it is behind the history: it gets its snapshot then, and catches up.
    peers.resume(1).expect("resume");
    let target = peers.stats_of(0).verified_tick + 60;
    peers.verify(target, 1_200);
    let r = peers.relay_stats();
    assert!(r.snapshots.served >= 1, "{:?}", r.snapshots);
    assert!(peers.net_of(1).snapshots.loaded >= 1);
}

#[test]
fn a_client_gives_a_dead_relay_up_within_its_server_timeout() {
    let net = NetworkSessionConfig {
        server_timeout: Duration::from_secs(2),
        ..NetworkSessionConfig::default()
    };
    let mut peers = two_players(net);
    // The relay stops: its App is never updated again (a killed server process).
    let mut frames = 0u32;
    let gone = loop {
        let (_, clients) = peers.apps_mut();
        clients.into_iter().for_each(App::update);
        frames += 1;
        if let (SessionState::Disconnected, reason) = state(&peers, 0) {
            break reason;
        }
        assert!(frames < 400, "{:?}", state(&peers, 0));
    };
    let Some(SessionStateReason::ServerGone { silent_for }) = gone else {
        panic!("{gone:?}");
    };
    // 2 s = 128 frames after the last message, which left the relay a frame or two before it
    // stopped (pings every 250 ms and sets every tick).
    assert!((126..=130).contains(&frames), "{frames} frames");
    assert!(silent_for >= Duration::from_secs(2), "{silent_for:?}");
    assert_eq!(peers.net_of(0).server_gone, Some(silent_for));
    eprintln!("dead relay given up after {frames} frames ({silent_for:?} of silence)");
}

#[test]
fn a_client_waiting_in_a_live_lobby_never_gives_the_relay_up() {
    let net = NetworkSessionConfig {
        server_timeout: Duration::from_secs(1),
        ..NetworkSessionConfig::default()
    };
    let mut peers = peers_of(2, move |_| plugin(game()).networked(net.clone()))
        .clients(1)
        .build()
        .expect("peers");
    // Five times the timeout: the relay answers its pings, it waits on.
    peers.run_frames(320).expect("frames");
    assert_eq!(state(&peers, 0).0, SessionState::WaitingForPlayers);
}

/// Client 1 of two, its wall clock stepped by hand, paused for `pause` frames of the others
/// and then resumed with a wall-clock gap of `gap`; returns the harness and the frames after
/// the resume until the relay counted its rejoin (`None`: not within 64 frames).
fn pause_and_resume(gap: Duration, pause: u32) -> (Peers, Option<u32>) {
    let mut peers = two_players(NetworkSessionConfig::default());
    let set_wall = |peers: &mut Peers, step: Duration| {
        peers
            .client_mut(1)
            .expect("running")
            .insert_resource(TimeUpdateStrategy::ManualDuration(step));
    };
    set_wall(&mut peers, FRAME);
    peers.run_frames(4).expect("frames");
    peers.pause(1).expect("pause");
    peers.run_frames(pause).expect("client 0 plays on");
    assert_eq!(peers.relay_stats().silent_disconnects[1], 1);
    peers.resume(1).expect("resume");
    // Its first update sees the whole pause on the wall clock (its network clock is fixed).
    set_wall(&mut peers, gap);
    peers.step();
    set_wall(&mut peers, FRAME);
    let mut rejoined = None;
    for frame in 1..=64 {
        if peers.relay_stats().rejoins[1] > 0 {
            rejoined = Some(frame);
            break;
        }
        peers.step();
    }
    (peers, rejoined)
}

#[test]
fn a_client_back_from_a_pause_past_the_drop_window_rejoins_at_once() {
    let (mut peers, rejoined) = pause_and_resume(Duration::from_secs(20), 192);
    let frames = rejoined.expect("rejoined");
    // Close the old connection, connect again, hello, welcome: a handful of frames.
    assert!(frames <= 6, "{frames} frames");
    let target = peers.stats_of(0).verified_tick + 60;
    peers.verify(target, 1_200);
    assert_eq!(state(&peers, 1).0, SessionState::Running);
    let net = peers.net_of(1);
    assert_eq!(
        (
            net.rejoins_after_pause,
            net.reconnects,
            net.reconnect_attempts
        ),
        (1, 1, 1)
    );
    let agreement = peers.assert_all_agree();
    assert!(agreement.ticks_compared >= target as usize, "{agreement:?}");
    eprintln!("back from a 20 s pause: rejoined after {frames} frames");
}

#[test]
fn a_client_back_from_a_short_pause_goes_on_on_its_connection() {
    let (mut peers, rejoined) = pause_and_resume(Duration::from_secs(3), 192);
    assert_eq!(rejoined, None);
    let net = peers.net_of(1);
    assert_eq!((net.rejoins_after_pause, net.reconnect_attempts), (0, 0));
    let target = peers.stats_of(0).verified_tick + 60;
    peers.verify(target, 1_200);
    peers.assert_all_agree();
}
