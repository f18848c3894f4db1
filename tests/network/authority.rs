//! Authoritative relay rooms: the relay runs the verified world from the confirmed sets
//! (`LockstepAuthority`), judges every client's checksum against it — a desynced client is
//! named alone, with two players or one — serves its snapshots to late joiners (no buddy), and
//! with `Resync::On` sends a desynced client its snapshot.

use std::sync::Arc;

use simsync::authority::LockstepAuthority;
use simsync::deterministic::NetworkSessionConfig;
use simsync::deterministic::{DesyncJudge, SessionError};
use simsync::prelude::*;
use simsync::relay::{DeterministicServerPlugin, RelayStats, Resync};
use simsync_net::{
    ClientMessage, LinkConditionerConfig, MatchId, NetChannel, SessionClientMessage,
};

use super::harness::{Peers, PeersExt, peers_of, snapshot_plugin};
use super::hostile_peers::{desyncs, recording_desyncs};
use crate::deterministic::desync_dumps::MarbleGame;

fn honest() -> MarbleGame {
    MarbleGame {
        plant_at: None,
        plant_in: None,
    }
}

/// A relay of `players` whose authority runs the honest game.
pub(super) fn authoritative(players: u8, resync: Resync) -> DeterministicServerPlugin {
    let make = Arc::new(|| snapshot_plugin(honest(), NetworkSessionConfig::default()));
    DeterministicServerPlugin::new::<PackedInput>(players, 64)
        .reconnect_seed(3)
        .authority(
            LockstepAuthority::factory::<PackedInput>(players, make).expect("a snapshottable game"),
            resync,
        )
}

/// `players` clients of an authoritative relay; client 0 plants a desync at `plant_at`.
fn room(players: u8, plant_at: Option<i32>, resync: Resync) -> Peers {
    peers_of(players, move |c| {
        let game = MarbleGame {
            plant_at: if c == 0 { plant_at } else { None },
            plant_in: None,
        };
        snapshot_plugin(game, NetworkSessionConfig::default())
    })
    .link(LinkConditionerConfig::PERFECT.with_latency(20, 2))
    .relay(authoritative(players, resync))
    .tolerate_desyncs()
    .build()
    .expect("peers")
}

fn relay_stats(peers: &Peers) -> RelayStats {
    peers.relay().world().resource::<RelayStats>().clone()
}

#[test]
fn honest_clients_agree_with_the_authority_and_no_one_is_named() {
    let mut peers = room(2, None, Resync::Off);
    peers.verify(200, 3_000);
    // The authority runs on its own thread: it catches up with the confirmed sets.
    for _ in 0..500 {
        if relay_stats(&peers).authority.tick >= 200 {
            break;
        }
        peers.step();
    }
    let stats = relay_stats(&peers);
    assert_eq!(stats.desyncs, 0, "{stats:?}");
    assert_eq!(stats.authority.failures, 0);
    assert!(stats.authority.ticks >= 200, "{:?}", stats.authority);
    peers.assert_all_agree();
}

#[test]
fn of_two_clients_only_the_one_that_differs_from_the_authority_is_named() {
    let mut peers = room(2, Some(30), Resync::Off);
    peers.verify(120, 3_000);
    let stats = relay_stats(&peers);
    assert!(stats.desyncs_named[0] >= 1, "{:?}", stats.desyncs_named);
    assert_eq!(
        stats.desyncs_named[1], 0,
        "the honest player is never named"
    );
    assert_eq!(stats.desync_episodes, vec![1, 0]);
}

#[test]
fn a_lone_client_is_judged_against_the_authority() {
    let mut peers = room(1, Some(30), Resync::Off);
    peers.verify(120, 3_000);
    let stats = relay_stats(&peers);
    assert!(stats.desyncs_named[0] >= 1, "{:?}", stats.desyncs_named);
    assert_eq!(stats.desync_episodes, vec![1]);
}

#[test]
fn a_desynced_client_is_resynced_from_the_authority_and_agrees_again() {
    let mut peers = room(2, Some(30), Resync::On);
    peers.verify(200, 6_000);
    let stats = relay_stats(&peers);
    assert!(stats.desync_episodes[0] >= 1, "{:?}", stats.desync_episodes);
    assert_eq!(
        stats.desync_episodes[1], 0,
        "the honest client is never named"
    );
    assert!(stats.authority.resyncs >= 1, "{:?}", stats.authority);
    assert!(
        stats.authority.snapshots_served >= 1,
        "{:?}",
        stats.authority
    );
    // Client 0 was told: Desynced, then back to Running by the resync.
    let net = peers.net_of(0);
    assert!(net.resyncs >= 1, "{net:?}");
    let (from, to) = net.resynced.expect("a resync since the last desync");
    assert!(to > 30, "{from} → {to}");
    let lifecycle = peers
        .client(0)
        .unwrap()
        .world()
        .resource::<simsync::deterministic::SessionLifecycle>()
        .clone();
    assert_eq!(
        lifecycle.state,
        simsync::deterministic::SessionState::Running
    );
    // From the resync on, client 0's verified checksums are client 1's again.
    peers.verify(to + 120, 6_000);
    let (a, b) = (peers.stats_of(0), peers.stats_of(1));
    // (A tick verified again after the resync's rewind is in the history twice: the last
    // entry is the world's now.)
    let last = |history: &[simsync::deterministic::TickChecksum], tick: i32| {
        history
            .iter()
            .rev()
            .find(|c| c.tick == tick)
            .map(|c| c.checksum)
    };
    let newest = a.verified_tick.min(b.verified_tick);
    assert!(newest - to >= 100, "{to} → {newest}");
    for tick in to + 1..=newest {
        let mine = last(&a.checksum_history, tick);
        assert!(mine.is_some(), "tick {tick} missing");
        assert_eq!(mine, last(&b.checksum_history, tick), "tick {tick}");
    }
    // Before it, they differed (the desync was real).
    let differed = a.checksum_history.iter().any(|c| {
        c.tick > 30
            && b.checksum_history
                .iter()
                .any(|o| o.tick == c.tick && o.checksum != c.checksum)
    });
    assert!(differed, "the planted desync never showed");
    assert_eq!(relay_stats(&peers).desync_episodes[1], 0);
}

