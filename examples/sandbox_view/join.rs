//! `sandbox_view join`: a rendered client of a relay room over UDP (`sandbox host`, `sandbox
//! serve`, `simsync-server`), the window's frames pacing it in real time.
//!
//! The client is the headless `sandbox join`'s (`network::join_setup`, `add_paced_client`):
//! the same session, stop tick, checks and summary; only its clocks follow the wall clock
//! (`ClientPacing::RealTime`) instead of one tick per paced update, and its own player's input
//! is the keyboard's while a key is held, else `--trace`'s script (only when given: without it
//! the player stands still), per tick (`JoinKeyboardPlugin`).
//!
//! Each frame, after the session update, [`drive_join`] does what the headless client's loop
//! does between two updates: checks that the match can go on (`network::match_failure`, and
//! the time limit), prints the lifecycle's changes, the reconnect token and a progress line a
//! second; once the verified world reached `--ticks` it requests the screenshot, waits for the
//! relay's judgement, prints the same summary and `client: match 1 of 1: ... final checksum`
//! line, keeps the connection half a second, says goodbye and, once the connection closed,
//! exits 0 when this client agreed, 1 when it did not (as `sandbox join`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bevy::prelude::*;
use bevy::window::PrimaryWindow;
use simsync::deterministic::{LeaveSession, SessionSetupError};
use simsync::prelude::SessionStats;
use simsync::relay::MatchId;
use simsync_net::prelude::RenetClient;

use super::ViewArgs;
use super::cli::JoinArgs;
use super::driver::Failure;
use super::hud::{RunFinished, ShotReady};
use super::keyboard::JoinKeyboardPlugin;
use super::link::ServerLink;
use super::network::{self, ClientPacing, ClientWatch};
use super::session::{HudFooter, SessionHudPlugin};

/// How the rendered `join` ended, read by `main` once the window's loop returned: `None` while
/// the match runs (or when the window was closed before its end), else the run's result
/// (`Ok(agree)` as `network::run_client` returns it).
#[derive(Clone, Default)]
pub struct JoinOutcome(Arc<Mutex<Option<Result<bool, Failure>>>>);

impl JoinOutcome {
    fn set(&self, outcome: Result<bool, Failure>) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(outcome);
        }
    }

    /// The outcome, taken (`None` before the end).
    pub fn take(&self) -> Option<Result<bool, Failure>> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }
}

/// Where the client is in its one match (the headless loop's steps, one frame at a time).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Connecting, in the lobby, or playing until the verified world reaches `--ticks`.
    Playing,
    /// Waiting for the relay's judgement of the checksums, until the deadline.
    Judging { until: Instant },
    /// Keeping the connection a moment so the server sees the acknowledgement; `agree` is the
    /// match report's verdict.
    Lingering { until: Instant, agree: bool },
    /// Goodbye said; until the connection closed or the deadline.
    Leaving { until: Instant, agree: bool },
    /// The outcome is set.
    Done,
}

/// The rendered join's state (main-app resource).
#[derive(Resource)]
struct JoinRun {
    args: JoinArgs,
    phase: Phase,
    watch: ClientWatch,
    limit: Instant,
    last_report: Instant,
    outcome: JoinOutcome,
    /// `--screenshot` was given: the HUD exits once it is saved.
    screenshot: bool,
    /// The window's title shows the player once the relay assigned the slot.
    titled: bool,
}

/// The match a rendered join plays (it plays one: `--matches` is headless only).
const MATCH: MatchId = MatchId(1);

