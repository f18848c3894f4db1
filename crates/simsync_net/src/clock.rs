//! Round-trip time and clock-synchronisation helpers, all pure (no clock of their own: the caller
//! passes times in).
//!
//! - [`RttEstimator`]: smoothed RTT and jitter from ping/pong samples (EWMA, as TCP's RFC 6298).
//! - [`input_delay_ticks`]: how many ticks a client delays its own input, from the RTT.
//! - [`target_lead_ticks`]: how far ahead of the server a client's tick should run.
//! - [`speed_factor`] / [`LeadControl`]: how fast to run the local clock to reach that lead, or
//!   when to snap.
//! - [`estimated_server_tick`]: where the server clock is now, from its last report.
//! - [`TickAccumulator`]: how many fixed-step ticks to run for the time that passed.
//!
//! Units: times in milliseconds (`f64`) unless a name says seconds, rates in ticks per second
//! (Hz), leads in ticks (`f64`, fractional). The rules are summarized in the
//! [clock rules](crate::rules).

use std::time::Duration;

/// RTT samples above this (ms) are ignored by [`RttEstimator`] as stale or corrupt.
pub const MAX_RTT_SAMPLE_MS: f64 = 10_000.0;
/// Weight of a new sample in the smoothed RTT (1/8, RFC 6298's α).
pub const RTT_ALPHA: f64 = 0.125;
/// Weight of a new deviation in the jitter estimate (1/4, RFC 6298's β).
pub const RTT_BETA: f64 = 0.25;
/// A sample above `rtt + RTT_OUTLIER_DEVIATIONS · jitter + RTT_OUTLIER_MARGIN_MS` is an outlier
/// (4, as RFC 6298's retransmission timeout).
pub const RTT_OUTLIER_DEVIATIONS: f64 = 4.0;
/// Milliseconds an RTT sample may exceed the smoothed RTT plus its deviations before it is an
/// outlier (50).
pub const RTT_OUTLIER_MARGIN_MS: f64 = 50.0;
/// Outliers in a row, arriving at distinct times, that are a real RTT step, not noise (3).
pub const RTT_OUTLIER_REPEATS: usize = 3;

/// A clock time in ms as a wrapping `u32`, the format of ping/pong timestamps
/// (`ClientMessage::Ping { t }`); wraps every 49.7 days, which [`RttEstimator::on_pong`]
/// handles.
pub fn millis_u32(time: Duration) -> u32 {
    (time.as_millis() & u128::from(u32::MAX)) as u32
}

/// Smoothed round-trip time and jitter, in ms ([wire rule 7](crate::rules)).
///
/// The first sample `r` sets RTT to `r` and jitter to `r / 2`; each later sample updates
/// `jitter = (1 − β)·jitter + β·|rtt − r|`, then `rtt = (1 − α)·rtt + α·r`, with
/// [`RTT_ALPHA`] = 1/8 and [`RTT_BETA`] = 1/4. Samples that are negative, not finite or above
/// [`MAX_RTT_SAMPLE_MS`] are ignored.
///
/// Outliers: a sample above `rtt + 4·jitter + 50 ms` ([`RTT_OUTLIER_DEVIATIONS`],
/// [`RTT_OUTLIER_MARGIN_MS`]) is held back, not used. When [`RTT_OUTLIER_REPEATS`] (3) of them
/// come in a row — without a normal sample between them, and through
/// [`on_pong`](Self::on_pong) at distinct arrival times, so a burst of stale pongs after a pause
/// counts once — the RTT really stepped up: the RTT is set to their mean and the jitter takes
/// the step as a deviation. A single spike (a hitch, a paused peer answering old pings) never
/// moves the estimate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RttEstimator {
    rtt_ms: Option<f64>,
    jitter_ms: f64,
    samples: u64,
    /// Outliers held back, in a row: (sample, arrival ms if known).
    outliers: Vec<(f64, Option<u32>)>,
    rejected: u64,
}

impl RttEstimator {
    /// An estimator without samples.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one RTT sample, in ms. Returns whether it was used (see the type docs for the
    /// samples that are ignored or held back as outliers).
    pub fn add_sample(&mut self, rtt_ms: f64) -> bool {
        self.add_sample_at(rtt_ms, None)
    }

