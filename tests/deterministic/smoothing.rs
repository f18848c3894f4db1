//! `VisualSmoothingPlugin`: presenting the predicted world in the main app never changes the
//! simulation; without rollbacks, and at zero latency where every update is a rollback that
//! changes nothing, the presented transform is the simulated one; a planted correction decays
//! within the configured time.

use std::time::Duration;

use bevy::prelude::*;
use bevy::time::TimeUpdateStrategy;
use simsync::deterministic::{LocalSessionConfig, SessionClock, TickInputSource};
use simsync::deterministic::{SimTick, TickPose, VisualSmoothing};
use simsync::prelude::*;
use simsync::time::TickRate;
use simsync::{PresentedSimEntity, VisualSmoothingConfig, VisualSmoothingPlugin};

use crate::common::{Crate, PlayerBodies, TestGame, scripted_input};

const FRAME: Duration = Duration::from_millis(16);

/// Player 0 (local, its inputs known at once) pushes right all the time; player 1 (remote,
/// predicted) never does anything: every prediction holds.
fn constant_input(player: u8, _tick: i32) -> PackedInput {
    let mut input = PackedInput::default();
    if player == 0 {
        input.set_axis(0, 1.0).expect("valid slot");
    }
    input
}

/// A local session of 2 players whose inputs arrive 4 ticks late, rollback skipped when the
/// predictions held, frames of exactly 16 ms; with the smoothing plugin if `smoothing` is set.
fn app(smoothing: Option<VisualSmoothingConfig>) -> App {
    app_with(smoothing, 4, constant_input)
}

/// [`app`] with player 1's inputs `latency` ticks late and inputs from `input`.
fn app_with(
    smoothing: Option<VisualSmoothingConfig>,
    latency: u32,
    input: fn(u8, i32) -> PackedInput,
) -> App {
    let game = TestGame {
        boxes: 20,
        ..TestGame::default()
    };
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .insert_resource(TimeUpdateStrategy::ManualDuration(FRAME))
        .add_plugins(
            DeterministicPlugin::<PackedInput>::new(game)
                .config(SessionConfig {
                    checksum_interval: 1,
                    skip_rollback_when_predictions_hold: true,
                    clock: SessionClock::Stepped {
                        ticks_per_update: 1,
                    },
                    local: LocalSessionConfig {
                        latency_ticks: vec![latency],
                        jitter_ticks: 0,
                        seed: 3,
                        known_players: vec![0],
                    },
                    ..Default::default()
                })
                .players(2),
        )
        .insert_resource(TickInputSource::new(input));
    if let Some(config) = smoothing {
        app.add_plugins(VisualSmoothingPlugin::default().config(config));
    }
    app.finish();
    app.cleanup();
    app
}

/// A main-app entity presenting player 0's body (after the first update built the worlds).
fn present_player(app: &mut App) -> (Entity, Entity) {
    app.update();
    let sim = app
        .world()
        .resource::<SimulationWorlds>()
        .predicted()
        .resource::<PlayerBodies>()
        .0[0];
    let presenter = app.world_mut().spawn(PresentedSimEntity::new(sim)).id();
    (presenter, sim)
}

fn simulated(app: &App, sim: Entity) -> Transform {
    *app.world()
        .resource::<SimulationWorlds>()
        .predicted()
        .get::<Transform>(sim)
        .expect("simulated body")
}

fn no_interpolation() -> VisualSmoothingConfig {
    VisualSmoothingConfig {
        interpolate: false,
        ..default()
    }
}

#[test]
fn with_identical_inputs_nothing_rolls_back_and_the_presented_transform_is_the_simulated_one() {
    let mut app = app(Some(no_interpolation()));
    let (presenter, sim) = present_player(&mut app);
    let start = simulated(&app, sim);
    for frame in 0..200 {
        app.update();
        let shown = *app.world().get::<Transform>(presenter).expect("presenter");
        assert_eq!(shown, simulated(&app, sim), "frame {frame}");
    }
    let stats = app.world().resource::<SessionStats>();
    assert_eq!(stats.rollbacks, 0, "{stats:?}");
    assert!(stats.verified_tick > 150, "{stats:?}");
    // The body moved: the comparison was not of two resting poses.
    assert!(simulated(&app, sim).translation.distance(start.translation) > 0.5);
}

#[test]
fn a_planted_one_metre_correction_decays_below_a_centimetre_in_time_and_never_touches_checksums() {
    let config = no_interpolation();
    let mut smoothed = app(Some(config));
    let mut plain = app(None);
    let (presenter, sim) = present_player(&mut smoothed);
    plain.update();
    smoothed.update();
    plain.update();
    smoothed
        .world_mut()
        .get_mut::<PresentedSimEntity>(presenter)
        .expect("presenter")
        .smoothing
        .add_correction(Vec3::X);
    let deadline = config.time_to_decay(1.0, 0.01);
    let frames = deadline.as_nanos().div_ceil(FRAME.as_nanos()) as u32;
    let mut offsets = Vec::new();
    for _ in 0..frames {
        smoothed.update();
        plain.update();
        let shown = *smoothed
            .world()
            .get::<Transform>(presenter)
            .expect("presenter");
        offsets.push(
            shown
                .translation
                .distance(simulated(&smoothed, sim).translation),
        );
    }
    // Presented at first about 1 m off, decreasing every frame, below 1 cm by the deadline.
    assert!(offsets[0] > 0.8, "{offsets:?}");
    assert!(offsets.windows(2).all(|w| w[1] < w[0]), "{offsets:?}");
    assert!(*offsets.last().unwrap() < 0.01, "{offsets:?}");
    // The simulation never saw it: same ticks, same checksums as without smoothing.
    let a = smoothed.world().resource::<SessionStats>();
    let b = plain.world().resource::<SessionStats>();
    assert!(a.checksum_history.len() > 20);
    assert_eq!(a.checksum_history, b.checksum_history);
    assert_eq!(simulated(&smoothed, sim), simulated(&plain, sim));
}

