//! The bench's scenes, built twice from the same bundles: as a simsync game (spawned with
//! `SimCommands`, pushers driven by the session's inputs) and as a plain Bevy world (same Rapier
//! configuration, schedule and executor as `SimulationTick`, no session), whose tick is the
//! baseline `b`.

use bevy::ecs::schedule::{ScheduleLabel, SingleThreadedExecutor};
use bevy::prelude::*;
use bevy::transform::TransformSystems;
use bevy::transform::systems::{
    mark_dirty_trees, propagate_parent_transforms, sync_simple_transforms,
};
use bevy_rapier3d::prelude::*;
use simsync::prelude::*;

use super::common::scripted_input;

/// What a scene holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Zero-g balls in a closed box, never sleeping: every body changes every tick.
    Gas,
    /// Piles of 5×5×2 boxes resting on the ground (sleeping on), two pushers.
    Pile,
    /// Plain entities with two registered components (`Pos`, `Vel`), no physics.
    Plain,
}

/// A scene of `n` bodies (or plain entities).
#[derive(Clone, Copy, Debug, Resource)]
pub struct Scene {
    pub kind: Kind,
    pub n: u32,
}

/// A plain entity's position (registered for rollback).
#[derive(Component, Clone, Copy, Debug, PartialEq)]
pub struct Pos(pub Vec3);

/// A plain entity's velocity (registered for rollback).
#[derive(Component, Clone, Copy, Debug, PartialEq)]
pub struct Vel(pub Vec3);

/// One of the two pushers driven by player inputs.
#[derive(Component, Clone, Copy, Debug, PartialEq)]
pub struct Pusher(pub u8);

type Body = (
    RigidBody,
    Collider,
    Transform,
    Velocity,
    Sleeping,
    Restitution,
    Friction,
);

/// The fixed bodies of the scene (ground or walls).
fn fixed(scene: Scene) -> Vec<(Collider, Transform)> {
    match scene.kind {
        Kind::Plain => Vec::new(),
        Kind::Pile => {
            let half = columns(scene.n) as f32 * 8.0 + 24.0;
            vec![(
                Collider::cuboid(half, 0.5, half),
                Transform::from_xyz(0.0, -0.5, 0.0),
            )]
        }
        Kind::Gas => {
            let h = gas_half(scene.n) + 0.5;
            let wall = |x: f32, y: f32, z: f32, e: Vec3| {
                (
                    Collider::cuboid(e.x, e.y, e.z),
                    Transform::from_xyz(x, y, z),
                )
            };
            let (a, t) = (h + 1.0, 0.5);
            vec![
                wall(-h - t, 0.0, 0.0, Vec3::new(t, a, a)),
                wall(h + t, 0.0, 0.0, Vec3::new(t, a, a)),
                wall(0.0, -h - t, 0.0, Vec3::new(a, t, a)),
                wall(0.0, h + t, 0.0, Vec3::new(a, t, a)),
                wall(0.0, 0.0, -h - t, Vec3::new(a, a, t)),
                wall(0.0, 0.0, h + t, Vec3::new(a, a, t)),
            ]
        }
    }
}

fn columns(n: u32) -> u32 {
    let piles = n.div_ceil(50).max(1);
    (piles as f32).sqrt().ceil() as u32
}

/// Half the side of the gas box: balls on a grid of spacing 1.5.
fn gas_half(n: u32) -> f32 {
    let side = (n.max(1) as f32).cbrt().ceil();
    side * 0.75 + 1.0
}

/// A deterministic pseudo-random number in [-1, 1] from `n` and `salt`.
fn unit(n: u32, salt: u32) -> f32 {
    let h = (n ^ salt.wrapping_mul(0x85eb_ca6b))
        .wrapping_mul(0x9e37_79b9)
        .rotate_left(13)
        .wrapping_mul(0xc2b2_ae35);
    (h >> 8) as f32 / (1u32 << 23) as f32 - 1.0
}

