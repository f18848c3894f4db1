//! Rate limits per connection ([wire rule 8](crate::rules)): [`RateLimit`], [`TokenBucket`] and
//! [`RateLimiter`], plain state on a caller-given clock.

use std::collections::BTreeMap;
use std::time::Duration;

/// Nano-tokens per token: the bucket counts in billionths of a message, so refills over any
/// elapsed time are exact.
const NANO: u128 = 1_000_000_000;

/// How many messages of one kind a connection may send: `per_second` on average, up to `burst`
/// at once ([wire rule 8](crate::rules)).
///
/// Intended defaults (what a server should start from; honest peers stay well below them):
///
/// | server | kind | limit |
/// |---|---|---|
/// | relay | inputs, in ticks of input ([`TokenBucket::try_take_n`]) | [`per_tick`](Self::per_tick)`(tick_rate_hz, 4)`: four ticks of input a tick, a second's worth at once |
/// | relay | checksums | `tick_rate_hz` per second, two seconds' worth at once |
/// | relay, entity server | control (handshake, goodbye, anything else) | [`CONTROL`](Self::CONTROL): 10/s, burst 20 |
/// | entity server | bids, and releases (each) | [`OWNERSHIP_REQUESTS`](Self::OWNERSHIP_REQUESTS): 30/s, burst 60 |
/// | entity server | state updates | `per_tick(tick_rate_hz, 2 × bodies the peer may own)` |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, bevy::reflect::Reflect)]
pub struct RateLimit {
    /// Tokens added per second (messages per second on average). 0: the bucket never refills.
    pub per_second: u32,
    /// Most tokens the bucket holds (messages at once); a new bucket starts full. 0: nothing
    /// ever passes.
    pub burst: u32,
}

impl RateLimit {
    /// Control messages: 10 per second, 20 at once.
    pub const CONTROL: RateLimit = RateLimit::new(10, 20);
    /// Ownership bids, or releases: 30 per second, 60 at once.
    pub const OWNERSHIP_REQUESTS: RateLimit = RateLimit::new(30, 60);

    /// A limit of `per_second` messages per second on average and `burst` at once.
    pub const fn new(per_second: u32, burst: u32) -> Self {
        Self { per_second, burst }
    }

    /// `per_tick` messages per tick at `tick_rate_hz`, with one second's worth as burst
    /// (saturating at `u32::MAX`).
    pub const fn per_tick(tick_rate_hz: u16, per_tick: u32) -> Self {
        let per_second = (tick_rate_hz as u32).saturating_mul(per_tick);
        Self::new(per_second, per_second)
    }
}

/// A token bucket ([wire rule 8](crate::rules)): holds up to `burst` tokens, gains `per_second`
/// tokens per second (fractions kept), and lets a message pass when it can take a whole token.
///
/// Time is whatever the caller passes as `now` (time since any fixed start: a server's elapsed
/// time, a simulated clock). The first call sets the start; a `now` earlier than the latest
/// seen adds nothing (a clock going backwards never refills a bucket twice for the same time);
/// a long idle fills it to `burst`, never more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    limit: RateLimit,
    nano_tokens: u128,
    last: Option<Duration>,
    taken: u64,
    rejected: u64,
}

impl TokenBucket {
    /// A full bucket for `limit`.
    pub fn new(limit: RateLimit) -> Self {
        Self {
            limit,
            nano_tokens: u128::from(limit.burst) * NANO,
            last: None,
            taken: 0,
            rejected: 0,
        }
    }

    /// Takes one token at time `now` if there is one: `true` (the message passes) or `false`
    /// (it is over the limit; counted in [`rejected`](Self::rejected)).
    pub fn try_take(&mut self, now: Duration) -> bool {
        self.try_take_n(1, now)
    }

    /// Takes `cost` tokens at time `now` if the bucket holds them all: `true` (the message
    /// passes, counted once in [`taken`](Self::taken)) or `false` (nothing is taken; counted
    /// once in [`rejected`](Self::rejected)). A message that counts in units other than one
    /// (the relay's inputs count ticks of input) costs its units; a cost above `burst` never
    /// passes. `cost = 0` passes without taking anything.
    pub fn try_take_n(&mut self, cost: u32, now: Duration) -> bool {
        self.refill(now);
        let needed = u128::from(cost) * NANO;
        if self.nano_tokens >= needed {
            self.nano_tokens -= needed;
            self.taken += 1;
            true
        } else {
            self.rejected += 1;
            false
        }
    }

    fn refill(&mut self, now: Duration) {
        let elapsed = self
            .last
            .map_or(Duration::ZERO, |last| now.saturating_sub(last));
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
        let capacity = u128::from(self.limit.burst) * NANO;
        let gained = elapsed
            .as_nanos()
            .saturating_mul(u128::from(self.limit.per_second));
        self.nano_tokens = self.nano_tokens.saturating_add(gained).min(capacity);
    }

    /// Whole tokens left as of the last call (messages that would pass now, before refilling).
    pub fn tokens(&self) -> u32 {
        u32::try_from(self.nano_tokens / NANO).unwrap_or(u32::MAX)
    }

