//! Messages of simulation ownership (entity server and participants), and the compact body
//! state they carry.
//!
//! The server takes a bidder's identity from the connection, never from a message, so client
//! messages carry no participant id; server messages that concern someone else's body name the
//! owner.
//!
//! # Size of a body state
//!
//! Since protocol version 5 participants and the entity server send states as `StateBatch`
//! bytes (`simsync_ownership`'s batch codec: about 12–24 bytes a body, plus a few bytes a
//! message); since version 6 a batch also acknowledges the batches its sender received, and a
//! body may travel as a delta against a state its receiver acknowledged (a few bytes for a
//! body at rest). Since version 8 they are the only way states travel, and bids travel only as
//! `Bids` lists: the one-body `Bid`, `StateUpdate` and `StateRelay` of earlier versions are gone.
//!
//! [`PackedBodyState`] (carried by `Respawn` and `Reset`) is position as 3 × `f32` (12 bytes),
//! rotation "smallest three" packed in 6 bytes ([`PackedRotation`]), linear and angular
//! velocity as 3 × `f32` each (24 bytes), plus the body id and sequence number as varints (1
//! byte each below 251, 3 below 65,536, 5 for larger `seq` and up to 9 for larger ids): 44
//! bytes for small numbers (see the `body_state_wire_size` test).

use std::f32::consts::FRAC_1_SQRT_2;

use bevy::math::{Quat, Vec3};
use bevy::reflect::std_traits::ReflectDefault;
use serde::{Deserialize, Serialize};

use crate::{NetChannel, ParticipantId};

/// Network id of a simulated body, shared by all participants (and independent of any Bevy
/// `Entity`). A varint on the wire. The one body id of simsync: `simsync_ownership` uses it too.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    bevy::reflect::Reflect,
)]
#[reflect(Debug, Default, PartialEq, Hash, Clone)]
pub struct BodyId(pub u64);

impl std::fmt::Display for BodyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "body {}", self.0)
    }
}

/// A unit quaternion in 6 bytes: "smallest three" — the index of the largest component
/// (2 bits) and the other three, each in [-1/√2, 1/√2], quantized to 15 bits. The largest
/// component is rebuilt as `sqrt(1 − a² − b² − c²)` (made non-negative by the sign flip `q ≡ −q`).
///
/// Quantization error: at most 2.2 × 10⁻⁵ on each sent component, and a little more on the
/// rebuilt one; the rotation is off by at most about 2 × 10⁻⁴ rad (0.01°). Any 6 bytes decode to
/// a valid unit quaternion (the 48th bit is ignored), so [`PackedRotation::to_quat`] never fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PackedRotation(pub [u8; 6]);

const COMPONENT_BITS: u32 = 15;

impl PackedRotation {
    /// The identity rotation, packed.
    pub fn identity() -> Self {
        Self::from_quat(Quat::IDENTITY)
    }

    /// Packs `rotation`, normalizing it first. A quaternion that is not finite or has (nearly)
    /// zero length packs as the identity.
    pub fn from_quat(rotation: Quat) -> Self {
        let bytes = pack_smallest_three(rotation, COMPONENT_BITS).to_le_bytes();
        Self([bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5]])
    }

    /// Unpacks to a unit quaternion (never fails, see the type docs).
    pub fn to_quat(self) -> Quat {
        let mut bytes = [0u8; 8];
        bytes[..6].copy_from_slice(&self.0);
        unpack_smallest_three(u64::from_le_bytes(bytes), COMPONENT_BITS).0
    }
}

/// Largest component width [`pack_smallest_three`] takes: `2 + 3 × 20` bits fill a `u64`.
pub const MAX_SMALLEST_THREE_BITS: u32 = 20;

