//! A small physics game shared by the integration tests: piles of boxes on a ground plane, one
//! ball per player pushed by its inputs, optional projectile spawns/despawns and a resource that
//! appears at a given tick. Inputs are a deterministic function of (player, tick).

#![allow(dead_code)] // each test module uses its own part of the shared game

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync::deterministic::ReservedSlots;
use simsync::deterministic::{LocalSessionConfig, SessionClock, SessionMode};
use simsync::prelude::*;

/// What the test game spawns and does.
#[derive(Clone, Resource, Debug)]
pub struct TestGame {
    /// Boxes, in piles of 5×5×2.
    pub boxes: u32,
    /// Players (one ball each).
    pub players: u8,
    /// Player 1's button 1 spawns a projectile each tick it is held; projectiles older than
    /// 20 ticks are despawned.
    pub projectiles: bool,
    /// A `Flag` resource is inserted at this tick.
    pub flag_tick: Option<i32>,
    /// Extra non-simulation entities spawned at startup (to check they don't change checksums).
    pub unrelated_entities: u32,
    /// Boxes never sleep (Rapier's sleeping disabled on them): every body is simulated every tick.
    pub awake: bool,
}

impl Default for TestGame {
    fn default() -> Self {
        Self {
            boxes: 200,
            players: 2,
            projectiles: false,
            flag_tick: None,
            unrelated_entities: 0,
            awake: false,
        }
    }
}

/// A box of a pile.
#[derive(Component, Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Crate(pub u32);

impl SimHash for Crate {
    fn sim_hash(&self, hasher: &mut simsync::deterministic::StateHasher) {
        self.0.sim_hash(hasher);
    }
}

/// A projectile and the tick it was spawned.
#[derive(Component, Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Projectile(pub i32);

/// Each player's ball.
#[derive(Resource, Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlayerBodies(pub Vec<Entity>);

/// Inserted at `TestGame::flag_tick`.
#[derive(Resource, Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Flag(pub i32);

/// Not rolled back on purpose: counts `Changed<Crate>` detections ever seen by this world.
#[derive(Resource, Default, Debug)]
pub struct CrateChanges(pub u64);

/// Not rolled back on purpose: ticks whose `Time` delta was not exactly one tick.
#[derive(Resource, Default, Debug)]
pub struct BadDeltas(pub u64, pub u64);

/// Unrelated, non-simulation marker.
#[derive(Component)]
pub struct Unrelated;

impl Plugin for TestGame {
    fn build(&self, app: &mut App) {
        app.insert_resource(self.clone())
            .init_resource::<CrateChanges>()
            .init_resource::<BadDeltas>()
            .rollback_hashed_component_serde::<Crate>()
            .rollback_component_serde::<Projectile>()
            .rollback_resource_serde::<PlayerBodies>()
            .rollback_resource_serde::<Flag>()
            .add_systems(SimulationStartup, spawn_scene)
            .add_systems(
                SimulationTick,
                (
                    check_delta,
                    drive_players,
                    projectiles,
                    flag,
                    count_crate_changes,
                )
                    .chain()
                    .in_set(SimulationSet::Game),
            );
    }
}

fn spawn_scene(mut sim: SimCommands, game: Res<TestGame>) {
    for _ in 0..game.unrelated_entities {
        sim.commands.spawn((Unrelated, NotSimulated));
    }
    sim.spawn((
        RigidBody::Fixed,
        Collider::cuboid(40.0, 0.5, 40.0),
        Transform::from_xyz(0.0, -0.5, 0.0),
    ))
    .expect("slot");
    for n in 0..game.boxes {
        sim.spawn((
            RigidBody::Dynamic,
            Collider::cuboid(0.5, 0.5, 0.5),
            Transform::from_translation(box_position(n)),
            Velocity::zero(),
            Crate(n),
            if game.awake {
                Sleeping::disabled()
            } else {
                Sleeping::default()
            },
        ))
        .expect("slot");
    }
    let mut bodies = Vec::new();
    for p in 0..game.players {
        let e = sim
            .spawn((
                RigidBody::Dynamic,
                Collider::ball(0.6),
                Transform::from_translation(ball_position(p)),
                Velocity::zero(),
                ExternalImpulse::default(),
                Ccd::enabled(),
            ))
            .expect("slot");
        bodies.push(e);
    }
    sim.commands.insert_resource(PlayerBodies(bodies));
}

