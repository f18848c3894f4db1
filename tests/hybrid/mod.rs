//! Hybrid sessions (`simsync::hybrid`): players rolled back, props owned, in one App. Each
//! client App runs the players' session over the relay and moves the props it owns in its own
//! world by a script (standing in for ownership's physics: the owner's bodies are whatever it
//! simulates); the tests check what the players' verified worlds make of the carried poses.
//! `avatars` runs the real ownership participant in each client App (`HybridPeers`): props
//! pushed, grabbed and thrown by the players' avatars. `misuse` plays a hostile player whose
//! inputs carry forged poses.

mod arena;
mod avatars;
mod misuse;
mod scale;

use bevy::prelude::*;
use simsync::deterministic::{
    HookFlow, SimulationWorlds, VerifiedTick, VerifiedTickHook, VerifiedTickHookAppExt,
};
use simsync::hybrid::{HybridPlugin, PropProxy, VerifiedProps, hybrid_session};
use simsync::prelude::*;
use simsync::testing::RelayPeers;
use simsync_net::LinkConditionerConfig;

use arena::{Arena, Avatars, Input, Script, avatar_start, config, spawn_props, wander};

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
    peers.run_until_verified(200).expect("run");
    let agreement = peers.assert_all_agree();
    assert!(
        agreement.ticks_compared >= 190,
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
        assert!(record.ticks_with_props >= 180, "{record:?}");
        assert_eq!(record.ignored, 0);
        let world = verified(peers.client(client).expect("client"));
        let in_use = world
            .iter_entities()
            .filter_map(|e| e.get::<PropProxy>())
            .filter(|p| p.prop.is_some())
            .count();
        assert_eq!(in_use, 8, "every prop has a proxy");
    }
    // The props touched the players: their verified states at tick 200 are the same on both
    // peers and differ from a run without props.
    let with_props = trace(&peers, 0).at(200);
    assert_eq!(with_props, trace(&peers, 1).at(200));
    let mut alone = self::peers(2, link, Vec::new(), wander);
    alone.run_until_verified(200).expect("run");
    alone.assert_all_agree();
    assert_ne!(with_props, trace(&alone, 0).at(200));
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
    peers.run_until_verified(120).expect("run");
    peers.assert_all_agree();
    let start = avatar_start(1);
    let first = trace(&peers, 0);
    let hit = first
        .verified
        .iter()
        .find(|(_, p)| (p[1] - start).length() > 0.01)
        .map(|(t, _)| *t)
        .expect("the prop hit player 1's avatar");
    let after = first.at(120);
    assert!(
        after[1].x - start.x > 0.5,
        "player 1's avatar was pushed along the throw: {after:?}"
    );
    for client in 0..2 {
        let trace = trace(&peers, client);
        assert_eq!(trace.at(120), after, "client {client}");
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
