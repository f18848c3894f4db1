//! Command-line interface of the sandbox: one subcommand per mode, each with only its own flags.
//!
//! Pure argument handling (clap and std only), so `tests/sandbox_assets.rs` includes this file
//! and tests the parsing rules. Asset files not named on the command line are looked up at run
//! time in a fixed order of places ([`asset_candidates`]), so `join` and `host` find them from
//! any working directory.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueHint};

/// The scene loaded when `--scene` is not given, relative to the repository root.
pub const DEFAULT_SCENE: &str = "assets/scenes/sandbox.ron";
/// The deterministic session's input trace when `--trace` is not given.
pub const DEFAULT_SESSION_TRACE: &str = "assets/traces/two_players.ron";
/// The ownership script when `--trace` is not given to an ownership run.
pub const DEFAULT_OWNERSHIP_TRACE: &str = "assets/traces/ownership_three.ron";
/// Where `--plant-desync` writes desync dumps when `--dump-dir` is not given (relative to the
/// working directory).
pub const DEFAULT_DUMP_DIR: &str = "desync-dumps";

const AFTER_HELP: &str = "\
Logging: the engine logs through Bevy's LogPlugin; set RUST_LOG to filter it (e.g. RUST_LOG=warn, \
RUST_LOG=simsync_net=debug). --quiet hides the banner, progress lines and INFO logs.
Files not given are looked up under $SIMSYNC_SANDBOX_ASSETS (the repository's assets/ directory), \
then relative to the current directory, to $CARGO_MANIFEST_DIR (set by `cargo run`), to the \
directories above the executable (a build in the repository's target/), and to the checkout the \
executable was built from.
Exit codes: 0 success; 1 a predicted tick differed from its verified tick, clients disagreed, \
or copies diverged; 2 bad scene, trace or argument.";

/// Headless multiplayer physics sandbox: replays recorded inputs through a deterministic rollback
/// session (verified and predicted worlds), or scripted actions through simulation ownership.
///
/// Without a subcommand it runs `network` (whose flags it then accepts).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "sandbox",
    version,
    args_conflicts_with_subcommands = true,
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// The mode; `network` when none is given.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The `network` mode's flags, when no subcommand is given.
    #[command(flatten)]
    pub network: NetworkArgs,
}

/// The sandbox's modes.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// One app, every player local: inputs reach a local relay after --input-latency-ticks.
    #[command(after_help = AFTER_HELP)]
    Local(LocalArgs),
    /// (default) A relay server and --players clients in this process, over the in-memory
    /// transport with a link conditioner; checks that every client verified the same checksums.
    #[command(after_help = AFTER_HELP)]
    Network(NetworkArgs),
    /// Simulation ownership: an entity server and --participants participants in this process,
    /// each with its own physics, scripted by --trace; compares every copy of every body.
    #[command(after_help = AFTER_HELP)]
    Ownership(OwnershipArgs),
    /// Players under rollback and props under ownership (a hybrid session): a relay server, an
    /// entity server and --players peers in this process, over the in-memory transport with a
    /// link conditioner; checks that every peer verified the same players' checksums and that
    /// every prop's copies agree within 1 cm at rest.
    #[command(after_help = AFTER_HELP)]
    Hybrid(HybridArgs),
    /// A server over UDP for clients started with `join`, paced in real time: the deterministic
    /// session's relay server, or with --ownership the entity server.
    #[command(after_help = AFTER_HELP)]
    Serve(ServeArgs),
    /// One client over UDP of a server started with `serve`, paced in real time: a deterministic
    /// session client, or with --ownership one participant.
    #[command(after_help = AFTER_HELP)]
    Join(JoinArgs),
    /// Compares two desync dumps: names the first differing entity (slot, generation; and
    /// whose body, for a player's), component and field values, and the inputs of the tick. Exit 0: no difference; 1: a
    /// difference (printed); 2: a file is missing, corrupt, of another version or game.
    #[command(after_help = AFTER_HELP)]
    Diff(DiffArgs),
    /// Plays a replay recorded with --record (local, network or join) in lockstep, as fast as
    /// possible, checking every recorded checksum: exit 0 when all matched, 1 at the first
    /// mismatch (its tick printed), 2 for a bad, foreign or cut replay file.
    #[command(after_help = AFTER_HELP)]
    Replay(ReplayArgs),
    /// A dedicated server (`simsync_server`'s library, as `simsync-server` but with this game)
    /// with one relay room of --players: with --authoritative the room runs the game's verified
    /// world itself (desync judge, snapshot source, resync). Writes a connect token per slot for
    /// `join --token`; drains and exits once the room has ended (or on Ctrl-C).
    #[command(after_help = AFTER_HELP)]
    Host(HostArgs),
    /// Prints the room config (JSON) of this game for `simsync-server`'s admin API
    /// (`POST /rooms`) or its config file: a relay room of --players for the sandbox's input
    /// type, or with --ownership an ownership room of the scene's bodies.
    RoomConfig(RoomConfigArgs),
}

