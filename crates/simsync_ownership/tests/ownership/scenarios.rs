//! Behaviours beyond one rule: races, edge times, refusals and their counters.

use crate::common::*;
use bevy_rapier3d::prelude::RigidBody;
use simsync_ownership::{
    Action, BodyKind, BodyObservation, ExpiryCause, OwnershipArbiter, OwnershipConfig,
    OwnershipError, ParticipantOwnership, Priority, RefusalReason,
};

#[test]
fn three_volunteers_in_one_tick_make_exactly_one_recruit_owner() {
    let mut s = Session::new(3, 1);
    let moving = BodyObservation::moving(b(0));
    for c in &mut s.clients {
        assert!(c.tick(ms(0), [moving]).is_empty());
    }
    // The same tick on every client, before any answer arrives.
    let bids: Vec<Vec<Action>> = s
        .clients
        .iter_mut()
        .map(|c| c.tick(ms(500), [moving]))
        .collect();
    for bid in &bids {
        assert_eq!(
            bid,
            &[Action::SendBid {
                body: b(0),
                priority: Priority::VOLUNTEER
            }]
        );
    }
    for (i, bid) in bids.iter().enumerate() {
        s.deliver(i as u16, bid, ms(505));
    }
    assert_eq!(s.server.owner(b(0)), Some((p(0), Priority::RECRUIT)));
    assert_eq!(s.server.stats().grants, 1);
    assert_eq!(s.server.stats().ownership_changes, 1);
    assert_eq!(
        s.server
            .refusals_by_reason()
            .get(RefusalReason::LowerPriority),
        2
    );
    for c in &s.clients {
        assert_eq!(c.owner(b(0)), Some((p(0), Priority::RECRUIT)));
    }
    // Nobody else bids, within the lockout or after it.
    for t in [600, 700, 1_000, 3_000] {
        for i in 0..3u16 {
            let out = s.clients[usize::from(i)].tick(ms(t), [moving]);
            assert!(out.is_empty(), "client {i} at {t} ms: {out:?}");
        }
        s.server.owner_update(p(0), b(0), ms(t)).unwrap();
    }
    assert_eq!(s.server.owner(b(0)), Some((p(0), Priority::RECRUIT)));
    assert_eq!(s.server.stats().ownership_changes, 1);
}

#[test]
fn grab_beats_poke() {
    let mut a = arbiter_with(1);
    a.bid(p(1), b(0), Priority::POKE, ms(0)).unwrap();
    let grant = a.bid(p(2), b(0), Priority::GRAB, ms(1)).unwrap();
    assert_eq!((grant.owner, grant.priority), (p(2), Priority::GRAB));
    let r = a.bid(p(1), b(0), Priority::POKE, ms(10_000)).unwrap_err();
    assert_eq!(r.reason, RefusalReason::LowerPriority);
    assert_eq!((r.owner, r.priority), (Some(p(2)), Priority::GRAB));
}

#[test]
fn equal_priority_refused_at_100ms_granted_at_300ms() {
    let mut a = arbiter_with(1);
    a.bid(p(1), b(0), Priority::POKE, ms(1_000)).unwrap();
    let r = a.bid(p(2), b(0), Priority::POKE, ms(1_100)).unwrap_err();
    assert_eq!(r.reason, RefusalReason::LockedOutEqualPriority);
    assert_eq!(a.owner(b(0)), Some((p(1), Priority::POKE)));
    let g = a.bid(p(2), b(0), Priority::POKE, ms(1_300)).unwrap();
    assert_eq!((g.owner, g.priority), (p(2), Priority::POKE));
    assert_eq!(
        a.refusals_by_reason()
            .get(RefusalReason::LockedOutEqualPriority),
        1
    );
}

