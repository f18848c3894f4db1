//! `--mode ownership`: distributed physics with simulation ownership (`OwnershipPlugin`).
//!
//! An entity server and `--participants` participants (default 3), each its own Bevy App with
//! its own Rapier world built from the sandbox scene, run in this process over the in-memory
//! transport with a seeded link conditioner — the network mode's flags: `--rtt-ms` (default 80,
//! so 40 ms each way), `--net-jitter-ms` (default 10, so ± 5 ms each way) and `--loss-percent`
//! (default 2 %, each way). Every App steps a simulated 1/64 s per
//! update. Each participant owns its avatar (the scene's player ball, held for good, so at
//! GRAB) and follows its part of a scripted trace (`--ownership-trace`, default
//! `assets/traces/ownership_three.ron`): walking into piles (avatar contacts: POKE), pushing and
//! poking bodies (script edits: POKE), grabbing and carrying them (GRAB). Bodies knocked by an
//! owned body are bid for at one priority less (rule 11), bodies moving unowned are
//! volunteered for (rule 7), bodies at rest are released (rule 12).
//!
//! The script runs for `--ticks` ticks; then inputs stop and the session settles for at least
//! `--settle-seconds` (and until no body but the avatars is owned, at most 20 s more), and the
//! copies of every dynamic body on all participants are compared: `max_divergence_m` is the
//! largest distance between two participants' copies of one body.
//!
//! Bodies are numbered the same way on every App (the server has only ids, kinds and
//! transforms, no physics): the avatars first (ids `0..participants`), then the pile bodies in
//! scene order, then the ground and ramps (static, never ownable). Pile bodies get some damping
//! in this mode (linear 0.3, angular 0.8) so that pushed bodies, balls above all, come to rest.
//!
//! Over UDP, in separate processes: `--server --bind ADDR` runs the entity server alone,
//! `--client --connect ADDR --participant-index I` one participant playing trace participant
//! `I`, both paced to real time. Each prints its own counters; the divergence needs every copy,
//! so only the in-process run reports it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bevy::log::LogPlugin;
use bevy::prelude::*;
use bevy_rapier3d::prelude::{
    Collider, ColliderMassProperties, Damping, Friction, NoUserData, RapierPhysicsPlugin,
    RigidBody, Sleeping, TimestepMode, Velocity,
};
use serde::{Deserialize, Serialize};
use simsync_net::LinkConditionerConfig;
use simsync_net::{
    ClientTransport, MemoryNetwork, NETCODE_PROTOCOL_ID, NetAppExt, NetClientPlugin, NetClock,
    NetServerPlugin, ServerTransport, UdpClientTransport, UdpServerConfig, UdpServerTransport,
};
use simsync_ownership::{
    BodyId, BodyNetId, EntityServer, Ownable, OwnershipEntityCommandsExt, OwnershipParticipant,
    OwnershipPlugin, ParticipantAvatar, RefusalCounts, RefusalReason, SimulationOwner,
};

use super::cli::Args;
use super::driver::Failure;
use super::error::LoadError;
use super::game::{GROUNDED_VERTICAL_SPEED, JUMP_SPEED, MAX_SPEED, MOVE_ACCEL, PUSH_LIFT};
use super::scene::{Scene, Shape, load_scene};

/// One step of simulated time (64 Hz).
const DT: Duration = Duration::from_micros(15_625);
/// Steps per second.
const HZ: u32 = 64;
/// Reach of a push, m (bodies whose centre is this close to the avatar's).
const PUSH_RADIUS: f32 = 2.0;
/// Velocity change of a push on a body at the avatar's centre (a quarter of it at the edge of
/// the reach), m/s.
const PUSH_SPEED: f32 = 3.0;
/// Reach of a poke or a grab, m.
const REACH: f32 = 3.0;
/// Velocity change of a poke, m/s.
const POKE_SPEED: f32 = 2.5;
/// A carried body is held this far in front of the avatar, m.
const HOLD_DISTANCE: f32 = 1.3;
/// ... and this high above its centre, m.
const HOLD_HEIGHT: f32 = 0.9;
/// A carried body is steered towards the hold point at this rate, 1/s, up to `HOLD_SPEED`.
const HOLD_GAIN: f32 = 8.0;
/// Top speed of a carried body, m/s.
const HOLD_SPEED: f32 = 6.0;
/// Damping of pile bodies in this mode.
const PILE_DAMPING: Damping = Damping {
    linear_damping: 0.3,
    angular_damping: 0.8,
};
/// Damping of avatars (as in the deterministic game).
const AVATAR_DAMPING: Damping = Damping {
    linear_damping: 0.2,
    angular_damping: 1.0,
};
/// Longest settling after `--settle-seconds`, waiting for bodies to be released.
const MAX_EXTRA_SETTLE: Duration = Duration::from_secs(20);
/// Seed of the in-memory network's random choices (fixed, so runs are reproducible).
const NETWORK_SEED: u64 = 0x005e_ed0f_0b1d;
/// Steps allowed for every participant to join.
const JOIN_STEPS: u32 = 10 * HZ;