/// Packs a rotation as "smallest three" in the low `2 + 3 × bits` bits of a `u64`: the index of
/// the largest component (2 bits, the quaternion's sign flipped so that component is
/// non-negative, `q ≡ −q`), then the other three in order, each mapped from [−1/√2, 1/√2] onto
/// `bits` bits. The rotation is normalized first; one that is not finite or has (nearly) zero
/// length packs as the identity. A component's step is `√2 / (2^bits − 1)` (4.3 × 10⁻⁵ at 15
/// bits, 3.5 × 10⁻⁴ at 12). [`PackedRotation`] is this at 15 bits; simsync_ownership's state
/// batches use 12.
///
/// # Panics
/// Never; `bits` above [`MAX_SMALLEST_THREE_BITS`] is treated as that many (and 0 as 1).
pub fn pack_smallest_three(rotation: Quat, bits: u32) -> u64 {
    let bits = bits.clamp(1, MAX_SMALLEST_THREE_BITS);
    let max = ((1u64 << bits) - 1) as f32;
    let mut c = rotation.to_array();
    let length_squared: f32 = c.iter().map(|v| v * v).sum();
    if !length_squared.is_finite() || length_squared < 1e-12 {
        c = Quat::IDENTITY.to_array();
    } else {
        let inverse = length_squared.sqrt().recip();
        for v in &mut c {
            *v *= inverse;
        }
    }
    let mut largest = 0;
    for i in 1..4 {
        if c[i].abs() > c[largest].abs() {
            largest = i;
        }
    }
    if c[largest] < 0.0 {
        for v in &mut c {
            *v = -*v;
        }
    }
    let mut packed = largest as u64;
    let mut shift = 2;
    for (i, v) in c.iter().enumerate() {
        if i == largest {
            continue;
        }
        let unit = (v.clamp(-FRAC_1_SQRT_2, FRAC_1_SQRT_2) + FRAC_1_SQRT_2) / (2.0 * FRAC_1_SQRT_2);
        let quantized = (unit * max).round().clamp(0.0, max) as u64;
        packed |= quantized << shift;
        shift += bits;
    }
    packed
}

/// The rotation of [`pack_smallest_three`]'s low `2 + 3 × bits` bits (higher bits ignored),
/// always a unit quaternion, with the sum of the three sent components' squares: above 3/4 the
/// bits cannot come from a unit quaternion (its largest component is at least 1/2), so a
/// decoder that must reject malformed input checks it; the largest component is then rebuilt
/// as 0.
pub fn unpack_smallest_three(packed: u64, bits: u32) -> (Quat, f32) {
    let (mut c, largest, sum) = smallest_three_parts(packed, bits);
    c[largest] = (1.0 - sum).max(0.0).sqrt();
    (Quat::from_array(c).normalize(), sum)
}

/// The sum [`unpack_smallest_three`] returns for `packed` and `bits`, bit for bit, without
/// rebuilding the rotation (no square root, no normalizing): what a decoder checking that
/// three sent components can belong to a unit quaternion needs.
pub fn smallest_three_square_sum(packed: u64, bits: u32) -> f32 {
    smallest_three_parts(packed, bits).2
}

/// The three sent components of `packed` in their places (the largest's place, also
/// returned, left 0) and the sum of their squares, in packing order.
fn smallest_three_parts(packed: u64, bits: u32) -> ([f32; 4], usize, f32) {
    let bits = bits.clamp(1, MAX_SMALLEST_THREE_BITS);
    let mask = (1u64 << bits) - 1;
    let largest = (packed & 3) as usize;
    let mut c = [0.0f32; 4];
    let mut shift = 2;
    let mut sum = 0.0;
    for (i, v) in c.iter_mut().enumerate() {
        if i == largest {
            continue;
        }
        let quantized = ((packed >> shift) & mask) as f32;
        *v = quantized / mask as f32 * (2.0 * FRAC_1_SQRT_2) - FRAC_1_SQRT_2;
        sum += *v * *v;
        shift += bits;
    }
    (c, largest, sum)
}

impl From<Quat> for PackedRotation {
    fn from(rotation: Quat) -> Self {
        Self::from_quat(rotation)
    }
}

impl From<PackedRotation> for Quat {
    fn from(rotation: PackedRotation) -> Self {
        rotation.to_quat()
    }
}

