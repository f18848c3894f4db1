//! The entity server's per-connection rate limits ([`EntityServerLimits`]): token buckets
//! (`simsync_net`'s [`RateLimiter`]) per connection and body for bids, for releases, and for
//! state updates; one bucket per connection for all its ownership requests together; and a
//! cool-down on re-bidding a body the connection just released. A message over a limit is
//! dropped and counted ([`RateLimitedCounts`]). See [rate limits](crate::rules#rate-limits).

use core::time::Duration;

use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use simsync_net::{RateLimit, RateLimiter, TokenBucket};

use crate::body_map::BodyMap;
use crate::error::OwnershipError;
use crate::priority::BodyId;

/// The entity server's per-connection limits ([rate limits](crate::rules#rate-limits)).
///
/// **Per body**: every bid (alone or in a `Bids` list) and every respawn takes a token from the
/// bucket of its body, every release from its body's release bucket, every state update from
/// its body's state bucket while the sender owns it. Requests about bodies the server does not
/// have (or, for state updates, does not let the sender own) share one more bucket per kind.
/// Defaults: bids **8/s, burst 8** per body (one every 8 ticks at 64 Hz); releases the same;
/// state updates 128/s, burst 32, per owned body.
///
/// **Per participant**: every bid, priority change, release and respawn about a registered body
/// that passed its body's bucket also takes a token from the connection's one
/// `ownership_requests` bucket, whatever body it names (default **256/s, burst 2,048**), so the
/// owner records one participant makes the server broadcast are bounded however many bodies it
/// spreads its requests over: at most 2,048 + 256 × `t` in `t` seconds (4,608 in 10 s). And a
/// bid for a body the same participant released less than `rebid_cooldown` ago (default
/// **100 ms**) is dropped, so it cannot grab and release one body as fast as its buckets refill.
///
/// An honest participant asks about one body at most once per trigger (VOLUNTEER, POKE, GRAB:
/// three at most in a row) and resends an unanswered request every `bid_resend_interval`
/// (200 ms: 5/s), so it never reaches 8 per body; a grab of 1,000 bodies at once is 1,000
/// requests, inside the burst of 2,048; and a resend comes after the cool-down. An owner sends
/// at most one state update per body per frame. A dropped request is resent by the participant
/// (ownership rules 6 and 12), a dropped state update is superseded by the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityServerLimits {
    /// Bids (and an owner's priority changes, and respawns), per body.
    pub bids: RateLimit,
    /// Releases, per body.
    pub releases: RateLimit,
    /// Bodies' states in `StateBatch`es, per body the sender owns (and once more for all
    /// others).
    pub state_updates: RateLimit,
    /// Bids, priority changes, releases and respawns about registered bodies, all bodies of
    /// one connection together.
    pub ownership_requests: RateLimit,
    /// How long after the server granted a participant's release of a body that participant's
    /// bids for it are dropped. Zero turns the cool-down off.
    pub rebid_cooldown: Duration,
}

impl Default for EntityServerLimits {
    fn default() -> Self {
        Self {
            bids: Self::PER_BODY_REQUESTS,
            releases: Self::PER_BODY_REQUESTS,
            state_updates: RateLimit::new(128, 32),
            ownership_requests: Self::PER_PARTICIPANT_REQUESTS,
            rebid_cooldown: Self::REBID_COOLDOWN,
        }
    }
}

impl EntityServerLimits {
    /// The default limit of bids, and of releases, about one body: 8 per second, 8 at once.
    pub const PER_BODY_REQUESTS: RateLimit = RateLimit::new(8, 8);

    /// The default limit of one participant's ownership requests, all bodies together: 256 per
    /// second, 2,048 at once (a grab of 1,000 bodies with its resends fits the burst).
    pub const PER_PARTICIPANT_REQUESTS: RateLimit = RateLimit::new(256, 2_048);

    /// The default re-bid cool-down: 100 ms, less than the 200 ms after which an honest
    /// participant resends a bid that got no answer.
    pub const REBID_COOLDOWN: Duration = Duration::from_millis(100);

    /// Limits that never bite in practice (a million per second, bursts of a million, no
    /// cool-down): for tests and trusted setups.
    pub const UNLIMITED: Self = Self {
        bids: RateLimit::new(1_000_000, 1_000_000),
        releases: RateLimit::new(1_000_000, 1_000_000),
        state_updates: RateLimit::new(1_000_000, 1_000_000),
        ownership_requests: RateLimit::new(1_000_000, 1_000_000),
        rebid_cooldown: Duration::ZERO,
    };

