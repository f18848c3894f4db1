//! Refusals a game can see: every reason the entity server's arbiter has reaches the
//! participant exactly, as a `BidRefused` naming the body's owner (one test per reason), and a
//! bid the participant will not send because it cannot win is refused on the spot, in the frame
//! of its trigger, without a message to the server (ownership rule 6).

use bevy::prelude::*;
use simsync_ownership::prelude::*;
use simsync_ownership::{BodyId, OwnershipLock, ParticipantId};

use super::harness::{Body, Session, Setup, steps};
use super::misuse::{bid, release};

/// The last `BidRefused` participant `i` saw.
fn last_refusal(s: &Session, i: usize) -> BidRefused {
    *s.log(i).refused.last().expect("a BidRefused")
}

/// Participant `i`'s `BidRefused`, by the server, about `body`, with `reason`, naming `owner`.
fn assert_refused(
    s: &Session,
    i: usize,
    body: u64,
    reason: RefusalReason,
    owner: Option<(ParticipantId, Priority)>,
) {
    let r = last_refusal(s, i);
    assert_eq!(r.body, BodyId(body));
    assert_eq!(r.entity, Session::entity(s.app(i), body));
    assert_eq!(r.reason, reason);
    assert_eq!(r.by, RefusedBy::EntityServer);
    assert_eq!(r.owner.map(|o| (o, r.priority)), owner);
    assert_eq!(s.stats(i).refusals_received.get(reason), 1);
}

fn two_floating() -> Session {
    Session::perfect(
        2,
        &[
            Body::floating(1, Vec3::ZERO),
            Body::ground(9, Vec3::new(0.0, -5.0, 0.0)),
        ],
    )
}

/// Participant 0 grabs body 1 and the server grants it.
fn p0_grabs(s: &mut Session) -> (ParticipantId, Priority) {
    s.command(0, 1, |e| {
        e.grab();
    });
    s.run(3);
    let held = (s.id_of(0), Priority::GRAB);
    assert_eq!(s.server_owner(1), Some(held));
    held
}

#[test]
fn locked_reaches_the_participant() {
    let mut s = two_floating();
    let entity = s
        .server()
        .world()
        .resource::<EntityServer>()
        .entity_of(BodyId(1))
        .unwrap();
    s.server_mut()
        .world_mut()
        .entity_mut(entity)
        .insert(OwnershipLock);
    s.run(1);
    s.send_raw(0, bid(1, Priority::POKE.0));
    s.run(3);
    assert_refused(&s, 0, 1, RefusalReason::Locked, None);
}

#[test]
fn lower_priority_reaches_the_participant_with_the_owner() {
    let mut s = two_floating();
    let held = p0_grabs(&mut s);
    s.send_raw(1, bid(1, Priority::POKE.0));
    s.run(3);
    assert_refused(&s, 1, 1, RefusalReason::LowerPriority, Some(held));
}

#[test]
fn locked_out_equal_priority_reaches_the_participant_with_the_owner() {
    let mut s = two_floating();
    let held = p0_grabs(&mut s);
    s.send_raw(1, bid(1, Priority::GRAB.0));
    s.run(3);
    assert_refused(&s, 1, 1, RefusalReason::LockedOutEqualPriority, Some(held));
}

#[test]
fn not_owner_reaches_the_participant_with_the_owner() {
    let mut s = two_floating();
    let held = p0_grabs(&mut s);
    s.send_raw(1, release(1));
    s.run(3);
    assert_refused(&s, 1, 1, RefusalReason::NotOwner, Some(held));
}

#[test]
fn unknown_body_reaches_the_participant() {
    let mut s = two_floating();
    // Body 5 exists on participant 0 only.
    s.p(0).world_mut().spawn((
        BodyNetId(BodyId(5)),
        Ownable,
        bevy_rapier3d::prelude::RigidBody::Dynamic,
        Transform::from_xyz(5.0, 0.0, 0.0),
    ));
    s.run(1);
    s.command(0, 5, |e| {
        e.poke();
    });
    s.run(3);
    assert_refused(&s, 0, 5, RefusalReason::UnknownBody, None);
    assert_eq!(s.server_stats().bids_received, 1);
}

#[test]
fn not_ownable_reaches_the_participant() {
    let mut s = two_floating();
    s.send_raw(0, bid(9, Priority::POKE.0));
    s.run(3);
    assert_refused(&s, 0, 9, RefusalReason::NotOwnable, None);
}

