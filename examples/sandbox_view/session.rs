//! The deterministic-session modes of the view.
//!
//! - Local: the main app runs the local session of `sandbox local` (same scene, trace and
//!   settings); once the verified world reached `--ticks` it prints the same summary.
//! - Network: the main app is client 1 (client 0 with `--players 1`) of `sandbox network`; the
//!   relay and the other clients are headless Apps stepped around the main app's frame in the
//!   headless sandbox's order (relay, client 0, client 1, ...), so the run is the same run as
//!   `sandbox network` with the same flags, and it prints the same summary.
//!
//! Both write the HUD's lines from the main app's `SessionStats` and `simsync/session/*`
//! diagnostics.

use std::time::{Duration, Instant};

use bevy::app::MainScheduleOrder;
use bevy::diagnostic::DiagnosticsStore;
use bevy::ecs::schedule::ScheduleLabel;
use bevy::prelude::*;
use bevy::time::Real;
use simsync::deterministic::SessionDiagnosticsPlugin;
use simsync::ownership::CounterRate;
use simsync::prelude::{SessionStats, SimulationWorlds};

use super::cli::{LocalArgs, NetworkArgs};
use super::driver::{self, Failure};
use super::game::SandboxGame;
use super::hud::{HudLines, RunFinished, ShotReady, StartShotReady};
use super::in_process::{self, InProcessNetwork};
use super::network;
use super::summary::Summary;
use super::trace::CompiledTrace;

/// Adds the local session of `args` (as `sandbox local` runs it) to the main app.
pub fn add_local(app: &mut App, args: &LocalArgs, game: SandboxGame, trace: CompiledTrace) {
    driver::add_session(app, args, game, trace);
    app.insert_resource(LocalRun(args.clone()))
        .add_systems(Last, finish_local)
        .add_plugins(SessionHudPlugin);
}

/// The arguments of the local run (main-app resource).
#[derive(Resource)]
struct LocalRun(LocalArgs);

/// Once the verified world reached `--ticks`: prints the summary of `sandbox local`.
fn finish_local(world: &mut World) {
    if world.contains_resource::<RunFinished>() {
        return;
    }
    let args = world.resource::<LocalRun>().0.clone();
    let stats = world.resource::<SessionStats>().clone();
    if stats.verified_tick < args.run.ticks as i32 {
        return;
    }
    let checksum = world.resource_mut::<SimulationWorlds>().verified_checksum();
    let summary = Summary::new(
        "local",
        args.run.ticks,
        args.session.players,
        !args.session.no_verify_predictions,
        &stats,
        checksum,
    );
    println!("{}", summary.to_text());
    world.insert_resource(RunFinished {
        ok: summary.predictions_matched(),
    });
    world.insert_resource(ShotReady);
}

/// Steps the relay and the clients before the drawn one (before `First`).
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
struct StepPeersBefore;

/// Steps the clients after the drawn one, then checks whether the run finished (after `Last`).
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
struct StepPeersAfter;

/// The headless Apps of network mode (main-app non-send resource: an `App` is not `Send`).
struct Peers {
    args: NetworkArgs,
    server: App,
    /// Clients with a lower slot than the drawn one, stepped before it.
    before: Vec<App>,
    /// Clients with a higher slot, stepped after it.
    after: Vec<App>,
    start: Instant,
}

/// The client network mode draws: client 1, or client 0 when it is alone.
pub fn drawn_client(players: u8) -> u8 {
    players.min(2) - 1
}

/// Makes the main app client [`drawn_client`] of `sandbox network` with `args`, and adds the
/// relay and the other clients as headless peers.
///
/// # Errors
/// Exit code 2 for `--late-join-at` or `--record` (headless only) or a bad link or session
/// configuration; 1 if the in-memory network cannot be made.
pub fn add_network(
    app: &mut App,
    args: &NetworkArgs,
    game: SandboxGame,
    trace: CompiledTrace,
) -> Result<(), Failure> {
    if args.late_join_at.is_some() || args.session.record.is_some() {
        return Err(Failure::input(
            "--late-join-at and --record are headless only: use `sandbox network`",
        ));
    }
    let net = InProcessNetwork::new(args, None)?;
    let drawn = drawn_client(args.session.players);
    let mut peers = Peers {
        args: args.clone(),
        server: App::empty(),
        before: Vec::new(),
        after: Vec::new(),
        start: Instant::now(),
    };
    for id in 0..args.session.players {
        let game = in_process::client_game(args, &game, id);
        let name = format!("client-{id}");
        if id == drawn {
            let transport = net.client_transport(id)?;
            network::add_client(
                app,
                net.session.clone(),
                args.run.ticks,
                game,
                trace.clone(),
                transport,
                name,
            );
        } else {
            let client = net.client(id, args.run.ticks, game, trace.clone(), name)?;
            if id < drawn {
                peers.before.push(client);
            } else {
                peers.after.push(client);
            }
        }
    }
    peers.server = net.server;
    app.insert_non_send(peers)
        .init_schedule(StepPeersBefore)
        .init_schedule(StepPeersAfter)
        .add_systems(StepPeersBefore, step_peers_before)
        .add_systems(StepPeersAfter, (step_peers_after, finish_network).chain())
        .add_plugins(SessionHudPlugin);
    let mut order = app.world_mut().resource_mut::<MainScheduleOrder>();
    order.insert_before(First, StepPeersBefore);
    order.insert_after(Last, StepPeersAfter);
    Ok(())
}

