//! Round-trip time and clock-synchronisation helpers, all pure (no clock of their own: the caller
//! passes times in).
//!
//! - [`RttEstimator`]: smoothed RTT and jitter from ping/pong samples (EWMA, as TCP's RFC 6298).
//! - [`input_delay_ticks`]: how many ticks a client delays its own input, from the RTT.
//! - [`target_lead_ticks`]: how far ahead of the server a client's tick should run.
//! - [`speed_factor`] / [`LeadControl`]: how fast to run the local clock to reach that lead, or
//!   when to snap.
//! - [`estimated_server_tick`]: where the server clock is now, from its last report.
//!
//! Units: times in milliseconds (`f64`), rates in ticks per second (Hz), leads in ticks (`f64`,
//! fractional).

use std::time::Duration;

/// RTT samples above this (ms) are ignored by [`RttEstimator`] as stale or corrupt.
pub const MAX_RTT_SAMPLE_MS: f64 = 10_000.0;
/// Weight of a new sample in the smoothed RTT (1/8, RFC 6298's α).
pub const RTT_ALPHA: f64 = 0.125;
/// Weight of a new deviation in the jitter estimate (1/4, RFC 6298's β).
pub const RTT_BETA: f64 = 0.25;

/// A clock time in ms as a wrapping `u32`, the format of ping/pong timestamps
/// (`ClientMessage::Ping { t }`); wraps every 49.7 days, which [`RttEstimator::on_pong`]
/// handles.
pub fn millis_u32(time: Duration) -> u32 {
    (time.as_millis() & u128::from(u32::MAX)) as u32
}

/// Smoothed round-trip time and jitter, in ms.
///
/// The first sample `r` sets RTT to `r` and jitter to `r / 2`; each later sample updates
/// `jitter = (1 − β)·jitter + β·|rtt − r|`, then `rtt = (1 − α)·rtt + α·r`, with
/// [`RTT_ALPHA`] = 1/8 and [`RTT_BETA`] = 1/4. Samples that are negative, not finite or above
/// [`MAX_RTT_SAMPLE_MS`] are ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RttEstimator {
    rtt_ms: Option<f64>,
    jitter_ms: f64,
    samples: u64,
}

impl RttEstimator {
    /// An estimator without samples.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one RTT sample, in ms. Returns whether it was used (see the type docs for the
    /// samples that are ignored).
    pub fn add_sample(&mut self, rtt_ms: f64) -> bool {
        if !rtt_ms.is_finite() || !(0.0..=MAX_RTT_SAMPLE_MS).contains(&rtt_ms) {
            return false;
        }
        match self.rtt_ms {
            None => {
                self.rtt_ms = Some(rtt_ms);
                self.jitter_ms = rtt_ms / 2.0;
            }
            Some(srtt) => {
                self.jitter_ms =
                    (1.0 - RTT_BETA) * self.jitter_ms + RTT_BETA * (srtt - rtt_ms).abs();
                self.rtt_ms = Some((1.0 - RTT_ALPHA) * srtt + RTT_ALPHA * rtt_ms);
            }
        }
        self.samples += 1;
        true
    }

    /// Adds the sample of a pong: `sent_ms` is the `t` the ping carried, `now_ms` the local
    /// clock at the pong's arrival, both wrapping `u32` ms ([`millis_u32`]). Returns the sample
    /// in ms if it was used; a pong "from the future" wraps to a huge value and is ignored.
    pub fn on_pong(&mut self, sent_ms: u32, now_ms: u32) -> Option<f64> {
        let sample = f64::from(now_ms.wrapping_sub(sent_ms));
        self.add_sample(sample).then_some(sample)
    }

    /// Smoothed RTT in ms, or `None` before the first sample.
    pub fn rtt_ms(&self) -> Option<f64> {
        self.rtt_ms
    }

    /// Smoothed RTT in ms, or `default_ms` before the first sample.
    pub fn rtt_ms_or(&self, default_ms: f64) -> f64 {
        self.rtt_ms.unwrap_or(default_ms)
    }

    /// Jitter (smoothed mean deviation of the RTT) in ms; 0 before the first sample.
    pub fn jitter_ms(&self) -> f64 {
        self.jitter_ms
    }

