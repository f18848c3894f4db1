//! A headless session for the plugin tests: an entity-server App and N participant Apps, each
//! with its own Rapier world, over a `MemoryNetwork`, stepped by hand with a simulated 1/64 s
//! (`NetClock::Fixed`) — no sleeps, no wall clock.
#![allow(dead_code)]

use std::time::Duration;

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_net::prelude::*;
use simsync_net::renet::ConnectionConfig;
use simsync_ownership::prelude::*;
use simsync_ownership::{BodyId, EntityServerLimits, ParticipantId};
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

/// What a participant's systems saw, collected each frame.
#[derive(Resource, Debug, Default)]
pub struct Log {
    /// `BidRefused` messages.
    pub refused: Vec<BidRefused>,
    /// `OwnershipChanged` messages.
    pub changed: Vec<OwnershipChanged>,
}

fn collect(
    mut refused: MessageReader<BidRefused>,
    mut changed: MessageReader<OwnershipChanged>,
    mut log: ResMut<Log>,
) {
    log.refused.extend(refused.read().copied());
    log.changed.extend(changed.read().copied());
}

fn collider(body: &Body) -> Collider {
    if body.kind == RigidBody::Fixed {
        Collider::cuboid(body.half, 0.5, body.half)
    } else {
        Collider::cuboid(body.half, body.half, body.half)
    }
}

/// The session.
pub struct Session {
    /// The network.
    pub network: MemoryNetwork,
    /// The entity server.
    pub server: App,
    /// The participants, client ids 1, 2, 3, ...
    pub participants: Vec<App>,
    /// Participants not updated any more (silent), by index.
    pub frozen: Vec<bool>,
    /// Steps taken.
    pub step_count: u32,
}

/// How a session's server and connections are set up, when not by default.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// The entity server's rate limits (default: the crate's defaults).
    pub limits: EntityServerLimits,
    /// The renet connection config of the server and every participant (default:
    /// `simsync_net`'s).
    pub connection: Option<ConnectionConfig>,
    /// The ownership config of the server and every participant (default: the crate's).
    pub config: OwnershipConfig,
    /// The state budgets of the server and every participant (default: the crate's).
    pub budget: StateBudgetConfig,
}

/// A server App with the bodies (ids and kinds only, no physics).
pub fn server_app(network: &MemoryNetwork, bodies: &[Body]) -> App {
    server_app_with(network, bodies, &Setup::default())
}

/// [`server_app`] with `setup`.
pub fn server_app_with(network: &MemoryNetwork, bodies: &[Body], setup: &Setup) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(NetServerPlugin::default().with_clock(NetClock::Fixed(DT)))
        .add_plugins(
            OwnershipPlugin::entity_server()
                .with_limits(setup.limits)
                .with_config(setup.config.clone())
                .with_state_budget(setup.budget),
        )
        .init_resource::<Log>()
        .add_systems(Last, collect)
        .insert_net_server(network.server_transport().expect("one server"));
    if let Some(connection) = &setup.connection {
        app.insert_resource(RenetServer::new(connection.clone()));
    }
    for body in bodies {
        app.world_mut().spawn((
            BodyNetId(BodyId(body.id)),
            body.kind,
            Transform::from_translation(body.at),
        ));
    }
    app
}

/// A participant App with its own Rapier world holding the bodies. Every body carries
/// `Ownable` (static ones are never observed; they test `NotOwnable`).
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

pub fn participant_app(network: &MemoryNetwork, client_id: u64, bodies: &[Body]) -> App {
    participant_app_with(network, client_id, bodies, &OwnershipConfig::default())
}

/// [`participant_app`] with `config`.
pub fn participant_app_with(
    network: &MemoryNetwork,
    client_id: u64,
    bodies: &[Body],
    config: &OwnershipConfig,
) -> App {
    participant_app_budget(
        network,
        client_id,
        bodies,
        config,
        StateBudgetConfig::default(),
    )
}

/// [`participant_app_with`] with the state budgets `budget`.
pub fn participant_app_budget(
    network: &MemoryNetwork,
    client_id: u64,
    bodies: &[Body],
    config: &OwnershipConfig,
    budget: StateBudgetConfig,
) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins((
            TransformPlugin,
            RapierPhysicsPlugin::<NoUserData>::default(),
        ))
        // No `TimestepMode`: the participant plugin puts Rapier on the network tick.
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::Fixed(DT)))
        .add_plugins(
            OwnershipPlugin::participant()
                .with_name(format!("p{client_id}"))
                .with_config(config.clone())
                .with_state_budget(budget),
        )
        .init_resource::<Log>()
        .add_systems(Last, collect)
        .insert_net_client(network.client_transport(client_id).expect("fresh id"));
    for body in bodies {
        app.world_mut().spawn((
            BodyNetId(BodyId(body.id)),
            Ownable,
            body.kind,
            collider(body),
            GravityScale(body.gravity),
            Transform::from_translation(body.at),
            Velocity::zero(),
            Sleeping::default(),
        ));
    }
    app
}

impl Session {
    /// A server and `n` participants over `network`, all holding `bodies`; stepped until every
    /// participant has joined.
    pub fn new(network: MemoryNetwork, n: usize, bodies: &[Body]) -> Self {
        Self::with_setup(network, n, bodies, &Setup::default())
    }