// ---------------------------------------------------------------------------------------------
// The trace.

/// A whole ownership trace file (see `assets/traces/ownership_three.ron`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceFile {
    participants: u8,
    segments: Vec<Segment>,
}

/// One participant's actions, held for `ticks` ticks from `start`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Segment {
    participant: u8,
    start: u32,
    ticks: u32,
    #[serde(default, rename = "move")]
    movement: [f32; 2],
    #[serde(default)]
    jump: bool,
    #[serde(default)]
    push: bool,
    #[serde(default)]
    poke: bool,
    #[serde(default)]
    grab: bool,
}

/// One participant's actions on one tick.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Actions {
    movement: [f32; 2],
    jump: bool,
    push: bool,
    poke: bool,
    grab: bool,
}

/// A validated trace, per participant, runs sorted by start.
#[derive(Debug, Clone, Default)]
struct Script {
    participants: u8,
    runs: Vec<Vec<(u32, u32, Actions)>>,
    end_tick: u32,
    segments: usize,
}

impl Script {
    fn actions(&self, participant: u8, tick: u32) -> Actions {
        let Some(runs) = self.runs.get(usize::from(participant)) else {
            return Actions::default();
        };
        let i = runs.partition_point(|&(start, _, _)| start <= tick);
        match i.checked_sub(1).map(|i| runs[i]) {
            Some((_, end, actions)) if tick < end => actions,
            _ => Actions::default(),
        }
    }
}

fn invalid(path: &Path, field: String, reason: String) -> LoadError {
    LoadError::Invalid {
        path: path.to_path_buf(),
        kind: "ownership trace",
        field,
        reason,
    }
}

/// Reads, parses and validates an ownership trace.
fn load_script(path: &Path) -> Result<Script, LoadError> {
    let text = LoadError::read(path)?;
    let file: TraceFile = ron::from_str(&text).map_err(|e| LoadError::parse(path, e))?;
    if file.participants == 0 {
        return Err(invalid(
            path,
            "participants".into(),
            "is 0: a trace has at least one participant".into(),
        ));
    }
    let mut runs = vec![Vec::new(); usize::from(file.participants)];
    for (i, s) in file.segments.iter().enumerate() {
        if s.participant >= file.participants {
            return Err(invalid(
                path,
                format!("segments[{i}].participant"),
                format!("is {}: the trace has {}", s.participant, file.participants),
            ));
        }
        if s.ticks == 0 {
            return Err(invalid(
                path,
                format!("segments[{i}].ticks"),
                "is 0: must be ≥ 1".into(),
            ));
        }
        let Some(end) = s.start.checked_add(s.ticks) else {
            return Err(invalid(
                path,
                format!("segments[{i}]"),
                "ends past the last tick".into(),
            ));
        };
        if !s
            .movement
            .iter()
            .all(|a| a.is_finite() && (-1.0..=1.0).contains(a))
        {
            return Err(invalid(
                path,
                format!("segments[{i}].move"),
                format!("is {:?}: each axis must be in [-1, 1]", s.movement),
            ));
        }
        runs[usize::from(s.participant)].push((
            s.start,
            end,
            Actions {
                movement: s.movement,
                jump: s.jump,
                push: s.push,
                poke: s.poke,
                grab: s.grab,
            },
        ));
    }
    for (participant, list) in runs.iter_mut().enumerate() {
        list.sort_by_key(|&(start, _, _)| start);
        if let Some(pair) = list.windows(2).find(|w| w[1].0 < w[0].1) {
            return Err(invalid(
                path,
                "segments".into(),
                format!(
                    "participant {participant} has overlapping segments {}..{} and {}..{}",
                    pair[0].0, pair[0].1, pair[1].0, pair[1].1
                ),
            ));
        }
    }
    let end_tick = runs.iter().flatten().map(|r| r.1).max().unwrap_or(0);
    Ok(Script {
        participants: file.participants,
        runs,
        end_tick,
        segments: file.segments.len(),
    })
}

