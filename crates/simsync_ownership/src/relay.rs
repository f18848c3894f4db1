//! The entity server's relay to one participant under its budget
//! ([rules 17–19](crate::rules#rule-17--byte-budgets)): [`RelayQueue`], and what one update
//! works out once per relayed body for all its receivers ([`PreparedStates`]).
//!
//! # Work per relayed state
//! A body's state is moved on to the update's time, quantized and checked once per update
//! ([`PreparedStates`]). A receiver's candidates are weighed and ranked only when they do not
//! all fit its budget (when they all fit, each is chosen whatever its rank); their predicted
//! error against what a receiver was last sent is then kept per body, the last one worked out,
//! and reused by each next receiver last sent the same state at the same time. Entries are laid
//! out once per update into one buffer ([`LaidOut`]): a body's absolute entry when a receiver
//! needs it, and its delta, the last one worked out kept per body and reused by each next
//! receiver whose baseline is the same state the same number of batches back (in the common
//! case, every receiver's); each receiver's batch copies those bytes behind its own id gaps.
//! What stays per receiver is what differs per receiver: its budget and priorities, finding
//! its baseline, and copying its batch together. Its bodies due are kept as bits
//! ([`BodySet`]), so a pass takes them in id order without sorting (ids below 2¹⁶; larger
//! ones are listed and sorted). A ranked pass orders one 8-byte key per candidate (its
//! accumulated priority's bits above its index), not the candidates themselves. The bytes
//! each receiver gets are those of [`StateBatch::to_wire`] for the same bodies: the sharing
//! changes no byte and no choice.

use core::time::Duration;

use bevy::math::Vec3;

use crate::baseline::{ACK_INTERVAL, DeltaLink};
use crate::batch::{
    BatchError, Entry, LaidOut, MAX_BATCH_BODIES, MAX_BATCH_BODY_ID, MAX_POSITION_Q, POSITION_STEP,
    QuantizedState, StateBatch, WireBatch, encode_laid_out, entry_room, smaller_delta,
};
use crate::body::BodyState;
use crate::body_map::{BodyMap, BodySet};
use crate::budget::{MAX_WEIGHT, MIN_WEIGHT, UploadBudget, send_weight};
use crate::config::OwnershipConfig;
use crate::priority::{BodyId, ParticipantId};
use crate::send_policy::predicted_error;

/// One body's relayed state in one update, as every receiver gets it. Laid out in this order
/// (`repr(C)`) so that what each receiver's pass reads (owner, the delta kept, the absolute
/// entry) comes first and together, and what is read once per chosen body or ranked pass last.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Prepared {
    /// Its owner (not relayed back to it).
    owner: Option<ParticipantId>,
    /// Whether a batch may carry its position (finite, within 10⁶ m).
    position_ok: bool,
    /// The last entry chosen against a baseline: how many batches back, which baseline
    /// state, and the entry laid out with its size.
    delta: Option<(u32, QuantizedState, (LaidOut, usize))>,
    /// Its absolute entry's size, the same for every receiver, and the entry laid out once a
    /// receiver needs it.
    absolute: (Option<LaidOut>, usize),
    /// Its wire values: remembered as sent.
    q: QuantizedState,
    /// The state moved on to the update's time.
    state: BodyState,
    /// The last predicted error worked out: against which state sent when.
    error: Option<(QuantizedState, Duration, f32)>,
}

/// The states of one update's relay, each prepared once for every receiver's pass: cleared at
/// the start of each update, then filled as receivers' passes ask for bodies.
///
/// Memory: per body relayed in the update, one prepared record (336 bytes) and its laid
/// out entries — its absolute entry and each delta worked out (at most one per receiver), at
/// most about 50 bytes each. The largest update's memory is kept for the next.
#[derive(Debug, Clone, Default)]
pub(crate) struct PreparedStates {
    index: BodyMap<Option<u32>>,
    prepared: Vec<Prepared>,
    /// The entries laid out this update ([`LaidOut`]): every receiver's batch copies from here.
    bytes: Vec<u8>,
}

impl PreparedStates {
    /// Forgets the last update's states (keeps the memory).
    pub(crate) fn clear(&mut self) {
        self.index.clear();
        self.prepared.clear();
        self.bytes.clear();
    }

