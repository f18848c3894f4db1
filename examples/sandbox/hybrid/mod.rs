//! Hybrid mode: players under rollback, props under simulation ownership (`simsync::hybrid`).
//!
//! `sandbox hybrid` runs, in this process over the in-memory transport with a seeded link
//! conditioner (`--rtt-ms`, `--net-jitter-ms`, `--loss-percent`, as the other in-process
//! modes), a relay server, an entity server and `--players` Apps (2–4), one per player
//! (`simsync::testing::HybridPeers`). Each App is
//!
//! - a **player**: a deterministic session of the sandbox's game on the scene's ground, ramps
//!   and player spawns (`SandboxGame::hybrid`: input `HybridInput<PackedInput>`, player bodies
//!   `RollbackBody` and `AvatarOf`), playing the input trace (`--trace`, default
//!   `assets/traces/two_players.ron`; player `p` plays the trace's player `p mod` its players)
//!   for `--ticks` ticks, then standing still;
//! - an ownership **participant** whose world holds `--props` props (default 300: the scene's
//!   pile bodies, then rows of the piles' shapes, [`props::prop_layout`]) and a kinematic twin
//!   of every player's avatar at its predicted pose: its own player's twin bids for the props
//!   it knocks, and each press of the trace's push button grabs the nearest prop within reach
//!   or throws the one held ([`run::Hands`]).
//!
//! The props an App owns ride in its player's inputs, so every peer's verified players' world
//! sees the same prop poses at the same tick. After `--ticks` the props settle (at least
//! `--settle-seconds`, until no prop is owned or every prop rests, at most 5 s more). The run fails (exit 1)
//! when the players' verified checksums differ, a session reports a desync or a mispredicted
//! tick, or two Apps' copies of a prop at rest (slower than 1 cm/s on every App) are 1 cm or
//! more apart; the props still moving are counted, not compared.
//!
//! The parts: `props` (layout and shapes), `run` (the Apps, stepped), `summary`.

pub mod props;
pub mod run;
pub mod summary;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bevy_rapier3d::prelude::Collider;

use crate::cli::{self, HybridArgs};
use crate::driver::{Failure, log_plugin};
use crate::ownership::NetBody;
use crate::ownership::bodies::bodies_with;
use crate::ownership::in_process::Phase;
use crate::scene::{Scene, load_scene};
use crate::trace::{CompiledTrace, load_trace};

use props::{players_scene, prop_layout, prop_shapes};
use run::HybridRun;
use summary::{check, summarize};

/// What a hybrid run is built from.
pub struct Setup {
    /// The files read: scene, players' trace.
    pub paths: [PathBuf; 2],
    /// Players (= Apps = ownership participants).
    pub players: u8,
    /// The players' scene: the scene without its piles.
    pub players_scene: Arc<Scene>,
    /// The props (ids `0..props`), then ground and ramps.
    pub bodies: Vec<NetBody>,
    /// Each prop's kind (its pile's index), by id.
    pub kinds: Vec<u8>,
    /// The proxy shape of each kind.
    pub shapes: Vec<Collider>,
    /// The players' input trace.
    pub trace: Arc<CompiledTrace>,
}

impl Setup {
    /// Loads the files of `args` (the defaults found at run time) and lays the props out.
    ///
    /// # Errors
    /// Exit code 2 for a missing or invalid file, a scene with fewer player spawns than
    /// players, or props that cannot be laid out ([`props::LayoutError`]).
    pub fn load(args: &HybridArgs) -> Result<Self, Failure> {
        let path = |given: &Option<PathBuf>, default, flag| {
            cli::asset_path(given.as_deref(), default, flag).map_err(Failure::input)
        };
        let scene_path = path(&args.scene, cli::DEFAULT_SCENE, "--scene")?;
        let trace_path = path(&args.trace, cli::DEFAULT_SESSION_TRACE, "--trace")?;
        let input = |e: crate::error::LoadError| Failure::input(e.to_string());
        let scene = load_scene(&scene_path).map_err(input)?;
        let trace = load_trace(&trace_path).map_err(input)?;
        if usize::from(args.players) > scene.players.len() {
            return Err(Failure::input(format!(
                "--players {} but {} has only {} player spawns",
                args.players,
                scene_path.display(),
                scene.players.len()
            )));
        }
        let layout = prop_layout(&scene, args.props).map_err(|e| Failure::input(e.to_string()))?;
        Ok(Self {
            paths: [scene_path, trace_path],
            players: args.players,
            players_scene: Arc::new(players_scene(&scene)),
            bodies: bodies_with(&scene, 0, &layout),
            kinds: layout.iter().map(|&(_, pile)| pile as u8).collect(),
            shapes: prop_shapes(&scene),
            trace: Arc::new(trace),
        })
    }

    /// The banner of a run.
    pub fn banner(&self, args: &HybridArgs) -> String {
        let [scene, trace] = &self.paths;
        format!(
            "sandbox: hybrid mode, {} players (rolled back), {} props (owned), {} ticks, {} ± {} \
             ms RTT, {} % loss; scene {}, trace {}",
            self.players,
            self.kinds.len(),
            args.ticks,
            args.link.rtt_ms,
            args.link.net_jitter_ms,
            args.link.loss_percent,
            scene.display(),
            trace.display(),
        )
    }
}

/// Runs `sandbox hybrid` (see the module docs).
///
/// # Errors
/// Exit code 2 for bad arguments or input files; 1 when the run fails, the players' checksums
/// differ or the props' copies are 1 cm or more apart at rest.
pub fn run_in_process(args: &HybridArgs) -> Result<ExitCode, Failure> {
    let setup = Setup::load(args)?;
    if !args.quiet {
        println!("{}", setup.banner(args));
    }
    let mut run = HybridRun::new(args, &setup, Some(log_plugin(args.quiet)))?;
    let start = Instant::now();
    let mut last_report = start;
    let settled = loop {
        match run.advance()? {
            Phase::Done(settled) => break settled,
            Phase::Script(tick)
                if !args.quiet && last_report.elapsed() >= Duration::from_secs(1) =>
            {
                last_report = Instant::now();
                println!(
                    "[{:5.1} s] frame {tick}, players verified {:?} of {}, props owned {}",
                    start.elapsed().as_secs_f64(),
                    run.peers.players().verified_ticks(),
                    args.ticks,
                    run.props_owned(),
                );
            }
            _ => {}
        }
    };
    println!(
        "finished in {:.2} s ({} + {settled} settling ticks)",
        start.elapsed().as_secs_f64(),
        args.ticks
    );
    let summary = summarize(args, &mut run, &setup, settled)?;
    println!("{}", summary.to_text());
    if let Some(path) = &args.summary_json {
        summary.write_json(path)?;
    }
    check(&summary)?;
    Ok(ExitCode::SUCCESS)
}
