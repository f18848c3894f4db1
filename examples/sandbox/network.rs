//! The networked modes of the sandbox: a relay server and clients over renet.
//!
//! - `sandbox network` (the default): a relay server and `--players` clients as separate Apps in
//!   this process, over the in-memory transport with a link conditioner (`--rtt-ms`,
//!   `--net-jitter-ms`, `--loss-percent`). Every client simulates both worlds; the run checks
//!   that every client recorded the same verified checksums.
//! - `sandbox serve --bind ADDR --players N` and `sandbox join --connect ADDR`: the same over UDP
//!   as separate processes, paced at the tick rate in real time; with `--matches N` (both) the
//!   relay plays N matches on the same connections (lobby, match, lobby, match, ...).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bevy::prelude::*;
use serde_json::{Value, json};
use simsync::deterministic::NetworkSessionConfig;
use simsync::deterministic::SessionSetupError;
use simsync::prelude::*;
use simsync::relay::{
    DeterministicServerPlugin, MatchEndReason, MatchId, MatchPhase, RelayCommand, RelayServer,
    SnapshotServing,
};
use simsync::testing::{HarnessChecks, PeersError, RelayPeers, RunLimits, RunUntilError};
use simsync_net::prelude::*;
use simsync_net::{
    ClientTransport, LinkConditionerConfig, NetClock, NetTransportError, ReconnectToken,
    ServerTransport, UdpServerConfig, UdpServerTransport,
};

use bevy::log::LogPlugin;

use super::cli::{JoinArgs, NetworkArgs, RunArgs};
use super::driver::{Failure, load_session, log_plugin};
use super::game::{self, SandboxGame};
use super::link::ServerLink;
use super::replay::Recording;
use super::trace::CompiledTrace;

/// Tick rate of every peer (Hz).
pub const HZ: u32 = 64;

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

/// How a client's clocks advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientPacing {
    /// One tick and one tick of network time (1/64 s) per update: the caller paces the updates
    /// (the headless `join` sleeps between them; in-process runs step as fast as they can).
    Stepped,
    /// The wall clock: each update polls the ticks `Time<Real>` says have passed and the network
    /// clock follows it, whatever the frame rate (the rendered `join`, paced by its window).
    #[allow(dead_code)] // only the rendered sandbox runs on the wall clock
    RealTime,
}

