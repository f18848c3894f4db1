//! [`StateBatch`]: many bodies' states in one message, quantized
//! ([ownership rules 15 and 16](crate::rules#rule-15--one-state-batch-per-frame)).
//!
//! The format and error bounds are on [`StateBatch`].

use bevy::math::{Quat, Vec3};
use bevy::platform::collections::HashMap;
use simsync_net::{pack_smallest_three, unpack_smallest_three};
use thiserror::Error;

use crate::body::BodyState;
use crate::priority::BodyId;

/// Position step, m: 1 mm.
pub const POSITION_STEP: f32 = 0.001;
/// Velocity step, m/s (linear) and rad/s (angular): 1/256.
pub const VELOCITY_STEP: f32 = 1.0 / 256.0;
/// Largest absolute quantized position per axis: 10⁶ m in millimetres.
const MAX_POSITION_Q: i64 = 1_000_000_000;
/// Largest absolute quantized velocity per axis: 4,096 m/s (or rad/s) in 1/256 steps. Faster
/// bodies are sent at this speed.
const MAX_VELOCITY_Q: i64 = 1 << 20;
/// Most bodies one batch may carry; a decoder refuses more.
pub const MAX_BATCH_BODIES: usize = 8_192;
/// Most bytes one encoded batch may have (below renet's 64 KiB message limit); a decoder
/// refuses more, and senders lay batches out within it.
pub const MAX_BATCH_BYTES: usize = 60 * 1024;
/// Largest body id a batch can carry (the id gap shares its varint with two flag bits).
pub const MAX_BATCH_BODY_ID: u64 = u64::MAX >> 2;

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
    /// A quantized value outside its range (decoding), or a state that is not finite
    /// (encoding).
    #[error("{body}: {field} out of range in a state batch")]
    OutOfRange {
        /// The body.
        body: BodyId,
        /// Which field.
        field: &'static str,
    },
}

/// Many bodies' states from one sender in one message. `seq` numbers the sender's batches
/// (wrapping `u32`, compared with [`is_newer_batch`]); `focus` is the sender's interest centre
/// (its avatar, [rule 19](crate::rules#rule-19--interest-radius)), if any.
///
/// # Format
/// All integers are LEB128 varints; signed ones are zigzag-encoded first.
///
/// | part | encoding |
/// |---|---|
/// | head | varint `count << 1 \| has_focus`; `count` at most [`MAX_BATCH_BODIES`] |
/// | `seq` | varint `u32`: the sender's batch number |
/// | focus | 3 × zigzag varint, millimetres (only with `has_focus`) |
/// | entries | `count` times, body ids strictly increasing |
///
/// One entry: a varint `gap << 2 | has_linear << 1 | has_angular` (`gap` = id − previous id −
/// 1, the first entry's previous id counting as −1), the position as 3 × zigzag varint
/// millimetres, the rotation in 5 bytes ("smallest three", 12 bits a component), then the
/// linear velocity (1/256 m/s) and angular velocity (1/256 rad/s) as 3 × zigzag varint each,
/// each only if non-zero after quantization. A resting body costs about 12 bytes, a moving
/// one within 8 m of the origin at under 32 m/s about 18–24.
///
/// # Quantization error
/// At most 0.5 mm per position axis, 1/512 m/s per linear and 1/512 rad/s per angular velocity
/// axis, and about 6 × 10⁻⁴ rad of rotation ([`quantize`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StateBatch {
    /// The sender's batch number.
    pub seq: u32,
    /// The sender's interest centre, m.
    pub focus: Option<Vec3>,
    /// The bodies, ids strictly increasing, with their states.
    pub bodies: Vec<(BodyId, BodyState)>,
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
    let q = QuantState::new(state);
    q.to_state()
}

/// The worst encoded size of one entry for `body` in `state`, bytes (the id counted as if it
/// were the first of the batch): what the budget reserves before the batch is laid out.
pub fn entry_size_bound(body: BodyId, state: &BodyState) -> usize {
    let q = QuantState::new(state);
    q.size(body.0.min(MAX_BATCH_BODY_ID))
}

/// Bytes of a batch header with `focus` and `count` bodies.
pub fn header_size(focus: Option<Vec3>, count: usize) -> usize {
    leb_len(((count as u128) << 1) | 1)
        + 5
        + focus.map_or(0, |f| {
            quantize_focus(f).iter().map(|v| zigzag_len(*v)).sum()
        })
}

