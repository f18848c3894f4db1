//! Misbehaving peers: inputs the relay must not relay (undecodable, oversized) and checksums it
//! must not believe (forged, or for ticks nobody verified yet). Honest clients keep verifying and
//! agree; the relay counts each fault once and names the players that differ, once per desync
//! episode.

use std::collections::BTreeSet;

use bevy::prelude::*;
use simsync::deterministic::{DesyncDetected, DesyncJudge, PlayerDesynced};
use simsync::prelude::PackedInput;
use simsync::relay::{DeterministicServerPlugin, DroppedInputs, RelayLimits};
use simsync::testing::RelayPeersBuilder;
use simsync_net::{
    ClientMessage, LinkConditionerConfig, MatchId, NetChannel, SessionClientMessage,
};

use super::harness::{Peers, PeersExt, peers, peers_of, plugin};
use crate::common::TestGame;

fn game(players: u8) -> TestGame {
    TestGame {
        boxes: 10,
        players,
        ..TestGame::default()
    }
}

fn inputs(first_tick: i32, inputs: Vec<Vec<u8>>) -> ClientMessage {
    ClientMessage::session(
        MatchId::FIRST,
        SessionClientMessage::Inputs {
            first_tick,
            inputs,
            ack_tick: 0,
        },
    )
}

#[test]
fn undecodable_and_oversized_inputs_are_dropped_and_the_session_goes_on() {
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let mut h = peers(game(2), link).build().expect("peers");
    h.verify(60, 300);
    let server_tick = h.relay_stats().server_tick;
    // Ahead of anything the clients sent: these copies arrive first and decide the ticks.
    let garbage = inputs(server_tick + 40, vec![vec![0xff; 17]; 5]);
    h.send(0, NetChannel::Inputs, &garbage);
    // 30,000 bytes (reliable: renet slices it).
    let huge = inputs(server_tick + 50, vec![vec![0; 30_000]]);
    h.send(1, NetChannel::Control, &huge);
    for _ in 0..3 {
        // Copies sent again are not counted again.
        h.send(0, NetChannel::Inputs, &garbage);
        h.step();
    }
    let verified = h.stats_of(0).verified_tick;
    h.verify(verified + 300, 900);

    let relay = h.relay_stats();
    assert_eq!(
        relay.dropped_inputs,
        vec![
            DroppedInputs {
                undecodable: 5,
                oversized: 0
            },
            DroppedInputs {
                undecodable: 0,
                oversized: 1
            },
        ],
        "{relay:?}"
    );
    assert!(relay.replaced_inputs[0] >= 5, "{relay:?}");
    assert!(relay.replaced_inputs[1] >= 1, "{relay:?}");
    assert_eq!(relay.desyncs, 0, "{relay:?}");
    let agreement = h.assert_all_agree();
    assert!(agreement.ticks_compared >= 300, "{agreement:?}");
    for c in 0..2 {
        let net = h.net_of(c);
        assert_eq!(
            net.substituted_inputs, 0,
            "the relay relayed only valid inputs"
        );
        assert_eq!(net.rejected_inputs, 0);
        assert_eq!((net.desyncs, net.others_desynced), (0, 0));
    }
}

/// A desync report a client's app received: its own ([`DesyncDetected`], `own`) or other
/// players' ([`PlayerDesynced`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SeenDesync {
    pub tick: i32,
    pub players: Vec<u8>,
    pub judge: DesyncJudge,
    pub own: bool,
}

/// Every desync report a client's app received, in order.
#[derive(Resource, Default)]
pub(super) struct Desyncs(pub Vec<SeenDesync>);

fn record_desyncs(
    mut own: MessageReader<DesyncDetected>,
    mut others: MessageReader<PlayerDesynced>,
    mut seen: ResMut<Desyncs>,
) {
    for d in own.read() {
        seen.0.push(SeenDesync {
            tick: d.tick,
            players: d.players.clone(),
            judge: d.judge,
            own: true,
        });
    }
    for d in others.read() {
        seen.0.push(SeenDesync {
            tick: d.tick,
            players: d.players.clone(),
            judge: d.judge,
            own: false,
        });
    }
}

/// Makes every client of `builder` keep the [`Desyncs`] it was told of.
pub(super) fn recording_desyncs(
    builder: RelayPeersBuilder<PackedInput>,
) -> RelayPeersBuilder<PackedInput> {
    builder.customize(|_, client| {
        client
            .init_resource::<Desyncs>()
            .add_systems(Last, record_desyncs);
    })
}

