//! `sandbox serve --ownership` and `sandbox join --ownership`: the entity server and one
//! participant as separate processes over UDP, paced to real time (64 steps per second).

use std::process::ExitCode;
use std::time::Instant;

use bevy::prelude::*;
use bevy_rapier3d::prelude::RigidBody;
use serde_json::json;
use simsync_net::{ClientTransport, UdpServerConfig, UdpServerTransport};
use simsync_ownership::{BodyNetId, EntityServer, OwnershipClient};

use super::actors::{Actor, stop_script};
use super::apps::{participant_app, server_app};
use super::summary::write_json;
use super::{DT, HZ, JOIN_STEPS, Setup, load_script, print_banner, settle_ticks};
use crate::cli::{JoinArgs, ServeArgs};
use crate::driver::{Failure, log_plugin};
use crate::link::ServerLink;

/// Steps `app` in real time (64 Hz) until `done` or `ticks` steps.
fn paced(app: &mut App, ticks: u32, mut done: impl FnMut(&App) -> bool) -> u32 {
    let start = Instant::now();
    for tick in 0..ticks {
        if done(app) {
            return tick;
        }
        app.update();
        let due = start + DT * (tick + 1);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    ticks
}

/// `sandbox serve --ownership --bind ADDR`: the entity server alone, over UDP, for `--ticks`
/// plus the settling time after the first participant joined (or until every participant that
/// joined left).
///
/// # Errors
/// Exit code 2 for a bad scene or an address that cannot be bound.
pub fn run_udp_server(args: &ServeArgs) -> Result<ExitCode, Failure> {
    let setup = Setup::load(args.scene.as_deref(), args.participants)?;
    let bind = args.bind;
    let transport = UdpServerTransport::bind(UdpServerConfig::unsecure(bind))
        .map_err(|e| Failure::input(format!("cannot bind {bind}: {e}")))?;
    if !args.run.quiet {
        print_banner("entity server over UDP", &setup, None);
        println!("entity server listening on {}", transport.local_addr());
    }
    let mut server = server_app(
        &setup.bodies,
        transport,
        Some(log_plugin(args.run.quiet)),
        true,
    );
    let joined = |app: &App| {
        app.world()
            .resource::<EntityServer>()
            .stats()
            .participants_joined
    };
    paced(&mut server, u32::MAX, |app| joined(app) > 0);
    let settle = settle_ticks(args.settle_seconds);
    paced(&mut server, args.run.ticks + settle + 5 * HZ, |app| {
        let s = app.world().resource::<EntityServer>().stats();
        s.participants_left >= s.participants_joined
    });
    let s = server.world().resource::<EntityServer>();
    let stats = *s.stats();
    let changes = s.arbiter().stats().ownership_changes;
    let expired = stats.expiries + stats.disconnect_clears + stats.silence_clears;
    println!(
        "entity server: {} participants, {changes} ownership changes, {} bids granted, bids \
         refused: {}, {} releases, releases and state updates refused: {}, {} state updates \
         relayed, {expired} owners expired ({} participants silent)",
        stats.participants_joined,
        stats.bids_granted,
        stats.bids_refused,
        stats.releases_granted,
        stats.releases_refused + stats.state_updates_refused,
        stats.state_updates_relayed,
        stats.participants_silent,
    );
    if let Some(path) = &args.run.summary_json {
        let summary = json!({
            "mode": "ownership-server",
            "participants_joined": stats.participants_joined,
            "ownership_changes": changes,
            "bids_granted": stats.bids_granted,
            "bids_refused": stats.bids_refused,
            "releases": stats.releases_granted,
            "releases_refused": stats.releases_refused,
            "state_updates_refused": stats.state_updates_refused,
            "state_updates_relayed": stats.state_updates_relayed,
            "owners_expired": expired,
            "participants_silent": stats.participants_silent,
        });
        write_json(&summary, path)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `sandbox join --ownership --connect ADDR --participant-index I`: one participant over UDP,
/// playing script participant `I`.
///
/// Stops early when the session ends (the entity server gone for its silence timeout, or the
/// room ended by the server), prints its counters and fails; a session that ran to its end
/// leaves cleanly and exits 0.
///
/// # Errors
/// Exit code 2 for bad files, an index not below `--participants` or a socket that cannot be
/// opened; 1 if the entity server does not answer, is gone or ends the room early.
pub fn run_udp_client(args: &JoinArgs) -> Result<ExitCode, Failure> {
    let UdpParticipant {
        mut app, server, ..
    } = connect_participant(args, Some(log_plugin(args.run.quiet)))?;
    let joined = |app: &App| app.world().resource::<OwnershipClient>().me().is_some();
    if paced(&mut app, JOIN_STEPS, joined) >= JOIN_STEPS {
        return Err(Failure::run(format!(
            "no answer from the entity server at {server} in 10 s"
        )));
    }
    start_script(&mut app);
    paced(&mut app, args.run.ticks, has_ended);
    if !has_ended(&app) {
        stop_script(&mut app);
        paced(&mut app, settle_ticks(args.settle_seconds), has_ended);
    }
    finish_participant(args, &mut app)?;
    Ok(ExitCode::SUCCESS)
}

/// A participant of `join --ownership` over UDP ([`connect_participant`]).
pub struct UdpParticipant {
    /// Its App, with its own Rapier world and the scripted actor.
    pub app: App,
    /// The entity server's address.
    pub server: std::net::SocketAddr,
}

/// The participant of `join --ownership` (`args`), connecting to its server over UDP but not
/// stepped yet; the script (`--trace`) is loaded but not started.
///
/// # Errors
/// Exit code 2 for bad files, an index not below `--participants` or a socket that cannot be
/// opened.
pub fn connect_participant(
    args: &JoinArgs,
    log: Option<bevy::log::LogPlugin>,
) -> Result<UdpParticipant, Failure> {
    let index = args.participant_index;
    let link = ServerLink::from_args(args.connect, args.token.as_deref())?;
    if index >= args.participants {
        return Err(Failure::input(format!(
            "--participant-index {index} but the session has {} participants (--participants)",
            args.participants
        )));
    }
    let setup = Setup::load(args.scene.as_deref(), args.participants)?;
    let script = load_script(args.trace.as_deref())?;
    if !args.run.quiet {
        print_banner(
            &format!("participant {index} over UDP"),
            &setup,
            Some(&script),
        );
    }
    // Unique enough among the clients of one server: process id and index.
    let client_id = u64::from(std::process::id()) << 8 | u64::from(index);
    let transport = link.transport(client_id)?;
    let app = participant_app(&setup.bodies, index, script.script, transport, log, true);
    Ok(UdpParticipant {
        app,
        server: link.server,
    })
}

/// Starts the participant's script (once joined).
pub fn start_script(app: &mut App) {
    app.world_mut().resource_mut::<Actor>().running = true;
}

/// The end of a participant's session: prints its counters (and `--summary-json`); a session
/// that ran to its end leaves (a normal end, not a lost connection).
///
/// # Errors
/// Exit code 1 if the session ended early (server gone, room ended); 2 if the summary file
/// cannot be written.
pub fn finish_participant(args: &JoinArgs, app: &mut App) -> Result<(), Failure> {
    report_participant(args, app)?;
    let client = app.world().resource::<OwnershipClient>();
    if let Some(end) = client.ended().filter(|end| end.is_early()) {
        return Err(Failure::run(format!(
            "participant {}: the session ended early: {end}",
            args.participant_index
        )));
    }
    app.world_mut().resource_mut::<OwnershipClient>().leave();
    app.world_mut()
        .resource_mut::<ClientTransport>()
        .disconnect();
    app.update();
    Ok(())
}

/// Whether the participant's session with the entity server ended (server gone, room ended).
pub fn has_ended(app: &App) -> bool {
    app.world().resource::<OwnershipClient>().ended().is_some()
}

/// Prints a participant's counters (and writes them to `--summary-json`).
fn report_participant(args: &JoinArgs, app: &App) -> Result<(), Failure> {
    let client = app.world().resource::<OwnershipClient>();
    let p = *client.stats();
    let bytes_each = if p.state_updates_sent == 0 {
        0.0
    } else {
        p.state_update_bytes as f64 / p.state_updates_sent as f64
    };
    println!(
        "participant {}: {} bids sent ({} resends), {} granted, refusals: {}, {} releases, \
         {} state updates sent ({bytes_each:.1} bytes each), {} relayed states applied",
        args.participant_index,
        p.bids_sent,
        p.bid_resends,
        p.grants_received,
        p.refusals_received,
        p.releases_sent,
        p.state_updates_sent,
        p.relays_applied,
    );
    if let Some(path) = &args.run.summary_json {
        let summary = json!({
            "mode": "ownership-participant",
            "participant_index": args.participant_index,
            "bids_sent": p.bids_sent,
            "bid_resends": p.bid_resends,
            "grants_received": p.grants_received,
            "refusals_received": p.refusals_received,
            "counted_silent": p.counted_silent,
            "releases_sent": p.releases_sent,
            "state_updates_sent": p.state_updates_sent,
            "bytes_per_state_update": bytes_each,
            "relays_applied": p.relays_applied,
            "ended": client.ended().map(ToString::to_string),
            "bodies": body_positions(app),
        });
        write_json(&summary, path)?;
    }
    Ok(())
}

/// Every dynamic body's position on this participant, by body id (metres), for comparing the
/// participants' copies across processes.
fn body_positions(app: &App) -> serde_json::Map<String, serde_json::Value> {
    let world = app.world();
    let mut positions: Vec<(u64, [f32; 3])> = world
        .try_query::<(&BodyNetId, &Transform, &RigidBody)>()
        .map(|mut query| {
            query
                .iter(world)
                .filter(|(_, _, kind)| **kind == RigidBody::Dynamic)
                .map(|(id, at, _)| (id.0.0, at.translation.to_array()))
                .collect()
        })
        .unwrap_or_default();
    positions.sort_by_key(|(id, _)| *id);
    positions
        .into_iter()
        .map(|(id, at)| (id.to_string(), json!(at)))
        .collect()
}
