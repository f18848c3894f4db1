//! The sandbox scene as ownership bodies: every App numbers them alike — avatars first (ids
//! `0..participants`), then the pile bodies in scene order, then the ground and ramps (static,
//! never ownable).

use bevy::prelude::*;
use bevy_rapier3d::prelude::{Collider, Damping, RigidBody};
use simsync_ownership::BodyId;

use crate::scene::{Scene, Shape};

/// Damping of pile bodies in this mode, so that pushed bodies, balls above all, come to rest.
const PILE_DAMPING: Damping = Damping {
    linear_damping: 0.3,
    angular_damping: 0.8,
};
/// Damping of avatars (as in the deterministic game).
const AVATAR_DAMPING: Damping = Damping {
    linear_damping: 0.2,
    angular_damping: 1.0,
};

/// Marks an avatar (any participant's) in a participant's world.
#[derive(Component, Debug, Clone, Copy)]
pub struct AvatarBody;

/// One body of the scene with its network id.
#[derive(Debug, Clone)]
pub struct NetBody {
    /// Its network id, the same on every App.
    pub id: BodyId,
    /// Dynamic (ownable) or fixed.
    pub kind: RigidBody,
    /// Where it starts.
    pub transform: Transform,
    /// Its shape.
    pub collider: Collider,
    /// Density, kg/m³.
    pub density: f32,
    /// Friction coefficient.
    pub friction: f32,
    /// Damping of dynamic bodies.
    pub damping: Option<Damping>,
    /// The participant whose avatar this is.
    pub avatar_of: Option<u8>,
}

fn collider(shape: &Shape) -> Collider {
    match *shape {
        Shape::Box { size } => Collider::cuboid(size[0] / 2.0, size[1] / 2.0, size[2] / 2.0),
        Shape::Ball { radius } => Collider::ball(radius),
    }
}

fn cuboid(size: [f32; 3]) -> Collider {
    Collider::cuboid(size[0] / 2.0, size[1] / 2.0, size[2] / 2.0)
}

/// The scene's bodies: avatars (ids `0..participants`), pile bodies, then ground and ramps.
pub fn net_bodies(scene: &Scene, participants: u8) -> Vec<NetBody> {
    let piles: Vec<(Vec3, usize)> = scene
        .piles
        .iter()
        .enumerate()
        .flat_map(|(i, pile)| pile.positions().map(move |p| (Vec3::from_array(p), i)))
        .collect();
    bodies_with(scene, participants, &piles)
}

/// The scene's avatars (ids `0..participants`), then one body per `(centre, pile index)` of
/// `piles` (shaped, weighted and damped as that pile's bodies; an index past the scene's piles
/// is skipped), then ground and ramps. [`net_bodies`] with the scene's own piles; `sandbox
/// hybrid` lays its props out itself.
pub fn bodies_with(scene: &Scene, participants: u8, piles: &[(Vec3, usize)]) -> Vec<NetBody> {
    let mut bodies = Vec::new();
    let mut next = 0u64;
    let mut id = || {
        next += 1;
        BodyId(next - 1)
    };
    for (i, spawn) in scene
        .players
        .iter()
        .take(usize::from(participants))
        .enumerate()
    {
        bodies.push(NetBody {
            id: id(),
            kind: RigidBody::Dynamic,
            transform: Transform::from_translation(Vec3::from_array(spawn.spawn)),
            collider: collider(&spawn.shape),
            density: spawn.density,
            friction: spawn.friction,
            damping: Some(AVATAR_DAMPING),
            avatar_of: Some(i as u8),
        });
    }
    for &(position, index) in piles {
        let Some(pile) = scene.piles.get(index) else {
            continue;
        };
        bodies.push(NetBody {
            id: id(),
            kind: RigidBody::Dynamic,
            transform: Transform::from_translation(position),
            collider: collider(&pile.shape),
            density: pile.density,
            friction: pile.friction,
            damping: Some(PILE_DAMPING),
            avatar_of: None,
        });
    }
    bodies.push(NetBody {
        id: id(),
        kind: RigidBody::Fixed,
        transform: Transform::from_translation(Vec3::from_array(scene.ground.center)),
        collider: cuboid(scene.ground.size),
        density: 1.0,
        friction: scene.ground.friction,
        damping: None,
        avatar_of: None,
    });
    for ramp in &scene.ramps {
        let [rx, ry, rz] = ramp.rotation_deg.map(f32::to_radians);
        bodies.push(NetBody {
            id: id(),
            kind: RigidBody::Fixed,
            transform: Transform::from_translation(Vec3::from_array(ramp.center))
                .with_rotation(Quat::from_euler(EulerRot::XYZ, rx, ry, rz)),
            collider: cuboid(ramp.size),
            density: 1.0,
            friction: ramp.friction,
            damping: None,
            avatar_of: None,
        });
    }
    bodies
}
