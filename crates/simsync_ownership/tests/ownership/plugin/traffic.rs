//! State traffic ([rules 15–19](simsync_ownership::rules)): batches of quantized states, the
//! upload and relay budgets, priority accumulation without starvation, the interest radius, and
//! hostile batches — each rule on its own, with an entity server and participants over the
//! in-memory transport.

use bevy::prelude::*;
use bevy_rapier3d::prelude::Velocity;
use simsync_net::LinkConditionerConfig;
use simsync_net::prelude::*;
use simsync_ownership::prelude::*;
use simsync_ownership::{
    BodyId, EntityServer, EntityServerLimits, OwnershipClock, StateBatch, StateTraffic,
};

use super::harness::{Body, Session, Setup, steps};

/// Bodies 1..=n falling from a 4 × 4 m grid (no ground), each spinning.
fn falling(n: u64) -> Vec<Body> {
    (1..=n)
        .map(|id| {
            let (x, z) = ((id % 8) as f32 - 4.0, (id / 8) as f32 - 4.0);
            Body::falling(id, Vec3::new(x, 2.0, z))
        })
        .collect()
}

/// Participant `i` grabs bodies `ids` and sets them spinning and sliding, then the session
/// runs until it owns them all.
fn grab_all(s: &mut Session, i: usize, ids: impl Iterator<Item = u64> + Clone) {
    for id in ids.clone() {
        s.command(i, id, |e| {
            e.grab();
        });
        let app = s.p(i);
        let e = Session::entity(app, id);
        let mut v = app.world_mut().get_mut::<Velocity>(e).expect("Velocity");
        v.linear = Vec3::new((id % 3) as f32 - 1.0, 0.0, 0.5);
        v.angular = Vec3::new(0.0, 1.0 + (id % 4) as f32, 0.5);
    }
    let me = s.id_of(i);
    let owned = s.run_until(steps(3_000), |s| {
        ids.clone()
            .all(|id| s.server_owner(id).is_some_and(|(o, _)| o == me))
    });
    assert!(owned.is_some(), "participant {i} did not get every body");
}

fn setup(upload: u32, relay: u32) -> Setup {
    Setup {
        limits: EntityServerLimits::UNLIMITED,
        budget: StateBudgetConfig {
            upload_bytes_per_second: upload,
            relay_bytes_per_second: relay,
            interest_radius: None,
            ..StateBudgetConfig::default()
        },
        ..Setup::default()
    }
}

/// Rules 15, 16: moving bodies cost at most 24 bytes each on average in batches (message
/// framing included), and the copies on the other participant stay within a few centimetres.
#[test]
fn a_moving_scene_costs_at_most_24_bytes_a_body() {
    let bodies = falling(40);
    let mut s = Session::with_setup(
        2,
        &bodies,
        &Setup {
            seed: 3,
            ..setup(64_000, 128_000)
        },
    );
    grab_all(&mut s, 0, 1..=40);
    let before = s.stats(0);
    s.run(steps(1_000));
    let after = s.stats(0);
    let bodies_sent = after.state_updates_sent - before.state_updates_sent;
    let bytes = after.state_update_bytes - before.state_update_bytes;
    let batches = after.state_batches_sent - before.state_batches_sent;
    let per_body = bytes as f64 / bodies_sent as f64;
    assert!(bodies_sent > 1_000, "{bodies_sent} states sent");
    assert!(per_body <= 24.0, "{per_body:.2} bytes a body");
    // One batch a frame at most (no releases here).
    assert!(batches <= u64::from(steps(1_000)), "{batches} batches");
    let traffic = *s.p(0).world().resource::<StateTraffic>();
    assert!(traffic.bytes_per_body > 0.0 && traffic.bytes_per_body <= 24.0);
    assert!(traffic.bytes_up_per_second > 0.0);
    for id in 1..=40 {
        assert!(s.spread(id) < 0.05, "body {id}: {}", s.spread(id));
    }
}

