//! Naming what differs in a desync: after a checksum disagreement the relay collects each
//! client's per-component hash breakdown of the tick and compares them
//! ([desync dumps](crate::rules#the-relay-names-the-component)). Pure data, no I/O.
//!
//! The reference is the checksum majority: per component (resource, slot) the value most of the
//! players whose checksum agreed with the majority report (when they split evenly, the value
//! most reporters sent). A named player's entries that differ
//! from it are named; an entry of a majority player that differs from it is a lie (its checksum
//! agreed), counted and ignored, so one lying client never makes honest clients look split.
//! Without a checksum majority (two players, or a split) entries are named where reporters
//! disagree.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use simsync_net::{MAX_BREAKDOWN_ENTRIES, MAX_BREAKDOWN_NAME_BYTES, MAX_BREAKDOWN_SLOTS};

use simsync_net::Tick;

use crate::ballots::{CastRefusal, TickBallots};

/// Desynced ticks waiting for breakdowns at once; opening another drops the oldest.
pub(crate) const MAX_OPEN_REPORTS: usize = 8;

/// One client's breakdown of a tick.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Breakdown {
    pub components: Vec<(String, u64)>,
    pub resources: Vec<(String, u64)>,
    pub slots: Vec<(u32, u64)>,
}

impl Breakdown {
    /// Whether every list and name is within the message bounds.
    fn within_bounds(&self) -> bool {
        self.components.len() <= MAX_BREAKDOWN_ENTRIES
            && self.resources.len() <= MAX_BREAKDOWN_ENTRIES
            && self.slots.len() <= MAX_BREAKDOWN_SLOTS
            && self
                .components
                .iter()
                .chain(&self.resources)
                .all(|(name, _)| name.len() <= MAX_BREAKDOWN_NAME_BYTES)
    }

    /// Every entry under one key space: components by name, resources as `resource <name>`.
    fn named_entries(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        self.components.iter().cloned().chain(
            self.resources
                .iter()
                .map(|(name, hash)| (format!("resource {name}"), *hash)),
        )
    }
}

/// Why a breakdown was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BreakdownRefusal {
    /// No desync of that tick is waiting for breakdowns (never judged, or already reported).
    UnknownTick,
    /// The player already sent a breakdown of the tick.
    Repeated,
    /// A list or name longer than the message bounds.
    Oversized,
}

/// The relay's finding on one desynced tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BreakdownReport {
    pub tick: Tick,
    /// Players whose breakdown differs from the reference.
    pub players: Vec<u8>,
    /// Component (and `resource <name>`) types whose hashes differ, in the first reporter's
    /// order.
    pub components: Vec<String>,
    /// Slots whose hashes differ, ascending.
    pub slots: Vec<u32>,
    /// Majority players whose breakdown contradicted the majority (liars), ignored.
    pub contradicting: Vec<u8>,
}

/// Desynced ticks waiting for breakdowns; each ballot is about the players the checksums
/// named.
#[derive(Debug, Default)]
pub(crate) struct BreakdownVotes {
    open: TickBallots<Breakdown, Vec<u8>>,
}

impl BreakdownVotes {
    /// The checksums of `tick` disagreed, naming `named` of `players` slots: breakdowns of the
    /// tick are taken from now (`now`) on.
    pub(crate) fn open(&mut self, tick: Tick, named: Vec<u8>, players: usize, now: Duration) {
        self.open.open(tick, players, now, named);
        self.open.keep_newest(MAX_OPEN_REPORTS);
    }

    /// `slot`'s breakdown of `tick`.
    ///
    /// # Errors
    /// See [`BreakdownRefusal`].
    pub(crate) fn report(
        &mut self,
        slot: usize,
        tick: Tick,
        breakdown: Breakdown,
    ) -> Result<(), BreakdownRefusal> {
        if !breakdown.within_bounds() {
            return Err(BreakdownRefusal::Oversized);
        }
        self.open
            .cast(tick, slot, breakdown)
            .map_err(|refusal| match refusal {
                CastRefusal::Repeated => BreakdownRefusal::Repeated,
                CastRefusal::NoBallot | CastRefusal::NoSeat => BreakdownRefusal::UnknownTick,
            })
    }

    /// Compares every tick whose `connected` players all sent their breakdown, or whose
    /// first report is `timeout` old at `now` (a tick with fewer than two breakdowns gives no
    /// report). Oldest first.
    pub(crate) fn judge(
        &mut self,
        connected: &[bool],
        now: Duration,
        timeout: Duration,
    ) -> Vec<BreakdownReport> {
        self.open
            .take_ready(connected, now, timeout, |_| true)
            .into_iter()
            .filter_map(|(tick, ballot)| compare(tick, &ballot.about, &ballot.reports))
            .collect()
    }
}

