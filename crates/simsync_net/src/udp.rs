//! The UDP transport ([`UdpServerTransport`], [`UdpClientTransport`]) over renet_netcode.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use renet::{ClientId, RenetClient, RenetServer};
use renet_netcode::{
    ClientAuthentication, ConnectToken, NETCODE_KEY_BYTES, NETCODE_USER_DATA_BYTES,
    NetcodeTransportError, ServerAuthentication, ServerConfig,
};
use renetcode::{NETCODE_MAX_PACKET_BYTES, NetcodeServer, ServerResult};

use crate::ack_repeats::AckRepeats;
use crate::error::{ConnectFailure, NetError};
use crate::handshake::PROTOCOL_VERSION;
use crate::netcode_link::NetcodeLink;
use crate::remote_errors::{
    RemoteErrorKind, RemoteErrors, log_line, open_connect_token_addresses, screen_datagram,
};

/// netcode's protocol id for simsync: `"SIMSYN"` in the high six bytes and
/// [`PROTOCOL_VERSION`] in the low two, so builds with different message layouts cannot even
/// connect over UDP.
pub const NETCODE_PROTOCOL_ID: u64 = 0x5349_4D53_594E_0000 | PROTOCOL_VERSION as u64;

/// netcode's limit on clients per server (renetcode 2.0; above it `NetcodeServer::new` panics,
/// which [`UdpServerTransport::bind`] turns into [`NetError::TooManyClients`]).
pub const NETCODE_MAX_CLIENTS: usize = 1024;

/// Default expiry of tokens made by [`generate_connect_token`]'s callers, in seconds.
pub const DEFAULT_TOKEN_EXPIRE_SECONDS: u64 = 300;
/// Default connection timeout written into tokens, in seconds (as netcode's unsecure mode).
pub const DEFAULT_TOKEN_TIMEOUT_SECONDS: i32 = 15;

/// The time since the Unix epoch by the wall clock, or zero if the clock is before 1970.
/// netcode's clocks start from it (see [`UdpServerTransport`]).
pub fn unix_time_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

/// A fresh random 32-byte private key for secure mode (from the operating system's generator,
/// through renetcode).
pub fn generate_private_key() -> [u8; NETCODE_KEY_BYTES] {
    renet_netcode::generate_random_bytes()
}

/// How a UDP server authenticates clients.
#[derive(Clone, PartialEq, Eq)]
pub enum UdpAuth {
    /// Anyone who knows the address and protocol id may connect with any client id. For
    /// loopback tests and development only.
    Unsecure,
    /// Clients need a connect token made with this private key.
    Secure {
        /// The 32-byte key shared with the token issuer.
        private_key: [u8; NETCODE_KEY_BYTES],
    },
}

impl std::fmt::Debug for UdpAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UdpAuth::Unsecure => f.write_str("Unsecure"),
            UdpAuth::Secure { .. } => f.write_str("Secure { private_key: <hidden> }"),
        }
    }
}

/// Settings of a [`UdpServerTransport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpServerConfig {
    /// Address to bind; port 0 picks a free port ([`UdpServerTransport::local_addr`] tells
    /// which).
    pub bind_addr: SocketAddr,
    /// Address clients use to reach the server (must be in their tokens in secure mode);
    /// `None`: the bound address.
    pub public_addr: Option<SocketAddr>,
    /// Most clients at once (at most [`NETCODE_MAX_CLIENTS`]).
    pub max_clients: usize,
    /// netcode protocol id; clients must use the same. Default [`NETCODE_PROTOCOL_ID`].
    pub protocol_id: u64,
    /// Authentication.
    pub auth: UdpAuth,
}

impl UdpServerConfig {
    /// Unsecure server on `bind_addr`, 64 clients, [`NETCODE_PROTOCOL_ID`].
    pub fn unsecure(bind_addr: SocketAddr) -> Self {
        Self {
            bind_addr,
            public_addr: None,
            max_clients: 64,
            protocol_id: NETCODE_PROTOCOL_ID,
            auth: UdpAuth::Unsecure,
        }
    }

    /// Secure server on `bind_addr` with `private_key`, 64 clients, [`NETCODE_PROTOCOL_ID`].
    pub fn secure(bind_addr: SocketAddr, private_key: [u8; NETCODE_KEY_BYTES]) -> Self {
        Self {
            auth: UdpAuth::Secure { private_key },
            ..Self::unsecure(bind_addr)
        }
    }
}

