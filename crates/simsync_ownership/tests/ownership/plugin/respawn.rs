//! A body respawned under an existing id ([respawns](simsync_ownership::rules)): the entity
//! server's respawn resets the body's ownership and state on every participant; a participant's
//! own respawn is sent to the server, which resets the body for everyone when the sender owns
//! it or nobody does, and refuses it (`NotOwner`) otherwise.

use bevy::prelude::*;
use simsync_ownership::BodyId;
use simsync_ownership::prelude::*;

use super::harness::{Body, Session, respawn, steps};

/// Body 7's id.
const BODY: u64 = 7;
/// Where it is respawned, at rest.
const AT: Vec3 = Vec3::new(-10.0, 0.0, 0.0);

/// Three participants; participant `owner` pokes body 7 and sets it moving along +x at 1 m/s.
fn owned_moving(owner: usize) -> Session {
    let mut s = Session::perfect(3, &[Body::floating(BODY, Vec3::ZERO)]);
    s.command(owner, BODY, |e| {
        e.poke();
    });
    s.set_velocity(owner, BODY, Vec3::new(1.0, 0.0, 0.0));
    s.run(steps(300));
    assert_eq!(s.server_owner(BODY), Some((s.id_of(owner), Priority::POKE)));
    s
}

/// Respawns body 7 at rest at [`AT`] on the entity server.
fn respawn_on_server(s: &mut Session) {
    let old = s
        .server()
        .world()
        .resource::<EntityServer>()
        .entity_of(BodyId(BODY))
        .expect("registered");
    respawn(s.server_mut(), old, BODY, AT, false);
}

/// Respawns body 7 at rest at [`AT`] on participant `i`.
fn respawn_on(s: &mut Session, i: usize) {
    let old = Session::entity(s.app(i), BODY);
    respawn(s.p(i), old, BODY, AT, true);
}

/// Every participant shows body 7 unowned, at rest within 1 cm of [`AT`].
fn everyone_has_the_new_body(s: &Session) -> bool {
    (0..s.len()).all(|i| {
        let (at, v) = s.body_on(i, BODY);
        s.owner_on(i, BODY) == SimulationOwner::UNOWNED
            && at.distance(AT) < 0.01
            && v.linear.length() < 1e-3
    })
}

/// Body 7, owned by participant 0 and moving, is respawned at rest on the entity server and on
/// participant 0: within 250 ms every participant shows it unowned and where it was respawned,
/// and 10 s later they still agree within 1 cm.
#[test]
fn a_respawn_on_the_server_and_the_owner_resets_every_participant() {
    let mut s = owned_moving(0);
    respawn_on_server(&mut s);
    respawn_on(&mut s, 0);
    let took = s.run_until(steps(2_000), everyone_has_the_new_body);
    s.run(steps(10_000) - took.unwrap_or(steps(2_000)));
    let spread = s.spread(BODY);
    println!(
        "respawn: every participant reset after {took:?} steps; copies {spread} m apart 10 s after the respawn"
    );
    let took = took.expect("every participant reset");
    assert!(took <= steps(250), "reset after {took} steps");
    assert!(spread < 0.01, "copies {spread} m apart");
    assert_eq!(s.server_owner(BODY), None);
    assert!(everyone_has_the_new_body(&s));
}

/// Participant 0, the owner, respawns body 7 on its side only: the respawn goes to the entity
/// server, which starts the body again unowned where participant 0 has it, for everyone.
#[test]
fn an_owners_own_respawn_is_sent_to_the_server_and_resets_everyone() {
    let mut s = owned_moving(0);
    respawn_on(&mut s, 0);
    let took = s.run_until(steps(2_000), everyone_has_the_new_body);
    let took = took.expect("every participant reset");
    assert!(took <= steps(250), "reset after {took} steps");
    assert_eq!(s.stats(0).respawns_sent, 1);
    assert_eq!(s.server_stats().resets_sent, 1);
    assert_eq!(s.server_owner(BODY), None);
    s.run(steps(3_000));
    assert!(s.spread(BODY) < 0.01, "copies {} m apart", s.spread(BODY));
    assert!(everyone_has_the_new_body(&s));
}

/// Participant 1 respawns body 7, which participant 0 owns and moves, on its side only: the
/// server refuses it (`NotOwner`, naming participant 0), participant 1 reports it as a
/// `BidRefused` and its copy follows the owner's states again; nobody else is reset.
#[test]
fn a_respawn_of_someone_elses_body_is_refused_and_the_copy_follows_the_owner() {
    let mut s = owned_moving(0);
    let owner = s.id_of(0);
    respawn_on(&mut s, 1);
    s.run(steps(3_000));
    assert_eq!(s.stats(1).respawns_sent, 1);
    let stats = s.server_stats();
    assert_eq!(stats.resets_sent, 0);
    assert_eq!(stats.respawns_refused.get(RefusalReason::NotOwner), 1);
    let refused: Vec<&BidRefused> = s.log(1).refused.iter().collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].reason, RefusalReason::NotOwner);
    assert_eq!(refused[0].owner, Some(owner));
    assert_eq!(s.server_owner(BODY), Some((owner, Priority::POKE)));
    assert!(s.owners_agree(BODY));
    // The owner's states move participant 1's new copy to where the body is.
    assert!(s.spread(BODY) < 0.05, "copies {} m apart", s.spread(BODY));
    assert!(s.body_on(1, BODY).0.x > 3.0, "{:?}", s.body_on(1, BODY));
}