    /// The limit.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Messages that passed.
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// Messages refused as over the limit.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}

/// The rate limits of one connection: one [`TokenBucket`] per kind of message `K` (an enum of
/// the server's), with the refusals counted per kind ([wire rule 8](crate::rules)). A kind
/// without a limit always passes.
///
/// ```
/// use std::time::Duration;
/// use simsync_net::{RateLimit, RateLimiter};
///
/// #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
/// enum Kind { Bid, Release }
///
/// let mut limits = RateLimiter::new().with_limit(Kind::Bid, RateLimit::new(1, 2));
/// let now = Duration::from_secs(5);
/// assert!(limits.try_take(Kind::Bid, now));
/// assert!(limits.try_take(Kind::Bid, now));
/// assert!(!limits.try_take(Kind::Bid, now));
/// assert!(limits.try_take(Kind::Release, now)); // no limit
/// assert_eq!(limits.rejected(Kind::Bid), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimiter<K: Ord> {
    buckets: BTreeMap<K, TokenBucket>,
}

impl<K: Ord> Default for RateLimiter<K> {
    fn default() -> Self {
        Self {
            buckets: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Copy> RateLimiter<K> {
    /// A limiter with no limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Limits `kind` with a full bucket.
    #[must_use]
    pub fn with_limit(mut self, kind: K, limit: RateLimit) -> Self {
        self.set_limit(kind, limit);
        self
    }

    /// Limits `kind` with a full bucket (its counters start again).
    pub fn set_limit(&mut self, kind: K, limit: RateLimit) {
        self.buckets.insert(kind, TokenBucket::new(limit));
    }

    /// Whether a message of `kind` at time `now` passes (see [`TokenBucket::try_take`]).
    pub fn try_take(&mut self, kind: K, now: Duration) -> bool {
        self.buckets
            .get_mut(&kind)
            .is_none_or(|bucket| bucket.try_take(now))
    }

    /// Whether a message of `kind` at time `now` passes, `kind` limited by `limit` with a full
    /// bucket if it had no limit yet (one look-up: what [`set_limit`](Self::set_limit) for a
    /// kind without a bucket, then [`try_take`](Self::try_take) does).
    pub fn try_take_or_limit(&mut self, kind: K, limit: RateLimit, now: Duration) -> bool {
        self.buckets
            .entry(kind)
            .or_insert_with(|| TokenBucket::new(limit))
            .try_take(now)
    }

    /// Whether a message of `kind` costing `cost` tokens at time `now` passes (see
    /// [`TokenBucket::try_take_n`]).
    pub fn try_take_n(&mut self, kind: K, cost: u32, now: Duration) -> bool {
        self.buckets
            .get_mut(&kind)
            .is_none_or(|bucket| bucket.try_take_n(cost, now))
    }

    /// The bucket of `kind`, if it is limited.
    pub fn bucket(&self, kind: K) -> Option<&TokenBucket> {
        self.buckets.get(&kind)
    }

    /// Messages of `kind` refused as over the limit.
    pub fn rejected(&self, kind: K) -> u64 {
        self.bucket(kind).map_or(0, TokenBucket::rejected)
    }

    /// Messages refused, of every kind.
    pub fn rejected_total(&self) -> u64 {
        self.buckets.values().map(TokenBucket::rejected).sum()
    }

    /// The refusals per limited kind, in kind order.
    pub fn rejections(&self) -> impl Iterator<Item = (K, u64)> + '_ {
        self.buckets
            .iter()
            .map(|(kind, bucket)| (*kind, bucket.rejected()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_take_or_limit_limits_a_new_kind_and_keeps_an_existing_limit() {
        let mut limiter: RateLimiter<u8> = RateLimiter::new().with_limit(1, RateLimit::new(1, 1));
        let two = RateLimit::new(1, 2);
        // Kind 0 had no limit: it gets a full bucket of 2.
        assert!(limiter.try_take_or_limit(0, two, ms(0)));
        assert!(limiter.try_take_or_limit(0, two, ms(0)));
        assert!(!limiter.try_take_or_limit(0, two, ms(0)));
        assert_eq!(limiter.bucket(0).map(TokenBucket::limit), Some(two));
        // Kind 1 keeps its own limit (burst 1), not the one passed.
        assert!(limiter.try_take_or_limit(1, two, ms(0)));
        assert!(!limiter.try_take_or_limit(1, two, ms(0)));
        assert_eq!(limiter.rejected(0), 1);
        assert_eq!(limiter.rejected(1), 1);
    }

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn passes(bucket: &mut TokenBucket, now: Duration, tries: usize) -> usize {
        (0..tries).filter(|_| bucket.try_take(now)).count()
    }

    #[test]
    fn a_new_bucket_lets_a_burst_through_then_refuses() {
        let mut bucket = TokenBucket::new(RateLimit::new(10, 5));
        assert_eq!(passes(&mut bucket, ms(1_000), 8), 5);
        assert_eq!((bucket.taken(), bucket.rejected()), (5, 3));
        assert_eq!(bucket.tokens(), 0);
    }

    #[test]
    fn tokens_refill_at_the_rate_keeping_fractions() {
        let mut bucket = TokenBucket::new(RateLimit::new(10, 5));
        assert_eq!(passes(&mut bucket, ms(0), 5), 5);
        // 10 per second: one token per 100 ms; 50 ms twice make one.
        assert!(!bucket.try_take(ms(50)));
        assert!(bucket.try_take(ms(100)));
        assert!(!bucket.try_take(ms(150)));
        assert!(bucket.try_take(ms(200)));
        // 1 s: ten more, but the bucket holds five.
        assert_eq!(passes(&mut bucket, ms(1_200), 10), 5);
    }

    #[test]
    fn a_long_idle_fills_to_the_burst_without_overflow() {
        let mut bucket = TokenBucket::new(RateLimit::new(u32::MAX, 3));
        assert_eq!(passes(&mut bucket, Duration::ZERO, 3), 3);
        assert_eq!(passes(&mut bucket, Duration::MAX, 10), 3);
        let mut slow = TokenBucket::new(RateLimit::new(1, 2));
        assert_eq!(passes(&mut slow, ms(0), 2), 2);
        assert_eq!(passes(&mut slow, Duration::from_secs(86_400 * 365), 5), 2);
    }

    #[test]
    fn a_clock_going_backwards_adds_nothing() {
        let mut bucket = TokenBucket::new(RateLimit::new(10, 1));
        assert!(bucket.try_take(ms(10_000)));
        // Back 5 s, then forward again to where it was: no token for time already counted.
        assert!(!bucket.try_take(ms(5_000)));
        assert!(!bucket.try_take(ms(10_000)));
        assert!(!bucket.try_take(ms(10_050)));
        assert!(bucket.try_take(ms(10_100)));
    }

    #[test]
    fn a_zero_rate_allows_only_the_burst_and_a_zero_burst_nothing() {
        let mut once = TokenBucket::new(RateLimit::new(0, 2));
        assert_eq!(passes(&mut once, ms(0), 3), 2);
        assert_eq!(passes(&mut once, Duration::from_secs(3_600), 3), 0);
        let mut never = TokenBucket::new(RateLimit::new(100, 0));
        assert_eq!(passes(&mut never, ms(0), 3), 0);
        assert_eq!(passes(&mut never, Duration::from_secs(60), 3), 0);
        assert_eq!(never.rejected(), 6);
    }

    #[test]
    fn a_weighted_take_needs_all_its_tokens_or_takes_none() {
        let mut bucket = TokenBucket::new(RateLimit::new(10, 8));
        assert!(bucket.try_take_n(5, ms(0)));
        assert_eq!(bucket.tokens(), 3);
        // Four do not fit in three: nothing is taken, one refusal counted.
        assert!(!bucket.try_take_n(4, ms(0)));
        assert_eq!((bucket.tokens(), bucket.rejected()), (3, 1));
        assert!(bucket.try_take_n(3, ms(0)));
        // A cost above the burst never passes, however long the wait.
        assert!(!bucket.try_take_n(9, Duration::from_secs(60)));
        assert_eq!(bucket.tokens(), 8);
        assert!(bucket.try_take_n(0, Duration::from_secs(60)));
        assert_eq!(
            (bucket.taken(), bucket.rejected(), bucket.tokens()),
            (3, 2, 8)
        );
    }

    #[test]
    fn per_tick_limits_scale_with_the_tick_rate() {
        assert_eq!(RateLimit::per_tick(60, 2), RateLimit::new(120, 120));
        assert_eq!(
            RateLimit::per_tick(u16::MAX, u32::MAX),
            RateLimit::new(u32::MAX, u32::MAX)
        );
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    enum Kind {
        Inputs,
        Checksums,
        Control,
    }

    #[test]
    fn a_limiter_counts_refusals_per_kind() {
        let mut limits = RateLimiter::new()
            .with_limit(Kind::Inputs, RateLimit::new(100, 3))
            .with_limit(Kind::Checksums, RateLimit::new(1, 1));
        for _ in 0..5 {
            limits.try_take(Kind::Inputs, ms(0));
            limits.try_take(Kind::Checksums, ms(0));
            assert!(limits.try_take(Kind::Control, ms(0)));
        }
        assert_eq!(limits.rejected(Kind::Inputs), 2);
        assert_eq!(limits.rejected(Kind::Checksums), 4);
        assert_eq!(limits.rejected(Kind::Control), 0);
        assert_eq!(limits.rejected_total(), 6);
        assert_eq!(
            limits.rejections().collect::<Vec<_>>(),
            [(Kind::Inputs, 2), (Kind::Checksums, 4)]
        );
        assert_eq!(limits.bucket(Kind::Inputs).map(TokenBucket::taken), Some(3));
        limits.set_limit(Kind::Checksums, RateLimit::CONTROL);
        assert_eq!(limits.rejected(Kind::Checksums), 0);
    }
}
