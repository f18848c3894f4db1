//! Deltas against acknowledged states
//! ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)): what a sender
//! remembers of the batches it sent one receiver and which of them that receiver acknowledged
//! ([`SentHistory`]), what a receiver remembers of the states it got from one sender
//! ([`ReceivedStates`]) and acknowledges ([`AckWindow`]), and both directions of one connection
//! together ([`DeltaLink`]). Plain data; the participant and the entity server hold one
//! [`DeltaLink`] per connection.
//!
//! # Memory bounds
//! Per connection and direction:
//! - [`SentHistory`]: the last [`HISTORY_BATCHES`] (64) batches not yet acknowledged, each its
//!   bodies' [`QuantizedState`]s (64 bytes a body with id and send count; a batch has at most
//!   [`MAX_BATCH_BODIES`](crate::MAX_BATCH_BODIES)), and per body sent one acknowledged state
//!   and a send count (about 72 bytes), until the body is forgotten. The emptied body lists
//!   of up to [`HISTORY_BATCHES`] batches acknowledged or dropped are kept for reuse, so at
//!   most twice the batches' memory.
//! - [`ReceivedStates`]: per body the receiver has, the [`RING_LEN`] (4) newest states
//!   received with their batch numbers (216 bytes: 4 states of 48 bytes, 4 numbers);
//!   bodies the receiver does not have are not kept, so a hostile sender cannot grow it.
//! - [`AckWindow`]: a batch number and 32 bits.
//!
//! Per-body records are found by indexing a `Vec` with the body id (ids too large for it, in a
//! hash map beside it), so a table may hold up to `max(256, 2 × (its most bodies + 1))` empty
//! slots besides its records.
//!
//! # Errors
//! Acknowledgements and deltas are untrusted input: an acknowledgement of a batch never sent or
//! not yet sent is an [`AckRejection`], a delta whose baseline the receiver does not have (or
//! that leaves its range) a [`DeltaRejection`]; both are counted by their callers, nothing
//! panics, and no state is made up.

use core::time::Duration;
use std::collections::VecDeque;

use bevy::math::Vec3;
use thiserror::Error;

use crate::batch::{
    BatchAck, BatchError, Entry, QuantizedState, StateBatch, WireBatch, entry_size_with,
    is_newer_batch,
};
use crate::body::BodyState;
use crate::body_map::BodyMap;
use crate::priority::BodyId;

/// States kept per body by a receiver, and how many sends of a body a sender's baseline may be
/// behind: a baseline among the sender's last `RING_LEN` sends of the body is always still in
/// the receiver's ring.
pub const RING_LEN: usize = 4;
/// How long a side with no states to send waits before acknowledging the batches it received in
/// a batch without bodies (a participant that owns nothing, the entity server with nothing to
/// relay to a participant).
pub const ACK_INTERVAL: Duration = Duration::from_millis(50);
/// Unacknowledged batches a sender remembers; an acknowledgement of an older one is ignored.
pub const HISTORY_BATCHES: usize = 64;
/// How far the oldest batch number a [`SentHistory`] accepts in an acknowledgement trails its
/// newest: 2³⁰, half the range serial-number arithmetic orders
/// ([long sessions](crate::rules#long-sessions)).
const FIRST_TRAILS_BY: u32 = 1 << 30;

/// Why an acknowledgement was refused (the whole acknowledgement is ignored).
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum AckRejection {
    /// It acknowledges a batch newer than the newest one sent.
    #[error("acknowledgement of batch {newest}, which was not sent yet")]
    Future {
        /// The batch named.
        newest: u32,
    },
    /// It names a batch from before the first one sent (or any, before any was sent).
    #[error("acknowledgement of batch {seq}, which was never sent")]
    NeverSent {
        /// The batch named.
        seq: u32,
    },
}

/// Why a delta entry was not applied (the body waits for its next entry).
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum DeltaRejection {
    /// The receiver does not have the body's state of the baseline batch: lost, older than its
    /// ring, never sent, or a body it does not keep.
    #[error("{body}: no state of batch {seq} to apply a delta to")]
    MissingBaseline {
        /// The body.
        body: BodyId,
        /// The baseline batch named.
        seq: u32,
    },
    /// The delta applied to the baseline leaves a value's range.
    #[error("{body}: delta leaves the wire range")]
    OutOfRange {
        /// The body.
        body: BodyId,
    },
}

