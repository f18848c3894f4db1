//! The entity server's physics host ([ownership rules 21 and
//! 22](crate::rules#rule-21--the-physics-host)) as plain data: [`PhysicsHostConfig`],
//! [`StateLimits`] and the decisions of [`PhysicsHost`] — which body the host takes, publishes
//! or releases, from what the server's own Rapier world shows — with no clock, network or ECS.
//! [`EntityServer`](crate::EntityServer) applies them; the plugin
//! ([`OwnershipPlugin::with_physics_host`](crate::OwnershipPlugin::with_physics_host)) wires
//! the server's Rapier world to them.

use core::time::Duration;

use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use simsync_net::RefusalReason;

use crate::activity::ActivityConfig;
use crate::body::BodyState;
use crate::error::OwnershipError;
use crate::priority::{BodyId, ParticipantId, Priority};

/// What an owner's state update may claim before the entity server refuses it as physically
/// impossible ([ownership rule 22](crate::rules#rule-22--impossible-states)).
///
/// A state is refused as [`RefusalReason::TooFast`] when its linear speed is above
/// `max_speed`, and as [`RefusalReason::Teleported`] when its position is farther from the
/// server's state of the body — moved on by its own velocity to the state's time — than the
/// body's [`Reach`]: a bucket of `max_teleport` metres that refills at `max_speed` metres per
/// second and that every accepted state spends by its distance. One jump of up to
/// `max_teleport` passes (extrapolation error, a late update), but a run of small jumps drains
/// the bucket: over any time `t` a body is moved at most `max_teleport + max_speed × t` beyond
/// its own motion. A game's real teleports go through a respawn
/// ([respawns](crate::rules#respawns)).
#[derive(Debug, Clone, Copy, PartialEq, Reflect)]
#[reflect(Debug, Default, PartialEq, Clone)]
pub struct StateLimits {
    /// The highest linear speed a state may carry, m/s. Default 50 m/s (180 km/h).
    pub max_speed: f32,
    /// How far beyond what the speed limit allows a state may be, m. Default 10 m.
    pub max_teleport: f32,
    /// How long a participant whose state of a body was refused may not bid for that body
    /// ([`RefusalReason::Penalized`]). Default 2 s.
    pub penalty: Duration,
}

impl Default for StateLimits {
    fn default() -> Self {
        Self {
            max_speed: 50.0,
            max_teleport: 10.0,
            penalty: Duration::from_secs(2),
        }
    }
}

impl StateLimits {
    /// Checks both limits: finite and > 0.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] naming the first bad field.
    pub fn validate(&self) -> Result<(), OwnershipError> {
        for (field, value) in [
            ("max_speed", self.max_speed),
            ("max_teleport", self.max_teleport),
        ] {
            if !value.is_finite() || value <= 0.0 {
                return Err(OwnershipError::InvalidConfig {
                    field,
                    value: value.to_string(),
                    reason: "a finite number > 0",
                });
            }
        }
        Ok(())
    }

    /// Whether `state`, claimed at `now`, is possible given the server's state `reference`
    /// (taken at its `Duration`, in the same epoch as `now`; `None`: nothing to compare with,
    /// only the speed is checked) and the body's `reach` left (`None`: a full bucket). Returns
    /// the reach left after the state, to keep for the body's next check.
    ///
    /// # Errors
    /// [`RefusalReason::TooFast`] or [`RefusalReason::Teleported`], as the type says; the reach
    /// is then unchanged.
    pub fn check(
        &self,
        reference: Option<(BodyState, Duration)>,
        reach: Option<Reach>,
        state: &BodyState,
        now: Duration,
    ) -> Result<Reach, RefusalReason> {
        if state.linear_velocity.length() > self.max_speed {
            return Err(RefusalReason::TooFast);
        }
        let available = reach.map_or(self.max_teleport, |r| {
            let refill = self.max_speed * now.saturating_sub(r.at).as_secs_f32();
            (r.meters + refill).min(self.max_teleport)
        });
        let distance = reference.map_or(0.0, |(server, at)| {
            let expected = server.extrapolate(now.saturating_sub(at)).position;
            state.position.distance(expected)
        });
        if distance > available {
            return Err(RefusalReason::Teleported);
        }
        Ok(Reach {
            meters: available - distance,
            at: now,
        })
    }
}

