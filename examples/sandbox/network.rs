//! The networked modes of the sandbox: a relay server and clients over renet.
//!
//! - `sandbox network` (the default): a relay server and `--players` clients as separate Apps in
//!   this process, over the in-memory transport with a link conditioner (`--rtt-ms`,
//!   `--net-jitter-ms`, `--loss-percent`). Every client simulates both worlds; the run checks
//!   that every client recorded the same verified checksums.
//! - `sandbox serve --bind ADDR --players N` and `sandbox join --connect ADDR`: the same over UDP
//!   as separate processes, paced at the tick rate in real time.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bevy::prelude::*;
use serde_json::{Value, json};
use simsync::deterministic::NetworkSessionConfig;
use simsync::deterministic::SessionSetupError;
use simsync::prelude::*;
use simsync::relay::{DeterministicServerPlugin, RelayServer, SnapshotServing};
use simsync_net::prelude::*;
use simsync_net::{
    ClientTransport, LinkConditionerConfig, MemoryNetwork, NETCODE_PROTOCOL_ID, NetClock,
    ReconnectToken, ServerTransport, UdpClientTransport, UdpServerConfig, UdpServerTransport,
};

use bevy::log::LogPlugin;

use super::cli::{NetworkArgs, RunArgs};
use super::driver::{Failure, log_plugin};
use super::game::{self, SandboxGame};
use super::replay::Recording;
use super::trace::CompiledTrace;

/// Tick rate of every peer (Hz).
const HZ: u32 = 64;

#[derive(Resource, Clone, Copy)]
struct StopAt(i32);

fn stop_at(stop: Res<StopAt>, mut ctx: ResMut<SimulatorContext>) {
    let remaining = (stop.0 - ctx.verified_from_tick()).max(0);
    if ctx.ticks_to_verify() > remaining {
        let _ = ctx.set_ticks_to_verify(remaining);
    }
}

/// What a client's session needs besides the game and the trace.
#[derive(Debug, Clone)]
pub struct ClientSession {
    /// Write desync dumps into this directory (`--dump-dir`).
    pub dump_dir: Option<std::path::PathBuf>,
    /// Players in the session (the relay server's count).
    pub players: u8,
    /// Compare predicted ticks with verified ones.
    pub verify_predictions: bool,
    /// Take this slot again with its reconnect token (`join --rejoin`).
    pub rejoin: Option<ReconnectToken>,
}

/// A headless client App (`MinimalPlugins`, optional log output) of `session`, finished.
///
/// # Errors
/// Exit code 2 when the session configuration is rejected.
fn client_app(
    session: ClientSession,
    ticks: u32,
    game: SandboxGame,
    trace: CompiledTrace,
    transport: ClientTransport,
    name: String,
    log: Option<LogPlugin>,
) -> Result<App, Failure> {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    if let Some(log) = log {
        app.add_plugins(log);
    }
    add_client(&mut app, session, ticks, game, trace, transport, name);
    app.finish();
    app.cleanup();
    check_client(&app)?;
    Ok(app)
}

/// Adds a client of `session` to `app`, which brings Bevy's base plugins (headless or
/// rendered): the session plugin, the network client over `transport`, the trace as its input
/// source and the stop at verified tick `ticks`. The caller finishes the app.
pub fn add_client(
    app: &mut App,
    session: ClientSession,
    ticks: u32,
    game: SandboxGame,
    trace: CompiledTrace,
    transport: ClientTransport,
    name: String,
) {
    let entities = game.entity_count() + 256;
    let mut plugin = DeterministicPlugin::<PackedInput>::new(game)
        .config(SessionConfig {
            checksum_interval: 1,
            clock: SessionClock::Stepped {
                ticks_per_update: 1,
            },
            verify_predictions: session.verify_predictions,
            max_simulation_entities: entities,
            ..Default::default()
        })
        .players(session.players)
        .snapshots(simsync::deterministic::SnapshotLimits::default())
        .networked(NetworkSessionConfig {
            name,
            rejoin: session.rejoin,
            snapshots: true,
            ..NetworkSessionConfig::default()
        });
    if let Some(dir) = &session.dump_dir {
        plugin = plugin.debugging(simsync::deterministic::DebugConfig::with_desync_dumps(
            dir.clone(),
        ));
    }
    app.add_plugins(NetClientPlugin::default().with_clock(NetClock::fixed_hz(HZ)))
        .add_plugins(plugin)
        .insert_net_client(transport)
        .insert_resource(TickInputSource::<PackedInput>::new(move |player, tick| {
            game::encode(&trace.input(player, tick))
        }))
        .insert_resource(StopAt(ticks as i32))
        .add_systems(BeforeVerification, stop_at);
    super::setup_check::watch(app);
}

