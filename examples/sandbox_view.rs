//! The sandbox, rendered (needs the `render` feature).
//!
//! Runs the same scene, trace and settings as the headless `sandbox` in one of its modes and
//! draws it:
//!
//! - `local` (the default): the local session. The predicted world is drawn with `bevy_pbr`
//!   through [`VisualSmoothingPlugin`] (rollback corrections decay instead of popping), the
//!   verified world as gizmo outlines (ghosts). Player 0 follows the trace until a key is
//!   pressed; then WASD / arrows move it, Space jumps, E pushes (leafwing-input-manager).
//! - `network`: the relay and the clients of `sandbox network` in this process; the window is
//!   client 1's: its predicted world solid, its verified world as ghosts. The trace drives every
//!   client.
//! - `ownership`: the entity server and participants of `sandbox ownership`; the window shows
//!   participant 0's copy of the bodies coloured by owner (unowned grey, a colour per
//!   participant, brighter while grabbed).
//! - `hybrid`: the players' relay and sessions and the props' entity server and participants
//!   of `sandbox hybrid`; the window shows peer 0: its players (rolled back) in their colours,
//!   its participant's props coloured by owner as in `ownership`.
//! - `join --token FILE` / `join --connect ADDR`: a real client over UDP of a relay room
//!   (`sandbox host`, `sandbox serve`, `simsync-server`), paced by the window in real time: this
//!   client's player under the keyboard (WASD / arrows, Space, E; with `--trace FILE` the script
//!   drives it while no key is held), the others' players as the network brings them, the
//!   verified world as ghosts; the HUD adds RTT, loss and input delay. At the end of the match
//!   it prints the headless `sandbox join`'s summary and exits as it does.
//! - `join --ownership --token FILE` / `--connect ADDR`: a participant over UDP of an
//!   ownership room (`sandbox serve --ownership`, `simsync-server`): the bodies in owner
//!   colours; the mouse grabs a body (a GRAB bid), drags it and throws it on release; a refused
//!   grab flashes red and the HUD says who holds the body.
//!
//! The HUD shows the mode's numbers (tick, verified/predicted depth, rollbacks per second,
//! re-simulated ticks, RTT, input delay, bytes per second, ownership counters). At the end of
//! the run the view prints the headless sandbox's summary of the same run, so the two can be
//! compared line by line.
//!
//! ```text
//! cargo run --ignore-rust-version --release --features render --example sandbox_view -- local --ticks 1800
//! cargo run --ignore-rust-version --release --features render --example sandbox_view -- network --ticks 600
//! cargo run --ignore-rust-version --release --features render --example sandbox_view -- ownership --ticks 600
//! cargo run --ignore-rust-version --release --features render --example sandbox_view -- hybrid --players 3 --props 300
//! cargo run --ignore-rust-version --features render --example sandbox_view -- local --ticks 300 --screenshot shot.png
//! cargo run --ignore-rust-version --release --example sandbox -- host --tokens tokens
//! cargo run --ignore-rust-version --release --features render --example sandbox_view -- join --token tokens/slot0.token --ticks 19200
//! ```
//!
//! With `--screenshot PATH` it saves a screenshot of the window through Bevy's screenshot API
//! (local, network: when the run finished; ownership: when the script ended, while bodies are
//! still carried), prints the HUD's lines and frame times, and exits once the run finished;
//! `--start-screenshot PATH` also saves one once the verified world passed tick 0 (local,
//! network, join).
//! Exit codes: 0 success, 1 the run failed or a check failed, 2 bad arguments or input files.
//!
//! [`VisualSmoothingPlugin`]: simsync::VisualSmoothingPlugin

// How `join` reaches its server (the network and ownership modules name it).
#[allow(dead_code)]
#[path = "sandbox/link.rs"]
mod link;

// The headless sandbox's modules, shared; this binary uses only part of them.
#[allow(dead_code)]
#[path = "sandbox/cli.rs"]
mod cli;
#[allow(dead_code)]
#[path = "sandbox/driver.rs"]
mod driver;
#[allow(dead_code)]
#[path = "sandbox/error.rs"]
mod error;
#[allow(dead_code)]
#[path = "sandbox/game.rs"]
mod game;
#[path = "sandbox/grab_rules.rs"]
mod grab_rules;
#[allow(dead_code)]
#[path = "sandbox/hybrid/mod.rs"]
mod hybrid;
#[allow(dead_code)]
#[path = "sandbox/network.rs"]
mod network;
#[allow(dead_code, unused_imports)]
#[path = "sandbox/ownership/mod.rs"]
mod ownership;
#[allow(dead_code)]
#[path = "sandbox/replay.rs"]
mod replay;
#[allow(dead_code)]
#[path = "sandbox/scene.rs"]
mod scene;
#[allow(dead_code)]
#[path = "sandbox/setup_check.rs"]
mod setup_check;
#[allow(dead_code)]
#[path = "sandbox/summary.rs"]
mod summary;
#[allow(dead_code)]
#[path = "sandbox/trace.rs"]
mod trace;