/// A receiver's record of which batches it got from one sender, for its acknowledgements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckWindow {
    newest: Option<u32>,
    earlier: u32,
    fresh: bool,
}

impl AckWindow {
    /// Batch `seq` was received (duplicates and batches more than 32 behind the newest change
    /// nothing but freshness).
    pub fn record(&mut self, seq: u32) {
        self.fresh = true;
        let Some(newest) = self.newest else {
            self.newest = Some(seq);
            self.earlier = 0;
            return;
        };
        if is_newer_batch(seq, newest) {
            let shift = seq.wrapping_sub(newest);
            let moved = if shift > 32 {
                0
            } else {
                (u64::from(self.earlier) << shift) | (1 << (shift - 1))
            };
            self.earlier = moved as u32;
            self.newest = Some(seq);
        } else {
            let back = newest.wrapping_sub(seq);
            if (1..=32).contains(&back) {
                self.earlier |= 1 << (back - 1);
            }
        }
    }

    /// The acknowledgement to send, once something was received.
    pub fn ack(&self) -> Option<BatchAck> {
        self.newest.map(|newest| BatchAck {
            newest,
            earlier: self.earlier,
        })
    }

    /// Whether a batch arrived since an acknowledgement last went out.
    pub fn fresh(&self) -> bool {
        self.fresh
    }

    /// An acknowledgement went out.
    pub fn sent(&mut self) {
        self.fresh = false;
    }
}

/// One body's place in a [`SentHistory`].
#[derive(Debug, Clone, Copy, Default)]
struct SentBody {
    /// Times the body was sent (wrapping).
    sends: u32,
    /// The newest acknowledged state: batch number, which send it was, the state.
    acked: Option<(u32, u32, QuantizedState)>,
}

/// One batch a sender remembers until it is acknowledged or too old.
#[derive(Debug, Clone)]
struct SentBatch {
    seq: u32,
    bodies: Vec<(BodyId, u32, QuantizedState)>,
}

/// What a sender sent one receiver and what the receiver acknowledged: the baselines of its
/// deltas ([memory bounds](crate::rules#rule-20--deltas-against-acknowledged-states)).
#[derive(Debug, Clone, Default)]
pub struct SentHistory {
    batches: VecDeque<SentBatch>,
    bodies: BodyMap<SentBody>,
    first: Option<u32>,
    last: Option<u32>,
    /// Emptied body lists of batches acknowledged or dropped, reused by the next batches
    /// (at most [`HISTORY_BATCHES`] kept): a batch sent costs no allocation once the history
    /// has turned over.
    spare: Vec<Vec<(BodyId, u32, QuantizedState)>>,
}

impl SentHistory {
    /// Batch `seq` went out carrying `bodies` (as quantized on the wire).
    pub fn record(&mut self, seq: u32, bodies: impl IntoIterator<Item = (BodyId, QuantizedState)>) {
        let first = *self.first.get_or_insert(seq);
        // Serial-number comparison only orders numbers less than 2³¹ apart: the oldest batch
        // an acknowledgement may name trails the newest by at most 2³⁰ (6.5 months of batches at
        // 64 a second), so `first` never looks newer than a batch sent since.
        if seq.wrapping_sub(first) > FIRST_TRAILS_BY {
            self.first = Some(seq.wrapping_sub(FIRST_TRAILS_BY));
        }
        self.last = Some(seq);
        let mut list = self.spare.pop().unwrap_or_default();
        list.extend(bodies.into_iter().map(|(body, state)| {
            let sent = self.bodies.get_or_insert_with(body, SentBody::default);
            sent.sends = sent.sends.wrapping_add(1);
            (body, sent.sends, state)
        }));
        self.batches.push_back(SentBatch { seq, bodies: list });
        while self.batches.len() > HISTORY_BATCHES {
            if let Some(dropped) = self.batches.pop_front() {
                self.keep_spare(dropped.bodies);
            }
        }
    }

    /// Keeps `list`'s memory for a later batch (emptied; dropped when enough are kept).
    fn keep_spare(&mut self, mut list: Vec<(BodyId, u32, QuantizedState)>) {
        if self.spare.len() < HISTORY_BATCHES {
            list.clear();
            self.spare.push(list);
        }
    }

