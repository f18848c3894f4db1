//! [`HybridPeers`]: clients of a hybrid game, each one App with the players' session (a
//! [`RelayPeers`] client) and an ownership participant (talking to an entity server on a second
//! in-memory network), stepped together.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bevy::prelude::*;
use bevy_rapier3d::prelude::{NoUserData, RapierPhysicsPlugin};
use simsync_deterministic::{DeterministicPlugin, PlayerIndex, SimInput, Tick};
use simsync_net::{LinkConditionerConfig, MemoryNetwork, NetClock, NetError};
use simsync_ownership::testing::{
    Converged, DEFAULT_JOIN_STEPS, Divergence, OwnershipPeers, body_positions, compare_copies,
};
use simsync_ownership::{
    BodyId, OwnershipClient, OwnershipPlugin, ParticipantId, Priority, SimulationOwner,
};
use thiserror::Error;

use super::agreement::Agreement;
use super::peers::{ClientIndex, PeersError, RelayPeers, RelayPeersBuilder};
use crate::hybrid::{
    HybridConfig, HybridInput, HybridPlugin, OwnershipConnection, OwnershipConnectionPlugin,
    PlayerAvatarsPlugin,
};

/// A closure run on every client App, or on every App.
type AppFn = Arc<dyn Fn(&mut App) + Send + Sync>;
/// A closure run on every client App with its index.
type ClientFn = Arc<dyn Fn(ClientIndex, &mut App) + Send + Sync>;
/// A closure adjusting every App's [`OwnershipPlugin`].
type OwnershipFn = Arc<dyn Fn(OwnershipPlugin) -> OwnershipPlugin + Send + Sync>;
/// A scripted game input.
type ScriptFn<I> = Arc<dyn Fn(PlayerIndex, Tick) -> I + Send + Sync>;

