//! Load test of the dedicated server over loopback UDP: many relay rooms of fake players and
//! ownership rooms of fake participants ([`simsync_loadgen`]) against one
//! `simsync-server` process, whose CPU time is read from `/proc` alone. Prints a JSON summary:
//! the server's CPU share of one core, the relay-tick quantiles from its `/metrics`, bytes per
//! client each way, every refusal, drop, disconnect and desync, and the confirmed-tick progress
//! of every player against the tick rate. See `docs/load.md`.
//!
//! ```text
//! cargo build --ignore-rust-version --release -p simsync_server
//! cargo build --ignore-rust-version --release -p simsync_loadgen --example load
//! target/release/examples/load run --relay-rooms 250 --duration 60
//! target/release/examples/load run --relay-rooms 0 --ownership-rooms 20 --bodies 200
//! ```
//!
//! `run` starts the server as a child process (built from the same workspace, next to this
//! example: `target/release/simsync-server`); `clients` drives a server started otherwise.
//!
//! The server measured is the binary `cargo build --release -p simsync_server` ships: this
//! example lives in its own crate, so building it never rebuilds that binary with other
//! features, and the summary shows the server's build profile (`simsync_build_info`) with a
//! warning when it is a debug build. Where the machine has 4 or more usable cores, `run` pins
//! the server to the first half and this driver to the rest (`taskset`; `--server-cpus`,
//! `--driver-cpus` choose), and prints the server's CPU per worker thread
//! (`server.workers`); `--workers N` sets the server's worker threads.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};
use simsync_loadgen::affinity::{CpuSet, Placement, allowed_cpus};
use simsync_loadgen::report::{
    Metrics, Spread, UdpCounters, read_cpu_ticks, read_machine_ticks, read_thread_ticks,
};
use simsync_loadgen::{
    ClientPhase, LoadClient, OwnershipCounters, OwnershipLoadClient, OwnershipLoadSpec,
    RelayCounters, RelayLoadClient, RelayLoadSpec, Traffic, ownership_room_config,
    relay_room_config,
};
use simsync_net::renet_netcode::ConnectToken;
use simsync_server::{RoomConfig, RoomId, TokenClaims, TokenMinter, key_to_hex, parse_key};

/// Load test of simsync-server: fake relay players and ownership participants over loopback
/// UDP; prints a JSON summary.
#[derive(Debug, Parser)]
#[command(name = "load")]
struct Cli {
    #[command(subcommand)]
    command: Mode,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Start simsync-server as a child process, drive it, stop it.
    Run(RunArgs),
    /// Drive a server started otherwise (its admin API makes the rooms).
    Clients(ClientsArgs),
}

#[derive(Debug, Clone, Args)]
struct LoadArgs {
    /// Relay rooms.
    #[arg(long, default_value_t = 250)]
    relay_rooms: u64,
    /// Players per relay room.
    #[arg(long, default_value_t = 4)]
    players: u8,
    /// Ownership rooms.
    #[arg(long, default_value_t = 0)]
    ownership_rooms: u64,
    /// Participants per ownership room.
    #[arg(long, default_value_t = 4)]
    participants: u8,
    /// Moving bodies per ownership room (shared out among its participants).
    #[arg(long, default_value_t = 200)]
    bodies: u64,
    /// Tick rate of every room, Hz.
    #[arg(long, default_value_t = 64)]
    tick_rate: u16,
    /// Seconds measured (after the warm-up).
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Seconds between every client running and the measured window.
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// Threads the fake clients are spread over.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Client frames per second (each frame: receive, answer, send).
    #[arg(long, default_value_t = 64.0)]
    client_hz: f64,
    /// Steps per client frame: each step frames one slice of the clients, so their datagrams
    /// spread over the frame as independent clients' would, not in one burst.
    #[arg(long, default_value_t = 8)]
    slices: u32,
    /// A relay checksum every this many verified ticks (60: the deterministic client's
    /// default `checksum_interval`; 1: every tick).
    #[arg(long, default_value_t = 60)]
    checksum_every: u32,
    /// New connections per second while connecting.
    #[arg(long, default_value_t = 250.0)]
    connect_rate: f64,
    /// Seconds to wait for every client to run before measuring anyway.
    #[arg(long, default_value_t = 30.0)]
    join_timeout: f64,
    /// The first room id (rooms are numbered from it).
    #[arg(long, default_value_t = 1_000)]
    first_room: u64,
    /// The driver's cores (the fake clients' threads), a `taskset -c` list [default: see
    /// `run --server-cpus`; `clients` pins the driver only when this is given].
    #[arg(long, value_name = "LIST", value_parser = CpuSet::parse)]
    driver_cpus: Option<CpuSet>,
    /// Also write the JSON summary to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// The server binary [default: simsync-server next to this example's directory].
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// The server's main-loop rate, turns per second.
    #[arg(long, default_value_t = 250)]
    loop_hz: u32,
    /// The server's worker threads (`simsync-server --workers`) [default: the server's, one
    /// per core it may use].
    #[arg(long)]
    workers: Option<usize>,
    /// The server's cores, a `taskset -c` list such as `0-3` [default: on a machine with 4
    /// or more usable cores the server gets the first half and the driver the rest; with
    /// fewer, both share every core].
    #[arg(long, value_name = "LIST", value_parser = CpuSet::parse)]
    server_cpus: Option<CpuSet>,
    /// The server's log filter (RUST_LOG).
    #[arg(long, default_value = "info")]
    server_log_level: String,
    /// Where the server's log goes [default: a file in the run's temporary directory].
    #[arg(long)]
    server_log: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ClientsArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// The server's UDP address (as tokens name it).
    #[arg(long)]
    udp: SocketAddr,
    /// The server's HTTP address (admin API and /metrics).
    #[arg(long)]
    ops: SocketAddr,
    /// The admin token.
    #[arg(long)]
    admin_token: String,
    /// File holding the server's private key (64 hexadecimal digits).
    #[arg(long)]
    key_file: PathBuf,
    /// The server's process id, to read its CPU time from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
}

