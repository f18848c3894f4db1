//! [`ActivityConfig`] and [`classify`]: whether a participant sees a body as moving, at rest or
//! displaced — the inputs of [ownership rules 7, 12 and 14](crate::rules) — as a pure function
//! of its velocity, sleep state, the last agreed state and the time.

use core::time::Duration;

use bevy::math::{Quat, Vec3};
use bevy::prelude::*;

use crate::body::BodyState;
use crate::error::OwnershipError;

/// How a participant decides from its Rapier state whether a body is *active* (moving) or *at
/// rest* — the inputs of [ownership rules 7 (volunteer), 12 (release at rest) and
/// 14](crate::rules).
///
/// A body is **at rest** when Rapier has put it to sleep, or when its linear speed has stayed
/// below `rest_linear_speed` and its angular speed below `rest_angular_speed` for `rest_delay`
/// (so a ball at the top of a bounce is not at rest). A body this participant does not own is
/// also **active** while its local copy is *displaced* — more than `displacement_meters` or
/// `displacement_degrees` away from the last state the network agreed on (the last relayed or
/// released state, or where it first came to rest) — so a copy that was knocked only in this
/// participant's world is volunteered for ([ownership rule 7](crate::rules)) and the network
/// converges on it, instead of staying different from everyone else's.
#[derive(Resource, Debug, Clone, Copy, PartialEq, Reflect)]
#[reflect(Resource, Debug, Default, PartialEq, Clone)]
pub struct ActivityConfig {
    /// Linear speed below which a body may be at rest, m/s. Default 0.05 m/s.
    pub rest_linear_speed: f32,
    /// Angular speed below which a body may be at rest, rad/s. Default 0.1 rad/s.
    pub rest_angular_speed: f32,
    /// How long a body must stay below both speeds to be at rest. Default 250 ms.
    pub rest_delay: Duration,
    /// Distance from the agreed state beyond which an unowned copy is displaced, m.
    /// Default 0.005 m (5 mm).
    pub displacement_meters: f32,
    /// Rotation from the agreed state beyond which an unowned copy is displaced, degrees.
    /// Default 2°.
    pub displacement_degrees: f32,
}

impl Default for ActivityConfig {
    fn default() -> Self {
        Self {
            rest_linear_speed: 0.05,
            rest_angular_speed: 0.1,
            rest_delay: Duration::from_millis(250),
            displacement_meters: 0.005,
            displacement_degrees: 2.0,
        }
    }
}

impl ActivityConfig {
    /// Checks every field: speeds and displacements finite and ≥ 0.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] naming the first bad field.
    pub fn validate(&self) -> Result<(), OwnershipError> {
        for (field, value) in [
            ("rest_linear_speed", self.rest_linear_speed),
            ("rest_angular_speed", self.rest_angular_speed),
            ("displacement_meters", self.displacement_meters),
            ("displacement_degrees", self.displacement_degrees),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(OwnershipError::InvalidConfig {
                    field,
                    value: value.to_string(),
                    reason: "a finite number ≥ 0",
                });
            }
        }
        Ok(())
    }
}

/// What a participant remembers of one body between frames to classify it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct RestMemory {
    /// Since when the body has been below the rest speeds.
    pub still_since: Option<Duration>,
    /// The last state the network agreed on (position, rotation).
    pub anchor: Option<(Vec3, Quat)>,
}

/// What a body is doing this frame, and what to remember for the next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Activity {
    /// Awake and above a rest speed.
    pub moving: bool,
    /// Asleep, or below both rest speeds for `rest_delay`.
    pub at_rest: bool,
    /// Farther from the agreed state than the displacement thresholds.
    pub displaced: bool,
    /// The memory to pass to the next frame's [`classify`]: the anchor is set to where the body
    /// first comes to rest if there was none.
    pub memory: RestMemory,
}

