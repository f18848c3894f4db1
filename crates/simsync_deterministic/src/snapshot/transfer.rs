//! The client's side of snapshot transfers ([late join](crate::rules#late-join-and-rejoin-from-a-snapshot)):
//! as a buddy it keeps the relay's request until its verified world is captured, then sends
//! the chunks within the snapshot channel's room; as a joiner it reassembles the chunks the
//! relay forwards and holds the confirmed sets that arrive before the snapshot is loaded.
//! Pure data: [`SnapshotExchange`], held by the relay client; the capture and the load happen
//! outside the session update, in the late-join exchange (`late_join/exchange.rs`).

use std::collections::VecDeque;

use bevy::reflect::Reflect;
use simsync_net::{
    AssembledSnapshot, ChunkError, ChunkRejections, InputSet, SnapshotAssembly, SnapshotChunk,
};

use crate::tick::Tick;

/// Confirmed-set messages held while a snapshot is on its way, at most.
const HELD_MESSAGES: usize = 512;

/// The relay asked this client for a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BuddyRequest {
    /// The request id.
    pub request: u32,
    /// The oldest verified tick the snapshot may hold.
    pub min_tick: Tick,
    /// The largest snapshot the relay accepts.
    pub max_bytes: usize,
}

/// Snapshot counters of a client (part of [`RelayClientStats`](crate::RelayClientStats)).
#[derive(Debug, Clone, Default, PartialEq, Reflect)]
pub struct ClientSnapshotStats {
    /// Snapshots this client served as a buddy.
    pub served: u64,
    /// Snapshot requests this client could not serve.
    pub unavailable: u64,
    /// Snapshots received and loaded.
    pub loaded: u64,
    /// Snapshots received and refused ([`SnapshotRejected`](crate::SnapshotRejected)).
    pub refused: u64,
    /// The tick of the last snapshot loaded.
    pub loaded_tick: Option<Tick>,
    /// Chunks from the relay refused, by reason.
    #[reflect(ignore)]
    pub rejected_chunks: ChunkRejections,
}

/// A client's snapshot transfers in both directions.
#[derive(Debug, Default)]
pub(crate) struct SnapshotExchange {
    /// The relay's request not served yet.
    request: Option<BuddyRequest>,
    /// Chunks to send (the buddy's answer), oldest first.
    outgoing: VecDeque<SnapshotChunk>,
    /// The snapshot coming from the relay.
    incoming: Option<SnapshotAssembly>,
    /// A snapshot complete and not loaded yet.
    arrived: Option<AssembledSnapshot>,
    /// Confirmed sets received while a snapshot is coming: (first tick, sets).
    held: VecDeque<(Tick, Vec<InputSet>)>,
    pub(crate) stats: ClientSnapshotStats,
}

impl SnapshotExchange {
    /// The relay asks for a snapshot (a newer request replaces an older one and its chunks not
    /// sent yet).
    pub(crate) fn on_request(&mut self, request: BuddyRequest) {
        self.request = Some(request);
        self.outgoing.clear();
    }

    /// The request to serve once the verified tick reaches its `min_tick` (kept until then).
    pub(crate) fn due_request(&self, verified_tick: Tick) -> Option<BuddyRequest> {
        self.request.filter(|r| verified_tick >= r.min_tick)
    }

    /// The request was answered: `chunks` go out (none: it is unavailable).
    pub(crate) fn answer(&mut self, request: u32, chunks: Vec<SnapshotChunk>) {
        if self.request.is_some_and(|r| r.request == request) {
            self.request = None;
            if chunks.is_empty() {
                self.stats.unavailable += 1;
            } else {
                self.stats.served += 1;
            }
            self.outgoing = chunks.into();
        }
    }

    /// The next chunk to send, if any; put it back with [`Self::unsend`] if the channel is full.
    pub(crate) fn next_chunk(&mut self) -> Option<SnapshotChunk> {
        self.outgoing.pop_front()
    }

    /// Puts back a chunk that found no room.
    pub(crate) fn unsend(&mut self, chunk: SnapshotChunk) {
        self.outgoing.push_front(chunk);
    }

    /// Whether a snapshot from the relay is on its way or waits to be loaded.
    pub(crate) fn awaiting(&self) -> bool {
        self.incoming.is_some() || self.arrived.is_some()
    }

