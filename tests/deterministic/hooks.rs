//! Session hooks: a game's hook sees every verified tick once, in order, with the inputs the
//! simulation saw and the checksum on exactly the checksum ticks; a hook that stops
//! verification stops it for good, with a message; the session's other moments (predicted
//! ticks, rollbacks, snapshot loads, cleanups, restarts) reach every hook.

use std::sync::{Arc, Mutex};

use bevy::prelude::*;
use simsync::deterministic::{
    Cleanup, HookFlow, PredictedTick, SessionError, SessionMode, SnapshotAppExt,
    VerificationStopped, VerifiedTick, VerifiedTickHook, VerifiedTickHookAppExt, WorldRole,
    restart_session,
};
use simsync::prelude::*;

use crate::common::{TestGame, app_with_game, run_until_verified, stats};

/// What a hook saw of one verified tick.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    tick: Tick,
    checksum: Option<u64>,
    /// The hook's inputs equal the `PlayerInputs` the verified world simulated the tick with.
    inputs_match: bool,
}

/// Records every verified tick; stops at `stop_at`, asks for the checksum of `extra_checksum`.
#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    stop_at: Option<Tick>,
    extra_checksum: Option<Tick>,
}

impl Recorder {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("not poisoned").clone()
    }
}

impl VerifiedTickHook<PackedInput> for Recorder {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, PackedInput>) -> HookFlow {
        let simulated: Vec<PackedInput> = verified
            .world()
            .resource::<PlayerInputs<PackedInput>>()
            .iter()
            .map(|(_, input)| *input)
            .collect();
        let tick = verified.tick();
        assert_eq!(verified.is_checksum_tick(), verified.checksum().is_some());
        self.seen.lock().expect("not poisoned").push(Seen {
            tick,
            checksum: verified.checksum(),
            inputs_match: simulated == verified.inputs(),
        });
        match self.stop_at {
            Some(stop) if stop == tick => HookFlow::Stop(format!("stopped at {tick}")),
            _ => HookFlow::Continue,
        }
    }

    fn wants_checksum(&self, tick: Tick) -> bool {
        self.extra_checksum == Some(tick)
    }
}

fn game() -> TestGame {
    TestGame {
        boxes: 20,
        players: 2,
        ..TestGame::default()
    }
}

/// A predicted local session (latency 3, a checksum every 4 ticks) with `hooks` added in order.
fn app_with_hooks(hooks: &[Recorder]) -> App {
    let mut app = app_with_game(game(), 2, 3, |plugin| {
        plugin.edit_config(|c| {
            c.mode = SessionMode::Predicted;
            c.checksum_interval = 4;
        })
    });
    for hook in hooks {
        app.add_verified_tick_hook(hook.clone())
            .expect("the plugin was added first");
    }
    app
}

#[test]
fn a_game_hook_sees_every_verified_tick_once_in_order_with_its_checksum() {
    let hook = Recorder {
        extra_checksum: Some(7),
        ..Recorder::default()
    };
    let mut app = app_with_hooks(std::slice::from_ref(&hook));
    run_until_verified(&mut app, 120);
    let stats = stats(&app);
    let seen = hook.seen();
    let ticks: Vec<Tick> = seen.iter().map(|s| s.tick).collect();
    assert_eq!(ticks, (1..=stats.verified_tick).collect::<Vec<_>>());
    assert!(seen.iter().all(|s| s.inputs_match), "{seen:?}");
    for s in &seen {
        let checksum_tick = s.tick % 4 == 0 || s.tick == 7;
        assert_eq!(s.checksum.is_some(), checksum_tick, "tick {}", s.tick);
    }
    // The checksums the hook saw are the session's, tick for tick.
    let from_hook: Vec<(Tick, u64)> = seen
        .iter()
        .filter_map(|s| Some((s.tick, s.checksum?)))
        .collect();
    let recorded: Vec<(Tick, u64)> = stats
        .checksum_history
        .iter()
        .map(|c| (c.tick, c.checksum))
        .collect();
    assert_eq!(from_hook, recorded);
}