/// The state of one body as its owner sends it, packed for the wire: 44 bytes for small ids
/// (see the [module docs](self)). `simsync_ownership` works with an unpacked, Bevy-math
/// `BodyState` and converts at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PackedBodyState {
    /// The body.
    pub body: BodyId,
    /// Per-body sequence number set by the owner, increasing by one per update (wrapping); a
    /// receiver drops an update that is not newer than the last it applied, since the state
    /// channel neither orders nor deduplicates (`simsync_ownership` numbers updates with 16
    /// bits and compares them across wrap-around).
    pub seq: u32,
    /// World position, in metres.
    pub position: [f32; 3],
    /// World rotation, packed.
    pub rotation: PackedRotation,
    /// Linear velocity, in m/s.
    pub linvel: [f32; 3],
    /// Angular velocity, in rad/s.
    pub angvel: [f32; 3],
}

impl PackedBodyState {
    /// Builds a state from Bevy math types (the rotation is packed, see [`PackedRotation`]).
    pub fn new(
        body: BodyId,
        seq: u32,
        position: Vec3,
        rotation: Quat,
        linvel: Vec3,
        angvel: Vec3,
    ) -> Self {
        Self {
            body,
            seq,
            position: position.to_array(),
            rotation: PackedRotation::from_quat(rotation),
            linvel: linvel.to_array(),
            angvel: angvel.to_array(),
        }
    }

    /// Position, in metres.
    pub fn position(&self) -> Vec3 {
        Vec3::from_array(self.position)
    }

    /// Rotation, unpacked (unit quaternion).
    pub fn rotation(&self) -> Quat {
        self.rotation.to_quat()
    }

    /// Linear velocity, in m/s.
    pub fn linvel(&self) -> Vec3 {
        Vec3::from_array(self.linvel)
    }

    /// Angular velocity, in rad/s.
    pub fn angvel(&self) -> Vec3 {
        Vec3::from_array(self.angvel)
    }
}

/// Who owns a body, at which priority: the ownership record. `owner: None` means unowned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OwnerRecord {
    /// The body.
    pub body: BodyId,
    /// The owner, or `None` if the body is unowned.
    pub owner: Option<ParticipantId>,
    /// The owner's priority (0 when unowned).
    pub priority: u8,
}

/// Why the entity server turned a participant's message (a bid, a priority change, a release
/// or a state update) down. The one refusal type of simsync: the entity server's arbiter
/// decides it and the wire carries it unchanged. Rule numbers are those of the ownership rules
/// in `simsync_ownership`'s `rules` module.
///
/// A protocol outcome, not an error: the server counts it and answers it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, bevy::reflect::Reflect,
)]
#[reflect(Debug, PartialEq, Hash, Clone)]
pub enum RefusalReason {
    /// The body is locked against bids (ownership rule 1).
    Locked,
    /// The bid is below the current owner's priority (ownership rule 2 only grants higher).
    LowerPriority,
    /// The bid equals the owner's priority and came within the equal-priority lockout of the
    /// body's last ownership change (ownership rule 3).
    LockedOutEqualPriority,
    /// A release, priority change or state update from someone who does not own the body
    /// (ownership rule 4).
    NotOwner,
    /// The body is not registered with the server.
    UnknownBody,
    /// The body is static or kinematic; only dynamic bodies can be owned.
    NotOwnable,
    /// The priority is above the configured `max_bid_priority`.
    PriorityTooHigh,
    /// A bid below `volunteer_priority`, or a priority change below `yield_priority` (to give a
    /// body up, release it).
    PriorityTooLow,
    /// A GRAB bid for a body another participant holds at GRAB, with the exclusive-grab option
    /// on (`OwnershipConfig::exclusive_grab`; ownership rule 3's exception).
    HeldExclusively,
    /// A state update whose linear speed is above the entity server's speed limit
    /// (`simsync_ownership`'s `StateLimits`): physically impossible for the game, refused, and
    /// the sender loses the body.
    TooFast,
    /// A state update farther from the server's state of the body than its speed limit allows
    /// plus the teleport limit (`StateLimits`): refused, and the sender loses the body.
    Teleported,
    /// A bid for a body whose impossible state (`TooFast`, `Teleported`) the server refused from
    /// this participant less than `StateLimits::penalty` ago: it cannot take the body back yet.
    Penalized,
}

