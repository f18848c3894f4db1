//! The rollback of a hybrid session's players' worlds with 0 and with 2,000 props, measured
//! in the same run (issue 40's target: ratio ≤ 1.10).
//!
//! Each scene is one App running the hybrid tests' game (`tests/hybrid/arena.rs`: 4 avatars on
//! a ground, walking, the default pool of 32 proxies) in a local session whose inputs arrive 8
//! ticks late, so every update rolls back and predicts 8 ticks; its own world holds 0 or 2,000
//! props this peer owns, all moving (circling on a 1 m grid of 50 × 40 around and through the
//! avatars' area), each input carrying 6 of them in turn. After a warm-up the pool of the
//! 2,000-prop scene is full and busy: its proxies move every tick, change props every few
//! ticks, and those within reach of an avatar take part in its physics.
//!
//! A third scene has 32 props, as many as proxies, on the grid's first row (out of the
//! avatars' reach): its pool is as full and busy as the 2,000-prop scene's, so `2000 ÷ 32` is
//! what the props' number adds; `2000 ÷ 0` also counts what a busy pool adds to an idle one.
//!
//! What is timed, after one session update of each App (samples of the scenes interleaved, so
//! all see the same machine): `SimulationWorlds::rollback_predicted` (the verified world copied
//! into the predicted one) followed by 8 runs of `SimulationTick` on the predicted world (the
//! re-simulation). Printed: the median of each, the copy and the 8 ticks apart, the proxies in
//! use and the mean number solid (in reach, in the physics) after the re-simulation, and the
//! ratios (2,000 ÷ 0, 2,000 ÷ 32). Also printed, for the record: a whole session update of each
//! App, which in the 2,000-prop scene includes choosing the carried props among 2,000 in the
//! App's own world (the owner's cost, not the rollback's).

#[path = "../tests/hybrid/arena.rs"]
mod arena;

use std::time::{Duration, Instant};

use bevy::prelude::*;
use bevy_rapier3d::prelude::{CollisionGroups, Group};
use criterion::{Criterion, criterion_group, criterion_main};
use simsync::deterministic::{LocalSessionConfig, SessionClock, SimulationWorlds};
use simsync::hybrid::{HybridConfig, HybridPlugin, PropProxy, hybrid_session};
use simsync::prelude::*;

use arena::{Arena, Script, wander};

const PLAYERS: u8 = 4;
const LATE_TICKS: u32 = 8;
const WARM_UPDATES: usize = 150;
const SAMPLES: usize = 200;

/// A local hybrid session with `props` owned props circling in the App's own world.
fn scene(props: u64) -> App {
    let config = HybridConfig::default();
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        hybrid_session::<PackedInput, _>(Arena { players: PLAYERS }, config.clone())
            .config(SessionConfig {
                skip_rollback_when_predictions_hold: false,
                clock: SessionClock::Stepped {
                    ticks_per_update: 1,
                },
                local: LocalSessionConfig {
                    latency_ticks: vec![LATE_TICKS; usize::from(PLAYERS)],
                    jitter_ticks: 0,
                    seed: 7,
                    known_players: vec![0],
                },
                ..Default::default()
            })
            .players(PLAYERS),
    );
    app.add_plugins(HybridPlugin::<PackedInput>::new(config).scripted(wander));
    let scripts: Vec<_> = (0..props)
        .map(|n| {
            // Rings of 50 around the avatars' area, 1 m apart.
            let center = Vec3::new((n % 50) as f32 - 25.0, 0.4, (n / 50) as f32 - 20.0);
            let circle = Script::Circle {
                center,
                radius: 0.5,
                period: 64.0 + (n % 7) as f32,
            };
            (n + 1, circle)
        })
        .collect();
    arena::spawn_props(&mut app, &scripts, |_| true);
    for _ in 0..WARM_UPDATES {
        app.update();
    }
    app
}

/// One rollback of the players' worlds and its re-simulation: the time of the copy and of the
/// 8 ticks.
fn rollback_and_resimulate(app: &mut App) -> (Duration, Duration) {
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let t = Instant::now();
    worlds.rollback_predicted();
    let copied = t.elapsed();
    let predicted = worlds.predicted_mut();
    for _ in 0..LATE_TICKS {
        predicted.run_schedule(SimulationTick);
    }
    (copied, t.elapsed() - copied)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn bench(c: &mut Criterion) {
    let mut none = scene(0);
    let mut many = scene(2_000);
    let mut group = c.benchmark_group("hybrid_rollback");
    for (name, app) in [("0 props", &mut none), ("2000 props", &mut many)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        app.update();
                        let (copy, resimulation) = rollback_and_resimulate(app);
                        copy + resimulation
                    })
                    .sum()
            })
        });
    }
    group.finish();

    let mut full = scene(32);
    let mut samples = vec![Samples::default(); 3];
    for _ in 0..SAMPLES {
        for (app, samples) in [&mut none, &mut full, &mut many]
            .into_iter()
            .zip(samples.iter_mut())
        {
            let t = Instant::now();
            app.update();
            samples.update.push(t.elapsed());
            let (copy, resimulation) = rollback_and_resimulate(app);
            samples.copy.push(copy);
            samples.resimulation.push(resimulation);
            samples.rollback.push(copy + resimulation);
            samples.solid += solid_proxies(app);
        }
    }
    println!(
        "| props | proxies in use | solid proxies (mean) | rollback + 8 ticks | copy | 8 ticks | session update |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut medians = Vec::new();
    for (props, (app, samples)) in [0, 32, 2000]
        .iter()
        .zip([&mut none, &mut full, &mut many].into_iter().zip(samples))
    {
        let used = proxies_in_use(app);
        let solid = samples.solid as f64 / SAMPLES as f64;
        let [r, c, s, u] = [
            samples.rollback,
            samples.copy,
            samples.resimulation,
            samples.update,
        ]
        .map(median);
        println!("| {props} | {used} | {solid:.2} | {r:?} | {c:?} | {s:?} | {u:?} |");
        medians.push((r, u));
    }
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "rollback + re-simulation ratio, 2000 ÷ 0 props: {:.3}; 2000 ÷ 32 props (pool full in both): {:.3}",
        ratio(medians[2].0, medians[0].0),
        ratio(medians[2].0, medians[1].0)
    );
    println!(
        "session update ratio, 2000 ÷ 0 props: {:.3}; 2000 ÷ 32: {:.3}",
        ratio(medians[2].1, medians[0].1),
        ratio(medians[2].1, medians[1].1)
    );
}

/// One scene's timings, one entry per sample, and the solid proxies summed over the samples.
#[derive(Clone, Default)]
struct Samples {
    rollback: Vec<Duration>,
    copy: Vec<Duration>,
    resimulation: Vec<Duration>,
    update: Vec<Duration>,
    solid: usize,
}

/// The proxies of the verified world standing for a prop.
fn proxies_in_use(app: &mut App) -> usize {
    let world = app
        .world_mut()
        .resource_mut::<SimulationWorlds>()
        .into_inner();
    let world = world.verified_mut();
    let mut q = world.query::<&PropProxy>();
    q.iter(world).filter(|p| p.prop.is_some()).count()
}

/// The proxies of the predicted world in the physics (in reach of a player, solid).
fn solid_proxies(app: &mut App) -> usize {
    let world = app
        .world_mut()
        .resource_mut::<SimulationWorlds>()
        .into_inner();
    let world = world.predicted_mut();
    let mut q = world.query::<(&PropProxy, &CollisionGroups)>();
    q.iter(world)
        .filter(|(_, groups)| groups.memberships != Group::NONE)
        .count()
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