/// The server under load.
struct Target {
    udp: SocketAddr,
    ops: SocketAddr,
    admin_token: String,
    key: [u8; 32],
    pid: Option<u32>,
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Mode::Run(args) => run(args),
        Mode::Clients(args) => clients(args),
    };
    match result {
        Ok(summary) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&summary).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("load: {message}");
            ExitCode::FAILURE
        }
    }
}

fn clients(args: ClientsArgs) -> Result<Value, String> {
    let hex = std::fs::read_to_string(&args.key_file)
        .map_err(|e| format!("{}: {e}", args.key_file.display()))?;
    let target = Target {
        udp: args.udp,
        ops: args.ops,
        admin_token: args.admin_token,
        key: parse_key(&hex).map_err(|e| e.to_string())?,
        pid: args.server_pid,
    };
    let placement = place(None, args.load.driver_cpus.clone(), false)?;
    let mut summary = drive(&args.load, &target)?;
    add_placement(&mut summary, &placement);
    write_out(&args.load, &summary)?;
    Ok(summary)
}

fn run(args: RunArgs) -> Result<Value, String> {
    let dir = std::env::temp_dir().join(format!("simsync-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let key = simsync_net::generate_private_key();
    let admin_token = key_to_hex(&simsync_net::generate_private_key());
    let key_file = dir.join("private_key");
    let admin_file = dir.join("admin_token");
    std::fs::write(&key_file, key_to_hex(&key)).map_err(|e| e.to_string())?;
    std::fs::write(&admin_file, &admin_token).map_err(|e| e.to_string())?;
    let placement = place(
        args.server_cpus.clone(),
        args.load.driver_cpus.clone(),
        true,
    )?;
    let udp = free_udp()?;
    let ops = free_tcp()?;
    let log = server_log(&args, &key_file);
    let bin = args
        .server_bin
        .clone()
        .map_or_else(default_server_bin, Ok)?;
    let mut child = start_server(
        &bin,
        &args,
        &placement,
        [&key_file, &admin_file],
        (udp, ops),
    )?;
    eprintln!(
        "load: server {} (pid {}) on udp {udp}, http {ops}; log {}",
        bin.display(),
        child.id(),
        log.display()
    );
    let target = Target {
        udp,
        ops,
        admin_token,
        key,
        pid: Some(child.id()),
    };
    let result = wait_ready(ops, &mut child, &log).and_then(|()| drive(&args.load, &target));
    stop_server(&mut child);
    let mut summary = result?;
    summary["server"]["log"] = json!(log.display().to_string());
    summary["server"]["binary"] = json!(bin.display().to_string());
    summary["server"]["loop_hz"] = json!(args.loop_hz);
    summary["server"]["workers_asked"] = json!(args.workers);
    add_placement(&mut summary, &placement);
    write_out(&args.load, &summary)?;
    Ok(summary)
}

fn write_out(load: &LoadArgs, summary: &Value) -> Result<(), String> {
    if let Some(path) = &load.out {
        let text = serde_json::to_string_pretty(summary).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn free_udp() -> Result<SocketAddr, String> {
    let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    socket.local_addr().map_err(|e| e.to_string())
}

fn free_tcp() -> Result<SocketAddr, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.local_addr().map_err(|e| e.to_string())
}

/// `target/<profile>/simsync-server` for this example at `target/<profile>/examples/load`.
fn default_server_bin() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    exe.parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("simsync-server"))
        .ok_or_else(|| "no directory above this executable: pass --server-bin".into())
}

/// Starts `bin serve` on `udp` and `ops`, on the placement's server cores (through `taskset`,
/// which runs the server in its own process: the child's pid is the server's), logging to
/// `args.server_log` or a file next to the key.
fn start_server(
    bin: &Path,
    args: &RunArgs,
    placement: &Placement,
    [key_file, admin_file]: [&PathBuf; 2],
    (udp, ops): (SocketAddr, SocketAddr),
) -> Result<Child, String> {
    let log = server_log(args, key_file);
    let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut command = match &placement.server {
        Some(cores) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cores.to_string()]).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    command.arg("serve");
    if let Some(workers) = args.workers {
        command.args(["--workers", &workers.to_string()]);
    }
    command
        .args(["--bind", &udp.to_string(), "--ops-bind", &ops.to_string()])
        .arg("--private-key-file")
        .arg(key_file)
        .arg("--admin-token-file")
        .arg(admin_file)
        .args(["--max-clients", "1024", "--empty-room-timeout", "600"])
        .args([
            "--drain-timeout",
            "1",
            "--loop-hz",
            &args.loop_hz.to_string(),
        ])
        .env("RUST_LOG", &args.server_log_level)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))
}

/// Where the server's log goes: `--server-log`, or `server.log` next to the key file.
fn server_log(args: &RunArgs, key_file: &Path) -> PathBuf {
    args.server_log.clone().unwrap_or_else(|| {
        key_file
            .parent()
            .unwrap_or(Path::new("."))
            .join("server.log")
    })
}

/// The run's placement ([`Placement::plan`]; `auto`: split when nothing is asked, as `run`
/// does), with this process — the driver — pinned to its cores.
fn place(server: Option<CpuSet>, driver: Option<CpuSet>, auto: bool) -> Result<Placement, String> {
    let asked = server.is_some() || driver.is_some();
    let placement = match allowed_cpus() {
        Ok(allowed) if asked || auto => {
            Placement::plan(&allowed, server, driver).map_err(|e| e.to_string())?
        }
        Err(e) if asked => return Err(format!("cannot pin cores: {e}")),
        Ok(allowed) => Placement {
            usable: allowed,
            server: None,
            driver: None,
        },
        Err(_) => Placement {
            usable: CpuSet::default(),
            server: None,
            driver: None,
        },
    };
    if let Some(cores) = &placement.driver {
        let pid = std::process::id().to_string();
        taskset(&["-a", "-p", "-c", &cores.to_string(), &pid])?;
    }
    Ok(placement)
}