impl StateBatch {
    /// The batch as bytes ([format](StateBatch#format)).
    ///
    /// # Errors
    /// [`BatchError::BodyIds`] if ids are not strictly increasing or above
    /// [`MAX_BATCH_BODY_ID`]; [`BatchError::TooManyBodies`] over [`MAX_BATCH_BODIES`];
    /// [`BatchError::OutOfRange`] for a position that is not finite or beyond 10⁶ m (velocities
    /// are clamped to 4,096 m/s, non-finite ones sent as 0).
    pub fn encode(&self) -> Result<Vec<u8>, BatchError> {
        if self.bodies.len() > MAX_BATCH_BODIES {
            return Err(BatchError::TooManyBodies {
                count: self.bodies.len() as u64,
            });
        }
        let mut out =
            Vec::with_capacity(header_size(self.focus, self.bodies.len()) + 24 * self.bodies.len());
        let head = ((self.bodies.len() as u128) << 1) | u128::from(self.focus.is_some());
        put_varint(&mut out, head);
        put_varint(&mut out, u128::from(self.seq));
        if let Some(focus) = self.focus {
            for v in quantize_focus(focus) {
                put_zigzag(&mut out, v);
            }
        }
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
            QuantState::new(state).put(&mut out, body.0 - next);
            next = body.0 + 1;
        }
        Ok(out)
    }

    /// Reads a batch from `bytes` ([format](StateBatch#format)).
    ///
    /// # Errors
    /// Every [`BatchError`] but `BodyIds`' ordering half: truncated, oversized, too many
    /// bodies, trailing bytes, malformed varints or flags, an id past [`MAX_BATCH_BODY_ID`],
    /// a position beyond 10⁶ m, a velocity beyond 4,096 m/s, or a rotation whose three sent
    /// components cannot belong to a unit quaternion.
    pub fn decode(bytes: &[u8]) -> Result<StateBatch, BatchError> {
        if bytes.len() > MAX_BATCH_BYTES {
            return Err(BatchError::Oversized { bytes: bytes.len() });
        }
        let mut r = Reader { bytes, at: 0 };
        let head = r.varint()?;
        let count = head >> 1;
        if count > MAX_BATCH_BODIES as u128 {
            return Err(BatchError::TooManyBodies {
                count: u64::try_from(count).unwrap_or(u64::MAX),
            });
        }
        let seq = u32::try_from(r.varint()?).map_err(|_| BatchError::Malformed("seq"))?;
        let focus = if head & 1 == 1 {
            let mut f = [0i64; 3];
            for v in &mut f {
                *v = r.zigzag()?;
                if v.abs() > MAX_POSITION_Q {
                    return Err(BatchError::Malformed("focus out of range"));
                }
            }
            Some(Vec3::new(f[0] as f32, f[1] as f32, f[2] as f32) * POSITION_STEP)
        } else {
            None
        };
        let mut bodies = Vec::with_capacity(count as usize);
        let mut next: u64 = 0;
        for _ in 0..count {
            let (body, state) = QuantState::get(&mut r, next)?;
            next = body.0 + 1;
            bodies.push((body, state));
        }
        if r.at != bytes.len() {
            return Err(BatchError::TrailingBytes {
                bytes: bytes.len() - r.at,
            });
        }
        Ok(StateBatch { seq, focus, bodies })
    }
}

/// A state in wire units.
#[derive(Debug, Clone, Copy, PartialEq)]
struct QuantState {
    position: [i64; 3],
    rotation: u64,
    linear: [i64; 3],
    angular: [i64; 3],
}

