//! Late join and rejoin from a snapshot: the relay seats a new player in a free slot of a
//! running session (or a player whose missing confirmed sets are gone), asks a connected
//! client (the buddy) for a snapshot of its verified world, checks it against the others'
//! verified checksum and forwards it; the joiner loads it and agrees with the others from its
//! first verified tick. Hostile chunks are refused, counted and limited.

use bevy::prelude::*;
use simsync::deterministic::{CapturedSnapshot, NetworkSessionConfig, SnapshotHooks};
use simsync::prelude::*;
use simsync::relay::{
    CaughtBy, DeterministicServerPlugin, LyingSnapshot, SnapshotServed, SnapshotServing,
};
use simsync::testing::RelayPeersBuilder;
use simsync_net::{
    ClientMessage, LinkConditionerConfig, MatchId, NetChannel, SessionClientMessage, SnapshotChunk,
};

use super::harness::{Peers, PeersExt, peers, peers_of, plugin, snapshot_plugin};
use crate::common::TestGame;

fn game(players: u8) -> TestGame {
    TestGame {
        boxes: 20,
        players,
        ..TestGame::default()
    }
}

/// A relay of `players` slots that starts with `start` of them and serves snapshots, and
/// `start` clients (configured by `net`; a late joiner is [`Peers::join`]ed) over `link`.
fn harness(
    players: u8,
    start: u8,
    net: NetworkSessionConfig,
    link: LinkConditionerConfig,
) -> RelayPeersBuilder<PackedInput> {
    let relay = DeterministicServerPlugin::new::<PackedInput>(players, 64)
        .reconnect_seed(11)
        .start_players(start)
        .snapshots(SnapshotServing::default());
    peers_of(players, move |_| {
        plugin(game(players)).networked(net.clone())
    })
    .link(link)
    .relay(relay)
    .clients(usize::from(start))
}

fn chunk(request: u32, index: u32) -> ClientMessage {
    ClientMessage::session(
        MatchId::FIRST,
        SessionClientMessage::SnapshotChunk(SnapshotChunk {
            request,
            tick: 5,
            checksum: 1,
            total_bytes: 10,
            index,
            count: 1,
            bytes: vec![7; 10],
        }),
    )
}

#[test]
fn a_late_joiner_takes_a_free_slot_and_a_buddy_is_asked_for_a_snapshot() {
    // The players serve no snapshots: every request is answered unavailable, so the relay keeps
    // asking (each in turn), and the session goes on for the two who play.
    let mut h = harness(
        3,
        2,
        NetworkSessionConfig::default(),
        LinkConditionerConfig::PERFECT,
    )
    .build()
    .expect("peers");
    h.verify(60, 1_000);
    assert!(
        h.relay()
            .world()
            .resource::<simsync::relay::RelayServer>()
            .started()
    );
    let late = h.join().expect("a late joiner");
    h.run_frames(60).expect("the joiner waits");
    let r = h.relay_stats();
    assert_eq!(r.late_joins, vec![0, 0, 1], "{r:?}");
    let net = h.net_of(late);
    assert_eq!(net.slot, Some(2));
    assert!(net.started);
    assert!(r.snapshots.requests >= 2, "{:?}", r.snapshots);
    assert!(r.snapshots.abandoned >= 2, "{:?}", r.snapshots);
    assert_eq!(r.snapshots.served, 0);
    let unavailable: u64 = (0..2).map(|c| h.net_of(c).snapshots.unavailable).sum();
    assert!(unavailable >= 2, "both players were asked and said no");
    assert!(
        (0..2).all(|c| h.net_of(c).snapshots.unavailable >= 1),
        "each in turn"
    );
    // The joiner is not sent confirmed sets it could not use; the others play on.
    assert_eq!(h.stats_of(late).verified_tick, 0);
    h.pause(late).expect("pause");
    let before = h.stats_of(0).verified_tick;
    h.verify(before + 30, 200);
}

#[test]
fn without_snapshots_a_late_joiner_is_refused() {
    let mut h = peers(game(2), LinkConditionerConfig::PERFECT)
        .build()
        .expect("peers");
    h.verify(20, 1_000);
    let late = h.join().expect("a late joiner");
    // A refused client stops a run: step by hand.
    for _ in 0..20 {
        h.step();
    }
    let net = h.net_of(late);
    assert_eq!(
        net.rejected,
        Some(simsync_net::RejectReason::SessionStarted)
    );
}