/// Runs `taskset` (util-linux) with `args`.
fn taskset(args: &[&str]) -> Result<(), String> {
    let status = Command::new("taskset")
        .args(args)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("taskset (util-linux), to pin cores: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("taskset {} failed: {status}", args.join(" ")))
    }
}

/// Writes where the server and the driver ran into `summary["placement"]`, and a warning into
/// `summary["warnings"]` when they shared cores or the server is a debug build.
fn add_placement(summary: &mut Value, placement: &Placement) {
    let cores = |set: &Option<CpuSet>| set.as_ref().map_or("all".to_string(), CpuSet::to_string);
    summary["placement"] = json!({
        "usable_cores": (!placement.usable.is_empty()).then(|| placement.usable.to_string()),
        "server_cores": cores(&placement.server),
        "driver_cores": cores(&placement.driver),
    });
    let mut warnings = Vec::new();
    if !placement.is_split() {
        warnings.push(
            "the driver shared the server's cores: the server's CPU is its own, but its turn \
             times include waiting for cores the driver held"
                .to_string(),
        );
    }
    if summary["server"]["build"]["profile"] == "debug" {
        warnings.push("the server is a debug build: several times slower than release".into());
    }
    summary["warnings"] = json!(warnings);
}

/// SIGTERM (the drain), then SIGKILL after 10 s.
fn stop_server(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// Waits at most 15 s for the server's `/readyz`; a server that exits first (a refused
/// setting) ends the wait at once with its exit status and the last line of its log.
fn wait_ready(ops: SocketAddr, child: &mut Child, log: &Path) -> Result<(), String> {
    let agent = agent();
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            return Err(format!(
                "the server exited ({status}) before it was ready: {last} (log {})",
                log.display()
            ));
        }
        if let Ok(response) = agent.get(&format!("http://{ops}/readyz")).call()
            && response.status().as_u16() == 200
        {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(100));
    }
    Err(format!("the server at {ops} was not ready within 15 s"))
}

fn scrape(ops: SocketAddr) -> Result<Metrics, String> {
    let mut response = agent()
        .get(&format!("http://{ops}/metrics"))
        .call()
        .map_err(|e| format!("/metrics: {e}"))?;
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("/metrics: {e}"))?;
    Ok(Metrics::parse(&text))
}

/// A room to make and fill: its id and config.
struct RoomPlan {
    id: RoomId,
    config: RoomConfig,
}

fn plan_rooms(load: &LoadArgs) -> Vec<RoomPlan> {
    let relay = (0..load.relay_rooms).map(|i| RoomPlan {
        id: RoomId(load.first_room + i),
        config: relay_room_config(load.players, load.tick_rate),
    });
    let ownership = (0..load.ownership_rooms).map(|i| RoomPlan {
        id: RoomId(load.first_room + load.relay_rooms + i),
        config: ownership_room_config(load.participants, load.bodies, load.tick_rate),
    });
    relay.chain(ownership).collect()
}

fn create_rooms(target: &Target, rooms: &[RoomPlan]) -> Result<(), String> {
    let agent = agent();
    let url = format!("http://{}/rooms", target.ops);
    let auth = format!("Bearer {}", target.admin_token);
    for room in rooms {
        let mut body = serde_json::to_value(&room.config).map_err(|e| e.to_string())?;
        body["id"] = json!(room.id.0);
        let mut response = agent
            .post(&url)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| format!("POST /rooms: {e}"))?;
        if response.status().as_u16() != 201 {
            let text = response.body_mut().read_to_string().unwrap_or_default();
            return Err(format!("{} not made: {text}", room.id));
        }
    }
    Ok(())
}

/// One fake client to start: its room and slot, its token, and what it plays.
struct Job {
    room: RoomId,
    slot: u8,
    token: ConnectToken,
    kind: JobKind,
    /// Since the clients started, when it connects.
    connect_at: Duration,
}

enum JobKind {
    Relay(RelayLoadSpec),
    Ownership(OwnershipLoadSpec),
}

fn plan_jobs(
    load: &LoadArgs,
    rooms: &[RoomPlan],
    minter: &TokenMinter,
) -> Result<Vec<Job>, String> {
    let mut jobs = Vec::new();
    for room in rooms {
        for slot in 0..room.config.slots() {
            let client_id = room.id.0 * 64 + u64::from(slot) + 1;
            let claims = TokenClaims {
                room: room.id,
                slot,
            };
            let token = minter.mint(client_id, claims).map_err(|e| e.to_string())?;
            let kind = match &room.config {
                RoomConfig::Relay(relay) => JobKind::Relay(RelayLoadSpec {
                    checksum_every: load.checksum_every.max(1),
                    ..RelayLoadSpec::for_room(relay, room.id.0 as u32)
                }),
                RoomConfig::Ownership(ownership) => {
                    JobKind::Ownership(OwnershipLoadSpec::for_seat(ownership, slot))
                }
            };
            let connect_at =
                Duration::from_secs_f64(jobs.len() as f64 / load.connect_rate.max(1.0));
            jobs.push(Job {
                room: room.id,
                slot,
                token,
                kind,
                connect_at,
            });
        }
    }
    Ok(jobs)
}

/// A fake client of either kind.
enum Fake {
    Relay(Box<RelayLoadClient>),
    Ownership(Box<OwnershipLoadClient>),
}

/// A fake client's counters of either kind.
#[derive(Clone)]
enum Counters {
    Relay(RelayCounters),
    Ownership(OwnershipCounters),
}

impl Fake {
    fn start(job: Job) -> Result<Self, String> {
        let bind: SocketAddr = "127.0.0.1:0".parse().expect("a socket address");
        Ok(match job.kind {
            JobKind::Relay(spec) => Fake::Relay(Box::new(
                RelayLoadClient::connect(job.token, bind, spec).map_err(|e| e.to_string())?,
            )),
            JobKind::Ownership(spec) => Fake::Ownership(Box::new(
                OwnershipLoadClient::connect(job.token, bind, spec).map_err(|e| e.to_string())?,
            )),
        })
    }