    /// `body`'s prepared state: `state_of` (its owner and latest state, `None` for a body not
    /// to relay) is asked once per update.
    fn get(
        &mut self,
        body: BodyId,
        state_of: &impl Fn(BodyId) -> Option<(Option<ParticipantId>, BodyState)>,
    ) -> Option<u32> {
        if let Some(slot) = self.index.get(body) {
            return *slot;
        }
        let slot = state_of(body).map(|(owner, state)| {
            let q = QuantizedState::new(&state);
            self.prepared.push(Prepared {
                owner,
                state,
                q,
                absolute: (None, absolute_size(body, q)),
                position_ok: state.position.is_finite()
                    && state.position.abs().max_element() <= MAX_POSITION_Q as f32 * POSITION_STEP,
                error: None,
                delta: None,
            });
            (self.prepared.len() - 1) as u32
        });
        self.index.insert(body, slot);
        slot
    }

    /// The wire values of the body in `slot`.
    fn q(&self, slot: u32) -> QuantizedState {
        self.prepared[slot as usize].q
    }

    /// The predicted error of the receivers' copy of the body in `slot` last sent `last` (as
    /// quantized on the wire: receivers apply [`QuantizedState::to_state`]) at `at`
    /// ([`predicted_error`]), worked out once for all receivers sent the same.
    fn error(
        &mut self,
        slot: u32,
        last: &QuantizedState,
        at: Duration,
        now: Duration,
        config: &OwnershipConfig,
    ) -> f32 {
        let p = &mut self.prepared[slot as usize];
        if let Some((l, a, e)) = p.error
            && a == at
            && l == *last
        {
            return e;
        }
        let e = predicted_error(&last.to_state(), &p.state, now.saturating_sub(at), config);
        p.error = Some((*last, at, e));
        e
    }
}

impl PreparedStates {
    /// The entry of the body in `slot` in batch `seq`, laid out, and its size, for a receiver
    /// whose baseline of it is `baseline` (batch number and state): the delta when
    /// [`smaller_delta`] gives one, else the absolute entry (what
    /// [`choose_entry`](crate::choose_entry) chooses). The last delta worked out for the slot
    /// is kept, laid out, and reused while the next receivers' baseline is the same state the
    /// same number of batches back (the entry depends on nothing else).
    fn entry(
        &mut self,
        slot: u32,
        body: BodyId,
        seq: u32,
        baseline: Option<(u32, &QuantizedState)>,
    ) -> (LaidOut, usize) {
        let p = &mut self.prepared[slot as usize];
        let Some((base_seq, base)) = baseline else {
            return Self::absolute(p, &mut self.bytes);
        };
        let ago = seq.wrapping_sub(base_seq);
        if let Some((a, b, chosen)) = &p.delta
            && *a == ago
            && b == base
        {
            return *chosen;
        }
        let gap = body.0.min(MAX_BATCH_BODY_ID);
        let chosen = match smaller_delta(gap, &p.q, seq, (base_seq, base), p.absolute.1) {
            Some((delta, size)) => (LaidOut::new(&delta, &mut self.bytes), size),
            None => Self::absolute(p, &mut self.bytes),
        };
        p.delta = Some((ago, *base, chosen));
        chosen
    }

    /// `p`'s absolute entry laid out (in `bytes`, the first time) and its size.
    fn absolute(p: &mut Prepared, bytes: &mut Vec<u8>) -> (LaidOut, usize) {
        let (laid, size) = &mut p.absolute;
        let laid = *laid.get_or_insert_with(|| LaidOut::new(&Entry::Absolute(p.q), bytes));
        (laid, *size)
    }
}

/// The size of `body`'s absolute entry of `q`, as the budget reserves it.
fn absolute_size(body: BodyId, q: QuantizedState) -> usize {
    Entry::Absolute(q).size(body.0.min(MAX_BATCH_BODY_ID))
}

/// What the relay keeps per body for one receiver.
#[derive(Debug, Clone, Copy)]
struct QueueBody {
    /// The state last sent (as quantized on the wire) and when.
    sent: Option<(QuantizedState, Duration)>,
    /// Accumulated priority ([rule 18](crate::rules#rule-18--priority-accumulation-and-starvation-freedom)),
    /// valid only if kept by the latest selection (`acc_at`): a body that was not waiting
    /// then starts again from 0.
    acc: f32,
    acc_at: u64,
}