/// Whether the client session of `app` (finished and cleaned up) was set up.
///
/// # Errors
/// Exit code 2 when the session configuration was rejected.
pub fn check_client(app: &App) -> Result<(), Failure> {
    if let Some(SessionSetupError(error)) = app.world().get_resource::<SessionSetupError>() {
        return Err(Failure::input(format!(
            "invalid session configuration: {error}"
        )));
    }
    Ok(())
}

/// The relay of `players` slots, starting once `start_players` are taken; it serves snapshots
/// (late joiners, rejoins after its history is gone).
fn server_app(
    players: u8,
    start_players: u8,
    transport: ServerTransport,
    log: Option<LogPlugin>,
) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    if let Some(log) = log {
        app.add_plugins(log);
    }
    app.add_plugins(NetServerPlugin::default().with_clock(NetClock::fixed_hz(HZ)))
        .add_plugins(
            DeterministicServerPlugin::new::<PackedInput>(players, HZ as u16)
                .start_players(start_players)
                .snapshots(SnapshotServing::default())
                .header_reader(simsync::relay::read_snapshot_header),
        )
        .insert_net_server(transport);
    app.finish();
    app.cleanup();
    app
}

fn stats(app: &App) -> SessionStats {
    app.world().resource::<SessionStats>().clone()
}

fn final_checksum(world: &mut World) -> u64 {
    world.resource_mut::<SimulationWorlds>().verified_checksum()
}

/// One client's part of the summary.
fn client_summary(world: &mut World, compared: usize, mismatches: usize) -> Value {
    let s = world.resource::<SessionStats>().clone();
    let net = s.network.clone().unwrap_or_default();
    json!({
        "slot": net.slot,
        "ticks_verified": s.ticks_verified,
        "ticks_predicted": s.ticks_predicted,
        "rollbacks": s.rollbacks,
        "resimulated_ticks": s.resimulated_ticks,
        "mispredicted_inputs": s.mispredicted_inputs,
        "rtt_ms": (net.rtt_ms * 10.0).round() / 10.0,
        "input_delay_ticks": net.input_delay_ticks,
        "late_inputs": net.late_inputs,
        "replaced_inputs": net.replaced_inputs,
        "checksums_compared": compared,
        "checksum_mismatches": mismatches,
        "desyncs_reported": net.desyncs_reported,
        "resim_ticks_checked": s.resim_ticks_checked,
        "resim_ticks_matching": s.resim_ticks_matching,
        "first_verified_tick": s.checksum_history.first().map(|c| c.tick),
        "snapshots_loaded": net.snapshots.loaded,
        "snapshots_served": net.snapshots.served,
        "final_checksum": format!("{:016x}", final_checksum(world)),
    })
}

/// Mismatches of `mine` against every other history, compared tick by tick where both hold
/// the tick (a late joiner's history starts at its first verified tick); and how many ticks
/// were compared.
fn mismatches_by_tick(
    mine: &[simsync::deterministic::TickChecksum],
    all: &[Vec<simsync::deterministic::TickChecksum>],
) -> (usize, usize) {
    let (mut compared, mut mismatches) = (0, 0);
    for other in all {
        let index: std::collections::HashMap<i32, u64> =
            other.iter().map(|c| (c.tick, c.checksum)).collect();
        for c in mine {
            if let Some(theirs) = index.get(&c.tick) {
                compared += 1;
                mismatches += usize::from(*theirs != c.checksum);
            }
        }
    }
    (compared / all.len().max(1), mismatches)
}

fn write_json(path: &Path, value: &Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Failure::run(e.to_string()))?;
    std::fs::write(path, text + "\n")
        .map_err(|e| Failure::input(format!("{}: cannot write: {e}", path.display())))
}

/// The in-process network of `sandbox network` before its clients join: the link, the relay
/// App and the clients' session settings.
pub struct InProcessNetwork {
    /// The in-memory transport with the link conditioner of `--rtt-ms`, `--net-jitter-ms` and
    /// `--loss-percent`.
    pub network: MemoryNetwork,
    /// The relay server (headless, finished).
    pub server: App,
    /// What every client's session needs besides the game and the trace.
    pub session: ClientSession,
}

