//! The main app of a local run: builds the session, feeds the trace, steps until the verified
//! world reaches the requested tick, and collects the summary.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bevy::log::{Level, LogPlugin};
use bevy::prelude::*;
use bevy_rapier3d::prelude::{RigidBody, Sleeping};
use simsync::deterministic::{
    DeterministicSession, PredictionMismatch, SessionConfig, SessionSetupError,
};
use simsync::prelude::{
    BeforeVerification, DeterministicPlugin, DeterministicSet, LocalInputs, LocalSessionConfig,
    PackedInput, SessionClock, SessionMode, SessionStats, SimulationWorlds, SimulatorContext,
};

use super::cli::LocalArgs;
use super::game::{self, PlayerBody, SandboxGame};
use super::summary::Summary;
use super::trace::CompiledTrace;

/// The scene and trace of a deterministic session (`--scene`, `--trace`, or the defaults
/// found at run time), checked against the number of players.
///
/// # Errors
/// Exit code 2 if a file is missing or invalid, or the scene has too few player spawns.
pub fn load_session(
    scene: Option<&Path>,
    trace: Option<&Path>,
    players: u8,
) -> Result<(SandboxGame, CompiledTrace), Failure> {
    let (scene_path, trace_path) = session_paths(scene, trace)?;
    let scene = super::scene::load_scene(&scene_path).map_err(|e| Failure::input(e.to_string()))?;
    let trace = super::trace::load_trace(&trace_path).map_err(|e| Failure::input(e.to_string()))?;
    if usize::from(players) > scene.players.len() {
        return Err(Failure::input(format!(
            "--players {players} but {} has only {} player spawns",
            scene_path.display(),
            scene.players.len()
        )));
    }
    Ok((SandboxGame::new(Arc::new(scene), players), trace))
}

/// The scene and trace files to read (defaults found at run time).
///
/// # Errors
/// Exit code 2 if a default file cannot be found.
pub fn session_paths(
    scene: Option<&Path>,
    trace: Option<&Path>,
) -> Result<(PathBuf, PathBuf), Failure> {
    let scene = super::cli::asset_path(scene, super::cli::DEFAULT_SCENE, "--scene")
        .map_err(Failure::input)?;
    let trace = super::cli::asset_path(trace, super::cli::DEFAULT_SESSION_TRACE, "--trace")
        .map_err(Failure::input)?;
    Ok((scene, trace))
}

/// Seed of the local relay's jitter (fixed, so runs are reproducible).
const JITTER_SEED: u64 = 0x5a4d_b0c5_1e55_eed5;
/// Largest input buffer (ticks) the sandbox asks for to cover long latencies.
const MAX_INPUT_CAPACITY: u32 = 1 << 16;
/// Prediction mismatches printed at most (all are counted in the summary).
const MAX_MISMATCH_REPORTS: usize = 10;

/// How a run failed, and the process exit code for it.
#[derive(Debug)]
pub struct Failure {
    /// 1: the run failed or mismatched; 2: bad input files or arguments.
    pub code: u8,
    /// One line for stderr.
    pub message: String,
}

impl Failure {
    /// A failure caused by the arguments or input files (exit code 2).
    pub fn input(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }

    /// A failure of the run itself (exit code 1).
    pub fn run(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }
}

/// The trace, as the main app feeds it (main-app resource).
#[derive(Resource)]
struct TraceFeed(CompiledTrace);

/// The tick the verified world stops at (main-app resource).
#[derive(Resource, Clone, Copy)]
struct StopAt(i32);

/// Prediction mismatches printed so far (main-app resource).
#[derive(Resource, Default)]
struct MismatchReports(usize);

/// Sets every player's input for the tick the next session update polls (`PreUpdate`, before
/// the session update).
fn feed_inputs(
    feed: Res<TraceFeed>,
    session: Res<DeterministicSession<PackedInput>>,
    mut local: ResMut<LocalInputs<PackedInput>>,
    keyboard: Option<Res<KeyboardPlayer>>,
) {
    let tick = session.next_poll_tick() + session.config().input_delay as i32;
    let keyboard = keyboard.map(|k| k.0);
    for player in (0..session.config().players).filter(|p| Some(*p) != keyboard) {
        let input = game::encode(&feed.0.input(player, tick));
        if let Err(error) = local.set(player, input) {
            warn_once!("input of player {player} not set: {error}");
        }
    }
}

/// Keeps the verified world from passing the requested tick (`BeforeVerification` hook).
fn stop_at_requested_tick(stop: Res<StopAt>, mut ctx: ResMut<SimulatorContext>) {
    let remaining = (stop.0 - ctx.verified_from_tick()).max(0);
    if ctx.ticks_to_verify() > remaining {
        let _ = ctx.set_ticks_to_verify(remaining);
    }
}