    /// The receiver's acknowledgement: each acknowledged batch still remembered makes its
    /// bodies' states their baselines (unless a newer send of the body is acknowledged
    /// already). Returns how many remembered batches it acknowledged.
    ///
    /// # Errors
    /// [`AckRejection`] if it names a batch newer than the last sent or older than the first
    /// (nothing changes).
    pub fn on_ack(&mut self, ack: &BatchAck) -> Result<usize, AckRejection> {
        let (Some(first), Some(last)) = (self.first, self.last) else {
            return Err(AckRejection::NeverSent { seq: ack.newest });
        };
        if is_newer_batch(ack.newest, last) {
            return Err(AckRejection::Future { newest: ack.newest });
        }
        if let Some(seq) = ack.seqs().find(|seq| is_newer_batch(first, *seq)) {
            return Err(AckRejection::NeverSent { seq });
        }
        let mut acknowledged = 0;
        for seq in ack.seqs() {
            let Some(i) = self.batches.iter().position(|b| b.seq == seq) else {
                continue;
            };
            let Some(batch) = self.batches.remove(i) else {
                continue;
            };
            acknowledged += 1;
            for &(body, send, state) in &batch.bodies {
                let Some(sent) = self.bodies.get_mut(body) else {
                    continue;
                };
                let newer = sent
                    .acked
                    .is_none_or(|(_, s, _)| (send.wrapping_sub(s) as i32) > 0);
                if newer {
                    sent.acked = Some((seq, send, state));
                }
            }
            self.keep_spare(batch.bodies);
        }
        Ok(acknowledged)
    }

    /// The baseline for `body`'s next entry: its newest acknowledged state and batch, if that
    /// is among its last [`RING_LEN`] sends (so the receiver still keeps it).
    pub fn baseline(&self, body: BodyId) -> Option<(u32, QuantizedState)> {
        self.baseline_ref(body).map(|(seq, state)| (seq, *state))
    }

    /// [`baseline`](Self::baseline) without copying the state out.
    pub(crate) fn baseline_ref(&self, body: BodyId) -> Option<(u32, &QuantizedState)> {
        let sent = self.bodies.get(body)?;
        let (seq, send, state) = sent.acked.as_ref()?;
        (sent.sends.wrapping_sub(*send) < RING_LEN as u32).then_some((*seq, state))
    }

    /// Forgets `body` (unregistered).
    pub fn forget(&mut self, body: BodyId) {
        self.bodies.remove(body);
    }
}

/// A receiver's newest states per body from one sender, by batch number: the baselines deltas
/// refer to ([memory bounds](crate::rules#rule-20--deltas-against-acknowledged-states)).
#[derive(Debug, Clone, Default)]
pub struct ReceivedStates {
    bodies: BodyMap<Ring>,
}

/// One body's [`RING_LEN`] newest states with their batch numbers. The numbers sit apart from
/// the states, so finding a batch's state reads one cache line of numbers and then the one
/// state it needs.
#[derive(Debug, Clone, Copy)]
struct Ring {
    /// Which slots hold a state (bit `i`: slot `i`).
    filled: u8,
    /// Each slot's batch number (meaningful where filled).
    seqs: [u32; RING_LEN],
    /// Each slot's state (meaningful where filled).
    states: [QuantizedState; RING_LEN],
}

impl Default for Ring {
    fn default() -> Self {
        const UNUSED: QuantizedState = QuantizedState {
            position: [0; 3],
            rotation: 0,
            linear: [0; 3],
            angular: [0; 3],
        };
        Self {
            filled: 0,
            seqs: [0; RING_LEN],
            states: [UNUSED; RING_LEN],
        }
    }
}

impl Ring {
    /// The slot holding batch `seq`'s state.
    fn slot_of(&self, seq: u32) -> Option<usize> {
        (0..RING_LEN).find(|&i| self.filled & (1 << i) != 0 && self.seqs[i] == seq)
    }
}

/// A batch's entries made states.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolved {
    /// The bodies and their states, in the batch's order.
    pub states: Vec<(BodyId, QuantizedState)>,
    /// The delta entries that could not be applied.
    pub rejected: Vec<DeltaRejection>,
}

