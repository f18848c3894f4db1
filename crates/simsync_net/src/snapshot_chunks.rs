//! Snapshot transfer in chunks: [`split_snapshot`] cuts an encoded world snapshot (opaque bytes
//! here) into [`SnapshotChunk`]s of at most [`SNAPSHOT_CHUNK_BYTES`], and [`SnapshotAssembly`]
//! puts them back together, refusing anything that is not the next chunk of the transfer it
//! expects with a typed [`ChunkError`] ([wire rule 10](crate::rules)). Pure data, no I/O.
//!
//! Chunks travel on the reliable, ordered [`NetChannel::Snapshot`](crate::NetChannel::Snapshot):
//! an honest sender's chunks arrive each once and in order, so a duplicate, a gap or a chunk of
//! another transfer is a faulty or hostile sender and ends the transfer.

use serde::{Deserialize, Serialize};

/// Payload bytes of one chunk, at most (16 KiB): well under the codec's 64 KiB message limit
/// ([`crate::MAX_MESSAGE_BYTES`]) and a small part of the snapshot channel's send-queue memory
/// ([`crate::SNAPSHOT_MEMORY_BYTES`]), so a sender can keep many chunks in flight; renet cuts
/// each into 1,200-byte slices.
pub const SNAPSHOT_CHUNK_BYTES: usize = 16 * 1024;

/// The default largest snapshot accepted, in bytes (32 MiB); a transfer announcing more is
/// refused before anything is allocated for it.
pub const DEFAULT_MAX_SNAPSHOT_BYTES: usize = 32 * 1024 * 1024;

/// One chunk of an encoded snapshot. Every chunk repeats the transfer's identity (request id,
/// tick, checksum, total size) so a chunk of another transfer is recognised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotChunk {
    /// The transfer: the relay's request id (a buddy answers with the id it was asked with; the
    /// relay forwards with the same id).
    pub request: u32,
    /// The verified tick the snapshot holds.
    pub tick: i32,
    /// The verified checksum at `tick` the sender states (the snapshot header holds it too).
    pub checksum: u64,
    /// Bytes of the whole encoded snapshot.
    pub total_bytes: u32,
    /// This chunk's position, from 0.
    pub index: u32,
    /// Chunks of the transfer: `total_bytes` divided by [`SNAPSHOT_CHUNK_BYTES`], rounded up.
    pub count: u32,
    /// The chunk's bytes: [`SNAPSHOT_CHUNK_BYTES`] except in the last chunk.
    pub bytes: Vec<u8>,
}

/// Why a chunk was refused. Each is counted by [`ChunkRejections`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// No transfer is expected from this sender (no request, or it ended).
    #[error("snapshot chunk {index} of request {request} was not asked for")]
    Unasked {
        /// The chunk's request id.
        request: u32,
        /// The chunk's index.
        index: u32,
    },
    /// The chunk belongs to another transfer than the one expected.
    #[error("snapshot chunk of request {found}, expected request {expected}")]
    Foreign {
        /// The request id expected.
        expected: u32,
        /// The chunk's request id.
        found: u32,
    },
    /// The snapshot announced is larger than the limit (refused before allocating), empty, or
    /// longer than `u32::MAX` bytes on the sending side.
    #[error("snapshot of {size} bytes refused: the limit is {limit} bytes (and at least 1)")]
    TooLarge {
        /// The announced size in bytes.
        size: u64,
        /// The limit in bytes.
        limit: usize,
    },
    /// A chunk whose tick, checksum, size or count differ from the transfer's first chunk, or
    /// whose count does not match its total size.
    #[error("snapshot chunk {index} does not match its transfer (tick, checksum, size or count)")]
    Inconsistent {
        /// The chunk's index.
        index: u32,
    },
    /// A chunk already received.
    #[error("snapshot chunk {index} received twice")]
    Duplicate {
        /// The chunk's index.
        index: u32,
    },
    /// A chunk after a gap: chunks come in order on a reliable ordered channel, so one is
    /// missing.
    #[error("snapshot chunk {found} arrived, expected chunk {expected}")]
    OutOfOrder {
        /// The next index expected.
        expected: u32,
        /// The chunk's index.
        found: u32,
    },
    /// An index at or past the transfer's chunk count.
    #[error("snapshot chunk {index} out of range: the transfer has {count} chunks")]
    OutOfRange {
        /// The chunk's index.
        index: u32,
        /// The transfer's chunk count.
        count: u32,
    },
    /// A chunk whose length is not the one its position requires.
    #[error("snapshot chunk {index} holds {size} bytes, expected {expected}")]
    WrongLength {
        /// The chunk's index.
        index: u32,
        /// Its length in bytes.
        size: usize,
        /// The length its position requires.
        expected: usize,
    },
}

