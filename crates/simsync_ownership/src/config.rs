//! [`OwnershipConfig`]: every priority level and timing of the [ownership rules](crate::rules),
//! with their defaults.

use core::time::Duration;

use bevy::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::OwnershipError;
use crate::priority::Priority;

/// The numbers behind the fourteen [ownership rules](crate::rules). The entity server and every
/// participant must use the same values, so the server hands its config to joining clients.
///
/// All times are [`Duration`]s compared against the `now` the caller passes in (time since an
/// epoch of the caller's choosing; nothing here reads a clock).
///
/// | field | default | rule |
/// |---|---|---|
/// | `yield_priority` | 1 | 13, 14 |
/// | `volunteer_priority` | 2 | 7 |
/// | `recruit_priority` | 3 | 7 |
/// | `poke_priority` | 127 | 8, 9 |
/// | `grab_priority` | 128 | 10 |
/// | `max_bid_priority` | 128 | bids above it are refused |
/// | `equal_priority_lockout` | 200 ms | 3 |
/// | `owner_silence_expiry` | 5 s | 5 |
/// | `volunteer_delay` | 500 ms | 7 |
/// | `bid_resend_interval` | 200 ms | 6 |
/// | `position_threshold_meters` | 0.002 m | state updates |
/// | `rotation_threshold_degrees` | 0.5° | state updates |
/// | `heartbeat_interval` | 1 s | state updates, keeps 5 alive |
/// | `exclusive_grab` | `false` | 3 (the exclusive-grab option) |
/// | `orphan_stop_delay` | 2 s | 5 (orphans nobody takes over) |
/// | `participant_silence_timeout` | 2 s | 5 (a participant heard from by nothing at all) |
/// | `server_silence_timeout` | 10 s | a participant's end when its entity server is gone |
#[derive(Resource, Debug, Clone, PartialEq, Reflect, Serialize, Deserialize)]
#[reflect(Resource, Debug, Default, PartialEq, Clone)]
pub struct OwnershipConfig {
    /// Priority an owner drops to when it no longer wants the body (ownership rule 13); others
    /// may then bid VOLUNTEER at once (ownership rule 14). Default 1; must be ≥ 1 (0 means "no
    /// owner").
    pub yield_priority: Priority,
    /// Priority of a bid for a body that has been active and unowned for `volunteer_delay`
    /// (ownership rule 7). Default 2.
    pub volunteer_priority: Priority,
    /// Priority the server grants instead of `volunteer_priority` (ownership rule 7). Default 3.
    pub recruit_priority: Priority,
    /// Priority of a bid after a script edit or an avatar collision (ownership rules 8, 9).
    /// Default 127.
    pub poke_priority: Priority,
    /// Priority of a bid for a held body (ownership rule 10). Default 128.
    pub grab_priority: Priority,
    /// The highest priority a participant may bid or hold; the server refuses anything above it
    /// (`RefusalReason::PriorityTooHigh`) and participants never ask for more. Default 128
    /// (GRAB).
    pub max_bid_priority: Priority,
    /// After a body's last ownership change, a bid at the owner's own priority is refused for
    /// this long (ownership rule 3). Measured from the body's last change of owner (not of
    /// priority). Default 200 ms.
    pub equal_priority_lockout: Duration,
    /// An owner that sends no update for a body for this long loses it (ownership rule 5): the
    /// body is announced unowned and keeps moving on every participant (an orphan, see
    /// `orphan_stop_delay`). Default 5 s.
    pub owner_silence_expiry: Duration,
    /// A participant bids VOLUNTEER for a body that has been active and unowned for this long
    /// (ownership rule 7). Default 500 ms.
    pub volunteer_delay: Duration,
    /// An unanswered bid, priority change or release is sent again after this long (ownership
    /// rules 6 and 12). Default 200 ms.
    pub bid_resend_interval: Duration,
    /// An owner sends a state update when the body is this far, in meters, from where receivers
    /// extrapolate it from the last update sent. Default 0.002 m (2 mm).
    pub position_threshold_meters: f32,
    /// An owner sends a state update when the body's rotation is this far, in degrees, from the
    /// rotation receivers extrapolate from the last update sent. Default 0.5°.
    pub rotation_threshold_degrees: f32,
    /// An owner sends a state update at least this often even when nothing moved, so the server
    /// knows it is alive (ownership rule 5). Default 1 s; must be shorter than
    /// `owner_silence_expiry`.
    pub heartbeat_interval: Duration,
    /// The exclusive-grab option of ownership rule 3: when `true`, a bid at `grab_priority` or
    /// more for a body another participant holds at that priority is refused
    /// (`RefusalReason::HeldExclusively`) for as long as the holder owns it — until it releases
    /// it, or goes silent or disconnects (ownership rule 5). Default `false`: rule 3 as written,
    /// an equal GRAB takes a held body once the equal-priority lockout has passed.
    pub exclusive_grab: bool,
    /// A body its owner left moving (the owner went silent or disconnected, ownership rule 5)
    /// keeps moving on every participant; one that nobody has taken over (ownership rules 7, 14)
    /// after this long is stopped where each participant has it. Default 2 s; must be longer
    /// than `volunteer_delay`, so an interested participant always gets to volunteer first.
    pub orphan_stop_delay: Duration,
    /// A joined participant the entity server hears nothing at all from for this long counts
    /// as gone (ownership rule 5): every body it owns is cleared at once, as for a closed
    /// connection, while its connection stays open; its next message makes it a participant
    /// again, and it is told it was counted gone. A participant that has nothing else to send
    /// sends a keepalive every [`keepalive_interval`](Self::keepalive_interval) (an eighth of
    /// this). Default 2 s, as the relay's `silence_timeout_ms`; must be greater than zero.
    pub participant_silence_timeout: Duration,
    /// A joined participant that hears nothing at all from its entity server for this long
    /// ends its session with [`ParticipantEnd::ServerGone`](crate::ParticipantEnd::ServerGone)
    /// (or [`RoomEnded`](crate::ParticipantEnd::RoomEnded) once the server said the room ends)
    /// and closes its connection: the server died, or the network to it did. A live server
    /// answers every keepalive, and a participant that heard nothing for a
    /// [`keepalive_interval`](Self::keepalive_interval) sends one, so a live server is heard
    /// from several times a second. Participant only; default 10 s; must be longer than
    /// `participant_silence_timeout`.
    #[serde(default = "default_server_silence_timeout")]
    pub server_silence_timeout: Duration,
}