impl InProcessNetwork {
    /// The network and relay of `args` (one more slot with `--late-join-at`).
    ///
    /// # Errors
    /// Exit code 2 for a bad link configuration; 1 if the transport cannot be made.
    pub fn new(args: &NetworkArgs, log: Option<LogPlugin>) -> Result<Self, Failure> {
        let link_args = &args.link;
        let players = args.session.players;
        let dump_dir = args.dump_dir.clone().or_else(|| {
            args.plant_desync
                .map(|_| std::path::PathBuf::from("desync-dumps"))
        });
        let slots = players + u8::from(args.late_join_at.is_some());
        let session = ClientSession {
            players: slots,
            verify_predictions: !args.session.no_verify_predictions,
            rejoin: None,
            dump_dir,
        };
        let link = LinkConditionerConfig::PERFECT
            .with_latency(link_args.rtt_ms / 2, link_args.net_jitter_ms / 2)
            .with_loss(link_args.loss_percent);
        let network =
            MemoryNetwork::new(0x51_u64, link).map_err(|e| Failure::input(format!("link: {e}")))?;
        let server_transport = network
            .server_transport()
            .map_err(|e| Failure::run(e.to_string()))?;
        let server = server_app(slots, players, server_transport.into(), log);
        Ok(Self {
            network,
            server,
            session,
        })
    }

    /// The transport of client `id` (0-based; the late joiner's is the last slot).
    ///
    /// # Errors
    /// Exit code 1 if the in-memory network refuses it.
    pub fn client_transport(&self, id: u8) -> Result<ClientTransport, Failure> {
        self.network
            .client_transport(u64::from(id) + 1)
            .map(Into::into)
            .map_err(|e| Failure::run(e.to_string()))
    }

    /// Headless client `id`, simulating `game`, fed by `trace`, stopping at `ticks`.
    ///
    /// # Errors
    /// As [`InProcessNetwork::client_transport`]; exit code 2 when the session configuration is
    /// rejected.
    pub fn client(
        &self,
        id: u8,
        ticks: u32,
        game: SandboxGame,
        trace: CompiledTrace,
        name: String,
    ) -> Result<App, Failure> {
        let transport = self.client_transport(id)?;
        client_app(
            self.session.clone(),
            ticks,
            game,
            trace,
            transport,
            name,
            None,
        )
    }
}

/// The game client `id` simulates: `--plant-desync` nudges client 0's simulation only.
pub fn client_game(args: &NetworkArgs, game: &SandboxGame, id: u8) -> SandboxGame {
    match args.plant_desync {
        Some(tick) if id == 0 => game.clone().with_planted_desync(tick as i32),
        _ => game.clone(),
    }
}

/// Runs the relay server and every client in this process over the in-memory transport.
///
/// # Errors
/// Exit code 2 for a bad link configuration; 1 if the clients do not reach the tick, disagree
/// on a checksum, or a prediction mismatched.
pub fn run_in_process(
    args: &NetworkArgs,
    game: SandboxGame,
    trace: CompiledTrace,
) -> Result<bool, Failure> {
    let (run, link_args) = (&args.run, &args.link);
    let players = args.session.players;
    let slots = players + u8::from(args.late_join_at.is_some());
    let mut net = InProcessNetwork::new(args, Some(log_plugin(run.quiet)))?;
    let mut clients = Vec::new();
    for id in 0..players {
        clients.push(net.client(
            id,
            run.ticks,
            client_game(args, &game, id),
            trace.clone(),
            format!("client-{id}"),
        )?);
    }
    let record = Recording::from_args(args.session.record.as_deref(), args.session.snapshot_every);
    if let (Some(record), Some(client)) = (&record, clients.first_mut()) {
        record.start(client)?;
    }
    if !run.quiet {
        println!(
            "network: relay server + {} clients in-process, RTT {} ms, jitter {} ms, loss {} %",
            players, link_args.rtt_ms, link_args.net_jitter_ms, link_args.loss_percent
        );
    }
    let target = run.ticks as i32;
    let limit = u64::from(run.ticks) * 4 + 10_000;
    let start = Instant::now();
    let mut last_report = start;
    let mut frames = 0u64;
    let mut late_join = args.late_join_at.map(|tick| tick as i32);
    let mut joined_at = None;
    while late_join.is_some() || !clients.iter().all(|c| stats(c).verified_tick >= target) {
        if let Some(at) = late_join
            && clients.iter().all(|c| stats(c).verified_tick >= at)
        {
            clients.push(net.client(
                slots - 1,
                run.ticks,
                game.clone(),
                trace.clone(),
                "late-joiner".into(),
            )?);
            late_join = None;
            joined_at = Some(stats(&clients[0]).verified_tick);
            if !run.quiet {
                println!("network: a client joins the running session at verified tick {at}");
            }
        }
        if frames >= limit {
            return Err(Failure::run(format!(
                "clients at verified ticks {:?} of {target} after {frames} frames; giving up",
                clients
                    .iter()
                    .map(|c| stats(c).verified_tick)
                    .collect::<Vec<_>>()
            )));
        }
        net.server.update();
        for client in &mut clients {
            client.update();
            if let Some(message) = super::setup_check::failure(client) {
                return Err(Failure::input(message));
            }
        }
        frames += 1;
        if !run.quiet && last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            let line: Vec<String> = clients
                .iter()
                .map(|c| {
                    let s = stats(c);
                    let net = s.network.unwrap_or_default();
                    format!(
                        "verified {} predicted {} rtt {:.0} ms",
                        s.verified_tick, s.predicted_tick, net.rtt_ms
                    )
                })
                .collect();
            println!(
                "[{:5.1} s] {}",
                start.elapsed().as_secs_f64(),
                line.join(" | ")
            );
        }
    }
    if let (Some(record), Some(client)) = (&record, clients.first_mut()) {
        record.finish(client, run.quiet)?;
    }
    // Every client's verified checksums, compared with every other client's.
    let mut worlds: Vec<&mut World> = clients.iter_mut().map(App::world_mut).collect();
    report(
        args,
        net.server.world(),
        &mut worlds,
        joined_at,
        net.session.dump_dir.as_deref(),
        start.elapsed(),
    )
}