/// How far an owner may still move a body beyond its own motion ([`StateLimits::check`]): a
/// bucket of metres, as of a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reach {
    /// Metres left.
    pub meters: f32,
    /// When.
    pub at: Duration,
}

/// The entity server's physics host ([ownership rule 21](crate::rules#rule-21--the-physics-host)):
/// the server keeps a Rapier world of the bodies and simulates those nobody simulates for
/// everyone, as the owner [`ParticipantId::ENTITY_SERVER`] at `yield_priority`, so any
/// participant's bid takes a body back. Passed to
/// [`OwnershipPlugin::with_physics_host`](crate::OwnershipPlugin::with_physics_host).
#[derive(Debug, Clone, Copy, PartialEq, Reflect)]
#[reflect(Debug, Default, PartialEq, Clone)]
pub struct PhysicsHostConfig {
    /// Also take an unowned body that has moved in the server's world for this long, though
    /// no owner was cleared from it. `None` (default): only orphans — bodies whose owner was
    /// cleared (it left, went silent, expired or was refused) while they moved — are taken, at
    /// once. The server's world moves the participants' bodies by their owners' states, so its
    /// contacts differ a little from the participants'; a body that moves only there is not
    /// moving for anyone else, and taking it would push that difference onto everyone (the
    /// sandbox's piles showed it: dozens of bodies nudged by a few cm/s in the server's world
    /// alone). Set it (e.g. 500 ms, the volunteer delay) where the server's world is the one
    /// that matters, e.g. bodies no participant is interested in.
    pub take_unowned_after: Option<Duration>,
    /// The far-owner option: also take a moving body held at `recruit_priority` or less (a
    /// volunteered body, not a poked or held one) by a participant whose interest centre is
    /// farther than this from the body, m. `None` (default): off.
    pub interest_radius: Option<f32>,
    /// Limits on owners' state updates ([rule 22](crate::rules#rule-22--impossible-states)),
    /// checked against the server's world; `None`: every state is accepted. Default
    /// [`StateLimits::default`].
    pub limits: Option<StateLimits>,
}

impl Default for PhysicsHostConfig {
    fn default() -> Self {
        Self {
            take_unowned_after: None,
            interest_radius: None,
            limits: Some(StateLimits::default()),
        }
    }
}

impl PhysicsHostConfig {
    /// Checks the radius (finite, > 0) and the limits.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] naming the first bad field.
    pub fn validate(&self) -> Result<(), OwnershipError> {
        if let Some(radius) = self.interest_radius
            && (!radius.is_finite() || radius <= 0.0)
        {
            return Err(OwnershipError::InvalidConfig {
                field: "interest_radius",
                value: radius.to_string(),
                reason: "a finite number > 0",
            });
        }
        self.limits.as_ref().map_or(Ok(()), StateLimits::validate)
    }
}

/// What the server's world shows of one body this tick, for [`PhysicsHost::step`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostObservation {
    /// The body.
    pub body: BodyId,
    /// Its owner and priority as the server records them.
    pub owner: Option<(ParticipantId, Priority)>,
    /// Linear speed in the server's world, m/s.
    pub linear_speed: f32,
    /// Angular speed in the server's world, rad/s.
    pub angular_speed: f32,
    /// Whether Rapier put the body to sleep.
    pub sleeping: bool,
    /// How far the owner's interest centre is from the body, m, when the body has an owner that
    /// sent one.
    pub owner_distance: Option<f32>,
}

/// What the host does about one body this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostAction {
    /// Take the body ([`OwnershipArbiter::host_take`](crate::OwnershipArbiter::host_take)) from
    /// nobody, or from an owner holding it at `from_at_most` or less, and publish its state.
    Take {
        /// The body.
        body: BodyId,
        /// The highest priority it may be taken from (`NONE`: only if unowned).
        from_at_most: Priority,
    },
    /// The host holds the body and it moves: publish its state to every participant.
    Publish(BodyId),
    /// The host holds the body and it came to rest: publish its final state with zero
    /// velocities and release it (as ownership rule 12 for a participant).
    Release(BodyId),
}

