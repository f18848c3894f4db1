//! The entity server's relay to one participant under its budget
//! ([rules 17–19](crate::rules#rule-17--byte-budgets)): [`RelayQueue`].

use core::time::Duration;
use std::collections::BTreeSet;

use bevy::math::Vec3;
use bevy::platform::collections::HashMap;

use crate::baseline::{ACK_INTERVAL, DeltaLink};
use crate::batch::{BatchError, StateBatch, WireBatch, chosen_states, entry_room, quantize};
use crate::body::BodyState;
use crate::budget::{Candidate, PriorityAccumulator, UploadBudget, send_weight};
use crate::config::OwnershipConfig;
use crate::priority::BodyId;
use crate::send_policy::predicted_error;

/// What the entity server keeps per participant: the bodies updated since they were last
/// relayed to it, its budget, priority accumulator, batch numbering, interest centre, the
/// states it was last sent, and the deltas both ways with it
/// ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)).
#[derive(Debug, Clone)]
pub(crate) struct RelayQueue {
    pending: BTreeSet<BodyId>,
    budget: UploadBudget,
    accumulator: PriorityAccumulator,
    seq: u32,
    /// The receiver's interest centre (its avatar), from its own batches.
    pub(crate) focus: Option<Vec3>,
    sent: HashMap<BodyId, (BodyState, Duration)>,
    last: Option<Duration>,
    /// Deltas both ways with this participant.
    pub(crate) link: DeltaLink,
    /// Whether relays to it use deltas and acknowledge its batches.
    delta: bool,
    /// When the last relay batch to it was laid out.
    last_batch_at: Option<Duration>,
}

/// What one relay pass did for one receiver.
#[derive(Debug, Default)]
pub(crate) struct RelayPass {
    /// The batch to send, if any.
    pub(crate) batch: Option<StateBatch>,
    /// Bodies left waiting.
    pub(crate) deferred: usize,
    /// Bodies dropped as outside the interest radius.
    pub(crate) out_of_interest: usize,
}

/// The pending bodies a pass weighs ([`RelayQueue::pass`]).
struct Due {
    /// The bodies still to relay, weighed.
    candidates: Vec<Candidate>,
    /// Their latest states.
    states: HashMap<BodyId, BodyState>,
    /// Bodies dropped as outside the interest radius.
    out_of_interest: usize,
}

impl RelayQueue {
    pub(crate) fn new(bytes_per_second: u32, delta: bool) -> Self {
        Self {
            pending: BTreeSet::new(),
            budget: UploadBudget::new(bytes_per_second),
            accumulator: PriorityAccumulator::default(),
            seq: 0,
            focus: None,
            sent: HashMap::default(),
            last: None,
            link: DeltaLink::default(),
            delta,
            last_batch_at: None,
        }
    }

    /// `body` has a new state to relay.
    pub(crate) fn mark(&mut self, body: BodyId) {
        self.pending.insert(body);
    }

    /// Forgets `body` (unregistered, or relayed outside the budget).
    pub(crate) fn forget(&mut self, body: BodyId) {
        self.pending.remove(&body);
    }

    /// Forgets everything about `body` (unregistered), its delta baselines included.
    pub(crate) fn unregister(&mut self, body: BodyId) {
        self.pending.remove(&body);
        self.sent.remove(&body);
        self.link.forget(body);
    }

    /// `batch` as it goes out to this participant at `now`: with the acknowledgement of its
    /// batches and deltas where they pay, when delta encoding is on (rule 20).
    pub(crate) fn wire(
        &mut self,
        batch: &StateBatch,
        now: Duration,
    ) -> Result<WireBatch, BatchError> {
        let wire = self.link.send(batch, self.delta)?;
        self.last_batch_at = Some(now);
        Ok(wire)
    }

    /// Whether this participant's batches wait for an acknowledgement and no relay batch went
    /// to it for [`ACK_INTERVAL`]: then a batch without bodies carries it.
    pub(crate) fn ack_due(&self, now: Duration) -> bool {
        self.delta
            && self.link.acks.fresh()
            && self
                .last_batch_at
                .is_none_or(|at| now.saturating_sub(at) >= ACK_INTERVAL)
    }

    /// The next batch number (for a batch sent outside the budget, on the control channel).
    pub(crate) fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Spends `bytes` sent outside the budget (may leave it in debt).
    pub(crate) fn charge(&mut self, bytes: usize) {
        self.budget.charge(bytes);
    }

    /// Spends what the batch built by [`pass`](Self::pass) took (its encoded message).
    pub(crate) fn spend(&mut self, bytes: usize) {
        if !self.budget.spend(bytes) {
            self.budget.charge(bytes);
        }
    }

