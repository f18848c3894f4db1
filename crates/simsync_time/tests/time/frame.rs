//! Frame phases and double-buffered state: the ordering, copying, parallelism and timing rules
//! of `FramePhasesPlugin` (time rules 11–15 in `simsync_time::rules`; the VR-Forces frame).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bevy::diagnostic::DiagnosticsStore;
use bevy::ecs::schedule::{MultiThreadedExecutor, ScheduleLabel, SingleThreadedExecutor};
use bevy::prelude::*;
use bevy::tasks::{ComputeTaskPool, TaskPoolBuilder};
use bevy::time::TimeUpdateStrategy;
use simsync_time::DoubleBufferRegistry;
use simsync_time::prelude::*;

/// Which executor runs `FixedUpdate`.
#[derive(Clone, Copy, Debug)]
enum ExecutorKind {
    SingleThreaded,
    MultiThreaded,
}

/// Tests of this binary share Bevy's global compute pool. The parallelism test needs two of its
/// threads at once, so every App-running test holds this lock, and the pool is created here with
/// two threads before any App does it (`TaskPoolPlugin` on a 2-core machine would give the
/// compute pool a single thread, and a bare `App` creates none, which `par_iter_mut` needs).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ComputeTaskPool::get_or_init(|| TaskPoolBuilder::new().num_threads(2).build());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An App with frame phases in `FixedUpdate`, run by hand one frame per `run_schedule`.
fn phases_app(executor: ExecutorKind) -> App {
    let mut app = App::new();
    app.add_plugins(FramePhasesPlugin::default());
    app.edit_schedule(FixedUpdate, |schedule| match executor {
        ExecutorKind::SingleThreaded => {
            schedule.set_executor(SingleThreadedExecutor::new());
        }
        ExecutorKind::MultiThreaded => {
            schedule.set_executor(MultiThreadedExecutor::new());
        }
    });
    app
}

fn frame(app: &mut App) {
    app.world_mut().run_schedule(FixedUpdate);
}

fn current<T: Clone + Send + Sync + 'static>(app: &App, entity: Entity) -> T {
    app.world().get::<Current<T>>(entity).unwrap().0.clone()
}

// ---------------------------------------------------------------------------------------------
// Two objects swapping values in the same ObjectTick, in parallel.

#[derive(Component)]
struct Left;

/// Both swap systems arrive here; each waits (up to 10 s) until the other has arrived in the
/// same frame, which can only happen if they run at the same time.
#[derive(Resource, Default)]
struct Rendezvous {
    arrived: AtomicUsize,
    timed_out: AtomicBool,
}

impl Rendezvous {
    fn meet(&self) {
        let me = self.arrived.fetch_add(1, Ordering::SeqCst);
        let want = (me / 2 + 1) * 2;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.arrived.load(Ordering::SeqCst) < want {
            if Instant::now() > deadline {
                self.timed_out.store(true, Ordering::SeqCst);
                // Let the other side through so the frame still ends.
                self.arrived.fetch_add(1, Ordering::SeqCst);
                return;
            }
            std::thread::yield_now();
        }
    }
}

fn left_takes_right(
    meet: Option<Res<Rendezvous>>,
    others: Query<&Current<i32>, Without<Left>>,
    mut mine: Query<&mut Next<i32>, With<Left>>,
) {
    if let Some(meet) = meet {
        meet.meet();
    }
    let other = others.single().unwrap().0;
    mine.single_mut().unwrap().0 = other;
}

fn right_takes_left(
    meet: Option<Res<Rendezvous>>,
    others: Query<&Current<i32>, With<Left>>,
    mut mine: Query<&mut Next<i32>, Without<Left>>,
) {
    if let Some(meet) = meet {
        meet.meet();
    }
    let other = others.single().unwrap().0;
    mine.single_mut().unwrap().0 = other;
}

fn swap_app(executor: ExecutorKind) -> (App, Entity, Entity) {
    let mut app = phases_app(executor);
    app.register_double_buffered::<i32>();
    let left = app.world_mut().spawn((DoubleBuffered::new(1), Left)).id();
    let right = app.world_mut().spawn(DoubleBuffered::new(2)).id();
    (app, left, right)
}

