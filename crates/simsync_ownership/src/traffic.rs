//! [`StateTraffic`]: the state traffic of a participant or the entity server per second, per
//! body and against its budget ([rule 17](crate::rules#rule-17--byte-budgets)), measured from
//! running [`TrafficTotals`] by a pure [`TrafficMeter`].

use core::time::Duration;

use bevy::prelude::*;

/// Running totals of one App's state traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TrafficTotals {
    /// Bytes of state sent: a participant's batches to the server, or the entity server's
    /// relays to every participant.
    pub bytes_up: u64,
    /// Bytes of state received: a participant's relays, or the entity server's batches from
    /// every participant.
    pub bytes_down: u64,
    /// Body states in the bytes sent.
    pub bodies_up: u64,
    /// Bodies the budget left waiting, summed over frames.
    pub deferred_total: u64,
    /// Bodies the budget left waiting in the last frame.
    pub deferred_now: u64,
    /// The budget the sent bytes are measured against, B/s (the entity server's: its relay
    /// budget times the participants).
    pub budget_bytes_per_second: f64,
    /// Of `bodies_up`, those sent as deltas against an acknowledged state
    /// ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)).
    pub deltas_up: u64,
    /// Delta entries received that could not be applied (baseline missing or out of range).
    pub deltas_rejected: u64,
    /// Acknowledgements received that were refused (a batch never sent, or not yet).
    pub acks_rejected: u64,
}

/// A reflected resource, updated every frame (after [`OwnershipSet::Send`](crate::OwnershipSet)
/// for a participant, after the server's update for the entity server): the state traffic of the
/// last full second.
#[derive(Resource, Debug, Clone, Copy, Default, PartialEq, Reflect)]
#[reflect(Resource, Debug, Default, PartialEq, Clone)]
pub struct StateTraffic {
    /// Bytes of state sent per second (a participant's upload, the entity server's relays).
    pub bytes_up_per_second: f64,
    /// Bytes of state received per second.
    pub bytes_down_per_second: f64,
    /// Mean bytes per body state sent, over the whole run (0 before the first).
    pub bytes_per_body: f64,
    /// `bytes_up_per_second` over the budget: 1.0 is all of it.
    pub budget_use: f64,
    /// Bodies the budget left waiting in the last frame.
    pub deferred_bodies: u64,
    /// Bodies the budget left waiting, summed over frames.
    pub deferred_total: u64,
    /// Bytes of state sent so far.
    pub bytes_up_total: u64,
    /// Bytes of state received so far.
    pub bytes_down_total: u64,
    /// Body states sent as deltas against an acknowledged state so far
    /// ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)).
    pub delta_entries_total: u64,
    /// Of the body states sent so far, the share sent as deltas (0 before the first).
    pub delta_share: f64,
    /// Delta entries received that could not be applied so far (their bodies waited for a
    /// later entry).
    pub deltas_rejected_total: u64,
    /// Acknowledgements received that were refused so far.
    pub acks_rejected_total: u64,
}

/// One line, every number by name: `up 1444 B/s, down 2702 B/s, 22.0 B/body, budget 2.3 %,
/// deferred 0 now (0 total), deltas 73 % (0 refused, 0 acks refused)`.
impl core::fmt::Display for StateTraffic {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "up {:.0} B/s, down {:.0} B/s, {:.1} B/body, budget {:.1} %, deferred {} now ({} \
             total), deltas {:.0} % ({} refused, {} acks refused)",
            self.bytes_up_per_second,
            self.bytes_down_per_second,
            self.bytes_per_body,
            self.budget_use * 100.0,
            self.deferred_bodies,
            self.deferred_total,
            self.delta_share * 100.0,
            self.deltas_rejected_total,
            self.acks_rejected_total,
        )
    }
}

/// Turns [`TrafficTotals`] into [`StateTraffic`] (plain data).
#[derive(Debug, Clone, Copy)]
pub struct TrafficMeter {
    up: CounterRate,
    down: CounterRate,
    last: Option<Duration>,
}

