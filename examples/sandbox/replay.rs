//! Replays in the sandbox: `--record FILE` on `local`, `network` and `join` records the
//! verified ticks of a session (in `network` mode, client 0's), and `sandbox replay FILE`
//! plays one back in lockstep, checking every recorded checksum.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bevy::prelude::*;
use simsync::deterministic::{
    Replay, ReplayEnd, ReplayLimits, ReplayPlayback, ReplayRecorder, ReplayStatus,
    SessionSetupError,
};
use simsync::prelude::{
    DeterministicPlugin, PackedInput, SessionClock, SessionConfig, SessionStats,
};

use super::cli::{self, ReplayArgs};
use super::driver::{Failure, log_plugin};
use super::game::SandboxGame;
use super::scene;

/// A recording asked for on the command line.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The replay file to write.
    pub path: PathBuf,
    /// A world snapshot every this many verified ticks (0: none).
    pub snapshot_every: u32,
}

impl Recording {
    /// The recording of `--record FILE [--snapshot-every N]`, if given.
    pub fn from_args(path: Option<&Path>, snapshot_every: u32) -> Option<Self> {
        path.map(|path| Self {
            path: path.to_path_buf(),
            snapshot_every,
        })
    }

    /// Starts recording the session of `app` (before its first update).
    ///
    /// # Errors
    /// Exit code 2 when the file cannot be created.
    pub fn start(&self, app: &mut App) -> Result<(), Failure> {
        let recorder = ReplayRecorder::create(&self.path)
            .map_err(|e| Failure::input(format!("--record: {e}")))?
            .with_snapshot_every(self.snapshot_every);
        app.insert_resource(recorder);
        Ok(())
    }

    /// Finishes the recording of `app` (the end record) and prints what was written.
    ///
    /// # Errors
    /// Exit code 1 when the recording failed during the run or cannot be finished.
    pub fn finish(&self, app: &mut App, quiet: bool) -> Result<(), Failure> {
        let Some(mut recorder) = app.world_mut().get_resource_mut::<ReplayRecorder>() else {
            return Err(Failure::run("--record: the recorder is gone"));
        };
        if let Some(error) = recorder.error().cloned() {
            return Err(Failure::run(format!("--record stopped: {error}")));
        }
        recorder
            .finish()
            .map_err(|e| Failure::run(format!("--record: {e}")))?;
        if !quiet {
            println!(
                "recorded ticks {}..={} ({} frames, {} snapshots, {} bytes) to {}",
                recorder.last_tick() + 1 - recorder.frames() as i32,
                recorder.last_tick(),
                recorder.frames(),
                recorder.snapshots(),
                recorder.bytes(),
                self.path.display()
            );
        }
        Ok(())
    }
}

