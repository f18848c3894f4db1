//! Failures say why (issue 28, item 3): a failed prediction check names the first differing
//! entity and component (or resource); `run_until_verified` names state a rollback does not
//! restore; a plugin added twice and Rapier added inside the game are typed setup errors, not
//! Bevy's panic; warnings a game must react to are messages, seen without a `LogPlugin`.

use bevy::prelude::*;
use bevy_rapier3d::prelude::{NoUserData, RapierPhysicsPlugin};
use simsync::deterministic::testing::{RunUntilError, run_until_verified};
use simsync::deterministic::{
    PredictionCheck, ReservedSlots, SessionError, SessionSetupError, SessionWarning,
    StateDifference, StateHasher, WorldRole,
};
use simsync::prelude::*;

/// Which of the game's three entities this is.
#[derive(Component, Clone, Copy, Debug, PartialEq)]
struct Id(u32);

impl SimHash for Id {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.0.sim_hash(hasher);
    }
}

/// A hashed score.
#[derive(Component, Clone, Copy, Debug, PartialEq)]
struct Score(u32);

impl SimHash for Score {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.0.sim_hash(hasher);
    }
}

/// Registered without a hash, reflected: only the full prediction check compares it.
#[derive(Component, Clone, Copy, Debug, PartialEq, Reflect, Default)]
#[reflect(Component)]
struct Mood(u8);

/// A hashed resource.
#[derive(Resource, Clone, Copy, Debug, PartialEq, Default)]
struct Pot(u32);

impl SimHash for Pot {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.0.sim_hash(hasher);
    }
}

/// What the predicted world gets wrong at tick 15 (and only there, only there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cheat {
    /// Entity 1's `Score`.
    Score,
    /// Entity 2's `Mood` (unhashed).
    Mood,
    /// The `Pot` resource.
    Pot,
    /// Spawns a fourth entity.
    Spawn,
    /// `Score` of entities 0 and 2, `Mood` of entity 1.
    Several,
}

/// Three entities with `Id`, `Score` and `Mood`, and a `Pot`; the predicted world cheats.
#[derive(Clone)]
struct Cheater(Cheat);

impl Plugin for Cheater {
    fn build(&self, app: &mut App) {
        let cheat = self.0;
        app.register_type::<Mood>()
            .init_resource::<Pot>()
            .rollback_hashed_component::<Id>()
            .rollback_hashed_component::<Score>()
            .rollback_component::<Mood>()
            .rollback_hashed_resource::<Pot>()
            .add_systems(SimulationStartup, |mut sim: SimCommands| {
                for n in 0..3 {
                    sim.spawn((Id(n), Score(10), Mood(1))).expect("slot");
                }
            })
            .add_systems(
                SimulationTick,
                (move |role: Res<WorldRole>,
                       tick: Res<SimTick>,
                       mut pot: ResMut<Pot>,
                       mut sim: SimCommands,
                       mut q: Query<(&Id, &mut Score, &mut Mood)>| {
                    pot.0 += 1;
                    if *role != WorldRole::Predicted || tick.0 != 15 {
                        return;
                    }
                    for (id, mut score, mut mood) in &mut q {
                        match (cheat, id.0) {
                            (Cheat::Score, 1) | (Cheat::Several, 0 | 2) => score.0 += 1,
                            (Cheat::Mood, 2) | (Cheat::Several, 1) => mood.0 += 1,
                            _ => {}
                        }
                    }
                    match cheat {
                        Cheat::Pot => pot.0 += 1,
                        Cheat::Spawn => {
                            sim.spawn((Id(3), Score(0), Mood(0))).expect("slot");
                        }
                        _ => {}
                    }
                })
                .in_set(SimulationSet::Game),
            );
    }
}

