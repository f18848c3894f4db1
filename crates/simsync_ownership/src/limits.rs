//! The entity server's per-connection rate limits ([`EntityServerLimits`]): token buckets
//! (`simsync_net`'s [`RateLimiter`]) per connection and body for bids, for releases, and for
//! state updates; a message over its limit is dropped and counted
//! ([`RateLimitedCounts`]). See [rate limits](crate::rules#rate-limits).

use core::time::Duration;

use bevy::prelude::*;
use simsync_net::{RateLimit, RateLimiter};

use crate::error::OwnershipError;
use crate::priority::BodyId;

/// The entity server's per-connection limits, one [`RateLimit`] per kind of request a
/// participant sends, **counted per body** ([rate limits](crate::rules#rate-limits)): every bid
/// (alone or in a `Bids` list) and every respawn takes a token from the bucket of its body,
/// every release from its body's release bucket, every state update from its body's state
/// bucket while the sender owns it. Requests about bodies the server does not have (or, for
/// state updates, does not let the sender own) share one more bucket per kind. How many
/// messages carry them does not matter. Defaults: bids **8/s, burst 8** per body (one every 8
/// ticks at 64 Hz); releases the same; state updates 128/s, burst 32, per owned body.
///
/// An honest participant asks about one body at most once per trigger (VOLUNTEER, POKE, GRAB:
/// three at most in a row) and resends an unanswered request every `bid_resend_interval`
/// (200 ms: 5/s), so it never reaches 8 per body — however many bodies it grabs at once; an
/// owner sends at most one state update per body per frame. A flood about a few bodies is
/// dropped at 8/s per body; a dropped request is resent by the participant (ownership rules
/// 6 and 12), a dropped state update is superseded by the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityServerLimits {
    /// Bids (and an owner's priority changes, and respawns), per body.
    pub bids: RateLimit,
    /// Releases, per body.
    pub releases: RateLimit,
    /// Bodies' states in `StateBatch`es, per body the sender owns (and once more for all
    /// others).
    pub state_updates: RateLimit,
}

impl Default for EntityServerLimits {
    fn default() -> Self {
        Self {
            bids: Self::PER_BODY_REQUESTS,
            releases: Self::PER_BODY_REQUESTS,
            state_updates: RateLimit::new(128, 32),
        }
    }
}

impl EntityServerLimits {
    /// The default limit of bids, and of releases, about one body: 8 per second, 8 at once.
    pub const PER_BODY_REQUESTS: RateLimit = RateLimit::new(8, 8);

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

    /// One connection's buckets, all empty: each is created full the first time its kind and
    /// body is seen, by [`admit`](Self::admit).
    pub(crate) fn limiter(&self) -> RateLimiter<Limited> {
        RateLimiter::new()
    }

    /// Whether a request of `kind` at `now` is within `limiter`'s limits (taking a token if
    /// so); a bucket is created full the first time its kind and body (or `None`) is seen.
    pub(crate) fn admit(
        &self,
        limiter: &mut RateLimiter<Limited>,
        kind: Limited,
        now: Duration,
    ) -> bool {
        if limiter.bucket(kind).is_none() {
            let limit = match kind {
                Limited::Bid(_) => self.bids,
                Limited::Release(_) => self.releases,
                Limited::StateUpdate(_) => self.state_updates,
            };
            limiter.set_limit(kind, limit);
        }
        limiter.try_take(kind, now)
    }
}

/// The kinds of message the entity server rate-limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Limited {
    /// A bid, priority change or respawn about a registered body (`Some`), or any other body.
    Bid(Option<BodyId>),
    /// A release of a registered body (`Some`), or any other body.
    Release(Option<BodyId>),
    /// About a body the sender owns (`Some`), or any other body (`None`).
    StateUpdate(Option<BodyId>),
}

/// Messages the entity server dropped for going over a connection's [`RateLimit`], per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
pub struct RateLimitedCounts {
    /// Bids (and respawns) dropped, counted per body (no answer is sent; an honest participant
    /// resends, rule 6).
    pub bids: u64,
    /// Releases dropped (no answer; an honest participant resends, rule 12).
    pub releases: u64,
    /// State updates dropped (not relayed; the next one supersedes it).
    pub state_updates: u64,
}

/// `bids 3, releases 0, state_updates 12`: every kind by name.
impl core::fmt::Display for RateLimitedCounts {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "bids {}, releases {}, state_updates {}",
            self.bids, self.releases, self.state_updates
        )
    }
}

impl RateLimitedCounts {
    /// All dropped messages.
    pub fn total(&self) -> u64 {
        self.bids + self.releases + self.state_updates
    }

    pub(crate) fn add(&mut self, kind: Limited) {
        match kind {
            Limited::Bid(_) => self.bids += 1,
            Limited::Release(_) => self.releases += 1,
            Limited::StateUpdate(_) => self.state_updates += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_bodies_have_separate_buckets() {
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
        // One bid and one release per body, and one for all unknown bodies.
        for body in [Some(BodyId(1)), Some(BodyId(2)), None] {
            assert_eq!(admitted(&mut c, Limited::Bid(body), 5), 1);
            assert_eq!(admitted(&mut c, Limited::Release(body), 5), 1);
        }
        // Two per owned body, and two for all bodies not owned.
        for body in [Some(BodyId(1)), Some(BodyId(2)), None] {
            assert_eq!(admitted(&mut c, Limited::StateUpdate(body), 5), 2);
        }
        // 100 ms refills one bid at 10/s.
        assert!(limits.admit(
            &mut c,
            Limited::Bid(Some(BodyId(1))),
            Duration::from_millis(100)
        ));
        let mut counts = RateLimitedCounts::default();
        counts.add(Limited::Bid(None));
        counts.add(Limited::StateUpdate(None));
        assert_eq!(counts.total(), 2);
        assert_eq!(counts.to_string(), "bids 1, releases 0, state_updates 1");
    }

    #[test]
    fn a_thousand_bodies_bid_at_once_pass_the_default_limits() {
        let limits = EntityServerLimits::default();
        let mut c = limits.limiter();
        let t = Duration::from_secs(3);
        // The ladder VOLUNTEER, POKE, GRAB, then a resend every 200 ms, for 1,000 bodies.
        for tick in 0..64u64 {
            let now = t + Duration::from_millis(tick * 1_000 / 64);
            for body in 0..1_000 {
                let sends = match tick {
                    0 => 3,
                    _ if tick % 13 == 0 => 1,
                    _ => 0,
                };
                for _ in 0..sends {
                    assert!(limits.admit(&mut c, Limited::Bid(Some(BodyId(body))), now));
                }
            }
        }
        // A flood of 100 bids about one body in 0.99 s: the burst of 8, then 7 refilled.
        let passed = (0..100u64)
            .filter(|i| {
                let now = t + Duration::from_millis(2_000 + i * 10);
                limits.admit(&mut c, Limited::Bid(Some(BodyId(5_000))), now)
            })
            .count();
        assert_eq!(passed, 15);
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
