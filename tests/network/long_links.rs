//! Long and broken links: high round trips, pauses and outages. Every client keeps verifying,
//! agrees with the others and catches up to the live tick; no gap in the confirmed inputs is
//! permanent.

use simsync::deterministic::NetworkSessionConfig;
use simsync_net::LinkConditionerConfig;

use super::harness::Harness;
use crate::common::TestGame;

fn game() -> TestGame {
    TestGame {
        boxes: 10,
        ..TestGame::default()
    }
}

/// Runs until every client verified `ticks`, then checks that every checksum agrees.
fn converges(link: LinkConditionerConfig, ticks: i32, frames: u32) -> Harness {
    let mut h = Harness::new(game(), link, NetworkSessionConfig::default());
    h.run_until_verified(ticks, frames);
    let (compared, mismatches) = h.checksums_agree();
    assert!(compared >= ticks as usize, "{compared}");
    assert_eq!(mismatches, 0);
    for c in 0..h.clients.len() {
        let s = h.stats(c);
        eprintln!(
            "client {c}: verified {} net {:?}",
            s.verified_tick, s.network
        );
    }
    eprintln!("relay: {:?}", h.relay());
    h
}

#[test]
fn a_230_ms_round_trip_does_not_stall() {
    // Regression: the relay confirmed more than its redundancy of ticks in one update and never
    // sent the sets in between; the resend of an overdue ack then could not reach them.
    converges(
        LinkConditionerConfig::PERFECT.with_latency(115, 0),
        600,
        1_500,
    );
}