/// Refused chunks, by reason (see [`ChunkError`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, bevy::reflect::Reflect)]
pub struct ChunkRejections {
    /// [`ChunkError::Unasked`].
    pub unasked: u64,
    /// [`ChunkError::Foreign`].
    pub foreign: u64,
    /// [`ChunkError::TooLarge`].
    pub too_large: u64,
    /// [`ChunkError::Inconsistent`] and [`ChunkError::WrongLength`].
    pub inconsistent: u64,
    /// [`ChunkError::Duplicate`].
    pub duplicate: u64,
    /// [`ChunkError::OutOfOrder`] and [`ChunkError::OutOfRange`].
    pub out_of_order: u64,
}

impl ChunkRejections {
    /// Counts one refusal.
    pub fn record(&mut self, error: &ChunkError) {
        match error {
            ChunkError::Unasked { .. } => self.unasked += 1,
            ChunkError::Foreign { .. } => self.foreign += 1,
            ChunkError::TooLarge { .. } => self.too_large += 1,
            ChunkError::Inconsistent { .. } | ChunkError::WrongLength { .. } => {
                self.inconsistent += 1;
            }
            ChunkError::Duplicate { .. } => self.duplicate += 1,
            ChunkError::OutOfOrder { .. } | ChunkError::OutOfRange { .. } => {
                self.out_of_order += 1;
            }
        }
    }

    /// Every refusal.
    pub fn total(&self) -> u64 {
        self.unasked
            + self.foreign
            + self.too_large
            + self.inconsistent
            + self.duplicate
            + self.out_of_order
    }
}

/// The chunks of `bytes`, a snapshot of `tick` with `checksum`, for transfer `request`: in
/// order, each [`SNAPSHOT_CHUNK_BYTES`] long but the last.
///
/// # Errors
///
/// [`ChunkError::TooLarge`] for an empty snapshot, one above `max_bytes`, or one above
/// `u32::MAX` bytes.
pub fn split_snapshot(
    request: u32,
    tick: i32,
    checksum: u64,
    bytes: &[u8],
    max_bytes: usize,
) -> Result<Vec<SnapshotChunk>, ChunkError> {
    let too_large = ChunkError::TooLarge {
        size: bytes.len() as u64,
        limit: max_bytes,
    };
    if bytes.is_empty() || bytes.len() > max_bytes {
        return Err(too_large);
    }
    let total_bytes = u32::try_from(bytes.len()).map_err(|_| too_large.clone())?;
    let count = u32::try_from(bytes.len().div_ceil(SNAPSHOT_CHUNK_BYTES)).map_err(|_| too_large)?;
    Ok(bytes
        .chunks(SNAPSHOT_CHUNK_BYTES)
        .enumerate()
        .map(|(index, part)| SnapshotChunk {
            request,
            tick,
            checksum,
            total_bytes,
            index: index as u32,
            count,
            bytes: part.to_vec(),
        })
        .collect())
}

