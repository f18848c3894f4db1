//! Property tests: the laws `VirtualInstant`, `TickRate` and `VirtualEventQueue` promise, checked
//! on random inputs.

use proptest::prelude::*;
use simsync_time::{TickRate, VirtualEventQueue, VirtualInstant};

/// Instants drawn both from a narrow range (so ties are common) and from the full `i64` range
/// (so the extremes and `INFINITY` show up).
fn instant() -> impl Strategy<Value = VirtualInstant> {
    prop_oneof![
        (-3_i64..3, -3_i64..3).prop_map(|(t, p)| VirtualInstant::new(t, p)),
        (any::<i64>(), any::<i64>()).prop_map(|(t, p)| VirtualInstant::new(t, p)),
        Just(VirtualInstant::INFINITY),
        Just(VirtualInstant::new(i64::MAX, i64::MAX - 1)),
        Just(VirtualInstant::new(i64::MIN, i64::MIN)),
    ]
}

fn rate() -> impl Strategy<Value = TickRate> {
    prop_oneof![
        Just(TickRate::DEFAULT),
        (1_u32..=u32::MAX).prop_map(|hz| TickRate::new(hz).unwrap()),
    ]
}

const TICKS_2_40: i64 = 1 << 40;

proptest! {
    #[test]
    fn order_is_lexicographic_on_ticks_then_priority(a in instant(), b in instant()) {
        prop_assert_eq!(a.cmp(&b), (a.ticks, a.priority).cmp(&(b.ticks, b.priority)));
        prop_assert_eq!(a.partial_cmp(&b), Some(a.cmp(&b)));
        prop_assert_eq!(a == b, a.ticks == b.ticks && a.priority == b.priority);
    }

    #[test]
    fn order_is_antisymmetric_and_total(a in instant(), b in instant()) {
        if a <= b && b <= a {
            prop_assert_eq!(a, b);
        }
        let exactly_one = [a < b, a == b, a > b].iter().filter(|&&x| x).count();
        prop_assert_eq!(exactly_one, 1);
        prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
    }

    #[test]
    fn order_is_transitive(a in instant(), b in instant(), c in instant()) {
        if a <= b && b <= c {
            prop_assert!(a <= c);
        }
        if a < b && b < c {
            prop_assert!(a < c);
        }
    }

    #[test]
    fn infinity_is_the_maximum(a in instant()) {
        prop_assert!(a <= VirtualInstant::INFINITY);
        prop_assert_eq!(a == VirtualInstant::INFINITY, a.is_infinity());
    }

    #[test]
    fn ticks_to_seconds_to_ticks_is_exact_below_2_40(
        ticks in -(TICKS_2_40 - 1)..TICKS_2_40,
        rate in rate(),
    ) {
        let seconds = rate.ticks_to_seconds(ticks);
        prop_assert_eq!(rate.seconds_to_ticks(seconds), Ok(ticks));
        let instant = VirtualInstant::new(ticks, 5);
        prop_assert_eq!(
            VirtualInstant::from_seconds(instant.to_seconds(rate), rate),
            Ok(VirtualInstant::from_ticks(ticks))
        );
    }

    #[test]
    fn seconds_to_ticks_to_seconds_is_within_half_a_tick(
        seconds in -1.0e6_f64..1.0e6,
        hz in 1_u32..=1_000_000,
    ) {
        let rate = TickRate::new(hz).unwrap();
        let ticks = rate.seconds_to_ticks(seconds).unwrap();
        let back = rate.ticks_to_seconds(ticks);
        let half_tick = 0.5 / f64::from(hz);
        // Allow for the f64 rounding of `seconds × hz` and of `ticks / hz` on top of the half
        // tick that rounding to a whole tick may cost.
        let slack = 4.0 * f64::EPSILON * seconds.abs().max(1.0);
        prop_assert!(
            (back - seconds).abs() <= half_tick + slack,
            "{seconds} s -> {ticks} ticks -> {back} s at {hz} Hz"
        );
    }

    #[test]
    fn micros_agree_with_seconds_at_64_hz(micros in -1.0e12_f64..1.0e12) {
        // At 64 Hz both scalings are exact up to the single rounding of the division.
        let rate = TickRate::DEFAULT;
        let via_micros = rate.micros_to_ticks(micros).unwrap();
        let exact = micros * 64.0 / 1.0e6;
        prop_assert!((via_micros as f64 - exact).abs() <= 0.5 + 1e-6 * exact.abs().max(1.0));
    }

    #[test]
    fn duration_round_trip_is_exact(ticks in 0_i64..TICKS_2_40, hz in 1_u32..=100_000_000) {
        let rate = TickRate::new(hz).unwrap();
        let duration = rate.ticks_to_duration(ticks).unwrap();
        prop_assert_eq!(rate.duration_to_ticks(duration), Ok(ticks));
    }

    #[test]
    fn adding_never_wraps(a in instant(), d in any::<i64>()) {
        let sum = a + d;
        if d >= 0 {
            prop_assert!(sum >= a, "{a} + {d} = {sum}");
        } else {
            prop_assert!(sum <= a || a.is_infinity(), "{a} + {d} = {sum}");
        }
        if a.is_infinity() {
            prop_assert_eq!(sum, VirtualInstant::INFINITY);
        } else {
            let exact = i128::from(a.ticks) + i128::from(d);
            if exact > i128::from(i64::MAX) {
                prop_assert_eq!(sum, VirtualInstant::INFINITY);
            } else if exact < i128::from(i64::MIN) {
                prop_assert_eq!(sum, VirtualInstant::new(i64::MIN, a.priority));
            } else {
                prop_assert_eq!(sum, VirtualInstant::new(exact as i64, a.priority));
            }
        }
    }

    #[test]
    fn plus_never_wraps_and_keeps_the_larger_priority(a in instant(), b in instant()) {
        let sum = a.plus(b);
        prop_assert_eq!(sum, b.plus(a));
        if b.ticks >= 0 {
            prop_assert!(sum >= a, "{a} plus {b} = {sum}");
        }
        let exact = i128::from(a.ticks) + i128::from(b.ticks);
        if !a.is_infinity() && !b.is_infinity() && exact <= i128::from(i64::MAX) {
            prop_assert_eq!(sum.priority, a.priority.max(b.priority));
            prop_assert_eq!(i128::from(sum.ticks), exact.max(i128::from(i64::MIN)));
        }
    }

    #[test]
    fn queue_pops_in_instant_then_insertion_order(
        schedule in prop::collection::vec((0_i64..20, 0_i64..3), 0..200),
    ) {
        let mut queue = VirtualEventQueue::new();
        for (index, &(ticks, priority)) in schedule.iter().enumerate() {
            queue.schedule(VirtualInstant::new(ticks, priority), index);
        }
        let popped: Vec<(VirtualInstant, usize)> =
            queue.drain_due(VirtualInstant::INFINITY).collect();

        let mut expected: Vec<(VirtualInstant, usize)> = schedule
            .iter()
            .enumerate()
            .map(|(index, &(t, p))| (VirtualInstant::new(t, p), index))
            .collect();
        expected.sort(); // by instant, then by insertion index
        prop_assert_eq!(popped, expected);
        prop_assert!(queue.is_empty());
    }

    #[test]
    fn queue_matches_a_sorted_model_under_interleaved_operations(
        ops in prop::collection::vec(
            prop_oneof![
                (0_i64..30, 0_i64..3).prop_map(|(t, p)| Some(VirtualInstant::new(t, p))),
                Just(None),
            ],
            0..300,
        ),
    ) {
        let mut queue = VirtualEventQueue::new();
        let mut model: Vec<(VirtualInstant, usize)> = Vec::new();
        let mut now = VirtualInstant::ZERO;
        for (index, op) in ops.into_iter().enumerate() {
            match op {
                Some(at) => {
                    queue.schedule(at, index);
                    model.push((at, index));
                }
                None => {
                    // Advance time by one tick and pop what is due.
                    now += 1;
                    let popped: Vec<_> = queue.drain_due(now).collect();
                    model.sort();
                    let split = model.partition_point(|&(at, _)| at <= now);
                    let due: Vec<_> = model.drain(..split).collect();
                    prop_assert_eq!(popped, due);
                }
            }
            prop_assert_eq!(queue.len(), model.len());
            prop_assert_eq!(queue.peek_next_instant(), model.iter().map(|&(at, _)| at).min());
        }
    }

    #[test]
    fn cloned_queue_pops_identically(
        before in prop::collection::vec((0_i64..10, 0_i64..2), 0..50),
        after in prop::collection::vec((0_i64..10, 0_i64..2), 0..50),
    ) {
        let mut queue = VirtualEventQueue::new();
        for (i, &(t, p)) in before.iter().enumerate() {
            queue.schedule(VirtualInstant::new(t, p), i);
        }
        let mut copy = queue.clone();
        for (i, &(t, p)) in after.iter().enumerate() {
            queue.schedule(VirtualInstant::new(t, p), 1000 + i);
            copy.schedule(VirtualInstant::new(t, p), 1000 + i);
        }
        let a: Vec<_> = queue.drain_due(VirtualInstant::INFINITY).collect();
        let b: Vec<_> = copy.drain_due(VirtualInstant::INFINITY).collect();
        prop_assert_eq!(a, b);
    }
}
