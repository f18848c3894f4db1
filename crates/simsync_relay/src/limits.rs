//! The relay's per-connection rate limits ([`RelayLimits`]): one token bucket (`simsync_net`'s
//! [`RateLimiter`]) per connection for inputs, for checksums and for control messages; a message
//! over its limit is dropped before its content is looked at and counted per player and kind
//! ([`RateLimited`]). See [rate limits](crate::rules#rate-limits).

use bevy::prelude::*;
use simsync_net::{ClientMessage, RateLimit, RateLimiter, SessionClientMessage};

use simsync_net::Tick;

/// The relay's per-connection limits, one [`RateLimit`] per kind of message a client sends
/// ([rate limits](crate::rules#rate-limits)). [`for_tick_rate`](Self::for_tick_rate) gives the
/// defaults, which an honest client never reaches:
///
/// | kind | default | an honest client sends |
/// |---|---|---|
/// | inputs, in ticks of input (the ticks a message adds, at least one) | 4 per tick (`RateLimit::per_tick(hz, 4)`), a second's worth at once | one message per tick, adding one tick |
/// | checksums | 1 per tick, ten seconds' worth at once (the default input history: a client catching up after a stall sends one per tick it verifies again) | at most one per verified tick |
/// | control (ping, pong, hello, goodbye, anything else) | [`RateLimit::CONTROL`]: 10/s, burst 20 | a ping and a pong every 250 ms |
/// | snapshot chunks | 256/s (4 MiB/s), burst 2,048 (32 MiB, the default snapshot limit) | one snapshot when asked |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub struct RelayLimits {
    /// `Inputs` messages, counted in ticks of input: a message costs the ticks it adds beyond
    /// the newest input the relay holds of the sender's slot, at least one.
    pub inputs: RateLimit,
    /// `Checksum` messages.
    pub checksums: RateLimit,
    /// Every other message: `Hello`, `Ping`, `Pong`, `Goodbye`, ownership messages.
    pub control: RateLimit,
    /// `SnapshotChunk` messages (a chunk holds at most 16 KiB).
    pub snapshot_chunks: RateLimit,
}

impl RelayLimits {
    /// Limits that never bite in practice (a million per second, bursts of a million): for
    /// tests and trusted setups.
    pub const UNLIMITED: Self = Self {
        inputs: RateLimit::new(1_000_000, 1_000_000),
        checksums: RateLimit::new(1_000_000, 1_000_000),
        control: RateLimit::new(1_000_000, 1_000_000),
        snapshot_chunks: RateLimit::new(1_000_000, 1_000_000),
    };

    /// The default limits at `tick_rate_hz` (see the table above).
    pub const fn for_tick_rate(tick_rate_hz: u16) -> Self {
        let per_tick = RateLimit::per_tick(tick_rate_hz, 1);
        Self {
            inputs: RateLimit::per_tick(tick_rate_hz, 4),
            // A client back from a stall (up to the relay's 10 s input history) verifies the
            // ticks it missed at once and reports each: that burst must pass.
            checksums: RateLimit::new(per_tick.per_second, per_tick.burst.saturating_mul(10)),
            control: RateLimit::CONTROL,
            snapshot_chunks: RateLimit::new(256, 2_048),
        }
    }

    /// One connection's buckets, full.
    pub(crate) fn limiter(&self) -> RateLimiter<Limited> {
        RateLimiter::new()
            .with_limit(Limited::Inputs, self.inputs)
            .with_limit(Limited::Checksums, self.checksums)
            .with_limit(Limited::Control, self.control)
            .with_limit(Limited::SnapshotChunks, self.snapshot_chunks)
    }
}

/// The tokens of an `Inputs` message holding `count` inputs from `first_tick` on, for a slot
/// whose newest input the relay holds is for `newest` ([rate limits](crate::rules#rate-limits)):
/// the ticks it adds beyond `newest`, at least one (a message that only repeats inputs or
/// carries an acknowledgement still costs one).
pub(crate) fn input_tick_cost(first_tick: Tick, count: usize, newest: Tick) -> u32 {
    let count = i64::try_from(count).unwrap_or(i64::MAX);
    let last = i64::from(first_tick).saturating_add(count.saturating_sub(1));
    let added = last.saturating_sub(i64::from(newest));
    u32::try_from(added.max(1)).unwrap_or(u32::MAX)
}

/// The kinds of message the relay rate-limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Limited {
    Inputs,
    Checksums,
    Control,
    SnapshotChunks,
}

impl Limited {
    /// The kind of `message`.
    pub(crate) fn of(message: &ClientMessage) -> Self {
        match message {
            ClientMessage::Session(session) => match session.message {
                SessionClientMessage::Inputs { .. } => Self::Inputs,
                SessionClientMessage::Checksum { .. } => Self::Checksums,
                SessionClientMessage::SnapshotChunk(_) => Self::SnapshotChunks,
                _ => Self::Control,
            },
            _ => Self::Control,
        }
    }
}

/// Messages of one player the relay dropped for going over its [`RelayLimits`], per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
pub struct RateLimited {
    /// `Inputs` messages dropped (their inputs are not checked nor stored; an honest client
    /// repeats unconfirmed inputs in its next message).
    pub inputs: u64,
    /// `Checksum` messages dropped (the tick is judged without that report).
    pub checksums: u64,
    /// Control messages dropped (pings, pongs, hellos, goodbyes, anything else).
    pub control: u64,
    /// Snapshot chunks dropped (a buddy's transfer then misses a chunk and is abandoned).
    pub snapshot_chunks: u64,
}

