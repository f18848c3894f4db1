//! Collecting one report per player per tick: the part the checksum judge
//! ([`ChecksumVotes`](crate::checksums::ChecksumVotes)) and the breakdown comparison
//! ([`BreakdownVotes`](crate::breakdowns::BreakdownVotes)) share. A tick's ballot is opened
//! (at its first report, or when the relay asks for reports), takes at most one report per
//! slot, and is taken out for judging once every connected player reported (and the judge's
//! own condition holds), or once it is as old as the timeout. Pure data, no I/O.

use std::collections::BTreeMap;
use std::time::Duration;

use simsync_net::Tick;

/// One tick's reports.
#[derive(Debug)]
pub(crate) struct Ballot<T, M> {
    /// When the ballot was opened: the time the timeout counts from.
    pub first_at: Duration,
    /// What the ballot is about beyond its tick (for breakdowns: the players the checksums
    /// named; nothing for checksums).
    pub about: M,
    /// Per slot: the player's report, `None` until it came.
    pub reports: Vec<Option<T>>,
}

impl<T, M> Ballot<T, M> {
    /// An empty ballot of `players` slots opened at `now`.
    fn new(players: usize, now: Duration, about: M) -> Self {
        Self {
            first_at: now,
            about,
            reports: std::iter::repeat_with(|| None).take(players).collect(),
        }
    }

    /// Whether every slot marked in `connected` reported (a slot beyond the ballot's counts as
    /// reported: it was not seated when the ballot opened).
    fn complete(&self, connected: &[bool]) -> bool {
        connected
            .iter()
            .zip(&self.reports)
            .all(|(on, report)| !on || report.is_some())
    }
}

/// Why a report was not put in a ballot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CastRefusal {
    /// No ballot of that tick is open.
    NoBallot,
    /// The slot is beyond the ballot's slots.
    NoSeat,
    /// The slot already reported this tick.
    Repeated,
}

/// The open ballots, per tick (oldest first).
#[derive(Debug)]
pub(crate) struct TickBallots<T, M = ()> {
    open: BTreeMap<Tick, Ballot<T, M>>,
}

impl<T, M> Default for TickBallots<T, M> {
    fn default() -> Self {
        Self {
            open: BTreeMap::new(),
        }
    }
}

impl<T, M> TickBallots<T, M> {
    /// Opens the ballot of `tick` for `players` slots at `now`, replacing an open one.
    pub(crate) fn open(&mut self, tick: Tick, players: usize, now: Duration, about: M) {
        self.open.insert(tick, Ballot::new(players, now, about));
    }

    /// Opens the ballot of `tick` as [`Self::open`] does, unless one is open already.
    pub(crate) fn open_once(&mut self, tick: Tick, players: usize, now: Duration, about: M) {
        self.open
            .entry(tick)
            .or_insert_with(|| Ballot::new(players, now, about));
    }

    /// Puts `slot`'s `report` in the ballot of `tick`.
    ///
    /// # Errors
    /// See [`CastRefusal`].
    pub(crate) fn cast(&mut self, tick: Tick, slot: usize, report: T) -> Result<(), CastRefusal> {
        let ballot = self.open.get_mut(&tick).ok_or(CastRefusal::NoBallot)?;
        match ballot.reports.get_mut(slot) {
            None => Err(CastRefusal::NoSeat),
            Some(Some(_)) => Err(CastRefusal::Repeated),
            Some(entry) => {
                *entry = Some(report);
                Ok(())
            }
        }
    }

    /// The open ballot of `tick`.
    pub(crate) fn get(&self, tick: Tick) -> Option<&Ballot<T, M>> {
        self.open.get(&tick)
    }

    /// The oldest tick with an open ballot.
    pub(crate) fn oldest(&self) -> Option<Tick> {
        self.open.first_key_value().map(|(tick, _)| *tick)
    }