/// The server end of the UDP transport ([transport rules](crate::rules)): renetcode's
/// `NetcodeServer` on a UDP socket (and [`UdpClientTransport`], renet_netcode's
/// `NetcodeClientTransport`) on a configurable `SocketAddr`, unsecure (for loopback and
/// development) or secure with connect tokens.
///
/// It runs netcode's receive and send loop itself (as renet_netcode's `NetcodeServerTransport`
/// does) so that what remote peers cause is counted, not logged per packet ([wire rule
/// 11](crate::rules)): every datagram is first checked by [`screen_datagram`], and a connection
/// request's token is opened with the server's key by [`open_connect_token`](crate::open_connect_token)
/// and must name the server's public address ([`RemoteErrorKind::WrongServerAddress`]) (a
/// datagram netcode would refuse never reaches it), payloads renet refuses and sends that fail are
/// counted too, all in [`remote_errors`](Self::remote_errors), and logged at WARN at most once
/// a second per kind.
///
/// netcode's own clocks are set from the Unix time at creation ([`unix_time_now`]) because a
/// connect token's expiry is compared with the server's clock in seconds since the epoch; after
/// that they advance by the `dt` given to `update`.
///
/// Secure mode: the server and whoever issues tokens (a matchmaker, or the server itself) share a
/// 32-byte private key ([`generate_private_key`]); [`generate_connect_token`] makes a token for
/// one client id and the server addresses it may connect to; the client connects with
/// [`UdpClientTransport::secure`]. The token travels to the client by other means
/// (`ConnectToken::write` / `ConnectToken::read`).
pub struct UdpServerTransport {
    socket: UdpSocket,
    netcode: NetcodeServer,
    buffer: Box<[u8; NETCODE_MAX_PACKET_BYTES]>,
    local_addr: SocketAddr,
    /// The address connect tokens must name (the public address, or the bound one).
    public_addr: SocketAddr,
    /// Secure mode: tokens are checked for the public address (netcode skips it unsecure).
    secure: bool,
    protocol_id: u64,
    /// Time since creation (the throttle's clock).
    elapsed: Duration,
    /// Addresses that sent a connection request netcode may answer, with when (so their
    /// challenge response is not screened out as from an unknown sender).
    connecting: PendingAddresses,
    errors: RemoteErrors,
    /// The key connect tokens are sealed with (netcode's: all zeros when unsecure).
    token_key: [u8; NETCODE_KEY_BYTES],
    /// Connect tokens seen in requests, by their seal, with the address that used them.
    tokens_seen: TokensSeen,
    /// The addresses of the connected clients (kept from netcode's connect and disconnect
    /// results), so screening a datagram's sender costs one lookup: netcode only finds a
    /// client's address by scanning its slots.
    connected: HashMap<SocketAddr, ClientId>,
    /// Repeated acknowledgements held back ([wire rule 13](crate::rules)).
    acks: AckRepeats,
}

impl std::fmt::Debug for UdpServerTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpServerTransport")
            .field("local_addr", &self.local_addr)
            .field("protocol_id", &self.protocol_id)
            .field("clients", &self.netcode.connected_clients())
            .field("remote_errors", &self.errors)
            .finish_non_exhaustive()
    }
}

impl UdpServerTransport {
    /// Binds a UDP socket and starts a netcode server on it.
    ///
    /// # Errors
    ///
    /// - [`NetError::TooManyClients`] if `max_clients` is above [`NETCODE_MAX_CLIENTS`].
    /// - [`NetError::Io`] if the socket cannot be bound or made non-blocking.
    pub fn bind(config: UdpServerConfig) -> Result<Self, NetError> {
        if config.max_clients > NETCODE_MAX_CLIENTS {
            return Err(NetError::TooManyClients {
                requested: config.max_clients,
                max: NETCODE_MAX_CLIENTS,
            });
        }
        let socket = UdpSocket::bind(config.bind_addr)?;
        socket.set_nonblocking(true)?;
        let local_addr = socket.local_addr()?;
        let secure = matches!(config.auth, UdpAuth::Secure { .. });
        let (authentication, token_key) = match config.auth {
            UdpAuth::Unsecure => (ServerAuthentication::Unsecure, [0; NETCODE_KEY_BYTES]),
            UdpAuth::Secure { private_key } => {
                (ServerAuthentication::Secure { private_key }, private_key)
            }
        };
        let public_addr = config.public_addr.unwrap_or(local_addr);
        let server_config = ServerConfig {
            current_time: unix_time_now(),
            max_clients: config.max_clients,
            protocol_id: config.protocol_id,
            public_addresses: vec![public_addr],
            authentication,
        };
        Ok(Self {
            socket,
            netcode: NetcodeServer::new(server_config),
            buffer: Box::new([0; NETCODE_MAX_PACKET_BYTES]),
            local_addr,
            public_addr,
            secure,
            protocol_id: config.protocol_id,
            elapsed: Duration::ZERO,
            connecting: PendingAddresses::default(),
            errors: RemoteErrors::default(),
            token_key,
            tokens_seen: TokensSeen::default(),
            connected: HashMap::new(),
            acks: AckRepeats::default(),
        })
    }

    /// The bound address (with the real port if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address connect tokens must name: the configured public address, or the bound one.
    pub fn public_addr(&self) -> SocketAddr {
        self.public_addr
    }

    /// The netcode server, for what this wrapper does not expose.
    pub fn netcode(&self) -> &NetcodeServer {
        &self.netcode
    }

    /// The errors remote peers caused so far, per kind ([wire rule 11](crate::rules)).
    pub fn remote_errors(&self) -> &RemoteErrors {
        &self.errors
    }

    /// The 256 bytes of user data of a connected client's token, if connected.
    pub fn user_data(&self, client_id: ClientId) -> Option<[u8; NETCODE_USER_DATA_BYTES]> {
        self.netcode.user_data(client_id)
    }

