//! [`SimEventLedger`]: the per-tick bookkeeping that turns "what each run of a tick emitted"
//! into arrivals with a status, each identity announced once and settled once
//! ([simulation events](crate::rules#simulation-events)).

use std::collections::{BTreeMap, HashMap};

use bevy::prelude::*;

use super::event::{SimEvent, SimEventReceived, SimEventStatus};
use crate::tick::Tick;

/// One identity of a pending tick.
#[derive(Clone)]
struct Slot<E: SimEvent> {
    key: E::Key,
    occurrence: u32,
    /// The latest value the predicted world produced (or the last announced, once cancelled).
    event: E,
    /// Announced and not cancelled since.
    live: bool,
}

/// The ledger of simulation events of type `E` (a main-app resource per registered type;
/// a plain data type usable on its own).
///
/// Fed, in the order they ran, with what every run of a tick emitted: the predicted world's runs
/// ([`record_predicted`](Self::record_predicted)) and the verified world's one run
/// ([`record_verified`](Self::record_verified)). It writes the arrivals into `out`:
///
/// - a new identity from the first predicted run of its tick is `Predicted`; from a later
///   predicted run (re-simulation) or from verification it is `Late`;
/// - an announced identity that a later run of its tick does not produce is `Cancelled`
///   (immediately on re-simulation; at the latest at verification);
/// - an identity the verified run produces is `Confirmed` (after `Late` in the same call if it
///   was not announced, or was cancelled, before).
///
/// Memory: only ticks that emitted something and are not verified yet are kept; a tick's
/// entry is dropped when it is verified, so at most the rollback window's worth of ticks is held.
/// Runs of ticks already verified are ignored (the method returns `false`).
#[derive(Resource, Clone)]
pub struct SimEventLedger<E: SimEvent> {
    pending: BTreeMap<Tick, Vec<Slot<E>>>,
    /// The highest tick the predicted world has run (−1 before any).
    highest_predicted: Tick,
    /// The highest verified tick (−1 before any).
    settled_through: Tick,
}

impl<E: SimEvent> Default for SimEventLedger<E> {
    fn default() -> Self {
        Self {
            pending: BTreeMap::new(),
            highest_predicted: -1,
            settled_through: -1,
        }
    }
}

impl<E: SimEvent> std::fmt::Debug for SimEventLedger<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimEventLedger")
            .field("pending_ticks", &self.pending.len())
            .field("pending_events", &self.pending_events())
            .field("highest_predicted", &self.highest_predicted)
            .field("verified_tick", &self.settled_through)
            .finish()
    }
}

impl<E: SimEvent> SimEventLedger<E> {
    /// An empty ledger (no tick run yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that the predicted world ran `tick` and emitted `events` (in emission order),
    /// writing the arrivals it causes into `out`. Returns `false`, changing nothing, when
    /// `tick` is already verified.
    pub fn record_predicted(
        &mut self,
        tick: Tick,
        events: impl IntoIterator<Item = E>,
        out: &mut Vec<SimEventReceived<E>>,
    ) -> bool {
        if tick <= self.settled_through {
            return false;
        }
        let first_run = tick > self.highest_predicted;
        self.highest_predicted = self.highest_predicted.max(tick);
        let new_status = if first_run {
            SimEventStatus::Predicted
        } else {
            SimEventStatus::Late
        };
        let mut slots = self.pending.remove(&tick).unwrap_or_default();
        reconcile(tick, &mut slots, events, new_status, false, out);
        if !slots.is_empty() {
            self.pending.insert(tick, slots);
        }
        true
    }

    /// Records that the verified world ran `tick` and emitted `events` (in emission order),
    /// writing the arrivals it causes into `out`, and forgets the tick. Returns `false`,
    /// changing nothing, when `tick` is already verified.
    ///
    /// Pending ticks before `tick` (verification skipped them: never in a session, which
    /// verifies every tick in order) are settled as produced nothing: their announced events
    /// are cancelled.
    pub fn record_verified(
        &mut self,
        tick: Tick,
        events: impl IntoIterator<Item = E>,
        out: &mut Vec<SimEventReceived<E>>,
    ) -> bool {
        if tick <= self.settled_through {
            return false;
        }
        let from_tick = self.pending.split_off(&tick);
        for (skipped, mut slots) in std::mem::replace(&mut self.pending, from_tick) {
            reconcile(skipped, &mut slots, [], SimEventStatus::Late, true, out);
        }
        let mut slots = self.pending.remove(&tick).unwrap_or_default();
        reconcile(tick, &mut slots, events, SimEventStatus::Late, true, out);
        self.settled_through = tick;
        self.highest_predicted = self.highest_predicted.max(tick);
        true
    }

