//! Generates `assets/traces/two_players.ron`, the sandbox's recorded input trace.
//!
//! Deterministic (fixed seed): each player follows a plan of open-loop actions laid out for
//! `assets/scenes/sandbox.ron` — walk into the box piles, push bodies, run up the ramps and jump
//! off them, wade through the ball carpet — cut into segments of 10–60 ticks with wobbling
//! directions and stray jumps, so predictions that repeat the last input go wrong often.
//!
//! ```text
//! cargo run --ignore-rust-version --example sandbox_trace_gen -- assets/traces/two_players.ron
//! ```
//! Without an argument the trace is printed to stdout.

use std::fmt::Write as _;

/// Ticks per second of the session.
const RATE: f32 = 64.0;
/// Speed assumed for dead reckoning, m/s (a little under the game's top speed).
const WALK_SPEED: f32 = 4.2;
/// Ticks each player's actions cover at least.
const LENGTH: u32 = 1_900;

/// xorshift64*: a tiny deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next() % u64::from(hi - lo + 1)) as u32
    }

    /// Uniform in `[lo, hi)`.
    fn float(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next() >> 40) as f32 / (1u64 << 24) as f32)
    }

    fn chance(&mut self, p: f32) -> bool {
        self.float(0.0, 1.0) < p
    }
}

/// One step of a player's plan.
#[derive(Clone, Copy)]
enum Action {
    /// Walk towards a point (x, z).
    Goto(f32, f32),
    /// Press push `n` times while leaning towards a point (x, z).
    Push(u32, f32, f32),
    /// Jump while walking towards a point (x, z).
    Jump(f32, f32),
    /// Stand still (no segment: a gap means default input).
    Idle(u32),
}

struct Segment {
    player: u8,
    start: u32,
    ticks: u32,
    movement: (f32, f32),
    jump: bool,
    push: bool,
}

struct Player {
    index: u8,
    tick: u32,
    x: f32,
    z: f32,
    segments: Vec<Segment>,
}

impl Player {
    fn emit(&mut self, ticks: u32, movement: (f32, f32), jump: bool, push: bool) {
        // `+ 0.0` turns -0.0 into 0.0.
        let q = |v: f32| (v.clamp(-1.0, 1.0) * 100.0).round() / 100.0 + 0.0;
        let movement = (q(movement.0), q(movement.1));
        self.segments.push(Segment {
            player: self.index,
            start: self.tick,
            ticks,
            movement,
            jump,
            push,
        });
        let step = WALK_SPEED * ticks as f32 / RATE;
        self.x += movement.0 * step;
        self.z += movement.1 * step;
        self.tick += ticks;
    }

    /// Unit direction towards (x, z), turned by `wobble` radians.
    fn towards(&self, x: f32, z: f32, wobble: f32) -> (f32, f32) {
        let (dx, dz) = (x - self.x, z - self.z);
        let len = (dx * dx + dz * dz).sqrt().max(1e-3);
        let (s, c) = wobble.sin_cos();
        let (ux, uz) = (dx / len, dz / len);
        (ux * c - uz * s, ux * s + uz * c)
    }

    fn run(&mut self, action: Action, rng: &mut Rng) {
        match action {
            Action::Goto(x, z) => loop {
                let distance = ((x - self.x).powi(2) + (z - self.z).powi(2)).sqrt();
                if distance < 0.4 {
                    break;
                }
                let magnitude = rng.float(0.7, 1.0);
                let needed = (distance / (WALK_SPEED * magnitude) * RATE).ceil() as u32;
                let ticks = rng.range(10, 60).min(needed.max(10));
                let (dx, dz) = self.towards(x, z, rng.float(-0.35, 0.35));
                let movement = (dx * magnitude, dz * magnitude);
                if rng.chance(0.2) && ticks > 14 {
                    self.emit(4, movement, true, false);
                    self.emit(ticks - 4, movement, false, false);
                } else {
                    self.emit(ticks, movement, false, false);
                }
            },
            Action::Push(times, x, z) => {
                for _ in 0..times {
                    let (dx, dz) = self.towards(x, z, 0.0);
                    let lean = (dx * 0.3, dz * 0.3);
                    self.emit(rng.range(3, 6), lean, false, true);
                    self.emit(rng.range(8, 20), lean, false, false);
                }
            }
            Action::Jump(x, z) => {
                let (dx, dz) = self.towards(x, z, 0.0);
                self.emit(rng.range(3, 8), (dx, dz), true, false);
                self.emit(rng.range(18, 40), (dx, dz), false, false);
            }
            Action::Idle(ticks) => self.tick += ticks,
        }
    }
}

