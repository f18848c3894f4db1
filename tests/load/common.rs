//! What the tests share: a server on free 127.0.0.1 ports and its connect tokens.

use std::net::SocketAddr;
use std::time::Duration;

use simsync_net::renet_netcode::ConnectToken;
use simsync_server::{DedicatedServer, RoomId, ServerConfig, TokenClaims};

/// One frame: the server and every client advance 1/64 s.
pub const FRAME: Duration = Duration::from_micros(15_625);

/// The admin token of the test servers.
const ADMIN: &str = "test-admin-token";

/// `127.0.0.1:0`: a free port on the loopback interface.
pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("address")
}

/// A server on free 127.0.0.1 ports with a fixed key, defaults otherwise.
pub fn server() -> DedicatedServer {
    let config = ServerConfig::local(loopback(), loopback(), [9; 32], ADMIN);
    DedicatedServer::bind(config).expect("server binds")
}

/// A token of `server` for seat `slot` of `room`, as client `client_id`.
pub fn token(server: &DedicatedServer, room: RoomId, slot: u8, client_id: u64) -> ConnectToken {
    server
        .minter()
        .mint(client_id, TokenClaims { room, slot })
        .expect("token")
}