// ---------------------------------------------------------------------------------------------
// The scene, as bodies with network ids.

/// Marks an avatar (any participant's) in a participant's world.
#[derive(Component, Debug, Clone, Copy)]
struct AvatarBody;

/// One body of the scene with its network id.
#[derive(Debug, Clone)]
struct NetBody {
    id: BodyId,
    kind: RigidBody,
    transform: Transform,
    collider: Collider,
    density: f32,
    friction: f32,
    damping: Option<Damping>,
    /// The participant whose avatar this is.
    avatar_of: Option<u8>,
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
fn net_bodies(scene: &Scene, participants: u8) -> Vec<NetBody> {
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
    for pile in &scene.piles {
        for position in pile.positions() {
            bodies.push(NetBody {
                id: id(),
                kind: RigidBody::Dynamic,
                transform: Transform::from_translation(Vec3::from_array(position)),
                collider: collider(&pile.shape),
                density: pile.density,
                friction: pile.friction,
                damping: Some(PILE_DAMPING),
                avatar_of: None,
            });
        }
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

// ---------------------------------------------------------------------------------------------
// The Apps.

/// What a participant's script does (participant-App resource).
#[derive(Resource, Debug)]
struct Actor {
    /// Which participant of the trace it plays.
    index: u8,
    script: Arc<Script>,
    /// Scripted ticks run so far (0 until started).
    tick: u32,
    /// The script runs (set once everyone joined; cleared to stop inputs).
    running: bool,
    previous: Actions,
    /// Horizontal direction the avatar last moved in.
    facing: Vec3,
    /// The body being carried.
    grabbed: Option<Entity>,
}

/// The entity-server App, bodies registered by id and kind.
fn server_app(bodies: &[NetBody], transport: impl Into<ServerTransport>, log: bool) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    if log {
        app.add_plugins(LogPlugin::default());
    }
    app.add_plugins(NetServerPlugin::default().with_clock(NetClock::Fixed(DT)))
        .add_plugins(OwnershipPlugin::entity_server())
        .insert_net_server(transport);
    for body in bodies {
        app.world_mut()
            .spawn((BodyNetId(body.id), body.kind, body.transform));
    }
    app
}

/// A participant App with its own Rapier world, playing trace participant `index`.
fn participant_app(
    bodies: &[NetBody],
    index: u8,
    script: Arc<Script>,
    transport: impl Into<ClientTransport>,
    log: bool,
) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    if log {
        app.add_plugins(LogPlugin::default());
    }
    app.add_plugins((
        TransformPlugin,
        RapierPhysicsPlugin::<NoUserData>::default(),
    ))
    .insert_resource(TimestepMode::Fixed {
        dt: DT.as_secs_f32(),
        substeps: 1,
    })
    .add_plugins(NetClientPlugin::default().with_clock(NetClock::Fixed(DT)))
    .add_plugins(OwnershipPlugin::participant().with_name(format!("participant {index}")))
    .insert_resource(Actor {
        index,
        script,
        tick: 0,
        running: false,
        previous: Actions::default(),
        facing: Vec3::Z,
        grabbed: None,
    })
    .add_systems(Update, act)
    .insert_net_client(transport);
    for body in bodies {
        let mut entity = app.world_mut().spawn((
            BodyNetId(body.id),
            body.kind,
            body.transform,
            body.collider.clone(),
            Friction::coefficient(body.friction),
        ));
        if body.kind == RigidBody::Dynamic {
            entity.insert((
                Ownable,
                ColliderMassProperties::Density(body.density),
                Velocity::zero(),
                Sleeping::default(),
            ));
        }
        if let Some(damping) = body.damping {
            entity.insert(damping);
        }
        if let Some(owner) = body.avatar_of {
            entity.insert(AvatarBody);
            if owner == index {
                entity.insert(ParticipantAvatar);
            }
        }
    }
    app
}

type ActBodies<'a> = (
    Entity,
    &'a Transform,
    &'a mut Velocity,
    Option<&'a SimulationOwner>,
    Has<AvatarBody>,
    Has<ParticipantAvatar>,
);

/// The nearest body (not an avatar) within `reach` of `from`.
fn nearest(
    bodies: &Query<ActBodies<'static>, With<Ownable>>,
    from: Vec3,
    reach: f32,
) -> Option<Entity> {
    bodies
        .iter()
        .filter(|(.., avatar, _)| !avatar)
        .map(|(e, t, ..)| (e, t.translation.distance(from)))
        .filter(|(_, d)| *d <= reach)
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(e, _)| e)
}

