//! What a game gets without boilerplate: `#[derive(SimHash)]`, stepping with `app.update()`
//! alone, `testing::run_until_verified`, and Bevy states rolled back by registration.

use std::hash::Hasher;

use bevy::prelude::*;
use bevy_state::prelude::*;
use simsync::deterministic::testing::{
    RunLimits, RunUntilError, run_until_verified, run_until_verified_with,
};
use simsync::deterministic::{LocalSessionConfig, SimulatorContext};
use simsync::prelude::*;

#[derive(Component, Clone, Debug, PartialEq, SimHash)]
struct Health {
    points: u32,
    shield: f32,
    #[sim_hash(skip)]
    cache: Vec<u8>,
}

#[derive(Component, Clone, Debug, PartialEq, SimHash)]
enum Mood {
    Calm,
    Angry(u8),
    Hungry { since: i32 },
}

#[derive(Clone, Debug, PartialEq, SimHash)]
struct Pair<T>(T, T);

fn hash<T: SimHash>(value: &T) -> u64 {
    let mut hasher = StateHasher::default();
    value.sim_hash(&mut hasher);
    hasher.finish()
}

fn health(points: u32, shield: f32) -> Health {
    Health {
        points,
        shield,
        cache: Vec::new(),
    }
}

#[test]
fn derived_sim_hash_sees_every_field_but_skipped_ones() {
    let base = health(10, 0.5);
    assert_eq!(hash(&base), hash(&base.clone()));
    assert_ne!(hash(&base), hash(&health(11, 0.5)));
    assert_ne!(
        hash(&health(10, 0.0)),
        hash(&health(10, -0.0)),
        "floats by bits"
    );
    let mut cached = base.clone();
    cached.cache = vec![1, 2, 3];
    assert_eq!(hash(&base), hash(&cached), "#[sim_hash(skip)]");
    // Field order is declaration order: the same words fed by hand give the same hash.
    let mut by_hand = StateHasher::default();
    by_hand.write_u32(10);
    by_hand.write_f32(0.5);
    assert_eq!(hash(&base), by_hand.finish());
    // Enums: variant position, then fields.
    let moods = [
        hash(&Mood::Calm),
        hash(&Mood::Angry(0)),
        hash(&Mood::Angry(1)),
        hash(&Mood::Hungry { since: 0 }),
    ];
    for (i, a) in moods.iter().enumerate() {
        for b in &moods[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_ne!(hash(&Pair(1u8, 2u8)), hash(&Pair(2u8, 1u8)));
}

#[derive(Clone)]
struct HealthGame;

impl Plugin for HealthGame {
    fn build(&self, app: &mut App) {
        app.rollback_hashed_component::<Health>().add_systems(
            SimulationStartup,
            |mut sim: SimCommands| {
                sim.spawn(health(10, 0.5)).expect("slot");
            },
        );
    }
}

fn stepped_app(game: impl Plugin + Clone) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(game).config(SessionConfig {
            clock: SessionClock::Stepped {
                ticks_per_update: 1,
            },
            checksum_interval: 1,
            ..Default::default()
        }),
    );
    app
}

fn set_verified_health(app: &mut App, value: Health) {
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let world = worlds.verified_mut();
    let mut query = world.query::<&mut Health>();
    for mut h in query.iter_mut(world) {
        *h = value.clone();
    }
}

fn verified_checksum(app: &mut App) -> u64 {
    app.world_mut()
        .resource_mut::<SimulationWorlds>()
        .verified_checksum()
}

#[test]
fn a_derived_component_changes_the_checksum_when_its_value_changes() {
    let mut app = stepped_app(HealthGame);
    app.update();
    let before = verified_checksum(&mut app);
    set_verified_health(&mut app, health(9, 0.5));
    let changed = verified_checksum(&mut app);
    set_verified_health(&mut app, health(10, 0.5));
    let restored = verified_checksum(&mut app);
    let mut cached = health(10, 0.5);
    cached.cache = vec![7; 16];
    set_verified_health(&mut app, cached);
    let skipped = verified_checksum(&mut app);
    assert_ne!(before, changed);
    assert_eq!(before, restored);
    assert_eq!(
        before, skipped,
        "a skipped field is not part of the checksum"
    );
}