impl RefusalReason {
    /// Number of reasons.
    pub const COUNT: usize = 12;
    /// Every reason, in declaration order (`reason as usize` is its index here).
    pub const ALL: [RefusalReason; Self::COUNT] = [
        RefusalReason::Locked,
        RefusalReason::LowerPriority,
        RefusalReason::LockedOutEqualPriority,
        RefusalReason::NotOwner,
        RefusalReason::UnknownBody,
        RefusalReason::NotOwnable,
        RefusalReason::PriorityTooHigh,
        RefusalReason::PriorityTooLow,
        RefusalReason::HeldExclusively,
        RefusalReason::TooFast,
        RefusalReason::Teleported,
        RefusalReason::Penalized,
    ];
}

impl RefusalReason {
    /// The reason's name in snake case (`"lower_priority"`), for summaries, logs and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            RefusalReason::Locked => "locked",
            RefusalReason::LowerPriority => "lower_priority",
            RefusalReason::LockedOutEqualPriority => "locked_out_equal_priority",
            RefusalReason::NotOwner => "not_owner",
            RefusalReason::UnknownBody => "unknown_body",
            RefusalReason::NotOwnable => "not_ownable",
            RefusalReason::PriorityTooHigh => "priority_too_high",
            RefusalReason::PriorityTooLow => "priority_too_low",
            RefusalReason::HeldExclusively => "held_exclusively",
            RefusalReason::TooFast => "too_fast",
            RefusalReason::Teleported => "teleported",
            RefusalReason::Penalized => "penalized",
        }
    }
}

impl std::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefusalReason::Locked => "the body is locked",
            RefusalReason::LowerPriority => "the bid is below the owner's priority",
            RefusalReason::LockedOutEqualPriority => {
                "equal priority within the lockout after the last ownership change"
            }
            RefusalReason::NotOwner => "the sender does not own the body",
            RefusalReason::UnknownBody => "unknown body",
            RefusalReason::NotOwnable => "the body is not dynamic and cannot be owned",
            RefusalReason::PriorityTooHigh => {
                "the priority is above the maximum a participant may bid"
            }
            RefusalReason::PriorityTooLow => "the priority is below the minimum for this message",
            RefusalReason::HeldExclusively => "another participant holds the body exclusively",
            RefusalReason::TooFast => "the state's speed is above the server's speed limit",
            RefusalReason::Teleported => {
                "the state is farther from the server's state than the body could have moved"
            }
            RefusalReason::Penalized => {
                "the sender's impossible state for this body was refused too recently"
            }
        })
    }
}

/// Most bids one [`OwnershipClientMessage::Bids`] may carry: 1,024 (at most 11 bytes each on
/// the wire, so a full message stays under 12 KiB). A participant with more bids in a frame
/// sends several messages; the entity server drops a longer list whole and counts it.
pub const MAX_BIDS_PER_MESSAGE: usize = 1_024;

/// One bid of a [`OwnershipClientMessage::Bids`] list: the body and the priority asked for (a
/// bid for a body, or from its owner a priority change).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BidRequest {
    /// The body.
    pub body: BodyId,
    /// Bid priority.
    pub priority: u8,
}

/// Ownership messages from a participant to the entity server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum OwnershipClientMessage {
    /// The owner gives `body` up. Channel: control.
    Release {
        /// The body.
        body: BodyId,
    },
    /// The owner's states of many bodies in one message, at most one per participant per frame
    /// (plus one for each release's final state): the bytes of `simsync_ownership`'s
    /// `StateBatch` codec (quantized positions, rotations and velocities, about 12–24 bytes a
    /// body). Channel: state (control for a release's final state).
    StateBatch(Vec<u8>),
    /// Every bid and priority change of one frame (protocol version 7; the only way bids
    /// travel since version 8): each asks to own its body at its priority, or, from the body's
    /// owner, changes the priority. At most [`MAX_BIDS_PER_MESSAGE`] entries. Channel: control.
    Bids(Vec<BidRequest>),
    /// The participant respawned `state.body` under its id, at rest at `state` (protocol
    /// version 7; `seq` is ignored): it asks the entity server to start the body again,
    /// unowned, for everyone. Channel: control.
    Respawn(PackedBodyState),
}