fn plan(player: u8) -> Vec<Action> {
    use Action::{Goto, Idle, Jump, Push};
    match player {
        // West side: box tower, west ramp, ball carpet, north ramp.
        0 => vec![
            Goto(-1.0, 4.5),
            Goto(0.0, 6.5),
            Push(3, 0.0, 8.0),
            Jump(0.0, 8.0),
            Push(2, 0.0, 8.0),
            Goto(-6.0, 3.0),
            Goto(-12.0, 3.0),
            Jump(-14.0, 3.0),
            Idle(20),
            Goto(-9.0, -3.0),
            Goto(-9.0, -7.0),
            Push(3, -9.0, -8.0),
            Jump(-10.0, -8.0),
            Goto(0.0, -9.5),
            Goto(0.0, -16.0),
            Jump(0.0, -18.0),
            Idle(30),
            Goto(-0.5, 4.0),
            Push(2, 0.0, 7.0),
        ],
        // East side: crate stack, east ramp, box tower from the east, ball carpet.
        _ => vec![
            Goto(6.9, -5.5),
            Goto(6.9, -7.5),
            Push(3, 6.9, -8.0),
            Jump(6.9, -9.0),
            Push(2, 6.9, -8.0),
            Goto(6.0, 3.0),
            Goto(12.0, 3.0),
            Jump(14.0, 3.0),
            Idle(25),
            Goto(3.0, 7.5),
            Goto(1.5, 7.5),
            Push(3, 0.0, 7.5),
            Jump(0.0, 7.5),
            Goto(-5.0, -5.0),
            Goto(-8.0, -8.0),
            Push(2, -9.0, -8.0),
            Jump(-11.0, -9.0),
            Goto(0.0, -2.0),
        ],
    }
}

fn main() {
    let spawns = [(-3.0, 0.0), (3.0, 0.0)];
    let mut rng = Rng(0x7a3e_91c4_0b5d_2f68);
    let mut segments = Vec::new();
    for (index, (x, z)) in spawns.into_iter().enumerate() {
        let mut player = Player {
            index: index as u8,
            tick: 1 + 8 * index as u32,
            x,
            z,
            segments: Vec::new(),
        };
        'outer: loop {
            for action in plan(player.index) {
                if player.tick >= LENGTH {
                    break 'outer;
                }
                player.run(action, &mut rng);
            }
        }
        segments.append(&mut player.segments);
    }
    segments.sort_by_key(|s| (s.start, s.player));

    let mut out = String::new();
    out.push_str(HEADER);
    out.push_str("(\n    players: 2,\n    segments: [\n");
    for s in &segments {
        let _ = write!(
            out,
            "        (player: {}, start: {}, ticks: {}",
            s.player, s.start, s.ticks
        );
        if s.movement != (0.0, 0.0) {
            let _ = write!(out, ", move: ({:?}, {:?})", s.movement.0, s.movement.1);
        }
        if s.jump {
            out.push_str(", jump: true");
        }
        if s.push {
            out.push_str(", push: true");
        }
        out.push_str("),\n");
    }
    out.push_str("    ],\n)\n");
    match std::env::args().nth(1) {
        Some(path) => {
            if let Err(error) = std::fs::write(&path, out) {
                eprintln!("cannot write {path}: {error}");
                std::process::exit(2);
            }
        }
        None => print!("{out}"),
    }
}

const HEADER: &str = "\
// Recorded inputs of two players for the sandbox example (generated by
// `cargo run --ignore-rust-version --example sandbox_trace_gen -- assets/traces/two_players.ron`; edit the generator,
// not this file).
//
// Format (RON):
//   (
//     players: N,                 // players the trace was recorded for (segments use 0..N)
//     segments: [ SEGMENT, ... ], // any order; one player's segments must not overlap
//   )
//   SEGMENT = (player: P, start: T, ticks: D, move: (X, Y), jump: BOOL, push: BOOL)
//     player  the player index
//     start   first session tick the segment covers (the first simulated tick is 1)
//     ticks   how many ticks it lasts (>= 1); the actions are held for all of them
//     move    movement axes in [-1, 1]: X along world +X, Y along world +Z (default (0, 0))
//     jump    jump button held (default false); a jump fires on the tick it becomes held
//     push    push button held (default false); a push fires on the tick it becomes held
// Ticks no segment covers, for a player, mean the default input (standing still, no button):
// gaps between segments, and every tick after the last one.
";
