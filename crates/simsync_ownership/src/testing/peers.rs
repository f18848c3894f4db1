//! [`OwnershipPeers`] and its builder.

use core::time::Duration;

use bevy::prelude::*;
use bevy_rapier3d::prelude::{NoUserData, RapierPhysicsPlugin};
use simsync_net::testing::{PeerIndex, PeerNetwork, PeerNetworkError, PeerState};
use simsync_net::{
    Direction, LinkConditionerConfig, MemoryClientTransport, MemoryNetwork, MemoryServerTransport,
    NetAppExt, NetClientPlugin, NetClock, NetServerPlugin,
};
use thiserror::Error;

use super::convergence::{self, Converged, Divergence};
use super::{DEFAULT_JOIN_STEPS, DEFAULT_TICK};
use crate::client::{OwnershipClient, ParticipantStats};
use crate::components::SimulationOwner;
use crate::error::OwnershipError;
use crate::host::PhysicsHostConfig;
use crate::plugin::{OwnershipPlugin, OwnershipSetupError};
use crate::priority::{BodyId, ParticipantId, Priority};
use crate::server::EntityServer;

/// A closure run on every App, or on the entity server.
type AppSetup = Box<dyn FnMut(&mut App)>;
/// A closure run on each participant App, with its index.
type ParticipantSetup = Box<dyn FnMut(usize, &mut App)>;
/// A closure adjusting the [`OwnershipPlugin`] of every App.
type PluginSetup = Box<dyn Fn(OwnershipPlugin) -> OwnershipPlugin>;

/// Why the harness could not do what it was asked.
#[derive(Debug, Error)]
pub enum PeersError {
    /// The in-memory network refused a link or a transport, or no participant has the index,
    /// or it is killed (for what needs it running) or running (for a rejoin); the participant
    /// is the network's peer of the same index.
    #[error("{0}")]
    Network(#[from] PeerNetworkError),
    /// An App's [`OwnershipPlugin`] did not start ([`OwnershipSetupError`]).
    #[error("the {app}'s ownership plugin did not start: {error}")]
    Setup {
        /// `entity server` or `participant N`.
        app: String,
        /// Why.
        error: OwnershipError,
    },
    /// Participants still without a `Welcome` after `steps` steps.
    #[error("participants {waiting:?} did not join within {steps} steps")]
    NotJoined {
        /// Their indices.
        waiting: Vec<usize>,
        /// Steps run.
        steps: u32,
    },
    /// The participant has no body with this id.
    #[error("participant {participant} has no {body}")]
    NoSuchBody {
        /// The participant.
        participant: usize,
        /// The body.
        body: BodyId,
    },
    /// The copies still disagreed after `steps` steps.
    #[error("not converged after {steps} steps: {divergence}")]
    NotConverged {
        /// Steps run.
        steps: u32,
        /// The first body whose copies disagree.
        divergence: Divergence,
    },
}

/// How to build an [`OwnershipPeers`] ([`OwnershipPeers::builder`]).
pub struct OwnershipPeersBuilder {
    participants: usize,
    tick: Duration,
    seed: u64,
    up: LinkConditionerConfig,
    down: LinkConditionerConfig,
    rapier: bool,
    host: Option<PhysicsHostConfig>,
    join_steps: u32,
    plugin: PluginSetup,
    scene: AppSetup,
    server: AppSetup,
    participant: ParticipantSetup,
}

impl OwnershipPeersBuilder {
    /// The tick every App steps per update (`NetClock::Fixed`); default 1/64 s.
    #[must_use]
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// The seed of the network's random choices (loss, jitter); default 0.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Every participant's link, both ways; default perfect. Also what
    /// [`OwnershipPeers::restore_link`] goes back to.
    #[must_use]
    pub fn link(self, link: LinkConditionerConfig) -> Self {
        self.links(link, link)
    }

