//! Simulation events reach the main app once per identity whatever the number of runs of their
//! tick: announced (`Predicted` or `Late`) once, then `Confirmed` or `Cancelled` once; the
//! confirmed stream carries each event the verified world produced exactly once. Inputs are
//! scripted (`TickInputSource`), so mispredictions and rollbacks happen where the tests say.
//! The main app of every test also runs the two side-effect patterns of the `events` docs (a
//! sound board and a network send) and checks what they did.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bevy::prelude::*;
use simsync::deterministic::{
    LocalSessionConfig, SessionClock, SessionMode, SimEventError, SimEventId, SimEventLedger,
    SimEventStats, UnregisteredSimEvent, restart_session,
};
use simsync::prelude::*;

use crate::common::{run_until_verified, scripted_input};

/// The test game's events: a player holds button 0 (one per player and tick), a coin for each
/// player holding button 1 (equal values: told apart by occurrence).
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub(crate) enum Ev {
    Held(u8),
    Coin,
}

/// Events each timeline emitted (rolled back: the verified world's value counts each verified
/// tick once).
#[derive(Resource, Clone, Default, Debug, PartialEq)]
pub(crate) struct Fired {
    pub held: u64,
    pub coins: u64,
}

/// Runs of each tick in this world (not rolled back on purpose).
#[derive(Resource, Default)]
pub(crate) struct Runs(pub BTreeMap<i32, u32>);

/// Emits [`Ev`]s from the inputs; a second event type, [`Unlisted`], when `EMIT_UNLISTED`.
#[derive(Clone)]
pub(crate) struct EventGame;

impl Plugin for EventGame {
    fn build(&self, app: &mut App) {
        app.init_resource::<Fired>()
            .init_resource::<Runs>()
            .rollback_resource::<Fired>()
            .add_systems(
                SimulationTick,
                (emit, emit_unlisted).in_set(SimulationSet::Game),
            );
    }
}

fn emit(
    inputs: Res<PlayerInputs<PackedInput>>,
    tick: Res<SimTick>,
    mut events: SimEvents<Ev>,
    mut fired: ResMut<Fired>,
    mut runs: ResMut<Runs>,
) {
    *runs.0.entry(tick.0).or_default() += 1;
    for (player, input) in inputs.iter() {
        if input.pressed(0) {
            events.write(Ev::Held(player));
            fired.held += 1;
        }
        if input.pressed(1) {
            events.write(Ev::Coin);
            fired.coins += 1;
        }
    }
}

/// An event type a test leaves unregistered.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Unlisted;

/// Present (in the simulation worlds) when the game emits [`Unlisted`] every tick.
#[derive(Resource, Clone)]
struct EmitUnlisted;

fn emit_unlisted(on: Option<Res<EmitUnlisted>>, mut events: SimEvents<Unlisted>) {
    if on.is_some() {
        events.write(Unlisted);
    }
}

/// One arrival as the main app saw it.
#[derive(Clone, Debug)]
pub(crate) struct Arrival {
    pub id: SimEventId<Ev>,
    pub status: SimEventStatus,
    /// The main app's frame (update) it arrived in.
    pub frame: u32,
    /// The verified tick when it arrived.
    pub verified_tick: i32,
}

/// What the main app received, and what the two side-effect patterns did.
#[derive(Resource, Default)]
pub(crate) struct Received {
    pub arrivals: Vec<Arrival>,
    pub confirmed: Vec<SimEventId<Ev>>,
    pub frame: u32,
    /// Sound pattern: playing sounds by event id (play on announcement, stop on cancel).
    pub playing: HashMap<SimEventId<Ev>, u32>,
    pub sounds_started: u64,
    pub sounds_stopped: u64,
    pub sounds_played_out: u64,
    /// Network-send pattern: sends made from the confirmed stream.
    pub sent: u64,
}

pub(crate) fn collect(
    mut arrivals: MessageReader<SimEventReceived<Ev>>,
    mut confirmed: MessageReader<ConfirmedSimEvent<Ev>>,
    stats: Res<SessionStats>,
    mut log: ResMut<Received>,
) {
    log.frame += 1;
    let (frame, verified_tick) = (log.frame, stats.verified_tick);
    for arrival in arrivals.read() {
        log.arrivals.push(Arrival {
            id: arrival.id(),
            status: arrival.status,
            frame,
            verified_tick,
        });
        sound_board(&mut log, arrival);
    }
    for event in confirmed.read() {
        log.confirmed.push(event.id());
        log.sent += 1;
    }
}

