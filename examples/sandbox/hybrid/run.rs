//! An in-process hybrid run, one step at a time (the headless loop and the rendered view step
//! the same Apps in the same order): the players' relay server and peers
//! (`simsync::testing::RelayPeers`), the props' entity server and participants
//! (`simsync_ownership::testing::OwnershipPeers`), and each peer's props handed from its
//! participant to its players' session every frame ([`HybridRun::hand_over`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bevy::log::LogPlugin;
use bevy::prelude::*;
use bevy_rapier3d::prelude::{RigidBody, Velocity};
use simsync::hybrid::{
    HybridConfig, HybridInput, HybridPlugin, OwnedProp, PropOwnedHere, hybrid_session,
};
use simsync::prelude::PackedInput;
use simsync::testing::{HarnessChecks, RelayPeers};
use simsync_net::LinkConditionerConfig;
use simsync_ownership::testing::OwnershipPeers;
use simsync_ownership::{BodyNetId, OwnershipClient, SimulationOwner};

use crate::cli::{HybridArgs, LinkArgs};
use crate::driver::Failure;
use crate::game::{SandboxGame, encode};
use crate::ownership::actors::{Actor, stop_script};
use crate::ownership::apps::{add_participant_game, add_server_scene};
use crate::ownership::in_process::{Phase, owned_bodies};
use crate::ownership::{DT, HZ, JOIN_STEPS, settle_ticks};

use super::Setup;

/// The session input of the players.
pub type Input = HybridInput<PackedInput>;

/// Longest settling after `--settle-seconds`, waiting for props to be released.
const MAX_EXTRA_SETTLE: Duration = Duration::from_secs(20);
/// Seeds of the two in-memory networks (fixed, so runs are reproducible).
const PLAYERS_SEED: u64 = 0x5eed_0040;
const PROPS_SEED: u64 = 0x5eed_0041;

/// The hybrid configuration of the sandbox: 32 proxies, the piles' shapes.
pub fn config(setup: &Setup) -> HybridConfig {
    HybridConfig {
        shapes: setup.shapes.clone(),
        ..default()
    }
}

/// A hybrid run in this process.
pub struct HybridRun {
    /// The players' relay server and peers (peer `i` plays player `i`).
    pub players: RelayPeers<Input>,
    /// The props' entity server and participants (participant `i` is peer `i`'s).
    pub props: OwnershipPeers,
    /// Where the run is.
    pub phase: Phase,
    /// The most props each participant owned at once so far.
    pub owned_most: Vec<usize>,
    ticks: u32,
    avatars: usize,
    min_settle: u32,
    max_settle: u32,
}

impl HybridRun {
    /// The Apps of `args` over two in-memory networks, not stepped yet.
    ///
    /// # Errors
    /// Exit code 2 for bad link settings; 1 if an App cannot be made.
    pub fn new(args: &HybridArgs, setup: &Setup, log: Option<LogPlugin>) -> Result<Self, Failure> {
        let link = link(&args.link)?;
        let min_settle = settle_ticks(args.settle_seconds);
        Ok(Self {
            players: players(setup, link)?,
            props: props(setup, link, log)?,
            phase: Phase::Joining(0),
            owned_most: vec![0; usize::from(setup.players)],
            ticks: args.ticks,
            avatars: usize::from(setup.players),
            min_settle,
            max_settle: min_settle + MAX_EXTRA_SETTLE.as_secs() as u32 * HZ,
        })
    }

    /// One frame of every App: the props' server and participants, each peer's props handed
    /// over, then the players' relay and peers.
    ///
    /// # Errors
    /// Exit code 1 when a players' session reported a problem (a desync, a prediction that did
    /// not match verification, a disconnect).
    pub fn step(&mut self) -> Result<(), Failure> {
        self.props.step();
        self.hand_over();
        self.players
            .run_frames(1)
            .map_err(|e| Failure::run(format!("players' session: {e}")))
    }

    /// Steps once (nothing once done) and moves the phase on: joined → the participants'
    /// scripts start; `--ticks` scripted ticks → they stop; props settled → done.
    ///
    /// # Errors
    /// Exit code 1 if the participants did not join within 10 s or a step failed.
    pub fn advance(&mut self) -> Result<Phase, Failure> {
        let next = match self.phase {
            Phase::Joining(_) if self.props.all_joined() => {
                for i in 0..self.props.len() {
                    if let Some(p) = self.props.participant_mut(i) {
                        p.world_mut().resource_mut::<Actor>().running = true;
                    }
                }
                Phase::Script(0)
            }
            Phase::Joining(n) if n >= JOIN_STEPS => {
                return Err(Failure::run("the participants did not join in 10 s"));
            }
            Phase::Joining(n) => Phase::Joining(n + 1),
            Phase::Script(t) if t >= self.ticks => {
                for i in 0..self.props.len() {
                    if let Some(p) = self.props.participant_mut(i) {
                        stop_script(p);
                    }
                }
                Phase::Settling(0)
            }
            Phase::Script(t) => Phase::Script(t + 1),
            Phase::Settling(n)
                if n < self.min_settle
                    || (owned_bodies(&self.props, self.avatars) > 0 && n < self.max_settle) =>
            {
                Phase::Settling(n + 1)
            }
            Phase::Settling(n) => Phase::Done(n),
            Phase::Done(n) => Phase::Done(n),
        };
        if !matches!(next, Phase::Done(_) | Phase::Script(0) | Phase::Settling(0)) {
            self.step()?;
        }
        self.phase = next;
        Ok(next)
    }

