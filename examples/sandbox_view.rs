//! The sandbox, rendered (needs the `render` feature).
//!
//! Runs the same scene and trace as `sandbox local` and draws them: the predicted world with
//! `bevy_pbr` through [`VisualSmoothingPlugin`] (rollback corrections decay instead of popping),
//! the verified world as gizmo outlines (ghosts), a HUD fed by the session's diagnostics.
//! Player 0 follows the trace until a key is pressed; then WASD / arrows move it, Space jumps,
//! E pushes (through leafwing-input-manager).
//!
//! ```text
//! cargo run --release --features render --example sandbox_view -- --ticks 1800
//! cargo run --features render --example sandbox_view -- --ticks 300 --screenshot shot.png
//! ```
//!
//! With `--screenshot PATH` it saves a screenshot of the window once the verified world reached
//! `--ticks`, prints the HUD's numbers and exits. Exit codes: 0 success, 1 the run failed, 2 bad
//! arguments or input files.
//!
//! [`VisualSmoothingPlugin`]: simsync::VisualSmoothingPlugin

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
#[path = "sandbox_view/hud.rs"]
mod hud;
#[path = "sandbox_view/keyboard.rs"]
mod keyboard;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use bevy::prelude::*;
use clap::Parser;
use simsync::{SessionDiagnosticsPlugin, VisualSmoothingPlugin};

use driver::Failure;
use game::SandboxGame;

/// `sandbox_view`: the rendered local sandbox.
#[derive(Debug, Parser)]
#[command(
    name = "sandbox_view",
    about = "The simsync sandbox, rendered (local mode)"
)]
struct ViewArgs {
    #[command(flatten)]
    local: cli::LocalArgs,
    /// Save a screenshot of the window to PATH once the verified world reached --ticks, print
    /// the HUD's numbers and exit.
    #[arg(long, value_name = "PATH")]
    screenshot: Option<PathBuf>,
    /// Present the simulation as is: no rollback smoothing, no interpolation.
    #[arg(long)]
    no_smoothing: bool,
}

fn main() -> ExitCode {
    match run(ViewArgs::parse()) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("sandbox_view: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

fn run(args: ViewArgs) -> Result<ExitCode, Failure> {
    let session = &args.local.session;
    let scene_path = cli::asset_path(session.scene.as_deref(), cli::DEFAULT_SCENE, "--scene")
        .map_err(Failure::input)?;
    let trace_path = cli::asset_path(
        session.trace.as_deref(),
        cli::DEFAULT_SESSION_TRACE,
        "--trace",
    )
    .map_err(Failure::input)?;
    let scene = scene::load_scene(&scene_path).map_err(|e| Failure::input(e.to_string()))?;
    let trace = trace::load_trace(&trace_path).map_err(|e| Failure::input(e.to_string()))?;
    if usize::from(session.players) > scene.players.len() {
        return Err(Failure::input(format!(
            "--players {} but the scene has only {} player spawns",
            session.players,
            scene.players.len()
        )));
    }
    let game = SandboxGame::new(Arc::new(scene), session.players);
    let mut app = App::new();
    app.add_plugins(DefaultPlugins.set(WindowPlugin {
        primary_window: Some(Window {
            title: "simsync sandbox".into(),
            resolution: (1280, 720).into(),
            ..default()
        }),
        ..default()
    }));
    driver::add_session(&mut app, &args.local, game, trace);
    app.add_plugins((
        SessionDiagnosticsPlugin::default(),
        VisualSmoothingPlugin::default().enabled(!args.no_smoothing),
        draw::DrawPlugin,
        hud::HudPlugin {
            stop_tick: args.local.run.ticks as i32,
            screenshot: args.screenshot.clone(),
        },
        keyboard::KeyboardPlugin,
    ));
    match app.run() {
        AppExit::Success => Ok(ExitCode::SUCCESS),
        AppExit::Error(code) => Err(Failure::run(format!("exited with code {code}"))),
    }
}
