//! What Rapier's portable math (`enhanced-determinism`, the default) costs: one plain tick of the
//! gas scene (every body moves every tick) and of the pile scene (resting piles, two pushers) in
//! a plain Bevy world, no session. The group is named after the math this build uses
//! (`plain_tick_portable_math` or `plain_tick_platform_math`), so a build with the feature and
//! one without keep their results side by side; `scripts/determinism.sh --bench` runs both and
//! prints the ratio.
//!
//! ```text
//! cargo bench --ignore-rust-version --bench physics_math                        # portable
//! cargo bench --ignore-rust-version --bench physics_math --no-default-features  # platform
//! ```

#[path = "../tests/common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "rollback/scenes.rs"]
mod scenes;

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use scenes::{Kind, Scene};

/// Ticks every world runs before it is timed (bodies settle, piles fall asleep).
const WARM_TICKS: u32 = 200;

/// The group name: which math this build's physics uses.
fn group_name() -> &'static str {
    if cfg!(feature = "enhanced-determinism") {
        "plain_tick_portable_math"
    } else {
        "plain_tick_platform_math"
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group(group_name());
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for (kind, name, n) in [
        (Kind::Gas, "gas", 262),
        (Kind::Pile, "pile", 262),
        (Kind::Pile, "pile", 1000),
    ] {
        let mut app = scenes::plain_world(Scene { kind, n });
        for _ in 0..WARM_TICKS {
            scenes::plain_tick(&mut app);
        }
        group.bench_function(BenchmarkId::new(name, n), |b| {
            b.iter(|| scenes::plain_tick(&mut app));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
