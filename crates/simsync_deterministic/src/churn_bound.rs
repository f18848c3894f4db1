//! Memory of a long session that spawns and despawns simulation entities, measured: the bytes
//! the session leaves allocated over 30,000 spawn/despawn cycles once warmed up
//! ([bounded histories](crate::rules#every-per-tick-history-is-bounded)): slots, generations,
//! parked entities, input and check histories. Counted by the unit tests' global allocator for
//! the whole process, the test alone in a child process, every schedule single-threaded.
//!
//! With Rapier bodies (`physics`) the same run leaves about 0.5–1 MB over 30,000 cycles in
//! doubling steps (a growing list inside the Rapier context state); not yet bounded.

use bevy::ecs::schedule::SingleThreadedExecutor;
use bevy::prelude::*;
use bevy_rapier3d::prelude::{Collider, RigidBody};

use crate::alloc_bound::counting_alloc::process_live_bytes;
use crate::prelude::*;

/// Every tick despawns the bodies the last tick spawned and spawns `per_tick` new ones.
#[derive(Clone)]
struct Churn {
    per_tick: u32,
    physics: bool,
}

/// Marks the churned bodies.
#[derive(Component, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Reflect)]
#[reflect(Component)]
struct Churned;

impl SimHash for Churned {
    fn sim_hash(&self, _hasher: &mut StateHasher) {}
}

impl Plugin for Churn {
    fn build(&self, app: &mut App) {
        let (per_tick, physics) = (self.per_tick, self.physics);
        app.rollback_hashed_component::<Churned>().add_systems(
            SimulationTick,
            (move |mut sim: SimCommands, bodies: Query<Entity, With<Churned>>| {
                for body in &bodies {
                    sim.despawn(body);
                }
                for i in 0..per_tick {
                    let at = Vec3::new(i as f32 * 2.0, 1.0, 0.0);
                    let body = sim
                        .spawn((Churned, Transform::from_translation(at)))
                        .expect("a free slot");
                    if physics {
                        sim.commands
                            .entity(body)
                            .insert((RigidBody::Dynamic, Collider::ball(0.5)));
                    }
                }
            })
            .in_set(SimulationSet::Game),
        );
    }
}

/// A local session of one player at `latency` ticks churning `per_tick` bodies a tick, every
/// schedule of the App single-threaded.
fn churn_app(per_tick: u32, latency: u32, physics: bool) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(Churn { per_tick, physics }).config(
            SessionConfig {
                clock: SessionClock::Stepped {
                    ticks_per_update: 1,
                },
                local: LocalSessionConfig {
                    latency_ticks: vec![latency],
                    ..Default::default()
                },
                ..Default::default()
            },
        ),
    );
    app.finish();
    app.cleanup();
    let mut schedules = app.world_mut().resource_mut::<Schedules>();
    for (_, schedule) in schedules.iter_mut() {
        schedule.set_executor(SingleThreadedExecutor::new());
    }
    app
}

/// The bytes `updates` updates of `app` left allocated.
fn left_by(app: &mut App, updates: u32) -> isize {
    let before = process_live_bytes();
    for _ in 0..updates {
        app.update();
    }
    process_live_bytes() - before
}

/// Set in the child process [`spawn_despawn_cycles_leave_the_session_bounded`] runs itself in.
const CHILD: &str = "SIMSYNC_CHURN_BOUND_CHILD";

#[test]
fn spawn_despawn_cycles_leave_the_session_bounded() {
    // The process-wide count is exact only with no other test running: run this test alone in
    // a child process of this binary.
    if std::env::var_os(CHILD).is_none() {
        let exe = std::env::current_exe().expect("the test binary");
        let out = std::process::Command::new(exe)
            .args([
                "churn_bound::spawn_despawn_cycles_leave_the_session_bounded",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .expect("the child runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "{text}");
        return;
    }
    // Ten bodies spawned and ten despawned a tick, inputs three ticks late (both worlds spawn,
    // despawn, park and roll back): after warming up, 30,000 cycles leave less than 64 KiB.
    let mut app = churn_app(10, 3, false);
    left_by(&mut app, 600);
    let left = left_by(&mut app, 3_000);
    let stats = app.world().resource::<SessionStats>();
    assert!(stats.verified_tick >= 3_590, "{stats:?}");
    assert!(stats.ticks_predicted > 3_000, "{stats:?}");
    println!("30,000 spawn/despawn cycles left {left} bytes");
    assert!(left < 64 * 1024, "30,000 cycles left {left} bytes");
}