/// `sandbox room-config`.
#[derive(Debug, Clone, Args)]
pub struct RoomConfigArgs {
    /// The room's id on the server [default: the server picks one].
    #[arg(long, value_name = "ID")]
    pub id: Option<u64>,
    /// An ownership room (the entity server of the scene's bodies) instead of a relay room.
    #[arg(long)]
    pub ownership: bool,
    /// Relay room: player slots (every `join` gives the same --players).
    #[arg(long, default_value_t = 2, conflicts_with = "ownership", value_parser = clap::value_parser!(u8).range(1..))]
    pub players: u8,
    /// Ownership room: participants (every `join --ownership` gives the same --participants).
    #[arg(long, default_value_t = 3, requires = "ownership", value_parser = clap::value_parser!(u8).range(1..))]
    pub participants: u8,
    /// Ownership room: scene file (RON) [default: assets/scenes/sandbox.ron].
    #[arg(long, value_name = "PATH", requires = "ownership", value_hint = ValueHint::FilePath)]
    pub scene: Option<PathBuf>,
    /// Ownership room: the room says `"physics_host": true` (the server hosts its physics
    /// whatever its own `--physics-host` switch). Without it the room carries the scene's
    /// shapes and properties and the server's switch decides.
    #[arg(long, requires = "ownership")]
    pub physics_host: bool,
}

/// Flags of every mode.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Ticks to run, 64 per second of simulated time (the tick the verified world stops at;
    /// in `ownership` mode, the scripted ticks before the bodies settle).
    #[arg(long, default_value_t = 1800, value_parser = clap::value_parser!(u32).range(1..=1_000_000_000))]
    pub ticks: u32,
    /// Also write the summary as JSON to this file.
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub summary_json: Option<PathBuf>,
    /// Print only results and errors: no banner, no progress lines, engine logs from WARN up
    /// (RUST_LOG still overrides).
    #[arg(long, short)]
    pub quiet: bool,
}

/// Flags of a deterministic session run in this process (`local`, `network`).
#[derive(Debug, Clone, Args)]
pub struct SessionArgs {
    /// Players (the scene needs at least this many player spawns; players the trace does not
    /// know send default input).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..))]
    pub players: u8,
    /// Scene file (RON) [default: assets/scenes/sandbox.ron].
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub scene: Option<PathBuf>,
    /// Input trace file (RON) [default: assets/traces/two_players.ron].
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub trace: Option<PathBuf>,
    /// Do not compare predicted ticks with verified ones (the comparison costs a state hash per
    /// predicted tick).
    #[arg(long)]
    pub no_verify_predictions: bool,
    /// Record the verified ticks to this replay file (in `network` mode, client 0's); play it
    /// with `sandbox replay FILE`.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub record: Option<PathBuf>,
    /// With --record: also record a world snapshot every N verified ticks (where `replay
    /// --seek` can start from); 0 = none.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "record")]
    pub snapshot_every: u32,
}

/// The simulated link of the in-process network modes (the same both ways).
#[derive(Debug, Clone, Args)]
pub struct LinkArgs {
    /// Round-trip time of the simulated link, ms (half of it each way).
    #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub rtt_ms: u32,
    /// Round-trip jitter of the simulated link, ms (half of it each way).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub net_jitter_ms: u32,
    /// Packet loss of the simulated link in each direction, percent (0–100).
    #[arg(long, default_value_t = 2.0)]
    pub loss_percent: f64,
}

