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
use simsync_net::prelude::*;
use simsync_net::{
    ClientMessage, LinkConditionerConfig, NetChannel, SessionClientMessage, SnapshotChunk,
};

use super::harness::{Harness, client_app};
use crate::common::TestGame;

fn game(players: u8) -> TestGame {
    TestGame {
        boxes: 20,
        players,
        ..TestGame::default()
    }
}

/// A relay of `players` slots that starts with `start` of them and serves snapshots, and
/// `start` clients (configured by `net`) over `link`.
fn harness(
    players: u8,
    start: u8,
    net: NetworkSessionConfig,
    link: LinkConditionerConfig,
) -> Harness {
    let relay = DeterministicServerPlugin::new::<PackedInput>(players, 64)
        .reconnect_seed(11)
        .start_players(start)
        .snapshots(SnapshotServing::default());
    let mut h = Harness::with_relay(game(players), link, net, 60, relay);
    h.clients.truncate(usize::from(start));
    h
}

/// A new client App on transport `id` of the harness's network.
fn new_client(h: &Harness, players: u8, net: NetworkSessionConfig, id: u64) -> App {
    let mut client = client_app(game(players), net, 60);
    client.insert_net_client(h.network.client_transport(id).expect("client"));
    client.finish();
    client.cleanup();
    client
}

fn send(h: &mut Harness, client: usize, channel: NetChannel, message: &ClientMessage) {
    let bytes = simsync_net::encode(message).expect("encodes");
    h.clients[client]
        .world_mut()
        .resource_mut::<RenetClient>()
        .send_message(channel, bytes);
}

fn chunk(request: u32, index: u32) -> ClientMessage {
    ClientMessage::Session(SessionClientMessage::SnapshotChunk(SnapshotChunk {
        request,
        tick: 5,
        checksum: 1,
        total_bytes: 10,
        index,
        count: 1,
        bytes: vec![7; 10],
    }))
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
    );
    h.run_until_verified(60, 1_000);
    assert!(
        h.server
            .world()
            .resource::<simsync::relay::RelayServer>()
            .started()
    );
    let mut late = new_client(&h, 3, NetworkSessionConfig::default(), 9);
    for _ in 0..60 {
        h.step();
        late.update();
    }
    let r = h.relay();
    assert_eq!(r.late_joins, vec![0, 0, 1], "{r:?}");
    let net = late
        .world()
        .resource::<SessionStats>()
        .network
        .clone()
        .expect("networked");
    assert_eq!(net.slot, Some(2));
    assert!(net.started);
    assert!(r.snapshots.requests >= 2, "{:?}", r.snapshots);
    assert!(r.snapshots.abandoned >= 2, "{:?}", r.snapshots);
    assert_eq!(r.snapshots.served, 0);
    let unavailable: u64 = (0..2)
        .map(|c| h.stats(c).network.expect("net").snapshots.unavailable)
        .sum();
    assert!(unavailable >= 2, "both players were asked and said no");
    assert!(
        (0..2).all(|c| h.stats(c).network.expect("net").snapshots.unavailable >= 1),
        "each in turn"
    );
    // The joiner is not sent confirmed sets it could not use; the others play on.
    assert_eq!(late.world().resource::<SessionStats>().verified_tick, 0);
    let before = h.stats(0).verified_tick;
    h.run_until_verified(before + 30, 200);
}

#[test]
fn without_snapshots_a_late_joiner_is_refused() {
    let relay = DeterministicServerPlugin::new::<PackedInput>(2, 64);
    let mut h = Harness::with_relay(
        game(2),
        LinkConditionerConfig::PERFECT,
        NetworkSessionConfig::default(),
        60,
        relay,
    );
    h.run_until_verified(20, 1_000);
    let mut late = new_client(&h, 2, NetworkSessionConfig::default(), 9);
    for _ in 0..20 {
        h.step();
        late.update();
    }
    let net = late
        .world()
        .resource::<SessionStats>()
        .network
        .clone()
        .expect("networked");
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
    );
    h.run_until_verified(20, 1_000);
    for index in 0..3_000 {
        send(&mut h, 0, NetChannel::Snapshot, &chunk(77, index));
        if index % 500 == 499 {
            h.step();
        }
    }
    for _ in 0..5 {
        h.step();
    }
    let r = h.relay();
    let refused = r.snapshots.rejected_chunks;
    let limited = r.rate_limited[0].snapshot_chunks;
    assert_eq!(refused.unasked + limited, 3_000, "{refused:?} {limited}");
    assert!(limited >= 900, "the burst is 2,048 chunks: {limited}");
    assert_eq!(refused.total(), refused.unasked);
    assert_eq!(r.snapshots.served, 0);
    // The flooder is not disconnected and the session goes on.
    let before = h.stats(1).verified_tick;
    h.run_until_verified(before + 20, 200);
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