/// The dynamic bodies of the scene.
fn bodies(scene: Scene) -> Vec<Body> {
    match scene.kind {
        Kind::Plain => Vec::new(),
        Kind::Pile => {
            let cols = columns(scene.n);
            (0..scene.n)
                .map(|n| {
                    let (pile, i) = (n / 50, n % 50);
                    let (layer, col) = (i / 25, i % 25);
                    let x = (pile % cols) as f32 * 8.0 - 12.0 + (col % 5) as f32;
                    let z = (pile / cols) as f32 * 8.0 - 4.0 + (col / 5) as f32;
                    (
                        RigidBody::Dynamic,
                        Collider::cuboid(0.5, 0.5, 0.5),
                        Transform::from_xyz(x, 0.5 + layer as f32, z),
                        Velocity::zero(),
                        Sleeping::default(),
                        Restitution::default(),
                        Friction::default(),
                    )
                })
                .collect()
        }
        Kind::Gas => {
            let side = (scene.n.max(1) as f32).cbrt().ceil() as u32;
            let start = -(side as f32 - 1.0) * 0.75;
            (0..scene.n)
                .map(|n| {
                    let (x, y, z) = (n % side, (n / side) % side, n / (side * side));
                    let at = Vec3::new(x as f32, y as f32, z as f32) * 1.5 + Vec3::splat(start);
                    let v = Vec3::new(unit(n, 1), unit(n, 2), unit(n, 3)) * 2.0;
                    (
                        RigidBody::Dynamic,
                        Collider::ball(0.25),
                        Transform::from_translation(at),
                        Velocity::linear(v),
                        Sleeping::disabled(),
                        Restitution::coefficient(1.0),
                        Friction::coefficient(0.0),
                    )
                })
                .collect()
        }
    }
}

type PusherBody = (
    RigidBody,
    Collider,
    Transform,
    Velocity,
    ExternalImpulse,
    Ccd,
    Pusher,
);

fn pusher(scene: Scene, p: u8) -> PusherBody {
    let at = match scene.kind {
        Kind::Gas => Vec3::new(f32::from(p) * 0.5 - 0.25, gas_half(scene.n) - 0.6, 0.0),
        _ => Vec3::new(-16.0 + f32::from(p) * 3.0, 0.6, -8.0),
    };
    (
        RigidBody::Dynamic,
        Collider::ball(0.6),
        Transform::from_translation(at),
        Velocity::zero(),
        ExternalImpulse::default(),
        Ccd::enabled(),
        Pusher(p),
    )
}

fn gravity(scene: Scene, configs: &mut Query<&mut RapierConfiguration>) {
    if scene.kind == Kind::Gas {
        for mut config in configs.iter_mut() {
            config.gravity = Vec3::ZERO;
        }
    }
}

/// The impulse of a pusher for its input and the previous one.
fn impulse(input: &PackedInput, previous: &PackedInput) -> Vec3 {
    let mut j = Vec3::new(input.axis(0), 0.0, input.axis(1)) * 0.08;
    if input.just_pressed(previous, 0) {
        j.y += 2.0;
    }
    j
}

fn plain_motion(mut q: Query<(&mut Pos, &Vel)>) {
    for (mut pos, vel) in &mut q {
        pos.0 += vel.0 / 64.0;
    }
}

impl Plugin for Scene {
    fn build(&self, app: &mut App) {
        app.insert_resource(*self)
            .rollback_component::<Pos>()
            .rollback_component::<Vel>()
            .rollback_component::<Pusher>()
            .add_systems(SimulationStartup, spawn_simulated)
            .add_systems(
                SimulationTick,
                (drive_simulated, plain_motion)
                    .chain()
                    .in_set(SimulationSet::Game),
            );
    }
}

fn spawn_simulated(
    mut sim: SimCommands,
    scene: Res<Scene>,
    mut configs: Query<&mut RapierConfiguration>,
) {
    gravity(*scene, &mut configs);
    for f in fixed(*scene) {
        sim.spawn((RigidBody::Fixed, f.0, f.1)).expect("slot");
    }
    for b in bodies(*scene) {
        sim.spawn(b).expect("slot");
    }
    if scene.kind == Kind::Plain {
        for n in 0..scene.n {
            let v = Vec3::new(unit(n, 1), unit(n, 2), unit(n, 3));
            sim.spawn((Pos(v * 10.0), Vel(v))).expect("slot");
        }
        return;
    }
    for p in 0..2 {
        sim.spawn(pusher(*scene, p)).expect("slot");
    }
}

