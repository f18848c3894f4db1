//! [`StateBatch`]: many bodies' states in one message, quantized, each body absolute or as a
//! delta against a state the receiver acknowledged
//! ([ownership rules 15, 16 and 20](crate::rules#rule-15--one-state-batch-per-frame)).
//!
//! [`StateBatch`] is what a batch means: the sender's bodies and their states. [`WireBatch`]
//! is what travels: the same batch with the sender's acknowledgement of what it received
//! ([`BatchAck`]) and each body as an [`Entry`] — its [`QuantizedState`], or a [`Delta`] from a
//! baseline state ([`choose_entry`]: only where that is smaller). The format and error bounds
//! are on [`WireBatch`]; resolving deltas against received states is
//! [`ReceivedStates`](crate::ReceivedStates)' job.

use bevy::math::{Quat, Vec3};
use bevy::platform::collections::HashMap;
use simsync_net::{pack_smallest_three, smallest_three_square_sum, unpack_smallest_three};
use thiserror::Error;

use crate::body::BodyState;
use crate::priority::BodyId;

/// Position step, m: 1 mm.
pub const POSITION_STEP: f32 = 0.001;
/// Velocity step, m/s (linear) and rad/s (angular): 1/256.
pub const VELOCITY_STEP: f32 = 1.0 / 256.0;
/// Largest absolute quantized position per axis: 10⁶ m in millimetres.
pub(crate) const MAX_POSITION_Q: i64 = 1_000_000_000;
/// Largest absolute quantized velocity per axis: 4,096 m/s (or rad/s) in 1/256 steps. Faster
/// bodies are sent at this speed.
const MAX_VELOCITY_Q: i64 = 1 << 20;
/// Most bodies one batch may carry; a decoder refuses more.
pub const MAX_BATCH_BODIES: usize = 8_192;
/// Most bytes one encoded batch may have (below renet's 64 KiB message limit); a decoder
/// refuses more, and senders lay batches out within it.
pub const MAX_BATCH_BYTES: usize = 60 * 1024;
/// Largest body id a batch can carry (the id gap shares its varint with three flag bits).
pub const MAX_BATCH_BODY_ID: u64 = u64::MAX >> 3;
/// Furthest back a delta's baseline may be, in batches of the same sender (64 s at 64 batches
/// a second); a decoder refuses more ([`BatchError::BaselineOffset`]), senders send such a
/// body absolute.
pub const MAX_BASELINE_AGO: u32 = 4_096;

/// Why a batch could not be encoded or decoded. Decoding never panics: any byte string is a
/// batch or one of these.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// The bytes end inside a field.
    #[error("state batch truncated")]
    Truncated,
    /// More bytes than [`MAX_BATCH_BYTES`].
    #[error("state batch of {bytes} bytes is over the {MAX_BATCH_BYTES}-byte limit")]
    Oversized {
        /// The batch's length.
        bytes: usize,
    },
    /// More bodies than [`MAX_BATCH_BODIES`].
    #[error("state batch of {count} bodies is over the {MAX_BATCH_BODIES}-body limit")]
    TooManyBodies {
        /// The count given.
        count: u64,
    },
    /// Bytes left after the last entry.
    #[error("{bytes} bytes after the end of the state batch")]
    TrailingBytes {
        /// How many.
        bytes: usize,
    },
    /// A varint longer than its type, or a field out of its type's range.
    #[error("malformed state batch: {0}")]
    Malformed(&'static str),
    /// A body id past [`MAX_BATCH_BODY_ID`], or ids not strictly increasing (encoding).
    #[error("state batch body ids out of order or above {MAX_BATCH_BODY_ID}")]
    BodyIds,
    /// A quantized value (or a delta of one) outside its range (decoding), or a state that is
    /// not finite (encoding).
    #[error("{body}: {field} out of range in a state batch")]
    OutOfRange {
        /// The body.
        body: BodyId,
        /// Which field.
        field: &'static str,
    },
    /// A delta entry whose baseline is 0 batches back (the batch itself) or more than
    /// [`MAX_BASELINE_AGO`].
    #[error("{body}: delta baseline {ago} batches back, outside 1..={MAX_BASELINE_AGO}")]
    BaselineOffset {
        /// The body.
        body: BodyId,
        /// The offset given.
        ago: u64,
    },
    /// A delta entry given to [`StateBatch::decode`], which has no baselines to resolve it
    /// (receivers decode a [`WireBatch`] and resolve it with
    /// [`ReceivedStates`](crate::ReceivedStates)).
    #[error("{body}: delta entry without baselines to resolve it")]
    NeedsBaseline {
        /// The body.
        body: BodyId,
    },
}

/// Many bodies' states from one sender in one message. `seq` numbers the sender's batches
/// (wrapping `u32`, compared with [`is_newer_batch`]); `focus` is the sender's interest centre
/// (its avatar, [rule 19](crate::rules#rule-19--interest-radius)), if any. On the wire it is a
/// [`WireBatch`] ([`to_wire`](Self::to_wire)).
///
/// # Quantization error
/// At most 0.5 mm per position axis, 1/512 m/s per linear and 1/512 rad/s per angular velocity
/// axis, and about 6 × 10⁻⁴ rad of rotation ([`quantize`]); a delta entry reconstructs the very
/// same quantized values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StateBatch {
    /// The sender's batch number.
    pub seq: u32,
    /// The sender's interest centre, m.
    pub focus: Option<Vec3>,
    /// The bodies, ids strictly increasing, with their states.
    pub bodies: Vec<(BodyId, BodyState)>,
}

/// A receiver's acknowledgement of the batches it received from one sender
/// ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)): the newest batch
/// number received, and in bit `i` of `earlier` whether batch `newest − 1 − i` was received
/// too — 33 batches in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchAck {
    /// The newest batch number received.
    pub newest: u32,
    /// Bit `i`: batch `newest − 1 − i` was received.
    pub earlier: u32,
}

impl BatchAck {
    /// The batch numbers acknowledged, newest first.
    pub fn seqs(&self) -> impl Iterator<Item = u32> + '_ {
        let earlier = (0..32u32)
            .filter(|i| self.earlier & (1 << i) != 0)
            .map(|i| self.newest.wrapping_sub(1 + i));
        core::iter::once(self.newest).chain(earlier)
    }
}

/// How a delta carries the rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotationDelta {
    /// The differences of the three sent 12-bit components (the largest component's index is
    /// the baseline's).
    Components([i64; 3]),
    /// The packed rotation itself (the largest component's index changed), 5 bytes.
    Absolute(u64),
}

/// A body's quantized state as differences from a baseline state the receiver acknowledged
/// ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)): position in
/// millimetres, rotation components in 12-bit steps, velocities in 1/256 steps, all of
/// [`QuantizedState`]'s integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta {
    /// The baseline's batch: this many batches before the one carrying the delta
    /// (1..=[`MAX_BASELINE_AGO`]).
    pub ago: u32,
    /// Position difference, mm.
    pub position: [i64; 3],
    /// Rotation difference, or the rotation.
    pub rotation: RotationDelta,
    /// Linear velocity difference, 1/256 m/s.
    pub linear: [i64; 3],
    /// Angular velocity difference, 1/256 rad/s.
    pub angular: [i64; 3],
}

/// One body of a [`WireBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// The whole quantized state.
    Absolute(QuantizedState),
    /// Differences from a baseline.
    Delta(Delta),
}