    /// [`add_sample`](Self::add_sample) of a sample that arrived at `arrival_ms` (`None`:
    /// unknown, every outlier counts as a repeat).
    fn add_sample_at(&mut self, rtt_ms: f64, arrival_ms: Option<u32>) -> bool {
        if !rtt_ms.is_finite() || !(0.0..=MAX_RTT_SAMPLE_MS).contains(&rtt_ms) {
            return false;
        }
        if let Some(srtt) = self.rtt_ms
            && rtt_ms > srtt + RTT_OUTLIER_DEVIATIONS * self.jitter_ms + RTT_OUTLIER_MARGIN_MS
        {
            return self.on_outlier(srtt, rtt_ms, arrival_ms);
        }
        self.outliers.clear();
        self.smooth(rtt_ms);
        true
    }

    /// Holds an outlier back; the [`RTT_OUTLIER_REPEATS`]th in a row (at distinct arrival
    /// times) is a real step: the RTT becomes their mean.
    fn on_outlier(&mut self, srtt: f64, rtt_ms: f64, arrival_ms: Option<u32>) -> bool {
        let same_burst = arrival_ms.is_some()
            && self
                .outliers
                .last()
                .is_some_and(|(_, at)| *at == arrival_ms);
        if same_burst {
            self.rejected += 1;
            return false;
        }
        self.outliers.push((rtt_ms, arrival_ms));
        if self.outliers.len() < RTT_OUTLIER_REPEATS {
            self.rejected += 1;
            return false;
        }
        let mean = self.outliers.iter().map(|(s, _)| s).sum::<f64>() / self.outliers.len() as f64;
        self.outliers.clear();
        self.jitter_ms = (1.0 - RTT_BETA) * self.jitter_ms + RTT_BETA * (mean - srtt).abs();
        self.rtt_ms = Some(mean);
        self.samples += 1;
        true
    }

    /// The RFC 6298 update with a sample that is not an outlier.
    fn smooth(&mut self, rtt_ms: f64) {
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
    }

    /// Adds the sample of a pong: `sent_ms` is the `t` the ping carried, `now_ms` the local
    /// clock at the pong's arrival, both wrapping `u32` ms ([`millis_u32`]). Returns the sample
    /// in ms if it was used; a pong "from the future" wraps to a huge value and is ignored.
    pub fn on_pong(&mut self, sent_ms: u32, now_ms: u32) -> Option<f64> {
        let sample = f64::from(now_ms.wrapping_sub(sent_ms));
        self.add_sample_at(sample, Some(now_ms)).then_some(sample)
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

    /// Number of samples used so far (a confirmed RTT step counts once).
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Number of outlier samples held back and not used (so far).
    pub fn rejected_outliers(&self) -> u64 {
        self.rejected
    }
}

/// `value` if finite and positive, else 0.
fn sane(value: f64) -> f64 {
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
/// This is Quantum's rule ([wire rule 7](crate::rules)), whose default threshold is
/// [`DEFAULT_INPUT_DELAY_START_MS`] (100 ms). A non-finite or negative `rtt_ms` counts as 0 ms and
/// a non-finite threshold as 0 ms; `tick_rate_hz = 0` yields `min_delay`.
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
    let above_ms = (sane(rtt_ms) - threshold).max(0.0);
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
    let lead_ms = sane(rtt_ms) / 2.0 + LEAD_JITTER_MARGIN * sane(jitter_ms);
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

/// Proportional controller of the client's lead over the server ([wire rule 7](crate::rules));
/// [`speed_factor`] uses the defaults.
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
    let elapsed_ms = sane(since_received_ms) + sane(rtt_ms) / 2.0;
    f64::from(last_server_tick) + elapsed_ms * f64::from(tick_rate_hz) / 1000.0
}

/// A fixed-step accumulator: turns the time that passed into whole ticks to run now and carries
/// the fraction (and any debt) to the next call ([wire rule 7](crate::rules)). Pure: the caller
/// passes the time in.
///
/// Each [`advance_secs`](Self::advance_secs) / [`advance_ticks`](Self::advance_ticks) call:
///
/// 1. adds the elapsed time, in ticks, times the [speed](Self::set_speed) to the leftover;
/// 2. takes the whole ticks of the leftover (none while it is below 1, or negative: a debt);
/// 3. adds a pending [`jump`](Self::jump) to them; if that makes the count negative, the rest
///    stays in the leftover as a debt that later time pays off first;
/// 4. returns at most `max_ticks_per_advance` ticks, keeping any excess in the leftover;
/// 5. cuts the leftover to at most `max_leftover_ticks` (time beyond it is dropped, so a long
///    stall does not make the caller run a burst of catch-up ticks for ever after).
///
/// Options and their defaults (set with the `with_` methods):
///
/// | option | unit | default | e.g. |
/// |---|---|---|---|
/// | `max_ticks_per_advance` | ticks per call | `u32::MAX` | 8 for a real-time session |
/// | `max_leftover_ticks` | ticks | unlimited | 8 to drop time after a stall |
/// | `speed` | multiple of real time | 1.0 | 1.02 for a client catching up |
///
/// The three clocks of the deterministic crate are this type with these options: the local
/// session's real-time clock (8 ticks per call, 8 ticks of leftover), the relay server's
/// real-time clock (8 ticks per call, leftover unlimited), and the network client's lead control
/// ([`advance_ticks`](Self::advance_ticks) of the session's ticks at the [`LeadControl`] speed,
/// snaps as [`jump`](Self::jump)s, 64 ticks per call).
///
/// # Why not Bevy's `Time<Fixed>`
///
/// `Time<Fixed>` is one accumulator per App that drives the `FixedMain` schedule from virtual
/// time. simsync needs several per App (a session and a relay server can share one), inside a
/// system rather than as a schedule, with a speed of its own that must not change the App's
/// virtual time, with snaps in both directions (a debt), and in pure code that tests can step
/// without an App. So the clocks use this type; `Time<Fixed>` stays free for the game.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TickAccumulator {
    /// Fractional ticks carried to the next call; negative: a debt.
    leftover: f64,
    /// A jump not yet applied, in ticks.
    pending_jump: i64,
    speed: f64,
    max_ticks_per_advance: u32,
    max_leftover_ticks: Option<f64>,
}