    /// Every participant's link, `up` to the server and `down` from it.
    #[must_use]
    pub fn links(mut self, up: LinkConditionerConfig, down: LinkConditionerConfig) -> Self {
        self.up = up;
        self.down = down;
        self
    }

    /// Adjusts the [`OwnershipPlugin`] of every App (the server and the participants must use
    /// the same config), e.g. `|p| p.with_delta_encoding(false)`. Participants are named
    /// `participant N` before it runs.
    #[must_use]
    pub fn ownership(mut self, f: impl Fn(OwnershipPlugin) -> OwnershipPlugin + 'static) -> Self {
        self.plugin = Box::new(f);
        self
    }

    /// Runs on every App, the entity server's and each participant's, after the harness's
    /// plugins: typically the bodies (the server keeps a body's `BodyNetId`, `RigidBody` and
    /// `Transform`; colliders and the rest only matter to participants).
    #[must_use]
    pub fn scene(mut self, f: impl FnMut(&mut App) + 'static) -> Self {
        self.scene = Box::new(f);
        self
    }

    /// Runs on the entity server's App, after [`scene`](Self::scene).
    #[must_use]
    pub fn server(mut self, f: impl FnMut(&mut App) + 'static) -> Self {
        self.server = Box::new(f);
        self
    }

    /// Runs on each participant's App with its index (0-based), after [`scene`](Self::scene);
    /// again on the new App of a participant that [rejoins](OwnershipPeers::rejoin).
    #[must_use]
    pub fn participant(mut self, f: impl FnMut(usize, &mut App) + 'static) -> Self {
        self.participant = Box::new(f);
        self
    }

    /// Participants get no `TransformPlugin` and Rapier from the harness: the
    /// [`participant`](Self::participant) closure adds its own.
    #[must_use]
    pub fn without_rapier(mut self) -> Self {
        self.rapier = false;
        self
    }

    /// The entity server runs the physics host ([ownership rule
    /// 21](crate::rules#rule-21--the-physics-host)) with `host`: its App gets `TransformPlugin`
    /// and Rapier from the harness, and [`scene`](Self::scene) must give its bodies the same
    /// colliders as the participants'.
    #[must_use]
    pub fn physics_host(mut self, host: PhysicsHostConfig) -> Self {
        self.host = Some(host);
        self
    }

    /// Steps [`build`](Self::build) allows for every participant to join; default
    /// [`DEFAULT_JOIN_STEPS`].
    #[must_use]
    pub fn join_within(mut self, steps: u32) -> Self {
        self.join_steps = steps;
        self
    }

    /// The Apps, stepped until every participant has joined.
    ///
    /// # Errors
    /// [`PeersError::Network`] or [`PeersError::Setup`] if an App cannot be made,
    /// [`PeersError::NotJoined`] if a participant does not join in time.
    pub fn build(self) -> Result<OwnershipPeers, PeersError> {
        let join_steps = self.join_steps;
        let mut peers = self.build_unjoined()?;
        peers.run_until_joined(join_steps)?;
        Ok(peers)
    }

    /// The Apps, not stepped yet: nobody has joined.
    ///
    /// # Errors
    /// [`PeersError::Network`] or [`PeersError::Setup`] if an App cannot be made.
    pub fn build_unjoined(mut self) -> Result<OwnershipPeers, PeersError> {
        let net = PeerNetwork::new(self.seed, self.up, self.down, |transport| {
            self.server_app(transport)
        })?;
        let mut peers = OwnershipPeers { net, setup: self };
        for _ in 0..peers.setup.participants {
            peers.join()?;
        }
        Ok(peers)
    }

    /// The entity server's App alone, around `transport` (the server end of a network the
    /// caller made), built as [`build`](Self::build) builds it: for a harness whose participants
    /// live in Apps it makes itself (`simsync::testing::HybridPeers`). The participants count
    /// and the links of this builder are not used.
    ///
    /// # Errors
    /// [`PeersError::Setup`] if its ownership plugin does not start.
    pub fn build_entity_server(
        mut self,
        transport: MemoryServerTransport,
    ) -> Result<App, PeersError> {
        self.server_app(transport)
    }