/// `Update`: one tick of the participant's script (velocity changes are script edits, so every
/// body changed is poked — ownership rule 8).
fn act(
    mut actor: ResMut<Actor>,
    participant: Res<OwnershipParticipant>,
    mut bodies: Query<ActBodies<'static>, With<Ownable>>,
    mut commands: Commands,
) {
    if !actor.running {
        return;
    }
    actor.tick += 1;
    let input = actor.script.actions(actor.index, actor.tick);
    let previous = std::mem::replace(&mut actor.previous, input);
    let pressed = |now: bool, before: bool| now && !before;
    let Some((avatar, avatar_at)) = bodies
        .iter()
        .find(|(.., mine)| *mine)
        .map(|(e, t, ..)| (e, t.translation))
    else {
        return;
    };
    let dt = DT.as_secs_f32();
    // Movement and jump.
    let wish = Vec3::new(input.movement[0], 0.0, input.movement[1]).clamp_length_max(1.0);
    if wish != Vec3::ZERO {
        actor.facing = wish.normalize();
    }
    if let Ok((.., mut velocity, _, _, _)) = bodies.get_mut(avatar) {
        if wish != Vec3::ZERO {
            let horizontal = Vec3::new(velocity.linear.x, 0.0, velocity.linear.z);
            velocity.linear += (wish * MAX_SPEED - horizontal).clamp_length_max(MOVE_ACCEL * dt);
        }
        if pressed(input.jump, previous.jump) && velocity.linear.y.abs() < GROUNDED_VERTICAL_SPEED {
            velocity.linear.y += JUMP_SPEED;
        }
    }
    // Push: every body in reach, outwards.
    if pressed(input.push, previous.push) {
        for (entity, transform, mut velocity, _, is_avatar, _) in &mut bodies {
            let offset = transform.translation - avatar_at;
            let distance = offset.length();
            if is_avatar || distance > PUSH_RADIUS {
                continue;
            }
            let outward = offset.try_normalize().unwrap_or(Vec3::Y);
            let direction = (outward + Vec3::Y * PUSH_LIFT).normalize_or(Vec3::Y);
            velocity.linear += direction * PUSH_SPEED * (1.0 - 0.75 * distance / PUSH_RADIUS);
            commands.entity(entity).poke();
        }
    }
    // Poke: the nearest body, a shove away from the avatar.
    if pressed(input.poke, previous.poke)
        && let Some(target) = nearest(&bodies, avatar_at, REACH)
        && let Ok((_, transform, mut velocity, ..)) = bodies.get_mut(target)
    {
        let away = (transform.translation - avatar_at)
            .try_normalize()
            .unwrap_or(actor.facing);
        velocity.linear += (away + Vec3::Y * PUSH_LIFT).normalize_or(Vec3::Y) * POKE_SPEED;
        commands.entity(target).poke();
    }
    // Grab: take the nearest body on press, carry it while held, let go on release.
    if pressed(input.grab, previous.grab)
        && let Some(target) = nearest(&bodies, avatar_at, REACH)
    {
        commands.entity(target).grab();
        actor.grabbed = Some(target);
    }
    if !input.grab
        && let Some(held) = actor.grabbed.take()
    {
        commands.entity(held).release_grab();
    }
    if let Some(held) = actor.grabbed
        && let Ok((_, transform, mut velocity, owner, ..)) = bodies.get_mut(held)
        && owner.is_some_and(|o| o.owner.is_some() && o.owner == participant.me())
    {
        let hold = avatar_at + actor.facing * HOLD_DISTANCE + Vec3::Y * HOLD_HEIGHT;
        velocity.linear = ((hold - transform.translation) * HOLD_GAIN).clamp_length_max(HOLD_SPEED);
        velocity.angular *= 0.8;
    }
}

/// Stops a participant's script and lets go of what it carries.
fn stop_script(app: &mut App) {
    let world = app.world_mut();
    let held = {
        let mut actor = world.resource_mut::<Actor>();
        actor.running = false;
        actor.grabbed.take()
    };
    if let Some(held) = held {
        world.commands().entity(held).release_grab();
        world.flush();
    }
}

// ---------------------------------------------------------------------------------------------
// The summary.