    /// Advances netcode's clock by `dt`, reads every datagram waiting on the socket and hands
    /// payloads to `server` (adding and removing connections). Call after `server.update(dt)`.
    ///
    /// # Errors
    ///
    /// [`NetError::Transport`] if the socket fails.
    pub fn update<S: ConnectionSink + ?Sized>(
        &mut self,
        dt: Duration,
        server: &mut S,
    ) -> Result<(), NetError> {
        self.netcode.update(dt);
        self.elapsed += dt;
        self.connecting.forget_before(self.elapsed);
        loop {
            match self.socket.recv_from(&mut self.buffer[..]) {
                Ok((len, addr)) => self.receive(len, addr, server),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => break,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => continue,
                Err(e) => return Err(NetcodeTransportError::IO(e).into()),
            }
        }
        for client_id in self.netcode.clients_id() {
            let result = self.netcode.update_client(client_id);
            let counts = (&mut self.errors, &mut self.connected, &mut self.acks);
            handle_result(result, &self.socket, server, counts, self.elapsed);
        }
        for client_id in server.take_disconnections() {
            let result = self.netcode.disconnect(client_id);
            let counts = (&mut self.errors, &mut self.connected, &mut self.acks);
            handle_result(result, &self.socket, server, counts, self.elapsed);
        }
        self.errors
            .flush(self.elapsed)
            .into_iter()
            .for_each(log_line);
        Ok(())
    }

    /// One datagram of `len` bytes from `addr`: screened, then handed to netcode.
    fn receive<S: ConnectionSink + ?Sized>(
        &mut self,
        len: usize,
        addr: SocketAddr,
        server: &mut S,
    ) {
        let datagram = &mut self.buffer[..len];
        let known = self.connecting.contains(addr) || self.connected.contains_key(&addr);
        let now_secs = self.netcode.current_time().as_secs();
        let request = datagram.first().is_some_and(|b| b & 0x0F == 0);
        let screened =
            screen_datagram(datagram, known, self.protocol_id, now_secs).and_then(|()| {
                if request {
                    let named =
                        open_connect_token_addresses(datagram, self.protocol_id, &self.token_key)?;
                    if self.secure && !named.contains(&self.public_addr) {
                        return Err(RemoteErrorKind::WrongServerAddress);
                    }
                    self.tokens_seen.check(datagram, addr, now_secs)
                } else {
                    Ok(())
                }
            });
        if let Err(kind) = screened {
            if let Some(line) = self.errors.record(kind, self.elapsed) {
                log_line(line);
            }
            return;
        }
        let result = self.netcode.process_packet(addr, datagram);
        if request && matches!(result, ServerResult::PacketToSend { .. }) {
            self.connecting.insert(addr, self.elapsed);
        }
        handle_result(
            result,
            &self.socket,
            server,
            (&mut self.errors, &mut self.connected, &mut self.acks),
            self.elapsed,
        );
    }

    /// Sends renet's outgoing packets of every client, except acknowledgements repeated too
    /// soon ([wire rule 13](crate::rules): held back, counted in
    /// [`acks_held`](Self::acks_held)); a failed send is counted as
    /// [`RemoteErrorKind::SendFailed`] and ends that client's sending for this update.
    pub fn send_packets<S: ConnectionSink + ?Sized>(&mut self, server: &mut S) {
        let (netcode, socket, errors, acks, now) = (
            &mut self.netcode,
            &self.socket,
            &mut self.errors,
            &mut self.acks,
            self.elapsed,
        );
        server.drain_packets(&mut |client_id, packet| {
            if !acks.send(client_id, packet, now) {
                return PacketSent::Held;
            }
            let sent = match netcode.generate_payload_packet(client_id, packet) {
                Ok((addr, payload)) => socket.send_to(payload, addr).is_ok(),
                Err(_) => false,
            };
            if sent {
                return PacketSent::Sent;
            }
            // Not sent: the next acknowledgement to this client goes whatever it repeats.
            acks.forget(client_id);
            if let Some(line) = errors.record(RemoteErrorKind::SendFailed, now) {
                log_line(line);
            }
            PacketSent::Failed
        });
    }

    /// Acknowledgement packets held back so far because they repeated the ranges last sent
    /// too soon ([wire rule 13](crate::rules)).
    pub fn acks_held(&self) -> u64 {
        self.acks.held()
    }

    /// Closes `client_id`'s connection from the server's side (netcode tells the client) and
    /// hands the end to `server`. Unknown ids are ignored.
    pub fn disconnect<S: ConnectionSink + ?Sized>(&mut self, client_id: ClientId, server: &mut S) {
        let result = self.netcode.disconnect(client_id);
        let counts = (&mut self.errors, &mut self.connected, &mut self.acks);
        handle_result(result, &self.socket, server, counts, self.elapsed);
    }

    /// Sends a disconnect packet to every client and removes them from `server`.
    pub fn disconnect_all<S: ConnectionSink + ?Sized>(&mut self, server: &mut S) {
        for client_id in self.netcode.clients_id() {
            let result = self.netcode.disconnect(client_id);
            let counts = (&mut self.errors, &mut self.connected, &mut self.acks);
            handle_result(result, &self.socket, server, counts, self.elapsed);
        }
    }
}

