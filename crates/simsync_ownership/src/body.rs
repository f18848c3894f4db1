//! What a body is to the ownership rules: its [`BodyKind`] (only dynamic bodies can be owned)
//! and its [`BodyState`] in Bevy math types, as an owner observes and sends it.
//!
//! Its wire form is a [`StateBatch`](crate::StateBatch) entry, quantized
//! ([ownership rules 15, 16](crate::rules#rule-15--one-state-batch-per-frame)); the one-body
//! `PackedBodyState` of protocol version 4 is still understood
//! ([`state_to_wire`](crate::state_to_wire), [`state_from_wire`](crate::state_from_wire)).

use core::time::Duration;

use bevy::math::{Quat, Vec3};
use bevy::prelude::*;
use bevy_rapier3d::prelude::{RigidBody, Velocity};
use serde::{Deserialize, Serialize};

/// How a body moves, which decides whether it can have a simulation owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect, Serialize, Deserialize)]
pub enum BodyKind {
    /// Moved by the physics simulation; the only ownable kind.
    Dynamic,
    /// Never moves.
    Static,
    /// Moved by the server (or a script on it) setting its position or velocity; physics
    /// does not move it, so there is nothing to own.
    Kinematic,
}

impl BodyKind {
    /// Whether a participant may own a body of this kind: only [`BodyKind::Dynamic`].
    #[inline]
    pub const fn is_ownable(self) -> bool {
        matches!(self, BodyKind::Dynamic)
    }
}

impl From<RigidBody> for BodyKind {
    /// Rapier's `Dynamic` is dynamic, `Fixed` is static, both kinematic kinds are kinematic.
    fn from(body: RigidBody) -> Self {
        match body {
            RigidBody::Dynamic => BodyKind::Dynamic,
            RigidBody::Fixed => BodyKind::Static,
            RigidBody::KinematicPositionBased | RigidBody::KinematicVelocityBased => {
                BodyKind::Kinematic
            }
        }
    }
}

/// The longest a relayed state is moved on by its age ([`BodyState::moved_on`]): 500 ms. A
/// state older than that (a link that bad, or a wrong latency estimate) is moved on by 500 ms
/// only, rather than far along a velocity that has surely changed.
pub const MAX_STATE_AGE: Duration = Duration::from_millis(500);

/// Half a round-trip time of `rtt_seconds` (renet's estimate of a connection): the one-way
/// latency a state travelled, within `0..=`[`MAX_STATE_AGE`] (a negative or not-a-number
/// estimate is 0).
pub fn one_way_latency(rtt_seconds: f64) -> Duration {
    let half = rtt_seconds / 2.0;
    if half.is_nan() || half <= 0.0 {
        return Duration::ZERO;
    }
    Duration::from_secs_f64(half.min(MAX_STATE_AGE.as_secs_f64()))
}

/// A body's physical state as an owner sends it: position in meters, rotation, linear velocity
/// in m/s and angular velocity in rad/s (axis × speed), all in world space.
#[derive(Debug, Clone, Copy, Default, PartialEq, Reflect, Serialize, Deserialize)]
pub struct BodyState {
    /// Position, meters.
    pub position: Vec3,
    /// Orientation.
    pub rotation: Quat,
    /// Linear velocity, m/s.
    pub linear_velocity: Vec3,
    /// Angular velocity, rad/s (the scaled rotation axis).
    pub angular_velocity: Vec3,
}

impl BodyState {
    /// A state at `position` and `rotation` with zero velocities.
    pub fn resting(position: Vec3, rotation: Quat) -> BodyState {
        BodyState {
            position,
            rotation,
            linear_velocity: Vec3::ZERO,
            angular_velocity: Vec3::ZERO,
        }
    }

    /// This state with both velocities set to zero: what is sent when a body becomes unowned
    /// ([ownership rules 5 and 12](crate::rules)).
    pub fn stopped(&self) -> BodyState {
        BodyState::resting(self.position, self.rotation)
    }

