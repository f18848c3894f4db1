//! `sandbox ownership`: the entity server and every participant in this process over the
//! in-memory transport (`simsync_ownership::testing::OwnershipPeers`), then a comparison of
//! every participant's copy of every dynamic body.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bevy::prelude::*;
use bevy_rapier3d::prelude::RigidBody;
use simsync_net::LinkConditionerConfig;
use simsync_ownership::testing::{Divergence, OwnershipPeers};
use simsync_ownership::{EntityServer, OwnershipClient, PhysicsHostConfig, StateBudgetConfig};

use super::actors::{Actor, stop_script};
use super::apps::{add_participant_game, add_server_scene};
use super::bodies::NetBody;
use super::script::Script;
use super::summary::{Summary, write_json};
use super::{DT, HZ, JOIN_STEPS, Setup, load_script, print_banner, settle_ticks};

use crate::cli::{LinkArgs, OwnershipArgs};
use crate::driver::{Failure, log_plugin};

/// Longest settling after `--settle-seconds`, waiting for bodies to be released.
const MAX_EXTRA_SETTLE: Duration = Duration::from_secs(20);
/// Seed of the in-memory network's random choices (fixed, so runs are reproducible).
const NETWORK_SEED: u64 = 0x005e_ed0f_0b1d;

/// Bodies other than the avatars (ids `0..avatars`) that have an owner on the server.
pub fn owned_bodies(peers: &OwnershipPeers, avatars: usize) -> usize {
    peers.entity_server().map_or(0, |server| {
        server
            .arbiter()
            .records()
            .iter()
            .filter(|r| r.owner.is_some() && r.body.0 >= avatars as u64)
            .count()
    })
}

/// Every participant's App, in script order.
fn participants(peers: &OwnershipPeers) -> impl Iterator<Item = &App> {
    (0..peers.len()).filter_map(|i| peers.participant(i))
}

/// Where an in-process run is; each holds the steps taken in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for every participant to join (at most [`JOIN_STEPS`]).
    Joining(u32),
    /// The script runs (scripted ticks done).
    Script(u32),
    /// Inputs stopped; waiting for the bodies to come to rest and be released.
    Settling(u32),
    /// Finished after settling this many ticks.
    Done(u32),
}

/// An in-process ownership run, one step at a time: the headless loop and the rendered view
/// step the same Apps in the same order.
pub struct InProcessRun {
    /// The server and participants.
    pub peers: OwnershipPeers,
    /// Where the run is.
    pub phase: Phase,
    ticks: u32,
    avatars: usize,
    /// The scripted tick the last participant leaves at.
    leave_at: Option<u32>,
    min_settle: u32,
    max_settle: u32,
}

impl InProcessRun {
    /// The Apps of `args` over one in-memory network, not stepped yet.
    ///
    /// # Errors
    /// Exit code 2 for bad link settings; 1 if a transport cannot be made.
    pub fn new(
        args: &OwnershipArgs,
        bodies: &[NetBody],
        script: Arc<Script>,
        log: Option<bevy::log::LogPlugin>,
    ) -> Result<Self, Failure> {
        let min_settle = settle_ticks(args.settle_seconds);
        Ok(Self {
            peers: build(args, bodies, script, log)?,
            phase: Phase::Joining(0),
            ticks: args.run.ticks,
            avatars: usize::from(args.participants),
            leave_at: args.leave_at,
            min_settle,
            max_settle: min_settle + MAX_EXTRA_SETTLE.as_secs() as u32 * HZ,
        })
    }

    /// Steps every App once (nothing once done) and moves the phase on: joined → the scripts
    /// start; `--ticks` scripted ticks → the scripts stop; settled → done. Returns the phase.
    ///
    /// # Errors
    /// Exit code 1 if the participants did not join within [`JOIN_STEPS`].
    pub fn advance(&mut self) -> Result<Phase, Failure> {
        loop {
            self.phase = match self.phase {
                Phase::Joining(_) if self.peers.all_joined() => {
                    for i in 0..self.peers.len() {
                        if let Some(p) = self.peers.participant_mut(i) {
                            p.world_mut().resource_mut::<Actor>().running = true;
                        }
                    }
                    Phase::Script(0)
                }
                Phase::Joining(n) if n >= JOIN_STEPS => {
                    return Err(Failure::run("the participants did not join in 10 s"));
                }
                Phase::Joining(n) => {
                    self.peers.step();
                    return Ok(self.set(Phase::Joining(n + 1)));
                }
                Phase::Script(t) if t >= self.ticks => {
                    for i in 0..self.peers.len() {
                        if let Some(p) = self.peers.participant_mut(i) {
                            stop_script(p);
                        }
                    }
                    Phase::Settling(0)
                }
                Phase::Script(t) => {
                    if self.leave_at == Some(t) {
                        self.leave();
                    }
                    self.peers.step();
                    return Ok(self.set(Phase::Script(t + 1)));
                }
                Phase::Settling(n)
                    if n < self.min_settle
                        || (owned_bodies(&self.peers, self.avatars) > 0 && n < self.max_settle) =>
                {
                    self.peers.step();
                    return Ok(self.set(Phase::Settling(n + 1)));
                }
                Phase::Settling(n) => return Ok(self.set(Phase::Done(n))),
                Phase::Done(_) => return Ok(self.phase),
            };
        }
    }

