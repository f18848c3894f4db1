//! Local input is sampled every frame and latched into ticks: a one-frame press reaches the
//! simulation exactly once at any frame rate, a held button is held, an axis returns to neutral,
//! and the edges survive rollback; the leafwing plugin and `LocalPlayers` feed it.

use std::time::Duration;

use bevy::prelude::*;
use bevy::time::TimeUpdateStrategy;
use leafwing_input_manager::prelude::*;
use simsync::deterministic::{
    FrameMerge, LeafwingInputPlugin, LocalPlayer, LocalPlayers, LocalSessionConfig, SessionClock,
};
use simsync::prelude::*;

const PLAYERS: usize = 2;

/// What the simulation saw, per player (rolled back, so re-simulation recounts it).
#[derive(Resource, Clone, Debug, Default, PartialEq)]
struct Seen {
    /// Ticks where button 0 was just pressed (against the previous tick's input).
    presses: [u32; PLAYERS],
    /// Ticks where button 0 was pressed.
    pressed_ticks: [u32; PLAYERS],
    /// Ticks where axis 0 was positive / negative.
    positive_axis_ticks: [u32; PLAYERS],
    negative_axis_ticks: [u32; PLAYERS],
    /// Axis 0 of the last tick.
    last_axis: [i8; PLAYERS],
}

#[derive(Clone)]
struct CountingGame;

impl Plugin for CountingGame {
    fn build(&self, app: &mut App) {
        app.init_resource::<Seen>()
            .rollback_resource::<Seen>()
            .add_systems(SimulationTick, count.in_set(SimulationSet::Game));
    }
}

fn count(inputs: Res<PlayerInputs<PackedInput>>, mut seen: ResMut<Seen>) {
    for p in 0..PLAYERS.min(inputs.len()) {
        let (Some(now), Some(before)) = (inputs.get(p as u8), inputs.previous(p as u8)) else {
            continue;
        };
        seen.presses[p] += u32::from(now.just_pressed(before, 0));
        seen.pressed_ticks[p] += u32::from(now.pressed(0));
        seen.positive_axis_ticks[p] += u32::from(now.axes[0] > 0);
        seen.negative_axis_ticks[p] += u32::from(now.axes[0] < 0);
        seen.last_axis[p] = now.axes[0];
    }
}

/// The input of `player` in main-app frame `frame` (the first update is frame 1).
type Script = fn(u8, u32) -> PackedInput;

#[derive(Resource)]
struct FrameScript(Script);

/// Writes the script's input of this frame for every player, in the public input set.
fn play_script(
    script: Res<FrameScript>,
    mut frame: Local<u32>,
    mut local: ResMut<LocalInputs<PackedInput>>,
) {
    *frame += 1;
    for p in 0..PLAYERS as u8 {
        local.set(p, (script.0)(p, *frame)).expect("known player");
    }
}

/// A headless two-player app at 64 Hz stepped `fps` frames per second of real time, input delay
/// 5, the local relay confirming every input `latency` ticks late (player 1 is predicted by
/// repetition until then).
fn app_at(fps: u32, latency: u32, script: Option<Script>) -> App {
    let mut app = unfinished_app_at(fps, latency, script);
    app.finish();
    app.cleanup();
    app
}

/// [`app_at`] before `finish`, for more plugins.
fn unfinished_app_at(fps: u32, latency: u32, script: Option<Script>) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .insert_resource(TimeUpdateStrategy::ManualDuration(Duration::from_secs_f64(
            1.0 / f64::from(fps),
        )))
        .add_plugins(
            DeterministicPlugin::<PackedInput>::new(CountingGame)
                .config(SessionConfig {
                    input_delay: 5,
                    clock: SessionClock::RealTime,
                    verify_predictions: true,
                    local: LocalSessionConfig {
                        latency_ticks: vec![latency],
                        known_players: vec![0],
                        ..default()
                    },
                    ..Default::default()
                })
                .players(PLAYERS as u8),
        );
    if let Some(script) = script {
        app.insert_resource(FrameScript(script)).add_systems(
            PreUpdate,
            play_script.in_set(DeterministicSet::ReadLocalInput),
        );
    }
    app
}

fn seen_verified(app: &App) -> Seen {
    let worlds = app.world().resource::<SimulationWorlds>();
    worlds.verified().resource::<Seen>().clone()
}