    /// Forgets everything (a new session starts): every announced, unsettled event is cancelled
    /// into `out`, and the next run of any tick counts as its first.
    pub fn reset(&mut self, out: &mut Vec<SimEventReceived<E>>) {
        for (tick, slots) in std::mem::take(&mut self.pending) {
            for slot in slots.iter().filter(|s| s.live) {
                out.push(arrival(tick, slot, SimEventStatus::Cancelled));
            }
        }
        *self = Self::default();
    }

    /// Continues after a snapshot of tick `tick` was loaded: nothing held, every tick up to
    /// `tick` settled, the next run of any later tick counts as its first.
    pub(crate) fn settle_through(&mut self, tick: Tick) {
        self.pending.clear();
        self.settled_through = tick;
        self.highest_predicted = tick;
    }

    /// Ticks held (emitted something, not verified yet).
    pub fn pending_ticks(&self) -> usize {
        self.pending.len()
    }

    /// Identities held, cancelled ones included.
    pub fn pending_events(&self) -> usize {
        self.pending.values().map(Vec::len).sum()
    }

    /// The highest verified tick recorded (−1 before any).
    pub fn verified_tick(&self) -> Tick {
        self.settled_through
    }

    /// The highest tick the predicted world ran (−1 before any).
    pub fn highest_predicted_tick(&self) -> Tick {
        self.highest_predicted
    }
}

/// The identities of `events` in emission order: key, occurrence among equal keys, event.
fn with_occurrences<E: SimEvent>(events: impl IntoIterator<Item = E>) -> Vec<(E::Key, u32, E)> {
    let mut counts: HashMap<E::Key, u32> = HashMap::new();
    events
        .into_iter()
        .map(|event| {
            let key = event.key();
            let count = counts.entry(key.clone()).or_insert(0);
            let occurrence = *count;
            *count += 1;
            (key, occurrence, event)
        })
        .collect()
}

/// Applies one run of `tick` that emitted `events` to its `slots`: unannounced identities are
/// announced (`new_status` if never seen, `Late` if cancelled before), every produced identity
/// is confirmed when `confirm`, and live identities the run did not produce are cancelled.
fn reconcile<E: SimEvent>(
    tick: Tick,
    slots: &mut Vec<Slot<E>>,
    events: impl IntoIterator<Item = E>,
    new_status: SimEventStatus,
    confirm: bool,
    out: &mut Vec<SimEventReceived<E>>,
) {
    let index: HashMap<(E::Key, u32), usize> = slots
        .iter()
        .enumerate()
        .map(|(i, s)| ((s.key.clone(), s.occurrence), i))
        .collect();
    let mut seen = vec![false; slots.len()];
    for (key, occurrence, event) in with_occurrences(events) {
        let (i, status) = match index.get(&(key.clone(), occurrence)) {
            Some(&i) => (i, SimEventStatus::Late),
            None => {
                slots.push(Slot {
                    key,
                    occurrence,
                    event: event.clone(),
                    live: false,
                });
                seen.push(false);
                (slots.len() - 1, new_status)
            }
        };
        seen[i] = true;
        let slot = &mut slots[i];
        slot.event = event;
        if !slot.live {
            slot.live = true;
            out.push(arrival(tick, slot, status));
        }
        if confirm {
            out.push(arrival(tick, slot, SimEventStatus::Confirmed));
        }
    }
    for (slot, seen) in slots.iter_mut().zip(seen) {
        if slot.live && !seen {
            slot.live = false;
            out.push(arrival(tick, slot, SimEventStatus::Cancelled));
        }
    }
}