/// Two players (client 0 running `liar`, client 1 honest) over `link`; a third joins at tick
/// 200 and is stepped until the relay forwarded it a snapshot. Returns the harness and the
/// joiner.
fn opaque_late_join(
    liar: fn(&mut World) -> Result<CapturedSnapshot, String>,
    link: LinkConditionerConfig,
) -> (Harness, App) {
    let net = NetworkSessionConfig {
        snapshots: true,
        ..NetworkSessionConfig::default()
    };
    let mut h = harness(3, 2, net.clone(), link);
    h.server
        .init_resource::<RelayHeard>()
        .add_systems(Last, relay_listen);
    h.clients[0].insert_resource(hooks(liar));
    h.clients[1].insert_resource(hooks(honest_capture));
    h.run_until_verified(200, 2_000);
    let mut joiner = new_client(&h, 3, net, 9);
    joiner.insert_resource(hooks(honest_capture));
    for _ in 0..3_000 {
        h.step();
        joiner.update();
        if !h.server.world().resource::<RelayHeard>().served.is_empty()
            && joiner.world().contains_resource::<Loaded>()
        {
            break;
        }
    }
    // One more update: the session stats show what the exchange did after the last one.
    h.step();
    joiner.update();
    (h, joiner)
}

#[test]
fn a_buddy_whose_world_was_tampered_is_caught_by_the_relay_and_another_serves_under_loss() {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(20, 5)
        .with_loss(2.0);
    let (h, joiner) = opaque_late_join(tampered_world_capture, link);
    let heard = h.server.world().resource::<RelayHeard>();
    assert!(!heard.lying.is_empty(), "{:?}", h.relay().snapshots);
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
    let r = h.relay();
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
    let loaded = &joiner.world().resource::<Loaded>().0;
    let net = joiner
        .world()
        .resource::<SessionStats>()
        .network
        .clone()
        .expect("net");
    assert_eq!(loaded.len(), 1, "{net:?}");
    let tick = served.tick;
    let checksum = h
        .stats(1)
        .checksum_history
        .iter()
        .find(|c| c.tick == tick)
        .map(|c| c.checksum)
        .expect("the honest buddy verified the tick");
    assert_eq!(loaded[0], fake_snapshot(tick, checksum, FAKE_BYTES));
    let net = joiner
        .world()
        .resource::<SessionStats>()
        .network
        .clone()
        .expect("net");
    assert_eq!(net.snapshots.loaded, 1);
    assert_eq!(net.snapshots.loaded_tick, Some(tick));
    assert!(tick >= 200, "a recent verified tick: {tick}");
}

#[test]
fn a_buddy_that_tampered_its_bytes_is_caught_by_the_joiner_and_the_relay_asks_again() {
    let link = LinkConditionerConfig::PERFECT.with_latency(10, 0);
    let (mut h, mut joiner) = opaque_late_join(tampered_bytes_capture, link);
    // The relay cannot see inside: the tampered snapshot is forwarded, the joiner's check
    // refuses it, and the relay counts the buddy and asks again.
    for _ in 0..200 {
        h.step();
        joiner.update();
    }
    let heard = h.server.world().resource::<RelayHeard>();
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
    let net = joiner
        .world()
        .resource::<SessionStats>()
        .network
        .clone()
        .expect("net");
    assert!(net.snapshots.refused >= 1, "{net:?}");
    // Only the honest buddy's snapshot is ever accepted.
    let by_honest = heard.served.iter().filter(|s| s.buddy == 1).count() as u64;
    assert_eq!(net.snapshots.loaded, by_honest, "{:?}", heard.served);
    let r = h.relay();
    assert_eq!(r.snapshots.lying[0], heard.lying.len() as u64);
    assert_eq!(r.snapshots.lying[1], 0);
    assert!(r.snapshots.requests >= 2, "asked again: {:?}", r.snapshots);
}

// --- Late join with the snapshot core (real capture and load) ---------------------------------

/// A client with snapshots on in both the plugin (the core's capture/load hooks) and the
/// network config.
fn snapshot_client(h: &Harness, game: TestGame, id: u64) -> App {
    let players = game.players;
    let net = NetworkSessionConfig {
        snapshots: true,
        ..NetworkSessionConfig::default()
    };
    let mut client = super::harness::client_app_configured(game, players, net, 60, 64, |p| {
        p.snapshots(simsync::deterministic::SnapshotLimits::default())
    });
    client.insert_net_client(h.network.client_transport(id).expect("client"));
    client.finish();
    client.cleanup();
    client
}

