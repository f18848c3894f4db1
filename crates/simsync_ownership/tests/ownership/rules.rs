//! One test per ownership rule (the crate's `rules` module, rules 1–14 and the physics host's
//! rule 21), time driven by hand.

use crate::common::*;
use simsync_ownership::{
    Action, BodyObservation, ExpiryCause, OwnershipArbiter, PendingRequest, Priority, RefusalReason,
};

#[test]
fn rule_01_locked_body_refuses_every_bid() {
    let mut a = arbiter_with(1);
    a.bid(p(1), b(0), Priority::POKE, ms(0)).unwrap();
    a.set_locked(b(0), true).unwrap();

    for (who, priority) in [
        (2, Priority::VOLUNTEER),
        (2, Priority::GRAB),
        (1, Priority::GRAB),
    ] {
        let refusal = a.bid(p(who), b(0), priority, ms(1_000)).unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::Locked);
        assert_eq!(refusal.owner, Some(p(1)));
    }
    assert_eq!(a.owner(b(0)), Some((p(1), Priority::POKE)));
    assert_eq!(a.refusals_by_reason().get(RefusalReason::Locked), 3);

    a.set_locked(b(0), false).unwrap();
    let grant = a.bid(p(2), b(0), Priority::GRAB, ms(1_001)).unwrap();
    assert_eq!((grant.owner, grant.priority), (p(2), Priority::GRAB));
}

#[test]
fn rule_02_higher_priority_is_granted_even_inside_the_lockout() {
    let mut a = arbiter_with(1);
    a.bid(p(1), b(0), Priority::VOLUNTEER, ms(0)).unwrap();
    let grant = a.bid(p(2), b(0), Priority::POKE, ms(10)).unwrap();
    assert_eq!(grant.previous_owner, Some(p(1)));
    assert!(grant.owner_changed());
    assert_eq!(a.owner(b(0)), Some((p(2), Priority::POKE)));
    let grant = a.bid(p(3), b(0), Priority::GRAB, ms(20)).unwrap();
    assert_eq!((grant.owner, grant.priority), (p(3), Priority::GRAB));

    let refusal = a.bid(p(1), b(0), Priority::POKE, ms(5_000)).unwrap_err();
    assert_eq!(refusal.reason, RefusalReason::LowerPriority);
    assert_eq!(a.owner(b(0)), Some((p(3), Priority::GRAB)));
    assert_eq!(a.stats().ownership_changes, 3);
}

#[test]
fn rule_03_equal_priority_locked_out_for_200ms_after_the_bodys_last_change() {
    let mut a = arbiter_with(1);
    a.bid(p(1), b(0), Priority::POKE, ms(1_000)).unwrap();

    let refusal = a.bid(p(2), b(0), Priority::POKE, ms(1_150)).unwrap_err();
    assert_eq!(refusal.reason, RefusalReason::LockedOutEqualPriority);
    assert_eq!(a.owner(b(0)), Some((p(1), Priority::POKE)));
    // The lockout runs from the body's last ownership change (t = 1000 ms), not from the refused
    // bid at 1150 ms (High Fidelity's shipped code measured it on the bid).
    let refusal = a.bid(p(3), b(0), Priority::POKE, ms(1_199)).unwrap_err();
    assert_eq!(refusal.reason, RefusalReason::LockedOutEqualPriority);
    let grant = a.bid(p(3), b(0), Priority::POKE, ms(1_200)).unwrap();
    assert_eq!((grant.owner, grant.priority), (p(3), Priority::POKE));
    assert_eq!(a.record(b(0)).unwrap().last_change, Some(ms(1_200)));

    // The owner changing its own priority is not an ownership change: no new lockout.
    a.change_priority(p(3), b(0), Priority::GRAB, ms(1_500))
        .unwrap();
    let grant = a.bid(p(1), b(0), Priority::GRAB, ms(1_500)).unwrap();
    assert_eq!((grant.owner, grant.priority), (p(1), Priority::GRAB));
}