/// What an ownership run reports; serialized as the `--summary-json` object.
#[derive(Debug, Clone, Serialize)]
struct Summary {
    mode: &'static str,
    participants: u8,
    /// Scripted ticks, then settling ticks (64 per second).
    ticks: u32,
    settle_ticks: u32,
    /// One-way latency and jitter, ms, and loss per direction, percent.
    latency_ms: u32,
    jitter_ms: u32,
    loss_percent: f64,
    /// Changes of a body's owner on the entity server (grants to a new owner, releases,
    /// expiries, disconnect clears).
    ownership_changes: u64,
    /// Bids sent by all participants (resends and priority changes included).
    bids_sent: u64,
    /// Of those, resends of unanswered bids (rule 6).
    bid_resends: u64,
    /// Bids and priority changes the server granted.
    bids_granted: u64,
    /// Bids the server refused, per reason.
    bids_refused: BTreeMap<&'static str, u64>,
    /// Releases (rule 12) the server accepted.
    releases: u64,
    /// Releases the server refused (the sender no longer owned the body), per reason.
    releases_refused: BTreeMap<&'static str, u64>,
    /// State updates the server refused (sent before the sender heard it lost the body), per
    /// reason.
    state_updates_refused: BTreeMap<&'static str, u64>,
    /// Owners cleared for silence or disconnect (rule 5).
    owners_expired: u64,
    /// State updates the participants sent for bodies they own.
    state_updates_sent: u64,
    /// State updates the server relayed to the other participants.
    state_updates_relayed: u64,
    /// Mean encoded size of the state updates sent, bytes (`ClientMessage` as sent, before
    /// renet's framing).
    bytes_per_state_update: f64,
    /// Largest distance between two participants' copies of one body at the end, m.
    max_divergence_m: f64,
    /// The body it was measured on.
    max_divergence_body: u64,
    /// Dynamic bodies compared.
    bodies_compared: usize,
    /// Bodies other than avatars still owned at the end.
    bodies_owned_at_end: usize,
    /// Messages the server could not decode.
    malformed_messages: u64,
}

fn reason_name(reason: RefusalReason) -> &'static str {
    match reason {
        RefusalReason::Locked => "locked",
        RefusalReason::LowerPriority => "lower_priority",
        RefusalReason::LockedOutEqualPriority => "locked_out_equal_priority",
        RefusalReason::NotOwner => "not_owner",
        RefusalReason::UnknownBody => "unknown_body",
        RefusalReason::NotOwnable => "not_ownable",
        RefusalReason::PriorityTooHigh => "priority_too_high",
        RefusalReason::PriorityTooLow => "priority_too_low",
    }
}

fn by_reason(counts: &[RefusalCounts]) -> BTreeMap<&'static str, u64> {
    let mut map = BTreeMap::new();
    for c in counts {
        for (reason, n) in c.iter().filter(|(_, n)| *n > 0) {
            *map.entry(reason_name(reason)).or_default() += n;
        }
    }
    map
}

impl Summary {
    fn to_text(&self) -> String {
        let list = |map: &BTreeMap<&'static str, u64>| {
            if map.is_empty() {
                return "none".to_string();
            }
            map.iter()
                .map(|(r, n)| format!("{r} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "summary (ownership mode, {} participants, {} + {} settling ticks, {} ± {} ms, {} % loss)\n\
             \x20 ownership changes       {}\n\
             \x20 bids sent               {} ({} resends)\n\
             \x20 bids granted            {}\n\
             \x20 bids refused            {}\n\
             \x20 releases                {} ({} refused: {})\n\
             \x20 state updates refused   {}\n\
             \x20 owners expired          {}\n\
             \x20 state updates           {} sent, {} relayed, {:.1} bytes each\n\
             \x20 bodies owned at end     {} (avatars not counted)\n\
             max divergence {:.6} m (body {}) over {} dynamic bodies",
            self.participants,
            self.ticks,
            self.settle_ticks,
            self.latency_ms,
            self.jitter_ms,
            self.loss_percent,
            self.ownership_changes,
            self.bids_sent,
            self.bid_resends,
            self.bids_granted,
            list(&self.bids_refused),
            self.releases,
            self.releases_refused.values().sum::<u64>(),
            list(&self.releases_refused),
            list(&self.state_updates_refused),
            self.owners_expired,
            self.state_updates_sent,
            self.state_updates_relayed,
            self.bytes_per_state_update,
            self.bodies_owned_at_end,
            self.max_divergence_m,
            self.max_divergence_body,
            self.bodies_compared,
        )
    }
}

fn write_json<T: Serialize>(value: &T, path: &Path) -> Result<(), Failure> {
    let json = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::run(format!("cannot encode the summary: {e}")))?;
    std::fs::write(path, json + "\n")
        .map_err(|e| Failure::input(format!("cannot write {}: {e}", path.display())))
}