    /// The entity server's App around its transport: `MinimalPlugins`, with the physics host
    /// `TransformPlugin` and Rapier, the net plugin, the plugin, then the scene and server
    /// closures.
    fn server_app(&mut self, transport: MemoryServerTransport) -> Result<App, PeersError> {
        let mut server = App::new();
        server.add_plugins(MinimalPlugins);
        let mut plugin = (self.plugin)(OwnershipPlugin::entity_server());
        if let Some(host) = self.host {
            server.add_plugins((
                TransformPlugin,
                RapierPhysicsPlugin::<NoUserData>::default(),
            ));
            plugin = plugin.with_physics_host(host);
        }
        server
            .add_plugins(NetServerPlugin::default().with_clock(NetClock::Fixed(self.tick)))
            .add_plugins(plugin)
            .insert_net_server(transport);
        (self.scene)(&mut server);
        (self.server)(&mut server);
        setup_error(&server, "entity server")?;
        Ok(server)
    }

    /// Participant `index`'s App around its transport: `MinimalPlugins`, unless
    /// [`without_rapier`](Self::without_rapier) `TransformPlugin` and Rapier, the net plugin,
    /// the plugin named `participant N`, then the scene and participant closures.
    fn participant_app(
        &mut self,
        index: PeerIndex,
        transport: MemoryClientTransport,
    ) -> Result<(App, ()), PeersError> {
        let mut app = App::new();
        app.add_plugins(MinimalPlugins);
        if self.rapier {
            app.add_plugins((
                TransformPlugin,
                RapierPhysicsPlugin::<NoUserData>::default(),
            ));
        }
        let plugin =
            (self.plugin)(OwnershipPlugin::participant().with_name(format!("participant {index}")));
        app.add_plugins(NetClientPlugin::default().with_clock(NetClock::Fixed(self.tick)))
            .add_plugins(plugin)
            .insert_net_client(transport);
        (self.scene)(&mut app);
        (self.participant)(index, &mut app);
        setup_error(&app, &format!("participant {index}"))?;
        Ok((app, ()))
    }
}

/// `Err(Setup)` if `app`'s ownership plugin did not start.
fn setup_error(app: &App, name: &str) -> Result<(), PeersError> {
    match app.world().get_resource::<OwnershipSetupError>() {
        Some(OwnershipSetupError(error)) => Err(PeersError::Setup {
            app: name.to_string(),
            error: error.clone(),
        }),
        None => Ok(()),
    }
}

/// An entity server and N participants in one process ([module docs](super)), stepped by
/// hand: a [`PeerNetwork`] whose server is the entity server and whose peers are the
/// participants. Participant `i` (0-based) is connection `i + 1` at first; one that rejoins gets
/// a new connection id.
///
/// Each [`step`](Self::step) updates the entity server, then every participant that is alive
/// and not paused, in index order, one tick each: the same calls in the same order on the same
/// seed give the same run.
pub struct OwnershipPeers {
    net: PeerNetwork,
    setup: OwnershipPeersBuilder,
}

impl OwnershipPeers {
    /// A builder for `participants` participants, default tick (1/64 s), perfect links, no
    /// scene.
    pub fn builder(participants: usize) -> OwnershipPeersBuilder {
        OwnershipPeersBuilder {
            participants,
            tick: DEFAULT_TICK,
            seed: 0,
            up: LinkConditionerConfig::PERFECT,
            down: LinkConditionerConfig::PERFECT,
            rapier: true,
            host: None,
            join_steps: DEFAULT_JOIN_STEPS,
            plugin: Box::new(|plugin| plugin),
            scene: Box::new(|_| {}),
            server: Box::new(|_| {}),
            participant: Box::new(|_, _| {}),
        }
    }