impl Default for TickAccumulator {
    fn default() -> Self {
        Self::new()
    }
}

impl TickAccumulator {
    /// An empty accumulator at speed 1 without caps.
    pub const fn new() -> Self {
        Self {
            leftover: 0.0,
            pending_jump: 0,
            speed: 1.0,
            max_ticks_per_advance: u32::MAX,
            max_leftover_ticks: None,
        }
    }

    /// Returns at most `ticks` ticks per call; whole ticks beyond them stay in the leftover.
    #[must_use]
    pub const fn with_max_ticks_per_advance(mut self, ticks: u32) -> Self {
        self.max_ticks_per_advance = ticks;
        self
    }

    /// Keeps at most `ticks` (fractional) in the leftover after each call; the rest of the time
    /// is dropped. A negative or non-finite value means no cap.
    #[must_use]
    pub fn with_max_leftover_ticks(mut self, ticks: f64) -> Self {
        self.max_leftover_ticks = (ticks.is_finite() && ticks >= 0.0).then_some(ticks);
        self
    }

    /// Sets the speed: elapsed time counts `speed` times (1.0 = real time; 1.05 runs 5 % fast).
    /// A negative speed counts as 0 (stopped), a non-finite one as 1.
    pub fn set_speed(&mut self, speed: f64) {
        self.speed = if !speed.is_finite() {
            1.0
        } else {
            speed.max(0.0)
        };
    }

    /// The speed in use.
    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// The ticks carried to the next call (fractional; negative: a debt). A pending jump is not
    /// included.
    pub fn leftover_ticks(&self) -> f64 {
        self.leftover
    }

    /// Adds `ticks` whole ticks to the next call's count (negative: takes them away, as a debt if
    /// the count goes below zero). Jumps add up until the next call.
    pub fn jump(&mut self, ticks: i64) {
        self.pending_jump = self.pending_jump.saturating_add(ticks);
    }

    /// Drops the leftover, any debt and any pending jump.
    pub fn reset(&mut self) {
        self.leftover = 0.0;
        self.pending_jump = 0;
    }

    /// The ticks to run for `elapsed_secs` seconds at `tick_rate_hz` ticks per second (see the
    /// type docs). Negative or non-finite inputs count as 0.
    ///
    /// Example: at 64 Hz, frames of 20 ms (1.28 ticks each) give 1, 1, 1, 2 ticks, carrying
    /// 0.28, 0.56, 0.84, 0.12 ticks.
    pub fn advance_secs(&mut self, elapsed_secs: f64, tick_rate_hz: f64) -> u32 {
        self.advance(sane(elapsed_secs) * sane(tick_rate_hz))
    }

