//! Conversions between this crate's types and the wire types of [`simsync_net`]'s ownership
//! protocol ([`simsync_net::OwnershipClientMessage`], [`simsync_net::OwnershipServerMessage`]).
//!
//! Ids ([`BodyId`], [`ParticipantId`](crate::ParticipantId)) are `simsync_net`'s own types. The body state differs: [`crate::BodyState`] holds Bevy math types, the wire's
//! [`simsync_net::BodyState`] packs the rotation in 6 bytes and carries the body id and a
//! sequence number. Owners number their updates with a 16-bit [`Sequence`] (so a state update
//! stays at ≤ 48 bytes on the wire); the wire field is a `u32` varint, and a number above
//! 65,535 is rejected as [`OwnershipError::InvalidBodyState`].
//!
//! # Refusal reasons on the wire
//! The wire's [`RefuseReason`] has six reasons, this crate's [`RefusalReason`] eight. The
//! mapping ([`refuse_reason_to_wire`]) is:
//!
//! | [`RefusalReason`] | [`RefuseReason`] |
//! |---|---|
//! | `Locked` | `Locked` |
//! | `LowerPriority` | `LowerPriority` |
//! | `LockedOutEqualPriority` | `Lockout` |
//! | `NotOwner` | `NotOwner` |
//! | `UnknownBody` | `UnknownBody` |
//! | `NotOwnable` (static or kinematic body) | `Locked` (such a body is locked for good) |
//! | `PriorityTooHigh`, `PriorityTooLow` | `InvalidPriority` |
//!
//! A participant recovers the finer reason from what it asked and what it knows
//! ([`refuse_reason_from_wire`]).

use bevy::math::{Quat, Vec3};
use simsync_net::{self as proto, RefuseReason};

use crate::arbiter::{BodyKind, RefusalReason};
use crate::config::OwnershipConfig;
use crate::error::OwnershipError;
use crate::priority::{BodyId, Priority};
use crate::relay::{BodyState, Sequence};

/// Largest absolute value accepted for any coordinate of a received position (m), linear
/// velocity (m/s) or angular velocity (rad/s). Anything larger is treated as malformed: no
/// legitimate simulation sends it, and Rapier misbehaves on such values.
pub const MAX_STATE_MAGNITUDE: f32 = 1.0e6;

/// The wire reason sent back for a refusal (see the [module docs](self) for the mapping).
pub fn refuse_reason_to_wire(reason: RefusalReason) -> RefuseReason {
    match reason {
        RefusalReason::Locked | RefusalReason::NotOwnable => RefuseReason::Locked,
        RefusalReason::LowerPriority => RefuseReason::LowerPriority,
        RefusalReason::LockedOutEqualPriority => RefuseReason::Lockout,
        RefusalReason::NotOwner => RefuseReason::NotOwner,
        RefusalReason::UnknownBody => RefuseReason::UnknownBody,
        RefusalReason::PriorityTooHigh | RefusalReason::PriorityTooLow => {
            RefuseReason::InvalidPriority
        }
    }
}

/// This crate's reason for a refusal received as `reason`, refined with what the participant
/// knows: `asked`, the priority of the refused bid or priority change if there was one, and
/// `kind`, the body's kind in the local world if known.
///
/// `Locked` becomes `NotOwnable` for a body that is static or kinematic locally;
/// `InvalidPriority` becomes `PriorityTooHigh` when `asked` is above `max_bid_priority`, and
/// `PriorityTooLow` otherwise.
pub fn refuse_reason_from_wire(
    reason: RefuseReason,
    asked: Option<Priority>,
    kind: Option<BodyKind>,
    config: &OwnershipConfig,
) -> RefusalReason {
    match reason {
        RefuseReason::Locked if kind.is_some_and(|k| !k.is_ownable()) => RefusalReason::NotOwnable,
        RefuseReason::Locked => RefusalReason::Locked,
        RefuseReason::LowerPriority => RefusalReason::LowerPriority,
        RefuseReason::Lockout => RefusalReason::LockedOutEqualPriority,
        RefuseReason::NotOwner => RefusalReason::NotOwner,
        RefuseReason::UnknownBody => RefusalReason::UnknownBody,
        RefuseReason::InvalidPriority if asked.is_some_and(|p| p > config.max_bid_priority) => {
            RefusalReason::PriorityTooHigh
        }
        RefuseReason::InvalidPriority => RefusalReason::PriorityTooLow,
    }
}