/// Carries out what netcode answered: sends its packet, adds or removes a connection (and its
/// address in `connected`), hands a payload to renet. Failures are counted in `errors` (and
/// logged, throttled).
fn handle_result<S: ConnectionSink + ?Sized>(
    result: ServerResult<'_, '_>,
    socket: &UdpSocket,
    server: &mut S,
    (errors, connected, acks): (
        &mut RemoteErrors,
        &mut HashMap<SocketAddr, ClientId>,
        &mut AckRepeats,
    ),
    now: Duration,
) {
    let mut failed = |kind| {
        if let Some(line) = errors.record(kind, now) {
            log_line(line);
        }
    };
    let mut send = |payload: &[u8], addr| {
        if socket.send_to(payload, addr).is_err() {
            failed(RemoteErrorKind::SendFailed);
        }
    };
    match result {
        ServerResult::None => {}
        ServerResult::PacketToSend { payload, addr } => send(payload, addr),
        ServerResult::Payload { client_id, payload } => {
            if !server.receive(client_id, payload) {
                failed(RemoteErrorKind::BadPayload);
            }
        }
        ServerResult::ClientConnected {
            client_id,
            addr,
            user_data,
            payload,
        } => {
            connected.insert(addr, client_id);
            server.connect(client_id, &user_data);
            send(payload, addr);
        }
        ServerResult::ClientDisconnected {
            client_id,
            addr,
            payload,
        } => {
            if connected.get(&addr) == Some(&client_id) {
                connected.remove(&addr);
            }
            acks.forget(client_id);
            server.disconnect(client_id);
            if let Some(payload) = payload {
                send(payload, addr);
            }
        }
    }
}

/// Where a [`UdpServerTransport`] hands what netcode accepted — connections with their
/// token's user data, payloads, ends — and where it takes the packets to send from.
/// `RenetServer` is one (every connection in one server); a dedicated server that hosts rooms
/// routes each connection to its room's `RenetServer` by the room its token names.
pub trait ConnectionSink {
    /// `client_id` completed netcode's handshake; `user_data` is its connect token's (zeros in
    /// unsecure mode).
    fn connect(&mut self, client_id: ClientId, user_data: &[u8; NETCODE_USER_DATA_BYTES]);
    /// A payload from `client_id`; `false` when it is refused (counted as
    /// [`RemoteErrorKind::BadPayload`]).
    fn receive(&mut self, client_id: ClientId, payload: &[u8]) -> bool;
    /// `client_id`'s connection ended (timed out, closed by the client or by the server).
    fn disconnect(&mut self, client_id: ClientId);
    /// The connections the sink closed since the last call: netcode tells their clients.
    fn take_disconnections(&mut self) -> Vec<ClientId>;
    /// Hands every connection's queued packets to `send`, in order; when `send` answers
    /// [`PacketSent::Failed`], that connection's remaining packets of this update are dropped
    /// (renet resends what must arrive).
    fn drain_packets(&mut self, send: &mut dyn FnMut(ClientId, &[u8]) -> PacketSent);
}

/// What became of a packet a [`ConnectionSink`] handed over to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketSent {
    /// It went out.
    Sent,
    /// Held back on purpose, not a failure: an acknowledgement repeated too soon ([wire rule
    /// 13](crate::rules)).
    Held,
    /// The socket (or netcode) refused it: the connection's remaining packets of this update
    /// are dropped.
    Failed,
}

impl ConnectionSink for RenetServer {
    fn connect(&mut self, client_id: ClientId, _user_data: &[u8; NETCODE_USER_DATA_BYTES]) {
        self.add_connection(client_id);
    }

    fn receive(&mut self, client_id: ClientId, payload: &[u8]) -> bool {
        self.process_packet_from(payload, client_id).is_ok()
    }

    fn disconnect(&mut self, client_id: ClientId) {
        self.remove_connection(client_id);
    }

    fn take_disconnections(&mut self) -> Vec<ClientId> {
        self.disconnections_id()
    }

    fn drain_packets(&mut self, send: &mut dyn FnMut(ClientId, &[u8]) -> PacketSent) {
        for client_id in self.clients_id() {
            let Ok(packets) = self.get_packets_to_send(client_id) else {
                continue;
            };
            for packet in packets {
                if send(client_id, &packet) == PacketSent::Failed {
                    break;
                }
            }
        }
    }
}

/// Connect tokens seen in connection requests, keyed by their seal (the token's last 16
/// bytes, unique per token), with the address that first used each and the token's expiry: a
/// token used from a second address is a replay ([`RemoteErrorKind::ReplayedToken`]; netcode
/// would ignore it silently). Bounded: at most [`TokensSeen::MAX`], expired ones forgotten
/// first, then the soonest to expire.
#[derive(Debug, Default)]
struct TokensSeen {
    by_seal: std::collections::HashMap<[u8; 16], (SocketAddr, u64)>,
}

impl TokensSeen {
    const MAX: usize = 4 * NETCODE_MAX_CLIENTS;

    /// Checks a connection request (already opened with the key) from `addr` at `now_secs`
    /// (Unix seconds).
    fn check(
        &mut self,
        request: &[u8],
        addr: SocketAddr,
        now_secs: u64,
    ) -> Result<(), RemoteErrorKind> {
        let (Some(expiry), Some(seal)) = (
            request.get(22..30).and_then(|b| b.try_into().ok()),
            request
                .len()
                .checked_sub(16)
                .and_then(|at| request[at..].try_into().ok()),
        ) else {
            return Err(RemoteErrorKind::Malformed);
        };
        let expiry = u64::from_le_bytes(expiry);
        match self.by_seal.get(&seal) {
            Some((first, _)) if *first != addr => Err(RemoteErrorKind::ReplayedToken),
            Some(_) => Ok(()),
            None => {
                if self.by_seal.len() >= Self::MAX {
                    self.by_seal.retain(|_, (_, expires)| *expires > now_secs);
                }
                if self.by_seal.len() >= Self::MAX
                    && let Some(soonest) = self
                        .by_seal
                        .iter()
                        .min_by_key(|(_, (_, expires))| *expires)
                        .map(|(seal, _)| *seal)
                {
                    self.by_seal.remove(&soonest);
                }
                self.by_seal.insert(seal, (addr, expiry));
                Ok(())
            }
        }
    }
}

