//! No silent divergence: state a rollback does not restore (an entity spawned without
//! `SimEntity`, a component neither registered nor ignored) is reported as a message and in
//! `SessionStats`, and fails `verify_predictions`; the full check
//! (`PredictionCheck::AllRegisteredState`) catches a registered value that is not hashed.

use bevy::prelude::*;
use simsync::deterministic::{
    MismatchCause, SessionMode, UncheckedState, UnregisteredComponent, UnsimulatedEntity, WorldRole,
};
use simsync::prelude::*;

use crate::common::{self, TestGame};

/// A score every ball gains once per simulated tick (the new-user trial's misuse probe).
#[derive(Component, Clone, Copy, Debug, PartialEq, Reflect)]
#[reflect(Component)]
struct Score(u32);

impl SimHash for Score {
    fn sim_hash(&self, hasher: &mut simsync::deterministic::StateHasher) {
        self.0.sim_hash(hasher);
    }
}

/// Three scoring balls, spawned through `SimCommands` or with a plain `commands.spawn`, with
/// `Score` registered or forgotten.
#[derive(Clone)]
struct ScoreGame {
    plain_spawn: bool,
    register_score: bool,
}

impl Plugin for ScoreGame {
    fn build(&self, app: &mut App) {
        if self.register_score {
            app.rollback_hashed_component::<Score>();
        }
        let plain = self.plain_spawn;
        app.add_systems(SimulationStartup, move |mut sim: SimCommands| {
            for i in 0..3 {
                let ball = (Transform::from_xyz(i as f32, 1.0, 0.0), Score(0));
                if plain {
                    sim.commands.spawn(ball);
                } else {
                    sim.spawn(ball).expect("slot");
                }
            }
        })
        .add_systems(
            SimulationTick,
            (|mut scores: Query<&mut Score>| {
                for mut score in &mut scores {
                    score.0 += 1;
                }
            })
            .in_set(SimulationSet::Game),
        );
    }
}

/// Every message of the divergence family the main app received.
#[derive(Resource, Default)]
struct Seen {
    mismatches: Vec<PredictionMismatch>,
    unsimulated: Vec<UnsimulatedEntity>,
    unregistered: Vec<String>,
    unchecked: Vec<String>,
}

fn collect(
    mut seen: ResMut<Seen>,
    mut mismatches: MessageReader<PredictionMismatch>,
    mut unsimulated: MessageReader<UnsimulatedEntity>,
    mut unregistered: MessageReader<UnregisteredComponent>,
    mut unchecked: MessageReader<UncheckedState>,
) {
    seen.mismatches.extend(mismatches.read().copied());
    seen.unsimulated.extend(unsimulated.read().cloned());
    seen.unregistered
        .extend(unregistered.read().map(|m| m.type_name.clone()));
    seen.unchecked
        .extend(unchecked.read().map(|m| m.type_name.clone()));
}

fn with_seen(mut app: App) -> App {
    app.init_resource::<Seen>().add_systems(Update, collect);
    app
}

/// The scores of every entity carrying one in `world`, sorted.
fn scores(world: &mut World) -> Vec<u32> {
    let mut query = world.query::<&Score>();
    let mut list: Vec<u32> = query.iter(world).map(|s| s.0).collect();
    list.sort();
    list
}

/// A world's scores and its tick.
type ScoresAt = (Vec<u32>, Tick);

/// Runs `game` with the prediction check until the verified tick is 296; returns the verified
/// and the predicted scores with both worlds' ticks.
fn run_scores(game: ScoreGame) -> (App, ScoresAt, ScoresAt) {
    let mut app = with_seen(common::app_with_game(game, 2, 4, |p| {
        p.edit_config(|c| {
            c.verify_predictions = true;
        })
    }));
    common::run_until_verified(&mut app, 296);
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let verified = (
        scores(worlds.verified_mut()),
        worlds.verified().resource::<SimTick>().0,
    );
    let predicted = (
        scores(worlds.predicted_mut()),
        worlds.predicted().resource::<SimTick>().0,
    );
    (app, verified, predicted)
}

