//! An in-process hybrid run, one step at a time (the headless loop and the rendered view step
//! the same Apps in the same order), on `simsync::testing::HybridPeers`: a relay server and an
//! entity server, and one App per player running the players' session and an ownership
//! participant whose props are Rapier bodies of its own world, pushed by the avatars' twins
//! and grabbed and thrown by its scripted player ([`hands`]).

use std::sync::Arc;
use std::time::Duration;

use bevy::log::LogPlugin;
use bevy::prelude::*;
use bevy_rapier3d::prelude::{
    ColliderMassProperties, Friction, RigidBody, Sleeping, TimestepMode, Velocity,
};
use simsync::deterministic::SessionStats;
use simsync::hybrid::{
    AvatarCollider, HeldProp, HybridConfig, OwnedProp, PropGrabCommandsExt, hybrid_session,
};
use simsync::prelude::PackedInput;
use simsync::testing::{HarnessChecks, HybridPeers};
use simsync_net::LinkConditionerConfig;
use simsync_ownership::{BodyNetId, EntityServer, Ownable};

use crate::cli::HybridArgs;
use crate::driver::Failure;
use crate::game::{PUSH, SandboxGame, encode};
use crate::ownership::in_process::{Phase, link};
use crate::ownership::{DT, HZ, NetBody, settle_ticks};
use crate::trace::CompiledTrace;

use super::Setup;

/// Longest settling after `--settle-seconds`, waiting for props to rest or be released.
const MAX_EXTRA_SETTLE: Duration = Duration::from_secs(5);
/// A prop moving slower than this (m/s) on every App is at rest.
pub const REST_SPEED: f32 = 0.01;
/// Seed of both in-memory networks (fixed, so runs are reproducible).
const NETWORK_SEED: u64 = 0x5eed_0040;
/// Reach of a grab: the nearest prop whose centre is this close to the avatar's, m.
pub const GRAB_REACH: f32 = 2.5;
/// A held prop is kept this far in front of the avatar, m, and this high above its centre.
pub const HOLD_AHEAD: f32 = 1.2;
pub const HOLD_HEIGHT: f32 = 0.9;
/// A throw's speed along the facing direction, and upwards, m/s.
pub const THROW_SPEED: f32 = 8.0;
pub const THROW_LIFT: f32 = 2.5;

/// The hybrid configuration of the sandbox: 32 proxies, the piles' shapes.
pub fn config(setup: &Setup) -> HybridConfig {
    HybridConfig {
        shapes: setup.shapes.clone(),
        ..default()
    }
}

/// Player `player`'s input at `tick`: the trace's player `player mod` the trace's players
/// until tick `ticks`, then standing still (so the props come to rest).
pub fn scripted_input(trace: &CompiledTrace, player: u8, tick: i32, ticks: u32) -> PackedInput {
    if i64::from(tick) >= i64::from(ticks) {
        return PackedInput::default();
    }
    encode(&trace.input(player % trace.players().max(1), tick))
}

/// A hybrid run in this process.
pub struct HybridRun {
    /// The relay, the entity server and one App per player (client `i` plays player `i`).
    pub peers: HybridPeers<PackedInput>,
    /// Where the run is (it starts once every participant joined).
    pub phase: Phase,
    /// The most props each participant owned at once so far.
    pub owned_most: Vec<usize>,
    ticks: u32,
    min_settle: u32,
    max_settle: u32,
}

impl HybridRun {
    /// The Apps of `args`, stepped until every participant joined.
    ///
    /// # Errors
    /// Exit code 2 for bad link settings; 1 if an App cannot be made or a participant does
    /// not join.
    pub fn new(args: &HybridArgs, setup: &Setup, log: Option<LogPlugin>) -> Result<Self, Failure> {
        let link = link(&args.link)?;
        let min_settle = settle_ticks(args.settle_seconds);
        Ok(Self {
            peers: peers(setup, args, link, log)?,
            phase: Phase::Script(0),
            owned_most: vec![0; usize::from(setup.players)],
            ticks: args.ticks,
            min_settle,
            max_settle: min_settle + MAX_EXTRA_SETTLE.as_secs() as u32 * HZ,
        })
    }