/// The documented sound pattern: play on an announcement, stop on `Cancelled`, let it play out
/// on `Confirmed`.
fn sound_board(log: &mut Received, arrival: &SimEventReceived<Ev>) {
    match arrival.status {
        SimEventStatus::Predicted | SimEventStatus::Late => {
            log.sounds_started += 1;
            let voice = log.sounds_started as u32;
            assert!(
                log.playing.insert(arrival.id(), voice).is_none(),
                "announced twice while playing: {arrival:?}"
            );
        }
        SimEventStatus::Cancelled => {
            assert!(log.playing.remove(&arrival.id()).is_some(), "{arrival:?}");
            log.sounds_stopped += 1;
        }
        SimEventStatus::Confirmed => {
            assert!(log.playing.remove(&arrival.id()).is_some(), "{arrival:?}");
            log.sounds_played_out += 1;
        }
    }
}

impl Received {
    /// The statuses of each identity, in arrival order.
    pub(crate) fn by_id(&self) -> BTreeMap<(i32, Ev, u32), Vec<SimEventStatus>> {
        let mut map: BTreeMap<(i32, Ev, u32), Vec<SimEventStatus>> = BTreeMap::new();
        for a in &self.arrivals {
            map.entry((a.id.tick, a.id.key.clone(), a.id.occurrence))
                .or_default()
                .push(a.status);
        }
        map
    }

    fn of(&self, tick: i32, event: &Ev) -> Vec<&Arrival> {
        self.arrivals
            .iter()
            .filter(|a| a.id.tick == tick && &a.id.key == event && a.id.occurrence == 0)
            .collect()
    }
}

/// A local two-player session: player 0's input is known to this peer, player 1's is predicted
/// by repeating its last confirmed input; confirmations arrive `latency[p]` ticks late.
fn event_app(latency: Vec<u32>, mode: SessionMode, script: fn(u8, i32) -> PackedInput) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(
            DeterministicPlugin::<PackedInput>::new(EventGame)
                .config(SessionConfig {
                    mode,
                    checksum_interval: 1,
                    verify_predictions: true,
                    clock: SessionClock::Stepped {
                        ticks_per_update: 1,
                    },
                    local: LocalSessionConfig {
                        latency_ticks: latency,
                        jitter_ticks: 0,
                        seed: 7,
                        known_players: vec![0],
                    },
                    ..Default::default()
                })
                .players(2),
        )
        .add_sim_event::<Ev>()
        .init_resource::<Received>()
        .insert_resource(TickInputSource::<PackedInput>::new(script))
        .add_systems(Update, collect);
    app.finish();
    app.cleanup();
    app
}

/// Player 1's first axis changes every tick: every prediction of it is wrong, so every update
/// that confirms one rolls back and re-simulates.
fn wobble(player: u8, tick: i32) -> PackedInput {
    let mut input = PackedInput::default();
    if player == 1 {
        input
            .set_axis(0, (tick % 3) as f32 - 1.0)
            .expect("valid slot");
    }
    input
}

fn with_button(mut input: PackedInput, button: u8, on: bool) -> PackedInput {
    input.set_pressed(button, on).expect("valid slot");
    input
}

fn predicted_runs(app: &App, tick: i32) -> u32 {
    let worlds = app.world().resource::<SimulationWorlds>();
    worlds.predicted().resource::<Runs>().0[&tick]
}

fn verified_fired(app: &App) -> Fired {
    let worlds = app.world().resource::<SimulationWorlds>();
    worlds.verified().resource::<Fired>().clone()
}

