//! The in-memory transport ([`MemoryNetwork`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use renet::{ClientId, RenetClient, RenetServer};

use crate::conditioner::{LinkConditioner, LinkConditionerConfig, LinkStats};
use crate::error::NetError;
use crate::rng::derive_seed;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkState {
    /// Registered, not yet added to the server.
    Pending,
    /// Added to the server.
    Connected,
    /// The client left (or its renet connection failed).
    ClosedByClient,
    /// The server dropped the client.
    ClosedByServer,
}

#[derive(Debug)]
struct ClientLink {
    /// Which registration of this client id the link belongs to, so a stale transport of an
    /// earlier registration cannot close a newer one.
    registration: u64,
    state: LinkState,
    to_server: LinkConditioner,
    to_client: LinkConditioner,
}

#[derive(Debug)]
struct NetworkInner {
    seed: u64,
    up: LinkConditionerConfig,
    down: LinkConditionerConfig,
    server_attached: bool,
    latest_time: Duration,
    next_registration: u64,
    clients: BTreeMap<ClientId, ClientLink>,
}

impl NetworkInner {
    fn observe_time(&mut self, now: Duration) {
        self.latest_time = self.latest_time.max(now);
    }

    /// The link of `client` if it still belongs to `registration` (not to a later one).
    fn link(&mut self, client: ClientId, registration: u64) -> Option<&mut ClientLink> {
        self.clients
            .get_mut(&client)
            .filter(|link| link.registration == registration)
    }
}

/// Which way a packet travels on a client's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client to server.
    ToServer,
    /// Server to client.
    ToClient,
}

impl Direction {
    fn stream(self, client_id: ClientId) -> u64 {
        client_id.wrapping_mul(2).wrapping_add(match self {
            Direction::ToServer => 0,
            Direction::ToClient => 1,
        })
    }
}

/// The in-memory transport: one renet server and any number of renet clients in one process,
/// packets moved between them through a seeded [`LinkConditioner`] per client and direction, no
/// sockets ([transport rules](crate::rules)).
///
/// A `MemoryNetwork` is a cheap handle (`Arc<Mutex<…>>`; cloning gives another handle to the
/// same network) shared by the endpoints: the server
/// side takes a [`MemoryServerTransport`], each client a [`MemoryClientTransport`]. They can
/// live in different Bevy Apps (each App holding its own `RenetServer` / `RenetClient`
/// resource) or be driven by hand; each step, every endpoint `update`s (receive) and
/// `send_packets`.
///
/// # Time
///
/// Every endpoint keeps its own simulated clock, advanced only by the `dt` given to its `update`
/// (never the wall clock). A packet sent at the sender's time `t` is due at `t + delay` and is
/// handed over by the first receiver `update` whose clock has reached that. Endpoints stepped
/// with the same `dt` therefore share one time line; an endpoint created later starts at the
/// latest time any endpoint of the network has reached.
///
/// # Determinism
///
/// Each client's two directions get their own conditioner, seeded from the network seed, the
/// client id and the direction ([`derive_seed`]), so a link's random choices depend only on its
/// own packets. Same seed, same endpoints and the same sequence of `update`/`send_packets` calls
/// give the same deliveries, whatever the number of clients.
///
/// # Connection
///
/// A client is *connecting* from [`MemoryNetwork::client_transport`] until the server
/// transport's next `update` adds it (`RenetServer::add_connection`); the client transport
/// marks the `RenetClient` connected at its next `update` after that. The connection handshake
/// itself is not delayed or lost. Messages sent while connecting wait in renet. A disconnect on
/// either side (renet `disconnect`, a renet error, or the transport's `disconnect`) closes the
/// link; the other side notices at its next `update`.
#[derive(Debug, Clone)]
pub struct MemoryNetwork {
    inner: Arc<Mutex<NetworkInner>>,
}

impl Default for MemoryNetwork {
    /// A perfect network ([`LinkConditionerConfig::PERFECT`]) with seed 0.
    fn default() -> Self {
        Self::perfect(0)
    }
}

