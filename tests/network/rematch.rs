//! Rematches: the relay ends its match and opens the next on the same connections; every
//! client keeps its slot, rebuilds its session from tick 0 and agrees again, match after match
//! (over the conditioned in-memory link and over UDP); a message of the ended match that
//! arrives after the rematch is dropped and counted, both ways; commands the match's phase
//! does not allow are refused with a typed error; and what survives a rematch on a client is
//! what the rules say.

use bevy::prelude::*;
use bevy_state::state::{OnEnter, State};
use simsync::deterministic::{
    NetworkSessionConfig, SessionEnd, SessionLifecycle, SessionState, SessionStateChanged,
    SessionStateReason,
};
use simsync::prelude::*;
use simsync::relay::{
    DeterministicServerPlugin, MatchChanged, MatchCommandError, MatchEndReason, MatchPhase,
    RelayCommand, RelayCommandFailed, RelayServer, RelayStats,
};
use simsync::{PresentedSimEntity, SessionDiagnosticsPlugin, VisualSmoothingPlugin};
use simsync_net::prelude::*;
use simsync_net::{
    InputSet, LinkConditionerConfig, NETCODE_PROTOCOL_ID, UdpClientTransport, UdpServerConfig,
    UdpServerTransport,
};

use super::harness::{client_app, server_app_with};
use crate::common::{BadDeltas, PlayerBodies, TestGame, ball_position, scripted_input};

fn game() -> TestGame {
    TestGame {
        boxes: 10,
        ..TestGame::default()
    }
}

/// What the relay's app was told, in order.
#[derive(Resource, Default)]
struct RelayLog {
    changes: Vec<MatchChanged>,
    failures: Vec<RelayCommandFailed>,
}

fn keep_relay_log(
    mut changed: MessageReader<MatchChanged>,
    mut failed: MessageReader<RelayCommandFailed>,
    mut log: ResMut<RelayLog>,
) {
    log.changes.extend(changed.read().cloned());
    log.failures.extend(failed.read().cloned());
}

/// The lifecycle changes a client wrote, in order.
#[derive(Resource, Default)]
struct Changes(Vec<SessionStateChanged>);

fn keep_changes(mut read: MessageReader<SessionStateChanged>, mut changes: ResMut<Changes>) {
    changes.0.extend(read.read().cloned());
}

/// Times a client's Bevy state entered `SessionState::Ended`.
#[derive(Resource, Default)]
struct EndedEntered(u32);

fn count_ended(mut entered: ResMut<EndedEntered>) {
    entered.0 += 1;
}

/// Records what the relay's app and every client's lifecycle are told, and counts the times a
/// client's Bevy state entered `Ended`.
fn record(server: &mut App, clients: &mut [App]) {
    server
        .init_resource::<RelayLog>()
        .add_systems(Last, keep_relay_log);
    for client in clients {
        client
            .init_resource::<Changes>()
            .init_resource::<EndedEntered>()
            .add_systems(Last, keep_changes)
            .add_systems(OnEnter(SessionState::Ended), count_ended);
    }
}

fn command(server: &mut App, command: RelayCommand) {
    server.world_mut().write_message(command);
}

fn rematch() -> RelayCommand {
    RelayCommand::Rematch {
        reason: MatchEndReason::Completed,
    }
}

fn relay_stats(server: &App) -> RelayStats {
    server.world().resource::<RelayStats>().clone()
}

fn stats(app: &App) -> SessionStats {
    app.world().resource::<SessionStats>().clone()
}

/// The match a client's session plays, as its stats say.
fn match_of(app: &App) -> Option<MatchId> {
    stats(app).network.and_then(|n| n.match_id)
}

/// Steps `server` and `clients` until `done` holds (at most `limit` frames; panics with every
/// client's network stats otherwise).
fn step_until(
    server: &mut App,
    clients: &mut [App],
    limit: u32,
    what: &str,
    done: impl Fn(&App, &[App]) -> bool,
) {
    for _ in 0..limit {
        if done(server, clients) {
            return;
        }
        server.update();
        for client in clients.iter_mut() {
            client.update();
        }
    }
    panic!(
        "{what} not reached in {limit} frames: {:?} / relay {:?}",
        clients.iter().map(|c| stats(c).network).collect::<Vec<_>>(),
        relay_stats(server)
    );
}