/// A complete snapshot put back together by [`SnapshotAssembly`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssembledSnapshot {
    /// The transfer's request id.
    pub request: u32,
    /// The tick the sender states.
    pub tick: i32,
    /// The checksum the sender states.
    pub checksum: u64,
    /// The encoded snapshot.
    pub bytes: Vec<u8>,
}

/// Reassembles the chunks of one expected transfer ([`split_snapshot`]'s inverse): chunk 0
/// first (its size is checked against the limit before anything is allocated), then every
/// next chunk in order. The first refused chunk ends the transfer (the caller drops the
/// assembly and may ask someone else); [`AssembledSnapshot`] comes back with the last chunk.
#[derive(Debug, Clone)]
pub struct SnapshotAssembly {
    request: u32,
    max_bytes: usize,
    /// The first chunk's identity: (tick, checksum, total bytes, count).
    first: Option<(i32, u64, u32, u32)>,
    next: u32,
    bytes: Vec<u8>,
}

impl SnapshotAssembly {
    /// Expects the chunks of transfer `request`, of at most `max_bytes` in all.
    pub fn new(request: u32, max_bytes: usize) -> Self {
        Self {
            request,
            max_bytes,
            first: None,
            next: 0,
            bytes: Vec::new(),
        }
    }

    /// The transfer expected.
    pub fn request(&self) -> u32 {
        self.request
    }

    /// Chunks received so far.
    pub fn received_chunks(&self) -> u32 {
        self.next
    }

    /// Bytes received so far.
    pub fn received_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Takes the next chunk; the whole snapshot once the last one arrived.
    ///
    /// # Errors
    ///
    /// The [`ChunkError`] of the refused chunk: another transfer ([`ChunkError::Foreign`]),
    /// a size above the limit ([`ChunkError::TooLarge`]), a chunk that contradicts the first
    /// ([`ChunkError::Inconsistent`], [`ChunkError::WrongLength`]), a repeat
    /// ([`ChunkError::Duplicate`]), a gap ([`ChunkError::OutOfOrder`]) or an index past the
    /// end ([`ChunkError::OutOfRange`]).
    pub fn accept(
        &mut self,
        chunk: SnapshotChunk,
    ) -> Result<Option<AssembledSnapshot>, ChunkError> {
        if chunk.request != self.request {
            return Err(ChunkError::Foreign {
                expected: self.request,
                found: chunk.request,
            });
        }
        let identity = (chunk.tick, chunk.checksum, chunk.total_bytes, chunk.count);
        let (_, _, total, count) = match self.first {
            Some(first) if first != identity => {
                return Err(ChunkError::Inconsistent { index: chunk.index });
            }
            Some(first) => first,
            None => self.check_first(&chunk)?,
        };
        if chunk.index >= count {
            return Err(ChunkError::OutOfRange {
                index: chunk.index,
                count,
            });
        }
        if chunk.index < self.next {
            return Err(ChunkError::Duplicate { index: chunk.index });
        }
        if chunk.index > self.next {
            return Err(ChunkError::OutOfOrder {
                expected: self.next,
                found: chunk.index,
            });
        }
        let offset = chunk.index as usize * SNAPSHOT_CHUNK_BYTES;
        let expected = (total as usize - offset).min(SNAPSHOT_CHUNK_BYTES);
        if chunk.bytes.len() != expected {
            return Err(ChunkError::WrongLength {
                index: chunk.index,
                size: chunk.bytes.len(),
                expected,
            });
        }
        if self.first.is_none() {
            self.first = Some(identity);
        }
        self.grow_for(chunk.bytes.len(), total as usize);
        self.bytes.extend_from_slice(&chunk.bytes);
        self.next += 1;
        if self.next < count {
            return Ok(None);
        }
        Ok(Some(AssembledSnapshot {
            request: self.request,
            tick: chunk.tick,
            checksum: chunk.checksum,
            bytes: std::mem::take(&mut self.bytes),
        }))
    }

