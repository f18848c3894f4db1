//! Ownership mode: distributed physics with simulation ownership (`OwnershipPlugin`).
//!
//! `sandbox ownership` runs an entity server and `--participants` participants (default 3),
//! each its own Bevy App with its own Rapier world built from the sandbox scene, in this
//! process over the in-memory transport with a seeded link conditioner: `--rtt-ms` (default
//! 80, so 40 ms each way), `--net-jitter-ms` (default 10, so ± 5 ms each way) and
//! `--loss-percent` (default 2 %, each way). Every App steps a simulated 1/64 s per update.
//! Each participant owns its avatar (the scene's player ball, held for good, so at GRAB) and
//! follows its part of a scripted trace (`--trace`, default
//! `assets/traces/ownership_three.ron`): walking into piles (avatar contacts: POKE), pushing and
//! poking bodies (script edits: POKE), grabbing and carrying them (GRAB). Bodies knocked by an
//! owned body are bid for at one priority less (rule 11), bodies moving unowned are
//! volunteered for (rule 7), bodies at rest are released (rule 12).
//!
//! The script runs for `--ticks` ticks; then inputs stop and the session settles for at least
//! `--settle-seconds` (and until no body but the avatars is owned, at most 20 s more), and the
//! copies of every dynamic body on all participants are compared: `max_divergence_m` is the
//! largest distance between two participants' copies of one body.
//!
//! Over UDP, in separate processes: `sandbox serve --ownership --bind ADDR` runs the entity
//! server alone, `sandbox join --ownership --connect ADDR --participant-index I` one
//! participant playing script participant `I`, both paced to real time. Each prints its own
//! counters; the divergence needs every copy, so only the in-process run reports it. A `join`
//! exits 0 only for a session that ran to its end; it stops and exits 1 when the session ends
//! early — nothing heard from the entity server for 10 s (`server gone`), or the server ended
//! the room (a drain or its operator, with the server's reason).
//!
//! The parts: `script` (the trace file), `bodies` (the scene as numbered bodies), `actors` (a
//! participant's scripted actions), `apps` (server and participant Apps), `in_process`, `udp`,
//! `summary`.

// `pub(crate)`: the rendered `join --ownership` (sandbox_view) steps a participant with them.
pub(crate) mod actors;
// `pub(crate)`: `sandbox hybrid` runs the same server and participants for its props.
pub(crate) mod apps;
pub(crate) mod bodies;
pub mod in_process;
// `pub(crate)`: the integration tests load the shipped script with it.
pub(crate) mod script;
mod summary;
pub(crate) mod udp;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bevy_rapier3d::prelude::RigidBody;

use crate::cli;
use crate::driver::Failure;
use crate::scene::load_scene;
pub use bodies::NetBody;
use bodies::net_bodies;
use script::Script;

pub use in_process::run_in_process;
pub use udp::{run_udp_client, run_udp_server};

/// One step of simulated time (64 Hz).
pub const DT: Duration = Duration::from_micros(15_625);
/// Steps per second.
pub const HZ: u32 = 64;
/// Steps allowed for every participant to join.
pub const JOIN_STEPS: u32 = 10 * HZ;

/// The scene of a session as numbered bodies.
pub struct Setup {
    /// The scene file read.
    pub scene: PathBuf,
    /// Its bodies, numbered for `participants` avatars.
    pub bodies: Vec<NetBody>,
    /// Participants of the session.
    pub participants: u8,
}

impl Setup {
    /// Loads the scene (`--scene`, or the default found at run time) and numbers its bodies.
    /// Every App of a session must number the bodies alike, so each builds the scene for all
    /// `participants` avatars.
    ///
    /// # Errors
    /// Exit code 2 if the scene is missing or invalid, or has fewer player spawns than
    /// participants.
    pub fn load(scene: Option<&Path>, participants: u8) -> Result<Self, Failure> {
        let path = cli::asset_path(scene, cli::DEFAULT_SCENE, "--scene").map_err(Failure::input)?;
        let scene = load_scene(&path).map_err(|e| Failure::input(e.to_string()))?;
        if usize::from(participants) > scene.players.len() {
            return Err(Failure::input(format!(
                "--participants {participants} but {} has only {} player spawns",
                path.display(),
                scene.players.len()
            )));
        }
        Ok(Self {
            bodies: net_bodies(&scene, participants),
            scene: path,
            participants,
        })
    }
}

/// A loaded ownership script and its file.
pub struct LoadedScript {
    /// The file read.
    pub path: PathBuf,
    /// The script.
    pub script: Arc<Script>,
}

/// Loads the ownership script (`--trace`, or the default found at run time).
///
/// # Errors
/// Exit code 2 if it is missing or invalid.
pub fn load_script(trace: Option<&Path>) -> Result<LoadedScript, Failure> {
    let path =
        cli::asset_path(trace, cli::DEFAULT_OWNERSHIP_TRACE, "--trace").map_err(Failure::input)?;
    let script = script::load_script(&path).map_err(|e| Failure::input(e.to_string()))?;
    Ok(LoadedScript {
        path,
        script: Arc::new(script),
    })
}

/// Prints what the run is about to do.
pub fn print_banner(role: &str, setup: &Setup, script: Option<&LoadedScript>) {
    let dynamic = setup
        .bodies
        .iter()
        .filter(|b| b.kind == RigidBody::Dynamic)
        .count();
    let script = script.map_or(String::new(), |s| {
        format!(
            ", trace {} ({} segments for {} participants, {} ticks)",
            s.path.display(),
            s.script.segments,
            s.script.participants,
            s.script.end_tick,
        )
    });
    println!(
        "sandbox: ownership mode ({role}), {} participants; scene {} ({} bodies, {dynamic} \
         dynamic){script}",
        setup.participants,
        setup.scene.display(),
        setup.bodies.len(),
    );
}

/// `--settle-seconds` in steps (rounded up).
pub fn settle_ticks(seconds: f64) -> u32 {
    (seconds.max(0.0) * f64::from(HZ)).ceil() as u32
}
