//! An entity spawned before a physics scene shifts every body's entity index (and, when it is a
//! body, every Rapier handle); the scene's trajectories stay the same bit for bit
//! ([rule](simsync::deterministic::rules#entity-indices-never-reach-the-simulation)).

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync::deterministic::{SessionMode, SimulationWorlds};
use simsync::prelude::*;

use crate::common;

/// What the scene spawns before its bodies.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lead {
    /// Nothing: the bodies take the first slots.
    Nothing,
    /// A simulation entity with only a `Transform` (no Rapier component).
    PlainTransform,
    /// A dynamic ball 500 m away from the scene (never touches it).
    FarBall,
}

/// A body of the scene and its number (spawn order among the scene's bodies).
#[derive(Component, Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Body(u32);

/// Boxes of the pile; the ball is body `BOXES`.
const BOXES: u32 = 27;

/// The scene: a ground, a 3×3×3 pile of touching boxes (contacts from tick 1) and a ball
/// thrown down onto it, pushed by player 0's scripted input (so the session mispredicts and rolls
/// back).
#[derive(Clone, Resource, Debug)]
struct PileScene(Lead);

impl Plugin for PileScene {
    fn build(&self, app: &mut App) {
        app.insert_resource(self.clone())
            .rollback_component_serde::<Body>()
            .add_systems(SimulationStartup, spawn_pile)
            .add_systems(SimulationTick, push_ball.in_set(SimulationSet::Game));
    }
}

fn spawn_pile(mut sim: SimCommands, scene: Res<PileScene>) {
    match scene.0 {
        Lead::Nothing => {}
        Lead::PlainTransform => {
            sim.spawn(Transform::from_xyz(3.0, 0.0, 0.0)).expect("slot");
        }
        Lead::FarBall => {
            sim.spawn((
                RigidBody::Dynamic,
                Collider::ball(0.5),
                Transform::from_xyz(500.0, 0.5, 500.0),
                Velocity::zero(),
            ))
            .expect("slot");
        }
    }
    sim.spawn((
        RigidBody::Fixed,
        Collider::cuboid(40.0, 0.5, 40.0),
        Transform::from_xyz(0.0, -0.5, 0.0),
    ))
    .expect("slot");
    for n in 0..BOXES {
        let (x, y, z) = ((n % 3) as f32, (n / 9) as f32, ((n / 3) % 3) as f32);
        sim.spawn((
            RigidBody::Dynamic,
            Collider::cuboid(0.5, 0.5, 0.5),
            Transform::from_xyz(x, 0.5 + y, z),
            Velocity::zero(),
            Sleeping::default(),
            Body(n),
        ))
        .expect("slot");
    }
    sim.spawn((
        RigidBody::Dynamic,
        Collider::ball(0.6),
        Transform::from_xyz(0.3, 7.0, 0.8),
        Velocity::linear(Vec3::new(1.5, -4.0, 0.4)),
        ExternalImpulse::default(),
        Body(BOXES),
    ))
    .expect("slot");
}

fn push_ball(
    inputs: Res<PlayerInputs<PackedInput>>,
    mut balls: Query<&mut ExternalImpulse, With<Body>>,
) {
    let Some(input) = inputs.get(0) else {
        return;
    };
    for mut impulse in &mut balls {
        impulse.impulse = Vec3::new(input.axis(0), 0.0, input.axis(1)) * 0.05;
    }
}

/// One run: the verified positions of the scene's bodies (by `Body` number) at every tick
/// 1..=`ticks`, the presented (predicted) positions after every update, and the entity index
/// of body 0.
struct Run {
    verified: Vec<Vec<Vec3>>,
    presented: Vec<Vec<Vec3>>,
    first_index: u32,
}