#[test]
fn a_hook_that_stops_stops_verification_for_good_with_a_message() {
    let stopper = Recorder {
        stop_at: Some(50),
        ..Recorder::default()
    };
    let after = Recorder::default();
    let mut app = app_with_hooks(&[stopper.clone(), after.clone()]);
    let stopped_in_update = |app: &App| {
        app.world()
            .resource::<DeterministicSession<PackedInput>>()
            .verification_stopped()
            .cloned()
    };
    for _ in 0..200 {
        app.update();
        if stopped_in_update(&app).is_some() {
            break;
        }
    }
    let stopped: Vec<VerificationStopped> = app
        .world_mut()
        .resource_mut::<Messages<VerificationStopped>>()
        .drain()
        .collect();
    let expected = VerificationStopped {
        tick: 50,
        reason: "stopped at 50".to_string(),
    };
    assert_eq!(stopped, vec![expected.clone()]);
    assert_eq!(stopped_in_update(&app), Some(expected));
    for _ in 0..100 {
        app.update();
    }
    assert_eq!(stats(&app).verified_tick, 50);
    // The hook after the stopping one still saw the stopped tick; nobody saw a later one.
    let last = |hook: &Recorder| hook.seen().last().map(|s| s.tick);
    assert_eq!(last(&stopper), Some(50));
    assert_eq!(last(&after), Some(50));
    assert_eq!(after.seen().len(), 50);
}

#[test]
fn a_restarted_session_keeps_the_game_hook_and_plays_its_replay_again() {
    use simsync::deterministic::{ReplayEnd, ReplayPlayback, ReplayStatus};

    use crate::deterministic::replays::{play_with, read, record_game, status};

    // A game hook: after a restart it sees the new session's ticks from tick 1 again.
    let hook = Recorder::default();
    let mut app = app_with_hooks(std::slice::from_ref(&hook));
    run_until_verified(&mut app, 30);
    let before = hook.seen().len();
    restart_session::<PackedInput>(app.world_mut()).expect("restarts");
    run_until_verified(&mut app, 10);
    let seen = hook.seen();
    assert_eq!(seen[before].tick, 1, "{seen:?}");
    // A playback: after a restart it is played again from its start, every checksum checked.
    let (bytes, recorded) = record_game(game(), 96, |r| r);
    let mut app = play_with(game(), ReplayPlayback::new(read(&bytes)));
    let finished = ReplayStatus::Finished {
        end: ReplayEnd::Complete,
    };
    assert_eq!(status(&app), finished);
    restart_session::<PackedInput>(app.world_mut()).expect("restarts");
    app.update();
    assert_eq!(status(&app), ReplayStatus::Playing);
    for _ in 0..100 {
        app.update();
        if status(&app) != ReplayStatus::Playing {
            break;
        }
    }
    assert_eq!(status(&app), finished);
    let playback = app.world().resource::<ReplayPlayback<PackedInput>>();
    assert_eq!(playback.checksums_checked(), recorded.len() as u64);
}

#[test]
fn a_hook_without_a_session_is_a_typed_error() {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    let err = app
        .add_verified_tick_hook::<PackedInput>(Recorder::default())
        .map(|_| ())
        .expect_err("no session of this input type");
    assert!(matches!(err, SessionError::WorldsNotBuilt), "{err:?}");
}

/// Counts the session's other moments, as a game's hook sees them.
#[derive(Default)]
struct Moments {
    predicted: u64,
    resimulated: u64,
    predicted_inputs_match: bool,
    rollbacks: Vec<Tick>,
    snapshots_loaded: Vec<Tick>,
    cleanups: u64,
    last_cleanup: Option<Cleanup>,
    restarts: u32,
    verified: u64,
}

