//! Deltas against acknowledged states ([rule 20](simsync_ownership::rules)) between Apps over
//! the in-memory transport: what they save on a resting scene over a lossy link, and hostile
//! acknowledgements and baselines on both sides.

use bevy::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_net::prelude::*;
use simsync_ownership::prelude::*;
use simsync_ownership::{
    BatchAck, BodyId, Delta, EntityServer, EntityServerLimits, Entry, MAX_BASELINE_AGO,
    OwnershipClient, QuantizedState, RotationDelta, StateBatch, WireBatch,
};

use super::harness::{Body, Session, Setup, steps};

/// Bodies 1..=n resting on the ground in a grid, and the ground.
fn resting(n: u64) -> Vec<Body> {
    let mut bodies = vec![Body::ground(100, Vec3::new(0.0, -0.5, 0.0))];
    bodies.extend((1..=n).map(|id| {
        let (x, z) = ((id % 8) as f32 - 4.0, (id / 8) as f32 - 4.0);
        Body::falling(id, Vec3::new(x, 0.25, z))
    }));
    bodies
}

/// Participant 0 holds `n` resting bodies (sent on their heartbeats) over a link of 40 ± 10 ms
/// and 5 % loss each way, participant 1 watches; after they settle, 8 s are measured: bytes per
/// body uploaded by participant 0, bytes per body relayed, and the session.
fn resting_scene(n: u64, delta: bool) -> (f64, f64, Session) {
    let link = LinkConditionerConfig {
        latency_ms: 40,
        jitter_ms: 10,
        loss_percent: 5.0,
        ..LinkConditionerConfig::PERFECT
    };
    let setup = Setup {
        limits: EntityServerLimits::UNLIMITED,
        budget: StateBudgetConfig {
            delta_encoding: delta,
            ..StateBudgetConfig::default()
        },
        ..Setup::default()
    };
    let mut s = Session::with_setup(
        2,
        &resting(n),
        &Setup {
            seed: 31,
            link,
            ..setup
        },
    );
    for id in 1..=n {
        s.command(0, id, |e| {
            e.grab();
        });
    }
    let me = s.id_of(0);
    let owned = s.run_until(steps(3_000), |s| {
        (1..=n).all(|id| s.server_owner(id).is_some_and(|(o, _)| o == me))
    });
    assert!(owned.is_some(), "participant 0 did not get every body");
    s.run(steps(3_000));
    let (up, relay) = (s.stats(0), s.server_stats());
    s.run(steps(8_000));
    let (up2, relay2) = (s.stats(0), s.server_stats());
    let per_body = |bytes: u64, bodies: u64| bytes as f64 / bodies.max(1) as f64;
    let bodies_up = up2.state_updates_sent - up.state_updates_sent;
    let bodies_relayed = relay2.relay_bodies_sent - relay.relay_bodies_sent;
    // Heartbeats: about one a second for each body.
    assert!(bodies_up >= 7 * n, "{bodies_up} states sent");
    assert!(bodies_relayed >= 7 * n, "{bodies_relayed} states relayed");
    let up_bytes = per_body(up2.state_update_bytes - up.state_update_bytes, bodies_up);
    let relay_bytes = per_body(
        relay2.relay_bytes_sent - relay.relay_bytes_sent,
        bodies_relayed,
    );
    (up_bytes, relay_bytes, s)
}

/// Rule 20 across Apps: on a resting scene over a lossy link, deltas cut the bytes per body
/// both ways to less than half (a heartbeat of a body at rest is its id and a flag byte or
/// two), no delta is ever refused between honest peers, and the resting copies agree within
/// 1 cm.
#[test]
fn deltas_cut_the_bytes_of_a_resting_scene_over_a_lossy_link() {
    let (up_off, relay_off, off) = resting_scene(40, false);
    assert_eq!(off.stats(0).delta_entries_sent, 0);
    assert_eq!(off.server_stats().relay_delta_entries_sent, 0);
    let (up_on, relay_on, on) = resting_scene(40, true);
    println!("bytes per body: up {up_off:.2} → {up_on:.2}, relayed {relay_off:.2} → {relay_on:.2}");
    assert!(up_off > 10.0 && relay_off > 10.0, "{up_off} {relay_off}");
    assert!(
        up_on < 0.5 * up_off,
        "up: {up_on} vs {up_off} without deltas"
    );
    assert!(
        relay_on < 0.5 * relay_off,
        "relayed: {relay_on} vs {relay_off} without deltas"
    );
    let (p0, p1, server) = (on.stats(0), on.stats(1), on.server_stats());
    assert!(p0.delta_entries_sent > p0.state_updates_sent / 2, "{p0:?}");
    assert!(server.relay_delta_entries_sent > server.relay_bodies_sent / 2);
    // Participant 1 owns nothing and still acknowledges.
    assert!(p1.ack_batches_sent > 0);
    assert_eq!(p1.state_updates_sent, 0);
    for stats in [p0, p1] {
        assert_eq!((stats.deltas_rejected, stats.acks_rejected), (0, 0));
    }
    assert_eq!((server.deltas_rejected, server.acks_rejected), (0, 0));
    let traffic = *on.app(0).world().resource::<StateTraffic>();
    assert_eq!(traffic.delta_entries_total, p0.delta_entries_sent);
    assert!(traffic.delta_share > 0.5, "{}", traffic.delta_share);
    for id in 1..=40 {
        assert!(on.spread(id) <= 0.01, "body {id}: {} m", on.spread(id));
    }
}