// ---------------------------------------------------------------------------------------------
// Running.

/// Runs ownership mode (see the module docs).
///
/// # Errors
/// Exit code 2 for bad arguments or input files, 1 when the run fails or the copies diverge by
/// 1 cm or more.
pub fn run(args: &Args) -> Result<ExitCode, Failure> {
    let scene = load_scene(&args.scene).map_err(|e| Failure::input(e.to_string()))?;
    let script = load_script(&args.ownership_trace).map_err(|e| Failure::input(e.to_string()))?;
    // Every App of a session must number the bodies alike, so a `--client` builds the scene
    // for `--participants` avatars too (and needs its index below that).
    let participants = args.participants;
    if usize::from(participants) > scene.players.len() {
        return Err(Failure::input(format!(
            "--participants {participants} but {} has only {} player spawns",
            args.scene.display(),
            scene.players.len()
        )));
    }
    if args.client && args.participant_index >= participants {
        return Err(Failure::input(format!(
            "--participant-index {} but the session has {participants} participants \
             (--participants)",
            args.participant_index
        )));
    }
    let bodies = net_bodies(&scene, participants);
    let script = Arc::new(script);
    let role = match (args.server, args.client) {
        (true, _) => "entity server over UDP".to_string(),
        (_, true) => format!("participant {} over UDP", args.participant_index),
        _ => "in-process".to_string(),
    };
    println!(
        "sandbox: ownership mode ({role}), {} participants; scene {} ({} bodies, {} dynamic), \
         trace {} ({} segments for {} participants, {} ticks)",
        participants,
        args.scene.display(),
        bodies.len(),
        bodies
            .iter()
            .filter(|b| b.kind == RigidBody::Dynamic)
            .count(),
        args.ownership_trace.display(),
        script.segments,
        script.participants,
        script.end_tick,
    );
    if let (true, Some(bind)) = (args.server, args.bind) {
        run_udp_server(args, bind, &bodies)
    } else if let (true, Some(connect)) = (args.client, args.connect) {
        run_udp_client(args, connect, &bodies, script)
    } else {
        run_in_process(args, &bodies, script)
    }
}

/// One direction of the simulated link: half the round trip and half its jitter.
fn link(args: &Args) -> Result<LinkConditionerConfig, Failure> {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(args.rtt_ms / 2, args.net_jitter_ms / 2)
        .with_loss(args.loss_percent);
    link.validate()
        .map_err(|e| Failure::input(format!("bad link settings: {e}")))?;
    Ok(link)
}

