//! How `join` reaches its server: unsecured at `--connect` (`sandbox serve`), or with a
//! connect token (`--token`, a dedicated server's room and slot); and `room-config`, the
//! room a dedicated server hosts for this game.

use std::net::SocketAddr;
use std::path::Path;

use serde_json::json;
use simsync::prelude::PackedInput;
use simsync_net::renet_netcode::ConnectToken;
use simsync_net::{NETCODE_PROTOCOL_ID, UdpClientTransport};
use simsync_server::{BodySpec, OwnershipRoomConfig, RoomConfig};

use super::cli::RoomConfigArgs;
use super::driver::Failure;
use super::ownership::Setup;

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

/// `sandbox room-config`: prints this game's room for `simsync-server` as JSON.
///
/// # Errors
/// Exit code 2 for a scene that does not load.
pub fn print_room_config(args: &RoomConfigArgs) -> Result<(), Failure> {
    let room = if args.ownership {
        let setup = Setup::load(args.scene.as_deref(), args.participants)?;
        RoomConfig::Ownership(OwnershipRoomConfig {
            participants: args.participants,
            tick_rate_hz: 64,
            bodies: setup
                .bodies
                .iter()
                .map(|body| BodySpec {
                    id: body.id.0,
                    fixed: body.kind == bevy_rapier3d::prelude::RigidBody::Fixed,
                    position: body.transform.translation.to_array(),
                    rotation: body.transform.rotation.to_array(),
                })
                .collect(),
        })
    } else {
        let mut room = RoomConfig::relay_for::<PackedInput>(
            args.players,
            64,
            simsync_net::DEFAULT_MAX_INPUT_BYTES,
        )
        .map_err(|e| Failure::input(e.to_string()))?;
        if let RoomConfig::Relay(relay) = &mut room {
            // The sandbox's clients serve snapshots: a room can take late joiners.
            relay.snapshots = true;
        }
        room
    };
    let mut value = json!(room);
    if let Some(id) = args.id {
        value["id"] = json!(id);
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&value).unwrap_or_default()
    );
    Ok(())
}
