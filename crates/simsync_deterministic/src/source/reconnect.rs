//! When a networked client whose connection was lost tries again by itself: the pure
//! [`ReconnectWatch`] over the client's clock and its renet connection
//! ([reconnecting](crate::rules#reconnecting-after-a-lost-connection)).

use std::time::Duration;

use bevy::reflect::Reflect;
use simsync_net::ReconnectPolicy;

/// Where a client is in coming back after a lost connection (part of
/// [`RelayClientStats`](crate::RelayClientStats)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Reflect)]
pub enum ReconnectPhase {
    /// Connected, or never lost a connection it could come back to.
    #[default]
    Idle,
    /// Waiting out the backoff before attempt `attempt` (1-based) of `of`.
    Waiting {
        /// The attempt that comes next, from 1.
        attempt: u32,
        /// Attempts the policy allows.
        of: u32,
    },
    /// Attempt `attempt` (1-based) of `of` is connecting and saying hello again.
    Connecting {
        /// The attempt under way, from 1.
        attempt: u32,
        /// Attempts the policy allows.
        of: u32,
    },
    /// Every attempt failed: the client stays disconnected (final).
    Failed {
        /// Attempts made.
        attempts: u32,
    },
}

impl ReconnectPhase {
    /// Whether the client is coming back (waiting or connecting).
    pub fn is_reconnecting(self) -> bool {
        matches!(self, Self::Waiting { .. } | Self::Connecting { .. })
    }
}

/// What the client does after an observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReconnectAction {
    /// Nothing.
    None,
    /// Start a new connection now (attempt `attempt`, from 1).
    Reconnect {
        /// The attempt, from 1.
        attempt: u32,
    },
}

/// The reconnect state machine: with a policy of at least one attempt, a lost connection of a
/// welcomed client (one holding a reconnect token) waits `policy.backoff(0)`, reconnects, and on every failed attempt waits the next
/// backoff, until the policy's attempts are used up ([`ReconnectPhase::Failed`]). A welcome on
/// the new connection ends it ([`rejoined`](Self::rejoined)).
#[derive(Debug, Clone, Default)]
pub(crate) struct ReconnectWatch {
    policy: ReconnectPolicy,
    phase: ReconnectPhase,
    /// When the next attempt starts (while waiting).
    due: Duration,
}

impl ReconnectWatch {
    /// A watch with `policy`, idle.
    pub(crate) fn new(policy: ReconnectPolicy) -> Self {
        Self {
            policy,
            phase: ReconnectPhase::Idle,
            due: Duration::ZERO,
        }
    }

    /// The current phase.
    pub(crate) fn phase(&self) -> ReconnectPhase {
        self.phase
    }

    /// Observes the connection at client time `now`: `lost` when the renet client is
    /// disconnected, `can_rejoin` when the client holds a reconnect token and was not refused.
    pub(crate) fn observe(
        &mut self,
        now: Duration,
        lost: bool,
        can_rejoin: bool,
    ) -> ReconnectAction {
        match self.phase {
            ReconnectPhase::Idle if lost && can_rejoin && self.policy.attempts > 0 => {
                self.wait_for(0, now);
            }
            ReconnectPhase::Waiting { attempt, of } if now >= self.due => {
                self.phase = ReconnectPhase::Connecting { attempt, of };
                return ReconnectAction::Reconnect { attempt };
            }
            ReconnectPhase::Connecting { attempt, .. } if lost => self.wait_for(attempt, now),
            _ => {}
        }
        ReconnectAction::None
    }

    /// A new connection could not even be started (its socket, say): the attempt failed.
    pub(crate) fn attempt_failed(&mut self, now: Duration) {
        if let ReconnectPhase::Connecting { attempt, .. } = self.phase {
            self.wait_for(attempt, now);
        }
    }

    /// The relay welcomed this client again: the watch is idle.
    pub(crate) fn rejoined(&mut self) {
        self.phase = ReconnectPhase::Idle;
    }

    /// Rejoins without waiting for the connection to be found lost (a pause of the process
    /// longer than the relay keeps a silent connection): attempt 1 starts at the first
    /// observation after `now`, once the old connection was closed. Does nothing while a
    /// reconnect is under way, after the attempts failed, or with a policy of no attempts.
    /// Returns whether it starts.
    pub(crate) fn rejoin_soon(&mut self, now: Duration) -> bool {
        if self.phase != ReconnectPhase::Idle || self.policy.attempts == 0 {
            return false;
        }
        self.phase = ReconnectPhase::Waiting {
            attempt: 1,
            of: self.policy.attempts,
        };
        // Strictly later than `now`: the next poll, not this one.
        self.due = now + Duration::from_nanos(1);
        true
    }

    /// No reconnect any more (the client left, or gave the server up): idle, and nothing is
    /// started until [`Self::observe`] sees a new loss.
    pub(crate) fn stop(&mut self) {
        self.phase = ReconnectPhase::Idle;
    }

