//! What an ownership run reports: the in-process run's summary (text and `--summary-json`),
//! refusal counts by reason name (`RefusalCounts` prints and serializes so).

use std::path::Path;

use serde::Serialize;
use simsync_ownership::RefusalCounts;

use crate::driver::Failure;

/// What an ownership run reports; serialized as the `--summary-json` object.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub mode: &'static str,
    pub participants: u8,
    /// Scripted ticks, then settling ticks (64 per second).
    pub ticks: u32,
    pub settle_ticks: u32,
    /// One-way latency and jitter, ms, and loss per direction, percent.
    pub latency_ms: u32,
    pub jitter_ms: u32,
    pub loss_percent: f64,
    /// Changes of a body's owner on the entity server (grants to a new owner, releases,
    /// expiries, disconnect clears).
    pub ownership_changes: u64,
    /// Bids sent by all participants (resends and priority changes included).
    pub bids_sent: u64,
    /// Of those, resends of unanswered bids (rule 6).
    pub bid_resends: u64,
    /// Bids and priority changes the server granted.
    pub bids_granted: u64,
    /// Bids the server refused, per reason (by name).
    pub bids_refused: RefusalCounts,
    /// Releases (rule 12) the server accepted.
    pub releases: u64,
    /// Releases the server refused (the sender no longer owned the body), per reason.
    pub releases_refused: RefusalCounts,
    /// State updates the server refused (sent before the sender heard it lost the body), per
    /// reason.
    pub state_updates_refused: RefusalCounts,
    /// Owners cleared for silence, a silent participant or a disconnect (rule 5).
    pub owners_expired: u64,
    /// Participants the server counted gone because it heard nothing from them (rule 5).
    pub participants_silent: u64,
    /// State updates the participants sent for bodies they own.
    pub state_updates_sent: u64,
    /// State updates the server relayed to the other participants.
    pub state_updates_relayed: u64,
    /// Mean bytes per body state sent: the state batches' encoded size (`ClientMessage` as
    /// sent, before renet's framing) over the body states they carried.
    pub bytes_per_body: f64,
    /// Mean bytes per body state relayed by the entity server (its relay batches' encoded size
    /// over the body states they carried).
    pub relay_bytes_per_body: f64,
    /// Whether deltas against acknowledged states were on (ownership rule 20).
    pub delta_encoding: bool,
    /// Shares of the body states sent as deltas: by the participants, and relayed.
    pub delta_share: f64,
    pub relay_delta_share: f64,
    /// Delta entries that could not be applied and acknowledgements refused, everywhere.
    pub deltas_rejected: u64,
    pub acks_rejected: u64,
    /// Batches without bodies sent only to acknowledge (participants, then the entity server).
    pub ack_batches: u64,
    pub relay_ack_batches: u64,
    /// The participants' upload budget and the entity server's relay budget per participant,
    /// B/s.
    pub upload_budget: u32,
    pub relay_budget: u32,
    /// Mean state bytes per second sent by one participant, over the scripted and settling
    /// ticks, and its share of the upload budget.
    pub upload_bytes_per_second: f64,
    pub upload_budget_use: f64,
    /// Mean relayed state bytes per second to one participant, and its share of the relay
    /// budget.
    pub relay_bytes_per_second: f64,
    pub relay_budget_use: f64,
    /// Body states the budgets left for a later frame (participants, then the relay).
    pub bodies_deferred: u64,
    pub relay_bodies_deferred: u64,
    /// Largest distance between two participants' copies of one body at the end, m.
    pub max_divergence_m: f64,
    /// The body it was measured on.
    pub max_divergence_body: u64,
    /// Dynamic bodies compared.
    pub bodies_compared: usize,
    /// Bodies other than avatars still owned at the end.
    pub bodies_owned_at_end: usize,
    /// Messages the server could not decode.
    pub malformed_messages: u64,
    /// Whether the entity server ran its physics host (ownership rule 21).
    pub physics_host: bool,
    /// Bodies the host took (orphans, bodies moving unowned), released at rest, and the states
    /// it published.
    pub host_takes: u64,
    pub host_releases: u64,
    pub host_states_published: u64,
    /// Bodies the host still held at the end.
    pub bodies_hosted_at_end: usize,
    /// Owners that lost a body for an impossible state (rule 22).
    pub owners_revoked: u64,
    /// Participants that left (`--leave-at`).
    pub participants_left: u64,
}

impl Summary {
    /// The human-readable summary, one item per line.
    pub fn to_text(&self) -> String {
        format!(
            "summary (ownership mode, {} participants, {} + {} settling ticks, {} ± {} ms, {} % loss)\n\
             \x20 ownership changes       {}\n\
             \x20 bids sent               {} ({} resends)\n\
             \x20 bids granted            {}\n\
             \x20 bids refused            {}\n\
             \x20 releases                {} ({} refused: {})\n\
             \x20 state updates refused   {}\n\
             \x20 owners expired          {} ({} participants silent)\n\
             \x20 state updates           {} sent, {} relayed\n\
             \x20 bytes per body          {:.1} up, {:.1} relayed (deltas {}: {:.0} % up, {:.0} % relayed; {} refused, {} acks refused; {} + {} acknowledgement-only batches)\n\
             \x20 upload budget use       {:.1} % ({:.0} of {} B/s per participant, {} bodies deferred)\n\
             \x20 relay budget use        {:.1} % ({:.0} of {} B/s per participant, {} bodies deferred)\n\
             \x20 bodies owned at end     {} (avatars not counted)\n\
             \x20 physics host            {}\n\
             max divergence {:.6} m (body {}) over {} dynamic bodies",
            self.participants,
            self.ticks,
            self.settle_ticks,
            self.latency_ms,
            self.jitter_ms,
            self.loss_percent,
            self.ownership_changes,
            self.bids_sent,
            self.bid_resends,
            self.bids_granted,
            self.bids_refused,
            self.releases,
            self.releases_refused.total(),
            self.releases_refused,
            self.state_updates_refused,
            self.owners_expired,
            self.participants_silent,
            self.state_updates_sent,
            self.state_updates_relayed,
            self.bytes_per_body,
            self.relay_bytes_per_body,
            if self.delta_encoding { "on" } else { "off" },
            self.delta_share * 100.0,
            self.relay_delta_share * 100.0,
            self.deltas_rejected,
            self.acks_rejected,
            self.ack_batches,
            self.relay_ack_batches,
            self.upload_budget_use * 100.0,
            self.upload_bytes_per_second,
            self.upload_budget,
            self.bodies_deferred,
            self.relay_budget_use * 100.0,
            self.relay_bytes_per_second,
            self.relay_budget,
            self.relay_bodies_deferred,
            self.bodies_owned_at_end,
            self.host_text(),
            self.max_divergence_m,
            self.max_divergence_body,
            self.bodies_compared,
        )
    }
}

impl Summary {
    /// The physics host's line: off, or what it did.
    fn host_text(&self) -> String {
        if !self.physics_host {
            return String::from("off");
        }
        format!(
            "on: {} bodies taken, {} released at rest, {} states published, {} held at end; \
             {} owners refused an impossible state; {} participants left",
            self.host_takes,
            self.host_releases,
            self.host_states_published,
            self.bodies_hosted_at_end,
            self.owners_revoked,
            self.participants_left,
        )
    }
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json<T: Serialize>(value: &T, path: &Path) -> Result<(), Failure> {
    let json = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::run(format!("cannot encode the summary: {e}")))?;
    std::fs::write(path, json + "\n")
        .map_err(|e| Failure::input(format!("cannot write {}: {e}", path.display())))
}
