//! [`VirtualEventQueue`]: events waiting for their [`VirtualInstant`], popped in a
//! deterministic order.

use core::{cmp::Ordering, fmt, iter::FusedIterator};
use std::collections::BinaryHeap;

use bevy::prelude::*;

use crate::VirtualInstant;

/// A priority queue of events of type `E`, each scheduled at a [`VirtualInstant`]
/// ([time rules 9 and 10](crate::rules)).
///
/// Events come out earliest first, ordered by `(ticks, priority, insertion sequence)`: the
/// instant's own order first, and among events scheduled at an *equal* instant, the one
/// scheduled first comes out first (FIFO). The order depends only on the sequence of calls,
/// never on addresses, hashing or threads, so two simulations that schedule the same events
/// pop them identically.
///
/// # Cost
///
/// A binary heap: [`schedule`](Self::schedule) and each pop are `O(log n)`, peeking is `O(1)`.
/// Events are stored inline in one buffer; there is no allocation per event beyond the buffer
/// growing (use [`with_capacity`](Self::with_capacity) to avoid that too).
///
/// # Snapshots
///
/// The queue is plain data: `Clone` (when `E: Clone`) copies the events *and* the insertion
/// counter, so a clone pops exactly what the original would, in the same order, even after both
/// schedule further events. A deterministic simulation can keep a clone as a rollback snapshot.
///
/// It is also a Bevy [`Resource`] (for `E: Send + Sync + 'static`), so an App can hold one
/// queue per event type, e.g. `app.init_resource::<VirtualEventQueue<Spawn>>()`.
#[derive(Resource, Clone)]
pub struct VirtualEventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    /// Sequence number the next scheduled event gets. Part of the state: never reset, so it
    /// orders events at equal instants across `clear` too. 2^64 schedules would take centuries
    /// at a billion per second, so it never wraps in practice.
    next_seq: u64,
}

/// One scheduled event. Ordered *reversed* by `(instant, seq)`, so that std's max-heap yields
/// the earliest entry first.
#[derive(Clone)]
struct Entry<E> {
    instant: VirtualInstant,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq && self.instant == other.instant
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .instant
            .cmp(&self.instant)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl<E> VirtualEventQueue<E> {
    /// An empty queue.
    pub const fn new() -> Self {
        VirtualEventQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }

    /// An empty queue with room for `capacity` events before it reallocates.
    pub fn with_capacity(capacity: usize) -> Self {
        VirtualEventQueue {
            heap: BinaryHeap::with_capacity(capacity),
            next_seq: 0,
        }
    }

    /// Schedules `event` to become due at `at`. `O(log n)`.
    ///
    /// `at` may be earlier than the simulation's current instant; such an event is due at once.
    /// An event at [`VirtualInstant::INFINITY`] is only due when `now` is `INFINITY`.
    pub fn schedule(&mut self, at: VirtualInstant, event: E) {
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        self.heap.push(Entry {
            instant: at,
            seq,
            event,
        });
    }

    /// The instant of the next event to come out, or `None` if the queue is empty. `O(1)`.
    pub fn peek_next_instant(&self) -> Option<VirtualInstant> {
        self.heap.peek().map(|entry| entry.instant)
    }

    /// The next event to come out and its instant, without removing it. `O(1)`.
    pub fn peek_next(&self) -> Option<(VirtualInstant, &E)> {
        self.heap.peek().map(|entry| (entry.instant, &entry.event))
    }

    /// Removes and returns the next event whatever its instant, or `None` if the queue is
    /// empty. A discrete-event loop uses this to jump straight to the next event. `O(log n)`.
    pub fn pop_next(&mut self) -> Option<(VirtualInstant, E)> {
        self.heap.pop().map(|entry| (entry.instant, entry.event))
    }

    /// Removes and returns the next event if it is due, i.e. its instant is at or before `now`;
    /// otherwise leaves the queue unchanged and returns `None`. `O(log n)`.
    pub fn pop_due(&mut self, now: VirtualInstant) -> Option<(VirtualInstant, E)> {
        if self.peek_next_instant()? <= now {
            self.pop_next()
        } else {
            None
        }
    }

    /// An iterator that pops every event due at or before `now`, in order. `O(log n)` per event.
    ///
    /// The iterator is lazy: it pops one event per `next()`. Events it did not reach (because it
    /// was dropped early) stay in the queue.
    pub fn drain_due(&mut self, now: VirtualInstant) -> DrainDue<'_, E> {
        DrainDue { queue: self, now }
    }

