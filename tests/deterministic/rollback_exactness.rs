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

#[test]
fn bodies_asleep_before_a_rollback_are_asleep_alike_at_every_resimulated_tick() {
    use simsync::deterministic::PredictionCheck;
    // Resting piles with sleeping on, inputs 6 ticks late: every update rolls back into ticks
    // where most boxes sleep. The full prediction check digests every registered component of
    // every body, `Sleeping` included, at each re-simulated tick whose inputs held.
    let game = TestGame {
        boxes: 200,
        ..TestGame::default()
    };
    let mut app = common::app_with_game(game, 2, 6, |plugin| {
        plugin.edit_config(|c| {
            c.mode = SessionMode::Predicted;
            c.verify_predictions = true;
            c.prediction_check = PredictionCheck::AllRegisteredState;
        })
    });
    let mut asleep_max = 0;
    for _ in 0..500 {
        app.update();
        let worlds = app
            .world()
            .resource::<simsync::deterministic::SimulationWorlds>();
        asleep_max = asleep_max.max(asleep(worlds.verified()).len());
    }
    let s = common::stats(&app);
    assert!(asleep_max > 50, "piles fall asleep: {asleep_max}");
    assert!(s.rollbacks > 300, "{s:?}");
    assert!(s.mispredicted_inputs > 10, "{s:?}");
    assert!(s.resim_ticks_checked > 300, "{s:?}");
    assert_eq!(s.resim_ticks_uncovered, 0, "{s:?}");
    assert_eq!(s.resim_ticks_matching, s.resim_ticks_checked, "{s:?}");
}

/// A world's checksum and its sleeping bodies (entity bits, sorted).
type WorldState = (u64, Vec<u64>);

/// The sleeping bodies of `world` (entity bits, sorted).
fn asleep(world: &bevy::prelude::World) -> Vec<u64> {
    let mut q = world
        .try_query::<(bevy::prelude::Entity, &bevy_rapier3d::prelude::Sleeping)>()
        .expect("Sleeping is registered");
    let mut list: Vec<u64> = q
        .iter(world)
        .filter(|(_, s)| s.sleeping)
        .map(|(e, _)| e.to_bits())
        .collect();
    list.sort_unstable();
    list
}

/// The checksums and the sleeping bodies (by entity) of both worlds, when both are at the same
/// tick and the predicted world has a state of its own (it does not share the verified one).
/// Reads only: never ends a sharing.
fn equal_tick_state(app: &mut bevy::prelude::App) -> Option<(WorldState, WorldState)> {
    use bevy::prelude::*;
    use simsync::prelude::*;
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let tick = |w: &World| w.resource::<SimTick>().0;
    if worlds.predicted_shares_verified() || tick(worlds.verified()) != tick(worlds.predicted()) {
        return None;
    }
    let verified = (worlds.verified_checksum(), asleep(worlds.verified()));
    let predicted = (worlds.predicted_checksum(), asleep(worlds.predicted()));
    Some((verified, predicted))
}

#[test]
fn at_zero_latency_the_predicted_world_shares_the_verified_state_without_a_copy_or_a_tick() {
    use simsync::prelude::*;
    let game = TestGame {
        boxes: 200,
        projectiles: true,
        ..TestGame::default()
    };
    let mut sharing = common::app_with_skip(game.clone(), 0, SessionMode::Predicted, true, true);
    let mut copying = common::app(game, 0, SessionMode::Predicted, true);
    let mut asleep_max = 0;
    for update in 0..400 {
        sharing.update();
        copying.update();
        let worlds = sharing.world().resource::<SimulationWorlds>();
        assert!(
            worlds.predicted_shares_verified(),
            "update {update} {:?}",
            common::stats(&sharing)
        );
        let tick = |w: &bevy::prelude::World| w.resource::<SimTick>().0;
        assert_eq!(tick(worlds.predicted()), tick(worlds.verified()));
        asleep_max = asleep_max.max(asleep(worlds.predicted()).len());
        // The copying session's predicted world, copied every update, equals the state the
        // sharing session presents.
        let other = copying.world().resource::<SimulationWorlds>();
        assert_eq!(asleep(other.predicted()), asleep(worlds.predicted()));
    }
    let (s, c) = (common::stats(&sharing), common::stats(&copying));
    // Every update verified the tick the last one predicted up to: a shared advance each
    // time, no copy, no rollback, and the predicted world never simulated a tick.
    assert!(s.shared_advances >= 390, "{s:?}");
    assert_eq!(s.rollbacks, 0, "{s:?}");
    assert_eq!((s.catch_up_ticks, s.catch_up_copies), (0, 0), "{s:?}");
    assert_eq!(s.ticks_predicted, 0, "{s:?}");
    assert_eq!(s.predicted_tick, s.verified_tick, "{s:?}");
    assert_eq!(c.shared_advances, 0, "{c:?}");
    // Neither the sharing nor the copies of a timeline whose predictions held changed a state.
    assert_eq!(s.corrective_rollbacks, 0, "{s:?}");
    assert!(c.rollbacks >= 390, "{c:?}");
    assert_eq!(c.corrective_rollbacks, 0, "{c:?}");
    assert_eq!(s.checksum_history, c.checksum_history);
    assert!(asleep_max > 50, "piles fall asleep: {asleep_max}");
    // Asking for the predicted world mutably ends the sharing with a copy: a world of its own,
    // equal to the verified one, whose changes do not reach the verified world.
    let mut worlds = sharing.world_mut().resource_mut::<SimulationWorlds>();
    let verified = worlds.verified_checksum();
    let predicted = worlds.predicted_mut();
    let mut q = predicted.query::<&mut bevy::prelude::Transform>();
    for mut t in q.iter_mut(predicted) {
        t.translation.y += 1.0;
    }
    assert!(!worlds.predicted_shares_verified());
    assert_ne!(worlds.predicted_checksum(), verified);
    assert_eq!(worlds.verified_checksum(), verified);
}

