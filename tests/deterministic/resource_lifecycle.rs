//! A registered resource follows the timeline: absent before its tick, present after.

use simsync::deterministic::SessionMode;
use simsync::prelude::*;

use crate::common::{self, Flag, TestGame};

#[test]
fn resource_inserted_at_t_is_absent_after_rollback_to_before_t_and_back_after_resimulation() {
    let mut app = common::app(
        TestGame {
            boxes: 25,
            flag_tick: Some(60),
            ..TestGame::default()
        },
        20,
        SessionMode::Predicted,
        false,
    );
    // Run until the predicted world is past tick 60 while the verified world is not.
    for _ in 0..200 {
        let s = common::stats(&app);
        if s.predicted_tick >= 65 {
            break;
        }
        app.update();
    }
    let s = common::stats(&app);
    assert!(s.predicted_tick >= 65 && s.verified_tick < 60, "{s:?}");
    {
        let mut w = app.world_mut().resource_mut::<SimulationWorlds>();
        assert_eq!(w.predicted().get_resource::<Flag>(), Some(&Flag(60)));
        assert!(w.verified().get_resource::<Flag>().is_none());
        w.rollback_predicted();
        assert!(w.predicted().get_resource::<Flag>().is_none());
    }
    for _ in 0..3 {
        app.update();
    }
    let w = app.world().resource::<SimulationWorlds>();
    assert!(common::stats(&app).predicted_tick > 60);
    assert_eq!(w.predicted().get_resource::<Flag>(), Some(&Flag(60)));
    common::run_until_verified(&mut app, 61);
    let w = app.world().resource::<SimulationWorlds>();
    assert_eq!(w.verified().get_resource::<Flag>(), Some(&Flag(60)));
}
