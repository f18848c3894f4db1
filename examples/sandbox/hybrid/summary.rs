//! What a hybrid run reports (text and `--summary-json`) and its checks.

use std::path::Path;

use std::collections::BTreeMap;

use bevy::prelude::*;
use bevy_rapier3d::prelude::Velocity;
use serde::Serialize;
use simsync::hybrid::{HybridStats, VerifiedProps};
use simsync_ownership::{BodyNetId, EntityServer};

use crate::cli::HybridArgs;
use crate::driver::Failure;

use super::Setup;
use super::run::{Hands, HybridRun, REST_SPEED, owned_by};

/// The largest distance two participants' copies of one prop may be apart at rest, m.
pub const AT_REST_TOLERANCE_M: f64 = 0.01;

/// One peer's numbers.
#[derive(Debug, Clone, Serialize)]
pub struct PeerLine {
    /// The players' session: last verified tick, rollbacks, re-simulated ticks.
    pub verified_tick: i32,
    pub rollbacks: u64,
    pub resimulated_ticks: u64,
    /// Poses the verified ticks applied, on this peer (the same on every peer).
    pub poses_carried: u64,
    /// Moving owned props left out of an input for the bound, and refused by quantization.
    pub props_left_out: u64,
    pub props_refused: u64,
    /// The participant's bids sent and grants received, the most props it owned at once and
    /// the props it owns at the end.
    pub bids_sent: u64,
    pub grants_received: u64,
    pub owned_most: usize,
    pub owned_at_end: usize,
    /// Props its player grabbed and threw.
    pub grabs: u64,
    pub throws: u64,
}

/// What a hybrid run reports; serialized as the `--summary-json` object.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub mode: &'static str,
    pub players: u8,
    pub props: usize,
    /// Scripted ticks, then settling ticks (64 per second).
    pub ticks: u32,
    pub settle_ticks: u32,
    /// Round trip and its jitter, ms, and loss per direction, percent.
    pub rtt_ms: u32,
    pub jitter_ms: u32,
    pub loss_percent: f64,
    /// Verified ticks whose players' checksums were compared across the peers, and whether
    /// they were all equal (the first differing tick otherwise).
    pub checksum_ticks_compared: usize,
    pub checksums_equal: bool,
    pub first_differing_tick: Option<i32>,
    /// The last tick every peer verified, and its checksum on the first peer.
    pub last_common_tick: Option<i32>,
    pub last_common_checksum: Option<u64>,
    /// Desyncs reported by the relay (a run stops at the first).
    pub desyncs: u64,
    /// Largest distance between two Apps' copies of one prop at the end, m, and the prop.
    pub max_prop_distance_m: f64,
    pub max_prop_distance_id: u64,
    /// Props compared (at rest on every App), and props left out (still moving somewhere).
    pub props_at_rest: usize,
    pub props_moving: usize,
    /// Ownership changes on the entity server, and the props' state traffic: state updates
    /// sent and mean bytes per prop update sent (encoded batches over the states they
    /// carried) and relayed.
    pub ownership_changes: u64,
    pub prop_updates_sent: u64,
    pub bytes_per_prop_update: f64,
    pub relay_bytes_per_prop_update: f64,
    /// Per peer, in player order.
    pub peers: Vec<PeerLine>,
}

impl Summary {
    /// The human-readable summary, one item per line.
    pub fn to_text(&self) -> String {
        let peers: Vec<String> = self
            .peers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                format!(
                    "\x20 peer {i}: verified tick {}, {} rollbacks ({} re-simulated ticks), {} \
                     poses carried ({} left out, {} refused); props: {} grabbed, {} thrown, {} \
                     bids, {} granted, at most {} owned, {} owned at the end",
                    p.verified_tick,
                    p.rollbacks,
                    p.resimulated_ticks,
                    p.poses_carried,
                    p.props_left_out,
                    p.props_refused,
                    p.grabs,
                    p.throws,
                    p.bids_sent,
                    p.grants_received,
                    p.owned_most,
                    p.owned_at_end,
                )
            })
            .collect();
        let checksum = match (self.last_common_tick, self.last_common_checksum) {
            (Some(t), Some(c)) => format!("tick {t}: {c:016x}"),
            _ => "none".into(),
        };
        format!(
            "summary (hybrid mode, {} players, {} props, {} + {} settling ticks, {} ± {} ms \
             RTT, {} % loss)\n\
             \x20 players' checksums      {} over {} verified ticks (last common {checksum})\n\
             \x20 desyncs                 {}\n\
             \x20 props' copies           at most {:.4} m apart at rest (prop {}; {} props at rest, {} moving)\n\
             \x20 ownership changes       {}\n\
             \x20 prop updates            {} sent, {:.1} B each up, {:.1} B relayed\n{}",
            self.players,
            self.props,
            self.ticks,
            self.settle_ticks,
            self.rtt_ms,
            self.jitter_ms,
            self.loss_percent,
            match self.first_differing_tick {
                None => "equal".to_string(),
                Some(t) => format!("DIFFER at tick {t}"),
            },
            self.checksum_ticks_compared,
            self.desyncs,
            self.max_prop_distance_m,
            self.max_prop_distance_id,
            self.props_at_rest,
            self.props_moving,
            self.ownership_changes,
            self.prop_updates_sent,
            self.bytes_per_prop_update,
            self.relay_bytes_per_prop_update,
            peers.join("\n"),
        )
    }

    /// Writes the summary as JSON to `path`.
    ///
    /// # Errors
    /// Exit code 2 if the file cannot be written.
    pub fn write_json(&self, path: &Path) -> Result<(), Failure> {
        let json = serde_json::to_string_pretty(self).map_err(|e| Failure::input(e.to_string()))?;
        std::fs::write(path, json + "\n")
            .map_err(|e| Failure::input(format!("--summary-json {}: {e}", path.display())))
    }
}