impl RateLimited {
    /// All dropped messages.
    pub fn total(&self) -> u64 {
        self.inputs + self.checksums + self.control + self.snapshot_chunks
    }

    pub(crate) fn add(&mut self, kind: Limited) {
        match kind {
            Limited::Inputs => self.inputs += 1,
            Limited::Checksums => self.checksums += 1,
            Limited::Control => self.control += 1,
            Limited::SnapshotChunks => self.snapshot_chunks += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use simsync_net::MatchId;

    #[test]
    fn each_kind_has_its_own_bucket_and_honest_rates_pass() {
        let limits = RelayLimits::for_tick_rate(64);
        let mut limiter = limits.limiter();
        let mut dropped = RateLimited::default();
        // One input message, one checksum per 64 Hz update and a ping and a pong every 250 ms,
        // for ten seconds: nothing is dropped.
        for frame in 0..640u64 {
            let now = Duration::from_micros(frame * 15_625);
            let mut kinds = vec![Limited::Inputs, Limited::Checksums];
            if frame % 16 == 0 {
                kinds.extend([Limited::Control, Limited::Control]);
            }
            for kind in kinds {
                if !limiter.try_take(kind, now) {
                    dropped.add(kind);
                }
            }
        }
        assert_eq!(dropped, RateLimited::default());
        // A flood in one instant: each kind stops at its own burst.
        let now = Duration::from_secs(20);
        for kind in [Limited::Inputs, Limited::Checksums, Limited::Control] {
            for _ in 0..1_000 {
                if !limiter.try_take(kind, now) {
                    dropped.add(kind);
                }
            }
        }
        assert_eq!(
            dropped,
            RateLimited {
                inputs: 1_000 - 256,
                checksums: 1_000 - 640,
                control: 1_000 - 20,
                snapshot_chunks: 0,
            }
        );
        assert_eq!(dropped.total(), 744 + 360 + 980);
    }

    #[test]
    fn an_input_message_costs_the_ticks_it_adds_and_at_least_one() {
        // Newest held 100: ticks 98..=101 add one; 99..=110 add ten.
        assert_eq!(input_tick_cost(98, 4, 100), 1);
        assert_eq!(input_tick_cost(99, 12, 100), 10);
        // Repeats only, or an acknowledgement without inputs: one.
        assert_eq!(input_tick_cost(90, 5, 100), 1);
        assert_eq!(input_tick_cost(101, 0, 100), 1);
        // Far ahead (a hostile client): its whole span, saturating.
        assert_eq!(input_tick_cost(5_100, 4, 100), 5_003);
        assert_eq!(input_tick_cost(Tick::MAX, usize::MAX, Tick::MIN), u32::MAX);
    }

    #[test]
    fn an_honest_client_at_1000_frames_per_second_is_never_limited() {
        // 64 Hz, one message per tick adding one tick (whatever the frame rate), for ten
        // seconds, plus the 64-tick snap lead control may make once: nothing refused.
        let mut limiter = RelayLimits::for_tick_rate(64).limiter();
        let mut refused = 0;
        for tick in 1..=640i32 {
            let now = Duration::from_micros(tick as u64 * 15_625);
            let cost = if tick == 320 { 64 } else { 1 };
            if !limiter.try_take_n(Limited::Inputs, cost, now) {
                refused += 1;
            }
        }
        assert_eq!(refused, 0);
        // The same second's worth sent as one message per 1 ms frame is what the limit stops.
        let mut per_frame = RelayLimits::for_tick_rate(64).limiter();
        let refused = (0..10_000u64)
            .filter(|ms| !per_frame.try_take(Limited::Inputs, Duration::from_millis(*ms)))
            .count();
        assert!(refused > 7_000, "{refused}");
    }

    #[test]
    fn messages_are_sorted_by_kind() {
        let inputs = ClientMessage::session(
            MatchId::FIRST,
            SessionClientMessage::Inputs {
                first_tick: 1,
                inputs: vec![],
                ack_tick: 0,
            },
        );
        let checksum = ClientMessage::session(
            MatchId::FIRST,
            SessionClientMessage::Checksum {
                tick: 1,
                checksum: 2,
            },
        );
        assert_eq!(Limited::of(&inputs), Limited::Inputs);
        assert_eq!(Limited::of(&checksum), Limited::Checksums);
        assert_eq!(Limited::of(&ClientMessage::Goodbye), Limited::Control);
        assert_eq!(Limited::of(&ClientMessage::Ping { t: 3 }), Limited::Control);
    }

    #[test]
    fn an_honest_client_back_from_a_stall_of_the_whole_history_reports_every_tick() {
        let mut limiter = RelayLimits::for_tick_rate(64).limiter();
        let mut dropped = 0;
        // Ten seconds of ticks verified again at once, one checksum each.
        for _ in 0..640 {
            if !limiter.try_take(Limited::Checksums, Duration::from_secs(30)) {
                dropped += 1;
            }
        }
        assert_eq!(dropped, 0);
        assert!(!limiter.try_take(Limited::Checksums, Duration::from_secs(30)));
    }
}