#[test]
fn rule_04_only_the_owner_clears_or_changes_priority() {
    let mut a = arbiter_with(1);
    a.bid(p(1), b(0), Priority::POKE, ms(0)).unwrap();

    let r = a.release(p(2), b(0), ms(10)).unwrap_err();
    assert_eq!(
        (r.reason, r.owner, r.priority),
        (RefusalReason::NotOwner, Some(p(1)), Priority::POKE)
    );
    let r = a
        .change_priority(p(2), b(0), Priority::YIELD, ms(10))
        .unwrap_err();
    assert_eq!(r.reason, RefusalReason::NotOwner);
    assert_eq!(a.owner(b(0)), Some((p(1), Priority::POKE)));
    assert_eq!(a.refusals_by_reason().get(RefusalReason::NotOwner), 2);

    let g = a
        .change_priority(p(1), b(0), Priority::GRAB, ms(20))
        .unwrap();
    assert_eq!(
        (g.owner, g.priority, g.owner_changed()),
        (p(1), Priority::GRAB, false)
    );
    assert_eq!(a.owner(b(0)), Some((p(1), Priority::GRAB)));
    let released = a.release(p(1), b(0), ms(30)).unwrap();
    assert_eq!(released.previous_priority, Priority::GRAB);
    assert_eq!(a.owner(b(0)), None);
    assert_eq!(a.record(b(0)).unwrap().priority, Priority::NONE);
    assert_eq!(a.stats().priority_changes, 1);
    assert_eq!(a.stats().releases, 1);
}

#[test]
fn rule_05_silent_owner_is_cleared_after_5s() {
    let mut a = arbiter_with(2);
    a.bid(p(1), b(0), Priority::POKE, ms(0)).unwrap();
    a.bid(p(1), b(1), Priority::POKE, ms(0)).unwrap();
    a.owner_update(p(1), b(1), ms(3_000)).unwrap();

    assert!(a.expire(ms(4_999)).is_empty());
    let expired = a.expire(ms(5_000));
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].body, b(0));
    assert_eq!(expired[0].previous_owner, p(1));
    assert_eq!(expired[0].cause, ExpiryCause::Silent);
    assert_eq!(a.owner(b(0)), None);
    // The body updated at 3 s lives until 8 s.
    assert_eq!(a.owner(b(1)), Some((p(1), Priority::POKE)));
    assert_eq!(a.expire(ms(8_000)).len(), 1);
    assert_eq!(a.owner(b(1)), None);
    assert_eq!(a.stats().expiries, 2);
}

#[test]
fn rule_05_a_silent_participant_loses_every_body_at_once() {
    let mut a = arbiter_with(3);
    a.bid(p(1), b(0), Priority::POKE, ms(0)).unwrap();
    a.bid(p(1), b(1), Priority::GRAB, ms(0)).unwrap();
    a.bid(p(2), b(2), Priority::POKE, ms(0)).unwrap();
    let cleared = a.participant_silent(p(1), ms(2_000));
    assert_eq!(cleared.len(), 2);
    assert!(
        cleared
            .iter()
            .all(|e| e.cause == ExpiryCause::ParticipantSilent && e.previous_owner == p(1))
    );
    assert_eq!((a.owner(b(0)), a.owner(b(1))), (None, None));
    assert_eq!(a.owner(b(2)), Some((p(2), Priority::POKE)));
    assert_eq!(a.stats().participant_silence_clears, 2);
    assert_eq!((a.stats().expiries, a.stats().disconnect_clears), (0, 0));
    assert_eq!(a.stats().ownership_changes, 5);
    // A cleared body is an ownership change: the equal-priority lockout runs from it.
    assert!(a.bid(p(2), b(0), Priority::POKE, ms(2_100)).is_ok());
}

