//! The in-memory network both test harnesses stand on ([`PeerNetwork`]): a server App and
//! client Apps on one [`MemoryNetwork`], stepped together, each client's link, pause and life
//! controlled by its index.
//!
//! `simsync::testing::RelayPeers` (a relay and deterministic clients) and
//! `simsync_ownership::testing::OwnershipPeers` (an entity server and participants) are both a
//! `PeerNetwork` plus what their game needs; the methods below are theirs under the same names.
//! The harness builds each App (its plugins, in its own order) around the transport the network
//! hands it; the network registers the transport, keeps the App and its per-peer record, and
//! steps, pauses, kills and relinks it:
//!
//! - **Indices and ids**: peer `i` is the `i`-th client App made ([`join`](PeerNetwork::join));
//!   every transport gets the next client id, 1 for the first, so a rejoined peer keeps its
//!   index and gets a new id.
//! - **Steps**: [`step`](PeerNetwork::step) updates the server (unless
//!   [stopped](PeerNetwork::stop_server)), then every running, unpaused peer in index order,
//!   once each: the same calls in the same order on the same seed give the same run.
//! - **Links**: every peer starts on the network's `up` / `down` links;
//!   [`set_link`](PeerNetwork::set_link) and [`set_link_direction`](PeerNetwork::set_link_direction)
//!   change one peer's, [`cut_link`](PeerNetwork::cut_link) loses all its packets (a dead link
//!   that does not close), [`restore_link`](PeerNetwork::restore_link) gives it `up` / `down`
//!   again; each change applies to packets sent from then on.
//! - **Pauses**: a paused peer is not updated (a hung process) and counts the steps it missed;
//!   [`resume`](PeerNetwork::resume) goes on from where it froze,
//!   [`resume_catching_up`](PeerNetwork::resume_catching_up) first runs the missed updates
//!   back to back.
//! - **Kills**: [`kill`](PeerNetwork::kill) takes the App out (dropping it closes its
//!   connection), [`rejoin`](PeerNetwork::rejoin) puts a new one in its place on a new
//!   transport.

use bevy::app::App;
use renet::ClientId;
use thiserror::Error;

use crate::conditioner::LinkConditionerConfig;
use crate::error::NetError;
use crate::memory::{Direction, MemoryClientTransport, MemoryNetwork, MemoryServerTransport};

/// A peer of a [`PeerNetwork`]: 0 for the first client App, in the order they were made (a
/// rejoined peer keeps its index).
pub type PeerIndex = usize;

/// Why a [`PeerNetwork`] could not do what it was asked.
#[derive(Debug, Error)]
pub enum PeerNetworkError {
    /// The in-memory network refused a link or a transport (an invalid link conditioner, a
    /// server transport asked for twice).
    #[error("in-memory network: {0}")]
    Network(#[from] NetError),
    /// No peer has this index.
    #[error("no peer {peer} (there are {peers})")]
    UnknownPeer {
        /// The index asked for.
        peer: PeerIndex,
        /// Peers made so far (running or killed).
        peers: usize,
    },
    /// The peer was killed and has not rejoined.
    #[error("peer {0} is not running (killed)")]
    NotRunning(PeerIndex),
    /// The peer runs: kill it before it rejoins.
    #[error("peer {0} is running: kill it before it rejoins")]
    StillRunning(PeerIndex),
}

/// Where a peer of a [`PeerNetwork`] is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Updated by every [`step`](PeerNetwork::step).
    Running,
    /// Not updated; `missed` steps went by since [`pause`](PeerNetwork::pause).
    Paused {
        /// Steps the peer was not updated in.
        missed: u32,
    },
    /// Its App was dropped ([`kill`](PeerNetwork::kill)).
    Killed,
}

/// One client App and what the harness keeps beside it.
#[derive(Debug)]
struct Slot<R> {
    /// `None` once killed.
    app: Option<App>,
    client_id: ClientId,
    /// `Some(missed steps)` while paused.
    paused: Option<u32>,
    record: R,
}

