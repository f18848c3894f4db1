//! The sandbox's simulation: the game plugin added to both simulation worlds.
//!
//! [`SandboxGame`] spawns the scene in [`SimulationStartup`] and, every [`SimulationTick`], turns
//! each player's [`PackedInput`] into impulses on the bodies (before Rapier steps):
//! - move axes: a horizontal impulse steering the player's velocity towards `axes × MAX_SPEED`,
//!   limited to `MOVE_ACCEL` per second;
//! - jump (button [`JUMP`], on the tick it is pressed): an upward velocity change of
//!   `JUMP_SPEED`, only while the body is not moving vertically much (standing on something);
//! - push (button [`PUSH`], on the tick it is pressed): an outward impulse on every other
//!   dynamic body within [`PUSH_RADIUS`] of the player's centre.
//!
//! Every impulse depends only on the bodies' state at the start of the tick and on the inputs;
//! contributions to one body are summed in player order, so the result never depends on query
//! iteration order.

use std::sync::Arc;

use bevy::prelude::*;
use bevy_rapier3d::prelude::{
    Collider, ColliderMassProperties, Damping, ExternalImpulse, Friction, RapierRigidBodyHandle,
    RapierRigidBodySet, RigidBody, Sleeping, Velocity,
};
use simsync::deterministic::{SimHash, StateHasher};
use simsync::hybrid::{AvatarOf, HybridInput, RollbackBody};
use simsync::prelude::{
    PackedInput, PlayerInputs, RollbackAppExt, SimCommands, SimInput, SimTick, SimulationSet,
    SimulationStartup, SimulationTick,
};

use super::scene::{Scene, Shape};
use super::trace::TraceInput;

/// Button bit of "jump" in [`PackedInput`].
pub const JUMP: u8 = 0;
/// Button bit of "push" in [`PackedInput`].
pub const PUSH: u8 = 1;
/// Top horizontal speed a player steers towards, m/s.
pub const MAX_SPEED: f32 = 5.0;
/// Horizontal velocity change a player's movement may apply per second, m/s².
pub const MOVE_ACCEL: f32 = 20.0;
/// Upward velocity change of a jump, m/s.
pub const JUMP_SPEED: f32 = 5.5;
/// A jump is possible only while the vertical speed is below this, m/s.
pub const GROUNDED_VERTICAL_SPEED: f32 = 0.75;
/// Reach of a push: bodies whose centre is within this distance of the player's centre, m.
pub const PUSH_RADIUS: f32 = 2.0;
/// Impulse of a push on a body at the player's centre (falls off linearly to a quarter of it at
/// [`PUSH_RADIUS`]), N·s.
pub const PUSH_IMPULSE: f32 = 2.5;
/// Upward share added to a push's outward direction before normalising.
pub const PUSH_LIFT: f32 = 0.35;

/// Encodes one player's trace actions as the session's input type (axes quantized to 1/127).
pub fn encode(input: &TraceInput) -> PackedInput {
    let mut packed = PackedInput::default();
    // Slots 0 and 1 and bits JUMP and PUSH are in range, so none of these can fail.
    let _ = packed.set_axis(0, input.movement[0]);
    let _ = packed.set_axis(1, input.movement[1]);
    let _ = packed.set_pressed(JUMP, input.jump);
    let _ = packed.set_pressed(PUSH, input.push);
    packed
}

/// The input of a player steered by a person and a script at once (the rendered `join`): the
/// keyboard's while a key of the player's is held (`keyboard` is `Some`, even when the keys
/// cancel out), else the script's for the tick (`scripted`, from `--trace`), else standing
/// still. A pressed key always wins; letting go hands the player back to the script at the tick
/// it has reached.
#[allow(dead_code)] // only the rendered sandbox has a keyboard
pub fn keyboard_over_trace(
    keyboard: Option<PackedInput>,
    scripted: Option<PackedInput>,
) -> PackedInput {
    keyboard.or(scripted).unwrap_or_default()
}

/// The session input the game reads a player's [`PackedInput`] from: the input itself, or a
/// hybrid session's input (`sandbox hybrid`: the game's input beside the carried prop poses).
pub trait PlayerInput: SimInput {
    /// The player's packed input (axes and buttons).
    fn packed(&self) -> &PackedInput;
}