/// Steps until every client plays match `id` and verified `tick` of it.
fn play_until(server: &mut App, clients: &mut [App], id: MatchId, tick: i32) {
    step_until(server, clients, 4_000, "the match's tick", |_, clients| {
        clients
            .iter()
            .all(|c| match_of(c) == Some(id) && stats(c).verified_tick >= tick)
    });
}

/// Every client's verified checksums of its current match, checked equal tick by tick; the
/// number of ticks compared.
fn agreement(clients: &[App]) -> usize {
    let histories: Vec<_> = clients.iter().map(|c| stats(c).checksum_history).collect();
    let n = histories.iter().map(Vec::len).min().unwrap_or(0);
    for history in &histories[1..] {
        assert_eq!(history[..n], histories[0][..n], "the clients disagree");
    }
    n
}

fn transitions(app: &App) -> Vec<(SessionState, SessionState)> {
    app.world()
        .resource::<Changes>()
        .0
        .iter()
        .map(|c| (c.from, c.to))
        .collect()
}

/// The lifecycle of a client that played `matches` matches, each ended by the relay.
fn lifecycle_of(matches: u32) -> Vec<(SessionState, SessionState)> {
    use SessionState::*;
    let mut expected = vec![
        (Connecting, WaitingForPlayers),
        (WaitingForPlayers, Running),
    ];
    for _ in 1..matches {
        expected.extend([
            (Running, Ended),
            (Ended, WaitingForPlayers),
            (WaitingForPlayers, Running),
        ]);
    }
    expected
}

/// Plays `matches` matches of `ticks` verified ticks each, rematching in between; checks every
/// match agrees on every client, starts from tick 1, keeps every client in its slot; returns
/// each match's checksum history (of client 0).
fn play_matches(
    server: &mut App,
    clients: &mut [App],
    matches: u32,
    ticks: i32,
) -> Vec<Vec<simsync::deterministic::TickChecksum>> {
    let mut slots = Vec::new();
    let mut histories = Vec::new();
    for m in 1..=matches {
        if m > 1 {
            command(server, rematch());
        }
        play_until(server, clients, MatchId(m), ticks);
        assert!(agreement(clients) >= ticks as usize, "match {m}");
        for (c, client) in clients.iter().enumerate() {
            let s = stats(client);
            let net = s.network.clone().expect("networked");
            assert_eq!(net.slot, Some(c as u8), "client {c} keeps its slot");
            assert_eq!(s.checksum_history.first().map(|t| t.tick), Some(1));
            assert_eq!(
                s.ticks_verified, s.verified_tick as u64,
                "counters start over"
            );
            assert_eq!(net.desyncs + net.others_desynced, 0);
            let local = client.world().resource::<LocalPlayers>().clone();
            if m == 1 {
                slots.push(local);
            } else {
                assert_eq!(local, slots[c], "client {c}");
            }
        }
        let relay = relay_stats(server);
        assert_eq!(
            (relay.match_id, relay.phase),
            (MatchId(m), MatchPhase::Running)
        );
        assert_eq!(relay.desyncs, 0, "{relay:?}");
        histories.push(stats(&clients[0]).checksum_history);
    }
    histories
}