    /// Number of samples used so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

fn sane_ms(value: f64) -> f64 {
    if value.is_finite() && value > 0.0 {
        value
    } else {
        0.0
    }
}

/// Photon Quantum's default RTT above which input delay grows, in ms.
pub const DEFAULT_INPUT_DELAY_START_MS: f64 = 100.0;

/// Input delay in ticks for a round-trip time: `min_delay` plus half of the RTT above
/// `start_threshold_ms`, converted to ticks at `tick_rate_hz` and rounded up, at most
/// `max_delay`:
///
/// `min(max_delay, min_delay + ceil(max(0, rtt_ms − start_threshold_ms) / 2 · hz / 1000))`,
/// and never below `min_delay` (so a `max_delay` below `min_delay` yields `min_delay`).
///
/// This is Quantum's rule, whose default threshold is [`DEFAULT_INPUT_DELAY_START_MS`]
/// (100 ms). A non-finite or negative `rtt_ms` counts as 0 ms and a non-finite threshold as
/// 0 ms; `tick_rate_hz = 0` yields `min_delay`.
///
/// Example: RTT 200 ms at 64 Hz, threshold 100 ms, min 0: half of 100 ms is 50 ms = 3.2 ticks
/// → 4 ticks.
pub fn input_delay_ticks(
    rtt_ms: f64,
    tick_rate_hz: u32,
    min_delay: u32,
    start_threshold_ms: f64,
    max_delay: u32,
) -> u32 {
    let threshold = if start_threshold_ms.is_finite() {
        start_threshold_ms
    } else {
        0.0
    };
    let above_ms = (sane_ms(rtt_ms) - threshold).max(0.0);
    let extra_ticks = above_ms / 2.0 * f64::from(tick_rate_hz) / 1000.0;
    // Guard the ceiling against representation noise (3.0000000000000004 → 3).
    let extra = (extra_ticks - 1e-9).ceil().clamp(0.0, f64::from(u32::MAX)) as u32;
    min_delay
        .saturating_add(extra)
        .min(max_delay)
        .max(min_delay)
}

/// Multiple of the jitter added to the lead as a safety margin (2).
pub const LEAD_JITTER_MARGIN: f64 = 2.0;
/// Whole ticks added to the lead for the quantization of sending to ticks (1).
pub const LEAD_SAFETY_TICKS: f64 = 1.0;

/// How many ticks a client should run ahead of the server so its input for a tick arrives
/// before the server needs it: half the RTT plus [`LEAD_JITTER_MARGIN`] × jitter, in ticks at
/// `tick_rate_hz`, plus [`LEAD_SAFETY_TICKS`]:
///
/// `(rtt_ms / 2 + 2 · jitter_ms) · hz / 1000 + 1`.
///
/// Non-finite or negative times count as 0 ms. Example: RTT 100 ms, jitter 10 ms, 64 Hz:
/// 70 ms = 4.48 ticks, + 1 = 5.48 ticks.
pub fn target_lead_ticks(rtt_ms: f64, jitter_ms: f64, tick_rate_hz: u32) -> f64 {
    let lead_ms = sane_ms(rtt_ms) / 2.0 + LEAD_JITTER_MARGIN * sane_ms(jitter_ms);
    lead_ms * f64::from(tick_rate_hz) / 1000.0 + LEAD_SAFETY_TICKS
}

/// What a client does to its clock to reach its target lead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClockAdjustment {
    /// Run the local clock at this multiple of real time (1.0 = unchanged), within the
    /// controller's bound.
    Speed(f64),
    /// Too far off to converge smoothly: jump the local tick by this many ticks (positive:
    /// forward).
    Snap {
        /// Ticks to jump.
        ticks: i32,
    },
}

/// Proportional controller of the client's lead over the server; [`speed_factor`] uses the
/// defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeadControl {
    /// Largest speed change, as a fraction (default 0.05: ±5%).
    pub max_adjust: f64,
    /// Speed change per tick of error (default 0.01: 1% per tick).
    pub gain_per_tick: f64,
    /// An error of more than this many ticks snaps instead (default 8).
    pub snap_threshold_ticks: f64,
}