/// Prints the summary of an in-process network run (and writes it with `--summary-json`):
/// every client's counters (`clients`, in slot order) and verified checksums compared with
/// every other client's, and the relay's counters. `Ok(true)` when every client agreed and
/// every prediction matched.
///
/// # Errors
/// Exit code 2 if the summary file cannot be written.
pub fn report(
    args: &NetworkArgs,
    server: &World,
    clients: &mut [&mut World],
    joined_at: Option<i32>,
    dump_dir: Option<&Path>,
    elapsed: Duration,
) -> Result<bool, Failure> {
    let (run, link_args) = (&args.run, &args.link);
    let players = args.session.players;
    let histories: Vec<_> = clients
        .iter()
        .map(|c| c.resource::<SessionStats>().checksum_history.clone())
        .collect();
    let mut summaries = Vec::new();
    let mut agree = true;
    let mut predictions_ok = true;
    for (i, client) in clients.iter_mut().enumerate() {
        let (compared, mismatches) = mismatches_by_tick(&histories[i], &histories);
        agree &= mismatches == 0 && compared > 0;
        let s = client.resource::<SessionStats>();
        predictions_ok &= s.resim_ticks_matching == s.resim_ticks_checked;
        summaries.push(client_summary(client, compared, mismatches));
    }
    let finals: Vec<&Value> = summaries.iter().map(|s| &s["final_checksum"]).collect();
    agree &= finals.windows(2).all(|w| w[0] == w[1]);
    let relay = server.resource::<simsync::relay::RelayStats>().clone();
    let summary = json!({
        "mode": "network",
        "ticks": run.ticks,
        "players": players,
        "rtt_ms_configured": link_args.rtt_ms,
        "jitter_ms_configured": link_args.net_jitter_ms,
        "loss_percent_configured": link_args.loss_percent,
        "late_join_at": joined_at,
        "clients": summaries,
        "all_clients_agree": agree,
        "server": {
            "confirmed_tick": relay.confirmed_tick,
            "replaced_inputs": relay.replaced_inputs,
            "late_inputs": relay.late_inputs,
            "rejected_messages": relay.rejected_messages,
            "desyncs": relay.desyncs,
            "desync_report": relay.last_desync_report.as_ref().map(|r| json!({
                "tick": r.tick,
                "players": r.players,
                "components": r.components,
                "slots": r.slots,
            })),
            "late_joins": relay.late_joins,
            "snapshots_served": relay.snapshots.served,
            "snapshot_bytes_forwarded": relay.snapshots.bytes_forwarded,
            "lying_snapshots": relay.snapshots.lying,
        },
        "desync_dumps": dump_files(dump_dir),
        "elapsed_s": (elapsed.as_secs_f64() * 100.0).round() / 100.0,
    });
    println!(
        "summary (network mode, {} clients, {} ticks)",
        players, run.ticks
    );
    println!(
        "{}",
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    );
    println!("all_clients_agree: {agree}");
    if let Some(report) = &relay.last_desync_report {
        println!(
            "desync at tick {}: components {:?}, slots {:?}, players {:?}",
            report.tick, report.components, report.slots, report.players
        );
    }
    let dumps = dump_files(dump_dir);
    if dumps.len() >= 2 {
        println!("compare the dumps: sandbox diff {} {}", dumps[0], dumps[1]);
    }
    if let Some(path) = &run.summary_json {
        write_json(path, &summary)?;
    }
    Ok(agree && predictions_ok)
}