/// What the host remembers of one body.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Memory {
    /// Seen moving unowned since.
    moving_unowned_since: Option<Duration>,
    /// Below both rest speeds since.
    slow_since: Option<Duration>,
    /// Its owner was cleared and it has not been taken or come to rest since.
    orphaned: bool,
}

/// The host's decisions ([ownership rule 21](crate::rules#rule-21--the-physics-host)), one body
/// at a time: plain data, the time an argument.
#[derive(Debug, Clone, Default)]
pub struct PhysicsHost {
    config: PhysicsHostConfig,
    activity: ActivityConfig,
    recruit: Priority,
    bodies: HashMap<BodyId, Memory>,
}

impl PhysicsHost {
    /// A host applying `config`, judging rest by `activity` (the participants' thresholds), and
    /// taking from far owners at `recruit` or less.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if `config` or `activity` does not validate.
    pub fn new(
        config: PhysicsHostConfig,
        activity: ActivityConfig,
        recruit: Priority,
    ) -> Result<Self, OwnershipError> {
        config.validate()?;
        activity.validate()?;
        Ok(Self {
            config,
            activity,
            recruit,
            bodies: HashMap::default(),
        })
    }

    /// The config.
    pub fn config(&self) -> &PhysicsHostConfig {
        &self.config
    }

    /// `body`'s owner was cleared (it left, went silent, or its state was refused): if it
    /// moves in the server's world, the host takes it at the next [`step`](Self::step).
    pub fn orphaned(&mut self, body: BodyId) {
        self.bodies.entry(body).or_default().orphaned = true;
    }

    /// `body` is gone (despawned or respawned): forget it.
    pub fn forget(&mut self, body: BodyId) {
        self.bodies.remove(&body);
    }