fn seen_predicted(app: &App) -> Seen {
    let worlds = app.world().resource::<SimulationWorlds>();
    worlds.predicted().resource::<Seen>().clone()
}

fn run(app: &mut App, frames: u32) -> SessionStats {
    for _ in 0..frames {
        app.update();
    }
    app.world().resource::<SessionStats>().clone()
}

/// 40 one-frame presses, 11 frames apart (about 2.9 ticks at 240 fps / 64 Hz, so they fall at
/// every phase of the tick), on both players.
fn forty_taps(_: u8, frame: u32) -> PackedInput {
    let tap = frame % 11 == 3 && frame < 40 * 11;
    PackedInput {
        buttons: u16::from(tap),
        axes: [0, 0],
    }
}

#[test]
fn a_one_frame_press_at_240_fps_reaches_the_simulation_exactly_once_40_of_40() {
    let mut app = app_at(240, 0, Some(forty_taps));
    let stats = run(&mut app, 600);
    assert!(stats.verified_tick >= 150, "{stats:?}");
    let seen = seen_verified(&app);
    assert_eq!(seen.presses, [40, 40], "every tap seen as a press");
    assert_eq!(seen.pressed_ticks, [40, 40], "each in exactly one tick");
    assert_eq!(seen_predicted(&app).presses, [40, 40]);
}

#[test]
fn sampling_only_the_polling_frame_loses_most_taps() {
    // The rule before latching: a tick reads the input of the frame that polls it.
    let mut app = app_at(240, 0, Some(forty_taps));
    app.insert_resource(FrameMerge::<PackedInput>(|latched, frame| {
        *latched = *frame
    }));
    run(&mut app, 600);
    let seen = seen_verified(&app);
    // 12 of 40 here; the issue measured 11 of 40 with taps at other phases.
    assert_eq!(seen.presses, [12, 12], "most taps lost");
}

#[test]
fn one_frame_presses_at_30_fps_reach_the_first_of_the_frames_ticks_once() {
    // About 2.13 ticks per frame: a frame polls 2 or 3 ticks.
    fn taps(_: u8, frame: u32) -> PackedInput {
        PackedInput {
            buttons: u16::from(frame % 5 == 2 && frame < 100),
            axes: [0, 0],
        }
    }
    let mut app = app_at(30, 0, Some(taps));
    run(&mut app, 150);
    let seen = seen_verified(&app);
    assert_eq!(seen.presses, [20, 20]);
    // The button is down in that frame, so every tick the frame polls reads it pressed.
    let per_press = f64::from(seen.pressed_ticks[0]) / 20.0;
    assert!((2.0..=3.0).contains(&per_press), "{seen:?}");
}

#[test]
fn a_held_button_is_held_and_pressed_once() {
    // Held for frames 100..=299: 200 frames = 53.3 ticks at 240 fps / 64 Hz.
    fn hold(_: u8, frame: u32) -> PackedInput {
        PackedInput {
            buttons: u16::from((100..300).contains(&frame)),
            axes: [0, 0],
        }
    }
    let mut app = app_at(240, 0, Some(hold));
    run(&mut app, 400);
    let seen = seen_verified(&app);
    assert_eq!(seen.presses, [1, 1]);
    for ticks in seen.pressed_ticks {
        assert!((53..=55).contains(&ticks), "{seen:?}");
    }
}

#[test]
fn an_axis_returns_to_neutral_when_released_and_a_one_frame_flick_is_seen_once() {
    // Axis 0 at +0.5 for frames 100..=199 (26.7 ticks), a one-frame flick to -1 at frame 300.
    fn stick(_: u8, frame: u32) -> PackedInput {
        let axis = match frame {
            100..200 => 64,
            300 => -127,
            _ => 0,
        };
        PackedInput {
            buttons: 0,
            axes: [axis, 0],
        }
    }
    let mut app = app_at(240, 0, Some(stick));
    run(&mut app, 450);
    let seen = seen_verified(&app);
    for p in 0..PLAYERS {
        assert!((26..=28).contains(&seen.positive_axis_ticks[p]), "{seen:?}");
        assert_eq!(seen.negative_axis_ticks[p], 1, "the flick, once");
        assert_eq!(seen.last_axis[p], 0, "back to neutral");
    }
    assert_eq!(seen_predicted(&app).last_axis, [0, 0]);
}

