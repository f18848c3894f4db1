//! A studio's own dedicated server, built from `simsync_server`'s library with its game's input
//! type, and the game's client that connects to it with a connect token file.
//!
//! - `typed_server [UDP] [OPS]`: every input of its relay rooms is decoded as `ArenaInput` (not
//!   only checked by size, as the stock `simsync-server` does); it makes one room of two
//!   players at start and writes a connect token file per slot (`arena-slot0.token`, ...).
//!   SIGINT or SIGTERM drains it. Logs go to stderr (`RUST_LOG` filters them, `info` by
//!   default).
//! - `typed_server join TOKEN [TICKS]`: a client of the game with a connect token file: plays
//!   the room's match to verified tick `TICKS` (default 600) and prints the checksum of the
//!   last checksum tick up to it. Every client of a match prints the same.
//!
//! ```text
//! cargo run --ignore-rust-version -p simsync_server --example typed_server -- 127.0.0.1:7777 127.0.0.1:8080 &
//! cargo run --ignore-rust-version -p simsync_server --example typed_server -- join arena-slot1.token &
//! cargo run --ignore-rust-version -p simsync_server --example typed_server -- join arena-slot0.token
//! ```
//!
//! The room and the clients must agree on the input type and its size limit: the room's
//! `max_input_bytes` (`RoomConfig::relay_for`'s third argument) is the clients'
//! `NetworkSessionConfig::max_input_bytes`, `DEFAULT_MAX_INPUT_BYTES` on both sides here. A
//! client whose type or limit differs is refused with `RejectReason::InputTypeMismatch`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bevy::prelude::*;
use serde::{Deserialize, Serialize};
use simsync::deterministic::{
    NetworkSessionConfig, SessionLifecycle, SessionState, TickInputSource,
};
use simsync::net::prelude::*;
use simsync::net::renet_netcode::ConnectToken;
use simsync::net::{DEFAULT_MAX_INPUT_BYTES, UdpClientTransport};
use simsync::prelude::*;
use simsync_relay::RelayServer;
use simsync_server::{DedicatedServer, RoomConfig, RoomId, ServerConfig, TokenClaims};

/// The game's input: what each player sends per tick (the traits a session's input needs:
/// `Clone + Eq + Default + Debug + Hash + Serialize + Deserialize`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct ArenaInput {
    /// Stick, -127..=127 per axis.
    stick: [i8; 2],
    /// Button bits.
    buttons: u8,
}

/// Players of the room.
const PLAYERS: u8 = 2;
/// Ticks per second of the room and the clients.
const HZ: u16 = 64;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("join") => join(&args[1..]),
        _ => serve(&args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("typed_server: {error}");
            ExitCode::from(2)
        }
    }
}

/// The server: one typed room, a token file per slot, drained by SIGINT/SIGTERM.
fn serve(args: &[String]) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // The server logs through `tracing`: without a subscriber its warnings go nowhere.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let udp: SocketAddr = args
        .first()
        .map_or("127.0.0.1:7777", String::as_str)
        .parse()?;
    let ops: SocketAddr = args
        .get(1)
        .map_or("127.0.0.1:8080", String::as_str)
        .parse()?;
    let key = simsync_net::generate_private_key();
    let mut config = ServerConfig::local(udp, ops, key, "change-me");
    // One room at start; more through the admin API (POST /rooms). Its input limit is the
    // clients' `NetworkSessionConfig::max_input_bytes` (default DEFAULT_MAX_INPUT_BYTES).
    config.rooms = vec![(
        Some(RoomId(1)),
        RoomConfig::relay_for::<ArenaInput>(PLAYERS, HZ, DEFAULT_MAX_INPUT_BYTES)?,
    )];
    // Relay rooms decode every input as the game's type.
    let server =
        DedicatedServer::bind_with(config, |config, _| RelayServer::new::<ArenaInput>(config))?;
    let minter = server.minter();
    for slot in 0..PLAYERS {
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
    Ok(ExitCode::SUCCESS)
}

