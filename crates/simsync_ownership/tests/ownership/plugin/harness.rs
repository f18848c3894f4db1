//! The plugin tests' scene on `simsync_ownership::testing::OwnershipPeers`: an entity server
//! and N participants, each with its own Rapier world, over a `MemoryNetwork`, stepped by hand
//! with a simulated 1/64 s — plus the test bodies, a log of the messages each App saw, and raw
//! Apps for tests that play a server or a client by hand.
#![allow(dead_code)]

use std::time::Duration;

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_net::prelude::*;
use simsync_net::renet::ConnectionConfig;
use simsync_ownership::prelude::*;
use simsync_ownership::testing::OwnershipPeers;
use simsync_ownership::{
    BodyId, EntityServerLimits, ParticipantId, PhysicsHostConfig, StateLimits,
};
use simsync_ownership::{EntityServerStats, OwnershipClock, ParticipantStats};

/// One step of simulated time.
pub const DT: Duration = Duration::from_micros(15_625);
/// Steps per second.
pub const HZ: u32 = 64;

/// Steps in `ms` milliseconds (rounded up).
pub fn steps(ms: u64) -> u32 {
    (ms * 1_000).div_ceil(15_625) as u32
}

/// A body of the test scene.
#[derive(Debug, Clone, Copy)]
pub struct Body {
    /// Network id.
    pub id: u64,
    /// Where it starts.
    pub at: Vec3,
    /// Dynamic, fixed or kinematic.
    pub kind: RigidBody,
    /// Cube half extent, m.
    pub half: f32,
    /// Gravity scale (0: floats).
    pub gravity: f32,
}

impl Body {
    /// A floating 0.5 m dynamic cube (no gravity), so a velocity given to it lasts.
    pub fn floating(id: u64, at: Vec3) -> Self {
        Self {
            id,
            at,
            kind: RigidBody::Dynamic,
            half: 0.25,
            gravity: 0.0,
        }
    }

    /// A 0.5 m dynamic cube under gravity.
    pub fn falling(id: u64, at: Vec3) -> Self {
        Self {
            gravity: 1.0,
            ..Self::floating(id, at)
        }
    }

    /// A fixed slab (the ground) 40 m × 1 m × 40 m centred at `at`.
    pub fn ground(id: u64, at: Vec3) -> Self {
        Self {
            id,
            at,
            kind: RigidBody::Fixed,
            half: 20.0,
            gravity: 1.0,
        }
    }
}

/// What an App's systems saw, collected each frame.
#[derive(Resource, Debug, Default)]
pub struct Log {
    /// `BidRefused` messages.
    pub refused: Vec<BidRefused>,
    /// `OwnershipChanged` messages.
    pub changed: Vec<OwnershipChanged>,
    /// `ParticipantGone` messages (entity server).
    pub gone: Vec<ParticipantGone>,
    /// `ParticipantReturned` messages (entity server).
    pub returned: Vec<ParticipantReturned>,
    /// `CountedSilent` messages (participants).
    pub counted_silent: Vec<CountedSilent>,
}

fn collect(
    mut refused: MessageReader<BidRefused>,
    mut changed: MessageReader<OwnershipChanged>,
    mut gone: MessageReader<ParticipantGone>,
    mut returned: MessageReader<ParticipantReturned>,
    mut counted_silent: MessageReader<CountedSilent>,
    mut log: ResMut<Log>,
) {
    log.refused.extend(refused.read().copied());
    log.changed.extend(changed.read().copied());
    log.gone.extend(gone.read().copied());
    log.returned.extend(returned.read().copied());
    log.counted_silent.extend(counted_silent.read().copied());
}

fn collider(body: &Body) -> Collider {
    if body.kind == RigidBody::Fixed {
        Collider::cuboid(body.half, 0.5, body.half)
    } else {
        Collider::cuboid(body.half, body.half, body.half)
    }
}

/// A body's physics, the same on a participant and a hosting server.
fn physics(body: &Body) -> impl Bundle {
    (
        collider(body),
        GravityScale(body.gravity),
        Velocity::zero(),
        Sleeping::default(),
    )
}