/// A server App and client Apps on one [`MemoryNetwork`], stepped together by hand, with a
/// per-client link, pause and life ([module docs](self)). `R` is what the harness keeps per
/// peer beside its App (its checksum history, its reconnect token; `()` for nothing); it lives
/// on after a kill and is replaced on a rejoin.
pub struct PeerNetwork<R = ()> {
    network: MemoryNetwork,
    server: App,
    server_stopped: bool,
    peers: Vec<Slot<R>>,
    next_client_id: ClientId,
    up: LinkConditionerConfig,
    down: LinkConditionerConfig,
    steps: u64,
}

impl<R> PeerNetwork<R> {
    /// A network of seed `seed` whose peers send on `up` and receive on `down`, and its server
    /// App: `make_server(transport)` builds it around the server transport. No peer yet.
    ///
    /// # Errors
    /// [`PeerNetworkError::Network`] for a link that does not validate; `make_server`'s error.
    pub fn new<E: From<PeerNetworkError>>(
        seed: u64,
        up: LinkConditionerConfig,
        down: LinkConditionerConfig,
        make_server: impl FnOnce(MemoryServerTransport) -> Result<App, E>,
    ) -> Result<Self, E> {
        let network = MemoryNetwork::with_directions(seed, up, down).map_err(network_error)?;
        let transport = network.server_transport().map_err(network_error)?;
        let server = make_server(transport)?;
        Ok(Self {
            network,
            server,
            server_stopped: false,
            peers: Vec::new(),
            next_client_id: 1,
            up,
            down,
            steps: 0,
        })
    }

    /// A new peer with the next index: `make(index, transport)` builds its App around a
    /// transport registered under the next client id, and its record. Returns the index.
    ///
    /// # Errors
    /// [`PeerNetworkError::Network`] if the network refuses the transport; `make`'s error
    /// (the client id is then used up, and no peer is added).
    pub fn join<E: From<PeerNetworkError>>(
        &mut self,
        make: impl FnOnce(PeerIndex, MemoryClientTransport) -> Result<(App, R), E>,
    ) -> Result<PeerIndex, E> {
        let index = self.peers.len();
        let slot = self.make_slot(index, make)?;
        self.peers.push(slot);
        Ok(index)
    }