/// `sandbox local`.
#[derive(Debug, Clone, Args)]
pub struct LocalArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub session: SessionArgs,
    /// Ticks from sampling an input to its confirmation by the local relay, for every player.
    #[arg(long, default_value_t = 6)]
    pub input_latency_ticks: u32,
    /// Extra random confirmation delay in 0..=N ticks per input (seeded).
    #[arg(long, default_value_t = 0)]
    pub jitter_ticks: u32,
}

/// `sandbox network` (and `sandbox` without a subcommand).
#[derive(Debug, Clone, Args)]
pub struct NetworkArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub session: SessionArgs,
    #[command(flatten)]
    pub link: LinkArgs,
    /// Plant a desync: client 0's simulation nudges player 0's body at this tick. Both clients
    /// write desync dumps, the relay names the component; compare the dumps with `diff`.
    #[arg(long, value_name = "TICK", value_parser = clap::value_parser!(u32).range(1..=1_000_000_000))]
    pub plant_desync: Option<u32>,
    /// An authoritative relay: it runs the verified world itself (the same game, from the
    /// confirmed inputs), judges every client's checksum against it (with --plant-desync only
    /// client 0 is named) and resyncs a desynced client from its snapshot.
    #[arg(long)]
    pub authoritative: bool,
    /// Write desync dumps into this directory [default with --plant-desync: desync-dumps].
    #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath)]
    pub dump_dir: Option<PathBuf>,
    /// Late join: the relay gets one slot more than --players and starts with --players; a
    /// further client joins the running session once the others verified TICK, loads a
    /// snapshot served by one of them, and must agree from its first verified tick.
    #[arg(long, value_name = "TICK", value_parser = clap::value_parser!(u32).range(1..))]
    pub late_join_at: Option<u32>,
}

/// `sandbox diff`.
#[derive(Debug, Clone, Args)]
pub struct DiffArgs {
    /// The first dump file.
    #[arg(value_hint = ValueHint::FilePath)]
    pub a: PathBuf,
    /// The second dump file.
    #[arg(value_hint = ValueHint::FilePath)]
    pub b: PathBuf,
}

/// Flags of the ownership runs.
#[derive(Debug, Clone, Args)]
pub struct OwnershipArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub link: LinkArgs,
    /// Scene file (RON) [default: assets/scenes/sandbox.ron].
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub scene: Option<PathBuf>,
    /// The participants' scripted actions (RON) [default: assets/traces/ownership_three.ron].
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub trace: Option<PathBuf>,
    /// Participants in this process (the scene needs that many player spawns).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..))]
    pub participants: u8,
    /// Seconds to run after the script stops, before comparing copies (longer while bodies
    /// other than avatars are still owned, up to 20 s more).
    #[arg(long, default_value_t = 2.0, value_parser = parse_settle_seconds)]
    pub settle_seconds: f64,
    /// Send every body absolute, without acknowledgements (ownership rule 20 off), to compare
    /// the bytes with deltas against acknowledged states.
    #[arg(long)]
    pub no_delta: bool,
    /// The entity server runs its physics host (ownership rule 21): a Rapier world of the
    /// scene simulating the bodies nobody owns, for everyone, and refusing impossible owner
    /// states (rule 22).
    #[arg(long)]
    pub physics_host: bool,
    /// The last participant leaves at this scripted tick (its connection dropped), leaving
    /// what it owns as orphans: with --physics-host the server flies them for everyone.
    #[arg(long, value_name = "TICK")]
    pub leave_at: Option<u32>,
}

