//! `simsync_ownership::testing::OwnershipPeers` by itself: a three-participant convergence test
//! in ten lines, a deliberately diverging participant reported by body and participants, a
//! paused participant that catches up, a killed participant that rejoins and converges, and
//! misuse answered with typed errors.

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_net::testing::PeerNetworkError;
use simsync_ownership::prelude::*;
use simsync_ownership::testing::{Divergence, OwnershipPeers, OwnershipPeersBuilder, PeersError};

use super::harness::steps;

/// Floating bodies slowed by damping (so they come to rest): body 1 at the origin, body 2 at
/// z = 3, on every App; participant `shifted` (if any) has body 2 half a metre off.
fn two_bodies(shifted: Option<usize>) -> OwnershipPeersBuilder {
    let spawn = |app: &mut App, z2: f32| {
        for (id, at) in [(1, Vec3::ZERO), (2, Vec3::new(0.0, 0.0, z2))] {
            let body = (BodyNetId(BodyId(id)), Ownable, RigidBody::Dynamic);
            let shape = (Collider::cuboid(0.25, 0.25, 0.25), GravityScale(0.0));
            let damping = Damping {
                linear_damping: 1.0,
                angular_damping: 1.0,
            };
            app.world_mut()
                .spawn((body, shape, damping, Transform::from_translation(at)));
        }
    };
    OwnershipPeers::builder(3)
        .seed(5)
        .link(
            LinkConditionerConfig::PERFECT
                .with_latency(20, 5)
                .with_loss(2.0),
        )
        .server(move |app| spawn(app, 3.0))
        .participant(move |i, app| spawn(app, if Some(i) == shifted { 3.5 } else { 3.0 }))
}

#[test]
fn three_participants_converge_in_ten_lines() -> Result<(), PeersError> {
    let mut peers = OwnershipPeers::builder(3)
        .link(
            LinkConditionerConfig::PERFECT
                .with_latency(40, 5)
                .with_loss(2.0),
        )
        .scene(|app| {
            let body = (
                BodyNetId(BodyId(1)),
                Ownable,
                RigidBody::Dynamic,
                Collider::ball(0.5),
            );
            let slowed = (
                GravityScale(0.0),
                Damping {
                    linear_damping: 2.0,
                    angular_damping: 2.0,
                },
            );
            app.world_mut().spawn((body, slowed, Transform::default()));
        })
        .build()?;
    peers.command(0, BodyId(1), |body| {
        body.insert(Velocity::linear(Vec3::X * 4.0)).poke();
    })?;
    peers.run(5 * 64);
    let converged = peers.assert_converged(0.01);
    assert_eq!((converged.bodies, converged.participants), (1, 3));
    let x = peers.body_position(2, BodyId(1)).unwrap().x;
    assert!(x > 1.5, "moved and came to rest on every copy: {x}");
    assert_eq!(peers.server_owner(BodyId(1)), None, "released at rest");
    assert!(peers.owners_agree(BodyId(1)));
    Ok(())
}

#[test]
fn a_deliberately_diverging_participant_is_reported_by_body_and_participants() {
    let mut peers = two_bodies(Some(2)).build().unwrap();
    peers.run(steps(1_000));
    let Err(Divergence::Apart {
        body,
        spread_m,
        first,
        second,
        ..
    }) = peers.convergence(0.01)
    else {
        panic!("participant 2's body 2 is half a metre off");
    };
    assert_eq!(body, BodyId(2));
    assert!((spread_m - 0.5).abs() < 1e-4, "{spread_m}");
    assert_eq!((first.0, second.0), (0, 2));
    let error = peers.run_until_converged(0.01, 10).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("not converged after 10 steps: body 2: participants 0 and 2 are 0.5000 m"),
        "{error}"
    );
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        peers.assert_converged(0.01);
    }))
    .unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("body 2: participants 0 and 2"),
        "{message}"
    );
    // Within a metre they agree.
    assert_eq!(peers.convergence(1.0).unwrap().widest.unwrap().0, BodyId(2));
}