    /// One tick: the entity server, then every participant alive and not paused.
    pub fn step(&mut self) {
        self.net.step();
    }

    /// `n` ticks.
    pub fn run(&mut self, n: u32) {
        for _ in 0..n {
            self.step();
        }
    }

    /// Steps until `done` holds (checked after each step), at most `limit` steps; the steps
    /// taken, or `None` if it never held.
    pub fn run_until(&mut self, limit: u32, mut done: impl FnMut(&Self) -> bool) -> Option<u32> {
        (1..=limit).find(|_| {
            self.step();
            done(self)
        })
    }

    /// Steps until every participant alive has joined (none if they all have); the steps
    /// taken.
    ///
    /// # Errors
    /// [`PeersError::NotJoined`] naming the participants still waiting after `limit` steps.
    pub fn run_until_joined(&mut self, limit: u32) -> Result<u32, PeersError> {
        if self.all_joined() {
            return Ok(0);
        }
        self.run_until(limit, Self::all_joined)
            .ok_or_else(|| PeersError::NotJoined {
                waiting: self.waiting(),
                steps: limit,
            })
    }

    /// Whether every participant alive has its participant id.
    pub fn all_joined(&self) -> bool {
        self.waiting().is_empty()
    }

    /// Participants alive without a participant id yet.
    fn waiting(&self) -> Vec<usize> {
        (0..self.net.len())
            .filter(|&i| self.net.is_running(i) && self.id_of(i).is_none())
            .collect()
    }

    /// Whether every copy of every body is within `tolerance_m` of the others, over the
    /// participants alive (paused ones included): how far the widest body spreads, or the first
    /// body (by id) that is apart or missing somewhere.
    ///
    /// # Errors
    /// The first [`Divergence`].
    pub fn convergence(&mut self, tolerance_m: f32) -> Result<Converged, Divergence> {
        let copies: Vec<_> = self
            .net
            .running_mut()
            .map(|(i, app, ())| (i, convergence::body_positions(app.world_mut())))
            .collect();
        convergence::compare_copies(&copies, tolerance_m)
    }

    /// Panics, naming the first body whose copies are more than `tolerance_m` apart (or missing
    /// on a participant), the two participants and their positions, unless every copy agrees.
    #[track_caller]
    pub fn assert_converged(&mut self, tolerance_m: f32) -> Converged {
        match self.convergence(tolerance_m) {
            Ok(converged) => converged,
            Err(divergence) => panic!("participants' copies disagree: {divergence}"),
        }
    }