/// `sandbox hybrid`.
#[derive(Debug, Clone, Args)]
pub struct HybridArgs {
    /// Ticks of the trace (64 per second; the players stand still after them while the props
    /// settle).
    #[arg(long, default_value_t = 640, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub ticks: u32,
    /// Also write the summary as JSON to this file.
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub summary_json: Option<PathBuf>,
    /// Print only results and errors.
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub link: LinkArgs,
    /// Players (2–4; the scene needs that many player spawns). Each player's App is also an
    /// ownership participant.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=4))]
    pub players: u8,
    /// Props: the scene's pile bodies first, then more of their shapes in rows on the ground.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=5_000))]
    pub props: u32,
    /// Scene file (RON) [default: assets/scenes/sandbox.ron]: its ground, ramps and players
    /// are the players' world, its piles the props' shapes.
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub scene: Option<PathBuf>,
    /// The players' input trace (RON) [default: assets/traces/two_players.ron]: player `p`
    /// plays the trace's player `p mod` its players; each press of push grabs the nearest
    /// prop within reach, or throws the one held.
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub trace: Option<PathBuf>,
    /// Do not compare predicted ticks with verified ones (the comparison costs a state hash per
    /// predicted tick).
    #[arg(long)]
    pub no_verify_predictions: bool,
    /// Seconds to run after the trace stops, before comparing the props' copies (longer
    /// while props are still owned and moving, up to 5 s more).
    #[arg(long, default_value_t = 2.0, value_parser = parse_settle_seconds)]
    pub settle_seconds: f64,
}

/// `sandbox serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to bind (e.g. 127.0.0.1:5000).
    #[arg(long, value_name = "ADDR")]
    pub bind: SocketAddr,
    /// Run the ownership entity server instead of the deterministic session's relay server.
    #[arg(long)]
    pub ownership: bool,
    #[command(flatten)]
    pub run: RunArgs,
    /// Relay server: players to wait for (every `join` must give the same --players).
    #[arg(long, default_value_t = 2, conflicts_with = "ownership", value_parser = clap::value_parser!(u8).range(1..))]
    pub players: u8,
    /// Relay server: start once this many players joined (default: --players); the other
    /// slots are taken later by `join`s, which load a snapshot of the running session.
    #[arg(long, conflicts_with = "ownership", value_parser = clap::value_parser!(u8).range(1..))]
    pub start_players: Option<u8>,
    /// Relay server: matches to play on the same connections, each to --ticks: after each but
    /// the last the relay opens the next (a lobby; every player keeps its slot, every `join`
    /// rebuilds its session from tick 0), after the last it ends the match. Every `join` gives
    /// the same --matches.
    #[arg(long, default_value_t = 1, conflicts_with = "ownership", value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub matches: u32,
    /// With --ownership: participants of the session (bodies are numbered from it, so every
    /// `join --ownership` must give the same --participants).
    #[arg(long, default_value_t = 3, requires = "ownership", value_parser = clap::value_parser!(u8).range(1..))]
    pub participants: u8,
    /// With --ownership: scene file (RON) [default: assets/scenes/sandbox.ron].
    #[arg(long, value_name = "PATH", requires = "ownership", value_hint = ValueHint::FilePath)]
    pub scene: Option<PathBuf>,
    /// With --ownership: seconds to keep serving after --ticks.
    #[arg(long, default_value_t = 2.0, requires = "ownership", value_parser = parse_settle_seconds)]
    pub settle_seconds: f64,
}

