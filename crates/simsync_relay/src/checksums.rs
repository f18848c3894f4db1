//! Checksum judging: the relay gathers every player's checksum for a tick and judges the tick
//! once every connected player reported it, or once the first report is older than the timeout
//! ([checksum rule](crate::rules#checksums-are-judged-by-majority)); a report that comes after
//! its tick was judged is judged alone against the verdict kept for the tick, or counted
//! unjudged ([late checksums](crate::rules#late-checksums)). Pure data, no I/O.

use std::collections::BTreeMap;
use std::time::Duration;

use simsync_net::{DesyncJudge, Tick};

use crate::ballots::{CastRefusal, TickBallots};

/// How many ticks back from the newest judged tick the verdicts are kept for late reports
/// (4,096 ticks: 64 s at 64 Hz); a report for an older judged tick is counted unjudged.
pub(crate) const VERDICT_MEMORY_TICKS: Tick = 4_096;

/// Why a checksum report was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChecksumRefusal {
    /// The tick is not confirmed yet (or not positive): no client can have verified it.
    Unverifiable,
    /// The player already reported this tick.
    Repeated,
    /// The tick was judged before this report came and cannot be judged for it any more: its
    /// verdict is older than [`VERDICT_MEMORY_TICKS`], or it had no judge's checksum (no
    /// authority's checksum and no majority). The report is counted unjudged.
    Unjudgeable,
}

/// The verdict on one tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Judgement {
    /// The tick.
    pub tick: Tick,
    /// The players whose checksum differs from the majority; every reporter when no value has
    /// more reports than every other one. Empty: the reports agree.
    pub players: Vec<u8>,
    /// The players whose checksum is the judge's: the authority's, or the majority's when it
    /// was reported by at least one other player too (a lone report agrees with no one), in
    /// slot order.
    pub agreeing: Vec<u8>,
    /// What the checksums were judged against: the authority's checksum of the tick, or the
    /// majority (no authority, or its checksum came too late).
    pub judge: DesyncJudge,
}

/// What a judged tick was judged against, kept for the reports that come after it.
#[derive(Debug)]
struct Verdict {
    /// The judge's checksum: the authority's, or the majority's shared by at least two
    /// players; `None` when the tick had neither.
    truth: Option<u64>,
    /// Which judge `truth` is.
    judge: DesyncJudge,
    /// Per slot: whether the player's report of the tick was taken (in time or late).
    reported: Vec<bool>,
}

/// The checksums reported and not judged yet, per tick.
#[derive(Debug, Default)]
pub(crate) struct ChecksumVotes {
    pending: TickBallots<u64>,
    /// The verdicts of the judged ticks at most [`VERDICT_MEMORY_TICKS`] older than the newest.
    verdicts: BTreeMap<Tick, Verdict>,
    /// The judgements of late reports, made when they came, handed out by the next
    /// [`ChecksumVotes::take_late`].
    late: Vec<Judgement>,
    /// Per slot: the newest tick whose report of the slot was judged or counted unjudged.
    settled: Vec<Tick>,
    /// The reports of the most recently judged ticks (at most [`KEPT_REPORTS`]), for
    /// [`ChecksumVotes::reference`].
    kept: BTreeMap<Tick, Vec<Option<u64>>>,
    /// The authority's checksum per tick (an authoritative room; at most [`KEPT_REPORTS`]).
    authority: BTreeMap<Tick, u64>,
    /// Whether ticks are judged against the authority's checksum.
    authoritative: bool,
}

/// Judged ticks whose reports are kept to verify snapshots against.
const KEPT_REPORTS: usize = 1_024;

impl ChecksumVotes {
    /// Judges against the authority's checksums from now on (`on`), or by majority.
    pub(crate) fn set_authoritative(&mut self, on: bool) {
        self.authoritative = on;
    }

    /// The authority's checksum of `tick` ([authoritative rooms](crate::rules#authoritative-rooms)).
    pub(crate) fn set_authority(&mut self, tick: Tick, checksum: u64) {
        self.authority.insert(tick, checksum);
        while self.authority.len() > KEPT_REPORTS {
            self.authority.pop_first();
        }
    }