    /// Steps until every copy of every body is within `tolerance_m` (checked before the first
    /// step and after each), at most `limit` steps; the steps taken.
    ///
    /// # Errors
    /// [`PeersError::NotConverged`] with the first divergence after `limit` steps.
    pub fn run_until_converged(&mut self, tolerance_m: f32, limit: u32) -> Result<u32, PeersError> {
        let mut last = match self.convergence(tolerance_m) {
            Ok(_) => return Ok(0),
            Err(divergence) => divergence,
        };
        for n in 1..=limit {
            self.step();
            match self.convergence(tolerance_m) {
                Ok(_) => return Ok(n),
                Err(divergence) => last = divergence,
            }
        }
        Err(PeersError::NotConverged {
            steps: limit,
            divergence: last,
        })
    }
}

impl OwnershipPeers {
    /// Stops updating participant `index`: it sends and receives nothing, as a stalled process
    /// (the entity server counts it gone after `participant_silence_timeout`).
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`], [`PeerNetworkError::NotRunning`].
    pub fn pause(&mut self, index: usize) -> Result<(), PeersError> {
        Ok(self.net.pause(index)?)
    }

    /// Resumes a paused participant: it runs the updates it missed back to back, as a stalled
    /// process catching up, so its clock is the others' again
    /// ([`PeerNetwork::resume_catching_up`]). Nothing if it was not paused.
    ///
    /// # Errors
    /// As [`pause`](Self::pause).
    pub fn resume(&mut self, index: usize) -> Result<(), PeersError> {
        self.net.resume_catching_up(index)?;
        Ok(())
    }

    /// Stops the entity server for good, as a `kill -9` of its process: it is never updated
    /// again, so it sends nothing, answers nothing and closes no connection; the participants
    /// go on stepping.
    pub fn stop_server(&mut self) {
        self.net.stop_server();
    }

    /// Whether participant `index` is alive and paused.
    pub fn is_paused(&self, index: usize) -> bool {
        self.net.is_paused(index)
    }

    /// Whether participant `index` is alive (made and not killed; paused or not).
    pub fn is_running(&self, index: usize) -> bool {
        self.net.is_running(index)
    }

    /// Kills participant `index`: its App is dropped, its connection closed (the entity server
    /// sees it leave at its next update).
    ///
    /// # Errors
    /// As [`pause`](Self::pause).
    pub fn kill(&mut self, index: usize) -> Result<(), PeersError> {
        let app = self.net.kill(index)?;
        drop(app);
        Ok(())
    }

    /// A killed participant starts again: a new App (built by the same closures) on a new
    /// connection; it joins in the next steps ([`run_until_joined`](Self::run_until_joined)).
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`], [`PeerNetworkError::StillRunning`] if it was not
    /// killed; [`PeersError::Network`] or [`PeersError::Setup`] if its App cannot be made.
    pub fn rejoin(&mut self, index: usize) -> Result<(), PeersError> {
        let setup = &mut self.setup;
        self.net
            .rejoin(index, |i, transport| setup.participant_app(i, transport))
    }

    /// Adds a participant (a late joiner) with the next index, built by the same closures; it
    /// joins in the next steps. Returns its index.
    ///
    /// # Errors
    /// [`PeersError::Network`] or [`PeersError::Setup`] if its App cannot be made.
    pub fn join(&mut self) -> Result<usize, PeersError> {
        let setup = &mut self.setup;
        self.net
            .join(|i, transport| setup.participant_app(i, transport))
    }
}