/// [`OwnershipConfig::server_silence_timeout`]'s default (also for configs written before it).
fn default_server_silence_timeout() -> Duration {
    Duration::from_secs(10)
}

impl Default for OwnershipConfig {
    fn default() -> Self {
        Self {
            yield_priority: Priority::YIELD,
            volunteer_priority: Priority::VOLUNTEER,
            recruit_priority: Priority::RECRUIT,
            poke_priority: Priority::POKE,
            grab_priority: Priority::GRAB,
            max_bid_priority: Priority::GRAB,
            equal_priority_lockout: Duration::from_millis(200),
            owner_silence_expiry: Duration::from_secs(5),
            volunteer_delay: Duration::from_millis(500),
            bid_resend_interval: Duration::from_millis(200),
            position_threshold_meters: 0.002,
            rotation_threshold_degrees: 0.5,
            heartbeat_interval: Duration::from_secs(1),
            exclusive_grab: false,
            orphan_stop_delay: Duration::from_secs(2),
            participant_silence_timeout: Duration::from_secs(2),
            server_silence_timeout: default_server_silence_timeout(),
        }
    }
}

impl OwnershipConfig {
    /// Checks every field.
    ///
    /// The priority levels must be strictly increasing,
    /// `0 < yield < volunteer < recruit < poke < grab`, and `max_bid_priority` at least
    /// `volunteer_priority` (or nothing could ever be owned). `owner_silence_expiry`,
    /// `bid_resend_interval`, `heartbeat_interval` and `participant_silence_timeout` must be
    /// non-zero, the heartbeat shorter
    /// than the silence expiry, `orphan_stop_delay` longer than `volunteer_delay`, and the
    /// thresholds finite and ≥ 0. A zero lockout or volunteer
    /// delay is allowed (High Fidelity's shipped client volunteers with no delay).
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), OwnershipError> {
        self.validate_priorities()?;
        self.validate_durations()?;
        self.validate_thresholds()
    }

    /// The priority levels: `0 < yield < volunteer < recruit < poke < grab`, and
    /// `max_bid_priority` at least `volunteer_priority`.
    fn validate_priorities(&self) -> Result<(), OwnershipError> {
        let levels = [
            ("yield_priority", self.yield_priority),
            ("volunteer_priority", self.volunteer_priority),
            ("recruit_priority", self.recruit_priority),
            ("poke_priority", self.poke_priority),
            ("grab_priority", self.grab_priority),
        ];
        if self.yield_priority == Priority::NONE {
            return invalid(
                "yield_priority",
                "0".into(),
                "at least 1 (0 means no owner)",
            );
        }
        for pair in levels.windows(2) {
            let ((_, low), (field, high)) = (pair[0], pair[1]);
            if high <= low {
                return invalid(
                    field,
                    high.to_string(),
                    "priority levels must increase: yield < volunteer < recruit < poke < grab",
                );
            }
        }
        if self.max_bid_priority < self.volunteer_priority {
            return invalid(
                "max_bid_priority",
                self.max_bid_priority.to_string(),
                "at least volunteer_priority",
            );
        }
        Ok(())
    }

    /// The timings: silence expiry, resend interval, heartbeat and participant silence timeout
    /// non-zero, the heartbeat shorter than the silence expiry, `orphan_stop_delay` longer than
    /// `volunteer_delay`.
    fn validate_durations(&self) -> Result<(), OwnershipError> {
        let ms = |d: Duration| format!("{} ms", d.as_millis());
        if self.owner_silence_expiry.is_zero() {
            return invalid(
                "owner_silence_expiry",
                ms(self.owner_silence_expiry),
                "greater than zero",
            );
        }
        if self.bid_resend_interval.is_zero() {
            return invalid(
                "bid_resend_interval",
                ms(self.bid_resend_interval),
                "greater than zero",
            );
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.owner_silence_expiry
        {
            return invalid(
                "heartbeat_interval",
                ms(self.heartbeat_interval),
                "greater than zero and shorter than owner_silence_expiry",
            );
        }
        if self.orphan_stop_delay <= self.volunteer_delay {
            return invalid(
                "orphan_stop_delay",
                ms(self.orphan_stop_delay),
                "longer than volunteer_delay",
            );
        }
        if self.participant_silence_timeout.is_zero() {
            return invalid(
                "participant_silence_timeout",
                ms(self.participant_silence_timeout),
                "greater than zero",
            );
        }
        if self.server_silence_timeout <= self.participant_silence_timeout {
            return invalid(
                "server_silence_timeout",
                ms(self.server_silence_timeout),
                "longer than participant_silence_timeout",
            );
        }
        Ok(())
    }

    /// The state-update thresholds: finite and ≥ 0.
    fn validate_thresholds(&self) -> Result<(), OwnershipError> {
        for (field, value) in [
            ("position_threshold_meters", self.position_threshold_meters),
            (
                "rotation_threshold_degrees",
                self.rotation_threshold_degrees,
            ),
        ] {
            if !value.is_finite() || value < 0.0 {
                return invalid(field, value.to_string(), "a finite number ≥ 0");
            }
        }
        Ok(())
    }

    /// How long a participant may send nothing before it sends a keepalive: an eighth of
    /// `participant_silence_timeout` (250 ms by default), so that eight in a row must be lost
    /// before an idle participant is counted gone.
    pub fn keepalive_interval(&self) -> Duration {
        self.participant_silence_timeout / 8
    }

    /// The priority a granted bid or priority change at `asked` is recorded at: VOLUNTEER
    /// becomes RECRUIT (ownership rule 7), everything else stays.
    #[inline]
    pub fn granted_priority(&self, asked: Priority) -> Priority {
        if asked == self.volunteer_priority {
            self.recruit_priority
        } else {
            asked
        }
    }
}