/// Every simulation body of the predicted world: both balls and every box.
fn bodies(app: &mut App) -> Vec<Entity> {
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let predicted = worlds.predicted_mut();
    let mut sims = predicted.resource::<PlayerBodies>().0.clone();
    let mut crates = predicted.query_filtered::<Entity, With<Crate>>();
    sims.extend(crates.iter(predicted));
    sims
}

/// What taking every rollback as a correction (the rule a turn ago) would show this frame:
/// `shadows` (one per body of `sims`) presented as the plugin did then; the largest offset
/// from the simulated pose, metres.
fn every_rollback_as_a_correction(
    app: &App,
    sims: &[Entity],
    shadows: &mut [VisualSmoothing],
    rolled_back: bool,
) -> f32 {
    let tick_duration = app.world().resource::<TickRate>().tick_duration();
    let worlds = app.world().resource::<SimulationWorlds>();
    let tick = worlds.predicted().resource::<SimTick>().0;
    let mut offset = 0.0f32;
    for (shadow, sim) in shadows.iter_mut().zip(sims) {
        let pose = TickPose {
            tick,
            transform: simulated(app, *sim),
        };
        let shown = shadow.present(&no_interpolation(), pose, rolled_back, FRAME, tick_duration);
        offset = offset.max(shown.translation.distance(pose.transform.translation));
    }
    offset
}

/// Whether any presenter of `presenters` (presenter, simulation entity) shows a pose other than
/// the simulated one, or holds a correction.
fn any_off(app: &App, presenters: &[(Entity, Entity)]) -> bool {
    presenters.iter().any(|(presenter, sim)| {
        let shown = *app.world().get::<Transform>(*presenter).expect("presenter");
        let smoothing = app
            .world()
            .get::<PresentedSimEntity>(*presenter)
            .expect("presenter")
            .smoothing;
        shown != simulated(app, *sim) || smoothing.correction() != Vec3::ZERO
    })
}

#[test]
fn at_zero_latency_every_update_advances_and_the_presented_pose_is_the_simulated_one() {
    let mut app = app_with(Some(no_interpolation()), 0, scripted_input);
    app.update();
    // Both balls (pushed by inputs that change every 7-30 ticks) and every box.
    let sims = bodies(&mut app);
    assert_eq!(sims.len(), 22);
    let presenters: Vec<(Entity, Entity)> = sims
        .iter()
        .map(|sim| {
            let presenter = app.world_mut().spawn(PresentedSimEntity::new(*sim)).id();
            (presenter, *sim)
        })
        .collect();
    let start: Vec<Transform> = sims.iter().map(|sim| simulated(&app, *sim)).collect();
    // Beside the plugin, the rule a turn ago, to prove the scenario invented corrections.
    let mut shadows = vec![VisualSmoothing::default(); sims.len()];
    // The rule a turn ago also took every shared advance for a rollback.
    let restarts = |s: &SessionStats| s.rollbacks + s.shared_advances;
    let mut seen_rollbacks = restarts(app.world().resource::<SessionStats>());
    let (mut shadow_off_frames, mut shadow_max) = (0, 0.0f32);
    for frame in 0..600 {
        app.update();
        assert!(
            !any_off(&app, &presenters),
            "frame {frame}: a presented pose is off the simulated one"
        );
        let rollbacks = restarts(app.world().resource::<SessionStats>());
        let rolled_back = std::mem::replace(&mut seen_rollbacks, rollbacks) != rollbacks;
        let offset = every_rollback_as_a_correction(&app, &sims, &mut shadows, rolled_back);
        shadow_off_frames += u32::from(offset > 0.0);
        shadow_max = shadow_max.max(offset);
    }
    println!(
        "every rollback taken as a correction: {shadow_off_frames} of 600 frames off, up to \
         {shadow_max} m"
    );
    assert!(shadow_off_frames > 500, "{shadow_off_frames}");
    let stats = app.world().resource::<SessionStats>();
    // Every update verified the tick it polled and took the verified timeline without a
    // copy: no rollback, and nothing changed a state.
    assert!(stats.shared_advances >= 590, "{stats:?}");
    assert_eq!(stats.rollbacks, 0, "{stats:?}");
    assert_eq!(stats.mispredicted_inputs, 0, "{stats:?}");
    assert_eq!(stats.corrective_rollbacks, 0, "{stats:?}");
    // The bodies moved: the comparison was not of resting poses.
    let moved = sims
        .iter()
        .zip(&start)
        .filter(|(sim, start)| {
            simulated(&app, **sim)
                .translation
                .distance(start.translation)
                > 0.5
        })
        .count();
    assert!(moved >= 2, "{moved} bodies moved");
}