#[test]
fn an_event_resimulated_by_rollbacks_arrives_once_then_is_confirmed_once() {
    // Player 0 (known here) holds button 0 at tick 20 only; player 1's wobble makes every
    // update roll back, so tick 20 runs again until it is verified 4 ticks later.
    let mut app = event_app(vec![4, 4], SessionMode::Predicted, |p, t| {
        with_button(wobble(p, t), 0, p == 0 && t == 20)
    });
    run_until_verified(&mut app, 30);
    let runs = predicted_runs(&app, 20);
    assert!(runs >= 3, "tick 20 ran {runs} times in the predicted world");
    let stats = app.world().resource::<SessionStats>();
    assert!(stats.rollbacks >= 20, "{stats:?}");
    let log = app.world().resource::<Received>();
    let statuses: Vec<_> = log.of(20, &Ev::Held(0)).iter().map(|a| a.status).collect();
    assert_eq!(
        statuses,
        vec![SimEventStatus::Predicted, SimEventStatus::Confirmed]
    );
    assert_eq!(log.arrivals.len(), 2, "{:?}", log.arrivals);
    assert_eq!(
        log.confirmed,
        vec![SimEventId {
            tick: 20,
            key: Ev::Held(0),
            occurrence: 0
        }]
    );
    assert_eq!(
        (log.sounds_started, log.sounds_played_out, log.sent),
        (1, 1, 1)
    );
    assert_eq!(stats.resim_ticks_checked, stats.resim_ticks_matching);
}

#[test]
fn a_mispredicted_event_arrives_predicted_then_cancelled_and_never_confirmed() {
    // Player 1 holds button 0 on ticks 1..=30; prediction repeats "held" past tick 30 until the
    // release is confirmed 4 ticks later.
    let mut app = event_app(vec![4, 4], SessionMode::Predicted, |p, t| {
        with_button(wobble(p, t), 0, p == 1 && (1..=30).contains(&t))
    });
    run_until_verified(&mut app, 50);
    let log = app.world().resource::<Received>();
    let by_id = log.by_id();
    let after: Vec<_> = by_id.iter().filter(|((t, _, _), _)| *t > 30).collect();
    assert!(after.len() >= 3, "{after:?}");
    for (id, statuses) in &after {
        assert_eq!(
            statuses.as_slice(),
            [SimEventStatus::Predicted, SimEventStatus::Cancelled],
            "{id:?}"
        );
    }
    for tick in 1..=30 {
        let statuses = &by_id[&(tick, Ev::Held(1), 0)];
        assert_eq!(statuses.len(), 2, "tick {tick}: {statuses:?}");
        assert!(statuses[0].is_announcement(), "tick {tick}: {statuses:?}");
        assert_eq!(statuses[1], SimEventStatus::Confirmed, "tick {tick}");
    }
    assert_eq!(by_id.len(), 30 + after.len());
    let confirmed_ticks: BTreeSet<i32> = log.confirmed.iter().map(|id| id.tick).collect();
    assert_eq!(confirmed_ticks, (1..=30).collect());
    assert_eq!(log.sent, 30);
    assert_eq!(log.sounds_stopped, after.len() as u64);
    assert_eq!(log.sounds_played_out, 30);
    assert_eq!(verified_fired(&app).held, 30);
}

#[test]
fn an_event_first_produced_by_a_resimulation_arrives_once_marked_late() {
    // Player 1's input reaches this peer 2 ticks late, player 0's 6: player 1's press at tick 40
    // is known (and re-simulated) before tick 40 can be verified.
    let mut app = event_app(vec![6, 2], SessionMode::Predicted, |p, t| {
        with_button(PackedInput::default(), 0, p == 1 && t == 40)
    });
    run_until_verified(&mut app, 50);
    assert!(predicted_runs(&app, 40) >= 2);
    let log = app.world().resource::<Received>();
    let arrivals = log.of(40, &Ev::Held(1));
    let statuses: Vec<_> = arrivals.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses,
        vec![SimEventStatus::Late, SimEventStatus::Confirmed]
    );
    // The late arrival came from re-simulation: tick 40 was not verified yet.
    assert!(arrivals[0].verified_tick < 40, "{:?}", arrivals[0]);
    assert!(arrivals[1].verified_tick >= 40, "{:?}", arrivals[1]);
    assert!(arrivals[1].frame > arrivals[0].frame);
    assert_only_mispredicted_repeats_after(log, 40);
    assert_eq!(log.sent, 1);
}