impl PlayerInput for PackedInput {
    fn packed(&self) -> &PackedInput {
        self
    }
}

impl PlayerInput for HybridInput<PackedInput> {
    fn packed(&self) -> &PackedInput {
        &self.input
    }
}

/// Marks a player's body (rolled back, part of checksums and of snapshots; reflected, so a
/// desync dump shows whose body an entity is and `sandbox diff` names it).
#[derive(
    Component, Reflect, Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize,
)]
#[reflect(Component)]
pub struct PlayerBody {
    /// The player controlling the body.
    pub player: u8,
    /// The body's mass in kilograms (impulses are scaled by it).
    pub mass: f32,
}

impl SimHash for PlayerBody {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.player.sim_hash(hasher);
        self.mass.sim_hash(hasher);
    }
}

/// The scene a simulation world spawns, and how many players it has (a constant resource of
/// each simulation world; not simulation state).
#[derive(Resource, Debug, Clone)]
pub struct SandboxScene {
    /// The scene.
    pub scene: Arc<Scene>,
    /// Players in the session: the first `players` player spawns are used.
    pub players: u8,
    /// The players' bodies are also [`RollbackBody`] and [`AvatarOf`] (a hybrid session's
    /// players).
    pub hybrid: bool,
}

/// The sandbox game plugin, added to both simulation worlds by the
/// [`DeterministicPlugin`](simsync::DeterministicPlugin).
#[derive(Debug, Clone)]
pub struct SandboxGame {
    scene: Arc<Scene>,
    players: u8,
    /// Plant a desync: at this tick the simulation nudges player 0's body (`--plant-desync`).
    plant_desync: Option<i32>,
    /// The game of a hybrid session (`sandbox hybrid`): it reads `HybridInput<PackedInput>`
    /// and marks each player's body [`RollbackBody`] and [`AvatarOf`] its player.
    hybrid: bool,
}

/// The tick at which this simulation nudges player 0's body, if any (a planted desync;
/// simulation constant, not rolled back). Every client has it, with or without a tick: a
/// resource is an entity in Bevy, so a resource on one client only would shift its entity ids
/// and its slots from tick 1 on (checksums hash slots), which is not the planted desync.
#[derive(Resource, Debug, Clone, Copy)]
struct PlantDesync(Option<i32>);

impl SandboxGame {
    /// A game spawning `scene` with `players` player bodies (the scene must have that many
    /// player spawns; the loader and `main` check it).
    pub fn new(scene: Arc<Scene>, players: u8) -> Self {
        Self {
            scene,
            players,
            plant_desync: None,
            hybrid: false,
        }
    }

    /// The same game as the players' game of a hybrid session (`sandbox hybrid`): its input is
    /// `HybridInput<PackedInput>` (give it to `simsync::hybrid::hybrid_session`), and each
    /// player's body is also a [`RollbackBody`] and its player's avatar ([`AvatarOf`]: its
    /// twin in the App's world pushes the props). Give it a scene without piles: the props live
    /// outside the players' worlds.
    pub fn hybrid(mut self) -> Self {
        self.hybrid = true;
        self
    }

    /// The same game whose simulation, at the end of `tick` (after the physics step), adds
    /// 0.5 m/s upwards to player 0's body (a planted desync: give it to one client only). The
    /// change is written to both copies of the velocity, the `Velocity` component and Rapier's
    /// body, so the two agree as after any step and a rollback or snapshot carries it: the world
    /// at the end of `tick` differs from an honest client's in player 0's body alone (its
    /// velocity, and Rapier's record that the body was touched), and the next step spreads it.
    /// A change before the step would be spread through the whole contact island by the end of
    /// `tick` already (in the shipped scene at tick 120, 203 component values of 101 bodies).
    pub fn with_planted_desync(mut self, tick: i32) -> Self {
        self.plant_desync = Some(tick);
        self
    }

    /// Number of simulation entities the scene spawns: ground, ramps, pile bodies and players.
    pub fn entity_count(&self) -> u32 {
        1 + self.scene.ramps.len() as u32 + self.scene.pile_bodies() + u32::from(self.players)
    }

    /// Number of dynamic bodies the scene spawns: pile bodies and players.
    pub fn dynamic_body_count(&self) -> u32 {
        self.scene.pile_bodies() + u32::from(self.players)
    }
}

