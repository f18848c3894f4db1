//! The entity server's per-connection rate limits ([`EntityServerLimits`]): one token bucket per
//! connection for each of bids, releases and state updates; a message over its limit is dropped
//! and counted ([`RateLimitedCounts`]). See [rate limits](crate::rules#rate-limits).

use core::time::Duration;

use bevy::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::OwnershipError;

/// One token bucket's numbers: `per_second` messages on average, at most `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Reflect, Serialize, Deserialize)]
pub struct RateLimit {
    /// Tokens added per second (messages per second on average); must be ≥ 1.
    pub per_second: u32,
    /// Bucket size: the most messages accepted at once after a quiet spell; must be ≥ 1. The
    /// bucket starts full.
    pub burst: u32,
}

impl RateLimit {
    /// `per_second` messages per second, bursts of `burst`.
    pub const fn new(per_second: u32, burst: u32) -> Self {
        Self { per_second, burst }
    }
}

/// The entity server's per-connection limits, one [`RateLimit`] per kind of message a
/// participant sends ([rate limits](crate::rules#rate-limits)). Defaults: bids 60/s (burst 30), releases
/// 60/s (burst 30), state updates 640/s (burst 320: ten bodies updated every frame at 64 Hz,
/// with room for a burst).
///
/// An honest participant bids once per body and interaction and resends at most every
/// `bid_resend_interval`, so it stays far below these; a dropped bid or release is resent by
/// the participant (ownership rules 6 and 12), a dropped state update is superseded by the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Reflect, Serialize, Deserialize)]
pub struct EntityServerLimits {
    /// `Bid` messages (bids and an owner's priority changes).
    pub bids: RateLimit,
    /// `Release` messages.
    pub releases: RateLimit,
    /// `StateUpdate` messages.
    pub state_updates: RateLimit,
}

impl Default for EntityServerLimits {
    fn default() -> Self {
        Self {
            bids: RateLimit::new(60, 30),
            releases: RateLimit::new(60, 30),
            state_updates: RateLimit::new(640, 320),
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
    /// [`OwnershipError::InvalidConfig`] naming the first limit with a zero rate or burst.
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
}

/// The kinds of message the entity server rate-limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Limited {
    Bid,
    Release,
    StateUpdate,
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
            Limited::StateUpdate => self.state_updates += 1,
        }
    }
}

/// One connection's three buckets.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionLimits {
    bids: TokenBucket,
    releases: TokenBucket,
    state_updates: TokenBucket,
}

impl ConnectionLimits {
    /// Full buckets at `now`.
    pub(crate) fn new(limits: &EntityServerLimits, now: Duration) -> Self {
        Self {
            bids: TokenBucket::full(limits.bids, now),
            releases: TokenBucket::full(limits.releases, now),
            state_updates: TokenBucket::full(limits.state_updates, now),
        }
    }

    /// Whether a message of `kind` arriving at `now` is within the limit (takes a token if so).
    pub(crate) fn admit(&mut self, kind: Limited, now: Duration) -> bool {
        let bucket = match kind {
            Limited::Bid => &mut self.bids,
            Limited::Release => &mut self.releases,
            Limited::StateUpdate => &mut self.state_updates,
        };
        bucket.try_take(now)
    }
}

/// A token bucket: refills at `per_second`, holds at most `burst`.
///
/// A private stand-in for `simsync_net`'s bucket; only [`ConnectionLimits::admit`] uses it.
#[derive(Debug, Clone, Copy)]
struct TokenBucket {
    limit: RateLimit,
    tokens: f64,
    last: Duration,
}

impl TokenBucket {
    fn full(limit: RateLimit, now: Duration) -> Self {
        Self {
            limit,
            tokens: f64::from(limit.burst),
            last: now,
        }
    }

    fn try_take(&mut self, now: Duration) -> bool {
        let elapsed = now.saturating_sub(self.last);
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * f64::from(self.limit.per_second))
            .min(f64::from(self.limit.burst));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_bucket_admits_its_burst_then_its_rate() {
        let limits = EntityServerLimits {
            bids: RateLimit::new(10, 3),
            ..EntityServerLimits::default()
        };
        let mut c = ConnectionLimits::new(&limits, Duration::ZERO);
        let admitted = (0..10)
            .filter(|_| c.admit(Limited::Bid, Duration::ZERO))
            .count();
        assert_eq!(admitted, 3);
        // 100 ms refills one token at 10/s.
        assert!(c.admit(Limited::Bid, 100 * MS));
        assert!(!c.admit(Limited::Bid, 100 * MS));
        // A long pause refills only up to the burst.
        let after_pause = (0..10)
            .filter(|_| c.admit(Limited::Bid, 60_000 * MS))
            .count();
        assert_eq!(after_pause, 3);
        // Time going backwards refills nothing.
        assert!(!c.admit(Limited::Bid, 10 * MS));
    }

    #[test]
    fn kinds_have_separate_buckets() {
        let limits = EntityServerLimits {
            bids: RateLimit::new(1, 1),
            releases: RateLimit::new(1, 1),
            state_updates: RateLimit::new(1, 2),
        };
        let mut c = ConnectionLimits::new(&limits, Duration::ZERO);
        assert!(c.admit(Limited::Bid, Duration::ZERO));
        assert!(!c.admit(Limited::Bid, Duration::ZERO));
        assert!(c.admit(Limited::Release, Duration::ZERO));
        assert!(c.admit(Limited::StateUpdate, Duration::ZERO));
        assert!(c.admit(Limited::StateUpdate, Duration::ZERO));
        assert!(!c.admit(Limited::StateUpdate, Duration::ZERO));
        let mut counts = RateLimitedCounts::default();
        counts.add(Limited::Bid);
        counts.add(Limited::StateUpdate);
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