/// The [`OwnershipError::InvalidConfig`] for `field` at `value`, which must be `reason`.
fn invalid(field: &'static str, value: String, reason: &'static str) -> Result<(), OwnershipError> {
    Err(OwnershipError::InvalidConfig {
        field,
        value,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_design_table_and_valid() {
        let c = OwnershipConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.equal_priority_lockout, Duration::from_millis(200));
        assert_eq!(c.owner_silence_expiry, Duration::from_secs(5));
        assert_eq!(c.volunteer_delay, Duration::from_millis(500));
        assert_eq!(c.bid_resend_interval, Duration::from_millis(200));
        assert_eq!(c.max_bid_priority, Priority::GRAB);
        assert_eq!(c.participant_silence_timeout, Duration::from_secs(2));
        assert_eq!(c.keepalive_interval(), Duration::from_millis(250));
    }

    #[test]
    fn validate_names_the_bad_field() {
        let field_of = |c: OwnershipConfig| match c.validate() {
            Err(OwnershipError::InvalidConfig { field, .. }) => field,
            other => panic!("expected InvalidConfig, got {other:?}"),
        };
        let base = OwnershipConfig::default;
        assert_eq!(
            field_of(OwnershipConfig {
                server_silence_timeout: Duration::from_secs(2),
                ..base()
            }),
            "server_silence_timeout"
        );
        assert_eq!(
            field_of(OwnershipConfig {
                yield_priority: Priority(0),
                ..base()
            }),
            "yield_priority"
        );
        assert_eq!(
            field_of(OwnershipConfig {
                recruit_priority: Priority(2),
                ..base()
            }),
            "recruit_priority"
        );
        assert_eq!(
            field_of(OwnershipConfig {
                grab_priority: Priority(127),
                ..base()
            }),
            "grab_priority"
        );
        assert_eq!(
            field_of(OwnershipConfig {
                max_bid_priority: Priority::YIELD,
                ..base()
            }),
            "max_bid_priority"
        );
        assert_eq!(
            field_of(OwnershipConfig {
                owner_silence_expiry: Duration::ZERO,
                ..base()
            }),
            "owner_silence_expiry"
        );
        assert_eq!(
            field_of(OwnershipConfig {
                bid_resend_interval: Duration::ZERO,
                ..base()
            }),
            "bid_resend_interval"
        );
        assert_eq!(
            field_of(OwnershipConfig {
                heartbeat_interval: Duration::from_secs(5),
                ..base()
            }),
            "heartbeat_interval"
        );
        assert_eq!(
            field_of(OwnershipConfig {
                orphan_stop_delay: Duration::from_millis(500),
                ..base()
            }),
            "orphan_stop_delay"
        );
        assert_eq!(
            field_of(OwnershipConfig {
                participant_silence_timeout: Duration::ZERO,
                ..base()
            }),
            "participant_silence_timeout"
        );
        assert_eq!(
            field_of(OwnershipConfig {
                rotation_threshold_degrees: f32::NAN,
                ..base()
            }),
            "rotation_threshold_degrees"
        );
        assert_eq!(
            field_of(OwnershipConfig {
                position_threshold_meters: -1.0,
                ..base()
            }),
            "position_threshold_meters"
        );
    }

    #[test]
    fn zero_lockout_and_delay_are_allowed() {
        let c = OwnershipConfig {
            equal_priority_lockout: Duration::ZERO,
            volunteer_delay: Duration::ZERO,
            ..OwnershipConfig::default()
        };
        assert_eq!(c.validate(), Ok(()));
    }
}