    /// One frame of every App; counts the props each participant owns.
    ///
    /// # Errors
    /// Exit code 1 when a players' session reported a problem (a desync, a prediction that did
    /// not match verification, a disconnect).
    pub fn step(&mut self) -> Result<(), Failure> {
        self.peers
            .run_frames(1)
            .map_err(|e| Failure::run(format!("hybrid session: {e}")))?;
        for (peer, most) in self.owned_most.iter_mut().enumerate() {
            *most = (*most).max(owned_by(&self.peers, peer));
        }
        Ok(())
    }

    /// Steps once (nothing once done) and moves the phase on: `--ticks` ticks of the trace,
    /// then settling (the players stand still) until no prop is owned; then done.
    ///
    /// # Errors
    /// Exit code 1 if a step failed.
    pub fn advance(&mut self) -> Result<Phase, Failure> {
        let next = match self.phase {
            Phase::Joining(_) | Phase::Script(_) if self.verified() >= self.ticks => {
                Phase::Settling(0)
            }
            Phase::Joining(_) => Phase::Script(0),
            Phase::Script(t) => Phase::Script(t + 1),
            Phase::Settling(n)
                if n < self.min_settle
                    || (self.props_owned() > 0
                        && self.props_moving() > 0
                        && n < self.max_settle) =>
            {
                Phase::Settling(n + 1)
            }
            Phase::Settling(n) | Phase::Done(n) => Phase::Done(n),
        };
        if !matches!(next, Phase::Done(_)) {
            self.step()?;
        }
        self.phase = next;
        Ok(next)
    }

    /// The lowest verified tick of the players' sessions.
    pub fn verified(&self) -> u32 {
        self.peers
            .players()
            .verified_ticks()
            .into_iter()
            .flatten()
            .min()
            .map_or(0, |t| u32::try_from(t).unwrap_or(0))
    }

    /// Props moving faster than [`REST_SPEED`] on some App.
    pub fn props_moving(&self) -> usize {
        let mut moving = std::collections::BTreeSet::new();
        for client in 0..self.peers.players().clients() {
            let Ok(app) = self.peers.client(client) else {
                continue;
            };
            for entity in app.world().iter_entities() {
                let (Some(id), Some(v)) = (entity.get::<BodyNetId>(), entity.get::<Velocity>())
                else {
                    continue;
                };
                if v.linear.length() > REST_SPEED {
                    moving.insert(id.0);
                }
            }
        }
        moving.len()
    }

    /// Props owned on the entity server.
    pub fn props_owned(&self) -> usize {
        self.peers
            .entity_server()
            .and_then(|s| s.world().get_resource::<EntityServer>())
            .map_or(0, |s| {
                s.arbiter()
                    .records()
                    .iter()
                    .filter(|r| r.owner.is_some())
                    .count()
            })
    }
}

/// Props participant `peer` owns, as it sees them.
pub fn owned_by(peers: &HybridPeers<PackedInput>, peer: usize) -> usize {
    let (Some(me), Ok(app)) = (peers.participant_id(peer), peers.client(peer)) else {
        return 0;
    };
    app.world()
        .iter_entities()
        .filter_map(|e| e.get::<simsync_ownership::SimulationOwner>())
        .filter(|o| o.is_owned_by(me))
        .count()
}

/// The Apps: every player plays [`scripted_input`]; every App (and the entity server) has the
/// props and the ground and ramps; every client's player grabs and throws ([`hands`]).
fn peers(
    setup: &Setup,
    args: &HybridArgs,
    link: LinkConditionerConfig,
    log: Option<LogPlugin>,
) -> Result<HybridPeers<PackedInput>, Failure> {
    let game = SandboxGame::new(setup.players_scene.clone(), setup.players).hybrid();
    let (ticks, verify_predictions) = (args.ticks, !args.no_verify_predictions);
    let config = config(setup);
    let session_config = config.clone();
    let (trace, hands_trace) = (setup.trace.clone(), setup.trace.clone());
    let bodies = Arc::new(setup.bodies.clone());
    let kinds = Arc::new(setup.kinds.clone());
    let log = std::sync::Mutex::new(log);
    HybridPeers::builder(setup.players, config, move |_| {
        hybrid_session::<PackedInput, _>(game.clone(), session_config.clone())
    })
    .link(link)
    .seed(NETWORK_SEED)
    .scripted(move |player, tick| scripted_input(&trace, player, tick, ticks))
    .players(|players| {
        // A checksum every tick and prediction checks (unless turned off); the link's own
        // rollbacks, no forced ones.
        players.checks(HarnessChecks {
            verify_predictions,
            forced_rollback: 0,
            ..HarnessChecks::ON
        })
    })
    .scene(move |app| spawn_bodies(app, &bodies, &kinds))
    .customize(move |index, app| {
        if let Some(log) = log.lock().ok().and_then(|mut l| l.take()) {
            app.add_plugins(log);
        }
        app.insert_resource(TimestepMode::Fixed {
            dt: DT.as_secs_f32(),
            substeps: 1,
        })
        .insert_resource(Hands {
            player: index as u8,
            trace: hands_trace.clone(),
            ticks,
            done: -1,
            grabs: 0,
            throws: 0,
        })
        .add_systems(Update, hands);
    })
    .build()
    .map_err(|e| Failure::run(format!("hybrid session: {e}")))
}

