//! A local session marks a player disconnected and connected again from a given tick
//! (`DeterministicSession::set_player_connected`): the simulation sees it through
//! `PlayerInputs::is_connected` from exactly that tick in both worlds, across rollbacks and in a
//! replay; a networked session, a replay, an unknown player and a verified tick are refused.

use bevy::prelude::*;
use simsync::deterministic::testing::run_until_verified;
use simsync::deterministic::{
    NetworkSessionConfig, ReplayMode, ReplayPlayback, ReplayRecorder, SessionError, SessionMode,
    StateHasher,
};
use simsync::prelude::*;

use super::replays::{SharedBytes, play_with, read};
use crate::common::{app_with_game, stats};

/// Every change of a player's connection the simulation saw: (player, tick, connected).
/// Rolled back and hashed, so checksums and the prediction check compare it.
#[derive(Resource, Clone, Debug, Default, PartialEq)]
struct ConnectionLog {
    changes: Vec<(u8, i32, bool)>,
    last: Vec<bool>,
}

impl SimHash for ConnectionLog {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        for (player, tick, connected) in &self.changes {
            player.sim_hash(hasher);
            tick.sim_hash(hasher);
            connected.sim_hash(hasher);
        }
    }
}

/// A game with no bodies: it only logs connection changes.
#[derive(Clone)]
struct Watcher;

impl Plugin for Watcher {
    fn build(&self, app: &mut App) {
        app.insert_resource(ConnectionLog {
            changes: Vec::new(),
            last: vec![true; 2],
        })
        .rollback_hashed_resource::<ConnectionLog>()
        .add_systems(SimulationTick, log_changes.in_set(SimulationSet::Game));
    }
}

fn log_changes(inputs: Res<PlayerInputs<PackedInput>>, mut log: ResMut<ConnectionLog>) {
    for (player, _) in inputs.iter() {
        let connected = inputs.is_connected(player);
        if log.last[usize::from(player)] != connected {
            log.last[usize::from(player)] = connected;
            log.changes.push((player, inputs.tick(), connected));
        }
    }
}

/// A local predicted session of two players (latencies 6 and 1 ticks, scripted inputs,
/// prediction check on): player 1's inputs are confirmed ticks before they are verified.
fn local_app(
    configure: impl FnOnce(DeterministicPlugin<PackedInput>) -> DeterministicPlugin<PackedInput>,
) -> App {
    app_with_game(Watcher, 2, 3, |plugin| {
        configure(plugin.edit_config(|c| {
            c.mode = SessionMode::Predicted;
            c.verify_predictions = true;
            c.local.latency_ticks = vec![6, 1];
        }))
    })
}

fn session(app: &mut App) -> Mut<'_, DeterministicSession<PackedInput>> {
    app.world_mut()
        .resource_mut::<DeterministicSession<PackedInput>>()
}

fn log(app: &App, verified: bool) -> Vec<(u8, i32, bool)> {
    let worlds = app.world().resource::<SimulationWorlds>();
    let world = if verified {
        worlds.verified()
    } else {
        worlds.predicted()
    };
    world.resource::<ConnectionLog>().changes.clone()
}

/// Runs `app` to verified tick 20, then marks player 1 disconnected from 2 ticks after the
/// verified tick (its input of that tick already confirmed) and connected again
/// 40 ticks later (not submitted yet), and runs 80 ticks further with the prediction check on.
/// Returns the two ticks.
fn leave_and_return(app: &mut App) -> (i32, i32) {
    run_until_verified(app, 20, 200).expect("runs");
    let verified = stats(app).verified_tick;
    let (left, back) = (verified + 2, verified + 42);
    let confirmed = session(app).buffer().confirmed(1, left).is_some();
    assert!(
        confirmed,
        "the leave tick is confirmed already, not verified"
    );
    session(app)
        .set_player_connected(1, false, left)
        .expect("a local player");
    session(app)
        .set_player_connected(1, true, back)
        .expect("a local player");
    run_until_verified(app, back + 40, 400).expect("no prediction mismatch");
    (left, back)
}