#[test]
fn rule_06_a_bid_is_pending_until_answered_and_resent_every_200ms() {
    let mut s = Session::new(2, 2);
    let body = b(0);
    let moving = BodyObservation::moving(body);
    let client = &mut s.clients[0];
    assert!(client.tick(ms(0), [moving]).is_empty());
    let bid = client.tick(ms(500), [moving]);
    assert_eq!(
        bid,
        [Action::SendBid {
            body,
            priority: Priority::VOLUNTEER
        }]
    );
    // Never assumed won: the packet was "lost", we still see no owner.
    assert_eq!(client.owner(body), None);
    assert_eq!(
        client.pending(body),
        Some(PendingRequest::Bid(Priority::VOLUNTEER))
    );
    assert!(client.tick(ms(699), [moving]).is_empty());
    let resent = client.tick(ms(700), [moving]);
    assert_eq!(resent, bid);
    assert!(client.tick(ms(899), [moving]).is_empty());
    let resent = s.clients[0].tick(ms(900), [moving]);
    s.deliver(0, &resent, ms(900));
    assert_eq!(s.clients[0].owner(body), Some((p(0), Priority::RECRUIT)));
    assert_eq!(s.clients[0].pending(body), None);
    assert!(
        s.clients[0].tick(ms(1_500), [moving]).is_empty(),
        "answered: no more resends"
    );

    // The exception: a body we create moving is ours at once, no bid.
    s.clients[1].created_moving(b(1), Priority::POKE);
    assert_eq!(s.clients[1].owner(b(1)), Some((p(1), Priority::POKE)));
    assert!(
        s.clients[1]
            .tick(ms(1_500), [BodyObservation::moving(b(1))])
            .is_empty()
    );
    let mut server = OwnershipArbiter::default();
    let grant = server
        .register_owned_body(b(1), p(1), Priority::POKE, ms(1_500))
        .unwrap();
    assert_eq!((grant.owner, grant.priority), (p(1), Priority::POKE));
}

#[test]
fn rule_07_volunteer_after_half_a_second_and_the_server_promotes_to_recruit() {
    let mut s = Session::new(1, 1);
    let moving = BodyObservation::moving(b(0));
    assert!(s.clients[0].tick(ms(100), [moving]).is_empty());
    assert!(s.clients[0].tick(ms(599), [moving]).is_empty());
    // At rest for a tick: the timer starts again.
    assert!(
        s.clients[0]
            .tick(ms(600), [BodyObservation::at_rest(b(0))])
            .is_empty()
    );
    assert!(s.clients[0].tick(ms(700), [moving]).is_empty());
    assert!(s.clients[0].tick(ms(1_199), [moving]).is_empty());
    let bid = s.clients[0].tick(ms(1_200), [moving]);
    assert_eq!(
        bid,
        [Action::SendBid {
            body: b(0),
            priority: Priority::VOLUNTEER
        }]
    );
    s.deliver(0, &bid, ms(1_200));
    assert_eq!(s.server.owner(b(0)), Some((p(0), Priority::RECRUIT)));
    assert_eq!(s.clients[0].owner(b(0)), Some((p(0), Priority::RECRUIT)));

    // An uninterested participant does not volunteer.
    let mut other = participant(9);
    let bored = BodyObservation {
        interested: false,
        ..BodyObservation::moving(b(5))
    };
    assert!(other.tick(ms(0), [bored]).is_empty());
    // No bid ever; after `orphan_stop_delay` the body nobody took over is stopped (rule 5).
    assert_eq!(
        other.tick(ms(5_000), [bored]),
        [Action::ZeroVelocity { body: b(5) }]
    );
}