impl OwnershipPeers {
    /// Sets participant `index`'s link in both directions, for packets sent from now on.
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`]; [`PeerNetworkError::Network`] for a link that does
    /// not validate.
    pub fn set_link(
        &mut self,
        index: usize,
        link: LinkConditionerConfig,
    ) -> Result<(), PeersError> {
        Ok(self.net.set_link(index, link)?)
    }

    /// Sets one direction of participant `index`'s link.
    ///
    /// # Errors
    /// As [`set_link`](Self::set_link).
    pub fn set_link_direction(
        &mut self,
        index: usize,
        direction: Direction,
        link: LinkConditionerConfig,
    ) -> Result<(), PeersError> {
        Ok(self.net.set_link_direction(index, direction, link)?)
    }

    /// Every packet to and from participant `index` is lost from now on (a dead link that does
    /// not close); [`restore_link`](Self::restore_link) ends it.
    ///
    /// # Errors
    /// As [`set_link`](Self::set_link).
    pub fn cut_link(&mut self, index: usize) -> Result<(), PeersError> {
        Ok(self.net.cut_link(index)?)
    }

    /// Participant `index`'s link is the builder's again.
    ///
    /// # Errors
    /// As [`set_link`](Self::set_link).
    pub fn restore_link(&mut self, index: usize) -> Result<(), PeersError> {
        Ok(self.net.restore_link(index)?)
    }
}

impl OwnershipPeers {
    /// The network (link stats, raw links).
    pub fn network(&self) -> &MemoryNetwork {
        self.net.network()
    }

    /// The tick every App steps.
    pub fn tick(&self) -> Duration {
        self.setup.tick
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.net.steps()
    }

    /// Participants, alive or killed.
    pub fn len(&self) -> usize {
        self.net.len()
    }

    /// Whether there are no participants.
    pub fn is_empty(&self) -> bool {
        self.net.is_empty()
    }

    /// The entity server's App.
    pub fn server(&self) -> &App {
        self.net.server()
    }

    /// The entity server's App, to change.
    pub fn server_mut(&mut self) -> &mut App {
        self.net.server_mut()
    }

    /// The entity server's state (`None` only if its plugin did not start).
    pub fn entity_server(&self) -> Option<&EntityServer> {
        self.server().world().get_resource::<EntityServer>()
    }

    /// Participant `index`'s App, unless it was killed.
    pub fn participant(&self, index: usize) -> Option<&App> {
        self.net.app(index).ok()
    }

    /// Participant `index`'s App, to change, unless it was killed.
    pub fn participant_mut(&mut self, index: usize) -> Option<&mut App> {
        self.net.app_mut(index).ok()
    }

    /// Participant `index`'s connection id.
    pub fn client_id(&self, index: usize) -> Option<u64> {
        self.net.client_id(index).ok()
    }

    /// Participant `index`'s [`OwnershipClient`].
    pub fn client(&self, index: usize) -> Option<&OwnershipClient> {
        self.participant(index)?
            .world()
            .get_resource::<OwnershipClient>()
    }

    /// Participant `index`'s counters.
    pub fn stats(&self, index: usize) -> Option<ParticipantStats> {
        self.client(index).map(|c| *c.stats())
    }

    /// Participant `index`'s id, once it joined.
    pub fn id_of(&self, index: usize) -> Option<ParticipantId> {
        self.client(index)?.me()
    }

    /// The entity of `body` on participant `index`.
    pub fn entity(&self, index: usize, body: BodyId) -> Option<Entity> {
        self.client(index)?.entity_of(body)
    }

    /// Where participant `index` has `body`.
    pub fn body_position(&self, index: usize, body: BodyId) -> Option<Vec3> {
        let entity = self.entity(index, body)?;
        let app = self.participant(index)?;
        Some(app.world().get::<Transform>(entity)?.translation)
    }

    /// `body`'s [`SimulationOwner`] on participant `index`.
    pub fn owner_on(&self, index: usize, body: BodyId) -> Option<SimulationOwner> {
        let entity = self.entity(index, body)?;
        self.participant(index)?
            .world()
            .get::<SimulationOwner>(entity)
            .copied()
    }

    /// `body`'s owner on the entity server.
    pub fn server_owner(&self, body: BodyId) -> Option<(ParticipantId, Priority)> {
        self.entity_server()?.arbiter().owner(body)
    }

    /// Whether every participant alive and not paused shows the entity server's owner and
    /// priority of `body`.
    pub fn owners_agree(&self, body: BodyId) -> bool {
        let server = self.server_owner(body);
        (0..self.net.len())
            .filter(|&i| matches!(self.net.state(i), Ok(PeerState::Running)))
            .all(|i| {
                self.owner_on(i, body)
                    .is_some_and(|o| o.owner.map(|p| (p, o.priority)) == server)
            })
    }

    /// Runs `f` on participant `index`'s `Commands` for `body`'s entity (the game's API:
    /// `poke`, `grab`, inserting a `Velocity`), applied at once.
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`], [`PeerNetworkError::NotRunning`],
    /// [`PeersError::NoSuchBody`].
    pub fn command(
        &mut self,
        index: usize,
        body: BodyId,
        f: impl FnOnce(&mut EntityCommands),
    ) -> Result<(), PeersError> {
        self.net.app(index)?;
        let entity = self.entity(index, body).ok_or(PeersError::NoSuchBody {
            participant: index,
            body,
        })?;
        let world = self.net.app_mut(index)?.world_mut();
        f(&mut world.commands().entity(entity));
        world.flush();
        Ok(())
    }
}