#[test]
fn silent_owner_cleared_at_5s_not_4_9s_and_nobody_is_told_to_zero() {
    let mut s = Session::new(2, 1);
    let bid = s.clients[0].tick(
        ms(0),
        [BodyObservation {
            held: true,
            ..BodyObservation::moving(b(0))
        }],
    );
    s.deliver(0, &bid, ms(0));
    s.expire(ms(4_900));
    assert_eq!(s.server.owner(b(0)), Some((p(0), Priority::GRAB)));
    s.expire(ms(5_000));
    assert_eq!(s.server.owner(b(0)), None);
    assert!(
        s.zeroed.is_empty(),
        "an orphan keeps moving: {:?}",
        s.zeroed
    );
    assert_eq!(s.clients[1].owner(b(0)), None);
    assert_eq!(s.server.stats().expiries, 1);
}

#[test]
fn release_or_priority_change_from_non_owner_refused_and_counted() {
    let mut a = arbiter_with(2);
    a.bid(p(1), b(0), Priority::POKE, ms(0)).unwrap();
    assert_eq!(
        a.release(p(2), b(0), ms(1)).unwrap_err().reason,
        RefusalReason::NotOwner
    );
    assert_eq!(
        a.release(p(2), b(1), ms(1)).unwrap_err().reason,
        RefusalReason::NotOwner
    );
    assert_eq!(
        a.change_priority(p(2), b(0), Priority::GRAB, ms(1))
            .unwrap_err()
            .reason,
        RefusalReason::NotOwner
    );
    assert_eq!(
        a.owner_update(p(2), b(0), ms(1)).unwrap_err().reason,
        RefusalReason::NotOwner
    );
    assert_eq!(a.refusals_by_reason().get(RefusalReason::NotOwner), 4);
    assert_eq!(a.refusals_by_reason().total(), 4);
    assert_eq!(a.owner(b(0)), Some((p(1), Priority::POKE)));
    // The owner may not go below YIELD by a priority change, nor above the maximum.
    let r = a
        .change_priority(p(1), b(0), Priority::NONE, ms(2))
        .unwrap_err();
    assert_eq!(r.reason, RefusalReason::PriorityTooLow);
    let r = a
        .change_priority(p(1), b(0), Priority(200), ms(2))
        .unwrap_err();
    assert_eq!(r.reason, RefusalReason::PriorityTooHigh);
}

#[test]
fn bids_above_the_participant_maximum_refused() {
    let config = OwnershipConfig {
        max_bid_priority: Priority::POKE,
        ..OwnershipConfig::default()
    };
    let mut a = OwnershipArbiter::new(config.clone()).unwrap();
    a.register_body(b(0), BodyKind::Dynamic).unwrap();
    let r = a.bid(p(1), b(0), Priority::GRAB, ms(0)).unwrap_err();
    assert_eq!(r.reason, RefusalReason::PriorityTooHigh);
    let r = OwnershipArbiter::default().bid(p(1), b(0), Priority(255), ms(0));
    assert_eq!(r.unwrap_err().reason, RefusalReason::UnknownBody);
    let mut d = arbiter_with(1);
    assert_eq!(
        d.bid(p(1), b(0), Priority(129), ms(0)).unwrap_err().reason,
        RefusalReason::PriorityTooHigh
    );
    assert_eq!(a.owner(b(0)), None);
    assert_eq!(
        a.refusals_by_reason().get(RefusalReason::PriorityTooHigh),
        1
    );
    // Below VOLUNTEER is no bid either.
    assert_eq!(
        a.bid(p(1), b(0), Priority::YIELD, ms(0))
            .unwrap_err()
            .reason,
        RefusalReason::PriorityTooLow
    );

    // A participant under this config clamps its grab to the maximum, so it is not refused.
    let mut c = ParticipantOwnership::new(p(1), config).unwrap();
    let out = c.tick(
        ms(0),
        [BodyObservation {
            held: true,
            ..BodyObservation::moving(b(0))
        }],
    );
    assert_eq!(
        out,
        [Action::SendBid {
            body: b(0),
            priority: Priority::POKE
        }]
    );
    assert!(a.bid(p(1), b(0), Priority::POKE, ms(0)).is_ok());
}

