//! The ownership rules as whole sessions see them.

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_ownership::prelude::*;

use super::harness::{Body, DT, Session, steps};

/// Body 1 moving at 1 m/s on all three participants from the same tick: after the volunteer
/// delay (0.5 s) all three bid VOLUNTEER in the same tick; exactly one wins, at RECRUIT (rule
/// 7), the two others are refused (their VOLUNTEER is below RECRUIT), and ownership does not
/// change within the lockout — nor after it, since nobody bids higher.
#[test]
fn three_volunteers_in_one_tick_give_one_owner_at_recruit() {
    let mut s = Session::perfect(3, &[Body::floating(1, Vec3::ZERO)]);
    for i in 0..3 {
        s.set_velocity(i, 1, Vec3::X);
    }
    let mut bids_at = Vec::new();
    let first = s
        .run_until(steps(1_000), |s| {
            s.server_stats().bids_received > 0 && s.server_owner(1).is_some()
        })
        .expect("somebody volunteered");
    bids_at.push((s.steps(), s.server_stats().bids_received));
    // All three bids arrived in the one update that granted the first.
    assert_eq!(s.server_stats().bids_received, 3, "bids: {bids_at:?}");
    // The wait was the volunteer delay (0.5 s = 32 steps), give or take a step each way.
    assert!(
        (31..=35).contains(&first),
        "volunteered after {first} steps"
    );
    let (owner, priority) = s.server_owner(1).unwrap();
    assert_eq!(priority, Priority::RECRUIT);
    assert_eq!(s.ownership_changes(), 1);
    assert_eq!(
        s.server_stats()
            .bids_refused
            .get(RefusalReason::LowerPriority),
        2
    );
    // Through the lockout and well past it: no change, and everyone agrees.
    s.run(steps(200));
    assert_eq!(s.server_owner(1), Some((owner, Priority::RECRUIT)));
    assert_eq!(s.ownership_changes(), 1);
    s.run(steps(800));
    assert_eq!(s.ownership_changes(), 1);
    assert!(s.owners_agree(1));
    // The two losers heard why.
    let refused: Vec<RefusalReason> = (0..3)
        .flat_map(|i| {
            s.log(i)
                .refused
                .iter()
                .map(|r| r.reason)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(refused, vec![RefusalReason::LowerPriority; 2]);
}

/// GRAB (rule 10) beats POKE (rules 8, 9): a grab takes a body owned at POKE; a poke sent in
/// the same tick as a grab, processed after it, is refused as lower.
#[test]
fn grab_beats_poke() {
    let mut s = Session::perfect(3, &[Body::floating(1, Vec3::ZERO)]);
    // Participant 3 pokes: owner at POKE.
    s.command(2, 1, |e| {
        e.poke();
    });
    s.set_velocity(2, 1, Vec3::new(0.3, 0.0, 0.0));
    s.run(3);
    assert_eq!(s.server_owner(1), Some((s.id_of(2), Priority::POKE)));
    // Participant 1 grabs and participant 2 pokes in the same tick; the server handles
    // participant 1's bid first (connection order): GRAB is granted, the POKE refused.
    s.command(0, 1, |e| {
        e.grab();
    });
    s.command(1, 1, |e| {
        e.poke();
    });
    s.run(3);
    assert_eq!(s.server_owner(1), Some((s.id_of(0), Priority::GRAB)));
    assert!(s.owners_agree(1));
    let refusals: Vec<RefusalReason> = s.log(1).refused.iter().map(|r| r.reason).collect();
    assert_eq!(refusals, vec![RefusalReason::LowerPriority]);
    // The holder keeps it: a poke from anyone else is not even sent (it cannot win).
    let sent = s.stats(2).bids_sent;
    s.command(2, 1, |e| {
        e.poke();
    });
    s.run(steps(500));
    assert_eq!(s.stats(2).bids_sent, sent);
    assert_eq!(s.server_owner(1), Some((s.id_of(0), Priority::GRAB)));
    // Released from the hand, it stays at GRAB until it comes to rest (rule 12).
    s.command(0, 1, |e| {
        e.release_grab();
    });
    s.run(2);
    assert_eq!(s.server_owner(1), Some((s.id_of(0), Priority::GRAB)));
}

/// Rule 3: a bid at the owner's priority is refused within 200 ms of the last ownership change
/// (here ~100 ms after) and granted after it (here ~300 ms after).
#[test]
fn equal_priority_bid_is_locked_out_for_200_ms() {
    let mut s = Session::perfect(3, &[Body::floating(1, Vec3::ZERO)]);
    s.command(0, 1, |e| {
        e.poke();
    });
    s.set_velocity(0, 1, Vec3::new(0.2, 0.0, 0.0));
    s.run_until(10, |s| s.server_owner(1).is_some())
        .expect("granted");
    let changed_at = s.server_now();
    assert_eq!(s.server_owner(1), Some((s.id_of(0), Priority::POKE)));

    // Poked so that the bid reaches the server 6 steps (93.75 ms) after the change.
    s.run(4);
    s.command(1, 1, |e| {
        e.poke();
    });
    s.run_until(5, |s| s.server_stats().bids_received == 2)
        .expect("second bid");
    let early = s.server_now() - changed_at;
    assert!(
        early >= DT * 5 && early < std::time::Duration::from_millis(120),
        "{early:?}"
    );
    assert_eq!(
        s.server_stats()
            .bids_refused
            .get(RefusalReason::LockedOutEqualPriority),
        1
    );
    s.run(1);
    assert_eq!(
        s.log(1).refused.last().map(|r| r.reason),
        Some(RefusalReason::LockedOutEqualPriority)
    );
    assert_eq!(s.server_owner(1), Some((s.id_of(0), Priority::POKE)));

    // Poked again so that the bid arrives ~300 ms after the change (past the lockout and past
    // the participant's own back-off after the refusal).
    while s.server_now() - changed_at < std::time::Duration::from_millis(295) {
        s.step();
    }
    s.command(1, 1, |e| {
        e.poke();
    });
    s.run_until(5, |s| s.server_stats().bids_received == 3)
        .expect("third bid");
    let late = s.server_now() - changed_at;
    assert!(
        late >= std::time::Duration::from_millis(290)
            && late < std::time::Duration::from_millis(340),
        "{late:?}"
    );
    assert_eq!(s.server_owner(1), Some((s.id_of(1), Priority::POKE)));
    s.run(2);
    assert!(s.owners_agree(1));
}

// Rule 5 (silent and disconnected owners) is in `orphans`.

/// Rule 6 under 20 % loss (both ways, 40 ± 5 ms): unanswered bids are resent every 200 ms and
/// ownership converges — the server and every participant agree on every body.
#[test]
fn bids_are_resent_under_loss_and_ownership_converges() {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(40, 5)
        .with_loss(20.0);
    let bodies: Vec<Body> = (1..=6)
        .map(|i| Body::floating(i, Vec3::new(i as f32 * 2.0, 0.0, 0.0)))
        .collect();
    let mut s = Session::conditioned(0x10_55, link, 3, &bodies);
    // Rounds of pokes and grabs on every body by rotating participants.
    for round in 0..6u64 {
        for body in 1..=6u64 {
            let who = ((body + round) % 3) as usize;
            if (body + round) % 4 == 0 {
                s.command(who, body, |e| {
                    e.grab();
                });
            } else {
                s.command(who, body, |e| {
                    e.release_grab();
                    e.poke();
                });
            }
            s.set_velocity(who, body, Vec3::new(0.0, 0.1 * (round as f32 + 1.0), 0.0));
        }
        s.run(steps(700));
    }
    s.run(steps(3_000));
    let resends: u64 = (0..3).map(|i| s.stats(i).bid_resends).sum();
    assert!(resends > 0, "no bid was resent");
    for body in 1..=6 {
        assert!(s.server_owner(body).is_some(), "body {body} unowned");
        assert!(s.owners_agree(body), "body {body}: owners disagree");
    }
    let lost = s
        .network()
        .link_stats(1, simsync_net::Direction::ToServer)
        .unwrap();
    assert!(lost.dropped > 0, "{lost:?}");
}

/// After a run — pokes, a grab carried around and let go, bodies falling and knocking each
/// other over on a 40 ms / 1 % loss network — inputs stop, bodies settle, and every
/// participant's copy of every body is within 1 cm of every other's (so of the owner's).
#[test]
fn after_a_run_every_copy_is_within_1_cm() {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(40, 5)
        .with_loss(1.0);
    let mut bodies = vec![Body::ground(0, Vec3::new(0.0, -0.5, 0.0))];
    for i in 0..8u64 {
        let x = (i % 4) as f32 * 0.6 - 0.9;
        let y = 0.25 + (i / 4) as f32 * 0.5;
        bodies.push(Body::falling(i + 1, Vec3::new(x, y, 0.0)));
    }
    let mut s = Session::conditioned(0xd1f, link, 3, &bodies);
    s.run(steps(1_000));
    // Participant 1 pokes body 5 (top row) sideways, participant 2 pokes body 2.
    s.command(0, 5, |e| {
        e.poke();
    });
    s.set_velocity(0, 5, Vec3::new(2.0, 1.0, 0.0));
    s.command(1, 2, |e| {
        e.poke();
    });
    s.set_velocity(1, 2, Vec3::new(-1.5, 2.0, 0.5));
    s.run(steps(500));
    // Participant 3 grabs body 8 and carries it for a second, then lets it fall.
    s.command(2, 8, |e| {
        e.grab();
    });
    for k in 0..64 {
        let target = Vec3::new(1.0 + k as f32 * 0.02, 1.5, 0.5);
        let (at, _) = s.body_on(2, 8);
        s.set_velocity(2, 8, (target - at) * 8.0);
        s.step();
    }
    s.command(2, 8, |e| {
        e.release_grab();
    });
    // Inputs stop: let the bodies come to rest and the relay settle.
    s.run(steps(4_000));
    // Pokes, knock-ons (rule 11), the grab, releases at rest (rule 12) — and no churn among
    // resting bodies afterwards.
    let changes = s.ownership_changes();
    assert!((6..60).contains(&changes), "{changes} ownership changes");
    s.run(steps(1_000));
    assert_eq!(
        s.ownership_changes(),
        changes,
        "bodies at rest changed hands"
    );
    let mut worst = (0, 0.0f32);
    for body in 1..=8 {
        let spread = s.spread(body);
        if spread > worst.1 {
            worst = (body, spread);
        }
    }
    assert!(worst.1 < 0.01, "body {} differs by {} m", worst.0, worst.1);
}

/// Kinematic and static bodies are never observed, so never bid for, even when poked.
#[test]
fn static_and_kinematic_bodies_are_never_bid_for() {
    let mut kinematic = Body::floating(2, Vec3::X * 3.0);
    kinematic.kind = RigidBody::KinematicVelocityBased;
    let mut s = Session::perfect(2, &[Body::ground(1, Vec3::new(0.0, -3.0, 0.0)), kinematic]);
    s.command(0, 1, |e| {
        e.poke();
    });
    s.command(1, 2, |e| {
        e.grab();
    });
    s.run(steps(1_000));
    assert_eq!(s.stats(0).bids_sent + s.stats(1).bids_sent, 0);
    assert_eq!(s.server_owner(1), None);
    assert_eq!(s.server_owner(2), None);
}