/// How long an address that sent a connection request counts as connecting (netcode's
/// default connection timeout is 15 s; a challenge answered later is refused by netcode).
const CONNECTING_FOR: Duration = Duration::from_secs(30);

/// Addresses that sent a connection request netcode answered, with when: at most netcode's
/// limit on pending clients (4,096), the oldest forgotten first.
#[derive(Debug, Default)]
struct PendingAddresses {
    since: std::collections::HashMap<SocketAddr, Duration>,
}

impl PendingAddresses {
    const MAX: usize = 4 * NETCODE_MAX_CLIENTS;

    fn contains(&self, addr: SocketAddr) -> bool {
        self.since.contains_key(&addr)
    }

    fn insert(&mut self, addr: SocketAddr, now: Duration) {
        if self.since.len() >= Self::MAX
            && !self.since.contains_key(&addr)
            && let Some(oldest) = self.since.iter().min_by_key(|(_, t)| **t).map(|(a, _)| *a)
        {
            self.since.remove(&oldest);
        }
        self.since.insert(addr, now);
    }

    fn forget_before(&mut self, now: Duration) {
        self.since
            .retain(|_, since| now.saturating_sub(*since) < CONNECTING_FOR);
    }
}

/// The client end of the UDP transport. It keeps how it connected, so a client whose
/// connection was lost can connect again ([`reconnect`](Self::reconnect)).
#[derive(Debug)]
pub struct UdpClientTransport {
    inner: NetcodeLink,
    authentication: ClientAuthentication,
    /// Whether the current connection was ever made.
    connected: bool,
    /// The current connection's close is expected ([`Self::expect_close`]).
    close_expected: bool,
}

impl UdpClientTransport {
    /// Connects without a token to an unsecure server at `server_addr`, as `client_id`, from a
    /// socket bound to `bind_addr` (e.g. `127.0.0.1:0` for loopback, `0.0.0.0:0` otherwise).
    ///
    /// # Errors
    ///
    /// [`NetError::Io`] if the socket cannot be bound, [`NetError::Netcode`] if netcode refuses.
    pub fn unsecure(
        server_addr: SocketAddr,
        client_id: ClientId,
        protocol_id: u64,
        bind_addr: SocketAddr,
    ) -> Result<Self, NetError> {
        let socket = UdpSocket::bind(bind_addr)?;
        let authentication = ClientAuthentication::Unsecure {
            protocol_id,
            client_id,
            server_addr,
            user_data: None,
        };
        let inner = NetcodeLink::new(unix_time_now(), authentication.clone(), socket)?;
        Ok(Self {
            inner,
            authentication,
            connected: false,
            close_expected: false,
        })
    }

    /// Connects to a secure server with `token`, from a socket bound to `bind_addr`.
    ///
    /// # Errors
    ///
    /// - [`NetError::InvalidConnectToken`] if the token has no server address or expires before
    ///   it was created (renetcode would panic on either).
    /// - [`NetError::Io`] / [`NetError::Netcode`] as [`unsecure`](Self::unsecure).
    pub fn secure(token: ConnectToken, bind_addr: SocketAddr) -> Result<Self, NetError> {
        if token.server_addresses[0].is_none() {
            return Err(NetError::InvalidConnectToken("no server address"));
        }
        if token.expire_timestamp < token.create_timestamp {
            return Err(NetError::InvalidConnectToken(
                "expires before it was created",
            ));
        }
        let socket = UdpSocket::bind(bind_addr)?;
        let authentication = ClientAuthentication::Secure {
            connect_token: token,
        };
        let inner = NetcodeLink::new(unix_time_now(), authentication.clone(), socket)?;
        Ok(Self {
            inner,
            authentication,
            connected: false,
            close_expected: false,
        })
    }

    /// Starts a new connection to the same server with the same authentication (the same
    /// connect token in secure mode), from the same local address: netcode accepts a token
    /// again only from the address that first used it. The old connection is dropped without a
    /// goodbye. Give the new connection a new `RenetClient`.
    ///
    /// # Errors
    ///
    /// [`NetError::Io`] if the local address cannot be bound again, [`NetError::Netcode`] if
    /// netcode refuses (an expired token connects but is then refused by the server).
    pub fn reconnect(&mut self) -> Result<(), NetError> {
        let local = self.inner.addr()?;
        // Free the old socket's address before binding it again: swap in a connection on a
        // temporary socket of the same family, then drop the old one.
        let mut any = local;
        any.set_port(0);
        let temporary = NetcodeLink::new(
            unix_time_now(),
            self.authentication.clone(),
            UdpSocket::bind(any)?,
        )?;
        drop(std::mem::replace(&mut self.inner, temporary));
        let socket = UdpSocket::bind(local)?;
        self.inner = NetcodeLink::new(unix_time_now(), self.authentication.clone(), socket)?;
        self.connected = false;
        self.close_expected = false;
        Ok(())
    }

    /// The client id (from the token, or as given).
    pub fn client_id(&self) -> ClientId {
        self.inner.client_id()
    }

    /// The socket's local address.
    ///
    /// # Errors
    ///
    /// [`NetError::Io`] if the operating system cannot tell.
    pub fn local_addr(&self) -> Result<SocketAddr, NetError> {
        Ok(self.inner.addr()?)
    }