/// A batch as it travels: a [`StateBatch`] with the sender's acknowledgement of the batches it
/// received from the receiver, each body an [`Entry`].
///
/// # Format
/// All integers are LEB128 varints; signed ones are zigzag-encoded first.
///
/// | part | encoding |
/// |---|---|
/// | head | varint `count << 2 \| has_ack << 1 \| has_focus`; `count` at most [`MAX_BATCH_BODIES`] |
/// | `seq` | varint `u32`: the sender's batch number |
/// | focus | 3 × zigzag varint, millimetres (only with `has_focus`) |
/// | ack | varint `newest`, then varint `!earlier` (the batches missing: 1 byte when none is); only with `has_ack` |
/// | entries | `count` times, body ids strictly increasing |
///
/// Every entry starts with a varint `gap << 3 | delta << 2 | has_linear << 1 | has_angular`
/// (`gap` = id − previous id − 1, the first entry's previous id counting as −1).
///
/// An absolute entry (`delta` = 0): the position as 3 × zigzag varint millimetres, the
/// rotation in 5 bytes ("smallest three": 2 bits for the largest component's index, 3 × 12
/// bits, 2 spare bits that must be 0), then the linear velocity (1/256 m/s) and angular
/// velocity (1/256 rad/s) as 3 × zigzag varint each, each only if non-zero after quantization.
/// A resting body costs about 12 bytes, a moving one within 8 m of the origin at under 32 m/s
/// about 18–24.
///
/// A delta entry (`delta` = 1, the two low bits 0): a flag byte — bit 0 position, bit 1
/// rotation components, bit 2 rotation absolute (not with bit 1), bit 3 linear velocity, bit 4
/// angular velocity, each present only if it differs from the baseline; bits 5–7 the baseline's
/// offset `ago` in batches when 1–7, or 0 with `ago` following as a varint — then each present
/// part: 3 × zigzag varint differences (the rotation's of its three 12-bit components, or its 5
/// bytes when its largest component changed or the differences would take 5 bytes or more). A body equal to its baseline costs its head and
/// the flag byte (and the `ago` varint beyond 7 batches).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WireBatch {
    /// The sender's batch number.
    pub seq: u32,
    /// The sender's interest centre, m.
    pub focus: Option<Vec3>,
    /// What the sender received from the receiver.
    pub ack: Option<BatchAck>,
    /// The bodies, ids strictly increasing.
    pub entries: Vec<(BodyId, Entry)>,
}

/// Whether batch number `seq` was sent after `last` (serial-number arithmetic over `u32`: 1 to
/// 2³¹ − 1 steps ahead).
#[inline]
pub const fn is_newer_batch(seq: u32, last: u32) -> bool {
    let ahead = seq.wrapping_sub(last);
    ahead != 0 && ahead < 0x8000_0000
}

/// `state` as a receiver of a batch gets it: every field rounded to its wire step. A batch
/// carries exactly these values, so `quantize(s)` round-trips unchanged.
pub fn quantize(state: &BodyState) -> BodyState {
    QuantizedState::new(state).to_state()
}

/// The worst encoded size of one absolute entry for `body` in `state`, bytes (the id counted
/// as if it were the first of the batch). The tests' bound on an encoded entry.
#[cfg(test)]
pub fn entry_size_bound(body: BodyId, state: &BodyState) -> usize {
    Entry::Absolute(QuantizedState::new(state)).size(body.0.min(MAX_BATCH_BODY_ID))
}

/// The worst encoded size of `body`'s entry in batch `seq` with `baseline` (its batch number
/// and state, if the receiver acknowledged one), as [`choose_entry`] picks it: what the budget
/// reserves before the batch is laid out.
pub fn entry_size_with(
    body: BodyId,
    state: &BodyState,
    seq: u32,
    baseline: Option<(u32, QuantizedState)>,
) -> usize {
    let gap = body.0.min(MAX_BATCH_BODY_ID);
    choose_entry(gap, QuantizedState::new(state), seq, baseline).size(gap)
}

/// The entry for `state` at id gap `gap` in batch `seq`: a [`Delta`] from `baseline` (its batch
/// number and state) where that is strictly smaller than the absolute entry and the baseline is
/// 1..=[`MAX_BASELINE_AGO`] batches back, else absolute
/// ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)).
pub fn choose_entry(
    gap: u64,
    state: QuantizedState,
    seq: u32,
    baseline: Option<(u32, QuantizedState)>,
) -> Entry {
    choose_entry_sized(gap, state, seq, baseline).0
}

/// [`choose_entry`] and the chosen entry's [size](Entry::size) at `gap`.
pub(crate) fn choose_entry_sized(
    gap: u64,
    state: QuantizedState,
    seq: u32,
    baseline: Option<(u32, QuantizedState)>,
) -> (Entry, usize) {
    let absolute = Entry::Absolute(state);
    let absolute_size = absolute.size(gap);
    baseline
        .and_then(|(base_seq, base)| {
            smaller_delta(gap, &state, seq, (base_seq, &base), absolute_size)
        })
        .unwrap_or((absolute, absolute_size))
}

/// The delta entry of `state` in batch `seq` against `base` (the state of batch `base_seq`),
/// with its size at `gap`, when the baseline is within reach and the delta is smaller than
/// `absolute_size` (the absolute entry's, the same for every receiver, so worked out once):
/// what [`choose_entry_sized`] chooses instead of the absolute entry. `None`: the absolute
/// entry.
pub(crate) fn smaller_delta(
    gap: u64,
    state: &QuantizedState,
    seq: u32,
    (base_seq, base): (u32, &QuantizedState),
    absolute_size: usize,
) -> Option<(Entry, usize)> {
    let ago = seq.wrapping_sub(base_seq);
    if ago == 0 || ago > MAX_BASELINE_AGO {
        return None;
    }
    let delta = Entry::Delta(Delta::between(base, state, ago));
    let size = delta.size(gap);
    (size < absolute_size).then_some((delta, size))
}

/// Bytes of a batch header with `focus`, an acknowledgement (counted at its largest) and
/// `count` bodies.
pub fn header_size(focus: Option<Vec3>, count: usize) -> usize {
    leb_len(((count as u128) << 2) | 3)
        + 5
        + ACK_BYTES
        + focus.map_or(0, |f| {
            quantize_focus(f).iter().map(|v| zigzag_len(*v)).sum()
        })
}

/// Largest encoded acknowledgement: two 5-byte varints.
const ACK_BYTES: usize = 10;

impl StateBatch {
    /// The batch as it travels, with `ack`, each body a delta from `baseline(body)` (its batch
    /// number and quantized state) where that pays ([`choose_entry`]), else absolute.
    ///
    /// # Errors
    /// [`BatchError::BodyIds`] if ids are not strictly increasing or above
    /// [`MAX_BATCH_BODY_ID`]; [`BatchError::TooManyBodies`] over [`MAX_BATCH_BODIES`];
    /// [`BatchError::OutOfRange`] for a position that is not finite or beyond 10⁶ m (velocities
    /// are clamped to 4,096 m/s, non-finite ones sent as 0).
    pub fn to_wire(
        &self,
        ack: Option<BatchAck>,
        baseline: impl Fn(BodyId) -> Option<(u32, QuantizedState)>,
    ) -> Result<WireBatch, BatchError> {
        if self.bodies.len() > MAX_BATCH_BODIES {
            return Err(BatchError::TooManyBodies {
                count: self.bodies.len() as u64,
            });
        }
        let mut entries = Vec::with_capacity(self.bodies.len());
        let mut next: u64 = 0;
        for (body, state) in &self.bodies {
            if body.0 < next || body.0 > MAX_BATCH_BODY_ID {
                return Err(BatchError::BodyIds);
            }
            if !state.position.is_finite()
                || state.position.abs().max_element() > MAX_POSITION_Q as f32 * POSITION_STEP
            {
                return Err(BatchError::OutOfRange {
                    body: *body,
                    field: "position",
                });
            }
            let q = QuantizedState::new(state);
            entries.push((
                *body,
                choose_entry(body.0 - next, q, self.seq, baseline(*body)),
            ));
            next = body.0 + 1;
        }
        Ok(WireBatch {
            seq: self.seq,
            focus: self.focus,
            ack,
            entries,
        })
    }