    /// A killed peer comes back under its index: a new App and record from `make`, on a
    /// transport with the next client id. Returns the record it had.
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`], [`PeerNetworkError::StillRunning`]; as
    /// [`join`](Self::join).
    pub fn rejoin<E: From<PeerNetworkError>>(
        &mut self,
        peer: PeerIndex,
        make: impl FnOnce(PeerIndex, MemoryClientTransport) -> Result<(App, R), E>,
    ) -> Result<R, E> {
        if self.state(peer)? != PeerState::Killed {
            return Err(PeerNetworkError::StillRunning(peer).into());
        }
        let slot = self.make_slot(peer, make)?;
        Ok(std::mem::replace(&mut self.peers[peer], slot).record)
    }

    fn make_slot<E: From<PeerNetworkError>>(
        &mut self,
        index: PeerIndex,
        make: impl FnOnce(PeerIndex, MemoryClientTransport) -> Result<(App, R), E>,
    ) -> Result<Slot<R>, E> {
        let client_id = self.next_client_id;
        let transport = self
            .network
            .client_transport(client_id)
            .map_err(network_error)?;
        self.next_client_id += 1;
        let (app, record) = make(index, transport)?;
        Ok(Slot {
            app: Some(app),
            client_id,
            paused: None,
            record,
        })
    }

    /// One step: the server (unless [stopped](Self::stop_server)), then every running peer
    /// in index order; a paused peer counts the step as missed.
    pub fn step(&mut self) {
        if !self.server_stopped {
            self.server.update();
        }
        for slot in &mut self.peers {
            match (&mut slot.app, &mut slot.paused) {
                (Some(_), Some(missed)) => *missed = missed.saturating_add(1),
                (Some(app), None) => app.update(),
                (None, _) => {}
            }
        }
        self.steps += 1;
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Stops updating the server for good, as a `kill -9` of its process: it sends nothing,
    /// answers nothing and closes no connection; the peers go on stepping.
    pub fn stop_server(&mut self) {
        self.server_stopped = true;
    }

    /// Whether [`stop_server`](Self::stop_server) was called.
    pub fn is_server_stopped(&self) -> bool {
        self.server_stopped
    }

    /// Stops updating peer `peer` (its App freezes, as a process that hangs) until
    /// [`resume`](Self::resume) or [`resume_catching_up`](Self::resume_catching_up). Pausing
    /// a paused peer changes nothing.
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`], [`PeerNetworkError::NotRunning`].
    pub fn pause(&mut self, peer: PeerIndex) -> Result<(), PeerNetworkError> {
        self.running_slot(peer)?.paused.get_or_insert(0);
        Ok(())
    }

    /// Updates peer `peer` again from the next step, from where it froze; returns the steps
    /// it missed (0 if it was not paused).
    ///
    /// # Errors
    /// As [`pause`](Self::pause).
    pub fn resume(&mut self, peer: PeerIndex) -> Result<u32, PeerNetworkError> {
        Ok(self.running_slot(peer)?.paused.take().unwrap_or(0))
    }

    /// [`resume`](Self::resume), after running the updates peer `peer` missed back to back, as
    /// a stalled process catching up: its clock is the others' again. Returns how many.
    ///
    /// # Errors
    /// As [`pause`](Self::pause).
    pub fn resume_catching_up(&mut self, peer: PeerIndex) -> Result<u32, PeerNetworkError> {
        let slot = self.running_slot(peer)?;
        let missed = slot.paused.take().unwrap_or(0);
        if let Some(app) = slot.app.as_mut() {
            for _ in 0..missed {
                app.update();
            }
        }
        Ok(missed)
    }

    /// Kills peer `peer`: its App is taken out and returned, to read before it is dropped
    /// (dropping it drops its transport: the server sees the connection close). Its record
    /// stays.
    ///
    /// # Errors
    /// As [`pause`](Self::pause).
    pub fn kill(&mut self, peer: PeerIndex) -> Result<App, PeerNetworkError> {
        let slot = self.running_slot(peer)?;
        slot.paused = None;
        slot.app.take().ok_or(PeerNetworkError::NotRunning(peer))
    }

    /// Peer `peer`'s link in both directions, for packets sent from now on.
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`]; [`PeerNetworkError::Network`] for a link that does
    /// not validate (or a killed peer's link, once the server removed it).
    pub fn set_link(
        &mut self,
        peer: PeerIndex,
        link: LinkConditionerConfig,
    ) -> Result<(), PeerNetworkError> {
        self.set_link_direction(peer, Direction::ToServer, link)?;
        self.set_link_direction(peer, Direction::ToClient, link)
    }

    /// Peer `peer`'s link in one direction, for packets sent from now on.
    ///
    /// # Errors
    /// As [`set_link`](Self::set_link).
    pub fn set_link_direction(
        &mut self,
        peer: PeerIndex,
        direction: Direction,
        link: LinkConditionerConfig,
    ) -> Result<(), PeerNetworkError> {
        let client_id = self.slot(peer)?.client_id;
        Ok(self.network.set_link(client_id, direction, link)?)
    }

    /// An outage: every packet to and from peer `peer` is lost from now on (the link does not
    /// close); [`restore_link`](Self::restore_link) ends it.
    ///
    /// # Errors
    /// As [`set_link`](Self::set_link).
    pub fn cut_link(&mut self, peer: PeerIndex) -> Result<(), PeerNetworkError> {
        self.set_link(peer, LinkConditionerConfig::PERFECT.with_loss(100.0))
    }

    /// Peer `peer`'s link is the network's again: `up` to the server, `down` from it.
    ///
    /// # Errors
    /// As [`set_link`](Self::set_link).
    pub fn restore_link(&mut self, peer: PeerIndex) -> Result<(), PeerNetworkError> {
        let (up, down) = (self.up, self.down);
        self.set_link_direction(peer, Direction::ToServer, up)?;
        self.set_link_direction(peer, Direction::ToClient, down)
    }

    /// The links every peer starts on and [`restore_link`](Self::restore_link) goes back to:
    /// `(up, down)`.
    pub fn links(&self) -> (LinkConditionerConfig, LinkConditionerConfig) {
        (self.up, self.down)
    }

    /// The in-memory network (link counters, per-direction links).
    pub fn network(&self) -> &MemoryNetwork {
        &self.network
    }

    /// The server's App.
    pub fn server(&self) -> &App {
        &self.server
    }

    /// The server's App, mutably.
    pub fn server_mut(&mut self) -> &mut App {
        &mut self.server
    }

    /// Peers made so far (running or killed).
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether no peer was made yet.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Where peer `peer` is in its life.
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`].
    pub fn state(&self, peer: PeerIndex) -> Result<PeerState, PeerNetworkError> {
        let slot = self.slot(peer)?;
        Ok(match (&slot.app, slot.paused) {
            (None, _) => PeerState::Killed,
            (Some(_), Some(missed)) => PeerState::Paused { missed },
            (Some(_), None) => PeerState::Running,
        })
    }

    /// Whether peer `peer` runs (made and not killed; paused or not).
    pub fn is_running(&self, peer: PeerIndex) -> bool {
        self.peers.get(peer).is_some_and(|s| s.app.is_some())
    }

    /// Whether peer `peer` runs and is paused.
    pub fn is_paused(&self, peer: PeerIndex) -> bool {
        matches!(self.state(peer), Ok(PeerState::Paused { .. }))
    }

    /// Peer `peer`'s current client id (a new one after each rejoin).
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`].
    pub fn client_id(&self, peer: PeerIndex) -> Result<ClientId, PeerNetworkError> {
        Ok(self.slot(peer)?.client_id)
    }

    /// Peer `peer`'s App.
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`], [`PeerNetworkError::NotRunning`].
    pub fn app(&self, peer: PeerIndex) -> Result<&App, PeerNetworkError> {
        self.slot(peer)?
            .app
            .as_ref()
            .ok_or(PeerNetworkError::NotRunning(peer))
    }

    /// Peer `peer`'s App, mutably.
    ///
    /// # Errors
    /// As [`app`](Self::app).
    pub fn app_mut(&mut self, peer: PeerIndex) -> Result<&mut App, PeerNetworkError> {
        self.slot_mut(peer)?
            .app
            .as_mut()
            .ok_or(PeerNetworkError::NotRunning(peer))
    }

    /// Peer `peer`'s record (kept after a kill).
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`].
    pub fn record(&self, peer: PeerIndex) -> Result<&R, PeerNetworkError> {
        Ok(&self.slot(peer)?.record)
    }

    /// Peer `peer`'s record, mutably.
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`].
    pub fn record_mut(&mut self, peer: PeerIndex) -> Result<&mut R, PeerNetworkError> {
        Ok(&mut self.slot_mut(peer)?.record)
    }

    /// Every running peer's index and App, in index order (paused ones included).
    pub fn running(&self) -> impl Iterator<Item = (PeerIndex, &App)> {
        self.peers
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, s.app.as_ref()?)))
    }

    /// Every running, unpaused peer's App, in index order: the ones the next step updates.
    pub fn unpaused(&self) -> impl Iterator<Item = &App> {
        self.peers
            .iter()
            .filter(|s| s.paused.is_none())
            .filter_map(|s| s.app.as_ref())
    }

    /// Every running peer's index, App and record, mutably, in index order (paused ones
    /// included).
    pub fn running_mut(&mut self) -> impl Iterator<Item = (PeerIndex, &mut App, &mut R)> {
        self.peers
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| Some((i, s.app.as_mut()?, &mut s.record)))
    }

    /// The server's App and every running peer's App (in index order), mutably, at once.
    pub fn apps_mut(&mut self) -> (&mut App, Vec<&mut App>) {
        let peers = self
            .peers
            .iter_mut()
            .filter_map(|s| s.app.as_mut())
            .collect();
        (&mut self.server, peers)
    }

    fn slot(&self, peer: PeerIndex) -> Result<&Slot<R>, PeerNetworkError> {
        let peers = self.peers.len();
        self.peers
            .get(peer)
            .ok_or(PeerNetworkError::UnknownPeer { peer, peers })
    }

    fn slot_mut(&mut self, peer: PeerIndex) -> Result<&mut Slot<R>, PeerNetworkError> {
        let peers = self.peers.len();
        self.peers
            .get_mut(peer)
            .ok_or(PeerNetworkError::UnknownPeer { peer, peers })
    }

    fn running_slot(&mut self, peer: PeerIndex) -> Result<&mut Slot<R>, PeerNetworkError> {
        let slot = self.slot_mut(peer)?;
        if slot.app.is_none() {
            return Err(PeerNetworkError::NotRunning(peer));
        }
        Ok(slot)
    }
}

