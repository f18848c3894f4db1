//! Memory of a long session that spawns and despawns simulation entities, measured: the bytes
//! the session leaves allocated over 30,000 spawn/despawn cycles once warmed up
//! ([bounded histories](crate::rules#every-per-tick-history-is-bounded)): slots, generations,
//! parked entities, input and check histories, and with Rapier bodies Rapier's state and its
//! message buffers ([messages live two
//! ticks](crate::rules#messages-in-a-simulation-world-live-two-ticks)). Counted by the unit
//! tests' global allocator for the whole process, each test alone in a child process, every
//! schedule single-threaded.
//!
//! The buffer that grew: bevy_rapier's `Messages<MassModifiedEvent>` (one message per collider
//! created or removed, its mass written back from it), a message type no schedule of a
//! simulation world ever aged: 16 bytes a cycle in each simulated world, kept in doubling steps
//! (about 0.9 MB over 30,000 cycles at zero latency, 1.9 MB at three ticks of latency).

use bevy::prelude::*;
use bevy_rapier3d::plugin::context::RapierRigidBodySet;
use bevy_rapier3d::prelude::{
    Collider, MassModifiedEvent, RapierRigidBodyHandle, ReadMassProperties, RigidBody,
};

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
    simsync_net::single_threaded_schedules(&mut app);
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

/// Set in the child process a measuring test runs itself in.
const CHILD: &str = "SIMSYNC_CHURN_BOUND_CHILD";

/// Whether this is the child process running test `name` alone (then the caller measures);
/// otherwise runs `name` alone in a child process of this binary, asserts it passed, and
/// returns false. The process-wide count is exact only with no other test running.
fn alone(name: &str) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .expect("the child runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
    false
}

#[test]
fn spawn_despawn_cycles_leave_the_session_bounded() {
    if !alone("churn_bound::spawn_despawn_cycles_leave_the_session_bounded") {
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

/// Bodies (each with one collider) spawned and despawned a tick by the Rapier churn test.
const PER_TICK: u32 = 10;

/// The mass-change messages held in each world (verified, predicted).
fn mass_messages(app: &App) -> (usize, usize) {
    let worlds = app.world().resource::<SimulationWorlds>();
    let held = |world: &World| world.resource::<Messages<MassModifiedEvent>>().len();
    (held(&worlds.verified.world), held(&worlds.predicted.world))
}

/// Every live churned body of the verified world has Rapier's mass as its `ReadMassProperties`,
/// which bevy_rapier writes from the mass-change messages: none was aged away unread.
fn assert_masses_written_back(app: &mut App) {
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let world = worlds.verified_mut();
    let mut bodies =
        world.query_filtered::<(&RapierRigidBodyHandle, &ReadMassProperties), With<Churned>>();
    let read: Vec<_> = bodies.iter(world).map(|(h, m)| (h.0, m.mass)).collect();
    assert_eq!(read.len(), PER_TICK as usize);
    let mut sets = world.query::<&RapierRigidBodySet>();
    let set = sets.single(world).expect("one Rapier context");
    for (handle, mass) in read {
        let body = set.bodies.get(handle).expect("a live Rapier body");
        assert!(body.mass() > 0.0);
        assert_eq!(mass, body.mass());
    }
}

#[test]
fn rapier_spawn_despawn_cycles_leave_the_session_bounded() {
    if !alone("churn_bound::rapier_spawn_despawn_cycles_leave_the_session_bounded") {
        return;
    }
    // Ten Rapier bodies spawned and ten despawned a tick, inputs three ticks late: both worlds
    // create and remove colliders, and the predicted world rolls back and re-simulates.
    let mut app = churn_app(PER_TICK, 3, true);
    left_by(&mut app, 600);
    let before = process_live_bytes();
    let (mut verified_most, mut predicted_most) = (0, 0);
    for _ in 0..3_000 {
        app.update();
        let (verified, predicted) = mass_messages(&app);
        verified_most = verified_most.max(verified);
        predicted_most = predicted_most.max(predicted);
    }
    let left = process_live_bytes() - before;
    let stats = app.world().resource::<SessionStats>();
    assert!(stats.verified_tick >= 3_590, "{stats:?}");
    assert!(stats.ticks_predicted > 3_000, "{stats:?}");
    println!(
        "30,000 Rapier spawn/despawn cycles left {left} bytes; mass messages held at most \
         {verified_most} (verified), {predicted_most} (predicted)"
    );
    // Messages live two ticks; a tick writes at most one per collider created or removed.
    let bound = 2 * (2 * PER_TICK as usize);
    assert!(verified_most <= bound, "{verified_most} > {bound}");
    assert!(predicted_most <= bound, "{predicted_most} > {bound}");
    assert!(left < 64 * 1024, "30,000 cycles left {left} bytes");
    assert_masses_written_back(&mut app);
}