#[test]
fn an_event_only_verification_produced_is_late_and_confirmed_in_one_update() {
    // Both inputs of tick 40 arrive together: verification runs tick 40 before any
    // re-simulation could.
    let mut app = event_app(vec![4, 4], SessionMode::Predicted, |p, t| {
        with_button(PackedInput::default(), 0, p == 1 && t == 40)
    });
    run_until_verified(&mut app, 50);
    let log = app.world().resource::<Received>();
    let arrivals = log.of(40, &Ev::Held(1));
    let statuses: Vec<_> = arrivals.iter().map(|a| a.status).collect();
    assert_eq!(
        statuses,
        vec![SimEventStatus::Late, SimEventStatus::Confirmed]
    );
    assert_eq!(arrivals[0].frame, arrivals[1].frame);
    assert_only_mispredicted_repeats_after(log, 40);
}

/// Every other arrival is player 1's press repeated by prediction after `tick` (the repeated
/// last confirmed input) and cancelled, and there is at least one.
fn assert_only_mispredicted_repeats_after(log: &Received, tick: i32) {
    let others: Vec<_> = log
        .by_id()
        .into_iter()
        .filter(|((t, _, _), _)| *t != tick)
        .collect();
    assert!(!others.is_empty());
    for ((t, event, _), statuses) in others {
        assert!(t > tick && event == Ev::Held(1), "{t} {event:?}");
        assert_eq!(statuses.len(), 2, "{t}: {statuses:?}");
        assert!(statuses[0].is_announcement(), "{t}: {statuses:?}");
        assert_eq!(statuses[1], SimEventStatus::Cancelled, "{t}: {statuses:?}");
    }
}

/// Both players from the shared script, both buttons: held periods, coins, two equal coins in
/// one tick when both players press button 1.
fn both_buttons(player: u8, tick: i32) -> PackedInput {
    let input = scripted_input(player, tick);
    let coin = if player == 0 {
        (tick / 4) % 3 == 0
    } else {
        (tick / 6) % 2 == 0
    };
    with_button(input, 1, coin)
}

/// What the script fired over ticks `1..=through`: (held, coins).
fn scripted_fired(through: i32) -> (u64, u64) {
    let (mut held, mut coins) = (0, 0);
    for tick in 1..=through {
        for p in 0..2 {
            let input = both_buttons(p, tick);
            held += u64::from(input.pressed(0));
            coins += u64::from(input.pressed(1));
        }
    }
    (held, coins)
}

/// Checks a whole run: every identity announced then settled in order, each confirmed identity
/// confirmed once and also on the confirmed stream, the confirmed counts equal to what the
/// verified world fired; returns (confirmed held, confirmed coins, cancelled).
pub(crate) fn check_run(log: &Received, fired: &Fired, verified: i32) -> (u64, u64, u64) {
    let by_id = log.by_id();
    let mut cancelled = 0;
    for (id, statuses) in &by_id {
        for pair in statuses.chunks(2) {
            assert!(pair[0].is_announcement(), "{id:?}: {statuses:?}");
            if let Some(settle) = pair.get(1) {
                assert!(!settle.is_announcement(), "{id:?}: {statuses:?}");
            }
        }
        let confirmations = statuses
            .iter()
            .filter(|s| **s == SimEventStatus::Confirmed)
            .count();
        assert!(confirmations <= 1, "{id:?}: {statuses:?}");
        if confirmations == 1 {
            assert_eq!(statuses.last(), Some(&SimEventStatus::Confirmed), "{id:?}");
        }
        if id.0 <= verified {
            assert_eq!(statuses.len() % 2, 0, "settled {id:?}: {statuses:?}");
        }
        cancelled += statuses
            .iter()
            .filter(|s| **s == SimEventStatus::Cancelled)
            .count() as u64;
    }
    let from_arrivals: Vec<_> = log
        .arrivals
        .iter()
        .filter(|a| a.status == SimEventStatus::Confirmed)
        .map(|a| a.id.clone())
        .collect();
    assert_eq!(from_arrivals, log.confirmed);
    let unique: BTreeSet<_> = log
        .confirmed
        .iter()
        .map(|id| (id.tick, id.key.clone(), id.occurrence))
        .collect();
    assert_eq!(unique.len(), log.confirmed.len());
    let held = log.confirmed.iter().filter(|id| id.key != Ev::Coin).count() as u64;
    let coins = log.confirmed.len() as u64 - held;
    assert_eq!((held, coins), (fired.held, fired.coins));
    assert_eq!(log.sent, held + coins);
    assert_eq!(
        log.sounds_started,
        log.sounds_stopped + log.sounds_played_out + log.playing.len() as u64
    );
    assert_eq!(log.sounds_played_out, held + coins);
    (held, coins, cancelled)
}