    /// Hands each participant's props to its peer's players' session: the transform and
    /// velocity of every prop, and [`PropOwnedHere`] on those the participant owns (so its
    /// inputs carry them).
    pub fn hand_over(&mut self) {
        for peer in 0..self.props.len() {
            let Some(states) = self.props.participant_mut(peer).map(prop_states) else {
                continue;
            };
            let owned = states.values().filter(|s| s.2).count();
            if let Some(most) = self.owned_most.get_mut(peer) {
                *most = (*most).max(owned);
            }
            let Ok(app) = self.players.client_mut(peer) else {
                continue;
            };
            apply_prop_states(app.world_mut(), &states);
        }
    }
}

/// Every prop of a participant's world: `id → (transform, velocity, owned by it)`.
fn prop_states(app: &mut App) -> HashMap<u64, (Transform, Velocity, bool)> {
    let world = app.world_mut();
    let me = world.get_resource::<OwnershipClient>().and_then(|c| c.me());
    let mut query = world.query_filtered::<(
        &BodyNetId,
        &Transform,
        &Velocity,
        Option<&SimulationOwner>,
    ), With<PropMark>>();
    query
        .iter(world)
        .map(|(id, t, v, owner)| {
            let mine = me.is_some_and(|me| owner.is_some_and(|o| o.is_owned_by(me)));
            (id.0.0, (*t, *v, mine))
        })
        .collect()
}

/// Writes `states` to the props of a peer's players' App.
fn apply_prop_states(world: &mut World, states: &HashMap<u64, (Transform, Velocity, bool)>) {
    let mut query = world.query_filtered::<(
        Entity,
        &BodyNetId,
        &mut Transform,
        &mut Velocity,
        Has<PropOwnedHere>,
    ), With<OwnedProp>>();
    let mut marks = Vec::new();
    for (entity, id, mut transform, mut velocity, marked) in query.iter_mut(world) {
        let Some((t, v, mine)) = states.get(&id.0.0) else {
            continue;
        };
        *transform = *t;
        *velocity = *v;
        if *mine != marked {
            marks.push((entity, *mine));
        }
    }
    for (entity, mine) in marks {
        let mut entity = world.entity_mut(entity);
        if mine {
            entity.insert(PropOwnedHere);
        } else {
            entity.remove::<PropOwnedHere>();
        }
    }
}

/// Marks a prop in a participant's world (not an avatar, not static).
#[derive(Component, Debug, Clone, Copy)]
pub struct PropMark;

/// One direction of the simulated link: half the round trip and half its jitter.
fn link(args: &LinkArgs) -> Result<LinkConditionerConfig, Failure> {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(args.rtt_ms / 2, args.net_jitter_ms / 2)
        .with_loss(args.loss_percent);
    link.validate()
        .map_err(|e| Failure::input(format!("bad link settings: {e}")))?;
    Ok(link)
}

/// The players' relay server and peers: each peer's session plays the trace for every player
/// (its own player's inputs are sent), with the props as [`OwnedProp`]s of its App.
fn players(setup: &Setup, link: LinkConditionerConfig) -> Result<RelayPeers<Input>, Failure> {
    let game = SandboxGame::new(setup.players_scene.clone(), setup.players).hybrid();
    let config = config(setup);
    let trace = setup.trace.clone();
    let props: Vec<(u64, u8, Transform)> = setup
        .prop_bodies()
        .map(|b| (b.id.0, setup.kind_of(b.id.0), b.transform))
        .collect();
    let session_config = config.clone();
    RelayPeers::builder(setup.players, move |_| {
        hybrid_session::<PackedInput, _>(game.clone(), session_config.clone())
    })
    .link(link)
    .seed(PLAYERS_SEED)
    // Prediction checks and a checksum every tick; the link's own rollbacks, no forced ones.
    .checks(HarnessChecks {
        forced_rollback: 0,
        ..HarnessChecks::ON
    })
    .customize(move |_, app| {
        let trace = trace.clone();
        app.add_plugins(
            HybridPlugin::<PackedInput>::new(config.clone())
                .scripted(move |player, tick| encode(&trace.input(player, tick))),
        );
        for &(id, kind, transform) in &props {
            app.world_mut().spawn((
                BodyNetId(simsync_ownership::BodyId(id)),
                OwnedProp { kind },
                transform,
                Velocity::zero(),
            ));
        }
    })
    .build()
    .map_err(|e| Failure::run(format!("players' session: {e}")))
}

/// The props' entity server and one participant per player, each playing its part of the
/// script on its copy of the bodies.
fn props(
    setup: &Setup,
    link: LinkConditionerConfig,
    mut log: Option<LogPlugin>,
) -> Result<OwnershipPeers, Failure> {
    let (server_bodies, bodies) = (setup.bodies.clone(), setup.bodies.clone());
    let script = Arc::clone(&setup.script);
    let first_prop = u64::from(setup.players);
    OwnershipPeers::builder(usize::from(setup.players))
        .tick(DT)
        .seed(PROPS_SEED)
        .link(link)
        .server(move |app| {
            if let Some(log) = log.take() {
                app.add_plugins(log);
            }
            add_server_scene(app, &server_bodies, false);
        })
        .participant(move |index, app| {
            add_participant_game(app, &bodies, index as u8, script.clone());
            let mut query = app.world_mut().query::<(Entity, &BodyNetId, &RigidBody)>();
            let props: Vec<Entity> = query
                .iter(app.world())
                .filter(|(_, id, kind)| id.0.0 >= first_prop && **kind == RigidBody::Dynamic)
                .map(|(e, ..)| e)
                .collect();
            for entity in props {
                app.world_mut().entity_mut(entity).insert(PropMark);
            }
        })
        .build_unjoined()
        .map_err(|e| Failure::run(format!("props' session: {e}")))
}