#[test]
fn simulation_entities_with_a_registered_score_predict_right_and_pass_the_check() {
    let (app, (verified, vt), (predicted, pt)) = run_scores(ScoreGame {
        plain_spawn: false,
        register_score: true,
    });
    let right = |tick: Tick| vec![tick as u32 + 1; 3];
    assert_eq!((vt, pt), (296, 300));
    assert_eq!(verified, right(vt));
    assert_eq!(predicted, right(pt));
    let stats = common::stats(&app);
    assert!(stats.resim_ticks_checked > 250, "{stats:?}");
    assert_eq!(stats.resim_ticks_matching, stats.resim_ticks_checked);
    assert_eq!(stats.unsimulated_entities, 0);
    let seen = app.world().resource::<Seen>();
    assert!(seen.mismatches.is_empty() && seen.unsimulated.is_empty());
    assert!(seen.unregistered.is_empty());
}

#[test]
fn a_plain_spawn_in_a_simulation_world_is_reported_and_fails_the_prediction_check() {
    let (app, (verified, vt), (predicted, pt)) = run_scores(ScoreGame {
        plain_spawn: true,
        register_score: true,
    });
    // Nothing restores the plain entities: every re-simulated tick counts again.
    assert_eq!((vt, pt), (296, 300));
    assert_eq!(verified, vec![297; 3]);
    assert_eq!(predicted, vec![1_189; 3], "301 is right");
    let stats = common::stats(&app);
    assert_eq!(stats.unsimulated_entities, 6, "3 in each world");
    assert_eq!(stats.unsimulated_entity_reports, 2);
    let seen = app.world().resource::<Seen>();
    let mut roles: Vec<(WorldRole, u32)> = seen
        .unsimulated
        .iter()
        .map(|m| (m.world, m.entities))
        .collect();
    roles.sort_by_key(|(role, _)| *role == WorldRole::Predicted);
    assert_eq!(roles, [(WorldRole::Verified, 3), (WorldRole::Predicted, 3)]);
    assert!(
        seen.unsimulated[0]
            .components
            .iter()
            .any(|c| c.contains("Score"))
    );
    // The check fails on every tick it compares, and says why.
    assert!(stats.resim_ticks_checked > 250, "{stats:?}");
    assert_eq!(stats.resim_ticks_matching, 0);
    assert_eq!(stats.resim_ticks_uncovered, stats.resim_ticks_checked);
    assert_eq!(seen.mismatches.len() as u64, stats.resim_ticks_checked);
    assert!(
        seen.mismatches
            .iter()
            .all(|m| m.cause == MismatchCause::UncoveredState)
    );
}

#[test]
fn a_forgotten_registration_is_reported_and_fails_the_prediction_check() {
    let (app, (verified, vt), (predicted, pt)) = run_scores(ScoreGame {
        plain_spawn: false,
        register_score: false,
    });
    assert_eq!((vt, pt), (296, 300));
    assert_eq!(verified, vec![297; 3]);
    assert_eq!(predicted, vec![1_189; 3], "301 is right");
    let stats = common::stats(&app);
    let seen = app.world().resource::<Seen>();
    assert_eq!(seen.unregistered.len(), 1, "{:?}", seen.unregistered);
    assert!(seen.unregistered[0].ends_with("Score"));
    assert_eq!(stats.unregistered_components, seen.unregistered);
    assert_eq!(stats.unsimulated_entities, 0);
    assert!(stats.resim_ticks_checked > 250, "{stats:?}");
    assert_eq!(stats.resim_ticks_matching, 0);
    assert_eq!(stats.resim_ticks_uncovered, stats.resim_ticks_checked);
    assert_eq!(seen.mismatches.len() as u64, stats.resim_ticks_checked);
    assert!(
        seen.mismatches
            .iter()
            .all(|m| m.cause == MismatchCause::UncoveredState)
    );
}

/// Counts the ticks this world simulated; never rolled back (the bug under test).
#[derive(Resource, Default)]
struct TicksSimulatedHere(u32);

/// Registered but not hashed: set from the world's own tick count, so it mispredicts after
/// every re-simulation although every input was right.
#[derive(Component, Clone, Copy, Debug, PartialEq, Reflect)]
#[reflect(Component)]
struct Tally(u32);