impl QuantState {
    fn new(state: &BodyState) -> Self {
        let pos = |v: f32| {
            let q = (v / POSITION_STEP).round();
            if q.is_finite() {
                (q as i64).clamp(-MAX_POSITION_Q, MAX_POSITION_Q)
            } else {
                0
            }
        };
        let vel = |v: f32| {
            let q = (v / VELOCITY_STEP).round();
            if q.is_finite() {
                (q as i64).clamp(-MAX_VELOCITY_Q, MAX_VELOCITY_Q)
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

    fn to_state(self) -> BodyState {
        let v = |q: [i64; 3], step: f32| Vec3::new(q[0] as f32, q[1] as f32, q[2] as f32) * step;
        BodyState {
            position: v(self.position, POSITION_STEP),
            rotation: unpack_rotation(self.rotation).unwrap_or(Quat::IDENTITY),
            linear_velocity: v(self.linear, VELOCITY_STEP),
            angular_velocity: v(self.angular, VELOCITY_STEP),
        }
    }

    fn size(&self, gap: u64) -> usize {
        let sum = |q: &[i64; 3]| q.iter().map(|v| zigzag_len(*v)).sum::<usize>();
        leb_len(u128::from(gap) << 2)
            + sum(&self.position)
            + ROTATION_BYTES
            + if self.linear == [0; 3] {
                0
            } else {
                sum(&self.linear)
            }
            + if self.angular == [0; 3] {
                0
            } else {
                sum(&self.angular)
            }
    }

    fn put(&self, out: &mut Vec<u8>, gap: u64) {
        let has_linear = self.linear != [0; 3];
        let has_angular = self.angular != [0; 3];
        let head = (u128::from(gap) << 2) | (u128::from(has_linear) << 1) | u128::from(has_angular);
        put_varint(out, head);
        for v in self.position {
            put_zigzag(out, v);
        }
        out.extend_from_slice(&self.rotation.to_le_bytes()[..ROTATION_BYTES]);
        for (present, values) in [(has_linear, self.linear), (has_angular, self.angular)] {
            if present {
                for v in values {
                    put_zigzag(out, v);
                }
            }
        }
    }

    fn get(r: &mut Reader, next: u64) -> Result<(BodyId, BodyState), BatchError> {
        let head = r.varint()?;
        let gap = u64::try_from(head >> 2).map_err(|_| BatchError::BodyIds)?;
        let id = next
            .checked_add(gap)
            .filter(|id| *id <= MAX_BATCH_BODY_ID)
            .ok_or(BatchError::BodyIds)?;
        let body = BodyId(id);
        let out_of_range = |field| BatchError::OutOfRange { body, field };
        let mut q = QuantState {
            position: [0; 3],
            rotation: 0,
            linear: [0; 3],
            angular: [0; 3],
        };
        for v in &mut q.position {
            *v = r.zigzag()?;
            if v.abs() > MAX_POSITION_Q {
                return Err(out_of_range("position"));
            }
        }
        let mut rot = [0u8; 8];
        rot[..ROTATION_BYTES].copy_from_slice(r.take(ROTATION_BYTES)?);
        q.rotation = u64::from_le_bytes(rot);
        let Some(rotation) = unpack_rotation(q.rotation) else {
            return Err(out_of_range("rotation"));
        };
        for (bit, values) in [(2u128, &mut q.linear), (1, &mut q.angular)] {
            if head & bit != 0 {
                for v in values.iter_mut() {
                    *v = r.zigzag()?;
                    if v.abs() > MAX_VELOCITY_Q {
                        return Err(out_of_range("velocity"));
                    }
                }
            }
        }
        let state = BodyState {
            rotation,
            ..q.to_state()
        };
        Ok((body, state))
    }
}

/// Bytes of a packed rotation: 2 bits for the largest component's index, 3 × 12 bits, 2 spare
/// bits that must be 0.
const ROTATION_BYTES: usize = 5;
const ROTATION_BITS: u32 = 12;
/// A component's largest quantized value (tests build hostile rotations from it).
#[cfg(test)]
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
    (sum <= 0.7501).then_some(rotation)
}

fn quantize_focus(focus: Vec3) -> [i64; 3] {
    let q = |v: f32| {
        let q = (v / POSITION_STEP).round();
        if q.is_finite() {
            (q as i64).clamp(-MAX_POSITION_Q, MAX_POSITION_Q)
        } else {
            0
        }
    };
    [q(focus.x), q(focus.y), q(focus.z)]
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
            assert!(
                sent.rotation.angle_between(got.rotation) < 1e-3,
                "{}",
                sent.rotation.angle_between(got.rotation)
            );
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
        let mut far = vec![2, 0, 0];
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
        let mut rot = vec![2, 0, 0, 0, 0, 0];
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
        let mut fast = vec![2, 0, 2, 0, 0, 0];
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
        let mut gap = vec![2, 0];
        put_varint(&mut gap, u128::from(u64::MAX) << 2);
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

    #[test]
    fn batch_numbers_compare_across_wraparound() {
        assert!(is_newer_batch(1, 0));
        assert!(is_newer_batch(0, u32::MAX));
        assert!(!is_newer_batch(5, 5));
        assert!(!is_newer_batch(4, 5));
    }
}