/// A headless client App (`MinimalPlugins`, optional log output) of `session`, finished.
///
/// # Errors
/// Exit code 2 when the session configuration is rejected.
pub fn client_app(
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

/// An authoritative relay's world: the client plugin of `session` (every slot) simulating
/// `game`, run in lockstep by `simsync::authority::LockstepAuthority`.
///
/// # Errors
/// Exit code 1 when the game's world cannot serve the room (a type it cannot snapshot).
pub fn authority_factory(
    session: ClientSession,
    game: SandboxGame,
) -> Result<simsync::relay::AuthorityFactory, Failure> {
    let slots = session.players;
    let make = move || {
        client_plugin(
            &session,
            game.clone(),
            "authority".into(),
            ClientPacing::Stepped,
        )
    };
    simsync::authority::LockstepAuthority::factory::<PackedInput>(slots, Arc::new(make))
        .map_err(|e| Failure::run(format!("the authoritative room cannot be set up: {e}")))
}

/// The session plugin of a client of `session` simulating `game`, named `name`: the clock of
/// `pacing`, a checksum every tick, snapshots (late join), desync dumps when asked.
fn client_plugin(
    session: &ClientSession,
    game: SandboxGame,
    name: String,
    pacing: ClientPacing,
) -> DeterministicPlugin<PackedInput> {
    let entities = game.entity_count() + 256;
    let clock = match pacing {
        ClientPacing::Stepped => SessionClock::Stepped {
            ticks_per_update: 1,
        },
        ClientPacing::RealTime => SessionClock::RealTime,
    };
    let plugin = DeterministicPlugin::<PackedInput>::new(game)
        .config(SessionConfig {
            checksum_interval: 1,
            clock,
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
    match &session.dump_dir {
        Some(dir) => plugin.debugging(simsync::deterministic::DebugConfig::with_desync_dumps(
            dir.clone(),
        )),
        None => plugin,
    }
}

/// The trace as a client's input source.
fn trace_inputs(trace: CompiledTrace) -> TickInputSource<PackedInput> {
    TickInputSource::new(move |player, tick| game::encode(&trace.input(player, tick)))
}

/// What every client App of a run has besides its session: the stop at verified tick `ticks`
/// and the watch on registration errors.
fn add_stop_and_watch(app: &mut App, ticks: u32) {
    app.insert_resource(StopAt(ticks as i32))
        .add_systems(BeforeVerification, stop_at);
    super::setup_check::watch(app);
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
    let pacing = ClientPacing::Stepped;
    add_paced_client(app, session, ticks, game, transport, name, pacing);
    app.insert_resource(trace_inputs(trace));
}

/// Adds a client of `session` to `app` (which brings Bevy's base plugins) with the clocks of
/// `pacing`: the session plugin, the network client over `transport`, the stop at verified tick
/// `ticks` and the watches `join` reads (connect failures, desyncs told). Its input comes from
/// what the caller adds: a `TickInputSource`, or `LocalInputs` written each frame. The caller
/// finishes the app.
pub fn add_paced_client(
    app: &mut App,
    session: ClientSession,
    ticks: u32,
    game: SandboxGame,
    transport: ClientTransport,
    name: String,
    pacing: ClientPacing,
) {
    let clock = match pacing {
        ClientPacing::Stepped => NetClock::fixed_hz(HZ),
        ClientPacing::RealTime => NetClock::Real,
    };
    app.add_plugins(NetClientPlugin::default().with_clock(clock))
        .add_plugins(client_plugin(&session, game, name, pacing))
        .insert_net_client(transport)
        .init_resource::<ConnectFailureSeen>()
        .init_resource::<DesyncsTold>()
        .add_systems(Update, (keep_connect_failure, keep_desyncs));
    add_stop_and_watch(app, ticks);
}

/// One desync episode the relay told a client of: its own (`DesyncDetected`) or other
/// players' (`PlayerDesynced`, "player N desynced").
#[derive(Debug, Clone, PartialEq)]
struct DesyncTold {
    /// The first desynced tick of the episode.
    tick: i32,
    /// The players named, in slot order.
    players: Vec<u8>,
    /// Who judged it.
    judge: simsync::deterministic::DesyncJudge,
    /// Whether this client's own player is named.
    own: bool,
}

impl DesyncTold {
    /// The summary's entry: `{"tick", "players", "judge": "authority" | "majority", "own"}`.
    fn to_json(&self) -> Value {
        use simsync::deterministic::DesyncJudge;
        json!({
            "tick": self.tick,
            "players": self.players,
            "judge": match self.judge {
                DesyncJudge::Authority => "authority",
                DesyncJudge::Majority => "majority",
            },
            "own": self.own,
        })
    }

    /// What `join` prints for it.
    fn line(&self) -> String {
        let who = match self.players.as_slice() {
            [one] => format!("player {one}"),
            many => format!("players {many:?}"),
        };
        if self.own {
            format!(
                "{who} (this client) desynced at tick {}, judged by {}",
                self.tick, self.judge
            )
        } else {
            format!(
                "{who} desynced at tick {}, judged by {}; this client agrees with it",
                self.tick, self.judge
            )
        }
    }
}

/// Every desync episode the relay told this client of, in the order told (the summary's
/// `desyncs_told`).
#[derive(Resource, Default)]
struct DesyncsTold(Vec<DesyncTold>);

fn keep_desyncs(
    mut own: MessageReader<simsync::deterministic::DesyncDetected>,
    mut others: MessageReader<simsync::deterministic::PlayerDesynced>,
    mut told: ResMut<DesyncsTold>,
) {
    for d in own.read() {
        told.0.push(DesyncTold {
            tick: d.tick,
            players: d.players.clone(),
            judge: d.judge,
            own: true,
        });
    }
    for d in others.read() {
        told.0.push(DesyncTold {
            tick: d.tick,
            players: d.players.clone(),
            judge: d.judge,
            own: false,
        });
    }
}

/// The last [`simsync_net::ConnectFailure`] the client transport reported: a connection that
/// was never made names its possible causes when the client gives up.
#[derive(Resource, Default)]
struct ConnectFailureSeen(Option<simsync_net::ConnectFailure>);

fn keep_connect_failure(
    mut errors: MessageReader<NetTransportError>,
    mut seen: ResMut<ConnectFailureSeen>,
) {
    for error in errors.read() {
        if let NetError::ConnectFailed(failure) = &error.error {
            seen.0 = Some(*failure);
        }
    }
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
pub fn server_app(
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
        .add_plugins(relay_plugin(players, start_players, None))
        .insert_net_server(transport);
    app.finish();
    app.cleanup();
    app
}

/// The relay of `players` slots starting once `start_players` are taken, serving snapshots;
/// authoritative (resyncing desynced clients) with `authority`.
fn relay_plugin(
    players: u8,
    start_players: u8,
    authority: Option<simsync::relay::AuthorityFactory>,
) -> DeterministicServerPlugin {
    let relay = DeterministicServerPlugin::new::<PackedInput>(players, HZ as u16)
        .start_players(start_players)
        .snapshots(SnapshotServing::default())
        .header_reader(simsync::relay::read_snapshot_header);
    match authority {
        Some(make) => relay.authority(make, simsync::relay::Resync::On),
        None => relay,
    }
}

fn stats(app: &App) -> SessionStats {
    world_stats(app.world())
}

fn world_stats(world: &World) -> SessionStats {
    world.resource::<SessionStats>().clone()
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
        "desyncs": net.desyncs,
        "others_desynced": net.others_desynced,
        "judged_through": net.judged_through,
        "unjudged_checksums": net.unjudged_checksums,
        "resyncs": net.resyncs,
        "resynced": net.resynced.map(|(from, to)| json!({"from_tick": from, "to_tick": to})),
        "resim_ticks_checked": s.resim_ticks_checked,
        "resim_ticks_matching": s.resim_ticks_matching,
        "first_verified_tick": s.checksum_history.first().map(|c| c.tick),
        "snapshots_loaded": net.snapshots.loaded,
        "snapshots_served": net.snapshots.served,
        "desyncs_told": world
            .get_resource::<DesyncsTold>()
            .map_or_else(Vec::new, |t| t.0.iter().map(DesyncTold::to_json).collect()),
        "final_checksum": format!("{:016x}", final_checksum(world)),
        // The verified tick of the final checksum: past --ticks when a resync loaded a
        // snapshot of a later tick.
        "final_tick": s.verified_tick,
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

/// What a `join` client of a relay room plays: its session settings (`--players`, the
/// prediction check, `--rejoin`, desync dumps), the game of `--scene` (with `--plant-desync`'s
/// wrong step) and the trace of `--trace` (the default trace without it).
///
/// # Errors
/// Exit code 2 if a file is missing or invalid, or the scene has too few player spawns.
pub fn join_setup(args: &JoinArgs) -> Result<(ClientSession, SandboxGame, CompiledTrace), Failure> {
    let (game, trace) = load_session(args.scene.as_deref(), args.trace.as_deref(), args.players)?;
    let game = match args.plant_desync {
        Some(tick) => game.with_planted_desync(tick as i32),
        None => game,
    };
    let session = ClientSession {
        dump_dir: args.dump_dir(),
        players: args.players,
        verify_predictions: !args.no_verify_predictions,
        rejoin: args.rejoin.map(|r| ReconnectToken {
            slot: r.slot,
            token: r.token,
        }),
    };
    Ok((session, game, trace))
}

/// The clients' session settings of `args`: one more slot with `--late-join-at`, dumps into
/// `--dump-dir` (or `desync-dumps` with `--plant-desync`).
pub fn client_session(args: &NetworkArgs) -> ClientSession {
    let dump_dir = args.dump_dir.clone().or_else(|| {
        args.plant_desync
            .map(|_| std::path::PathBuf::from(super::cli::DEFAULT_DUMP_DIR))
    });
    ClientSession {
        players: args.session.players + u8::from(args.late_join_at.is_some()),
        verify_predictions: !args.session.no_verify_predictions,
        rejoin: None,
        dump_dir,
    }
}

/// The link of `--rtt-ms`, `--net-jitter-ms` and `--loss-percent`, the same both ways.
pub fn link(args: &NetworkArgs) -> LinkConditionerConfig {
    LinkConditionerConfig::PERFECT
        .with_latency(args.link.rtt_ms / 2, args.link.net_jitter_ms / 2)
        .with_loss(args.link.loss_percent)
}

/// The relay and the first `--players` clients of `sandbox network` on the peer harness
/// (`simsync::testing::RelayPeers`): the link of `--rtt-ms`, `--net-jitter-ms` and
/// `--loss-percent`, one more slot with `--late-join-at`, client 0's game with the planted
/// desync, the trace as every client's input.
///
/// # Errors
/// Exit code 2 for a bad link or a session configuration the clients refuse.
fn in_process_peers(
    args: &NetworkArgs,
    game: SandboxGame,
    trace: CompiledTrace,
    log: LogPlugin,
) -> Result<RelayPeers<PackedInput>, Failure> {
    let players = args.session.players;
    let session = client_session(args);
    let slots = session.players;
    let (ticks, plant) = (args.run.ticks, args.plant_desync);
    let link = link(args);
    let authority = args
        .authoritative
        .then(|| authority_factory(session.clone(), game.clone()))
        .transpose()?;
    let peers = RelayPeers::builder(slots, move |id| {
        let (game, name) = match (id, plant) {
            (0, Some(tick)) => (
                game.clone().with_planted_desync(tick as i32),
                "client-0".into(),
            ),
            (id, _) if id >= usize::from(players) => (game.clone(), "late-joiner".into()),
            (id, _) => (game.clone(), format!("client-{id}")),
        };
        client_plugin(&session, game, name, ClientPacing::Stepped)
    })
    .relay(relay_plugin(slots, players, authority))
    .customize_relay(move |app| {
        app.add_plugins(log);
    })
    .customize(move |_, app| add_stop_and_watch(app, ticks))
    .inputs(move |player, tick| game::encode(&trace.input(player, tick)))
    .link(link)
    .seed(0x51)
    .clients(usize::from(players))
    .breakdowns(0)
    // The sandbox's sessions as its flags configure them (`--no-verify-predictions`, its
    // checksum interval): its summary reports what they check.
    .checks(HarnessChecks::OFF)
    .build()
    .map_err(|e| match e {
        PeersError::Setup { error, .. } => {
            Failure::input(format!("invalid session configuration: {error}"))
        }
        other => Failure::input(format!("link: {other}")),
    })?;
    Ok(peers)
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
    let mut peers = in_process_peers(args, game, trace, log_plugin(run.quiet))?;
    let record = Recording::from_args(args.session.record.as_deref(), args.session.snapshot_every);
    if let Some(record) = &record {
        record.start(
            peers
                .client_mut(0)
                .map_err(|e| Failure::run(e.to_string()))?,
        )?;
    }
    if !run.quiet {
        println!(
            "network: relay server + {} clients in-process, RTT {} ms, jitter {} ms, loss {} %",
            players, link_args.rtt_ms, link_args.net_jitter_ms, link_args.loss_percent
        );
    }
    let mut progress = Progress::new(run.quiet, u64::from(run.ticks) * 4 + 10_000);
    let mut joined_at = None;
    if let Some(at) = args.late_join_at {
        progress.drive(&mut peers, at as i32)?;
        peers.join().map_err(|e| Failure::run(e.to_string()))?;
        joined_at = peers.stats(0).ok().map(|s| s.verified_tick);
        if !run.quiet {
            println!("network: a client joins the running session at verified tick {at}");
        }
    }
    progress.drive(&mut peers, run.ticks as i32)?;
    if let Some(record) = &record {
        let client = peers
            .client_mut(0)
            .map_err(|e| Failure::run(e.to_string()))?;
        record.finish(client, run.quiet)?;
    }
    let dump_dir = client_session(args).dump_dir;
    let (relay, clients) = peers.apps_mut();
    let mut worlds: Vec<&mut World> = clients.into_iter().map(App::world_mut).collect();
    report(
        args,
        relay.world(),
        &mut worlds,
        joined_at,
        dump_dir.as_deref(),
        progress.start.elapsed(),
    )
}

/// Steps an in-process run towards a verified tick, a second of simulated time at a time,
/// printing every client's ticks and RTT once a wall-clock second.
struct Progress {
    quiet: bool,
    start: Instant,
    last_report: Instant,
    frames: u64,
    limit: u64,
}

impl Progress {
    fn new(quiet: bool, limit: u64) -> Self {
        let start = Instant::now();
        Self {
            quiet,
            start,
            last_report: start,
            frames: 0,
            limit,
        }
    }

    /// Steps until every client verified `target`. A desync or a prediction mismatch does not
    /// stop the run (the summary reports it, the dumps are written); a registration error or
    /// a stopped session does.
    ///
    /// # Errors
    /// Exit code 2 for a registration error; 1 when a session stops or the frame limit passes.
    fn drive(&mut self, peers: &mut RelayPeers<PackedInput>, target: i32) -> Result<(), Failure> {
        let chunk = RunLimits::new(HZ).without_progress(u32::MAX);
        loop {
            match peers.run_until_verified_with(target, chunk) {
                Ok(_) => return Ok(()),
                Err(PeersError::Timeout { updates, .. }) => self.frames += u64::from(updates),
                Err(PeersError::Client {
                    error: RunUntilError::Desync(_) | RunUntilError::PredictionMismatch(_),
                    ..
                }) => self.frames += 1,
                Err(other) => return Err(Failure::run(other.to_string())),
            }
            for id in 0..peers.clients() {
                if let Some(message) = peers.client(id).ok().and_then(super::setup_check::failure) {
                    return Err(Failure::input(message));
                }
            }
            if self.frames >= self.limit {
                return Err(Failure::run(format!(
                    "clients at verified ticks {:?} of {target} after {} frames; giving up",
                    peers.verified_ticks(),
                    self.frames
                )));
            }
            self.print(peers);
        }
    }

    fn print(&mut self, peers: &RelayPeers<PackedInput>) {
        if self.quiet || self.last_report.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last_report = Instant::now();
        let line: Vec<String> = (0..peers.clients())
            .filter_map(|id| peers.stats(id).ok())
            .map(|s| {
                let net = s.network.unwrap_or_default();
                format!(
                    "verified {} predicted {} rtt {:.0} ms",
                    s.verified_tick, s.predicted_tick, net.rtt_ms
                )
            })
            .collect();
        println!(
            "[{:5.1} s] {}",
            self.start.elapsed().as_secs_f64(),
            line.join(" | ")
        );
    }
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
    // After a resync, what counts is each client's world from its last resync on (a tick
    // verified again is in the history twice: the last entry is the world's now).
    let resynced_to = clients
        .iter()
        .filter_map(|c| c.resource::<SessionStats>().network.as_ref()?.resynced)
        .map(|(_, to)| to)
        .max();
    let histories: Vec<_> = clients
        .iter()
        .map(|c| {
            let history = &c.resource::<SessionStats>().checksum_history;
            match resynced_to {
                Some(to) => settled_after(history, to),
                None => history.clone(),
            }
        })
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
        "server": relay_json(&relay, args.authoritative),
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

/// The relay server's side of a network run's summary: confirmed tick, input and message
/// counters, desyncs and their report, late joins and snapshots, and (authoritative rooms)
/// the authority's numbers.
fn relay_json(relay: &simsync::relay::RelayStats, authoritative: bool) -> Value {
    json!({
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
        "authority": authoritative.then(|| json!({
            "ticks": relay.authority.ticks,
            "tick": relay.authority.tick,
            "max_lag_ticks": relay.authority.max_lag_ticks,
            "snapshots_served": relay.authority.snapshots_served,
            "resyncs": relay.authority.resyncs,
            "relay_ms": relay.authority.relay_us as f64 / 1000.0,
        })),
        "desyncs_named": relay.desyncs_named,
    })
}

/// The last checksum of every tick after `tick` in `history`, in tick order.
fn settled_after(
    history: &[simsync::deterministic::TickChecksum],
    tick: i32,
) -> Vec<simsync::deterministic::TickChecksum> {
    let mut last = std::collections::BTreeMap::new();
    for entry in history.iter().filter(|c| c.tick > tick) {
        last.insert(entry.tick, *entry);
    }
    last.into_values().collect()
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
    if let Some((slot, player)) = first_player_body(&diff, &da, &db) {
        println!("  (slot {slot}, the first difference, is player {player}'s body)");
    }
    Ok(diff.is_empty())
}

/// The slot of the entity `diff` names first, and the player whose body it is, when it is a
/// player's body in either dump.
fn first_player_body(
    diff: &simsync::deterministic::DumpDiff,
    a: &simsync::deterministic::DesyncDump,
    b: &simsync::deterministic::DesyncDump,
) -> Option<(u32, u8)> {
    use simsync::deterministic::Difference;
    let slot = match diff.first.as_ref()? {
        Difference::Component { slot, .. } | Difference::EntityOnlyIn { slot, .. } => *slot,
        Difference::Resource { .. } => return None,
    };
    let player = player_of_slot(a, slot).or_else(|| player_of_slot(b, slot))?;
    Some((slot, player))
}

/// The player whose body the entity in `slot` of `dump` is: its reflected `PlayerBody`'s
/// `player` field.
fn player_of_slot(dump: &simsync::deterministic::DesyncDump, slot: u32) -> Option<u8> {
    let entity = dump.entities.iter().find(|e| e.slot == slot)?;
    let body = entity
        .components
        .iter()
        .find(|c| c.type_name.ends_with("::PlayerBody"))?;
    let field = body.fields.as_ref()?.iter().find(|f| f.path == "player")?;
    field.value.parse().ok()
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

/// `sandbox serve --bind ADDR`: the relay server over UDP, for `matches` matches on the same
/// connections: each match until every player acknowledged the requested tick (or left), then
/// a rematch (lobby, every player in its slot) until the last, which the relay ends.
///
/// # Errors
/// Exit code 2 if the address cannot be bound; 1 if a match never completes.
pub fn run_server(
    run: &RunArgs,
    players: u8,
    start_players: u8,
    bind: SocketAddr,
    matches: u32,
) -> Result<bool, Failure> {
    let transport = UdpServerTransport::bind(UdpServerConfig::unsecure(bind))
        .map_err(|e| Failure::input(format!("--bind {bind}: {e}")))?;
    if !run.quiet {
        println!(
            "server: listening on {} for {} players, {matches} match(es) of {} ticks",
            transport.local_addr(),
            players,
            run.ticks
        );
    }
    let mut app = server_app(
        players,
        start_players,
        transport.into(),
        Some(log_plugin(run.quiet)),
    );
    let mut pacer = Pacer::new();
    let mut summaries = Vec::new();
    for m in 1..=matches {
        serve_match(&mut app, &mut pacer, run, MatchId(m))?;
        let relay = app.world().resource::<simsync::relay::RelayStats>().clone();
        let summary = server_summary(run, players, &relay);
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).unwrap_or_default()
        );
        summaries.push(summary);
        let command = if m < matches {
            RelayCommand::Rematch {
                reason: MatchEndReason::Completed,
            }
        } else {
            RelayCommand::EndMatch {
                reason: MatchEndReason::Completed,
            }
        };
        app.world_mut().write_message(command);
        if !run.quiet && m < matches {
            println!("server: match {m} complete; rematch: match {} opens", m + 1);
        }
    }
    let agree = summaries
        .iter()
        .all(|s| s["all_clients_agree"] == json!(true));
    if let (Some(path), Some(last)) = (&run.summary_json, summaries.last()) {
        let mut summary = last.clone();
        summary["matches"] = json!(summaries);
        write_json(path, &summary)?;
    }
    // Give the clients a moment to receive the last sets and the end before the server goes.
    for _ in 0..HZ {
        app.update();
        pacer.wait();
    }
    Ok(agree)
}

/// Runs the relay of `app` until match `match_id` ran and every player acknowledged `--ticks`
/// of it (or every player left).
///
/// # Errors
/// Exit code 1 if that takes more than four times the match's length plus five minutes.
fn serve_match(
    app: &mut App,
    pacer: &mut Pacer,
    run: &RunArgs,
    match_id: MatchId,
) -> Result<(), Failure> {
    let target = run.ticks as i32;
    let limit =
        Instant::now() + Duration::from_secs(u64::from(run.ticks) / u64::from(HZ) * 4 + 300);
    let mut announced = false;
    loop {
        app.update();
        let relay = app.world().resource::<RelayServer>();
        if relay.match_id() == match_id && relay.phase() == MatchPhase::Ended {
            // Every player left after playing it (their goodbyes ended it).
            return Ok(());
        }
        if relay.match_id() == match_id && relay.started() {
            if !announced && !run.quiet {
                println!("server: {match_id} running");
            }
            announced = true;
            match relay.acknowledged_through() {
                Some(ack) if ack >= target => return await_relay_judgement(app, pacer, target),
                None => return Ok(()),
                _ => {}
            }
        }
        if Instant::now() > limit {
            return Err(Failure::run(format!(
                "server: {match_id} did not complete in time"
            )));
        }
        pacer.wait();
    }
}

/// Updates the relay until it judged every seated player's checksums through `target` and its
/// clients were told (two clock refreshes later), at most [`JUDGEMENT_WAIT`]: ending the match
/// at once would cut the clients' wait for the desyncs of a player behind.
fn await_relay_judgement(app: &mut App, pacer: &mut Pacer, target: i32) -> Result<(), Failure> {
    let until = Instant::now() + JUDGEMENT_WAIT;
    let mut told = None;
    while Instant::now() < until {
        let stats = app.world().resource::<RelayServer>().stats();
        if stats.judged_through >= target && told.is_none() {
            told = Some(stats.server_tick + 16);
        }
        if told.is_some_and(|at| stats.server_tick >= at) {
            return Ok(());
        }
        app.update();
        pacer.wait();
    }
    Ok(())
}

/// The summary of one match of the relay.
fn server_summary(run: &RunArgs, players: u8, relay: &simsync::relay::RelayStats) -> Value {
    json!({
        "mode": "server",
        "match": relay.match_id.0,
        "ticks": run.ticks,
        "players": players,
        "confirmed_tick": relay.confirmed_tick,
        "replaced_inputs": relay.replaced_inputs,
        "late_inputs": relay.late_inputs,
        "rejected_messages": relay.rejected_messages,
        "desyncs": relay.desyncs,
        "late_checksums": relay.late_checksums,
        "unjudged_checksums": relay.unjudged_checksums,
        "late_joins": relay.late_joins,
        "snapshots_served": relay.snapshots.served,
        "lying_snapshots": relay.snapshots.lying,
        "messages_of_ended_matches_dropped": relay.match_drops.ended_match,
        "all_clients_agree": relay.desyncs == 0,
    })
}

/// A client whose connection is lost for good (every reconnect attempt failed, or it could
/// not reconnect) fails the run (exit code 1) with the lifecycle's reason, instead of idling.
fn lost_for_good(world: &World) -> Result<(), Failure> {
    let lifecycle = world.resource::<simsync::deterministic::SessionLifecycle>();
    if lifecycle.state != simsync::deterministic::SessionState::Disconnected {
        return Ok(());
    }
    let why = match &lifecycle.reason {
        Some(simsync::deterministic::SessionStateReason::ReconnectFailed { attempts }) => {
            format!("the connection was lost and {attempts} reconnect attempts failed")
        }
        Some(simsync::deterministic::SessionStateReason::ServerGone { silent_for }) => format!(
            "the server is gone (nothing heard from it for {:.1} s)",
            silent_for.as_secs_f64()
        ),
        other => match world
            .get_resource::<ConnectFailureSeen>()
            .and_then(|seen| seen.0)
        {
            Some(failure) => format!("the connection was never made: {failure}"),
            None => format!("the connection was lost ({other:?})"),
        },
    };
    Err(Failure::run(format!(
        "client: disconnected from the server: {why}"
    )))
}

/// A match the server ended before the client's verified world reached `target` (the
/// dedicated server drains, or its operator ended the room) fails the run (exit code 1) with
/// the server's reason.
fn ended_by_server(world: &World, target: i32) -> Result<(), Failure> {
    use simsync::deterministic::{SessionLifecycle, SessionState, SessionStateReason};
    let lifecycle = world.resource::<SessionLifecycle>();
    let verified = world_stats(world).verified_tick;
    match (&lifecycle.state, &lifecycle.reason) {
        (SessionState::Ended, Some(SessionStateReason::MatchEnded { match_id, reason }))
            if verified < target =>
        {
            Err(Failure::run(format!(
                "client: the server ended {match_id} at verified tick {verified}: {reason}"
            )))
        }
        _ => Ok(()),
    }
}

/// Why a `join` client cannot go on with its match towards verified tick `target`, checked
/// after every update: the session's registration failed (exit code 2), the relay refused the
/// client, the connection is lost for good, or the server ended the match early (exit code 1).
///
/// # Errors
/// The first of those that holds for `world` (the client App's).
pub fn match_failure(world: &World, target: i32) -> Result<(), Failure> {
    if let Some(message) = super::setup_check::failure_in(world) {
        return Err(Failure::input(message));
    }
    if let Some(reason) = world_stats(world).network.and_then(|n| n.rejected) {
        return Err(Failure::run(format!(
            "client: rejected by the server: {reason}"
        )));
    }
    lost_for_good(world)?;
    ended_by_server(world, target)
}

/// Whether the client of `world` plays match `match_id` (its session was welcomed into it).
pub fn playing(world: &World, match_id: MatchId) -> bool {
    world_stats(world).network.and_then(|n| n.match_id) == Some(match_id)
}

/// The once-a-second progress line of a `join` during `match_id`.
pub fn progress_line(world: &World, match_id: MatchId) -> String {
    let s = world_stats(world);
    let net = s.network.unwrap_or_default();
    format!(
        "client: {match_id}: verified {} predicted {} rtt {:.0} ms delay {} ticks",
        s.verified_tick, s.predicted_tick, net.rtt_ms, net.input_delay_ticks
    )
}

/// A client id for an unsecured connection (`join --connect`): the process id mixed with the
/// clock, so two clients on one machine differ (a connect token brings its own).
pub fn fresh_client_id() -> u64 {
    std::process::id() as u64 ^ (Instant::now().elapsed().as_nanos() as u64) ^ 0x5eed
}

/// `sandbox join --connect ADDR`: one client over UDP, for `matches` matches on the same
/// connection: each until its verified world reaches the tick, then it waits in the relay's
/// lobby for the next (its session rebuilt from tick 0). A `--record` recording holds the
/// first match.
///
/// # Errors
/// Exit code 2 if the socket cannot be opened; 1 if a match does not complete, or the
/// connection is lost for good (after the reconnect attempts).
pub fn run_client(
    run: &RunArgs,
    session: ClientSession,
    game: SandboxGame,
    trace: CompiledTrace,
    link: &ServerLink,
    (record, matches): (Option<Recording>, u32),
) -> Result<bool, Failure> {
    let transport = link.transport(fresh_client_id())?;
    let client_id = transport.client_id();
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
    let mut watch = ClientWatch::new(link);
    let mut pacer = Pacer::new();
    let mut summaries = Vec::new();
    let mut agree = true;
    for m in 1..=matches {
        play_match(&mut app, (&mut watch, &mut pacer), run, MatchId(m))?;
        if let (Some(record), 1) = (&record, m) {
            record.finish(&mut app, run.quiet)?;
        }
        let judged = await_judgement(&mut app, (&mut watch, &mut pacer), run.quiet);
        let (summary, agreed) = match_report(app.world_mut(), run, (m, matches), judged);
        agree &= agreed;
        summaries.push(summary);
    }
    write_client_summaries(run, &summaries)?;
    // Keep sending for a moment so the server sees our acknowledgement (and we its end).
    for _ in 0..HZ / 2 {
        app.update();
        watch.show_state(app.world(), run.quiet);
        pacer.wait();
    }
    leave(&mut app, (&mut watch, &mut pacer), run.quiet);
    Ok(agree)
}

/// The end of match `m` of `matches` of a `join`, its judgement `judged` (complete or not):
/// prints the client's summary (JSON), the line `client: match M of N: verified tick T, final
/// checksum C, desyncs D` and the desyncs the relay told of; returns the summary and whether
/// this client agreed (no desync named it unless an authoritative room resynced it, every
/// re-simulated tick matched its prediction).
pub fn match_report(
    world: &mut World,
    run: &RunArgs,
    (m, matches): (u32, u32),
    judged: bool,
) -> (Value, bool) {
    let s = world_stats(world);
    // This client's own desyncs (another player's desync is `others_desynced`).
    let mismatches = s.network.as_ref().map_or(0, |n| n.desyncs) as usize;
    let mut summary = client_summary(world, s.checksum_history.len(), mismatches);
    summary["mode"] = json!("client");
    summary["match"] = json!(m);
    summary["ticks"] = json!(run.ticks);
    summary["judgement_complete"] = json!(judged);
    println!(
        "{}",
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    );
    println!(
        "client: match {m} of {matches}: verified tick {}, final checksum {}, desyncs {mismatches}",
        s.verified_tick,
        summary["final_checksum"].as_str().unwrap_or_default()
    );
    for told in std::mem::take(&mut world.resource_mut::<DesyncsTold>().0) {
        println!("client: {}", told.line());
    }
    let (named, resyncs) = s
        .network
        .as_ref()
        .map_or((0, 0), |n| (n.desyncs, n.resyncs));
    let agree = (named == 0 || resyncs >= named) && s.resim_ticks_matching == s.resim_ticks_checked;
    (summary, agree)
}

/// With `--summary-json`: writes the last match's summary with every match's under `matches`.
///
/// # Errors
/// Exit code 2 if the file cannot be written.
pub fn write_client_summaries(run: &RunArgs, summaries: &[Value]) -> Result<(), Failure> {
    if let (Some(path), Some(last)) = (&run.summary_json, summaries.last()) {
        let mut summary = last.clone();
        summary["matches"] = json!(summaries);
        write_json(path, &summary)?;
    }
    Ok(())
}

/// How long a client that reached its last tick waits, at most, for the relay to judge every
/// connected player's checksums through its last checksummed tick, so that its summary reports
/// the desyncs of a player running behind it.
pub const JUDGEMENT_WAIT: Duration = Duration::from_secs(10);

/// Whether the wait for the relay's judgement of this client's checksums is over:
/// `Some(true)` once the relay judged every connected player's checksums through this client's
/// last checksummed tick (`RelayClientStats::judged`; at once for a client without checksums),
/// `Some(false)` when the session ended or `until` passed first (printed unless `quiet`),
/// `None` while it is worth another update.
pub fn judgement_done(world: &World, until: Instant, quiet: bool) -> Option<bool> {
    let s = world_stats(world);
    let Some(last) = s.checksum_history.last().map(|c| c.tick) else {
        return Some(true);
    };
    if s.network.as_ref().is_some_and(|n| n.judged(last)) {
        return Some(true);
    }
    let lifecycle = world.resource::<simsync::deterministic::SessionLifecycle>();
    if !lifecycle.state.is_final() && Instant::now() < until {
        return None;
    }
    if !quiet {
        let through = s.network.map_or(0, |n| n.judged_through);
        println!(
            "client: the relay judged the checksums through tick {through} of {last}; a player \
             behind may still be judged (not waiting longer)"
        );
    }
    Some(false)
}

/// Updates `app` until [`judgement_done`], at most [`JUDGEMENT_WAIT`]. Returns whether the
/// judgement is complete.
fn await_judgement(
    app: &mut App,
    (watch, pacer): (&mut ClientWatch, &mut Pacer),
    quiet: bool,
) -> bool {
    let until = Instant::now() + JUDGEMENT_WAIT;
    loop {
        if let Some(done) = judgement_done(app.world(), until, quiet) {
            return done;
        }
        app.update();
        watch.show_state(app.world(), quiet);
        pacer.wait();
    }
}

/// Whether the client of `world` has closed its connection (after its goodbye the relay closes
/// it, or the client itself after a second).
pub fn connection_closed(world: &World) -> bool {
    world
        .get_resource::<RenetClient>()
        .is_none_or(|client| client.is_disconnected())
}

/// Leaves the session cleanly: says goodbye, then updates until the relay closed the
/// connection (the client closes it itself after a second), so the server sees this player
/// leave at once instead of after its connection's timeout.
fn leave(app: &mut App, (watch, pacer): (&mut ClientWatch, &mut Pacer), quiet: bool) {
    app.world_mut()
        .write_message(simsync::deterministic::LeaveSession);
    for _ in 0..2 * HZ {
        app.update();
        watch.show_state(app.world(), quiet);
        if connection_closed(app.world()) {
            return;
        }
        pacer.wait();
    }
}

/// What a `join` shows while it runs: the reconnect token and the lifecycle state, once each
/// time they change.
pub struct ClientWatch {
    token_shown: Option<ReconnectToken>,
    state_shown: Option<simsync::deterministic::SessionState>,
    server: SocketAddr,
    /// Joined with a connect token: a dropped client comes back with a new token for its slot.
    secure: bool,
}

impl ClientWatch {
    /// Nothing shown yet, for a client of `link`'s server.
    pub fn new(link: &ServerLink) -> Self {
        Self {
            token_shown: None,
            state_shown: None,
            server: link.server,
            secure: link.is_secure(),
        }
    }

    /// Prints the lifecycle's state when it changed (lobby, match, end).
    pub fn show_state(&mut self, world: &World, quiet: bool) {
        let lifecycle = world.resource::<simsync::deterministic::SessionLifecycle>();
        if self.state_shown == Some(lifecycle.state) {
            return;
        }
        self.state_shown = Some(lifecycle.state);
        if !quiet {
            println!(
                "client: {:?} ({:?})",
                lifecycle.state,
                lifecycle.reason.as_ref()
            );
        }
    }

    /// Prints the reconnect token when a new one came (a rematch keeps it).
    pub fn show_token(&mut self, world: &World, quiet: bool) {
        let token = world_stats(world).network.and_then(|n| n.reconnect_token);
        if token.is_none() || token == self.token_shown {
            return;
        }
        self.token_shown = token;
        if let (Some(t), false, true) = (token, quiet, self.secure) {
            println!(
                "client: player {}; to take this slot again after a drop, join with a new \
                 connect token for slot {} (the server's `token` command or its matchmaker; \
                 `sandbox host` writes spares, slot{}-rejoin1.token ...)",
                t.slot, t.slot, t.slot
            );
        } else if let (Some(t), false) = (token, quiet) {
            println!(
                "client: player {}; to take this slot again after a drop: sandbox join \
                 --connect {} --rejoin {}:{}",
                t.slot, self.server, t.slot, t.token
            );
        }
    }
}

/// How long a `join` may take for a match of `ticks` ticks: four times its length plus five
/// minutes (a slow start, a lobby, reconnects).
pub fn match_time_limit(ticks: u32) -> Duration {
    Duration::from_secs(u64::from(ticks) / u64::from(HZ) * 4 + 300)
}

/// Runs the client of `app` until it plays match `match_id` and its verified world reached
/// `--ticks` of it.
///
/// # Errors
/// As [`match_failure`]; exit code 1 also when the match takes longer than
/// [`match_time_limit`].
fn play_match(
    app: &mut App,
    (watch, pacer): (&mut ClientWatch, &mut Pacer),
    run: &RunArgs,
    match_id: MatchId,
) -> Result<(), Failure> {
    let target = run.ticks as i32;
    let limit = Instant::now() + match_time_limit(run.ticks);
    let mut last_report = Instant::now();
    while !playing(app.world(), match_id) || stats(app).verified_tick < target {
        if Instant::now() > limit {
            return Err(Failure::run(format!(
                "client: {match_id}: verified tick {} of {target}; giving up",
                stats(app).verified_tick
            )));
        }
        app.update();
        match_failure(app.world(), target)?;
        watch.show_token(app.world(), run.quiet);
        watch.show_state(app.world(), run.quiet);
        if !run.quiet
            && playing(app.world(), match_id)
            && last_report.elapsed() >= Duration::from_secs(1)
        {
            last_report = Instant::now();
            println!("{}", progress_line(app.world(), match_id));
        }
        pacer.wait();
    }
    Ok(())
}