    /// The last participant leaves: its App is dropped, its connection closed.
    fn leave(&mut self) {
        let last = self.peers.len() - 1;
        if self.peers.kill(last).is_ok() {
            info!("sandbox: participant {last} leaves; what it owns is orphaned");
        }
    }

    fn set(&mut self, phase: Phase) -> Phase {
        self.phase = phase;
        phase
    }
}

/// Runs `sandbox ownership` (see the module docs).
///
/// # Errors
/// Exit code 2 for bad arguments or input files, 1 when the run fails or the copies diverge by
/// 1 cm or more.
pub fn run_in_process(args: &OwnershipArgs) -> Result<ExitCode, Failure> {
    if let Some(tick) = args.leave_at
        && (args.participants < 2 || tick >= args.run.ticks)
    {
        return Err(Failure::input(format!(
            "--leave-at {tick} needs at least 2 participants (one stays to compare) and a tick \
             below --ticks {}",
            args.run.ticks
        )));
    }
    let setup = Setup::load(args.scene.as_deref(), args.participants)?;
    let script = load_script(args.trace.as_deref())?;
    if !args.run.quiet {
        print_banner("in-process", &setup, Some(&script));
    }
    let mut run = InProcessRun::new(
        args,
        &setup.bodies,
        script.script,
        Some(log_plugin(args.run.quiet)),
    )?;
    let start = Instant::now();
    let mut last_report = start;
    let settled = loop {
        match run.advance()? {
            Phase::Done(settled) => break settled,
            Phase::Script(tick)
                if !args.run.quiet && last_report.elapsed() >= Duration::from_secs(1) =>
            {
                last_report = Instant::now();
                let s = run.peers.server().world().resource::<EntityServer>();
                println!(
                    "[{:5.1} s] tick {tick}/{}  ownership changes {}  relayed {}",
                    start.elapsed().as_secs_f64(),
                    args.run.ticks,
                    s.arbiter().stats().ownership_changes,
                    s.stats().state_updates_relayed,
                );
            }
            _ => {}
        }
    };
    let elapsed = start.elapsed().as_secs_f64();
    let total = args.run.ticks + settled;
    println!(
        "finished in {elapsed:.2} s ({total} ticks, {:.0} ticks/s for 1 server + {} participants)",
        f64::from(total) / elapsed.max(1e-9),
        args.participants
    );
    let summary = finish(args, &mut run.peers, &setup.bodies, settled)?;
    println!("{}", summary.to_text());
    check(&summary)?;
    Ok(ExitCode::SUCCESS)
}

/// The summary of a finished run (copies compared), written with `--summary-json`.
///
/// # Errors
/// Exit code 1 if a participant has no copy of a body; 2 if the summary file cannot be written.
pub fn finish(
    args: &OwnershipArgs,
    peers: &mut OwnershipPeers,
    bodies: &[NetBody],
    settled: u32,
) -> Result<Summary, Failure> {
    let (worst, compared) = compare_copies(peers, bodies)?;
    let summary = summarize(args, peers, settled, worst, compared);
    if let Some(path) = &args.run.summary_json {
        write_json(&summary, path)?;
    }
    Ok(summary)
}

/// The run's checks: some body changed owner, the copies agree within 1 cm.
///
/// # Errors
/// Exit code 1 naming the failed check.
pub fn check(summary: &Summary) -> Result<(), Failure> {
    if summary.ownership_changes == 0 {
        return Err(Failure::run("no body ever changed owner"));
    }
    if summary.max_divergence_m >= 0.01 {
        return Err(Failure::run(format!(
            "participants' copies of body {} differ by {:.4} m (≥ 1 cm)",
            summary.max_divergence_body, summary.max_divergence_m
        )));
    }
    Ok(())
}

/// One direction of the simulated link: half the round trip and half its jitter (also the
/// hybrid mode's).
pub(crate) fn link(args: &LinkArgs) -> Result<LinkConditionerConfig, Failure> {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(args.rtt_ms / 2, args.net_jitter_ms / 2)
        .with_loss(args.loss_percent);
    link.validate()
        .map_err(|e| Failure::input(format!("bad link settings: {e}")))?;
    Ok(link)
}