fn drive_simulated(
    inputs: Res<PlayerInputs<PackedInput>>,
    mut pushers: Query<(&Pusher, &mut ExternalImpulse)>,
) {
    for (pusher, mut j) in &mut pushers {
        if let (Some(input), Some(prev)) = (inputs.get(pusher.0), inputs.previous(pusher.0)) {
            j.impulse = impulse(input, prev);
        }
    }
}

/// The plain world's tick schedule (the same systems `SimulationTick` holds, minus simsync's).
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlainTick;

/// The plain world's tick counter (the scripted inputs' tick).
#[derive(Resource, Default)]
struct PlainTickCount(i32);

/// A plain Bevy world holding `scene`: Rapier in [`PlainTick`] with a fixed one-tick timestep
/// and one substep, single-threaded executor, transform propagation; no session.
pub fn plain_world(scene: Scene) -> App {
    let mut app = App::new();
    app.insert_resource(Time::<()>::default())
        .insert_resource(TimestepMode::Fixed {
            dt: 1.0 / 64.0,
            substeps: 1,
        })
        .insert_resource(scene)
        .init_resource::<PlainTickCount>();
    let mut tick = Schedule::new(PlainTick);
    tick.set_executor(SingleThreadedExecutor::new());
    app.add_schedule(tick);
    app.add_plugins((
        bevy::transform::TransformPlugin,
        RapierPhysicsPlugin::<NoUserData>::default().in_schedule(PlainTick),
    ));
    app.configure_sets(PlainTick, PlainSet.before(PhysicsSet::SyncBackend));
    app.add_systems(
        PlainTick,
        (
            mark_dirty_trees,
            propagate_parent_transforms,
            sync_simple_transforms,
        )
            .chain()
            .in_set(TransformSystems::Propagate),
    );
    app.add_systems(
        PlainTick,
        (drive_plain, plain_motion).chain().in_set(PlainSet),
    );
    app.add_systems(Startup, spawn_plain);
    app.finish();
    app.cleanup();
    for label in [PreStartup.intern(), Startup.intern(), PostStartup.intern()] {
        let _ = app.world_mut().try_run_schedule(label);
    }
    app
}

/// The plain world's game systems.
#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
struct PlainSet;

/// One plain tick: advance `Time` by one tick and run [`PlainTick`].
pub fn plain_tick(app: &mut App) {
    let world = app.world_mut();
    world.resource_mut::<PlainTickCount>().0 += 1;
    world
        .resource_mut::<Time>()
        .advance_by(std::time::Duration::from_nanos(15_625_000));
    world.run_schedule(PlainTick);
    world.clear_trackers();
}

fn spawn_plain(
    mut commands: Commands,
    scene: Res<Scene>,
    mut configs: Query<&mut RapierConfiguration>,
) {
    gravity(*scene, &mut configs);
    for f in fixed(*scene) {
        commands.spawn((RigidBody::Fixed, f.0, f.1));
    }
    for b in bodies(*scene) {
        commands.spawn(b);
    }
    if scene.kind == Kind::Plain {
        for n in 0..scene.n {
            let v = Vec3::new(unit(n, 1), unit(n, 2), unit(n, 3));
            commands.spawn((Pos(v * 10.0), Vel(v)));
        }
        return;
    }
    for p in 0..2 {
        commands.spawn(pusher(*scene, p));
    }
}

fn drive_plain(tick: Res<PlainTickCount>, mut pushers: Query<(&Pusher, &mut ExternalImpulse)>) {
    for (pusher, mut j) in &mut pushers {
        let input = scripted_input(pusher.0, tick.0);
        let prev = scripted_input(pusher.0, tick.0 - 1);
        j.impulse = impulse(&input, &prev);
    }
}