impl Default for TrafficMeter {
    fn default() -> Self {
        Self {
            up: CounterRate::new(Duration::from_secs(1)),
            down: CounterRate::new(Duration::from_secs(1)),
            last: None,
        }
    }
}

impl TrafficMeter {
    /// Feeds `totals` at `now`; returns the traffic of the last full second.
    pub fn update(&mut self, totals: &TrafficTotals, now: Duration) -> StateTraffic {
        let dt = self.last.map_or(Duration::ZERO, |t| now.saturating_sub(t));
        self.last = Some(now);
        let up = self.up.update(totals.bytes_up, dt);
        let down = self.down.update(totals.bytes_down, dt);
        StateTraffic {
            bytes_up_per_second: up,
            bytes_down_per_second: down,
            bytes_per_body: if totals.bodies_up == 0 {
                0.0
            } else {
                totals.bytes_up as f64 / totals.bodies_up as f64
            },
            budget_use: if totals.budget_bytes_per_second > 0.0 {
                up / totals.budget_bytes_per_second
            } else {
                0.0
            },
            deferred_bodies: totals.deferred_now,
            deferred_total: totals.deferred_total,
            bytes_up_total: totals.bytes_up,
            bytes_down_total: totals.bytes_down,
            delta_entries_total: totals.deltas_up,
            delta_share: if totals.bodies_up == 0 {
                0.0
            } else {
                totals.deltas_up as f64 / totals.bodies_up as f64
            },
            deltas_rejected_total: totals.deltas_rejected,
            acks_rejected_total: totals.acks_rejected,
        }
    }
}

/// The meter of one App.
#[derive(Resource, Default)]
pub(crate) struct Meter(pub(crate) TrafficMeter);

/// The rate of a growing counter, averaged over windows of at least `window` (plain data).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CounterRate {
    window: Duration,
    last_count: Option<u64>,
    counted: u64,
    elapsed: Duration,
    rate: f64,
}

impl CounterRate {
    /// A rate averaged over `window` (at least 1 ms); 0 until the first window is full.
    pub fn new(window: Duration) -> Self {
        Self {
            window: window.max(Duration::from_millis(1)),
            last_count: None,
            counted: 0,
            elapsed: Duration::ZERO,
            rate: 0.0,
        }
    }

    /// Feeds the counter's value after `dt`; returns the rate per second of the last full
    /// window. A counter that went down (restarted) starts counting from its new value.
    pub fn update(&mut self, count: u64, dt: Duration) -> f64 {
        if let Some(last) = self.last_count {
            self.counted += count.saturating_sub(last);
            self.elapsed += dt;
        }
        self.last_count = Some(count);
        if self.elapsed >= self.window {
            self.rate = self.counted as f64 / self.elapsed.as_secs_f64();
            self.counted = 0;
            self.elapsed = Duration::ZERO;
        }
        self.rate
    }

    /// The rate of the last full window, per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_per_body_and_budget_use() {
        let mut meter = TrafficMeter::default();
        let mut totals = TrafficTotals {
            budget_bytes_per_second: 1_000.0,
            ..Default::default()
        };
        meter.update(&totals, Duration::ZERO);
        totals.bytes_up = 500;
        totals.bodies_up = 25;
        totals.bytes_down = 2_000;
        totals.deltas_up = 10;
        totals.deltas_rejected = 3;
        totals.acks_rejected = 2;
        let t = meter.update(&totals, Duration::from_secs(1));
        assert_eq!(t.delta_entries_total, 10);
        assert_eq!(t.delta_share, 0.4);
        assert_eq!(t.deltas_rejected_total, 3);
        assert_eq!(t.acks_rejected_total, 2);
        assert_eq!(t.bytes_up_per_second, 500.0);
        assert_eq!(t.bytes_down_per_second, 2_000.0);
        assert_eq!(t.bytes_per_body, 20.0);
        assert_eq!(t.budget_use, 0.5);
        assert_eq!(
            t.to_string(),
            "up 500 B/s, down 2000 B/s, 20.0 B/body, budget 50.0 %, deferred 0 now (0 total), \
             deltas 40 % (3 refused, 2 acks refused)"
        );
    }
}