/// A local predicted session (latency 3, default inputs: every prediction holds) with the
/// prediction check `check`.
fn cheating_app(cheat: Cheat, check: PredictionCheck) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(Cheater(cheat)).edit_config(|c| {
            c.players = 2;
            c.clock = SessionClock::Stepped {
                ticks_per_update: 1,
            };
            c.mode = SessionMode::Predicted;
            c.verify_predictions = true;
            c.prediction_check = check;
            c.local.latency_ticks = vec![3];
        }),
    );
    app
}

/// (slot, generation) of the entity with `Id(n)` in the verified world.
fn slot_of(app: &mut App, n: u32) -> (u32, u32) {
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let world = worlds.verified_mut();
    let slots = world.resource::<ReservedSlots>().clone();
    let mut query = world.query::<(Entity, &Id)>();
    let (entity, _) = query
        .iter(world)
        .find(|(_, id)| id.0 == n)
        .expect("the entity");
    (
        slots.slot_of(entity).expect("a simulation entity"),
        entity.generation().to_bits(),
    )
}

/// Runs the cheating app and returns the prediction check's failure (and its text).
fn mismatch(app: &mut App) -> (PredictionMismatch, String) {
    let error = run_until_verified(app, 40, 200).expect_err("the predicted world cheats");
    let text = error.to_string();
    let RunUntilError::PredictionMismatch(mismatch) = error else {
        panic!("expected a prediction mismatch, got {error:?}");
    };
    assert_eq!(mismatch.tick, 15, "{text}");
    assert_eq!(
        mismatch.cause,
        simsync::deterministic::MismatchCause::StateDiffers
    );
    (mismatch, text)
}

#[test]
fn a_mispredicted_component_is_named_with_its_entity() {
    let mut app = cheating_app(Cheat::Score, PredictionCheck::Checksum);
    let (mismatch, text) = mismatch(&mut app);
    let (slot, generation) = slot_of(&mut app, 1);
    let Some(StateDifference::Component {
        type_name,
        slot: s,
        generation: g,
    }) = mismatch.first_difference
    else {
        panic!("expected a component difference: {mismatch:?}");
    };
    assert!(type_name.ends_with("::Score"), "{type_name}");
    assert_eq!((s, g), (slot, generation));
    let named = format!("component `{type_name}` differs on simulation entity slot {slot}");
    assert!(text.contains(&named), "{text}");
    assert!(text.contains("first difference"), "{text}");
    assert!(
        text.starts_with("prediction check failed at tick 15: "),
        "{text}"
    );
}

#[test]
fn the_full_check_names_an_unhashed_component() {
    let mut app = cheating_app(Cheat::Mood, PredictionCheck::AllRegisteredState);
    let (mismatch, text) = mismatch(&mut app);
    let (slot, generation) = slot_of(&mut app, 2);
    assert!(
        matches!(
            mismatch.first_difference,
            Some(StateDifference::Component { type_name, slot: s, generation: g })
                if type_name.ends_with("::Mood") && (s, g) == (slot, generation)
        ),
        "{text}"
    );
}

#[test]
fn a_mispredicted_resource_and_entity_set_and_several_components_are_named() {
    let mut app = cheating_app(Cheat::Pot, PredictionCheck::Checksum);
    let (pot, text) = mismatch(&mut app);
    assert!(
        matches!(pot.first_difference, Some(StateDifference::Resource { type_name }) if type_name.ends_with("::Pot")),
        "{text}"
    );
    assert!(text.contains("resource `"), "{text}");

    let mut app = cheating_app(Cheat::Spawn, PredictionCheck::Checksum);
    let (spawn, text) = mismatch(&mut app);
    assert!(
        matches!(
            spawn.first_difference,
            Some(StateDifference::Entity {
                predicted: Some(_),
                verified: None,
                ..
            })
        ),
        "{text}"
    );
    assert!(
        text.contains("exists only in the predicted world"),
        "{text}"
    );

    let mut app = cheating_app(Cheat::Several, PredictionCheck::AllRegisteredState);
    let (several, text) = mismatch(&mut app);
    let first = slot_of(&mut app, 0);
    match several.first_difference {
        Some(StateDifference::Components {
            first_type,
            types,
            first_slot,
            generation,
            entities,
        }) => {
            assert!(first_type.ends_with("::Score"), "{text}");
            assert_eq!((types, entities), (2, 3), "{text}");
            assert_eq!((first_slot, generation), first, "{text}");
        }
        other => panic!("expected several components: {other:?} ({text})"),
    }
    assert!(
        text.contains("2 component types differ on 3 simulation entities"),
        "{text}"
    );
}

