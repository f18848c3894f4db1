//! Command-line arguments of the sandbox.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// The scene loaded when `--scene` is not given (absolute, so any working directory works).
pub const DEFAULT_SCENE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/scenes/sandbox.ron");
/// The trace loaded when `--trace` is not given.
pub const DEFAULT_TRACE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/assets/traces/two_players.ron");
/// The scripted actions of `--mode ownership` when `--ownership-trace` is not given.
pub const DEFAULT_OWNERSHIP_TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/assets/traces/ownership_three.ron"
);

/// How the session's peers are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Every player in this process; inputs reach a local relay after the input latency.
    Local,
    /// A relay server and one client per player in this process, over the in-memory transport
    /// with a link conditioner (`--rtt-ms`, `--net-jitter-ms`, `--loss-percent`).
    Network,
    /// Simulation ownership: an entity server and `--participants` participants, each with its
    /// own physics, over the in-memory transport (or UDP with `--server` / `--client`).
    Ownership,
}

impl Mode {
    /// The mode's name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Local => "local",
            Mode::Network => "network",
            Mode::Ownership => "ownership",
        }
    }
}

/// Headless multiplayer physics sandbox: replays recorded player inputs through a deterministic
/// rollback session (verified and predicted worlds) and reports whether prediction matched
/// verification.
#[derive(Debug, Clone, Parser)]
#[command(name = "sandbox", version)]
pub struct Args {
    /// Session mode.
    #[arg(long, value_enum, default_value_t = Mode::Network)]
    pub mode: Mode,
    /// Run only the relay server over UDP (with `--bind`), for `--players` clients in other
    /// processes.
    #[arg(long, conflicts_with = "client", requires = "bind")]
    pub server: bool,
    /// Run one client over UDP (with `--connect`).
    #[arg(long, requires = "connect")]
    pub client: bool,
    /// Address the UDP server binds (e.g. 127.0.0.1:5000).
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<std::net::SocketAddr>,
    /// Address of the UDP server a client connects to.
    #[arg(long, value_name = "ADDR")]
    pub connect: Option<std::net::SocketAddr>,
    /// Network mode: round-trip time of the simulated link in ms.
    #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub rtt_ms: u32,
    /// Network mode: round-trip jitter of the simulated link in ms.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub net_jitter_ms: u32,
    /// Network mode: packet loss of the simulated link in percent (0–100).
    #[arg(long, default_value_t = 2.0)]
    pub loss_percent: f64,
    /// Ticks to verify (64 ticks per second of simulated time).
    #[arg(long, default_value_t = 1800, value_parser = clap::value_parser!(u32).range(1..=1_000_000_000))]
    pub ticks: u32,
    /// Players (the scene needs at least this many player spawns; players the trace does not
    /// know send default input).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..))]
    pub players: u8,
    /// Local mode: ticks from sampling an input to its confirmation by the relay, for every
    /// player.
    #[arg(long, default_value_t = 6)]
    pub input_latency_ticks: u32,
    /// Local mode: extra random confirmation delay in 0..=N ticks per input (seeded).
    #[arg(long, default_value_t = 0)]
    pub jitter_ticks: u32,
    /// Scene file (RON).
    #[arg(long, default_value = DEFAULT_SCENE)]
    pub scene: PathBuf,
    /// Input trace file (RON).
    #[arg(long, default_value = DEFAULT_TRACE)]
    pub trace: PathBuf,
    /// Also write the summary as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub summary_json: Option<PathBuf>,
    /// Do not compare predicted ticks with verified ones (the comparison costs a state hash per
    /// predicted tick).
    #[arg(long)]
    pub no_verify_predictions: bool,

    // --- `--mode ownership` (examples/sandbox/ownership.rs); it also reads `--rtt-ms`,
    // `--net-jitter-ms`, `--loss-percent`, `--ticks`, `--scene`, `--summary-json` and, over UDP,
    // `--server --bind` / `--client --connect`. ---
    /// Ownership mode: the participants' scripted actions (RON).
    #[arg(long, default_value = DEFAULT_OWNERSHIP_TRACE)]
    pub ownership_trace: PathBuf,
    /// Ownership mode: participants in this process (the scene needs that many player spawns).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..))]
    pub participants: u8,
    /// Ownership mode: seconds to run after the script stops, before comparing copies (longer
    /// while bodies other than avatars are still owned, up to 20 s more).
    #[arg(long, default_value_t = 2.0, value_parser = parse_settle_seconds)]
    pub settle_seconds: f64,
    /// Ownership mode with `--client`: which participant of the trace to play (0-based).
    #[arg(long, default_value_t = 0)]
    pub participant_index: u8,
}

/// `--settle-seconds`: a finite number of seconds in 0..=600.
fn parse_settle_seconds(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if value.is_finite() && (0.0..=600.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{text} is not in 0..=600 seconds"))
    }
}