#[test]
fn the_confirmed_stream_carries_each_event_once_across_a_run_with_rollbacks() {
    let mut app = event_app(vec![5, 5], SessionMode::Predicted, both_buttons);
    run_until_verified(&mut app, 300);
    let stats = app.world().resource::<SessionStats>().clone();
    assert!(stats.rollbacks >= 10, "{stats:?}");
    assert_eq!(stats.resim_ticks_checked, stats.resim_ticks_matching);
    let log = app.world().resource::<Received>();
    let (held, coins, cancelled) = check_run(log, &verified_fired(&app), stats.verified_tick);
    assert_eq!((held, coins), scripted_fired(stats.verified_tick));
    assert!(
        held > 0 && coins > 0 && cancelled > 0,
        "{held} {coins} {cancelled}"
    );
    // Two equal coins in one tick are two events.
    assert!(log.confirmed.iter().any(|id| id.occurrence == 1));
    let counters = app.world().resource::<SimEventStats>();
    assert_eq!(counters.confirmed, held + coins);
    assert_eq!(counters.cancelled, cancelled);
    assert_eq!(counters.predicted + counters.late, log.sounds_started);
    // Only ticks not verified yet are held by the ledger.
    let ledger = app.world().resource::<SimEventLedger<Ev>>();
    let unverified = (stats.predicted_tick - stats.verified_tick) as usize;
    assert!(ledger.pending_ticks() <= unverified, "{ledger:?}");
    assert_eq!(ledger.verified_tick(), stats.verified_tick);
}

#[test]
fn lockstep_events_arrive_late_and_confirmed_together() {
    let mut app = event_app(vec![3, 3], SessionMode::Lockstep, both_buttons);
    run_until_verified(&mut app, 100);
    let verified = app.world().resource::<SessionStats>().verified_tick;
    let log = app.world().resource::<Received>();
    let (held, coins, cancelled) = check_run(log, &verified_fired(&app), verified);
    assert_eq!((held, coins, cancelled), {
        let (h, c) = scripted_fired(verified);
        (h, c, 0)
    });
    for pair in log.arrivals.chunks(2) {
        assert_eq!(pair[0].status, SimEventStatus::Late);
        assert_eq!(pair[1].status, SimEventStatus::Confirmed);
        assert_eq!(pair[0].frame, pair[1].frame);
    }
}

#[test]
fn a_restarted_session_cancels_what_the_old_one_left_unsettled_and_starts_over() {
    let mut app = event_app(vec![5, 5], SessionMode::Predicted, both_buttons);
    run_until_verified(&mut app, 60);
    let unsettled = app.world().resource::<Received>().playing.len();
    restart_session::<PackedInput>(app.world_mut()).expect("restart");
    let before = app.world().resource::<Received>().confirmed.len();
    app.update();
    let log = app.world().resource::<Received>();
    // Every sound of the old session's unverified ticks was stopped.
    let stopped_now = log
        .arrivals
        .iter()
        .filter(|a| a.frame == log.frame && a.status == SimEventStatus::Cancelled)
        .count();
    assert_eq!(stopped_now, unsettled);
    run_until_verified(&mut app, 60);
    let log = app.world().resource::<Received>();
    let again: Vec<_> = log.confirmed[before..].to_vec();
    let (held, coins) = scripted_fired(app.world().resource::<SessionStats>().verified_tick);
    assert_eq!(again.len() as u64, held + coins);
    assert_eq!(again.iter().map(|id| id.tick).min(), Some(1));
}

