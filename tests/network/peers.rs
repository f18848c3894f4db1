//! The public peer harness (`simsync::testing::RelayPeers`) tested by itself (the README's
//! agreement test is `readme_agreement`): a deliberately desynced client reported with its
//! first differing tick and what differs, a paused client catching up, a killed client
//! rejoining, link outages, rematches, and misuse answered with typed errors.

use bevy::prelude::*;
use simsync::deterministic::{SessionConfig, SimulationSet, SimulationTick};
use simsync::prelude::*;
use simsync::relay::{MatchEndReason, MatchId, MatchPhase, RelayCommand};
use simsync::testing::{PeersError, RelayPeers, RunLimits, RunUntilError};
use simsync_net::LinkConditionerConfig;
use simsync_net::testing::PeerNetworkError;

use crate::common::{Crate, TestGame, scripted_input};

fn small() -> TestGame {
    TestGame {
        boxes: 20,
        ..TestGame::default()
    }
}

/// Every checksum tick: 1 (so the first differing checksum is the tick that diverged).
fn plugin(game: TestGame) -> DeterministicPlugin<PackedInput> {
    DeterministicPlugin::new(game).edit_config(|c: &mut SessionConfig| c.checksum_interval = 1)
}

/// Client 1's simulation nudges crate 7 upwards at tick 50: a desync only it has.
fn nudge(tick: Res<SimTick>, mut crates: Query<(&Crate, &mut Transform)>) {
    if tick.0 == 50 {
        for (c, mut t) in &mut crates {
            if c.0 == 7 {
                t.translation.y += 0.25;
            }
        }
    }
}

fn peers_with_desync() -> RelayPeers<PackedInput> {
    desync_builder().build().expect("harness")
}

fn desync_builder() -> simsync::testing::RelayPeersBuilder<PackedInput> {
    RelayPeers::builder(2, |client| {
        if client == 1 {
            DeterministicPlugin::from_fn(|app| {
                app.add_plugins(small())
                    .add_systems(SimulationTick, nudge.in_set(SimulationSet::Game));
            })
            .edit_config(|c| c.checksum_interval = 1)
        } else {
            plugin(small())
        }
    })
    .inputs(scripted_input)
    .link(LinkConditionerConfig::PERFECT.with_latency(20, 0))
}

#[test]
fn a_desynced_client_is_reported_with_its_first_differing_tick_and_component() {
    let mut peers = peers_with_desync();
    let err = peers
        .run_until_verified(200)
        .expect_err("a desync stops the run");
    assert!(
        matches!(
            err,
            PeersError::Client {
                error: RunUntilError::Desync(_),
                ..
            }
        ),
        "{err}"
    );
    let disagreement = peers.agreement().expect_err("clients 0 and 1 differ");
    assert_eq!(disagreement.tick, 50, "{disagreement}");
    assert_eq!(
        disagreement.ticks_agreed, 49,
        "ticks 1..=49 agreed: {disagreement}"
    );
    let (a, b) = (disagreement.checksums[0], disagreement.checksums[1]);
    assert!(a.is_some() && b.is_some() && a != b, "{disagreement}");
    let diff = disagreement
        .breakdown
        .clone()
        .expect("both kept tick 50's breakdown");
    assert_eq!(diff.clients, (0, 1));
    assert!(
        diff.components.iter().any(|c| c.contains("Transform")),
        "{disagreement}"
    );
    assert!(!diff.slots.is_empty(), "{disagreement}");
    assert!(diff.resources.is_empty(), "{disagreement}");
    let text = disagreement.to_string();
    assert!(
        text.starts_with("clients disagree at verified tick 50:"),
        "{text}"
    );
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        peers.assert_all_agree();
    }))
    .expect_err("assert_all_agree panics on a disagreement");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("verified tick 50"), "{message}");
}

#[test]
fn tolerated_desyncs_do_not_stop_a_run_and_agreement_of_names_the_desynced_client() {
    let mut peers = desync_builder()
        .tolerate_desyncs()
        .build()
        .expect("harness");
    let reached = peers
        .run_until_verified(200)
        .expect("desync reports do not stop the run");
    assert!(reached >= 200, "{reached}");
    let desyncs = peers.stats(0).expect("running").network.expect("networked");
    assert!(desyncs.desyncs >= 1, "{desyncs:?}");
    let err = peers
        .agreement_of(1)
        .expect_err("client 1 differs from tick 50");
    let PeersError::Disagreement(disagreement) = &err else {
        panic!("{err}");
    };
    assert_eq!(disagreement.tick, 50, "{disagreement}");
    assert_eq!(disagreement.ticks_agreed, 49, "{disagreement}");
    assert!(
        err.to_string()
            .starts_with("clients disagree at verified tick 50:")
    );
    assert!(matches!(
        peers.agreement_of(2),
        Err(PeersError::Network(PeerNetworkError::UnknownPeer {
            peer: 2,
            peers: 2
        }))
    ));
}