/// A component on a simulation entity that is neither registered nor ignored.
#[derive(Component, Clone)]
struct Unlisted;

/// Spawns one simulation entity with [`Unlisted`], and a plain entity without `SimEntity`
/// when `plain` is set.
#[derive(Clone)]
struct Leaky {
    plain: bool,
}

impl Plugin for Leaky {
    fn build(&self, app: &mut App) {
        let plain = self.plain;
        app.add_systems(SimulationStartup, move |mut sim: SimCommands| {
            if plain {
                sim.commands.spawn(Transform::default());
            } else {
                sim.spawn((Transform::default(), Unlisted)).expect("slot");
            }
        });
    }
}

fn stepped_app<G: Plugin + Clone>(game: G) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(game).edit_config(|c| {
            c.clock = SessionClock::Stepped {
                ticks_per_update: 1,
            };
        }),
    );
    app
}

#[test]
fn state_a_rollback_does_not_restore_fails_the_run_naming_it() {
    let mut app = stepped_app(Leaky { plain: false });
    let error = run_until_verified(&mut app, 20, 100).expect_err("an unregistered component");
    let RunUntilError::UnregisteredComponent(found) = &error else {
        panic!("expected UnregisteredComponent, got {error:?}");
    };
    assert!(found.type_name.ends_with("::Unlisted"), "{error}");
    let text = error.to_string();
    assert!(text.contains("not registered for rollback"), "{text}");
    assert!(text.contains("rollback_component"), "{text}");

    let mut app = stepped_app(Leaky { plain: true });
    let error = run_until_verified(&mut app, 20, 100).expect_err("an entity without SimEntity");
    let RunUntilError::UnsimulatedEntity(found) = &error else {
        panic!("expected UnsimulatedEntity, got {error:?}");
    };
    assert_eq!(found.entities, 1);
    let text = error.to_string();
    assert!(text.contains("without SimEntity"), "{text}");
    assert!(text.contains("SimCommands"), "{text}");
}

/// Every `SessionWarning` written so far.
fn warnings(app: &mut App) -> Vec<SessionWarning> {
    app.world_mut()
        .resource_mut::<Messages<SessionWarning>>()
        .drain()
        .collect()
}

#[derive(Clone)]
struct Empty;
impl Plugin for Empty {
    fn build(&self, _app: &mut App) {}
}

#[test]
fn a_second_deterministic_plugin_is_a_typed_setup_error_not_a_panic() {
    let mut app = stepped_app(Empty);
    app.add_plugins(DeterministicPlugin::<PackedInput>::new(Empty));
    let error = app.world().resource::<SessionSetupError>().0.clone();
    let SessionError::PluginAddedTwice { first, second } = &error else {
        panic!("expected PluginAddedTwice, got {error:?}");
    };
    assert!(first.contains("DeterministicPlugin"), "{first}");
    assert_eq!(first, second);
    assert!(error.to_string().contains("restart_session"), "{error}");
    assert_eq!(
        warnings(&mut app),
        vec![SessionWarning::Setup(error.clone())]
    );
    // The first plugin's session is there; a run reports the setup error.
    assert_eq!(
        run_until_verified(&mut app, 5, 50),
        Err(RunUntilError::SetupFailed(error))
    );
    // Another input type is refused the same way.
    let mut other = stepped_app(Empty);
    other.add_plugins(DeterministicPlugin::<u32>::new(Empty));
    assert!(matches!(
        other.world().resource::<SessionSetupError>().0,
        SessionError::PluginAddedTwice { .. }
    ));
}