#[test]
fn unknown_body_refused_everywhere() {
    let mut a = arbiter_with(1);
    let unknown = b(42);
    assert_eq!(
        a.bid(p(1), unknown, Priority::POKE, ms(0))
            .unwrap_err()
            .reason,
        RefusalReason::UnknownBody
    );
    assert_eq!(
        a.release(p(1), unknown, ms(0)).unwrap_err().reason,
        RefusalReason::UnknownBody
    );
    assert_eq!(
        a.change_priority(p(1), unknown, Priority::POKE, ms(0))
            .unwrap_err()
            .reason,
        RefusalReason::UnknownBody
    );
    assert_eq!(
        a.owner_update(p(1), unknown, ms(0)).unwrap_err().reason,
        RefusalReason::UnknownBody
    );
    assert_eq!(a.refusals_by_reason().get(RefusalReason::UnknownBody), 4);
    assert_eq!(
        a.set_locked(unknown, true),
        Err(OwnershipError::UnknownBody { body: unknown })
    );
    assert_eq!(
        a.register_body(b(0), BodyKind::Dynamic),
        Err(OwnershipError::BodyAlreadyRegistered { body: b(0) })
    );
}

#[test]
fn static_and_kinematic_bodies_are_never_ownable() {
    let mut a = OwnershipArbiter::default();
    let kinds = [
        RigidBody::Fixed,
        RigidBody::KinematicPositionBased,
        RigidBody::KinematicVelocityBased,
    ];
    for (i, rb) in kinds.into_iter().enumerate() {
        let kind = BodyKind::from(rb);
        assert!(!kind.is_ownable());
        a.register_body(b(i as u64), kind).unwrap();
        for priority in [Priority::VOLUNTEER, Priority::POKE, Priority::GRAB] {
            let r = a.bid(p(1), b(i as u64), priority, ms(10_000)).unwrap_err();
            assert_eq!(r.reason, RefusalReason::NotOwnable);
        }
        assert_eq!(a.owner(b(i as u64)), None);
    }
    assert_eq!(a.refusals_by_reason().get(RefusalReason::NotOwnable), 9);
    assert_eq!(BodyKind::from(RigidBody::Dynamic), BodyKind::Dynamic);
}

#[test]
fn disconnect_clears_everything_the_participant_owned() {
    let mut a = arbiter_with(3);
    a.bid(p(1), b(0), Priority::POKE, ms(0)).unwrap();
    a.bid(p(2), b(1), Priority::POKE, ms(0)).unwrap();
    a.bid(p(1), b(2), Priority::GRAB, ms(0)).unwrap();
    let cleared = a.disconnect(p(1), ms(100));
    assert_eq!(
        cleared.iter().map(|e| e.body).collect::<Vec<_>>(),
        [b(0), b(2)]
    );
    assert!(
        cleared
            .iter()
            .all(|e| e.cause == ExpiryCause::Disconnected && e.previous_owner == p(1))
    );
    assert_eq!(a.owner(b(0)), None);
    assert_eq!(a.owner(b(1)), Some((p(2), Priority::POKE)));
    assert_eq!(a.stats().disconnect_clears, 2);
    assert_eq!(a.stats().ownership_changes, 5);
}

#[test]
fn unregister_keeps_the_other_records_reachable() {
    let mut a = arbiter_with(3);
    a.bid(p(1), b(2), Priority::POKE, ms(0)).unwrap();
    let removed = a.unregister_body(b(0)).unwrap();
    assert_eq!(removed.body, b(0));
    assert_eq!(a.len(), 2);
    assert_eq!(a.owner(b(2)), Some((p(1), Priority::POKE)));
    assert!(a.bid(p(1), b(1), Priority::POKE, ms(0)).is_ok());
    assert_eq!(
        a.bid(p(1), b(0), Priority::POKE, ms(0)).unwrap_err().reason,
        RefusalReason::UnknownBody
    );
}

