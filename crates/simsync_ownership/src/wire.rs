//! Conversions between this crate's [`BodyState`] and the wire's one-body [`PackedBodyState`]
//! (`simsync_net`'s `Respawn` / `Reset`). States of owned bodies travel only in
//! [`StateBatch`](crate::StateBatch)es ([rule 15](crate::rules#rule-15--one-state-batch-per-frame)).
//!
//! Ids ([`BodyId`], [`ParticipantId`](crate::ParticipantId)) and refusal reasons
//! ([`RefusalReason`](crate::RefusalReason)) are `simsync_net`'s own types and need no
//! conversion. The body state differs: [`BodyState`] holds Bevy math types, the wire's
//! [`PackedBodyState`] packs the rotation in 6 bytes and carries the body id and a sequence
//! number. Owners number their updates with a 16-bit [`Sequence`] (so a state update stays at
//! ≤ 48 bytes on the wire); the wire field is a `u32` varint, and a number above 65,535 is
//! rejected as [`OwnershipError::InvalidBodyState`].

use bevy::math::Vec3;
use simsync_net::PackedBodyState;

use crate::body::BodyState;
use crate::error::OwnershipError;
use crate::priority::BodyId;
use crate::send_policy::Sequence;

/// Largest absolute value accepted for any coordinate of a received position (m), linear
/// velocity (m/s) or angular velocity (rad/s). Anything larger is treated as malformed: no
/// legitimate simulation sends it, and Rapier misbehaves on such values.
pub const MAX_STATE_MAGNITUDE: f32 = 1.0e6;

/// The wire form of `state` for `body`, numbered `seq`. The rotation is packed in 6 bytes
/// (about 2 × 10⁻⁴ rad of error, see [`simsync_net::PackedRotation`]).
pub fn state_to_wire(body: BodyId, seq: Sequence, state: &BodyState) -> PackedBodyState {
    PackedBodyState::new(
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
    state: &PackedBodyState,
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

#[cfg(test)]
mod tests {
    use super::*;
    use bevy::math::Quat;
    use simsync_net::{OwnershipServerMessage, RefusalReason, ServerMessage, decode, encode};

    #[test]
    fn every_refusal_reason_crosses_the_wire_unchanged() {
        for reason in RefusalReason::ALL {
            let sent = ServerMessage::Ownership(OwnershipServerMessage::Refused {
                body: BodyId(3),
                reason,
                owner: Some(simsync_net::ParticipantId(2)),
                priority: 127,
            });
            let received: ServerMessage = decode(&encode(&sent).unwrap()).unwrap();
            assert_eq!(received, sent);
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