#[test]
fn priority_too_high_reaches_the_participant() {
    let mut s = two_floating();
    s.send_raw(0, bid(1, 200));
    s.run(3);
    assert_refused(&s, 0, 1, RefusalReason::PriorityTooHigh, None);
}

#[test]
fn priority_too_low_reaches_the_participant() {
    let mut s = two_floating();
    s.send_raw(0, bid(1, Priority::YIELD.0));
    s.run(3);
    assert_refused(&s, 0, 1, RefusalReason::PriorityTooLow, None);
}

fn exclusive_session() -> Session {
    let setup = Setup {
        config: OwnershipConfig {
            exclusive_grab: true,
            ..OwnershipConfig::default()
        },
        ..Setup::default()
    };
    Session::with_setup(
        2,
        &[Body::floating(1, Vec3::ZERO)],
        &Setup { seed: 3, ..setup },
    )
}

#[test]
fn held_exclusively_reaches_the_participant_with_the_holder() {
    let mut s = exclusive_session();
    let held = p0_grabs(&mut s);
    s.run(steps(500));
    s.send_raw(1, bid(1, Priority::GRAB.0));
    s.run(3);
    assert_refused(&s, 1, 1, RefusalReason::HeldExclusively, Some(held));
}

/// F6 of the trial: a poke on a body held at GRAB by someone else sends nothing, and the game
/// gets `BidRefused { reason: LowerPriority, by: Participant }` in the same frame, naming the
/// holder.
#[test]
fn a_poke_that_cannot_win_is_refused_in_its_own_frame_without_a_round_trip() {
    let mut s = two_floating();
    let held = p0_grabs(&mut s);
    let bids_before = s.server_stats().bids_received;
    s.command(1, 1, |e| {
        e.poke();
    });
    // Only participant 1 updates: nothing can have crossed the network.
    s.p(1).update();
    let r = last_refusal(&s, 1);
    assert_eq!(
        (r.body, r.reason, r.by),
        (
            BodyId(1),
            RefusalReason::LowerPriority,
            RefusedBy::Participant
        )
    );
    assert_eq!(r.owner.map(|o| (o, r.priority)), Some(held));
    assert_eq!(
        s.stats(1).refusals_local.get(RefusalReason::LowerPriority),
        1
    );
    assert_eq!(s.stats(1).bids_sent, 0);
    s.run(steps(300));
    assert_eq!(s.server_stats().bids_received, bids_before);
    assert_eq!(s.log(1).refused.len(), 1, "one poke, one refusal");
}

/// Holding for both: participant 0 grabs body 1, then participant 1 grabs it 300 ms later.
fn contested_grab(s: &mut Session) {
    p0_grabs(s);
    s.run(steps(300));
    s.command(1, 1, |e| {
        e.grab();
    });
}

/// The exclusive-grab option: an equal GRAB cannot take a held body while its holder keeps it,
/// and the second grabber hears why at once; once the holder lets go it gets the body.
#[test]
fn with_exclusive_grab_a_held_body_stays_with_its_holder_until_let_go() {
    let mut s = exclusive_session();
    contested_grab(&mut s);
    let holder = s.id_of(0);
    s.run(steps(2_000));
    assert_eq!(s.server_owner(1), Some((holder, Priority::GRAB)));
    let r = s.log(1).refused.first().copied().expect("refused");
    assert_eq!(
        (r.reason, r.by),
        (RefusalReason::HeldExclusively, RefusedBy::Participant)
    );
    assert_eq!(
        s.server_stats()
            .bids_refused
            .get(RefusalReason::HeldExclusively),
        0
    );
    s.command(0, 1, |e| {
        e.release_grab();
    });
    let took = s.run_until(steps(3_000), |s| {
        s.server_owner(1).map(|(o, _)| o) == Some(s.id_of(1))
    });
    assert!(
        took.is_some(),
        "the second grabber gets the body once it is let go"
    );
}

/// Rule 3 as written (the default): an equal GRAB takes a held body once the lockout passed.
#[test]
fn by_default_an_equal_grab_takes_a_held_body_after_the_lockout() {
    let mut s = two_floating();
    contested_grab(&mut s);
    s.run(3);
    assert_eq!(s.server_owner(1), Some((s.id_of(1), Priority::GRAB)));
    assert!(s.log(1).refused.is_empty());
}