impl<R> std::fmt::Debug for PeerNetwork<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let states: Vec<_> = (0..self.peers.len())
            .filter_map(|p| self.state(p).ok())
            .collect();
        f.debug_struct("PeerNetwork")
            .field("steps", &self.steps)
            .field("server_stopped", &self.server_stopped)
            .field("peers", &states)
            .field("links", &self.links())
            .finish_non_exhaustive()
    }
}

/// A network refusal as the caller's error.
fn network_error<E: From<PeerNetworkError>>(error: NetError) -> E {
    E::from(PeerNetworkError::Network(error))
}

#[cfg(test)]
mod tests {
    use bevy::prelude::*;
    use bevy_renet::{RenetClient, RenetServer};

    use super::*;
    use crate::plugin::{NetAppExt, NetClientPlugin, NetClock, NetServerPlugin};

    /// Updates an App has run (a system in `Update`).
    #[derive(Resource, Default)]
    struct Updates(u32);

    fn count(mut updates: ResMut<Updates>) {
        updates.0 += 1;
    }

    fn counting(mut app: App) -> App {
        app.init_resource::<Updates>().add_systems(Update, count);
        app
    }

    fn updates(app: &App) -> u32 {
        app.world().resource::<Updates>().0
    }

    /// A server and `peers` clients at 64 Hz, each App counting its updates; peer `i`'s record
    /// is `i * 10`.
    fn network(peers: usize, link: LinkConditionerConfig) -> PeerNetwork<usize> {
        let clock = NetClock::fixed_hz(64);
        let mut net = PeerNetwork::new(3, link, link, |transport| {
            let mut server = counting(App::new());
            server
                .add_plugins(NetServerPlugin::default().with_clock(clock))
                .insert_net_server(transport);
            Ok::<_, PeerNetworkError>(server)
        })
        .unwrap();
        for _ in 0..peers {
            net.join(client).unwrap();
        }
        net
    }