    /// Records `slot`'s checksum for `tick` (of `players` slots) at time `now`. A report for a
    /// judged tick whose verdict is kept is judged at once against it, alone (handed out by the
    /// next [`Self::take_late`]).
    ///
    /// # Errors
    /// [`ChecksumRefusal::Unverifiable`] when `tick` is not in `1..=confirmed_tick`;
    /// [`ChecksumRefusal::Repeated`] for a second report of the slot;
    /// [`ChecksumRefusal::Unjudgeable`] for a judged tick that cannot be judged any more.
    pub(crate) fn report(
        &mut self,
        slot: usize,
        tick: Tick,
        checksum: u64,
        confirmed_tick: Tick,
        players: usize,
        now: Duration,
    ) -> Result<(), ChecksumRefusal> {
        if tick <= 0 || tick > confirmed_tick || slot >= players {
            return Err(ChecksumRefusal::Unverifiable);
        }
        if self.verdicts.contains_key(&tick) {
            return self.report_late(slot, tick, checksum);
        }
        let forgotten = self
            .verdicts
            .first_key_value()
            .is_some_and(|(oldest, _)| tick < *oldest);
        if forgotten && self.pending.get(tick).is_none() {
            self.settle(slot, tick);
            return Err(ChecksumRefusal::Unjudgeable);
        }
        self.pending.open_once(tick, players, now, ());
        self.pending
            .cast(tick, slot, checksum)
            .map_err(|refusal| match refusal {
                CastRefusal::Repeated => ChecksumRefusal::Repeated,
                CastRefusal::NoBallot | CastRefusal::NoSeat => ChecksumRefusal::Unverifiable,
            })
    }

    /// Judges `slot`'s report of the judged `tick` against its kept verdict.
    fn report_late(
        &mut self,
        slot: usize,
        tick: Tick,
        checksum: u64,
    ) -> Result<(), ChecksumRefusal> {
        let Some(verdict) = self.verdicts.get_mut(&tick) else {
            return Err(ChecksumRefusal::Unjudgeable);
        };
        match verdict.reported.get_mut(slot) {
            Some(true) => return Err(ChecksumRefusal::Repeated),
            Some(taken) => *taken = true,
            None => return Err(ChecksumRefusal::Unverifiable),
        }
        let (truth, judge) = (verdict.truth, verdict.judge);
        self.settle(slot, tick);
        let truth = truth.ok_or(ChecksumRefusal::Unjudgeable)?;
        let named = u8::try_from(slot).ok().into_iter().collect::<Vec<u8>>();
        let (players, agreeing) = if checksum == truth {
            (Vec::new(), named)
        } else {
            (named, Vec::new())
        };
        self.late.push(Judgement {
            tick,
            players,
            agreeing,
            judge,
        });
        Ok(())
    }

    /// `slot`'s reports up to `tick` are judged (or counted unjudged).
    fn settle(&mut self, slot: usize, tick: Tick) {
        if self.settled.len() <= slot {
            self.settled.resize(slot + 1, 0);
        }
        self.settled[slot] = self.settled[slot].max(tick);
    }

    /// The newest tick through which every slot marked in `seated` has its reports judged (or
    /// counted unjudged) and no tick waits for a judgement: the smallest of those slots' newest
    /// settled ticks (0 for a slot that never reported), below the oldest pending tick. With
    /// no slot marked, the newest judged tick.
    pub(crate) fn judged_through(&self, seated: &[bool]) -> Tick {
        let newest = self.verdicts.last_key_value().map_or(0, |(tick, _)| *tick);
        let through = seated
            .iter()
            .enumerate()
            .filter(|(_, on)| **on)
            .map(|(slot, _)| self.settled.get(slot).copied().unwrap_or(0))
            .min()
            .unwrap_or(newest);
        match self.pending.oldest() {
            Some(oldest) => through.min(oldest - 1),
            None => through,
        }
    }

    /// The judgements of the late reports taken since the last call, in the order they came
    /// (each names or agrees with the late reporter alone).
    pub(crate) fn take_late(&mut self) -> Vec<Judgement> {
        std::mem::take(&mut self.late)
    }

    /// Judges every tick that every `connected` slot reported, or whose first report is at
    /// least `timeout` old at `now`; oldest first.
    pub(crate) fn judge(
        &mut self,
        connected: &[bool],
        now: Duration,
        timeout: Duration,
    ) -> Vec<Judgement> {
        // An authoritative room waits for the authority's checksum too.
        let (authoritative, authority) = (self.authoritative, &self.authority);
        let judge_known = |tick| !authoritative || authority.contains_key(&tick);
        let ready = self
            .pending
            .take_ready(connected, now, timeout, judge_known);
        let mut judgements = Vec::with_capacity(ready.len());
        for (tick, ballot) in ready {
            judgements.push(self.judge_tick(tick, ballot.reports));
        }
        if let Some((newest, _)) = self.verdicts.last_key_value() {
            let oldest_kept = newest - VERDICT_MEMORY_TICKS;
            self.verdicts = self.verdicts.split_off(&oldest_kept);
        }
        while self.kept.len() > KEPT_REPORTS {
            self.kept.pop_first();
        }
        judgements
    }