/// One reporter's entries: its slot, its named entries and its slot entries.
type Entries = (u8, BTreeMap<String, u64>, BTreeMap<u32, u64>);

/// The comparison of one tick's breakdowns (see the module docs); `None` with fewer than two.
pub(crate) fn compare(
    tick: Tick,
    named: &[u8],
    breakdowns: &[Option<Breakdown>],
) -> Option<BreakdownReport> {
    let reporters: Vec<(u8, &Breakdown)> = breakdowns
        .iter()
        .enumerate()
        .filter_map(|(slot, b)| Some((u8::try_from(slot).ok()?, b.as_ref()?)))
        .collect();
    if reporters.len() < 2 {
        return None;
    }
    let mut report = BreakdownReport {
        tick,
        players: Vec::new(),
        components: Vec::new(),
        slots: Vec::new(),
        contradicting: Vec::new(),
    };
    let entries = |b: &Breakdown| b.named_entries().collect::<BTreeMap<String, u64>>();
    let slot_entries = |b: &Breakdown| b.slots.iter().copied().collect::<BTreeMap<u32, u64>>();
    let all_entries: Vec<Entries> = reporters
        .iter()
        .map(|(s, b)| (*s, entries(b), slot_entries(b)))
        .collect();
    let mut judge = KeyJudge {
        named,
        honest_reference: reporters.iter().any(|(s, _)| !named.contains(s)),
        differing_players: BTreeSet::new(),
        liars: BTreeSet::new(),
    };
    for name in entry_names(&reporters) {
        let values = all_entries
            .iter()
            .map(|(s, e, _)| (*s, e.get(&name).copied()))
            .collect();
        if judge.differs(values) && report.components.len() < MAX_BREAKDOWN_ENTRIES {
            report.components.push(name);
        }
    }
    for slot in entry_slots(&all_entries) {
        let values = all_entries
            .iter()
            .map(|(s, _, e)| (*s, e.get(&slot).copied()))
            .collect();
        if judge.differs(values) && report.slots.len() < MAX_BREAKDOWN_SLOTS {
            report.slots.push(slot);
        }
    }
    report.players = judge.differing_players.into_iter().collect();
    report.contradicting = judge.liars.into_iter().collect();
    Some(report)
}