#[test]
fn three_matches_over_a_lossy_link_agree_and_keep_every_seat() {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(40, 8)
        .with_loss(3.0);
    let mut h = Harness::new(game(), link, NetworkSessionConfig::default());
    record(&mut h.server, &mut h.clients);
    play_matches(&mut h.server, &mut h.clients, 3, 150);
    for client in &h.clients {
        assert_eq!(transitions(client), lifecycle_of(3));
        // Each rematch's end reached the Bevy state (its `OnEnter` ran) before the rebuild.
        assert_eq!(client.world().resource::<EndedEntered>().0, 2);
        let changes = &client.world().resource::<Changes>().0;
        assert_eq!(
            changes[2].reason,
            SessionStateReason::MatchEnded {
                match_id: MatchId(1),
                reason: MatchEndReason::Completed,
            }
        );
        assert_eq!(
            changes[3].reason,
            SessionStateReason::NextMatch {
                match_id: MatchId(2)
            }
        );
        assert_eq!(changes[4].reason, SessionStateReason::Started);
    }
    let log = h.server.world().resource::<RelayLog>();
    let kinds: Vec<String> = log
        .changes
        .iter()
        .map(|c| match c {
            MatchChanged::Started { match_id, players } => {
                format!("started {} {players}", match_id.0)
            }
            MatchChanged::Ended { match_id, .. } => format!("ended {}", match_id.0),
            MatchChanged::Opened { match_id } => format!("opened {}", match_id.0),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "started 1 2",
            "ended 1",
            "opened 2",
            "started 2 2",
            "ended 2",
            "opened 3",
            "started 3 2"
        ]
    );
    assert!(log.failures.is_empty());
    // The ended match's counters came with its end; the new match's started from zero, but
    // inputs and checksums of match 2 still in flight when it ended were dropped in match 3.
    let MatchChanged::Ended { stats: ended, .. } = &log.changes[4] else {
        panic!("match 2 ended");
    };
    assert_eq!(ended.match_id, MatchId(2));
    assert!(ended.confirmed_tick >= 150, "{ended:?}");
    let relay = h.relay();
    assert!(relay.match_drops.ended_match > 0, "{:?}", relay.match_drops);
    assert_eq!(relay.match_drops.unknown_match, 0);
    eprintln!(
        "rematch x2 over a lossy link: relay drops {:?}, ended match 2 at confirmed tick {}",
        relay.match_drops, ended.confirmed_tick
    );
}

#[test]
fn with_the_same_inputs_every_match_verifies_the_same_checksums() {
    let link = LinkConditionerConfig::PERFECT.with_latency(10, 0);
    let mut h = Harness::new(game(), link, NetworkSessionConfig::default());
    record(&mut h.server, &mut h.clients);
    for client in &mut h.clients {
        // Every tick's input is a function of (player, tick), whenever it is sampled.
        client.insert_resource(TickInputSource::<PackedInput>::new(scripted_input));
    }
    let histories = play_matches(&mut h.server, &mut h.clients, 3, 120);
    // No input was replaced in any match (each match's counters came with its end) ...
    let log = h.server.world().resource::<RelayLog>();
    for change in &log.changes {
        if let MatchChanged::Ended { stats, .. } = change {
            assert_eq!(stats.replaced_inputs, vec![0, 0], "{stats:?}");
        }
    }
    assert_eq!(h.relay().replaced_inputs, vec![0, 0]);
    // ... and nothing of a match reaches the next: the same inputs give the same states.
    for history in &histories[1..] {
        assert_eq!(history[..120], histories[0][..120]);
    }
}

/// Sends `message` from client `c` of `h` as is (a message of another match, say).
fn send_from_client(h: &mut Harness, c: usize, message: &ClientMessage) {
    h.clients[c]
        .world_mut()
        .resource_mut::<RenetClient>()
        .send_msg(message)
        .expect("sent");
}