/// The run's checks: the players' checksums equal over at least one tick, some prop at rest,
/// the copies of every prop at rest within [`AT_REST_TOLERANCE_M`].
///
/// # Errors
/// Exit code 1 naming the failed check.
pub fn check(summary: &Summary) -> Result<(), Failure> {
    if let Some(tick) = summary.first_differing_tick {
        return Err(Failure::run(format!(
            "the peers' players' checksums differ at verified tick {tick}"
        )));
    }
    if summary.checksum_ticks_compared == 0 {
        return Err(Failure::run("no verified tick was compared"));
    }
    if summary.props_at_rest == 0 {
        return Err(Failure::run("no prop came to rest on every App"));
    }
    if summary.max_prop_distance_m >= AT_REST_TOLERANCE_M {
        return Err(Failure::run(format!(
            "participants' copies of prop {} are {:.4} m apart at rest (≥ 1 cm)",
            summary.max_prop_distance_id, summary.max_prop_distance_m
        )));
    }
    Ok(())
}

/// Every App's copies of the props: `id → [(position, speed m/s)]`, in client order.
type Copies = BTreeMap<u64, Vec<(Vec3, f32)>>;

/// The props' copies of every App.
fn copies(run: &HybridRun) -> Copies {
    let mut copies = Copies::new();
    for client in 0..run.peers.players().clients() {
        let Ok(app) = run.peers.client(client) else {
            continue;
        };
        for entity in app.world().iter_entities() {
            let (Some(id), Some(t), Some(v)) = (
                entity.get::<BodyNetId>(),
                entity.get::<Transform>(),
                entity.get::<Velocity>(),
            ) else {
                continue;
            };
            copies
                .entry(id.0.0)
                .or_default()
                .push((t.translation, v.linear.length()));
        }
    }
    copies
}

/// What [`at_rest_spread`] found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The largest distance between two copies of one prop at rest, m, and the prop.
    pub widest: (f32, u64),
    /// Props compared (at rest on every App).
    pub compared: usize,
    /// Props left out: moving faster than `rest_speed` on some App.
    pub moving: usize,
}

/// The widest spread between the copies of a prop at rest (slower than `rest_speed` m/s on
/// every copy), over the props every one of `apps` Apps has.
///
/// # Errors
/// The id of the first prop some App has no copy of.
pub fn at_rest_spread(copies: &Copies, apps: usize, rest_speed: f32) -> Result<Spread, u64> {
    let mut spread = Spread {
        widest: (0.0, 0),
        compared: 0,
        moving: 0,
    };
    for (&id, list) in copies {
        if list.len() != apps {
            return Err(id);
        }
        if list.iter().any(|&(_, speed)| speed > rest_speed) {
            spread.moving += 1;
            continue;
        }
        spread.compared += 1;
        for (i, (a, _)) in list.iter().enumerate() {
            for (b, _) in &list[i + 1..] {
                let d = a.distance(*b);
                if d > spread.widest.0 {
                    spread.widest = (d, id);
                }
            }
        }
    }
    Ok(spread)
}

/// [`at_rest_spread`] of a run's Apps.
///
/// # Errors
/// Exit code 1 if an App has no copy of a prop.
pub fn prop_spread(run: &HybridRun, setup: &Setup) -> Result<Spread, Failure> {
    let copies = copies(run);
    if copies.len() != setup.kinds.len() {
        return Err(Failure::run(format!(
            "{} props expected, {} found",
            setup.kinds.len(),
            copies.len()
        )));
    }
    at_rest_spread(&copies, run.peers.players().clients(), REST_SPEED)
        .map_err(|id| Failure::run(format!("prop {id} is missing on an App")))
}