    /// The insertion number the next scheduled event will get. Every event waiting now has a
    /// smaller one, so it marks "scheduled before this point" for the dispatch rounds.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Removes and returns the next event if it is due at `now` *and* was scheduled before the
    /// insertion number `mark` (see [`next_seq`](Self::next_seq)). `O(log n)`.
    pub(crate) fn pop_due_before(
        &mut self,
        now: VirtualInstant,
        mark: u64,
    ) -> Option<(VirtualInstant, E)> {
        let next = self.heap.peek()?;
        if next.instant <= now && next.seq < mark {
            self.pop_next()
        } else {
            None
        }
    }

    /// How many events are waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Drops every waiting event. The insertion counter is kept (it only breaks ties, so this
    /// does not change the order of later events among themselves).
    pub fn clear(&mut self) {
        self.heap.clear();
    }
}

impl<E> Default for VirtualEventQueue<E> {
    /// An empty queue; `E` need not be `Default`.
    fn default() -> Self {
        VirtualEventQueue::new()
    }
}

impl<E: fmt::Debug> fmt::Debug for VirtualEventQueue<E> {
    /// Lists the waiting events in heap (not pop) order, with the insertion counter.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VirtualEventQueue")
            .field("len", &self.heap.len())
            .field("next_seq", &self.next_seq)
            .field(
                "events",
                &self
                    .heap
                    .iter()
                    .map(|e| (e.instant, e.seq, &e.event))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Pops the events of a [`VirtualEventQueue`] that are due at or before an instant, earliest
/// first. Made by [`VirtualEventQueue::drain_due`].
pub struct DrainDue<'a, E> {
    queue: &'a mut VirtualEventQueue<E>,
    now: VirtualInstant,
}

impl<E> Iterator for DrainDue<'_, E> {
    type Item = (VirtualInstant, E);

    fn next(&mut self) -> Option<(VirtualInstant, E)> {
        self.queue.pop_due(self.now)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.queue.len()))
    }
}

impl<E> FusedIterator for DrainDue<'_, E> {}

