//! One interface over both transports, so App code is the same for in-memory and UDP: the
//! [`ServerTransport`] and [`ClientTransport`] resources, driven by [`crate::NetServerPlugin`] /
//! [`crate::NetClientPlugin`] or by hand.

use std::time::Duration;

use bevy::prelude::Resource;
use renet::{ClientId, RenetClient, RenetServer};

use crate::error::NetError;
use crate::memory::{MemoryClientTransport, MemoryServerTransport};
use crate::remote_errors::RemoteErrors;
use crate::udp::{UdpClientTransport, UdpServerTransport};

/// The server's transport: in memory or UDP. A Bevy resource, next to a
/// `bevy_renet::RenetServer` resource.
#[derive(Resource, Debug)]
pub enum ServerTransport {
    /// In-memory ([`crate::MemoryNetwork`]).
    Memory(MemoryServerTransport),
    /// UDP through renet_netcode ([`UdpServerTransport`]); boxed, as it holds a 1,400-byte buffer.
    Udp(Box<UdpServerTransport>),
}

impl ServerTransport {
    /// Advances the transport's clock by `dt` and hands received packets to `server` (adding and
    /// removing connections). Call after `server.update(dt)`; the plugin does both in
    /// `PreUpdate`.
    ///
    /// # Errors
    ///
    /// UDP: [`NetError::Transport`] if the socket fails. In memory: never.
    pub fn update(&mut self, dt: Duration, server: &mut RenetServer) -> Result<(), NetError> {
        match self {
            ServerTransport::Memory(transport) => {
                transport.update(dt, server);
                Ok(())
            }
            ServerTransport::Udp(transport) => transport.update(dt, server),
        }
    }

    /// Sends the packets renet has queued for every client.
    pub fn send_packets(&mut self, server: &mut RenetServer) {
        match self {
            ServerTransport::Memory(transport) => transport.send_packets(server),
            ServerTransport::Udp(transport) => transport.send_packets(server),
        }
    }

    /// The errors remote peers caused so far, per kind ([wire rule 11](crate::rules)): UDP
    /// only (`None` in memory, where every peer is in the process).
    pub fn remote_errors(&self) -> Option<&RemoteErrors> {
        match self {
            ServerTransport::Memory(_) => None,
            ServerTransport::Udp(transport) => Some(transport.remote_errors()),
        }
    }

    /// Disconnects every client.
    pub fn disconnect_all(&mut self, server: &mut RenetServer) {
        match self {
            ServerTransport::Memory(transport) => transport.disconnect_all(server),
            ServerTransport::Udp(transport) => transport.disconnect_all(server),
        }
    }
}

impl From<MemoryServerTransport> for ServerTransport {
    fn from(transport: MemoryServerTransport) -> Self {
        ServerTransport::Memory(transport)
    }
}

impl From<UdpServerTransport> for ServerTransport {
    fn from(transport: UdpServerTransport) -> Self {
        ServerTransport::Udp(Box::new(transport))
    }
}

/// A client's transport: in memory or UDP. A Bevy resource, next to a
/// `bevy_renet::RenetClient` resource.
#[derive(Resource, Debug)]
pub enum ClientTransport {
    /// In-memory ([`crate::MemoryNetwork`]).
    Memory(MemoryClientTransport),
    /// UDP through renet_netcode ([`UdpClientTransport`]); boxed, as it holds a 1,400-byte
    /// buffer.
    Udp(Box<UdpClientTransport>),
}

impl ClientTransport {
    /// The client id: as registered (memory) or from the token (UDP).
    pub fn client_id(&self) -> ClientId {
        match self {
            ClientTransport::Memory(transport) => transport.client_id(),
            ClientTransport::Udp(transport) => transport.client_id(),
        }
    }

    /// Advances the transport's clock by `dt`, updates `client`'s connection state and hands it
    /// received packets. Call after `client.update(dt)`; the plugin does both in `PreUpdate`.
    ///
    /// # Errors
    ///
    /// [`NetError::NotConnected`] (memory) or [`NetError::Transport`] (UDP) once the connection
    /// is closed or failed; `client` is then disconnected.
    pub fn update(&mut self, dt: Duration, client: &mut RenetClient) -> Result<(), NetError> {
        match self {
            ClientTransport::Memory(transport) => transport.update(dt, client),
            ClientTransport::Udp(transport) => transport.update(dt, client),
        }
    }

    /// Sends the packets renet has queued.
    ///
    /// # Errors
    ///
    /// UDP: [`NetError::Transport`] if netcode is disconnected or the socket fails. In memory:
    /// never.
    pub fn send_packets(&mut self, client: &mut RenetClient) -> Result<(), NetError> {
        match self {
            ClientTransport::Memory(transport) => {
                transport.send_packets(client);
                Ok(())
            }
            ClientTransport::Udp(transport) => transport.send_packets(client),
        }
    }

    /// Starts a new connection to the same server as the same client after the old one was
    /// lost ([wire rule 9](crate::rules)): UDP with the same authentication from the same local
    /// address ([`UdpClientTransport::reconnect`]), in memory a new registration under the same
    /// id ([`MemoryClientTransport::reconnect`]). Give the new connection a new `RenetClient`
    /// (`RenetClient::new(connection_config())`).
    ///
    /// # Errors
    ///
    /// UDP: [`NetError::Io`] / [`NetError::Netcode`]. In memory: [`NetError::ClientIdInUse`]
    /// while the server has not yet removed the old link (try again later).
    pub fn reconnect(&mut self) -> Result<(), NetError> {
        match self {
            ClientTransport::Memory(transport) => transport.reconnect(),
            ClientTransport::Udp(transport) => transport.reconnect(),
        }
    }

    /// Leaves: tells the server at once (UDP) or closes the link (memory). The close is
    /// expected ([`Self::close_expected`]).
    pub fn disconnect(&mut self) {
        match self {
            ClientTransport::Memory(transport) => transport.disconnect(),
            ClientTransport::Udp(transport) => transport.disconnect(),
        }
    }

    /// The game is leaving (it said goodbye): the current connection's close — by the server,
    /// or by the client itself — is expected, and [`NetClientPlugin`](crate::NetClientPlugin)
    /// reports it as no error (no warning, no [`NetTransportError`](crate::NetTransportError)).
    /// A [`reconnect`](Self::reconnect) starts a connection whose close is not.
    pub fn expect_close(&mut self) {
        match self {
            ClientTransport::Memory(transport) => transport.expect_close(),
            ClientTransport::Udp(transport) => transport.expect_close(),
        }
    }

    /// Whether the current connection's close is expected: [`Self::expect_close`] or
    /// [`Self::disconnect`] was called since it started.
    pub fn close_expected(&self) -> bool {
        match self {
            ClientTransport::Memory(transport) => transport.close_expected(),
            ClientTransport::Udp(transport) => transport.close_expected(),
        }
    }
}

impl From<MemoryClientTransport> for ClientTransport {
    fn from(transport: MemoryClientTransport) -> Self {
        ClientTransport::Memory(transport)
    }
}

impl From<UdpClientTransport> for ClientTransport {
    fn from(transport: UdpClientTransport) -> Self {
        ClientTransport::Udp(Box::new(transport))
    }
}
