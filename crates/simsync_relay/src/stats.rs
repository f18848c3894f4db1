//! [`RelayStats`]: the relay's counters, per match, and how a new match starts them over.

use bevy::prelude::*;
use simsync_net::{DesyncReport, MatchDrops, MatchId, MatchPhase, RejectCounts, Tick};

use crate::limits::RateLimited;
use crate::snapshots::SnapshotStats;

/// Inputs of one player the relay dropped, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
pub struct DroppedInputs {
    /// Inputs that did not decode as the game's input type.
    pub undecodable: u64,
    /// Inputs longer than `max_input_bytes`.
    pub oversized: u64,
}

/// Counters of the relay server (a resource), per match: a new match starts them from zero
/// ([`RelayStats::for_next_match`]), except the counters of connections, which are totals
/// since the relay started — `rejected_messages`, `ignored_messages`, `rate_limited_unseated`,
/// `refused_rejoins`, `refused_hellos` — and the round-trip times `rtt_ms`, which are the connections'
/// measurements ([what survives a rematch](crate::rules#what-survives-a-rematch)). The
/// counters of an ended match are in its [`MatchChanged::Ended`](crate::MatchChanged).
#[derive(Resource, Debug, Clone, Default, PartialEq, Reflect)]
#[reflect(Resource, Debug, Default, PartialEq, Clone)]
pub struct RelayStats {
    /// The match these counters are of.
    pub match_id: MatchId,
    /// Where the match is: its lobby, running, or ended.
    pub phase: MatchPhase,
    /// Per slot: whether the seated player is ready for the match (its session set up; see
    /// [matches](crate::rules#matches-and-rematches)).
    pub ready: Vec<bool>,
    /// Session messages dropped because they belong to another match than this one, or to
    /// this match while it is not running, by reason (a message of the ended match that
    /// arrived after a rematch counts as `ended_match`).
    pub match_drops: MatchDrops,
    /// The server clock (ticks since the match started; 0 before it started).
    pub server_tick: Tick,
    /// Last confirmed tick.
    pub confirmed_tick: Tick,
    /// Inputs replaced because they were missing at the hard tolerance, per slot.
    pub replaced_inputs: Vec<u64>,
    /// Inputs that arrived after their tick was confirmed replacing them, per slot (once per
    /// tick: copies resent for redundancy are not counted again).
    pub late_inputs: Vec<u64>,
    /// Messages that failed to decode (total since the relay started).
    pub rejected_messages: u64,
    /// Messages ignored because the sender holds no player slot (or sent a wrong protocol;
    /// total since the relay started).
    pub ignored_messages: u64,
    /// RTT per slot in ms (EWMA), 0 before the first sample (the connection's measurement,
    /// kept across matches).
    pub rtt_ms: Vec<f64>,
    /// Bytes sent in `ConfirmedInputs` messages, total.
    pub confirmed_bytes_sent: u64,
    /// Bytes sent in `Clock` messages, total.
    pub clock_bytes_sent: u64,
    /// Desyncs: the players' desync episodes started this match, all slots together (the sum
    /// of `desync_episodes`). One player desynced once counts 1, however many of its ticks are
    /// judged before it agrees again ([episodes](crate::rules#desyncs-are-reported-once-per-episode)).
    pub desyncs: u64,
    /// Ticks judged with a checksum disagreement (each desynced tick once, whoever it names;
    /// with a checksum every tick, one episode spans many).
    pub desynced_ticks: u64,
    /// Per slot: the desynced ticks naming that player (its checksum differed from the judge's,
    /// or no majority existed).
    pub desyncs_named: Vec<u64>,
    /// Per slot: the player's desync episodes, each reported to every client once, when it
    /// starts ([episodes](crate::rules#desyncs-are-reported-once-per-episode)).
    pub desync_episodes: Vec<u64>,
    /// Per slot: checksum reports refused because their tick was not confirmed yet.
    pub refused_checksums: Vec<u64>,
    /// Per slot: checksum reports that came after their tick was judged and were judged alone
    /// against the tick's kept verdict ([late checksums](crate::rules#late-checksums)).
    pub late_checksums: Vec<u64>,
    /// Per slot: checksum reports that came after their tick was judged and could not be
    /// judged any more — the tick's verdict was no longer kept, or it had no judge (no
    /// authority's checksum, no majority) — counted instead of judged
    /// ([late checksums](crate::rules#late-checksums)).
    pub unjudged_checksums: Vec<u64>,
    /// The newest tick through which every seated player's checksums (a player counted silent
    /// included: it may come back with them) are judged or counted unjudged (0: none yet); sent to the clients in their clock reports, so a client that
    /// reached its last tick can wait for its match's judgement
    /// ([late checksums](crate::rules#late-checksums)).
    pub judged_through: Tick,
    /// Per slot: inputs dropped as undecodable or oversized.
    pub dropped_inputs: Vec<DroppedInputs>,
    /// Confirmed sets sent again after an overdue acknowledgement, total.
    pub resent_sets: u64,
    /// `Behind` reports sent (a client acknowledged less than the history holds).
    pub behind_reports: u64,
    /// Per slot: messages dropped for going over the connection's
    /// [`RelayLimits`](crate::RelayLimits), per kind.
    pub rate_limited: Vec<RateLimited>,
    /// Messages dropped over the limits from connections that hold no player slot (total since
    /// the relay started).
    pub rate_limited_unseated: u64,
    /// Per slot: messages within the limits, handled (the relay's work for that player).
    pub admitted_messages: Vec<u64>,
    /// Per slot: times the player was marked disconnected for silence (nothing heard for
    /// `silence_timeout_ms`).
    pub silent_disconnects: Vec<u64>,
    /// Per slot: the server tick at which the player was last marked disconnected (silence or
    /// a closed connection); `None` while it never was.
    pub disconnected_at: Vec<Option<Tick>>,
    /// Per slot: times a new connection took the slot again with its reconnect token.
    pub rejoins: Vec<u64>,
    /// Per slot: the server tick at which the player last came back (a rejoin, or a silent
    /// player heard from again); `None` while it never did.
    pub rejoined_at: Vec<Option<Tick>>,
    /// `Hello`s with a reconnect token that were refused (a wrong token, or the slot's player
    /// still connected; the reason goes back in `Rejected`; total since the relay started).
    pub refused_rejoins: u64,
    /// `Hello`s refused, by reason (`SlotStillConnected`, `ServerFull`, `InputTypeMismatch`...;
    /// total since the relay started).
    pub refused_hellos: RejectCounts,
    /// Desync reports sent (breakdowns of a desynced tick compared; see
    /// [`DesyncReport`]).
    pub desync_reports: u64,
    /// The last desync report.
    pub last_desync_report: Option<DesyncReport>,
    /// Per slot: component hash breakdowns refused (no desync of that tick waiting, a second
    /// one for the tick, or over the message bounds).
    pub refused_breakdowns: Vec<u64>,
    /// Per slot: breakdowns that contradicted the checksum majority the player belonged to
    /// (a lie, or a bug), ignored in the report.
    pub contradicting_breakdowns: Vec<u64>,
    /// Per slot: times a new player took the slot in the running session (late join).
    pub late_joins: Vec<u64>,
    /// Snapshot transfers (late join, rejoin after the history is gone).
    pub snapshots: SnapshotStats,
    /// The authority of an authoritative room (zero otherwise).
    pub authority: crate::authority::AuthorityStats,
}