    /// The ticks to run for `elapsed_ticks` ticks of real time (see the type docs). Negative or
    /// non-finite inputs count as 0.
    pub fn advance_ticks(&mut self, elapsed_ticks: f64) -> u32 {
        self.advance(sane(elapsed_ticks))
    }

    fn advance(&mut self, elapsed_ticks: f64) -> u32 {
        self.leftover += elapsed_ticks * self.speed;
        let jump = std::mem::take(&mut self.pending_jump) as f64;
        let whole = self.leftover.floor().max(0.0);
        let ticks = (whole + jump).clamp(0.0, f64::from(self.max_ticks_per_advance));
        // The jump's ticks come on top of the time's, so only `ticks − jump` is taken from it
        // (more than `whole` when a negative jump leaves a debt, less when a cap keeps some).
        self.leftover -= ticks - jump;
        if let Some(cap) = self.max_leftover_ticks {
            self.leftover = self.leftover.min(cap);
        }
        ticks as u32
    }
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

    /// 40 samples of 30–32 ms: a settled estimate near 31 ms with a jitter of about 1 ms.
    fn settled() -> RttEstimator {
        let mut rtt = RttEstimator::new();
        for i in 0..40 {
            rtt.add_sample(30.0 + f64::from(i % 3));
        }
        rtt
    }

    #[test]
    fn a_single_spike_is_an_outlier_and_leaves_the_estimate() {
        let mut rtt = settled();
        let before = rtt.clone();
        let (srtt, jitter) = (before.rtt_ms().expect("samples"), before.jitter_ms());
        assert!((srtt - 31.0).abs() < 1.0 && jitter < 2.0, "{before:?}");
        assert!(!rtt.add_sample(1_661.0));
        assert_eq!(rtt.rtt_ms(), Some(srtt));
        assert_eq!(rtt.jitter_ms(), jitter);
        assert_eq!(rtt.rejected_outliers(), 1);
        // A normal sample ends the run: two more spikes are again not a step.
        assert!(rtt.add_sample(31.0));
        assert!(!rtt.add_sample(900.0));
        assert!(!rtt.add_sample(950.0));
        assert!(rtt.rtt_ms().expect("samples") < 32.0);
        // Just inside the bound: used.
        assert!(rtt.add_sample(srtt + 4.0 * rtt.jitter_ms() + 49.0));
    }

    #[test]
    fn ping_times_are_measured_across_the_u32_millisecond_wrap() {
        // 49.7 days into a session the millisecond clock wraps: pings sent just before it and
        // answered just after measure their true round trip.
        let day = Duration::from_secs(86_400);
        let wrap = Duration::from_millis(1 << 32);
        assert_eq!(millis_u32(wrap - Duration::from_millis(10)), u32::MAX - 9);
        assert_eq!(millis_u32(wrap + Duration::from_millis(21)), 21);
        let mut rtt = RttEstimator::new();
        for i in 0..40u64 {
            let sent = wrap - Duration::from_millis(5_000) + Duration::from_millis(250 * i);
            let back = sent + Duration::from_millis(31);
            assert_eq!(
                rtt.on_pong(millis_u32(sent), millis_u32(back)),
                Some(31.0),
                "ping {i}"
            );
        }
        assert!((rtt.rtt_ms().expect("samples") - 31.0).abs() < 1e-9);
        assert!(wrap > 49 * day && wrap < 50 * day);
    }

    #[test]
    fn a_burst_of_stale_pongs_after_a_pause_does_not_move_the_estimate() {
        // Pings every 250 ms went unanswered for 6 s; the answers all arrive at 10 000 ms.
        let mut rtt = RttEstimator::new();
        for i in 0..40u32 {
            let sent = 250 * i;
            assert!(rtt.on_pong(sent, sent + 31).is_some());
        }
        for sent in (4_000..10_000).step_by(250) {
            assert_eq!(rtt.on_pong(sent, 10_000), None);
        }
        let srtt = rtt.rtt_ms().expect("samples");
        assert!((srtt - 31.0).abs() < 0.5, "{rtt:?}");
        assert_eq!(rtt.rejected_outliers(), 24);
        assert!(rtt.on_pong(10_000, 10_031).is_some());
    }