    /// The batch as bytes, every body absolute, no acknowledgement
    /// ([format](WireBatch#format)).
    ///
    /// # Errors
    /// As [`to_wire`](Self::to_wire).
    pub fn encode(&self) -> Result<Vec<u8>, BatchError> {
        self.to_wire(None, |_| None)?.encode()
    }

    /// Reads a batch of absolute entries from `bytes` ([format](WireBatch#format)); an
    /// acknowledgement is ignored.
    ///
    /// # Errors
    /// Those of [`WireBatch::decode`], and [`BatchError::NeedsBaseline`] for a delta entry.
    pub fn decode(bytes: &[u8]) -> Result<StateBatch, BatchError> {
        let wire = WireBatch::decode(bytes)?;
        let bodies = wire
            .entries
            .into_iter()
            .map(|(body, entry)| match entry {
                Entry::Absolute(q) => Ok((body, q.to_state())),
                Entry::Delta(_) => Err(BatchError::NeedsBaseline { body }),
            })
            .collect::<Result<_, _>>()?;
        Ok(StateBatch {
            seq: wire.seq,
            focus: wire.focus,
            bodies,
        })
    }
}

impl WireBatch {
    /// Entries sent as deltas.
    pub fn deltas(&self) -> usize {
        self.entries
            .iter()
            .filter(|(_, e)| matches!(e, Entry::Delta(_)))
            .count()
    }

    /// The batch as bytes ([format](WireBatch#format)).
    ///
    /// # Errors
    /// [`BatchError::TooManyBodies`] over [`MAX_BATCH_BODIES`]; [`BatchError::BodyIds`] if ids
    /// are not strictly increasing or above [`MAX_BATCH_BODY_ID`].
    pub fn encode(&self) -> Result<Vec<u8>, BatchError> {
        let count = self.entries.len();
        if count > MAX_BATCH_BODIES {
            return Err(BatchError::TooManyBodies {
                count: count as u64,
            });
        }
        let mut out = Vec::with_capacity(header_size(self.focus, count) + 24 * count);
        put_header(&mut out, count, self.seq, self.focus, self.ack);
        let mut next: u64 = 0;
        for (body, entry) in &self.entries {
            if body.0 < next || body.0 > MAX_BATCH_BODY_ID {
                return Err(BatchError::BodyIds);
            }
            entry.put(&mut out, body.0 - next);
            next = body.0 + 1;
        }
        Ok(out)
    }

    /// Reads a batch from `bytes` ([format](WireBatch#format)).
    ///
    /// # Errors
    /// Every [`BatchError`] but `BodyIds`' ordering half and `NeedsBaseline`: truncated,
    /// oversized, too many bodies, trailing bytes, malformed varints or flags, an id past
    /// [`MAX_BATCH_BODY_ID`], a position beyond 10⁶ m, a velocity beyond 4,096 m/s, a rotation
    /// whose three sent components cannot belong to a unit quaternion, a delta larger than any
    /// two values in range can differ, or a baseline offset outside 1..=[`MAX_BASELINE_AGO`].
    pub fn decode(bytes: &[u8]) -> Result<WireBatch, BatchError> {
        if bytes.len() > MAX_BATCH_BYTES {
            return Err(BatchError::Oversized { bytes: bytes.len() });
        }
        let mut r = Reader { bytes, at: 0 };
        let head = r.varint()?;
        let count = head >> 2;
        if count > MAX_BATCH_BODIES as u128 {
            return Err(BatchError::TooManyBodies {
                count: u64::try_from(count).unwrap_or(u64::MAX),
            });
        }
        let seq = u32::try_from(r.varint()?).map_err(|_| BatchError::Malformed("seq"))?;
        let focus = if head & 1 == 1 {
            Some(read_focus(&mut r)?)
        } else {
            None
        };
        let ack = if head & 2 == 2 {
            let newest =
                u32::try_from(r.varint()?).map_err(|_| BatchError::Malformed("ack seq"))?;
            let missing =
                u32::try_from(r.varint()?).map_err(|_| BatchError::Malformed("ack bits"))?;
            Some(BatchAck {
                newest,
                earlier: !missing,
            })
        } else {
            None
        };
        let mut entries = Vec::with_capacity(count as usize);
        let mut next: u64 = 0;
        for _ in 0..count {
            let (body, entry) = Entry::get(&mut r, next)?;
            next = body.0 + 1;
            entries.push((body, entry));
        }
        if r.at != bytes.len() {
            return Err(BatchError::TrailingBytes {
                bytes: bytes.len() - r.at,
            });
        }
        Ok(WireBatch {
            seq,
            focus,
            ack,
            entries,
        })
    }
}

/// Writes a batch's head, number, focus and acknowledgement ([format](WireBatch#format)).
fn put_header(
    out: &mut Vec<u8>,
    count: usize,
    seq: u32,
    focus: Option<Vec3>,
    ack: Option<BatchAck>,
) {
    let head =
        ((count as u128) << 2) | (u128::from(ack.is_some()) << 1) | u128::from(focus.is_some());
    put_varint(out, head);
    put_varint(out, u128::from(seq));
    if let Some(focus) = focus {
        for v in quantize_focus(focus) {
            put_zigzag(out, v);
        }
    }
    if let Some(ack) = ack {
        put_varint(out, u128::from(ack.newest));
        put_varint(out, u128::from(!ack.earlier));
    }
}

/// An [`Entry`] laid out once for every receiver that gets it: the bytes after its head sit
/// in a buffer the receivers share ([`LaidOut::new`]); receivers' batches differ only in the
/// head's id gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaidOut {
    /// The head's three low bits (delta, linear, angular).
    low: u8,
    /// Where the bytes after the head start in the shared buffer.
    start: usize,
    /// How many there are.
    len: usize,
}

impl LaidOut {
    /// Lays `entry` out at the end of `bytes`.
    pub(crate) fn new(entry: &Entry, bytes: &mut Vec<u8>) -> Self {
        let at = bytes.len();
        // At gap 0 the head is one byte: its three low bits.
        entry.put(bytes, 0);
        Self {
            low: bytes[at],
            start: at + 1,
            len: bytes.len() - at - 1,
        }
    }

    /// Whether it is a delta entry.
    pub(crate) fn is_delta(&self) -> bool {
        self.low & 4 != 0
    }

    /// Writes the entry at id gap `gap`, its bytes read from `bytes` (the buffer
    /// [`new`](Self::new) laid it out in): what [`Entry`] writes.
    fn put(&self, out: &mut Vec<u8>, gap: u64, bytes: &[u8]) {
        put_varint(out, (u128::from(gap) << 3) | u128::from(self.low));
        out.extend_from_slice(&bytes[self.start..self.start + self.len]);
    }
}

/// The bytes of a batch numbered `seq` with `ack`, no focus and `entries` (laid out in
/// `bytes`), exactly as [`WireBatch::encode`] lays out the same entries.
///
/// # Errors
/// As [`WireBatch::encode`]: [`BatchError::TooManyBodies`] over [`MAX_BATCH_BODIES`];
/// [`BatchError::BodyIds`] if ids are not strictly increasing or above [`MAX_BATCH_BODY_ID`].
pub(crate) fn encode_laid_out(
    seq: u32,
    ack: Option<BatchAck>,
    entries: impl ExactSizeIterator<Item = (BodyId, LaidOut)>,
    bytes: &[u8],
) -> Result<Vec<u8>, BatchError> {
    let count = entries.len();
    if count > MAX_BATCH_BODIES {
        return Err(BatchError::TooManyBodies {
            count: count as u64,
        });
    }
    let mut out = Vec::with_capacity(header_size(None, count) + 24 * count);
    put_header(&mut out, count, seq, None, ack);
    let mut next: u64 = 0;
    for (body, entry) in entries {
        if body.0 < next || body.0 > MAX_BATCH_BODY_ID {
            return Err(BatchError::BodyIds);
        }
        entry.put(&mut out, body.0 - next, bytes);
        next = body.0 + 1;
    }
    Ok(out)
}