    /// How many ballots are open.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// Drops the oldest ballots until at most `max` are open.
    pub(crate) fn keep_newest(&mut self, max: usize) {
        while self.open.len() > max {
            self.open.pop_first();
        }
    }

    /// Takes out, oldest first, every ballot that every `connected` slot reported in and for
    /// which `judge_ready(tick)` holds, or that is at least `timeout` old at `now`.
    pub(crate) fn take_ready(
        &mut self,
        connected: &[bool],
        now: Duration,
        timeout: Duration,
        judge_ready: impl Fn(Tick) -> bool,
    ) -> Vec<(Tick, Ballot<T, M>)> {
        let ready: Vec<Tick> = self
            .open
            .iter()
            .filter(|(tick, ballot)| {
                let timed_out = now.saturating_sub(ballot.first_at) >= timeout;
                (ballot.complete(connected) && judge_ready(**tick)) || timed_out
            })
            .map(|(tick, _)| *tick)
            .collect();
        ready
            .into_iter()
            .filter_map(|tick| Some((tick, self.open.remove(&tick)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(1);

    #[test]
    fn a_report_needs_an_open_ballot_a_seat_and_no_earlier_report() {
        let mut ballots = TickBallots::<u64>::default();
        assert_eq!(ballots.cast(5, 0, 1), Err(CastRefusal::NoBallot));
        ballots.open(5, 2, T, ());
        assert_eq!(ballots.cast(5, 2, 1), Err(CastRefusal::NoSeat));
        assert_eq!(ballots.cast(5, 1, 7), Ok(()));
        assert_eq!(ballots.cast(5, 1, 8), Err(CastRefusal::Repeated));
        assert_eq!(ballots.get(5).unwrap().reports, vec![None, Some(7)]);
    }

    #[test]
    fn open_once_keeps_the_first_ballot_and_open_replaces_it() {
        let mut ballots = TickBallots::<u64, u8>::default();
        ballots.open_once(5, 2, T, 1);
        ballots.cast(5, 0, 9).unwrap();
        ballots.open_once(5, 3, 2 * T, 2);
        let kept = ballots.get(5).unwrap();
        assert_eq!((kept.first_at, kept.about, kept.reports.len()), (T, 1, 2));
        assert_eq!(kept.reports[0], Some(9));
        ballots.open(5, 3, 2 * T, 2);
        let fresh = ballots.get(5).unwrap();
        assert_eq!((fresh.first_at, fresh.about), (2 * T, 2));
        assert_eq!(fresh.reports, vec![None, None, None]);
    }

    #[test]
    fn a_ballot_is_ready_when_the_connected_reported_and_the_judge_agrees_or_at_the_timeout() {
        let mut ballots = TickBallots::<u64>::default();
        ballots.open(3, 3, T, ());
        ballots.open(4, 3, T, ());
        for tick in [3, 4] {
            ballots.cast(tick, 0, 1).unwrap();
            ballots.cast(tick, 1, 1).unwrap();
        }
        let all = [true, true, true];
        assert!(ballots.take_ready(&all, T, T, |_| true).is_empty());
        // Slot 2 is not connected: not waited for; tick 4's judge is not ready yet.
        let ready = ballots.take_ready(&[true, true, false], T, T, |tick| tick != 4);
        assert_eq!(ready.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![3]);
        assert_eq!(ballots.oldest(), Some(4));
        // At the timeout it is taken whatever the judge says.
        let ready = ballots.take_ready(&all, 2 * T, T, |_| false);
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].1.reports, vec![Some(1), Some(1), None]);
        assert_eq!(ballots.len(), 0);
    }

    #[test]
    fn keep_newest_drops_the_oldest_ballots() {
        let mut ballots = TickBallots::<u64>::default();
        for tick in 1..=5 {
            ballots.open(tick, 1, T, ());
        }
        ballots.keep_newest(2);
        assert_eq!((ballots.len(), ballots.oldest()), (2, Some(4)));
    }
}