    /// The client's frame, phase and close, whichever kind it is.
    fn client(&self) -> &dyn LoadClient {
        match self {
            Fake::Relay(c) => c.as_ref(),
            Fake::Ownership(c) => c.as_ref(),
        }
    }

    fn client_mut(&mut self) -> &mut dyn LoadClient {
        match self {
            Fake::Relay(c) => c.as_mut(),
            Fake::Ownership(c) => c.as_mut(),
        }
    }

    fn counters(&self) -> Counters {
        match self {
            Fake::Relay(c) => Counters::Relay(c.counters()),
            Fake::Ownership(c) => Counters::Ownership(c.counters()),
        }
    }
}

/// What the driver threads and the main thread share.
struct Shared {
    /// The measuring marks set so far (1: the window starts, 2: it ends).
    mark: AtomicU32,
    stop: AtomicBool,
    /// Per thread: its clients running now.
    running: Vec<AtomicUsize>,
    /// Per thread: its clients over (ended, refused, lost, or failed to start).
    over: Vec<AtomicUsize>,
}

/// One fake client's part of a thread's report.
struct ClientReport {
    room: RoomId,
    slot: u8,
    relay: bool,
    phase: ClientPhase,
    /// Its counters at each mark it saw: `(mark, counters)`.
    marks: Vec<(u32, Counters)>,
}

/// What a driver thread reports when stopped.
struct ThreadReport {
    clients: Vec<ClientReport>,
    /// When the thread saw each mark: `(mark, instant)`.
    mark_times: Vec<(u32, Instant)>,
    /// Steps run (a slice of the clients each).
    frames: u64,
    /// Steps that took longer than a step's time.
    late_frames: u64,
    max_frame: Duration,
}

/// A client slot of a driver thread.
struct Live {
    room: RoomId,
    slot: u8,
    relay: bool,
    client: Result<Fake, String>,
    marks: Vec<(u32, Counters)>,
    /// When it last took its frame.
    last: Instant,
}

impl Live {
    fn phase(&self) -> ClientPhase {
        match &self.client {
            Ok(client) => client.client().phase().clone(),
            Err(why) => ClientPhase::Lost(format!("not started: {why}")),
        }
    }
}

fn spawn_workers(
    load: &LoadArgs,
    jobs: Vec<Job>,
    shared: &Arc<Shared>,
) -> Vec<thread::JoinHandle<ThreadReport>> {
    let threads = load.threads.max(1);
    let mut parts: Vec<Vec<Job>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, job) in jobs.into_iter().enumerate() {
        parts[i % threads].push(job);
    }
    let slices = load.slices.max(1);
    let step = Duration::from_secs_f64(1.0 / load.client_hz.max(1.0) / f64::from(slices));
    let start = Instant::now();
    parts
        .into_iter()
        .enumerate()
        .map(|(index, part)| {
            let shared = Arc::clone(shared);
            thread::Builder::new()
                .name(format!("load-{index}"))
                .spawn(move || worker(index, part, &shared, (step, slices), start))
                .expect("a driver thread starts")
        })
        .collect()
}

/// Starts the jobs due at `now`.
fn connect_due(
    waiting: &mut std::collections::VecDeque<Job>,
    live: &mut Vec<Live>,
    now: Instant,
    start: Instant,
) {
    while waiting
        .front()
        .is_some_and(|job| job.connect_at <= now - start)
    {
        let job = waiting.pop_front().expect("a job is waiting");
        let (room, slot) = (job.room, job.slot);
        let relay = matches!(job.kind, JobKind::Relay(_));
        live.push(Live {
            room,
            slot,
            relay,
            client: Fake::start(job),
            marks: Vec::new(),
            last: now,
        });
    }
}

/// Runs this thread's clients: every `step`, one of `slices` slices of them takes its frame.
fn worker(
    index: usize,
    jobs: Vec<Job>,
    shared: &Shared,
    (step, slices): (Duration, u32),
    start: Instant,
) -> ThreadReport {
    let mut waiting: std::collections::VecDeque<Job> = jobs.into();
    let mut live: Vec<Live> = Vec::with_capacity(waiting.len());
    let mut report = ThreadReport {
        clients: Vec::new(),
        mark_times: Vec::new(),
        frames: 0,
        late_frames: 0,
        max_frame: Duration::ZERO,
    };
    let (mut next, mut seen_mark, mut turn) = (Instant::now(), 0, 0u32);
    while !shared.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        connect_due(&mut waiting, &mut live, now, start);
        let slice = turn % slices;
        for l in live
            .iter_mut()
            .skip(slice as usize)
            .step_by(slices as usize)
        {
            if let Ok(client) = &mut l.client {
                client.client_mut().frame(now - l.last);
            }
            l.last = now;
        }
        if slice == 0 {
            publish(shared, index, &live);
        }
        let mark = shared.mark.load(Ordering::Relaxed);
        if mark > seen_mark {
            seen_mark = mark;
            report.mark_times.push((mark, Instant::now()));
            for l in live.iter_mut() {
                if let Ok(client) = &l.client {
                    l.marks.push((mark, client.counters()));
                }
            }
        }
        turn = turn.wrapping_add(1);
        pace(&mut report, now, &mut next, step);
    }
    finish(report, live)
}

fn publish(shared: &Shared, index: usize, live: &[Live]) {
    let running = live
        .iter()
        .filter(|l| l.phase() == ClientPhase::Running)
        .count();
    let over = live.iter().filter(|l| l.phase().is_over()).count();
    shared.running[index].store(running, Ordering::Relaxed);
    shared.over[index].store(over, Ordering::Relaxed);
}