/// `builder`'s peers, which desync on purpose (desync reports do not stop a run), every
/// client keeping the [`Desyncs`] it was told of.
fn watch_desyncs(builder: RelayPeersBuilder<PackedInput>) -> Peers {
    recording_desyncs(builder.tolerate_desyncs())
        .build()
        .expect("peers")
}

pub(super) fn desyncs(h: &Peers, client: usize) -> Vec<SeenDesync> {
    let client = h.client(client).expect("running");
    client.world().resource::<Desyncs>().0.clone()
}

/// Three players over a 60 ms link.
fn sixty_ms() -> RelayPeersBuilder<PackedInput> {
    peers(game(3), LinkConditionerConfig::PERFECT.with_latency(60, 0))
}

#[test]
fn a_liar_is_named_and_honest_clients_are_not() {
    let mut h = watch_desyncs(sixty_ms());
    h.verify(60, 600);
    let liar = 2;
    let mut forged = BTreeSet::new();
    let mut future = 0;
    for _ in 0..20 {
        let confirmed = h.relay_stats().confirmed_tick;
        let verified = h.stats_of(liar).verified_tick;
        // Ticks the relay confirmed that the liar has not reported yet, and ticks nobody can
        // have verified.
        let ticks = (verified + 1..=confirmed).chain([confirmed + 200, confirmed + 1_000]);
        for tick in ticks {
            if tick > confirmed {
                future += 1;
            } else {
                forged.insert(tick);
            }
            send_forged_checksum(&mut h, liar, tick);
        }
        h.step();
    }
    let verified = h.stats_of(0).verified_tick;
    h.verify(verified + 300, 900);

    let relay = h.relay_stats();
    assert!(!forged.is_empty());
    assert_eq!(relay.refused_checksums, vec![0, 0, future], "{relay:?}");
    for slot in 0..3 {
        // Late copies are counted once per tick, so never more than the replaced inputs.
        assert!(
            relay.late_inputs[slot] <= relay.replaced_inputs[slot],
            "{relay:?}"
        );
    }
    // Each forged tick reached the relay before the liar's honest report: one desynced tick
    // each, all of one episode (the forged ticks follow each other): one desync.
    assert_eq!(relay.desynced_ticks, forged.len() as u64, "{relay:?}");
    assert_eq!(
        relay.desyncs_named,
        vec![0, 0, relay.desynced_ticks],
        "{relay:?}"
    );
    assert_eq!(relay.desync_episodes, vec![0, 0, 1], "{relay:?}");
    assert_eq!(relay.desyncs, 1, "{relay:?}");
    // The liar's simulation is honest.
    let agreement = h.assert_all_agree();
    assert!(agreement.ticks_compared >= 300, "{agreement:?}");
    for c in 0..3 {
        let net = h.net_of(c);
        let seen = desyncs(&h, c);
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].players, vec![liar as u8]);
        assert_eq!(forged.first(), Some(&seen[0].tick), "{seen:?}");
        assert_eq!(seen[0].own, c == liar);
        assert_eq!(seen[0].judge, DesyncJudge::Majority);
        let own = u64::from(c == liar);
        assert_eq!(
            (net.desyncs, net.others_desynced),
            (own, 1 - own),
            "{net:?}"
        );
    }
}

/// `liar` reports checksum `0xbad ^ tick` for `tick` (a lie: no world hashes to it).
fn send_forged_checksum(h: &mut Peers, liar: usize, tick: i32) {
    let checksum = ClientMessage::session(
        MatchId::FIRST,
        SessionClientMessage::Checksum {
            tick,
            checksum: 0xbad ^ tick as u64,
        },
    );
    h.send(liar, NetChannel::Control, &checksum);
}

/// Makes `liar` report a forged checksum for the next `count` ticks the relay confirmed and the
/// liar has not verified yet (so the forgery is its first report of each), stepping until
/// done; the ticks forged.
fn forge(h: &mut Peers, liar: usize, count: usize) -> BTreeSet<i32> {
    let mut forged: BTreeSet<i32> = BTreeSet::new();
    for _ in 0..count * 4 {
        let confirmed = h.relay_stats().confirmed_tick;
        let verified = h.stats_of(liar).verified_tick;
        let from = forged.last().map_or(verified, |last| (*last).max(verified)) + 1;
        for tick in (from..=confirmed).take(count - forged.len()) {
            forged.insert(tick);
            send_forged_checksum(h, liar, tick);
        }
        h.step();
        if forged.len() == count {
            return forged;
        }
    }
    panic!("forged {} of {count} ticks", forged.len());
}