#[test]
fn rule_08_script_edit_bids_poke() {
    let mut s = Session::new(2, 1);
    s.clients[1].created_moving(b(0), Priority::VOLUNTEER);
    s.server
        .bid(p(1), b(0), Priority::VOLUNTEER, ms(0))
        .unwrap();
    s.clients[0].on_owner_changed(b(0), Some(p(1)), Priority::RECRUIT);

    let edited = BodyObservation {
        script_edited: true,
        ..BodyObservation::moving(b(0))
    };
    let bid = s.clients[0].tick(ms(50), [edited]);
    assert_eq!(
        bid,
        [Action::SendBid {
            body: b(0),
            priority: Priority::POKE
        }]
    );
    s.deliver(0, &bid, ms(50));
    assert_eq!(s.server.owner(b(0)), Some((p(0), Priority::POKE)));
    assert_eq!(s.clients[1].owner(b(0)), Some((p(0), Priority::POKE)));
}

#[test]
fn rule_09_avatar_collision_bids_poke() {
    let mut s = Session::new(1, 1);
    let touched = BodyObservation {
        touched_by_avatar: true,
        ..BodyObservation::at_rest(b(0))
    };
    let bid = s.clients[0].tick(ms(0), [touched]);
    assert_eq!(
        bid,
        [Action::SendBid {
            body: b(0),
            priority: Priority::POKE
        }]
    );
    s.deliver(0, &bid, ms(0));
    assert_eq!(s.server.owner(b(0)), Some((p(0), Priority::POKE)));
}

#[test]
fn rule_10_grab_bids_grab_and_keeps_the_sword_against_pokes() {
    let mut s = Session::new(2, 1);
    let held = BodyObservation {
        held: true,
        ..BodyObservation::moving(b(0))
    };
    let bid = s.clients[0].tick(ms(0), [held]);
    assert_eq!(
        bid,
        [Action::SendBid {
            body: b(0),
            priority: Priority::GRAB
        }]
    );
    s.deliver(0, &bid, ms(0));
    assert_eq!(s.server.owner(b(0)), Some((p(0), Priority::GRAB)));

    // UserB is whacked by the sword: its POKE cannot win, so it does not bid but refuses it on
    // the spot (rule 6)...
    let whacked = BodyObservation {
        touched_by_avatar: true,
        ..BodyObservation::moving(b(0))
    };
    assert_eq!(
        s.clients[1].tick(ms(1_000), [whacked]),
        [Action::RefuseLocally {
            body: b(0),
            priority: Priority::POKE,
            reason: RefusalReason::LowerPriority
        }]
    );
    // ...and the server refuses it anyway.
    let r = s
        .server
        .bid(p(1), b(0), Priority::POKE, ms(1_000))
        .unwrap_err();
    assert_eq!(r.reason, RefusalReason::LowerPriority);
    // To contest, UserB must grab too (equal priority, past the lockout).
    let grab = BodyObservation {
        held: true,
        ..BodyObservation::moving(b(0))
    };
    let bid = s.clients[1].tick(ms(1_000), [grab]);
    assert_eq!(
        bid,
        [Action::SendBid {
            body: b(0),
            priority: Priority::GRAB
        }]
    );
    s.deliver(1, &bid, ms(1_000));
    assert_eq!(s.server.owner(b(0)), Some((p(1), Priority::GRAB)));

    // An owner at RECRUIT that grabs raises its priority instead of bidding.
    let mut s = Session::new(1, 1);
    s.clients[0].on_owner_changed(b(0), Some(p(0)), Priority::RECRUIT);
    s.server
        .bid(p(0), b(0), Priority::VOLUNTEER, ms(0))
        .unwrap();
    let raise = s.clients[0].tick(ms(10), [held]);
    assert_eq!(
        raise,
        [Action::SendPriorityChange {
            body: b(0),
            priority: Priority::GRAB
        }]
    );
    s.deliver(0, &raise, ms(10));
    assert_eq!(s.server.owner(b(0)), Some((p(0), Priority::GRAB)));
}

