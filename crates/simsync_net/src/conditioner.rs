//! The seeded link conditioner ([`LinkConditioner`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use crate::error::NetError;
use crate::rng::SplitMix64;

/// Packets a [`LinkConditioner`] holds at most; more are dropped and counted in
/// [`LinkStats::overflowed`], so a receiver that never polls cannot grow memory without bound.
pub const MAX_IN_FLIGHT: usize = 65_536;

/// Settings of one direction of a simulated link. The default is a perfect link: no latency, no
/// loss.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkConditionerConfig {
    /// One-way delay, in ms.
    pub latency_ms: u32,
    /// Each packet's delay varies uniformly by up to ± this, in ms (clamped so it never arrives
    /// before it was sent).
    pub jitter_ms: u32,
    /// Chance that a packet is dropped, in percent (0..=100).
    pub loss_percent: f64,
    /// Chance that a packet that is not dropped arrives twice, in percent (0..=100).
    pub duplicate_percent: f64,
    /// Chance that a packet is held back by `reorder_delay_ms`, in percent (0..=100).
    pub reorder_percent: f64,
    /// Extra delay of a held-back packet, in ms.
    pub reorder_delay_ms: u32,
}

impl LinkConditionerConfig {
    /// A perfect link: everything delivered at once, exactly once, in order.
    pub const PERFECT: LinkConditionerConfig = LinkConditionerConfig {
        latency_ms: 0,
        jitter_ms: 0,
        loss_percent: 0.0,
        duplicate_percent: 0.0,
        reorder_percent: 0.0,
        reorder_delay_ms: 0,
    };

    /// Sets the latency and jitter, in ms.
    #[must_use]
    pub const fn with_latency(mut self, latency_ms: u32, jitter_ms: u32) -> Self {
        self.latency_ms = latency_ms;
        self.jitter_ms = jitter_ms;
        self
    }

    /// Sets the loss, in percent.
    #[must_use]
    pub const fn with_loss(mut self, loss_percent: f64) -> Self {
        self.loss_percent = loss_percent;
        self
    }

    /// Sets the duplication, in percent.
    #[must_use]
    pub const fn with_duplication(mut self, duplicate_percent: f64) -> Self {
        self.duplicate_percent = duplicate_percent;
        self
    }

    /// Sets the reordering: chance in percent and extra delay in ms.
    #[must_use]
    pub const fn with_reordering(mut self, reorder_percent: f64, reorder_delay_ms: u32) -> Self {
        self.reorder_percent = reorder_percent;
        self.reorder_delay_ms = reorder_delay_ms;
        self
    }

    /// Checks the percentages.
    ///
    /// # Errors
    ///
    /// [`NetError::InvalidLinkConfig`] naming the first percentage that is not finite or not in
    /// 0..=100.
    pub fn validate(&self) -> Result<(), NetError> {
        for (field, value) in [
            ("loss_percent", self.loss_percent),
            ("duplicate_percent", self.duplicate_percent),
            ("reorder_percent", self.reorder_percent),
        ] {
            if !value.is_finite() || !(0.0..=100.0).contains(&value) {
                return Err(NetError::InvalidLinkConfig { field, value });
            }
        }
        Ok(())
    }
}

/// Counters of one [`LinkConditioner`], in packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LinkStats {
    /// Packets handed to [`LinkConditioner::send`].
    pub sent: u64,
    /// Packets dropped by the loss setting.
    pub dropped: u64,
    /// Packets sent twice.
    pub duplicated: u64,
    /// Packets held back by the reordering setting.
    pub reordered: u64,
    /// Packets dropped because [`MAX_IN_FLIGHT`] were already in flight.
    pub overflowed: u64,
    /// Copies handed out by [`LinkConditioner::deliver_due`].
    pub delivered: u64,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    deliver_at: Duration,
    order: u64,
    payload: Vec<u8>,
}

/// One direction of a simulated network link: packets go in with [`send`](Self::send) and come
/// out of [`deliver_due`](Self::deliver_due) when their time has come, with latency, jitter,
/// loss, duplication and reordering set by a [`LinkConditionerConfig`]
/// ([wire rule 6](crate::rules)).
///
/// Time is whatever the caller passes in (`now`), never the wall clock, and every random choice
/// comes from a [`SplitMix64`] generator seeded by the caller, so the same seed, packets and
/// times always give the same deliveries.
///
/// Per packet, in this order, the conditioner draws exactly five numbers (so changing one
/// percentage does not shift the random choices of the others):
/// 1. loss: dropped with probability `loss_percent / 100`;
/// 2. duplication: if not dropped, sent twice with probability `duplicate_percent / 100`;
/// 3. reordering: with probability `reorder_percent / 100` the packet (not its duplicate) is
///    held `reorder_delay_ms` longer, so packets sent after it overtake it;
/// 4. and 5. jitter of the packet and of its duplicate: each copy is delivered
///    `latency_ms + uniform(−jitter_ms, +jitter_ms)` after `now` (never before `now`), rounded
///    to whole microseconds.
///
/// Packets due at the same time come out in the order they were sent.
#[derive(Debug)]
pub struct LinkConditioner {
    config: LinkConditionerConfig,
    rng: SplitMix64,
    queue: BinaryHeap<Reverse<InFlight>>,
    next_order: u64,
    stats: LinkStats,
}

