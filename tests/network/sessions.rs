//! Behaviour of the networked session.

use simsync_net::LinkConditionerConfig;

use super::harness::{PeersExt, peers};
use crate::common::TestGame;

fn game() -> TestGame {
    TestGame {
        boxes: 50,
        ..TestGame::default()
    }
}

#[test]
fn two_clients_agree_on_every_checksum_under_a_bad_network() {
    // 150 ms RTT (75 ms each way), 30 ms jitter (15 each way), 10 % loss, 5 % duplication,
    // 5 % reordering.
    let link = LinkConditionerConfig::PERFECT
        .with_latency(75, 15)
        .with_loss(10.0)
        .with_duplication(5.0)
        .with_reordering(5.0, 30);
    let mut h = peers(game(), link).build().expect("peers");
    h.verify(2_000, 4_000);
    let agreement = h.assert_all_agree();
    assert!(agreement.ticks_compared >= 2_000, "{agreement:?}");
    for c in 0..2 {
        let s = h.stats_of(c);
        let net = s.network.clone().expect("networked");
        assert!(net.rtt_ms > 100.0 && net.rtt_ms < 250.0, "{net:?}");
        assert!(s.max_prediction_depth <= 60, "{s:?}");
    }
    // No stall longer than the hard tolerance: the server confirmed ticks continuously.
    let relay = h.relay_stats();
    assert!(relay.server_tick - relay.confirmed_tick <= 8, "{relay:?}");
    eprintln!("relay: {relay:?}");
    for c in 0..2 {
        let s = h.stats_of(c);
        eprintln!(
            "client {c}: rollbacks {} skipped {} mispredicted {} depth {} net {:?}",
            s.rollbacks,
            s.skipped_rollbacks,
            s.mispredicted_inputs,
            s.max_prediction_depth,
            s.network
        );
        // Remote inputs are predicted and often wrong: real rollbacks happen.
        assert!(s.rollbacks > 20 && s.mispredicted_inputs > 20, "{s:?}");
    }
    // Redundancy and the clock lead keep replacements rare despite 10 % loss.
    let replaced: u64 = relay.replaced_inputs.iter().sum();
    assert!(replaced < 100, "{relay:?}");
}

#[test]
fn a_silent_client_is_replaced_and_the_other_keeps_verifying() {
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let mut h = peers(game(), link).build().expect("peers");
    h.verify(100, 400);
    // Client 1 goes silent: its App and transport are dropped (disconnects it).
    h.kill(1).expect("kill");
    let before = h.stats_of(0).verified_tick;
    h.run_frames(300).expect("client 0 plays on");
    let after = h.stats_of(0).verified_tick;
    assert!(after >= before + 250, "{before} → {after}");
    let relay = h.relay_stats();
    assert!(relay.replaced_inputs[1] >= 250, "{relay:?}");
    let net = h.net_of(0);
    assert!(net.replaced_inputs >= 250, "{net:?}");
}
