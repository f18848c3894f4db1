//! `sandbox ownership`: the entity server and every participant in this process over the
//! in-memory transport, then a comparison of every participant's copy of every dynamic body.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bevy::prelude::*;
use bevy_rapier3d::prelude::RigidBody;
use simsync_net::{LinkConditionerConfig, MemoryNetwork};
use simsync_ownership::{EntityServer, OwnershipParticipant};

use super::actors::{Actor, stop_script};
use super::apps::{participant_app, server_app};
use super::bodies::NetBody;
use super::script::Script;
use super::summary::{Summary, by_reason, write_json};
use super::{HZ, JOIN_STEPS, Setup, load_script, print_banner, settle_ticks};
use crate::cli::{LinkArgs, OwnershipArgs};
use crate::driver::{Failure, log_plugin};

/// Longest settling after `--settle-seconds`, waiting for bodies to be released.
const MAX_EXTRA_SETTLE: Duration = Duration::from_secs(20);
/// Seed of the in-memory network's random choices (fixed, so runs are reproducible).
const NETWORK_SEED: u64 = 0x005e_ed0f_0b1d;

/// The server and participant Apps of one in-process run.
struct Apps {
    server: App,
    participants: Vec<App>,
}

impl Apps {
    /// One step: the server, then every participant.
    fn step(&mut self) {
        self.server.update();
        for p in &mut self.participants {
            p.update();
        }
    }

    /// Bodies other than the avatars (ids `0..avatars`) that have an owner on the server.
    fn owned_bodies(&self, avatars: usize) -> usize {
        self.server
            .world()
            .resource::<EntityServer>()
            .arbiter()
            .records()
            .iter()
            .filter(|r| r.owner.is_some() && r.body.0 >= avatars as u64)
            .count()
    }
}

/// Runs `sandbox ownership` (see the module docs).
///
/// # Errors
/// Exit code 2 for bad arguments or input files, 1 when the run fails or the copies diverge by
/// 1 cm or more.
pub fn run_in_process(args: &OwnershipArgs) -> Result<ExitCode, Failure> {
    let setup = Setup::load(args.scene.as_deref(), args.participants)?;
    let script = load_script(args.trace.as_deref())?;
    if !args.run.quiet {
        print_banner("in-process", &setup, Some(&script));
    }
    let mut apps = build(args, &setup.bodies, script.script)?;
    join(&mut apps)?;
    let start = Instant::now();
    run_script(&mut apps, args.run.ticks, args.run.quiet, start);
    let settled = settle(&mut apps, args);
    let elapsed = start.elapsed().as_secs_f64();
    let total = args.run.ticks + settled;
    println!(
        "finished in {elapsed:.2} s ({total} ticks, {:.0} ticks/s for 1 server + {} participants)",
        f64::from(total) / elapsed.max(1e-9),
        args.participants
    );
    let (worst, compared) = compare_copies(&apps, &setup.bodies)?;
    let summary = summarize(args, &apps, settled, worst, compared);
    println!("{}", summary.to_text());
    if let Some(path) = &args.run.summary_json {
        write_json(&summary, path)?;
    }
    if summary.ownership_changes == 0 {
        return Err(Failure::run("no body ever changed owner"));
    }
    if summary.max_divergence_m >= 0.01 {
        return Err(Failure::run(format!(
            "participants' copies of body {} differ by {:.4} m (≥ 1 cm)",
            summary.max_divergence_body, summary.max_divergence_m
        )));
    }
    Ok(ExitCode::SUCCESS)
}

/// One direction of the simulated link: half the round trip and half its jitter.
fn link(args: &LinkArgs) -> Result<LinkConditionerConfig, Failure> {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(args.rtt_ms / 2, args.net_jitter_ms / 2)
        .with_loss(args.loss_percent);
    link.validate()
        .map_err(|e| Failure::input(format!("bad link settings: {e}")))?;
    Ok(link)
}

/// The server and one participant App per participant over one in-memory network.
fn build(args: &OwnershipArgs, bodies: &[NetBody], script: Arc<Script>) -> Result<Apps, Failure> {
    let network = MemoryNetwork::new(NETWORK_SEED, link(&args.link)?)
        .map_err(|e| Failure::input(format!("bad link settings: {e}")))?;
    let transport = network
        .server_transport()
        .map_err(|e| Failure::run(e.to_string()))?;
    let server = server_app(bodies, transport, Some(log_plugin(args.run.quiet)));
    let mut participants = Vec::new();
    for index in 0..args.participants {
        let transport = network
            .client_transport(u64::from(index) + 1)
            .map_err(|e| Failure::run(e.to_string()))?;
        participants.push(participant_app(
            bodies,
            index,
            script.clone(),
            transport,
            None,
        ));
    }
    Ok(Apps {
        server,
        participants,
    })
}