impl LinkConditioner {
    /// A conditioner with `config`, its random choices seeded by `seed`.
    ///
    /// # Errors
    ///
    /// [`NetError::InvalidLinkConfig`] if the config does not
    /// [validate](LinkConditionerConfig::validate).
    pub fn new(config: LinkConditionerConfig, seed: u64) -> Result<Self, NetError> {
        config.validate()?;
        Ok(Self {
            config,
            rng: SplitMix64::new(seed),
            queue: BinaryHeap::new(),
            next_order: 0,
            stats: LinkStats::default(),
        })
    }

    /// The settings in use.
    pub fn config(&self) -> LinkConditionerConfig {
        self.config
    }

    /// Changes the settings for packets sent from now on (packets in flight keep their times).
    ///
    /// # Errors
    ///
    /// [`NetError::InvalidLinkConfig`] if the config does not validate; the old one stays.
    pub fn set_config(&mut self, config: LinkConditionerConfig) -> Result<(), NetError> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// Sends `packet` at time `now` (the sender's clock, since an arbitrary origin shared with
    /// the receiver).
    pub fn send(&mut self, now: Duration, packet: Vec<u8>) {
        self.stats.sent += 1;
        let lost = self.rng.next_f64() * 100.0 < self.config.loss_percent;
        let duplicate = self.rng.next_f64() * 100.0 < self.config.duplicate_percent;
        let reorder = self.rng.next_f64() * 100.0 < self.config.reorder_percent;
        let jitter_first = self.rng.next_f64();
        let jitter_second = self.rng.next_f64();
        if lost {
            self.stats.dropped += 1;
            return;
        }
        let extra = if reorder {
            self.stats.reordered += 1;
            Duration::from_millis(u64::from(self.config.reorder_delay_ms))
        } else {
            Duration::ZERO
        };
        if duplicate {
            self.stats.duplicated += 1;
            let copy = packet.clone();
            self.enqueue(now + self.delay(jitter_first) + extra, packet);
            self.enqueue(now + self.delay(jitter_second), copy);
        } else {
            self.enqueue(now + self.delay(jitter_first) + extra, packet);
        }
    }

    fn delay(&self, unit: f64) -> Duration {
        let latency_us = i64::from(self.config.latency_ms) * 1000;
        let jitter_us = i64::from(self.config.jitter_ms) * 1000;
        let offset = ((unit * 2.0 - 1.0) * jitter_us as f64).round() as i64;
        Duration::from_micros((latency_us + offset).max(0) as u64)
    }

    fn enqueue(&mut self, deliver_at: Duration, payload: Vec<u8>) {
        if self.queue.len() >= MAX_IN_FLIGHT {
            self.stats.overflowed += 1;
            return;
        }
        let order = self.next_order;
        self.next_order += 1;
        self.queue.push(Reverse(InFlight {
            deliver_at,
            order,
            payload,
        }));
    }

    /// Takes out every packet due at or before `now` (the receiver's clock), earliest first;
    /// ties in send order.
    pub fn deliver_due(&mut self, now: Duration) -> Vec<Vec<u8>> {
        let mut due = Vec::new();
        while let Some(Reverse(next)) = self.queue.peek() {
            if next.deliver_at > now {
                break;
            }
            if let Some(Reverse(packet)) = self.queue.pop() {
                due.push(packet.payload);
            }
        }
        self.stats.delivered += due.len() as u64;
        due
    }

    /// When the next packet is due, if any is in flight.
    pub fn next_delivery(&self) -> Option<Duration> {
        self.queue.peek().map(|Reverse(packet)| packet.deliver_at)
    }

    /// Packets (copies) in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Drops every packet in flight (e.g. when the link is closed).
    pub fn clear(&mut self) {
        self.queue.clear();
    }

    /// The counters so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    #[test]
    fn latency_is_exact_with_zero_jitter() {
        let config = LinkConditionerConfig::PERFECT.with_latency(75, 0);
        let mut link = LinkConditioner::new(config, 1).unwrap();
        link.send(ms(10), vec![1]);
        link.send(ms(20), vec![2]);
        assert_eq!(link.next_delivery(), Some(ms(85)));
        assert!(
            link.deliver_due(ms(85) - Duration::from_nanos(1))
                .is_empty()
        );
        assert_eq!(link.deliver_due(ms(85)), vec![vec![1]]);
        assert!(link.deliver_due(ms(94)).is_empty());
        assert_eq!(link.deliver_due(ms(95)), vec![vec![2]]);
        assert_eq!(link.in_flight(), 0);
    }