/// Every named entry's key, in the first reporter's order, then those only others have.
fn entry_names(reporters: &[(u8, &Breakdown)]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (_, b) in reporters {
        for (name, _) in b.named_entries() {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// Every slot any reporter has an entry for, ascending.
fn entry_slots(all_entries: &[Entries]) -> Vec<u32> {
    let mut slots: Vec<u32> = all_entries
        .iter()
        .flat_map(|(_, _, s)| s.keys().copied())
        .collect();
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// Judges one entry at a time against its reference value and collects who differs: named
/// players, or unnamed ones contradicting the majority they belong to.
struct KeyJudge<'a> {
    /// The slots the checksum judge named as desynced.
    named: &'a [u8],
    /// Some reporter is not named: the reference comes from the unnamed (majority) side.
    honest_reference: bool,
    /// Players whose entries differ from the reference.
    differing_players: BTreeSet<u8>,
    /// Unnamed players whose entries differ from the reference: their checksum and breakdown
    /// contradict each other.
    liars: BTreeSet<u8>,
}

impl KeyJudge<'_> {
    /// Whether the checksum judge named `slot`.
    fn is_named(&self, slot: u8) -> bool {
        self.named.contains(&slot)
    }

    /// Whether one entry (`values`: each reporter's value, `None` when absent) differs from
    /// the reference for a player counted as differing; records those players and the liars.
    fn differs(&mut self, values: Vec<(u8, Option<u64>)>) -> bool {
        let reference_pool: Vec<Option<u64>> = values
            .iter()
            .filter(|(s, _)| !self.honest_reference || !self.is_named(*s))
            .map(|(_, v)| *v)
            .collect();
        // Majority players split on the entry (one of them lies): the value most reporters
        // sent is the reference.
        let everyone: Vec<Option<u64>> = values.iter().map(|(_, v)| *v).collect();
        let reference = leader(&reference_pool).or_else(|| leader(&everyone));
        let mut differs = false;
        for (slot, value) in &values {
            if reference.is_some_and(|r| r == *value) {
                continue;
            }
            if self.honest_reference && !self.is_named(*slot) {
                self.liars.insert(*slot);
            } else {
                self.differing_players.insert(*slot);
                differs = true;
            }
        }
        differs
    }
}

/// The value reported more often than every other one (`None` when there is no such value:
/// a tie). An absent entry counts as a value.
fn leader(values: &[Option<u64>]) -> Option<Option<u64>> {
    let mut counts: BTreeMap<Option<u64>, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(*v).or_default() += 1;
    }
    let most = counts.values().copied().max()?;
    let mut leaders = counts.iter().filter(|(_, n)| **n == most);
    match (leaders.next(), leaders.next()) {
        (Some((value, _)), None) => Some(*value),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(1);

    fn b(health: u64, pos: u64, slot3: u64) -> Breakdown {
        Breakdown {
            components: vec![("Health".into(), health), ("Position".into(), pos)],
            resources: vec![("Score".into(), 1)],
            slots: vec![(0, 10), (3, slot3)],
        }
    }

    #[test]
    fn the_named_players_differing_component_and_slot_are_reported() {
        let report = compare(
            5,
            &[2],
            &[Some(b(1, 2, 30)), Some(b(1, 2, 30)), Some(b(1, 9, 31))],
        )
        .unwrap();
        assert_eq!(report.players, vec![2]);
        assert_eq!(report.components, vec!["Position".to_string()]);
        assert_eq!(report.slots, vec![3]);
        assert!(report.contradicting.is_empty());
    }

    #[test]
    fn a_majority_player_contradicting_the_majority_is_a_liar_and_splits_no_one() {
        // Slot 1's checksum agreed with slot 0's but its breakdown claims another Health.
        let report = compare(
            5,
            &[2],
            &[Some(b(1, 2, 30)), Some(b(7, 2, 30)), Some(b(1, 9, 31))],
        )
        .unwrap();
        assert_eq!(report.players, vec![2]);
        assert_eq!(report.components, vec!["Position".to_string()]);
        assert_eq!(report.contradicting, vec![1]);
    }

    #[test]
    fn without_a_majority_the_disagreeing_entries_are_named() {
        let report = compare(5, &[0, 1], &[Some(b(1, 2, 30)), Some(b(1, 3, 30))]).unwrap();
        assert_eq!(report.components, vec!["Position".to_string()]);
        assert_eq!(report.players, vec![0, 1]);
        assert!(report.slots.is_empty());
    }

    #[test]
    fn unknown_repeated_and_oversized_breakdowns_are_refused() {
        let mut votes = BreakdownVotes::default();
        assert_eq!(
            votes.report(0, 5, b(1, 2, 3)),
            Err(BreakdownRefusal::UnknownTick)
        );
        votes.open(5, vec![1], 2, T);
        assert_eq!(votes.report(0, 5, b(1, 2, 3)), Ok(()));
        assert_eq!(
            votes.report(0, 5, b(1, 2, 3)),
            Err(BreakdownRefusal::Repeated)
        );
        assert_eq!(
            votes.report(9, 5, b(1, 2, 3)),
            Err(BreakdownRefusal::UnknownTick)
        );
        let mut big = b(1, 2, 3);
        big.slots = (0..=MAX_BREAKDOWN_SLOTS as u32).map(|s| (s, 0)).collect();
        assert_eq!(votes.report(1, 5, big), Err(BreakdownRefusal::Oversized));
        let mut long_name = b(1, 2, 3);
        long_name.components[0].0 = "x".repeat(MAX_BREAKDOWN_NAME_BYTES + 1);
        assert_eq!(
            votes.report(1, 5, long_name),
            Err(BreakdownRefusal::Oversized)
        );
    }

    #[test]
    fn a_tick_is_compared_when_every_connected_player_sent_or_at_the_timeout() {
        let mut votes = BreakdownVotes::default();
        votes.open(5, vec![1], 3, T);
        votes.report(0, 5, b(1, 2, 3)).unwrap();
        votes.report(1, 5, b(1, 4, 3)).unwrap();
        assert!(votes.judge(&[true, true, true], T, T).is_empty());
        let reports = votes.judge(&[true, true, true], T + T, T);
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].components, vec!["Position".to_string()]);
        assert_eq!(
            votes.report(2, 5, b(1, 2, 3)),
            Err(BreakdownRefusal::UnknownTick)
        );
    }

    #[test]
    fn open_ticks_are_bounded() {
        let mut votes = BreakdownVotes::default();
        for tick in 1..=(MAX_OPEN_REPORTS as Tick + 5) {
            votes.open(tick, vec![0], 2, T);
        }
        assert_eq!(votes.open.len(), MAX_OPEN_REPORTS);
        assert_eq!(
            votes.report(0, 1, b(1, 2, 3)),
            Err(BreakdownRefusal::UnknownTick)
        );
    }
}