/// As [`Tally`], without reflection: the full check cannot compare it.
#[derive(Component, Clone, Copy, Debug, PartialEq)]
struct OpaqueTally(u32);

#[derive(Clone)]
struct TallyGame;

impl Plugin for TallyGame {
    fn build(&self, app: &mut App) {
        app.register_type::<Tally>()
            .rollback_component::<Tally>()
            .rollback_component::<OpaqueTally>()
            .init_resource::<TicksSimulatedHere>()
            .add_systems(SimulationStartup, |mut sim: SimCommands| {
                sim.spawn((Tally(0), OpaqueTally(0))).expect("slot");
            })
            .add_systems(
                SimulationTick,
                (|mut here: ResMut<TicksSimulatedHere>,
                  mut tallies: Query<(&mut Tally, &mut OpaqueTally)>| {
                    here.0 += 1;
                    for (mut tally, mut opaque) in &mut tallies {
                        tally.0 = here.0;
                        opaque.0 = here.0;
                    }
                })
                .in_set(SimulationSet::Game),
            );
    }
}

#[test]
fn a_registered_unhashed_component_that_mispredicts_is_caught_only_by_the_full_check() {
    let mut checksum_only = with_seen(common::app_with_game(TallyGame, 2, 4, |p| {
        p.edit_config(|c| {
            c.verify_predictions = true;
        })
    }));
    let mut full = with_seen(common::app_with_game(TallyGame, 2, 4, |p| {
        p.edit_config(|c| {
            c.verify_predictions = true;
            c.prediction_check = PredictionCheck::AllRegisteredState;
        })
    }));
    common::run_until_verified(&mut checksum_only, 200);
    common::run_until_verified(&mut full, 200);
    // The checksum does not include Tally: the check is blind to it.
    let blind = common::stats(&checksum_only);
    assert!(blind.resim_ticks_checked > 150, "{blind:?}");
    assert_eq!(blind.resim_ticks_matching, blind.resim_ticks_checked);
    // The full check compares it (through reflection) and fails every compared tick.
    let stats = common::stats(&full);
    assert_eq!(stats.resim_ticks_checked, blind.resim_ticks_checked);
    assert_eq!(stats.resim_ticks_matching, 0);
    assert_eq!(stats.resim_ticks_uncovered, 0);
    let seen = full.world().resource::<Seen>();
    assert_eq!(seen.mismatches.len() as u64, stats.resim_ticks_checked);
    assert!(
        seen.mismatches
            .iter()
            .all(|m| m.cause == MismatchCause::StateDiffers && m.predicted != m.verified)
    );
    // OpaqueTally has neither SimHash nor reflection: named once, not silently trusted.
    assert_eq!(seen.unchecked.len(), 1, "{:?}", seen.unchecked);
    assert!(seen.unchecked[0].ends_with("OpaqueTally"));
    assert_eq!(stats.unchecked_types, seen.unchecked);
}

#[test]
fn the_full_check_finds_no_difference_in_a_deterministic_physics_game() {
    let game = TestGame {
        boxes: 50,
        projectiles: true,
        ..TestGame::default()
    };
    let mut app = with_seen(common::app_with_game(game, 2, 6, |p| {
        p.edit_config(|c| {
            c.verify_predictions = true;
            c.prediction_check = PredictionCheck::AllRegisteredState;
            c.mode = SessionMode::Predicted;
        })
    }));
    common::run_until_verified(&mut app, 300);
    let stats = common::stats(&app);
    assert!(stats.resim_ticks_checked > 250, "{stats:?}");
    assert_eq!(stats.resim_ticks_matching, stats.resim_ticks_checked);
    assert!(stats.rollback_parked_entities > 0, "{stats:?}");
    // The test game's unhashed, unreflected types are named; everything else is compared.
    let mut unchecked = stats.unchecked_types.clone();
    unchecked.sort();
    assert_eq!(
        unchecked,
        [
            std::any::type_name::<common::PlayerBodies>(),
            std::any::type_name::<common::Projectile>(),
        ]
    );
}