#[test]
fn a_message_of_the_ended_match_arriving_after_the_rematch_is_dropped_and_counted_both_ways() {
    let link = LinkConditionerConfig::PERFECT.with_latency(10, 0);
    let mut h = Harness::new(game(), link, NetworkSessionConfig::default());
    play_matches(&mut h.server, &mut h.clients, 2, 60);
    let (relay_before, client_before) = (h.relay(), h.stats(0).network.expect("networked"));
    // Client 0 sends a checksum that would desync it, and inputs for the ticks to come, both
    // of match 1; the relay sends client 0 confirmed sets of match 1 for the ticks it needs
    // next, and one of a match that does not exist yet.
    let old = MatchId::FIRST;
    let tick = h.stats(0).verified_tick;
    let bad_checksum = SessionClientMessage::Checksum {
        tick: tick - 5,
        checksum: 0xBAD,
    };
    send_from_client(&mut h, 0, &ClientMessage::session(old, bad_checksum));
    let inputs = SessionClientMessage::Inputs {
        first_tick: tick + 1,
        inputs: vec![simsync_net::encode(&PackedInput::default()).expect("encodes"); 3],
        ack_tick: tick,
    };
    send_from_client(&mut h, 0, &ClientMessage::session(old, inputs));
    let garbage = InputSet {
        inputs: vec![simsync_net::encode(&PackedInput::default()).expect("encodes"); 2],
        replaced: 0,
        disconnected: 0,
    };
    let sets = |first_tick| SessionServerMessage::ConfirmedInputs {
        first_tick,
        sets: vec![garbage.clone(); 4],
    };
    let mut server = h.server.world_mut().resource_mut::<RenetServer>();
    // Client 0 is renet client 1 on the memory network.
    for message in [
        ServerMessage::session(old, sets(tick + 1)),
        ServerMessage::session(MatchId(9), sets(tick + 1)),
    ] {
        server.send_msg(1, &message).expect("sent");
    }
    h.run_until_verified(tick + 120, 1_000);
    let relay = h.relay();
    assert_eq!(
        relay.match_drops.ended_match,
        relay_before.match_drops.ended_match + 2,
        "{relay:?}"
    );
    assert_eq!(relay.desyncs, 0);
    assert_eq!(relay.refused_checksums, vec![0, 0]);
    let net = h.stats(0).network.expect("networked");
    assert_eq!(
        net.match_drops.ended_match,
        client_before.match_drops.ended_match + 1
    );
    assert_eq!(
        net.match_drops.unknown_match,
        client_before.match_drops.unknown_match + 1
    );
    assert_eq!(net.desyncs + net.others_desynced, 0);
    assert_eq!(net.rejected_inputs, 0);
    // The planted sets and inputs changed nothing: both clients still agree.
    assert!(agreement(&h.clients) >= (tick + 120) as usize);
}

/// The errors of the commands the relay refused so far, in order.
fn failures(h: &Harness) -> Vec<MatchCommandError> {
    h.server
        .world()
        .resource::<RelayLog>()
        .failures
        .iter()
        .map(|f| f.error)
        .collect()
}

fn not_started(id: u32) -> MatchCommandError {
    MatchCommandError::MatchNotStarted {
        match_id: MatchId(id),
    }
}

/// Before match 1 started — no client yet, then one client welcomed and the other not yet
/// (the match waits for it) — a rematch and an end are refused.
fn refused_before_the_first_match(h: &mut Harness) {
    command(&mut h.server, rematch());
    h.server.update();
    assert_eq!(failures(h), [not_started(1)]);
    step_until(
        &mut h.server,
        &mut h.clients[..1],
        100,
        "a welcome",
        |_, clients| stats(&clients[0]).network.is_some_and(|n| n.slot.is_some()),
    );
    assert!(!h.server.world().resource::<RelayServer>().started());
    let end = RelayCommand::EndMatch {
        reason: MatchEndReason::Abandoned,
    };
    command(&mut h.server, end);
    h.step();
    assert_eq!(failures(h), [not_started(1), not_started(1)]);
}

/// The clients show the relay's end of match `id` and its `reason`.
fn check_ended(h: &mut Harness, id: MatchId, reason: &MatchEndReason) {
    step_until(
        &mut h.server,
        &mut h.clients,
        50,
        "the end",
        |_, clients| {
            clients
                .iter()
                .all(|c| c.world().resource::<SessionLifecycle>().state == SessionState::Ended)
        },
    );
    for client in &h.clients {
        assert_eq!(
            client.world().resource::<SessionLifecycle>().reason,
            Some(SessionStateReason::MatchEnded {
                match_id: id,
                reason: reason.clone(),
            })
        );
        let net = stats(client).network.expect("networked");
        assert_eq!(net.match_end.as_ref(), Some(reason));
    }
}