fn three_peers(link: LinkConditionerConfig) -> RelayPeers<PackedInput> {
    RelayPeers::builder(3, |_| plugin(small()))
        .inputs(scripted_input)
        .link(link)
        .build()
        .expect("harness")
}

#[test]
fn a_paused_client_catches_up_and_agrees() {
    let mut peers = three_peers(LinkConditionerConfig::PERFECT.with_latency(20, 0));
    peers.run_until_verified(100).expect("to tick 100");
    peers.pause(2).expect("pause");
    peers.run_frames(40).expect("the others go on");
    let paused_at = peers.stats(2).expect("running").verified_tick;
    assert!(
        paused_at < 110,
        "client 2 did not move while paused: {paused_at}"
    );
    peers.resume(2).expect("resume");
    peers.run_until_verified(400).expect("every client to 400");
    assert!(peers.stats(2).expect("running").verified_tick >= 400);
    let agreement = peers.assert_all_agree();
    assert!(agreement.ticks_compared >= 400, "{agreement:?}");
}

#[test]
fn a_killed_client_rejoins_and_agrees() {
    let mut peers = three_peers(LinkConditionerConfig::PERFECT.with_latency(20, 0));
    peers.run_until_verified(100).expect("to tick 100");
    peers.kill(1).expect("kill");
    assert!(!peers.is_running(1));
    assert_eq!(peers.verified_ticks()[1], None);
    peers.run_frames(60).expect("the others go on without it");
    peers.rejoin(1).expect("rejoin with its token");
    peers.run_until_verified(400).expect("every client to 400");
    let rejoined = peers.stats(1).expect("running again");
    assert!(rejoined.verified_tick >= 400);
    // It re-simulated from tick 1: each of its verified checksums equals the others'.
    let of = peers.agreement_of(1).expect("client 1 agrees");
    assert_eq!(of.range.map(|r| r.0), Some(1), "{of:?}");
    assert!(
        of.ticks_compared + 2 >= rejoined.checksum_history.len(),
        "{of:?}"
    );
    assert!(of.ticks_compared >= 400, "{of:?}");
    assert_eq!(
        peers.relay_stats().rejoins[1],
        1,
        "{:?}",
        peers.relay_stats()
    );
    peers.assert_all_agree();
}

#[test]
fn an_outage_and_its_end_leave_every_client_agreeing() {
    let mut peers = three_peers(LinkConditionerConfig::PERFECT.with_latency(40, 10));
    peers.run_until_verified(100).expect("to tick 100");
    peers.cut_link(0).expect("cut");
    peers.run_frames(64).expect("one second of outage");
    peers.restore_link(0).expect("restore");
    peers.run_until_verified(500).expect("every client to 500");
    peers.assert_all_agree();
}

#[test]
fn misuse_gets_typed_errors() {
    let mut peers = three_peers(LinkConditionerConfig::PERFECT);
    assert!(matches!(
        peers.pause(9),
        Err(PeersError::Network(PeerNetworkError::UnknownPeer {
            peer: 9,
            peers: 3
        }))
    ));
    assert!(matches!(
        peers.rejoin(0),
        Err(PeersError::Network(PeerNetworkError::StillRunning(0)))
    ));
    peers.kill(2).expect("kill before any welcome");
    assert!(matches!(
        peers.kill(2),
        Err(PeersError::Network(PeerNetworkError::NotRunning(2)))
    ));
    assert!(matches!(
        peers.rejoin(2),
        Err(PeersError::NoReconnectToken(2))
    ));
    assert!(matches!(
        peers.stats(2),
        Err(PeersError::Network(PeerNetworkError::NotRunning(2)))
    ));
    let bad = LinkConditionerConfig::PERFECT.with_loss(250.0);
    assert!(matches!(
        peers.set_link(0, bad),
        Err(PeersError::Network(PeerNetworkError::Network(_)))
    ));
    let broken = RelayPeers::builder(2, |_| plugin(small()))
        .link(bad)
        .build();
    assert!(matches!(
        broken,
        Err(PeersError::Network(PeerNetworkError::Network(_)))
    ));
}