/// `sandbox join`.
#[derive(Debug, Clone, Args)]
pub struct JoinArgs {
    /// Address of the server started with `serve` [default with --token: the token's first
    /// server address].
    #[arg(long, value_name = "ADDR", required_unless_present = "token")]
    pub connect: Option<SocketAddr>,
    /// Connect with this connect token file (`simsync-server token ... --out FILE`, or a
    /// matchmaker's): the dedicated server's room and slot it names. Without it, `join`
    /// connects unsecured (what `sandbox serve` takes).
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub token: Option<PathBuf>,
    /// Join an ownership entity server (`serve --ownership`) as one participant.
    #[arg(long)]
    pub ownership: bool,
    #[command(flatten)]
    pub run: RunArgs,
    /// Scene file (RON) [default: assets/scenes/sandbox.ron].
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub scene: Option<PathBuf>,
    /// Input trace (RON) [default: assets/traces/two_players.ron], or with --ownership the
    /// participants' script [default: assets/traces/ownership_three.ron].
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub trace: Option<PathBuf>,
    /// Players in the session (the server's --players).
    #[arg(long, default_value_t = 2, conflicts_with = "ownership", value_parser = clap::value_parser!(u8).range(1..))]
    pub players: u8,
    /// Do not compare predicted ticks with verified ones.
    #[arg(long, conflicts_with = "ownership")]
    pub no_verify_predictions: bool,
    /// With --ownership: participants of the session (the server's --participants).
    #[arg(long, default_value_t = 3, requires = "ownership", value_parser = clap::value_parser!(u8).range(1..))]
    pub participants: u8,
    /// With --ownership: which participant of the script to play (0-based, below
    /// --participants).
    #[arg(long, default_value_t = 0, requires = "ownership")]
    pub participant_index: u8,
    /// With --ownership: seconds to run after the script stops.
    #[arg(long, default_value_t = 2.0, requires = "ownership", value_parser = parse_settle_seconds)]
    pub settle_seconds: f64,
    /// Matches to play on the same connection, each to --ticks (the server's --matches): the
    /// client prints each match's summary, then waits in the relay's lobby for the next.
    #[arg(long, default_value_t = 1, conflicts_with = "ownership", value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub matches: u32,
    /// Take player slot SLOT of a running session again with its reconnect TOKEN (printed by
    /// the `join` that held the slot).
    #[arg(long, value_name = "SLOT:TOKEN", conflicts_with = "ownership", value_parser = parse_rejoin)]
    pub rejoin: Option<RejoinArg>,
    /// Record this client's verified ticks to this replay file.
    #[arg(long, value_name = "FILE", conflicts_with = "ownership", value_hint = ValueHint::FilePath)]
    pub record: Option<PathBuf>,
    /// Plant a desync at this tick in this client's game (a wrong physics step): the relay
    /// names it; an authoritative room (`host --authoritative`) resyncs it, and the join then
    /// counts as agreeing. Desync dumps go to --dump-dir (default desync-dumps/).
    #[arg(long, value_name = "TICK", conflicts_with = "ownership")]
    pub plant_desync: Option<u32>,
    /// Write desync dumps into this directory when the relay reports a desync, this client's
    /// or another player's (the desynced tick and the tick before it; compare two clients'
    /// dumps with `diff`) [default with --plant-desync: desync-dumps].
    #[arg(long, value_name = "DIR", conflicts_with = "ownership", value_hint = ValueHint::DirPath)]
    pub dump_dir: Option<PathBuf>,
    /// With --record: also record a world snapshot every N verified ticks; 0 = none.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "record")]
    pub snapshot_every: u32,
}

impl JoinArgs {
    /// Where this client writes its desync dumps: `--dump-dir`, else `desync-dumps` with
    /// `--plant-desync`, else nowhere (no dumps).
    pub fn dump_dir(&self) -> Option<PathBuf> {
        self.dump_dir
            .clone()
            .or_else(|| self.plant_desync.map(|_| PathBuf::from(DEFAULT_DUMP_DIR)))
    }
}