#[test]
fn latched_edges_survive_rollback_and_re_simulation() {
    // Inputs arrive 10 ticks after sampling, 5 ticks after the tick they are for: player 1's
    // are predicted by repetition, so each tap is mispredicted, rolled back and re-simulated.
    let mut app = app_at(240, 10, Some(forty_taps));
    let stats = run(&mut app, 700);
    assert!(stats.rollbacks >= 40, "{stats:?}");
    assert!(stats.resimulated_ticks > 0);
    assert!(
        stats.mispredicted_inputs >= 80,
        "a press and a release per tap"
    );
    assert_eq!(stats.resim_ticks_checked, stats.resim_ticks_matching);
    assert_eq!(seen_verified(&app).presses, [40, 40]);
    assert_eq!(seen_verified(&app).pressed_ticks, [40, 40]);
    assert_eq!(seen_predicted(&app).presses, [40, 40]);
}

#[derive(Actionlike, Clone, Copy, Debug, PartialEq, Eq, Hash, Reflect)]
enum Action {
    Jump,
    #[actionlike(DualAxis)]
    Move,
}

fn encoder() -> InputEncoder<Action> {
    InputEncoder::new()
        .button(Action::Jump, 0)
        .and_then(|e| e.dual_axis(Action::Move, 0, 1))
        .expect("valid mapping")
}

/// A leafwing-driven app and the `ActionState` entity of each local player.
fn leafwing_app(fps: u32) -> (App, [Entity; PLAYERS]) {
    let mut app = unfinished_app_at(fps, 0, None);
    app.add_plugins(LeafwingInputPlugin::new(encoder()));
    app.finish();
    app.cleanup();
    let players = [0, 1].map(|n| {
        app.world_mut()
            .spawn((LocalPlayer(n), ActionState::<Action>::default()))
            .id()
    });
    (app, players)
}

fn actions(app: &mut App, entity: Entity) -> Mut<'_, ActionState<Action>> {
    app.world_mut()
        .get_mut::<ActionState<Action>>(entity)
        .expect("an action state")
}

#[test]
fn the_leafwing_plugin_fills_local_inputs_from_real_action_states() {
    let (mut app, [p0, p1]) = leafwing_app(240);
    actions(&mut app, p1).press(&Action::Jump);
    actions(&mut app, p0).set_axis_pair(&Action::Move, Vec2::new(0.5, -1.0));
    app.update();
    let local = app.world().resource::<LocalInputs<PackedInput>>();
    assert_eq!(
        local.get(0),
        Some(&PackedInput {
            buttons: 0,
            axes: [64, -127]
        })
    );
    assert_eq!(
        local.get(1),
        Some(&PackedInput {
            buttons: 1,
            axes: [0, 0]
        })
    );
    // A despawned player entity: its player's input returns to neutral.
    app.world_mut().despawn(p1);
    app.update();
    let local = app.world().resource::<LocalInputs<PackedInput>>();
    assert_eq!(local.get(1), Some(&PackedInput::default()));
}

#[test]
fn one_frame_presses_through_leafwing_reach_the_simulation_40_of_40() {
    let (mut app, players) = leafwing_app(240);
    for frame in 1..=600u32 {
        let tap = frame % 11 == 3 && frame < 40 * 11;
        for entity in players {
            let mut state = actions(&mut app, entity);
            if tap {
                state.press(&Action::Jump);
            } else {
                state.release(&Action::Jump);
            }
        }
        app.update();
    }
    assert_eq!(seen_verified(&app).presses, [40, 40]);
    assert_eq!(seen_verified(&app).pressed_ticks, [40, 40]);
}

#[test]
fn local_players_are_every_player_of_a_local_session() {
    let mut app = app_at(240, 0, None);
    assert_eq!(
        app.world().resource::<LocalPlayers>().as_slice(),
        &[0, 1],
        "known before the first update"
    );
    app.update();
    let local = app.world().resource::<LocalPlayers>();
    assert_eq!(local.as_slice(), &[0, 1]);
    assert_eq!(
        (local.get(0), local.get(1), local.get(2)),
        (Some(0), Some(1), None)
    );
}