    /// Checks every limit.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] naming the first limit with a zero rate or burst (a
    /// zero would starve the protocol: bids never answered, owners expiring), or a
    /// `rebid_cooldown` above 10 s (a participant could never take back a body it released).
    pub fn validate(&self) -> Result<(), OwnershipError> {
        for (field, limit) in [
            ("limits.bids", self.bids),
            ("limits.releases", self.releases),
            ("limits.state_updates", self.state_updates),
            ("limits.ownership_requests", self.ownership_requests),
        ] {
            if limit.per_second == 0 || limit.burst == 0 {
                return Err(OwnershipError::InvalidConfig {
                    field,
                    value: format!("{}/s, burst {}", limit.per_second, limit.burst),
                    reason: "per_second and burst must be at least 1",
                });
            }
        }
        if self.rebid_cooldown > Duration::from_secs(10) {
            return Err(OwnershipError::InvalidConfig {
                field: "limits.rebid_cooldown",
                value: format!("{:?}", self.rebid_cooldown),
                reason: "at most 10 s",
            });
        }
        Ok(())
    }

    /// Whether a request of `kind` at `now` from the connection whose state is `connection` is
    /// within the limits (taking its tokens if so), or why it is dropped. Buckets are created
    /// full the first time their kind and body (or `None`) is seen. A bid, respawn or release
    /// about a registered body takes its body's token first, then the connection's
    /// `ownership_requests` token; one dropped by its body's bucket takes nothing from the
    /// connection's. The re-bid cool-down is checked before, by
    /// [`ConnectionLimits::rebid_too_soon`].
    pub(crate) fn admit(
        &self,
        connection: &mut ConnectionLimits,
        kind: Limited,
        now: Duration,
    ) -> Result<(), Dropped> {
        let limit = match kind {
            Limited::Bid(_) => self.bids,
            Limited::Release(_) => self.releases,
            Limited::StateUpdate(_) => self.state_updates,
            Limited::Requests => self.ownership_requests,
        };
        let passed = match kind {
            // The one limit taken once per relayed state: its buckets are found by body id.
            Limited::StateUpdate(Some(body)) => connection
                .state_buckets
                .get_or_insert_with(body, || TokenBucket::new(limit))
                .try_take(now),
            _ => connection.limiter.try_take_or_limit(kind, limit, now),
        };
        if !passed {
            return Err(Dropped::BodyLimit);
        }
        if !matches!(kind, Limited::Bid(Some(_)) | Limited::Release(Some(_))) {
            return Ok(());
        }
        if limiter_take_requests(&mut connection.limiter, self.ownership_requests, now) {
            Ok(())
        } else {
            Err(Dropped::ParticipantLimit)
        }
    }
}

/// Takes one token of the connection's `ownership_requests` bucket (created full).
fn limiter_take_requests(
    limiter: &mut RateLimiter<Limited>,
    limit: RateLimit,
    now: Duration,
) -> bool {
    limiter.try_take_or_limit(Limited::Requests, limit, now)
}

/// The kinds of message the entity server rate-limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Limited {
    /// A bid, priority change or respawn about a registered body (`Some`), or any other body.
    Bid(Option<BodyId>),
    /// A release of a registered body (`Some`), or any other body.
    Release(Option<BodyId>),
    /// About a body the sender owns (`Some`), or any other body.
    StateUpdate(Option<BodyId>),
    /// The connection's bucket of all its ownership requests about registered bodies.
    Requests,
}

/// Why a request was dropped by [`EntityServerLimits::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// Its body's bucket (or the unknown bodies' one) was empty.
    BodyLimit,
    /// A bid for a body this connection released less than `rebid_cooldown` ago.
    TooSoon,
    /// The connection's `ownership_requests` bucket was empty.
    ParticipantLimit,
}

/// One connection's rate-limit state: its buckets, when it last released each body (for the
/// re-bid cool-down), and whether the server has warned about it going over its limit.
#[derive(Debug, Default)]
pub(crate) struct ConnectionLimits {
    /// Every bucket but the per-body state-update ones.
    limiter: RateLimiter<Limited>,
    /// The state-update bucket of each body it sent a state of while owning it.
    state_buckets: BodyMap<TokenBucket>,
    /// When the server granted this connection's release of each body it released; an entry
    /// older than the cool-down is removed when next looked at. At most one per registered body.
    released: HashMap<BodyId, Duration>,
    /// Whether its first drop over the participant limit was logged.
    pub(crate) warned: bool,
}

impl ConnectionLimits {
    /// The server granted this connection's release of `body` at `now`.
    pub(crate) fn on_released(&mut self, body: BodyId, now: Duration) {
        self.released.insert(body, now);
    }