/// Counts the frame's time and sleeps until the next frame is due (at once when late).
fn pace(report: &mut ThreadReport, started: Instant, next: &mut Instant, period: Duration) {
    let spent = started.elapsed();
    report.frames += 1;
    report.max_frame = report.max_frame.max(spent);
    if spent > period {
        report.late_frames += 1;
    }
    *next += period;
    let now = Instant::now();
    if *next > now {
        thread::sleep(*next - now);
    } else {
        *next = now;
    }
}

fn finish(mut report: ThreadReport, live: Vec<Live>) -> ThreadReport {
    for mut l in live {
        let phase = l.phase();
        if let Ok(client) = &mut l.client {
            client.client_mut().close();
        }
        report.clients.push(ClientReport {
            room: l.room,
            slot: l.slot,
            relay: l.relay,
            phase,
            marks: l.marks,
        });
    }
    report
}

/// What is read from outside the clients at a mark.
struct Probe {
    at: Instant,
    metrics: Metrics,
    server_ticks: Option<u64>,
    server_threads: Vec<(u32, String, u64)>,
    driver_ticks: Option<u64>,
    /// The machine's `(busy, all)` CPU ticks.
    machine: Option<(u64, u64)>,
    udp: Option<UdpCounters>,
}

impl Probe {
    fn take(target: &Target) -> Result<Self, String> {
        let at = Instant::now();
        let server_ticks = target.pid.and_then(|pid| read_cpu_ticks(pid).ok());
        let driver_ticks = read_cpu_ticks(std::process::id()).ok();
        let server_threads = target
            .pid
            .and_then(|pid| read_thread_ticks(pid).ok())
            .unwrap_or_default();
        let udp = UdpCounters::read().ok();
        let machine = read_machine_ticks().ok();
        Ok(Self {
            machine,
            metrics: scrape(target.ops)?,
            at,
            server_ticks,
            server_threads,
            driver_ticks,
            udp,
        })
    }
}

fn drive(load: &LoadArgs, target: &Target) -> Result<Value, String> {
    let rooms = plan_rooms(load);
    create_rooms(target, &rooms)?;
    let minter = TokenMinter::new(target.key, vec![target.udp])
        .map_err(|e| e.to_string())?
        .expire_seconds(3_600);
    let jobs = plan_jobs(load, &rooms, &minter)?;
    let total = jobs.len();
    let threads = load.threads.max(1);
    let shared = Arc::new(Shared {
        mark: AtomicU32::new(0),
        stop: AtomicBool::new(false),
        running: (0..threads).map(|_| AtomicUsize::new(0)).collect(),
        over: (0..threads).map(|_| AtomicUsize::new(0)).collect(),
    });
    eprintln!(
        "load: {} rooms made; {total} clients over {threads} thread(s)",
        rooms.len()
    );
    let handles = spawn_workers(load, jobs, &shared);
    let joined = wait_running(&shared, total, load);
    thread::sleep(Duration::from_secs_f64(load.warmup.max(0.0)));
    let first = Probe::take(target);
    shared.mark.store(1, Ordering::Relaxed);
    eprintln!("load: measuring for {} s", load.duration);
    thread::sleep(Duration::from_secs_f64(load.duration.max(0.1)));
    let second = Probe::take(target);
    shared.mark.store(2, Ordering::Relaxed);
    thread::sleep(Duration::from_millis(300));
    shared.stop.store(true, Ordering::Relaxed);
    let reports: Vec<ThreadReport> = handles
        .into_iter()
        .map(|h| h.join().map_err(|_| "a driver thread panicked".to_string()))
        .collect::<Result<_, _>>()?;
    let (first, second) = (first?, second?);
    Ok(summarize(load, &rooms, &first, &second, &reports, joined))
}