/// Rule 17: over every one-second window the upload and the relay stay within rate + burst
/// (rate / 8), while bodies wait for the budget.
#[test]
fn the_upload_and_relay_budgets_are_never_exceeded() {
    let (upload, relay) = (4_000u32, 2_000u32);
    let bodies = falling(48);
    let setup = Setup {
        seed: 5,
        ..setup(upload, relay)
    };
    let mut s = Session::with_setup(2, &bodies, &setup);
    grab_all(&mut s, 0, 1..=48);
    // The relay to participant 1, as it received it (the network is perfect): the server also
    // sends participant 0 batches acknowledging its uploads (rule 20), under participant 0's
    // own relay budget.
    let relay_total = |s: &Session| s.stats(1).state_bytes_received;
    let mut up = Vec::new();
    let mut down = Vec::new();
    for _ in 0..steps(4_000) {
        up.push(s.stats(0).state_update_bytes);
        down.push(relay_total(&s));
        s.step();
    }
    let window = steps(1_000) as usize;
    for w in 0..up.len() - window {
        let sent_up = up[w + window] - up[w];
        let sent_down = down[w + window] - down[w];
        assert!(
            sent_up <= u64::from(upload + upload / 8),
            "up {sent_up} at {w}"
        );
        assert!(
            sent_down <= u64::from(relay + relay / 8),
            "down {sent_down} at {w}"
        );
    }
    // The budgets were used, and bit.
    let total_up = up[up.len() - 1] - up[up.len() - 1 - window];
    assert!(total_up as f64 >= 0.8 * f64::from(upload), "{total_up}");
    assert!(s.stats(0).bodies_deferred > 0);
    assert!(s.server_stats().relay_bodies_deferred > 0);
    let traffic = *s.p(0).world().resource::<StateTraffic>();
    assert!(
        traffic.budget_use > 0.7 && traffic.budget_use <= 1.2,
        "{}",
        traffic.budget_use
    );
    // Still owned: the tight budget never starved a heartbeat into silence expiry (rule 5).
    assert_eq!(s.server_stats().expiries, 0);
}

/// Rule 18: under a budget far below what the scene wants, a body whose receivers' copy is
/// right (a steady glide, sent only for its heartbeat) still goes out every heartbeat, and every
/// falling body is sent within a bounded time.
#[test]
fn no_body_starves_under_a_tight_budget() {
    let mut bodies = falling(40);
    bodies.push(Body::floating(99, Vec3::new(0.0, 5.0, 0.0)));
    let mut s = Session::with_setup(
        2,
        &bodies,
        &Setup {
            seed: 9,
            ..setup(2_000, 128_000)
        },
    );
    grab_all(&mut s, 0, (1..=40).chain([99]));
    s.set_velocity(0, 99, Vec3::X);
    let mut last: Vec<Option<std::time::Duration>> = vec![None; 100];
    let mut worst = vec![std::time::Duration::ZERO; 100];
    for _ in 0..steps(6_000) {
        s.step();
        let world = s.app(0).world();
        let now = world.resource::<OwnershipClock>().now();
        let c = world.resource::<simsync_ownership::OwnershipClient>();
        for id in (1..=40).chain([99]) {
            // Not sent yet since it was granted: the budget had no room so far.
            let Some(sent) = c.last_sent(BodyId(id)) else {
                continue;
            };
            if let Some(prev) = last[id as usize] {
                worst[id as usize] = worst[id as usize].max(now.saturating_sub(prev.max(sent)));
            }
            if last[id as usize] != Some(sent) {
                last[id as usize] = Some(sent);
            }
        }
    }
    let glide = worst[99];
    // Heartbeat 1 s, urgent 250 ms later, sent within a frame or two (rule 18).
    assert!(
        glide.as_millis() <= 1_300,
        "the gliding body waited {glide:?}"
    );
    let falling_worst = (1..=40).map(|id| worst[id]).max().unwrap();
    // 40 entries of ≤ 24 B at 2,000 B/s: a round takes about 0.5 s; weights differ by at most
    // 16× (rule 18's bound, 16 × N × E / B ≈ 7.7 s).
    assert!(
        falling_worst.as_millis() <= 7_700,
        "a falling body waited {falling_worst:?}"
    );
    assert!(s.stats(0).bodies_deferred > 0);
    assert_eq!(s.server_stats().expiries, 0);
}