/// The server's bodies: ids, kinds and transforms, no physics — or, with the physics host,
/// the participants' colliders and gravity too.
fn spawn_server_bodies(app: &mut App, bodies: &[Body], with_physics: bool) {
    for body in bodies {
        let mut entity = app.world_mut().spawn((
            BodyNetId(BodyId(body.id)),
            body.kind,
            Transform::from_translation(body.at),
        ));
        if with_physics {
            entity.insert(physics(body));
        }
    }
}

/// A participant's bodies, each `Ownable` (static ones are never observed; they test
/// `NotOwnable`).
fn spawn_participant_bodies(app: &mut App, bodies: &[Body]) {
    for body in bodies {
        app.world_mut().spawn((
            BodyNetId(BodyId(body.id)),
            Ownable,
            body.kind,
            Transform::from_translation(body.at),
            physics(body),
        ));
    }
}

/// How a session's network, server and connections are set up, when not by default.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// The network's seed.
    pub seed: u64,
    /// Every participant's link, both ways (default perfect).
    pub link: LinkConditionerConfig,
    /// The entity server's rate limits (default: the crate's defaults).
    pub limits: EntityServerLimits,
    /// The renet connection config of the server and every participant (default:
    /// `simsync_net`'s).
    pub connection: Option<ConnectionConfig>,
    /// The ownership config of the server and every participant (default: the crate's).
    pub config: OwnershipConfig,
    /// The state budgets of the server and every participant (default: the crate's).
    pub budget: StateBudgetConfig,
    /// The entity server's physics host (default: off): its App then gets Rapier and the
    /// bodies' colliders.
    pub host: Option<PhysicsHostConfig>,
    /// The entity server's limits on owners' states without the host (default: off).
    pub state_limits: Option<StateLimits>,
    /// A participant (by index) that holds no bodies: a raw client whose App costs nothing per
    /// body, for floods sent with `send_raw` (default: none).
    pub bodiless: Option<usize>,
}

/// The session: [`OwnershipPeers`] with the test bodies and a [`Log`] in every App; the
/// harness's methods (`step`, `run`, `server`, `network`, `kill`, `pause`, ...) through `Deref`,
/// with a few of their own taking body ids as `u64`.
pub struct Session {
    /// The entity server and the participants.
    pub peers: OwnershipPeers,
}

impl std::ops::Deref for Session {
    type Target = OwnershipPeers;

    fn deref(&self) -> &OwnershipPeers {
        &self.peers
    }
}

impl std::ops::DerefMut for Session {
    fn deref_mut(&mut self) -> &mut OwnershipPeers {
        &mut self.peers
    }
}

impl Session {
    /// A server and `n` participants, all holding `bodies`, over a perfect network (seed 7);
    /// stepped until every participant has joined.
    pub fn perfect(n: usize, bodies: &[Body]) -> Self {
        Self::with_setup(
            n,
            bodies,
            &Setup {
                seed: 7,
                ..Setup::default()
            },
        )
    }

    /// A conditioned network (same conditioner both ways).
    pub fn conditioned(seed: u64, link: LinkConditionerConfig, n: usize, bodies: &[Body]) -> Self {
        Self::with_setup(
            n,
            bodies,
            &Setup {
                seed,
                link,
                ..Setup::default()
            },
        )
    }

    /// [`Session::perfect`] with `setup`.
    pub fn with_setup(n: usize, bodies: &[Body], setup: &Setup) -> Self {
        let (server_bodies, participant_bodies) = (bodies.to_vec(), bodies.to_vec());
        let (server_connection, participant_connection) =
            (setup.connection.clone(), setup.connection.clone());
        let (limits, config, budget) = (setup.limits, setup.config.clone(), setup.budget);
        let (host, state_limits, bodiless) = (setup.host, setup.state_limits, setup.bodiless);
        let mut builder = OwnershipPeers::builder(n);
        if let Some(host) = host {
            builder = builder.physics_host(host);
        }
        let peers = builder
            .seed(setup.seed)
            .link(setup.link)
            .ownership(move |plugin| {
                let plugin = plugin
                    .with_limits(limits)
                    .with_config(config.clone())
                    .with_state_budget(budget);
                match state_limits {
                    Some(l) => plugin.with_state_limits(l),
                    None => plugin,
                }
            })
            .scene(|app| {
                app.init_resource::<Log>().add_systems(Last, collect);
            })
            .server(move |app| {
                if let Some(connection) = &server_connection {
                    app.insert_resource(RenetServer::new(connection.clone()));
                }
                spawn_server_bodies(app, &server_bodies, host.is_some());
            })
            .participant(move |i, app| {
                if let Some(connection) = &participant_connection {
                    app.insert_resource(RenetClient::new(connection.clone()));
                }
                if bodiless != Some(i) {
                    spawn_participant_bodies(app, &participant_bodies);
                }
            })
            .join_within(200)
            .build()
            .expect("participants join");
        Self { peers }
    }

