//! The prediction audit (debug aid, `verify_predictions`): a predicted tick whose inputs turned
//! out right must produce the verified state of that tick.
//!
//! "Inputs turned out right" is decided with chain hashes: from the tick the predicted timeline
//! started at (its base: the last rollback), each predicted tick folds the hash of its input set
//! into a chain. When the tick is verified, the same fold over the confirmed input sets from the
//! same base gives the same chain exactly when every input set on the way was predicted
//! right; only then are the two states compared.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::Hasher;

use crate::checksum::StateHasher;
use crate::divergence::difference::StateBreakdown;
use crate::tick::Tick;

fn chain_seed(base: Tick) -> u64 {
    let mut h = StateHasher::default();
    h.write_i32(base);
    h.finish()
}

fn chain_step(chain: u64, inputs_hash: u64) -> u64 {
    let mut h = StateHasher::default();
    h.write_u64(chain);
    h.write_u64(inputs_hash);
    h.finish()
}

/// The state of a tick as the prediction check records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuditedState {
    /// The checksum or the full digest of the registered state.
    pub digest: u64,
    /// Whether the world held nothing a rollback would not restore.
    pub covered: bool,
    /// The state hashed per simulation entity and per type, to name the first difference
    /// (kept for predicted ticks; a verified state is broken down only on a mismatch).
    pub breakdown: Option<Box<StateBreakdown>>,
}

/// A predicted tick waiting for its verification.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AuditEntry {
    base: Tick,
    chain: u64,
    state: AuditedState,
}

/// The predicted timeline's chain and the predicted states waiting for verification.
#[derive(Debug, Clone)]
pub(crate) struct PredictionAudit {
    /// The tick the current predicted timeline starts from (the last rollback).
    base: Tick,
    /// The chain of the current predicted timeline through its newest tick.
    chain: u64,
    entries: BTreeMap<Tick, AuditEntry>,
    /// Hashes of the confirmed input sets of verified ticks, oldest first.
    confirmed: VecDeque<(Tick, u64)>,
    /// Registered types the full check could not compare, already reported.
    pub(crate) unchecked_reported: BTreeSet<&'static str>,
    /// Whether a check that failed for uncovered state was logged (once per session).
    pub(crate) uncovered_logged: bool,
}

impl Default for PredictionAudit {
    fn default() -> Self {
        Self {
            base: 0,
            chain: chain_seed(0),
            entries: BTreeMap::new(),
            confirmed: VecDeque::new(),
            unchecked_reported: BTreeSet::new(),
            uncovered_logged: false,
        }
    }
}

impl PredictionAudit {
    /// The predicted timeline restarts at `base` (after a rollback to it).
    pub(crate) fn restart(&mut self, base: Tick) {
        self.base = base;
        self.chain = chain_seed(base);
    }

    /// The verified world was replaced (a snapshot loaded, a resync included): every predicted
    /// state recorded so far came from a world that is gone, so none is compared; the predicted
    /// timeline restarts at `base`.
    pub(crate) fn reset(&mut self, base: Tick) {
        self.entries.clear();
        self.confirmed.clear();
        self.restart(base);
    }

    /// Tick `tick` was verified with an input set hashing to `inputs_hash`.
    pub(crate) fn record_confirmed(&mut self, tick: Tick, inputs_hash: u64) {
        self.confirmed.push_back((tick, inputs_hash));
    }

    /// Tick `tick` was predicted with an input set hashing to `inputs_hash`; `state` is the
    /// predicted world's state after it, when audited.
    pub(crate) fn record_predicted(
        &mut self,
        tick: Tick,
        inputs_hash: u64,
        state: Option<AuditedState>,
    ) {
        self.chain = chain_step(self.chain, inputs_hash);
        if let Some(state) = state {
            let entry = AuditEntry {
                base: self.base,
                chain: self.chain,
                state,
            };
            self.entries.insert(tick, entry);
        }
    }

    /// For a tick just verified: the predicted state to compare with the verified one, if the
    /// tick was audited and every input set from its timeline's base through it was predicted
    /// right. Drops the entries of `tick` and older.
    pub(crate) fn take_comparable(&mut self, tick: Tick) -> Option<AuditedState> {
        let entry = self.entries.remove(&tick)?;
        while self
            .entries
            .first_key_value()
            .is_some_and(|(t, _)| *t < tick)
        {
            self.entries.pop_first();
        }
        let chain = self
            .confirmed
            .iter()
            .filter(|(t, _)| *t > entry.base && *t <= tick)
            .fold(chain_seed(entry.base), |chain, (_, hash)| {
                chain_step(chain, *hash)
            });
        (chain == entry.chain).then_some(entry.state)
    }