    /// Forgets `body` (unregistered, or respawned: a new body).
    pub(crate) fn forget(&mut self, body: BodyId) {
        self.released.remove(&body);
    }

    /// Whether this connection released `body` less than `cooldown` before `now` (a bid for it
    /// is then dropped, [`Dropped::TooSoon`]); forgets a release the cool-down has passed.
    pub(crate) fn rebid_too_soon(
        &mut self,
        body: BodyId,
        cooldown: Duration,
        now: Duration,
    ) -> bool {
        match self.released.get(&body) {
            Some(at) if now.saturating_sub(*at) < cooldown => true,
            Some(_) => {
                self.released.remove(&body);
                false
            }
            None => false,
        }
    }
}

/// Messages the entity server dropped for going over a connection's limits, per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
pub struct RateLimitedCounts {
    /// Bids (and respawns) dropped, counted per body (no answer is sent; an honest participant
    /// resends, rule 6), for whichever limit.
    pub bids: u64,
    /// Releases dropped (no answer; an honest participant resends, rule 12).
    pub releases: u64,
    /// State updates dropped (not relayed; the next one supersedes it).
    pub state_updates: u64,
    /// Of `bids` and `releases`, those dropped because their connection's `ownership_requests`
    /// bucket was empty (its body's was not).
    pub over_participant_limit: u64,
    /// Of `bids`, those dropped because the same participant had released the body less than
    /// `rebid_cooldown` before.
    pub rebids_too_soon: u64,
}

/// `bids 3, releases 0, state_updates 12 (participant limit 2, re-bids too soon 1)`: every kind
/// by name, then the drops of `bids` and `releases` for the participant limit and the
/// cool-down.
impl core::fmt::Display for RateLimitedCounts {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "bids {}, releases {}, state_updates {} (participant limit {}, re-bids too soon {})",
            self.bids,
            self.releases,
            self.state_updates,
            self.over_participant_limit,
            self.rebids_too_soon
        )
    }
}

impl RateLimitedCounts {
    /// All dropped messages.
    pub fn total(&self) -> u64 {
        self.bids + self.releases + self.state_updates
    }