impl RelayStats {
    /// The counters of match `match_id` of `players` slots before anything happened: every
    /// per-slot list has `players` entries, every count is zero.
    pub fn zeroed(match_id: MatchId, players: usize) -> Self {
        Self {
            match_id,
            ready: vec![false; players],
            replaced_inputs: vec![0; players],
            late_inputs: vec![0; players],
            rtt_ms: vec![0.0; players],
            desyncs_named: vec![0; players],
            desync_episodes: vec![0; players],
            refused_checksums: vec![0; players],
            late_checksums: vec![0; players],
            unjudged_checksums: vec![0; players],
            refused_breakdowns: vec![0; players],
            contradicting_breakdowns: vec![0; players],
            dropped_inputs: vec![DroppedInputs::default(); players],
            rate_limited: vec![RateLimited::default(); players],
            admitted_messages: vec![0; players],
            silent_disconnects: vec![0; players],
            disconnected_at: vec![None; players],
            rejoins: vec![0; players],
            rejoined_at: vec![None; players],
            late_joins: vec![0; players],
            snapshots: SnapshotStats {
                lying: vec![0; players],
                ..SnapshotStats::default()
            },
            ..Self::default()
        }
    }

    /// The counters match `match_id` starts with, after these: [zeroed](Self::zeroed) for the
    /// same slots, keeping the connections' totals (`rejected_messages`, `ignored_messages`,
    /// `rate_limited_unseated`, `refused_rejoins`, `refused_hellos`) and round-trip times
    /// (`rtt_ms`).
    pub fn for_next_match(&self, match_id: MatchId) -> Self {
        Self {
            rejected_messages: self.rejected_messages,
            ignored_messages: self.ignored_messages,
            rate_limited_unseated: self.rate_limited_unseated,
            refused_rejoins: self.refused_rejoins,
            refused_hellos: self.refused_hellos,
            rtt_ms: self.rtt_ms.clone(),
            ..Self::zeroed(match_id, self.replaced_inputs.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_match_zeroes_the_match_counters_and_keeps_the_connection_totals() {
        let mut played = RelayStats::zeroed(MatchId::FIRST, 2);
        played.phase = MatchPhase::Ended;
        played.ready = vec![true, true];
        played.server_tick = 640;
        played.confirmed_tick = 632;
        played.replaced_inputs = vec![3, 4];
        played.late_inputs = vec![1, 0];
        played.desyncs = 2;
        played.match_drops.ended_match = 5;
        played.rejoins = vec![0, 1];
        played.rejected_messages = 7;
        played.ignored_messages = 8;
        played.rate_limited_unseated = 9;
        played.refused_rejoins = 10;
        played
            .refused_hellos
            .record(&simsync_net::RejectReason::SlotStillConnected { slot: 1 });
        played.rtt_ms = vec![40.0, 250.0];
        let next = played.for_next_match(MatchId(2));
        let mut expected = RelayStats::zeroed(MatchId(2), 2);
        expected.rejected_messages = 7;
        expected.ignored_messages = 8;
        expected.rate_limited_unseated = 9;
        expected.refused_rejoins = 10;
        expected.refused_hellos = played.refused_hellos;
        expected.rtt_ms = vec![40.0, 250.0];
        assert_eq!(next, expected);
        assert_eq!(next.phase, MatchPhase::Lobby);
        assert_eq!(next.replaced_inputs, vec![0, 0]);
        assert_eq!(next.snapshots.lying, vec![0, 0]);
    }
}