/// Where box `n` starts: piles of 5×5×2 boxes (1 m cubes), resting on the ground and on each
/// other, 4 piles a row.
pub fn box_position(n: u32) -> Vec3 {
    let pile = n / 50;
    let i = n % 50;
    let (layer, col) = (i / 25, i % 25);
    let x = (pile % 4) as f32 * 8.0 - 12.0 + (col % 5) as f32;
    let z = (pile / 4) as f32 * 8.0 - 4.0 + (col / 5) as f32;
    let y = 0.5 + layer as f32;
    Vec3::new(x, y, z)
}

/// Where player `p`'s ball starts.
pub fn ball_position(p: u8) -> Vec3 {
    Vec3::new(-16.0 + f32::from(p) * 3.0, 0.6, -8.0)
}

fn check_delta(time: Res<Time>, mut bad: ResMut<BadDeltas>) {
    bad.1 += 1;
    if time.delta() != std::time::Duration::from_nanos(15_625_000) {
        bad.0 += 1;
    }
}

fn drive_players(
    inputs: Res<PlayerInputs<PackedInput>>,
    bodies: Res<PlayerBodies>,
    mut impulses: Query<&mut ExternalImpulse>,
) {
    for (p, body) in bodies.0.iter().enumerate() {
        let p = p as u8;
        let (Some(input), Some(prev)) = (inputs.get(p), inputs.previous(p)) else {
            continue;
        };
        if let Ok(mut impulse) = impulses.get_mut(*body) {
            let mut j = Vec3::new(input.axis(0), 0.0, input.axis(1)) * 0.08;
            if input.just_pressed(prev, 0) {
                j.y += 2.0;
            }
            impulse.impulse = j;
        }
    }
}

#[allow(clippy::too_many_arguments)] // a Bevy system: one parameter per resource it reads
fn projectiles(
    game: Res<TestGame>,
    tick: Res<SimTick>,
    inputs: Res<PlayerInputs<PackedInput>>,
    bodies: Res<PlayerBodies>,
    transforms: Query<&Transform>,
    live: Query<(Entity, &Projectile)>,
    slots: Res<ReservedSlots>,
    mut sim: SimCommands,
) {
    if !game.projectiles {
        return;
    }
    let mut old: Vec<Entity> = live
        .iter()
        .filter(|(_, p)| tick.0 - p.0 >= 20)
        .map(|(e, _)| e)
        .collect();
    old.sort_by_key(|e| slots.slot_of(*e));
    for e in old {
        sim.despawn(e);
    }
    let shooter = 1u8.min(game.players - 1);
    if inputs.get(shooter).is_some_and(|i| i.pressed(1))
        && let Some(body) = bodies.0.get(usize::from(shooter))
        && let Ok(t) = transforms.get(*body)
    {
        sim.spawn((
            RigidBody::Dynamic,
            Collider::ball(0.2),
            Transform::from_translation(t.translation + Vec3::new(0.0, 1.5, 0.0)),
            Velocity::linear(Vec3::new(3.0, 2.0, 1.0)),
            Projectile(tick.0),
        ))
        .expect("slot");
    }
}

fn flag(game: Res<TestGame>, tick: Res<SimTick>, mut commands: Commands) {
    if game.flag_tick == Some(tick.0) {
        commands.insert_resource(Flag(tick.0));
    }
}

fn count_crate_changes(changed: Query<(), Changed<Crate>>, mut count: ResMut<CrateChanges>) {
    count.0 += changed.iter().count() as u64;
}