    /// After `made` failed attempts: waits for the next one, or fails when none is left.
    fn wait_for(&mut self, made: u32, now: Duration) {
        self.phase = match self.policy.backoff(made) {
            Some(backoff) => {
                self.due = now + backoff;
                ReconnectPhase::Waiting {
                    attempt: made + 1,
                    of: self.policy.attempts,
                }
            }
            None => ReconnectPhase::Failed { attempts: made },
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn policy() -> ReconnectPolicy {
        ReconnectPolicy {
            attempts: 3,
            first_backoff: 100 * MS,
            max_backoff: 150 * MS,
        }
    }

    #[test]
    fn a_lost_connection_waits_the_backoff_then_reconnects() {
        let mut watch = ReconnectWatch::new(policy());
        assert_eq!(
            watch.observe(Duration::ZERO, false, true),
            ReconnectAction::None
        );
        assert_eq!(watch.observe(10 * MS, true, true), ReconnectAction::None);
        assert_eq!(watch.phase(), ReconnectPhase::Waiting { attempt: 1, of: 3 });
        assert_eq!(watch.observe(109 * MS, true, true), ReconnectAction::None);
        assert_eq!(
            watch.observe(110 * MS, true, true),
            ReconnectAction::Reconnect { attempt: 1 }
        );
        assert_eq!(
            watch.phase(),
            ReconnectPhase::Connecting { attempt: 1, of: 3 }
        );
        // Connecting (not lost): nothing; welcomed: idle again.
        assert_eq!(watch.observe(120 * MS, false, true), ReconnectAction::None);
        watch.rejoined();
        assert_eq!(watch.phase(), ReconnectPhase::Idle);
        // A second loss starts over from the first backoff.
        watch.observe(500 * MS, true, true);
        assert_eq!(watch.phase(), ReconnectPhase::Waiting { attempt: 1, of: 3 });
    }

    #[test]
    fn failed_attempts_double_the_backoff_up_to_its_cap_and_then_fail_for_good() {
        let mut watch = ReconnectWatch::new(policy());
        watch.observe(Duration::ZERO, true, true);
        let mut starts = Vec::new();
        let mut now = Duration::ZERO;
        while now < 10_000 * MS {
            if let ReconnectAction::Reconnect { attempt } = watch.observe(now, true, true) {
                starts.push((attempt, now.as_millis()));
                // The attempt starts; its connection fails one observation later.
                now += MS;
                watch.observe(now, true, true);
            }
            now += MS;
        }
        // Backoffs 100, 200 capped at 150, 150 ms, each after the failure before it.
        assert_eq!(starts, vec![(1, 100), (2, 251), (3, 402)]);
        assert_eq!(watch.phase(), ReconnectPhase::Failed { attempts: 3 });
        assert!(!watch.phase().is_reconnecting());
        // Final: a later loss or welcome-less observation changes nothing.
        assert_eq!(watch.observe(now, true, true), ReconnectAction::None);
        assert_eq!(watch.phase(), ReconnectPhase::Failed { attempts: 3 });
    }

    #[test]
    fn no_token_or_policy_off_never_reconnects() {
        let mut watch = ReconnectWatch::new(policy());
        watch.observe(Duration::ZERO, true, false);
        assert_eq!(watch.phase(), ReconnectPhase::Idle);
        // Off: the loss stays a plain lost connection.
        let mut off = ReconnectWatch::new(ReconnectPolicy::OFF);
        assert_eq!(
            off.observe(Duration::ZERO, true, true),
            ReconnectAction::None
        );
        assert_eq!(off.phase(), ReconnectPhase::Idle);
    }

    #[test]
    fn a_rejoin_after_a_pause_starts_at_the_next_observation_and_only_from_idle() {
        let mut watch = ReconnectWatch::new(policy());
        assert!(watch.rejoin_soon(500 * MS));
        assert_eq!(watch.phase(), ReconnectPhase::Waiting { attempt: 1, of: 3 });
        // Not in the observation of the same instant (the old connection closes first).
        assert_eq!(watch.observe(500 * MS, false, true), ReconnectAction::None);
        assert_eq!(
            watch.observe(501 * MS, true, true),
            ReconnectAction::Reconnect { attempt: 1 }
        );
        // Under way: a second pause changes nothing.
        assert!(!watch.rejoin_soon(502 * MS));
        assert_eq!(
            watch.phase(),
            ReconnectPhase::Connecting { attempt: 1, of: 3 }
        );
        watch.stop();
        assert_eq!(watch.phase(), ReconnectPhase::Idle);
        let mut off = ReconnectWatch::new(ReconnectPolicy::OFF);
        assert!(!off.rejoin_soon(Duration::ZERO));
        assert_eq!(off.phase(), ReconnectPhase::Idle);
    }

    #[test]
    fn an_attempt_that_cannot_start_counts_as_failed() {
        let mut watch = ReconnectWatch::new(policy());
        watch.observe(Duration::ZERO, true, true);
        assert_eq!(
            watch.observe(100 * MS, true, true),
            ReconnectAction::Reconnect { attempt: 1 }
        );
        watch.attempt_failed(100 * MS);
        assert_eq!(watch.phase(), ReconnectPhase::Waiting { attempt: 2, of: 3 });
    }
}
