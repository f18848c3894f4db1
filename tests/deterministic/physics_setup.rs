//! "Physics in the simulation worlds" (the deterministic crate's rules): what the game plugin
//! can change — gravity, the timestep's substeps, Rapier's integration parameters — takes effect
//! in both worlds, the same way, from tick 1.

use bevy::prelude::*;
use bevy_rapier3d::plugin::context::RapierContextSimulation;
use bevy_rapier3d::plugin::{RapierConfiguration, TimestepMode};
use bevy_rapier3d::prelude::*;
use simsync::deterministic::{SimulationStartup, SimulationWorlds};
use simsync::prelude::*;

use crate::common::{app_with_game, run_until_verified};

/// The ball the test watches.
#[derive(Component, Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Ball;

impl SimHash for Ball {
    fn sim_hash(&self, _hasher: &mut simsync::deterministic::StateHasher) {}
}

/// A ball 10 m up, gravity 2 m/s², 4 substeps, 8 solver iterations.
#[derive(Clone)]
struct LowGravity;

impl Plugin for LowGravity {
    fn build(&self, app: &mut App) {
        // The timestep: keep `dt` at one tick (64 Hz here); only the substeps change.
        app.insert_resource(TimestepMode::Fixed {
            dt: 1.0 / 64.0,
            substeps: 4,
        })
        .rollback_hashed_component_serde::<Ball>()
        .add_systems(SimulationStartup, (configure_rapier, spawn_ball));
    }
}

fn configure_rapier(
    mut config: Query<&mut RapierConfiguration>,
    mut simulation: Query<&mut RapierContextSimulation>,
) {
    for mut config in &mut config {
        config.gravity = Vec3::new(0.0, -2.0, 0.0);
    }
    for mut simulation in &mut simulation {
        simulation.integration_parameters.num_solver_iterations = 8;
    }
}

fn spawn_ball(mut sim: SimCommands) {
    sim.spawn((
        Ball,
        RigidBody::Dynamic,
        Collider::ball(0.5),
        Transform::from_xyz(0.0, 10.0, 0.0),
        Velocity::zero(),
    ))
    .expect("slot");
}

fn ball_height(world: &mut World) -> f32 {
    let mut q = world.query_filtered::<&Transform, With<Ball>>();
    q.single(world).expect("one ball").translation.y
}

#[test]
fn gravity_substeps_and_integration_parameters_set_by_the_game_apply_in_both_worlds() {
    let mut app = app_with_game(LowGravity, 1, 3, |p| p);
    run_until_verified(&mut app, 64);
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    for predicted in [false, true] {
        let world = if predicted {
            worlds.predicted_mut()
        } else {
            worlds.verified_mut()
        };
        let gravity = world
            .query::<&RapierConfiguration>()
            .single(world)
            .expect("context")
            .gravity;
        assert_eq!(gravity, Vec3::new(0.0, -2.0, 0.0));
        let iterations = world
            .query::<&RapierContextSimulation>()
            .single(world)
            .expect("context")
            .integration_parameters
            .num_solver_iterations;
        assert_eq!(iterations, 8);
        assert!(matches!(
            *world.resource::<TimestepMode>(),
            TimestepMode::Fixed { substeps: 4, .. }
        ));
    }
    // One second at 2 m/s² from rest: about 1 m down (9.81 m/s² would be about 4.9 m).
    let verified = worlds.verified_mut();
    let y = ball_height(verified);
    assert!((8.9..=9.1).contains(&y), "the ball fell to {y}");
}

/// What a world's game systems saw: (schedule, tick, player 0's input is the default).
#[derive(Resource, Default, Clone)]
struct Seen(Vec<(&'static str, i32, bool)>);

#[derive(Clone)]
struct Watcher;

impl Plugin for Watcher {
    fn build(&self, app: &mut App) {
        app.init_resource::<Seen>()
            .add_systems(
                SimulationStartup,
                |tick: Res<SimTick>,
                 inputs: Res<PlayerInputs<PackedInput>>,
                 mut seen: ResMut<Seen>| {
                    seen.0.push((
                        "startup",
                        tick.0,
                        inputs.get(0) == Some(&PackedInput::default()),
                    ));
                },
            )
            .add_systems(
                SimulationTick,
                (|tick: Res<SimTick>,
                  inputs: Res<PlayerInputs<PackedInput>>,
                  mut seen: ResMut<Seen>| {
                    seen.0.push((
                        "tick",
                        tick.0,
                        inputs.get(0) == Some(&PackedInput::default()),
                    ));
                })
                .in_set(simsync::deterministic::SimulationSet::Game),
            );
    }
}

#[test]
fn setup_and_one_simulation_tick_run_as_tick_0_with_default_inputs_and_no_checksum() {
    let mut app = app_with_game(Watcher, 1, 0, |p| p);
    // Player 0 presses button 3 from tick 1 on: tick 0's input is the default one anyway.
    let mut pressed = PackedInput::default();
    pressed.set_pressed(3, true).expect("bit 3");
    app.insert_resource(TickInputSource::new(move |_, _| pressed));
    run_until_verified(&mut app, 3);
    let worlds = app.world().resource::<SimulationWorlds>();
    let seen = worlds.verified().resource::<Seen>().0.clone();
    assert_eq!(
        seen[..4],
        [
            ("startup", 0, true),
            ("tick", 0, true),
            ("tick", 1, false),
            ("tick", 2, false)
        ],
        "{seen:?}"
    );
    let first_checksum = app.world().resource::<SessionStats>().checksum_history[0].tick;
    assert_eq!(first_checksum, 1, "tick 0 has no checksum");
}