/// The props (ids and kinds as laid out) and the ground and ramps (not networked) in an App's
/// world.
fn spawn_bodies(app: &mut App, bodies: &[NetBody], kinds: &[u8]) {
    for body in bodies {
        let mut entity = app.world_mut().spawn((
            body.kind,
            body.collider.clone(),
            Friction::coefficient(body.friction),
            body.transform,
        ));
        if body.kind != RigidBody::Dynamic {
            continue;
        }
        let kind = usize::try_from(body.id.0)
            .ok()
            .and_then(|i| kinds.get(i).copied())
            .unwrap_or(0);
        entity.insert((
            BodyNetId(body.id),
            Ownable,
            OwnedProp { kind },
            ColliderMassProperties::Density(body.density),
            Velocity::zero(),
            Sleeping::default(),
        ));
        if let Some(damping) = body.damping {
            entity.insert(damping);
        }
    }
}

/// A client's scripted hands (client-App resource): each press of the trace's push button by
/// this client's player grabs the nearest prop within [`GRAB_REACH`] of its avatar, or throws
/// the prop it holds; at the end of the trace (`--ticks`) the prop held is let go.
#[derive(Resource)]
pub struct Hands {
    player: u8,
    trace: Arc<CompiledTrace>,
    ticks: u32,
    /// The last tick handled.
    done: i32,
    /// Props grabbed and thrown so far (a let-go at the end counts as neither).
    pub grabs: u64,
    pub throws: u64,
}

/// The props nobody holds.
type FreeProps = (With<OwnedProp>, Without<HeldProp>);

/// Plays [`Hands`] for every tick the session polled since the last frame.
fn hands(
    mut commands: Commands,
    mut hands: ResMut<Hands>,
    stats: Option<Res<SessionStats>>,
    twins: Query<(&AvatarCollider, &Transform)>,
    held: Query<(Entity, &HeldProp, &Transform)>,
    props: Query<(Entity, &Transform), FreeProps>,
) {
    let Some(now) = stats.map(|s| s.local_tick) else {
        return;
    };
    let Some((_, avatar)) = twins.iter().find(|(t, _)| t.player == hands.player) else {
        return;
    };
    let from = avatar.translation;
    let (player, trace, ticks) = (hands.player, hands.trace.clone(), hands.ticks);
    while hands.done < now {
        hands.done += 1;
        let tick = hands.done;
        let input = |t| scripted_input(&trace, player, t, ticks);
        let (this, previous) = (input(tick), input(tick - 1));
        let mine = held.iter().find(|(_, h, _)| h.player == player);
        if i64::from(tick) == i64::from(ticks) {
            // The trace is over: let go of what is held, so it comes to rest.
            if let Some((entity, _, _)) = mine {
                commands.entity(entity).throw_prop(Vec3::ZERO);
            }
            continue;
        }
        if !this.just_pressed(&previous, PUSH) {
            continue;
        }
        let axes = Vec3::new(this.axis(0), 0.0, this.axis(1));
        let facing = axes.try_normalize().unwrap_or(Vec3::Z);
        if let Some((entity, _, _)) = mine {
            let velocity = facing * THROW_SPEED + Vec3::Y * THROW_LIFT;
            commands.entity(entity).throw_prop(velocity);
            hands.throws += 1;
            continue;
        }
        let nearest = props
            .iter()
            .map(|(e, t)| (e, t.translation.distance(from)))
            .filter(|(_, d)| *d <= GRAB_REACH)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((entity, _)) = nearest {
            let offset = facing * HOLD_AHEAD + Vec3::Y * HOLD_HEIGHT;
            commands.entity(entity).grab_prop(player, offset);
            hands.grabs += 1;
        }
    }
}