impl OwnershipClientMessage {
    /// The channel this message is meant to be sent on.
    pub fn channel(&self) -> NetChannel {
        match self {
            OwnershipClientMessage::Release { .. }
            | OwnershipClientMessage::Bids(_)
            | OwnershipClientMessage::Respawn(_) => NetChannel::Control,
            OwnershipClientMessage::StateBatch(_) => NetChannel::State,
        }
    }
}

/// Ownership messages from the entity server to participants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum OwnershipServerMessage {
    /// The recipient's bid won: it owns `body` at `priority` (which may differ from the bid, e.g.
    /// a volunteer bid granted as recruit). Channel: control.
    Grant {
        /// The body.
        body: BodyId,
        /// Granted priority.
        priority: u8,
    },
    /// The recipient's bid, priority change, release or state update was refused.
    /// Channel: control.
    Refused {
        /// The body.
        body: BodyId,
        /// Why: every reason the entity server's arbiter has, unchanged.
        reason: RefusalReason,
        /// The body's owner when the server refused (`None`: unowned or unknown body), so the
        /// participant corrects its view at once.
        owner: Option<ParticipantId>,
        /// That owner's priority (0 when unowned).
        priority: u8,
    },
    /// A body's owner or priority changed (sent to everyone). Channel: control.
    OwnerChanged(OwnerRecord),
    /// The ownership of many bodies at once, e.g. for a participant that just joined.
    /// Channel: control.
    Snapshot(Vec<OwnerRecord>),
    /// Owners' states of many bodies relayed in one message, chosen for this receiver within
    /// its relay budget: the bytes of `simsync_ownership`'s `StateBatch` codec. Channel: state
    /// (control for a released body's zero-velocity state and a late joiner's first states).
    StateBatch(Vec<u8>),
    /// `body` was respawned under its id (protocol version 7): it is unowned, at rest at
    /// `state` when the server has one (`seq` is meaningless), and every participant drops
    /// what it knew of the old body — its owner, its requests, the relayed states it applied.
    /// Sent to everyone. Channel: control.
    Reset {
        /// The body.
        body: BodyId,
        /// Where it starts again, at rest.
        state: Option<PackedBodyState>,
    },
    /// The entity server heard nothing from the recipient for its participant silence timeout
    /// and counted it as gone (protocol version 9): every body it owned was cleared, as for a
    /// closed connection (ownership rule 5). Sent once the server hears from it again; its
    /// connection and participant id stay. Channel: control.
    CountedSilent {
        /// How long the server heard nothing from it, in milliseconds.
        silent_ms: u32,
        /// Bodies it owned that were cleared.
        bodies_cleared: u32,
    },
    /// The room ends (protocol version 10): its server drains or its operator ended it. The
    /// server closes the connection shortly after. Channel: control.
    Closing {
        /// Why.
        reason: crate::MatchEndReason,
    },
}

