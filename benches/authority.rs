//! What an authoritative relay room costs the server: one tick of its verified world
//! (`LockstepAuthority`, the game's session in lockstep on its own thread: hand the confirmed
//! set over, simulate, checksum, answer), as a ratio to one plain tick of the same scene in a
//! plain Bevy world measured in the same run, for the pile scene at 262 and 1,000 bodies.
//!
//! ```text
//! cargo bench --ignore-rust-version --bench authority
//! ```

#[path = "../tests/common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "rollback/scenes.rs"]
mod scenes;

use std::sync::Arc;
use std::time::{Duration, Instant};

use simsync::authority::LockstepAuthority;
use simsync::prelude::*;
use simsync::relay::Authority;
use simsync_net::InputSet;

use scenes::{Kind, Scene};

/// Ticks every world runs before it is timed (bodies settle, piles fall asleep).
const WARM_TICKS: i32 = 200;
/// Ticks timed per scene.
const TIMED_TICKS: usize = 300;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The confirmed set of `tick`: both players' scripted inputs.
fn set(tick: i32) -> InputSet {
    InputSet {
        inputs: (0..2u8)
            .map(|p| simsync_net::encode(&common::scripted_input(p, tick)).expect("encodes"))
            .collect(),
        replaced: 0,
        disconnected: 0,
    }
}

/// Hands tick `tick` to `authority` and waits for its checksum.
fn authority_tick(authority: &mut LockstepAuthority, tick: i32) {
    authority.confirmed(tick, &set(tick)).expect("confirmed");
    loop {
        let sums = authority.checksums().expect("checksums");
        if sums.iter().any(|(t, _)| *t == tick) {
            return;
        }
        std::hint::spin_loop();
    }
}

fn main() {
    println!("| scene | bodies | plain tick | authority tick | ratio |");
    println!("|---|---|---|---|---|");
    for n in [262, 1_000] {
        let scene = Scene {
            kind: Kind::Pile,
            n,
        };
        let mut plain = scenes::plain_world(scene);
        for _ in 0..WARM_TICKS {
            scenes::plain_tick(&mut plain);
        }
        let plain_tick = median(
            (0..TIMED_TICKS)
                .map(|_| {
                    let t = Instant::now();
                    scenes::plain_tick(&mut plain);
                    t.elapsed()
                })
                .collect(),
        );
        let make = Arc::new(move || DeterministicPlugin::<PackedInput>::new(scene));
        let mut authority = LockstepAuthority::spawn::<PackedInput>(2, make);
        for tick in 1..=WARM_TICKS {
            authority_tick(&mut authority, tick);
        }
        let authority_ticks: Vec<Duration> = (1..=TIMED_TICKS as i32)
            .map(|i| {
                let t = Instant::now();
                authority_tick(&mut authority, WARM_TICKS + i);
                t.elapsed()
            })
            .collect();
        let tick = median(authority_ticks);
        println!(
            "| pile | {n} | {:.1} µs | {:.1} µs | {:.2} |",
            plain_tick.as_secs_f64() * 1e6,
            tick.as_secs_f64() * 1e6,
            tick.as_secs_f64() / plain_tick.as_secs_f64()
        );
    }
}