/// What the entity server keeps per participant: the bodies updated since they were last
/// relayed to it, its budget, per body the state it was last sent and its accumulated
/// priority, batch numbering, interest centre, and the deltas both ways with it
/// ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)).
///
/// Memory: one record (about 80 bytes) per body ever relayed to the participant, until it
/// leaves (an unregistered body's record is reused if its id is registered again), the
/// largest pass's rank keys (8 bytes a candidate) and ids due (8 bytes each), and the bodies
/// due as bits ([`BodySet`]: at most 8 KB, ids from 2¹⁶ up listed).
#[derive(Debug, Clone)]
pub(crate) struct RelayQueue {
    /// Bodies with a new state to relay.
    pending: BodySet,
    /// The pending bodies of the current pass, ids increasing (kept for its memory).
    due: Vec<BodyId>,
    budget: UploadBudget,
    /// Per body relayed to it, its record.
    bodies: BodyMap<QueueBody>,
    /// Selections made so far.
    selections: u64,
    seq: u32,
    /// The receiver's interest centre (its avatar), from its own batches.
    pub(crate) focus: Option<Vec3>,
    last: Option<Duration>,
    /// Deltas both ways with this participant.
    pub(crate) link: DeltaLink,
    /// Whether relays to it use deltas and acknowledge its batches.
    delta: bool,
    /// When the last relay batch to it was laid out.
    last_batch_at: Option<Duration>,
    /// A pass's rank keys (kept for their memory).
    ranks: Vec<u64>,
}

/// One body a pass chose: its entry as laid out for this receiver.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chosen {
    body: BodyId,
    /// Its [`PreparedStates`] slot: its wire values.
    prepared: u32,
    /// Its entry, laid out in the update's [`PreparedStates`].
    entry: LaidOut,
    /// Whether a batch may carry its position (read when taken, so the batch's checks need
    /// not find its record again).
    position_ok: bool,
}

/// What one relay pass did for one receiver.
#[derive(Debug, Default)]
pub(crate) struct RelayPass {
    /// The number of the batch to send, if any: its bodies are `chosen`.
    pub(crate) seq: Option<u32>,
    /// Its bodies' entries, ids increasing ([`RelayQueue::wire_chosen`]).
    pub(crate) chosen: Vec<Chosen>,
    /// Bodies left waiting.
    pub(crate) deferred: usize,
    /// Bodies dropped as outside the interest radius.
    pub(crate) out_of_interest: usize,
}

/// One pending body a pass weighs.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    body: BodyId,
    /// Its [`PreparedStates`] slot.
    prepared: u32,
    /// Accumulated priority held from the last selection.
    held: f32,
    /// Its distance from the focus: with the state last sent to this receiver (in its
    /// record), what its weight is worked out from, when the pass ranks.
    distance: Option<f32>,
    /// This pass's weight (set by [`RelayQueue::weigh`]).
    weight: f32,
    /// Accumulated priority after this pass (set by [`RelayQueue::select`]).
    acc: f32,
    /// Its entry, laid out in the update's [`PreparedStates`].
    entry: LaidOut,
    /// The bytes the budget reserves for its entry.
    size: u32,
    /// Whether this pass chose it (set by [`RelayQueue::select`]).
    chosen: bool,
}

/// The key that orders candidate `index` (candidates are listed by body id, increasing) by
/// accumulated priority `acc`, highest first, ties by body id: the order of
/// `b.acc.total_cmp(&a.acc).then(a.body.cmp(&b.body))` as one integer, smallest first.
fn rank_key(acc: f32, index: u32) -> u64 {
    // `f32::total_cmp`'s order as an unsigned integer, then reversed (highest first).
    let bits = acc.to_bits() as i32;
    let ordered = (bits ^ (((bits >> 31) as u32) >> 1) as i32) as u32 ^ 0x8000_0000;
    (u64::from(!ordered) << 32) | u64::from(index)
}

impl RelayQueue {
    pub(crate) fn new(bytes_per_second: u32, delta: bool) -> Self {
        Self {
            pending: BodySet::default(),
            due: Vec::new(),
            budget: UploadBudget::new(bytes_per_second),
            bodies: BodyMap::default(),
            selections: 0,
            seq: 0,
            focus: None,
            last: None,
            link: DeltaLink::default(),
            delta,
            last_batch_at: None,
            ranks: Vec::new(),
        }
    }

