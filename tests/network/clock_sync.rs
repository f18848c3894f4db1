//! Clock synchronisation of networked clients: the lead of their inputs at the server, and
//! lockstep pacing.

use simsync::deterministic::NetworkSessionConfig;
use simsync::relay::RelayServer;
use simsync_net::LinkConditionerConfig;
use simsync_net::target_lead_ticks;

use super::harness::{Peers, PeersExt, peers, peers_of, plugin};
use crate::common::TestGame;

fn game() -> TestGame {
    TestGame {
        boxes: 10,
        ..TestGame::default()
    }
}

/// The lead a client steers to (what the client's clock control targets): one tick plus twice
/// the RTT jitter, in ticks at 64 Hz. The one-way latency is already in the lead the server
/// measures (newest input tick − server tick at its arrival).
fn target_of(jitter_ms: f64) -> f64 {
    target_lead_ticks(0.0, jitter_ms, 64)
}

/// Converged: the server-reported lead is within `LEAD_TOLERANCE` ticks of the client's target
/// for `CONVERGED_FRAMES` consecutive frames (the lead is measured in whole ticks, so ±1.5 is
/// one tick of quantization plus half a tick of control error).
const LEAD_TOLERANCE: f64 = 1.5;
const CONVERGED_FRAMES: u32 = 32;

#[test]
fn lead_reconverges_within_two_seconds_after_an_rtt_step() {
    let mut h = twenty_ms();
    h.verify(300, 600);
    for c in 0..2 {
        // 20 ms one way is 2 frames of 15.6 ms: ≈ 62 ms measured at frame granularity.
        let net = h.net_of(c);
        assert!(net.rtt_ms > 30.0 && net.rtt_ms < 80.0, "{net:?}");
    }
    // RTT 40 → 300 ms on every link, both directions.
    let slow = LinkConditionerConfig::PERFECT.with_latency(150, 0);
    for c in 0..2 {
        h.set_link(c, slow).expect("link");
    }
    // Settled: the RTT estimate is within 10 % of 300 ms (150 ms is 9.6 frames, so up to 10
    // frames each way: ≤ 313 ms measured).
    let mut settled_at: [Option<u32>; 2] = [None; 2];
    let mut converged_at: [Option<u32>; 2] = [None; 2];
    let mut streak = [0u32; 2];
    let mut min_lead = [f32::MAX; 2];
    for frame in 0..1_200u32 {
        h.step();
        for c in 0..2 {
            let net = h.net_of(c);
            min_lead[c] = min_lead[c].min(net.input_lead_ticks);
            if settled_at[c].is_none() && (net.rtt_ms - 300.0).abs() <= 30.0 {
                settled_at[c] = Some(frame);
            }
            if settled_at[c].is_some() && converged_at[c].is_none() {
                let error = f64::from(net.input_lead_ticks) - target_of(net.jitter_ms);
                if error.abs() <= LEAD_TOLERANCE {
                    streak[c] += 1;
                    if streak[c] >= CONVERGED_FRAMES {
                        converged_at[c] = Some(frame + 1 - CONVERGED_FRAMES);
                    }
                } else {
                    streak[c] = 0;
                }
            }
        }
        if converged_at.iter().all(Option::is_some) {
            break;
        }
    }
    for c in 0..2 {
        let settled = settled_at[c].unwrap_or_else(|| panic!("client {c}: RTT never settled"));
        let converged = converged_at[c].unwrap_or_else(|| {
            panic!(
                "client {c}: lead never converged (settled at frame {settled}): {:?}",
                h.net_of(c)
            )
        });
        eprintln!(
            "client {c}: min lead {} after the step, RTT settled at frame {settled}, lead converged at frame {converged}",
            min_lead[c]
        );
        // The step really pushed the lead off target (inputs arrived late)...
        assert!(min_lead[c] < 0.0, "{min_lead:?}");
        // ...and it is back within 2 s (128 frames) of the RTT estimate settling.
        assert!(
            converged <= settled + 128,
            "client {c}: settled {settled}, converged {converged}"
        );
    }
    // The session kept verifying through it, and agreed.
    let verified = h.stats_of(0).verified_tick;
    h.verify(verified + 64, 200);
    h.assert_all_agree();
}

