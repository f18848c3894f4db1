//! The UDP transport ([`UdpServerTransport`], [`UdpClientTransport`]) over renet_netcode.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use renet::{ClientId, RenetClient, RenetServer};
use renet_netcode::{
    ClientAuthentication, ConnectToken, NETCODE_KEY_BYTES, NETCODE_USER_DATA_BYTES,
    NetcodeClientTransport, NetcodeServerTransport, ServerAuthentication, ServerConfig,
};

use crate::error::NetError;
use crate::handshake::PROTOCOL_VERSION;

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

/// The server end of the UDP transport ([transport rules](crate::rules)): renet_netcode's
/// `NetcodeServerTransport` (and [`UdpClientTransport`], its `NetcodeClientTransport`) on a
/// configurable `SocketAddr`, unsecure (for loopback and development) or secure with connect
/// tokens.
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
#[derive(Debug)]
pub struct UdpServerTransport {
    inner: NetcodeServerTransport,
    local_addr: SocketAddr,
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
        let local_addr = socket.local_addr()?;
        let authentication = match config.auth {
            UdpAuth::Unsecure => ServerAuthentication::Unsecure,
            UdpAuth::Secure { private_key } => ServerAuthentication::Secure { private_key },
        };
        let server_config = ServerConfig {
            current_time: unix_time_now(),
            max_clients: config.max_clients,
            protocol_id: config.protocol_id,
            public_addresses: vec![config.public_addr.unwrap_or(local_addr)],
            authentication,
        };
        let inner = NetcodeServerTransport::new(server_config, socket)?;
        Ok(Self { inner, local_addr })
    }

    /// The bound address (with the real port if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The netcode transport, for what this wrapper does not expose.
    pub fn inner(&self) -> &NetcodeServerTransport {
        &self.inner
    }

    /// The netcode transport, mutably.
    pub fn inner_mut(&mut self) -> &mut NetcodeServerTransport {
        &mut self.inner
    }

    /// The 256 bytes of user data of a connected client's token, if connected.
    pub fn user_data(&self, client_id: ClientId) -> Option<[u8; NETCODE_USER_DATA_BYTES]> {
        self.inner.user_data(client_id)
    }

    /// Advances netcode's clock by `dt`, reads every datagram waiting on the socket and hands
    /// payloads to `server` (adding and removing connections). Call after `server.update(dt)`.
    ///
    /// # Errors
    ///
    /// [`NetError::Transport`] if the socket fails.
    pub fn update(&mut self, dt: Duration, server: &mut RenetServer) -> Result<(), NetError> {
        self.inner.update(dt, server)?;
        Ok(())
    }

    /// Sends renet's outgoing packets of every client (failures are logged by renet_netcode).
    pub fn send_packets(&mut self, server: &mut RenetServer) {
        self.inner.send_packets(server);
    }

    /// Sends a disconnect packet to every client and removes them from `server`.
    pub fn disconnect_all(&mut self, server: &mut RenetServer) {
        self.inner.disconnect_all(server);
    }
}

/// The client end of the UDP transport.
#[derive(Debug)]
pub struct UdpClientTransport {
    inner: NetcodeClientTransport,
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
        let inner = NetcodeClientTransport::new(unix_time_now(), authentication, socket)?;
        Ok(Self { inner })
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
        let inner = NetcodeClientTransport::new(unix_time_now(), authentication, socket)?;
        Ok(Self { inner })
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

    /// The netcode transport, for what this wrapper does not expose.
    pub fn inner(&self) -> &NetcodeClientTransport {
        &self.inner
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
    pub fn update(&mut self, dt: Duration, client: &mut RenetClient) -> Result<(), NetError> {
        self.inner.update(dt, client)?;
        Ok(())
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

    /// Sends netcode's disconnect packet to the server at once.
    pub fn disconnect(&mut self) {
        self.inner.disconnect();
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
}