/// Rule 19: with an interest radius, a participant gets the states of bodies near its avatar
/// only; the far body is not relayed to it and stays where its own world has it.
#[test]
fn the_interest_radius_filters_relays() {
    let bodies = [
        Body::floating(1, Vec3::ZERO),
        Body::floating(10, Vec3::new(2.0, 0.0, 0.0)),
        Body::floating(11, Vec3::new(30.0, 0.0, 0.0)),
    ];
    let mut setup = setup(64_000, 128_000);
    setup.budget.interest_radius = Some(6.0);
    let mut s = Session::with_setup(2, &bodies, &Setup { seed: 11, ..setup });
    // Body 1 is participant 1's avatar (always held, rule 10): its batches carry the focus.
    let e = Session::entity(s.p(1), 1);
    s.p(1).world_mut().entity_mut(e).insert(ParticipantAvatar);
    let p1 = s.id_of(1);
    assert!(
        s.run_until(steps(2_000), |s| s
            .server_owner(1)
            .is_some_and(|(o, _)| o == p1))
            .is_some()
    );
    s.run(steps(1_100));
    grab_all(&mut s, 0, [10u64, 11].into_iter());
    s.set_velocity(0, 10, Vec3::new(0.0, 1.0, 0.0));
    s.set_velocity(0, 11, Vec3::new(0.0, 1.0, 0.0));
    s.run(steps(1_000));
    let (near0, _) = s.body_on(0, 10);
    let (near1, _) = s.body_on(1, 10);
    let (far0, _) = s.body_on(0, 11);
    let (far1, _) = s.body_on(1, 11);
    assert!(
        near0.y > 0.9 && near0.distance(near1) < 0.05,
        "{near0} vs {near1}"
    );
    assert!(far0.y > 0.9, "{far0}");
    assert!(
        far1.y.abs() < 0.01,
        "the far body moved on participant 1: {far1}"
    );
    assert!(s.server_stats().relay_out_of_interest > 0);
    let server = s.server().world().resource::<EntityServer>();
    let focus = server
        .participants()
        .find(|(_, p)| *p == p1)
        .and_then(|(c, _)| server.focus(c));
    assert!(focus.is_some_and(|f| f.length() < 0.01), "{focus:?}");
}

/// Rule 15: malformed, truncated and oversized batches are dropped whole and counted; batch
/// entries about bodies the sender does not own or the server does not know are refused; a
/// flood of entries is rate-limited. The honest participant's relay keeps flowing.
#[test]
fn hostile_batches_are_counted_and_honest_traffic_flows() {
    let bodies = falling(4);
    let setup = Setup {
        seed: 13,
        ..Setup::default()
    };
    let mut s = Session::with_setup(3, &bodies, &setup);
    grab_all(&mut s, 0, 1..=4);
    let good = StateBatch {
        seq: 1,
        focus: None,
        bodies: vec![(BodyId(2), simsync_ownership::BodyState::default())],
    }
    .encode()
    .unwrap();
    let batch =
        |bytes: Vec<u8>| ClientMessage::Ownership(OwnershipClientMessage::StateBatch(bytes));
    s.send_raw(2, batch(vec![0xff; 40]));
    s.send_raw(2, batch(good[..good.len() - 2].to_vec()));
    let mut trailing = good.clone();
    trailing.extend([1, 2, 3]);
    s.send_raw(2, batch(trailing));
    // (An oversized batch does not get past the sender's transport: renet's 64 KiB message
    // limit is below `MAX_BATCH_BYTES`; the decoder's own limit is a unit test.)
    // Not the sender's body (rule 4), and an unknown one.
    s.send_raw(2, batch(good.clone()));
    let unknown = StateBatch {
        seq: 2,
        focus: None,
        bodies: vec![(BodyId(77), simsync_ownership::BodyState::default())],
    };
    s.send_raw(2, batch(unknown.encode().unwrap()));
    // A flood: 2,000 entries about bodies it does not own.
    let flood = StateBatch {
        seq: 3,
        focus: None,
        bodies: (1000..3000)
            .map(|i| (BodyId(i), simsync_ownership::BodyState::default()))
            .collect(),
    };
    s.send_raw(2, batch(flood.encode().unwrap()));
    let relayed_before = s.stats(1).relays_applied;
    s.run(steps(500));
    let stats = s.server_stats();
    assert!(stats.state_batches_invalid >= 3, "{stats:?}");
    assert!(
        stats.state_updates_refused.total() >= 2,
        "{:?}",
        stats.state_updates_refused
    );
    assert!(
        stats.rate_limited.state_updates > 1_900,
        "{:?}",
        stats.rate_limited
    );
    // Honest traffic flowed on: participant 1 keeps applying participant 0's states.
    assert!(s.stats(1).relays_applied > relayed_before + 20);
    for id in 1..=4 {
        assert_eq!(s.server_owner(id).map(|(o, _)| o), Some(s.id_of(0)));
        assert!(s.spread(id) < 0.05);
    }
}