/// The summary of a finished run.
///
/// # Errors
/// Exit code 1 if a participant has no copy of a prop or a peer is gone.
pub fn summarize(
    args: &HybridArgs,
    run: &mut HybridRun,
    setup: &Setup,
    settled: u32,
) -> Result<Summary, Failure> {
    let spread = prop_spread(run, setup)?;
    let (distance, distance_id) = spread.widest;
    let agreement = run.peers.players().agreement();
    let peers = (0..usize::from(setup.players))
        .map(|i| peer_line(run, i))
        .collect::<Result<Vec<_>, _>>()?;
    let (last_tick, last_checksum) = last_common(run)?;
    let server = run
        .peers
        .entity_server()
        .and_then(|s| s.world().get_resource::<EntityServer>())
        .ok_or_else(|| Failure::run("the entity server is gone"))?;
    let stats = server.stats();
    let p_stats: Vec<_> = (0..usize::from(setup.players))
        .filter_map(|i| run.peers.ownership_client(i).map(|c| *c.stats()))
        .collect();
    let sent: u64 = p_stats.iter().map(|p| p.state_updates_sent).sum();
    let bytes: u64 = p_stats.iter().map(|p| p.state_update_bytes).sum();
    Ok(Summary {
        mode: "hybrid",
        players: setup.players,
        props: setup.kinds.len(),
        ticks: args.ticks,
        settle_ticks: settled,
        rtt_ms: args.link.rtt_ms,
        jitter_ms: args.link.net_jitter_ms,
        loss_percent: args.link.loss_percent,
        checksum_ticks_compared: agreement.as_ref().map_or(0, |a| a.ticks_compared),
        checksums_equal: agreement.is_ok(),
        first_differing_tick: agreement.as_ref().err().map(|d| d.tick),
        last_common_tick: last_tick,
        last_common_checksum: last_checksum,
        desyncs: 0,
        max_prop_distance_m: f64::from(distance),
        max_prop_distance_id: distance_id,
        props_at_rest: spread.compared,
        props_moving: spread.moving,
        ownership_changes: server.arbiter().stats().ownership_changes,
        prop_updates_sent: sent,
        bytes_per_prop_update: ratio(bytes, sent),
        relay_bytes_per_prop_update: ratio(stats.relay_bytes_sent, stats.relay_bodies_sent),
        peers,
    })
}

/// Peer `i`'s line.
fn peer_line(run: &HybridRun, i: usize) -> Result<PeerLine, Failure> {
    let players = run.peers.players();
    let session = players.stats(i).map_err(|e| Failure::run(e.to_string()))?;
    let app = players.client(i).map_err(|e| Failure::run(e.to_string()))?;
    let hybrid = app
        .world()
        .get_resource::<HybridStats>()
        .cloned()
        .unwrap_or_default();
    let verified = app
        .world()
        .get_resource::<VerifiedProps>()
        .cloned()
        .unwrap_or_default();
    let hands = app.world().get_resource::<Hands>();
    let stats = run
        .peers
        .ownership_client(i)
        .map(|c| *c.stats())
        .unwrap_or_default();
    Ok(PeerLine {
        verified_tick: session.verified_tick,
        rollbacks: session.rollbacks,
        resimulated_ticks: session.resimulated_ticks,
        poses_carried: verified.carried,
        props_left_out: hybrid.props_left_out,
        props_refused: hybrid.props_refused,
        bids_sent: stats.bids_sent,
        grants_received: stats.grants_received,
        owned_most: run.owned_most.get(i).copied().unwrap_or(0),
        owned_at_end: owned_by(&run.peers, i),
        grabs: hands.map_or(0, |h| h.grabs),
        throws: hands.map_or(0, |h| h.throws),
    })
}

/// The highest tick every peer's checksum history holds, and the first peer's checksum of it.
fn last_common(run: &HybridRun) -> Result<(Option<i32>, Option<u64>), Failure> {
    let players = run.peers.players();
    let histories = (0..players.clients())
        .map(|i| players.stats(i).map(|s| s.checksum_history))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::run(e.to_string()))?;
    let Some(tick) = histories
        .iter()
        .map(|h| h.last().map(|c| c.tick))
        .min()
        .flatten()
    else {
        return Ok((None, None));
    };
    let checksum = histories
        .first()
        .and_then(|h| h.iter().find(|c| c.tick == tick))
        .map(|c| c.checksum);
    Ok((checksum.map(|_| tick), checksum))
}

/// `part / whole`, 0 when `whole` is 0.
fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}