    pub(crate) fn add(&mut self, kind: Limited, why: Dropped) {
        match kind {
            Limited::Bid(_) => self.bids += 1,
            Limited::Release(_) => self.releases += 1,
            Limited::StateUpdate(_) => self.state_updates += 1,
            Limited::Requests => {}
        }
        match why {
            Dropped::BodyLimit => {}
            Dropped::TooSoon => self.rebids_too_soon += 1,
            Dropped::ParticipantLimit => self.over_participant_limit += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests of `kind` passed out of `n` at `t`.
    fn admitted(
        limits: &EntityServerLimits,
        c: &mut ConnectionLimits,
        kind: Limited,
        n: usize,
        t: Duration,
    ) -> usize {
        (0..n).filter(|_| limits.admit(c, kind, t).is_ok()).count()
    }

    #[test]
    fn kinds_and_bodies_have_separate_buckets() {
        let limits = EntityServerLimits {
            bids: RateLimit::new(10, 1),
            releases: RateLimit::new(1, 1),
            state_updates: RateLimit::new(1, 2),
            ..EntityServerLimits::default()
        };
        let mut c = ConnectionLimits::default();
        let t = Duration::ZERO;
        // One bid and one release per body, and one for all unknown bodies.
        for body in [Some(BodyId(1)), Some(BodyId(2)), None] {
            assert_eq!(admitted(&limits, &mut c, Limited::Bid(body), 5, t), 1);
            assert_eq!(admitted(&limits, &mut c, Limited::Release(body), 5, t), 1);
        }
        // Two per owned body, and two for all bodies not owned.
        for body in [Some(BodyId(1)), Some(BodyId(2)), None] {
            assert_eq!(
                admitted(&limits, &mut c, Limited::StateUpdate(body), 5, t),
                2
            );
        }
        // 100 ms refills one bid at 10/s.
        let later = Duration::from_millis(100);
        assert_eq!(
            limits.admit(&mut c, Limited::Bid(Some(BodyId(1))), later),
            Ok(())
        );
        assert_eq!(
            limits.admit(&mut c, Limited::Bid(Some(BodyId(1))), later),
            Err(Dropped::BodyLimit)
        );
        let mut counts = RateLimitedCounts::default();
        counts.add(Limited::Bid(None), Dropped::BodyLimit);
        counts.add(Limited::StateUpdate(None), Dropped::BodyLimit);
        counts.add(Limited::Bid(Some(BodyId(1))), Dropped::TooSoon);
        counts.add(Limited::Release(Some(BodyId(1))), Dropped::ParticipantLimit);
        assert_eq!(counts.total(), 4);
        assert_eq!(
            counts.to_string(),
            "bids 2, releases 1, state_updates 1 (participant limit 1, re-bids too soon 1)"
        );
    }

    #[test]
    fn a_thousand_bodies_bid_at_once_pass_the_default_limits() {
        let limits = EntityServerLimits::default();
        let mut c = ConnectionLimits::default();
        let t = Duration::from_secs(3);
        // A grab of 1,000 bodies, then a resend of a tenth of them every 200 ms for a second.
        for tick in 0..64u64 {
            let now = t + Duration::from_millis(tick * 1_000 / 64);
            for body in 0..1_000 {
                let sends = match tick {
                    0 => 1,
                    _ if tick % 13 == 0 && body % 10 == 0 => 1,
                    _ => 0,
                };
                for _ in 0..sends {
                    assert_eq!(
                        limits.admit(&mut c, Limited::Bid(Some(BodyId(body))), now),
                        Ok(())
                    );
                }
            }
        }
        // A flood of 100 bids about one body in 0.99 s: the burst of 8, then 7 refilled.
        let passed = (0..100u64)
            .filter(|i| {
                let now = t + Duration::from_millis(2_000 + i * 10);
                limits
                    .admit(&mut c, Limited::Bid(Some(BodyId(5_000))), now)
                    .is_ok()
            })
            .count();
        assert_eq!(passed, 15);
    }

    /// 10,000 requests a second spread over 1,000 bodies for 10 s (5 a second per body, inside
    /// every body's bucket): the connection's bucket passes its burst of 2,048 and 256 a second
    /// after it, 4,608 in all (within one of the refill's rounding), and drops the rest as
    /// over the participant limit.
    #[test]
    fn requests_spread_over_many_bodies_are_bounded_per_participant() {
        let limits = EntityServerLimits::default();
        let mut c = ConnectionLimits::default();
        let mut passed = 0u64;
        let mut counts = RateLimitedCounts::default();
        for i in 0..100_000u64 {
            let now = Duration::from_micros(i * 100);
            // A bid and a release of each body every 0.2 s.
            let body = Some(BodyId((i / 2) % 1_000));
            let kind = if i % 2 == 0 {
                Limited::Bid(body)
            } else {
                Limited::Release(body)
            };
            match limits.admit(&mut c, kind, now) {
                Ok(()) => passed += 1,
                Err(why) => counts.add(kind, why),
            }
        }
        assert!((4_607..=4_609).contains(&passed), "{passed} passed");
        assert_eq!(counts.over_participant_limit, 100_000 - passed);
        assert_eq!(counts.bids + counts.releases, 100_000 - passed);
        // Unknown bodies do not take from the participant's bucket (they have their own).
        assert!(
            limits
                .admit(&mut c, Limited::Bid(None), Duration::from_secs(10))
                .is_ok()
        );
    }

    #[test]
    fn a_released_body_is_not_rebid_by_its_releaser_within_the_cooldown() {
        let limits = EntityServerLimits::default();
        let mut mine = ConnectionLimits::default();
        let mut other = ConnectionLimits::default();
        let body = BodyId(7);
        let at = Duration::from_secs(2);
        mine.on_released(body, at);
        let cooldown = limits.rebid_cooldown;
        assert!(mine.rebid_too_soon(body, cooldown, at));
        assert!(mine.rebid_too_soon(body, cooldown, at + Duration::from_millis(99)));
        assert!(
            !other.rebid_too_soon(body, cooldown, at),
            "others bid as ever"
        );
        assert!(
            !mine.rebid_too_soon(BodyId(8), cooldown, at),
            "other bodies"
        );
        assert!(!mine.rebid_too_soon(body, cooldown, at + cooldown));
        assert!(mine.released.is_empty(), "a passed cool-down is forgotten");
        mine.on_released(body, at);
        mine.forget(body);
        assert!(
            !mine.rebid_too_soon(body, cooldown, at),
            "a respawned body is new"
        );
        mine.on_released(body, at);
        assert!(!mine.rebid_too_soon(body, Duration::ZERO, at), "zero: off");
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
        let bad = EntityServerLimits {
            ownership_requests: RateLimit::new(0, 5),
            ..EntityServerLimits::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(OwnershipError::InvalidConfig {
                field: "limits.ownership_requests",
                ..
            })
        ));
        let bad = EntityServerLimits {
            rebid_cooldown: Duration::from_secs(11),
            ..EntityServerLimits::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(OwnershipError::InvalidConfig {
                field: "limits.rebid_cooldown",
                ..
            })
        ));
    }
}