#[test]
fn a_mispredicted_timeline_is_copied_and_a_held_one_shared_under_jitter() {
    let mut app = jittery_app(2, 11, 1);
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
    assert!(s.shared_advances > 10, "{s:?}");
    assert!(s.rollbacks > 10, "{s:?}");
    // Only copies replace a mispredicted timeline.
    assert!(s.corrective_rollbacks > 10, "{s:?}");
    assert!(s.corrective_rollbacks <= s.rollbacks, "{s:?}");
    // Sharings ended by catching up one tick, and every re-simulated tick after them matched
    // verification.
    assert!(s.catch_up_ticks > 5, "{s:?}");
    assert!(compared > 0, "{compared} {s:?}");
    assert_eq!(s.resim_ticks_matching, s.resim_ticks_checked, "{s:?}");
}

#[test]
fn a_sharing_that_ends_far_behind_is_ended_by_a_copy_and_predicts_exactly() {
    // Three ticks per update, inputs 0 or 1 tick late: updates that verify all three ticks
    // share (the predicted sub-world falls three ticks behind each), the others must predict.
    let mut app = jittery_app(1, 5, 3);
    for _ in 0..300 {
        app.update();
    }
    let s = common::stats(&app);
    assert!(s.catch_up_copies > 50, "{s:?}");
    assert!(s.shared_advances > 100, "{s:?}");
    // Every tick predicted after a catch-up copy was compared with its verification (the
    // inputs held) and matched: the copy restored the verified state exactly.
    assert!(s.resim_ticks_checked > 100, "{s:?}");
    assert_eq!(s.resim_ticks_matching, s.resim_ticks_checked, "{s:?}");
}

/// A zero-latency session of 200 boxes with projectiles, two players, predictions verified and
/// rollback skipping on, whose inputs arrive `0..=jitter` ticks late (seeded), polling
/// `ticks_per_update` ticks per update.
fn jittery_app(jitter: u32, seed: u64, ticks_per_update: u32) -> bevy::prelude::App {
    use simsync::deterministic::{LocalSessionConfig, SessionClock};
    let game = TestGame {
        boxes: 200,
        projectiles: true,
        ..TestGame::default()
    };
    common::app_with_game(game, 2, 0, |plugin| {
        plugin.edit_config(|c| {
            c.mode = SessionMode::Predicted;
            c.verify_predictions = true;
            c.skip_rollback_when_predictions_hold = true;
            c.clock = SessionClock::Stepped { ticks_per_update };
            c.local = LocalSessionConfig {
                latency_ticks: vec![0],
                jitter_ticks: jitter,
                seed,
                known_players: vec![0],
            };
        })
    })
}

#[test]
fn rollbacks_count_discarded_predictions_none_at_zero_latency_some_with_latency() {
    // The default configuration (rollbacks skipped when predictions hold), inputs that change
    // every few ticks, 300 updates at zero latency and at four ticks of input latency.
    let game = TestGame {
        boxes: 20,
        projectiles: true,
        ..TestGame::default()
    };
    let mut zero = common::app_with_skip(game.clone(), 0, SessionMode::Predicted, false, true);
    let mut late = common::app_with_skip(game, 4, SessionMode::Predicted, false, true);
    for _ in 0..300 {
        zero.update();
        late.update();
    }
    let (z, l) = (common::stats(&zero), common::stats(&late));
    // Zero latency: every update takes the verified timeline; nothing predicted is discarded.
    assert!(z.ticks_verified >= 290, "{z:?}");
    assert!(z.shared_advances >= 290, "{z:?}");
    assert_eq!(
        (z.rollbacks, z.corrective_rollbacks, z.resimulated_ticks),
        (0, 0, 0),
        "{z:?}"
    );
    // Four ticks late with changing inputs: some predictions were wrong, and each rollback
    // replaced a timeline a confirmed input contradicted and re-simulated its ticks.
    assert!(l.mispredicted_inputs > 5, "{l:?}");
    assert!(l.rollbacks > 5, "{l:?}");
    assert_eq!(l.rollbacks, l.corrective_rollbacks, "{l:?}");
    assert!(l.rollbacks < l.ticks_verified, "{l:?}");
    assert!(l.resimulated_ticks >= l.rollbacks, "{l:?}");
}