#[test]
fn unasked_snapshot_chunks_are_refused_counted_and_rate_limited() {
    let mut h = harness(
        2,
        2,
        NetworkSessionConfig::default(),
        LinkConditionerConfig::PERFECT,
    )
    .build()
    .expect("peers");
    h.verify(20, 1_000);
    for index in 0..3_000 {
        h.send(0, NetChannel::Snapshot, &chunk(77, index));
        if index % 500 == 499 {
            h.step();
        }
    }
    h.run_frames(5).expect("the session goes on");
    let r = h.relay_stats();
    let refused = r.snapshots.rejected_chunks;
    let limited = r.rate_limited[0].snapshot_chunks;
    assert_eq!(refused.unasked + limited, 3_000, "{refused:?} {limited}");
    assert!(limited >= 900, "the burst is 2,048 chunks: {limited}");
    assert_eq!(refused.total(), refused.unasked);
    assert_eq!(r.snapshots.served, 0);
    // The flooder is not disconnected and the session goes on.
    let before = h.stats_of(1).verified_tick;
    h.verify(before + 20, 200);
}

/// The encoded "snapshot" of the opaque-transfer tests: the tick and checksum it states, then
/// `len` bytes of a pattern of the tick (the relay and the wire never look inside).
fn fake_snapshot(tick: i32, checksum: u64, len: usize) -> Vec<u8> {
    let mut bytes = tick.to_le_bytes().to_vec();
    bytes.extend_from_slice(&checksum.to_le_bytes());
    bytes.extend((0..len).map(|i| (i as i32 * 31 + tick) as u8));
    bytes
}

/// Bytes of the opaque snapshots: 300 KB, 19 chunks.
const FAKE_BYTES: usize = 300_000;

/// The verified tick and its recorded checksum of a client's world.
fn verified(world: &World) -> Result<(i32, u64), String> {
    let stats = world.resource::<SessionStats>();
    stats
        .checksum_history
        .last()
        .filter(|c| c.tick == stats.verified_tick)
        .map(|c| (c.tick, c.checksum))
        .ok_or_else(|| "no checksum of the verified tick".to_string())
}

/// Requests a capture hook was called for.
#[derive(Resource, Default)]
struct Captures(u32);

/// An honest buddy, except that its first capture fails (so it is not always asked first).
fn honest_capture(world: &mut World) -> Result<CapturedSnapshot, String> {
    let calls = {
        let mut captures = world.get_resource_or_insert_with(Captures::default);
        captures.0 += 1;
        captures.0
    };
    if calls == 1 {
        return Err("not yet".into());
    }
    let (tick, checksum) = verified(world)?;
    Ok(CapturedSnapshot {
        tick,
        checksum,
        bytes: fake_snapshot(tick, checksum, FAKE_BYTES),
    })
}

/// A buddy whose world was tampered with before the capture: its snapshot's checksum is not
/// the one the others verified.
fn tampered_world_capture(world: &mut World) -> Result<CapturedSnapshot, String> {
    let (tick, checksum) = verified(world)?;
    let tampered = checksum ^ 0x5A5A;
    Ok(CapturedSnapshot {
        tick,
        checksum: tampered,
        bytes: fake_snapshot(tick, tampered, FAKE_BYTES),
    })
}

/// A buddy that states the verified checksum but sends a tampered body: only the joiner's load
/// can tell.
fn tampered_bytes_capture(world: &mut World) -> Result<CapturedSnapshot, String> {
    let (tick, checksum) = verified(world)?;
    Ok(CapturedSnapshot {
        tick,
        checksum,
        bytes: fake_snapshot(tick, checksum ^ 1, FAKE_BYTES),
    })
}

/// What the joiner's load was given.
#[derive(Resource, Default)]
struct Loaded(Vec<Vec<u8>>);

/// The joiner's load: keeps the bytes and reports what they state.
fn recording_load(world: &mut World, bytes: &[u8], max: usize) -> Result<(i32, u64), String> {
    if bytes.len() > max || bytes.len() < 12 {
        return Err(format!("{} bytes", bytes.len()));
    }
    world
        .get_resource_or_insert_with(Loaded::default)
        .0
        .push(bytes.to_vec());
    let tick = i32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    let checksum = u64::from_le_bytes(bytes[4..12].try_into().expect("8 bytes"));
    Ok((tick, checksum))
}

fn hooks(capture: fn(&mut World) -> Result<CapturedSnapshot, String>) -> SnapshotHooks {
    SnapshotHooks {
        capture,
        load: recording_load,
        max_bytes: simsync_net::DEFAULT_MAX_SNAPSHOT_BYTES,
    }
}

/// What the relay's app was told.
#[derive(Resource, Default)]
struct RelayHeard {
    lying: Vec<LyingSnapshot>,
    served: Vec<SnapshotServed>,
}

fn relay_listen(
    mut lying: MessageReader<LyingSnapshot>,
    mut served: MessageReader<SnapshotServed>,
    mut heard: ResMut<RelayHeard>,
) {
    heard.lying.extend(lying.read().copied());
    heard.served.extend(served.read().copied());
}

