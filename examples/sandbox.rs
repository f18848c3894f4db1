//! Headless multiplayer physics sandbox.
//!
//! Loads a scene (`assets/scenes/sandbox.ron`) and a recorded input trace
//! (`assets/traces/two_players.ron`) and runs them through a [`DeterministicPlugin`] session,
//! or runs scripted participants through simulation ownership. One subcommand per mode
//! (`sandbox --help`):
//!
//! ```text
//! cargo run --ignore-rust-version --release --example sandbox                       # = network: relay + clients in-process
//! cargo run --ignore-rust-version --release --example sandbox -- local --ticks 1800 --input-latency-ticks 6
//! cargo run --ignore-rust-version --release --example sandbox -- ownership          # entity server + 3 participants
//! cargo run --ignore-rust-version --release --example sandbox -- hybrid --players 2 --props 300
//! cargo run --ignore-rust-version --release --example sandbox -- serve --bind 127.0.0.1:5000 [--ownership]
//! cargo run --ignore-rust-version --release --example sandbox -- join --connect 127.0.0.1:5000 [--ownership]
//! cargo run --ignore-rust-version --release --example sandbox -- join --connect 127.0.0.1:5000 --rejoin 1:TOKEN
//! cargo run --ignore-rust-version --release --example sandbox -- network --plant-desync 120 --ticks 300
//! cargo run --ignore-rust-version --release --example sandbox -- diff desync-dumps/A.simdump desync-dumps/B.simdump
//! cargo run --ignore-rust-version --release --example sandbox -- local --record run.replay
//! cargo run --ignore-rust-version --release --example sandbox -- replay run.replay [--seek 900]
//! ```
//!
//! Exit codes: 0 success; 1 the run failed, a predicted tick did not match verification, clients
//! disagreed, ownership copies diverged or a replayed checksum differed; 2 bad arguments or
//! input files (a bad, foreign or cut replay included).
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
#[path = "sandbox/host.rs"]
mod host;
#[path = "sandbox/hybrid/mod.rs"]
mod hybrid;
#[path = "sandbox/link.rs"]
mod link;
#[path = "sandbox/network.rs"]
mod network;
#[path = "sandbox/ownership/mod.rs"]
mod ownership;
#[path = "sandbox/replay.rs"]
mod replay;
#[path = "sandbox/room_config.rs"]
mod room_config;
#[path = "sandbox/scene.rs"]
mod scene;
#[path = "sandbox/setup_check.rs"]
mod setup_check;
#[path = "sandbox/summary.rs"]
mod summary;
#[path = "sandbox/trace.rs"]
mod trace;

use std::process::ExitCode;

use cli::{Command, JoinArgs, LocalArgs};
use driver::{Failure, load_session, session_paths};

fn main() -> ExitCode {
    match run(Command::parse()) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("sandbox: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

fn run(command: Command) -> Result<ExitCode, Failure> {
    let networked = match command {
        Command::Local(args) => return run_local(&args),
        Command::Ownership(args) => return ownership::run_in_process(&args),
        Command::Hybrid(args) => return hybrid::run_in_process(&args),
        Command::Serve(args) if args.ownership => return ownership::run_udp_server(&args),
        Command::Join(args) if args.ownership => return ownership::run_udp_client(&args),
        Command::Network(args) => {
            // A late joiner takes one more slot: the scene needs a spawn for it.
            let slots = args.session.players + u8::from(args.late_join_at.is_some());
            let (game, trace) = load_session(
                args.session.scene.as_deref(),
                args.session.trace.as_deref(),
                slots,
            )?;
            network::run_in_process(&args, game, trace)
        }
        Command::Serve(args) => network::run_server(
            &args.run,
            args.players,
            args.start_players.unwrap_or(args.players),
            args.bind,
            args.matches,
        ),
        Command::Join(args) => run_join(&args),
        Command::Host(args) => return host::run_host(&args),
        Command::Diff(args) => {
            return match network::run_diff(&args.a, &args.b)? {
                true => Ok(ExitCode::SUCCESS),
                false => Ok(ExitCode::from(1)),
            };
        }
        Command::Replay(args) => return replay::run_replay(&args),
        Command::RoomConfig(args) => {
            room_config::print_room_config(&args)?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    match networked? {
        true => Ok(ExitCode::SUCCESS),
        false => Err(Failure::run(
            "clients disagreed on a checksum or a prediction mismatched",
        )),
    }
}

/// `sandbox join` without `--ownership`: one deterministic session client over UDP.
fn run_join(args: &JoinArgs) -> Result<bool, Failure> {
    let (session, game, trace) = network::join_setup(args)?;
    let record = replay::Recording::from_args(args.record.as_deref(), args.snapshot_every);
    let link = link::ServerLink::from_args(args.connect, args.token.as_deref())?;
    network::run_client(
        &args.run,
        session,
        game,
        trace,
        &link,
        (record, args.matches),
    )
}

/// `sandbox local`: one app, every player local.
fn run_local(args: &LocalArgs) -> Result<ExitCode, Failure> {
    let session = &args.session;
    let (scene_path, trace_path) =
        session_paths(session.scene.as_deref(), session.trace.as_deref())?;
    let (game, trace) = load_session(Some(&scene_path), Some(&trace_path), session.players)?;
    if !args.run.quiet {
        println!(
            "sandbox: local mode, {} players, {} ticks, latency {} ticks, jitter {} ticks; scene \
             {} ({} dynamic bodies), trace {} ({} segments, {} players, {} ticks)",
            session.players,
            args.run.ticks,
            args.input_latency_ticks,
            args.jitter_ticks,
            scene_path.display(),
            game.dynamic_body_count(),
            trace_path.display(),
            trace.segments(),
            trace.players(),
            trace.end_tick(),
        );
    }
    let expected = game.entity_count();
    let mut app = driver::build_app(args, game, trace)?;
    let record = replay::Recording::from_args(session.record.as_deref(), session.snapshot_every);
    if let Some(record) = &record {
        record.start(&mut app)?;
    }
    let (summary, mut app) = driver::run(args, expected, app)?;
    if let Some(record) = &record {
        record.finish(&mut app, args.run.quiet)?;
    }
    println!("{}", summary.to_text());
    if let Some(path) = &args.run.summary_json {
        summary.write_json(path).map_err(Failure::input)?;
    }
    if summary.predictions_matched() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(Failure::run(format!(
            "prediction did not match verification on {} of {} predicted ticks",
            summary.resim_ticks_checked - summary.resim_ticks_matching,
            summary.resim_ticks_checked
        )))
    }
}