/// The wire form of `state` for `body`, numbered `seq`. The rotation is packed in 6 bytes
/// (about 2 × 10⁻⁴ rad of error, see [`simsync_net::PackedRotation`]).
pub fn state_to_wire(body: BodyId, seq: Sequence, state: &BodyState) -> proto::BodyState {
    proto::BodyState::new(
        body,
        u32::from(seq.0),
        state.position,
        state.rotation,
        state.linear_velocity,
        state.angular_velocity,
    )
}

/// Checks and unpacks a state received from the wire: its body, sequence number and state.
///
/// # Errors
/// [`OwnershipError::InvalidBodyState`] if `seq` is above 65,535 or a position or velocity
/// coordinate is not finite or larger than [`MAX_STATE_MAGNITUDE`] in absolute value. (Any
/// packed rotation unpacks to a unit quaternion.)
pub fn state_from_wire(
    state: &proto::BodyState,
) -> Result<(BodyId, Sequence, BodyState), OwnershipError> {
    let body = state.body;
    let invalid = |reason| OwnershipError::InvalidBodyState { body, reason };
    let seq = u16::try_from(state.seq)
        .map(Sequence)
        .map_err(|_| invalid("sequence number above 65,535"))?;
    let sane = |v: &[f32; 3]| {
        v.iter()
            .all(|x| x.is_finite() && x.abs() <= MAX_STATE_MAGNITUDE)
    };
    if !sane(&state.position) {
        return Err(invalid("position not finite or out of range"));
    }
    if !sane(&state.linvel) || !sane(&state.angvel) {
        return Err(invalid("velocity not finite or out of range"));
    }
    Ok((
        body,
        seq,
        BodyState {
            position: Vec3::from_array(state.position),
            rotation: state.rotation(),
            linear_velocity: Vec3::from_array(state.linvel),
            angular_velocity: Vec3::from_array(state.angvel),
        },
    ))
}

/// `state` with both velocities set to zero (ownership rules 5 and 12).
pub fn at_rest(state: &BodyState) -> BodyState {
    BodyState {
        linear_velocity: Vec3::ZERO,
        angular_velocity: Vec3::ZERO,
        ..*state
    }
}

/// A state at `position` and `rotation` with zero velocities.
pub fn resting_state(position: Vec3, rotation: Quat) -> BodyState {
    BodyState {
        position,
        rotation,
        linear_velocity: Vec3::ZERO,
        angular_velocity: Vec3::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_maps_and_the_participant_recovers_it() {
        let c = OwnershipConfig::default();
        for reason in RefusalReason::ALL {
            let wire = refuse_reason_to_wire(reason);
            let asked = match reason {
                RefusalReason::PriorityTooHigh => Some(Priority(200)),
                RefusalReason::PriorityTooLow => Some(Priority::YIELD),
                _ => Some(Priority::POKE),
            };
            let kind = match reason {
                RefusalReason::NotOwnable => Some(BodyKind::Static),
                _ => Some(BodyKind::Dynamic),
            };
            assert_eq!(refuse_reason_from_wire(wire, asked, kind, &c), reason);
        }
    }

    #[test]
    fn state_round_trips_and_bad_states_are_typed_errors() {
        let state = BodyState {
            position: Vec3::new(1.0, 2.0, -3.0),
            rotation: Quat::from_rotation_y(0.7),
            linear_velocity: Vec3::new(0.5, -9.0, 0.0),
            angular_velocity: Vec3::new(0.0, 3.0, 0.1),
        };
        let wire = state_to_wire(BodyId(9), Sequence(65_535), &state);
        let (body, seq, back) = state_from_wire(&wire).unwrap();
        assert_eq!((body, seq), (BodyId(9), Sequence(65_535)));
        assert_eq!(back.position, state.position);
        assert_eq!(back.linear_velocity, state.linear_velocity);
        assert!(back.rotation.angle_between(state.rotation) < 1e-3);

        let mut bad = wire;
        bad.seq = 70_000;
        assert!(matches!(
            state_from_wire(&bad),
            Err(OwnershipError::InvalidBodyState {
                body: BodyId(9),
                ..
            })
        ));
        for field in 0..3 {
            let mut bad = wire;
            match field {
                0 => bad.position[1] = f32::NAN,
                1 => bad.linvel[0] = f32::INFINITY,
                _ => bad.angvel[2] = 2.0e6,
            }
            assert!(state_from_wire(&bad).is_err(), "field {field}");
        }
    }
}