/// Rule 20, entity server side: acknowledgements of relay batches never sent or not sent yet,
/// a delta against a baseline the server does not have and an offset out of range are counted
/// and change no state; the honest relay flows on.
#[test]
fn hostile_acknowledgements_and_baselines_are_counted_by_the_server() {
    let bodies = resting(5);
    let setup = Setup {
        seed: 41,
        ..Setup::default()
    };
    let mut s = Session::with_setup(3, &bodies, &setup);
    for (i, id) in [(0, 1), (0, 2), (2, 5)] {
        s.command(i, id, |e| {
            e.grab();
        });
    }
    let owned = s.run_until(steps(3_000), |s| {
        s.server_owner(2).is_some() && s.server_owner(5).is_some()
    });
    assert!(owned.is_some());
    s.run(steps(500));
    let before = s.server_stats();
    let last = |s: &Session| {
        s.server()
            .world()
            .resource::<EntityServer>()
            .last_state(BodyId(5))
            .expect("a state")
    };
    let body5 = last(&s);
    let batch = |wire: WireBatch| {
        ClientMessage::Ownership(OwnershipClientMessage::StateBatch(
            wire.encode().expect("encodes"),
        ))
    };
    let ack_only = |seq: u32, newest: u32| WireBatch {
        seq: 10_000 + seq,
        ack: Some(BatchAck { newest, earlier: 0 }),
        ..WireBatch::default()
    };
    // From the future, and before the first relay batch.
    s.send_raw(2, batch(ack_only(1, 1_000_000)));
    s.send_raw(2, batch(ack_only(2, 0)));
    // Its own body 5, 2 m up, against a batch the server never got from it.
    let up = Delta {
        ago: 1_000,
        position: [0, 2_000, 0],
        rotation: RotationDelta::Components([0; 3]),
        linear: [0; 3],
        angular: [0; 3],
    };
    let delta = |ago| WireBatch {
        seq: 20_000,
        entries: vec![(BodyId(5), Entry::Delta(Delta { ago, ..up }))],
        ..WireBatch::default()
    };
    s.send_raw(2, batch(delta(1_000)));
    s.send_raw(2, batch(delta(MAX_BASELINE_AGO + 1)));
    s.run(steps(200));
    let after = s.server_stats();
    assert_eq!(after.acks_rejected - before.acks_rejected, 2, "{after:?}");
    assert_eq!(after.deltas_rejected - before.deltas_rejected, 1);
    assert_eq!(
        after.state_batches_invalid - before.state_batches_invalid,
        1
    );
    // Body 5 is where its owner has it, not 2 m up.
    assert!(last(&s).position.distance(body5.position) < 0.01);
    let traffic = *s.server().world().resource::<StateTraffic>();
    assert!(traffic.acks_rejected_total >= 2 && traffic.deltas_rejected_total >= 1);
    // Honest traffic flows on: the next heartbeats are relayed as deltas.
    s.run(steps(1_500));
    for id in [1, 2, 5] {
        assert!(s.spread(id) <= 0.01, "body {id}: {}", s.spread(id));
    }
    assert!(s.server_stats().relay_delta_entries_sent > 0);
}

/// Rule 20, participant side, from a raw server: a delta against a received state is applied
/// bit for bit; one against a batch that never arrived, and an acknowledgement of a batch the
/// participant never sent, are counted and change nothing.
#[test]
fn a_participant_refuses_deltas_without_baselines_and_hostile_acknowledgements() {
    let network = MemoryNetwork::perfect(3);
    let (mut server, mut p) = super::harness::raw_server_and_participant(&network);
    let at = |x: f32| simsync_ownership::BodyState {
        position: Vec3::new(x, 0.0, 0.0),
        ..Default::default()
    };
    let three = QuantizedState::new(&at(3.0));
    let msg = |wire: WireBatch| {
        ServerMessage::Ownership(OwnershipServerMessage::StateBatch(
            wire.encode().expect("encodes"),
        ))
    };
    let absolute = StateBatch {
        seq: 5,
        focus: None,
        bodies: vec![(BodyId(1), at(3.0))],
    }
    .to_wire(None, |_| None)
    .expect("lays out");
    // 1 m further, against batch 5 (received), then against batch 4 (never sent).
    let delta = |seq: u32, ago: u32| WireBatch {
        seq,
        entries: vec![(
            BodyId(1),
            Entry::Delta(Delta::between(&three, &QuantizedState::new(&at(4.0)), ago)),
        )],
        ..WireBatch::default()
    };
    let hostile_ack = WireBatch {
        seq: 9,
        ack: Some(BatchAck {
            newest: 99,
            earlier: 0,
        }),
        ..WireBatch::default()
    };
    let messages = [
        msg(absolute),
        msg(delta(6, 1)),
        msg(delta(7, 3)),
        msg(hostile_ack),
    ];
    super::harness::send_raw(&mut server, &mut p, &messages);
    let stats = *p.world().resource::<OwnershipClient>().stats();
    assert_eq!(stats.relays_applied, 2, "{stats:?}");
    assert_eq!(stats.deltas_rejected, 1);
    assert_eq!(stats.acks_rejected, 1);
    assert_eq!(stats.state_batches_invalid, 0);
    let e = Session::entity(&p, 1);
    // Exactly what an absolute entry of 4 m gives: 4,000 × 0.001 in f32.
    let x = p.world().get::<Transform>(e).unwrap().translation.x;
    assert_eq!(x, 4_000.0 * 0.001);
    let traffic = *p.world().resource::<StateTraffic>();
    assert_eq!(traffic.deltas_rejected_total, 1);
}