    fn client(
        index: PeerIndex,
        transport: MemoryClientTransport,
    ) -> Result<(App, usize), PeerNetworkError> {
        let mut app = counting(App::new());
        app.add_plugins(NetClientPlugin::default().with_clock(NetClock::fixed_hz(64)))
            .insert_net_client(transport);
        Ok((app, index * 10))
    }

    /// One message each way between the server and peer `peer`, then a step.
    fn chatter(net: &mut PeerNetwork<usize>, peer: PeerIndex) {
        let app = net.app_mut(peer).unwrap();
        let mut client = app.world_mut().resource_mut::<RenetClient>();
        client.send_message(0, vec![1u8; 8]);
        let mut server = net.server_mut().world_mut().resource_mut::<RenetServer>();
        server.broadcast_message(0, vec![2u8; 8]);
        net.step();
    }

    #[test]
    fn peers_get_indices_in_order_and_client_ids_from_1() {
        let mut net = network(3, LinkConditionerConfig::PERFECT);
        assert_eq!(net.len(), 3);
        assert_eq!(net.client_id(0).unwrap(), 1);
        assert_eq!(net.client_id(2).unwrap(), 3);
        assert_eq!(*net.record(1).unwrap(), 10);
        assert_eq!(net.network().client_ids(), vec![1, 2, 3]);
        for _ in 0..3 {
            net.step();
        }
        for (peer, app) in net.running() {
            assert!(
                app.world().resource::<RenetClient>().is_connected(),
                "peer {peer}"
            );
        }
        // renet lists its clients in hash-map order.
        let mut connected = net.server().world().resource::<RenetServer>().clients_id();
        connected.sort_unstable();
        assert_eq!(connected, vec![1, 2, 3]);
    }