/// What the relay was told, in `h`.
fn relay_heard(h: &Peers) -> &RelayHeard {
    h.relay().world().resource::<RelayHeard>()
}

/// Two players (client 0 running `liar`, client 1 honest) over `link`; a third (client 2)
/// joins at tick 200 and is stepped until the relay forwarded it a snapshot.
fn opaque_late_join(
    liar: fn(&mut World) -> Result<CapturedSnapshot, String>,
    link: LinkConditionerConfig,
) -> Peers {
    let net = NetworkSessionConfig {
        snapshots: true,
        ..NetworkSessionConfig::default()
    };
    let mut h = harness(3, 2, net, link)
        .customize(move |c, client| {
            client.insert_resource(hooks(if c == 0 { liar } else { honest_capture }));
        })
        .build()
        .expect("peers");
    h.relay_mut()
        .init_resource::<RelayHeard>()
        .add_systems(Last, relay_listen);
    h.verify(200, 2_000);
    let joiner = h.join().expect("the joiner");
    // Until the snapshot is served and loaded (a stop no verified tick can tell).
    for _ in 0..3_000 {
        h.step();
        let loaded = h
            .client(joiner)
            .expect("running")
            .world()
            .contains_resource::<Loaded>();
        if !relay_heard(&h).served.is_empty() && loaded {
            break;
        }
    }
    // One more update: the session stats show what the exchange did after the last one.
    h.step();
    h
}

#[test]
fn a_buddy_whose_world_was_tampered_is_caught_by_the_relay_and_another_serves_under_loss() {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(20, 5)
        .with_loss(2.0);
    let h = opaque_late_join(tampered_world_capture, link);
    let heard = relay_heard(&h);
    assert!(!heard.lying.is_empty(), "{:?}", h.relay_stats().snapshots);
    assert!(
        heard
            .lying
            .iter()
            .all(|l| l.slot == 0 && l.caught_by == CaughtBy::Relay),
        "{:?}",
        heard.lying
    );
    assert_eq!(heard.served.len(), 1, "{:?}", heard.served);
    let served = heard.served[0];
    assert_eq!((served.slot, served.buddy), (2, 1));
    assert_eq!(served.bytes, FAKE_BYTES + 12);
    let r = h.relay_stats();
    assert_eq!(r.snapshots.lying[0], heard.lying.len() as u64);
    assert_eq!(r.snapshots.lying[1], 0);
    assert_eq!(r.snapshots.served, 1);
    assert!(r.snapshots.bytes_forwarded >= (FAKE_BYTES + 12) as u64);
    assert_eq!(
        r.snapshots.rejected_chunks.total(),
        0,
        "loss is not a fault"
    );
    // The joiner got the honest buddy's bytes, whole, through 2 % loss.
    let joiner = h.client(2).expect("running");
    let loaded = &joiner.world().resource::<Loaded>().0;
    let net = h.net_of(2);
    assert_eq!(loaded.len(), 1, "{net:?}");
    let tick = served.tick;
    let checksum = h
        .stats_of(1)
        .checksum_history
        .iter()
        .find(|c| c.tick == tick)
        .map(|c| c.checksum)
        .expect("the honest buddy verified the tick");
    assert_eq!(loaded[0], fake_snapshot(tick, checksum, FAKE_BYTES));
    assert_eq!(net.snapshots.loaded, 1);
    assert_eq!(net.snapshots.loaded_tick, Some(tick));
    assert!(tick >= 200, "a recent verified tick: {tick}");
}

#[test]
fn a_buddy_that_tampered_its_bytes_is_caught_by_the_joiner_and_the_relay_asks_again() {
    let link = LinkConditionerConfig::PERFECT.with_latency(10, 0);
    let mut h = opaque_late_join(tampered_bytes_capture, link);
    // The relay cannot see inside: the tampered snapshot is forwarded, the joiner's check
    // refuses it, and the relay counts the buddy and asks again.
    h.run_frames(200).expect("the session goes on");
    let heard = relay_heard(&h);
    let by_liar = heard.served.iter().filter(|s| s.buddy == 0).count();
    assert!(by_liar >= 1, "the liar served: {:?}", heard.served);
    assert!(
        heard.lying.len() >= by_liar.saturating_sub(1).max(1),
        "{:?}",
        heard.lying
    );
    assert!(
        heard
            .lying
            .iter()
            .all(|l| l.slot == 0 && l.caught_by == CaughtBy::Joiner),
        "{:?}",
        heard.lying
    );
    let net = h.net_of(2);
    assert!(net.snapshots.refused >= 1, "{net:?}");
    // Only the honest buddy's snapshot is ever accepted.
    let by_honest = heard.served.iter().filter(|s| s.buddy == 1).count() as u64;
    assert_eq!(net.snapshots.loaded, by_honest, "{:?}", heard.served);
    let r = h.relay_stats();
    assert_eq!(r.snapshots.lying[0], heard.lying.len() as u64);
    assert_eq!(r.snapshots.lying[1], 0);
    assert!(r.snapshots.requests >= 2, "asked again: {:?}", r.snapshots);
}