impl Plugin for SandboxGame {
    fn build(&self, app: &mut App) {
        app.insert_resource(SandboxScene {
            scene: self.scene.clone(),
            players: self.players,
            hybrid: self.hybrid,
        })
        .register_type::<PlayerBody>()
        .rollback_hashed_component_serde::<PlayerBody>()
        .add_systems(SimulationStartup, spawn_scene);
        if self.hybrid {
            app.add_systems(
                SimulationTick,
                apply_player_inputs::<HybridInput<PackedInput>>.in_set(SimulationSet::Game),
            );
        } else {
            app.add_systems(
                SimulationTick,
                apply_player_inputs::<PackedInput>.in_set(SimulationSet::Game),
            );
        }
        app.insert_resource(PlantDesync(self.plant_desync))
            .ignore_rollback_resource::<PlantDesync>()
            .add_systems(SimulationTick, plant_desync.in_set(SimulationSet::Cleanup));
    }
}

fn vec3(v: [f32; 3]) -> Vec3 {
    Vec3::from_array(v)
}

fn collider(shape: &Shape) -> Collider {
    match *shape {
        Shape::Box { size } => Collider::cuboid(size[0] / 2.0, size[1] / 2.0, size[2] / 2.0),
        Shape::Ball { radius } => Collider::ball(radius),
    }
}

/// Spawns the whole scene as simulation entities, in file order (ground, ramps, piles,
/// players), so both worlds give every body the same id. Dynamic bodies carry [`Sleeping`] so
/// Rapier's sleep state is visible (and rolled back with the rest).
fn spawn_scene(mut sim: SimCommands, scene: Res<SandboxScene>) {
    let s = &scene.scene;
    let half = |size: [f32; 3]| Collider::cuboid(size[0] / 2.0, size[1] / 2.0, size[2] / 2.0);
    let mut spawned = Vec::new();
    spawned.push(sim.spawn((
        Transform::from_translation(vec3(s.ground.center)),
        RigidBody::Fixed,
        half(s.ground.size),
        Friction::coefficient(s.ground.friction),
    )));
    for ramp in &s.ramps {
        let [rx, ry, rz] = ramp.rotation_deg.map(f32::to_radians);
        spawned.push(sim.spawn((
            Transform::from_translation(vec3(ramp.center)).with_rotation(Quat::from_euler(
                EulerRot::XYZ,
                rx,
                ry,
                rz,
            )),
            RigidBody::Fixed,
            half(ramp.size),
            Friction::coefficient(ramp.friction),
        )));
    }
    for pile in &s.piles {
        for position in pile.positions() {
            spawned.push(sim.spawn((
                Transform::from_translation(vec3(position)),
                RigidBody::Dynamic,
                collider(&pile.shape),
                ColliderMassProperties::Density(pile.density),
                Friction::coefficient(pile.friction),
                ExternalImpulse::default(),
                Sleeping::default(),
            )));
        }
    }
    for (player, spawn) in s
        .players
        .iter()
        .take(usize::from(scene.players))
        .enumerate()
    {
        let body = (
            Transform::from_translation(vec3(spawn.spawn)),
            RigidBody::Dynamic,
            collider(&spawn.shape),
            ColliderMassProperties::Density(spawn.density),
            Friction::coefficient(spawn.friction),
            Damping {
                linear_damping: 0.2,
                angular_damping: 1.0,
            },
            Velocity::zero(),
            ExternalImpulse::default(),
            Sleeping::default(),
            PlayerBody {
                player: player as u8,
                mass: spawn.mass(),
            },
        );
        spawned.push(if scene.hybrid {
            sim.spawn((body, RollbackBody, AvatarOf(player as u8)))
        } else {
            sim.spawn(body)
        });
    }
    if let Some(error) = spawned.into_iter().find_map(Result::err) {
        error!("sandbox scene not fully spawned: {error}");
    }
}

