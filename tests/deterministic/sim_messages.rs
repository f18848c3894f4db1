//! Messages written inside a simulation world live two ticks, in both worlds, through
//! rollbacks and re-simulation: nothing ages them but the session (a simulation world runs no
//! `First` schedule).

use bevy::prelude::*;
use simsync::deterministic::{LocalSessionConfig, testing::run_until_verified};
use simsync::prelude::*;

/// Written by the game inside the simulation.
#[derive(Message, Clone, Copy)]
struct Ping(i32);

/// Pings written per tick.
const PINGS_PER_TICK: usize = 3;

/// Rolled back and hashed: the pings read, and the sum of their ticks.
#[derive(Resource, Clone, Default, Debug, PartialEq, SimHash)]
struct PingsRead {
    count: u64,
    tick_sum: i64,
}

#[derive(Clone)]
struct PingGame;

impl Plugin for PingGame {
    fn build(&self, app: &mut App) {
        app.add_message::<Ping>()
            .rollback_hashed_resource::<PingsRead>()
            .init_resource::<PingsRead>()
            .add_systems(SimulationTick, write_pings.in_set(SimulationSet::Game))
            .add_systems(SimulationTick, read_pings.in_set(SimulationSet::Cleanup));
    }
}

fn write_pings(tick: Res<SimTick>, mut pings: MessageWriter<Ping>) {
    for _ in 0..PINGS_PER_TICK {
        pings.write(Ping(tick.0));
    }
}

fn read_pings(mut pings: MessageReader<Ping>, mut read: ResMut<PingsRead>) {
    for ping in pings.read() {
        read.count += 1;
        read.tick_sum += i64::from(ping.0);
    }
}

fn ping_app() -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(PingGame).config(SessionConfig {
            clock: SessionClock::Stepped {
                ticks_per_update: 1,
            },
            checksum_interval: 1,
            verify_predictions: true,
            local: LocalSessionConfig {
                latency_ticks: vec![3],
                ..Default::default()
            },
            ..Default::default()
        }),
    );
    app
}

#[test]
fn messages_written_in_the_simulation_live_two_ticks() {
    let mut app = ping_app();
    // Re-simulated ticks are compared with their verified state (`PingsRead` is hashed).
    let reached = run_until_verified(&mut app, 300, 1_000).expect("no prediction mismatch");
    assert_eq!(reached, 300);
    let stats = app.world().resource::<SessionStats>().clone();
    assert!(stats.ticks_predicted > 300, "{stats:?}");
    let worlds = app.world().resource::<SimulationWorlds>();
    let verified = worlds.verified();
    // Each ping read once, the tick that wrote it: ticks 0 (setup) to 300.
    let ticks = 301;
    let read = verified.resource::<PingsRead>();
    assert_eq!(read.count, ticks * PINGS_PER_TICK as u64);
    assert_eq!(
        read.tick_sum,
        (0..=300).sum::<i64>() * PINGS_PER_TICK as i64
    );
    // Held: the pings of the last two ticks (without aging, all 903 of them).
    let held = verified.resource::<Messages<Ping>>().len();
    assert_eq!(held, 2 * PINGS_PER_TICK);
    let predicted = worlds.predicted();
    assert!(predicted.resource::<Messages<Ping>>().len() <= 2 * PINGS_PER_TICK);
}