/// Steps until every participant joined, then starts every script.
fn join(apps: &mut Apps) -> Result<(), Failure> {
    let joined = |participants: &[App]| {
        participants
            .iter()
            .all(|p| p.world().resource::<OwnershipParticipant>().me().is_some())
    };
    let mut join_steps = 0;
    while !joined(&apps.participants) {
        if join_steps >= JOIN_STEPS {
            return Err(Failure::run("the participants did not join in 10 s"));
        }
        apps.step();
        join_steps += 1;
    }
    for p in &mut apps.participants {
        p.world_mut().resource_mut::<Actor>().running = true;
    }
    Ok(())
}

/// Steps `ticks` scripted ticks, printing progress every wall-clock second unless `quiet`.
fn run_script(apps: &mut Apps, ticks: u32, quiet: bool, start: Instant) {
    let mut last_report = start;
    for tick in 1..=ticks {
        apps.step();
        let now = Instant::now();
        if !quiet && now - last_report >= Duration::from_secs(1) {
            last_report = now;
            let s = apps.server.world().resource::<EntityServer>();
            println!(
                "[{:5.1} s] tick {tick}/{ticks}  ownership changes {}  relayed {}",
                (now - start).as_secs_f64(),
                s.arbiter().stats().ownership_changes,
                s.stats().state_updates_relayed,
            );
        }
    }
}

/// Stops the scripts and steps for `--settle-seconds`, then until only avatars are owned (at
/// most [`MAX_EXTRA_SETTLE`] more). Returns the ticks stepped.
fn settle(apps: &mut Apps, args: &OwnershipArgs) -> u32 {
    for p in &mut apps.participants {
        stop_script(p);
    }
    let avatars = usize::from(args.participants);
    let min_settle = settle_ticks(args.settle_seconds);
    let max_settle = min_settle + MAX_EXTRA_SETTLE.as_secs() as u32 * HZ;
    let mut settled = 0;
    while settled < min_settle || (apps.owned_bodies(avatars) > 0 && settled < max_settle) {
        apps.step();
        settled += 1;
    }
    settled
}

/// The largest distance between two participants' copies of one dynamic body, with that body's
/// id, and the number of bodies compared.
///
/// # Errors
/// Exit code 1 if a participant has no copy of a body.
fn compare_copies(apps: &Apps, bodies: &[NetBody]) -> Result<((f32, u64), usize), Failure> {
    let mut worst = (0.0f32, 0u64);
    let mut compared = 0;
    for body in bodies.iter().filter(|b| b.kind == RigidBody::Dynamic) {
        let copies: Vec<Vec3> = apps
            .participants
            .iter()
            .filter_map(|p| {
                let state = p.world().resource::<OwnershipParticipant>();
                let entity = state.entity_of(body.id)?;
                p.world().get::<Transform>(entity).map(|t| t.translation)
            })
            .collect();
        if copies.len() != apps.participants.len() {
            return Err(Failure::run(format!(
                "{} is missing on a participant",
                body.id
            )));
        }
        compared += 1;
        for a in &copies {
            for b in &copies {
                let d = a.distance(*b);
                if d > worst.0 {
                    worst = (d, body.id.0);
                }
            }
        }
    }
    Ok((worst, compared))
}

/// The run's summary from the server's and participants' counters.
fn summarize(
    args: &OwnershipArgs,
    apps: &Apps,
    settle_ticks: u32,
    worst: (f32, u64),
    compared: usize,
) -> Summary {
    let s = apps.server.world().resource::<EntityServer>();
    let stats = *s.stats();
    let arbiter = *s.arbiter().stats();
    let p_stats: Vec<_> = apps
        .participants
        .iter()
        .map(|p| *p.world().resource::<OwnershipParticipant>().stats())
        .collect();
    let sent: u64 = p_stats.iter().map(|p| p.state_updates_sent).sum();
    let bytes: u64 = p_stats.iter().map(|p| p.state_update_bytes).sum();
    Summary {
        mode: "ownership",
        participants: args.participants,
        ticks: args.run.ticks,
        settle_ticks,
        latency_ms: args.link.rtt_ms / 2,
        jitter_ms: args.link.net_jitter_ms / 2,
        loss_percent: args.link.loss_percent,
        ownership_changes: arbiter.ownership_changes,
        bids_sent: p_stats.iter().map(|p| p.bids_sent).sum(),
        bid_resends: p_stats.iter().map(|p| p.bid_resends).sum(),
        bids_granted: stats.bids_granted,
        bids_refused: by_reason(&[stats.bids_refused]),
        releases: stats.releases_granted,
        releases_refused: by_reason(&[stats.releases_refused]),
        state_updates_refused: by_reason(&[stats.state_updates_refused]),
        owners_expired: stats.expiries + stats.disconnect_clears,
        state_updates_sent: sent,
        state_updates_relayed: stats.state_updates_relayed,
        bytes_per_state_update: if sent == 0 {
            0.0
        } else {
            bytes as f64 / sent as f64
        },
        max_divergence_m: f64::from(worst.0),
        max_divergence_body: worst.1,
        bodies_compared: compared,
        bodies_owned_at_end: apps.owned_bodies(usize::from(args.participants)),
        malformed_messages: s.decode_stats().rejected(),
    }
}
