//! Refusals a game can see, the exclusive-grab option and orphans, on the pure core: a bid the
//! participant will not send is refused on the spot (ownership rule 6), an equal GRAB against a
//! holder with `exclusive_grab` on (rule 3's option), and a moving body whose owner left is
//! stopped only when nobody takes it over (rule 5).

use crate::common::*;
use simsync_ownership::{
    Action, BodyObservation, OwnershipArbiter, OwnershipConfig, ParticipantOwnership, Priority,
    RefusalReason,
};

fn exclusive() -> OwnershipConfig {
    OwnershipConfig {
        exclusive_grab: true,
        ..OwnershipConfig::default()
    }
}

fn poked(body: u64) -> BodyObservation {
    BodyObservation {
        script_edited: true,
        ..BodyObservation::moving(b(body))
    }
}

fn held(body: u64) -> BodyObservation {
    BodyObservation {
        held: true,
        ..BodyObservation::moving(b(body))
    }
}

#[test]
fn a_poke_below_the_owners_priority_is_refused_on_the_spot_once_per_resend_interval() {
    let mut c = participant(1);
    c.on_owner_changed(b(0), Some(p(2)), Priority::GRAB);
    let refused = Action::RefuseLocally {
        body: b(0),
        priority: Priority::POKE,
        reason: RefusalReason::LowerPriority,
    };
    assert_eq!(c.tick(ms(0), [poked(0)]), [refused]);
    assert_eq!(c.pending(b(0)), None, "nothing sent");
    // A second poke within 200 ms is not reported again; after it, it is.
    assert!(c.tick(ms(199), [poked(0)]).is_empty());
    assert_eq!(c.tick(ms(200), [poked(0)]), [refused]);
    // A poke against a lower owner is sent, not refused.
    c.on_owner_changed(b(0), Some(p(2)), Priority::RECRUIT);
    assert_eq!(
        c.tick(ms(1_000), [poked(0)]),
        [Action::SendBid {
            body: b(0),
            priority: Priority::POKE
        }]
    );
}

#[test]
fn an_equal_bid_that_may_win_after_the_lockout_is_sent_not_refused() {
    let mut c = participant(1);
    c.on_owner_changed(b(0), Some(p(2)), Priority::POKE);
    assert_eq!(
        c.tick(ms(0), [poked(0)]),
        [Action::SendBid {
            body: b(0),
            priority: Priority::POKE
        }]
    );
}

#[test]
fn exclusive_grab_refuses_an_equal_grab_while_the_holder_owns_the_body() {
    let mut a = OwnershipArbiter::new(exclusive()).unwrap();
    a.register_body(b(0), simsync_ownership::BodyKind::Dynamic)
        .unwrap();
    a.bid(p(1), b(0), Priority::GRAB, ms(0)).unwrap();
    for at in [100, 1_000, 4_000] {
        a.owner_update(p(1), b(0), ms(at)).unwrap();
        let r = a.bid(p(2), b(0), Priority::GRAB, ms(at)).unwrap_err();
        assert_eq!(r.reason, RefusalReason::HeldExclusively, "at {at} ms");
        assert_eq!((r.owner, r.priority), (Some(p(1)), Priority::GRAB));
    }
    assert_eq!(a.owner(b(0)), Some((p(1), Priority::GRAB)));
    assert_eq!(
        a.refusals_by_reason().get(RefusalReason::HeldExclusively),
        3
    );
    // A lower bid is still `LowerPriority`; the holder raising or keeping its own is granted.
    let r = a.bid(p(2), b(0), Priority::POKE, ms(4_000)).unwrap_err();
    assert_eq!(r.reason, RefusalReason::LowerPriority);
    assert!(a.bid(p(1), b(0), Priority::GRAB, ms(4_000)).is_ok());
    // The holder goes silent: rule 5 clears it, and the next GRAB wins.
    assert_eq!(a.expire(ms(9_000)).len(), 1);
    let g = a.bid(p(2), b(0), Priority::GRAB, ms(9_000)).unwrap();
    assert_eq!((g.owner, g.priority), (p(2), Priority::GRAB));
}