/// The scripted input of `player` at `tick`: changes every 7–30 ticks, so prediction by
/// repetition is often wrong.
pub fn scripted_input(player: u8, tick: i32) -> PackedInput {
    let period = 7 + (u32::from(player) * 13) % 23;
    let phase = (tick.max(0) as u32 / period).wrapping_mul(2_654_435_761) ^ u32::from(player) << 7;
    let h = phase.wrapping_mul(0x9e37_79b9);
    let mut input = PackedInput::default();
    input
        .set_axis(0, ((h >> 8) % 201) as f32 / 100.0 - 1.0)
        .expect("valid slot");
    input
        .set_axis(1, ((h >> 16) % 201) as f32 / 100.0 - 1.0)
        .expect("valid slot");
    input.set_pressed(0, h & 0b111 == 0).expect("valid slot");
    input
        .set_pressed(1, h & 0b11000 == 0b11000)
        .expect("valid slot");
    input
}

/// Feeds `scripted_input` into `LocalInputs` for the tick the next session update polls.
pub fn feed_scripted_inputs(
    session: Res<DeterministicSession<PackedInput>>,
    mut local: ResMut<LocalInputs<PackedInput>>,
) {
    let tick = session.next_input_tick();
    for p in 0..session.config().players {
        local.set(p, scripted_input(p, tick)).expect("known player");
    }
}

/// A headless app running `game` in a local session that rolls back on every verified tick
/// (the rollback skip is off, to exercise rollback).
pub fn app(game: TestGame, latency: u32, mode: SessionMode, verify: bool) -> App {
    app_with_skip(game, latency, mode, verify, false)
}

/// [`app`] choosing whether rollbacks are skipped when every prediction held.
pub fn app_with_skip(
    game: TestGame,
    latency: u32,
    mode: SessionMode,
    verify: bool,
    skip_rollbacks: bool,
) -> App {
    let players = game.players;
    app_with_game(game, players, latency, |plugin| {
        plugin.edit_config(|c| {
            c.mode = mode;
            c.verify_predictions = verify;
            c.skip_rollback_when_predictions_hold = skip_rollbacks;
        })
    })
}

/// Updates `app` until its verified tick reaches `tick` (at most `4 × tick + 100` updates).
pub fn run_until_verified(app: &mut App, tick: i32) {
    for _ in 0..(4 * tick + 100) {
        if app.world().resource::<SessionStats>().verified_tick >= tick {
            return;
        }
        app.update();
    }
    panic!(
        "verified tick never reached {tick}: {:?}",
        app.world().resource::<SessionStats>()
    );
}

/// The session's stats.
pub fn stats(app: &App) -> SessionStats {
    app.world().resource::<SessionStats>().clone()
}

/// A headless app running any simulation plugin `game` in a local session like [`app`]
/// (stepped clock, checksum every tick, scripted inputs, rollback on every verified tick),
/// with `configure` applied to the plugin last.
pub fn app_with_game<G: Plugin + Clone>(
    game: G,
    players: u8,
    latency: u32,
    configure: impl FnOnce(DeterministicPlugin<PackedInput>) -> DeterministicPlugin<PackedInput>,
) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    app.add_plugins(configure(
        DeterministicPlugin::<PackedInput>::new(game)
            .config(SessionConfig {
                checksum_interval: 1,
                skip_rollback_when_predictions_hold: false,
                clock: SessionClock::Stepped {
                    ticks_per_update: 1,
                },
                local: LocalSessionConfig {
                    latency_ticks: vec![latency],
                    jitter_ticks: 0,
                    seed: 7,
                    known_players: vec![0],
                },
                ..Default::default()
            })
            .players(players),
    ));
    app.add_systems(
        PreUpdate,
        feed_scripted_inputs.before(DeterministicSet::SessionUpdate),
    );
    app.finish();
    app.cleanup();
    app
}
