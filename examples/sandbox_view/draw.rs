//! The 3D view: camera and light ([`CameraPlugin`], every mode); for the deterministic modes
//! ([`DrawPlugin`]) one `bevy_pbr` mesh per simulation body of the predicted world, presented
//! through visual smoothing, and the verified world as gizmo outlines (ghosts).

use bevy::prelude::*;
use bevy_rapier3d::prelude::Collider;
use simsync::PresentedSimEntity;
use simsync::prelude::{SimEntity, SimulationWorlds};

use super::game::PlayerBody;

/// Colours of players 0, 1, 2, ... (repeating).
pub const PLAYER_COLORS: [Color; 4] = [
    Color::srgb(0.15, 0.45, 0.95),
    Color::srgb(0.95, 0.25, 0.2),
    Color::srgb(0.2, 0.8, 0.3),
    Color::srgb(0.9, 0.8, 0.15),
];

/// Camera and light.
pub struct CameraPlugin;

impl Plugin for CameraPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(Startup, setup);
    }
}

/// Draws the simulation worlds of the main app's session: the predicted world solid, the
/// verified world as ghosts.
pub struct DrawPlugin;

impl Plugin for DrawPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(Update, (spawn_presenters, draw_ghosts));
    }
}

/// A presented body's outline size (half extents, metres) for its ghost.
#[derive(Component, Clone, Copy)]
struct Ghost {
    half_extents: Vec3,
}

fn setup(mut commands: Commands) {
    commands.spawn((
        Camera3d::default(),
        Transform::from_xyz(0.0, 22.0, 30.0).looking_at(Vec3::new(0.0, 0.0, -2.0), Vec3::Y),
    ));
    commands.spawn((
        DirectionalLight {
            illuminance: 9_000.0,
            shadow_maps_enabled: false,
            ..default()
        },
        Transform::from_xyz(8.0, 20.0, 10.0).looking_at(Vec3::ZERO, Vec3::Y),
    ));
    commands.insert_resource(GlobalAmbientLight {
        brightness: 400.0,
        ..default()
    });
}

/// `--no-msaa`: every 3D camera draws without multisample anti-aliasing (a quarter of the
/// samples: much cheaper on a software renderer such as lavapipe).
pub fn msaa_off(mut commands: Commands, cameras: Query<Entity, With<Camera3d>>) {
    for camera in &cameras {
        commands.entity(camera).insert(Msaa::Off);
    }
}

/// The mesh and outline size of a collider (a unit cube for shapes the view does not know).
pub fn shape(collider: &Collider) -> (Mesh, Vec3) {
    if let Some(cuboid) = collider.as_cuboid() {
        let half = cuboid.half_extents();
        return (Cuboid::from_size(half * 2.0).into(), half);
    }
    if let Some(ball) = collider.as_ball() {
        let r = ball.radius();
        return (Sphere::new(r).mesh().uv(16, 12), Vec3::splat(r));
    }
    if let Some(capsule) = collider.as_capsule() {
        let (r, h) = (capsule.radius(), capsule.half_height());
        return (Capsule3d::new(r, h * 2.0).into(), Vec3::new(r, h + r, r));
    }
    (Cuboid::from_size(Vec3::ONE).into(), Vec3::splat(0.5))
}

/// Spawns one presented mesh per simulation body, once the predicted world holds them.
fn spawn_presenters(
    mut commands: Commands,
    worlds: Option<Res<SimulationWorlds>>,
    presented: Query<(), With<PresentedSimEntity>>,
    mut meshes: ResMut<Assets<Mesh>>,
    mut materials: ResMut<Assets<StandardMaterial>>,
) {
    let Some(worlds) = worlds else {
        return;
    };
    if !presented.is_empty() {
        return;
    }
    let world = worlds.predicted();
    let Some(mut query) =
        world.try_query_filtered::<(Entity, &Collider, Option<&PlayerBody>), With<SimEntity>>()
    else {
        return;
    };
    let grey = materials.add(StandardMaterial::from_color(Color::srgb(0.55, 0.55, 0.58)));
    let crate_colour = materials.add(StandardMaterial::from_color(Color::srgb(0.85, 0.55, 0.25)));
    for (sim, collider, player) in query.iter(world) {
        let (mesh, half_extents) = shape(collider);
        let material = match player {
            Some(p) => materials.add(StandardMaterial::from_color(
                PLAYER_COLORS[usize::from(p.player) % PLAYER_COLORS.len()],
            )),
            None if half_extents.x > 4.0 || half_extents.z > 4.0 => grey.clone(),
            None => crate_colour.clone(),
        };
        commands.spawn((
            Mesh3d(meshes.add(mesh)),
            MeshMaterial3d(material),
            PresentedSimEntity::new(sim),
            Ghost { half_extents },
        ));
    }
}

/// The verified world's bodies as white outlines (where the confirmed simulation is; the solid
/// bodies run ahead on predicted inputs).
fn draw_ghosts(
    worlds: Option<Res<SimulationWorlds>>,
    ghosts: Query<(&PresentedSimEntity, &Ghost)>,
    mut gizmos: Gizmos,
) {
    let Some(worlds) = worlds else {
        return;
    };
    let verified = worlds.verified();
    for (presented, ghost) in &ghosts {
        if ghost.half_extents.x > 4.0 || ghost.half_extents.z > 4.0 {
            continue;
        }
        let Some(transform) = verified
            .get_entity(presented.sim)
            .ok()
            .and_then(|e| e.get::<Transform>())
        else {
            continue;
        };
        gizmos.cube(
            Transform {
                translation: transform.translation,
                rotation: transform.rotation,
                scale: ghost.half_extents * 2.0,
            },
            Color::srgba(1.0, 1.0, 1.0, 0.6),
        );
    }
}