impl<E: fmt::Debug> fmt::Debug for DrainDue<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DrainDue")
            .field("now", &self.now)
            .field("queue", &self.queue)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn at(ticks: i64, priority: i64) -> VirtualInstant {
        VirtualInstant::new(ticks, priority)
    }

    #[test]
    fn pops_by_ticks_then_priority() {
        let mut q = VirtualEventQueue::new();
        q.schedule(at(5, 0), "c");
        q.schedule(at(1, 9), "b");
        q.schedule(at(1, 2), "a");
        q.schedule(at(7, -1), "d");
        let order: Vec<_> = q.drain_due(VirtualInstant::INFINITY).collect();
        assert_eq!(
            order,
            [
                (at(1, 2), "a"),
                (at(1, 9), "b"),
                (at(5, 0), "c"),
                (at(7, -1), "d")
            ]
        );
        assert!(q.is_empty());
    }

    #[test]
    fn equal_instants_are_first_in_first_out() {
        let mut q = VirtualEventQueue::new();
        for i in 0..100 {
            q.schedule(at(3, 1), i);
        }
        q.schedule(at(3, 0), -1);
        let popped: Vec<i32> = q.drain_due(at(3, 1)).map(|(_, e)| e).collect();
        let expected: Vec<i32> = core::iter::once(-1).chain(0..100).collect();
        assert_eq!(popped, expected);
    }

    #[test]
    fn pops_only_due_events() {
        let mut q = VirtualEventQueue::new();
        q.schedule(at(10, 0), 'x');
        q.schedule(at(10, 5), 'y');
        q.schedule(at(11, 0), 'z');
        assert_eq!(q.pop_due(at(9, i64::MAX)), None);
        assert_eq!(q.len(), 3);
        // (10,5) is after (10,2): only 'x' is due.
        let due: Vec<_> = q.drain_due(at(10, 2)).collect();
        assert_eq!(due, [(at(10, 0), 'x')]);
        assert_eq!(q.peek_next_instant(), Some(at(10, 5)));
        assert_eq!(q.peek_next(), Some((at(10, 5), &'y')));
        assert_eq!(q.pop_due(at(10, 5)), Some((at(10, 5), 'y')));
        assert_eq!(q.pop_due(at(10, 5)), None);
        assert_eq!(q.pop_next(), Some((at(11, 0), 'z')));
        assert_eq!(q.pop_next(), None);
        assert_eq!(q.peek_next_instant(), None);
    }

    #[test]
    fn infinity_events_are_due_only_at_infinity() {
        let mut q = VirtualEventQueue::new();
        q.schedule(VirtualInstant::INFINITY, ());
        assert_eq!(q.pop_due(at(i64::MAX, i64::MAX - 1)), None);
        assert_eq!(
            q.pop_due(VirtualInstant::INFINITY),
            Some((VirtualInstant::INFINITY, ()))
        );
    }

    #[test]
    fn dropping_drain_early_keeps_the_rest() {
        let mut q = VirtualEventQueue::new();
        for t in 0..5 {
            q.schedule(at(t, 0), t);
        }
        let first_two: Vec<_> = q.drain_due(at(4, 0)).take(2).map(|(_, e)| e).collect();
        assert_eq!(first_two, [0, 1]);
        assert_eq!(q.len(), 3);
        assert_eq!(q.peek_next_instant(), Some(at(2, 0)));
    }

    #[test]
    fn clone_is_independent_and_pops_identically() {
        let mut q = VirtualEventQueue::with_capacity(8);
        q.schedule(at(2, 0), String::from("b1"));
        q.schedule(at(1, 0), String::from("a"));
        q.schedule(at(2, 0), String::from("b2"));
        let mut snapshot = q.clone();

        // Both schedule the same further event at an equal instant: same FIFO slot in both.
        q.schedule(at(2, 0), String::from("b3"));
        snapshot.schedule(at(2, 0), String::from("b3"));
        q.schedule(at(0, 0), String::from("only in original"));

        let original: Vec<_> = q.drain_due(VirtualInstant::INFINITY).collect();
        let copy: Vec<_> = snapshot.drain_due(VirtualInstant::INFINITY).collect();
        assert_eq!(original[0].1, "only in original");
        assert_eq!(original[1..], copy[..]);
        let names: Vec<&str> = copy.iter().map(|(_, e)| e.as_str()).collect();
        assert_eq!(names, ["a", "b1", "b2", "b3"]);
    }

    #[test]
    fn clear_empties_but_keeps_fifo_order_afterwards() {
        let mut q = VirtualEventQueue::default();
        q.schedule(at(1, 0), 1);
        q.clear();
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
        q.schedule(at(1, 0), 2);
        q.schedule(at(1, 0), 3);
        let popped: Vec<_> = q.drain_due(at(1, 0)).map(|(_, e)| e).collect();
        assert_eq!(popped, [2, 3]);
    }

    #[test]
    fn debug_output_shows_length_and_events() {
        let mut q = VirtualEventQueue::new();
        q.schedule(at(1, 2), "e");
        let s = format!("{q:?}");
        assert!(s.contains("len: 1"), "{s}");
        assert!(s.contains("\"e\""), "{s}");
    }
}