/// `sandbox host`.
#[derive(Debug, Clone, Args)]
pub struct HostArgs {
    /// UDP address of the rooms (what `join --token` connects to).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7000")]
    pub bind: SocketAddr,
    /// The address players reach the rooms at, which the connect tokens name [default: --bind].
    /// Needed when --bind is 0.0.0.0 (all interfaces): e.g. `--bind 0.0.0.0:7000 --public-addr
    /// 192.168.1.20:7000` for players on the local network.
    #[arg(long, value_name = "ADDR")]
    pub public_addr: Option<SocketAddr>,
    /// HTTP address of the probes, metrics and admin API (its bearer token: see
    /// --admin-token-file).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7080")]
    pub ops: SocketAddr,
    /// File holding the admin API's bearer token (surrounding whitespace ignored). Without it,
    /// a random token is made and written to `admin.token` in the --tokens directory.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub admin_token_file: Option<PathBuf>,
    /// Players of the room (every `join` gives the same --players).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..))]
    pub players: u8,
    /// The room runs the sandbox's verified world itself: its checksum judges desyncs, its
    /// snapshot serves joiners, and a desynced client is resynced from it.
    #[arg(long)]
    pub authoritative: bool,
    /// Directory the connect tokens are written to (`slot0.token`, `slot1.token`, ...; and two
    /// spares a slot, `slot0-rejoin1.token`, for a client that dropped to take its slot again).
    #[arg(long, value_name = "DIR", default_value = "tokens", value_hint = ValueHint::DirPath)]
    pub tokens: PathBuf,
    /// Scene file (RON) of the authoritative world [default: assets/scenes/sandbox.ron].
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub scene: Option<PathBuf>,
    /// Seconds a token stays valid.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub token_seconds: u64,
    /// Print only results and errors.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `sandbox replay FILE`.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The replay file (written by --record).
    #[arg(value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub file: PathBuf,
    /// Start at this tick: from the recorded snapshot nearest at or before it (every tick from
    /// there on is still checked), or from the start without one.
    #[arg(long, value_name = "TICK")]
    pub seek: Option<i32>,
    /// Scene file (RON) the replay was recorded with [default: assets/scenes/sandbox.ron].
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub scene: Option<PathBuf>,
    /// Ticks simulated per update (a larger batch plays faster).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=512))]
    pub ticks_per_update: u32,
    /// Threads of Bevy's task pools (the systems' executor) [default: one per core]; the
    /// checksums must not depend on it (scripts/determinism.sh plays a replay with 1 and more).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: Option<u16>,
    /// Print only results and errors.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `join --rejoin SLOT:TOKEN`: a player slot and its reconnect token (decimal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RejoinArg {
    /// The player slot.
    pub slot: u8,
    /// The slot's reconnect token.
    pub token: u64,
}

/// Parses `SLOT:TOKEN`, both decimal.
fn parse_rejoin(text: &str) -> Result<RejoinArg, String> {
    let (slot, token) = text
        .split_once(':')
        .ok_or_else(|| format!("`{text}` is not SLOT:TOKEN"))?;
    Ok(RejoinArg {
        slot: slot
            .parse()
            .map_err(|_| format!("`{slot}` is not a player slot (0..=255)"))?,
        token: token
            .parse()
            .map_err(|_| format!("`{token}` is not a reconnect token (a decimal u64)"))?,
    })
}

impl Cli {
    /// The mode to run: the subcommand, or `network` with the top-level flags.
    pub fn into_command(self) -> Command {
        self.command.unwrap_or(Command::Network(self.network))
    }
}

impl Command {
    /// Parses `args` (the program name first).
    ///
    /// # Errors
    /// clap's error for unknown, malformed or contradictory flags (its exit code is 2), or the
    /// help and version texts (exit code 0).
    pub fn try_parse_from<T: Into<OsString> + Clone>(
        args: impl IntoIterator<Item = T>,
    ) -> Result<Command, clap::Error> {
        Cli::try_parse_from(args).map(Cli::into_command)
    }

    /// Parses the process's arguments; on an error prints it (with a hint for the flags of
    /// earlier versions) and exits with clap's code (2 for a usage error).
    pub fn parse() -> Command {
        let args: Vec<OsString> = std::env::args_os().collect();
        match Self::try_parse_from(&args) {
            Ok(command) => command,
            Err(error) => {
                let _ = error.print();
                if error.use_stderr()
                    && let Some(hint) = legacy_hint(&args)
                {
                    eprintln!("\n{hint}");
                }
                std::process::exit(error.exit_code());
            }
        }
    }
}

/// How to write a command line of earlier versions (`--mode`, `--server`, `--client`), if `args`
/// holds one of their flags.
pub fn legacy_hint(args: &[OsString]) -> Option<&'static str> {
    let legacy = args.iter().any(|a| {
        a.to_str().is_some_and(|a| {
            matches!(a, "--mode" | "--server" | "--client") || a.starts_with("--mode=")
        })
    });
    legacy.then_some(
        "The modes are subcommands now: `--mode local` is `sandbox local`, `--mode ownership` is \
         `sandbox ownership`, `--server --bind ADDR` is `sandbox serve --bind ADDR`, \
         `--client --connect ADDR` is `sandbox join --connect ADDR` (add --ownership to either \
         for ownership mode). `sandbox help <MODE>` lists a mode's flags.",
    )
}