    #[test]
    fn a_step_updates_the_server_and_every_running_unpaused_peer_once() {
        let mut net = network(2, LinkConditionerConfig::PERFECT);
        net.step();
        net.step();
        assert_eq!(net.steps(), 2);
        assert_eq!(updates(net.server()), 2);
        assert_eq!(updates(net.app(0).unwrap()), 2);
        assert_eq!(updates(net.app(1).unwrap()), 2);
        net.stop_server();
        net.step();
        assert!(net.is_server_stopped());
        assert_eq!(updates(net.server()), 2, "a stopped server is not updated");
        assert_eq!(updates(net.app(1).unwrap()), 3);
    }

    #[test]
    fn a_paused_peer_misses_steps_and_resumes_where_it_froze() {
        let mut net = network(2, LinkConditionerConfig::PERFECT);
        net.step();
        net.pause(1).unwrap();
        net.pause(1).unwrap();
        for _ in 0..4 {
            net.step();
        }
        assert_eq!(net.state(1).unwrap(), PeerState::Paused { missed: 4 });
        assert!(net.is_paused(1) && net.is_running(1));
        assert_eq!(net.unpaused().count(), 1);
        assert_eq!(updates(net.app(1).unwrap()), 1);
        assert_eq!(net.resume(1).unwrap(), 4);
        assert_eq!(updates(net.app(1).unwrap()), 1, "resume runs nothing");
        assert_eq!(net.state(1).unwrap(), PeerState::Running);
        assert_eq!(net.resume(1).unwrap(), 0, "not paused: nothing missed");
        net.step();
        assert_eq!(updates(net.app(1).unwrap()), 2);
        assert_eq!(updates(net.app(0).unwrap()), 6);
    }

    #[test]
    fn resume_catching_up_runs_the_missed_updates() {
        let mut net = network(1, LinkConditionerConfig::PERFECT);
        net.pause(0).unwrap();
        for _ in 0..3 {
            net.step();
        }
        assert_eq!(net.resume_catching_up(0).unwrap(), 3);
        assert_eq!(updates(net.app(0).unwrap()), 3);
        assert_eq!(updates(net.server()), 3, "the others are where they were");
    }

    #[test]
    fn a_killed_peer_keeps_its_record_and_rejoins_on_a_new_client_id() {
        let mut net = network(2, LinkConditionerConfig::PERFECT);
        for _ in 0..3 {
            net.step();
        }
        net.pause(1).unwrap();
        let app = net.kill(1).unwrap();
        assert_eq!(updates(&app), 3, "the App is handed back to read");
        drop(app);
        assert_eq!(net.state(1).unwrap(), PeerState::Killed);
        assert!(!net.is_running(1) && !net.is_paused(1));
        assert_eq!(*net.record(1).unwrap(), 10);
        assert!(matches!(net.app(1), Err(PeerNetworkError::NotRunning(1))));
        assert!(matches!(net.kill(1), Err(PeerNetworkError::NotRunning(1))));
        assert!(matches!(net.pause(1), Err(PeerNetworkError::NotRunning(1))));
        for _ in 0..3 {
            net.step();
        }
        assert!(
            !net.server()
                .world()
                .resource::<RenetServer>()
                .clients_id()
                .contains(&2),
            "the server saw the connection close"
        );
        let old = net
            .rejoin(1, |i, t| client(i, t).map(|(app, r)| (app, r + 1)))
            .unwrap();
        assert_eq!(old, 10);
        assert_eq!(*net.record(1).unwrap(), 11);
        assert_eq!(net.client_id(1).unwrap(), 3);
        assert_eq!(net.len(), 2);
        assert_eq!(updates(net.app(1).unwrap()), 0, "a new App");
    }

