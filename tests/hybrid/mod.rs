//! Hybrid sessions (`simsync::hybrid`): players rolled back, props owned, in one App. Each
//! client App runs the players' session over the relay and moves the props it owns in its own
//! world by a script (standing in for ownership's physics: the owner's bodies are whatever it
//! simulates); the tests check what the players' verified worlds make of the carried poses.

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use serde::{Deserialize, Serialize};
use simsync::deterministic::{
    HookFlow, SimulationWorlds, VerifiedTick, VerifiedTickHook, VerifiedTickHookAppExt,
};
use simsync::hybrid::{
    HybridConfig, HybridInput, HybridPlugin, OwnedProp, PropOwnedHere, PropProxy, RollbackBody,
    VerifiedProps, hybrid_session,
};
use simsync::ownership::{BodyId, BodyNetId};
use simsync::prelude::*;
use simsync::testing::RelayPeers;
use simsync_net::LinkConditionerConfig;

type Input = HybridInput<PackedInput>;

/// The players' game: a ground and one ball avatar per player, pushed by the input's axes.
#[derive(Clone)]
struct Arena {
    players: u8,
}

/// Each player's avatar.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Avatars(Vec<Entity>);

/// Where player `p`'s avatar starts.
fn avatar_start(p: u8) -> Vec3 {
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

fn drive(
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

fn config() -> HybridConfig {
    HybridConfig {
        proxy_slots: 8,
        shapes: vec![Collider::ball(0.3)],
        ..default()
    }
}

/// How a scripted prop moves in its owner's world, by tick.
#[derive(Component, Clone, Copy)]
enum Script {
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
fn move_props(
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
fn spawn_props(app: &mut App, props: &[(u64, Script)], owned_here: impl Fn(u64) -> bool) {
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

/// A client's players' session with props: scripted game inputs, the props spawned.
fn peers(
    players: u8,
    link: LinkConditionerConfig,
    props: Vec<(u64, Script, usize)>,
    input: fn(u8, i32) -> PackedInput,
) -> RelayPeers<Input> {
    RelayPeers::builder(players, move |_| {
        hybrid_session::<PackedInput, _>(Arena { players }, config())
    })
    .link(link)
    .seed(11)
    .customize(move |client, app| {
        app.add_plugins(HybridPlugin::<PackedInput>::new(config()).scripted(input))
            .add_verified_tick_hook::<Input>(Trace::default())
            .expect("session plugin added");
        let scripts: Vec<_> = props.iter().map(|&(id, s, _)| (id, s)).collect();
        let owners = props.clone();
        spawn_props(app, &scripts, |id| {
            owners
                .iter()
                .any(|&(i, _, owner)| i == id && owner == client)
        });
    })
    .build()
    .expect("harness")
}

fn wander(player: u8, tick: i32) -> PackedInput {
    let mut input = PackedInput::default();
    let phase = (tick / (20 + 7 * i32::from(player))) % 4;
    let (x, z) = [(1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0)][phase as usize];
    input.set_axis(0, x).expect("slot");
    input.set_axis(1, z).expect("slot");
    input
}

fn idle(_player: u8, _tick: i32) -> PackedInput {
    PackedInput::default()
}

/// A client's record of its session: every avatar's verified position per verified tick, the
/// highest tick predicted so far and each rollback with the highest tick predicted before it.
#[derive(Default)]
struct Trace {
    verified: Vec<(i32, Vec<Vec3>)>,
    predicted_up_to: i32,
    rollbacks: Vec<(i32, i32)>,
}

impl Trace {
    fn at(&self, tick: i32) -> Vec<Vec3> {
        self.verified
            .iter()
            .find(|(t, _)| *t == tick)
            .map(|(_, p)| p.clone())
            .unwrap_or_else(|| panic!("tick {tick} not verified"))
    }
}

impl VerifiedTickHook<Input> for Trace {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, Input>) -> HookFlow {
        let world = verified.world();
        let positions = world
            .resource::<Avatars>()
            .0
            .iter()
            .map(|a| world.get::<Transform>(*a).expect("avatar").translation)
            .collect();
        self.verified.push((verified.tick(), positions));
        HookFlow::Continue
    }

    fn on_predicted(&mut self, predicted: &mut simsync::deterministic::PredictedTick<'_, Input>) {
        self.predicted_up_to = self.predicted_up_to.max(predicted.tick());
    }

    fn on_rollback(&mut self, tick: i32) {
        self.rollbacks.push((tick, self.predicted_up_to));
        self.predicted_up_to = tick;
    }
}

fn trace(peers: &RelayPeers<Input>, client: usize) -> &Trace {
    peers
        .client(client)
        .expect("client")
        .world()
        .resource::<DeterministicSession<Input>>()
        .hook::<Trace>()
        .expect("trace hook")
}

fn verified(app: &App) -> &World {
    app.world().resource::<SimulationWorlds>().verified()
}

#[test]
fn carried_prop_poses_keep_every_peers_players_equal_under_loss_and_jitter() {
    let circle = |center: Vec3, period: f32| Script::Circle {
        center,
        radius: 1.3,
        period,
    };
    // Four props per owner, circling through the avatars' paths.
    let props = (0..8u64)
        .map(|n| {
            let p = (n % 2) as u8;
            let center = avatar_start(p) + Vec3::new(0.0, 0.0, (n / 2) as f32 * 0.9 - 1.0);
            (n + 1, circle(center, 90.0 + 13.0 * n as f32), p as usize)
        })
        .collect();
    let link = LinkConditionerConfig::PERFECT
        .with_latency(40, 10)
        .with_loss(2.0);
    let mut peers = peers(2, link, props, wander);
    peers.run_until_verified(300).expect("run");
    let agreement = peers.assert_all_agree();
    assert!(
        agreement.ticks_compared >= 290,
        "checksums compared over {} ticks",
        agreement.ticks_compared
    );
    for client in 0..2 {
        let record = peers
            .client(client)
            .expect("client")
            .world()
            .resource::<VerifiedProps>()
            .clone();
        // Both players carry moving props every tick after their first input.
        assert!(record.ticks_with_props >= 280, "{record:?}");
        assert_eq!(record.ignored, 0);
        let world = verified(peers.client(client).expect("client"));
        let in_use = world
            .iter_entities()
            .filter_map(|e| e.get::<PropProxy>())
            .filter(|p| p.prop.is_some())
            .count();
        assert_eq!(in_use, 8, "every prop has a proxy");
    }
    // The props touched the players: their verified states at tick 300 are the same on both
    // peers and differ from a run without props.
    let with_props = trace(&peers, 0).at(300);
    assert_eq!(with_props, trace(&peers, 1).at(300));
    let mut alone = self::peers(2, link, Vec::new(), wander);
    alone.run_until_verified(300).expect("run");
    alone.assert_all_agree();
    assert_ne!(with_props, trace(&alone, 0).at(300));
}

#[test]
fn a_thrown_prop_hits_another_player_alike_on_every_peer_across_a_rollback() {
    // Player 0's client owns a prop resting 2.5 m left of player 1's avatar; at frame 60 it
    // throws it at 8 m/s straight through the avatar. Nobody presses anything.
    let throw = Script::Throw {
        from: avatar_start(1) - Vec3::new(2.5, 0.0, 0.0),
        at: 60,
        velocity: Vec3::new(8.0, 0.0, 0.0),
    };
    let link = LinkConditionerConfig::PERFECT.with_latency(60, 5);
    let mut peers = peers(2, link, vec![(1, throw, 0)], idle);
    peers.run_until_verified(200).expect("run");
    peers.assert_all_agree();
    let start = avatar_start(1);
    let first = trace(&peers, 0);
    let hit = first
        .verified
        .iter()
        .find(|(_, p)| (p[1] - start).length() > 0.01)
        .map(|(t, _)| *t)
        .expect("the prop hit player 1's avatar");
    let after = first.at(200);
    assert!(
        after[1].x - start.x > 0.5,
        "player 1's avatar was pushed along the throw: {after:?}"
    );
    for client in 0..2 {
        let trace = trace(&peers, client);
        assert_eq!(trace.at(200), after, "client {client}");
        assert_eq!(trace.at(hit), first.at(hit), "client {client}");
    }
    // Player 1's client predicted past the hit before player 0's input of that tick arrived,
    // and rolled back to before it.
    let rolled_across = trace(&peers, 1)
        .rollbacks
        .iter()
        .any(|&(to, predicted)| to < hit && predicted >= hit);
    assert!(
        rolled_across,
        "hit at {hit}, rollbacks {:?}",
        trace(&peers, 1).rollbacks
    );
    eprintln!(
        "hit at verified tick {hit}; client 1 rolled back {} times",
        trace(&peers, 1).rollbacks.len()
    );
}

#[test]
fn props_never_enter_the_players_worlds() {
    let count = |props: u64| {
        let scripts: Vec<_> = (0..props)
            .map(|n| {
                let center = Vec3::new((n % 20) as f32 * 2.0 - 20.0, 0.6, (n / 20) as f32 * 2.0);
                (
                    n + 1,
                    Script::Circle {
                        center,
                        radius: 0.5,
                        period: 64.0,
                    },
                    0,
                )
            })
            .collect();
        let mut peers = peers(1, LinkConditionerConfig::PERFECT, scripts, idle);
        peers.run_until_verified(40).expect("run");
        let snapshot = simsync::deterministic::capture_snapshot::<Input>(
            peers.client_mut(0).expect("client").world_mut(),
        )
        .expect("snapshot");
        let app = peers.client(0).expect("client");
        let worlds = app.world().resource::<SimulationWorlds>();
        let entities = |world: &World| world.iter_entities().count();
        let in_use = worlds
            .verified()
            .iter_entities()
            .filter_map(|e| e.get::<PropProxy>())
            .filter(|p| p.prop.is_some())
            .count();
        (
            entities(worlds.verified()),
            entities(worlds.predicted()),
            snapshot.encode().len(),
            in_use,
        )
    };
    let (none, many) = (count(0), count(300));
    assert_eq!(
        (none.0, none.1),
        (many.0, many.1),
        "entities of the players' worlds"
    );
    assert_eq!(none.3, 0);
    assert_eq!(many.3, 8, "the pool is in use, and full");
    // The snapshot's size differs by the pool's contents only, not by 300 bodies.
    assert!(many.2 < none.2 + 2_000, "{} vs {} bytes", many.2, none.2);
}