/// `sandbox replay FILE [--seek TICK]`: exit 0 when every recorded checksum matched, 1 at the
/// first mismatch, 2 for a bad, foreign or cut file.
///
/// # Errors
/// As the exit codes say; the failure's message is one line for stderr.
pub fn run_replay(args: &ReplayArgs) -> Result<ExitCode, Failure> {
    let replay = Replay::<PackedInput>::read_file(&args.file, &ReplayLimits::default())
        .map_err(|e| Failure::input(e.to_string()))?;
    let header = replay.header().clone();
    let scene_path = cli::asset_path(args.scene.as_deref(), cli::DEFAULT_SCENE, "--scene")
        .map_err(Failure::input)?;
    let scene = scene::load_scene(&scene_path).map_err(|e| Failure::input(e.to_string()))?;
    if usize::from(header.players) > scene.players.len() {
        return Err(Failure::input(format!(
            "the replay has {} players but {} has only {} player spawns",
            header.players,
            scene_path.display(),
            scene.players.len()
        )));
    }
    if !args.quiet {
        println!(
            "replay: {} ({} players, {} Hz, ticks {}..={}, {} snapshots, {}), scene {}",
            args.file.display(),
            header.players,
            header.tick_rate_hz,
            header.start_tick + 1,
            replay.last_tick(),
            replay.snapshots().len(),
            match replay.end() {
                ReplayEnd::Complete => "complete".to_string(),
                ReplayEnd::Cut { offset, .. } => format!("cut at byte {offset}"),
            },
            scene_path.display()
        );
    }
    let mut playback = ReplayPlayback::new(replay);
    if let Some(tick) = args.seek {
        playback = playback.with_seek(tick);
    }
    let game = SandboxGame::new(Arc::new(scene), header.players);
    let mut app = App::new();
    let pools = match args.threads {
        Some(threads) => TaskPoolOptions::with_num_threads(usize::from(threads)),
        None => TaskPoolOptions::default(),
    };
    let minimal = MinimalPlugins.set(TaskPoolPlugin {
        task_pool_options: pools,
    });
    app.add_plugins((minimal, log_plugin(true))).add_plugins(
        DeterministicPlugin::<PackedInput>::new(game)
            .config(SessionConfig {
                clock: SessionClock::Stepped {
                    ticks_per_update: args.ticks_per_update,
                },
                ..Default::default()
            })
            .replay(simsync::deterministic::ReplayMode::Play(playback)),
    );
    super::setup_check::watch(&mut app);
    app.finish();
    app.cleanup();
    if let Some(SessionSetupError(error)) = app.world().get_resource::<SessionSetupError>() {
        return Err(Failure::input(format!("the replay's session: {error}")));
    }
    play(&mut app, args.quiet)
}

/// Steps `app` until its playback stops, with a progress line every second; the exit code.
fn play(app: &mut App, quiet: bool) -> Result<ExitCode, Failure> {
    let start = Instant::now();
    let mut last_report = (start, 0);
    let mut reported_start = false;
    loop {
        let playback = app.world().resource::<ReplayPlayback<PackedInput>>();
        if !playback.is_playing() {
            break;
        }
        app.update();
        if let Some(message) = super::setup_check::failure(app) {
            return Err(Failure::input(message));
        }
        let playback = app.world().resource::<ReplayPlayback<PackedInput>>();
        if !quiet && !reported_start && playback.seek().is_some() {
            reported_start = true;
            println!(
                "seek {}: started from tick {}",
                playback.seek().unwrap_or(0),
                playback.start_tick()
            );
        }
        let now = Instant::now();
        if !quiet && now - last_report.0 >= Duration::from_secs(1) {
            let verified = app.world().resource::<SessionStats>().ticks_verified;
            let rate = (verified - last_report.1) as f64 / (now - last_report.0).as_secs_f64();
            println!(
                "[{:5.1} s] tick {}/{}  {} checksums matched  {rate:.0} ticks/s",
                (now - start).as_secs_f64(),
                playback.verified_tick(),
                playback.last_tick(),
                playback.checksums_checked(),
            );
            last_report = (now, verified);
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let playback = app.world().resource::<ReplayPlayback<PackedInput>>();
    let ticks = playback.verified_tick() - playback.start_tick();
    let line = format!(
        "ticks {}..={} played, {} checksums matched in {elapsed:.2} s ({:.0} ticks/s)",
        playback.start_tick() + 1,
        playback.verified_tick(),
        playback.checksums_checked(),
        f64::from(ticks) / elapsed.max(1e-9)
    );
    match playback.status().clone() {
        ReplayStatus::Finished {
            end: ReplayEnd::Complete,
        } => {
            println!("replay: every checksum matched: {line}");
            Ok(ExitCode::SUCCESS)
        }
        ReplayStatus::Finished {
            end: ReplayEnd::Cut { offset, last_tick },
        } => Err(Failure::input(format!(
            "the replay was cut at byte {offset} after tick {last_tick}; its complete frames \
             matched: {line}"
        ))),
        ReplayStatus::Mismatch(mismatch) => Err(Failure::run(format!(
            "checksum mismatch at tick {}: recorded {:016x}, replayed {:016x}",
            mismatch.tick, mismatch.expected, mismatch.found
        ))),
        ReplayStatus::Failed(error) => Err(Failure::input(error.to_string())),
        ReplayStatus::Playing => Err(Failure::run("the playback did not finish")),
    }
}