/// Classifies a body from its current `state` (position, rotation, velocities), whether Rapier
/// has put it to `asleep`, last frame's `memory` and `now` (see [`ActivityConfig`] for the
/// meaning of each answer).
pub(crate) fn classify(
    config: &ActivityConfig,
    state: &BodyState,
    asleep: bool,
    memory: RestMemory,
    now: Duration,
) -> Activity {
    let moving = !asleep
        && (state.linear_velocity.length() > config.rest_linear_speed
            || state.angular_velocity.length() > config.rest_angular_speed);
    let still_since = if moving {
        None
    } else {
        Some(memory.still_since.unwrap_or(now))
    };
    let at_rest =
        asleep || still_since.is_some_and(|since| now.saturating_sub(since) >= config.rest_delay);
    let anchor = match memory.anchor {
        None if at_rest => Some((state.position, state.rotation)),
        anchor => anchor,
    };
    let displaced = anchor.is_some_and(|(position, rotation)| {
        state.position.distance(position) > config.displacement_meters
            || state.rotation.angle_between(rotation) > config.displacement_degrees.to_radians()
    });
    Activity {
        moving,
        at_rest,
        displaced,
        memory: RestMemory {
            still_since,
            anchor,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn moving_at(speed: f32) -> BodyState {
        BodyState {
            linear_velocity: Vec3::new(speed, 0.0, 0.0),
            ..BodyState::default()
        }
    }

    #[test]
    fn a_body_above_the_rest_speed_is_moving_and_not_at_rest() {
        let c = ActivityConfig::default();
        let a = classify(&c, &moving_at(0.06), false, RestMemory::default(), ms(0));
        assert!(a.moving && !a.at_rest && !a.displaced);
        assert_eq!(a.memory, RestMemory::default());
        let spinning = BodyState {
            angular_velocity: Vec3::new(0.0, 0.11, 0.0),
            ..BodyState::default()
        };
        assert!(classify(&c, &spinning, false, RestMemory::default(), ms(0)).moving);
    }

    #[test]
    fn a_slow_body_is_at_rest_only_after_the_rest_delay() {
        let c = ActivityConfig::default();
        let slow = moving_at(0.04);
        let first = classify(&c, &slow, false, RestMemory::default(), ms(100));
        assert!(!first.moving && !first.at_rest);
        assert_eq!(first.memory.still_since, Some(ms(100)));
        assert_eq!(first.memory.anchor, None);
        let before = classify(&c, &slow, false, first.memory, ms(349));
        assert!(!before.at_rest);
        let after = classify(&c, &slow, false, first.memory, ms(350));
        assert!(after.at_rest);
        assert_eq!(after.memory.still_since, Some(ms(100)));
        // Where it first came to rest becomes the agreed state.
        assert_eq!(after.memory.anchor, Some((slow.position, slow.rotation)));
        // Moving again restarts the wait.
        let again = classify(&c, &moving_at(1.0), false, after.memory, ms(400));
        assert_eq!(again.memory.still_since, None);
    }

    #[test]
    fn a_sleeping_body_is_at_rest_at_once_whatever_its_velocity() {
        let c = ActivityConfig::default();
        let a = classify(&c, &moving_at(5.0), true, RestMemory::default(), ms(0));
        assert!(!a.moving && a.at_rest);
    }

    #[test]
    fn a_copy_away_from_the_anchor_is_displaced() {
        let c = ActivityConfig::default();
        let anchored = RestMemory {
            still_since: Some(ms(0)),
            anchor: Some((Vec3::ZERO, Quat::IDENTITY)),
        };
        let at = |x: f32, degrees: f32| BodyState {
            position: Vec3::new(x, 0.0, 0.0),
            rotation: Quat::from_rotation_y(degrees.to_radians()),
            ..BodyState::default()
        };
        assert!(!classify(&c, &at(0.004, 0.0), true, anchored, ms(1)).displaced);
        assert!(classify(&c, &at(0.006, 0.0), true, anchored, ms(1)).displaced);
        assert!(!classify(&c, &at(0.0, 1.9), true, anchored, ms(1)).displaced);
        assert!(classify(&c, &at(0.0, 2.1), true, anchored, ms(1)).displaced);
        // An existing anchor is kept, not moved to where the body now rests.
        let kept = classify(&c, &at(0.5, 0.0), true, anchored, ms(1));
        assert_eq!(kept.memory.anchor, anchored.anchor);
    }
}