    /// Steps until `done` holds (checked after each step), at most `limit` steps; returns the
    /// steps taken, or `None` if it never held.
    pub fn run_until(&mut self, limit: u32, mut done: impl FnMut(&Session) -> bool) -> Option<u32> {
        (1..=limit).find(|_| {
            self.step();
            done(self)
        })
    }

    /// Participant `i` (0-based; client id `i + 1` until it rejoins).
    pub fn p(&mut self, i: usize) -> &mut App {
        self.peers.participant_mut(i).expect("a live participant")
    }

    /// Participant `i`, to read.
    pub fn app(&self, i: usize) -> &App {
        self.peers.participant(i).expect("a live participant")
    }

    /// Participants alive and not paused.
    fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len()).filter(|&i| self.peers.participant(i).is_some() && !self.peers.is_paused(i))
    }

    /// Participant `i`'s id as the server assigned it.
    pub fn id_of(&self, i: usize) -> ParticipantId {
        self.peers.id_of(i).expect("joined")
    }

    /// The server's ownership of `body`.
    pub fn server_owner(&self, body: u64) -> Option<(ParticipantId, Priority)> {
        self.peers.server_owner(BodyId(body))
    }

    /// The server's state.
    pub fn entity_server(&self) -> &EntityServer {
        self.peers.entity_server().expect("the entity server runs")
    }

    /// The server's counters.
    pub fn server_stats(&self) -> EntityServerStats {
        *self.entity_server().stats()
    }

    /// The server's ownership changes so far.
    pub fn ownership_changes(&self) -> u64 {
        self.entity_server().arbiter().stats().ownership_changes
    }

    /// The server's clock.
    pub fn server_now(&self) -> Duration {
        self.server().world().resource::<OwnershipClock>().now()
    }

    /// Participant `i`'s counters.
    pub fn stats(&self, i: usize) -> ParticipantStats {
        self.peers.stats(i).expect("a live participant")
    }

    /// Participant `i`'s log.
    pub fn log(&self, i: usize) -> &Log {
        self.app(i).world().resource::<Log>()
    }

    /// The entity server's log.
    pub fn server_log(&self) -> &Log {
        self.server().world().resource::<Log>()
    }

    /// The entity of `body` in `app`.
    pub fn entity(app: &App, body: u64) -> Entity {
        app.world()
            .resource::<OwnershipClient>()
            .entity_of(BodyId(body))
            .expect("registered body")
    }

    /// `SimulationOwner` of `body` on participant `i`.
    pub fn owner_on(&self, i: usize, body: u64) -> SimulationOwner {
        self.peers
            .owner_on(i, BodyId(body))
            .expect("SimulationOwner")
    }

    /// Whether the server and every running participant agree on `body`'s owner.
    pub fn owners_agree(&self, body: u64) -> bool {
        self.peers.owners_agree(BodyId(body))
    }

    /// Position and velocity of `body` on participant `i`.
    pub fn body_on(&self, i: usize, body: u64) -> (Vec3, Velocity) {
        let app = self.app(i);
        let e = Self::entity(app, body);
        (
            app.world()
                .get::<Transform>(e)
                .expect("Transform")
                .translation,
            *app.world().get::<Velocity>(e).expect("Velocity"),
        )
    }

    /// Runs `f` on participant `i`'s `Commands` for `body`'s entity (the user API), applied at
    /// once.
    pub fn command(&mut self, i: usize, body: u64, f: impl FnOnce(&mut EntityCommands)) {
        self.peers
            .command(i, BodyId(body), f)
            .expect("a live participant with the body");
    }

    /// Sets `body`'s velocity on participant `i` (a script moving it).
    pub fn set_velocity(&mut self, i: usize, body: u64, linear: Vec3) {
        let app = self.p(i);
        let e = Self::entity(app, body);
        app.world_mut()
            .get_mut::<Velocity>(e)
            .expect("Velocity")
            .linear = linear;
    }

    /// Sends a raw message from participant `i`'s connection (what a misbehaving client could
    /// send).
    pub fn send_raw(&mut self, i: usize, message: ClientMessage) {
        self.p(i)
            .world_mut()
            .resource_mut::<RenetClient>()
            .send_msg(&message)
            .expect("queued");
    }

    /// Largest distance between any two running participants' copies of `body`.
    pub fn spread(&self, body: u64) -> f32 {
        let positions: Vec<Vec3> = self.running().map(|i| self.body_on(i, body).0).collect();
        let mut worst = 0.0f32;
        for a in &positions {
            for b in &positions {
                worst = worst.max(a.distance(*b));
            }
        }
        worst
    }
}