    /// [`Session::new`] with `setup`.
    pub fn with_setup(network: MemoryNetwork, n: usize, bodies: &[Body], setup: &Setup) -> Self {
        let server = server_app_with(&network, bodies, setup);
        let participants = (1..=n as u64)
            .map(|id| {
                let mut app =
                    participant_app_budget(&network, id, bodies, &setup.config, setup.budget);
                if let Some(connection) = &setup.connection {
                    app.insert_resource(RenetClient::new(connection.clone()));
                }
                app
            })
            .collect();
        let mut session = Self {
            network,
            server,
            participants,
            frozen: vec![false; n],
            step_count: 0,
        };
        for _ in 0..200 {
            if session.all_joined() {
                return session;
            }
            session.step();
        }
        panic!("participants did not join");
    }

    /// A perfect network.
    pub fn perfect(n: usize, bodies: &[Body]) -> Self {
        Self::new(MemoryNetwork::perfect(7), n, bodies)
    }

    /// A conditioned network (same conditioner both ways).
    pub fn conditioned(seed: u64, link: LinkConditionerConfig, n: usize, bodies: &[Body]) -> Self {
        Self::new(
            MemoryNetwork::new(seed, link).expect("valid link"),
            n,
            bodies,
        )
    }

    /// Whether every participant got its `Welcome`.
    pub fn all_joined(&self) -> bool {
        self.participants
            .iter()
            .all(|p| p.world().resource::<OwnershipClient>().me().is_some())
    }

    /// One step: the server, then every participant that is not frozen.
    pub fn step(&mut self) {
        self.server.update();
        for (app, frozen) in self.participants.iter_mut().zip(&self.frozen) {
            if !frozen {
                app.update();
            }
        }
        self.step_count += 1;
    }

    /// `n` steps.
    pub fn run(&mut self, n: u32) {
        for _ in 0..n {
            self.step();
        }
    }

    /// Steps until `done` holds (checked after each step), at most `limit` steps; returns the
    /// steps taken, or `None` if it never held.
    pub fn run_until(&mut self, limit: u32, mut done: impl FnMut(&Session) -> bool) -> Option<u32> {
        for i in 1..=limit {
            self.step();
            if done(self) {
                return Some(i);
            }
        }
        None
    }

    /// Participant `i` (0-based; client id `i + 1`).
    pub fn p(&mut self, i: usize) -> &mut App {
        &mut self.participants[i]
    }

    /// Participant `i`'s id as the server assigned it.
    pub fn id_of(&self, i: usize) -> ParticipantId {
        self.participants[i]
            .world()
            .resource::<OwnershipClient>()
            .me()
            .expect("joined")
    }

    /// The server's ownership of `body`.
    pub fn server_owner(&self, body: u64) -> Option<(ParticipantId, Priority)> {
        self.server
            .world()
            .resource::<EntityServer>()
            .arbiter()
            .owner(BodyId(body))
    }

    /// The server's counters.
    pub fn server_stats(&self) -> EntityServerStats {
        *self.server.world().resource::<EntityServer>().stats()
    }

    /// The server's ownership changes so far.
    pub fn ownership_changes(&self) -> u64 {
        self.server
            .world()
            .resource::<EntityServer>()
            .arbiter()
            .stats()
            .ownership_changes
    }

    /// The server's clock.
    pub fn server_now(&self) -> Duration {
        self.server.world().resource::<OwnershipClock>().now()
    }

    /// Participant `i`'s counters.
    pub fn stats(&self, i: usize) -> ParticipantStats {
        *self.participants[i]
            .world()
            .resource::<OwnershipClient>()
            .stats()
    }

    /// Participant `i`'s log.
    pub fn log(&self, i: usize) -> &Log {
        self.participants[i].world().resource::<Log>()
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
        let app = &self.participants[i];
        *app.world()
            .get::<SimulationOwner>(Self::entity(app, body))
            .expect("SimulationOwner")
    }

    /// Whether the server and every participant that is not frozen agree on `body`'s owner.
    pub fn owners_agree(&self, body: u64) -> bool {
        let server = self.server_owner(body);
        (0..self.participants.len())
            .filter(|&i| !self.frozen[i])
            .all(|i| {
                let o = self.owner_on(i, body);
                o.owner.map(|p| (p, o.priority)) == server
            })
    }

    /// Position and velocity of `body` on participant `i`.
    pub fn body_on(&self, i: usize, body: u64) -> (Vec3, Velocity) {
        let app = &self.participants[i];
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
        let app = &mut self.participants[i];
        let e = Self::entity(app, body);
        let world = app.world_mut();
        {
            let mut commands = world.commands();
            f(&mut commands.entity(e));
        }
        world.flush();
    }

    /// Sets `body`'s velocity on participant `i` (a script moving it).
    pub fn set_velocity(&mut self, i: usize, body: u64, linear: Vec3) {
        let app = &mut self.participants[i];
        let e = Self::entity(app, body);
        app.world_mut()
            .get_mut::<Velocity>(e)
            .expect("Velocity")
            .linear = linear;
    }

    /// Sends a raw message from participant `i`'s connection (what a misbehaving client could
    /// send).
    pub fn send_raw(&mut self, i: usize, message: ClientMessage) {
        self.participants[i]
            .world_mut()
            .resource_mut::<RenetClient>()
            .send_msg(&message)
            .expect("queued");
    }

    /// Largest distance between any two participants' copies of `body`.
    pub fn spread(&self, body: u64) -> f32 {
        let positions: Vec<Vec3> = (0..self.participants.len())
            .filter(|&i| !self.frozen[i])
            .map(|i| self.body_on(i, body).0)
            .collect();
        let mut worst = 0.0f32;
        for a in &positions {
            for b in &positions {
                worst = worst.max(a.distance(*b));
            }
        }
        worst
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