impl ReceivedStates {
    /// Each entry of `batch` as a state: absolute ones as they are, deltas applied to the
    /// body's state of their baseline batch. The states of bodies `keep` accepts are kept as
    /// baselines for later deltas; a delta without its baseline, or that leaves the range, is
    /// rejected and nothing is made up for its body.
    pub fn resolve(&mut self, batch: &WireBatch, keep: impl Fn(BodyId) -> bool) -> Resolved {
        let mut out = Resolved {
            states: Vec::with_capacity(batch.entries.len()),
            rejected: Vec::new(),
        };
        for (body, entry) in &batch.entries {
            let state = match entry {
                Entry::Absolute(q) => *q,
                Entry::Delta(delta) => {
                    let seq = batch.seq.wrapping_sub(delta.ago);
                    let Some(base) = self.find(*body, seq) else {
                        out.rejected
                            .push(DeltaRejection::MissingBaseline { body: *body, seq });
                        continue;
                    };
                    let Some(state) = delta.apply(&base) else {
                        out.rejected
                            .push(DeltaRejection::OutOfRange { body: *body });
                        continue;
                    };
                    state
                }
            };
            if keep(*body) {
                self.store(*body, batch.seq, state);
            }
            out.states.push((*body, state));
        }
        out
    }

    /// `body`'s state of batch `seq`, if kept.
    pub fn find(&self, body: BodyId, seq: u32) -> Option<QuantizedState> {
        let ring = self.bodies.get(body)?;
        ring.slot_of(seq).map(|i| ring.states[i])
    }

    /// Keeps `state` of batch `seq`, in place of the oldest kept state when the ring is full
    /// (a state older than every kept one is not kept).
    fn store(&mut self, body: BodyId, seq: u32, state: QuantizedState) {
        let ring = self.bodies.get_or_insert_with(body, Ring::default);
        if ring.slot_of(seq).is_some() {
            return;
        }
        let slot = match (0..RING_LEN).find(|&i| ring.filled & (1 << i) == 0) {
            Some(free) => free,
            None => {
                let oldest = (1..RING_LEN).fold(0, |oldest, i| {
                    if is_newer_batch(ring.seqs[oldest], ring.seqs[i]) {
                        i
                    } else {
                        oldest
                    }
                });
                if !is_newer_batch(seq, ring.seqs[oldest]) {
                    return;
                }
                oldest
            }
        };
        ring.filled |= 1 << slot;
        ring.seqs[slot] = seq;
        ring.states[slot] = state;
    }

    /// Forgets `body` (unregistered).
    pub fn forget(&mut self, body: BodyId) {
        self.bodies.remove(body);
    }

    /// Bodies with kept states.
    pub fn len(&self) -> usize {
        self.bodies.len()
    }

    /// Whether no state is kept.
    pub fn is_empty(&self) -> bool {
        self.bodies.is_empty()
    }
}

/// A received batch, resolved ([`DeltaLink::receive`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Received {
    /// The sender's batch number.
    pub seq: u32,
    /// The sender's interest centre, m.
    pub focus: Option<Vec3>,
    /// The bodies and their states.
    pub states: Vec<(BodyId, BodyState)>,
    /// Delta entries that could not be applied.
    pub deltas_rejected: usize,
    /// The batch's acknowledgement, if refused.
    pub ack_rejected: Option<AckRejection>,
}

/// Both directions of deltas on one connection: the [`SentHistory`] of what this side sent, the
/// [`ReceivedStates`] and [`AckWindow`] of what it received.
#[derive(Debug, Clone, Default)]
pub struct DeltaLink {
    /// What this side sent and the other acknowledged.
    pub sent: SentHistory,
    /// What this side received.
    pub received: ReceivedStates,
    /// What this side acknowledges.
    pub acks: AckWindow,
}

