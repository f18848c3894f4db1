//! A studio's own dedicated server, built from `simsync_server`'s library with its game's input
//! type: every input of its relay rooms is decoded as `ArenaInput` (not only checked by size,
//! as the stock `simsync-server` does), and it makes one room at start and prints a connect
//! token file per slot. SIGINT or SIGTERM drains it.
//!
//! ```text
//! cargo run -p simsync_server --example typed_server -- 127.0.0.1:7777 127.0.0.1:8080
//! ```

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use simsync_relay::RelayServer;
use simsync_server::{DedicatedServer, RoomConfig, RoomId, ServerConfig, TokenClaims};

/// The game's input: what each player sends per tick.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct ArenaInput {
    /// Stick, -127..=127 per axis.
    stick: [i8; 2],
    /// Button bits.
    buttons: u8,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let udp: SocketAddr = args.next().unwrap_or("127.0.0.1:7777".into()).parse()?;
    let ops: SocketAddr = args.next().unwrap_or("127.0.0.1:8080".into()).parse()?;
    let key = simsync_net::generate_private_key();
    let mut config = ServerConfig::local(udp, ops, key, "change-me");
    // One room at start; more through the admin API (POST /rooms).
    config.rooms = vec![(
        Some(RoomId(1)),
        RoomConfig::relay_for::<ArenaInput>(2, 64, 16)?,
    )];
    // Relay rooms decode every input as the game's type.
    let server =
        DedicatedServer::bind_with(config, |config, _| RelayServer::new::<ArenaInput>(config))?;
    let minter = server.minter();
    for slot in 0..2u8 {
        let path = format!("arena-slot{slot}.token");
        let claims = TokenClaims {
            room: RoomId(1),
            slot,
        };
        std::fs::write(&path, minter.mint_bytes(100 + u64::from(slot), claims)?)?;
        println!("slot {slot}: {path}");
    }
    let signal = server.drain_signal();
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, signal.flag())?;
    }
    println!("serving on udp {udp}, http {ops}; Ctrl-C drains");
    server.run(|_| {})?;
    Ok(())
}