fn read_focus(r: &mut Reader) -> Result<Vec3, BatchError> {
    let mut f = [0i64; 3];
    for v in &mut f {
        *v = r.zigzag()?;
        if v.unsigned_abs() > MAX_POSITION_Q as u64 {
            return Err(BatchError::Malformed("focus out of range"));
        }
    }
    Ok(Vec3::new(f[0] as f32, f[1] as f32, f[2] as f32) * POSITION_STEP)
}

/// A state in wire units: position in millimetres (±10⁹), rotation as packed "smallest three"
/// bits (2 bits for the largest component's index, then 3 × 12-bit components), linear and
/// angular velocity in 1/256 m/s and rad/s (±2²⁰). What an absolute entry carries and what
/// deltas are taken between: equal `QuantizedState`s give bit-identical received states.
///
/// 48 bytes: every value in range fits an `i32` (the relay keeps one per body and receiver).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantizedState {
    /// Position, mm.
    pub position: [i32; 3],
    /// Packed rotation (38 bits).
    pub rotation: u64,
    /// Linear velocity, 1/256 m/s.
    pub linear: [i32; 3],
    /// Angular velocity, 1/256 rad/s.
    pub angular: [i32; 3],
}

/// A state's values before their ranges are checked: as read from the wire, or as a delta
/// made them.
struct WideState {
    position: [i64; 3],
    rotation: u64,
    linear: [i64; 3],
    angular: [i64; 3],
}

impl WideState {
    /// The state, if every value is within its wire range and the rotation is a valid
    /// packing; else the first field that is not (position, rotation, then velocity).
    fn checked(&self) -> Result<QuantizedState, &'static str> {
        let narrow = |q: &[i64; 3], max: i64| {
            q.iter()
                .all(|v| v.unsigned_abs() <= max as u64)
                // In range, every value fits an `i32` (10⁹ and 2²⁰ are below 2³¹).
                .then(|| q.map(|v| v as i32))
        };
        let position = narrow(&self.position, MAX_POSITION_Q).ok_or("position")?;
        if !rotation_valid(self.rotation) {
            return Err("rotation");
        }
        match (
            narrow(&self.linear, MAX_VELOCITY_Q),
            narrow(&self.angular, MAX_VELOCITY_Q),
        ) {
            (Some(linear), Some(angular)) => Ok(QuantizedState {
                position,
                rotation: self.rotation,
                linear,
                angular,
            }),
            _ => Err("velocity"),
        }
    }
}

/// `values` as `i64`s (what varints and differences are worked out in).
fn wide(values: [i32; 3]) -> [i64; 3] {
    values.map(i64::from)
}

impl QuantizedState {
    /// `state` rounded to the wire steps (positions clamped to ±10⁶ m, velocities to
    /// ±4,096, non-finite values as 0).
    pub fn new(state: &BodyState) -> Self {
        let pos = |v: f32| {
            let q = v / POSITION_STEP;
            if q.is_finite() {
                round_to_i64(q).clamp(-MAX_POSITION_Q, MAX_POSITION_Q) as i32
            } else {
                0
            }
        };
        let vel = |v: f32| {
            let q = v / VELOCITY_STEP;
            if q.is_finite() {
                round_to_i64(q).clamp(-MAX_VELOCITY_Q, MAX_VELOCITY_Q) as i32
            } else {
                0
            }
        };
        let p = state.position;
        let l = state.linear_velocity;
        let a = state.angular_velocity;
        Self {
            position: [pos(p.x), pos(p.y), pos(p.z)],
            rotation: pack_rotation(state.rotation),
            linear: [vel(l.x), vel(l.y), vel(l.z)],
            angular: [vel(a.x), vel(a.y), vel(a.z)],
        }
    }

    /// The state a receiver applies (an invalid packed rotation, which no decoded state has,
    /// as the identity).
    pub fn to_state(&self) -> BodyState {
        let v = |q: [i32; 3], step: f32| Vec3::new(q[0] as f32, q[1] as f32, q[2] as f32) * step;
        BodyState {
            position: v(self.position, POSITION_STEP),
            rotation: unpack_rotation(self.rotation).unwrap_or(Quat::IDENTITY),
            linear_velocity: v(self.linear, VELOCITY_STEP),
            angular_velocity: v(self.angular, VELOCITY_STEP),
        }
    }

    /// Bytes after the entry head.
    fn size(&self) -> usize {
        sum_len(&wide(self.position))
            + ROTATION_BYTES
            + if self.linear == [0; 3] {
                0
            } else {
                sum_len(&wide(self.linear))
            }
            + if self.angular == [0; 3] {
                0
            } else {
                sum_len(&wide(self.angular))
            }
    }

    /// Writes the fields after the entry head.
    fn put(&self, out: &mut Vec<u8>) {
        put_three(out, &wide(self.position));
        out.extend_from_slice(&self.rotation.to_le_bytes()[..ROTATION_BYTES]);
        for values in [self.linear, self.angular] {
            if values != [0; 3] {
                put_three(out, &wide(values));
            }
        }
    }

    /// Reads the fields after the entry head (`head`'s two velocity bits).
    fn get(r: &mut Reader, body: BodyId, head: u128) -> Result<Self, BatchError> {
        let mut q = WideState {
            position: r.three()?,
            rotation: r.rotation()?,
            linear: [0; 3],
            angular: [0; 3],
        };
        if head & 2 != 0 {
            q.linear = r.three()?;
        }
        if head & 1 != 0 {
            q.angular = r.three()?;
        }
        q.checked()
            .map_err(|field| BatchError::OutOfRange { body, field })
    }
}

const FLAG_POSITION: u8 = 1;
const FLAG_ROTATION: u8 = 2;
const FLAG_ROTATION_ABSOLUTE: u8 = 4;
const FLAG_LINEAR: u8 = 8;
const FLAG_ANGULAR: u8 = 16;
/// Where a delta's flag byte keeps a baseline offset of 1–7.
const AGO_SHIFT: u32 = 5;