fn step_peers_before(mut peers: NonSendMut<Peers>) {
    let peers = &mut *peers;
    peers.server.update();
    for client in &mut peers.before {
        client.update();
    }
}

fn step_peers_after(mut peers: NonSendMut<Peers>) {
    for client in &mut peers.after {
        client.update();
    }
}

/// Once every client's verified world reached `--ticks` (checked where the headless loop
/// checks it, after every App stepped): prints the summary of `sandbox network`.
fn finish_network(world: &mut World) {
    if world.contains_resource::<RunFinished>() {
        return;
    }
    let Some(mut peers) = world.remove_non_send::<Peers>() else {
        return;
    };
    let target = peers.args.run.ticks as i32;
    let verified = |w: &World| w.resource::<SessionStats>().verified_tick;
    let done = verified(&*world) >= target
        && peers
            .before
            .iter()
            .chain(&peers.after)
            .all(|c| verified(c.world()) >= target);
    if done {
        let elapsed = peers.start.elapsed();
        let Peers {
            args,
            server,
            before,
            after,
            ..
        } = &mut peers;
        let mut worlds: Vec<&mut World> = before.iter_mut().map(App::world_mut).collect();
        worlds.push(&mut *world);
        worlds.extend(after.iter_mut().map(App::world_mut));
        let result = network::report(args, server.world(), &mut worlds, None, None, elapsed);
        let ok = match result {
            Ok(ok) => ok,
            Err(failure) => {
                eprintln!("sandbox_view: {}", failure.message);
                false
            }
        };
        world.insert_resource(RunFinished { ok });
        world.insert_resource(ShotReady);
    }
    world.insert_non_send(peers);
}

/// Writes the HUD's lines from `SessionStats` and the session diagnostics.
pub struct SessionHudPlugin;

impl Plugin for SessionHudPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(RollbackRate(CounterRate::new(Duration::from_secs(1))))
            .add_systems(Update, session_hud);
    }
}

/// Lines a mode adds below the session's HUD lines (main-app resource; `join` writes the link's
/// loss and the match's state).
#[derive(Resource, Default, Debug, Clone)]
pub struct HudFooter(pub String);

/// Rollbacks per (wall-clock) second.
#[derive(Resource)]
struct RollbackRate(CounterRate);

/// The HUD's lines for `stats`: rollbacks per second, bytes per second (down, up).
pub fn session_lines(stats: &SessionStats, rollbacks_per_second: f64, bytes: (f64, f64)) -> String {
    let net = stats.network.as_ref();
    let mode = if net.is_some() {
        format!(
            "network, slot {}",
            net.and_then(|n| n.slot)
                .map_or("-".into(), |s| s.to_string())
        )
    } else {
        "local".to_string()
    };
    format!(
        "simsync sandbox ({mode})\n\
         tick {local}  verified {verified}  predicted {predicted}\n\
         prediction depth {depth} ticks (max {max})\n\
         rollbacks {rollbacks} ({rps:.1}/s)  re-simulated ticks {resim}\n\
         RTT {rtt}  input delay {delay}\n\
         bytes/s up {up:.0}  down {down:.0}\n\
         ownership changes - (no ownership in this mode)\n\
         checksum {checksum}",
        local = stats.local_tick,
        verified = stats.verified_tick,
        predicted = stats.predicted_tick,
        depth = stats.predicted_tick - stats.verified_tick,
        max = stats.max_prediction_depth,
        rollbacks = stats.rollbacks,
        rps = rollbacks_per_second,
        resim = stats.resimulated_ticks,
        rtt = net.map_or("- (local)".to_string(), |n| format!("{:.1} ms", n.rtt_ms)),
        delay = net.map_or("-".to_string(), |n| format!(
            "{} ticks",
            n.input_delay_ticks
        )),
        up = bytes.1,
        down = bytes.0,
        checksum = stats.last_checksum.map_or("-".to_string(), |c| format!(
            "{:016x} at tick {}",
            c.checksum, c.tick
        )),
    )
}

/// The HUD's lines every frame; once the verified world passed tick 0, the start screenshot's
/// [`StartShotReady`].
#[allow(clippy::too_many_arguments)]
fn session_hud(
    mut commands: Commands,
    stats: Option<Res<SessionStats>>,
    diagnostics: Res<DiagnosticsStore>,
    time: Res<Time<Real>>,
    (finished, started): (Option<Res<RunFinished>>, Option<Res<StartShotReady>>),
    footer: Option<Res<HudFooter>>,
    mut rate: ResMut<RollbackRate>,
    mut lines: ResMut<HudLines>,
) {
    let Some(stats) = stats else {
        return;
    };
    if started.is_none() && stats.verified_tick >= 1 {
        commands.insert_resource(StartShotReady);
    }
    // The HUD stops with the run, so the screenshot shows the summary's numbers.
    if finished.is_some() {
        return;
    }
    let per_second = rate.0.update(stats.rollbacks, time.delta());
    let value = |path| diagnostics.get_measurement(path).map_or(0.0, |m| m.value);
    let bytes = (
        value(&SessionDiagnosticsPlugin::BYTES_IN_PER_SECOND),
        value(&SessionDiagnosticsPlugin::BYTES_OUT_PER_SECOND),
    );
    lines.0 = session_lines(&stats, per_second, bytes);
    if let Some(footer) = footer.filter(|f| !f.0.is_empty()) {
        lines.0.push('\n');
        lines.0.push_str(&footer.0);
    }
}