impl MemoryNetwork {
    /// A network whose links all use `conditioner` in both directions, random choices seeded by
    /// `seed`.
    ///
    /// # Errors
    ///
    /// [`NetError::InvalidLinkConfig`] if `conditioner` does not validate.
    pub fn new(seed: u64, conditioner: LinkConditionerConfig) -> Result<Self, NetError> {
        Self::with_directions(seed, conditioner, conditioner)
    }

    /// A network whose links use `up` from clients to the server and `down` from the server to
    /// clients.
    ///
    /// # Errors
    ///
    /// [`NetError::InvalidLinkConfig`] if either config does not validate.
    pub fn with_directions(
        seed: u64,
        up: LinkConditionerConfig,
        down: LinkConditionerConfig,
    ) -> Result<Self, NetError> {
        up.validate()?;
        down.validate()?;
        Ok(Self {
            inner: Arc::new(Mutex::new(NetworkInner {
                seed,
                up,
                down,
                server_attached: false,
                latest_time: Duration::ZERO,
                next_registration: 0,
                clients: BTreeMap::new(),
            })),
        })
    }

    /// A network without latency or loss.
    pub fn perfect(seed: u64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(NetworkInner {
                seed,
                up: LinkConditionerConfig::PERFECT,
                down: LinkConditionerConfig::PERFECT,
                server_attached: false,
                latest_time: Duration::ZERO,
                next_registration: 0,
                clients: BTreeMap::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, NetworkInner> {
        // A panic while holding the lock cannot leave the packet queues inconsistent in a way
        // that matters to a test harness, so recover the guard instead of propagating the panic.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The server side of this network. Only one server transport may exist per network.
    ///
    /// # Errors
    ///
    /// [`NetError::ServerAlreadyAttached`] on a second call.
    pub fn server_transport(&self) -> Result<MemoryServerTransport, NetError> {
        let mut inner = self.lock();
        if inner.server_attached {
            return Err(NetError::ServerAlreadyAttached);
        }
        inner.server_attached = true;
        Ok(MemoryServerTransport {
            network: self.clone(),
            now: inner.latest_time,
        })
    }

    /// Registers client `client_id` and returns its transport; the client connects at the
    /// server transport's next `update`.
    ///
    /// # Errors
    ///
    /// [`NetError::ClientIdInUse`] if a client with this id is registered and its link not yet
    /// removed by the server.
    pub fn client_transport(&self, client_id: ClientId) -> Result<MemoryClientTransport, NetError> {
        let mut inner = self.lock();
        if inner.clients.contains_key(&client_id) {
            return Err(NetError::ClientIdInUse(client_id));
        }
        let seed = inner.seed;
        let registration = inner.next_registration;
        inner.next_registration += 1;
        let to_server = LinkConditioner::new(
            inner.up,
            derive_seed(seed, Direction::ToServer.stream(client_id)),
        )?;
        let to_client = LinkConditioner::new(
            inner.down,
            derive_seed(seed, Direction::ToClient.stream(client_id)),
        )?;
        inner.clients.insert(
            client_id,
            ClientLink {
                registration,
                state: LinkState::Pending,
                to_server,
                to_client,
            },
        );
        Ok(MemoryClientTransport {
            network: self.clone(),
            client_id,
            registration,
            now: inner.latest_time,
            close_expected: false,
        })
    }

    /// Changes the conditioner of one client's link in one direction, for packets sent from now
    /// on.
    ///
    /// # Errors
    ///
    /// [`NetError::UnknownClient`] if no such client is registered,
    /// [`NetError::InvalidLinkConfig`] if `config` does not validate.
    pub fn set_link(
        &self,
        client_id: ClientId,
        direction: Direction,
        config: LinkConditionerConfig,
    ) -> Result<(), NetError> {
        let mut inner = self.lock();
        let link = inner
            .clients
            .get_mut(&client_id)
            .ok_or(NetError::UnknownClient(client_id))?;
        match direction {
            Direction::ToServer => link.to_server.set_config(config),
            Direction::ToClient => link.to_client.set_config(config),
        }
    }

    /// The counters of one client's link in one direction, or `None` for an unknown client.
    pub fn link_stats(&self, client_id: ClientId, direction: Direction) -> Option<LinkStats> {
        let inner = self.lock();
        let link = inner.clients.get(&client_id)?;
        Some(match direction {
            Direction::ToServer => link.to_server.stats(),
            Direction::ToClient => link.to_client.stats(),
        })
    }

    /// Ids of the registered clients (connecting, connected or closed but not yet removed), in
    /// ascending order.
    pub fn client_ids(&self) -> Vec<ClientId> {
        self.lock().clients.keys().copied().collect()
    }

    /// Packets in flight on all links.
    pub fn in_flight(&self) -> usize {
        self.lock()
            .clients
            .values()
            .map(|link| link.to_server.in_flight() + link.to_client.in_flight())
            .sum()
    }
}

/// The server end of a [`MemoryNetwork`].
#[derive(Debug)]
pub struct MemoryServerTransport {
    network: MemoryNetwork,
    now: Duration,
}

impl MemoryServerTransport {
    /// This endpoint's simulated clock.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// The network this transport belongs to.
    pub fn network(&self) -> &MemoryNetwork {
        &self.network
    }

    /// Advances the clock by `dt`, adds newly registered clients to `server`, removes clients
    /// that left, and hands every packet now due to `server`. Call after `server.update(dt)`.
    pub fn update(&mut self, dt: Duration, server: &mut RenetServer) {
        self.now += dt;
        let now = self.now;
        let mut inner = self.network.lock();
        inner.observe_time(now);
        for client_id in server.disconnections_id() {
            server.remove_connection(client_id);
            if let Some(link) = inner.clients.get_mut(&client_id)
                && link.state != LinkState::ClosedByClient
            {
                link.state = LinkState::ClosedByServer;
                link.to_server.clear();
            }
        }
        let mut forget = Vec::new();
        for (&client_id, link) in inner.clients.iter_mut() {
            match link.state {
                LinkState::Pending => {
                    server.add_connection(client_id);
                    link.state = LinkState::Connected;
                }
                LinkState::Connected => {}
                LinkState::ClosedByClient => {
                    server.remove_connection(client_id);
                    forget.push(client_id);
                    continue;
                }
                LinkState::ClosedByServer => continue,
            }
            for packet in link.to_server.deliver_due(now) {
                // The connection was added above; an error can only mean renet dropped it,
                // which `disconnections_id` reports next update.
                let _ = server.process_packet_from(&packet, client_id);
            }
        }
        for client_id in forget {
            inner.clients.remove(&client_id);
        }
    }

    /// Takes renet's outgoing packets for every connected client and puts them on the links.
    /// Call after the App's systems have queued their messages.
    pub fn send_packets(&mut self, server: &mut RenetServer) {
        let now = self.now;
        let mut inner = self.network.lock();
        for (&client_id, link) in inner.clients.iter_mut() {
            if link.state != LinkState::Connected {
                continue;
            }
            if let Ok(packets) = server.get_packets_to_send(client_id) {
                for packet in packets {
                    link.to_client.send(now, packet);
                }
            }
        }
    }

    /// Disconnects every client: renet's connections are removed and the links closed.
    pub fn disconnect_all(&mut self, server: &mut RenetServer) {
        let mut inner = self.network.lock();
        for (&client_id, link) in inner.clients.iter_mut() {
            if link.state == LinkState::Connected || link.state == LinkState::Pending {
                link.state = LinkState::ClosedByServer;
                link.to_server.clear();
                server.remove_connection(client_id);
            }
        }
    }
}

impl Drop for MemoryServerTransport {
    fn drop(&mut self) {
        self.network.lock().server_attached = false;
    }
}

/// The client end of a [`MemoryNetwork`].
#[derive(Debug)]
pub struct MemoryClientTransport {
    network: MemoryNetwork,
    client_id: ClientId,
    registration: u64,
    now: Duration,
    /// The current link's close is expected ([`Self::expect_close`]).
    close_expected: bool,
}

impl MemoryClientTransport {
    /// The id this client was registered with.
    pub fn client_id(&self) -> ClientId {
        self.client_id
    }

    /// This endpoint's simulated clock.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// The network this transport belongs to.
    pub fn network(&self) -> &MemoryNetwork {
        &self.network
    }

    /// Advances the clock by `dt`, updates `client`'s connection state from the link, and hands
    /// every packet now due to `client`. Call after `client.update(dt)`.
    ///
    /// # Errors
    ///
    /// [`NetError::NotConnected`] if the link is closed (by the server, or by this client
    /// earlier); `client` is then marked disconnected by the transport.
    pub fn update(&mut self, dt: Duration, client: &mut RenetClient) -> Result<(), NetError> {
        self.now += dt;
        let now = self.now;
        let mut inner = self.network.lock();
        inner.observe_time(now);
        let Some(link) = inner.link(self.client_id, self.registration) else {
            client.disconnect_due_to_transport();
            return Err(NetError::NotConnected);
        };
        if client.is_disconnected() && link.state != LinkState::ClosedByServer {
            link.state = LinkState::ClosedByClient;
        }
        match link.state {
            LinkState::Pending => {
                client.set_connecting();
                Ok(())
            }
            LinkState::Connected => {
                client.set_connected();
                for packet in link.to_client.deliver_due(now) {
                    client.process_packet(&packet);
                }
                Ok(())
            }
            LinkState::ClosedByClient | LinkState::ClosedByServer => {
                link.to_client.clear();
                client.disconnect_due_to_transport();
                Err(NetError::NotConnected)
            }
        }
    }

    /// Takes renet's outgoing packets and puts them on the link (only once connected; until
    /// then they wait in renet).
    pub fn send_packets(&mut self, client: &mut RenetClient) {
        let now = self.now;
        let mut inner = self.network.lock();
        let Some(link) = inner.link(self.client_id, self.registration) else {
            return;
        };
        if link.state != LinkState::Connected {
            return;
        }
        for packet in client.get_packets_to_send() {
            link.to_server.send(now, packet);
        }
    }

    /// Registers this client again under the same id after its link was closed (a reconnect,
    /// [wire rule 9](crate::rules)): the old link is closed (if it was not), a new one starts
    /// `Pending` with this endpoint's clock, and the server connects it at its next `update`.
    /// Give the new connection a new `RenetClient`.
    ///
    /// # Errors
    ///
    /// [`NetError::ClientIdInUse`] while the server has not yet removed the old link (it does
    /// at its next `update`): nothing changed, try again later.
    pub fn reconnect(&mut self) -> Result<(), NetError> {
        self.disconnect();
        let mut fresh = self.network.client_transport(self.client_id)?;
        fresh.now = self.now;
        // The old transport's drop closes only its own registration, not the new link.
        *self = fresh;
        Ok(())
    }

    /// The game is leaving: the current link's close, by the server after this client's
    /// goodbye or by the client itself, is expected (not an error to report). A
    /// [`reconnect`](Self::reconnect) starts a link whose close is not.
    pub fn expect_close(&mut self) {
        self.close_expected = true;
    }

    /// Whether the current link's close is expected: [`Self::expect_close`] or
    /// [`Self::disconnect`] was called since it started.
    pub fn close_expected(&self) -> bool {
        self.close_expected
    }

    /// Leaves the network: the link is closed and the server removes the connection at its next
    /// `update`; the close is expected ([`Self::close_expected`]). Dropping the transport does
    /// the same.
    pub fn disconnect(&mut self) {
        self.close_expected = true;
        let mut inner = self.network.lock();
        let registration = self.registration;
        if let Some(link) = inner
            .clients
            .get_mut(&self.client_id)
            .filter(|link| link.registration == registration)
        {
            if link.state == LinkState::ClosedByServer {
                inner.clients.remove(&self.client_id);
            } else {
                link.state = LinkState::ClosedByClient;
                link.to_client.clear();
            }
        }
    }
}

impl Drop for MemoryClientTransport {
    fn drop(&mut self) {
        self.disconnect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::{NetChannel, connection_config};
    use renet::ServerEvent;

    const DT: Duration = Duration::from_micros(15_625);

    fn step(
        server: &mut RenetServer,
        server_transport: &mut MemoryServerTransport,
        clients: &mut [(RenetClient, MemoryClientTransport)],
    ) {
        server.update(DT);
        server_transport.update(DT, server);
        server_transport.send_packets(server);
        for (client, transport) in clients.iter_mut() {
            client.update(DT);
            let _ = transport.update(DT, client);
            transport.send_packets(client);
        }
    }

    #[test]
    fn connect_exchange_and_disconnect_without_bevy() {
        let network =
            MemoryNetwork::new(1, LinkConditionerConfig::PERFECT.with_latency(20, 0)).unwrap();
        let mut server = RenetServer::new(connection_config());
        let mut server_transport = network.server_transport().unwrap();
        assert!(matches!(
            network.server_transport(),
            Err(NetError::ServerAlreadyAttached)
        ));
        let mut clients = vec![(
            RenetClient::new(connection_config()),
            network.client_transport(7).unwrap(),
        )];
        assert!(matches!(
            network.client_transport(7),
            Err(NetError::ClientIdInUse(7))
        ));
        clients[0]
            .0
            .send_message(NetChannel::Control, vec![1, 2, 3]);
        step(&mut server, &mut server_transport, &mut clients);
        assert_eq!(
            server.get_event(),
            Some(ServerEvent::ClientConnected { client_id: 7 })
        );
        assert!(clients[0].0.is_connected());
        // 20 ms latency at 15.625 ms steps: arrives two steps after it was put on the link.
        step(&mut server, &mut server_transport, &mut clients);
        assert_eq!(server.receive_message(7, NetChannel::Control), None);
        step(&mut server, &mut server_transport, &mut clients);
        assert_eq!(
            server.receive_message(7, NetChannel::Control).as_deref(),
            Some(&[1u8, 2, 3][..])
        );
        clients[0].1.disconnect();
        step(&mut server, &mut server_transport, &mut clients);
        assert!(clients[0].0.is_disconnected());
        assert!(matches!(
            server.get_event(),
            Some(ServerEvent::ClientDisconnected { client_id: 7, .. })
        ));
        assert!(network.client_ids().is_empty());
        // The id can be used again, and the stale transport of the first registration cannot
        // close the new link when it is dropped.
        let fresh = network.client_transport(7).unwrap();
        drop(clients);
        server_transport.update(DT, &mut server);
        assert_eq!(network.client_ids(), vec![7]);
        assert!(server.is_connected(7));
        // Dropping a transport leaves the network.
        drop(fresh);
        server_transport.update(DT, &mut server);
        assert!(network.client_ids().is_empty());
        assert!(!server.is_connected(7));
    }

    #[test]
    fn server_side_disconnect_reaches_the_client() {
        let network = MemoryNetwork::perfect(2);
        let mut server = RenetServer::new(connection_config());
        let mut server_transport = network.server_transport().unwrap();
        let mut clients = vec![(
            RenetClient::new(connection_config()),
            network.client_transport(1).unwrap(),
        )];
        step(&mut server, &mut server_transport, &mut clients);
        step(&mut server, &mut server_transport, &mut clients);
        assert!(clients[0].0.is_connected());
        server.disconnect(1);
        step(&mut server, &mut server_transport, &mut clients);
        assert!(clients[0].0.is_disconnected());
        let (client, transport) = &mut clients[0];
        assert!(matches!(
            transport.update(DT, client),
            Err(NetError::NotConnected)
        ));
    }

    #[test]
    fn a_closed_client_reconnects_under_its_id_once_the_server_removed_the_old_link() {
        let network = MemoryNetwork::perfect(3);
        let mut server = RenetServer::new(connection_config());
        let mut server_transport = network.server_transport().unwrap();
        let mut clients = vec![(
            RenetClient::new(connection_config()),
            network.client_transport(5).unwrap(),
        )];
        step(&mut server, &mut server_transport, &mut clients);
        step(&mut server, &mut server_transport, &mut clients);
        assert!(clients[0].0.is_connected());
        // Closed by the client: the server has not removed the link yet.
        clients[0].1.disconnect();
        assert!(matches!(
            clients[0].1.reconnect(),
            Err(NetError::ClientIdInUse(5))
        ));
        step(&mut server, &mut server_transport, &mut clients);
        assert!(!server.is_connected(5));
        clients[0].1.reconnect().expect("the old link is gone");
        clients[0].0 = RenetClient::new(connection_config());
        step(&mut server, &mut server_transport, &mut clients);
        step(&mut server, &mut server_transport, &mut clients);
        assert!(clients[0].0.is_connected());
        assert!(server.is_connected(5));
        assert_eq!(network.client_ids(), vec![5]);
    }
}