impl OwnershipServerMessage {
    /// The channel this message is meant to be sent on.
    pub fn channel(&self) -> NetChannel {
        match self {
            OwnershipServerMessage::StateBatch(_) => NetChannel::State,
            _ => NetChannel::Control,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_rotation_round_trips_within_2e_4_rad() {
        let samples = [
            Quat::IDENTITY,
            Quat::from_rotation_x(1.0),
            Quat::from_rotation_y(-2.5),
            Quat::from_rotation_z(3.1),
            Quat::from_euler(bevy::math::EulerRot::XYZ, 0.3, -1.2, 2.9),
            Quat::from_xyzw(0.5, 0.5, 0.5, 0.5),
            Quat::from_xyzw(-0.5, 0.5, -0.5, -0.5),
            Quat::from_xyzw(0.0, 0.0, 0.0, -1.0),
        ];
        for q in samples {
            let back = PackedRotation::from_quat(q).to_quat();
            // Chordal distance, q ≡ −q; the rotation angle is about twice it.
            let chord = (q - back).length().min((q + back).length());
            assert!(chord < 1e-4, "{q:?} → {back:?}: {chord}");
            assert!((back.length() - 1.0).abs() < 1e-6);
        }
    }

    #[test]
    fn smallest_three_keeps_its_bound_at_every_width_and_any_bits_decode_to_a_unit_quaternion() {
        let samples = [
            Quat::IDENTITY,
            Quat::from_rotation_x(1.0),
            Quat::from_euler(bevy::math::EulerRot::XYZ, 0.3, -2.0, 1.2),
            -Quat::from_rotation_z(3.0),
        ];
        for bits in [8, 12, 15, 20] {
            // Each sent component is off by at most half a step, the rebuilt one by about two
            // steps.
            let step = std::f32::consts::SQRT_2 / ((1u64 << bits) - 1) as f32;
            for q in samples {
                let packed = pack_smallest_three(q, bits);
                assert_eq!(packed >> (2 + 3 * bits), 0, "{bits} bits");
                let (back, sum) = unpack_smallest_three(packed, bits);
                assert!(sum <= 0.75 + 2.0 * step, "{bits} bits: sum {sum}");
                // Chordal distance, q ≡ −q (acos near 1 is too coarse in f32 for 20 bits).
                let chord = (q - back).length().min((q + back).length());
                assert!(chord <= 3.0 * step + 1e-6, "{bits} bits, {q:?}: {chord}");
            }
        }
        // Widths out of range are clamped, never a panic or an overflowing shift.
        assert_eq!(
            pack_smallest_three(Quat::IDENTITY, 64),
            pack_smallest_three(Quat::IDENTITY, MAX_SMALLEST_THREE_BITS)
        );
        for packed in [0, u64::MAX, 0x5555_5555_5555_5555] {
            for bits in [0, 12, 15, 99] {
                let (q, _) = unpack_smallest_three(packed, bits);
                assert!((q.length() - 1.0).abs() < 1e-5);
            }
        }
        // PackedRotation is the 15-bit form.
        let q = Quat::from_rotation_y(0.7);
        let bytes = pack_smallest_three(q, 15).to_le_bytes();
        assert_eq!(PackedRotation::from_quat(q).0, bytes[..6]);
    }

    #[test]
    fn packed_rotation_handles_degenerate_input_and_any_bytes() {
        assert_eq!(
            PackedRotation::from_quat(Quat::from_xyzw(f32::NAN, 0.0, 0.0, 1.0)),
            PackedRotation::identity()
        );
        assert_eq!(
            PackedRotation::from_quat(Quat::from_xyzw(0.0, 0.0, 0.0, 0.0)),
            PackedRotation::identity()
        );
        for bytes in [[0u8; 6], [0xFF; 6], [1, 2, 3, 4, 5, 6]] {
            let q = PackedRotation(bytes).to_quat();
            assert!(q.is_finite() && (q.length() - 1.0).abs() < 1e-5, "{q:?}");
        }
    }

    #[test]
    fn channels_of_ownership_messages() {
        let bids = vec![BidRequest {
            body: BodyId(1),
            priority: 2,
        }];
        assert_eq!(
            OwnershipClientMessage::Bids(bids).channel(),
            NetChannel::Control
        );
        let state = PackedBodyState::new(
            BodyId(1),
            0,
            Vec3::ZERO,
            Quat::IDENTITY,
            Vec3::ZERO,
            Vec3::ZERO,
        );
        assert_eq!(
            OwnershipClientMessage::Respawn(state).channel(),
            NetChannel::Control
        );
        assert_eq!(
            OwnershipClientMessage::StateBatch(vec![1]).channel(),
            NetChannel::State
        );
        assert_eq!(
            OwnershipServerMessage::StateBatch(vec![1]).channel(),
            NetChannel::State
        );
        assert_eq!(
            OwnershipServerMessage::Reset {
                body: BodyId(1),
                state: Some(state)
            }
            .channel(),
            NetChannel::Control
        );
        assert_eq!(
            OwnershipServerMessage::Snapshot(vec![]).channel(),
            NetChannel::Control
        );
    }

    #[test]
    fn every_refusal_reason_has_its_own_snake_case_name() {
        let names: Vec<&str> = RefusalReason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names[1], "lower_priority");
        assert_eq!(names[8], "held_exclusively");
        assert_eq!(names[9], "too_fast");
        assert_eq!(names[10], "teleported");
        assert_eq!(names[11], "penalized");
        for (i, name) in names.iter().enumerate() {
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{name}"
            );
            assert!(!names[..i].contains(name), "{name} twice");
        }
    }
}