    /// Puts the body at this state: its `Transform`'s translation and rotation and, when it has
    /// one, its Rapier `Velocity`.
    pub fn write_to(&self, transform: &mut Transform, velocity: Option<&mut Velocity>) {
        transform.translation = self.position;
        transform.rotation = self.rotation;
        if let Some(velocity) = velocity {
            velocity.linear = self.linear_velocity;
            velocity.angular = self.angular_velocity;
        }
    }

    /// This state moved on by its `age` ([relayed states](crate::rules#relayed-states-move-on-by-their-age)):
    /// [`moved_by`](Self::moved_by) `age` in seconds.
    pub fn moved_on(&self, age: Duration) -> BodyState {
        self.moved_by(age.as_secs_f32())
    }

    /// This state moved along its velocities by `seconds` (back for a negative number), at most
    /// [`MAX_STATE_AGE`] either way: position by the linear velocity, rotation by the angular
    /// velocity; velocities unchanged. A resting state (zero velocities) is returned unchanged.
    pub fn moved_by(&self, seconds: f32) -> BodyState {
        if self.linear_velocity == Vec3::ZERO && self.angular_velocity == Vec3::ZERO {
            return *self;
        }
        let max = MAX_STATE_AGE.as_secs_f32();
        let dt = if seconds.is_nan() {
            0.0
        } else {
            seconds.clamp(-max, max)
        };
        BodyState {
            position: self.position + self.linear_velocity * dt,
            rotation: (Quat::from_scaled_axis(self.angular_velocity * dt) * self.rotation)
                .normalize(),
            ..*self
        }
    }

    /// Where receivers extrapolate this state `elapsed` later: position moved by the linear
    /// velocity, rotation turned by the angular velocity. Velocities are unchanged.
    pub fn extrapolate(&self, elapsed: Duration) -> BodyState {
        let dt = elapsed.as_secs_f32();
        BodyState {
            position: self.position + self.linear_velocity * dt,
            rotation: (Quat::from_scaled_axis(self.angular_velocity * dt) * self.rotation)
                .normalize(),
            ..*self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moving_state_moves_on_by_its_age_and_a_resting_one_does_not() {
        let moving = BodyState {
            linear_velocity: Vec3::new(0.36, 0.0, 0.0),
            angular_velocity: Vec3::new(0.0, 1.0, 0.0),
            ..BodyState::resting(Vec3::new(1.0, 2.0, 3.0), Quat::IDENTITY)
        };
        let on = moving.moved_on(Duration::from_millis(50));
        assert!((on.position.x - 1.018).abs() < 1e-6, "{}", on.position);
        assert!((on.rotation.angle_between(Quat::IDENTITY) - 0.05).abs() < 1e-4);
        assert_eq!(on.linear_velocity, moving.linear_velocity);
        // Capped at 500 ms.
        let far = moving.moved_on(Duration::from_secs(3));
        assert!((far.position.x - 1.18).abs() < 1e-5, "{}", far.position);
        // Back by a negative time, capped too.
        let back = moving.moved_by(-0.01);
        assert!((back.position.x - 0.9964).abs() < 1e-6, "{}", back.position);
        assert!((moving.moved_by(-9.0).position.x - 0.82).abs() < 1e-5);
        assert_eq!(moving.moved_by(f32::NAN), moving);
        let resting = BodyState::resting(Vec3::ONE, Quat::from_rotation_z(0.3));
        assert_eq!(resting.moved_on(Duration::from_millis(50)), resting);
        assert_eq!(resting.moved_by(-0.05), resting);
    }

    #[test]
    fn one_way_latency_is_half_the_rtt_within_bounds() {
        assert_eq!(one_way_latency(0.1), Duration::from_millis(50));
        assert_eq!(one_way_latency(0.0), Duration::ZERO);
        assert_eq!(one_way_latency(-1.0), Duration::ZERO);
        assert_eq!(one_way_latency(f64::NAN), Duration::ZERO);
        assert_eq!(one_way_latency(60.0), MAX_STATE_AGE);
    }
}
