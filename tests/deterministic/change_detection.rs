//! Rollback restores values without spurious change detection, and `Time` advances exactly one
//! tick per `SimulationTick`.

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