    /// One pass at `now`: refills the budget, drops pending bodies `state_of` no longer has or
    /// that lie outside `radius` of the focus, and chooses the most urgent of the rest that fit
    /// (rules 17–19). `state_of` gives a body's latest state, `None` for a body not to relay to
    /// this receiver (its own, or gone).
    pub(crate) fn pass(
        &mut self,
        now: Duration,
        radius: Option<f32>,
        config: &OwnershipConfig,
        state_of: impl Fn(BodyId) -> Option<BodyState>,
    ) -> RelayPass {
        let dt = self
            .last
            .map_or(0.0, |t| now.saturating_sub(t).as_secs_f64());
        self.last = Some(now);
        self.budget.refill(dt);
        let due = self.due(now, radius, config, state_of);
        let mut result = RelayPass {
            out_of_interest: due.out_of_interest,
            ..RelayPass::default()
        };
        if due.candidates.is_empty() {
            return result;
        }
        let room = entry_room(self.budget.available(), None, due.candidates.len());
        let selection = self.accumulator.select(&due.candidates, dt as f32, room);
        result.deferred = selection.deferred;
        if selection.chosen.is_empty() {
            return result;
        }
        let bodies = chosen_states(&selection.chosen, &due.states);
        result.batch = Some(self.take(bodies, now));
        result
    }

    /// The pending bodies as candidates for this pass, weighed by their predicted error
    /// against the state last sent (never sent: the largest error) and their distance from the
    /// focus; the pending bodies `state_of` no longer has, or outside `radius` of the focus
    /// (counted), leave the queue.
    fn due(
        &mut self,
        now: Duration,
        radius: Option<f32>,
        config: &OwnershipConfig,
        state_of: impl Fn(BodyId) -> Option<BodyState>,
    ) -> Due {
        let mut due = Due {
            candidates: Vec::with_capacity(self.pending.len()),
            states: HashMap::default(),
            out_of_interest: 0,
        };
        let focus = self.focus;
        let pending: Vec<BodyId> = self.pending.iter().copied().collect();
        for body in pending {
            let Some(state) = state_of(body) else {
                self.pending.remove(&body);
                continue;
            };
            let distance = focus.map(|f| f.distance(state.position));
            if let (Some(r), Some(d)) = (radius, distance)
                && d > r
            {
                self.pending.remove(&body);
                due.out_of_interest += 1;
                continue;
            }
            let error = self.sent.get(&body).map_or(8.0, |(last, at)| {
                predicted_error(last, &state, now.saturating_sub(*at), config)
            });
            due.candidates.push(Candidate {
                body,
                weight: send_weight(error, false, distance),
                urgent: false,
                size: self
                    .link
                    .entry_size(body, &state, self.seq.wrapping_add(1), self.delta),
            });
            due.states.insert(body, state);
        }
        due
    }

    /// The chosen `bodies` (ids increasing) as the next-numbered batch: they leave the queue
    /// and their quantized states are remembered as sent at `now`.
    fn take(&mut self, bodies: Vec<(BodyId, BodyState)>, now: Duration) -> StateBatch {
        for (body, state) in &bodies {
            self.pending.remove(body);
            self.sent.insert(*body, (quantize(state), now));
        }
        StateBatch {
            seq: self.next_seq(),
            focus: None,
            bodies,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::MESSAGE_OVERHEAD;

    fn moving(x: f32) -> BodyState {
        BodyState {
            position: Vec3::new(x, 1.0, 0.0),
            linear_velocity: Vec3::new(1.0, 0.0, 0.0),
            ..BodyState::default()
        }
    }

    #[test]
    fn a_pass_stays_within_the_budget_and_filters_by_interest() {
        let config = OwnershipConfig::default();
        let mut q = RelayQueue::new(8_000, true);
        q.focus = Some(Vec3::ZERO);
        for i in 0..200 {
            q.mark(BodyId(i));
        }
        let state_of = |b: BodyId| Some(moving(b.0 as f32 * 0.1));
        let first = q.pass(Duration::ZERO, Some(10.0), &config, state_of);
        // Bodies 100..199 are more than 10 m away (x = 0.1 × id, y = 1).
        assert_eq!(first.out_of_interest, 100);
        let batch = first.batch.unwrap();
        let bytes = batch.encode().unwrap().len() + MESSAGE_OVERHEAD;
        assert!(bytes <= 1_000, "{bytes}");
        assert_eq!(batch.bodies.len() + first.deferred, 100);
        // Nothing has accumulated on the first pass: ties go by body id.
        let ids: Vec<u64> = batch.bodies.iter().map(|(b, _)| b.0).collect();
        assert_eq!(ids, (0..ids.len() as u64).collect::<Vec<_>>());
    }
}
