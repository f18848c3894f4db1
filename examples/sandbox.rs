//! Headless multiplayer physics sandbox.
//!
//! Loads a scene (`assets/scenes/sandbox.ron`) and a recorded input trace
//! (`assets/traces/two_players.ron`), runs them through a [`DeterministicPlugin`] session with a
//! local relay that confirms inputs after `--input-latency-ticks` (so the predicted world
//! mispredicts and rolls back), stops the verified world exactly at `--ticks`, and prints a
//! summary: ticks, rollbacks, mispredictions, the final verified checksum and how many
//! re-simulated ticks matched verification.
//!
//! ```text
//! cargo run --release --example sandbox -- --ticks 1800 --players 2 --input-latency-ticks 6
//! ```
//!
//! `--mode ownership` runs distributed physics with simulation ownership instead: an entity
//! server and three participants, each with its own Rapier world (see `sandbox/ownership.rs`).
//!
//! Exit codes: 0 success; 1 the run failed or a predicted tick did not match verification;
//! 2 bad arguments or input files.
//!
//! [`DeterministicPlugin`]: simsync::DeterministicPlugin

#[path = "sandbox/cli.rs"]
mod cli;
#[path = "sandbox/driver.rs"]
mod driver;
#[path = "sandbox/error.rs"]
mod error;
#[path = "sandbox/game.rs"]
mod game;
#[path = "sandbox/network.rs"]
mod network;
#[path = "sandbox/ownership.rs"]
mod ownership;
#[path = "sandbox/scene.rs"]
mod scene;
#[path = "sandbox/summary.rs"]
mod summary;
#[path = "sandbox/trace.rs"]
mod trace;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use driver::Failure;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("sandbox: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

fn run(args: &cli::Args) -> Result<ExitCode, Failure> {
    if args.mode == cli::Mode::Ownership {
        return ownership::run(args);
    }
    let scene = scene::load_scene(&args.scene).map_err(|e| Failure::input(e.to_string()))?;
    let trace = trace::load_trace(&args.trace).map_err(|e| Failure::input(e.to_string()))?;
    if usize::from(args.players) > scene.players.len() {
        return Err(Failure::input(format!(
            "--players {} but {} has only {} player spawns",
            args.players,
            args.scene.display(),
            scene.players.len()
        )));
    }
    let game = game::SandboxGame::new(Arc::new(scene), args.players);
    let networked = if args.server {
        Some(network::run_server(
            args,
            args.bind.expect("clap requires --bind"),
        ))
    } else if args.client {
        Some(network::run_client(
            args,
            game.clone(),
            trace.clone(),
            args.connect.expect("clap requires --connect"),
        ))
    } else if args.mode == cli::Mode::Network {
        Some(network::run_in_process(args, game.clone(), trace.clone()))
    } else {
        None
    };
    if let Some(result) = networked {
        return match result? {
            true => Ok(ExitCode::SUCCESS),
            false => Err(Failure::run(
                "clients disagreed on a checksum or a prediction mismatched",
            )),
        };
    }
    println!(
        "sandbox: {} mode, {} players, {} ticks, latency {} ticks, jitter {} ticks; scene {} \
         ({} dynamic bodies), trace {} ({} segments, {} players, {} ticks)",
        args.mode.name(),
        args.players,
        args.ticks,
        args.input_latency_ticks,
        args.jitter_ticks,
        args.scene.display(),
        game.dynamic_body_count(),
        args.trace.display(),
        trace.segments(),
        trace.players(),
        trace.end_tick(),
    );
    let expected = game.entity_count();
    let app = driver::build_app(args, game, trace)?;
    let summary = driver::run(args, expected, app)?;
    println!("{}", summary.to_text());
    if let Some(path) = &args.summary_json {
        summary.write_json(path).map_err(Failure::input)?;
    }
    if summary.predictions_matched() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(Failure::run(format!(
            "prediction did not match verification on {} of {} re-simulated ticks",
            summary.resim_ticks_checked - summary.resim_ticks_matching,
            summary.resim_ticks_checked
        )))
    }
}
