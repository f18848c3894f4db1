//! Silent participants (ownership rule 5): a participant the entity server hears nothing from
//! for `participant_silence_timeout` (2 s) counts as gone — its bodies are cleared as on a
//! disconnect and keep flying on everyone else (never zeroed by the server; stopped after
//! `orphan_stop_delay` only if nobody takes them over) — and is told so when it is heard from
//! again; an idle participant sends keepalives and is never counted gone.

use std::time::Duration;

use bevy::prelude::*;
use simsync_ownership::BodyId;
use simsync_ownership::prelude::*;

use super::harness::{Body, Session, Setup, steps};

const SPEED: f32 = 1.0;

/// Participant 0 owns floating body 1, moving along +x at 1 m/s; the others are not interested,
/// so nobody takes it over.
fn owned_by_0_nobody_else_wants_it() -> Session {
    let mut s = Session::perfect(3, &[Body::floating(1, Vec3::ZERO)]);
    for i in [1, 2] {
        s.command(i, 1, |e| {
            e.yield_ownership();
        });
    }
    s.command(0, 1, |e| {
        e.poke();
    });
    s.set_velocity(0, 1, Vec3::new(SPEED, 0.0, 0.0));
    s.run(steps(300));
    assert_eq!(s.server_owner(1), Some((s.id_of(0), Priority::POKE)));
    s
}

#[test]
fn a_participant_behind_a_dead_link_is_gone_after_2_s_and_its_body_flies_on() {
    let mut s = owned_by_0_nobody_else_wants_it();
    let me = s.id_of(0);
    s.cut_link(0).unwrap();
    s.run(steps(1_700));
    assert_eq!(s.server_stats().participants_silent, 0, "not before 1.75 s");
    let counted = s
        .run_until(steps(400), |s| s.server_stats().participants_silent == 1)
        .expect("counted gone within 2 s of the outage");
    let stats = s.server_stats();
    assert_eq!((stats.silence_clears, stats.orphaned), (1, 1));
    assert_eq!((stats.expiries, stats.disconnect_clears), (0, 0));
    assert_eq!(stats.participants_left, 0, "its connection stays open");
    assert_eq!(s.server_owner(1), None);
    let gone = s.server_log().gone.clone();
    assert_eq!(gone.len(), 1);
    assert_eq!((gone[0].participant, gone[0].bodies_cleared), (me, 1));
    let GoneCause::Silent { heard_last } = gone[0].cause else {
        panic!("{:?}", gone[0].cause);
    };
    assert!(heard_last >= Duration::from_secs(2), "{heard_last:?}");
    assert!(counted > 0);
    // Rule 5: the orphan keeps flying on the others for `orphan_stop_delay` (2 s), then stops
    // where it is; the server never sent a stopped state.
    s.run(steps(1_800));
    for i in [1, 2] {
        let (_, v) = s.body_on(i, 1);
        assert!((v.linear.x - SPEED).abs() < 1e-3, "participant {i}: {v:?}");
        assert_eq!(s.owner_on(i, 1).owner, None);
    }
    s.run(steps(500));
    for i in [1, 2] {
        assert_eq!(s.body_on(i, 1).1.linear, Vec3::ZERO, "participant {i}");
    }
    assert_eq!(s.server_stats().zero_states_sent, 0);
    // Stopped at the same place on both (participant 0, cut off, still flies it).
    let apart = s.body_on(1, 1).0.distance(s.body_on(2, 1).0);
    assert!(apart < 0.05, "copies {apart} m apart");
    // It leaves while still counted gone: one departure, one `ParticipantGone`.
    s.kill(0).unwrap();
    s.run(3);
    assert_eq!(s.server_stats().participants_left, 1);
    assert_eq!(s.server_log().gone.len(), 1);
}

#[test]
fn a_participant_heard_from_again_is_told_it_was_counted_gone() {
    let mut s = owned_by_0_nobody_else_wants_it();
    let me = s.id_of(0);
    s.cut_link(0).unwrap();
    s.run(steps(3_000));
    assert_eq!(s.server_stats().participants_silent, 1);
    s.restore_link(0).unwrap();
    s.run(steps(1_000));
    let stats = s.server_stats();
    assert_eq!(stats.participants_returned, 1);
    let returned = s.server_log().returned.clone();
    assert_eq!(returned.len(), 1);
    assert_eq!(returned[0].participant, me);
    assert!(returned[0].silent_for >= Duration::from_secs(3));
    // Told once, with what it lost; it is a participant again under the same id, owning
    // nothing, and agrees with the server.
    assert_eq!(s.stats(0).counted_silent, 1);
    let told = s.log(0).counted_silent.clone();
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].bodies_cleared, 1);
    assert_eq!(
        told[0].silent_for.as_millis(),
        returned[0].silent_for.as_millis()
    );
    assert_eq!(s.id_of(0), me);
    let cleared = |c: &OwnershipChanged| c.body == BodyId(1) && c.owner.is_none();
    assert!(
        s.log(0).changed.iter().any(cleared),
        "it heard it lost body 1"
    );
    // (Still moving on its side, it may have volunteered for it since: nobody else wants it.)
    assert!(s.owners_agree(1));
    // Back, it can leave like anyone.
    s.kill(0).unwrap();
    s.run(3);
    assert_eq!(s.server_stats().participants_left, 1);
    let gone = &s.server_log().gone;
    assert_eq!(gone.len(), 2);
    assert_eq!((gone[1].participant, gone[1].cause), (me, GoneCause::Left));
}

#[test]
fn an_idle_participant_sends_keepalives_and_is_never_counted_gone() {
    // Nothing moves, nobody owns anything, no deltas (so no acknowledgements): only keepalives.
    let setup = Setup {
        budget: StateBudgetConfig {
            delta_encoding: false,
            ..StateBudgetConfig::default()
        },
        ..Setup::default()
    };
    let mut s = Session::with_setup(2, &[Body::floating(1, Vec3::ZERO)], &setup);
    s.run(steps(10_000));
    let stats = s.server_stats();
    assert_eq!((stats.participants_silent, stats.silence_clears), (0, 0));
    for i in 0..2 {
        // One every 250 ms.
        let sent = s.stats(i).keepalives_sent;
        assert!((38..=42).contains(&sent), "participant {i}: {sent}");
        assert_eq!(
            s.stats(i).messages_ignored,
            0,
            "the answers are not ignored"
        );
    }
}

#[test]
fn the_silence_timeout_is_configurable() {
    let setup = Setup {
        config: OwnershipConfig {
            participant_silence_timeout: Duration::from_millis(600),
            ..OwnershipConfig::default()
        },
        ..Setup::default()
    };
    let mut s = Session::with_setup(2, &[Body::floating(1, Vec3::ZERO)], &setup);
    s.pause(1).unwrap();
    s.run(steps(500));
    assert_eq!(s.server_stats().participants_silent, 0);
    s.run(steps(200));
    assert_eq!(s.server_stats().participants_silent, 1);
    assert_eq!(s.server_log().gone[0].bodies_cleared, 0);
}