    /// Whether netcode has given up on the connection, and why.
    pub fn disconnect_reason(&self) -> Option<renet_netcode::NetcodeDisconnectReason> {
        self.inner.disconnect_reason()
    }

    /// Advances netcode's clock by `dt`, reads every datagram from the server and hands payloads
    /// to `client`, updating its connection state. Call after `client.update(dt)`.
    ///
    /// # Errors
    ///
    /// [`NetError::Transport`] if netcode disconnected (timeout, denied, ...), renet dropped the
    /// connection, or the socket fails.
    ///
    /// A connection that was never made ends with [`NetError::ConnectFailed`] and the
    /// possible causes ([`connect_failure`](Self::connect_failure)).
    pub fn update(&mut self, dt: Duration, client: &mut RenetClient) -> Result<(), NetError> {
        let result = self.inner.update(dt, client);
        self.connected |= client.is_connected();
        match (result, self.connect_failure()) {
            (Ok(()), _) => Ok(()),
            (Err(_), Some(failure)) => Err(NetError::ConnectFailed(failure)),
            (Err(error), None) => Err(error.into()),
        }
    }

    /// Why this connection was never made, once netcode gave up on it before connecting:
    /// [`ConnectFailure::TokenExpired`] when the token's expiry (read from the token) has
    /// passed, [`ConnectFailure::NoAnswer`] when no server answered in the token's timeout;
    /// `None` while connecting, once connected, or for another end.
    pub fn connect_failure(&self) -> Option<ConnectFailure> {
        use renet_netcode::NetcodeDisconnectReason as Reason;
        if self.connected {
            return None;
        }
        let reason = self.inner.disconnect_reason()?;
        let (token, server) = match &self.authentication {
            ClientAuthentication::Secure { connect_token } => {
                (Some(connect_token), connect_token.server_addresses[0]?)
            }
            ClientAuthentication::Unsecure { server_addr, .. } => (None, *server_addr),
        };
        let expired_at = token.map(|t| t.expire_timestamp);
        match reason {
            Reason::ConnectTokenExpired => Some(ConnectFailure::TokenExpired {
                expired_at: expired_at.unwrap_or(0),
            }),
            Reason::ConnectionRequestTimedOut | Reason::ConnectionResponseTimedOut => {
                if let Some(at) = expired_at.filter(|at| unix_time_now().as_secs() >= *at) {
                    return Some(ConnectFailure::TokenExpired { expired_at: at });
                }
                Some(ConnectFailure::NoAnswer {
                    server,
                    timeout_secs: token.map_or(0, |t| t.timeout_seconds),
                })
            }
            _ => None,
        }
    }

    /// Sends renet's outgoing packets to the server.
    ///
    /// # Errors
    ///
    /// [`NetError::Transport`] if netcode is disconnected or the socket fails.
    pub fn send_packets(&mut self, client: &mut RenetClient) -> Result<(), NetError> {
        self.inner.send_packets(client)?;
        Ok(())
    }

    /// Sends netcode's disconnect packet to the server at once; the close is expected
    /// ([`Self::close_expected`]).
    pub fn disconnect(&mut self) {
        self.close_expected = true;
        self.inner.disconnect();
    }

    /// The game is leaving: the current connection's close, by the server after this client's
    /// goodbye or by the client itself, is expected (not an error to report). A
    /// [`reconnect`](Self::reconnect) starts a connection whose close is not.
    pub fn expect_close(&mut self) {
        self.close_expected = true;
    }

    /// Whether the current connection's close is expected: [`Self::expect_close`] or
    /// [`Self::disconnect`] was called since it started.
    pub fn close_expected(&self) -> bool {
        self.close_expected
    }
}