#[test]
fn an_unregistered_event_type_is_reported_and_registration_after_start_is_refused() {
    let mut app = event_app(vec![2, 2], SessionMode::Predicted, both_buttons);
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    worlds.verified_mut().insert_resource(EmitUnlisted);
    worlds.predicted_mut().insert_resource(EmitUnlisted);
    // Drained after every update: a message lives two updates, and on a loaded machine the
    // first tick may run in the first update.
    let mut reports: Vec<UnregisteredSimEvent> = Vec::new();
    for _ in 0..4 {
        app.update();
        reports.extend(
            app.world_mut()
                .resource_mut::<Messages<UnregisteredSimEvent>>()
                .drain(),
        );
    }
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(reports[0].type_name.ends_with("Unlisted"), "{reports:?}");
    // One event per run of a tick after tick 0 (which ran before the game started emitting).
    let worlds = app.world().resource::<SimulationWorlds>();
    let runs: u32 = [worlds.verified(), worlds.predicted()]
        .iter()
        .flat_map(|w| w.resource::<Runs>().0.range(1..).map(|(_, n)| *n))
        .sum();
    let stats = app.world().resource::<SimEventStats>();
    assert!(runs >= 4, "{runs}");
    assert_eq!(stats.unregistered_dropped, u64::from(runs), "{stats:?}");
    assert_eq!(stats.unregistered_types.len(), 1);
    let error = app.try_add_sim_event::<Unlisted>().err();
    assert!(
        matches!(error, Some(SimEventError::SessionStarted { type_name }) if type_name.ends_with("Unlisted")),
        "{error:?}"
    );
}

#[test]
fn run_until_verified_fails_naming_an_unregistered_event_type() {
    let mut app = event_app(vec![2, 2], SessionMode::Predicted, both_buttons);
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    worlds.verified_mut().insert_resource(EmitUnlisted);
    worlds.predicted_mut().insert_resource(EmitUnlisted);
    let error = simsync::deterministic::testing::run_until_verified(&mut app, 30, 200)
        .expect_err("dropped events are a failure, not Ok");
    let simsync::deterministic::testing::RunUntilError::UnregisteredSimEvent(report) = &error
    else {
        panic!("expected UnregisteredSimEvent, got {error:?}");
    };
    assert!(report.type_name.ends_with("Unlisted"), "{report:?}");
    assert!(report.dropped >= 1, "{report:?}");
    let text = error.to_string();
    assert!(text.contains("add_sim_event::<"), "{text}");
    assert!(text.contains("Unlisted"), "{text}");
}

/// A ball of the shared physics game is in the air (read from the simulated state).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Airborne(u8);

fn airborne(
    bodies: Res<crate::common::PlayerBodies>,
    transforms: Query<&Transform>,
    mut events: SimEvents<Airborne>,
) {
    for (p, body) in bodies.0.iter().enumerate() {
        if transforms.get(*body).is_ok_and(|t| t.translation.y > 0.7) {
            events.write(Airborne(p as u8));
        }
    }
}

#[test]
fn events_do_not_change_the_simulation_they_report() {
    use crate::common::{TestGame, app, feed_scripted_inputs, stats};
    let game = TestGame {
        boxes: 50,
        ..TestGame::default()
    };
    let mut plain = app(game.clone(), 3, SessionMode::Predicted, true);
    let mut with_events = App::new();
    with_events
        .add_plugins(MinimalPlugins)
        .add_plugins(
            DeterministicPlugin::<PackedInput>::from_fn(move |sim: &mut App| {
                sim.add_plugins(game.clone())
                    .add_systems(SimulationTick, airborne.in_set(SimulationSet::Cleanup));
            })
            .config(SessionConfig {
                checksum_interval: 1,
                verify_predictions: true,
                skip_rollback_when_predictions_hold: false,
                clock: SessionClock::Stepped {
                    ticks_per_update: 1,
                },
                local: LocalSessionConfig {
                    latency_ticks: vec![3],
                    jitter_ticks: 0,
                    seed: 7,
                    known_players: vec![0],
                },
                ..Default::default()
            })
            .players(2),
        )
        .add_sim_event::<Airborne>()
        .add_systems(
            PreUpdate,
            feed_scripted_inputs.before(DeterministicSet::SessionUpdate),
        );
    with_events.finish();
    with_events.cleanup();
    run_until_verified(&mut plain, 200);
    run_until_verified(&mut with_events, 200);
    let (a, b) = (stats(&plain), stats(&with_events));
    assert_eq!(a.checksum_history[..200], b.checksum_history[..200]);
    assert!(b.rollbacks >= 100, "{b:?}");
    assert_eq!(b.resim_ticks_checked, b.resim_ticks_matching);
    assert!(b.resim_ticks_checked > 0);
    let counters = with_events.world().resource::<SimEventStats>();
    assert!(counters.confirmed > 0, "{counters:?}");
}
