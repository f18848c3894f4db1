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