/// The environment variable naming the sandbox's `assets/` directory (the repository's, or a
/// copy shipped next to a binary).
pub const ASSETS_ENV: &str = "SIMSYNC_SANDBOX_ASSETS";

/// Directories above the executable searched for `assets/` (the executable of
/// `target/release/examples/sandbox` is three below the repository root).
const EXE_LEVELS: usize = 4;

/// Where the default assets are looked for, besides the current directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssetPlaces {
    /// [`ASSETS_ENV`]: an `assets/` directory.
    pub assets_dir: Option<PathBuf>,
    /// `CARGO_MANIFEST_DIR` at run time (`cargo run` sets it): the repository root.
    pub manifest_dir: Option<PathBuf>,
    /// The running executable.
    pub exe: Option<PathBuf>,
    /// The repository the executable was built from (`CARGO_MANIFEST_DIR` at build time).
    pub built_from: Option<PathBuf>,
}

impl AssetPlaces {
    /// The places of this process: its environment, its executable, its build.
    pub fn of_process() -> Self {
        Self {
            assets_dir: std::env::var_os(ASSETS_ENV).map(PathBuf::from),
            manifest_dir: std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from),
            exe: std::env::current_exe().ok(),
            built_from: Some(PathBuf::from(env!("CARGO_MANIFEST_DIR"))),
        }
    }
}

/// Every path repository file `relative` (`assets/...`) is looked for at, in order, without
/// repeats: under [`ASSETS_ENV`]'s directory (`relative` without its `assets/`), relative to
/// the current directory, under `CARGO_MANIFEST_DIR`, under each of the [`EXE_LEVELS`]
/// directories above the executable, under the checkout it was built from.
pub fn asset_candidates(relative: &str, places: &AssetPlaces) -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(dir) = &places.assets_dir {
        let inside = relative.strip_prefix("assets/").unwrap_or(relative);
        candidates.push(dir.join(inside));
    }
    candidates.push(PathBuf::from(relative));
    if let Some(dir) = &places.manifest_dir {
        candidates.push(dir.join(relative));
    }
    if let Some(exe) = &places.exe {
        let above = exe.ancestors().skip(1).take(EXE_LEVELS);
        candidates.extend(above.map(|dir| dir.join(relative)));
    }
    if let Some(dir) = &places.built_from {
        candidates.push(dir.join(relative));
    }
    let mut seen = std::collections::BTreeSet::new();
    candidates.retain(|path| seen.insert(path.clone()));
    candidates
}

/// The first of [`asset_candidates`] that is a file.
pub fn default_asset(relative: &str, places: &AssetPlaces) -> Option<PathBuf> {
    asset_candidates(relative, places)
        .into_iter()
        .find(|p| p.is_file())
}

/// The file to read: `given` if the command line named one, else the repository file
/// `default` (relative to the repository root) looked up at run time ([`asset_candidates`]
/// with this process's [`AssetPlaces`]).
///
/// # Errors
/// A message naming `default`, every place searched, [`ASSETS_ENV`] and `flag` when the
/// default is nowhere.
pub fn asset_path(given: Option<&Path>, default: &str, flag: &str) -> Result<PathBuf, String> {
    if let Some(path) = given {
        return Ok(path.to_path_buf());
    }
    let places = AssetPlaces::of_process();
    default_asset(default, &places).ok_or_else(|| {
        let looked: Vec<String> = asset_candidates(default, &places)
            .iter()
            .map(|p| format!("  {}", p.display()))
            .collect();
        format!(
            "cannot find {default}; looked at:\n{}\nset {ASSETS_ENV} to the repository's assets/ \
             directory, run from the repository root, or give {flag} PATH",
            looked.join("\n")
        )
    })
}

/// The admin token in the text of a token file: the text without surrounding whitespace.
///
/// # Errors
/// A message when nothing is left (an empty token would leave the admin API open).
pub fn admin_token_from(text: &str) -> Result<String, String> {
    let token = text.trim();
    if token.is_empty() {
        Err("the admin token file is empty".into())
    } else {
        Ok(token.to_string())
    }
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