/// Makes the main app a client of the relay room `args` name (`--token FILE` or `--connect
/// ADDR`), its own player under the keyboard (and `--trace`), with the HUD's network lines.
/// The caller adds the drawing (`add_session_view`) and the HUD (with `view`'s screenshot);
/// `outcome` tells it how the match ended.
///
/// # Errors
/// Exit code 2 for `--matches` other than 1 or `--record` (headless only), a bad scene, trace or
/// token file, or a socket that cannot be opened.
pub fn add_join(
    app: &mut App,
    args: &JoinArgs,
    view: &ViewArgs,
    outcome: JoinOutcome,
) -> Result<(), Failure> {
    if args.matches != 1 || args.record.is_some() {
        return Err(Failure::input(
            "--matches and --record are headless only: use `sandbox join`",
        ));
    }
    let (session, game, trace) = network::join_setup(args)?;
    let link = ServerLink::from_args(args.connect, args.token.as_deref())?;
    let transport = link.transport(network::fresh_client_id())?;
    let name = format!("view-{:x}", transport.client_id());
    if !args.run.quiet {
        println!(
            "sandbox_view: joining {} ({}), {} players, {} ticks{}",
            link.server,
            if link.is_secure() {
                "connect token"
            } else {
                "unsecured"
            },
            args.players,
            args.run.ticks,
            match &args.trace {
                Some(path) => format!(", scripted by {} when no key is held", path.display()),
                None => String::new(),
            }
        );
    }
    let (ticks, pacing) = (args.run.ticks, ClientPacing::RealTime);
    network::add_paced_client(app, session, ticks, game, transport.into(), name, pacing);
    let script = args.trace.is_some().then_some(trace);
    let now = Instant::now();
    app.add_plugins((JoinKeyboardPlugin { script }, SessionHudPlugin))
        .init_resource::<HudFooter>()
        .insert_resource(JoinRun {
            args: args.clone(),
            phase: Phase::Playing,
            watch: ClientWatch::new(&link),
            limit: now + network::match_time_limit(ticks),
            last_report: now,
            outcome,
            screenshot: view.screenshot.is_some(),
            titled: false,
        })
        .add_systems(Last, (drive_join, join_footer, join_title));
    Ok(())
}

/// One frame of the join's steps (module docs).
fn drive_join(world: &mut World) {
    let Some(mut run) = world.remove_resource::<JoinRun>() else {
        return;
    };
    let quiet = run.args.run.quiet;
    run.watch.show_token(world, quiet);
    run.watch.show_state(world, quiet);
    let result = match run.phase {
        Phase::Playing => play(world, &mut run),
        Phase::Judging { until } => {
            judge(world, &mut run, until);
            Ok(())
        }
        Phase::Lingering { until, agree } => {
            if Instant::now() >= until {
                world.write_message(LeaveSession);
                run.phase = Phase::Leaving {
                    until: Instant::now() + Duration::from_secs(2),
                    agree,
                };
            }
            Ok(())
        }
        Phase::Leaving { until, agree } => {
            if network::connection_closed(world) || Instant::now() >= until {
                finish(world, &mut run, Ok(agree));
            }
            Ok(())
        }
        Phase::Done => Ok(()),
    };
    if let Err(failure) = result {
        finish(world, &mut run, Err(failure));
    }
    world.insert_resource(run);
}

/// [`Phase::Playing`]: the checks of every update, the progress line, and the step to judging
/// once the verified world reached `--ticks` of the match.
fn play(world: &mut World, run: &mut JoinRun) -> Result<(), Failure> {
    let target = run.args.run.ticks as i32;
    if let Some(SessionSetupError(error)) = world.get_resource::<SessionSetupError>() {
        return Err(Failure::input(format!(
            "invalid session configuration: {error}"
        )));
    }
    network::match_failure(world, target)?;
    let verified = world.resource::<SessionStats>().verified_tick;
    let playing = network::playing(world, MATCH);
    if playing && verified >= target {
        world.insert_resource(ShotReady);
        run.phase = Phase::Judging {
            until: Instant::now() + network::JUDGEMENT_WAIT,
        };
        return Ok(());
    }
    if Instant::now() > run.limit {
        return Err(Failure::run(format!(
            "client: {MATCH}: verified tick {verified} of {target}; giving up"
        )));
    }
    if !run.args.run.quiet && playing && run.last_report.elapsed() >= Duration::from_secs(1) {
        run.last_report = Instant::now();
        println!("{}", network::progress_line(world, MATCH));
    }
    Ok(())
}