impl Delta {
    /// `state` as differences from `base`, `ago` batches back. The rotation is the difference
    /// of its three components when the largest component's index is the same and that is
    /// smaller than the packed rotation, else absolute.
    pub fn between(base: &QuantizedState, state: &QuantizedState, ago: u32) -> Self {
        let diff = |a: [i64; 3], b: [i64; 3]| [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
        let components = diff(components(state.rotation), components(base.rotation));
        let rotation =
            if base.rotation & 3 == state.rotation & 3 && sum_len(&components) < ROTATION_BYTES {
                RotationDelta::Components(components)
            } else {
                RotationDelta::Absolute(state.rotation)
            };
        Self {
            ago,
            position: diff(wide(state.position), wide(base.position)),
            rotation,
            linear: diff(wide(state.linear), wide(base.linear)),
            angular: diff(wide(state.angular), wide(base.angular)),
        }
    }

    /// The state these differences make from `base`; `None` if it is out of range (a value
    /// past its limit, a component outside 12 bits, or a rotation no unit quaternion has): a
    /// delta from a hostile sender, or against the wrong baseline.
    pub fn apply(&self, base: &QuantizedState) -> Option<QuantizedState> {
        let add = |a: [i64; 3], d: [i64; 3]| {
            Some([
                a[0].checked_add(d[0])?,
                a[1].checked_add(d[1])?,
                a[2].checked_add(d[2])?,
            ])
        };
        let rotation = match self.rotation {
            RotationDelta::Absolute(packed) => packed,
            RotationDelta::Components(d) => {
                let c = add(components(base.rotation), d)?;
                if c.iter().any(|v| !(0..=ROTATION_MAX as i64).contains(v)) {
                    return None;
                }
                (base.rotation & 3)
                    | (c[0] as u64) << 2
                    | (c[1] as u64) << (2 + ROTATION_BITS)
                    | (c[2] as u64) << (2 + 2 * ROTATION_BITS)
            }
        };
        let q = WideState {
            position: add(wide(base.position), self.position)?,
            rotation,
            linear: add(wide(base.linear), self.linear)?,
            angular: add(wide(base.angular), self.angular)?,
        };
        q.checked().ok()
    }

    fn flags(&self) -> u8 {
        let set = |present: bool, flag: u8| if present { flag } else { 0 };
        let rotation = match self.rotation {
            RotationDelta::Components(d) => set(d != [0; 3], FLAG_ROTATION),
            RotationDelta::Absolute(_) => FLAG_ROTATION_ABSOLUTE,
        };
        let ago = if self.ago <= 7 { self.ago as u8 } else { 0 };
        set(self.position != [0; 3], FLAG_POSITION)
            | rotation
            | set(self.linear != [0; 3], FLAG_LINEAR)
            | set(self.angular != [0; 3], FLAG_ANGULAR)
            | ago << AGO_SHIFT
    }

    /// Bytes after the entry head.
    fn size(&self) -> usize {
        let part = |v: &[i64; 3]| if *v == [0; 3] { 0 } else { sum_len(v) };
        1 + if self.ago > 7 {
            leb_len(u128::from(self.ago))
        } else {
            0
        } + part(&self.position)
            + match &self.rotation {
                RotationDelta::Components(d) => part(d),
                RotationDelta::Absolute(_) => ROTATION_BYTES,
            }
            + part(&self.linear)
            + part(&self.angular)
    }

    /// Writes the flag byte and the parts after the entry head.
    fn put(&self, out: &mut Vec<u8>) {
        let flags = self.flags();
        out.push(flags);
        if self.ago > 7 {
            put_varint(out, u128::from(self.ago));
        }
        let part = |v: &[i64; 3], out: &mut Vec<u8>| {
            if *v != [0; 3] {
                put_three(out, v);
            }
        };
        part(&self.position, out);
        match &self.rotation {
            RotationDelta::Components(d) => part(d, out),
            RotationDelta::Absolute(packed) => {
                out.extend_from_slice(&packed.to_le_bytes()[..ROTATION_BYTES]);
            }
        }
        part(&self.linear, out);
        part(&self.angular, out);
    }

    /// Reads the flag byte and the parts after the entry head, checking each difference
    /// against the largest two values in range can differ by.
    fn get(r: &mut Reader, body: BodyId) -> Result<Self, BatchError> {
        let flags = r.byte()?;
        if flags & FLAG_ROTATION != 0 && flags & FLAG_ROTATION_ABSOLUTE != 0 {
            return Err(BatchError::Malformed("delta rotation flags"));
        }
        let ago = match u64::from(flags >> AGO_SHIFT) {
            0 => u64::try_from(r.varint()?).unwrap_or(u64::MAX),
            ago => ago,
        };
        if ago == 0 || ago > u64::from(MAX_BASELINE_AGO) {
            return Err(BatchError::BaselineOffset { body, ago });
        }
        let out_of_range = |field| BatchError::OutOfRange { body, field };
        let mut part = |flag: u8, max: i64, field| -> Result<[i64; 3], BatchError> {
            if flags & flag == 0 {
                return Ok([0; 3]);
            }
            let v = r.three()?;
            if v.iter().any(|d| d.unsigned_abs() > max as u64) {
                return Err(out_of_range(field));
            }
            Ok(v)
        };
        let position = part(FLAG_POSITION, 2 * MAX_POSITION_Q, "position delta")?;
        let components = part(FLAG_ROTATION, ROTATION_MAX as i64, "rotation delta")?;
        let rotation = if flags & FLAG_ROTATION_ABSOLUTE != 0 {
            let packed = r.rotation()?;
            if !rotation_valid(packed) {
                return Err(out_of_range("rotation"));
            }
            RotationDelta::Absolute(packed)
        } else {
            RotationDelta::Components(components)
        };
        let mut part = |flag: u8, field| -> Result<[i64; 3], BatchError> {
            if flags & flag == 0 {
                return Ok([0; 3]);
            }
            let v = r.three()?;
            if v.iter()
                .any(|d| d.unsigned_abs() > 2 * MAX_VELOCITY_Q as u64)
            {
                return Err(out_of_range(field));
            }
            Ok(v)
        };
        Ok(Self {
            ago: ago as u32,
            position,
            rotation,
            linear: part(FLAG_LINEAR, "velocity delta")?,
            angular: part(FLAG_ANGULAR, "velocity delta")?,
        })
    }
}

impl Entry {
    /// Encoded bytes of this entry at id gap `gap`, head included.
    pub fn size(&self, gap: u64) -> usize {
        leb_len(u128::from(gap) << 3)
            + match self {
                Entry::Absolute(q) => q.size(),
                Entry::Delta(d) => d.size(),
            }
    }

    fn put(&self, out: &mut Vec<u8>, gap: u64) {
        match self {
            Entry::Absolute(q) => {
                let head = (u128::from(gap) << 3)
                    | (u128::from(q.linear != [0; 3]) << 1)
                    | u128::from(q.angular != [0; 3]);
                put_varint(out, head);
                q.put(out);
            }
            Entry::Delta(d) => {
                put_varint(out, (u128::from(gap) << 3) | 4);
                d.put(out);
            }
        }
    }