impl VerifiedTickHook<PackedInput> for Moments {
    fn on_verified(&mut self, _verified: &mut VerifiedTick<'_, PackedInput>) -> HookFlow {
        self.verified += 1;
        HookFlow::Continue
    }

    fn on_predicted(&mut self, predicted: &mut PredictedTick<'_, PackedInput>) {
        if self.predicted == 0 {
            self.predicted_inputs_match = true;
        }
        self.predicted += 1;
        self.resimulated += u64::from(predicted.is_resimulation());
        let simulated: Vec<PackedInput> = predicted
            .world()
            .resource::<PlayerInputs<PackedInput>>()
            .iter()
            .map(|(_, input)| *input)
            .collect();
        self.predicted_inputs_match &= simulated == predicted.inputs()
            && predicted.role() == WorldRole::Predicted
            && predicted.world().resource::<SimTick>().0 == predicted.tick();
    }

    fn on_rollback(&mut self, tick: Tick) {
        self.rollbacks.push(tick);
    }

    fn on_snapshot_loaded(&mut self, tick: Tick) {
        self.snapshots_loaded.push(tick);
    }

    fn on_cleanup(&mut self, cleanup: Cleanup) {
        self.cleanups += 1;
        self.last_cleanup = Some(cleanup);
    }

    fn on_restart(&mut self) {
        self.restarts += 1;
    }
}

fn moments(app: &App) -> &Moments {
    app.world()
        .resource::<DeterministicSession<PackedInput>>()
        .hook::<Moments>()
        .expect("the hook was added")
}

#[test]
fn a_hook_is_told_every_moment_of_the_session_and_is_read_back_by_type() {
    let mut app = app_with_hooks(&[]);
    app.add_verified_tick_hook(Moments::default())
        .expect("the plugin was added first");
    let mut updates = 0u64;
    while stats(&app).verified_tick < 120 && updates < 600 {
        app.update();
        updates += 1;
    }
    let stats = stats(&app);
    let seen = moments(&app);
    // Every predicted tick once per simulation, re-simulations flagged, with the inputs and the
    // world it was simulated with.
    assert!(stats.ticks_predicted > 120, "{stats:?}");
    assert_eq!(seen.predicted, stats.ticks_predicted);
    assert_eq!(seen.resimulated, stats.resimulated_ticks);
    assert!(seen.resimulated > 0, "latency 3 re-simulates");
    assert!(seen.predicted_inputs_match);
    // Every rollback (copies and shared advances alike), each to a verified tick.
    assert_eq!(
        seen.rollbacks.len() as u64,
        stats.rollbacks + stats.shared_advances
    );
    assert!(seen.rollbacks.windows(2).all(|w| w[0] <= w[1]));
    assert!(seen.rollbacks.iter().all(|t| *t <= stats.verified_tick));
    // One cleanup per session update, the last at the verified tick the update ended at.
    assert_eq!(seen.cleanups, updates);
    let last = seen.last_cleanup.expect("cleaned up");
    assert_eq!(last.verified_tick, stats.verified_tick);
    let window = app
        .world()
        .resource::<DeterministicSession<PackedInput>>()
        .config()
        .rollback_window as Tick;
    assert_eq!(last.keep_from, stats.verified_tick - window - 2);
    assert_eq!(seen.verified, stats.verified_tick as u64);
    assert!(seen.snapshots_loaded.is_empty() && seen.restarts == 0);

    // A snapshot load, then a restart: each told once; the hook stays the session's.
    let snapshot = app
        .capture_snapshot::<PackedInput>()
        .expect("snapshots are on");
    let tick = snapshot.header.tick;
    assert_eq!(app.load_snapshot::<PackedInput>(&snapshot), Ok(tick));
    assert_eq!(moments(&app).snapshots_loaded, vec![tick]);
    restart_session::<PackedInput>(app.world_mut()).expect("restarts");
    assert_eq!(moments(&app).restarts, 1);
    run_until_verified(&mut app, 10);
    assert!(moments(&app).verified > stats.verified_tick as u64);
}
