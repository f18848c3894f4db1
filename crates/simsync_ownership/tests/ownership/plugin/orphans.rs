//! Orphans keep flying (ownership rule 5): a moving body whose owner disconnects or goes silent
//! keeps moving on every participant and is taken over (rules 7, 14) without a stop or a jump
//! back; only a body nobody takes over is stopped, where each participant has it; a body
//! despawned and respawned under the same id starts with fresh ownership.

use bevy::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_ownership::prelude::*;
use simsync_ownership::{BodyId, ParticipantId};

use super::harness::{Body, DT, Session, respawn, steps};

const SPEED: f32 = 1.0;

/// Participant `owner` pokes floating body 1 and sets it moving along +x at 1 m/s; everyone
/// moves it.
fn owned_moving_body(s: &mut Session, owner: usize) {
    s.command(owner, 1, |e| {
        e.poke();
    });
    s.set_velocity(owner, 1, Vec3::new(SPEED, 0.0, 0.0));
    s.run(steps(300));
    assert_eq!(s.server_owner(1), Some((s.id_of(owner), Priority::POKE)));
    for i in 0..s.len() {
        let (_, v) = s.body_on(i, 1);
        assert!((v.linear.x - SPEED).abs() < 1e-3, "participant {i}: {v:?}");
    }
}

/// Steps until the server names an owner of body 1 other than `gone`, checking after every
/// step that body 1 keeps moving on `watch`: never stopped, and never moved by more than a few
/// centimetres other than forward at its speed (a relayed state is a step or two old, so it may
/// set a copy back by that much, but never by the metres a stale state would). Returns the
/// steps taken.
fn watch_until_taken_over(
    s: &mut Session,
    watch: &[usize],
    gone: ParticipantId,
    limit: u32,
) -> u32 {
    let mut last: Vec<f32> = watch.iter().map(|&i| s.body_on(i, 1).0.x).collect();
    let max_step = SPEED * DT.as_secs_f32() + 0.05;
    for n in 1..=limit {
        s.step();
        for (k, &i) in watch.iter().enumerate() {
            let (at, v) = s.body_on(i, 1);
            assert!(
                v.linear.x > 0.5 * SPEED,
                "participant {i} stopped at step {n}: {v:?}"
            );
            let moved = at.x - last[k];
            assert!(
                (-0.05..=max_step).contains(&moved),
                "participant {i} moved {moved} m at step {n}"
            );
            last[k] = at.x;
        }
        if s.server_owner(1).is_some_and(|(o, _)| o != gone) {
            return n;
        }
    }
    panic!("nobody took the orphan over in {limit} steps");
}

#[test]
fn a_moving_body_whose_owner_disconnects_keeps_moving_and_is_taken_over() {
    let mut s = Session::perfect(3, &[Body::floating(1, Vec3::ZERO)]);
    owned_moving_body(&mut s, 1);
    let x0 = s.body_on(0, 1).0.x;
    let gone = s.id_of(1);
    s.kill(1).unwrap();
    let took = watch_until_taken_over(&mut s, &[0, 2], gone, steps(2_000));
    // Rule 7: volunteered after 0.5 s of moving unowned, granted as RECRUIT.
    assert!(took <= steps(800), "taken over after {took} steps");
    let (owner, priority) = s.server_owner(1).unwrap();
    assert!([s.id_of(0), s.id_of(2)].contains(&owner));
    assert_eq!(priority, Priority::RECRUIT);
    assert_eq!(s.server_stats().orphaned, 1);
    assert_eq!(s.server_stats().disconnect_clears, 1);
    assert_eq!(s.server_stats().zero_states_sent, 0);
    // It flew on as if nothing happened: where 1 m/s takes it, on both.
    s.run(steps(500));
    for i in [0, 2] {
        let (at, v) = s.body_on(i, 1);
        assert!((v.linear.x - SPEED).abs() < 1e-3, "participant {i}: {v:?}");
        assert!(at.x > x0 + 1.0, "participant {i} at {at}");
    }
    assert!(s.spread(1) < 0.05, "copies {} m apart", s.spread(1));
}

#[test]
fn a_silent_owners_body_never_teleports_back() {
    let mut s = Session::perfect(3, &[Body::floating(1, Vec3::ZERO)]);
    owned_moving_body(&mut s, 0);
    s.peers
        .set_link_direction(
            0,
            simsync_net::Direction::ToServer,
            LinkConditionerConfig::PERFECT.with_loss(100.0),
        )
        .unwrap();
    // 2 s of silence, the participant counted gone, the takeover: every step moves on by one
    // step's worth.
    let gone = s.id_of(0);
    let took = watch_until_taken_over(&mut s, &[1, 2], gone, steps(7_000));
    assert!(took <= steps(3_000), "taken over after {took} steps");
    let stats = s.server_stats();
    assert_eq!((stats.participants_silent, stats.silence_clears), (1, 1));
    assert_eq!((stats.expiries, stats.zero_states_sent), (0, 0));
    let (owner, _) = s.server_owner(1).unwrap();
    assert_ne!(owner, s.id_of(0));
}

#[test]
fn an_orphan_nobody_takes_over_stops_where_it_is() {
    let mut s = Session::perfect(3, &[Body::floating(1, Vec3::ZERO)]);
    owned_moving_body(&mut s, 1);
    for i in [0, 2] {
        s.command(i, 1, |e| {
            e.yield_ownership();
        });
    }
    s.kill(1).unwrap();
    s.run(2);
    let x_left = s.body_on(0, 1).0.x;
    // Still flying for `orphan_stop_delay` (2 s), then stopped, where it got to.
    s.run(steps(1_900));
    assert!(s.body_on(0, 1).1.linear.x > 0.5);
    s.run(steps(300));
    for i in [0, 2] {
        let (at, v) = s.body_on(i, 1);
        assert_eq!(v.linear, Vec3::ZERO, "participant {i}");
        assert!(
            at.x > x_left + 1.8,
            "participant {i} stopped at {at}, left at {x_left}"
        );
        assert!(s.stats(i).velocities_zeroed >= 1);
    }
    assert_eq!(s.server_owner(1), None);
    assert!(s.spread(1) < 0.05, "copies {} m apart", s.spread(1));
}

#[test]
fn a_body_despawned_and_respawned_under_the_same_id_starts_with_fresh_ownership() {
    let mut s = Session::perfect(2, &[Body::floating(1, Vec3::ZERO)]);
    owned_moving_body(&mut s, 0);
    let at = Vec3::new(-10.0, 0.0, 0.0);
    let old = s
        .server()
        .world()
        .resource::<EntityServer>()
        .entity_of(BodyId(1))
        .unwrap();
    respawn(s.server_mut(), old, 1, at, false);
    for i in 0..2 {
        let old = Session::entity(s.app(i), 1);
        respawn(s.p(i), old, 1, at, true);
    }
    // The old owner's client no longer owns it either; nothing it sent before restores it.
    s.run(3);
    assert_eq!(s.server_owner(1), None);
    assert!(s.owners_agree(1));
    s.run(steps(6_000));
    assert_eq!(s.server_owner(1), None);
    for i in 0..2 {
        let (pos, v) = s.body_on(i, 1);
        assert!(pos.distance(at) < 1e-3, "participant {i} at {pos}");
        assert_eq!(v.linear, Vec3::ZERO);
    }
    let server = s.server().world().resource::<EntityServer>();
    assert_eq!(server.last_state(BodyId(1)).map(|st| st.position), Some(at));
}
