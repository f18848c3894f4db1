//! [`TickRate`]: how many ticks make one second, and the conversions that depend on it.

use core::{fmt, num::NonZeroU32, time::Duration};

use bevy::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{TimeError, VirtualInstant};

const NANOS_PER_SECOND: u64 = 1_000_000_000;
const MICROS_PER_SECOND: f64 = 1_000_000.0;
/// 2^63: the first `f64` above the `i64` range. `i64::MIN as f64` is exactly `-2^63`.
const I64_LIMIT: f64 = 9_223_372_036_854_775_808.0;

/// The length of one tick of virtual time, given as whole ticks per second (Hz)
/// ([time rules 6 and 7](crate::rules)).
///
/// A [`VirtualInstant`](crate::VirtualInstant) counts ticks; this rate is what turns a tick count
/// into seconds and back. It is a Bevy [`Resource`], one per `App`, inserted by
/// [`VirtualTimePlugin`](crate::VirtualTimePlugin). There is no global rate: two Apps in the same
/// process (a server and a client in a test, say) can run at different rates.
///
/// # Default: 64 ticks per second
///
/// 64 is a power of two, so one tick, 1/64 s = 0.015625 s, is exact in binary floating point
/// and is a whole number of nanoseconds (15 625 000 ns). Tick counts therefore convert to `f64`
/// seconds and to [`Duration`] without rounding, and the deterministic fixed step (which uses
/// the same default as Bevy's `Time<Fixed>`, 64 Hz) advances by exactly one tick per step.
///
/// # Invariant
///
/// The rate is always at least 1. Every constructor that could receive zero, a negative, a
/// fractional or a non-finite value returns a [`TimeError`] instead; deserializing `0` fails.
///
/// # Rounding
///
/// Conversions into ticks round to the nearest tick, **half away from zero** (0.5 tick → 1,
/// −0.5 tick → −1), like [`f64::round`]. Conversions that cannot be represented return an error
/// rather than saturating silently.
#[derive(Resource, Reflect, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[reflect(
    Resource,
    Debug,
    Clone,
    PartialEq,
    Hash,
    Default,
    Serialize,
    Deserialize
)]
#[serde(transparent)]
pub struct TickRate {
    hz: NonZeroU32,
}

impl TickRate {
    /// 64 ticks per second; see the [type docs](TickRate) for why.
    pub const DEFAULT: TickRate = TickRate {
        hz: NonZeroU32::new(64).expect("64 is not zero"),
    };

    /// A rate of `hz` ticks per second.
    ///
    /// # Errors
    ///
    /// [`TimeError::TickRateNotPositive`] if `hz` is 0.
    pub const fn new(hz: u32) -> Result<TickRate, TimeError> {
        match NonZeroU32::new(hz) {
            Some(hz) => Ok(TickRate { hz }),
            None => Err(TimeError::TickRateNotPositive { hz: 0.0 }),
        }
    }

    /// A rate of `hz` ticks per second; cannot fail.
    pub const fn from_nonzero(hz: NonZeroU32) -> TickRate {
        TickRate { hz }
    }

    /// A rate from a floating-point count of ticks per second, e.g. read from a config file.
    ///
    /// # Errors
    ///
    /// - [`TimeError::TickRateNotFinite`] if `hz` is NaN or ±∞,
    /// - [`TimeError::TickRateNotPositive`] if `hz` ≤ 0 (including −0.0),
    /// - [`TimeError::TickRateNotWhole`] if `hz` has a fractional part,
    /// - [`TimeError::TickRateTooLarge`] if `hz` > [`u32::MAX`].
    pub fn from_hz_f64(hz: f64) -> Result<TickRate, TimeError> {
        if !hz.is_finite() {
            return Err(TimeError::TickRateNotFinite { hz });
        }
        if hz <= 0.0 {
            return Err(TimeError::TickRateNotPositive { hz });
        }
        if hz.fract() != 0.0 {
            return Err(TimeError::TickRateNotWhole { hz });
        }
        if hz > f64::from(u32::MAX) {
            return Err(TimeError::TickRateTooLarge { hz });
        }
        // In 1..=u32::MAX and whole, so the cast is exact.
        TickRate::new(hz as u32)
    }