#[test]
fn rule_11_owned_body_hitting_an_unowned_one_bids_one_below_at_least_volunteer() {
    let mut s = Session::new(2, 4);
    let hit = |body, n| BodyObservation {
        hit_by_owned: Some(n),
        ..BodyObservation::moving(body)
    };
    s.clients[0].created_moving(b(0), Priority::POKE);
    let n = s.clients[0].owned_priority(b(0)).unwrap();
    let bids = s.clients[0].tick(ms(0), [hit(b(1), n), hit(b(2), Priority::RECRUIT)]);
    assert_eq!(
        bids,
        [
            Action::SendBid {
                body: b(1),
                priority: Priority(126)
            },
            Action::SendBid {
                body: b(2),
                priority: Priority::VOLUNTEER
            },
        ]
    );
    s.deliver(0, &bids, ms(0));
    assert_eq!(s.server.owner(b(1)), Some((p(0), Priority(126))));
    assert_eq!(s.server.owner(b(2)), Some((p(0), Priority::RECRUIT)));

    // Only unowned bodies are knocked on.
    s.clients[0].on_owner_changed(b(3), Some(p(1)), Priority::RECRUIT);
    let hit_owned = BodyObservation {
        interested: false,
        ..hit(b(3), n)
    };
    assert!(s.clients[0].tick(ms(10), [hit_owned]).is_empty());
}

#[test]
fn rule_12_owned_body_at_rest_asks_release_and_zeroes() {
    let mut s = Session::new(2, 1);
    let bid = s.clients[0].tick(
        ms(0),
        [BodyObservation {
            script_edited: true,
            ..BodyObservation::moving(b(0))
        }],
    );
    s.deliver(0, &bid, ms(0));
    assert_eq!(s.clients[0].owner(b(0)), Some((p(0), Priority::POKE)));

    let rest = BodyObservation::at_rest(b(0));
    let out = s.clients[0].tick(ms(1_000), [rest]);
    assert_eq!(
        out,
        [
            Action::SendRelease { body: b(0) },
            Action::ZeroVelocity { body: b(0) }
        ]
    );
    // Not assumed: still ours until the server says otherwise; resent after 200 ms.
    assert_eq!(s.clients[0].owner(b(0)), Some((p(0), Priority::POKE)));
    assert!(s.clients[0].tick(ms(1_100), [rest]).is_empty());
    let resent = s.clients[0].tick(ms(1_200), [rest]);
    assert_eq!(resent, [Action::SendRelease { body: b(0) }]);
    s.deliver(0, &resent, ms(1_200));
    assert_eq!(s.server.owner(b(0)), None);
    assert_eq!(s.server.record(b(0)).unwrap().priority, Priority::NONE);
    assert_eq!(s.zeroed, [b(0)]);
    assert_eq!(s.clients[0].owner(b(0)), None);
    assert_eq!(s.clients[1].owner(b(0)), None);
    assert!(s.clients[0].tick(ms(1_400), [rest]).is_empty());
}

#[test]
fn rule_13_uninterested_owner_of_a_moving_body_yields() {
    let mut s = Session::new(1, 1);
    let held = BodyObservation {
        held: true,
        ..BodyObservation::moving(b(0))
    };
    let bid = s.clients[0].tick(ms(0), [held]);
    s.deliver(0, &bid, ms(0));
    assert_eq!(s.server.owner(b(0)), Some((p(0), Priority::GRAB)));

    let bored = BodyObservation {
        interested: false,
        ..BodyObservation::moving(b(0))
    };
    let out = s.clients[0].tick(ms(100), [bored]);
    assert_eq!(
        out,
        [Action::SendPriorityChange {
            body: b(0),
            priority: Priority::YIELD
        }]
    );
    s.deliver(0, &out, ms(100));
    assert_eq!(s.server.owner(b(0)), Some((p(0), Priority::YIELD)));
    assert_eq!(s.clients[0].owner(b(0)), Some((p(0), Priority::YIELD)));
    assert!(
        s.clients[0].tick(ms(500), [bored]).is_empty(),
        "already yielded"
    );
}

