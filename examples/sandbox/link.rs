//! How `join` reaches its server: unsecured at `--connect` (`sandbox serve`), or with a
//! connect token (`--token`, a dedicated server's room and slot).

use std::net::SocketAddr;
use std::path::Path;

use simsync_net::renet_netcode::ConnectToken;
use simsync_net::{NETCODE_PROTOCOL_ID, UdpClientTransport};

use super::driver::Failure;

/// The server a client connects to, and its token if it has one.
pub struct ServerLink {
    /// The server's address.
    pub server: SocketAddr,
    token: Option<ConnectToken>,
}

impl ServerLink {
    /// From `--connect` and `--token`: the token's first server address unless `--connect`
    /// names one.
    ///
    /// # Errors
    /// Exit code 2 for an unreadable token file, or neither an address nor a token.
    pub fn from_args(connect: Option<SocketAddr>, token: Option<&Path>) -> Result<Self, Failure> {
        let token = match token {
            Some(path) => {
                let mut file = std::fs::File::open(path)
                    .map_err(|e| Failure::input(format!("--token {}: {e}", path.display())))?;
                Some(ConnectToken::read(&mut file).map_err(|e| {
                    Failure::input(format!(
                        "--token {}: not a connect token ({e})",
                        path.display()
                    ))
                })?)
            }
            None => None,
        };
        let from_token = token
            .as_ref()
            .and_then(|t| t.server_addresses.iter().flatten().next().copied());
        let server = connect.or(from_token).ok_or_else(|| {
            Failure::input("give --connect ADDR, or --token FILE naming the server")
        })?;
        Ok(Self { server, token })
    }

    /// Whether the client connects with a connect token (a dedicated server).
    pub fn is_secure(&self) -> bool {
        self.token.is_some()
    }

    /// A UDP transport to the server: secure with the token (its client id), else unsecured as
    /// `client_id`.
    ///
    /// # Errors
    /// Exit code 2 if the socket cannot be opened.
    pub fn transport(&self, client_id: u64) -> Result<UdpClientTransport, Failure> {
        let bind: SocketAddr = if self.server.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            ([0u16; 8], 0).into()
        };
        let transport = match &self.token {
            Some(token) => UdpClientTransport::secure(token.clone(), bind),
            None => UdpClientTransport::unsecure(self.server, client_id, NETCODE_PROTOCOL_ID, bind),
        };
        transport.map_err(|e| Failure::input(format!("cannot connect to {}: {e}", self.server)))
    }
}