#[test]
fn a_paused_participant_catches_up() {
    let mut peers = two_bodies(None).build().unwrap();
    peers
        .command(0, BodyId(1), |b| {
            b.insert(Velocity::linear(Vec3::X)).poke();
        })
        .unwrap();
    peers.run(steps(500));
    peers.pause(2).unwrap();
    peers.run(steps(3_000));
    assert!(peers.is_paused(2));
    let server = *peers.entity_server().unwrap().stats();
    assert_eq!(server.participants_silent, 1, "3 s without a word");
    // Frozen where it was paused, behind the others.
    let behind =
        peers.body_position(0, BodyId(1)).unwrap().x - peers.body_position(2, BodyId(1)).unwrap().x;
    assert!(behind > 0.3, "{behind}");
    peers.resume(2).unwrap();
    assert!(!peers.is_paused(2));
    let took = peers.run_until_converged(0.01, steps(6_000)).unwrap();
    assert!(took <= steps(4_000), "caught up after {took} steps");
    peers.run(steps(500));
    peers.assert_converged(0.01);
    assert_eq!(peers.stats(2).unwrap().counted_silent, 1);
    assert_eq!(
        peers.entity_server().unwrap().stats().participants_returned,
        1
    );
    assert!(peers.owners_agree(BodyId(1)));
}

#[test]
fn a_killed_participant_rejoins_and_converges() {
    let mut peers = two_bodies(None).build().unwrap();
    // Participant 1 owns body 1, moving; participant 0 moved body 2 up and let it come to
    // rest: a rejoining participant's own scene has both where they started.
    peers
        .command(1, BodyId(1), |b| {
            b.insert(Velocity::linear(Vec3::X * 4.0)).poke();
        })
        .unwrap();
    peers
        .command(0, BodyId(2), |b| {
            b.insert(Velocity::linear(Vec3::Y)).poke();
        })
        .unwrap();
    peers.run(steps(1_000));
    let old_id = peers.id_of(1).unwrap();
    assert_eq!(peers.server_owner(BodyId(1)).map(|o| o.0), Some(old_id));
    peers.kill(1).unwrap();
    assert!(matches!(
        peers.kill(1),
        Err(PeersError::Network(PeerNetworkError::NotRunning(1)))
    ));
    assert!(peers.client(1).is_none());
    peers.run(steps(5_000));
    assert_eq!(peers.server_owner(BodyId(2)), None, "released at rest");
    peers.rejoin(1).unwrap();
    assert_eq!(peers.client_id(1), Some(4), "a new connection");
    peers.run_until_joined(steps(1_000)).unwrap();
    assert_ne!(peers.id_of(1), Some(old_id));
    let took = peers.run_until_converged(0.01, steps(1_000)).unwrap();
    assert!(took <= steps(300), "converged after {took} steps");
    let (b1, b2) = (
        peers.body_position(1, BodyId(1)).unwrap(),
        peers.body_position(1, BodyId(2)).unwrap(),
    );
    assert!(
        b1.x > 2.0 && b2.y > 0.5,
        "the rejoiner has them where the others moved them"
    );
}

#[test]
fn misuse_is_a_typed_error() {
    let mut peers = two_bodies(None).build().unwrap();
    assert!(matches!(
        peers.pause(7),
        Err(PeersError::Network(PeerNetworkError::UnknownPeer {
            peer: 7,
            peers: 3
        }))
    ));
    assert!(matches!(
        peers.rejoin(0),
        Err(PeersError::Network(PeerNetworkError::StillRunning(0)))
    ));
    assert!(matches!(
        peers.command(0, BodyId(99), |_| {}),
        Err(PeersError::NoSuchBody { participant: 0, .. })
    ));
    let bad = LinkConditionerConfig::PERFECT.with_loss(150.0);
    assert!(matches!(
        peers.set_link(0, bad),
        Err(PeersError::Network(PeerNetworkError::Network(_)))
    ));
    // A plugin that does not start is named.
    let refused = OwnershipPeers::builder(1)
        .ownership(|p| {
            p.with_config(OwnershipConfig {
                participant_silence_timeout: std::time::Duration::ZERO,
                ..OwnershipConfig::default()
            })
        })
        .build();
    assert!(
        matches!(&refused, Err(PeersError::Setup { app, .. }) if app == "entity server"),
        "{:?}",
        refused.err()
    );
}