#[test]
fn a_resynced_client_compares_only_what_it_predicted_from_the_new_world() {
    // Both clients check every prediction against verification; client 0's predictions made
    // before the resync came from the desynced world and must not be compared.
    let mut peers = peers_of(2, |c| {
        let game = MarbleGame {
            plant_at: (c == 0).then_some(30),
            plant_in: None,
        };
        DeterministicPlugin::<PackedInput>::new(game)
            .config(simsync::deterministic::SessionConfig {
                rollback_window: 60,
                checksum_interval: 1,
                verify_predictions: true,
                ..Default::default()
            })
            .networked(NetworkSessionConfig {
                snapshots: true,
                ..NetworkSessionConfig::default()
            })
            .snapshots(simsync::deterministic::SnapshotLimits::default())
    })
    .link(LinkConditionerConfig::PERFECT.with_latency(20, 2))
    .relay(authoritative(2, Resync::On))
    .tolerate_desyncs()
    .build()
    .expect("peers");
    peers.verify(300, 8_000);
    assert!(peers.net_of(0).resyncs >= 1, "{:?}", peers.net_of(0));
    for c in 0..2 {
        let stats = peers.stats_of(c);
        assert!(stats.resim_ticks_checked > 100, "client {c}: {stats:?}");
        assert_eq!(
            stats.resim_ticks_matching, stats.resim_ticks_checked,
            "client {c}"
        );
    }
}

#[test]
fn a_late_joiner_with_no_other_client_connected_takes_the_authoritys_snapshot() {
    let relay = authoritative(2, Resync::Off).start_players(1);
    let mut peers = peers_of(2, |_| {
        snapshot_plugin(honest(), NetworkSessionConfig::default())
    })
    .link(LinkConditionerConfig::PERFECT.with_latency(20, 2))
    .relay(relay)
    .clients(1)
    .build()
    .expect("peers");
    peers.verify(100, 3_000);
    peers.kill(0).expect("kill");
    peers.run_frames(40).expect("frames");
    let joiner = peers.join().expect("join");
    peers.verify(250, 6_000);
    let stats = relay_stats(&peers);
    assert!(
        stats.authority.snapshots_served >= 1,
        "{:?}",
        stats.authority
    );
    assert_eq!(stats.snapshots.requests, 0, "no buddy was asked");
    assert_eq!(stats.desyncs, 0, "the joiner agrees with the authority");
    assert!(peers.stats_of(joiner).verified_tick >= 250);
}

#[test]
fn of_two_clients_one_lying_about_its_checksums_only_the_liar_is_named() {
    let mut peers = room(2, None, Resync::Off);
    peers.verify(40, 3_000);
    // Client 1 reports forged checksums for ticks the relay confirmed and it has not verified
    // yet, so each forgery is its first report of the tick.
    let mut forged = 0;
    for _ in 0..200 {
        let confirmed = peers
            .relay()
            .world()
            .resource::<RelayStats>()
            .confirmed_tick;
        let verified = peers.stats_of(1).verified_tick;
        if confirmed > verified {
            let lie = ClientMessage::session(
                MatchId::FIRST,
                SessionClientMessage::Checksum {
                    tick: confirmed,
                    checksum: 0xbad ^ confirmed as u64,
                },
            );
            peers.send(1, NetChannel::Control, &lie);
            forged += 1;
            if forged == 3 {
                break;
            }
        }
        peers.step();
    }
    assert_eq!(forged, 3);
    peers.verify(150, 3_000);
    let stats = relay_stats(&peers);
    assert_eq!(
        stats.desyncs_named[0], 0,
        "the honest client is never named"
    );
    assert!(stats.desyncs_named[1] >= 1, "{:?}", stats.desyncs_named);
}