    /// Makes room for `incoming` more bytes of a `total`-byte transfer: the buffer doubles up to
    /// the total, so it never holds more than twice the bytes received (and never more than the
    /// total): an announced size is a promise, not bytes present ([wire rule 10](crate::rules)).
    fn grow_for(&mut self, incoming: usize, total: usize) {
        let needed = self.bytes.len() + incoming;
        if needed <= self.bytes.capacity() {
            return;
        }
        let target = (self.bytes.len() * 2).max(needed).min(total.max(needed));
        self.bytes.reserve_exact(target - self.bytes.len());
    }

    /// The identity of a transfer's first chunk, once its size and count are valid.
    fn check_first(&self, chunk: &SnapshotChunk) -> Result<(i32, u64, u32, u32), ChunkError> {
        let total = chunk.total_bytes as usize;
        if total == 0 || total > self.max_bytes {
            return Err(ChunkError::TooLarge {
                size: u64::from(chunk.total_bytes),
                limit: self.max_bytes,
            });
        }
        if chunk.count as usize != total.div_ceil(SNAPSHOT_CHUNK_BYTES) {
            return Err(ChunkError::Inconsistent { index: chunk.index });
        }
        Ok((chunk.tick, chunk.checksum, chunk.total_bytes, chunk.count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    fn assemble(chunks: Vec<SnapshotChunk>) -> Result<Option<AssembledSnapshot>, ChunkError> {
        let mut assembly = SnapshotAssembly::new(5, DEFAULT_MAX_SNAPSHOT_BYTES);
        let mut last = None;
        for chunk in chunks {
            last = assembly.accept(chunk)?;
        }
        Ok(last)
    }

    #[test]
    fn a_split_snapshot_reassembles_exactly() {
        for len in [
            1,
            SNAPSHOT_CHUNK_BYTES - 1,
            SNAPSHOT_CHUNK_BYTES,
            3 * SNAPSHOT_CHUNK_BYTES + 17,
        ] {
            let bytes = snapshot(len);
            let chunks =
                split_snapshot(5, 200, 0xABCD, &bytes, DEFAULT_MAX_SNAPSHOT_BYTES).expect("splits");
            assert_eq!(chunks.len(), len.div_ceil(SNAPSHOT_CHUNK_BYTES));
            assert!(chunks.iter().all(|c| c.bytes.len() <= SNAPSHOT_CHUNK_BYTES));
            let whole = assemble(chunks).expect("valid").expect("complete");
            assert_eq!(
                (whole.request, whole.tick, whole.checksum),
                (5, 200, 0xABCD)
            );
            assert_eq!(whole.bytes, bytes, "{len}");
        }
    }

    #[test]
    fn an_encoded_chunk_fits_one_codec_message() {
        let bytes = snapshot(SNAPSHOT_CHUNK_BYTES * 2);
        let chunks = split_snapshot(u32::MAX, i32::MAX, u64::MAX, &bytes, usize::MAX).expect("ok");
        let encoded = crate::encode(&crate::ClientMessage::session(
            crate::MatchId(u32::MAX),
            crate::SessionClientMessage::SnapshotChunk(chunks[0].clone()),
        ))
        .expect("encodes");
        assert!(
            encoded.len() < crate::MAX_MESSAGE_BYTES / 3,
            "{}",
            encoded.len()
        );
        assert!(encoded.len() < crate::SNAPSHOT_MEMORY_BYTES / 64);
    }

    #[test]
    fn an_empty_or_oversized_snapshot_is_not_split() {
        assert_eq!(
            split_snapshot(1, 1, 1, &[], 10),
            Err(ChunkError::TooLarge { size: 0, limit: 10 })
        );
        assert_eq!(
            split_snapshot(1, 1, 1, &[0; 11], 10),
            Err(ChunkError::TooLarge {
                size: 11,
                limit: 10
            })
        );
    }

    #[test]
    fn a_transfer_announcing_more_than_the_limit_is_refused_at_its_first_chunk() {
        let mut assembly = SnapshotAssembly::new(5, 1_000);
        let chunk = SnapshotChunk {
            request: 5,
            tick: 1,
            checksum: 1,
            total_bytes: u32::MAX,
            index: 0,
            count: u32::MAX,
            bytes: vec![0; 10],
        };
        assert_eq!(
            assembly.accept(chunk),
            Err(ChunkError::TooLarge {
                size: u64::from(u32::MAX),
                limit: 1_000
            })
        );
        assert_eq!(assembly.received_bytes(), 0);
    }

    #[test]
    fn duplicate_out_of_order_out_of_range_and_foreign_chunks_are_refused() {
        let chunks = split_snapshot(5, 9, 3, &snapshot(3 * SNAPSHOT_CHUNK_BYTES), usize::MAX)
            .expect("splits");
        let mut assembly = SnapshotAssembly::new(5, DEFAULT_MAX_SNAPSHOT_BYTES);
        assert_eq!(assembly.accept(chunks[0].clone()), Ok(None));
        assert_eq!(
            assembly.accept(chunks[0].clone()),
            Err(ChunkError::Duplicate { index: 0 })
        );
        assert_eq!(
            assembly.accept(chunks[2].clone()),
            Err(ChunkError::OutOfOrder {
                expected: 1,
                found: 2
            })
        );
        let mut past = chunks[2].clone();
        past.index = 3;
        assert_eq!(
            assembly.accept(past),
            Err(ChunkError::OutOfRange { index: 3, count: 3 })
        );
        let mut foreign = chunks[1].clone();
        foreign.request = 6;
        assert_eq!(
            assembly.accept(foreign),
            Err(ChunkError::Foreign {
                expected: 5,
                found: 6
            })
        );
        let mut other_tick = chunks[1].clone();
        other_tick.tick = 10;
        assert_eq!(
            assembly.accept(other_tick),
            Err(ChunkError::Inconsistent { index: 1 })
        );
        let mut short = chunks[1].clone();
        short.bytes.pop();
        assert_eq!(
            assembly.accept(short),
            Err(ChunkError::WrongLength {
                index: 1,
                size: SNAPSHOT_CHUNK_BYTES - 1,
                expected: SNAPSHOT_CHUNK_BYTES
            })
        );
        // Refusals change nothing: the honest rest still completes it.
        assert_eq!(assembly.received_chunks(), 1);
        assert_eq!(assembly.accept(chunks[1].clone()), Ok(None));
        assert!(matches!(assembly.accept(chunks[2].clone()), Ok(Some(_))));
    }

    #[test]
    fn a_first_chunk_whose_count_contradicts_its_size_is_refused() {
        let mut chunk =
            split_snapshot(5, 9, 3, &snapshot(100), usize::MAX).expect("splits")[0].clone();
        chunk.count = 2;
        assert_eq!(
            SnapshotAssembly::new(5, 1_000).accept(chunk),
            Err(ChunkError::Inconsistent { index: 0 })
        );
    }

    #[test]
    fn rejections_are_counted_by_kind() {
        let mut counts = ChunkRejections::default();
        for error in [
            ChunkError::Unasked {
                request: 1,
                index: 0,
            },
            ChunkError::Duplicate { index: 1 },
            ChunkError::OutOfOrder {
                expected: 1,
                found: 4,
            },
            ChunkError::OutOfRange { index: 9, count: 2 },
            ChunkError::WrongLength {
                index: 0,
                size: 1,
                expected: 2,
            },
        ] {
            counts.record(&error);
        }
        assert_eq!(counts.unasked, 1);
        assert_eq!(counts.duplicate, 1);
        assert_eq!(counts.out_of_order, 2);
        assert_eq!(counts.inconsistent, 1);
        assert_eq!(counts.total(), 5);
    }
}