#[test]
fn impossible_setups_and_runs_get_typed_errors_at_once() {
    let none = RelayPeers::builder(0, |_| plugin(small())).build();
    assert!(matches!(none, Err(PeersError::NoPlayers)));
    let crowded = RelayPeers::builder(2, |_| plugin(small()))
        .clients(3)
        .build();
    assert!(
        matches!(
            crowded,
            Err(PeersError::NoFreeSeat {
                players: 2,
                clients: 3
            })
        ),
        "{crowded:?}"
    );
    let mut peers = RelayPeers::builder(2, |_| plugin(small()))
        .inputs(scripted_input)
        .build()
        .expect("harness");
    assert_eq!(peers.run_until_verified(-5).expect("already there"), 0);
    peers.pause(0).expect("pause");
    peers.pause(1).expect("pause");
    let frozen = peers.run_until_verified(10);
    assert!(
        matches!(frozen, Err(PeersError::NoClientRunning(10))),
        "{frozen:?}"
    );
    peers.resume(0).expect("resume");
    peers.resume(1).expect("resume");
    let far = peers.run_until_verified_with(i32::MAX, RunLimits::new(50));
    let Err(PeersError::Timeout {
        updates, states, ..
    }) = far
    else {
        panic!("{far:?}");
    };
    assert_eq!(updates, 50);
    assert_eq!(states.len(), 2);
    assert!(states.iter().all(Option::is_some), "{states:?}");
}

#[test]
fn an_empty_seat_shows_in_the_timeout_as_waiting_for_players() {
    let mut peers = RelayPeers::builder(2, |_| plugin(small()))
        .clients(1)
        .build()
        .expect("harness");
    let err = peers
        .run_until_verified_with(10, RunLimits::new(120))
        .expect_err("one of two seats taken");
    assert!(err.to_string().contains("WaitingForPlayers"), "{err}");
}

// --- Rematches ------------------------------------------------------------------------------

fn two_peers() -> RelayPeers<PackedInput> {
    RelayPeers::builder(2, |_| plugin(small()))
        .inputs(scripted_input)
        .link(LinkConditionerConfig::PERFECT.with_latency(20, 0))
        .breakdowns(0)
        .build()
        .expect("harness")
}

/// The checksum client 0 holds for `tick`.
fn checksum_of(peers: &RelayPeers<PackedInput>, tick: i32) -> Option<u64> {
    let stats = peers.stats(0).expect("client 0 runs");
    let found = stats.checksum_history.iter().find(|c| c.tick == tick);
    found.map(|c| c.checksum)
}

#[test]
fn rematch_steps_until_every_client_plays_the_next_match() {
    let mut peers = two_peers();
    peers.run_until_verified(120).expect("match 1");
    let first = checksum_of(&peers, 120).expect("tick 120 checksummed");
    assert_eq!(peers.rematch(300).expect("rematch"), MatchId(2));
    assert_eq!(peers.matches(), vec![Some(MatchId(2)); 2]);
    let restarted = peers.verified_ticks();
    assert!(
        restarted.iter().all(|t| t.is_some_and(|t| t < 120)),
        "{restarted:?}"
    );
    peers.run_until_verified(120).expect("match 2");
    peers.assert_all_agree();
    // The same inputs give the same checksums in every match.
    assert_eq!(checksum_of(&peers, 120), Some(first));
}

#[test]
fn run_until_verified_after_a_rematch_command_runs_the_next_match() {
    let mut peers = two_peers();
    let reached = peers.run_until_verified(120).expect("match 1");
    // Always at least one frame: a target already reached moves on by a step.
    let again = peers.run_until_verified(reached).expect("one more step");
    assert!(again > reached, "{again} after {reached}");
    peers
        .relay_mut()
        .world_mut()
        .write_message(RelayCommand::Rematch {
            reason: MatchEndReason::Completed,
        });
    peers.run_until_verified(120).expect("match 2");
    assert_eq!(peers.matches(), vec![Some(MatchId(2)); 2]);
    let verified = peers.verified_ticks();
    assert!(
        verified.iter().all(|t| t.is_some_and(|t| t >= 120)),
        "{verified:?}"
    );
}

#[test]
fn a_rematch_before_the_match_started_is_refused() {
    let mut peers = two_peers();
    let err = peers.rematch(10).expect_err("nothing to end in the lobby");
    assert!(
        matches!(
            err,
            PeersError::RematchRefused {
                match_id: MatchId(1),
                phase: MatchPhase::Lobby
            }
        ),
        "{err}"
    );
}
