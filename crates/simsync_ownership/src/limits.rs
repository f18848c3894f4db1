//! The entity server's per-connection rate limits ([`EntityServerLimits`]): token buckets
//! (`simsync_net`'s [`RateLimiter`]) per connection for bids, for releases, and for state
//! updates per owned body; a message over its limit is dropped and counted
//! ([`RateLimitedCounts`]). See [rate limits](crate::rules#rate-limits).

use core::time::Duration;

use bevy::prelude::*;
use simsync_net::{RateLimit, RateLimiter};

use crate::error::OwnershipError;
use crate::priority::BodyId;

/// The entity server's per-connection limits, one [`RateLimit`] per kind of message a
/// participant sends ([rate limits](crate::rules#rate-limits)). Defaults: bids and releases
/// [`RateLimit::OWNERSHIP_REQUESTS`] (30/s each, burst 60); state updates 128/s, burst 32,
/// **per body the sender owns** (an owner sends at most one update per body per frame), plus
/// one more such bucket shared by its updates about bodies it does not own (which are refused
/// anyway). An owner of many moving bodies (a collapsing pile) is therefore never limited.
///
/// An honest participant bids once per body and interaction and resends at most every
/// `bid_resend_interval`, so it stays far below these; a dropped bid or release is resent by
/// the participant (ownership rules 6 and 12), a dropped state update is superseded by the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityServerLimits {
    /// `Bid` messages (bids and an owner's priority changes).
    pub bids: RateLimit,
    /// `Release` messages.
    pub releases: RateLimit,
    /// `StateUpdate` messages, per body the sender owns (and once more for all others).
    pub state_updates: RateLimit,
}

impl Default for EntityServerLimits {
    fn default() -> Self {
        Self {
            bids: RateLimit::OWNERSHIP_REQUESTS,
            releases: RateLimit::OWNERSHIP_REQUESTS,
            state_updates: RateLimit::new(128, 32),
        }
    }
}

impl EntityServerLimits {
    /// Limits that never bite in practice (a million per second, bursts of a million): for
    /// tests and trusted setups.
    pub const UNLIMITED: Self = Self {
        bids: RateLimit::new(1_000_000, 1_000_000),
        releases: RateLimit::new(1_000_000, 1_000_000),
        state_updates: RateLimit::new(1_000_000, 1_000_000),
    };

    /// Checks every limit.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] naming the first limit with a zero rate or burst (a
    /// zero would starve the protocol: bids never answered, owners expiring).
    pub fn validate(&self) -> Result<(), OwnershipError> {
        for (field, limit) in [
            ("limits.bids", self.bids),
            ("limits.releases", self.releases),
            ("limits.state_updates", self.state_updates),
        ] {
            if limit.per_second == 0 || limit.burst == 0 {
                return Err(OwnershipError::InvalidConfig {
                    field,
                    value: format!("{}/s, burst {}", limit.per_second, limit.burst),
                    reason: "per_second and burst must be at least 1",
                });
            }
        }
        Ok(())
    }

    /// One connection's buckets for bids and releases, full; state-update buckets are added
    /// by [`admit`](Self::admit) as bodies come up.
    pub(crate) fn limiter(&self) -> RateLimiter<Limited> {
        RateLimiter::new()
            .with_limit(Limited::Bid, self.bids)
            .with_limit(Limited::Release, self.releases)
    }

    /// Whether a message of `kind` at `now` is within `limiter`'s limits (taking a token if so);
    /// a state-update bucket is created full the first time its body (or `None`) is seen.
    pub(crate) fn admit(
        &self,
        limiter: &mut RateLimiter<Limited>,
        kind: Limited,
        now: Duration,
    ) -> bool {
        if let Limited::StateUpdate(_) = kind
            && limiter.bucket(kind).is_none()
        {
            limiter.set_limit(kind, self.state_updates);
        }
        limiter.try_take(kind, now)
    }
}

/// The kinds of message the entity server rate-limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Limited {
    Bid,
    Release,
    /// About a body the sender owns (`Some`), or any other body (`None`).
    StateUpdate(Option<BodyId>),
}

/// Messages the entity server dropped for going over a connection's [`RateLimit`], per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
pub struct RateLimitedCounts {
    /// Bids dropped (no answer is sent; an honest participant resends, rule 6).
    pub bids: u64,
    /// Releases dropped (no answer; an honest participant resends, rule 12).
    pub releases: u64,
    /// State updates dropped (not relayed; the next one supersedes it).
    pub state_updates: u64,
}

impl RateLimitedCounts {
    /// All dropped messages.
    pub fn total(&self) -> u64 {
        self.bids + self.releases + self.state_updates
    }

    pub(crate) fn add(&mut self, kind: Limited) {
        match kind {
            Limited::Bid => self.bids += 1,
            Limited::Release => self.releases += 1,
            Limited::StateUpdate(_) => self.state_updates += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_owned_bodies_have_separate_buckets() {
        let limits = EntityServerLimits {
            bids: RateLimit::new(10, 1),
            releases: RateLimit::new(1, 1),
            state_updates: RateLimit::new(1, 2),
        };
        let mut c = limits.limiter();
        let t = Duration::ZERO;
        let admitted = |c: &mut RateLimiter<Limited>, kind, n: usize| {
            (0..n).filter(|_| limits.admit(c, kind, t)).count()
        };
        assert_eq!(admitted(&mut c, Limited::Bid, 5), 1);
        assert_eq!(admitted(&mut c, Limited::Release, 5), 1);
        // Two per owned body, and two for all bodies not owned.
        for body in [Some(BodyId(1)), Some(BodyId(2)), None] {
            assert_eq!(admitted(&mut c, Limited::StateUpdate(body), 5), 2);
        }
        // 100 ms refills one bid at 10/s.
        assert!(limits.admit(&mut c, Limited::Bid, Duration::from_millis(100)));
        let mut counts = RateLimitedCounts::default();
        counts.add(Limited::Bid);
        counts.add(Limited::StateUpdate(None));
        assert_eq!(counts.total(), 2);
    }

    #[test]
    fn zero_limits_do_not_validate() {
        assert!(EntityServerLimits::default().validate().is_ok());
        assert!(EntityServerLimits::UNLIMITED.validate().is_ok());
        let bad = EntityServerLimits {
            releases: RateLimit::new(5, 0),
            ..EntityServerLimits::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(OwnershipError::InvalidConfig {
                field: "limits.releases",
                ..
            })
        ));
    }
}