/// A position per player, moved by its stick: the game's rolled-back, checksummed state.
#[derive(Component, Clone, Debug, SimHash)]
struct Position {
    player: u8,
    x: i32,
    y: i32,
}

/// The game plugin: spawns a position per player, moves it by the player's stick every tick.
#[derive(Clone)]
struct Arena;

impl Plugin for Arena {
    fn build(&self, app: &mut App) {
        app.rollback_hashed_component::<Position>()
            .add_systems(SimulationStartup, spawn_players)
            .add_systems(SimulationTick, steer.in_set(SimulationSet::Game));
    }
}

fn spawn_players(mut sim: SimCommands) -> Result {
    for player in 0..PLAYERS {
        sim.spawn(Position { player, x: 0, y: 0 })?;
    }
    Ok(())
}

fn steer(inputs: Res<PlayerInputs<ArenaInput>>, mut positions: Query<&mut Position>) {
    for mut position in &mut positions {
        if let Some(input) = inputs.get(position.player) {
            position.x += i32::from(input.stick[0]);
            position.y += i32::from(input.stick[1]);
        }
    }
}

/// A scripted player: its stick turns every 20 ticks.
fn bot(player: u8, tick: i32) -> ArenaInput {
    let turn = (tick / 20 + i32::from(player)).rem_euclid(4);
    let stick = [[100, 0], [0, 100], [-100, 0], [0, -100]][turn as usize];
    ArenaInput { stick, buttons: 0 }
}

/// The client: connects with the token file, plays to verified tick `TICKS`, prints the
/// checksum of that tick. Exit 0 when it got there, 1 when the server refused or dropped it.
fn join(args: &[String]) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let path = args.first().ok_or("join TOKEN_FILE [TICKS]")?;
    let ticks: i32 = args.get(1).map_or(Ok(600), |t| t.parse())?;
    let token = ConnectToken::read(&mut std::fs::File::open(path)?)?;
    let transport = UdpClientTransport::secure(token, "0.0.0.0:0".parse()?)?;
    // Real time on both clocks (the defaults): the session's `SessionClock::RealTime` runs as
    // many ticks as `Time<Real>` says have passed, the network's `NetClock::Real` keeps renet's
    // timers in wall time. A game does the same under its own runner (`DefaultPlugins`'
    // winit loop, or `ScheduleRunnerPlugin`); `Stepped`/fixed clocks are for tests and replays.
    let session = DeterministicPlugin::<ArenaInput>::new(Arena)
        .players(PLAYERS)
        .networked(NetworkSessionConfig::default());
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, NetClientPlugin::default(), session))
        .insert_net_client(transport)
        .insert_resource(TickInputSource::new(bot));
    app.finish();
    app.cleanup();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        app.update();
        let stats = app.world().resource::<SessionStats>();
        if let Some(reason) = stats.network.as_ref().and_then(|n| n.rejected.clone()) {
            eprintln!("refused by the server: {reason}");
            return Ok(ExitCode::FAILURE);
        }
        // A checksum every `checksum_interval` verified ticks (60 by default).
        let last = stats.checksum_history.iter().rfind(|c| c.tick <= ticks);
        if let (true, Some(sum)) = (stats.verified_tick >= ticks, last) {
            println!("verified tick {}: checksum {:016x}", sum.tick, sum.checksum);
            return Ok(ExitCode::SUCCESS);
        }
        let state = app.world().resource::<SessionLifecycle>().state;
        if matches!(state, SessionState::Ended | SessionState::Disconnected) {
            eprintln!("the session ended ({state:?}) before verified tick {ticks}");
            return Ok(ExitCode::FAILURE);
        }
        // A headless loop's pacing: a frame every 2 ms is well under a tick (15.6 ms).
        std::thread::sleep(Duration::from_millis(2));
    }
    eprintln!("verified tick {ticks} not reached in 60 s");
    Ok(ExitCode::FAILURE)
}
