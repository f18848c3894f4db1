//! The presented (predicted) world never moves back in time: after every update it is at the
//! local tick, also in the update where a mispredicted confirmation ends a stall.

use bevy::prelude::*;
use simsync::deterministic::{LocalSessionConfig, SessionClock, TickInputSource};
use simsync::prelude::*;

use crate::common::TestGame;

/// Player 1 changes its input every 3 ticks; player 0 holds still.
fn changing_input(player: u8, tick: i32) -> PackedInput {
    let mut input = PackedInput::default();
    if player == 1 {
        input.buttons = (tick / 3 % 4) as u16;
    }
    input
}

/// Inputs confirmed `latency` ticks (plus up to `jitter`) late with a rollback window of 4: the
/// session stalls at the window limit until confirmations arrive, and player 1's confirmations
/// (predicted by repetition) are often mispredictions.
fn stalling_app(latency: u32, jitter: u32) -> App {
    let game = TestGame {
        boxes: 10,
        ..TestGame::default()
    };
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(game)
            .config(SessionConfig {
                rollback_window: 4,
                clock: SessionClock::Stepped {
                    ticks_per_update: 1,
                },
                local: LocalSessionConfig {
                    latency_ticks: vec![latency],
                    jitter_ticks: jitter,
                    seed: 11,
                    known_players: vec![0],
                },
                ..Default::default()
            })
            .players(2),
    );
    app.insert_resource(TickInputSource::new(changing_input));
    app.finish();
    app.cleanup();
    app
}

/// Runs `updates` updates, asserting after each that the predicted world is at the local tick
/// and never went back; returns (updates that ended a stall with a rollback, final stats).
fn run_checking_presented_tick(app: &mut App, updates: u32) -> (u32, SessionStats) {
    let mut before = app.world().resource::<SessionStats>().clone();
    let mut stall_ending_rollbacks = 0;
    let mut previously_stalled = false;
    for update in 0..updates {
        app.update();
        let stats = app.world().resource::<SessionStats>().clone();
        assert_eq!(
            stats.predicted_tick, stats.local_tick,
            "update {update}: the predicted world is not at the local tick"
        );
        assert!(
            stats.predicted_tick >= before.predicted_tick,
            "update {update}: the predicted world went back from {} to {}",
            before.predicted_tick,
            stats.predicted_tick
        );
        let stalled = stats.stalls > before.stalls;
        if previously_stalled && !stalled && stats.rollbacks > before.rollbacks {
            stall_ending_rollbacks += 1;
        }
        previously_stalled = stalled;
        before = stats;
    }
    (stall_ending_rollbacks, before)
}

#[test]
fn a_mispredicted_input_that_ends_a_stall_leaves_the_predicted_world_at_the_local_tick() {
    // Latency 8 > window 4: the session polls 4 ticks, stalls until the first of them is
    // confirmed, and so on (half a tick per update); player 1's confirmations, predicted by
    // repetition, are wrong every 3 ticks, often in the update that ends a stall.
    let mut app = stalling_app(8, 0);
    let (stall_ending_rollbacks, stats) = run_checking_presented_tick(&mut app, 200);
    assert!(stats.stalls >= 90, "{stats:?}");
    assert!(
        stall_ending_rollbacks >= 5,
        "{stall_ending_rollbacks}: {stats:?}"
    );
    assert!(stats.verified_tick >= 90, "{stats:?}");
}

#[test]
fn with_jitter_every_stall_ends_with_the_predicted_world_at_the_local_tick() {
    let mut app = stalling_app(5, 4);
    let (stall_ending_rollbacks, stats) = run_checking_presented_tick(&mut app, 400);
    assert!(stats.stalls >= 10, "{stats:?}");
    assert!(
        stall_ending_rollbacks >= 5,
        "{stall_ending_rollbacks}: {stats:?}"
    );
    assert!(stats.mispredicted_inputs > 50, "{stats:?}");
}