    /// `body` has a new state to relay.
    pub(crate) fn mark(&mut self, body: BodyId) {
        self.pending.insert(body);
    }

    /// Forgets `body` (unregistered, or relayed outside the budget).
    pub(crate) fn forget(&mut self, body: BodyId) {
        self.pending.remove(body);
    }

    /// Forgets `bodies` (relayed outside the budget).
    pub(crate) fn forget_all(&mut self, bodies: &[BodyId]) {
        self.pending.remove_all(bodies);
    }

    /// Forgets everything about `body` (unregistered), its delta baselines included.
    pub(crate) fn unregister(&mut self, body: BodyId) {
        self.forget(body);
        if let Some(record) = self.bodies.get_mut(body) {
            record.sent = None;
        }
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

    /// The batch numbered `seq` of the bodies a [`pass`](Self::pass) chose, encoded as it goes
    /// out at `now`, and how many of its entries are deltas: exactly the encoding of
    /// [`wire`](Self::wire) of the pass's batch (same checks and errors, same entries,
    /// remembered as sent), copied from the entries the pass laid out in `prepared`.
    pub(crate) fn wire_chosen(
        &mut self,
        seq: u32,
        chosen: &[Chosen],
        prepared: &PreparedStates,
        now: Duration,
    ) -> Result<(Vec<u8>, usize), BatchError> {
        if chosen.len() > MAX_BATCH_BODIES {
            return Err(BatchError::TooManyBodies {
                count: chosen.len() as u64,
            });
        }
        let mut next = 0;
        let mut deltas = 0;
        for c in chosen {
            deltas += usize::from(c.entry.is_delta());
            if c.body.0 < next || c.body.0 > MAX_BATCH_BODY_ID {
                return Err(BatchError::BodyIds);
            }
            if !c.position_ok {
                return Err(BatchError::OutOfRange {
                    body: c.body,
                    field: "position",
                });
            }
            next = c.body.0 + 1;
        }
        let ack = if self.delta {
            self.link.acks.ack()
        } else {
            None
        };
        let entries = chosen.iter().map(|c| (c.body, c.entry));
        let bytes = encode_laid_out(seq, ack, entries, &prepared.bytes)?;
        if self.delta {
            self.link
                .sent
                .record(seq, chosen.iter().map(|c| (c.body, prepared.q(c.prepared))));
            if ack.is_some() {
                self.link.acks.sent();
            }
        }
        self.last_batch_at = Some(now);
        Ok((bytes, deltas))
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

    /// One pass with `state_of` giving each body's latest state (`None` for a body not to
    /// relay to this receiver): [`pass_prepared`](Self::pass_prepared) with states prepared
    /// for this pass alone.
    #[cfg(test)]
    pub(crate) fn pass(
        &mut self,
        now: Duration,
        radius: Option<f32>,
        config: &OwnershipConfig,
        state_of: impl Fn(BodyId) -> Option<BodyState>,
    ) -> RelayPass {
        let mut prepared = PreparedStates::default();
        self.pass_prepared(now, radius, config, None, &mut prepared, |b| {
            Some((None, state_of(b)?))
        })
    }

    /// One pass at `now` for the receiver `me`: refills the budget, drops pending bodies
    /// `prepared` (asking `state_of` for a body's owner and latest state) no longer has, that
    /// `me` owns or that lie outside `radius` of the focus, and chooses the most urgent of the
    /// rest that fit (rules 17–19), remembered as sent.
    pub(crate) fn pass_prepared(
        &mut self,
        now: Duration,
        radius: Option<f32>,
        config: &OwnershipConfig,
        me: Option<ParticipantId>,
        prepared: &mut PreparedStates,
        state_of: impl Fn(BodyId) -> Option<(Option<ParticipantId>, BodyState)>,
    ) -> RelayPass {
        let dt = self
            .last
            .map_or(0.0, |t| now.saturating_sub(t).as_secs_f64());
        self.last = Some(now);
        self.budget.refill(dt);
        let mut result = RelayPass::default();
        let mut candidates = self.due(radius, me, prepared, &state_of, &mut result);
        if candidates.is_empty() {
            return result;
        }
        let room = entry_room(self.budget.available(), None, candidates.len());
        let all_fit = candidates.iter().map(|c| c.size as usize).sum::<usize>() <= room;
        let chosen = if all_fit {
            // Every candidate is chosen whatever its rank: weights and order change nothing
            // (the batch lists bodies by id, and chosen bodies start again from 0).
            self.choose_all(&mut candidates)
        } else {
            self.weigh(&mut candidates, now, config, prepared);
            self.select(&mut candidates, dt as f32, room)
        };
        result.deferred = candidates.len() - chosen;
        if chosen == 0 {
            for c in &candidates {
                self.pending.insert(c.body);
            }
            return result;
        }
        self.take(&candidates, chosen, prepared, now, &mut result);
        result
    }

    /// The pending bodies (ids increasing, each once) as candidates for this pass, with their
    /// entries and sizes; the pending bodies without a state, owned by `me`, or outside
    /// `radius` of the focus (counted in `result`), leave the queue.
    fn due(
        &mut self,
        radius: Option<f32>,
        me: Option<ParticipantId>,
        prepared: &mut PreparedStates,
        state_of: &impl Fn(BodyId) -> Option<(Option<ParticipantId>, BodyState)>,
        result: &mut RelayPass,
    ) -> Vec<Candidate> {
        let mut pending = std::mem::take(&mut self.due);
        self.pending.take_sorted(&mut pending);
        let mut candidates = Vec::with_capacity(pending.len());
        let seq = self.seq.wrapping_add(1);
        for &body in &pending {
            let Some(index) = prepared.get(body, state_of) else {
                continue;
            };
            let p = &prepared.prepared[index as usize];
            if me.is_some() && p.owner == me {
                continue;
            }
            let distance = self.focus.map(|f| f.distance(p.state.position));
            if let (Some(r), Some(d)) = (radius, distance)
                && d > r
            {
                result.out_of_interest += 1;
                continue;
            }
            let selections = self.selections;
            let record = self.record(body);
            let held = if record.acc_at == selections {
                record.acc
            } else {
                0.0
            };
            let (entry, size) = prepared.entry(index, body, seq, self.baseline(body));
            candidates.push(Candidate {
                body,
                prepared: index,
                held,
                distance,
                weight: 0.0,
                acc: 0.0,
                entry,
                size: size as u32,
                chosen: false,
            });
        }
        // Emptied, kept for its memory: the pass refills it with the bodies left waiting.
        pending.clear();
        self.due = pending;
        candidates
    }

    /// The receiver's baseline of `body` for a delta (none when deltas are off): its newest
    /// acknowledged batch and state still within reach.
    fn baseline(&self, body: BodyId) -> Option<(u32, &QuantizedState)> {
        if self.delta {
            self.link.sent.baseline_ref(body)
        } else {
            None
        }
    }

    /// `body`'s record, made if new.
    fn record(&mut self, body: BodyId) -> &mut QueueBody {
        self.bodies.get_or_insert_with(body, || QueueBody {
            sent: None,
            acc: 0.0,
            acc_at: 0,
        })
    }

    /// Each candidate's weight for this pass: its predicted error against the state last
    /// sent (never sent: the largest error) and its distance from the focus. Worked out only
    /// when the candidates do not all fit (then their rank decides).
    fn weigh(
        &self,
        candidates: &mut [Candidate],
        now: Duration,
        config: &OwnershipConfig,
        prepared: &mut PreparedStates,
    ) {
        for c in candidates.iter_mut() {
            let sent = self
                .bodies
                .get(c.body)
                .and_then(|record| record.sent.as_ref());
            let error = sent.map_or(8.0, |(last, at)| {
                prepared.error(c.prepared, last, *at, now, config)
            });
            c.weight = send_weight(error, false, c.distance).clamp(MIN_WEIGHT, MAX_WEIGHT);
        }
    }

    /// [`select`](Self::select) when every candidate fits: all are chosen (in their order,
    /// ids increasing); [`take`](Self::take) starts them again from 0. Returns how many were
    /// chosen.
    fn choose_all(&mut self, candidates: &mut [Candidate]) -> usize {
        self.selections += 1;
        for c in candidates.iter_mut() {
            c.chosen = true;
        }
        candidates.len()
    }

    /// [Rule 18](crate::rules#rule-18--priority-accumulation-and-starvation-freedom) as
    /// [`PriorityAccumulator::select`](crate::PriorityAccumulator::select) does it: every
    /// candidate gains its weight × `dt`, then in order of accumulated priority (ties by body
    /// id) they are chosen while their sizes fit in `bytes`. Marks the chosen (`candidates`
    /// keep their order, ids increasing); returns how many were chosen. The others keep
    /// their accumulated priority; [`take`](Self::take) starts the chosen again from 0.
    fn select(&mut self, candidates: &mut [Candidate], dt: f32, bytes: usize) -> usize {
        let dt = dt.max(0.0);
        let mut ranks = std::mem::take(&mut self.ranks);
        ranks.clear();
        for (i, c) in candidates.iter_mut().enumerate() {
            c.acc = c.held + c.weight * dt;
            ranks.push(rank_key(c.acc, i as u32));
        }
        ranks.sort_unstable();
        let mut used = 0;
        let mut chosen = 0;
        for key in &ranks {
            let c = &mut candidates[(*key & u64::from(u32::MAX)) as usize];
            if used + c.size as usize > bytes {
                break;
            }
            used += c.size as usize;
            c.chosen = true;
            chosen += 1;
        }
        self.ranks = ranks;
        self.selections += 1;
        let selections = self.selections;
        // The chosen start again from 0 when taken.
        for c in candidates.iter().filter(|c| !c.chosen) {
            let record = self.record(c.body);
            record.acc = c.acc;
            record.acc_at = selections;
        }
        chosen
    }

    /// The `chosen` marked `candidates` (ids increasing) as the next-numbered batch: they
    /// leave the queue, the rest stay, and their quantized states are remembered as sent at
    /// `now`, their accumulated priority 0 as of this selection.
    fn take(
        &mut self,
        candidates: &[Candidate],
        chosen: usize,
        prepared: &PreparedStates,
        now: Duration,
        result: &mut RelayPass,
    ) {
        result.chosen.reserve(chosen);
        for c in candidates {
            if !c.chosen {
                self.pending.insert(c.body);
                continue;
            }
            let p = &prepared.prepared[c.prepared as usize];
            let selections = self.selections;
            let record = self.record(c.body);
            record.acc = 0.0;
            record.acc_at = selections;
            record.sent = Some((p.q, now));
            result.chosen.push(Chosen {
                body: c.body,
                prepared: c.prepared,
                entry: c.entry,
                position_ok: p.position_ok,
            });
        }
        result.seq = Some(self.next_seq());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchAck, MESSAGE_OVERHEAD};

    fn moving(x: f32) -> BodyState {
        BodyState {
            position: Vec3::new(x, 1.0, 0.0),
            linear_velocity: Vec3::new(1.0, 0.0, 0.0),
            ..BodyState::default()
        }
    }

    #[test]
    fn when_every_candidate_fits_all_go_by_id_and_none_keeps_priority() {
        let config = OwnershipConfig::default();
        let mut q = RelayQueue::new(1_000_000, true);
        for i in [5, 1, 3, 1] {
            q.mark(BodyId(i));
        }
        let state_of = |b: BodyId| Some(moving(b.0 as f32));
        let pass = q.pass(Duration::from_secs(1), None, &config, state_of);
        assert_eq!(pass.deferred, 0);
        let ids: Vec<u64> = pass.chosen.iter().map(|c| c.body.0).collect();
        assert_eq!(ids, vec![1, 3, 5]);
        assert_eq!(q.selections, 1);
        assert_eq!(q.bodies.len(), 3);
        for i in [1, 3, 5] {
            let record = q.bodies.get(BodyId(i)).expect("a record");
            assert_eq!((record.acc, record.acc_at), (0.0, 1));
            // Remembered as sent, as its wire values.
            let (sent, at) = record.sent.expect("sent");
            assert_eq!(at, Duration::from_secs(1));
            assert_eq!(sent, QuantizedState::new(&moving(i as f32)));
        }
        assert!(q.pending.is_empty());
    }

    #[test]
    fn a_pass_stays_within_the_budget_and_filters_by_interest() {
        let config = OwnershipConfig::default();
        let mut q = RelayQueue::new(8_000, true);
        q.focus = Some(Vec3::ZERO);
        for i in 0..200 {
            q.mark(BodyId(i));
        }
        let mut prepared = PreparedStates::default();
        let first = q.pass_prepared(
            Duration::ZERO,
            Some(10.0),
            &config,
            None,
            &mut prepared,
            |b| Some((None, moving(b.0 as f32 * 0.1))),
        );
        // Bodies 100..199 are more than 10 m away (x = 0.1 × id, y = 1).
        assert_eq!(first.out_of_interest, 100);
        let seq = first.seq.expect("a batch");
        let (wire, _) = q
            .wire_chosen(seq, &first.chosen, &prepared, Duration::ZERO)
            .unwrap();
        let bytes = wire.len() + MESSAGE_OVERHEAD;
        assert!(bytes <= 1_000, "{bytes}");
        assert_eq!(first.chosen.len() + first.deferred, 100);
        // Nothing has accumulated on the first pass: ties go by body id.
        let ids: Vec<u64> = first.chosen.iter().map(|c| c.body.0).collect();
        assert_eq!(ids, (0..ids.len() as u64).collect::<Vec<_>>());
    }

    #[test]
    fn ids_above_the_bits_kept_are_taken_in_order_once_and_can_be_forgotten() {
        let config = OwnershipConfig::default();
        let mut q = RelayQueue::new(1_000_000, true);
        let large = [70_000, 1 << 40, MAX_BATCH_BODY_ID];
        for i in [
            large[1],
            5,
            large[0],
            3,
            large[1],
            MAX_BATCH_BODY_ID,
            65_535,
            5,
            99_999,
        ] {
            q.mark(BodyId(i));
        }
        q.forget(BodyId(99_999));
        q.forget_all(&[BodyId(3)]);
        let mut prepared = PreparedStates::default();
        let pass = q.pass_prepared(Duration::ZERO, None, &config, None, &mut prepared, |b| {
            Some((None, moving((b.0 % 1_000) as f32)))
        });
        let ids: Vec<u64> = pass.chosen.iter().map(|c| c.body.0).collect();
        assert_eq!(ids, vec![5, 65_535, large[0], large[1], large[2]]);
        let seq = pass.seq.expect("a batch");
        let (wire, deltas) = q
            .wire_chosen(seq, &pass.chosen, &prepared, Duration::ZERO)
            .unwrap();
        assert_eq!(deltas, 0);
        let decoded = WireBatch::decode(&wire).unwrap();
        let decoded_ids: Vec<u64> = decoded.entries.iter().map(|(b, _)| b.0).collect();
        assert_eq!(decoded_ids, ids);
        assert!(q.pending.is_empty());
    }

    #[test]
    fn receivers_sharing_laid_out_entries_get_the_bytes_of_their_own_batches() {
        let config = OwnershipConfig::default();
        let mut receivers: Vec<RelayQueue> =
            (0..3).map(|_| RelayQueue::new(1_000_000, true)).collect();
        let mut prepared = PreparedStates::default();
        let (mut deltas, mut absolutes) = (0, 0);
        for tick in 0..16u64 {
            prepared.clear();
            let now = Duration::from_millis(16 * tick);
            // Bodies move at different speeds; body 0 rests.
            let state_of = |b: BodyId| {
                let mut state = moving(b.0 as f32);
                state.position.x += (b.0 % 5) as f32 * 0.013 * tick as f32;
                state.linear_velocity *= (b.0 % 5) as f32;
                Some((None, state))
            };
            for (r, q) in receivers.iter_mut().enumerate() {
                for i in 0..40u64 {
                    if !(i + tick + r as u64).is_multiple_of(4) {
                        q.mark(BodyId(i));
                    }
                }
                let pass = q.pass_prepared(now, None, &config, None, &mut prepared, state_of);
                let seq = pass.seq.expect("a batch");
                // What the receiver's own batch of the same states lays out.
                let expected = WireBatch {
                    seq,
                    focus: None,
                    ack: q.link.acks.ack(),
                    entries: pass
                        .chosen
                        .iter()
                        .map(|c| {
                            let baseline = q.link.sent.baseline(c.body);
                            (
                                c.body,
                                crate::batch::choose_entry(
                                    c.body.0,
                                    prepared.q(c.prepared),
                                    seq,
                                    baseline,
                                ),
                            )
                        })
                        .collect(),
                };
                let (bytes, d) = q.wire_chosen(seq, &pass.chosen, &prepared, now).unwrap();
                assert_eq!(
                    bytes,
                    expected.encode().unwrap(),
                    "tick {tick}, receiver {r}"
                );
                assert_eq!(d, expected.deltas());
                deltas += d;
                absolutes += pass.chosen.len() - d;
                // Receiver r acknowledges every (r + 1)th batch: their baselines differ.
                if tick.is_multiple_of(r as u64 + 1) {
                    let ack = BatchAck {
                        newest: seq,
                        earlier: 0,
                    };
                    q.link.sent.on_ack(&ack).unwrap();
                }
            }
        }
        assert!(
            deltas > 200 && absolutes > 100,
            "{deltas} deltas, {absolutes} absolute"
        );
    }

    #[test]
    fn records_take_the_memory_the_docs_give() {
        use core::mem::size_of;
        assert!(size_of::<QueueBody>() <= 80, "{}", size_of::<QueueBody>());
        assert!(size_of::<Prepared>() <= 336, "{}", size_of::<Prepared>());
    }

    #[test]
    fn rank_keys_order_as_total_cmp_highest_first_then_by_index() {
        let values = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f32::MIN_POSITIVE,
            f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            3.5e-42,
        ];
        for (i, a) in values.iter().enumerate() {
            for (j, b) in values.iter().enumerate() {
                let by_keys = rank_key(*a, i as u32).cmp(&rank_key(*b, j as u32));
                let by_rule = b.total_cmp(a).then(i.cmp(&j));
                assert_eq!(by_keys, by_rule, "{a} #{i} against {b} #{j}");
            }
        }
    }

    proptest::proptest! {
        /// Over several passes, a ranked selection chooses what the reference accumulator of
        /// rule 18 chooses, pass after pass (so both keep the same priorities).
        #[test]
        fn a_ranked_selection_is_the_reference_accumulators(
            passes in proptest::collection::vec(
                (
                    // Whole weights and a few step lengths make ties of priority common.
                    proptest::collection::vec((0u64..40, 1u8..=16, 3usize..40), 0..40),
                    0usize..400,
                    proptest::prop_oneof![
                        proptest::strategy::Just(0.0f32),
                        proptest::strategy::Just(1.0 / 64.0),
                        0.0f32..0.1,
                    ],
                ),
                1..8,
            ),
        ) {
            let mut queue = RelayQueue::new(8_000, true);
            let mut reference = crate::budget::PriorityAccumulator::default();
            // Selection never reads the entry.
            let entry = LaidOut::new(
                &Entry::Absolute(QuantizedState::new(&BodyState::default())),
                &mut Vec::new(),
            );
            for (bodies, bytes, dt) in passes {
                let mut bodies = bodies;
                bodies.sort_by_key(|b| b.0);
                bodies.dedup_by_key(|b| b.0);
                let mut candidates: Vec<Candidate> = bodies
                    .iter()
                    .map(|&(id, weight, size)| {
                        let weight = f32::from(weight);
                        let selections = queue.selections;
                        let record = queue.record(BodyId(id));
                        let held = if record.acc_at == selections { record.acc } else { 0.0 };
                        Candidate {
                            body: BodyId(id),
                            prepared: 0,
                            held,
                            distance: None,
                            weight,
                            acc: 0.0,
                            entry,
                            size: size as u32,
                            chosen: false,
                        }
                    })
                    .collect();
                let chosen = queue.select(&mut candidates, dt, bytes);
                let expected = reference.select(
                    &bodies
                        .iter()
                        .map(|&(id, weight, size)| crate::budget::Candidate {
                            body: BodyId(id),
                            weight: f32::from(weight),
                            size,
                            urgent: false,
                        })
                        .collect::<Vec<_>>(),
                    dt,
                    bytes,
                );
                let mut ids: Vec<BodyId> =
                    candidates.iter().filter(|c| c.chosen).map(|c| c.body).collect();
                let mut reference_ids = expected.chosen.clone();
                ids.sort_unstable();
                reference_ids.sort_unstable();
                proptest::prop_assert_eq!(chosen, expected.chosen.len());
                proptest::prop_assert_eq!(ids, reference_ids);
                proptest::prop_assert_eq!(candidates.len() - chosen, expected.deferred);
            }
        }
    }
}
