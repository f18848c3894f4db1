//! After a rollback and re-simulation, the predicted world is bit-identical to the verified one.

use simsync::deterministic::SessionMode;

use crate::common::{self, TestGame};

#[test]
fn every_resimulated_tick_matches_verification_with_200_bodies_and_6_ticks_delay() {
    let game = TestGame {
        boxes: 200,
        projectiles: true,
        ..TestGame::default()
    };
    let mut app = common::app(game, 6, SessionMode::Predicted, true);
    common::run_until_verified(&mut app, 1_000);
    let stats = common::stats(&app);
    // Real mispredictions and rollbacks happened...
    assert!(stats.rollbacks > 500, "{stats:?}");
    assert!(stats.mispredicted_inputs > 20, "{stats:?}");
    assert!(stats.resimulated_ticks > 1_000, "{stats:?}");
    // ...and every predicted tick whose inputs turned out right equals the verified tick:
    // f32 bits of Transform and Velocity of every body, the entity set (slots and generations).
    assert!(stats.resim_ticks_checked > 500, "{stats:?}");
    assert_eq!(
        stats.resim_ticks_matching, stats.resim_ticks_checked,
        "{stats:?}"
    );
    assert!(stats.unregistered_components.is_empty(), "{stats:?}");
}

#[test]
fn skipping_rollbacks_when_predictions_hold_keeps_every_check_matching() {
    let game = TestGame {
        boxes: 200,
        projectiles: true,
        ..TestGame::default()
    };
    let mut skipping = common::app_with_skip(game.clone(), 6, SessionMode::Predicted, true, true);
    let mut always = common::app(game, 6, SessionMode::Predicted, true);
    common::run_until_verified(&mut skipping, 600);
    common::run_until_verified(&mut always, 600);
    let (s, a) = (common::stats(&skipping), common::stats(&always));
    // Most updates skip the copy; the ones that don't are exactly the mispredicted ones.
    assert!(s.skipped_rollbacks > s.rollbacks, "{s:?}");
    assert_eq!(a.skipped_rollbacks, 0);
    assert!(s.rollbacks > 10, "{s:?}");
    assert_eq!(s.resim_ticks_matching, s.resim_ticks_checked);
    assert!(s.resim_ticks_checked > 300, "{s:?}");
    // Same verified history either way.
    assert_eq!(s.checksum_history[..600], a.checksum_history[..600]);
}