fn run_in_process(
    args: &Args,
    bodies: &[NetBody],
    script: Arc<Script>,
) -> Result<ExitCode, Failure> {
    let network = MemoryNetwork::new(NETWORK_SEED, link(args)?)
        .map_err(|e| Failure::input(format!("bad link settings: {e}")))?;
    let transport = network
        .server_transport()
        .map_err(|e| Failure::run(e.to_string()))?;
    let mut server = server_app(bodies, transport, true);
    let mut participants = Vec::new();
    for index in 0..args.participants {
        let transport = network
            .client_transport(u64::from(index) + 1)
            .map_err(|e| Failure::run(e.to_string()))?;
        participants.push(participant_app(
            bodies,
            index,
            script.clone(),
            transport,
            false,
        ));
    }
    let step = |server: &mut App, participants: &mut [App]| {
        server.update();
        for p in participants.iter_mut() {
            p.update();
        }
    };
    // Join.
    let joined = |participants: &[App]| {
        participants
            .iter()
            .all(|p| p.world().resource::<OwnershipParticipant>().me().is_some())
    };
    let mut join_steps = 0;
    while !joined(&participants) {
        if join_steps >= JOIN_STEPS {
            return Err(Failure::run("the participants did not join in 10 s"));
        }
        step(&mut server, &mut participants);
        join_steps += 1;
    }
    for p in &mut participants {
        p.world_mut().resource_mut::<Actor>().running = true;
    }
    // The script.
    let start = Instant::now();
    let mut last_report = start;
    for tick in 1..=args.ticks {
        step(&mut server, &mut participants);
        let now = Instant::now();
        if now - last_report >= Duration::from_secs(1) {
            last_report = now;
            let s = server.world().resource::<EntityServer>();
            println!(
                "[{:5.1} s] tick {tick}/{}  ownership changes {}  relayed {}",
                (now - start).as_secs_f64(),
                args.ticks,
                s.arbiter().stats().ownership_changes,
                s.stats().state_updates_relayed,
            );
        }
    }
    // Settle: inputs stop; wait until only avatars are owned.
    for p in &mut participants {
        stop_script(p);
    }
    let avatars = usize::from(args.participants);
    let owned_bodies = |server: &App| {
        server
            .world()
            .resource::<EntityServer>()
            .arbiter()
            .records()
            .iter()
            .filter(|r| r.owner.is_some() && r.body.0 >= avatars as u64)
            .count()
    };
    let min_settle = (args.settle_seconds.max(0.0) * f64::from(HZ)).ceil() as u32;
    let max_settle = min_settle + MAX_EXTRA_SETTLE.as_secs() as u32 * HZ;
    let mut settle_ticks = 0;
    while settle_ticks < min_settle || (owned_bodies(&server) > 0 && settle_ticks < max_settle) {
        step(&mut server, &mut participants);
        settle_ticks += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    println!(
        "finished in {elapsed:.2} s ({} ticks, {:.0} ticks/s for 1 server + {} participants)",
        args.ticks + settle_ticks,
        f64::from(args.ticks + settle_ticks) / elapsed.max(1e-9),
        args.participants
    );
    // Compare every copy of every dynamic body.
    let mut worst = (0.0f32, 0u64);
    let mut compared = 0;
    for body in bodies.iter().filter(|b| b.kind == RigidBody::Dynamic) {
        let copies: Vec<Vec3> = participants
            .iter()
            .filter_map(|p| {
                let state = p.world().resource::<OwnershipParticipant>();
                let entity = state.entity_of(body.id)?;
                p.world().get::<Transform>(entity).map(|t| t.translation)
            })
            .collect();
        if copies.len() != participants.len() {
            return Err(Failure::run(format!(
                "{} is missing on a participant",
                body.id
            )));
        }
        compared += 1;
        for a in &copies {
            for b in &copies {
                let d = a.distance(*b);
                if d > worst.0 {
                    worst = (d, body.id.0);
                }
            }
        }
    }
    let s = server.world().resource::<EntityServer>();
    let stats = *s.stats();
    let arbiter = *s.arbiter().stats();
    let p_stats: Vec<_> = participants
        .iter()
        .map(|p| *p.world().resource::<OwnershipParticipant>().stats())
        .collect();
    let sent: u64 = p_stats.iter().map(|p| p.state_updates_sent).sum();
    let bytes: u64 = p_stats.iter().map(|p| p.state_update_bytes).sum();
    let summary = Summary {
        mode: "ownership",
        participants: args.participants,
        ticks: args.ticks,
        settle_ticks,
        latency_ms: args.rtt_ms / 2,
        jitter_ms: args.net_jitter_ms / 2,
        loss_percent: args.loss_percent,
        ownership_changes: arbiter.ownership_changes,
        bids_sent: p_stats.iter().map(|p| p.bids_sent).sum(),
        bid_resends: p_stats.iter().map(|p| p.bid_resends).sum(),
        bids_granted: stats.bids_granted,
        bids_refused: by_reason(&[stats.bids_refused]),
        releases: stats.releases_granted,
        releases_refused: by_reason(&[stats.releases_refused]),
        state_updates_refused: by_reason(&[stats.state_updates_refused]),
        owners_expired: stats.expiries + stats.disconnect_clears,
        state_updates_sent: sent,
        state_updates_relayed: stats.state_updates_relayed,
        bytes_per_state_update: if sent == 0 {
            0.0
        } else {
            bytes as f64 / sent as f64
        },
        max_divergence_m: f64::from(worst.0),
        max_divergence_body: worst.1,
        bodies_compared: compared,
        bodies_owned_at_end: owned_bodies(&server),
        malformed_messages: s.decode_stats().rejected(),
    };
    println!("{}", summary.to_text());
    if let Some(path) = &args.summary_json {
        write_json(&summary, path)?;
    }
    if summary.ownership_changes == 0 {
        return Err(Failure::run("no body ever changed owner"));
    }
    if summary.max_divergence_m >= 0.01 {
        return Err(Failure::run(format!(
            "participants' copies of body {} differ by {:.4} m (≥ 1 cm)",
            summary.max_divergence_body, summary.max_divergence_m
        )));
    }
    Ok(ExitCode::SUCCESS)
}

/// Steps `app` in real time (64 Hz) until `done` or `ticks` steps.
fn paced(app: &mut App, ticks: u32, mut done: impl FnMut(&App) -> bool) -> u32 {
    let start = Instant::now();
    for tick in 0..ticks {
        if done(app) {
            return tick;
        }
        app.update();
        let due = start + DT * (tick + 1);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    ticks
}

/// `--server --bind ADDR`: the entity server alone, over UDP, for `--ticks` plus the settling
/// time after the first participant joined (or until every participant that joined left).
fn run_udp_server(args: &Args, bind: SocketAddr, bodies: &[NetBody]) -> Result<ExitCode, Failure> {
    let transport = UdpServerTransport::bind(UdpServerConfig::unsecure(bind))
        .map_err(|e| Failure::input(format!("cannot bind {bind}: {e}")))?;
    println!("entity server listening on {}", transport.local_addr());
    let mut server = server_app(bodies, transport, true);
    let joined = |app: &App| {
        app.world()
            .resource::<EntityServer>()
            .stats()
            .participants_joined
    };
    paced(&mut server, u32::MAX, |app| joined(app) > 0);
    let settle = (args.settle_seconds.max(0.0) * f64::from(HZ)).ceil() as u32;
    paced(&mut server, args.ticks + settle + 5 * HZ, |app| {
        let s = app.world().resource::<EntityServer>().stats();
        s.participants_left >= s.participants_joined
    });
    let s = server.world().resource::<EntityServer>();
    let stats = *s.stats();
    println!(
        "entity server: {} participants, {} ownership changes, {} bids granted, bids refused {:?}, \
         {} releases, releases and state updates refused {:?}, {} state updates relayed, \
         {} owners expired",
        stats.participants_joined,
        s.arbiter().stats().ownership_changes,
        stats.bids_granted,
        by_reason(&[stats.bids_refused]),
        stats.releases_granted,
        by_reason(&[stats.releases_refused, stats.state_updates_refused]),
        stats.state_updates_relayed,
        stats.expiries + stats.disconnect_clears,
    );
    Ok(ExitCode::SUCCESS)
}

/// `--client --connect ADDR --participant-index I`: one participant over UDP, playing trace
/// participant `I`.
fn run_udp_client(
    args: &Args,
    connect: SocketAddr,
    bodies: &[NetBody],
    script: Arc<Script>,
) -> Result<ExitCode, Failure> {
    let bind: SocketAddr = if connect.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    // Unique enough among the clients of one server: process id and index.
    let client_id = u64::from(std::process::id()) << 8 | u64::from(args.participant_index);
    let transport = UdpClientTransport::unsecure(connect, client_id, NETCODE_PROTOCOL_ID, bind)
        .map_err(|e| Failure::input(format!("cannot connect to {connect}: {e}")))?;
    let mut app = participant_app(bodies, args.participant_index, script, transport, true);
    let joined = |app: &App| {
        app.world()
            .resource::<OwnershipParticipant>()
            .me()
            .is_some()
    };
    if paced(&mut app, JOIN_STEPS, joined) >= JOIN_STEPS {
        return Err(Failure::run(format!(
            "no answer from the entity server at {connect} in 10 s"
        )));
    }
    app.world_mut().resource_mut::<Actor>().running = true;
    paced(&mut app, args.ticks, |_| false);
    stop_script(&mut app);
    let settle = (args.settle_seconds.max(0.0) * f64::from(HZ)).ceil() as u32;
    paced(&mut app, settle, |_| false);
    let p = *app.world().resource::<OwnershipParticipant>().stats();
    println!(
        "participant {}: {} bids sent ({} resends), {} granted, refusals {:?}, {} releases, \
         {} state updates sent ({:.1} bytes each), {} relayed states applied",
        args.participant_index,
        p.bids_sent,
        p.bid_resends,
        p.grants_received,
        by_reason(&[p.refusals_received]),
        p.releases_sent,
        p.state_updates_sent,
        if p.state_updates_sent == 0 {
            0.0
        } else {
            p.state_update_bytes as f64 / p.state_updates_sent as f64
        },
        p.relays_applied,
    );
    app.world_mut()
        .resource_mut::<ClientTransport>()
        .disconnect();
    app.update();
    Ok(ExitCode::SUCCESS)
}