    fn get(r: &mut Reader, next: u64) -> Result<(BodyId, Entry), BatchError> {
        let head = r.varint()?;
        let gap = u64::try_from(head >> 3).map_err(|_| BatchError::BodyIds)?;
        let id = next
            .checked_add(gap)
            .filter(|id| *id <= MAX_BATCH_BODY_ID)
            .ok_or(BatchError::BodyIds)?;
        let body = BodyId(id);
        if head & 4 == 0 {
            return Ok((body, Entry::Absolute(QuantizedState::get(r, body, head)?)));
        }
        if head & 3 != 0 {
            return Err(BatchError::Malformed("delta entry head"));
        }
        Ok((body, Entry::Delta(Delta::get(r, body)?)))
    }
}

/// The three 12-bit components of a packed rotation, in packing order.
fn components(packed: u64) -> [i64; 3] {
    let c = |k: u32| ((packed >> (2 + k * ROTATION_BITS)) & ROTATION_MAX) as i64;
    [c(0), c(1), c(2)]
}

fn sum_len(q: &[i64; 3]) -> usize {
    q.iter().map(|v| zigzag_len(*v)).sum()
}

fn put_three(out: &mut Vec<u8>, values: &[i64; 3]) {
    for v in values {
        put_zigzag(out, *v);
    }
}

/// Bytes of a packed rotation: 2 bits for the largest component's index, 3 × 12 bits, 2 spare
/// bits that must be 0.
const ROTATION_BYTES: usize = 5;
const ROTATION_BITS: u32 = 12;
/// A component's largest quantized value.
const ROTATION_MAX: u64 = (1 << ROTATION_BITS) - 1;

/// "Smallest three" in 38 bits ([`pack_smallest_three`] with 12 bits a component, step
/// 3.5 × 10⁻⁴). A rotation that is not finite or of zero length packs as the identity.
fn pack_rotation(rotation: Quat) -> u64 {
    pack_smallest_three(rotation, ROTATION_BITS)
}

/// The rotation of [`pack_rotation`]'s bits; `None` for set spare bits or three components
/// whose squares sum past 3/4 (the largest of a unit quaternion's components is at least 1/2).
fn unpack_rotation(packed: u64) -> Option<Quat> {
    if packed >> (2 + 3 * ROTATION_BITS) != 0 {
        return None;
    }
    let (rotation, sum) = unpack_smallest_three(packed, ROTATION_BITS);
    (sum <= MAX_SENT_SQUARES).then_some(rotation)
}

/// Whether [`unpack_rotation`] takes `packed` (`Some`), without unpacking it: the same spare
/// bits and the same sum of squares ([`smallest_three_square_sum`]).
fn rotation_valid(packed: u64) -> bool {
    packed >> (2 + 3 * ROTATION_BITS) == 0
        && smallest_three_square_sum(packed, ROTATION_BITS) <= MAX_SENT_SQUARES
}

/// The largest sum of the three sent components' squares a unit quaternion gives (3/4,
/// with room for rounding).
const MAX_SENT_SQUARES: f32 = 0.7501;

fn quantize_focus(focus: Vec3) -> [i64; 3] {
    let q = |v: f32| {
        let q = v / POSITION_STEP;
        if q.is_finite() {
            round_to_i64(q).clamp(-MAX_POSITION_Q, MAX_POSITION_Q)
        } else {
            0
        }
    };
    [q(focus.x), q(focus.y), q(focus.z)]
}

/// `x.round() as i64`, bit for bit (halves away from zero, NaN as 0, saturating beyond
/// `i64`), without calling the C library's `roundf`: the x86-64 baseline has no instruction
/// for it, and a state's quantizing rounds nine values.
fn round_to_i64(x: f32) -> i64 {
    // From 2²³ up every finite f32 is whole: nothing to round (NaN and infinities cast as
    // `round` would leave them).
    if x.is_nan() || x.abs() >= 8_388_608.0 {
        return x as i64;
    }
    let whole = x as i32;
    // Exact: below 2²³, the part after the point takes no more bits than `x` has.
    let fraction = x - whole as f32;
    i64::from(whole) + i64::from(fraction >= 0.5) - i64::from(fraction <= -0.5)
}

/// Bytes of the `ClientMessage` / `ServerMessage` around a batch: two enum tags and the length
/// prefix (up to 3 bytes below 2 MiB).
pub(crate) const MESSAGE_OVERHEAD: usize = 5;

/// The states of the `chosen` bodies (those without a state left out), sorted by body id as a
/// batch lists them.
pub(crate) fn chosen_states(
    chosen: &[BodyId],
    states: &HashMap<BodyId, BodyState>,
) -> Vec<(BodyId, BodyState)> {
    let mut bodies: Vec<(BodyId, BodyState)> = chosen
        .iter()
        .filter_map(|b| states.get(b).map(|s| (*b, *s)))
        .collect();
    bodies.sort_unstable_by_key(|(b, _)| *b);
    bodies
}

/// Bytes left for body entries in one batch message when the budget has `available` bytes:
/// capped at [`MAX_BATCH_BYTES`], less the header for `count` candidate bodies (and `focus`)
/// and [`MESSAGE_OVERHEAD`]; 0 when the header alone does not fit.
pub(crate) fn entry_room(available: usize, focus: Option<Vec3>, count: usize) -> usize {
    available
        .min(MAX_BATCH_BYTES)
        .saturating_sub(header_size(focus, count) + MESSAGE_OVERHEAD)
}

/// Bytes of the LEB128 length prefix of an `n`-byte message field.
pub(crate) fn varint_len(n: usize) -> u64 {
    leb_len(n as u128) as u64
}

fn leb_len(mut v: u128) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn zigzag(v: i64) -> u128 {
    u128::from(((v << 1) ^ (v >> 63)) as u64)
}

fn zigzag_len(v: i64) -> usize {
    leb_len(zigzag(v))
}

fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_zigzag(out: &mut Vec<u8>, v: i64) {
    put_varint(out, zigzag(v));
}

/// A cursor over a batch's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, BatchError> {
        let b = *self.bytes.get(self.at).ok_or(BatchError::Truncated)?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&[u8], BatchError> {
        let end = self.at.checked_add(n).ok_or(BatchError::Truncated)?;
        let slice = self.bytes.get(self.at..end).ok_or(BatchError::Truncated)?;
        self.at = end;
        Ok(slice)
    }