#[test]
fn commands_the_match_does_not_allow_are_refused_with_a_typed_error() {
    let mut h = Harness::new(
        game(),
        LinkConditionerConfig::PERFECT.with_latency(10, 0),
        NetworkSessionConfig::default(),
    );
    record(&mut h.server, &mut h.clients);
    refused_before_the_first_match(&mut h);
    play_until(&mut h.server, &mut h.clients, MatchId::FIRST, 30);
    // Starting a running match; then two rematches in one frame: the first ends match 1 and
    // opens match 2, the second finds match 2 in its lobby.
    command(&mut h.server, RelayCommand::StartMatch);
    command(&mut h.server, rematch());
    command(&mut h.server, rematch());
    h.step();
    let running = MatchCommandError::MatchRunning {
        match_id: MatchId::FIRST,
    };
    assert_eq!(
        failures(&h),
        [not_started(1), not_started(1), running, not_started(2)]
    );
    assert_eq!(
        h.server.world().resource::<RelayServer>().match_id(),
        MatchId(2)
    );
    play_until(&mut h.server, &mut h.clients, MatchId(2), 30);
    // Ending twice; the clients show the end and its reason; then a StartMatch opens the next.
    let reason = MatchEndReason::Other("time is up".into());
    let end = RelayCommand::EndMatch {
        reason: reason.clone(),
    };
    command(&mut h.server, end.clone());
    command(&mut h.server, end);
    h.step();
    let ended = MatchCommandError::MatchAlreadyEnded {
        match_id: MatchId(2),
    };
    assert_eq!(failures(&h)[4..], [ended]);
    assert_eq!(
        ended.to_string(),
        "match 2 has ended already; StartMatch opens the next"
    );
    check_ended(&mut h, MatchId(2), &reason);
    assert_eq!(h.relay().phase, MatchPhase::Ended);
    command(&mut h.server, RelayCommand::StartMatch);
    play_until(&mut h.server, &mut h.clients, MatchId(3), 30);
    assert_eq!(failures(&h).len(), 5);
    assert!(agreement(&h.clients) >= 30);
}

#[test]
fn a_direct_command_on_the_relay_returns_its_result() {
    let mut h = Harness::new(
        game(),
        LinkConditionerConfig::PERFECT,
        NetworkSessionConfig::default(),
    );
    let world = h.server.world_mut();
    let result = world.resource_scope(|world, mut relay: Mut<RelayServer>| {
        let mut server = world.resource_mut::<RenetServer>();
        relay.command(&mut server, &rematch())
    });
    assert_eq!(
        result,
        Err(MatchCommandError::MatchNotStarted {
            match_id: MatchId::FIRST
        })
    );
    h.run_until_verified(20, 300);
    let world = h.server.world_mut();
    let result = world.resource_scope(|world, mut relay: Mut<RelayServer>| {
        let mut server = world.resource_mut::<RenetServer>();
        relay.command(&mut server, &rematch())
    });
    assert_eq!(result, Ok(MatchId(2)));
    let relay = h.server.world().resource::<RelayServer>();
    assert_eq!(
        (relay.match_id(), relay.phase()),
        (MatchId(2), MatchPhase::Lobby)
    );
    play_until(&mut h.server, &mut h.clients, MatchId(2), 20);
}

/// A main-app resource of the game, never touched by the session.
#[derive(Resource, Debug, PartialEq)]
struct Score(u32);

/// Counts the verified ticks a game hook saw, and the first tick after each restart.
#[derive(Default)]
struct TickLog(std::sync::Arc<std::sync::Mutex<Vec<i32>>>);

impl simsync::deterministic::VerifiedTickHook<PackedInput> for TickLog {
    fn on_verified(
        &mut self,
        verified: &mut simsync::deterministic::VerifiedTick<'_, PackedInput>,
    ) -> simsync::deterministic::HookFlow {
        self.0.lock().expect("not poisoned").push(verified.tick());
        simsync::deterministic::HookFlow::Continue
    }
}

/// What client 0 of the survival test carries into the rematch: its presented ball, the
/// ticks its game hook saw, its replay recording.
struct Carried {
    ball: Entity,
    ticks: std::sync::Arc<std::sync::Mutex<Vec<i32>>>,
    recording: crate::deterministic::replays::SharedBytes,
}