/// A game plugin that adds Rapier, as a new user would.
#[derive(Clone)]
struct WithRapier;
impl Plugin for WithRapier {
    fn build(&self, app: &mut App) {
        app.add_plugins(RapierPhysicsPlugin::<NoUserData>::default());
    }
}

#[test]
fn rapier_added_inside_the_game_is_a_typed_setup_error_naming_the_fix() {
    let mut app = stepped_app(WithRapier);
    let error = app.world().resource::<SessionSetupError>().0.clone();
    let SessionError::PluginInGame { plugin } = &error else {
        panic!("expected PluginInGame, got {error:?}");
    };
    assert!(plugin.contains("RapierPhysicsPlugin"), "{plugin}");
    let text = error.to_string();
    assert!(text.contains("already have it"), "{text}");
    assert!(text.contains("remove it from the game plugin"), "{text}");
    assert_eq!(
        warnings(&mut app),
        vec![SessionWarning::Setup(error.clone())]
    );
    assert_eq!(
        run_until_verified(&mut app, 5, 50),
        Err(RunUntilError::NotInstalled {
            setup_error: Some(error)
        })
    );
}

#[test]
fn rapier_is_in_the_simulation_worlds_for_plugins_that_ask() {
    #[derive(Clone)]
    struct Asks;
    impl Plugin for Asks {
        fn build(&self, _app: &mut App) {}
        fn finish(&self, app: &mut App) {
            assert!(app.is_plugin_added::<RapierPhysicsPlugin<NoUserData>>());
        }
    }
    let mut app = stepped_app(Asks);
    assert_eq!(run_until_verified(&mut app, 5, 50), Ok(5));
}

/// Despawns an entity that is not a simulation entity at tick 3, and writes a simulation
/// event from the main app.
#[derive(Clone)]
struct Sloppy;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Bang;

impl Plugin for Sloppy {
    fn build(&self, app: &mut App) {
        app.add_systems(
            SimulationTick,
            (|tick: Res<SimTick>, mut sim: SimCommands| {
                if tick.0 == 3 {
                    let plain = sim.commands.spawn(NotSimulated).id();
                    sim.despawn(plain);
                }
            })
            .in_set(SimulationSet::Game),
        );
    }
}

/// Every `SessionWarning` a game system read, frame by frame.
#[derive(Resource, Default)]
struct Seen(Vec<SessionWarning>);

fn collect(mut warnings: MessageReader<SessionWarning>, mut seen: ResMut<Seen>) {
    seen.0.extend(warnings.read().cloned());
}

#[test]
fn warnings_are_messages_without_a_log_plugin() {
    let mut app = stepped_app(Sloppy);
    app.add_sim_event::<Bang>()
        .init_resource::<Seen>()
        .add_systems(Update, |mut events: SimEvents<Bang>| events.write(Bang))
        .add_systems(Last, collect);
    run_until_verified(&mut app, 10, 50).expect("runs");
    let found = std::mem::take(&mut app.world_mut().resource_mut::<Seen>().0);
    let despawns: Vec<_> = found
        .iter()
        .filter_map(|w| match w {
            SessionWarning::DespawnIgnored { tick, error, .. } => Some((*tick, error.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(despawns.len(), 1, "verified world only, once: {found:?}");
    assert_eq!(despawns[0].0, 3);
    assert!(matches!(
        despawns[0].1,
        SessionError::NotASimulationEntity { .. }
    ));
    let outside: Vec<_> = found
        .iter()
        .filter(|w| matches!(w, SessionWarning::SimEventsOutsideSimulation { type_name, dropped: 1 } if type_name.ends_with("::Bang")))
        .collect();
    assert_eq!(outside.len(), 1, "written once: {found:?}");
    assert!(
        outside[0].to_string().contains("SimulationTick"),
        "{}",
        outside[0]
    );
}