    /// Ticks per second (Hz), always ≥ 1.
    pub const fn hz(self) -> u32 {
        self.hz.get()
    }

    /// The length of one tick in seconds, `1 / hz`.
    pub fn tick_seconds(self) -> f64 {
        1.0 / f64::from(self.hz())
    }

    /// The length of one tick as a [`Duration`], rounded to the nearest nanosecond (exact when
    /// `hz` divides 10^9, as 64 does: 15 625 000 ns).
    pub fn tick_duration(self) -> Duration {
        self.unsigned_ticks_to_duration(1)
    }

    /// `ticks` converted to seconds: `ticks / hz`.
    ///
    /// Exact when the rate is a power of two and |`ticks`| ≤ 2^53. Otherwise the result is the
    /// true quotient rounded to `f64` (once for the division, and once more for `ticks` itself
    /// when |`ticks`| > 2^53), so ticks → seconds → ticks is still exact for |`ticks`| < 2^40 at
    /// any rate. Never fails.
    pub fn ticks_to_seconds(self, ticks: i64) -> f64 {
        ticks as f64 / f64::from(self.hz())
    }

    /// `seconds` converted to ticks: `seconds × hz`, rounded half away from zero.
    ///
    /// # Errors
    ///
    /// - [`TimeError::TimeNotFinite`] if `seconds` is NaN or ±∞,
    /// - [`TimeError::TicksOutOfRange`] if the rounded tick count does not fit in an `i64`.
    pub fn seconds_to_ticks(self, seconds: f64) -> Result<i64, TimeError> {
        self.round_to_ticks(seconds, "s", seconds * f64::from(self.hz()))
    }

    /// `ticks` converted to microseconds: `ticks × 10^6 / hz`. Never fails.
    pub fn ticks_to_micros(self, ticks: i64) -> f64 {
        ticks as f64 * MICROS_PER_SECOND / f64::from(self.hz())
    }

    /// `micros` microseconds converted to ticks: `micros × hz / 10^6`, rounded half away from
    /// zero.
    ///
    /// # Errors
    ///
    /// - [`TimeError::TimeNotFinite`] if `micros` is NaN or ±∞,
    /// - [`TimeError::TicksOutOfRange`] if the rounded tick count does not fit in an `i64`.
    pub fn micros_to_ticks(self, micros: f64) -> Result<i64, TimeError> {
        self.round_to_ticks(
            micros,
            "µs",
            micros * f64::from(self.hz()) / MICROS_PER_SECOND,
        )
    }

    /// `ticks` converted to a [`Duration`], rounded to the nearest nanosecond (half up). Exact
    /// integer arithmetic, no floating point.
    ///
    /// # Errors
    ///
    /// [`TimeError::NegativeTicks`] if `ticks` < 0, since a `Duration` cannot be negative.
    pub fn ticks_to_duration(self, ticks: i64) -> Result<Duration, TimeError> {
        match u64::try_from(ticks) {
            Ok(ticks) => Ok(self.unsigned_ticks_to_duration(ticks)),
            Err(_) => Err(TimeError::NegativeTicks { ticks }),
        }
    }

    /// `duration` converted to ticks, rounded to the nearest tick (half up). Exact integer
    /// arithmetic, no floating point.
    ///
    /// # Errors
    ///
    /// [`TimeError::DurationOutOfRange`] if the tick count does not fit in an `i64`.
    pub fn duration_to_ticks(self, duration: Duration) -> Result<i64, TimeError> {
        let hz = u128::from(self.hz());
        let nanos_per_second = u128::from(NANOS_PER_SECOND);
        // `as_nanos()` < 1.9e28 and hz < 4.3e9, so `2 × nanos × hz` < 1.6e38 < u128::MAX (3.4e38).
        let ticks = (2 * duration.as_nanos() * hz + nanos_per_second) / (2 * nanos_per_second);
        i64::try_from(ticks).map_err(|_| TimeError::DurationOutOfRange {
            duration,
            hz: self.hz(),
        })
    }