/// The dump files in `dir`, sorted (none without a directory).
fn dump_files(dir: Option<&Path>) -> Vec<String> {
    let Some(Ok(entries)) = dir.map(std::fs::read_dir) else {
        return Vec::new();
    };
    let mut files: Vec<String> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "simdump"))
        .map(|p| p.display().to_string())
        .collect();
    files.sort();
    files
}

/// `sandbox diff A B`: compares two desync dumps; `Ok(true)` when they hold the same state.
///
/// # Errors
/// Exit code 2 when a file cannot be read or decoded, or the dumps are of different games.
pub fn run_diff(a: &Path, b: &Path) -> Result<bool, Failure> {
    use simsync::deterministic::{DEFAULT_MAX_DUMP_BYTES, diff_dumps};
    let read = |path: &Path| {
        simsync::deterministic::read_dump_file(path, DEFAULT_MAX_DUMP_BYTES)
            .map_err(|e| Failure::input(format!("{}: {e}", path.display())))
    };
    let (da, db) = (read(a)?, read(b)?);
    let diff = diff_dumps(&da, &db).map_err(|e| Failure::input(e.to_string()))?;
    println!("a: {}", a.display());
    println!("b: {}", b.display());
    print!("{diff}");
    Ok(diff.is_empty())
}

/// Paces a loop at the tick rate in real time.
struct Pacer {
    next: Instant,
}

impl Pacer {
    fn new() -> Self {
        Self {
            next: Instant::now(),
        }
    }

    fn wait(&mut self) {
        self.next += Duration::from_nanos(1_000_000_000 / u64::from(HZ));
        let now = Instant::now();
        if self.next > now {
            std::thread::sleep(self.next - now);
        } else if now - self.next > Duration::from_millis(250) {
            self.next = now;
        }
    }
}

