//! [`VirtualInstant`]: a point in discrete-event virtual time.

use core::{
    fmt,
    ops::{Add, AddAssign},
};

use bevy::prelude::*;
use serde::{Deserialize, Serialize};

/// A point in discrete-event virtual time: a whole number of ticks since the simulation's
/// epoch, plus a priority that orders events scheduled for the same tick
/// ([time rules 1–5](crate::rules)).
///
/// This is *not* Bevy's `Time<Virtual>`. Bevy's virtual clock is a pausable, scalable game
/// clock measured in seconds; a `VirtualInstant` is a discrete simulation timestamp that the
/// simulation itself advances. The length of a tick is given by a [`TickRate`](crate::TickRate) (64 ticks per
/// second by default), which is passed explicitly to every conversion to or from seconds.
///
/// # Order
///
/// Instants are ordered by `ticks`, then by `priority`, smaller first: at the same tick, the
/// event with the smaller priority happens first. Two instants are equal only when both fields
/// are equal. (The derived `Ord` is exactly this lexicographic order because `ticks` is
/// declared first.)
///
/// # Arithmetic
///
/// Durations are plain `i64` tick counts; adding one changes `ticks` only and keeps
/// `priority`. Addition never wraps: see [`add_ticks`](Self::add_ticks) and
/// [`plus`](Self::plus).
///
/// # Display
///
/// `Display` prints `(ticks,priority)`, e.g. `(64,3)`; [`display_seconds`](Self::display_seconds)
/// prints `(seconds s,priority)`, e.g. `(1.000000 s,3)`. Both print [`INFINITY`](Self::INFINITY)
/// from its raw fields like any other instant.
#[derive(
    Reflect,
    Debug,
    Default,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
)]
#[reflect(Debug, Default, Clone, PartialEq, Hash, Serialize, Deserialize)]
pub struct VirtualInstant {
    /// Whole ticks since the simulation's epoch. May be negative (before the epoch).
    pub ticks: i64,
    /// Orders instants with equal `ticks`: smaller first. Unitless.
    pub priority: i64,
}

impl VirtualInstant {
    /// The epoch: tick 0, priority 0.
    pub const ZERO: VirtualInstant = VirtualInstant::new(0, 0);

    /// The end of time: both fields [`i64::MAX`]. Later than every other instant, equal only to
    /// itself. Any addition that overflows the tick range lands here, and adding anything to it
    /// leaves it here.
    pub const INFINITY: VirtualInstant = VirtualInstant::new(i64::MAX, i64::MAX);

    /// The instant at `ticks` with `priority`.
    pub const fn new(ticks: i64, priority: i64) -> VirtualInstant {
        VirtualInstant { ticks, priority }
    }

    /// The instant at `ticks` with priority 0.
    pub const fn from_ticks(ticks: i64) -> VirtualInstant {
        VirtualInstant::new(ticks, 0)
    }

    /// Whether this is [`VirtualInstant::INFINITY`].
    pub const fn is_infinity(self) -> bool {
        self.ticks == i64::MAX && self.priority == i64::MAX
    }

    /// This instant moved by `ticks` ticks (a duration; negative moves earlier), priority
    /// unchanged.
    ///
    /// Never wraps:
    /// - if the sum is above [`i64::MAX`], the result is [`INFINITY`](Self::INFINITY);
    /// - if the sum is below [`i64::MIN`], the result's ticks are `i64::MIN` (the priority is kept);
    /// - `INFINITY` plus any duration, even a negative one, is `INFINITY`, as `+∞ − 1 = +∞`.
    ///
    /// The `+` and `+=` operators with an `i64` right-hand side do the same.
    #[must_use]
    pub const fn add_ticks(self, ticks: i64) -> VirtualInstant {
        if self.is_infinity() {
            return VirtualInstant::INFINITY;
        }
        match self.ticks.checked_add(ticks) {
            Some(sum) => VirtualInstant::new(sum, self.priority),
            None if ticks > 0 => VirtualInstant::INFINITY,
            None => VirtualInstant::new(i64::MIN, self.priority),
        }
    }

    /// The sum of two instants, as the Go `vrtime` package defines it: ticks add, and the result
    /// keeps the **larger** of the two priorities.
    ///
    /// Never wraps: a tick sum above [`i64::MAX`] gives [`INFINITY`](Self::INFINITY), one below
    /// [`i64::MIN`] gives ticks `i64::MIN`; if either operand is `INFINITY`, so is the result.
    #[must_use]
    pub const fn plus(self, other: VirtualInstant) -> VirtualInstant {
        if self.is_infinity() || other.is_infinity() {
            return VirtualInstant::INFINITY;
        }
        let priority = if self.priority > other.priority {
            self.priority
        } else {
            other.priority
        };
        match self.ticks.checked_add(other.ticks) {
            Some(sum) => VirtualInstant::new(sum, priority),
            None if other.ticks > 0 => VirtualInstant::INFINITY,
            None => VirtualInstant::new(i64::MIN, priority),
        }
    }
}

impl Add<i64> for VirtualInstant {
    type Output = VirtualInstant;

    /// Adds a duration of `ticks` ticks; see [`VirtualInstant::add_ticks`].
    fn add(self, ticks: i64) -> VirtualInstant {
        self.add_ticks(ticks)
    }
}

impl AddAssign<i64> for VirtualInstant {
    /// Adds a duration of `ticks` ticks in place; see [`VirtualInstant::add_ticks`].
    fn add_assign(&mut self, ticks: i64) {
        *self = self.add_ticks(ticks);
    }
}