#[path = "sandbox_view/draw.rs"]
mod draw;
#[path = "sandbox_view/grab.rs"]
mod grab;
#[path = "sandbox_view/hud.rs"]
mod hud;
#[path = "sandbox_view/hybrid.rs"]
mod hybrid_view;
#[path = "sandbox_view/in_process.rs"]
mod in_process;
#[path = "sandbox_view/join.rs"]
mod join;
#[path = "sandbox_view/keyboard.rs"]
mod keyboard;
#[path = "sandbox_view/ownership_join.rs"]
mod ownership_join;
#[path = "sandbox_view/ownership.rs"]
mod ownership_view;
#[path = "sandbox_view/session.rs"]
mod session;

use std::path::PathBuf;
use std::process::ExitCode;

use bevy::prelude::*;
use bevy::render::RenderPlugin;
use bevy::window::PresentMode;
use bevy::winit::{UpdateMode, WinitSettings};
use clap::{Args, Parser, Subcommand};
use simsync::{SessionDiagnosticsPlugin, VisualSmoothingPlugin};

use driver::{Failure, load_session};

/// `sandbox_view`: the rendered sandbox.
#[derive(Debug, Parser)]
#[command(
    name = "sandbox_view",
    about = "The simsync sandbox, rendered",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    /// `local` when no mode is given.
    #[command(flatten)]
    local: LocalView,
}

/// The modes of the headless sandbox that the view draws.
#[derive(Debug, Subcommand)]
enum Mode {
    /// One app, every player local (as `sandbox local`).
    Local(LocalView),
    /// Relay server and clients in this process; client 1 drawn (as `sandbox network`).
    Network(NetworkView),
    /// Entity server and participants; participant 0's view, bodies coloured by owner (as
    /// `sandbox ownership`).
    Ownership(OwnershipView),
    /// Players rolled back, props owned; peer 0's view: its players, its props coloured by
    /// owner (as `sandbox hybrid`).
    Hybrid(HybridView),
    /// A client over UDP of a server's room (`--token FILE` or `--connect ADDR`): in a relay
    /// room this client's player under the keyboard; with --ownership a participant of an
    /// ownership room whose mouse grabs, drags and throws bodies.
    Join(JoinView),
}

#[derive(Debug, Args)]
struct JoinView {
    #[command(flatten)]
    args: cli::JoinArgs,
    #[command(flatten)]
    view: ViewArgs,
}

#[derive(Debug, Args)]
struct LocalView {
    #[command(flatten)]
    args: cli::LocalArgs,
    #[command(flatten)]
    view: ViewArgs,
}

#[derive(Debug, Args)]
struct NetworkView {
    #[command(flatten)]
    args: cli::NetworkArgs,
    #[command(flatten)]
    view: ViewArgs,
}

#[derive(Debug, Args)]
struct HybridView {
    #[command(flatten)]
    args: cli::HybridArgs,
    #[command(flatten)]
    view: ViewArgs,
}

#[derive(Debug, Args)]
struct OwnershipView {
    #[command(flatten)]
    args: cli::OwnershipArgs,
    #[command(flatten)]
    view: ViewArgs,
}

/// The view's own flags.
#[derive(Debug, Clone, Args)]
struct ViewArgs {
    /// Save a screenshot of the window to PATH, print the HUD's lines and exit once the run
    /// finished.
    #[arg(long, value_name = "PATH")]
    screenshot: Option<PathBuf>,
    /// Also save a screenshot to PATH once the simulation started (the verified world passed
    /// tick 0; local, network and join).
    #[arg(long, value_name = "PATH")]
    start_screenshot: Option<PathBuf>,
    /// Present the simulation as is: no rollback smoothing, no interpolation.
    #[arg(long)]
    no_smoothing: bool,
    /// Draw frames as fast as possible (no vsync), to measure frame times.
    #[arg(long)]
    no_vsync: bool,
    /// Draw without multisample anti-aliasing (cheaper, e.g. on a software renderer).
    #[arg(long)]
    no_msaa: bool,
    /// Window size in pixels, WIDTHxHEIGHT.
    #[arg(long, value_name = "WxH", default_value = "1280x720", value_parser = parse_size)]
    window: (u32, u32),
}

