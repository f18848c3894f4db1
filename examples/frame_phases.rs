//! Frame phases headless: 10,000 objects on a grid, each steering by its four neighbours'
//! frame-start (`Current`) position and velocity, written to `Next` in parallel
//! (`par_iter_mut`), copied by `AdvanceFrame`.
//!
//! ```sh
//! cargo run --ignore-rust-version --release --example frame_phases -- --frames 600 --objects 10000
//! ```
//!
//! Prints the mean wall time of each phase (from `FrameTimings`) every simulated second (64
//! frames), a summary, and a checksum of the final state: the same arguments print the same
//! checksum on every run and any thread count, because object ticks only read frame-start state.

use std::time::{Duration, Instant};

use bevy::app::{TaskPoolOptions, TaskPoolPlugin, TaskPoolThreadAssignmentPolicy};
use bevy::prelude::*;
use bevy::time::TimeUpdateStrategy;
use clap::Parser;
use simsync::time::prelude::*;

#[derive(Parser, Debug)]
#[command(about = "Frame phases with double-buffered steering objects, headless")]
struct Args {
    /// Simulation frames to run (one per fixed step of 1/64 s).
    #[arg(long, default_value_t = 600)]
    frames: u32,
    /// Number of objects, laid out row by row on a square-ish grid (wrapping at the edges).
    #[arg(long, default_value_t = 10_000)]
    objects: u32,
}

/// Position in metres.
#[derive(Clone, Copy, PartialEq, Debug)]
struct Position(Vec2);

/// Velocity in metres per second.
#[derive(Clone, Copy, PartialEq, Debug)]
struct Velocity(Vec2);

/// The four grid neighbours (left, right, up, down), fixed at spawn.
#[derive(Component, Clone, Copy)]
struct Neighbours([Entity; 4]);

const DT: f32 = 1.0 / 64.0;
const SPACING: f32 = 2.0;

fn main() {
    let args = Args::parse();
    let objects = args.objects.max(1) as usize;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());

    let mut app = App::new();
    app.add_plugins(MinimalPlugins.set(TaskPoolPlugin {
        // Bevy's default gives the compute pool only what is left after the I/O and async
        // pools (a single thread on 2 cores); object ticks want every core.
        task_pool_options: TaskPoolOptions {
            compute: TaskPoolThreadAssignmentPolicy {
                min_threads: threads,
                max_threads: usize::MAX,
                percent: 1.0,
                on_thread_spawn: None,
                on_thread_destroy: None,
            },
            ..default()
        },
    }))
    // Exactly one fixed step (one simulation frame) per `app.update()`.
    .insert_resource(TimeUpdateStrategy::FixedTimesteps(1))
    .add_plugins(FramePhasesPlugin::default())
    .register_double_buffered::<Position>()
    .register_double_buffered::<Velocity>()
    .init_resource::<Centroid>()
    .add_systems(
        FixedUpdate,
        (
            (steer, integrate).in_set(FramePhase::ObjectTick),
            publish_centroid.in_set(FramePhase::NetworkTick),
        ),
    );
    spawn_grid(app.world_mut(), objects);
    app.finish();
    app.cleanup();

    println!(
        "{objects} objects, {} frames, {threads} threads; mean ms per frame by phase:",
        args.frames
    );
    println!("  frames | setup  | object | network | advance | frame");
    let started = Instant::now();
    let mut window = PhaseSums::default();
    let mut total = PhaseSums::default();
    let mut last_frame = 0;
    while last_frame < u64::from(args.frames) {
        app.update();
        let timings = app.world().resource::<FrameTimings>();
        if timings.frames == last_frame {
            continue; // no fixed step this update (cannot happen with FixedTimesteps(1))
        }
        last_frame = timings.frames;
        window.add(timings);
        total.add(timings);
        if last_frame % 64 == 0 || last_frame == u64::from(args.frames) {
            println!("{:>8} | {}", last_frame, window.means());
            window = PhaseSums::default();
        }
    }
    let wall = started.elapsed();
    let objects_seen = app.world().resource::<FrameTimings>().objects;
    let centroid = app.world().resource::<Centroid>().0;
    let checksum = checksum(app.world_mut());
    println!("    mean | {}", total.means());
    println!(
        "{last_frame} frames in {:.2} s ({:.0} frames/s), {objects_seen} objects per frame, \
         centroid {:?}, state checksum {:016x}",
        wall.as_secs_f64(),
        last_frame as f64 / wall.as_secs_f64(),
        centroid,
        checksum,
    );
}