/// A relay of `players` slots starting with 2 that serves snapshots and reads their headers,
/// and 2 snapshot clients of `game` over `link`.
fn core_harness(game: TestGame, link: LinkConditionerConfig) -> Harness {
    let relay = DeterministicServerPlugin::new::<PackedInput>(game.players, 64)
        .reconnect_seed(11)
        .start_players(2)
        .snapshots(SnapshotServing::default())
        .header_reader(simsync::relay::read_snapshot_header);
    let mut h = Harness::with_relay(
        game.clone(),
        link,
        NetworkSessionConfig::default(),
        60,
        relay,
    );
    h.clients.clear();
    for id in 1..=2 {
        let client = snapshot_client(&h, game.clone(), 10 + id);
        h.clients.push(client);
    }
    h
}

/// What the joiner's checksums and the players' share: (common ticks, mismatches, first
/// verified tick of the joiner).
fn agreement(h: &Harness, joiner: usize) -> (usize, usize, i32) {
    let mine = h.stats(joiner).checksum_history;
    let first = mine.first().map_or(i32::MAX, |c| c.tick);
    let mut common = 0;
    let mut mismatches = 0;
    for other in (0..h.clients.len()).filter(|c| *c != joiner) {
        let theirs: std::collections::HashMap<i32, u64> = h
            .stats(other)
            .checksum_history
            .iter()
            .map(|c| (c.tick, c.checksum))
            .collect();
        for c in &mine {
            if let Some(checksum) = theirs.get(&c.tick) {
                common += 1;
                if *checksum != c.checksum {
                    mismatches += 1;
                }
            }
        }
    }
    (common / (h.clients.len() - 1), mismatches, first)
}

/// Two players of `game` over `link`; a third joins a free slot at tick `join_at`, loads the
/// buddy's snapshot and plays until everyone verified `join_at + play`. Returns the harness
/// (the joiner is its client 2), the update the joiner was added at and the update of its first
/// verified tick.
fn core_late_join(
    game: TestGame,
    link: LinkConditionerConfig,
    join_at: i32,
    play: i32,
) -> (Harness, u32, u32) {
    let mut h = core_harness(game.clone(), link);
    h.run_until_verified(join_at, 3_000);
    let joiner = snapshot_client(&h, game, 9);
    h.clients.push(joiner);
    let mut first_verified = None;
    for update in 1..=4_000u32 {
        h.step();
        if first_verified.is_none() && !h.stats(2).checksum_history.is_empty() {
            first_verified = Some(update);
        }
        if (0..3).all(|c| h.stats(c).verified_tick >= join_at + play) {
            break;
        }
    }
    for _ in 0..10 {
        h.step();
    }
    let first = first_verified.expect("the joiner verified a tick");
    (h, 0, first)
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
    let (h, _, first_update) = core_late_join(game, lossy_link(), 150, 200);
    let net = h.stats(2).network.expect("networked");
    assert_eq!(net.slot, Some(2));
    assert_eq!(net.snapshots.loaded, 1, "{:?}", net.snapshots);
    assert_eq!(net.snapshots.refused, 0, "{:?}", net.snapshots);
    let loaded = net.snapshots.loaded_tick.expect("a loaded tick");
    assert!(loaded >= 150, "a recent verified snapshot: {loaded}");
    let r = h.relay();
    assert_eq!(r.late_joins, vec![0, 0, 1], "{r:?}");
    assert_eq!(r.snapshots.served, 1, "{:?}", r.snapshots);
    let (common, mismatches, first) = agreement(&h, 2);
    assert_eq!(
        first,
        loaded + 1,
        "verified from the tick after the snapshot"
    );
    assert!(common > 100, "common ticks {common}");
    assert_eq!(mismatches, 0, "of {common}");
    println!(
        "late join (20 boxes): snapshot of tick {loaded} ({} bytes), first verified {first} after {first_update} updates, {common} common ticks",
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
    let (h, _, first_update) = core_late_join(game, lossy_link(), 150, 120);
    let net = h.stats(2).network.expect("networked");
    assert_eq!(net.snapshots.loaded, 1, "{:?}", net.snapshots);
    assert_eq!(net.snapshots.refused, 0, "{:?}", net.snapshots);
    let loaded = net.snapshots.loaded_tick.expect("a loaded tick");
    let r = h.relay();
    assert_eq!(r.snapshots.served, 1, "{:?}", r.snapshots);
    assert!(
        r.snapshots.bytes_forwarded > 1_000 * 64,
        "the bodies are in it: {}",
        r.snapshots.bytes_forwarded
    );
    let (common, mismatches, first) = agreement(&h, 2);
    assert_eq!(first, loaded + 1);
    assert!(common > 100, "common ticks {common}");
    assert_eq!(mismatches, 0, "of {common}");
    println!(
        "late join (1,000 boxes): snapshot of tick {loaded} ({} bytes), first verified {first} after {first_update} updates, {common} common ticks",
        r.snapshots.bytes_forwarded
    );
}