    /// Judges `tick` from its `reports` and keeps its verdict and reports.
    fn judge_tick(&mut self, tick: Tick, reports: Vec<Option<u64>>) -> Judgement {
        let truth = self
            .authority
            .get(&tick)
            .copied()
            .filter(|_| self.authoritative);
        let judgement = match truth {
            Some(truth) => Judgement {
                tick,
                players: differing_from(&reports, truth),
                agreeing: agreeing_with(&reports, truth),
                judge: DesyncJudge::Authority,
            },
            None => Judgement {
                tick,
                players: minority(&reports),
                agreeing: agreeing(&reports),
                judge: DesyncJudge::Majority,
            },
        };
        // A majority is a truth only when at least two players share it.
        let truth = truth.or_else(|| {
            (!judgement.agreeing.is_empty())
                .then(|| majority(&reports))
                .flatten()
        });
        for (slot, report) in reports.iter().enumerate() {
            if report.is_some() {
                self.settle(slot, tick);
            }
        }
        self.verdicts.insert(
            tick,
            Verdict {
                truth,
                judge: judgement.judge,
                reported: reports.iter().map(Option::is_some).collect(),
            },
        );
        self.kept.insert(tick, reports);
        judgement
    }

    /// The checksum of `tick` a snapshot of `buddy` must have
    /// ([late join](crate::rules#late-join-and-rejoin-from-a-snapshot)): the value every slot
    /// but `buddy` and `joiner` reported for it (judged or not), or the value most of them
    /// reported when they disagree with a single leader. Only when no other slot reported the
    /// tick, and `buddy_alone` (no other player is connected to report it), does the buddy's own
    /// report count. `None`: not known (yet).
    pub(crate) fn reference(
        &self,
        tick: Tick,
        buddy: usize,
        joiner: usize,
        buddy_alone: bool,
    ) -> Option<u64> {
        if let Some(truth) = self.authority.get(&tick).filter(|_| self.authoritative) {
            return Some(*truth);
        }
        let reports = self
            .pending
            .get(tick)
            .map(|p| &p.reports)
            .or_else(|| self.kept.get(&tick))?;
        let others: Vec<Option<u64>> = reports
            .iter()
            .enumerate()
            .map(|(slot, r)| {
                if slot == buddy || slot == joiner {
                    None
                } else {
                    *r
                }
            })
            .collect();
        if others.iter().all(Option::is_none) {
            return if buddy_alone {
                reports.get(buddy).copied().flatten()
            } else {
                None
            };
        }
        majority(&others)
    }
}

/// The slots whose report differs from the authority's `truth` (an authoritative room: the
/// authority's checksum is the truth, so a lone player, or one of two, is judged alone).
pub(crate) fn differing_from(reports: &[Option<u64>], truth: u64) -> Vec<u8> {
    reports
        .iter()
        .enumerate()
        .filter(|(_, report)| report.is_some_and(|c| c != truth))
        .filter_map(|(slot, _)| u8::try_from(slot).ok())
        .collect()
}

/// The slots whose report is the authority's `truth`.
pub(crate) fn agreeing_with(reports: &[Option<u64>], truth: u64) -> Vec<u8> {
    reports
        .iter()
        .enumerate()
        .filter(|(_, report)| **report == Some(truth))
        .filter_map(|(slot, _)| u8::try_from(slot).ok())
        .collect()
}

/// The value reported more often than every other one in `reports` (`None`: no report, or a
/// tie between the leaders).
fn majority(reports: &[Option<u64>]) -> Option<u64> {
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for checksum in reports.iter().flatten() {
        *counts.entry(*checksum).or_default() += 1;
    }
    let most = counts.values().copied().max()?;
    let mut leaders = counts.iter().filter(|(_, n)| **n == most);
    match (leaders.next(), leaders.next()) {
        (Some((value, _)), None) => Some(*value),
        _ => None,
    }
}

