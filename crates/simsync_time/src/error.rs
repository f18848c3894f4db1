//! The one error type of this crate.
//!
//! Every fallible operation in `simsync_time` returns [`TimeError`]. Each variant names what went
//! wrong and carries the offending value, so a message such as
//! `tick rate must be greater than zero, got -3 ticks/s` can be shown to a user as is.

use core::time::Duration;

/// What went wrong in a tick-rate construction or a ticks ⇄ seconds conversion.
///
/// Nothing in this crate panics on bad input; it returns one of these instead.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum TimeError {
    /// A tick rate of zero or below was requested. A rate is a count of ticks per second and must
    /// be at least 1.
    #[error("tick rate must be greater than zero, got {hz} ticks/s")]
    TickRateNotPositive {
        /// The rejected rate, in ticks per second.
        hz: f64,
    },
    /// A tick rate that is NaN or infinite was requested.
    #[error("tick rate must be a finite number, got {hz} ticks/s")]
    TickRateNotFinite {
        /// The rejected rate, in ticks per second.
        hz: f64,
    },
    /// A tick rate with a fractional part was requested. Rates are whole ticks per second so that
    /// one tick has a fixed, exactly reproducible length.
    #[error("tick rate must be a whole number of ticks per second, got {hz} ticks/s")]
    TickRateNotWhole {
        /// The rejected rate, in ticks per second.
        hz: f64,
    },
    /// A tick rate above [`u32::MAX`] ticks per second was requested.
    #[error("tick rate must be at most {max} ticks/s, got {hz} ticks/s", max = u32::MAX)]
    TickRateTooLarge {
        /// The rejected rate, in ticks per second.
        hz: f64,
    },
    /// A time value handed to a conversion was NaN or infinite.
    #[error("cannot convert {value} {unit} to ticks: the value is not finite")]
    TimeNotFinite {
        /// The rejected value, in `unit`.
        value: f64,
        /// The unit of `value`: `"s"` for seconds, `"µs"` for microseconds.
        unit: &'static str,
    },
    /// A finite time value converts to more ticks than an `i64` holds at the given rate.
    #[error("{value} {unit} at {hz} ticks/s is outside the i64 tick range")]
    TicksOutOfRange {
        /// The rejected value, in `unit`.
        value: f64,
        /// The unit of `value`: `"s"` for seconds, `"µs"` for microseconds.
        unit: &'static str,
        /// The tick rate used for the conversion, in ticks per second.
        hz: u32,
    },
    /// A [`Duration`] converts to more ticks than an `i64` holds at the given rate.
    #[error("duration {duration:?} at {hz} ticks/s is outside the i64 tick range")]
    DurationOutOfRange {
        /// The rejected duration.
        duration: Duration,
        /// The tick rate used for the conversion, in ticks per second.
        hz: u32,
    },
    /// A negative tick count was converted to a [`Duration`], which cannot be negative.
    #[error("cannot convert {ticks} ticks to a Duration: durations cannot be negative")]
    NegativeTicks {
        /// The rejected tick count.
        ticks: i64,
    },
    /// A [`FrameBudget`](crate::FrameBudget) of zero events or zero ticks was requested; a
    /// frame that may do nothing would never advance the clock.
    #[error("a frame budget must allow at least one event and one tick")]
    ZeroFrameBudget,
    /// A [`ClockRequest`](crate::ClockRequest) was made while the clock's policy is not
    /// [`AdvancePolicy::Paused`](crate::AdvancePolicy::Paused); set the policy first.
    #[error("clock requests need a paused clock (AdvancePolicy::Paused)")]
    ClockNotPaused,
    /// A [`ClockRequest::Until`](crate::ClockRequest::Until) names an instant before where the
    /// clock will be when the request runs; virtual time never goes backwards.
    #[error("cannot advance the clock to {target}: it will already be at {clock}")]
    ClockRequestInPast {
        /// The requested instant.
        target: crate::VirtualInstant,
        /// Where the clock will be after the requests already waiting.
        clock: crate::VirtualInstant,
    },
    /// Too many [`ClockRequest`](crate::ClockRequest)s are waiting.
    #[error("{max} clock requests are already waiting")]
    TooManyClockRequests {
        /// The limit, [`MAX_PENDING_REQUESTS`](crate::MAX_PENDING_REQUESTS).
        max: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_value() {
        let e = TimeError::TickRateNotPositive { hz: -3.0 };
        assert_eq!(
            e.to_string(),
            "tick rate must be greater than zero, got -3 ticks/s"
        );
        let e = TimeError::TicksOutOfRange {
            value: 1e300,
            unit: "s",
            hz: 64,
        };
        assert_eq!(
            e.to_string(),
            format!("{} s at 64 ticks/s is outside the i64 tick range", 1e300)
        );
        let e = TimeError::NegativeTicks { ticks: -5 };
        assert_eq!(
            e.to_string(),
            "cannot convert -5 ticks to a Duration: durations cannot be negative"
        );
    }
}