#[test]
fn swapping_objects_read_each_others_frame_start_values_in_parallel() {
    let _serial = serial();
    let (mut app, left, right) = swap_app(ExecutorKind::MultiThreaded);
    app.init_resource::<Rendezvous>().add_systems(
        FixedUpdate,
        (left_takes_right, right_takes_left).in_set(FramePhase::ObjectTick),
    );
    for n in 0..4 {
        frame(&mut app);
        let expect = if n % 2 == 0 { (2, 1) } else { (1, 2) };
        assert_eq!(
            (current::<i32>(&app, left), current::<i32>(&app, right)),
            expect,
            "frame {n}"
        );
    }
    let meet = app.world().resource::<Rendezvous>();
    assert!(
        !meet.timed_out.load(Ordering::SeqCst),
        "the two object-tick systems did not run at the same time"
    );
    assert_eq!(meet.arrived.load(Ordering::SeqCst), 8);
}

#[test]
fn swap_result_does_not_depend_on_system_order() {
    let _serial = serial();
    for left_first in [true, false] {
        let (mut app, left, right) = swap_app(ExecutorKind::SingleThreaded);
        if left_first {
            app.add_systems(
                FixedUpdate,
                (left_takes_right, right_takes_left)
                    .chain()
                    .in_set(FramePhase::ObjectTick),
            );
        } else {
            app.add_systems(
                FixedUpdate,
                (right_takes_left, left_takes_right)
                    .chain()
                    .in_set(FramePhase::ObjectTick),
            );
        }
        frame(&mut app);
        assert_eq!(
            (current::<i32>(&app, left), current::<i32>(&app, right)),
            (2, 1),
            "left first: {left_first}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// AdvanceFrame copies exactly the registered types, without spurious change detection.

#[derive(Resource, Default)]
struct ChangedCount(usize);

fn count_changed_currents(
    changed: Query<(), Changed<Current<i32>>>,
    mut count: ResMut<ChangedCount>,
) {
    count.0 += changed.iter().count();
}

/// What the object tick writes into `Next<i32>` this frame (`None`: leave it alone).
#[derive(Resource, Default)]
struct WriteNext(Option<i32>);

fn write_next(write: Res<WriteNext>, mut next: Query<&mut Next<i32>>) {
    if let Some(value) = write.0 {
        for mut next in &mut next {
            next.0 = value; // through DerefMut: marks Next changed even if equal
        }
    }
}

fn bump_unregistered(mut next: Query<&mut Next<u64>>) {
    for mut next in &mut next {
        next.0 += 1;
    }
}

#[test]
fn advance_copies_only_registered_types() {
    let _serial = serial();
    let mut app = phases_app(ExecutorKind::MultiThreaded);
    app.register_double_buffered::<i32>()
        .insert_resource(WriteNext(Some(7)))
        .add_systems(
            FixedUpdate,
            (write_next, bump_unregistered).in_set(FramePhase::ObjectTick),
        );
    let e = app
        .world_mut()
        .spawn((DoubleBuffered::new(0i32), DoubleBuffered::new(0u64)))
        .id();
    for _ in 0..3 {
        frame(&mut app);
    }
    assert_eq!(current::<i32>(&app, e), 7);
    assert_eq!(app.world().get::<Next<u64>>(e).unwrap().0, 3);
    assert_eq!(current::<u64>(&app, e), 0, "u64 is not registered");
    let registry = app.world().resource::<DoubleBufferRegistry>();
    assert!(registry.contains::<i32>() && !registry.contains::<u64>());
}

#[test]
fn unchanged_next_does_not_mark_current_changed() {
    let _serial = serial();
    let mut app = phases_app(ExecutorKind::MultiThreaded);
    app.register_double_buffered::<i32>()
        .init_resource::<ChangedCount>()
        .init_resource::<WriteNext>()
        .add_systems(
            FixedUpdate,
            (
                count_changed_currents.in_set(FramePhase::FrameSetup),
                write_next.in_set(FramePhase::ObjectTick),
            ),
        );
    app.world_mut().spawn(DoubleBuffered::new(5i32));
    let count = |app: &App| app.world().resource::<ChangedCount>().0;

    frame(&mut app);
    assert_eq!(count(&app), 1, "spawning counts as a change");
    // Nobody touches Next: Current is not touched either.
    frame(&mut app);
    frame(&mut app);
    assert_eq!(count(&app), 1);
    // Next is rewritten with the value it already has: Next is marked changed, Current is not.
    app.insert_resource(WriteNext(Some(5)));
    frame(&mut app);
    frame(&mut app);
    assert_eq!(
        count(&app),
        1,
        "an equal Next must not mark Current changed"
    );
    // A different value: copied once, seen once by the next frame's setup.
    app.insert_resource(WriteNext(Some(6)));
    frame(&mut app);
    assert_eq!(count(&app), 1);
    frame(&mut app);
    assert_eq!(count(&app), 2);
    frame(&mut app);
    assert_eq!(count(&app), 2, "6 again is no change");
}

#[test]
fn registering_twice_and_adding_the_plugin_twice_is_idempotent() {
    let _serial = serial();
    let mut app = App::new();
    // Registration before the plugin, and again after it.
    app.register_double_buffered::<i32>()
        .add_plugins(FramePhasesPlugin::default())
        .add_plugins(FramePhasesPlugin::default())
        .register_double_buffered::<i32>()
        .init_resource::<ChangedCount>()
        .add_systems(
            FixedUpdate,
            count_changed_currents.in_set(FramePhase::FrameSetup),
        );
    assert_eq!(app.world().resource::<DoubleBufferRegistry>().len(), 1);
    let e = app.world_mut().spawn(DoubleBuffered::new(1i32)).id();
    app.world_mut().get_mut::<Next<i32>>(e).unwrap().0 = 2;
    frame(&mut app);
    assert_eq!(current::<i32>(&app, e), 2, "registered before the plugin");
    assert_eq!(app.world().resource::<FrameTimings>().frames, 1);
    let systems = app
        .get_schedule(FixedUpdate)
        .unwrap()
        .systems()
        .unwrap()
        .count();
    // 4 × (begin, end) markers + publish + one copy system + the counter.
    assert_eq!(systems, 11, "no duplicated systems");
}

#[test]
fn spawning_current_alone_adds_next_with_the_same_value() {
    let _serial = serial();
    let mut app = phases_app(ExecutorKind::SingleThreaded);
    app.register_double_buffered::<i32>();
    let e = app.world_mut().spawn(Current(9i32)).id();
    app.world_mut().flush();
    assert_eq!(app.world().get::<Next<i32>>(e), Some(&Next(9)));
    // An explicit Next wins over the hook.
    let f = app.world_mut().spawn((Current(1i32), Next(2i32))).id();
    app.world_mut().flush();
    assert_eq!(app.world().get::<Next<i32>>(f), Some(&Next(2)));
    frame(&mut app);
    assert_eq!(current::<i32>(&app, f), 2);
}

// ---------------------------------------------------------------------------------------------
// Ordering inside another schedule and parent set.

#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
struct Tick;

#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
enum Stage {
    Before,
    Game,
    After,
}

#[derive(Resource, Default)]
struct Trace(Vec<&'static str>);

#[test]
fn phases_run_in_order_inside_a_custom_schedule_and_parent_set() {
    let _serial = serial();
    let mut app = App::new();
    app.init_resource::<Trace>()
        .configure_sets(Tick, (Stage::Before, Stage::Game, Stage::After).chain())
        .add_plugins(FramePhasesPlugin::in_schedule(Tick).within(Stage::Game));
    let log = |name: &'static str| move |mut t: ResMut<Trace>| t.0.push(name);
    // Added in scrambled order on purpose.
    app.add_systems(
        Tick,
        (
            log("after").in_set(Stage::After),
            log("advance").in_set(FramePhase::AdvanceFrame),
            log("network").in_set(FramePhase::NetworkTick),
            log("object").in_set(FramePhase::ObjectTick),
            log("setup").in_set(FramePhase::FrameSetup),
            log("before").in_set(Stage::Before),
        ),
    );
    app.world_mut().run_schedule(Tick);
    assert_eq!(
        app.world().resource::<Trace>().0,
        ["before", "setup", "object", "network", "advance", "after"]
    );
    assert_eq!(app.world().resource::<FrameTimings>().frames, 1);
}

// ---------------------------------------------------------------------------------------------
// Single-threaded and multi-threaded runs are bit-identical, and equal a plain reference.

#[derive(Clone, Copy, PartialEq, Debug)]
struct Pos(Vec2);

#[derive(Clone, Copy, PartialEq, Debug)]
struct Vel(Vec2);

/// The ring neighbours (previous, next) of an object.
#[derive(Component, Clone, Copy)]
struct Neighbours([Entity; 2]);

const RING: usize = 256;
const DT: f32 = 1.0 / 64.0;

fn steer(me: Vec2, vel: Vec2, a: Vec2, b: Vec2, va: Vec2, vb: Vec2) -> Vec2 {
    let cohesion = ((a + b) * 0.5 - me) * 0.8;
    let alignment = ((va + vb) * 0.5 - vel) * 0.3;
    let separation = [a, b].iter().fold(Vec2::ZERO, |acc, &o| {
        let d = me - o;
        acc + d / (d.length_squared() + 0.05)
    }) * 0.02;
    vel + (cohesion + alignment + separation) * DT
}

#[allow(clippy::type_complexity)] // a Bevy system's query
fn steer_system(
    currents: Query<(&Current<Pos>, &Current<Vel>)>,
    mut objects: Query<(&Current<Pos>, &Current<Vel>, &Neighbours, &mut Next<Vel>)>,
) {
    objects
        .par_iter_mut()
        .for_each(|(pos, vel, neighbours, mut next)| {
            let [(pa, va), (pb, vb)] = neighbours.0.map(|n| {
                let (p, v) = currents.get(n).unwrap();
                (p.0.0, v.0.0)
            });
            next.0 = Vel(steer(pos.0.0, vel.0.0, pa, pb, va, vb));
        });
}

fn move_system(mut objects: Query<(&Current<Pos>, &Current<Vel>, &mut Next<Pos>)>) {
    objects.par_iter_mut().for_each(|(pos, vel, mut next)| {
        next.0 = Pos(pos.0.0 + vel.0.0 * DT);
    });
}

fn start(i: usize) -> (Vec2, Vec2) {
    let angle = i as f32 / RING as f32 * std::f32::consts::TAU;
    let wobble = ((i * 7919) % 13) as f32 * 0.01;
    (
        Vec2::new(angle.cos(), angle.sin()) * (10.0 + wobble),
        Vec2::new(-angle.sin(), angle.cos()) * (0.5 + wobble),
    )
}

/// Runs the ring for `frames` frames; returns the final (pos, vel) bits of each object in ring
/// order.
fn run_ring(executor: ExecutorKind, frames: usize) -> Vec<[u32; 4]> {
    let mut app = phases_app(executor);
    app.register_double_buffered::<Pos>()
        .register_double_buffered::<Vel>()
        .add_systems(
            FixedUpdate,
            (steer_system, move_system).in_set(FramePhase::ObjectTick),
        );
    let entities: Vec<Entity> = (0..RING)
        .map(|i| {
            let (p, v) = start(i);
            app.world_mut()
                .spawn((DoubleBuffered::new(Pos(p)), DoubleBuffered::new(Vel(v))))
                .id()
        })
        .collect();
    for (i, e) in entities.iter().enumerate() {
        let n = Neighbours([entities[(i + RING - 1) % RING], entities[(i + 1) % RING]]);
        app.world_mut().entity_mut(*e).insert(n);
    }
    for _ in 0..frames {
        frame(&mut app);
    }
    entities
        .iter()
        .map(|e| {
            let p = current::<Pos>(&app, *e).0;
            let v = current::<Vel>(&app, *e).0;
            [p.x.to_bits(), p.y.to_bits(), v.x.to_bits(), v.y.to_bits()]
        })
        .collect()
}

/// The same rule on plain vectors, double-buffered by hand.
fn reference_ring(frames: usize) -> Vec<[u32; 4]> {
    let (mut pos, mut vel): (Vec<Vec2>, Vec<Vec2>) = (0..RING).map(start).unzip();
    for _ in 0..frames {
        let next_vel: Vec<Vec2> = (0..RING)
            .map(|i| {
                let (a, b) = ((i + RING - 1) % RING, (i + 1) % RING);
                steer(pos[i], vel[i], pos[a], pos[b], vel[a], vel[b])
            })
            .collect();
        let next_pos: Vec<Vec2> = (0..RING).map(|i| pos[i] + vel[i] * DT).collect();
        pos = next_pos;
        vel = next_vel;
    }
    pos.iter()
        .zip(&vel)
        .map(|(p, v)| [p.x.to_bits(), p.y.to_bits(), v.x.to_bits(), v.y.to_bits()])
        .collect()
}

#[test]
fn single_and_multi_threaded_runs_are_bit_identical_after_1000_frames() {
    let _serial = serial();
    let single = run_ring(ExecutorKind::SingleThreaded, 1000);
    let multi = run_ring(ExecutorKind::MultiThreaded, 1000);
    assert!(single == multi, "executors disagree");
    assert!(
        single == reference_ring(1000),
        "the ECS run differs from the double-buffered reference"
    );
    assert!(
        single != reference_ring(999),
        "the scenario must evolve every frame"
    );
}

// ---------------------------------------------------------------------------------------------
// Diagnostics, with the plugin in FixedUpdate of a normal MinimalPlugins App.

#[derive(Clone, PartialEq)]
struct Health(u32);

#[test]
fn diagnostics_report_every_phase_and_the_object_count() {
    let _serial = serial();
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, FramePhasesPlugin::default()))
        .insert_resource(TimeUpdateStrategy::FixedTimesteps(1))
        .register_double_buffered::<i32>()
        .register_double_buffered::<Health>();
    // 5 with i32 only, 3 with Health only, 4 with both, 2 with neither: 12 objects.
    for _ in 0..5 {
        app.world_mut().spawn(DoubleBuffered::new(0i32));
    }
    for _ in 0..3 {
        app.world_mut().spawn(DoubleBuffered::new(Health(1)));
    }
    for _ in 0..4 {
        app.world_mut()
            .spawn((DoubleBuffered::new(0i32), DoubleBuffered::new(Health(1))));
    }
    for _ in 0..2 {
        app.world_mut().spawn(Transform::default());
    }
    for _ in 0..20 {
        app.update();
    }
    let timings = app.world().resource::<FrameTimings>().clone();
    assert!(timings.frames >= 15, "only {} frames", timings.frames);
    assert_eq!(timings.objects, 12);
    assert!(timings.frame >= timings.phase(FramePhase::ObjectTick));
    let store = app.world().resource::<DiagnosticsStore>();
    for phase in FramePhase::ALL {
        let diagnostic = store.get(&phase.diagnostic_path()).unwrap();
        assert!(
            diagnostic.measurement().is_some(),
            "no measurement for {phase:?}"
        );
        assert!(diagnostic.value().unwrap() >= 0.0);
        assert_eq!(diagnostic.history_len() as u64, timings.frames);
    }
    assert!(
        store
            .get_measurement(&FramePhasesPlugin::FRAME_MS)
            .is_some()
    );
    assert_eq!(
        store
            .get_measurement(&FramePhasesPlugin::FRAME_OBJECTS)
            .unwrap()
            .value,
        12.0
    );
}

#[test]
fn event_queue_pops_equal_instants_first_in_first_out() {
    let mut queue = VirtualEventQueue::new();
    let at = VirtualInstant::new(4, 2);
    for event in ["first", "second", "third"] {
        queue.schedule(at, event);
    }
    queue.schedule(VirtualInstant::new(4, 1), "earlier priority");
    let popped: Vec<_> = queue.drain_due(at).map(|(_, e)| e).collect();
    assert_eq!(popped, ["earlier priority", "first", "second", "third"]);
}
