//! An honest bulk grab (rate limits, rule 6): a participant that grabs 1,000 bodies in one frame
//! sends their bids as one batch, is never throttled by the entity server, and owns all of them
//! within a second at 2 % loss.

use bevy::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_ownership::prelude::*;

use super::harness::{Body, Session, steps};

/// Bodies grabbed at once.
const BODIES: u64 = 1_000;

/// Participant 0 grabs all of `BODIES` floating bodies (2 m apart on a 40 × 25 grid) in one
/// frame at 2 % loss each way: every bid is granted within 1 s (64 steps), no bid is dropped
/// by the rate limit, and the bids went out as few messages.
#[test]
fn a_bulk_grab_of_1000_bodies_is_granted_within_a_second_at_2_percent_loss() {
    let bodies: Vec<Body> = (1..=BODIES)
        .map(|id| {
            let (x, z) = ((id % 40) as f32, (id / 40) as f32);
            Body::floating(id, Vec3::new(x * 2.0, 0.0, z * 2.0))
        })
        .collect();
    let link = LinkConditionerConfig::PERFECT
        .with_latency(20, 5)
        .with_loss(2.0);
    let mut s = Session::conditioned(26, link, 2, &bodies);
    let me = s.id_of(0);
    for id in 1..=BODIES {
        s.command(0, id, |e| {
            e.grab();
        });
    }
    let granted = |s: &Session| {
        (1..=BODIES)
            .filter(|&b| s.server_owner(b).is_some_and(|(o, _)| o == me))
            .count()
    };
    let mut timeline = Vec::new();
    let mut all_at = None;
    for step in 1..=steps(9_000) {
        s.step();
        let n = granted(&s);
        if [
            steps(250),
            steps(500),
            steps(1_000),
            steps(3_000),
            steps(9_000),
        ]
        .contains(&step)
        {
            timeline.push((step, n));
        }
        if all_at.is_none() && n == BODIES as usize {
            all_at = Some(step);
        }
    }
    let stats = s.server_stats();
    println!(
        "bulk grab: granted (steps, bodies) {timeline:?}; all at step {all_at:?}; bids sent {} \
         ({} resends), server rate-limited {:?}",
        s.stats(0).bids_sent,
        s.stats(0).bid_resends,
        stats.rate_limited
    );
    assert_eq!(stats.rate_limited.bids, 0, "{:?}", stats.rate_limited);
    let all_at = all_at.expect("every bid granted");
    assert!(all_at <= steps(1_000), "all granted after {all_at} steps");
}