#[test]
fn without_exclusive_grab_an_equal_grab_takes_a_held_body_after_the_lockout() {
    let mut a = arbiter_with(1);
    a.bid(p(1), b(0), Priority::GRAB, ms(0)).unwrap();
    a.owner_update(p(1), b(0), ms(150)).unwrap();
    let r = a.bid(p(2), b(0), Priority::GRAB, ms(150)).unwrap_err();
    assert_eq!(r.reason, RefusalReason::LockedOutEqualPriority);
    a.owner_update(p(1), b(0), ms(200)).unwrap();
    let g = a.bid(p(2), b(0), Priority::GRAB, ms(200)).unwrap();
    assert_eq!(g.owner, p(2));
}

#[test]
fn with_exclusive_grab_a_participant_refuses_its_own_equal_grab_on_the_spot() {
    let mut c = ParticipantOwnership::new(p(2), exclusive()).unwrap();
    c.on_owner_changed(b(0), Some(p(1)), Priority::GRAB);
    assert_eq!(
        c.tick(ms(1_000), [held(0)]),
        [Action::RefuseLocally {
            body: b(0),
            priority: Priority::GRAB,
            reason: RefusalReason::HeldExclusively
        }]
    );
    // Once the holder lets go, the grab is sent.
    c.on_owner_changed(b(0), None, Priority::NONE);
    assert_eq!(
        c.tick(ms(1_300), [held(0)]),
        [Action::SendBid {
            body: b(0),
            priority: Priority::GRAB
        }]
    );
}

#[test]
fn an_orphan_nobody_takes_over_is_stopped_after_orphan_stop_delay_once() {
    // Uninterested: it never volunteers (rule 7), so nobody here takes the body over.
    let mut c = participant(1);
    c.on_owner_changed(b(0), Some(p(2)), Priority::POKE);
    c.on_owner_changed(b(0), None, Priority::NONE);
    let moving = BodyObservation {
        interested: false,
        ..BodyObservation::moving(b(0))
    };
    assert!(c.tick(ms(0), [moving]).is_empty());
    assert!(c.tick(ms(1_999), [moving]).is_empty(), "still flying");
    assert_eq!(
        c.tick(ms(2_000), [moving]),
        [Action::ZeroVelocity { body: b(0) }]
    );
    assert!(
        c.tick(ms(2_016), [BodyObservation::at_rest(b(0))])
            .is_empty()
    );
}

#[test]
fn an_orphan_taken_over_in_time_is_never_stopped() {
    let mut s = Session::new(2, 1);
    s.clients[0].on_owner_changed(b(0), None, Priority::NONE);
    s.clients[1].on_owner_changed(b(0), None, Priority::NONE);
    let moving = BodyObservation::moving(b(0));
    let mut zeroed = 0;
    for step in 0..200u64 {
        let now = ms(step * 16);
        for c in 0..2u16 {
            let actions = s.clients[usize::from(c)].tick(now, [moving]);
            zeroed += actions
                .iter()
                .filter(|a| matches!(a, Action::ZeroVelocity { .. }))
                .count();
            s.deliver(c, &actions, now);
        }
    }
    assert_eq!(zeroed, 0);
    assert!(s.server.owner(b(0)).is_some());
}

#[test]
fn an_orphan_with_our_bid_in_flight_is_not_stopped() {
    let mut c = participant(1);
    let moving = BodyObservation::moving(b(0));
    assert!(c.tick(ms(0), [moving]).is_empty());
    // The volunteer bid goes out at 0.5 s and is never answered (lost, resent every 200 ms).
    for step in 1..=250u64 {
        let actions = c.tick(ms(step * 16), [moving]);
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, Action::ZeroVelocity { .. })),
            "at {} ms: {actions:?}",
            step * 16
        );
    }
}