/// Makes a connect token for `client_id`, valid for `expire_seconds` from now (Unix time), for
/// the servers at `server_addrs` (1 to 32, tried in order) that use `private_key` and
/// `protocol_id`. The connection times out after `timeout_seconds` of silence (negative: never;
/// development only). `user_data` (256 bytes) is readable by the server after connection
/// ([`UdpServerTransport::user_data`]).
///
/// # Errors
///
/// - [`NetError::InvalidConnectToken`] if `server_addrs` is empty or has more than 32 entries.
/// - [`NetError::TokenGeneration`] if encryption fails.
pub fn generate_connect_token(
    private_key: &[u8; NETCODE_KEY_BYTES],
    protocol_id: u64,
    client_id: ClientId,
    server_addrs: Vec<SocketAddr>,
    expire_seconds: u64,
    timeout_seconds: i32,
    user_data: Option<&[u8; NETCODE_USER_DATA_BYTES]>,
) -> Result<ConnectToken, NetError> {
    if server_addrs.is_empty() {
        return Err(NetError::InvalidConnectToken("no server address"));
    }
    if server_addrs.len() > 32 {
        return Err(NetError::InvalidConnectToken(
            "more than 32 server addresses",
        ));
    }
    Ok(ConnectToken::generate(
        unix_time_now(),
        protocol_id,
        expire_seconds,
        client_id,
        timeout_seconds,
        server_addrs,
        user_data,
        private_key,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NetChannel;

    #[test]
    fn protocol_id_carries_the_version() {
        assert_eq!(NETCODE_PROTOCOL_ID & 0xFFFF, u64::from(PROTOCOL_VERSION));
        assert_eq!(NETCODE_PROTOCOL_ID >> 16, 0x5349_4D53_594E);
    }

    #[test]
    fn bad_configs_and_tokens_are_typed_errors() {
        let mut config = UdpServerConfig::unsecure("127.0.0.1:0".parse().unwrap());
        config.max_clients = NETCODE_MAX_CLIENTS + 1;
        assert!(matches!(
            UdpServerTransport::bind(config),
            Err(NetError::TooManyClients {
                requested: 1025,
                max: 1024
            })
        ));
        let key = generate_private_key();
        assert!(matches!(
            generate_connect_token(&key, NETCODE_PROTOCOL_ID, 1, vec![], 10, 5, None),
            Err(NetError::InvalidConnectToken(_))
        ));
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut token =
            generate_connect_token(&key, NETCODE_PROTOCOL_ID, 1, vec![addr], 10, 5, None).unwrap();
        assert_eq!(token.client_id, 1);
        token.server_addresses[0] = None;
        assert!(matches!(
            UdpClientTransport::secure(token.clone(), "127.0.0.1:0".parse().unwrap()),
            Err(NetError::InvalidConnectToken(_))
        ));
        token.server_addresses[0] = Some(addr);
        token.expire_timestamp = token.create_timestamp - 1;
        assert!(matches!(
            UdpClientTransport::secure(token, "127.0.0.1:0".parse().unwrap()),
            Err(NetError::InvalidConnectToken(_))
        ));
        assert!(format!("{:?}", UdpAuth::Secure { private_key: key }).contains("hidden"));
    }

    /// One frame of the reconnect test.
    const FRAME: Duration = Duration::from_millis(50);

    /// A secure server on a loopback port, and client 7 with a token for it whose connection
    /// timeout is 1 s, so the reconnect test is short.
    fn secure_server_and_client_7() -> (
        RenetServer,
        UdpServerTransport,
        RenetClient,
        UdpClientTransport,
    ) {
        let key = generate_private_key();
        let config = UdpServerConfig::secure("127.0.0.1:0".parse().unwrap(), key);
        let transport = UdpServerTransport::bind(config).expect("binds");
        let server = RenetServer::new(crate::connection_config());
        let token = generate_connect_token(
            &key,
            NETCODE_PROTOCOL_ID,
            7,
            vec![transport.local_addr()],
            DEFAULT_TOKEN_EXPIRE_SECONDS,
            1,
            None,
        )
        .expect("token");
        let client_transport =
            UdpClientTransport::secure(token, "127.0.0.1:0".parse().unwrap()).expect("client");
        let client = RenetClient::new(crate::connection_config());
        (server, transport, client, client_transport)
    }

    /// Steps the server one frame, and the client too when it is given.
    fn step(
        server: &mut RenetServer,
        transport: &mut UdpServerTransport,
        client: Option<(&mut RenetClient, &mut UdpClientTransport)>,
    ) {
        server.update(FRAME);
        transport.update(FRAME, server).expect("server");
        transport.send_packets(server);
        if let Some((client, client_transport)) = client {
            client.update(FRAME);
            let _ = client_transport.update(FRAME, client);
            let _ = client_transport.send_packets(client);
        }
        std::thread::sleep(Duration::from_millis(1));
    }

    /// Steps both ends until the server has client 7 and the client is connected (100 frames
    /// at most).
    fn connect(
        server: &mut RenetServer,
        transport: &mut UdpServerTransport,
        client: &mut RenetClient,
        client_transport: &mut UdpClientTransport,
    ) {
        for _ in 0..100 {
            if server.clients_id() == [7] && client.is_connected() {
                break;
            }
            step(server, transport, Some((client, client_transport)));
        }
    }

    #[test]
    fn a_client_away_past_its_timeout_reconnects_with_the_same_token() {
        // A 1 s connection timeout, so the test is short; the client is away 3 s.
        let (mut server, mut transport, mut client, mut client_transport) =
            secure_server_and_client_7();
        connect(
            &mut server,
            &mut transport,
            &mut client,
            &mut client_transport,
        );
        assert!(client.is_connected() && server.clients_id() == [7]);
        // Away 3 s (not updated): the server drops it.
        for _ in 0..60 {
            step(&mut server, &mut transport, None);
        }
        assert!(server.clients_id().is_empty());
        // Back: it reads the server's disconnect, or its own clock runs out after 1 s.
        for _ in 0..40 {
            if client_transport.disconnect_reason().is_some() {
                break;
            }
            step(
                &mut server,
                &mut transport,
                Some((&mut client, &mut client_transport)),
            );
        }
        assert!(client_transport.disconnect_reason().is_some());
        client_transport.reconnect().expect("reconnects");
        let mut client = RenetClient::new(crate::connection_config());
        connect(
            &mut server,
            &mut transport,
            &mut client,
            &mut client_transport,
        );
        assert!(
            client.is_connected(),
            "{:?}",
            client_transport.disconnect_reason()
        );
        assert_eq!(server.clients_id(), [7]);
    }

    #[test]
    fn a_client_connected_longer_than_the_connecting_window_is_still_a_known_sender() {
        let (mut server, mut transport, mut client, mut client_transport) =
            secure_server_and_client_7();
        connect(
            &mut server,
            &mut transport,
            &mut client,
            &mut client_transport,
        );
        let client_addr = client_transport.local_addr().unwrap();
        assert_eq!(transport.connected.get(&client_addr), Some(&7));
        // 31 s of half-second steps: its connection request is forgotten after 30 s, and its
        // datagrams are screened by the connected addresses alone.
        let half = Duration::from_millis(500);
        let mut received = 0;
        for _ in 0..62 {
            client.send_message(NetChannel::Control, vec![1, 2, 3]);
            client.update(half);
            client_transport.update(half, &mut client).unwrap();
            client_transport.send_packets(&mut client).unwrap();
            std::thread::sleep(Duration::from_millis(1));
            server.update(half);
            transport.update(half, &mut server).unwrap();
            transport.send_packets(&mut server);
            while server.receive_message(7, NetChannel::Control).is_some() {
                received += 1;
            }
        }
        assert!(!transport.connecting.contains(client_addr));
        assert_eq!(received, 62);
        assert_eq!(
            transport
                .remote_errors()
                .count(RemoteErrorKind::UnknownSender),
            0
        );
        transport.disconnect(7, &mut server);
        assert!(transport.connected.is_empty());
    }

    #[test]
    fn garbage_datagrams_are_counted_and_logged_at_most_once_a_second_per_kind() {
        let config = UdpServerConfig::unsecure("127.0.0.1:0".parse().unwrap());
        let mut transport = UdpServerTransport::bind(config).expect("binds");
        let mut server = RenetServer::new(crate::connection_config());
        let sender = UdpSocket::bind("127.0.0.1:0").expect("binds");
        let mut rng = crate::SplitMix64::new(26);
        let frame = Duration::from_millis(10);
        // 2,000 datagrams of random bytes (1 to 1,200 of them), 50 per 10 ms update, so the
        // socket's receive buffer never overflows.
        for _ in 0..40 {
            for _ in 0..50 {
                let len = 1 + (rng.next_u64() % 1_200) as usize;
                let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                sender
                    .send_to(&bytes, transport.local_addr())
                    .expect("sends");
            }
            std::thread::sleep(Duration::from_millis(2));
            transport.update(frame, &mut server).expect("updates");
        }
        // 200 well-formed connection requests (right size, version, protocol id, expiry) whose
        // token is not sealed with the server's key: netcode would log an error for each.
        let mut request = vec![0u8; crate::remote_errors::NETCODE_CONNECTION_REQUEST_BYTES];
        request[1..14].copy_from_slice(b"NETCODE 1.02\0");
        request[14..22].copy_from_slice(&NETCODE_PROTOCOL_ID.to_le_bytes());
        request[22..30].copy_from_slice(&(unix_time_now().as_secs() + 300).to_le_bytes());
        for _ in 0..4 {
            for i in 0..50u8 {
                request[100] = i;
                sender
                    .send_to(&request, transport.local_addr())
                    .expect("sends");
            }
            std::thread::sleep(Duration::from_millis(2));
            transport.update(frame, &mut server).expect("updates");
        }
        // A second later (simulated), the held-back counts come out.
        transport
            .update(Duration::from_secs(1), &mut server)
            .expect("updates");
        let errors = transport.remote_errors();
        assert_eq!(errors.count(RemoteErrorKind::BadToken), 200, "{errors:?}");
        assert_eq!(errors.total(), 2_200, "{errors:?}");
        let kinds = RemoteErrorKind::ALL
            .iter()
            .filter(|k| errors.count(**k) > 0)
            .count() as u64;
        assert!(errors.lines() <= 2 * kinds, "{errors:?}");
        assert_eq!(server.clients_id().len(), 0);
        println!(
            "2,000 garbage datagrams and 200 forged requests: {} counted, {} log lines over \
             {kinds} kinds",
            errors.total(),
            errors.lines()
        );
    }

    fn request_with(seal: u8, expiry: u64) -> Vec<u8> {
        let mut request = vec![0u8; crate::NETCODE_CONNECTION_REQUEST_BYTES];
        request[22..30].copy_from_slice(&expiry.to_le_bytes());
        let len = request.len();
        request[len - 16..].fill(seal);
        request
    }

    #[test]
    fn a_token_used_from_a_second_address_is_a_replay_but_the_first_may_retry() {
        let mut seen = TokensSeen::default();
        let (a, b): (SocketAddr, SocketAddr) = (
            "10.0.0.1:4000".parse().unwrap(),
            "10.0.0.2:4000".parse().unwrap(),
        );
        let token = request_with(7, 1_000);
        assert_eq!(seen.check(&token, a, 10), Ok(()));
        assert_eq!(
            seen.check(&token, a, 11),
            Ok(()),
            "netcode resends requests"
        );
        assert_eq!(
            seen.check(&token, b, 12),
            Err(RemoteErrorKind::ReplayedToken)
        );
        assert_eq!(seen.check(&request_with(8, 1_000), b, 12), Ok(()));
    }

    #[test]
    fn tokens_seen_stay_bounded_forgetting_expired_tokens_first() {
        let mut seen = TokensSeen::default();
        let addr: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        for i in 0..TokensSeen::MAX {
            let mut request = request_with(0, 50);
            let len = request.len();
            request[len - 8..].copy_from_slice(&(i as u64).to_le_bytes());
            assert_eq!(seen.check(&request, addr, 10), Ok(()));
        }
        assert_eq!(seen.by_seal.len(), TokensSeen::MAX);
        // At second 60 every token has expired: one new token clears them all.
        assert_eq!(seen.check(&request_with(9, 500), addr, 60), Ok(()));
        assert_eq!(seen.by_seal.len(), 1);
    }
}