/// `sandbox serve --bind ADDR`: the relay server over UDP, until every player acknowledged the
/// requested tick (or left).
///
/// # Errors
/// Exit code 2 if the address cannot be bound; 1 if the session never completes.
pub fn run_server(
    run: &RunArgs,
    players: u8,
    start_players: u8,
    bind: SocketAddr,
) -> Result<bool, Failure> {
    let transport = UdpServerTransport::bind(UdpServerConfig::unsecure(bind))
        .map_err(|e| Failure::input(format!("--bind {bind}: {e}")))?;
    if !run.quiet {
        println!(
            "server: listening on {} for {} players",
            transport.local_addr(),
            players
        );
    }
    let mut app = server_app(
        players,
        start_players,
        transport.into(),
        Some(log_plugin(run.quiet)),
    );
    let mut pacer = Pacer::new();
    let target = run.ticks as i32;
    let limit =
        Instant::now() + Duration::from_secs(u64::from(run.ticks) / u64::from(HZ) * 4 + 300);
    loop {
        app.update();
        let relay = app.world().resource::<RelayServer>();
        if relay.started() {
            match relay.acknowledged_through() {
                Some(ack) if ack >= target => break,
                None => break,
                _ => {}
            }
        }
        if Instant::now() > limit {
            return Err(Failure::run("server: the session did not complete in time"));
        }
        pacer.wait();
    }
    let relay = app.world().resource::<simsync::relay::RelayStats>().clone();
    let summary = json!({
        "mode": "server",
        "ticks": run.ticks,
        "players": players,
        "confirmed_tick": relay.confirmed_tick,
        "replaced_inputs": relay.replaced_inputs,
        "late_inputs": relay.late_inputs,
        "rejected_messages": relay.rejected_messages,
        "desyncs": relay.desyncs,
        "late_joins": relay.late_joins,
        "snapshots_served": relay.snapshots.served,
        "lying_snapshots": relay.snapshots.lying,
        "all_clients_agree": relay.desyncs == 0,
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    );
    if let Some(path) = &run.summary_json {
        write_json(path, &summary)?;
    }
    // Give the clients a moment to receive the last sets before the server goes away.
    for _ in 0..HZ {
        app.update();
        pacer.wait();
    }
    Ok(relay.desyncs == 0)
}

/// A client whose connection is lost for good (every reconnect attempt failed, or it could
/// not reconnect) fails the run (exit code 1) with the lifecycle's reason, instead of idling.
fn lost_for_good(app: &App) -> Result<(), Failure> {
    let lifecycle = app
        .world()
        .resource::<simsync::deterministic::SessionLifecycle>();
    if lifecycle.state != simsync::deterministic::SessionState::Disconnected {
        return Ok(());
    }
    let why = match &lifecycle.reason {
        Some(simsync::deterministic::SessionStateReason::ReconnectFailed { attempts }) => {
            format!("the connection was lost and {attempts} reconnect attempts failed")
        }
        other => format!("the connection was lost ({other:?})"),
    };
    Err(Failure::run(format!(
        "client: disconnected from the server: {why}"
    )))
}

/// `sandbox join --connect ADDR`: one client over UDP, until its verified world reaches the
/// tick.
///
/// # Errors
/// Exit code 2 if the socket cannot be opened; 1 if the run does not complete, or the
/// connection is lost for good (after the reconnect attempts).
pub fn run_client(
    run: &RunArgs,
    session: ClientSession,
    game: SandboxGame,
    trace: CompiledTrace,
    server: SocketAddr,
    record: Option<Recording>,
) -> Result<bool, Failure> {
    let client_id =
        std::process::id() as u64 ^ (Instant::now().elapsed().as_nanos() as u64) ^ 0x5eed;
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().expect("valid")
    } else {
        "[::]:0".parse().expect("valid")
    };
    let transport = UdpClientTransport::unsecure(server, client_id, NETCODE_PROTOCOL_ID, bind)
        .map_err(|e| Failure::input(format!("--connect {server}: {e}")))?;
    let mut app = client_app(
        session,
        run.ticks,
        game,
        trace,
        transport.into(),
        format!("client-{client_id:x}"),
        Some(log_plugin(run.quiet)),
    )?;
    if let Some(record) = &record {
        record.start(&mut app)?;
    }
    let target = run.ticks as i32;
    let mut pacer = Pacer::new();
    let limit =
        Instant::now() + Duration::from_secs(u64::from(run.ticks) / u64::from(HZ) * 4 + 300);
    let mut last_report = Instant::now();
    let mut token_shown = None;
    while stats(&app).verified_tick < target {
        if Instant::now() > limit {
            return Err(Failure::run(format!(
                "client: verified tick {} of {target}; giving up",
                stats(&app).verified_tick
            )));
        }
        app.update();
        if let Some(message) = super::setup_check::failure(&app) {
            return Err(Failure::input(message));
        }
        if let Some(reason) = stats(&app).network.and_then(|n| n.rejected) {
            return Err(Failure::run(format!(
                "client: rejected by the server: {reason:?}"
            )));
        }
        lost_for_good(&app)?;
        let token = stats(&app).network.and_then(|n| n.reconnect_token);
        if token != token_shown {
            token_shown = token;
            if let (Some(t), false) = (token, run.quiet) {
                println!(
                    "client: player {}; to take this slot again after a drop: sandbox join \
                     --connect {server} --rejoin {}:{}",
                    t.slot, t.slot, t.token
                );
            }
        }
        if !run.quiet && last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            let s = stats(&app);
            let net = s.network.unwrap_or_default();
            println!(
                "client: verified {} predicted {} rtt {:.0} ms delay {} ticks",
                s.verified_tick, s.predicted_tick, net.rtt_ms, net.input_delay_ticks
            );
        }
        pacer.wait();
    }
    if let Some(record) = &record {
        record.finish(&mut app, run.quiet)?;
    }
    let s = stats(&app);
    let compared = s.checksum_history.len();
    let mismatches = s.network.as_ref().map_or(0, |n| n.desyncs_reported) as usize;
    let mut summary = client_summary(app.world_mut(), compared, mismatches);
    summary["mode"] = json!("client");
    summary["ticks"] = json!(run.ticks);
    println!(
        "{}",
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    );
    if let Some(path) = &run.summary_json {
        write_json(path, &summary)?;
    }
    // Keep sending for a moment so the server sees our acknowledgement.
    for _ in 0..HZ / 2 {
        app.update();
        pacer.wait();
    }
    Ok(mismatches == 0 && s.resim_ticks_matching == s.resim_ticks_checked)
}