impl fmt::Display for VirtualInstant {
    /// Formats as `(ticks,priority)`, e.g. `(64,3)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", self.ticks, self.priority)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TickRate;

    const fn at(ticks: i64, priority: i64) -> VirtualInstant {
        VirtualInstant::new(ticks, priority)
    }

    #[test]
    fn orders_by_ticks_then_priority() {
        assert!(at(1, 100) < at(2, 0));
        assert!(at(2, -5) < at(2, 0));
        assert!(at(-1, i64::MAX) < at(0, i64::MIN));
        let mut v = vec![at(3, 1), at(1, 2), at(3, 0), at(1, 1)];
        v.sort();
        assert_eq!(v, [at(1, 1), at(1, 2), at(3, 0), at(3, 1)]);
    }

    #[test]
    fn equality_needs_both_fields() {
        assert_eq!(at(5, 2), at(5, 2));
        assert_ne!(at(5, 2), at(5, 3));
        assert_ne!(at(5, 2), at(6, 2));
    }

    #[test]
    fn infinity_is_later_than_everything_else() {
        let inf = VirtualInstant::INFINITY;
        assert_eq!(inf, at(i64::MAX, i64::MAX));
        assert!(inf > at(i64::MAX, i64::MAX - 1));
        assert!(inf > at(i64::MAX - 1, i64::MAX));
        assert!(inf > VirtualInstant::ZERO);
        assert!(inf.is_infinity());
        assert!(!at(i64::MAX, 0).is_infinity());
    }

    #[test]
    fn zero_default_from_ticks_and_from_seconds_build_the_expected_instant() {
        assert_eq!(VirtualInstant::ZERO, at(0, 0));
        assert_eq!(VirtualInstant::default(), VirtualInstant::ZERO);
        assert_eq!(VirtualInstant::from_ticks(7), at(7, 0));
        let r = TickRate::DEFAULT;
        assert_eq!(VirtualInstant::from_seconds(1.5, r), Ok(at(96, 0)));
        assert_eq!(at(96, 9).to_seconds(r), 1.5);
        assert!(VirtualInstant::from_seconds(f64::NAN, r).is_err());
    }

    #[test]
    fn adding_a_duration_moves_ticks_and_keeps_priority() {
        assert_eq!(at(10, 3).add_ticks(5), at(15, 3));
        assert_eq!(at(10, 3) + (-12), at(-2, 3));
        let mut t = at(1, 4);
        t += 63;
        assert_eq!(t, at(64, 4));
        // Reaching i64::MAX exactly is representable, so it is not INFINITY.
        assert_eq!(at(i64::MAX - 1, 3) + 1, at(i64::MAX, 3));
    }

    #[test]
    fn adding_saturates_instead_of_wrapping() {
        assert_eq!(at(i64::MAX - 1, 3) + 2, VirtualInstant::INFINITY);
        assert_eq!(at(1, 0) + i64::MAX, VirtualInstant::INFINITY);
        assert_eq!(VirtualInstant::INFINITY + 1, VirtualInstant::INFINITY);
        assert_eq!(VirtualInstant::INFINITY + (-1), VirtualInstant::INFINITY);
        assert_eq!(at(i64::MIN + 1, 7) + (-5), at(i64::MIN, 7));
        assert_eq!(at(-1, 7) + i64::MIN, at(i64::MIN, 7));
    }

    #[test]
    fn plus_adds_ticks_and_keeps_the_larger_priority() {
        assert_eq!(at(10, 3).plus(at(5, 8)), at(15, 8));
        assert_eq!(at(10, 8).plus(at(5, 3)), at(15, 8));
        assert_eq!(at(10, -2).plus(at(-4, -9)), at(6, -2));
        assert_eq!(at(i64::MAX, 0).plus(at(1, 0)), VirtualInstant::INFINITY);
        assert_eq!(
            VirtualInstant::INFINITY.plus(at(-10, 0)),
            VirtualInstant::INFINITY
        );
        assert_eq!(
            at(-10, 0).plus(VirtualInstant::INFINITY),
            VirtualInstant::INFINITY
        );
        assert_eq!(at(i64::MIN, 1).plus(at(-1, 2)), at(i64::MIN, 2));
    }

    #[test]
    fn displays_as_ticks_comma_priority_or_seconds_with_six_decimals() {
        assert_eq!(at(64, 3).to_string(), "(64,3)");
        assert_eq!(at(-2, -1).to_string(), "(-2,-1)");
        let r = TickRate::DEFAULT;
        assert_eq!(at(64, 3).display_seconds(r).to_string(), "(1.000000 s,3)");
        assert_eq!(at(65, 0).display_seconds(r).to_string(), "(1.015625 s,0)");
        assert_eq!(at(-32, 2).display_seconds(r).to_string(), "(-0.500000 s,2)");
        let ten = TickRate::new(10).unwrap();
        assert_eq!(at(1, 1).display_seconds(ten).to_string(), "(0.100000 s,1)");
    }

    #[test]
    fn serializes_as_ticks_and_priority_fields_and_reads_back() {
        let json = serde_json::to_string(&at(64, 3)).unwrap();
        assert_eq!(json, r#"{"ticks":64,"priority":3}"#);
        assert_eq!(
            serde_json::from_str::<VirtualInstant>(&json).unwrap(),
            at(64, 3)
        );
    }
}
