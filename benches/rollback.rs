//! Rollback cost against plain simulation, measured in the same run.
//!
//! - `rollback / tick`: one rollback (verified → predicted copy of every registered component,
//!   resource and Rapier's state) divided by one plain `SimulationTick`. Target ≤ 0.25 at 1,000
//!   bodies.
//! - `update(8 predicted) / 8 plain ticks`: one session update that verifies one tick, rolls
//!   back and predicts 8 ticks, divided by 8 plain ticks. Target ≤ 1.15 at 1,000 bodies.
//!
//! Scenes: the integration tests' game (piles of boxes, two players driven by scripted inputs),
//! bodies awake because players push into the piles.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use bevy::prelude::*;
use criterion::{Criterion, criterion_group, criterion_main};
use simsync::deterministic::SessionMode;
use simsync::prelude::*;

use common::TestGame;

fn game(bodies: u32, awake: bool) -> TestGame {
    TestGame {
        boxes: bodies,
        awake,
        ..TestGame::default()
    }
}

/// A lockstep app: every update verifies exactly one tick (a plain tick plus session overhead).
fn plain_app(bodies: u32, awake: bool) -> App {
    let mut app = common::app(game(bodies, awake), 0, SessionMode::Lockstep, false);
    common::run_until_verified(&mut app, 30);
    app
}

/// A predicting app whose inputs arrive 8 ticks late: every update verifies one tick, rolls
/// back and predicts 8.
fn predicting_app(bodies: u32, awake: bool, skip: bool) -> App {
    let mut app =
        common::app_with_skip(game(bodies, awake), 8, SessionMode::Predicted, false, skip);
    common::run_until_verified(&mut app, 30);
    app
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time_ticks(app: &mut App, n: usize) -> Duration {
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                app.update();
                t.elapsed()
            })
            .collect(),
    )
}

fn time_rollbacks(app: &mut App, n: usize) -> Duration {
    median(
        (0..n)
            .map(|_| {
                app.update();
                let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
                let t = Instant::now();
                worlds.rollback_predicted();
                t.elapsed()
            })
            .collect(),
    )
}

fn bench(c: &mut Criterion) {
    let mut report = Vec::new();
    for (bodies, awake) in [(100u32, false), (1_000, false), (1_000, true)] {
        let label = if awake { "awake" } else { "resting" };
        let mut group = c.benchmark_group(format!("{bodies}_bodies_{label}"));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(3));
        let mut plain = plain_app(bodies, awake);
        group.bench_function("plain_tick", |b| b.iter(|| plain.update()));
        let mut predicting = predicting_app(bodies, awake, false);
        group.bench_function("rollback", |b| b.iter(|| app_rollback(&mut predicting)));
        group.bench_function("update_predicting_8", |b| b.iter(|| predicting.update()));
        let mut skipping = predicting_app(bodies, awake, true);
        group.bench_function("update_predicting_8_with_skip", |b| {
            b.iter(|| skipping.update())
        });
        group.finish();

        // Ratios from medians measured back to back in this run.
        let tick = time_ticks(&mut plain, 60);
        let rollback = time_rollbacks(&mut predicting, 30);
        let update = time_ticks(&mut predicting, 60);
        let skipped = time_ticks(&mut skipping, 60);
        let depth = predicting
            .world()
            .resource::<SessionStats>()
            .max_prediction_depth;
        let s = skipping.world().resource::<SessionStats>().clone();
        report.push(format!(
            "{bodies} bodies ({label}): tick {tick:?}; rollback {rollback:?} → rollback/tick = {:.3} \
             (target ≤ 0.25); update predicting {depth} ticks {update:?} → update/(8 ticks) = {:.3} \
             (target ≤ 1.15); with rollback skip {skipped:?} → {:.3} ({} of {} rollbacks skipped)",
            rollback.as_secs_f64() / tick.as_secs_f64(),
            update.as_secs_f64() / (8.0 * tick.as_secs_f64()),
            skipped.as_secs_f64() / (8.0 * tick.as_secs_f64()),
            s.skipped_rollbacks,
            s.skipped_rollbacks + s.rollbacks,
        ));
    }
    for line in report {
        println!("{line}");
    }
}

fn app_rollback(app: &mut App) {
    app.world_mut()
        .resource_mut::<SimulationWorlds>()
        .rollback_predicted();
}

criterion_group!(benches, bench);
criterion_main!(benches);