/// Prints the first prediction mismatches to stderr.
fn report_mismatches(
    mut mismatches: MessageReader<PredictionMismatch>,
    mut reported: ResMut<MismatchReports>,
) {
    for mismatch in mismatches.read() {
        if reported.0 < MAX_MISMATCH_REPORTS {
            eprintln!(
                "prediction mismatch at tick {}: predicted state {:016x}, verified {:016x}",
                mismatch.tick, mismatch.predicted, mismatch.verified
            );
        }
        reported.0 += 1;
    }
}

/// Bevy's log output: INFO and up, or WARN and up when `quiet` (`RUST_LOG` overrides both).
/// `quiet` also hides the UDP server's throttled lines about errors remote peers cause (they
/// stay counted, `simsync_net`'s wire rule 11).
pub fn log_plugin(quiet: bool) -> LogPlugin {
    let filter = LogPlugin::default().filter;
    LogPlugin {
        level: if quiet { Level::WARN } else { Level::INFO },
        filter: if quiet {
            format!("{filter},{}=error", simsync_net::REMOTE_ERROR_LOG_TARGET)
        } else {
            filter
        },
        fmt_layer: plain_unless_terminal,
        ..default()
    }
}

/// The log lines to stderr, coloured only on a terminal and without `NO_COLOR` (a file or a
/// container's log gets no escape codes).
fn plain_unless_terminal(_: &mut App) -> Option<bevy::log::BoxedFmtLayer> {
    use std::io::IsTerminal;
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    Some(Box::new(
        bevy::log::tracing_subscriber::fmt::Layer::default()
            .with_writer(std::io::stderr)
            .with_ansi(colour),
    ))
}

/// Builds the app of a local session for `args`, with the scene and trace already loaded.
///
/// # Errors
/// Exit code 2 when the session configuration is rejected; 1 when the worlds were not built.
pub fn build_app(
    args: &LocalArgs,
    game: SandboxGame,
    trace: CompiledTrace,
) -> Result<App, Failure> {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, log_plugin(args.run.quiet)));
    add_session(&mut app, args, game, trace);
    app.finish();
    app.cleanup();
    check_session(&app)?;
    Ok(app)
}

/// Whether the session of `app` (finished and cleaned up) was set up.
///
/// # Errors
/// Exit code 2 when the session configuration was rejected; 1 when the worlds were not built.
pub fn check_session(app: &App) -> Result<(), Failure> {
    if let Some(SessionSetupError(error)) = app.world().get_resource::<SessionSetupError>() {
        return Err(Failure::input(format!(
            "invalid session configuration: {error}"
        )));
    }
    if !app.world().contains_resource::<SimulationWorlds>() {
        return Err(Failure::run("the simulation worlds were not built"));
    }
    Ok(())
}

/// A player whose input comes from the keyboard, not the trace (main-app resource; the
/// rendered sandbox inserts it).
#[derive(Resource, Clone, Copy, Debug)]
#[allow(dead_code)] // only the rendered sandbox inserts it
pub struct KeyboardPlayer(pub u8);

/// Adds the local session of `args` (session plugin, trace feed, stop tick, mismatch reports)
/// to `app`, which brings Bevy's base plugins; the caller finishes the app.
pub fn add_session(app: &mut App, args: &LocalArgs, game: SandboxGame, trace: CompiledTrace) {
    let players = args.session.players;
    let entities = game.entity_count() + 256;
    let plugin = DeterministicPlugin::<PackedInput>::new(game)
        .config(SessionConfig {
            mode: SessionMode::Predicted,
            clock: SessionClock::Stepped {
                ticks_per_update: 1,
            },
            local: LocalSessionConfig {
                latency_ticks: vec![args.input_latency_ticks; usize::from(players)],
                jitter_ticks: args.jitter_ticks,
                seed: JITTER_SEED,
                known_players: vec![0],
            },
            verify_predictions: !args.session.no_verify_predictions,
            max_simulation_entities: entities,
            ..Default::default()
        })
        .players(players);
    // A recorded run checks every tick when replayed.
    let plugin = if args.session.record.is_some() {
        plugin.edit_config(|c| {
            c.checksum_interval = 1;
        })
    } else {
        plugin
    };
    // The input buffer must hold the rollback window plus the longest confirmation delay; grow
    // it for long latencies (up to a sane bound: beyond it the session rejects the config).
    let mut config = plugin.session_config().clone();
    let needed = u64::from(config.rollback_window)
        + u64::from(args.input_latency_ticks)
        + u64::from(args.jitter_ticks)
        + u64::from(config.input_delay)
        + 2;
    if let Some(needed) = u32::try_from(needed)
        .ok()
        .filter(|n| *n <= MAX_INPUT_CAPACITY)
    {
        config.input_capacity = config.input_capacity.max(needed.next_power_of_two());
    }
    app.add_plugins(plugin.config(config))
        .insert_resource(TraceFeed(trace))
        .insert_resource(StopAt(args.run.ticks as i32))
        .init_resource::<MismatchReports>()
        .add_systems(
            PreUpdate,
            feed_inputs
                .after(DeterministicSet::ReadLocalInput)
                .before(DeterministicSet::SessionUpdate),
        )
        .add_systems(BeforeVerification, stop_at_requested_tick)
        .add_systems(Last, report_mismatches);
    super::setup_check::watch(app);
}