/// The impulse a player's own movement and jump apply to its body this tick.
fn player_impulse(
    input: &PackedInput,
    previous: &PackedInput,
    velocity: &Velocity,
    mass: f32,
    dt: f32,
) -> Vec3 {
    let mut impulse = Vec3::ZERO;
    let wish = Vec3::new(input.axis(0), 0.0, input.axis(1)).clamp_length_max(1.0);
    if wish != Vec3::ZERO {
        let horizontal = Vec3::new(velocity.linear.x, 0.0, velocity.linear.z);
        let dv = (wish * MAX_SPEED - horizontal).clamp_length_max(MOVE_ACCEL * dt);
        impulse += dv * mass;
    }
    if input.just_pressed(previous, JUMP) && velocity.linear.y.abs() < GROUNDED_VERTICAL_SPEED {
        impulse.y += JUMP_SPEED * mass;
    }
    impulse
}

/// The impulse a push from `from` gives a body at `at`, or `None` out of reach.
fn push_impulse(from: Vec3, at: Vec3) -> Option<Vec3> {
    let offset = at - from;
    let distance = offset.length();
    if distance > PUSH_RADIUS {
        return None;
    }
    let outward = if distance > 1e-4 {
        offset / distance
    } else {
        Vec3::Y
    };
    let direction = (outward + Vec3::Y * PUSH_LIFT).normalize_or(Vec3::Y);
    let strength = PUSH_IMPULSE * (1.0 - 0.75 * distance / PUSH_RADIUS);
    Some(direction * strength)
}

/// At the end of the planted tick, nudges player 0's body upwards in the component and in
/// Rapier's body set alike (see [`SandboxGame::with_planted_desync`]). The component write
/// bypasses change detection: a changed `Velocity` makes bevy_rapier copy it into the body and
/// wake it on the next step, which a re-simulation from a snapshot taken after this tick would
/// not repeat.
fn plant_desync(
    plant: Res<PlantDesync>,
    tick: Res<SimTick>,
    mut players: Query<(&PlayerBody, &RapierRigidBodyHandle, &mut Velocity)>,
    mut body_sets: Query<&mut RapierRigidBodySet>,
) {
    if plant.0 != Some(tick.0) {
        return;
    }
    for (body, handle, mut velocity) in &mut players {
        if body.player != 0 {
            continue;
        }
        velocity.bypass_change_detection().linear.y += 0.5;
        for mut set in &mut body_sets {
            if let Some(rapier_body) = set.bodies.get_mut(handle.0) {
                let mut linvel = rapier_body.linvel();
                linvel.y += 0.5;
                rapier_body.set_linvel(linvel, false);
            }
        }
    }
}

/// Applies every player's input of this tick as impulses (see the module docs).
fn apply_player_inputs<I: PlayerInput>(
    inputs: Res<PlayerInputs<I>>,
    time: Res<Time>,
    players: Query<(Entity, &PlayerBody, &Transform, &Velocity)>,
    mut bodies: Query<(Entity, &Transform, &RigidBody, &mut ExternalImpulse)>,
) {
    let dt = time.delta_secs();
    let mut list: Vec<_> = players.iter().collect();
    list.sort_by_key(|(_, body, _, _)| body.player);
    // (body, impulse) of each player's own movement, and (pusher, centre) of each push, both in
    // player order.
    let mut own = Vec::new();
    let mut pushes = Vec::new();
    for (entity, body, transform, velocity) in list {
        let Some(input) = inputs.get(body.player).map(PlayerInput::packed) else {
            continue;
        };
        let previous = inputs
            .previous(body.player)
            .map(|p| *p.packed())
            .unwrap_or_default();
        let impulse = player_impulse(input, &previous, velocity, body.mass, dt);
        if impulse != Vec3::ZERO {
            own.push((entity, impulse));
        }
        if input.just_pressed(&previous, PUSH) {
            pushes.push((entity, transform.translation));
        }
    }
    for (entity, impulse) in own {
        if let Ok((_, _, _, mut external)) = bodies.get_mut(entity) {
            external.impulse += impulse;
        }
    }
    if pushes.is_empty() {
        return;
    }
    for (entity, transform, rigid_body, mut external) in &mut bodies {
        if *rigid_body != RigidBody::Dynamic {
            continue;
        }
        let total = pushes
            .iter()
            .filter(|(pusher, _)| *pusher != entity)
            .filter_map(|(_, from)| push_impulse(*from, transform.translation))
            .fold(Vec3::ZERO, |sum, impulse| sum + impulse);
        // Touch the component only for a real impulse: a zero one would still wake the body.
        if total != Vec3::ZERO {
            external.impulse += total;
        }
    }
}
