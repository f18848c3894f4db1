//! Late checksums: a player running far behind reports its checksums after the relay judged
//! their ticks; the relay judges them against the kept verdicts (or counts them unjudged), and
//! a client at the end of its match waits for `judged_through` to hear of every desync.

use simsync::deterministic::{DesyncJudge, NetworkSessionConfig};
use simsync::relay::{DeterministicServerPlugin, RelayStats, Resync};
use simsync_net::{Direction, LinkConditionerConfig};

use super::authority::authoritative;
use super::harness::{Peers, PeersExt, peers_of, snapshot_plugin};
use super::hostile_peers::{desyncs, recording_desyncs};
use crate::deterministic::desync_dumps::MarbleGame;

/// `relay`'s room of 3 over a 20 ms link; client 0 plants a desync at tick 30; every client
/// checksums every 10 verified ticks.
fn liar_of_three(relay: DeterministicServerPlugin) -> Peers {
    let builder = peers_of(3, move |c| {
        let game = MarbleGame {
            plant_at: (c == 0).then_some(30),
            plant_in: None,
        };
        snapshot_plugin(game, NetworkSessionConfig::default())
            .edit_config(|config| config.checksum_interval = 10)
    })
    .link(LinkConditionerConfig::PERFECT.with_latency(20, 2))
    .relay(relay)
    .tolerate_desyncs();
    recording_desyncs(builder).build().expect("peers")
}

fn relay_stats(peers: &Peers) -> RelayStats {
    peers.relay().world().resource::<RelayStats>().clone()
}

#[test]
fn a_liar_paused_far_behind_is_judged_late_against_the_authority_and_resynced() {
    let mut peers = liar_of_three(authoritative(3, Resync::On));
    peers.verify(10, 2_000);
    // The liar hangs (before its planted tick) while the others play 250 ticks on: every tick
    // it would have reported is judged without it.
    peers.pause(0).expect("running");
    peers.run_frames(250).expect("runs");
    let before = relay_stats(&peers);
    assert_eq!(before.desyncs, 0, "{before:?}");
    // Seated, the silent liar holds the judgement back: it never reported its planted tick.
    assert!(before.judged_through < 30, "{before:?}");
    peers.resume(0).expect("running");
    peers.verify(300, 4_000);
    let stats = relay_stats(&peers);
    assert_eq!(stats.desyncs, 1, "{stats:?}");
    assert_eq!(stats.desync_episodes, vec![1, 0, 0], "{stats:?}");
    assert!(stats.late_checksums[0] >= 1, "{stats:?}");
    assert_eq!(stats.late_checksums[1..], [0, 0], "{stats:?}");
    assert_eq!(stats.unjudged_checksums, vec![0, 0, 0], "{stats:?}");
    assert!(stats.authority.resyncs >= 1, "{:?}", stats.authority);
    for c in 0..3 {
        let seen = desyncs(&peers, c);
        assert_eq!(seen.len(), 1, "client {c}: {seen:?}");
        assert_eq!(seen[0].players, vec![0], "client {c}");
        assert_eq!(seen[0].judge, DesyncJudge::Authority, "client {c}");
    }
    assert_eq!(peers.net_of(1).others_desynced, 1);
}

#[test]
fn a_late_checksum_of_a_tick_judged_without_a_majority_is_counted_unjudged() {
    let relay = DeterministicServerPlugin::new::<simsync::prelude::PackedInput>(3, 64);
    let mut peers = liar_of_three(relay);
    peers.verify(10, 2_000);
    // Player 2 hangs: the liar and the honest player 1 disagree from tick 30 on, with no
    // majority between them.
    peers.pause(2).expect("running");
    peers.run_frames(200).expect("runs");
    peers.resume(2).expect("running");
    peers.verify(250, 4_000);
    let stats = relay_stats(&peers);
    let unjudged = stats.unjudged_checksums[2];
    assert!(unjudged >= 1, "{stats:?}");
    assert_eq!(stats.unjudged_checksums, vec![0, 0, unjudged], "{stats:?}");
    // Its reports of the ticks before the disagreement were judged late, and agreed.
    assert!(stats.late_checksums[2] >= 1, "{stats:?}");
    assert_eq!(stats.desyncs_named[2], 0, "{stats:?}");
    // Player 2 plays on 200 ticks behind, every report of it late; once it is gone the count
    // stays, and every client is told the match's count.
    peers.kill(2).expect("running");
    peers.run_frames(32).expect("runs");
    let unjudged = relay_stats(&peers).unjudged_checksums[2];
    peers.run_frames(32).expect("runs");
    assert_eq!(relay_stats(&peers).unjudged_checksums[2], unjudged);
    for c in 0..2 {
        assert_eq!(peers.net_of(c).unjudged_checksums, unjudged, "client {c}");
    }
}

#[test]
fn a_client_at_its_last_tick_waits_for_the_judgement_and_hears_of_a_late_liar() {
    let relay = authoritative(3, Resync::Off).checksum_timeout_ms(500);
    let mut peers = liar_of_three(relay);
    peers.verify(10, 2_000);
    // The liar is slow, not silent: everything it sends reaches the relay 1.5 s late, so its
    // checksums come after their ticks were judged at the 500 ms timeout.
    let slow = LinkConditionerConfig::PERFECT.with_latency(1_500, 0);
    peers
        .set_link_direction(0, Direction::ToServer, slow)
        .expect("running");
    let last = 90;
    let mut frames = 0;
    while peers.stats_of(1).verified_tick < last || peers.stats_of(2).verified_tick < last {
        assert!(frames < 2_000, "the honest clients never reached {last}");
        peers.step();
        frames += 1;
    }
    for c in [1, 2] {
        let net = peers.net_of(c);
        assert_eq!(
            net.others_desynced, 0,
            "client {c}: the liar is not judged yet"
        );
        assert!(!net.judged(last), "client {c}: {net:?}");
    }
    // The honest clients wait, bounded, for the judgement through their last tick.
    frames = 0;
    while ![1, 2].iter().all(|c| peers.net_of(*c).judged(last)) {
        assert!(
            frames < 2_000,
            "no judgement through {last}: {:?}",
            relay_stats(&peers)
        );
        peers.step();
        frames += 1;
    }
    let stats = relay_stats(&peers);
    assert_eq!(stats.desyncs, 1, "{stats:?}");
    assert!(stats.late_checksums[0] >= 1, "{stats:?}");
    for c in [1, 2] {
        let net = peers.net_of(c);
        assert_eq!(
            (net.desyncs, net.others_desynced),
            (0, 1),
            "client {c}: {net:?}"
        );
        assert_eq!(net.unjudged_checksums, 0, "client {c}");
    }
}