/// The same game type under two module paths (as when one game module is compiled into two
/// binaries with different crate names).
mod first_build {
    use super::*;
    #[derive(Component, Clone, Debug, PartialEq, SimHash)]
    pub struct Marble(pub u32);
}
mod second_build {
    use super::*;
    #[derive(Component, Clone, Debug, PartialEq, SimHash)]
    pub struct Marble(pub u32);
}

/// Registers `first_build::Marble` then `second_build::Marble` (or the other way round when
/// `swap`), and spawns one entity holding `value` as the first registered type (or as the
/// second when `second`).
#[derive(Clone)]
struct MarbleGame {
    swap: bool,
    second: bool,
    value: u32,
}

impl Plugin for MarbleGame {
    fn build(&self, app: &mut App) {
        if self.swap {
            app.rollback_hashed_component::<second_build::Marble>()
                .rollback_hashed_component::<first_build::Marble>();
        } else {
            app.rollback_hashed_component::<first_build::Marble>()
                .rollback_hashed_component::<second_build::Marble>();
        }
        let (swap, second, value) = (self.swap, self.second, self.value);
        app.add_systems(SimulationStartup, move |mut sim: SimCommands| {
            // The type at registration position 0 (1 when `second`).
            let first_is_a = swap == second;
            let spawned = if first_is_a {
                sim.spawn(first_build::Marble(value)).map(|_| ())
            } else {
                sim.spawn(second_build::Marble(value)).map(|_| ())
            };
            spawned.expect("slot");
        });
    }
}

fn marble_checksum(swap: bool, second: bool, value: u32) -> u64 {
    let mut app = stepped_app(MarbleGame {
        swap,
        second,
        value,
    });
    for _ in 0..3 {
        app.update();
    }
    assert_eq!(app.world().resource::<SessionStats>().verified_tick, 3);
    verified_checksum(&mut app)
}

#[test]
fn checksums_do_not_depend_on_type_names_but_on_registration_positions() {
    // Position 0 holds `first_build::Marble(7)` in one app and `second_build::Marble(7)` in
    // the other: the same game state under other type names hashes the same.
    let a = marble_checksum(false, false, 7);
    let renamed = marble_checksum(true, false, 7);
    assert_eq!(a, renamed);
    // The registration position still tells types apart: the value under position 1 instead
    // of 0 is another state, and so is another value.
    assert_ne!(a, marble_checksum(false, true, 7));
    assert_ne!(a, marble_checksum(false, false, 8));
}

#[test]
fn stepping_with_update_alone_advances_ticks_and_a_late_cleanup_keeps_them() {
    let mut app = stepped_app(HealthGame);
    // No app.finish(), no app.cleanup().
    for _ in 0..30 {
        app.update();
    }
    let stats = app.world().resource::<SessionStats>().clone();
    assert_eq!(stats.verified_tick, 30, "{stats:?}");
    assert_eq!(stats.ticks_verified, 30);
    assert!(app.world().get_resource::<SessionSetupError>().is_none());
    // Finishing and cleaning up afterwards (what `App::run` does) keeps the running worlds.
    app.finish();
    app.cleanup();
    app.update();
    assert_eq!(app.world().resource::<SessionStats>().verified_tick, 31);
}

#[test]
fn run_until_verified_reaches_the_tick() {
    let mut app = stepped_app(HealthGame);
    assert_eq!(run_until_verified(&mut app, 40, 100), Ok(40));
    assert_eq!(app.world().resource::<SessionStats>().verified_tick, 40);
    // Already there: no update needed.
    assert_eq!(run_until_verified(&mut app, 10, 0), Ok(40));
}

/// A `BeforeVerification` hook that stops verification at tick 20 (a stuck session).
fn stop_at_20(mut context: ResMut<SimulatorContext>) {
    if context.verified_from_tick() >= 20 {
        let _ = context.set_ticks_to_verify(0);
    }
}