    #[test]
    fn a_repeated_step_is_accepted_after_three_samples() {
        let mut rtt = settled();
        assert!(rtt.on_pong(1_000, 1_300).is_none());
        assert!(rtt.on_pong(1_250, 1_552).is_none());
        assert_eq!(rtt.on_pong(1_500, 1_804), Some(304.0));
        assert_eq!(rtt.rtt_ms(), Some(302.0));
        // The step counts as a deviation: jitter ≈ ¼·271.
        assert!((rtt.jitter_ms() - 68.0).abs() < 2.0, "{rtt:?}");
        // Later samples near the new RTT are normal.
        assert!(rtt.add_sample(310.0));
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
    fn input_delay_is_the_minimum_plus_half_the_rtt_above_the_threshold_capped() {
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
    fn target_lead_is_half_the_rtt_plus_twice_the_jitter_plus_one_tick() {
        assert!(close(target_lead_ticks(100.0, 10.0, 64), 5.48));
        assert!(close(target_lead_ticks(0.0, 0.0, 64), 1.0));
        // 60 Hz, RTT 50 ms, jitter 5 ms: 35 ms = 2.1 ticks + 1.
        assert!(close(target_lead_ticks(50.0, 5.0, 60), 3.1));
        assert!(close(target_lead_ticks(f64::NAN, -3.0, 64), 1.0));
    }

    #[test]
    fn lead_error_changes_speed_within_bounds_or_snaps_beyond_the_threshold() {
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
    fn server_tick_is_estimated_from_the_last_report_plus_half_the_rtt() {
        // 100 ms since the report, RTT 50 ms: 125 ms at 64 Hz = 8 ticks.
        assert_eq!(estimated_server_tick(1000, 100.0, 50.0, 64), 1008.0);
        assert_eq!(estimated_server_tick(-5, f64::NAN, -1.0, 64), -5.0);
    }

    /// The local session's real-time clock before `TickAccumulator`.
    fn session_reference(acc: &mut f64, delta: f64, rate: f64) -> u32 {
        *acc += delta * rate;
        let n = acc.floor().clamp(0.0, 8.0);
        *acc = (*acc - n).min(8.0);
        n as u32
    }

    /// The relay server's real-time clock before `TickAccumulator`.
    fn server_reference(acc: &mut f64, delta: f64, rate: f64) -> u32 {
        *acc += delta * rate;
        let n = acc.floor().clamp(0.0, 8.0);
        *acc -= n;
        n as u32
    }

    /// The network client's lead control before `TickAccumulator`.
    fn client_reference(acc: &mut f64, base: u32, speed: f64, extra: i64) -> u32 {
        *acc += f64::from(base) * speed;
        let whole = acc.floor().max(0.0);
        *acc -= whole;
        let n = whole as i64 + extra;
        if n < 0 {
            *acc += n as f64;
            0
        } else {
            n.min(64) as u32
        }
    }

    /// Frame times in seconds: steady, uneven, a stall and zeros.
    fn frame_times() -> Vec<f64> {
        let mut rng = crate::SplitMix64::new(3);
        let mut times: Vec<f64> = (0..500).map(|_| rng.next_f64() * 0.05).collect();
        times.extend([1.0 / 60.0; 20]);
        times.extend([0.0, 0.5, 0.0, 3.0, 0.001]);
        times
    }

    #[test]
    fn fractions_of_a_tick_are_carried() {
        let mut clock = TickAccumulator::new();
        assert_eq!(clock.advance_secs(0.020, 64.0), 1);
        assert!(close(clock.leftover_ticks(), 0.28));
        assert_eq!(clock.advance_secs(0.020, 64.0), 1);
        assert!(close(clock.leftover_ticks(), 0.56));
        assert_eq!(clock.advance_secs(0.020, 64.0), 1);
        assert_eq!(clock.advance_secs(0.020, 64.0), 2);
        assert!(close(clock.leftover_ticks(), 0.12));
        assert_eq!(clock.advance_ticks(0.75), 0);
        assert_eq!(clock.advance_ticks(0.25), 1);
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            assert_eq!(clock.advance_secs(bad, 64.0), 0);
            assert_eq!(clock.advance_secs(1.0, bad), 0);
            assert_eq!(clock.advance_ticks(bad), 0);
        }
    }

    #[test]
    fn ticks_per_advance_are_capped_and_the_rest_carried() {
        let mut clock = TickAccumulator::new().with_max_ticks_per_advance(8);
        assert_eq!(clock.advance_secs(0.5, 64.0), 8);
        assert_eq!(clock.leftover_ticks(), 24.0);
        assert_eq!(clock.advance_ticks(0.0), 8);
        assert_eq!(clock.advance_ticks(0.0), 8);
        assert_eq!(clock.advance_ticks(0.0), 8);
        assert_eq!(clock.advance_ticks(0.0), 0);
    }

    #[test]
    fn leftover_is_capped_so_a_stall_is_dropped() {
        let mut clock = TickAccumulator::new()
            .with_max_ticks_per_advance(8)
            .with_max_leftover_ticks(8.0);
        assert_eq!(clock.advance_secs(1.0, 64.0), 8);
        assert_eq!(clock.leftover_ticks(), 8.0);
        assert_eq!(clock.advance_ticks(0.0), 8);
        assert_eq!(clock.advance_ticks(0.0), 0);
        // A negative or non-finite cap is no cap.
        let mut clock = TickAccumulator::new().with_max_leftover_ticks(f64::NAN);
        assert_eq!(clock.advance_secs(1.0, 64.0), 64);
    }

    #[test]
    fn speed_scales_elapsed_time() {
        let mut clock = TickAccumulator::new();
        clock.set_speed(1.05);
        let ticks: u32 = (0..20).map(|_| clock.advance_ticks(1.0)).sum();
        assert_eq!(ticks, 21);
        clock.set_speed(-2.0);
        assert_eq!(clock.speed(), 0.0);
        assert_eq!(clock.advance_ticks(5.0), 0);
        clock.set_speed(f64::NAN);
        assert_eq!(clock.speed(), 1.0);
    }

    #[test]
    fn jumps_add_ticks_or_leave_a_debt_paid_first() {
        let mut clock = TickAccumulator::new();
        clock.jump(3);
        assert_eq!(clock.advance_ticks(1.0), 4);
        clock.jump(-5);
        assert_eq!(clock.advance_ticks(1.0), 0);
        assert_eq!(clock.leftover_ticks(), -4.0);
        // The debt of 4 ticks is paid before any tick runs.
        assert_eq!(clock.advance_ticks(4.0), 0);
        assert_eq!(clock.advance_ticks(1.5), 1);
        assert_eq!(clock.leftover_ticks(), 0.5);
        clock.jump(2);
        clock.jump(1);
        clock.reset();
        assert_eq!(clock.advance_ticks(0.0), 0);
        assert_eq!(clock.leftover_ticks(), 0.0);
    }

    #[test]
    fn matches_the_real_time_session_clock_it_replaces() {
        let mut clock = TickAccumulator::new()
            .with_max_ticks_per_advance(8)
            .with_max_leftover_ticks(8.0);
        let mut reference = 0.0;
        for dt in frame_times() {
            assert_eq!(
                clock.advance_secs(dt, 64.0),
                session_reference(&mut reference, dt, 64.0)
            );
            assert_eq!(clock.leftover_ticks(), reference);
        }
    }

    #[test]
    fn matches_the_real_time_relay_server_clock_it_replaces() {
        let mut clock = TickAccumulator::new().with_max_ticks_per_advance(8);
        let mut reference = 0.0;
        for dt in frame_times() {
            assert_eq!(
                clock.advance_secs(dt, 60.0),
                server_reference(&mut reference, dt, 60.0)
            );
            assert_eq!(clock.leftover_ticks(), reference);
        }
    }

    #[test]
    fn matches_the_network_client_clock_it_replaces() {
        let mut clock = TickAccumulator::new().with_max_ticks_per_advance(64);
        let mut reference = 0.0;
        let mut rng = crate::SplitMix64::new(11);
        for i in 0..2_000 {
            let base = (rng.next_u64() % 4) as u32;
            let speed = 0.95 + rng.next_f64() * 0.1;
            // A snap now and then, forward or back, never beyond the 64-tick cap.
            let extra = if i % 97 == 0 {
                (rng.next_u64() % 41) as i64 - 20
            } else {
                0
            };
            clock.set_speed(speed);
            clock.jump(extra);
            assert_eq!(
                clock.advance_ticks(f64::from(base)),
                client_reference(&mut reference, base, speed, extra),
                "step {i}"
            );
            assert_eq!(clock.leftover_ticks(), reference, "step {i}");
        }
    }
}