#[test]
fn a_local_player_leaves_and_returns_at_the_given_ticks_in_both_worlds() {
    let mut app = local_app(|p| p);
    let (left, back) = leave_and_return(&mut app);
    let expected = vec![(1, left, false), (1, back, true)];
    assert_eq!(log(&app, true), expected, "verified world");
    assert_eq!(log(&app, false), expected, "predicted world");
    let stats = stats(&app);
    assert!(stats.rollbacks > 0);
    assert!(stats.resim_ticks_checked > 50, "{stats:?}");
    assert_eq!(stats.resim_ticks_matching, stats.resim_ticks_checked);
}

#[test]
fn a_later_change_replaces_the_changes_after_it() {
    let mut app = local_app(|p| p);
    run_until_verified(&mut app, 10, 200).expect("runs");
    let verified = stats(&app).verified_tick;
    let mut s = session(&mut app);
    s.set_player_connected(0, false, verified + 10).expect("ok");
    s.set_player_connected(0, true, verified + 20).expect("ok");
    // From tick +15 on disconnected: the reconnect at +20 is replaced.
    s.set_player_connected(0, false, verified + 15).expect("ok");
    // Connected from +5: only the change at +15 follows.
    s.set_player_connected(0, true, verified + 5).expect("ok");
    s.set_player_connected(0, false, verified + 15).expect("ok");
    run_until_verified(&mut app, verified + 40, 400).expect("no prediction mismatch");
    assert_eq!(log(&app, true), vec![(0, verified + 15, false)]);
    assert_eq!(log(&app, false), vec![(0, verified + 15, false)]);
}

#[test]
fn a_replay_records_the_local_disconnect() {
    let out = SharedBytes::default();
    let recorder = ReplayRecorder::to_writer(out.clone(), "memory");
    let mut app = local_app(|p| p.replay(ReplayMode::Record(recorder)));
    let (left, back) = leave_and_return(&mut app);
    let recorded = stats(&app).checksum_history;
    drop(app);
    let mut replayed = play_with(Watcher, ReplayPlayback::new(read(&out.bytes())));
    assert_eq!(
        log(&replayed, true),
        vec![(1, left, false), (1, back, true)]
    );
    assert_eq!(stats(&replayed).checksum_history, recorded, "bit-exact");
    let err = session(&mut replayed)
        .set_player_connected(1, true, 10_000)
        .expect_err("a replay plays its recorded marks");
    assert_eq!(err, SessionError::NotALocalSession { replay: true });
    assert!(err.to_string().contains("replay"), "{err}");
}

#[test]
fn bad_changes_are_refused_with_typed_errors_and_change_nothing() {
    let mut app = local_app(|p| p);
    run_until_verified(&mut app, 20, 200).expect("runs");
    let verified = stats(&app).verified_tick;
    let mut s = session(&mut app);
    assert_eq!(
        s.set_player_connected(2, false, verified + 5),
        Err(SessionError::UnknownPlayer {
            player: 2,
            players: 2
        })
    );
    for tick in [verified, 1, 0, -3] {
        let err = s
            .set_player_connected(1, false, tick)
            .expect_err("a verified tick");
        assert_eq!(
            err,
            SessionError::TickAlreadyVerified {
                tick,
                verified_tick: verified
            }
        );
        assert!(err.to_string().contains("already verified"), "{err}");
    }
    run_until_verified(&mut app, verified + 30, 400).expect("runs");
    assert!(log(&app, true).is_empty(), "nothing changed");

    let mut networked = App::new();
    networked.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(Watcher)
            .players(2)
            .networked(NetworkSessionConfig::default()),
    );
    let err = session(&mut networked)
        .set_player_connected(1, false, 100)
        .expect_err("the relay decides");
    assert_eq!(err, SessionError::NotALocalSession { replay: false });
    assert!(err.to_string().contains("relay"), "{err}");
}