    /// A varint of at most 19 bytes (128 bits).
    fn varint(&mut self) -> Result<u128, BatchError> {
        let mut v: u128 = 0;
        for i in 0..19 {
            let b = self.byte()?;
            v |= u128::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(BatchError::Malformed("varint too long"))
    }

    fn zigzag(&mut self) -> Result<i64, BatchError> {
        let v =
            u64::try_from(self.varint()?).map_err(|_| BatchError::Malformed("varint too long"))?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    fn three(&mut self) -> Result<[i64; 3], BatchError> {
        Ok([self.zigzag()?, self.zigzag()?, self.zigzag()?])
    }

    /// A packed rotation's 5 bytes (not yet checked).
    fn rotation(&mut self) -> Result<u64, BatchError> {
        let mut rot = [0u8; 8];
        rot[..ROTATION_BYTES].copy_from_slice(self.take(ROTATION_BYTES)?);
        Ok(u64::from_le_bytes(rot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moving(i: u64) -> BodyState {
        let t = i as f32;
        BodyState {
            position: Vec3::new(t * 0.37 - 5.0, 0.5 + t * 0.01, 3.0 - t * 0.2),
            rotation: Quat::from_euler(bevy::math::EulerRot::XYZ, t * 0.3, -t * 0.7, t * 0.11),
            linear_velocity: Vec3::new(2.0 - t * 0.1, -3.0, 0.7),
            angular_velocity: Vec3::new(0.3, t * 0.5 - 2.0, -1.0),
        }
    }

    #[test]
    fn rounding_to_an_integer_is_round_then_cast_bit_for_bit() {
        let edges = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            0.499_999_97,
            -0.499_999_97,
            1.5,
            2.5,
            -2.5,
            8_388_607.5,
            -8_388_607.5,
            8_388_608.0,
            16_777_217.0,
            1e19,
            -1e19,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            1e-45,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        for x in edges {
            assert_eq!(round_to_i64(x), x.round() as i64, "{x}");
        }
        // Every 4,099th bit pattern: all exponents, both signs, both sides of every half.
        for bits in (0..=u32::MAX).step_by(4_099) {
            let x = f32::from_bits(bits);
            assert_eq!(round_to_i64(x), x.round() as i64, "{bits:#x}");
        }
    }

    #[test]
    fn a_rotation_is_valid_exactly_when_it_unpacks() {
        let mut valid = 0;
        let mut packed: u64 = 0x9e37_79b9_7f4a_7c15;
        for k in 0..200_000u64 {
            // Spare bits set on one in eight.
            packed = packed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let p = if k % 8 == 0 {
                packed >> 20
            } else {
                packed >> 26
            };
            assert_eq!(rotation_valid(p), unpack_rotation(p).is_some(), "{p:#x}");
            valid += usize::from(rotation_valid(p));
        }
        // Both answers are common, so the comparison decided something.
        assert!((20_000..180_000).contains(&valid), "{valid} valid");
        // At the edge: components at the middle (0) and at the ends (±1/√2).
        for c in [0, 1, 2047, 2048, 4094, 4095] {
            for d in [0, 2048, 4095] {
                let p = 1 | (c << 2) | (d << 14) | (2048 << 26);
                assert_eq!(rotation_valid(p), unpack_rotation(p).is_some(), "{p:#x}");
            }
        }
    }

    #[test]
    fn entry_room_is_the_budget_less_header_and_overhead_capped_at_the_batch_limit() {
        let header = header_size(None, 3) + MESSAGE_OVERHEAD;
        assert_eq!(entry_room(header + 100, None, 3), 100);
        assert_eq!(entry_room(header - 1, None, 3), 0);
        assert_eq!(entry_room(usize::MAX, None, 3), MAX_BATCH_BYTES - header);
        let focused = header_size(Some(Vec3::ONE), 3) + MESSAGE_OVERHEAD;
        assert!(focused > header);
        assert_eq!(entry_room(focused + 7, Some(Vec3::ONE), 3), 7);
    }

    #[test]
    fn round_trip_within_the_quantization_bounds() {
        let bodies: Vec<(BodyId, BodyState)> =
            (0..40).map(|i| (BodyId(i * 3 + 1), moving(i))).collect();
        let batch = StateBatch {
            seq: 70_000,
            focus: Some(Vec3::new(1.0, 2.0, -3.5)),
            bodies: bodies.clone(),
        };
        let bytes = batch.encode().unwrap();
        let back = StateBatch::decode(&bytes).unwrap();
        assert_eq!(back.seq, 70_000);
        assert!(back.focus.unwrap().distance(Vec3::new(1.0, 2.0, -3.5)) < 1e-3);
        for ((id, sent), (got_id, got)) in bodies.iter().zip(&back.bodies) {
            assert_eq!(id, got_id);
            assert!((sent.position - got.position).abs().max_element() <= 0.0005 + 1e-6);
            assert!(
                (sent.linear_velocity - got.linear_velocity)
                    .abs()
                    .max_element()
                    <= 1.0 / 512.0 + 1e-6
            );
            assert!(
                (sent.angular_velocity - got.angular_velocity)
                    .abs()
                    .max_element()
                    <= 1.0 / 512.0 + 1e-6
            );
            // The angle of the rotation between the two, from its sine and cosine (an `acos` of
            // their dot product near 1 is off by ~1e-3 rad for one ulp of the dot).
            let between = sent.rotation.inverse() * got.rotation;
            let angle = 2.0 * between.xyz().length().atan2(between.w.abs());
            assert!(angle < 1e-3, "{angle}");
            assert_eq!(quantize(sent), *got);
        }
    }

    #[test]
    fn moving_bodies_cost_at_most_24_bytes_and_resting_ones_about_12() {
        let bodies: Vec<(BodyId, BodyState)> =
            (0..100).map(|i| (BodyId(i), moving(i % 30))).collect();
        let batch = StateBatch {
            seq: 5,
            focus: None,
            bodies,
        };
        let bytes = batch.encode().unwrap();
        let per_body = bytes.len() as f64 / 100.0;
        assert!(per_body <= 24.0, "{per_body} bytes a body");
        let resting: Vec<(BodyId, BodyState)> = (0..100)
            .map(|i| (BodyId(i), moving(i % 30).stopped()))
            .collect();
        let bytes = StateBatch {
            seq: 5,
            focus: None,
            bodies: resting,
        }
        .encode()
        .unwrap();
        assert!(bytes.len() <= 100 * 12 + 4, "{}", bytes.len());
        for (id, state) in [(BodyId(0), moving(1)), (BodyId(1 << 40), moving(2))] {
            let one = StateBatch {
                seq: 0,
                focus: None,
                bodies: vec![(id, state)],
            }
            .encode()
            .unwrap();
            assert!(one.len() <= header_size(None, 1) + entry_size_bound(id, &state));
        }
    }

    #[test]
    fn encoding_refuses_unordered_ids_and_non_finite_positions() {
        let s = moving(1);
        let unordered = StateBatch {
            seq: 0,
            focus: None,
            bodies: vec![(BodyId(2), s), (BodyId(2), s)],
        };
        assert_eq!(unordered.encode(), Err(BatchError::BodyIds));
        let mut bad = s;
        bad.position.x = f32::NAN;
        let nan = StateBatch {
            seq: 0,
            focus: None,
            bodies: vec![(BodyId(2), bad)],
        };
        assert!(matches!(
            nan.encode(),
            Err(BatchError::OutOfRange {
                field: "position",
                ..
            })
        ));
        let big = StateBatch {
            seq: 0,
            focus: None,
            bodies: vec![(BodyId(MAX_BATCH_BODY_ID + 1), s)],
        };
        assert_eq!(big.encode(), Err(BatchError::BodyIds));
    }

    #[test]
    fn hostile_bytes_are_typed_errors() {
        let good = StateBatch {
            seq: 9,
            focus: None,
            bodies: vec![(BodyId(4), moving(2)), (BodyId(9), moving(5))],
        }
        .encode()
        .unwrap();
        // Every truncation.
        for len in 0..good.len() {
            assert!(StateBatch::decode(&good[..len]).is_err(), "length {len}");
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(
            StateBatch::decode(&trailing),
            Err(BatchError::TrailingBytes { bytes: 1 })
        );
        assert_eq!(
            StateBatch::decode(&[0, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            Err(BatchError::Malformed("seq"))
        );
        assert!(matches!(
            StateBatch::decode(&[0xff, 0xff, 0x03, 0]),
            Err(BatchError::TooManyBodies { .. })
        ));
        assert!(matches!(
            StateBatch::decode(&vec![0; MAX_BATCH_BYTES + 1]),
            Err(BatchError::Oversized { .. })
        ));
        let mut long = vec![0];
        long.extend([0x80; 19]);
        long.push(0);
        assert_eq!(
            StateBatch::decode(&long),
            Err(BatchError::Malformed("varint too long"))
        );
        // A position of 2 × 10⁶ m.
        let mut far = vec![4, 0, 0];
        put_zigzag(&mut far, 2_000_000_000);
        far.extend([0, 0]);
        far.extend(pack_rotation(Quat::IDENTITY).to_le_bytes()[..5].iter());
        assert!(matches!(
            StateBatch::decode(&far),
            Err(BatchError::OutOfRange {
                field: "position",
                ..
            })
        ));
        // A rotation whose three small components are all 1/√2.
        let mut rot = vec![4, 0, 0, 0, 0, 0];
        rot.extend(
            (ROTATION_MAX << 2 | ROTATION_MAX << 14 | ROTATION_MAX << 26).to_le_bytes()[..5].iter(),
        );
        assert!(matches!(
            StateBatch::decode(&rot),
            Err(BatchError::OutOfRange {
                field: "rotation",
                ..
            })
        ));
        // A velocity of 5,000 m/s.
        let mut fast = vec![4, 0, 2, 0, 0, 0];
        fast.extend(pack_rotation(Quat::IDENTITY).to_le_bytes()[..5].iter());
        put_zigzag(&mut fast, 5_000 * 256);
        fast.extend([0, 0]);
        assert!(matches!(
            StateBatch::decode(&fast),
            Err(BatchError::OutOfRange {
                field: "velocity",
                ..
            })
        ));
        // A gap past the largest id.
        let mut gap = vec![4, 0];
        put_varint(&mut gap, u128::from(u64::MAX) << 3);
        assert_eq!(StateBatch::decode(&gap), Err(BatchError::BodyIds));
    }

    #[test]
    fn any_bytes_decode_or_fail_without_panicking() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..400 {
            let bytes: Vec<u8> = (0..len % 97)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = StateBatch::decode(&bytes);
        }
    }

    fn q(i: u64) -> QuantizedState {
        QuantizedState::new(&moving(i))
    }

    /// Decodes `bytes` and applies its deltas against `base` (one baseline for every body).
    fn resolve_against(bytes: &[u8], base: &QuantizedState) -> Vec<(BodyId, QuantizedState)> {
        let wire = WireBatch::decode(bytes).unwrap();
        wire.entries
            .iter()
            .map(|(b, e)| match e {
                Entry::Absolute(q) => (*b, *q),
                Entry::Delta(d) => (*b, d.apply(base).unwrap()),
            })
            .collect()
    }

    #[test]
    fn delta_entries_round_trip_bit_for_bit_and_an_unchanged_body_costs_two_bytes() {
        // A resting body sent again 3 batches after its acknowledged baseline.
        let resting = moving(4).stopped();
        let base = QuantizedState::new(&resting);
        let batch = StateBatch {
            seq: 10,
            focus: None,
            bodies: vec![(BodyId(3), resting)],
        };
        let wire = batch.to_wire(None, |_| Some((7, base))).unwrap();
        assert_eq!(wire.deltas(), 1);
        let bytes = wire.encode().unwrap();
        // head (count, seq) + entry head + flag byte (ago 3 inline).
        assert_eq!(bytes, vec![4, 10, 3 << 3 | 4, 3 << 5]);
        assert_eq!(resolve_against(&bytes, &base), vec![(BodyId(3), base)]);
        // Far back: the offset follows as a varint, one byte more.
        let far = batch
            .to_wire(None, |_| Some((10u32.wrapping_sub(64), base)))
            .unwrap();
        assert_eq!(far.encode().unwrap().len(), 5);
        // A moving body against a state one frame older: every field differs, and the delta
        // reconstructs exactly what the absolute entry carries.
        let now = moving(7);
        let before = BodyState {
            position: now.position - now.linear_velocity / 64.0,
            rotation: now.rotation * Quat::from_rotation_y(-0.02),
            linear_velocity: now.linear_velocity - Vec3::new(0.0, -9.81 / 64.0, 0.0),
            angular_velocity: now.angular_velocity,
        };
        let base = QuantizedState::new(&before);
        let batch = StateBatch {
            seq: 2,
            focus: Some(Vec3::ONE),
            bodies: vec![(BodyId(40), now)],
        };
        let ack = BatchAck {
            newest: 77,
            earlier: 0b101,
        };
        let wire = batch.to_wire(Some(ack), |_| Some((1, base))).unwrap();
        let Entry::Delta(delta) = wire.entries[0].1 else {
            panic!("absolute: {wire:?}")
        };
        assert!(matches!(delta.rotation, RotationDelta::Components(_)));
        assert_eq!(delta.angular, [0; 3]);
        let bytes = wire.encode().unwrap();
        let absolute = batch
            .to_wire(Some(ack), |_| None)
            .unwrap()
            .encode()
            .unwrap();
        assert!(
            bytes.len() + 5 <= absolute.len(),
            "{} vs {}",
            bytes.len(),
            absolute.len()
        );
        let back = WireBatch::decode(&bytes).unwrap();
        assert_eq!(back.ack, Some(ack));
        assert_eq!(
            back.ack.unwrap().seqs().collect::<Vec<_>>(),
            vec![77, 76, 74]
        );
        assert_eq!(resolve_against(&bytes, &base), vec![(BodyId(40), q(7))]);
        assert_eq!(q(7).to_state(), quantize(&now));
    }

    #[test]
    fn a_delta_is_sent_only_where_it_is_smaller() {
        let state = QuantizedState::new(&BodyState::resting(
            Vec3::new(0.1, 0.2, 0.3),
            Quat::IDENTITY,
        ));
        // A baseline kilometres away and spinning fast: every difference is larger than the
        // value itself, so the body goes absolute.
        let far = QuantizedState::new(&BodyState {
            position: Vec3::new(-9_000.0, 8_000.0, -7_000.0),
            rotation: Quat::from_rotation_x(2.0),
            linear_velocity: Vec3::splat(-300.0),
            angular_velocity: Vec3::splat(200.0),
        });
        let entry = choose_entry(0, state, 5, Some((4, far)));
        assert_eq!(entry, Entry::Absolute(state));
        let delta = Entry::Delta(Delta::between(&far, &state, 1));
        assert!(
            delta.size(0) >= entry.size(0),
            "{} vs {}",
            delta.size(0),
            entry.size(0)
        );
        // The same body against itself is a delta of 2 bytes, unless the baseline is the batch
        // itself or too far back.
        assert_eq!(choose_entry(0, state, 5, Some((4, state))).size(0), 2);
        assert_eq!(
            choose_entry(0, state, 5, Some((5, state))),
            Entry::Absolute(state)
        );
        let too_old = 5u32.wrapping_sub(MAX_BASELINE_AGO + 1);
        assert_eq!(
            choose_entry(0, state, 5, Some((too_old, state))),
            Entry::Absolute(state)
        );
        // The budget's size is the chosen entry's.
        let body = BodyId(9);
        let s = state.to_state();
        assert_eq!(entry_size_with(body, &s, 5, Some((4, state))), 2);
        assert_eq!(
            entry_size_with(body, &s, 5, None),
            entry_size_bound(body, &s)
        );
    }

    #[test]
    fn rotation_travels_as_component_differences_only_with_the_same_largest_component() {
        // w largest, then x largest.
        let a = QuantizedState::new(&BodyState::resting(Vec3::ZERO, Quat::from_rotation_x(0.3)));
        let b = QuantizedState::new(&BodyState::resting(Vec3::ZERO, Quat::from_rotation_x(0.31)));
        let c = QuantizedState::new(&BodyState::resting(Vec3::ZERO, Quat::from_rotation_x(3.0)));
        assert_eq!(a.rotation & 3, b.rotation & 3);
        assert_ne!(a.rotation & 3, c.rotation & 3);
        let same = Delta::between(&a, &b, 1);
        assert!(matches!(same.rotation, RotationDelta::Components(d) if d != [0; 3]));
        assert_eq!(same.apply(&a), Some(b));
        let changed = Delta::between(&a, &c, 1);
        assert_eq!(changed.rotation, RotationDelta::Absolute(c.rotation));
        assert_eq!(changed.apply(&a), Some(c));
        // A component pushed past 12 bits, or a position past 10⁶ m: no state.
        let mut over = same;
        over.rotation = RotationDelta::Components([ROTATION_MAX as i64, 0, 0]);
        assert_eq!(over.apply(&a), None);
        let mut far = same;
        far.position = [2 * MAX_POSITION_Q, 0, 0];
        assert_eq!(far.apply(&a), None);
    }

    #[test]
    fn hostile_delta_entries_are_typed_errors() {
        let body = BodyId(0);
        // count 1, seq 9, entry head: gap 0, delta.
        let entry = |rest: &[u8]| {
            let mut b = vec![4, 9, 4];
            b.extend_from_slice(rest);
            b
        };
        assert_eq!(
            WireBatch::decode(&entry(&[0, 0])),
            Err(BatchError::BaselineOffset { body, ago: 0 })
        );
        let mut too_far = entry(&[0]);
        put_varint(&mut too_far, u128::from(MAX_BASELINE_AGO) + 1);
        assert_eq!(
            WireBatch::decode(&too_far),
            Err(BatchError::BaselineOffset {
                body,
                ago: u64::from(MAX_BASELINE_AGO) + 1
            })
        );
        assert_eq!(
            WireBatch::decode(&entry(&[1 << 5 | FLAG_ROTATION | FLAG_ROTATION_ABSOLUTE])),
            Err(BatchError::Malformed("delta rotation flags"))
        );
        assert_eq!(
            WireBatch::decode(&[4, 9, 4 | 2, 1 << 5]),
            Err(BatchError::Malformed("delta entry head"))
        );
        let mut huge = entry(&[1 << 5 | FLAG_ROTATION]);
        put_zigzag(&mut huge, 5_000);
        huge.extend([0, 0]);
        assert!(matches!(
            WireBatch::decode(&huge),
            Err(BatchError::OutOfRange {
                field: "rotation delta",
                ..
            })
        ));
        let mut fast = entry(&[1 << 5 | FLAG_LINEAR]);
        put_zigzag(&mut fast, 3 * MAX_VELOCITY_Q);
        fast.extend([0, 0]);
        assert!(matches!(
            WireBatch::decode(&fast),
            Err(BatchError::OutOfRange { .. })
        ));
        // Every truncation of a good delta batch, and the no-baseline decoder.
        let good = StateBatch {
            seq: 9,
            focus: None,
            bodies: vec![(BodyId(2), moving(3))],
        }
        .to_wire(Some(BatchAck::default()), |_| Some((8, q(2))))
        .unwrap()
        .encode()
        .unwrap();
        for len in 0..good.len() {
            assert!(WireBatch::decode(&good[..len]).is_err(), "length {len}");
        }
        assert_eq!(
            StateBatch::decode(&good),
            Err(BatchError::NeedsBaseline { body: BodyId(2) })
        );
    }

    #[test]
    fn batch_numbers_compare_across_wraparound() {
        assert!(is_newer_batch(1, 0));
        assert!(is_newer_batch(0, u32::MAX));
        assert!(!is_newer_batch(5, 5));
        assert!(!is_newer_batch(4, 5));
    }
}
