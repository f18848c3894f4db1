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

/// A world's checksum and its sleeping bodies (entity bits, sorted).
type WorldState = (u64, Vec<u64>);

/// The checksums and the sleeping bodies (by entity) of both worlds, when both are at the same
/// tick.
fn equal_tick_state(app: &mut bevy::prelude::App) -> Option<(WorldState, WorldState)> {
    use bevy::prelude::*;
    use simsync::prelude::*;
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let tick = |w: &World| w.resource::<SimTick>().0;
    if tick(worlds.verified()) != tick(worlds.predicted()) {
        return None;
    }
    fn asleep(world: &mut World) -> Vec<u64> {
        let mut q = world.query::<(Entity, &bevy_rapier3d::prelude::Sleeping)>();
        let mut list: Vec<u64> = q
            .iter(world)
            .filter(|(_, s)| s.sleeping)
            .map(|(e, _)| e.to_bits())
            .collect();
        list.sort_unstable();
        list
    }
    let verified = (worlds.verified_checksum(), asleep(worlds.verified_mut()));
    let predicted = (worlds.predicted_checksum(), asleep(worlds.predicted_mut()));
    Some((verified, predicted))
}

#[test]
fn at_zero_latency_the_predicted_world_advances_instead_of_copying_and_equals_verification() {
    let game = TestGame {
        boxes: 200,
        projectiles: true,
        ..TestGame::default()
    };
    let mut advancing = common::app_with_skip(game.clone(), 0, SessionMode::Predicted, true, true);
    let mut copying = common::app(game, 0, SessionMode::Predicted, true);
    let mut compared = 0;
    let mut asleep = 0;
    for _ in 0..400 {
        advancing.update();
        copying.update();
        let (verified, predicted) = equal_tick_state(&mut advancing).expect("zero latency");
        assert_eq!(
            verified,
            predicted,
            "tick {}",
            common::stats(&advancing).verified_tick
        );
        compared += 1;
        asleep = asleep.max(verified.1.len());
    }
    let (s, c) = (common::stats(&advancing), common::stats(&copying));
    // Every update verified the tick the last one predicted up to: a rollback each time, none
    // of them a copy.
    assert!(s.rollbacks >= 390, "{s:?}");
    assert_eq!(s.advanced_rollbacks, s.rollbacks, "{s:?}");
    assert_eq!(c.advanced_rollbacks, 0, "{c:?}");
    assert_eq!(s.checksum_history, c.checksum_history);
    assert_eq!(compared, 400);
    assert!(asleep > 50, "piles fall asleep: {asleep}");
}

#[test]
fn a_mispredicted_timeline_is_copied_and_a_held_one_advanced_under_jitter() {
    use simsync::deterministic::LocalSessionConfig;
    let game = TestGame {
        boxes: 200,
        projectiles: true,
        ..TestGame::default()
    };
    let mut app = common::app_with_game(game, 2, 0, |plugin| {
        plugin
            .mode(SessionMode::Predicted)
            .verify_predictions(true)
            .skip_rollback_when_predictions_hold(true)
            .local_session(LocalSessionConfig {
                latency_ticks: vec![0],
                jitter_ticks: 2,
                seed: 11,
                known_players: vec![0],
            })
    });
    let mut compared = 0;
    for _ in 0..600 {
        app.update();
        if let Some((verified, predicted)) = equal_tick_state(&mut app) {
            assert_eq!(verified, predicted, "{:?}", common::stats(&app));
            compared += 1;
        }
    }
    let s = common::stats(&app);
    assert!(s.mispredicted_inputs > 10, "{s:?}");
    assert!(s.advanced_rollbacks > 10, "{s:?}");
    assert!(s.rollbacks > s.advanced_rollbacks + 10, "{s:?}");
    assert!(compared > 30, "{compared} {s:?}");
    assert_eq!(s.resim_ticks_matching, s.resim_ticks_checked, "{s:?}");
}