#[test]
fn a_liar_forging_200_ticks_is_reported_once_per_episode_and_knows_it_is_the_one_named() {
    // The liar sends its forgeries besides its honest checksums, twice the checksum rate limit
    // for 200 ticks: the limit is not what this test is about.
    let relay =
        DeterministicServerPlugin::new::<PackedInput>(3, 64).rate_limits(RelayLimits::UNLIMITED);
    let mut h = watch_desyncs(sixty_ms().relay(relay));
    h.verify(60, 600);
    let liar = 2;
    let first = forge(&mut h, liar, 200);
    let verified = h.stats_of(0).verified_tick;
    h.verify(verified + 200, 900);

    let relay = h.relay_stats();
    // 200 desynced ticks, one episode: one desync (200 reports two turns ago).
    assert_eq!(relay.desynced_ticks, 200, "{relay:?}");
    assert_eq!(relay.desyncs_named, vec![0, 0, 200], "{relay:?}");
    assert_eq!(relay.desync_episodes, vec![0, 0, 1], "{relay:?}");
    assert_eq!(relay.desyncs, 1, "{relay:?}");
    for c in 0..3 {
        let seen = desyncs(&h, c);
        assert_eq!(seen.len(), 1, "client {c}: {seen:?}");
        assert_eq!(seen[0].players, vec![liar as u8]);
        assert_eq!(first.first(), Some(&seen[0].tick));
        // "You are desynced" on the liar, "player 2 desynced" on the others.
        assert_eq!(seen[0].own, c == liar, "client {c}");
        let net = h.net_of(c);
        let own = u64::from(c == liar);
        assert_eq!(
            (net.desyncs, net.others_desynced),
            (own, 1 - own),
            "{net:?}"
        );
    }

    // The liar's honest checksums agreed since: the episode ended, a new lie is a new one.
    let second = forge(&mut h, liar, 10);
    let verified = h.stats_of(0).verified_tick;
    h.verify(verified + 100, 600);
    let relay = h.relay_stats();
    assert_eq!(relay.desynced_ticks, 210, "{relay:?}");
    assert_eq!(relay.desync_episodes, vec![0, 0, 2], "{relay:?}");
    assert_eq!(relay.desyncs, 2, "{relay:?}");
    for c in 0..3 {
        let seen = desyncs(&h, c);
        assert_eq!(seen.len(), 2, "client {c}: {seen:?}");
        assert_eq!(second.first(), Some(&seen[1].tick));
        assert_eq!(seen[1].own, c == liar);
    }
}

/// `players` clients, of which `odd` runs a different game (one more box): its checksums
/// really differ from the others'.
fn diverging(players: u8, odd: usize) -> Peers {
    let make = move |c| {
        let mut game = game(players);
        if c == odd {
            game.boxes += 1;
        }
        plugin(game)
    };
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    watch_desyncs(peers_of(players, make).link(link).seed(7))
}

#[test]
fn a_real_disagreement_names_the_minority() {
    let mut h = diverging(3, 1);
    h.verify(60, 600);
    // Every judged tick differs; give the last reports time to arrive and be judged.
    h.run_frames(30).expect("the session goes on");
    let relay = h.relay_stats();
    assert!(relay.desynced_ticks >= 50, "{relay:?}");
    assert_eq!(
        relay.desyncs_named,
        vec![0, relay.desynced_ticks, 0],
        "{relay:?}"
    );
    // Player 1 differs at every tick: one episode, reported once, one desync.
    assert_eq!(relay.desync_episodes, vec![0, 1, 0], "{relay:?}");
    assert_eq!(relay.desyncs, 1, "{relay:?}");
    for c in 0..3 {
        let seen = desyncs(&h, c);
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].players, vec![1]);
        assert_eq!(seen[0].own, c == 1);
        assert_eq!(seen[0].judge, DesyncJudge::Majority);
        let net = h.net_of(c);
        let expected = (c == 1).then(|| vec![1]);
        assert_eq!(net.last_desync.map(|d| d.players), expected);
    }
}

#[test]
fn with_two_players_a_disagreement_names_both() {
    let mut h = diverging(2, 1);
    h.verify(60, 600);
    let relay = h.relay_stats();
    assert!(relay.desynced_ticks >= 50, "{relay:?}");
    assert_eq!(
        relay.desyncs_named,
        vec![relay.desynced_ticks; 2],
        "{relay:?}"
    );
    assert_eq!(relay.desync_episodes, vec![1, 1], "{relay:?}");
    assert_eq!(relay.desyncs, 2, "{relay:?}");
    for c in 0..2 {
        let seen = desyncs(&h, c);
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].players, vec![0, 1]);
        assert!(seen[0].own);
        let net = h.net_of(c);
        assert_eq!((net.desyncs, net.others_desynced), (1, 0));
    }
}