/// Two clients of the game over a 20 ms link.
fn twenty_ms() -> Peers {
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    peers(game(), link).build().expect("peers")
}

#[test]
fn a_client_starting_two_ticks_behind_catches_up() {
    let mut h = twenty_ms();
    // Up to the server's start, everyone steps; then client 1 misses two frames (its clock
    // starts two ticks after client 0's).
    let started = |h: &Peers| h.relay().world().resource::<RelayServer>().started();
    for _ in 0..200 {
        if started(&h) {
            break;
        }
        h.step();
    }
    assert!(started(&h));
    h.pause(1).expect("pause");
    h.step();
    h.step();
    h.resume(1).expect("resume");
    // Caught up: from this frame on, the server-reported lead of its inputs is never negative
    // again (it reads 0 before the first report, so the catch-up is the last negative report).
    let mut last_behind = None;
    let mut min_lead = f32::MAX;
    for frame in 0..400u32 {
        h.step();
        let net = h.net_of(1);
        min_lead = min_lead.min(net.input_lead_ticks);
        if net.input_lead_ticks < 0.0 {
            last_behind = Some(frame);
        }
    }
    let at = last_behind.map_or(0, |f| f + 1);
    eprintln!(
        "late client: caught up at frame {at}, min lead {min_lead}, stats {:?}",
        h.net_of(1)
    );
    // It really started behind: its first inputs reached the server late.
    assert!(min_lead < 0.0, "{min_lead}");
    assert!(at <= 64, "caught up only after {at} frames");
    h.assert_all_agree();
}

#[test]
fn lockstep_with_three_ticks_of_latency_and_delay_three_does_not_stall() {
    // 46 ms one way is 2.94 ticks: delivered 3 frames later (47 ms would take 4 frames of
    // 15.625 ms). Window 0: nothing is predicted.
    let game = game();
    let net = NetworkSessionConfig {
        fixed_input_delay: Some(3),
        ..NetworkSessionConfig::default()
    };
    let lockstep = move |_: usize| {
        plugin(game.clone())
            .networked(net.clone())
            .edit_config(|c| c.rollback_window = 0)
    };
    let mut h = peers_of(2, lockstep)
        .link(LinkConditionerConfig::PERFECT.with_latency(46, 0))
        .build()
        .expect("peers");
    // Warm-up: join, first RTT samples, clock settles.
    h.verify(100, 300);
    let before: Vec<_> = (0..2).map(|c| h.stats_of(c)).collect();
    let relay_before = h.relay_stats();
    let mut still_frames = [0u32; 2];
    for _ in 0..500 {
        let verified: Vec<_> = (0..2).map(|c| h.stats_of(c).verified_tick).collect();
        h.step();
        for c in 0..2 {
            if h.stats_of(c).verified_tick == verified[c] {
                still_frames[c] += 1;
            }
        }
    }
    let relay = h.relay_stats();
    eprintln!("lockstep: frames without verification {still_frames:?}; relay {relay:?}");
    for c in 0..2 {
        let s = h.stats_of(c);
        let net = s.network.clone().expect("networked");
        eprintln!(
            "client {c}: local {} verified {} stalls {} net {net:?}",
            s.local_tick, s.verified_tick, s.stalls
        );
        // No stall cycle: the verified tick advanced on every one of the 500 frames (at most 2
        // frames without, for clock corrections), and no stall was counted after the warm-up.
        assert!(still_frames[c] <= 2, "{still_frames:?}");
        assert!(s.verified_tick >= before[c].verified_tick + 498, "{s:?}");
        assert_eq!(s.stalls, before[c].stalls, "{s:?}");
        // Lockstep: nothing predicted.
        assert_eq!(s.ticks_predicted, 0);
        // Inputs reach the server in time: none late, none replaced.
        assert_eq!(
            net.late_inputs,
            before[c].network.as_ref().expect("networked").late_inputs,
            "{net:?}"
        );
        assert!(net.input_lead_ticks >= 0.0, "{net:?}");
        assert_eq!(
            relay.replaced_inputs[c], relay_before.replaced_inputs[c],
            "{relay:?}"
        );
    }
    h.assert_all_agree();
}