/// A relay and two clients whose player 0 pushes its ball right all the time (it ends match 1
/// far from its spawn); client 0 has the diagnostics and smoothing plugins, a presenter of
/// the ball, a main-app resource of the game, a hook, a replay recorder and an end tick.
fn survival_harness() -> (Harness, Carried) {
    use simsync::deterministic::{ReplayRecorder, VerifiedTickHookAppExt};
    let link = LinkConditionerConfig::PERFECT.with_latency(10, 0);
    let mut h = harness_with(link, |c, app| {
        if c == 0 {
            app.add_plugins(SessionDiagnosticsPlugin::default())
                .add_plugins(VisualSmoothingPlugin::default());
        }
        app.insert_resource(TickInputSource::<PackedInput>::new(|player, _| {
            let mut input = PackedInput::default();
            if player == 0 {
                input.set_axis(0, 1.0).expect("valid slot");
            }
            input
        }));
    });
    let carried = Carried {
        ball: present_ball(&mut h.clients[0]),
        ticks: Default::default(),
        recording: Default::default(),
    };
    let client = &mut h.clients[0];
    client.insert_resource(Score(7));
    client
        .add_verified_tick_hook(TickLog(carried.ticks.clone()))
        .expect("the plugin is there");
    client.insert_resource(ReplayRecorder::to_writer(
        carried.recording.clone(),
        "memory",
    ));
    client.world_mut().resource_mut::<SessionEnd>().at_tick = Some(50);
    record(&mut h.server, &mut h.clients);
    (h, carried)
}