#[test]
fn rule_14_others_bid_volunteer_at_once_when_the_owner_yields() {
    let mut s = Session::new(2, 1);
    let moving = BodyObservation::moving(b(0));
    s.clients[0].created_moving(b(0), Priority::POKE);
    s.server.bid(p(0), b(0), Priority::POKE, ms(0)).unwrap();
    s.clients[1].on_owner_changed(b(0), Some(p(0)), Priority::POKE);
    assert!(s.clients[1].tick(ms(10), [moving]).is_empty());

    let bored = BodyObservation {
        interested: false,
        ..moving
    };
    let out = s.clients[0].tick(ms(20), [bored]);
    s.deliver(0, &out, ms(20));
    assert_eq!(s.clients[1].owner(b(0)), Some((p(0), Priority::YIELD)));

    // No 0.5 s wait, and within the 200 ms lockout: VOLUNTEER beats YIELD.
    let bid = s.clients[1].tick(ms(30), [moving]);
    assert_eq!(
        bid,
        [Action::SendBid {
            body: b(0),
            priority: Priority::VOLUNTEER
        }]
    );
    s.deliver(1, &bid, ms(30));
    assert_eq!(s.server.owner(b(0)), Some((p(1), Priority::RECRUIT)));
    assert_eq!(s.clients[0].owner(b(0)), Some((p(1), Priority::RECRUIT)));
}

#[test]
fn rule_21_a_body_the_physics_host_holds_is_not_volunteered_for_but_any_bid_takes_it() {
    // Participant 1: id 0 is the host's.
    let mut s = Session::new(2, 1);
    let moving = BodyObservation::moving(b(0));
    let host = simsync_ownership::ParticipantId::ENTITY_SERVER;
    let grant = s.server.host_take(b(0), Priority::NONE, ms(0)).unwrap();
    assert_eq!((grant.owner, grant.priority), (host, Priority::YIELD));
    s.clients[1].on_owner_changed(b(0), Some(host), Priority::YIELD);
    // Interested and moving, held at YIELD: rule 14 would bid at once, rule 7 after 0.5 s;
    // neither does for the host's body.
    assert!(s.clients[1].tick(ms(10), [moving]).is_empty());
    assert!(s.clients[1].tick(ms(1_000), [moving]).is_empty());
    // A poke (rule 8) does, and wins: any bid beats the host's YIELD.
    let poked = BodyObservation {
        script_edited: true,
        ..moving
    };
    let bid = s.clients[1].tick(ms(1_010), [poked]);
    assert_eq!(
        bid,
        [Action::SendBid {
            body: b(0),
            priority: Priority::POKE
        }]
    );
    s.deliver(1, &bid, ms(1_010));
    assert_eq!(s.server.owner(b(0)), Some((p(1), Priority::POKE)));
}

#[test]
fn rule_21_a_body_the_physics_host_holds_is_knocked_on() {
    let mut s = Session::new(2, 2);
    let host = simsync_ownership::ParticipantId::ENTITY_SERVER;
    s.clients[1].created_moving(b(0), Priority::POKE);
    s.server.bid(p(1), b(0), Priority::POKE, ms(0)).unwrap();
    s.server.host_take(b(1), Priority::NONE, ms(0)).unwrap();
    s.clients[1].on_owner_changed(b(1), Some(host), Priority::YIELD);
    let hit = BodyObservation {
        hit_by_owned: Some(Priority::POKE),
        ..BodyObservation::moving(b(1))
    };
    let bids = s.clients[1].tick(ms(10), [hit]);
    assert_eq!(
        bids,
        [Action::SendBid {
            body: b(1),
            priority: Priority(126)
        }]
    );
    s.deliver(1, &bids, ms(10));
    assert_eq!(s.server.owner(b(1)), Some((p(1), Priority(126))));
}