/// Per-phase sums over some frames.
#[derive(Default)]
struct PhaseSums {
    phases: [Duration; 4],
    frame: Duration,
    frames: u32,
}

impl PhaseSums {
    fn add(&mut self, timings: &FrameTimings) {
        for phase in FramePhase::ALL {
            self.phases[phase.index()] += timings.phase(phase);
        }
        self.frame += timings.frame;
        self.frames += 1;
    }

    fn means(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0 / f64::from(self.frames.max(1));
        format!(
            "{:6.3} | {:6.3} | {:7.3} | {:7.3} | {:6.3}",
            ms(self.phases[0]),
            ms(self.phases[1]),
            ms(self.phases[2]),
            ms(self.phases[3]),
            ms(self.frame)
        )
    }
}

fn spawn_grid(world: &mut World, n: usize) {
    let width = (n as f64).sqrt().ceil() as usize;
    let entities: Vec<Entity> = (0..n)
        .map(|i| {
            let (x, y) = ((i % width) as f32, (i / width) as f32);
            // A swirl, so neighbours disagree and steering has work to do.
            let jitter = ((i * 2_654_435_761) % 1000) as f32 / 1000.0 - 0.5;
            let position = Vec2::new(x, y) * SPACING + Vec2::splat(jitter * 0.3);
            let velocity = Vec2::new((y * 0.37).sin(), (x * 0.29).cos()) + Vec2::splat(jitter);
            world
                .spawn((
                    DoubleBuffered::new(Position(position)),
                    DoubleBuffered::new(Velocity(velocity)),
                ))
                .id()
        })
        .collect();
    for (i, &entity) in entities.iter().enumerate() {
        let neighbour =
            |offset: isize| entities[(i as isize + offset).rem_euclid(n as isize) as usize];
        let w = width as isize;
        world.entity_mut(entity).insert(Neighbours([
            neighbour(-1),
            neighbour(1),
            neighbour(-w),
            neighbour(w),
        ]));
    }
}

/// Object tick, part 1: new velocity from the neighbours' frame-start state (cohesion towards
/// the grid spacing, alignment with their velocity), written to `Next<Velocity>`.
#[allow(clippy::type_complexity)] // a Bevy system's query
fn steer(
    others: Query<(&Current<Position>, &Current<Velocity>)>,
    mut objects: Query<(
        &Current<Position>,
        &Current<Velocity>,
        &Neighbours,
        &mut Next<Velocity>,
    )>,
) {
    objects
        .par_iter_mut()
        .for_each(|(position, velocity, neighbours, mut next)| {
            let (me, v) = (position.0.0, velocity.0.0);
            let mut spring = Vec2::ZERO;
            let mut mean_velocity = Vec2::ZERO;
            for &n in &neighbours.0 {
                let Ok((p, nv)) = others.get(n) else { continue };
                let d = p.0.0 - me;
                let len = d.length().max(1e-3);
                spring += d / len * (len - SPACING).clamp(-SPACING, SPACING);
                mean_velocity += nv.0.0 * 0.25;
            }
            let accel = spring * 1.5 + (mean_velocity - v) * 0.8 - v * 0.05;
            next.0 = Velocity(v + accel * DT);
        });
}

/// Object tick, part 2: new position from the frame-start position and velocity.
fn integrate(mut objects: Query<(&Current<Position>, &Current<Velocity>, &mut Next<Position>)>) {
    objects
        .par_iter_mut()
        .for_each(|(position, velocity, mut next)| {
            next.0 = Position(position.0.0 + velocity.0.0 * DT);
        });
}

/// What a network tick would send: here only the mean position, metres.
#[derive(Resource, Default)]
struct Centroid(Vec2);

fn publish_centroid(objects: Query<&Current<Position>>, mut centroid: ResMut<Centroid>) {
    let (sum, n) = objects
        .iter()
        .fold((Vec2::ZERO, 0u32), |(s, n), p| (s + p.0.0, n + 1));
    centroid.0 = sum / n.max(1) as f32;
}

/// FNV-1a over every object's position and velocity bits, in spawn order.
fn checksum(world: &mut World) -> u64 {
    let mut query = world.query::<(Entity, &Current<Position>, &Current<Velocity>)>();
    let mut rows: Vec<_> = query
        .iter(world)
        .map(|(e, p, v)| (e.index(), [p.0.0.x, p.0.0.y, v.0.0.x, v.0.0.y]))
        .collect();
    rows.sort_by_key(|(index, _)| *index);
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for (_, values) in rows {
        for value in values {
            for byte in value.to_bits().to_le_bytes() {
                hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
    hash
}