/// A participant App alone (no session): participant `client_id` holding `bodies`, over
/// `network`, for tests that play the server by hand.
pub fn participant_app(network: &MemoryNetwork, client_id: u64, bodies: &[Body]) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins((
            TransformPlugin,
            RapierPhysicsPlugin::<NoUserData>::default(),
        ))
        // No `TimestepMode`: the participant plugin puts Rapier on the network tick.
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::Fixed(DT)))
        .add_plugins(OwnershipPlugin::participant().with_name(format!("p{client_id}")))
        .init_resource::<Log>()
        .add_systems(Last, collect)
        .insert_net_client(network.client_transport(client_id).expect("fresh id"));
    spawn_participant_bodies(&mut app, bodies);
    app
}

/// A bare net server (no entity server: the test writes its messages by hand) and participant
/// 1 holding body 1 at the origin, connected (three updates each).
pub fn raw_server_and_participant(network: &MemoryNetwork) -> (App, App) {
    let mut server = App::new();
    server
        .add_plugins(MinimalPlugins)
        .add_plugins(NetServerPlugin::default().with_clock(NetClock::Fixed(DT)))
        .insert_net_server(network.server_transport().expect("one server"));
    let mut p = participant_app(network, 1, &[Body::floating(1, Vec3::ZERO)]);
    for _ in 0..3 {
        server.update();
        p.update();
    }
    (server, p)
}

/// Sends the participant of [`raw_server_and_participant`] a Welcome (as participant 4), then
/// `messages`, on the control channel, and updates both Apps three times.
pub fn send_raw(server: &mut App, participant: &mut App, messages: &[ServerMessage]) {
    let welcome = ServerMessage::Welcome(simsync_net::Welcome {
        protocol_version: simsync_net::PROTOCOL_VERSION,
        participant: ParticipantId(4),
        player_slot: None,
        protocols: simsync_net::Protocols::OWNERSHIP,
        tick_rate_hz: 64,
        server_tick: 0,
        players: 0,
        reconnect_token: None,
    });
    {
        let mut renet = server.world_mut().resource_mut::<RenetServer>();
        for m in std::iter::once(&welcome).chain(messages) {
            renet
                .send_msg_on(1, simsync_net::NetChannel::Control, m)
                .expect("a connected client");
        }
    }
    for _ in 0..3 {
        server.update();
        participant.update();
    }
}

/// Despawns `old` (body `body`'s entity in `app`) and spawns a new entity with the same id at
/// rest at `at`, in one go; on a participant (`participant`) with the components
/// [`participant_app`] gives a floating body.
pub fn respawn(app: &mut App, old: Entity, body: u64, at: Vec3, participant: bool) {
    app.world_mut().despawn(old);
    let mut e = app.world_mut().spawn((
        BodyNetId(BodyId(body)),
        RigidBody::Dynamic,
        Transform::from_translation(at),
    ));
    if participant {
        e.insert((
            Ownable,
            Collider::cuboid(0.25, 0.25, 0.25),
            GravityScale(0.0),
            Velocity::zero(),
            Sleeping::default(),
        ));
    }
}