    fn unsigned_ticks_to_duration(self, ticks: u64) -> Duration {
        let hz = u64::from(self.hz());
        let whole_seconds = ticks / hz;
        // remainder < hz ≤ u32::MAX, so `2 × remainder × 10^9` < 8.6e18 < u64::MAX.
        let remainder = ticks % hz;
        let nanos = (2 * remainder * NANOS_PER_SECOND + hz) / (2 * hz);
        // `nanos` can round up to a full second; `saturating_add` carries it without a panic path.
        Duration::from_secs(whole_seconds).saturating_add(Duration::from_nanos(nanos))
    }

    fn round_to_ticks(self, value: f64, unit: &'static str, scaled: f64) -> Result<i64, TimeError> {
        if !value.is_finite() {
            return Err(TimeError::TimeNotFinite { value, unit });
        }
        let rounded = scaled.round();
        if (-I64_LIMIT..I64_LIMIT).contains(&rounded) {
            // Whole and inside [-2^63, 2^63), so the cast is exact.
            Ok(rounded as i64)
        } else {
            Err(TimeError::TicksOutOfRange {
                value,
                unit,
                hz: self.hz(),
            })
        }
    }
}

impl Default for TickRate {
    /// [`TickRate::DEFAULT`], 64 ticks per second.
    fn default() -> Self {
        TickRate::DEFAULT
    }
}

impl fmt::Display for TickRate {
    /// Formats as `64 ticks/s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ticks/s", self.hz())
    }
}

impl From<NonZeroU32> for TickRate {
    fn from(hz: NonZeroU32) -> Self {
        TickRate::from_nonzero(hz)
    }
}

impl TryFrom<u32> for TickRate {
    type Error = TimeError;

    /// See [`TickRate::new`].
    fn try_from(hz: u32) -> Result<Self, TimeError> {
        TickRate::new(hz)
    }
}

impl TryFrom<i64> for TickRate {
    type Error = TimeError;

    /// Fails with [`TimeError::TickRateNotPositive`] for `hz` ≤ 0 and
    /// [`TimeError::TickRateTooLarge`] for `hz` > [`u32::MAX`].
    fn try_from(hz: i64) -> Result<Self, TimeError> {
        if hz <= 0 {
            return Err(TimeError::TickRateNotPositive { hz: hz as f64 });
        }
        match u32::try_from(hz) {
            Ok(hz) => TickRate::new(hz),
            Err(_) => Err(TimeError::TickRateTooLarge { hz: hz as f64 }),
        }
    }
}

impl TryFrom<f64> for TickRate {
    type Error = TimeError;

    /// See [`TickRate::from_hz_f64`].
    fn try_from(hz: f64) -> Result<Self, TimeError> {
        TickRate::from_hz_f64(hz)
    }
}

/// The conversions of a [`VirtualInstant`] to and from seconds, which need a rate. They are
/// written here, beside [`TickRate`], so that the instant type depends on nothing.
impl VirtualInstant {
    /// The instant `seconds` after the epoch at `rate`, priority 0. Ticks are rounded half away
    /// from zero (see [`TickRate::seconds_to_ticks`]).
    ///
    /// # Errors
    ///
    /// [`TimeError::TimeNotFinite`] for NaN or ±∞ seconds and [`TimeError::TicksOutOfRange`]
    /// when the tick count does not fit in an `i64`.
    pub fn from_seconds(seconds: f64, rate: TickRate) -> Result<VirtualInstant, TimeError> {
        rate.seconds_to_ticks(seconds)
            .map(VirtualInstant::from_ticks)
    }

    /// Seconds since the epoch at `rate`, `ticks / hz`; the priority is ignored.
    pub fn to_seconds(self, rate: TickRate) -> f64 {
        rate.ticks_to_seconds(self.ticks)
    }

    /// Something that displays this instant in seconds at `rate` as `(seconds s,priority)`, with
    /// six decimals (microsecond precision, which shows a 1/64 s tick exactly):
    /// `(1.015625 s,3)`.
    pub const fn display_seconds(self, rate: TickRate) -> SecondsDisplay {
        SecondsDisplay {
            instant: self,
            rate,
        }
    }
}