/// Steps from the rematch until match 2 verified tick 10: from the frame client 0's session
/// is rebuilt on, its presenter shows the new match's ball (no slide from where match 1 left
/// it, no correction), interpolated between its new ticks.
fn check_presentation_through_the_rematch(h: &mut Harness, ball: Entity) {
    let (mut frames, mut checked) = (0, 0);
    let mut rebuilt = false;
    while match_of(&h.clients[0]) != Some(MatchId(2)) || stats(&h.clients[0]).verified_tick < 10 {
        h.step();
        frames += 1;
        assert!(frames < 200, "match 2 never ran");
        let client = &h.clients[0];
        rebuilt |= client.world().resource::<SessionLifecycle>().reason
            == Some(SessionStateReason::NextMatch {
                match_id: MatchId(2),
            });
        if rebuilt && stats(client).corrective_rollbacks == 0 {
            let (shown, simulated) = presented(client, ball);
            assert!(
                shown.distance(simulated) < 0.05,
                "{shown} shown, {simulated} simulated"
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "{checked} frames checked");
}

/// Client 0 in match 2: the game's main-app resources and hooks stay, the session's own
/// resources, worlds and recording start over.
fn check_kept_and_started_over(client: &App, carried: &Carried, setup_entities: u32) {
    use simsync::deterministic::{Replay, ReplayEnd, ReplayLimits, ReplayRecorder};
    assert_eq!(*client.world().resource::<Score>(), Score(7));
    let end = *client.world().resource::<SessionEnd>();
    assert_eq!(end, SessionEnd::default());
    let state = *client.world().resource::<State<SessionState>>().get();
    assert_eq!(state, SessionState::Running);
    // The game's end tick ended the session before the relay did: one `Ended` only.
    assert_eq!(transitions(client), lifecycle_of(2));
    let seen = carried.ticks.lock().expect("not poisoned").clone();
    let restart = seen.windows(2).position(|w| w[1] <= w[0]).expect("again") + 1;
    assert_eq!(seen[restart], 1, "the hook sees the new match from tick 1");
    assert!(restart >= 60);
    // The simulation worlds were rebuilt: setup ran again, the same entities exist, and a
    // resource that is not rolled back (it counts every tick its world simulated, the setup
    // tick 0 included) is new: it counted match 2's ticks only.
    let verified = client.world().resource::<SimulationWorlds>().verified();
    assert_eq!(verified.entities().len(), setup_entities);
    let counted = verified.resource::<BadDeltas>().1;
    assert_eq!(counted, stats(client).verified_tick as u64 + 1);
    // The recording of match 1 was finished at the rematch: a complete replay of it.
    assert!(!client.world().resource::<ReplayRecorder>().is_recording());
    let bytes = carried.recording.bytes();
    let replay =
        Replay::<PackedInput>::from_bytes(&bytes, &ReplayLimits::default()).expect("reads");
    assert_eq!(replay.end(), ReplayEnd::Complete);
    assert_eq!(replay.frames().first().map(|f| f.tick), Some(1));
    assert_eq!(replay.frames().len() as i32, replay.last_tick());
    assert!(replay.last_tick() >= 60);
}

#[test]
fn what_survives_a_rematch_on_a_client() {
    let (mut h, carried) = survival_harness();
    play_until(&mut h.server, &mut h.clients, MatchId::FIRST, 60);
    assert!(matches!(
        h.clients[0].world().resource::<SessionLifecycle>().reason,
        Some(SessionStateReason::EndTickReached { tick }) if tick >= 50
    ));
    let world = h.clients[0]
        .world()
        .resource::<SimulationWorlds>()
        .verified();
    let setup_entities = world.entities().len();
    let rollbacks_before = stats(&h.clients[0]).rollbacks;
    let ended_at = presented(&h.clients[0], carried.ball).1;
    assert!(ended_at.distance(ball_position(0)) > 1.0, "{ended_at}");
    command(&mut h.server, rematch());
    check_presentation_through_the_rematch(&mut h, carried.ball);
    // The diagnostics count the new session's rollbacks from zero.
    let rollbacks = latest(&h.clients[0], &SessionDiagnosticsPlugin::ROLLBACKS);
    assert_eq!(rollbacks, stats(&h.clients[0]).rollbacks as f64);
    assert!(rollbacks < rollbacks_before as f64 || rollbacks_before == 0);
    play_until(&mut h.server, &mut h.clients, MatchId(2), 60);
    check_kept_and_started_over(&h.clients[0], &carried, setup_entities);
}

/// A relay and two clients over a memory network conditioned by `link`, `configure` applied to
/// each client App (by index) before it is finished.
fn harness_with(link: LinkConditionerConfig, configure: impl Fn(usize, &mut App)) -> Harness {
    let network = simsync_net::MemoryNetwork::new(99, link).expect("valid link");
    let mut server = server_app_with(DeterministicServerPlugin::new::<PackedInput>(2, 64));
    server.insert_net_server(network.server_transport().expect("server"));
    server.finish();
    server.cleanup();
    let clients = (0..2)
        .map(|c| {
            let mut client = client_app(game(), NetworkSessionConfig::default(), 60);
            configure(c, &mut client);
            client.insert_net_client(network.client_transport(c as u64 + 1).expect("client"));
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

/// A main-app entity presenting player 0's ball of the predicted world; the ball's entity.
fn present_ball(app: &mut App) -> Entity {
    let ball = app
        .world()
        .resource::<SimulationWorlds>()
        .predicted()
        .resource::<PlayerBodies>()
        .0[0];
    app.world_mut().spawn(PresentedSimEntity::new(ball));
    ball
}

/// Where the presenter of `ball` shows it, and where the predicted world has it (checking the
/// new worlds' ball is the same simulation entity).
fn presented(app: &App, ball: Entity) -> (Vec3, Vec3) {
    let predicted = app.world().resource::<SimulationWorlds>().predicted();
    assert_eq!(predicted.resource::<PlayerBodies>().0[0], ball);
    let simulated = predicted
        .get::<Transform>(ball)
        .expect("the ball")
        .translation;
    let mut presenters = app
        .world()
        .try_query::<(&PresentedSimEntity, &Transform)>()
        .expect("registered");
    let (_, shown) = presenters.single(app.world()).expect("one presenter");
    (shown.translation, simulated)
}

/// The latest value of diagnostic `path`.
fn latest(app: &App, path: &bevy::diagnostic::DiagnosticPath) -> f64 {
    app.world()
        .resource::<bevy::diagnostic::DiagnosticsStore>()
        .get(path)
        .and_then(|d| d.value())
        .expect("measured")
}

/// A relay over UDP on 127.0.0.1 and its address.
fn udp_server(players: u8) -> (App, std::net::SocketAddr) {
    let loopback = "127.0.0.1:0".parse().expect("address");
    let transport = UdpServerTransport::bind(UdpServerConfig::unsecure(loopback)).expect("bind");
    let addr = transport.local_addr();
    let mut server = server_app_with(DeterministicServerPlugin::new::<PackedInput>(players, 64));
    server.insert_net_server(transport);
    server.finish();
    server.cleanup();
    (server, addr)
}

/// A client over UDP to `server` as netcode client `id`.
fn udp_client(server: std::net::SocketAddr, id: u64) -> App {
    let mut client = client_app(game(), NetworkSessionConfig::default(), 60);
    let loopback = "127.0.0.1:0".parse().expect("address");
    let transport = UdpClientTransport::unsecure(server, id, NETCODE_PROTOCOL_ID, loopback)
        .expect("client socket");
    client.insert_net_client(transport);
    client.finish();
    client.cleanup();
    client
}

#[test]
fn three_matches_over_udp_on_the_same_connections() {
    let (mut server, addr) = udp_server(2);
    let mut clients: Vec<App> = (1..=2).map(|id| udp_client(addr, id)).collect();
    record(&mut server, &mut clients);
    let histories = play_matches(&mut server, &mut clients, 3, 200);
    for client in &clients {
        assert_eq!(transitions(client), lifecycle_of(3));
        assert!(client.world().resource::<RenetClient>().is_connected());
    }
    let relay = relay_stats(&server);
    assert_eq!(relay.rejected_messages, 0);
    let finals: Vec<u64> = histories.iter().map(|h| h[199].checksum).collect();
    eprintln!(
        "udp rematch x2: checksums at tick 200 {finals:x?}, relay drops {:?}",
        relay.match_drops
    );
}

/// The relay App and the client Apps of these tests, stepped by hand: a rematch is seen through
/// every App's own resources between frames (the relay's log, each client's lifecycle changes),
/// so the tests hold the Apps themselves rather than a `RelayPeers`.
struct Harness {
    #[allow(dead_code)] // kept alive for the transports
    network: simsync_net::MemoryNetwork,
    server: App,
    clients: Vec<App>,
}

impl Harness {
    /// A relay and two clients of `game` over a memory network conditioned by `link`.
    fn new(game: TestGame, link: LinkConditionerConfig, net: NetworkSessionConfig) -> Self {
        let network = simsync_net::MemoryNetwork::new(99, link).expect("valid link");
        let relay = DeterministicServerPlugin::new::<PackedInput>(game.players, 64);
        let mut server = server_app_with(relay);
        server.insert_net_server(network.server_transport().expect("server"));
        server.finish();
        server.cleanup();
        let clients = (0..game.players)
            .map(|id| {
                let mut client = client_app(game.clone(), net.clone(), 60);
                client.insert_net_client(
                    network.client_transport(u64::from(id) + 1).expect("client"),
                );
                client.finish();
                client.cleanup();
                client
            })
            .collect();
        Self {
            network,
            server,
            clients,
        }
    }

    /// One frame: the relay, then every client.
    fn step(&mut self) {
        self.server.update();
        for client in &mut self.clients {
            client.update();
        }
    }

    fn stats(&self, client: usize) -> SessionStats {
        stats(&self.clients[client])
    }

    fn relay(&self) -> RelayStats {
        relay_stats(&self.server)
    }

    /// Steps until every client verified `tick` (at most `limit` frames).
    fn run_until_verified(&mut self, tick: i32, limit: u32) {
        let (server, clients) = (&mut self.server, &mut self.clients);
        step_until(server, clients, limit, "the verified tick", |_, clients| {
            clients.iter().all(|c| stats(c).verified_tick >= tick)
        });
    }
}