    /// What to do about one body this tick, at `now`:
    /// - held by the host: [`HostAction::Release`] once at rest (asleep, or below both rest
    ///   speeds for `rest_delay`), else [`HostAction::Publish`];
    /// - unowned and moving: [`HostAction::Take`] at once if orphaned, else (when
    ///   `take_unowned_after` is set) once it has moved that long;
    /// - owned by a participant at `recruit` or less whose interest centre is beyond the
    ///   configured radius, and moving: [`HostAction::Take`] from it;
    /// - otherwise nothing.
    pub fn step(&mut self, obs: &HostObservation, now: Duration) -> Option<HostAction> {
        let activity = self.activity;
        let memory = self.bodies.entry(obs.body).or_default();
        let slow = obs.sleeping
            || (obs.linear_speed < activity.rest_linear_speed
                && obs.angular_speed < activity.rest_angular_speed);
        memory.slow_since = if slow {
            Some(memory.slow_since.unwrap_or(now))
        } else {
            None
        };
        let at_rest = obs.sleeping
            || memory
                .slow_since
                .is_some_and(|since| now.saturating_sub(since) >= activity.rest_delay);
        match obs.owner {
            Some((owner, _)) if owner == ParticipantId::ENTITY_SERVER => {
                memory.moving_unowned_since = None;
                memory.orphaned = false;
                Some(if at_rest {
                    HostAction::Release(obs.body)
                } else {
                    HostAction::Publish(obs.body)
                })
            }
            None if slow => {
                memory.moving_unowned_since = None;
                memory.orphaned = false;
                None
            }
            None => {
                let since = *memory.moving_unowned_since.get_or_insert(now);
                let due = memory.orphaned
                    || self
                        .config
                        .take_unowned_after
                        .is_some_and(|after| now.saturating_sub(since) >= after);
                due.then_some(HostAction::Take {
                    body: obs.body,
                    from_at_most: Priority::NONE,
                })
            }
            Some((_, priority)) => {
                memory.moving_unowned_since = None;
                memory.orphaned = false;
                let far = self
                    .config
                    .interest_radius
                    .zip(obs.owner_distance)
                    .is_some_and(|(radius, distance)| distance > radius);
                (far && !slow && priority <= self.recruit).then_some(HostAction::Take {
                    body: obs.body,
                    from_at_most: self.recruit,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn host(config: PhysicsHostConfig) -> PhysicsHost {
        PhysicsHost::new(config, ActivityConfig::default(), Priority::RECRUIT).unwrap()
    }

    fn seen(owner: Option<(ParticipantId, Priority)>, speed: f32) -> HostObservation {
        HostObservation {
            body: BodyId(1),
            owner,
            linear_speed: speed,
            angular_speed: 0.0,
            sleeping: false,
            owner_distance: None,
        }
    }

    fn moving_state(position: Vec3, speed: f32) -> BodyState {
        BodyState {
            linear_velocity: Vec3::X * speed,
            ..BodyState::resting(position, Quat::IDENTITY)
        }
    }

    #[test]
    fn an_unowned_moving_body_is_taken_only_when_configured_after_the_delay() {
        let mut off = host(PhysicsHostConfig::default());
        assert_eq!(off.step(&seen(None, 3.0), MS(0)), None);
        assert_eq!(off.step(&seen(None, 3.0), MS(60_000)), None, "orphans only");
        let mut host = host(PhysicsHostConfig {
            take_unowned_after: Some(MS(500)),
            ..PhysicsHostConfig::default()
        });
        assert_eq!(host.step(&seen(None, 3.0), MS(0)), None);
        assert_eq!(host.step(&seen(None, 3.0), MS(499)), None);
        let take = HostAction::Take {
            body: BodyId(1),
            from_at_most: Priority::NONE,
        };
        assert_eq!(host.step(&seen(None, 3.0), MS(500)), Some(take));
        // Slowing down starts the wait again.
        assert_eq!(host.step(&seen(None, 0.01), MS(510)), None);
        assert_eq!(host.step(&seen(None, 3.0), MS(520)), None);
    }

    #[test]
    fn an_orphan_that_moves_is_taken_at_once_and_a_resting_one_never() {
        let mut host = host(PhysicsHostConfig::default());
        host.orphaned(BodyId(1));
        assert!(matches!(
            host.step(&seen(None, 2.0), MS(0)),
            Some(HostAction::Take { .. })
        ));
        let mut host = self::host(PhysicsHostConfig::default());
        host.orphaned(BodyId(1));
        assert_eq!(host.step(&seen(None, 0.0), MS(0)), None);
        assert_eq!(
            host.step(&seen(None, 2.0), MS(10)),
            None,
            "not an orphan any more"
        );
    }

    #[test]
    fn a_hosted_body_is_published_while_it_moves_and_released_at_rest() {
        let mut host = host(PhysicsHostConfig::default());
        let hosted = Some((ParticipantId::ENTITY_SERVER, Priority::YIELD));
        let publish = Some(HostAction::Publish(BodyId(1)));
        assert_eq!(host.step(&seen(hosted, 4.0), MS(0)), publish);
        assert_eq!(
            host.step(&seen(hosted, 0.01), MS(100)),
            publish,
            "top of a bounce"
        );
        assert_eq!(host.step(&seen(hosted, 0.01), MS(349)), publish);
        assert_eq!(
            host.step(&seen(hosted, 0.01), MS(350)),
            Some(HostAction::Release(BodyId(1)))
        );
        let asleep = HostObservation {
            sleeping: true,
            ..seen(hosted, 0.0)
        };
        assert_eq!(
            host.step(&asleep, MS(400)),
            Some(HostAction::Release(BodyId(1)))
        );
    }

    #[test]
    fn a_participant_s_body_is_left_alone_unless_its_owner_is_far_and_only_volunteered() {
        let radius = PhysicsHostConfig {
            interest_radius: Some(30.0),
            ..PhysicsHostConfig::default()
        };
        let mut host = host(radius);
        let far = |priority| HostObservation {
            owner_distance: Some(31.0),
            ..seen(Some((ParticipantId(2), priority)), 3.0)
        };
        assert_eq!(
            host.step(&far(Priority::RECRUIT), MS(0)),
            Some(HostAction::Take {
                body: BodyId(1),
                from_at_most: Priority::RECRUIT
            })
        );
        assert_eq!(host.step(&far(Priority::POKE), MS(0)), None, "poked: kept");
        let near = HostObservation {
            owner_distance: Some(29.0),
            ..far(Priority::RECRUIT)
        };
        assert_eq!(host.step(&near, MS(0)), None);
        let mut off = self::host(PhysicsHostConfig::default());
        assert_eq!(off.step(&far(Priority::RECRUIT), MS(0)), None, "option off");
    }

    #[test]
    fn a_state_above_the_speed_limit_is_too_fast() {
        let limits = StateLimits::default();
        let ok = moving_state(Vec3::ZERO, 49.9);
        assert!(limits.check(None, None, &ok, MS(0)).is_ok());
        let fast = moving_state(Vec3::ZERO, 50.1);
        assert_eq!(
            limits.check(None, None, &fast, MS(0)),
            Err(RefusalReason::TooFast)
        );
    }

    #[test]
    fn a_state_farther_than_the_reach_from_the_servers_extrapolated_state_is_a_teleport() {
        let limits = StateLimits::default();
        // The server's state moves at 2 m/s along x: 1 s later it is at x = 2.
        let server = (moving_state(Vec3::ZERO, 2.0), MS(1_000));
        let on_course = moving_state(Vec3::new(2.0 + 9.9, 0.0, 0.0), 2.0);
        let left = limits
            .check(Some(server), None, &on_course, MS(2_000))
            .unwrap();
        assert!((left.meters - 0.1).abs() < 1e-4, "{left:?}");
        let jump = moving_state(Vec3::new(2.0, 10.1, 0.0), 2.0);
        assert_eq!(
            limits.check(Some(server), None, &jump, MS(2_000)),
            Err(RefusalReason::Teleported)
        );
        let fifty = moving_state(Vec3::new(50.0, 0.0, 0.0), 1.0);
        assert_eq!(
            limits.check(Some(server), None, &fifty, MS(1_016)),
            Err(RefusalReason::Teleported)
        );
    }

    #[test]
    fn small_jumps_drain_the_reach_and_it_refills_at_the_speed_limit() {
        let limits = StateLimits::default();
        let mut server = (moving_state(Vec3::ZERO, 0.0), MS(0));
        let mut reach = None;
        let mut x = 0.0;
        let mut refused_at = None;
        // A 9.9 m hop every 15.625 ms (64 Hz), each from the last accepted state.
        for step in 1..=20u64 {
            let now = Duration::from_micros(15_625 * step);
            let hop = moving_state(Vec3::new(x + 9.9, 0.0, 0.0), 0.0);
            match limits.check(Some(server), reach, &hop, now) {
                Ok(left) => {
                    reach = Some(left);
                    x += 9.9;
                    server = (hop, now);
                }
                Err(reason) => {
                    assert_eq!(reason, RefusalReason::Teleported);
                    refused_at.get_or_insert(step);
                }
            }
        }
        assert_eq!(refused_at, Some(2), "the second hop is refused");
        // 20 steps = 0.3125 s: at most 10 m + 50 m/s × 0.3125 s.
        assert!(x <= 10.0 + 50.0 * 0.3125, "moved {x} m");
        // After a quiet second the bucket is full again.
        let hop = moving_state(Vec3::new(x + 9.9, 0.0, 0.0), 0.0);
        assert!(limits.check(Some(server), reach, &hop, MS(1_400)).is_ok());
    }

    #[test]
    fn limits_and_radius_must_be_finite_and_positive() {
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let limits = StateLimits {
                max_speed: bad,
                ..StateLimits::default()
            };
            assert!(limits.validate().is_err(), "{bad}");
            let config = PhysicsHostConfig {
                interest_radius: Some(bad),
                ..PhysicsHostConfig::default()
            };
            assert!(config.validate().is_err(), "{bad}");
        }
        assert!(PhysicsHostConfig::default().validate().is_ok());
    }
}
