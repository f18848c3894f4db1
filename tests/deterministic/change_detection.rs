//! Rollback restores values without spurious change detection, and `Time` advances exactly one
//! tick per `SimulationTick`.

use bevy::prelude::{App, World};
use simsync::deterministic::SessionMode;
use simsync::prelude::*;

use crate::common::{self, BadDeltas, CrateChanges, TestGame};

#[test]
fn restoring_unchanged_values_triggers_no_changed_and_time_delta_is_one_tick() {
    let boxes = 50;
    let mut app = common::app(
        TestGame {
            boxes,
            ..TestGame::default()
        },
        6,
        SessionMode::Predicted,
        false,
    );
    common::run_until_verified(&mut app, 300);
    let stats = common::stats(&app);
    assert!(stats.rollbacks > 200, "{stats:?}");
    let w = app.world().resource::<SimulationWorlds>();
    // Crate components are never written after spawn: the only detection is the one `Added`
    // (which counts as changed) in the setup tick, in both worlds, despite ~300 rollbacks.
    assert_eq!(w.verified().resource::<CrateChanges>().0, u64::from(boxes));
    assert_eq!(w.predicted().resource::<CrateChanges>().0, u64::from(boxes));
    // Time: every tick had a delta of exactly 1/64 s, in verification and re-simulation.
    let (bad_v, all_v) = {
        let d = w.verified().resource::<BadDeltas>();
        (d.0, d.1)
    };
    let (bad_p, all_p) = {
        let d = w.predicted().resource::<BadDeltas>();
        (d.0, d.1)
    };
    assert_eq!((bad_v, bad_p), (0, 0));
    assert!(all_v >= 300 && all_p > all_v, "{all_v} {all_p}");
}

/// Advances `world`'s change tick by `by` without running a system, in steps of 2²⁸ (below
/// Bevy's check threshold of 518,400,000) with `check_change_ticks` after each, as a long
/// session does after every tick: what days of ticks do to the change ticks, in seconds.
fn age_change_ticks(world: &mut World, by: u64) {
    let mut left = by;
    while left > 0 {
        let step = left.min(1 << 28);
        // Eight a round: this loop is most of the test's time in an unoptimized build.
        let mut done = 0;
        while done + 8 <= step {
            world.increment_change_tick();
            world.increment_change_tick();
            world.increment_change_tick();
            world.increment_change_tick();
            world.increment_change_tick();
            world.increment_change_tick();
            world.increment_change_tick();
            world.increment_change_tick();
            done += 8;
        }
        while done < step {
            world.increment_change_tick();
            done += 1;
        }
        world.check_change_ticks();
        left -= step;
    }
}

fn age_both_worlds(app: &mut App, by: u64) {
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    age_change_ticks(worlds.verified_mut(), by);
    age_change_ticks(worlds.predicted_mut(), by);
}

#[test]
fn change_detection_and_rollback_stay_exact_after_the_change_ticks_age_past_the_u32_wrap() {
    let boxes = 20;
    let game = || TestGame {
        boxes,
        ..TestGame::default()
    };
    let mut aged = common::app(game(), 6, SessionMode::Predicted, false);
    let mut reference = common::app(game(), 6, SessionMode::Predicted, false);
    common::run_until_verified(&mut aged, 100);
    let before = aged
        .world()
        .resource::<SimulationWorlds>()
        .verified()
        .read_change_tick();
    // 2³¹ + 2²⁹ change ticks: the crates, added at setup and never written since, are more than
    // 2³¹ change ticks old (serial arithmetic would call them newer than now) and not yet
    // clamped by Bevy (beyond 3.26 × 10⁹). At ~60 system runs a tick and 64 ticks/s, 8 days.
    age_both_worlds(&mut aged, (1 << 31) + (1 << 29));
    common::run_until_verified(&mut aged, 200);
    // Then past the u32 wrap of the change tick counter itself (16 days at that pace).
    age_both_worlds(&mut aged, 1 << 31);
    common::run_until_verified(&mut aged, 300);
    common::run_until_verified(&mut reference, 300);
    let worlds = aged.world().resource::<SimulationWorlds>();
    let after = worlds.verified().read_change_tick();
    // Aged by 2³² + 2²⁹ in all: the counter went round once and is 2²⁹ plus the ticks run
    // past where it was.
    let advanced = after.get().wrapping_sub(before.get());
    assert!(
        (1 << 29..(1 << 29) + 1_000_000).contains(&advanced),
        "{before:?} → {after:?}"
    );
    let stats = common::stats(&aged);
    assert!(stats.rollbacks > 200, "{stats:?}");
    // No rollback after the ageing made an old crate look changed or added, in either world.
    assert_eq!(
        worlds.verified().resource::<CrateChanges>().0,
        u64::from(boxes)
    );
    assert_eq!(
        worlds.predicted().resource::<CrateChanges>().0,
        u64::from(boxes)
    );
    // And every tick's state is the one of the session that did not age.
    let expected = common::stats(&reference).checksum_history;
    assert_eq!(stats.checksum_history[..300], expected[..300]);
}