/// Rules 15–18 over a lossy, jittery link: the copies of moving bodies stay close and the
/// resting ones agree within 1 cm after they are released.
#[test]
fn resting_bodies_agree_within_a_centimetre_over_a_lossy_link() {
    let mut bodies = vec![Body::ground(100, Vec3::new(0.0, -0.5, 0.0))];
    bodies.extend(falling(16));
    let link = LinkConditionerConfig {
        latency_ms: 40,
        jitter_ms: 10,
        loss_percent: 5.0,
        ..LinkConditionerConfig::PERFECT
    };
    let mut s = Session::with_setup(
        2,
        &bodies,
        &Setup {
            seed: 21,
            link,
            ..setup(16_000, 32_000)
        },
    );
    for id in 1..=16 {
        s.command(0, id, |e| {
            e.poke();
        });
        s.set_velocity(0, id, Vec3::new(0.5, 2.0, 0.0));
    }
    s.run(steps(8_000));
    for id in 1..=16 {
        assert!(s.spread(id) <= 0.01, "body {id}: {} m", s.spread(id));
    }
}

/// Rule 15, participant side: a server's relay batch that does not decode is dropped whole and
/// counted; in a good batch, a body the participant does not have is counted, and a batch older
/// than the last one applied to a body does not move it back.
#[test]
fn a_participant_drops_bad_relay_batches_and_applies_good_ones() {
    let network = MemoryNetwork::perfect(3);
    let (mut server, mut p) = super::harness::raw_server_and_participant(&network);
    let at = |x: f32| simsync_ownership::BodyState {
        position: Vec3::new(x, 0.0, 0.0),
        ..Default::default()
    };
    let batch = |seq: u32, bodies: Vec<(u64, f32)>| {
        let bytes = StateBatch {
            seq,
            focus: None,
            bodies: bodies
                .into_iter()
                .map(|(b, x)| (BodyId(b), at(x)))
                .collect(),
        }
        .encode()
        .expect("encodes");
        ServerMessage::Ownership(OwnershipServerMessage::StateBatch(bytes))
    };
    let good = batch(5, vec![(1, 3.0), (404, 1.0)]);
    let ServerMessage::Ownership(OwnershipServerMessage::StateBatch(bytes)) = &good else {
        unreachable!()
    };
    let truncated = bytes[..bytes.len() - 1].to_vec();
    let messages = [
        ServerMessage::Ownership(OwnershipServerMessage::StateBatch(vec![0xff; 9])),
        ServerMessage::Ownership(OwnershipServerMessage::StateBatch(truncated)),
        good,
        batch(4, vec![(1, 8.0)]),
    ];
    super::harness::send_raw(&mut server, &mut p, &messages);
    let stats = *p
        .world()
        .resource::<simsync_ownership::OwnershipClient>()
        .stats();
    assert_eq!(stats.state_batches_invalid, 2, "{stats:?}");
    assert_eq!(stats.relays_applied, 1);
    assert_eq!(stats.relays_stale, 1);
    assert_eq!(stats.unknown_bodies, 1);
    let e = Session::entity(&p, 1);
    // 3 m on the 1 mm grid: 3,000 × 0.001 in f32.
    let x = p.world().get::<Transform>(e).unwrap().translation.x;
    assert!((x - 3.0).abs() < 1e-5, "{x}");
}