/// The slots that reported the majority's checksum of `reports`, when at least two did (empty
/// without a majority or when it is a single report).
pub(crate) fn agreeing(reports: &[Option<u64>]) -> Vec<u8> {
    let Some(majority) = majority(reports) else {
        return Vec::new();
    };
    let slots: Vec<u8> = reports
        .iter()
        .enumerate()
        .filter(|(_, report)| **report == Some(majority))
        .filter_map(|(slot, _)| u8::try_from(slot).ok())
        .collect();
    if slots.len() < 2 { Vec::new() } else { slots }
}

/// The slots whose checksum differs from the majority of `reports` (`None`: no report). When
/// no value was reported more often than every other one (2 players disagreeing, a three-way
/// split), every reporter is named. Empty when the reports agree.
pub(crate) fn minority(reports: &[Option<u64>]) -> Vec<u8> {
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for checksum in reports.iter().flatten() {
        *counts.entry(*checksum).or_default() += 1;
    }
    if counts.len() <= 1 {
        return Vec::new();
    }
    let majority = majority(reports);
    reports
        .iter()
        .enumerate()
        .filter_map(|(slot, report)| match (report, majority) {
            (Some(checksum), Some(majority)) if *checksum == majority => None,
            (Some(_), _) => u8::try_from(slot).ok(),
            (None, _) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(1);

    #[test]
    fn agreement_names_no_one() {
        assert!(minority(&[Some(1), Some(1), None]).is_empty());
        assert!(minority(&[None, None]).is_empty());
    }

    #[test]
    fn the_minority_is_named() {
        assert_eq!(minority(&[Some(1), Some(2), Some(1)]), vec![1]);
        assert_eq!(minority(&[Some(3), Some(2), Some(3), Some(4)]), vec![1, 3]);
    }

    #[test]
    fn the_agreeing_players_share_the_majority_checksum_with_someone() {
        assert_eq!(agreeing(&[Some(1), Some(2), Some(1)]), vec![0, 2]);
        assert_eq!(agreeing(&[Some(1), Some(1), None]), vec![0, 1]);
        // A lone report, or a tie, agrees with no one.
        assert!(agreeing(&[None, Some(1), None]).is_empty());
        assert!(agreeing(&[Some(1), Some(2)]).is_empty());
        assert!(agreeing(&[Some(1), Some(1), Some(2), Some(2)]).is_empty());
    }

    #[test]
    fn a_tie_names_every_reporter() {
        assert_eq!(minority(&[Some(1), Some(2)]), vec![0, 1]);
        assert_eq!(minority(&[Some(1), Some(2), Some(3)]), vec![0, 1, 2]);
        assert_eq!(minority(&[Some(1), None, Some(2)]), vec![0, 2]);
    }

    #[test]
    fn unverifiable_and_repeated_reports_are_refused() {
        let mut votes = ChecksumVotes::default();
        assert_eq!(
            votes.report(0, 11, 5, 10, 2, T),
            Err(ChecksumRefusal::Unverifiable)
        );
        assert_eq!(
            votes.report(0, 0, 5, 10, 2, T),
            Err(ChecksumRefusal::Unverifiable)
        );
        assert_eq!(votes.report(0, 10, 5, 10, 2, T), Ok(()));
        assert_eq!(
            votes.report(0, 10, 6, 10, 2, T),
            Err(ChecksumRefusal::Repeated)
        );
        assert_eq!(votes.report(1, 10, 5, 10, 2, T), Ok(()));
        let judged = votes.judge(&[true, true], T, T);
        assert_eq!(
            judged,
            vec![Judgement {
                tick: 10,
                players: vec![],
                agreeing: vec![0, 1],
                judge: DesyncJudge::Majority,
            }]
        );
        assert_eq!(
            votes.report(1, 10, 5, 10, 2, T),
            Err(ChecksumRefusal::Repeated)
        );
    }

    #[test]
    fn the_reference_of_a_snapshot_is_the_others_checksum_judged_or_not() {
        let mut votes = ChecksumVotes::default();
        for (slot, checksum) in [(0, 7), (1, 7), (2, 9)] {
            votes.report(slot, 5, checksum, 9, 4, T).unwrap();
        }
        // Buddy 2 lies: the others say 7. The joiner (3) never counts.
        assert_eq!(votes.reference(5, 2, 3, false), Some(7));
        assert_eq!(votes.reference(5, 0, 3, false), None, "7 and 9: a tie");
        votes.judge(&[true, true, true, false], T, T);
        assert_eq!(votes.reference(5, 2, 3, false), Some(7), "kept once judged");
        assert_eq!(votes.reference(6, 2, 3, false), None, "never reported");
        // Only the buddy reported: its own value counts only when it is alone.
        votes.report(2, 8, 4, 9, 4, T).unwrap();
        assert_eq!(votes.reference(8, 2, 3, false), None);
        assert_eq!(votes.reference(8, 2, 3, true), Some(4));
    }

    #[test]
    fn a_tick_waits_for_every_connected_player_or_the_timeout() {
        let mut votes = ChecksumVotes::default();
        votes.report(0, 5, 1, 9, 3, T).unwrap();
        votes.report(1, 5, 2, 9, 3, T).unwrap();
        assert!(votes.judge(&[true, true, true], T, T).is_empty());
        // A disconnected player is not waited for.
        assert_eq!(
            votes.judge(&[true, true, false], T, T),
            vec![Judgement {
                tick: 5,
                players: vec![0, 1],
                agreeing: vec![],
                judge: DesyncJudge::Majority,
            }]
        );
        votes.report(2, 6, 1, 9, 3, T).unwrap();
        assert!(votes.judge(&[true, true, true], T + T / 2, T).is_empty());
        assert_eq!(votes.judge(&[true, true, true], T + T, T).len(), 1);
    }

    #[test]
    fn with_an_authority_only_the_players_that_differ_from_it_are_named() {
        let mut votes = ChecksumVotes::default();
        votes.set_authoritative(true);
        // Two players disagree: without an authority both would be named.
        votes.report(0, 5, 0xAA, 10, 2, T).unwrap();
        votes.report(1, 5, 0xBB, 10, 2, T).unwrap();
        // Complete, but the authority's checksum is not known yet: no judgement.
        assert!(votes.judge(&[true, true], T, 10 * T).is_empty());
        votes.set_authority(5, 0xAA);
        let judged = votes.judge(&[true, true], T, 10 * T);
        assert_eq!(judged[0].players, vec![1]);
        assert_eq!(judged[0].agreeing, vec![0]);
        assert_eq!(judged[0].judge, DesyncJudge::Authority);
    }

    #[test]
    fn with_an_authority_a_lone_player_is_judged() {
        let mut votes = ChecksumVotes::default();
        votes.set_authoritative(true);
        votes.set_authority(3, 7);
        votes.report(0, 3, 8, 10, 1, T).unwrap();
        let judged = votes.judge(&[true], T, 10 * T);
        assert_eq!(judged[0].players, vec![0]);
        votes.set_authority(4, 9);
        votes.report(0, 4, 9, 10, 1, T).unwrap();
        let judged = votes.judge(&[true], T, 10 * T);
        assert!(judged[0].players.is_empty());
    }

    #[test]
    fn a_late_authority_falls_back_to_the_majority_at_the_timeout() {
        let mut votes = ChecksumVotes::default();
        votes.set_authoritative(true);
        votes.report(0, 2, 1, 10, 3, T).unwrap();
        votes.report(1, 2, 1, 10, 3, T).unwrap();
        votes.report(2, 2, 5, 10, 3, T).unwrap();
        assert!(votes.judge(&[true; 3], T, T).is_empty());
        let judged = votes.judge(&[true; 3], 2 * T, T);
        assert_eq!(judged[0].players, vec![2]);
        assert_eq!(judged[0].judge, DesyncJudge::Majority);
    }

    #[test]
    fn with_an_authority_a_snapshot_is_checked_against_it() {
        let mut votes = ChecksumVotes::default();
        votes.set_authoritative(true);
        votes.set_authority(6, 42);
        assert_eq!(votes.reference(6, 0, 1, false), Some(42));
    }
    #[test]
    fn a_late_report_is_judged_alone_against_the_kept_verdict() {
        let mut votes = ChecksumVotes::default();
        votes.set_authoritative(true);
        votes.set_authority(5, 0xAA);
        votes.report(0, 5, 0xAA, 10, 3, T).unwrap();
        votes.report(1, 5, 0xAA, 10, 3, T).unwrap();
        // Player 2 lags: the tick is judged at the timeout without it.
        let judged = votes.judge(&[true; 3], 2 * T, T);
        assert_eq!(judged[0].agreeing, vec![0, 1]);
        assert_eq!(
            votes.judged_through(&[true; 3]),
            0,
            "player 2 never reported"
        );
        // Its lie comes much later, after the authority's checksum was forgotten.
        for tick in 6..6 + KEPT_REPORTS as Tick + 10 {
            votes.set_authority(tick, 1);
        }
        assert_eq!(votes.report(2, 5, 0xBB, 10, 3, 9 * T), Ok(()));
        assert!(votes.judge(&[true; 3], 9 * T, T).is_empty());
        assert_eq!(
            votes.take_late(),
            vec![Judgement {
                tick: 5,
                players: vec![2],
                agreeing: vec![],
                judge: DesyncJudge::Authority,
            }]
        );
        assert_eq!(votes.judged_through(&[true; 3]), 5);
        assert_eq!(
            votes.report(2, 5, 0xBB, 10, 3, 9 * T),
            Err(ChecksumRefusal::Repeated),
            "judged once"
        );
        assert!(votes.take_late().is_empty());
    }

    #[test]
    fn a_late_report_agreeing_with_the_majority_is_named_agreeing() {
        let mut votes = ChecksumVotes::default();
        votes.report(0, 4, 7, 10, 3, T).unwrap();
        votes.report(1, 4, 7, 10, 3, T).unwrap();
        votes.judge(&[true, true, false], T, T);
        votes.report(2, 4, 7, 10, 3, T).unwrap();
        let judged = votes.take_late();
        assert_eq!(judged[0].agreeing, vec![2]);
        assert!(judged[0].players.is_empty());
        assert_eq!(judged[0].judge, DesyncJudge::Majority);
    }

    #[test]
    fn a_late_report_of_a_tick_without_a_judge_is_unjudged() {
        let mut votes = ChecksumVotes::default();
        // Two players disagree: no majority, no authority.
        votes.report(0, 4, 1, 10, 3, T).unwrap();
        votes.report(1, 4, 2, 10, 3, T).unwrap();
        assert_eq!(
            votes.judge(&[true, true, false], T, T)[0].players,
            vec![0, 1]
        );
        assert_eq!(
            votes.report(2, 4, 1, 10, 3, T),
            Err(ChecksumRefusal::Unjudgeable)
        );
        assert!(votes.take_late().is_empty());
        assert_eq!(
            votes.judged_through(&[true; 3]),
            4,
            "unjudged is settled too"
        );
    }

    #[test]
    fn a_report_older_than_the_kept_verdicts_is_unjudged() {
        let mut votes = ChecksumVotes::default();
        let newest = VERDICT_MEMORY_TICKS + 20;
        for tick in [10, 20, newest] {
            votes.report(0, tick, 1, newest, 2, T).unwrap();
            votes.judge(&[true, false], T, T);
        }
        // Tick 10 is more than VERDICT_MEMORY_TICKS behind the newest verdict: forgotten.
        assert_eq!(
            votes.report(1, 10, 1, newest, 2, T),
            Err(ChecksumRefusal::Unjudgeable)
        );
        assert_eq!(
            votes.report(1, 15, 1, newest, 2, T),
            Err(ChecksumRefusal::Unjudgeable),
            "never reported, older than every kept verdict"
        );
        // Tick 20 is kept: judged (and agrees with nobody's majority: a lone report).
        assert_eq!(
            votes.report(1, 20, 1, newest, 2, T),
            Err(ChecksumRefusal::Unjudgeable)
        );
        assert_eq!(votes.judged_through(&[true, true]), 20);
    }

    #[test]
    fn judged_through_waits_for_the_slowest_connected_player_and_the_pending_ticks() {
        let mut votes = ChecksumVotes::default();
        for tick in [60, 120] {
            votes.report(0, tick, 1, 200, 2, T).unwrap();
        }
        votes.report(1, 60, 1, 200, 2, T).unwrap();
        assert_eq!(votes.judged_through(&[true, true]), 0, "nothing judged");
        votes.judge(&[true, true], T, 10 * T);
        assert_eq!(votes.judged_through(&[true, true]), 60);
        assert_eq!(votes.judged_through(&[true, false]), 60, "tick 120 waits");
        votes.judge(&[true, true], 11 * T, 10 * T);
        assert_eq!(votes.judged_through(&[true, false]), 120);
        assert_eq!(votes.judged_through(&[true, true]), 60, "player 1 is at 60");
        assert_eq!(votes.judged_through(&[false, false]), 120);
    }
}
