//! The hybrid tests' game, shared with `benches/hybrid.rs`: a ground and one ball avatar per
//! player (a [`RollbackBody`]) pushed by the input's axes, and props in the App's own world
//! moved by a script, standing in for an owner's physics.

#![allow(dead_code)] // the bench uses part of it

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use serde::{Deserialize, Serialize};
use simsync::hybrid::{
    AvatarOf, HybridConfig, HybridInput, OwnedProp, PropOwnedHere, RollbackBody,
};
use simsync::ownership::{BodyId, BodyNetId};
use simsync::prelude::*;

/// The hybrid tests' input.
pub type Input = HybridInput<PackedInput>;

/// The players' game: a ground and one ball avatar per player ([`AvatarOf`] it), pushed by the
/// input's axes.
#[derive(Clone)]
pub struct Arena {
    pub players: u8,
}

/// Each player's avatar.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Avatars(pub Vec<Entity>);

/// Player `player`'s input at `tick`: walks a square, each player at its own pace.
pub fn wander(player: u8, tick: i32) -> PackedInput {
    let mut input = PackedInput::default();
    let phase = (tick / (20 + 7 * i32::from(player))) % 4;
    let (x, z) = [(1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0)][phase as usize];
    input.set_axis(0, x).expect("slot");
    input.set_axis(1, z).expect("slot");
    input
}

/// Where player `p`'s avatar starts.
pub fn avatar_start(p: u8) -> Vec3 {
    Vec3::new(-5.0 + 5.0 * f32::from(p), 0.6, 0.0)
}

impl Plugin for Arena {
    fn build(&self, app: &mut App) {
        let players = self.players;
        app.rollback_resource_serde::<Avatars>()
            .add_systems(SimulationStartup, move |mut sim: SimCommands| {
                sim.spawn((
                    RigidBody::Fixed,
                    Collider::cuboid(40.0, 0.5, 40.0),
                    Transform::from_xyz(0.0, -0.5, 0.0),
                ))
                .expect("slot");
                let avatars = (0..players)
                    .map(|p| {
                        sim.spawn((
                            RollbackBody,
                            AvatarOf(p),
                            RigidBody::Dynamic,
                            Collider::ball(0.6),
                            Transform::from_translation(avatar_start(p)),
                            Velocity::zero(),
                            ExternalImpulse::default(),
                            Sleeping::disabled(),
                        ))
                        .expect("slot")
                    })
                    .collect();
                sim.commands.insert_resource(Avatars(avatars));
            })
            .add_systems(SimulationTick, drive.in_set(SimulationSet::Game));
    }
}

/// Pushes each avatar by its player's axes.
pub fn drive(
    inputs: Res<PlayerInputs<Input>>,
    avatars: Res<Avatars>,
    mut impulses: Query<&mut ExternalImpulse>,
) {
    for (p, avatar) in avatars.0.iter().enumerate() {
        let Some(input) = inputs.get(p as u8) else {
            continue;
        };
        if let Ok(mut impulse) = impulses.get_mut(*avatar) {
            impulse.impulse = Vec3::new(input.input.axis(0), 0.0, input.input.axis(1)) * 0.05;
        }
    }
}

/// The hybrid configuration of the tests: 8 proxies, 0.3 m balls.
pub fn config() -> HybridConfig {
    HybridConfig {
        proxy_slots: 8,
        shapes: vec![Collider::ball(0.3)],
        ..default()
    }
}

/// How a scripted prop moves in its owner's world, by tick.
#[derive(Component, Clone, Copy)]
pub enum Script {
    /// Circles `center` at `radius` m, one turn per `period` ticks.
    Circle {
        center: Vec3,
        radius: f32,
        period: f32,
    },
    /// Rests at `from` until tick `at`, then flies at `velocity` (m/s).
    Throw { from: Vec3, at: u32, velocity: Vec3 },
}

impl Script {
    fn pose(self, tick: u32) -> (Vec3, Vec3) {
        let frame = tick;
        match self {
            Script::Circle {
                center,
                radius,
                period,
            } => {
                let w = std::f32::consts::TAU / period * 64.0;
                let a = frame as f32 / 64.0 * w;
                let pos = center + radius * Vec3::new(a.cos(), 0.0, a.sin());
                let vel = radius * w * Vec3::new(-a.sin(), 0.0, a.cos());
                (pos, vel)
            }
            Script::Throw { from, at, velocity } => {
                let t = frame.saturating_sub(at) as f32 / 64.0;
                let v = if frame >= at { velocity } else { Vec3::ZERO };
                (from + velocity * t, v)
            }
        }
    }
}

/// Moves the scripted props to where they are at the tick this frame's input is for.
pub fn move_props(
    session: Res<DeterministicSession<Input>>,
    mut props: Query<(&Script, &mut Transform, &mut Velocity)>,
) {
    let tick = u32::try_from(session.next_input_tick()).unwrap_or(0);
    for (script, mut transform, mut velocity) in &mut props {
        let (pos, vel) = script.pose(tick);
        transform.translation = pos;
        velocity.linear = vel;
    }
}

/// Spawns the props in a client's own world; `owned_here` says which this client owns.
pub fn spawn_props(app: &mut App, props: &[(u64, Script)], owned_here: impl Fn(u64) -> bool) {
    for &(id, script) in props {
        let (pos, vel) = script.pose(0);
        let mut prop = app.world_mut().spawn((
            BodyNetId(BodyId(id)),
            OwnedProp { kind: 0 },
            script,
            Transform::from_translation(pos),
            Velocity::linear(vel),
        ));
        if owned_here(id) {
            prop.insert(PropOwnedHere);
        }
    }
    app.add_systems(
        PreUpdate,
        move_props.before(simsync::deterministic::DeterministicSet::ReadLocalInput),
    );
}
