//! The determinism guard flags simulation systems that read state outside the rollback, by
//! their declared access, and names them in a `DeterminismWarning` message.

use bevy::prelude::*;
use bevy::time::Real;
use simsync::deterministic::{DeterminismRisk, DeterminismWarning};
use simsync::prelude::*;

/// Registered: simulation state.
#[derive(Resource, Clone, Default)]
struct Score(u32);

/// Not registered: a tuning value the game inserts and reads.
#[derive(Resource, Clone)]
struct Tuning(u32);

#[derive(Clone)]
struct GuardedGame {
    ignore_tuning: bool,
}

impl Plugin for GuardedGame {
    fn build(&self, app: &mut App) {
        app.rollback_resource::<Score>()
            .init_resource::<Score>()
            .insert_resource(Tuning(3))
            .add_systems(
                SimulationTick,
                (clean_system, reads_wall_clock, reads_tuning).in_set(SimulationSet::Game),
            );
        if self.ignore_tuning {
            app.ignore_rollback_resource::<Tuning>();
        }
    }
}

/// Reads only rolled-back state and the simulation's own clock.
fn clean_system(tick: Res<SimTick>, time: Res<Time>, mut score: ResMut<Score>) {
    score.0 += (tick.0 as u32) % 2 + time.delta().is_zero() as u32;
}

/// Reads the wall clock (absent in a simulation world, but declared).
fn reads_wall_clock(real: Option<Res<Time<Real>>>, mut score: ResMut<Score>) {
    if real.is_some() {
        score.0 += 1;
    }
}

fn reads_tuning(tuning: Res<Tuning>, mut score: ResMut<Score>) {
    score.0 += tuning.0;
}

fn app(game: GuardedGame, guard: bool) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(game)
            .config(SessionConfig {
                clock: SessionClock::Stepped {
                    ticks_per_update: 1,
                },
                ..Default::default()
            })
            .debugging(simsync::deterministic::DebugConfig {
                determinism_guard: guard,
                ..Default::default()
            }),
    );
    app
}

/// Every warning written so far, in order.
fn warnings(app: &App) -> Vec<DeterminismWarning> {
    let messages = app.world().resource::<Messages<DeterminismWarning>>();
    messages.get_cursor().read(messages).cloned().collect()
}

fn by_system<'a>(found: &'a [DeterminismWarning], system: &str) -> Vec<&'a DeterminismWarning> {
    found
        .iter()
        .filter(|w| w.system.ends_with(system))
        .collect()
}

#[test]
fn the_guard_names_a_system_reading_real_time_and_not_a_clean_one() {
    let mut app = app(
        GuardedGame {
            ignore_tuning: false,
        },
        true,
    );
    app.update();
    let found = warnings(&app);
    assert_eq!(found.len(), 2, "{found:#?}");
    let clock = by_system(&found, "reads_wall_clock");
    assert_eq!(clock.len(), 1, "{found:#?}");
    assert!(
        matches!(&clock[0].reason, DeterminismRisk::OutsideClock { clock } if clock.contains("Real")),
        "{found:#?}"
    );
    let tuning = by_system(&found, "reads_tuning");
    assert_eq!(tuning.len(), 1, "{found:#?}");
    assert!(
        matches!(&tuning[0].reason,
            DeterminismRisk::UnregisteredResource { resource, writes: false } if resource.ends_with("Tuning")),
        "{found:#?}"
    );
    assert!(by_system(&found, "clean_system").is_empty());
    assert_eq!(
        app.world().resource::<SessionStats>().determinism_warnings,
        2
    );
    // Reported once: later updates add nothing.
    for _ in 0..5 {
        app.update();
    }
    assert_eq!(
        app.world().resource::<SessionStats>().determinism_warnings,
        2
    );
    assert!(app.world().resource::<SessionStats>().verified_tick >= 5);
}

#[test]
fn an_ignored_resource_is_not_flagged_and_the_guard_is_off_by_default() {
    let mut ignoring = app(
        GuardedGame {
            ignore_tuning: true,
        },
        true,
    );
    ignoring.update();
    let found = warnings(&ignoring);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].system.ends_with("reads_wall_clock"));

    let mut off = app(
        GuardedGame {
            ignore_tuning: false,
        },
        false,
    );
    off.update();
    assert!(warnings(&off).is_empty());
    assert_eq!(
        off.world().resource::<SessionStats>().determinism_warnings,
        0
    );
}