impl DeltaLink {
    /// `batch` as it goes out: with `delta`, carrying this side's acknowledgement and each body
    /// a delta from its acknowledged baseline where that pays, and remembered as sent; without,
    /// absolute and unacknowledging as in protocol 5.
    ///
    /// # Errors
    /// Those of [`StateBatch::to_wire`] (nothing is remembered then).
    pub fn send(&mut self, batch: &StateBatch, delta: bool) -> Result<WireBatch, BatchError> {
        if !delta {
            return batch.to_wire(None, |_| None);
        }
        let ack = self.acks.ack();
        let wire = batch.to_wire(ack, |body| self.sent.baseline(body))?;
        let states = batch
            .bodies
            .iter()
            .map(|(body, state)| (*body, QuantizedState::new(state)));
        self.sent.record(batch.seq, states);
        if ack.is_some() {
            self.acks.sent();
        }
        Ok(wire)
    }

    /// Encoded size of `body`'s entry in batch `seq`, as [`send`](Self::send) would lay it out.
    pub fn entry_size(&self, body: BodyId, state: &BodyState, seq: u32, delta: bool) -> usize {
        let baseline = if delta {
            self.sent.baseline(body)
        } else {
            None
        };
        entry_size_with(body, state, seq, baseline)
    }

    /// A batch received: its acknowledgement updates the baselines, its entries are resolved
    /// (those of bodies `keep` accepts kept as baselines), and it is acknowledged in turn unless
    /// a delta of it was rejected (so its other states are never used as baselines either) or
    /// it has no bodies (an acknowledgement only: acknowledging it would answer
    /// acknowledgements with acknowledgements forever).
    ///
    /// # Errors
    /// [`WireBatch::decode`]'s: the batch is dropped whole.
    pub fn receive(
        &mut self,
        bytes: &[u8],
        keep: impl Fn(BodyId) -> bool,
    ) -> Result<Received, BatchError> {
        let batch = WireBatch::decode(bytes)?;
        let ack_rejected = batch.ack.and_then(|ack| self.sent.on_ack(&ack).err());
        let resolved = self.received.resolve(&batch, keep);
        if resolved.rejected.is_empty() && !batch.entries.is_empty() {
            self.acks.record(batch.seq);
        }
        Ok(Received {
            seq: batch.seq,
            focus: batch.focus,
            states: resolved
                .states
                .iter()
                .map(|(body, q)| (*body, q.to_state()))
                .collect(),
            deltas_rejected: resolved.rejected.len(),
            ack_rejected,
        })
    }