/// Displays a [`VirtualInstant`] as `(seconds s,priority)` with six decimals, e.g.
/// `(1.000000 s,3)`. Made by [`VirtualInstant::display_seconds`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SecondsDisplay {
    instant: VirtualInstant,
    rate: TickRate,
}

impl fmt::Display for SecondsDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "({:.6} s,{})",
            self.instant.to_seconds(self.rate),
            self.instant.priority
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(hz: u32) -> TickRate {
        TickRate::new(hz).unwrap()
    }

    #[test]
    fn default_rate_is_64_ticks_per_second() {
        assert_eq!(TickRate::default().hz(), 64);
        assert_eq!(TickRate::DEFAULT, TickRate::default());
        assert_eq!(TickRate::default().to_string(), "64 ticks/s");
    }

    #[test]
    fn zero_negative_nan_and_fractional_rates_are_errors() {
        assert_eq!(
            TickRate::new(0),
            Err(TimeError::TickRateNotPositive { hz: 0.0 })
        );
        assert_eq!(
            TickRate::try_from(-3_i64),
            Err(TimeError::TickRateNotPositive { hz: -3.0 })
        );
        assert_eq!(
            TickRate::from_hz_f64(-1.0),
            Err(TimeError::TickRateNotPositive { hz: -1.0 })
        );
        assert!(matches!(
            TickRate::from_hz_f64(-0.0),
            Err(TimeError::TickRateNotPositive { .. })
        ));
        assert!(matches!(
            TickRate::from_hz_f64(f64::NAN),
            Err(TimeError::TickRateNotFinite { hz }) if hz.is_nan()
        ));
        assert_eq!(
            TickRate::from_hz_f64(f64::INFINITY),
            Err(TimeError::TickRateNotFinite { hz: f64::INFINITY })
        );
        assert_eq!(
            TickRate::from_hz_f64(60.5),
            Err(TimeError::TickRateNotWhole { hz: 60.5 })
        );
        assert_eq!(
            TickRate::from_hz_f64(5e9),
            Err(TimeError::TickRateTooLarge { hz: 5e9 })
        );
        assert_eq!(
            TickRate::try_from(5_000_000_000_i64),
            Err(TimeError::TickRateTooLarge { hz: 5e9 })
        );
        assert_eq!(TickRate::try_from(128.0).map(TickRate::hz), Ok(128));
        assert_eq!(TickRate::try_from(30_i64).map(TickRate::hz), Ok(30));
    }

    #[test]
    fn seconds_to_ticks_rounds_half_away_from_zero() {
        let r = TickRate::DEFAULT;
        assert_eq!(r.seconds_to_ticks(0.5 / 64.0), Ok(1));
        assert_eq!(r.seconds_to_ticks(-0.5 / 64.0), Ok(-1));
        assert_eq!(r.seconds_to_ticks(0.49 / 64.0), Ok(0));
        assert_eq!(r.seconds_to_ticks(-0.49 / 64.0), Ok(0));
        assert_eq!(r.seconds_to_ticks(1.5 / 64.0), Ok(2));
        assert_eq!(r.seconds_to_ticks(2.5 / 64.0), Ok(3));
        assert_eq!(r.seconds_to_ticks(1.0), Ok(64));
        assert_eq!(r.seconds_to_ticks(-2.0), Ok(-128));
    }

    #[test]
    fn seconds_to_ticks_rejects_non_finite_and_out_of_range() {
        let r = TickRate::DEFAULT;
        assert!(matches!(
            r.seconds_to_ticks(f64::NAN),
            Err(TimeError::TimeNotFinite { unit: "s", .. })
        ));
        assert_eq!(
            r.seconds_to_ticks(f64::NEG_INFINITY),
            Err(TimeError::TimeNotFinite {
                value: f64::NEG_INFINITY,
                unit: "s"
            })
        );
        // 2^63 / 64 s is exactly 2^63 ticks: one past i64::MAX.
        let too_far = I64_LIMIT / 64.0;
        assert_eq!(
            r.seconds_to_ticks(too_far),
            Err(TimeError::TicksOutOfRange {
                value: too_far,
                unit: "s",
                hz: 64
            })
        );
        // -2^63 ticks is i64::MIN, which fits.
        assert_eq!(r.seconds_to_ticks(-too_far), Ok(i64::MIN));
        assert!(r.seconds_to_ticks(f64::MAX).is_err());
    }

    #[test]
    fn ticks_to_seconds_is_exact_at_64() {
        let r = TickRate::DEFAULT;
        assert_eq!(r.ticks_to_seconds(64), 1.0);
        assert_eq!(r.ticks_to_seconds(1), 0.015625);
        assert_eq!(r.ticks_to_seconds(-96), -1.5);
        assert_eq!(r.tick_seconds(), 0.015625);
        assert_eq!(rate(10).ticks_to_seconds(25), 2.5);
    }

    #[test]
    fn micros_convert_both_ways() {
        let r = TickRate::DEFAULT;
        assert_eq!(r.micros_to_ticks(15_625.0), Ok(1));
        assert_eq!(r.micros_to_ticks(7_812.5), Ok(1)); // exactly half a tick
        assert_eq!(r.micros_to_ticks(-7_812.5), Ok(-1));
        assert_eq!(r.micros_to_ticks(7_812.0), Ok(0));
        assert_eq!(r.micros_to_ticks(1_000_000.0), Ok(64));
        assert_eq!(r.ticks_to_micros(3), 46_875.0);
        assert!(matches!(
            r.micros_to_ticks(f64::NAN),
            Err(TimeError::TimeNotFinite { unit: "µs", .. })
        ));
    }

    #[test]
    fn durations_are_exact_integers() {
        let r = TickRate::DEFAULT;
        assert_eq!(r.tick_duration(), Duration::from_nanos(15_625_000));
        assert_eq!(r.ticks_to_duration(128), Ok(Duration::from_secs(2)));
        assert_eq!(
            r.ticks_to_duration(65),
            Ok(Duration::from_nanos(1_015_625_000))
        );
        assert_eq!(
            r.ticks_to_duration(-1),
            Err(TimeError::NegativeTicks { ticks: -1 })
        );
        assert_eq!(r.duration_to_ticks(Duration::from_secs(3)), Ok(192));
        // Half a tick (7.8125 ms) rounds up; just below rounds down.
        assert_eq!(r.duration_to_ticks(Duration::from_nanos(7_812_500)), Ok(1));
        assert_eq!(r.duration_to_ticks(Duration::from_nanos(7_812_499)), Ok(0));
        // 1/3 s is not a whole number of nanoseconds: rounded to the nearest.
        assert_eq!(rate(3).tick_duration(), Duration::from_nanos(333_333_333));
        assert_eq!(
            rate(3).ticks_to_duration(2),
            Ok(Duration::from_nanos(666_666_667))
        );
        assert_eq!(rate(1).tick_duration(), Duration::from_secs(1));
        assert_eq!(
            r.duration_to_ticks(Duration::MAX),
            Err(TimeError::DurationOutOfRange {
                duration: Duration::MAX,
                hz: 64
            })
        );
        assert_eq!(
            rate(1).ticks_to_duration(i64::MAX),
            Ok(Duration::from_secs(i64::MAX as u64))
        );
    }

    #[test]
    fn largest_rate_carries_rounded_nanos_into_seconds() {
        let r = rate(u32::MAX);
        let d = r.ticks_to_duration(i64::from(u32::MAX) - 1).unwrap();
        // (2^32 - 2) / (2^32 - 1) s ≈ 0.99999999977 s rounds to a full second.
        assert_eq!(d, Duration::from_secs(1));
    }

    #[test]
    fn serde_round_trips_as_a_plain_number_and_rejects_zero() {
        let json = serde_json::to_string(&rate(128)).unwrap();
        assert_eq!(json, "128");
        assert_eq!(serde_json::from_str::<TickRate>("128").unwrap(), rate(128));
        assert!(serde_json::from_str::<TickRate>("0").is_err());
    }
}