/// Why a [`HybridPeers`] could not be built or do what it was asked.
#[derive(Debug, Error)]
pub enum HybridPeersError {
    /// The players' side: the relay, a session, a client ([`PeersError`]).
    #[error("players: {0}")]
    Players(#[from] PeersError),
    /// The ownership side: the entity server did not start.
    #[error("ownership: {0}")]
    Ownership(#[from] simsync_ownership::testing::PeersError),
    /// The ownership network refused a link or a transport.
    #[error("ownership network: {0}")]
    Network(#[from] NetError),
    /// Clients whose ownership participant had no `Welcome` after `steps` steps.
    #[error("the ownership participants of clients {waiting:?} did not join within {steps} steps")]
    NotJoined {
        /// Their indices.
        waiting: Vec<ClientIndex>,
        /// Steps run.
        steps: u32,
    },
    /// The client has no prop with this id.
    #[error("client {client} has no {body}")]
    NoSuchBody {
        /// The client.
        client: ClientIndex,
        /// The prop.
        body: BodyId,
    },
    /// The props' copies still disagreed after `steps` steps.
    #[error("props not converged after {steps} steps: {divergence}")]
    NotConverged {
        /// Steps run.
        steps: u32,
        /// The first prop whose copies disagree.
        divergence: Divergence,
    },
}

/// How a [`HybridPeers`] is made ([`HybridPeers::builder`]).
pub struct HybridPeersBuilder<I: SimInput> {
    players: RelayPeersBuilder<HybridInput<I>>,
    config: HybridConfig,
    link: LinkConditionerConfig,
    seed: u64,
    scripted: Option<ScriptFn<I>>,
    scene: AppFn,
    customize: Option<ClientFn>,
    ownership: OwnershipFn,
    join_steps: u32,
}

impl<I: SimInput> HybridPeersBuilder<I> {
    /// Every client's link, both directions, to the relay and to the entity server (default:
    /// perfect).
    pub fn link(mut self, link: LinkConditionerConfig) -> Self {
        self.link = link;
        self
    }

    /// The seed of both networks' loss and jitter (default 1).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Every client's players play `input(player, tick)` ([`HybridPlugin::scripted`]); without
    /// it, the game's `LocalInputs`.
    pub fn scripted(
        mut self,
        input: impl Fn(PlayerIndex, Tick) -> I + Send + Sync + 'static,
    ) -> Self {
        self.scripted = Some(Arc::new(input));
        self
    }

    /// Runs on the entity server's App and on every client App after the harness's plugins:
    /// the props (`BodyNetId`, `Ownable`, `OwnedProp`, a dynamic `RigidBody`, `Collider`,
    /// `Transform`) and the App world's ground. The entity server keeps the bodies' ids, kinds
    /// and transforms and ignores the rest.
    pub fn scene(mut self, scene: impl Fn(&mut App) + Send + Sync + 'static) -> Self {
        self.scene = Arc::new(scene);
        self
    }

    /// Runs on every client App with its index, after [`scene`](Self::scene).
    pub fn customize(
        mut self,
        customize: impl Fn(ClientIndex, &mut App) + Send + Sync + 'static,
    ) -> Self {
        self.customize = Some(Arc::new(customize));
        self
    }

    /// Adjusts the [`OwnershipPlugin`] of the entity server and every participant (the same
    /// config on all).
    pub fn ownership(
        mut self,
        f: impl Fn(OwnershipPlugin) -> OwnershipPlugin + Send + Sync + 'static,
    ) -> Self {
        self.ownership = Arc::new(f);
        self
    }

    /// Adjusts the players' harness (checks, breakdowns, the relay plugin) before it is built.
    /// Its link, seed and client customization are the hybrid harness's own (set them with
    /// [`link`](Self::link), [`seed`](Self::seed) and [`customize`](Self::customize)): `build`
    /// replaces them. The entity server is its side server: add none of your own.
    pub fn players(
        mut self,
        f: impl FnOnce(RelayPeersBuilder<HybridInput<I>>) -> RelayPeersBuilder<HybridInput<I>>,
    ) -> Self {
        self.players = f(self.players);
        self
    }

    /// Steps [`build`](Self::build) allows for every participant to join (default
    /// [`DEFAULT_JOIN_STEPS`]).
    pub fn join_within(mut self, steps: u32) -> Self {
        self.join_steps = steps;
        self
    }

    /// The Apps, stepped until every client's ownership participant has joined.
    ///
    /// # Errors
    /// [`HybridPeersError::Network`] for an invalid link; [`HybridPeersError::Ownership`] if
    /// the entity server does not start; [`HybridPeersError::Players`] as
    /// [`RelayPeersBuilder::build`], or when a client's ownership transport is refused;
    /// [`HybridPeersError::NotJoined`].
    pub fn build(self) -> Result<HybridPeers<I>, HybridPeersError> {
        let network = MemoryNetwork::with_directions(self.seed, self.link, self.link)?;
        let NetClock::Fixed(tick) = NetClock::fixed_hz(self.config.tick_hz) else {
            unreachable!("fixed_hz is a fixed clock");
        };
        let (scene, ownership) = (self.scene.clone(), self.ownership.clone());
        let server = OwnershipPeers::builder(0)
            .tick(tick)
            .ownership(move |p| ownership(p))
            .scene(move |app| scene(app))
            .build_entity_server(network.server_transport()?)?;
        let client = ClientSetup {
            network: network.clone(),
            next_id: Arc::new(AtomicU64::new(1)),
            config: self.config,
            scripted: self.scripted,
            scene: self.scene,
            customize: self.customize,
            ownership: self.ownership,
        };
        let players = self
            .players
            .link(self.link)
            .seed(self.seed)
            .side_server(server)
            .customize(move |index, app| client.add_to(index, app))
            .build()?;
        let mut peers = HybridPeers { players, network };
        peers.run_until_joined(self.join_steps)?;
        Ok(peers)
    }
}

/// What each client App gets beside the players' session.
struct ClientSetup<I: SimInput> {
    network: MemoryNetwork,
    next_id: Arc<AtomicU64>,
    config: HybridConfig,
    scripted: Option<ScriptFn<I>>,
    scene: AppFn,
    customize: Option<ClientFn>,
    ownership: OwnershipFn,
}

impl<I: SimInput> ClientSetup<I> {
    /// Rapier and the ownership participant in the App's world on its own connection, the
    /// hybrid plugins, the scene and the game's customization. A transport the network refuses
    /// leaves the participant without a connection: it never joins, which
    /// [`HybridPeersBuilder::build`] reports.
    fn add_to(&self, index: ClientIndex, app: &mut App) {
        if !app.is_plugin_added::<TransformPlugin>() {
            app.add_plugins(TransformPlugin);
        }
        let participant = OwnershipPlugin::participant().with_name(format!("participant {index}"));
        app.add_plugins(RapierPhysicsPlugin::<NoUserData>::default())
            .add_plugins((self.ownership)(participant))
            .add_plugins(OwnershipConnectionPlugin)
            .add_plugins(PlayerAvatarsPlugin);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        match self.network.client_transport(id) {
            Ok(transport) => {
                app.insert_resource(OwnershipConnection::new(transport));
            }
            Err(error) => error!("client {index}: no ownership connection: {error}"),
        }
        let mut plugin = HybridPlugin::<I>::new(self.config.clone());
        if let Some(scripted) = self.scripted.clone() {
            plugin = plugin.scripted(move |p, t| scripted(p, t));
        }
        app.add_plugins(plugin);
        (self.scene)(app);
        if let Some(customize) = &self.customize {
            customize(index, app);
        }
    }
}

/// Clients of a hybrid game in one process: each client App runs the players' session over a
/// relay (a [`RelayPeers`] client) and is an ownership participant whose props live in its own
/// world, talking to an entity server on a second in-memory network over an
/// [`OwnershipConnection`] ([`crate::hybrid`]). Both networks have the builder's link and seed.
///
/// Each [`step`](Self::step) updates the entity server, the relay, then every running client.
/// Players are compared by their verified checksums ([`assert_all_agree`](Self::assert_all_agree),
/// as [`RelayPeers`] does), props by their copies' positions
/// ([`prop_convergence`](Self::prop_convergence), as `OwnershipPeers` does). Pausing or killing
/// a client ([`pause`](Self::pause), [`kill`](Self::kill)) stops both its player and its
/// participant: a killed client's connections close, so the entity server clears what it owned
/// at once (ownership rule 5).
pub struct HybridPeers<I: SimInput> {
    players: RelayPeers<HybridInput<I>>,
    network: MemoryNetwork,
}

impl<I: SimInput> HybridPeers<I> {
    /// A harness of `players` players, one client each, whose client `c` runs the session
    /// plugin `make_plugin(c)` (made by [`hybrid_session`](crate::hybrid::hybrid_session) with
    /// `config`); `config` is also every client's [`HybridPlugin`]'s.
    pub fn builder(
        players: PlayerIndex,
        config: HybridConfig,
        make_plugin: impl Fn(ClientIndex) -> DeterministicPlugin<HybridInput<I>> + Send + Sync + 'static,
    ) -> HybridPeersBuilder<I> {
        HybridPeersBuilder {
            players: RelayPeers::builder(players, make_plugin),
            config,
            link: LinkConditionerConfig::PERFECT,
            seed: 1,
            scripted: None,
            scene: Arc::new(|_| {}),
            customize: None,
            ownership: Arc::new(|p| p),
            join_steps: DEFAULT_JOIN_STEPS,
        }
    }

    /// One frame: the entity server, the relay, every running client that is not paused.
    pub fn step(&mut self) {
        self.players.step();
    }

    /// `frames` frames, stopping at the first problem a session reports.
    ///
    /// # Errors
    /// As [`RelayPeers::run_frames`].
    pub fn run_frames(&mut self, frames: u32) -> Result<(), HybridPeersError> {
        Ok(self.players.run_frames(frames)?)
    }

    /// Steps until every running client verified `tick`; the lowest verified tick.
    ///
    /// # Errors
    /// As [`RelayPeers::run_until_verified`].
    pub fn run_until_verified(&mut self, tick: Tick) -> Result<Tick, HybridPeersError> {
        Ok(self.players.run_until_verified(tick)?)
    }

    /// Steps until every running client's participant has its id from the entity server, at
    /// most `steps` steps.
    ///
    /// # Errors
    /// [`HybridPeersError::NotJoined`] with the clients still waiting.
    pub fn run_until_joined(&mut self, steps: u32) -> Result<(), HybridPeersError> {
        for _ in 0..steps {
            if self.waiting().is_empty() {
                return Ok(());
            }
            self.step();
        }
        let waiting = self.waiting();
        if waiting.is_empty() {
            return Ok(());
        }
        Err(HybridPeersError::NotJoined { waiting, steps })
    }

    fn waiting(&self) -> Vec<ClientIndex> {
        (0..self.players.clients())
            .filter(|&c| self.players.is_running(c) && self.participant_id(c).is_none())
            .collect()
    }

    /// The players' verified checksums compared across clients ([`RelayPeers::assert_all_agree`]).
    ///
    /// # Panics
    /// On a disagreement, or when no tick was compared.
    #[track_caller]
    pub fn assert_all_agree(&self) -> Agreement {
        self.players.assert_all_agree()
    }

    /// Whether every running client's copy of every prop (every `BodyNetId` of its world) is
    /// within `tolerance_m` of the others (paused clients included): the widest spread, or the
    /// first prop apart or missing. Client indices stand for participants in the result.
    ///
    /// # Errors
    /// The first [`Divergence`].
    pub fn prop_convergence(&mut self, tolerance_m: f32) -> Result<Converged, Divergence> {
        let copies: Vec<(usize, BTreeMap<BodyId, Vec3>)> = (0..self.players.clients())
            .filter_map(|c| {
                let app = self.players.client_mut(c).ok()?;
                Some((c, body_positions(app.world_mut())))
            })
            .collect();
        compare_copies(&copies, tolerance_m)
    }

    /// Steps until [`prop_convergence`](Self::prop_convergence) holds (checked before the
    /// first step and after each), at most `limit` steps; the steps taken.
    ///
    /// # Errors
    /// [`HybridPeersError::NotConverged`] with the last divergence.
    pub fn run_until_props_converged(
        &mut self,
        tolerance_m: f32,
        limit: u32,
    ) -> Result<u32, HybridPeersError> {
        let mut last = match self.prop_convergence(tolerance_m) {
            Ok(_) => return Ok(0),
            Err(divergence) => divergence,
        };
        for n in 1..=limit {
            self.step();
            match self.prop_convergence(tolerance_m) {
                Ok(_) => return Ok(n),
                Err(divergence) => last = divergence,
            }
        }
        Err(HybridPeersError::NotConverged {
            steps: limit,
            divergence: last,
        })
    }

    /// Client `client`'s participant id, once its participant joined.
    pub fn participant_id(&self, client: ClientIndex) -> Option<ParticipantId> {
        self.ownership_client(client)?.me()
    }

    /// Client `client`'s [`OwnershipClient`].
    pub fn ownership_client(&self, client: ClientIndex) -> Option<&OwnershipClient> {
        self.players
            .client(client)
            .ok()?
            .world()
            .get_resource::<OwnershipClient>()
    }

    /// The entity of prop `body` in client `client`'s world.
    pub fn prop_entity(&self, client: ClientIndex, body: BodyId) -> Option<Entity> {
        self.ownership_client(client)?.entity_of(body)
    }

    /// Where client `client` has prop `body`.
    pub fn prop_position(&self, client: ClientIndex, body: BodyId) -> Option<Vec3> {
        let entity = self.prop_entity(client, body)?;
        let world = self.players.client(client).ok()?.world();
        Some(world.get::<Transform>(entity)?.translation)
    }

    /// Prop `body`'s [`SimulationOwner`] on client `client`.
    pub fn prop_owner(&self, client: ClientIndex, body: BodyId) -> Option<SimulationOwner> {
        let entity = self.prop_entity(client, body)?;
        let world = self.players.client(client).ok()?.world();
        world.get::<SimulationOwner>(entity).copied()
    }

    /// Prop `body`'s owner and priority on the entity server.
    pub fn server_owner(&self, body: BodyId) -> Option<(ParticipantId, Priority)> {
        let server = self.players.side_server(0)?;
        let state = server
            .world()
            .get_resource::<simsync_ownership::EntityServer>()?;
        state.arbiter().owner(body)
    }

    /// Runs `f` on client `client`'s `Commands` for prop `body`'s entity (`grab_prop`,
    /// `throw_prop`, `poke`, a `Velocity`), applied at once.
    ///
    /// # Errors
    /// [`HybridPeersError::Players`] for an unknown or killed client,
    /// [`HybridPeersError::NoSuchBody`].
    pub fn command(
        &mut self,
        client: ClientIndex,
        body: BodyId,
        f: impl FnOnce(&mut EntityCommands),
    ) -> Result<(), HybridPeersError> {
        self.players.client(client)?;
        let entity = self
            .prop_entity(client, body)
            .ok_or(HybridPeersError::NoSuchBody { client, body })?;
        let world = self.players.client_mut(client)?.world_mut();
        f(&mut world.commands().entity(entity));
        world.flush();
        Ok(())
    }

    /// Pauses client `client` (its player and its participant).
    ///
    /// # Errors
    /// As [`RelayPeers::pause`].
    pub fn pause(&mut self, client: ClientIndex) -> Result<(), HybridPeersError> {
        Ok(self.players.pause(client)?)
    }

    /// Resumes client `client`.
    ///
    /// # Errors
    /// As [`RelayPeers::resume`].
    pub fn resume(&mut self, client: ClientIndex) -> Result<(), HybridPeersError> {
        Ok(self.players.resume(client)?)
    }

    /// Kills client `client`: its App and both its connections are dropped.
    ///
    /// # Errors
    /// As [`RelayPeers::kill`].
    pub fn kill(&mut self, client: ClientIndex) -> Result<(), HybridPeersError> {
        Ok(self.players.kill(client)?)
    }

    /// The players' harness (clients, relay, links to the relay, checksums).
    pub fn players(&self) -> &RelayPeers<HybridInput<I>> {
        &self.players
    }

    /// The players' harness, mutably.
    pub fn players_mut(&mut self) -> &mut RelayPeers<HybridInput<I>> {
        &mut self.players
    }

    /// The entity server's App.
    pub fn entity_server(&self) -> Option<&App> {
        self.players.side_server(0)
    }

    /// The ownership network (its links and counters; client ids from 1 in the order the
    /// clients were made).
    pub fn ownership_network(&self) -> &MemoryNetwork {
        &self.network
    }

    /// Client `client`'s App.
    ///
    /// # Errors
    /// As [`RelayPeers::client`].
    pub fn client(&self, client: ClientIndex) -> Result<&App, HybridPeersError> {
        Ok(self.players.client(client)?)
    }

    /// Client `client`'s App, mutably.
    ///
    /// # Errors
    /// As [`RelayPeers::client`].
    pub fn client_mut(&mut self, client: ClientIndex) -> Result<&mut App, HybridPeersError> {
        Ok(self.players.client_mut(client)?)
    }
}