    /// Forgets `body` in both directions (unregistered).
    pub fn forget(&mut self, body: BodyId) {
        self.sent.forget(body);
        self.received.forget(body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bevy::math::Quat;

    fn at(x: f32) -> BodyState {
        BodyState {
            position: Vec3::new(x, 1.0, -2.0),
            rotation: Quat::from_rotation_y(x * 0.1),
            linear_velocity: Vec3::new(1.0, 0.0, 0.0),
            angular_velocity: Vec3::ZERO,
        }
    }

    fn batch(seq: u32, bodies: &[(u64, f32)]) -> StateBatch {
        StateBatch {
            seq,
            focus: None,
            bodies: bodies.iter().map(|(b, x)| (BodyId(*b), at(*x))).collect(),
        }
    }

    #[test]
    fn records_take_the_memory_the_module_docs_give() {
        use core::mem::size_of;
        assert_eq!(size_of::<QuantizedState>(), 48);
        // A sent batch's body: id, send count, state.
        assert_eq!(size_of::<(BodyId, u32, QuantizedState)>(), 64);
        assert!(size_of::<SentBody>() <= 72, "{}", size_of::<SentBody>());
        assert!(size_of::<Ring>() <= 216, "{}", size_of::<Ring>());
    }

    #[test]
    fn the_ack_window_holds_the_newest_batch_and_the_32_before_it() {
        let mut w = AckWindow::default();
        assert_eq!(w.ack(), None);
        assert!(!w.fresh());
        for seq in [5, 7, 6, 9] {
            w.record(seq);
        }
        // 9 newest; 8 missing, 7, 6, 5 received.
        assert_eq!(
            w.ack(),
            Some(BatchAck {
                newest: 9,
                earlier: 0b1110
            })
        );
        assert!(w.fresh());
        w.sent();
        assert!(!w.fresh());
        // A late 8 fills its bit; a jump of 40 leaves only the new newest.
        w.record(8);
        assert_eq!(w.ack().unwrap().earlier, 0b1111);
        w.record(49);
        assert_eq!(
            w.ack().unwrap(),
            BatchAck {
                newest: 49,
                earlier: 0
            }
        );
        w.record(u32::MAX);
        assert_eq!(w.ack().unwrap().newest, 49);
        // Across the wrap: 49 + 33 = 82, so 49 is bit 32, just out of the window.
        w.record(82);
        assert_eq!(
            w.ack().unwrap(),
            BatchAck {
                newest: 82,
                earlier: 0
            }
        );
        w.record(81);
        assert_eq!(w.ack().unwrap().earlier, 1);
    }

    #[test]
    fn an_acknowledged_batch_becomes_the_baseline_and_a_lost_one_never_does() {
        let mut h = SentHistory::default();
        let q = |x: f32| QuantizedState::new(&at(x));
        h.record(1, [(BodyId(1), q(1.0))]);
        h.record(2, [(BodyId(1), q(2.0))]);
        h.record(3, [(BodyId(1), q(3.0))]);
        assert_eq!(h.baseline(BodyId(1)), None);
        // Batch 2 was lost: the receiver acknowledges 3 and 1.
        let ack = BatchAck {
            newest: 3,
            earlier: 0b10,
        };
        assert_eq!(h.on_ack(&ack), Ok(2));
        assert_eq!(h.baseline(BodyId(1)), Some((3, q(3.0))));
        // An older acknowledgement arriving late does not move the baseline back.
        h.record(4, [(BodyId(1), q(4.0))]);
        assert_eq!(
            h.on_ack(&BatchAck {
                newest: 2,
                earlier: 0
            }),
            Ok(1)
        );
        assert_eq!(h.baseline(BodyId(1)), Some((3, q(3.0))));
        // Only 1 acknowledged of 4: the baseline stays 1 while it is among the last 4 sends.
        let mut h = SentHistory::default();
        for seq in 1..=4 {
            h.record(seq, [(BodyId(1), q(seq as f32))]);
        }
        assert_eq!(
            h.on_ack(&BatchAck {
                newest: 1,
                earlier: 0
            }),
            Ok(1)
        );
        assert_eq!(h.baseline(BodyId(1)), Some((1, q(1.0))));
        h.record(5, [(BodyId(1), q(5.0))]);
        assert_eq!(h.baseline(BodyId(1)), None);
        // The history holds at most HISTORY_BATCHES: an acknowledgement of an older batch
        // changes nothing.
        for seq in 6..6 + HISTORY_BATCHES as u32 {
            h.record(seq, [(BodyId(2), q(0.0))]);
        }
        assert_eq!(
            h.on_ack(&BatchAck {
                newest: 5,
                earlier: 0
            }),
            Ok(0)
        );
        assert_eq!(h.baseline(BodyId(2)), None);
    }

    #[test]
    fn batch_numbers_and_acknowledgements_work_across_the_u32_wrap() {
        let q = |x: f32| QuantizedState::new(&at(x));
        let mut h = SentHistory::default();
        let mut window = AckWindow::default();
        let mut received = ReceivedStates::default();
        // Five batches numbered u32::MAX − 2 ..= 2 (crossing the wrap); batch u32::MAX is lost.
        let seqs: Vec<u32> = (0..5).map(|i| (u32::MAX - 2).wrapping_add(i)).collect();
        for (i, seq) in seqs.iter().enumerate() {
            let state = at(i as f32);
            h.record(*seq, [(BodyId(1), QuantizedState::new(&state))]);
            if *seq != u32::MAX {
                window.record(*seq);
                let wire = batch(*seq, &[(1, i as f32)])
                    .to_wire(None, |_| None)
                    .unwrap();
                received.resolve(&wire, |_| true);
            }
        }
        let ack = window.ack().unwrap();
        assert_eq!(ack.newest, 1);
        assert_eq!(
            ack.seqs().collect::<Vec<_>>(),
            vec![1, 0, u32::MAX - 1, u32::MAX - 2]
        );
        assert_eq!(h.on_ack(&ack), Ok(4));
        assert_eq!(h.baseline(BodyId(1)), Some((1, q(4.0))));
        // Batch 2 carries the body unchanged as a delta against batch 1, resolved on the
        // receiver; batch u32::MAX − 1 (before the wrap) is a baseline the receiver kept too.
        let next = batch(2, &[(1, 4.0)]);
        let wire = next.to_wire(None, |b| h.baseline(b)).unwrap();
        assert!(matches!(wire.entries[0].1, Entry::Delta(d) if d.ago == 1));
        let resolved = received.resolve(&wire, |_| true);
        assert_eq!(resolved.states, vec![(BodyId(1), q(4.0))]);
        // The ring replaced its oldest state, u32::MAX − 2 (not 0 or 1, "smaller" numbers).
        assert_eq!(received.find(BodyId(1), u32::MAX - 2), None);
        assert_eq!(received.find(BodyId(1), u32::MAX - 1), Some(q(1.0)));
        assert_eq!(received.find(BodyId(1), 0), Some(q(3.0)));
        assert!(resolved.rejected.is_empty());
    }

    #[test]
    fn acknowledgements_are_taken_after_more_than_two_to_the_31_batches() {
        // A sender 2³¹ + 5 batches into its session (388 days at 64 a second): the first batch
        // number it ever sent looks newer than its current ones to serial arithmetic, which must
        // not make it refuse their acknowledgements as never sent.
        let q = QuantizedState::new(&at(1.0));
        let mut h = SentHistory::default();
        h.record(0, [(BodyId(1), q)]);
        for seq in (1u32 << 30)..(1u32 << 30) + 3 {
            h.record(seq, []);
        }
        let late = (1u32 << 31) + 5;
        h.record(late - 1, [(BodyId(1), q)]);
        h.record(late, [(BodyId(1), q)]);
        let ack = BatchAck {
            newest: late,
            earlier: 1,
        };
        assert_eq!(h.on_ack(&ack), Ok(2));
        assert_eq!(h.baseline(BodyId(1)), Some((late, q)));
        assert_eq!(
            h.on_ack(&BatchAck {
                newest: late.wrapping_add(1),
                earlier: 0
            }),
            Err(AckRejection::Future {
                newest: late.wrapping_add(1)
            })
        );
    }

    #[test]
    fn hostile_acknowledgements_are_refused_and_change_nothing() {
        let mut h = SentHistory::default();
        let none = BatchAck::default();
        assert_eq!(h.on_ack(&none), Err(AckRejection::NeverSent { seq: 0 }));
        let q = QuantizedState::new(&at(1.0));
        h.record(10, [(BodyId(1), q)]);
        h.record(11, [(BodyId(1), q)]);
        assert_eq!(
            h.on_ack(&BatchAck {
                newest: 12,
                earlier: 0
            }),
            Err(AckRejection::Future { newest: 12 })
        );
        // 11 and, in the bits, 9: before the first batch sent.
        assert_eq!(
            h.on_ack(&BatchAck {
                newest: 11,
                earlier: 0b11
            }),
            Err(AckRejection::NeverSent { seq: 9 })
        );
        assert_eq!(h.baseline(BodyId(1)), None);
        assert_eq!(
            h.on_ack(&BatchAck {
                newest: 11,
                earlier: 1
            }),
            Ok(2)
        );
        assert_eq!(h.baseline(BodyId(1)), Some((11, q)));
    }

    #[test]
    fn a_delta_without_its_baseline_is_rejected_and_makes_up_no_state() {
        let mut r = ReceivedStates::default();
        let q = QuantizedState::new(&at(1.0));
        let delta = |ago| {
            Entry::Delta(crate::batch::Delta::between(
                &q,
                &QuantizedState::new(&at(1.5)),
                ago,
            ))
        };
        let wire = |seq, entries| WireBatch {
            seq,
            entries,
            ..WireBatch::default()
        };
        // Body 1 absolute in batch 3; body 2 unknown to the receiver (not kept).
        let first = r.resolve(
            &wire(
                3,
                vec![
                    (BodyId(1), Entry::Absolute(q)),
                    (BodyId(2), Entry::Absolute(q)),
                ],
            ),
            |b| b == BodyId(1),
        );
        assert_eq!(first.states.len(), 2);
        assert_eq!(r.len(), 1);
        // Batch 5: body 1 against batch 3 (right), 4 (never received); body 2 against 3.
        let second = r.resolve(
            &wire(5, vec![(BodyId(1), delta(2)), (BodyId(2), delta(2))]),
            |b| b == BodyId(1),
        );
        assert_eq!(
            second.states,
            vec![(BodyId(1), QuantizedState::new(&at(1.5)))]
        );
        assert_eq!(
            second.rejected,
            vec![DeltaRejection::MissingBaseline {
                body: BodyId(2),
                seq: 3
            }]
        );
        let third = r.resolve(&wire(6, vec![(BodyId(1), delta(2))]), |_| true);
        assert_eq!(
            third.rejected,
            vec![DeltaRejection::MissingBaseline {
                body: BodyId(1),
                seq: 4
            }]
        );
        assert!(third.states.is_empty());
        // A delta that leaves the range against a baseline that exists.
        let mut wild = crate::batch::Delta::between(&q, &q, 1);
        wild.position = [2_000_000_000, 0, 0];
        let fourth = r.resolve(&wire(6, vec![(BodyId(1), Entry::Delta(wild))]), |_| true);
        assert_eq!(
            fourth.rejected,
            vec![DeltaRejection::OutOfRange { body: BodyId(1) }]
        );
    }

    #[test]
    fn the_ring_keeps_the_newest_states_of_a_body() {
        let mut r = ReceivedStates::default();
        let q = |x: f32| QuantizedState::new(&at(x));
        for seq in [1u32, 2, 3, 4, 6, 5] {
            let batch = WireBatch {
                seq,
                entries: vec![(BodyId(1), Entry::Absolute(q(seq as f32)))],
                ..WireBatch::default()
            };
            r.resolve(&batch, |_| true);
        }
        // 1 and 2 gave way to 6 and 5; an older one than all kept is not kept.
        assert_eq!(r.find(BodyId(1), 1), None);
        assert_eq!(r.find(BodyId(1), 2), None);
        for seq in 3..=6 {
            assert_eq!(r.find(BodyId(1), seq), Some(q(seq as f32)), "{seq}");
        }
        let old = WireBatch {
            seq: 2,
            entries: vec![(BodyId(1), Entry::Absolute(q(2.0)))],
            ..WireBatch::default()
        };
        r.resolve(&old, |_| true);
        assert_eq!(r.find(BodyId(1), 2), None);
        r.forget(BodyId(1));
        assert!(r.is_empty());
    }

    /// Two links over a lossy line: every state the receiver resolves is bit for bit the
    /// quantized state the sender sent in that batch; lost batches only cost deltas.
    #[test]
    fn over_a_lossy_line_receivers_never_apply_a_wrong_state() {
        let (mut sender, mut receiver) = (DeltaLink::default(), DeltaLink::default());
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut lost = |percent: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % 100 < percent
        };
        let (mut deltas, mut resolved, mut rejected) = (0, 0, 0);
        for seq in 1..=600u32 {
            // Bodies 1..=8; odd ones rest, even ones move a little every batch.
            let bodies: Vec<(u64, f32)> = (1..=8u64)
                .filter(|b| (u64::from(seq) + b) % 3 != 0)
                .map(|b| {
                    (
                        b,
                        if b % 2 == 0 {
                            seq as f32 * 0.01
                        } else {
                            b as f32
                        },
                    )
                })
                .collect();
            let batch = batch(seq, &bodies);
            let wire = sender.send(&batch, true).unwrap();
            deltas += wire.deltas();
            if !lost(20) {
                let got = receiver.receive(&wire.encode().unwrap(), |_| true).unwrap();
                rejected += got.deltas_rejected;
                for (body, state) in &got.states {
                    let sent = batch.bodies.iter().find(|(b, _)| b == body).unwrap().1;
                    assert_eq!(*state, crate::batch::quantize(&sent), "{body} in {seq}");
                    resolved += 1;
                }
            }
            // The receiver's acknowledgement comes back in its own batch, also lossy.
            let back = receiver
                .send(
                    &StateBatch {
                        seq,
                        ..StateBatch::default()
                    },
                    true,
                )
                .unwrap()
                .encode()
                .unwrap();
            if !lost(20) {
                let got = sender.receive(&back, |_| true).unwrap();
                assert_eq!(got.ack_rejected, None);
            }
        }
        assert!(deltas > 2_000, "{deltas} deltas");
        assert!(resolved > 2_400, "{resolved} resolved");
        // A baseline among the sender's last RING_LEN sends is always kept.
        assert_eq!(rejected, 0);
    }
}