/// The server and one participant App per participant over one in-memory network (not
/// stepped yet).
fn build(
    args: &OwnershipArgs,
    bodies: &[NetBody],
    script: Arc<Script>,
    mut log: Option<bevy::log::LogPlugin>,
) -> Result<OwnershipPeers, Failure> {
    let delta = !args.no_delta;
    let physics = args.physics_host;
    let (server_bodies, participant_bodies) = (bodies.to_vec(), bodies.to_vec());
    let mut builder = OwnershipPeers::builder(usize::from(args.participants));
    if physics {
        builder = builder.physics_host(PhysicsHostConfig::default());
    }
    builder
        .tick(DT)
        .seed(NETWORK_SEED)
        .link(link(&args.link)?)
        .ownership(move |plugin| plugin.with_delta_encoding(delta))
        .server(move |app| {
            if let Some(log) = log.take() {
                app.add_plugins(log);
            }
            add_server_scene(app, &server_bodies, physics);
        })
        .participant(move |index, app| {
            add_participant_game(app, &participant_bodies, index as u8, script.clone());
        })
        .build_unjoined()
        .map_err(|e| Failure::run(e.to_string()))
}

/// The largest distance between two participants' copies of one body, with that body's id
/// (static bodies agree everywhere), and the number of dynamic bodies compared.
///
/// # Errors
/// Exit code 1 if a participant has no copy of a body.
fn compare_copies(
    peers: &mut OwnershipPeers,
    bodies: &[NetBody],
) -> Result<((f32, u64), usize), Failure> {
    let converged = peers
        .convergence(f32::INFINITY)
        .map_err(|divergence| match divergence {
            Divergence::Missing { body, .. } => {
                Failure::run(format!("{body} is missing on a participant"))
            }
            other => Failure::run(other.to_string()),
        })?;
    let worst = converged.widest.map_or((0.0, 0), |(body, d)| (d, body.0));
    let dynamic = bodies.iter().filter(|b| b.kind == RigidBody::Dynamic);
    Ok((worst, dynamic.count()))
}

/// The run's summary from the server's and participants' counters.
fn summarize(
    args: &OwnershipArgs,
    peers: &OwnershipPeers,
    settle_ticks: u32,
    worst: (f32, u64),
    compared: usize,
) -> Summary {
    let s = peers.server().world().resource::<EntityServer>();
    let stats = *s.stats();
    let arbiter = *s.arbiter().stats();
    let p_stats: Vec<_> = participants(peers)
        .map(|p| *p.world().resource::<OwnershipClient>().stats())
        .collect();
    let sent: u64 = p_stats.iter().map(|p| p.state_updates_sent).sum();
    let bytes: u64 = p_stats.iter().map(|p| p.state_update_bytes).sum();
    let budget = *peers.server().world().resource::<StateBudgetConfig>();
    let seconds = f64::from(args.run.ticks + settle_ticks) / f64::from(HZ);
    let per_participant = |total: u64| total as f64 / seconds / p_stats.len().max(1) as f64;
    let upload = per_participant(bytes);
    let relay = per_participant(stats.relay_bytes_sent);
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
        bids_refused: stats.bids_refused,
        releases: stats.releases_granted,
        releases_refused: stats.releases_refused,
        state_updates_refused: stats.state_updates_refused,
        owners_expired: stats.expiries + stats.disconnect_clears + stats.silence_clears,
        participants_silent: stats.participants_silent,
        state_updates_sent: sent,
        state_updates_relayed: stats.state_updates_relayed,
        bytes_per_body: ratio(bytes, sent),
        relay_bytes_per_body: ratio(stats.relay_bytes_sent, stats.relay_bodies_sent),
        delta_encoding: !args.no_delta,
        delta_share: ratio(p_stats.iter().map(|p| p.delta_entries_sent).sum(), sent),
        relay_delta_share: ratio(stats.relay_delta_entries_sent, stats.relay_bodies_sent),
        deltas_rejected: stats.deltas_rejected
            + p_stats.iter().map(|p| p.deltas_rejected).sum::<u64>(),
        acks_rejected: stats.acks_rejected + p_stats.iter().map(|p| p.acks_rejected).sum::<u64>(),
        ack_batches: p_stats.iter().map(|p| p.ack_batches_sent).sum(),
        relay_ack_batches: stats.relay_ack_batches_sent,
        upload_budget: budget.upload_bytes_per_second,
        relay_budget: budget.relay_bytes_per_second,
        upload_bytes_per_second: upload,
        upload_budget_use: upload / f64::from(budget.upload_bytes_per_second),
        relay_bytes_per_second: relay,
        relay_budget_use: relay / f64::from(budget.relay_bytes_per_second),
        bodies_deferred: p_stats.iter().map(|p| p.bodies_deferred).sum(),
        relay_bodies_deferred: stats.relay_bodies_deferred,
        max_divergence_m: f64::from(worst.0),
        max_divergence_body: worst.1,
        bodies_compared: compared,
        bodies_owned_at_end: owned_bodies(peers, usize::from(args.participants)),
        physics_host: args.physics_host,
        host_takes: stats.host_takes,
        host_releases: stats.host_releases,
        host_states_published: stats.host_states_published,
        bodies_hosted_at_end: s.bodies_hosted(),
        owners_revoked: stats.owners_revoked,
        participants_left: stats.participants_left,
        malformed_messages: s.decode_stats().rejected(),
    }
}

/// `part / whole`, 0 when `whole` is 0.
fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}
