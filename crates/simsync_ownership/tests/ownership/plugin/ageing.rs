//! Relayed states moved on by their age: a copy of a moving body follows its owner's within a
//! few millimetres at 50 ms of latency, and a resting copy is where the owner has it.

use bevy::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_ownership::prelude::*;

use super::harness::{Body, Session, steps};

/// The speed of the moving body, m/s.
const SPEED: f32 = 0.36;

/// Participant 1's copy of `body` against participant 0's (its owner's), in metres.
fn copy_error(s: &Session, body: u64) -> f32 {
    s.body_on(1, body).0.distance(s.body_on(0, body).0)
}

/// Two participants over links of 25 ms each way (50 ms from owner to receiver); participant
/// 0 owns body 1, floating at 0.36 m/s, and body 2, held at rest. Over 2 s after the first
/// second, participant 1's copy of the moving body stays within 5 mm of the owner's (it lagged
/// by speed × age before states were moved on), and its copy of the resting body within the
/// 1 mm of quantization (rule 16), its velocity zero.
#[test]
fn a_moving_copy_follows_its_owner_within_5_mm_at_50_ms_and_a_resting_one_is_unmoved() {
    let bodies = [
        Body::floating(1, Vec3::ZERO),
        Body::floating(2, Vec3::new(0.0, 0.0, 5.0)),
    ];
    let link = LinkConditionerConfig::PERFECT.with_latency(25, 0);
    let mut s = Session::conditioned(12, link, 2, &bodies);
    let me = s.id_of(0);
    s.set_velocity(0, 1, Vec3::new(SPEED, 0.0, 0.0));
    s.command(0, 1, |e| {
        e.poke();
    });
    s.command(0, 2, |e| {
        e.grab();
    });
    s.run_until(steps(1_000), |s| {
        [1, 2]
            .iter()
            .all(|&b| s.server_owner(b).is_some_and(|(o, _)| o == me))
    })
    .expect("participant 0 owns both");
    s.run(steps(1_000));
    let (mut moving, mut resting) = (0.0f32, 0.0f32);
    for _ in 0..steps(2_000) {
        s.step();
        moving = moving.max(copy_error(&s, 1));
        resting = resting.max(copy_error(&s, 2));
    }
    let relays = s.stats(1).relays_applied;
    println!(
        "ageing at 50 ms: moving copy within {:.2} mm of its owner's, resting copy within \
         {:.2} mm; {relays} relayed states applied",
        moving * 1_000.0,
        resting * 1_000.0
    );
    assert!(relays >= 2, "{relays} relayed states applied");
    assert!(s.body_on(1, 1).1.linear.x > SPEED * 0.99, "the copy moves");
    assert!(moving < 0.005, "moving copy {:.2} mm off", moving * 1_000.0);
    assert!(
        resting <= 0.001,
        "resting copy {:.2} mm off",
        resting * 1_000.0
    );
    assert_eq!(s.body_on(1, 2).1.linear, Vec3::ZERO);
}