/// Waits until every client runs (or is over), at most the ramp plus `join_timeout`; returns
/// how long it took, or `None` on the timeout.
fn wait_running(shared: &Shared, total: usize, load: &LoadArgs) -> Option<f64> {
    let started = Instant::now();
    let ramp = total as f64 / load.connect_rate.max(1.0);
    let deadline = started + Duration::from_secs_f64(ramp + load.join_timeout);
    let mut last_print = started;
    loop {
        let running: usize = shared
            .running
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum();
        let over: usize = shared.over.iter().map(|a| a.load(Ordering::Relaxed)).sum();
        if running + over >= total {
            eprintln!(
                "load: {running} running, {over} over, after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            return Some(started.elapsed().as_secs_f64());
        }
        if Instant::now() >= deadline {
            eprintln!("load: join timeout: {running} running, {over} over of {total}");
            return None;
        }
        if last_print.elapsed() >= Duration::from_secs(2) {
            last_print = Instant::now();
            eprintln!("load: {running} running, {over} over of {total}");
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Clock ticks per second of `/proc`'s CPU times (`getconf CLK_TCK`, else 100).
fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|hz| *hz > 0.0)
        .unwrap_or(100.0)
}

fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

fn spread_json(spread: Option<Spread>, digits: i32) -> Value {
    spread.map_or(Value::Null, |s| {
        json!({
            "min": round(s.min, digits),
            "median": round(s.median, digits),
            "mean": round(s.mean, digits),
            "max": round(s.max, digits),
        })
    })
}

fn summarize(
    load: &LoadArgs,
    rooms: &[RoomPlan],
    first: &Probe,
    second: &Probe,
    reports: &[ThreadReport],
    joined: Option<f64>,
) -> Value {
    let window = (second.at - first.at).as_secs_f64().max(1e-9);
    let clk = clock_ticks_per_second();
    let server = server_json(first, second, window, clk);
    let relay = relay_json(load, reports);
    let ownership = ownership_json(reports);
    let udp = match (&first.udp, &second.udp) {
        (Some(a), Some(b)) => json!(b.since(a)),
        _ => Value::Null,
    };
    let relayed = ownership["relayed_states_per_second"].as_f64();
    let per_core = match (relayed, server["cpu_share_of_one_core"].as_f64()) {
        (Some(states), Some(cpu)) if states > 0.0 && cpu > 0.0 => Some(round(states / cpu, 0)),
        _ => None,
    };
    let targets = json!({
        "relayed_states_per_server_core_second": per_core,
        "relayed_states_per_server_core_second_at_least_4m": per_core.map(|n| n >= 4.0e6),
        "server_cpu_share_at_most_one_core": server["cpu_share_of_one_core"].as_f64().map(|c| c <= 1.0),
        "relay_tick_p99_at_most_2_ms": server["relay_tick"]["p99_ms"].as_f64().map(|p| p <= 2.0),
        "clients_lost": relay["phases"]["lost"].as_u64().unwrap_or(0)
            + ownership["phases"]["lost"].as_u64().unwrap_or(0),
        "desyncs": server["desyncs"].clone(),
    });
    json!({
        "config": {
            "relay_rooms": load.relay_rooms,
            "players": load.players,
            "ownership_rooms": load.ownership_rooms,
            "participants": load.participants,
            "bodies": load.bodies,
            "tick_rate_hz": load.tick_rate,
            "clients": rooms.iter().map(|r| u64::from(r.config.slots())).sum::<u64>(),
            "client_hz": load.client_hz,
            "slices": load.slices.max(1),
            "checksum_every": load.checksum_every.max(1),
            "threads": load.threads.max(1),
            "warmup_seconds": load.warmup,
        },
        "window_seconds": round(window, 3),
        "all_clients_running_after_seconds": joined.map(|s| round(s, 2)),
        "targets": targets,
        "server": server,
        "kernel_udp_in_window": udp,
        "driver": driver_json(first, second, window, clk, reports),
        "relay": relay,
        "ownership": ownership,
    })
}

fn server_json(first: &Probe, second: &Probe, window: f64, clk: f64) -> Value {
    let (a, b) = (&first.metrics, &second.metrics);
    let delta = |name: &str, labels: &[(&str, &str)]| b.sum(name, labels) - a.sum(name, labels);
    let cpu = match (first.server_ticks, second.server_ticks) {
        (Some(x), Some(y)) => Some(round(y.saturating_sub(x) as f64 / clk / window, 4)),
        _ => None,
    };
    let refused: serde_json::Map<String, Value> = b
        .by_label("simsync_refused_total", "reason")
        .into_iter()
        .map(|(reason, n)| {
            let before = a.sum("simsync_refused_total", &[("reason", &reason)]);
            (reason, json!(n - before))
        })
        .collect();
    let rate_limited: serde_json::Map<String, Value> = b
        .by_label("simsync_rate_limited_total", "kind")
        .into_iter()
        .map(|(kind, n)| {
            let before = a.sum("simsync_rate_limited_total", &[("kind", &kind)]);
            (kind, json!(n - before))
        })
        .collect();
    let lag = b.by_label("simsync_room_tick_lag_ticks", "room");
    json!({
        "pid_cpu_seconds": cpu.map(|c| round(c * window, 2)),
        "cpu_share_of_one_core": cpu,
        "threads_cpu_share": threads_json(first, second, window, clk),
        "workers": workers_json(first, second, window, clk),
        "build": {
            "version": b.by_label("simsync_build_info", "version").keys().next(),
            "profile": b.by_label("simsync_build_info", "profile").keys().next(),
        },
        "relay_tick": histogram_json(first, second, "simsync_relay_tick_seconds", "room_updates_timed"),
        "loop_turn": histogram_json(first, second, "simsync_loop_turn_seconds", "turns_timed"),
        "room_update": histogram_json(first, second, "simsync_room_update_seconds", "room_updates_timed"),
        "refused_in_window": refused,
        "refused_total": b.sum("simsync_refused_total", &[]),
        "desyncs": b.sum("simsync_desyncs_total", &[]),
        "desyncs_in_window": delta("simsync_desyncs_total", &[]),
        "rejoins": b.sum("simsync_rejoins_total", &[]),
        "rate_limited_in_window": rate_limited,
        "resent_sets_in_window": delta("simsync_resent_sets_total", &[]),
        "packets_in_per_second": round(delta("simsync_packets_total", &[("direction", "in")]) / window, 1),
        "packets_out_per_second": round(delta("simsync_packets_total", &[("direction", "out")]) / window, 1),
        "payload_bytes_in_per_second": round(delta("simsync_bytes_total", &[("direction", "in")]) / window, 1),
        "payload_bytes_out_per_second": round(delta("simsync_bytes_total", &[("direction", "out")]) / window, 1),
        "clients_at_end": b.by_label("simsync_clients", "kind"),
        "rooms_running_at_end": b.by_label("simsync_rooms", "state"),
        "room_tick_lag_ticks_at_end": spread_json(Spread::of(lag.into_values()), 1),
    })
}

/// Per worker thread (`sim-worker-<i>`): its CPU share of one core from `/proc`, its busy
/// share from `simsync_worker_busy_seconds` (time running rooms over the window), and its live
/// rooms at the end.
fn workers_json(first: &Probe, second: &Probe, window: f64, clk: f64) -> Value {
    let busy_name = "simsync_worker_busy_seconds_total";
    let (a, b) = (&first.metrics, &second.metrics);
    let rooms = b.by_label("simsync_worker_rooms", "worker");
    let mut workers = serde_json::Map::new();
    for index in 0..simsync_server::MAX_WORKERS {
        let name = simsync_server::worker_thread_name(index);
        let label = index.to_string();
        let Some((tid, _, ticks)) = second.server_threads.iter().find(|(_, n, _)| *n == name)
        else {
            continue;
        };
        let before = first
            .server_threads
            .iter()
            .find(|(t, _, _)| t == tid)
            .map_or(0, |(_, _, b)| *b);
        let busy =
            b.sum(busy_name, &[("worker", &label)]) - a.sum(busy_name, &[("worker", &label)]);
        workers.insert(
            name,
            json!({
                "cpu_share": round(ticks.saturating_sub(before) as f64 / clk / window, 4),
                "busy_share": round(busy / window, 4),
                "rooms_at_end": rooms.get(&label),
            }),
        );
    }
    Value::Object(workers)
}

fn threads_json(first: &Probe, second: &Probe, window: f64, clk: f64) -> Value {
    let mut threads: Vec<(String, f64)> = second
        .server_threads
        .iter()
        .map(|(tid, name, ticks)| {
            let before = first
                .server_threads
                .iter()
                .find(|(t, _, _)| t == tid)
                .map_or(0, |(_, _, b)| *b);
            (
                format!("{name} ({tid})"),
                ticks.saturating_sub(before) as f64 / clk / window,
            )
        })
        .filter(|(_, share)| *share > 0.0)
        .collect();
    threads.sort_by(|x, y| y.1.total_cmp(&x.1));
    threads.truncate(8);
    Value::Object(
        threads
            .into_iter()
            .map(|(name, share)| (name, json!(round(share, 4))))
            .collect(),
    )
}

/// The quantiles of the histogram `name` (no labels) over the window, `count_key` naming what
/// it counted.
fn histogram_json(first: &Probe, second: &Probe, name: &str, count_key: &str) -> Value {
    let (Some(a), Some(b)) = (
        first.metrics.histogram(name),
        second.metrics.histogram(name),
    ) else {
        return Value::Null;
    };
    let h = b.since(&a);
    let ms = |v: Option<f64>| v.map(|s| round(s * 1_000.0, 4));
    let buckets: serde_json::Map<String, Value> = h
        .buckets
        .iter()
        .map(|(le, n)| (format!("le_{}ms", round(le * 1_000.0, 3)), json!(n)))
        .collect();
    json!({
        count_key: h.count,
        "p50_ms": ms(h.quantile(0.5)),
        "p90_ms": ms(h.quantile(0.9)),
        "p99_ms": ms(h.quantile(0.99)),
        "mean_ms": ms(h.mean()),
        "share_above_1_6_ms": h.share_above(0.0016),
        "share_above_3_2_ms": h.share_above(0.0032),
        "cumulative_buckets": buckets,
    })
}

fn driver_json(
    first: &Probe,
    second: &Probe,
    window: f64,
    clk: f64,
    reports: &[ThreadReport],
) -> Value {
    let cpu = match (first.driver_ticks, second.driver_ticks) {
        (Some(x), Some(y)) => Some(round(y.saturating_sub(x) as f64 / clk / window, 4)),
        _ => None,
    };
    let machine = match (first.machine, second.machine) {
        (Some((b1, _)), Some((b2, _))) => {
            Some(round(b2.saturating_sub(b1) as f64 / clk / window, 3))
        }
        _ => None,
    };
    json!({
        "cpu_share_of_one_core": cpu,
        "machine_busy_cores": machine,
        "machine_cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "threads": reports.len(),
        "steps": reports.iter().map(|r| r.frames).sum::<u64>(),
        "late_steps": reports.iter().map(|r| r.late_frames).sum::<u64>(),
        "longest_step_ms": reports
            .iter()
            .map(|r| round(r.max_frame.as_secs_f64() * 1_000.0, 2))
            .fold(0.0, f64::max),
    })
}

/// The seconds between a thread's marks 1 and 2.
fn thread_window(report: &ThreadReport) -> Option<f64> {
    let at = |mark| {
        report
            .mark_times
            .iter()
            .find(|(m, _)| *m == mark)
            .map(|(_, t)| *t)
    };
    Some((at(2)? - at(1)?).as_secs_f64())
}

/// The clients of one kind with their thread's window.
fn clients_of(reports: &[ThreadReport], relay: bool) -> Vec<(&ClientReport, Option<f64>)> {
    reports
        .iter()
        .flat_map(|r| {
            let window = thread_window(r);
            r.clients
                .iter()
                .filter(move |c| c.relay == relay)
                .map(move |c| (c, window))
        })
        .collect()
}

/// The final phases by name, and the reasons of those over.
fn phases_json(clients: &[(&ClientReport, Option<f64>)]) -> (Value, Value) {
    let mut phases = std::collections::BTreeMap::<&str, u64>::new();
    let mut reasons = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (client, _) in clients {
        *phases.entry(client.phase.name()).or_default() += 1;
        if let ClientPhase::Ended(why) | ClientPhase::Refused(why) | ClientPhase::Lost(why) =
            &client.phase
        {
            reasons
                .entry(format!("{}: {why}", client.phase.name()))
                .or_default()
                .push(format!("{}/{}", client.room.0, client.slot));
        }
    }
    let reasons: serde_json::Map<String, Value> = reasons
        .into_iter()
        .map(|(why, who)| {
            let shown: Vec<&String> = who.iter().take(8).collect();
            (
                why,
                json!({"count": who.len(), "room_slot_examples": shown}),
            )
        })
        .collect();
    (json!(phases), Value::Object(reasons))
}

/// Per client, its counters at marks 1 and 2 of kind `pick`, with the window.
fn measured<'a, T>(
    clients: &[(&'a ClientReport, Option<f64>)],
    pick: impl Fn(&'a Counters) -> Option<&'a T>,
) -> Vec<(&'a T, &'a T, f64)> {
    clients
        .iter()
        .filter_map(|(client, window)| {
            let at = |mark| {
                client
                    .marks
                    .iter()
                    .find(|(m, _)| *m == mark)
                    .map(|(_, c)| c)
            };
            Some((pick(at(1)?)?, pick(at(2)?)?, (*window)?))
        })
        .collect()
}

fn traffic_json(traffic: &[(Traffic, f64)]) -> Value {
    let per_s = |f: fn(&Traffic) -> u64| Spread::of(traffic.iter().map(|(t, w)| f(t) as f64 / w));
    json!({
        "udp_payload_bytes_down_per_second": spread_json(per_s(|t| t.bytes_down), 1),
        "udp_payload_bytes_up_per_second": spread_json(per_s(|t| t.bytes_up), 1),
        "wire_bytes_down_per_second_ipv4": spread_json(per_s(Traffic::wire_bytes_down), 1),
        "wire_bytes_up_per_second_ipv4": spread_json(per_s(Traffic::wire_bytes_up), 1),
        "datagrams_down_per_second": spread_json(per_s(|t| t.datagrams_down), 2),
        "datagrams_up_per_second": spread_json(per_s(|t| t.datagrams_up), 2),
        "send_errors": traffic.iter().map(|(t, _)| t.send_errors).sum::<u64>(),
    })
}

fn relay_json(load: &LoadArgs, reports: &[ThreadReport]) -> Value {
    let clients = clients_of(reports, true);
    let (phases, reasons) = phases_json(&clients);
    let m = measured(&clients, |c| match c {
        Counters::Relay(r) => Some(r),
        Counters::Ownership(_) => None,
    });
    let sum = |f: fn(&RelayCounters) -> u64| m.iter().map(|(s, e, _)| f(e) - f(s)).sum::<u64>();
    let total = |f: fn(&RelayCounters) -> u64| m.iter().map(|(_, e, _)| f(e)).sum::<u64>();
    let traffic: Vec<(Traffic, f64)> = m
        .iter()
        .map(|(s, e, w)| (e.traffic.since(&s.traffic), *w))
        .collect();
    let ticks = Spread::of(
        m.iter()
            .map(|(s, e, w)| f64::from(e.verified_tick - s.verified_tick) / w),
    );
    let pongs = total(|c| c.pongs);
    json!({
        "clients": clients.len(),
        "measured_clients": m.len(),
        "phases": phases,
        "over_reasons": reasons,
        "confirmed_ticks_per_second": spread_json(ticks, 2),
        "expected_ticks_per_second": load.tick_rate,
        "traffic_per_client": traffic_json(&traffic),
        "in_window": {
            "input_messages": sum(|c| c.input_messages),
            "checksums_sent": sum(|c| c.checksums_sent),
            "sets_received": sum(|c| c.sets_received),
            "own_inputs_replaced_late": sum(|c| c.own_inputs_replaced),
            "desync_messages": sum(|c| c.desyncs),
            "players_left_messages": sum(|c| c.players_left),
            "behind_messages": sum(|c| c.behind),
            "match_drops": sum(|c| c.match_drops),
            "send_refused": sum(|c| c.send_refused),
            "decode_errors": sum(|c| c.decode_errors),
        },
        "whole_run": {
            "own_inputs_replaced_late": total(|c| c.own_inputs_replaced),
            "desync_messages": total(|c| c.desyncs),
            "players_left_messages": total(|c| c.players_left),
            "players_rejoined_messages": total(|c| c.players_rejoined),
            "behind_messages": total(|c| c.behind),
            "send_refused": total(|c| c.send_refused),
        },
        "rtt_ms": {
            "mean": (pongs > 0).then(|| round(total(|c| c.rtt_ms_sum) as f64 / pongs as f64, 2)),
            "max": m.iter().map(|(_, e, _)| e.rtt_ms_max).max(),
        },
    })
}

fn ownership_json(reports: &[ThreadReport]) -> Value {
    let clients = clients_of(reports, false);
    let (phases, reasons) = phases_json(&clients);
    let m = measured(&clients, |c| match c {
        Counters::Ownership(o) => Some(o),
        Counters::Relay(_) => None,
    });
    let sum = |f: fn(&OwnershipCounters) -> u64| m.iter().map(|(s, e, _)| f(e) - f(s)).sum::<u64>();
    let total = |f: fn(&OwnershipCounters) -> u64| m.iter().map(|(_, e, _)| f(e)).sum::<u64>();
    let rate = |f: fn(&OwnershipCounters) -> u64| {
        Spread::of(m.iter().map(|(s, e, w)| (f(e) - f(s)) as f64 / w))
    };
    let traffic: Vec<(Traffic, f64)> = m
        .iter()
        .map(|(s, e, w)| (e.traffic.since(&s.traffic), *w))
        .collect();
    let pongs = total(|c| c.pongs);
    json!({
        "clients": clients.len(),
        "measured_clients": m.len(),
        "phases": phases,
        "over_reasons": reasons,
        "owned_bodies_at_end": spread_json(Spread::of(m.iter().map(|(_, e, _)| e.owned as f64)), 0),
        "bodies_sent_per_second": spread_json(rate(|c| c.bodies_sent), 1),
        "bodies_received_per_second": spread_json(rate(|c| c.bodies_received), 1),
        "relayed_states_per_second": round(
            m.iter().map(|(s, e, w)| (e.bodies_received - s.bodies_received) as f64 / w).sum(),
            0
        ),
        "relay_batches_received_per_second": spread_json(rate(|c| c.batches_received), 1),
        "traffic_per_client": traffic_json(&traffic),
        "in_window": {
            "refusals": sum(|c| c.refusals),
            "owner_changes": sum(|c| c.owner_changes),
            "batch_errors": sum(|c| c.batch_errors),
            "deltas_rejected": sum(|c| c.deltas_rejected),
            "acks_rejected": sum(|c| c.acks_rejected),
            "counted_silent": sum(|c| c.counted_silent),
            "send_refused": sum(|c| c.send_refused),
            "decode_errors": sum(|c| c.decode_errors),
        },
        "whole_run": {
            "grants": total(|c| c.grants),
            "refusals": total(|c| c.refusals),
            "counted_silent": total(|c| c.counted_silent),
            "resets": total(|c| c.resets),
        },
        "rtt_ms": {
            "mean": (pongs > 0).then(|| round(total(|c| c.rtt_ms_sum) as f64 / pongs as f64, 2)),
            "max": m.iter().map(|(_, e, _)| e.rtt_ms_max).max(),
        },
    })
}