/// The scene's bodies in `world`, by `Body` number, and body 0's entity index.
fn positions(world: &World) -> (Vec<Vec3>, u32) {
    let mut q = world
        .try_query::<(Entity, &Body, &Transform)>()
        .expect("registered");
    let mut bodies: Vec<(u32, Entity, Vec3)> = q
        .iter(world)
        .map(|(e, b, t)| (b.0, e, t.translation))
        .collect();
    bodies.sort_by_key(|(n, _, _)| *n);
    let first = bodies.first().map_or(u32::MAX, |(_, e, _)| e.index_u32());
    (bodies.into_iter().map(|(_, _, p)| p).collect(), first)
}

/// Runs the scene after `lead` in a predicted session with inputs 3 ticks late (every verified
/// tick rolls back) until the verified tick reaches `ticks`.
fn run(lead: Lead, ticks: usize) -> Run {
    let mut app = common::app_with_game(PileScene(lead), 1, 3, |p| {
        p.edit_config(|c| {
            c.mode = SessionMode::Predicted;
        })
    });
    let mut out = Run {
        verified: Vec::new(),
        presented: Vec::new(),
        first_index: 0,
    };
    for _ in 0..(2 * ticks + 50) {
        app.update();
        let worlds = app.world().resource::<SimulationWorlds>();
        let tick = worlds.verified().resource::<SimTick>().0;
        if tick as usize > out.verified.len() {
            assert_eq!(tick as usize, out.verified.len() + 1, "one tick per update");
            let (verified, first) = positions(worlds.verified());
            out.verified.push(verified);
            out.first_index = first;
        }
        out.presented.push(positions(worlds.predicted()).0);
        if out.verified.len() >= ticks {
            assert!(
                common::stats(&app).rollbacks > 100,
                "the session rolled back"
            );
            return out;
        }
    }
    panic!("verified tick never reached {ticks}");
}

/// The first index (1-based tick or update) whose positions differ in any bit, and the largest
/// distance between the same body's positions at index `at`.
fn compare(a: &[Vec<Vec3>], b: &[Vec<Vec3>], at: usize) -> (Option<usize>, f32) {
    let bits = |p: &Vec3| p.to_array().map(f32::to_bits);
    let first = a
        .iter()
        .zip(b)
        .position(|(x, y)| x.len() != y.len() || x.iter().zip(y).any(|(p, q)| bits(p) != bits(q)))
        .map(|i| i + 1);
    let dist = a[at - 1]
        .iter()
        .zip(&b[at - 1])
        .map(|(p, q)| p.distance(*q))
        .fold(0.0f32, f32::max);
    (first, dist)
}

/// Runs the scene without and after `lead` for 300 ticks; every verified tick and every
/// presented frame must hold the same positions bit for bit.
fn assert_same_trajectories(lead: Lead) {
    let base = run(Lead::Nothing, 300);
    let shifted = run(lead, 300);
    // The lead really moved every body's entity index...
    assert_eq!(shifted.first_index, base.first_index + 1);
    // ...and the scene really moves: the ball bounces off the pile and pushes boxes (measured:
    // ball 10.3 m, pile up to 6.7 cm between ticks 1 and 300).
    let moved = |n: usize| base.verified[0][n].distance(base.verified[299][n]);
    assert!(
        moved(BOXES as usize) > 5.0,
        "ball moved {}",
        moved(BOXES as usize)
    );
    let pile = (0..BOXES as usize).map(moved).fold(0.0f32, f32::max);
    assert!(pile > 0.03, "the pile moved {pile} m");
    let verified = compare(&base.verified, &shifted.verified, 300);
    assert_eq!(
        verified,
        (None, 0.0),
        "first differing tick, distance at 300"
    );
    let frames = base.presented.len().min(shifted.presented.len());
    let presented = compare(&base.presented, &shifted.presented, frames);
    assert_eq!(
        presented,
        (None, 0.0),
        "first differing frame, distance at the last"
    );
}

#[test]
fn a_plain_transform_entity_spawned_first_changes_no_trajectory() {
    assert_same_trajectories(Lead::PlainTransform);
}

#[test]
fn a_far_away_ball_spawned_first_changes_no_trajectory() {
    assert_same_trajectories(Lead::FarBall);
}