#[test]
fn run_until_verified_reports_a_stall_and_a_timeout_as_typed_errors() {
    let mut app = stepped_app(HealthGame);
    app.add_systems(BeforeVerification, stop_at_20);
    let stalled =
        run_until_verified_with(&mut app, 100, RunLimits::new(1_000).without_progress(50));
    assert_eq!(
        stalled,
        Err(RunUntilError::NoProgress {
            verified_tick: 20,
            updates: 50
        })
    );
    let mut slow = stepped_app(HealthGame);
    assert_eq!(
        run_until_verified(&mut slow, 1_000, 10),
        Err(RunUntilError::Timeout {
            target: 1_000,
            verified_tick: 10,
            updates: 10
        })
    );
    let mut bare = App::new();
    assert_eq!(
        run_until_verified(&mut bare, 1, 10),
        Err(RunUntilError::NotInstalled { setup_error: None })
    );
}

// ---- States ----------------------------------------------------------------------------------

#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, Hash, SimHash)]
enum Phase {
    #[default]
    Calm,
    Alarm,
}

// Bevy's `States` derive names `bevy::state`, which needs bevy's `bevy_state` feature.
impl States for Phase {}
impl bevy_state::state::FreelyMutableState for Phase {}

/// Not rolled back on purpose: how often this world entered `Calm`.
#[derive(Resource, Default)]
struct CalmEntries(u32);

/// Rolled back and hashed: ticks simulated in `Alarm`.
#[derive(Resource, Clone, Default, Debug, PartialEq, SimHash)]
struct AlarmTicks(u32);

#[derive(Clone)]
struct PhaseGame;

impl Plugin for PhaseGame {
    fn build(&self, app: &mut App) {
        app.rollback_hashed_state::<Phase>()
            .rollback_hashed_resource::<AlarmTicks>()
            .init_resource::<AlarmTicks>()
            .init_resource::<CalmEntries>()
            .add_systems(OnEnter(Phase::Calm), |mut n: ResMut<CalmEntries>| n.0 += 1)
            .add_systems(
                SimulationTick,
                (toggle_on_tens, count_alarm.run_if(in_state(Phase::Alarm)))
                    .in_set(SimulationSet::Game),
            );
    }
}

/// Player 1 holding button 0 on a tick divisible by 10 toggles the phase.
fn toggle_on_tens(
    tick: Res<SimTick>,
    inputs: Res<PlayerInputs<PackedInput>>,
    phase: Res<State<Phase>>,
    mut next: ResMut<NextState<Phase>>,
) {
    if tick.0 % 10 == 0 && inputs.get(1).is_some_and(|i| i.pressed(0)) {
        next.set(match phase.get() {
            Phase::Calm => Phase::Alarm,
            Phase::Alarm => Phase::Calm,
        });
    }
}

fn count_alarm(mut ticks: ResMut<AlarmTicks>) {
    ticks.0 += 1;
}

/// Player 1 holds button 0 on ticks 5..=12 (over tick 10) and 25..=28 (no tenth tick).
fn phase_script(tick: i32) -> bool {
    (5..=12).contains(&tick) || (25..=28).contains(&tick)
}

fn feed_phase_script(
    session: Res<DeterministicSession<PackedInput>>,
    mut local: ResMut<LocalInputs<PackedInput>>,
) {
    let tick = session.next_input_tick();
    let mut input = PackedInput::default();
    input.set_pressed(0, phase_script(tick)).expect("bit 0");
    local.set(1, input).expect("player 1");
    local.set(0, PackedInput::default()).expect("player 0");
}

fn phase_app() -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(PhaseGame)
            .config(SessionConfig {
                clock: SessionClock::Stepped {
                    ticks_per_update: 1,
                },
                checksum_interval: 1,
                verify_predictions: true,
                local: LocalSessionConfig {
                    latency_ticks: vec![6],
                    jitter_ticks: 0,
                    seed: 1,
                    // Player 1 is predicted by repeating its last confirmed input.
                    known_players: vec![0],
                },
                ..Default::default()
            })
            .players(2),
    );
    app.add_systems(
        PreUpdate,
        feed_phase_script.before(DeterministicSet::SessionUpdate),
    );
    app
}

fn phase_of(world: &World) -> Phase {
    *world.resource::<State<Phase>>().get()
}