/// Counts the player bodies and all rigid bodies of the verified world.
fn count_bodies(app: &App) -> (usize, usize) {
    let world = app.world().resource::<SimulationWorlds>().verified();
    let players = world
        .try_query::<&PlayerBody>()
        .map_or(0, |mut q| q.iter(world).count());
    let bodies = world
        .try_query::<&RigidBody>()
        .map_or(0, |mut q| q.iter(world).count());
    (players, bodies)
}

/// Counts the dynamic bodies of the verified world, and how many of them Rapier put to sleep.
fn sleeping_bodies(app: &App) -> (usize, usize) {
    let world = app.world().resource::<SimulationWorlds>().verified();
    world
        .try_query::<(&RigidBody, &Sleeping)>()
        .map_or((0, 0), |mut q| {
            q.iter(world)
                .filter(|(body, _)| **body == RigidBody::Dynamic)
                .fold((0, 0), |(asleep, all), (_, sleeping)| {
                    (asleep + usize::from(sleeping.sleeping), all + 1)
                })
        })
}

/// Runs a built app until the verified world reaches `args.run.ticks`, printing progress every
/// wall-clock second (unless quiet), and returns the summary and the app.
///
/// # Errors
/// Exit code 1 if the scene was not fully spawned, the verified world does not reach the tick
/// within a generous number of updates, or passes it; 2 if the session reported a registration
/// error when it started ([`super::setup_check`]).
pub fn run(
    args: &LocalArgs,
    expected_bodies: u32,
    mut app: App,
) -> Result<(Summary, App), Failure> {
    let (players, bodies) = count_bodies(&app);
    if players != usize::from(args.session.players) || bodies != expected_bodies as usize {
        return Err(Failure::run(format!(
            "scene not fully spawned: {bodies} of {expected_bodies} bodies, {players} of {} players",
            args.session.players
        )));
    }
    let ticks = args.run.ticks;
    let target = ticks as i32;
    let limit =
        u64::from(ticks) * 4 + u64::from(args.input_latency_ticks + args.jitter_ticks) * 2 + 10_000;
    let start = Instant::now();
    let mut last_report = (start, 0u64);
    let mut updates = 0u64;
    loop {
        let stats = app.world().resource::<SessionStats>();
        if stats.verified_tick >= target {
            break;
        }
        if updates >= limit {
            return Err(Failure::run(format!(
                "the verified world is at tick {} of {target} after {updates} updates; giving up",
                stats.verified_tick
            )));
        }
        app.update();
        updates += 1;
        if let Some(message) = super::setup_check::failure(&app) {
            return Err(Failure::input(message));
        }
        let now = Instant::now();
        if !args.run.quiet && now - last_report.0 >= Duration::from_secs(1) {
            let stats = app.world().resource::<SessionStats>();
            let rate =
                (stats.ticks_verified - last_report.1) as f64 / (now - last_report.0).as_secs_f64();
            println!(
                "[{:5.1} s] verified {}/{target}  predicted tick {}  rollbacks {}  {rate:.0} ticks/s",
                (now - start).as_secs_f64(),
                stats.verified_tick,
                stats.predicted_tick,
                stats.rollbacks,
            );
            last_report = (now, stats.ticks_verified);
        }
    }
    let stats = app.world().resource::<SessionStats>().clone();
    if stats.verified_tick != target {
        return Err(Failure::run(format!(
            "the verified world passed the requested tick: at {} instead of {target}",
            stats.verified_tick
        )));
    }
    if !stats.unregistered_components.is_empty() {
        eprintln!(
            "warning: components on simulation entities that rollback does not restore: {}",
            stats.unregistered_components.join(", ")
        );
    }
    let checksum = app
        .world_mut()
        .resource_mut::<SimulationWorlds>()
        .verified_checksum();
    if let Some(recorded) = stats.last_checksum.filter(|c| c.tick == target)
        && recorded.checksum != checksum
    {
        eprintln!(
            "warning: the session recorded checksum {:016x} at tick {target}, the verified world \
             now hashes to {checksum:016x}",
            recorded.checksum
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (asleep, dynamic) = sleeping_bodies(&app);
    if !args.run.quiet {
        println!("dynamic bodies asleep at tick {target}: {asleep} of {dynamic}");
        println!(
            "finished in {elapsed:.2} s ({updates} updates, {:.0} verified ticks/s)",
            f64::from(ticks) / elapsed.max(1e-9)
        );
    }
    let summary = Summary::new(
        "local",
        ticks,
        args.session.players,
        !args.session.no_verify_predictions,
        &stats,
        checksum,
    );
    Ok((summary, app))
}
