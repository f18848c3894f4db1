//! The send policy of state updates: when an owner sends a body's state ([`should_send`]) and
//! the 16-bit [`Sequence`] an owner numbers its state updates with. See
//! [the rules](crate::rules), "State updates".
//!
//! Every participant simulates every body, so between updates a receiver's copy moves on from
//! the last state it got, at that state's velocities. The owner therefore compares the body
//! with where receivers *extrapolate* it — position advanced by the linear velocity, rotation
//! by the angular velocity, over the time since the last send — and sends when the difference
//! passes the thresholds (2 mm, 0.5°). A body moving steadily is sent rarely; a body that
//! bounces is sent at once. A heartbeat every `heartbeat_interval` keeps the owner alive on the
//! server even when nothing moves (ownership rule 5).

use core::time::Duration;

use bevy::prelude::*;
use serde::{Deserialize, Serialize};

use crate::body::BodyState;
use crate::config::OwnershipConfig;

/// Whether an owner should send `current` now, given that it last sent `last_sent` at
/// `last_sent_time` (both times since the caller's epoch).
///
/// True when the heartbeat is due (`now − last_sent_time ≥ heartbeat_interval`, ownership
/// rule 5), or when `current` is more than `position_threshold_meters` (default 2 mm) or
/// `rotation_threshold_degrees` (default 0.5°) away from `last_sent` extrapolated to `now`.
pub fn should_send(
    last_sent: &BodyState,
    current: &BodyState,
    now: Duration,
    last_sent_time: Duration,
    config: &OwnershipConfig,
) -> bool {
    let elapsed = now.saturating_sub(last_sent_time);
    if elapsed >= config.heartbeat_interval {
        return true;
    }
    let expected = last_sent.extrapolate(elapsed);
    let drift = current.position.distance(expected.position);
    if drift > config.position_threshold_meters {
        return true;
    }
    let turned = current.rotation.angle_between(expected.rotation);
    turned > config.rotation_threshold_degrees.to_radians()
}

/// How far receivers' copy of a body is predicted to be off, in units of the send thresholds:
/// the larger of the position drift over `position_threshold_meters` and the rotation drift
/// over `rotation_threshold_degrees`, `current` against `last` extrapolated by `elapsed`. The
/// error term of the send weight ([rule 18](crate::rules#rule-18--priority-accumulation-and-starvation-freedom)).
pub(crate) fn predicted_error(
    last: &BodyState,
    current: &BodyState,
    elapsed: Duration,
    config: &OwnershipConfig,
) -> f32 {
    let expected = last.extrapolate(elapsed);
    let position =
        current.position.distance(expected.position) / config.position_threshold_meters.max(1e-6);
    let rotation = current
        .rotation
        .angle_between(expected.rotation)
        .to_degrees()
        / config.rotation_threshold_degrees.max(1e-6);
    position.max(rotation)
}

/// The sequence number of a state update from one owner about one body. Wraps after 65,535.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Reflect, Serialize, Deserialize)]
pub struct Sequence(pub u16);

impl Sequence {
    /// The number after this one, wrapping from 65,535 to 0.
    #[inline]
    pub const fn next(self) -> Sequence {
        Sequence(self.0.wrapping_add(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bevy::math::{Quat, Vec3};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn still_body_sends_only_on_heartbeat() {
        let c = OwnershipConfig::default();
        let s = BodyState::default();
        assert!(!should_send(&s, &s, ms(999), ms(0), &c));
        assert!(should_send(&s, &s, ms(1_000), ms(0), &c));
    }

    #[test]
    fn position_drift_over_two_mm_sends() {
        let c = OwnershipConfig::default();
        let s = BodyState::default();
        let moved = |m: f32| BodyState {
            position: Vec3::new(m, 0.0, 0.0),
            ..s
        };
        assert!(!should_send(&s, &moved(0.0019), ms(16), ms(0), &c));
        assert!(should_send(&s, &moved(0.0021), ms(16), ms(0), &c));
    }

    #[test]
    fn rotation_drift_over_half_degree_sends() {
        let c = OwnershipConfig::default();
        let s = BodyState::default();
        let turned = |deg: f32| BodyState {
            rotation: Quat::from_rotation_y(deg.to_radians()),
            ..s
        };
        assert!(!should_send(&s, &turned(0.4), ms(16), ms(0), &c));
        assert!(should_send(&s, &turned(0.6), ms(16), ms(0), &c));
    }

    #[test]
    fn steady_motion_matches_extrapolation_and_is_not_sent() {
        let c = OwnershipConfig::default();
        let sent = BodyState {
            linear_velocity: Vec3::new(3.0, 0.0, 0.0),
            angular_velocity: Vec3::new(0.0, 1.0, 0.0),
            ..BodyState::default()
        };
        let later = sent.extrapolate(ms(500));
        assert!((later.position.x - 1.5).abs() < 1e-6);
        assert!(!should_send(&sent, &later, ms(500), ms(0), &c));
        // The same body stopped dead: far from where receivers think it is.
        let stopped = BodyState {
            linear_velocity: Vec3::ZERO,
            ..sent
        };
        assert!(should_send(&sent, &stopped, ms(16), ms(0), &c));
    }

    #[test]
    fn sequence_wraps_after_65535() {
        assert_eq!(Sequence(u16::MAX).next(), Sequence(0));
        assert_eq!(Sequence(7).next(), Sequence(8));
    }
}