#[test]
fn a_state_changed_by_a_mispredicted_input_is_rolled_back() {
    let mut app = phase_app();
    // Every re-simulated tick whose inputs were right must equal its verified state (the state
    // is hashed): a mismatch would stop this with an error.
    let reached = run_until_verified(&mut app, 60, 200).expect("no prediction mismatch");
    assert_eq!(reached, 60);
    let stats = app.world().resource::<SessionStats>().clone();
    let worlds = app.world().resource::<SimulationWorlds>();
    let (verified, predicted) = (worlds.verified(), worlds.predicted());
    // The truth: one toggle at tick 10, Alarm from tick 11 on.
    assert_eq!(phase_of(verified), Phase::Alarm);
    assert_eq!(verified.resource::<AlarmTicks>().0, 50);
    assert_eq!(verified.resource::<CalmEntries>().0, 1);
    // The predicted world repeated the held button over tick 30, toggled back to Calm on that
    // mispredicted input, and was rolled back to Alarm.
    assert!(
        predicted.resource::<CalmEntries>().0 >= 2,
        "predicted world entered Calm {} times",
        predicted.resource::<CalmEntries>().0
    );
    assert_eq!(phase_of(predicted), Phase::Alarm);
    assert_eq!(
        predicted.resource::<AlarmTicks>().0,
        (stats.predicted_tick - 10) as u32
    );
    assert!(stats.mispredicted_inputs >= 2, "{stats:?}");
    assert!(stats.resim_ticks_checked > 0);
    assert_eq!(stats.resim_ticks_matching, stats.resim_ticks_checked);
}

#[test]
fn rollback_restores_state_and_pending_transition() {
    let mut app = phase_app();
    run_until_verified(&mut app, 5, 50).expect("runs");
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    assert_eq!(phase_of(worlds.verified()), Phase::Calm);
    let predicted = worlds.predicted_mut();
    predicted.insert_resource(State::new(Phase::Alarm));
    predicted.insert_resource(NextState::Pending(Phase::Calm));
    assert_ne!(worlds.verified_checksum(), worlds.predicted_checksum());
    worlds.rollback_predicted();
    assert_eq!(phase_of(worlds.predicted()), Phase::Calm);
    assert!(matches!(
        worlds.predicted().resource::<NextState<Phase>>(),
        NextState::Unchanged
    ));
    assert_eq!(worlds.verified_checksum(), worlds.predicted_checksum());
}

#[derive(Clone)]
struct EmptyGame;

impl Plugin for EmptyGame {
    fn build(&self, _app: &mut App) {}
}

#[test]
fn the_session_runs_as_one_system_per_frame_in_its_set() {
    let mut app = stepped_app(EmptyGame);
    app.update();
    let schedules = app.world().resource::<Schedules>();
    let pre_update = schedules.get(PreUpdate).expect("PreUpdate exists");
    let ours: Vec<String> = pre_update
        .systems()
        .expect("initialized by the update")
        .map(|(_, system)| system.name().to_string())
        .filter(|name| name.contains("simsync_deterministic"))
        .collect();
    assert_eq!(ours.len(), 1, "session systems in PreUpdate: {ours:?}");
    assert!(ours[0].contains("session_frame"), "{ours:?}");
    // The frame still runs every step: the lifecycle is Running and the worlds advanced.
    assert_eq!(
        *app.world()
            .resource::<State<simsync::deterministic::SessionState>>()
            .get(),
        simsync::deterministic::SessionState::Running
    );
    assert!(app.world().resource::<SessionStats>().verified_tick >= 1);
}

#[test]
fn the_simulation_worlds_share_one_type_registry() {
    let mut app = stepped_app(EmptyGame);
    app.update();
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    // The predicted world's own registry (`predicted_mut` ends any sharing of the verified state).
    let predicted = worlds.predicted_mut().resource::<AppTypeRegistry>().clone();
    let verified = worlds.verified().resource::<AppTypeRegistry>().clone();
    assert!(
        std::sync::Arc::ptr_eq(&verified.internal, &predicted.internal),
        "one registry for both worlds"
    );
    // Types the worlds' plugins registered (Rapier's, in each world's build) are in it.
    assert!(
        verified
            .read()
            .get(std::any::TypeId::of::<bevy_rapier3d::prelude::Velocity>())
            .is_some()
    );
    let main = app.world().resource::<AppTypeRegistry>();
    assert!(!std::sync::Arc::ptr_eq(&verified.internal, &main.internal));
}