    #[test]
    fn misuse_is_a_typed_error() {
        let mut net = network(1, LinkConditionerConfig::PERFECT);
        assert!(matches!(
            net.pause(4),
            Err(PeerNetworkError::UnknownPeer { peer: 4, peers: 1 })
        ));
        assert!(matches!(
            net.rejoin(0, client),
            Err(PeerNetworkError::StillRunning(0))
        ));
        let bad = LinkConditionerConfig::PERFECT.with_loss(150.0);
        assert!(matches!(
            net.set_link(0, bad),
            Err(PeerNetworkError::Network(
                NetError::InvalidLinkConfig { .. }
            ))
        ));
        let refused =
            PeerNetwork::<()>::new(1, bad, bad, |_| Ok::<_, PeerNetworkError>(App::new()));
        assert!(matches!(refused, Err(PeerNetworkError::Network(_))));
        // A harness's own refusal leaves no peer behind.
        let failed = net.join(|_, _| Err(PeerNetworkError::NotRunning(9)));
        assert!(matches!(failed, Err(PeerNetworkError::NotRunning(9))));
        assert_eq!(net.len(), 1);
        assert_eq!(net.join(client).unwrap(), 1);
        assert_eq!(
            net.client_id(1).unwrap(),
            3,
            "the refused peer's id is used up"
        );
    }

    #[test]
    fn a_cut_link_loses_every_packet_both_ways_until_restored() {
        let mut net = network(1, LinkConditionerConfig::PERFECT.with_latency(10, 0));
        for _ in 0..3 {
            net.step();
        }
        let stats =
            |net: &PeerNetwork<usize>, direction| net.network().link_stats(1, direction).unwrap();
        assert_eq!(stats(&net, Direction::ToServer).dropped, 0);
        net.cut_link(0).unwrap();
        let (up_before, down_before) = (
            stats(&net, Direction::ToServer),
            stats(&net, Direction::ToClient),
        );
        for _ in 0..4 {
            chatter(&mut net, 0);
        }
        let (up, down) = (
            stats(&net, Direction::ToServer),
            stats(&net, Direction::ToClient),
        );
        assert!(up.sent > up_before.sent && down.sent > down_before.sent);
        assert_eq!(up.dropped - up_before.dropped, up.sent - up_before.sent);
        assert_eq!(
            down.dropped - down_before.dropped,
            down.sent - down_before.sent
        );
        net.restore_link(0).unwrap();
        assert_eq!(
            net.links(),
            (
                LinkConditionerConfig::PERFECT.with_latency(10, 0),
                LinkConditionerConfig::PERFECT.with_latency(10, 0)
            )
        );
        for _ in 0..4 {
            chatter(&mut net, 0);
        }
        assert_eq!(stats(&net, Direction::ToServer).dropped, up.dropped);
        assert!(stats(&net, Direction::ToServer).sent > up.sent);
    }

    #[test]
    fn set_link_direction_changes_one_direction_only() {
        let mut net = network(1, LinkConditionerConfig::PERFECT);
        for _ in 0..3 {
            net.step();
        }
        net.set_link_direction(
            0,
            Direction::ToServer,
            LinkConditionerConfig::PERFECT.with_loss(100.0),
        )
        .unwrap();
        let down_before = net.network().link_stats(1, Direction::ToClient).unwrap();
        for _ in 0..4 {
            chatter(&mut net, 0);
        }
        let up = net.network().link_stats(1, Direction::ToServer).unwrap();
        let down = net.network().link_stats(1, Direction::ToClient).unwrap();
        assert!(up.dropped >= 4);
        assert_eq!(down.dropped, down_before.dropped);
    }
}