/// [`Phase::Judging`]: once the relay judged (or the wait is over), the match's report, the
/// `--summary-json` file, then lingering.
fn judge(world: &mut World, run: &mut JoinRun, until: Instant) {
    let quiet = run.args.run.quiet;
    let Some(judged) = network::judgement_done(world, until, quiet) else {
        return;
    };
    let (summary, agree) = network::match_report(world, &run.args.run, (1, 1), judged);
    if let Err(failure) = network::write_client_summaries(&run.args.run, &[summary]) {
        finish(world, run, Err(failure));
        return;
    }
    run.phase = Phase::Lingering {
        until: Instant::now() + Duration::from_millis(500),
        agree,
    };
}

/// Ends the join with `outcome`: with `--screenshot` and a finished match the HUD exits once
/// the screenshot is saved (code 0 when this client agreed, else 1); otherwise the app exits
/// now with that code, or the failure's.
fn finish(world: &mut World, run: &mut JoinRun, outcome: Result<bool, Failure>) {
    let (code, shot_waits) = match &outcome {
        Ok(agree) => (
            u8::from(!agree),
            run.screenshot && world.contains_resource::<ShotReady>(),
        ),
        Err(failure) => (failure.code, false),
    };
    run.outcome.set(outcome);
    run.phase = Phase::Done;
    world.insert_resource(RunFinished { ok: code == 0 });
    if !shot_waits {
        world.write_message(if code == 0 {
            AppExit::Success
        } else {
            AppExit::from_code(code)
        });
    }
}

/// The HUD's footer: the link's loss and bytes, and where the match is.
fn join_footer(
    run: Option<Res<JoinRun>>,
    stats: Option<Res<SessionStats>>,
    client: Option<Res<RenetClient>>,
    mut footer: ResMut<HudFooter>,
) {
    let (Some(run), Some(stats)) = (run, stats) else {
        return;
    };
    let loss = client.map(|c| c.network_info().packet_loss);
    footer.0 = join_lines(&stats, loss, run.phase, run.args.run.ticks);
}

/// The join's HUD lines for `stats` (each at most as wide as the session's lines, so the HUD
/// keeps the view clear): packet loss (a fraction of the packets, `None` without a
/// connection), this client's inputs the relay replaced as late, every player's replaced
/// inputs, this client's desyncs, and the state of the match of `ticks` ticks with the keys.
fn join_lines(stats: &SessionStats, loss: Option<f64>, phase: Phase, ticks: u32) -> String {
    let net = stats.network.clone().unwrap_or_default();
    let loss = loss.map_or("-".to_string(), |l| format!("{:.1} %", l * 100.0));
    let state = match phase {
        Phase::Playing if net.match_id.is_none() => "connecting, or in the lobby".to_string(),
        Phase::Playing => format!("playing to tick {ticks}: WASD/arrows, Space, E"),
        Phase::Judging { .. } => "match over: awaiting the relay's judgement".to_string(),
        Phase::Lingering { .. } | Phase::Leaving { .. } | Phase::Done => {
            "match over: leaving".to_string()
        }
    };
    format!(
        "loss {loss}  late {}  replaced {}  desyncs {}\n{state}",
        net.late_inputs, net.replaced_inputs, net.desyncs
    )
}

/// Names the player in the window's title once the relay assigned the slot.
fn join_title(
    mut run: ResMut<JoinRun>,
    stats: Option<Res<SessionStats>>,
    mut windows: Query<&mut Window, With<PrimaryWindow>>,
) {
    if run.titled {
        return;
    }
    let Some(slot) = stats.and_then(|s| s.network.as_ref().and_then(|n| n.slot)) else {
        return;
    };
    for mut window in &mut windows {
        window.title = format!("simsync sandbox: join, player {slot}");
    }
    run.titled = true;
}