fn arrival<E: SimEvent>(tick: Tick, slot: &Slot<E>, status: SimEventStatus) -> SimEventReceived<E> {
    SimEventReceived {
        tick,
        event: slot.event.clone(),
        occurrence: slot.occurrence,
        status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SimEventStatus::{Cancelled, Confirmed, Late, Predicted};

    /// (tick, event, occurrence, status) of each arrival.
    fn arrivals<E: SimEvent>(
        out: &mut Vec<SimEventReceived<E>>,
    ) -> Vec<(Tick, E, u32, SimEventStatus)> {
        out.drain(..)
            .map(|a| (a.tick, a.event, a.occurrence, a.status))
            .collect()
    }

    #[test]
    fn an_event_resimulated_twice_is_announced_once_and_confirmed_once() {
        let mut ledger = SimEventLedger::<&str>::new();
        let mut out = Vec::new();
        assert!(ledger.record_predicted(7, ["hit"], &mut out));
        assert_eq!(arrivals(&mut out), vec![(7, "hit", 0, Predicted)]);
        for _ in 0..2 {
            assert!(ledger.record_predicted(7, ["hit"], &mut out));
            assert!(out.is_empty());
        }
        assert!(ledger.record_verified(7, ["hit"], &mut out));
        assert_eq!(arrivals(&mut out), vec![(7, "hit", 0, Confirmed)]);
        assert_eq!(ledger.pending_ticks(), 0);
        assert_eq!(ledger.pending_events(), 0);
    }

    #[test]
    fn a_mispredicted_event_is_cancelled_at_resimulation_and_never_confirmed() {
        let mut ledger = SimEventLedger::<&str>::new();
        let mut out = Vec::new();
        ledger.record_predicted(3, ["jump"], &mut out);
        ledger.record_predicted(3, [], &mut out);
        assert_eq!(
            arrivals(&mut out),
            vec![(3, "jump", 0, Predicted), (3, "jump", 0, Cancelled)]
        );
        ledger.record_predicted(3, [], &mut out);
        ledger.record_verified(3, [], &mut out);
        assert!(out.is_empty());
        assert_eq!(ledger.pending_ticks(), 0);
    }

    #[test]
    fn a_mispredicted_event_not_resimulated_is_cancelled_at_verification() {
        let mut ledger = SimEventLedger::<&str>::new();
        let mut out = Vec::new();
        ledger.record_predicted(3, ["jump"], &mut out);
        ledger.record_verified(3, ["land"], &mut out);
        assert_eq!(
            arrivals(&mut out),
            vec![
                (3, "jump", 0, Predicted),
                (3, "land", 0, Late),
                (3, "land", 0, Confirmed),
                (3, "jump", 0, Cancelled),
            ]
        );
    }

    #[test]
    fn an_event_first_produced_by_a_resimulation_is_late_then_confirmed() {
        let mut ledger = SimEventLedger::<&str>::new();
        let mut out = Vec::new();
        ledger.record_predicted(5, [], &mut out);
        ledger.record_predicted(6, [], &mut out);
        ledger.record_predicted(5, ["goal"], &mut out);
        assert_eq!(arrivals(&mut out), vec![(5, "goal", 0, Late)]);
        // A re-simulation running further than any tick before predicts tick 7 for the first time.
        ledger.record_predicted(6, [], &mut out);
        ledger.record_predicted(7, ["goal"], &mut out);
        assert_eq!(arrivals(&mut out), vec![(7, "goal", 0, Predicted)]);
        ledger.record_verified(5, ["goal"], &mut out);
        assert_eq!(arrivals(&mut out), vec![(5, "goal", 0, Confirmed)]);
    }

    #[test]
    fn an_event_only_verification_produced_is_late_and_confirmed_together() {
        let mut ledger = SimEventLedger::<u8>::new();
        let mut out = Vec::new();
        ledger.record_verified(1, [9], &mut out);
        assert_eq!(
            arrivals(&mut out),
            vec![(1, 9, 0, Late), (1, 9, 0, Confirmed)]
        );
        assert_eq!(ledger.verified_tick(), 1);
    }

    #[test]
    fn a_cancelled_event_produced_again_is_late_again() {
        let mut ledger = SimEventLedger::<u8>::new();
        let mut out = Vec::new();
        ledger.record_predicted(4, [1], &mut out);
        ledger.record_predicted(4, [], &mut out);
        ledger.record_predicted(4, [1], &mut out);
        ledger.record_verified(4, [1], &mut out);
        assert_eq!(
            arrivals(&mut out),
            vec![
                (4, 1, 0, Predicted),
                (4, 1, 0, Cancelled),
                (4, 1, 0, Late),
                (4, 1, 0, Confirmed)
            ]
        );
    }

    #[test]
    fn equal_events_of_one_tick_are_told_apart_by_occurrence() {
        let mut ledger = SimEventLedger::<&str>::new();
        let mut out = Vec::new();
        ledger.record_predicted(2, ["coin", "coin", "coin"], &mut out);
        let first: Vec<_> = arrivals(&mut out).iter().map(|a| (a.2, a.3)).collect();
        assert_eq!(first, vec![(0, Predicted), (1, Predicted), (2, Predicted)]);
        ledger.record_predicted(2, ["coin"], &mut out);
        assert_eq!(
            arrivals(&mut out),
            vec![(2, "coin", 1, Cancelled), (2, "coin", 2, Cancelled)]
        );
        ledger.record_verified(2, ["coin", "coin"], &mut out);
        assert_eq!(
            arrivals(&mut out),
            vec![
                (2, "coin", 0, Confirmed),
                (2, "coin", 1, Late),
                (2, "coin", 1, Confirmed)
            ]
        );
    }

    #[derive(Clone, Debug, PartialEq)]
    struct Hit {
        target: u32,
        damage: f32,
    }

    impl SimEvent for Hit {
        type Key = u32;
        fn key(&self) -> u32 {
            self.target
        }
    }

    #[test]
    fn a_user_key_keeps_the_identity_while_the_fields_change() {
        let mut ledger = SimEventLedger::<Hit>::new();
        let mut out = Vec::new();
        let hit = |damage| Hit { target: 4, damage };
        ledger.record_predicted(9, [hit(1.5)], &mut out);
        ledger.record_predicted(9, [hit(2.5)], &mut out);
        ledger.record_verified(9, [hit(3.5)], &mut out);
        let got: Vec<_> = arrivals(&mut out)
            .into_iter()
            .map(|a| (a.1.damage, a.3))
            .collect();
        assert_eq!(got, vec![(1.5, Predicted), (3.5, Confirmed)]);
    }

    #[test]
    fn runs_of_verified_ticks_are_ignored() {
        let mut ledger = SimEventLedger::<u8>::new();
        let mut out = Vec::new();
        assert!(ledger.record_verified(3, [], &mut out));
        assert!(!ledger.record_predicted(3, [1], &mut out));
        assert!(!ledger.record_predicted(2, [1], &mut out));
        assert!(!ledger.record_verified(3, [1], &mut out));
        assert!(out.is_empty());
        assert_eq!(ledger.pending_ticks(), 0);
        // The next tick runs for the first time.
        ledger.record_predicted(4, [1], &mut out);
        assert_eq!(arrivals(&mut out), vec![(4, 1, 0, Predicted)]);
    }

    #[test]
    fn memory_is_bounded_by_the_unverified_ticks() {
        let mut ledger = SimEventLedger::<u32>::new();
        let mut out = Vec::new();
        for tick in 1..=1_000 {
            ledger.record_predicted(tick, [tick as u32], &mut out);
            if tick > 8 {
                ledger.record_verified(tick - 8, [tick as u32 - 8], &mut out);
            }
            assert!(ledger.pending_ticks() <= 8, "{}", ledger.pending_ticks());
        }
        assert_eq!(ledger.pending_ticks(), 8);
        let confirmed = out.iter().filter(|a| a.status == Confirmed).count();
        assert_eq!(confirmed, 992);
        assert_eq!(out.len(), 1_000 + 992);
    }

    #[test]
    fn verifying_past_a_pending_tick_settles_it() {
        let mut ledger = SimEventLedger::<u8>::new();
        let mut out = Vec::new();
        ledger.record_predicted(2, [5], &mut out);
        out.clear();
        ledger.record_verified(3, [], &mut out);
        assert_eq!(arrivals(&mut out), vec![(2, 5, 0, Cancelled)]);
        assert_eq!(ledger.pending_ticks(), 0);
    }

    #[test]
    fn reset_cancels_what_is_announced_and_forgets_the_ticks() {
        let mut ledger = SimEventLedger::<u8>::new();
        let mut out = Vec::new();
        ledger.record_predicted(1, [1], &mut out);
        ledger.record_predicted(2, [2], &mut out);
        ledger.record_predicted(2, [], &mut out);
        ledger.record_verified(1, [1], &mut out);
        out.clear();
        ledger.record_predicted(3, [3], &mut out);
        out.clear();
        ledger.reset(&mut out);
        assert_eq!(arrivals(&mut out), vec![(3, 3, 0, Cancelled)]);
        assert_eq!(ledger.verified_tick(), -1);
        assert_eq!(ledger.highest_predicted_tick(), -1);
        // A new session's tick 1 is new again.
        ledger.record_predicted(1, [1], &mut out);
        assert_eq!(arrivals(&mut out), vec![(1, 1, 0, Predicted)]);
    }
}