impl Default for LeadControl {
    fn default() -> Self {
        Self {
            max_adjust: 0.05,
            gain_per_tick: 0.01,
            snap_threshold_ticks: 8.0,
        }
    }
}

impl LeadControl {
    /// The adjustment for a client `current_lead` ticks ahead of the server that wants to be
    /// `target_lead` ahead. With `error = target_lead − current_lead`:
    /// `|error| > snap_threshold_ticks` → [`ClockAdjustment::Snap`] by `error` rounded (half away
    /// from zero); otherwise [`ClockAdjustment::Speed`]`(1 + clamp(error · gain_per_tick,
    /// −max_adjust, max_adjust))`. A non-finite lead yields `Speed(1.0)`.
    pub fn adjust(&self, current_lead: f64, target_lead: f64) -> ClockAdjustment {
        let error = target_lead - current_lead;
        if !error.is_finite() {
            return ClockAdjustment::Speed(1.0);
        }
        if error.abs() > self.snap_threshold_ticks {
            let ticks = error
                .round()
                .clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32;
            return ClockAdjustment::Snap { ticks };
        }
        let bound = self.max_adjust.abs();
        ClockAdjustment::Speed(1.0 + (error * self.gain_per_tick).clamp(-bound, bound))
    }
}

/// [`LeadControl::adjust`] with the default controller: ±5% at most, 1% per tick of error, snap
/// beyond 8 ticks. Example: lead 3, target 5 → `Speed(1.02)`; lead 0, target 6 → `Speed(1.05)`;
/// lead 20, target 5 → `Snap { ticks: −15 }`.
pub fn speed_factor(current_lead: f64, target_lead: f64) -> ClockAdjustment {
    LeadControl::default().adjust(current_lead, target_lead)
}