    #[test]
    fn perfect_link_delivers_immediately_in_order() {
        let mut link = LinkConditioner::new(LinkConditionerConfig::PERFECT, 9).unwrap();
        for i in 0..100u8 {
            link.send(ms(5), vec![i]);
        }
        let got = link.deliver_due(ms(5));
        assert_eq!(got, (0..100u8).map(|i| vec![i]).collect::<Vec<_>>());
    }

    #[test]
    fn full_loss_drops_everything() {
        let mut link =
            LinkConditioner::new(LinkConditionerConfig::PERFECT.with_loss(100.0), 3).unwrap();
        for i in 0..1000u32 {
            link.send(ms(u64::from(i)), i.to_le_bytes().to_vec());
        }
        assert!(link.deliver_due(ms(1_000_000)).is_empty());
        assert_eq!(link.stats().dropped, 1000);
        assert_eq!(link.stats().delivered, 0);
    }

    #[test]
    fn full_duplication_doubles_everything() {
        let config = LinkConditionerConfig::PERFECT.with_duplication(100.0);
        let mut link = LinkConditioner::new(config, 4).unwrap();
        for i in 0..500u32 {
            link.send(ms(0), i.to_le_bytes().to_vec());
        }
        let got = link.deliver_due(ms(0));
        assert_eq!(got.len(), 1000);
        for i in 0..500u32 {
            let bytes = i.to_le_bytes().to_vec();
            assert_eq!(got.iter().filter(|p| **p == bytes).count(), 2);
        }
        assert_eq!(link.stats().duplicated, 500);
    }

    #[test]
    fn jitter_stays_within_bounds_and_reorders() {
        let config = LinkConditionerConfig::PERFECT.with_latency(75, 15);
        let mut link = LinkConditioner::new(config, 5).unwrap();
        let mut deliveries = Vec::new();
        for step in 0..2000u64 {
            let now = Duration::from_micros(step * 1000);
            link.send(now, step.to_le_bytes().to_vec());
            for packet in link.deliver_due(now) {
                let sent = u64::from_le_bytes(packet.try_into().unwrap());
                deliveries.push((sent, step));
            }
        }
        assert!(deliveries.len() > 1900);
        for &(sent, received) in &deliveries {
            let delay = received - sent;
            assert!((60..=90).contains(&delay), "delay {delay} ms");
        }
        let out_of_order = deliveries.windows(2).filter(|w| w[1].0 < w[0].0).count();
        assert!(out_of_order > 100, "{out_of_order}");
    }

    #[test]
    fn reordering_holds_packets_back() {
        let config = LinkConditionerConfig::PERFECT
            .with_latency(10, 0)
            .with_reordering(100.0, 40);
        let mut link = LinkConditioner::new(config, 6).unwrap();
        link.send(ms(0), vec![1]);
        assert!(link.deliver_due(ms(49)).is_empty());
        assert_eq!(link.deliver_due(ms(50)), vec![vec![1]]);
        assert_eq!(link.stats().reordered, 1);
    }

    #[test]
    fn loss_rate_matches_and_same_seed_is_identical() {
        let config = LinkConditionerConfig::PERFECT
            .with_latency(75, 15)
            .with_loss(10.0)
            .with_duplication(5.0)
            .with_reordering(10.0, 30);
        let run = |seed| {
            let mut link = LinkConditioner::new(config, seed).unwrap();
            let mut out = Vec::new();
            for step in 0..10_000u64 {
                let now = Duration::from_micros(step * 15_625);
                link.send(now, step.to_le_bytes().to_vec());
                out.extend(link.deliver_due(now));
            }
            (out, link.stats())
        };
        let (a, stats) = run(77);
        let (b, _) = run(77);
        let (c, _) = run(78);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let loss = stats.dropped as f64 / stats.sent as f64;
        assert!((0.09..0.11).contains(&loss), "loss {loss}");
        let duplicated = stats.duplicated as f64 / (stats.sent - stats.dropped) as f64;
        assert!(
            (0.04..0.06).contains(&duplicated),
            "duplication {duplicated}"
        );
    }

    #[test]
    fn invalid_percentages_are_rejected() {
        for config in [
            LinkConditionerConfig::PERFECT.with_loss(-1.0),
            LinkConditionerConfig::PERFECT.with_duplication(100.5),
            LinkConditionerConfig::PERFECT.with_reordering(f64::NAN, 10),
        ] {
            assert!(matches!(
                LinkConditioner::new(config, 0),
                Err(NetError::InvalidLinkConfig { .. })
            ));
        }
        let mut link = LinkConditioner::new(LinkConditionerConfig::PERFECT, 0).unwrap();
        assert!(
            link.set_config(LinkConditionerConfig::PERFECT.with_loss(200.0))
                .is_err()
        );
        assert_eq!(link.config(), LinkConditionerConfig::PERFECT);
    }
}