/// An authoritative room of 3 (resync on) whose client 0 plants a desync at tick 30, each client
/// checksumming every `checksum_interval` verified ticks and keeping the desync reports it was
/// told of; run to tick 240.
fn one_liar_of_three(checksum_interval: u32) -> Peers {
    let builder = peers_of(3, move |c| {
        let game = MarbleGame {
            plant_at: (c == 0).then_some(30),
            plant_in: None,
        };
        snapshot_plugin(game, NetworkSessionConfig::default())
            .edit_config(|config| config.checksum_interval = checksum_interval)
    })
    .link(LinkConditionerConfig::PERFECT.with_latency(20, 2))
    .relay(authoritative(3, Resync::On))
    .tolerate_desyncs();
    let mut peers = recording_desyncs(builder).build().expect("peers");
    peers.verify(240, 8_000);
    peers
}

/// One liar is one desync: the room counts 1 (however many ticks it was judged on), the liar
/// alone is told it desynced and that the authority judged it, the honest clients are told
/// "player 0 desynced" and count no desync of their own.
fn assert_one_liar_is_one_desync(peers: &Peers) {
    let stats = relay_stats(peers);
    assert_eq!(stats.desyncs, 1, "{stats:?}");
    assert_eq!(stats.desync_episodes, vec![1, 0, 0], "{stats:?}");
    assert!(stats.desynced_ticks >= 1, "{stats:?}");
    assert_eq!(stats.desyncs_named[1..], [0, 0], "{stats:?}");
    assert!(stats.authority.resyncs >= 1, "{:?}", stats.authority);
    for c in 0..3 {
        let seen = desyncs(peers, c);
        assert_eq!(seen.len(), 1, "client {c}: {seen:?}");
        assert_eq!(seen[0].players, vec![0], "client {c}");
        assert_eq!(seen[0].judge, DesyncJudge::Authority, "client {c}");
        assert_eq!(seen[0].own, c == 0, "client {c}");
        let net = peers.net_of(c);
        let own = u64::from(c == 0);
        assert_eq!(
            (net.desyncs, net.others_desynced),
            (own, 1 - own),
            "client {c}: {net:?}"
        );
    }
    let liar = peers.net_of(0).last_desync.expect("the liar was told");
    assert_eq!(liar.judge, DesyncJudge::Authority);
    // Resynced, the liar agrees again: the checksums each client last recorded of tick 240.
    let at_240 = |c| {
        let history = peers.stats_of(c).checksum_history;
        history
            .iter()
            .rev()
            .find(|x| x.tick == 240)
            .map(|x| x.checksum)
    };
    assert!(at_240(0).is_some());
    assert_eq!(at_240(0), at_240(1));
    assert_eq!(at_240(1), at_240(2));
}

#[test]
fn one_liar_of_three_is_one_desync_with_a_checksum_every_tick() {
    let peers = one_liar_of_three(1);
    let stats = relay_stats(&peers);
    // Judged on several ticks before the resync: still one desync.
    assert!(stats.desynced_ticks >= 2, "{stats:?}");
    assert_one_liar_is_one_desync(&peers);
}

#[test]
fn one_liar_of_three_is_one_desync_with_the_default_checksum_interval() {
    let interval = simsync::deterministic::SessionConfig::default().checksum_interval;
    assert!(interval > 1, "{interval}");
    assert_one_liar_is_one_desync(&one_liar_of_three(interval));
}

/// A component a game rolls back with no snapshot serializer and no reflection.
#[derive(bevy::prelude::Component, Clone, Debug, SimHash)]
struct Heat(u32);

/// The honest game, plus [`Heat`].
fn heat_game() -> simsync::authority::PluginMaker<PackedInput> {
    Arc::new(|| {
        DeterministicPlugin::<PackedInput>::from_fn(|app| {
            app.add_plugins(honest())
                .rollback_hashed_component::<Heat>();
        })
    })
}

#[test]
fn an_authoritative_game_that_cannot_be_snapshotted_is_refused_at_setup_naming_the_type() {
    let refused = LockstepAuthority::factory::<PackedInput>(2, heat_game()).err();
    let Some(SessionError::NotSerializable { type_name }) = refused.clone() else {
        panic!("{refused:?}");
    };
    assert!(type_name.ends_with("Heat"), "{type_name}");
    let text = refused.expect("refused").to_string();
    assert!(text.contains("Heat") && text.contains("_serde"), "{text}");
}

#[test]
fn a_world_spawned_for_a_game_that_cannot_be_snapshotted_fails_its_first_tick() {
    use simsync::relay::Authority;
    let mut world = LockstepAuthority::spawn::<PackedInput>(2, heat_game());
    let input = simsync_net::encode(&PackedInput::default()).expect("encodes");
    let set = simsync_net::InputSet {
        inputs: vec![input; 2],
        replaced: 0,
        disconnected: 0,
    };
    world.confirmed(1, &set).expect("handed over");
    // The world answers on its own thread: poll until its answer comes.
    let mut failure = None;
    for _ in 0..10_000 {
        match world.checksums() {
            Ok(checksums) => assert!(checksums.is_empty(), "{checksums:?}"),
            Err(error) => {
                failure = Some(error);
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let failure = failure.expect("the world answered");
    assert!(failure.contains("Heat"), "{failure}");
}