/// The server's tick now, estimated from its last report: `last_server_tick` was sent half an
/// RTT before it arrived, `since_received_ms` ago:
/// `last_server_tick + (since_received_ms + rtt_ms / 2) · hz / 1000` (fractional ticks).
/// Non-finite or negative times count as 0 ms.
pub fn estimated_server_tick(
    last_server_tick: i32,
    since_received_ms: f64,
    rtt_ms: f64,
    tick_rate_hz: u32,
) -> f64 {
    let elapsed_ms = sane_ms(since_received_ms) + sane_ms(rtt_ms) / 2.0;
    f64::from(last_server_tick) + elapsed_ms * f64::from(tick_rate_hz) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn rtt_estimator_follows_rfc6298() {
        let mut rtt = RttEstimator::new();
        assert_eq!(rtt.rtt_ms(), None);
        assert_eq!(rtt.rtt_ms_or(42.0), 42.0);
        assert!(rtt.add_sample(100.0));
        assert_eq!(rtt.rtt_ms(), Some(100.0));
        assert_eq!(rtt.jitter_ms(), 50.0);
        assert!(rtt.add_sample(140.0));
        // jitter = 0.75·50 + 0.25·40 = 47.5; rtt = 0.875·100 + 0.125·140 = 105.
        assert_eq!(rtt.jitter_ms(), 47.5);
        assert_eq!(rtt.rtt_ms(), Some(105.0));
        assert!(rtt.add_sample(105.0));
        assert_eq!(rtt.jitter_ms(), 35.625);
        assert_eq!(rtt.rtt_ms(), Some(105.0));
        assert_eq!(rtt.samples(), 3);
        for bad in [f64::NAN, f64::INFINITY, -1.0, MAX_RTT_SAMPLE_MS + 1.0] {
            assert!(!rtt.add_sample(bad));
        }
        assert_eq!(rtt.samples(), 3);
    }

    #[test]
    fn pong_timestamps_wrap() {
        let mut rtt = RttEstimator::new();
        assert_eq!(rtt.on_pong(u32::MAX - 9, 70), Some(80.0));
        assert_eq!(rtt.rtt_ms(), Some(80.0));
        // A pong stamped after "now" wraps to ~49 days and is ignored.
        assert_eq!(rtt.on_pong(100, 90), None);
        assert_eq!(rtt.samples(), 1);
        assert_eq!(millis_u32(Duration::from_millis(1234)), 1234);
        assert_eq!(
            millis_u32(Duration::from_millis(u64::from(u32::MAX) + 5)),
            4
        );
    }

    #[test]
    fn input_delay_rule() {
        // At or below the threshold: the minimum.
        assert_eq!(input_delay_ticks(0.0, 64, 0, 100.0, 10), 0);
        assert_eq!(input_delay_ticks(100.0, 64, 0, 100.0, 10), 0);
        assert_eq!(input_delay_ticks(99.0, 64, 2, 100.0, 10), 2);
        // 200 ms: half of 100 ms above = 50 ms = 3.2 ticks → 4.
        assert_eq!(input_delay_ticks(200.0, 64, 0, 100.0, 10), 4);
        assert_eq!(input_delay_ticks(200.0, 64, 1, 100.0, 10), 5);
        // Exactly one tick above (131.25 ms → 15.625 ms = 1 tick) → 1, not 2.
        assert_eq!(input_delay_ticks(131.25, 64, 0, 100.0, 10), 1);
        assert_eq!(input_delay_ticks(131.26, 64, 0, 100.0, 10), 2);
        // 60 Hz, 160 ms: 30 ms = 1.8 ticks → 2.
        assert_eq!(input_delay_ticks(160.0, 60, 0, 100.0, 10), 2);
        // Capped.
        assert_eq!(input_delay_ticks(1000.0, 64, 0, 100.0, 10), 10);
        // Bad inputs.
        assert_eq!(input_delay_ticks(f64::NAN, 64, 3, 100.0, 10), 3);
        assert_eq!(input_delay_ticks(500.0, 0, 3, 100.0, 10), 3);
        assert_eq!(input_delay_ticks(500.0, 64, 5, 100.0, 2), 5);
    }

    #[test]
    fn target_lead_rule() {
        assert!(close(target_lead_ticks(100.0, 10.0, 64), 5.48));
        assert!(close(target_lead_ticks(0.0, 0.0, 64), 1.0));
        // 60 Hz, RTT 50 ms, jitter 5 ms: 35 ms = 2.1 ticks + 1.
        assert!(close(target_lead_ticks(50.0, 5.0, 60), 3.1));
        assert!(close(target_lead_ticks(f64::NAN, -3.0, 64), 1.0));
    }

    #[test]
    fn speed_factor_rule() {
        let speed = |current, target| match speed_factor(current, target) {
            ClockAdjustment::Speed(s) => s,
            other => panic!("expected Speed, got {other:?}"),
        };
        assert_eq!(speed(5.0, 5.0), 1.0);
        assert!(close(speed(3.0, 5.0), 1.02));
        assert!(close(speed(7.5, 5.0), 0.975));
        assert!(close(speed(0.0, 6.0), 1.05));
        assert!(close(speed(0.0, 8.0), 1.05));
        assert!(close(speed(13.0, 5.0), 0.95));
        assert_eq!(speed(f64::NAN, 5.0), 1.0);
        assert_eq!(speed_factor(0.0, 8.5), ClockAdjustment::Snap { ticks: 9 });
        assert_eq!(
            speed_factor(20.0, 5.0),
            ClockAdjustment::Snap { ticks: -15 }
        );
        let tight = LeadControl {
            max_adjust: 0.02,
            gain_per_tick: 0.005,
            snap_threshold_ticks: 3.0,
        };
        assert!(matches!(tight.adjust(0.0, 2.0), ClockAdjustment::Speed(s) if close(s, 1.01)));
        assert!(matches!(tight.adjust(0.0, -3.0), ClockAdjustment::Speed(s) if close(s, 0.985)));
        assert_eq!(tight.adjust(0.0, -3.5), ClockAdjustment::Snap { ticks: -4 });
    }

    #[test]
    fn server_tick_estimate() {
        // 100 ms since the report, RTT 50 ms: 125 ms at 64 Hz = 8 ticks.
        assert_eq!(estimated_server_tick(1000, 100.0, 50.0, 64), 1008.0);
        assert_eq!(estimated_server_tick(-5, f64::NAN, -1.0, 64), -5.0);
    }
}