#[test]
fn refused_bid_backs_off_and_learns_the_owner() {
    // A client that missed an owner broadcast bids, learns the owner from the refusal and
    // stops bidding where it cannot win.
    let mut s = Session::new(2, 1);
    s.server.bid(p(1), b(0), Priority::GRAB, ms(0)).unwrap();
    let touched = BodyObservation {
        touched_by_avatar: true,
        ..BodyObservation::moving(b(0))
    };
    let bid = s.clients[0].tick(ms(10), [touched]);
    assert_eq!(
        bid,
        [Action::SendBid {
            body: b(0),
            priority: Priority::POKE
        }]
    );
    s.deliver(0, &bid, ms(10));
    assert_eq!(s.clients[0].owner(b(0)), Some((p(1), Priority::GRAB)));
    assert_eq!(s.clients[0].pending(b(0)), None);
    // Backing off after the server's refusal, then refused on the spot (not sent).
    assert!(s.clients[0].tick(ms(20), [touched]).is_empty());
    assert_eq!(
        s.clients[0].tick(ms(500), [touched]),
        [Action::RefuseLocally {
            body: b(0),
            priority: Priority::POKE,
            reason: RefusalReason::LowerPriority
        }]
    );

    // Equal priority inside the lockout: refused, retried once the resend interval passed.
    let held = BodyObservation {
        held: true,
        ..BodyObservation::moving(b(0))
    };
    let mut s = Session::new(2, 1);
    s.server.bid(p(1), b(0), Priority::GRAB, ms(1_000)).unwrap();
    s.clients[0].on_owner_changed(b(0), Some(p(1)), Priority::GRAB);
    let bid = s.clients[0].tick(ms(1_050), [held]);
    s.deliver(0, &bid, ms(1_050));
    assert_eq!(s.server.owner(b(0)), Some((p(1), Priority::GRAB)));
    assert!(
        s.clients[0].tick(ms(1_100), [held]).is_empty(),
        "backing off"
    );
    let retry = s.clients[0].tick(ms(1_250), [held]);
    assert_eq!(
        retry,
        [Action::SendBid {
            body: b(0),
            priority: Priority::GRAB
        }]
    );
    s.deliver(0, &retry, ms(1_250));
    assert_eq!(s.server.owner(b(0)), Some((p(0), Priority::GRAB)));
}

#[test]
fn owner_moving_again_stops_resending_its_release() {
    let mut c = participant(0);
    c.created_moving(b(0), Priority::POKE);
    let out = c.tick(ms(0), [BodyObservation::at_rest(b(0))]);
    assert_eq!(
        out,
        [
            Action::SendRelease { body: b(0) },
            Action::ZeroVelocity { body: b(0) }
        ]
    );
    assert!(c.tick(ms(300), [BodyObservation::moving(b(0))]).is_empty());
    assert_eq!(c.pending(b(0)), None);
    assert_eq!(c.owner(b(0)), Some((p(0), Priority::POKE)));
}

#[test]
fn late_resend_of_a_weaker_bid_does_not_lower_the_owner() {
    let mut a = arbiter_with(1);
    a.bid(p(1), b(0), Priority::VOLUNTEER, ms(0)).unwrap();
    a.change_priority(p(1), b(0), Priority::GRAB, ms(10))
        .unwrap();
    // The VOLUNTEER bid's resend arrives late.
    let g = a.bid(p(1), b(0), Priority::VOLUNTEER, ms(20)).unwrap();
    assert_eq!(
        (g.owner, g.priority, g.owner_changed()),
        (p(1), Priority::GRAB, false)
    );
    assert_eq!(a.owner(b(0)), Some((p(1), Priority::GRAB)));
    // Lowering is explicit.
    a.change_priority(p(1), b(0), Priority::VOLUNTEER, ms(30))
        .unwrap();
    assert_eq!(a.owner(b(0)), Some((p(1), Priority::RECRUIT)));
    assert_eq!(a.stats().ownership_changes, 1);
}