    /// A chunk from the relay: chunk 0 starts a transfer (replacing one under way); the others
    /// must be the next of the transfer under way.
    ///
    /// # Errors
    /// The chunk's [`ChunkError`] (also counted); a transfer it breaks is dropped.
    pub(crate) fn on_chunk(
        &mut self,
        chunk: SnapshotChunk,
        max_bytes: usize,
    ) -> Result<(), ChunkError> {
        if chunk.index == 0 {
            self.incoming = Some(SnapshotAssembly::new(chunk.request, max_bytes));
        }
        let result = match self.incoming.as_mut() {
            None => Err(ChunkError::Unasked {
                request: chunk.request,
                index: chunk.index,
            }),
            Some(assembly) => assembly.accept(chunk),
        };
        match result {
            Ok(None) => Ok(()),
            Ok(Some(snapshot)) => {
                self.incoming = None;
                self.arrived = Some(snapshot);
                Ok(())
            }
            Err(error) => {
                self.stats.rejected_chunks.record(&error);
                if !matches!(error, ChunkError::Unasked { .. }) {
                    self.incoming = None;
                }
                Err(error)
            }
        }
    }

    /// Holds confirmed sets that arrive while a snapshot is coming (the oldest are dropped past
    /// [`HELD_MESSAGES`]; the relay resends what the client then misses).
    pub(crate) fn hold(&mut self, first_tick: Tick, sets: Vec<InputSet>) {
        self.held.push_back((first_tick, sets));
        while self.held.len() > HELD_MESSAGES {
            self.held.pop_front();
        }
    }

    /// The complete snapshot, to load.
    pub(crate) fn take_arrived(&mut self) -> Option<AssembledSnapshot> {
        self.arrived.take()
    }

    /// The sets held while the snapshot came, to apply once it is loaded.
    pub(crate) fn take_held(&mut self) -> Vec<(Tick, Vec<InputSet>)> {
        self.held.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use simsync_net::{SNAPSHOT_CHUNK_BYTES, split_snapshot};

    use super::*;

    #[test]
    fn a_request_waits_for_its_tick_and_is_answered_once() {
        let mut exchange = SnapshotExchange::default();
        exchange.on_request(BuddyRequest {
            request: 4,
            min_tick: 100,
            max_bytes: 1 << 20,
        });
        assert_eq!(exchange.due_request(99), None);
        assert_eq!(exchange.due_request(100).map(|r| r.request), Some(4));
        let chunks = split_snapshot(4, 100, 9, &[1; 40_000], 1 << 20).expect("splits");
        exchange.answer(3, chunks.clone());
        assert!(exchange.next_chunk().is_none(), "another request's answer");
        exchange.answer(4, chunks);
        assert_eq!(exchange.due_request(200), None);
        assert_eq!(exchange.stats.served, 1);
        let first = exchange.next_chunk().expect("chunk");
        exchange.unsend(first.clone());
        assert_eq!(exchange.next_chunk(), Some(first));
    }

    #[test]
    fn the_joiner_reassembles_holds_sets_and_drops_a_broken_transfer() {
        let mut exchange = SnapshotExchange::default();
        let bytes = vec![3u8; 2 * SNAPSHOT_CHUNK_BYTES + 5];
        let chunks = split_snapshot(8, 300, 1, &bytes, usize::MAX).expect("splits");
        assert!(matches!(
            exchange.on_chunk(chunks[1].clone(), 1 << 20),
            Err(ChunkError::Unasked { .. })
        ));
        exchange
            .on_chunk(chunks[0].clone(), 1 << 20)
            .expect("first");
        assert!(exchange.awaiting());
        exchange.hold(301, vec![InputSet::default()]);
        assert!(matches!(
            exchange.on_chunk(chunks[2].clone(), 1 << 20),
            Err(ChunkError::OutOfOrder { .. })
        ));
        assert!(!exchange.awaiting(), "the broken transfer is dropped");
        for chunk in chunks {
            exchange.on_chunk(chunk, 1 << 20).expect("in order");
        }
        let arrived = exchange.take_arrived().expect("complete");
        assert_eq!((arrived.tick, arrived.bytes), (300, bytes));
        assert_eq!(exchange.take_held().len(), 1);
        assert_eq!(exchange.stats.rejected_chunks.total(), 2);
    }
}