    /// Forgets confirmed hashes and predicted states of ticks before `keep_from` (a predicted
    /// state whose tick was verified without a comparison, e.g. while the predicted world
    /// shared the verified timeline, would otherwise stay).
    pub(crate) fn discard_before(&mut self, keep_from: Tick) {
        while self.confirmed.front().is_some_and(|(t, _)| *t < keep_from) {
            self.confirmed.pop_front();
        }
        while self
            .entries
            .first_key_value()
            .is_some_and(|(t, _)| *t < keep_from)
        {
            self.entries.pop_first();
        }
    }

    /// (confirmed hashes, predicted states) held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        (self.confirmed.len(), self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(digest: u64) -> Option<AuditedState> {
        Some(AuditedState {
            digest,
            covered: true,
            breakdown: None,
        })
    }

    #[test]
    fn right_predictions_are_compared() {
        let mut audit = PredictionAudit::default();
        audit.record_predicted(1, 10, st(100));
        audit.record_predicted(2, 20, st(200));
        audit.record_confirmed(1, 10);
        audit.record_confirmed(2, 20);
        assert_eq!(audit.take_comparable(1), st(100));
        assert_eq!(audit.take_comparable(2), st(200));
        assert_eq!(audit.take_comparable(2), None, "an entry is compared once");
    }

    #[test]
    fn a_wrong_input_set_excludes_every_later_tick_of_the_timeline() {
        let mut audit = PredictionAudit::default();
        audit.record_predicted(1, 10, st(100));
        audit.record_predicted(2, 20, st(200));
        audit.record_confirmed(1, 11);
        audit.record_confirmed(2, 20);
        assert_eq!(audit.take_comparable(1), None);
        assert_eq!(audit.take_comparable(2), None);
    }

    #[test]
    fn a_restarted_timeline_chains_from_its_base() {
        let mut audit = PredictionAudit::default();
        audit.record_confirmed(1, 11);
        audit.restart(1);
        audit.record_predicted(2, 20, st(200));
        audit.record_confirmed(2, 20);
        assert_eq!(audit.take_comparable(2), st(200));
    }

    #[test]
    fn unaudited_ticks_still_extend_the_chain() {
        let mut audit = PredictionAudit::default();
        audit.record_predicted(1, 10, None);
        audit.record_predicted(2, 20, st(200));
        audit.record_confirmed(1, 10);
        audit.record_confirmed(2, 20);
        assert_eq!(audit.take_comparable(1), None);
        assert_eq!(audit.take_comparable(2), st(200));
    }

    #[test]
    fn the_audit_stays_within_the_rollback_window_over_a_long_session() {
        let window = 60;
        let mut audit = PredictionAudit::default();
        // 100,000 ticks (26 minutes at 64 ticks/s); the predicted world runs 8 ticks ahead and
        // is audited on every third tick, while verification asks for other ticks (which were
        // never predicted: the shared timeline), so no comparison ever drops an entry;
        // `forget_before` discards after every update.
        for tick in 1..=100_000 {
            if (tick + 8) % 3 == 1 {
                audit.record_predicted(tick + 8, tick as u64, st(tick as u64));
            }
            audit.record_confirmed(tick, tick as u64);
            if tick % 3 == 0 {
                assert_eq!(audit.take_comparable(tick), None);
            }
            audit.discard_before(tick - window - 2);
            let (confirmed, predicted) = audit.held();
            assert!(confirmed <= window as usize + 3, "tick {tick}: {confirmed}");
            assert!(
                predicted <= window as usize + 11,
                "tick {tick}: {predicted}"
            );
        }
    }

    #[test]
    fn discarded_hashes_are_gone() {
        let mut audit = PredictionAudit::default();
        audit.record_confirmed(1, 10);
        audit.record_confirmed(2, 20);
        audit.discard_before(2);
        assert_eq!(audit.confirmed.len(), 1);
        assert_eq!(
            crate::input::input_set_hash(&[1u8, 2], 0),
            crate::input::input_set_hash(&[1u8, 2], 0)
        );
        assert_ne!(
            crate::input::input_set_hash(&[1u8, 2], 0),
            crate::input::input_set_hash(&[2u8, 1], 0)
        );
        assert_ne!(
            crate::input::input_set_hash(&[1u8, 2], 0),
            crate::input::input_set_hash(&[1u8, 2], 1)
        );
    }

    #[test]
    fn a_reset_forgets_every_prediction_of_the_replaced_world() {
        let mut audit = PredictionAudit::default();
        audit.record_predicted(1, 11, st(7));
        audit.record_predicted(2, 12, st(8));
        audit.reset(1);
        assert_eq!(audit.held(), (0, 0));
        audit.record_confirmed(2, 12);
        assert!(
            audit.take_comparable(2).is_none(),
            "predicted from the old world"
        );
        // Predicted again from the new world (after tick 2), it is compared.
        audit.record_predicted(2, 12, st(8));
        audit.record_predicted(3, 13, st(9));
        audit.record_confirmed(3, 13);
        assert_eq!(audit.take_comparable(3).map(|s| s.digest), Some(9));
    }
}