// --- Late join with the snapshot core (real capture and load) ---------------------------------

/// Two players of `game` (snapshots on: the core's capture and load) over `link`, with a
/// relay of `game.players` slots that serves snapshots and reads their headers; a third joins
/// a free slot at tick `join_at`, loads the buddy's snapshot and plays until everyone verified
/// `join_at + play`. The joiner is client 2.
fn core_late_join(game: TestGame, link: LinkConditionerConfig, join_at: i32, play: i32) -> Peers {
    let relay = DeterministicServerPlugin::new::<PackedInput>(game.players, 64)
        .reconnect_seed(11)
        .start_players(2)
        .snapshots(SnapshotServing::default())
        .header_reader(simsync::relay::read_snapshot_header);
    let net = NetworkSessionConfig::default();
    let mut h = peers_of(game.players, move |_| {
        snapshot_plugin(game.clone(), net.clone())
    })
    .link(link)
    .relay(relay)
    .clients(2)
    .build()
    .expect("peers");
    h.verify(join_at, 3_000);
    h.join().expect("the joiner");
    h.verify(join_at + play, 4_000);
    h.run_frames(10).expect("playing");
    h
}

/// The joiner's agreement with the players: (its ticks they hold, all equal; its first verified
/// tick).
fn joiner_agrees(h: &Peers) -> (usize, i32) {
    let agreement = h.agreement_of(2).unwrap_or_else(|e| panic!("{e}"));
    let first = h
        .stats_of(2)
        .checksum_history
        .first()
        .map_or(i32::MAX, |c| c.tick);
    (agreement.ticks_compared, first)
}

fn lossy_link() -> LinkConditionerConfig {
    LinkConditionerConfig::PERFECT
        .with_latency(20, 5)
        .with_loss(2.0)
}

#[test]
fn a_late_joiner_loads_the_buddys_snapshot_and_agrees_from_its_first_verified_tick() {
    let game = TestGame {
        boxes: 20,
        players: 3,
        ..TestGame::default()
    };
    let h = core_late_join(game, lossy_link(), 150, 200);
    let net = h.net_of(2);
    assert_eq!(net.slot, Some(2));
    assert_eq!(net.snapshots.loaded, 1, "{:?}", net.snapshots);
    assert_eq!(net.snapshots.refused, 0, "{:?}", net.snapshots);
    let loaded = net.snapshots.loaded_tick.expect("a loaded tick");
    assert!(loaded >= 150, "a recent verified snapshot: {loaded}");
    let r = h.relay_stats();
    assert_eq!(r.late_joins, vec![0, 0, 1], "{r:?}");
    assert_eq!(r.snapshots.served, 1, "{:?}", r.snapshots);
    let (common, first) = joiner_agrees(&h);
    assert_eq!(
        first,
        loaded + 1,
        "verified from the tick after the snapshot"
    );
    assert!(common > 100, "common ticks {common}");
    h.assert_all_agree();
    println!(
        "late join (20 boxes): snapshot of tick {loaded} ({} bytes), first verified {first}, {common} common ticks",
        r.snapshots.bytes_forwarded
    );
}

#[test]
fn a_late_joiner_of_a_1000_body_rapier_scene_loads_the_snapshot_and_agrees_under_loss() {
    // 1,000 boxes in 20 piles of 5×5×2 (resting, most fall asleep) plus 3 balls and the ground.
    let game = TestGame {
        boxes: 1_000,
        players: 3,
        ..TestGame::default()
    };
    let h = core_late_join(game, lossy_link(), 150, 120);
    let net = h.net_of(2);
    assert_eq!(net.snapshots.loaded, 1, "{:?}", net.snapshots);
    assert_eq!(net.snapshots.refused, 0, "{:?}", net.snapshots);
    let loaded = net.snapshots.loaded_tick.expect("a loaded tick");
    let r = h.relay_stats();
    assert_eq!(r.snapshots.served, 1, "{:?}", r.snapshots);
    assert!(
        r.snapshots.bytes_forwarded > 1_000 * 64,
        "the bodies are in it: {}",
        r.snapshots.bytes_forwarded
    );
    let (common, first) = joiner_agrees(&h);
    assert_eq!(first, loaded + 1);
    assert!(common > 100, "common ticks {common}");
    h.assert_all_agree();
    println!(
        "late join (1,000 boxes): snapshot of tick {loaded} ({} bytes), first verified {first}, {common} common ticks",
        r.snapshots.bytes_forwarded
    );
}
