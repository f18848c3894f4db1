//! `simsync-server`: the dedicated server binary. `simsync-server --help` lists every setting;
//! `docs/deploy.md` says how to run it from one machine to a fleet.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use simsync_server::{
    AgonesAdapter, AgonesConfig, AgonesReport, AgonesSdk, DedicatedServer, DrainSignal, FileConfig,
    LogFormat, RoomId, ServeArgs, ServerConfig, TokenClaims, TokenMinter, key_to_hex, parse_key,
};

/// The simsync dedicated server: relay and ownership rooms on one UDP port, clients admitted
/// by connect tokens, an HTTP port for /healthz, /readyz, /metrics and the admin API
/// (`Authorization: Bearer <admin token>`: POST /rooms, GET /rooms, GET /rooms/{id},
/// DELETE /rooms/{id}). SIGTERM or SIGINT drains it: not ready, no new rooms or clients,
/// running rooms finish within --drain-timeout, then every client is told and it exits 0.
/// Settings come from flags, then environment variables, then the config file.
#[derive(Debug, Parser)]
#[command(
    name = "simsync-server",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

// Parsed once at start: the size of `Serve`'s arguments does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Serve rooms (the default).
    Serve(ServeArgs),
    /// Print a new private key (64 hexadecimal digits) for --private-key-file.
    Keygen,
    /// Mint a connect token for one client of one room (what a matchmaker does with the
    /// library's `TokenMinter`), written to --out (2,048 bytes).
    Token(TokenArgs),
}

#[derive(Debug, clap::Args)]
struct TokenArgs {
    /// File holding the server's private key.
    #[arg(long, env = "SIMSYNC_PRIVATE_KEY_FILE", value_name = "FILE")]
    private_key_file: PathBuf,
    /// The server's address as the client reaches it (its --public-addr); repeat for more.
    #[arg(long = "server", value_name = "ADDR", required = true)]
    servers: Vec<SocketAddr>,
    /// The room the token opens.
    #[arg(long, value_name = "ID")]
    room: u64,
    /// The slot in the room (player slot or participant seat, from 0).
    #[arg(long, value_name = "N")]
    slot: u8,
    /// The client's id: unique among the server's connections.
    #[arg(long, value_name = "N")]
    client_id: u64,
    /// Seconds until the token expires (the client must connect before).
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    expire: u64,
    /// Where to write the token.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// Whether text logs are coloured: only on a terminal, and never with `NO_COLOR` set to
/// anything but the empty string (<https://no-color.org>).
fn colour_logs(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|value| value.is_empty())
}

fn init_logs(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = colour_logs(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR"),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

fn serve(args: &ServeArgs) -> Result<(), String> {
    let file = match &args.config {
        Some(path) => FileConfig::read(path).map_err(|e| e.to_string())?,
        None => FileConfig::default(),
    };
    let mut config = ServerConfig::resolve(args, file).map_err(|e| e.to_string())?;
    init_logs(config.log_format);
    let agones = config
        .agones
        .then(|| AgonesConfig::from_env(config.agones_url.clone()));
    let signal = DrainSignal::default();
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, signal.flag()).map_err(|e| e.to_string())?;
    }
    if let (Some(agones), None) = (&agones, config.public_addr) {
        match agones_public_addr(agones, &signal) {
            Some(addr) => config.public_addr = Some(addr),
            None => {
                tracing::info!("agones: stopped before the GameServer had an address");
                return Ok(());
            }
        }
    }
    let server = DedicatedServer::bind(config)
        .map_err(|e| e.to_string())?
        .with_drain_signal(signal);
    let Some(agones) = agones else {
        return server.run(|_| {}).map_err(|e| e.to_string());
    };
    let adapter = AgonesAdapter::spawn(agones, server.heartbeat());
    adapter.ready();
    let mut last = (usize::MAX, usize::MAX);
    let result = server.run(|server| {
        let rooms = server.rooms();
        let counts = (rooms.rooms().count(), rooms.clients());
        if counts != last {
            last = counts;
            adapter.report(AgonesReport {
                rooms: counts.0 as u64,
                clients: counts.1 as u64,
                room_ids: rooms.rooms().map(|r| r.id().0.to_string()).collect(),
            });
        }
    });
    let stats = adapter.shutdown();
    tracing::info!(?stats, "agones: shutdown sent");
    result.map_err(|e| e.to_string())
}

/// The GameServer's address as the Agones sidecar tells it (its `game` port), asked for every
/// 500 ms until it says, while the server is not bound (so not ready) and says Health to the
/// sidecar (the GameServer stays healthy while it is being scheduled); a warning every 10 s
/// says what it waits for. `None` when `stop` (SIGTERM) comes first.
fn agones_public_addr(agones: &AgonesConfig, stop: &DrainSignal) -> Option<SocketAddr> {
    let sdk = AgonesSdk::new(agones);
    let started = std::time::Instant::now();
    let mut warned: Option<std::time::Instant> = None;
    while !stop.raised() {
        let why = match sdk.game_server() {
            Ok(info) => match info.public_addr("game") {
                Some(addr) => {
                    tracing::info!(%addr, "agones: public address from the GameServer");
                    return Some(addr);
                }
                None => "the GameServer has no address or `game` port yet".to_string(),
            },
            Err(error) => format!("GameServer not read: {error}"),
        };
        if warned.is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(10)) {
            warned = Some(std::time::Instant::now());
            tracing::warn!(
                waited_secs = started.elapsed().as_secs(),
                "agones: waiting for the public address (not ready; tokens must name it): {why}"
            );
        }
        let _ = sdk.health();
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    None
}

fn token(args: &TokenArgs) -> Result<(), String> {
    let hex = std::fs::read_to_string(&args.private_key_file)
        .map_err(|e| format!("{}: {e}", args.private_key_file.display()))?;
    let key = parse_key(&hex).map_err(|e| e.to_string())?;
    let minter = TokenMinter::new(key, args.servers.clone())
        .map_err(|e| e.to_string())?
        .expire_seconds(args.expire);
    let claims = TokenClaims {
        room: RoomId(args.room),
        slot: args.slot,
    };
    let bytes = minter
        .mint_bytes(args.client_id, claims)
        .map_err(|e| e.to_string())?;
    std::fs::write(&args.out, bytes).map_err(|e| format!("{}: {e}", args.out.display()))?;
    println!(
        "token for client {} in room {} slot {} written to {}",
        args.client_id,
        args.room,
        args.slot,
        args.out.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        None => serve(&cli.serve),
        Some(Command::Serve(args)) => serve(args),
        Some(Command::Keygen) => {
            println!("{}", key_to_hex(&simsync_net::generate_private_key()));
            Ok(())
        }
        Some(Command::Token(args)) => token(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("simsync-server: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::colour_logs;

    #[test]
    fn logs_are_coloured_on_a_terminal_without_no_color_only() {
        assert!(colour_logs(true, None));
        assert!(!colour_logs(false, None));
        assert!(!colour_logs(true, Some("1".into())));
        // An empty NO_COLOR is as if unset.
        assert!(colour_logs(true, Some("".into())));
    }
}