/// `WIDTHxHEIGHT` (each 64..=7680) as a window size.
fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let parse = |part: Option<&str>| {
        part.and_then(|p| p.trim().parse::<u32>().ok())
            .filter(|n| (64..=7680).contains(n))
    };
    let mut parts = text.split('x');
    match (parse(parts.next()), parse(parts.next()), parts.next()) {
        (Some(w), Some(h), None) => Ok((w, h)),
        _ => Err(format!(
            "expected WIDTHxHEIGHT, each 64 to 7680 pixels, got `{text}`"
        )),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mode = cli.mode.unwrap_or(Mode::Local(cli.local));
    match run(mode) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("sandbox_view: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

fn run(mode: Mode) -> Result<ExitCode, Failure> {
    let mut joined = None;
    let (mut app, view) = match mode {
        Mode::Local(local) => {
            let view = &local.view;
            let s = &local.args.session;
            let (game, trace) = load_session(s.scene.as_deref(), s.trace.as_deref(), s.players)?;
            let mut app = window_app("simsync sandbox: local", view);
            session::add_local(&mut app, &local.args, game, trace);
            app.add_plugins(keyboard::KeyboardPlugin);
            add_session_view(&mut app, &local.view);
            (app, local.view)
        }
        Mode::Network(net) => {
            let s = &net.args.session;
            let (game, trace) = load_session(s.scene.as_deref(), s.trace.as_deref(), s.players)?;
            let drawn = session::drawn_client(s.players);
            let title = format!("simsync sandbox: network, client {drawn}");
            let mut app = window_app(&title, &net.view);
            session::add_network(&mut app, &net.args, game, trace)?;
            add_session_view(&mut app, &net.view);
            (app, net.view)
        }
        Mode::Ownership(own) => {
            let setup = ownership::Setup::load(own.args.scene.as_deref(), own.args.participants)?;
            let script = ownership::load_script(own.args.trace.as_deref())?;
            if !own.args.run.quiet {
                ownership::print_banner("in-process, rendered", &setup, Some(&script));
            }
            let mut app = window_app("simsync sandbox: ownership, participant 0", &own.view);
            ownership_view::add_ownership(&mut app, &own.args, setup, script)?;
            (app, own.view)
        }
        Mode::Hybrid(hybrid) => {
            let setup = hybrid::Setup::load(&hybrid.args)?;
            if !hybrid.args.quiet {
                println!("{}", setup.banner(&hybrid.args));
            }
            let mut app = window_app("simsync sandbox: hybrid, peer 0", &hybrid.view);
            hybrid_view::add_hybrid(&mut app, &hybrid.args, setup)?;
            (app, hybrid.view)
        }
        Mode::Join(join) if join.args.ownership => {
            let title = format!(
                "simsync sandbox: join --ownership, participant {}",
                join.args.participant_index
            );
            let mut app = window_app(&title, &join.view);
            ownership_join::add_ownership_join(&mut app, &join.args)?;
            (app, join.view)
        }
        Mode::Join(join) => {
            let mut app = window_app("simsync sandbox: join", &join.view);
            let outcome = join::JoinOutcome::default();
            join::add_join(&mut app, &join.args, &join.view, outcome.clone())?;
            add_session_view(&mut app, &join.view);
            joined = Some(outcome);
            (app, join.view)
        }
    };
    app.add_plugins((
        draw::CameraPlugin,
        hud::HudPlugin {
            screenshot: view.screenshot.clone(),
            start_screenshot: view.start_screenshot.clone(),
        },
    ));
    if view.no_msaa {
        app.add_systems(PostStartup, draw::msaa_off);
    }
    let exit = app.run();
    if let Some(outcome) = joined {
        return join_exit(outcome.take());
    }
    match exit {
        AppExit::Success => Ok(ExitCode::SUCCESS),
        AppExit::Error(code) => Err(Failure::run(format!("exited with code {code}"))),
    }
}

/// The exit of `join` as `sandbox join`'s: 0 when this client agreed, 1 when it did not, the
/// failure's code; 1 also when the window was closed before the match ended.
fn join_exit(outcome: Option<Result<bool, Failure>>) -> Result<ExitCode, Failure> {
    match outcome {
        Some(Ok(true)) => Ok(ExitCode::SUCCESS),
        Some(Ok(false)) => Err(Failure::run(
            "clients disagreed on a checksum or a prediction mismatched",
        )),
        Some(Err(failure)) => Err(failure),
        None => Err(Failure::run("the window was closed before the match ended")),
    }
}

/// An App with Bevy's default plugins and a `--window` sized window, updated continuously also when
/// the window is not focused (under Xvfb it never is). With a screenshot to take, pipelines
/// compile before the frame that needs them (no frame is presented without its meshes: a
/// `--start-screenshot` shows the scene, not a blank window).
fn window_app(title: &str, view: &ViewArgs) -> App {
    let mut app = App::new();
    let shots = view.screenshot.is_some() || view.start_screenshot.is_some();
    app.add_plugins(
        DefaultPlugins
            .set(WindowPlugin {
                primary_window: Some(Window {
                    title: title.into(),
                    resolution: view.window.into(),
                    present_mode: if view.no_vsync {
                        PresentMode::AutoNoVsync
                    } else {
                        PresentMode::AutoVsync
                    },
                    ..default()
                }),
                ..default()
            })
            .set(RenderPlugin {
                synchronous_pipeline_compilation: shots,
                ..default()
            }),
    )
    .insert_resource(WinitSettings {
        focused_mode: UpdateMode::Continuous,
        unfocused_mode: UpdateMode::Continuous,
    });
    app
}

/// What the deterministic modes draw: diagnostics, smoothing, the worlds.
fn add_session_view(app: &mut App, view: &ViewArgs) {
    app.add_plugins((
        SessionDiagnosticsPlugin::default(),
        VisualSmoothingPlugin::default().enabled(!view.no_smoothing),
        draw::DrawPlugin,
    ));
}
