//! The entity server's physics host (ownership rule 21) and its check of owners' states
//! (rule 22), over the in-memory transport: an orphan lands in the same place on everyone, an
//! impossible state is refused and every copy goes on from the server's state.

use bevy::prelude::*;
use bevy_rapier3d::prelude::RapierPhysicsPlugin;
use simsync_net::{MemoryNetwork, NetAppExt, NetClock, NetServerPlugin};
use simsync_ownership::prelude::*;
use simsync_ownership::{BodyId, ParticipantId, RefusalReason};

use super::harness::{Body, Session, Setup, steps};

const HOST: ParticipantId = ParticipantId::ENTITY_SERVER;

fn setup(host: Option<PhysicsHostConfig>, state_limits: Option<StateLimits>) -> Setup {
    Setup {
        seed: 7,
        host,
        state_limits,
        ..Setup::default()
    }
}

/// The ground and a cube resting on it, the server hosting.
fn hosted_ground_and_cube(n: usize) -> Session {
    Session::with_setup(
        n,
        &[
            Body::ground(100, Vec3::new(0.0, -0.5, 0.0)),
            Body::falling(1, Vec3::new(0.0, 0.25, 0.0)),
        ],
        &setup(Some(PhysicsHostConfig::default()), None),
    )
}

/// A floating cube (body 1) at the origin, the server hosting.
fn hosted_floating(n: usize) -> Session {
    let floating = [Body::floating(1, Vec3::ZERO)];
    Session::with_setup(
        n,
        &floating,
        &setup(Some(PhysicsHostConfig::default()), None),
    )
}

/// Participant `owner` pokes floating body 1 and sets it moving along +x at 1 m/s.
fn owned_floating_body(s: &mut Session, owner: usize) {
    s.command(owner, 1, |e| {
        e.poke();
    });
    s.set_velocity(owner, 1, Vec3::X);
    s.run(steps(300));
    assert_eq!(s.server_owner(1), Some((s.id_of(owner), Priority::POKE)));
}

/// How far participant `i`'s copy of body 1 is from the server's state of it, m.
fn off_server(s: &Session, i: usize) -> f32 {
    let (server, _) = s.entity_server().server_state(BodyId(1)).expect("a state");
    s.body_on(i, 1).0.distance(server.position)
}

fn teleport(s: &mut Session, i: usize, by: Vec3) {
    let app = s.p(i);
    let e = Session::entity(app, 1);
    app.world_mut()
        .get_mut::<Transform>(e)
        .expect("Transform")
        .translation += by;
}

#[test]
fn an_orphan_thrown_by_a_participant_that_leaves_lands_in_the_same_place_on_everyone() {
    let mut s = hosted_ground_and_cube(3);
    s.run(steps(200));
    s.command(1, 1, |e| {
        e.poke();
    });
    s.set_velocity(1, 1, Vec3::new(3.0, 4.0, 1.0));
    s.run(steps(150));
    assert_eq!(s.server_owner(1), Some((s.id_of(1), Priority::POKE)));
    assert!(
        s.body_on(0, 1).0.y > 0.5,
        "in the air: {}",
        s.body_on(0, 1).0
    );
    s.kill(1).unwrap();
    s.run(4);
    assert_eq!(
        s.server_owner(1),
        Some((HOST, Priority::YIELD)),
        "taken at once"
    );
    for i in [0, 2] {
        assert_eq!(s.owner_on(i, 1).owner, Some(HOST), "participant {i}");
    }
    let landed = s.run_until(steps(8_000), |s| s.server_stats().host_releases >= 1);
    assert!(landed.is_some(), "the host never released it");
    s.run(steps(500));
    let stats = s.server_stats();
    assert_eq!(stats.host_takes, 1);
    assert_eq!(stats.disconnect_clears, 1);
    assert!(stats.host_states_published > 20, "{stats:?}");
    assert_eq!(s.server_owner(1), None);
    let at = s.body_on(0, 1).0;
    assert!(at.x > 1.0 && at.z > 0.3, "it flew: {at}");
    assert!((at.y - 0.25).abs() < 0.02, "on the ground: {at}");
    for i in [0, 2] {
        assert!(
            off_server(&s, i) < 0.01,
            "participant {i} {} m off",
            off_server(&s, i)
        );
        assert_eq!(s.stats(i).bids_sent, 0, "participant {i} never bid for it");
    }
    assert!(s.spread(1) < 0.01, "copies {} m apart", s.spread(1));
}

#[test]
fn a_body_the_host_holds_is_taken_back_by_a_poke() {
    let mut s = hosted_ground_and_cube(2);
    s.command(1, 1, |e| {
        e.poke();
    });
    s.set_velocity(1, 1, Vec3::new(2.0, 5.0, 0.0));
    s.run(steps(100));
    s.kill(1).unwrap();
    s.run(4);
    assert_eq!(s.server_owner(1), Some((HOST, Priority::YIELD)));
    s.command(0, 1, |e| {
        e.poke();
    });
    s.run(4);
    assert_eq!(s.server_owner(1), Some((s.id_of(0), Priority::POKE)));
}

#[test]
fn a_50_m_teleport_is_refused_and_every_participant_keeps_the_servers_state() {
    let mut s = hosted_floating(3);
    owned_floating_body(&mut s, 0);
    teleport(&mut s, 0, Vec3::new(50.0, 0.0, 0.0));
    s.run(steps(200));
    let stats = s.server_stats();
    assert_eq!(
        stats.state_updates_refused.get(RefusalReason::Teleported),
        1
    );
    assert_eq!(stats.owners_revoked, 1);
    assert_eq!(
        s.server_owner(1),
        Some((HOST, Priority::YIELD)),
        "the host took it"
    );
    let refused = &s.log(0).refused;
    assert!(
        refused
            .iter()
            .any(|r| r.reason == RefusalReason::Teleported),
        "{refused:?}"
    );
    for i in 0..3 {
        let (at, v) = s.body_on(i, 1);
        assert!(at.x < 2.0, "participant {i} at {at}");
        assert!((v.linear.x - 1.0).abs() < 0.01, "participant {i}: {v:?}");
        assert!(off_server(&s, i) < 0.05, "participant {i}");
    }
    assert!(s.spread(1) < 0.05, "copies {} m apart", s.spread(1));
}

#[test]
fn a_refused_owner_cannot_take_the_body_back_until_its_penalty_ends() {
    let mut s = hosted_floating(3);
    owned_floating_body(&mut s, 0);
    teleport(&mut s, 0, Vec3::new(50.0, 0.0, 0.0));
    s.run(steps(100));
    assert_eq!(s.server_owner(1), Some((HOST, Priority::YIELD)));
    let changes = s.ownership_changes();
    // Poked again at once: refused, the body stays the host's, no owner change is broadcast.
    s.command(0, 1, |e| {
        e.poke();
    });
    s.run(steps(100));
    assert_eq!(s.server_owner(1), Some((HOST, Priority::YIELD)));
    assert_eq!(s.ownership_changes(), changes);
    let stats = s.server_stats();
    assert!(
        stats.bids_refused.get(RefusalReason::Penalized) >= 1,
        "{stats:?}"
    );
    // Another participant's bid wins as ever.
    s.command(1, 1, |e| {
        e.poke();
    });
    s.run(steps(100));
    assert_eq!(s.server_owner(1), Some((s.id_of(1), Priority::POKE)));
    // After the 2 s penalty the first may bid again (and outbid nobody at equal POKE within
    // the lockout, but the bid is heard).
    s.run(steps(2_000));
    let before = s.server_stats().bids_refused.get(RefusalReason::Penalized);
    s.command(0, 1, |e| {
        e.grab();
    });
    s.run(steps(100));
    assert_eq!(
        s.server_stats().bids_refused.get(RefusalReason::Penalized),
        before
    );
    assert_eq!(s.server_owner(1), Some((s.id_of(0), Priority::GRAB)));
}

#[test]
fn a_run_of_small_jumps_is_refused_once_the_reach_is_spent() {
    let mut s = hosted_floating(3);
    owned_floating_body(&mut s, 0);
    // 5 m further every tick: 320 m/s.
    for _ in 0..steps(200) {
        teleport(&mut s, 0, Vec3::new(5.0, 0.0, 0.0));
        s.step();
    }
    s.run(steps(100));
    let stats = s.server_stats();
    assert!(
        stats.state_updates_refused.get(RefusalReason::Teleported) >= 1,
        "{stats:?}"
    );
    assert!(stats.owners_revoked >= 1);
    for i in 1..3 {
        let at = s.body_on(i, 1).0;
        // At most the 10 m reach and the 1 m/s it moved at, never the 64 m of jumps.
        assert!(at.x < 15.0, "participant {i} at {at}");
    }
}

#[test]
fn a_state_beyond_the_speed_limit_is_refused_and_the_body_keeps_its_speed() {
    let mut s = hosted_floating(3);
    owned_floating_body(&mut s, 0);
    s.set_velocity(0, 1, Vec3::new(80.0, 0.0, 0.0));
    s.run(steps(200));
    let stats = s.server_stats();
    assert_eq!(stats.state_updates_refused.get(RefusalReason::TooFast), 1);
    assert_eq!(stats.owners_revoked, 1);
    assert_ne!(s.server_owner(1).map(|(o, _)| o), Some(s.id_of(0)));
    for i in 0..3 {
        let (at, v) = s.body_on(i, 1);
        assert!((v.linear.x - 1.0).abs() < 0.01, "participant {i}: {v:?}");
        assert!(at.x < 2.0, "participant {i} at {at}");
    }
    assert!(s.spread(1) < 0.05, "copies {} m apart", s.spread(1));
}

#[test]
fn state_limits_work_without_the_host_from_the_last_accepted_state() {
    let floating = [Body::floating(1, Vec3::ZERO)];
    let limits = StateLimits::default();
    let mut s = Session::with_setup(3, &floating, &setup(None, Some(limits)));
    owned_floating_body(&mut s, 0);
    teleport(&mut s, 0, Vec3::new(0.0, 0.0, -50.0));
    s.run(steps(100));
    let stats = s.server_stats();
    assert_eq!(
        stats.state_updates_refused.get(RefusalReason::Teleported),
        1
    );
    assert_eq!((stats.owners_revoked, stats.host_takes), (1, 0));
    assert_eq!(s.server_owner(1), None);
    for i in 0..3 {
        let at = s.body_on(i, 1).0;
        assert!(at.z.abs() < 0.01 && at.x < 2.0, "participant {i} at {at}");
    }
}

#[test]
fn a_physics_host_without_rapier_is_a_setup_error_and_the_server_runs_on() {
    let network = MemoryNetwork::perfect(1);
    let mut server = App::new();
    server
        .add_plugins((
            MinimalPlugins,
            NetServerPlugin::default().with_clock(NetClock::fixed_hz(64)),
        ))
        .add_plugins(
            OwnershipPlugin::entity_server().with_physics_host(PhysicsHostConfig::default()),
        )
        .insert_net_server(network.server_transport().unwrap());
    server.finish();
    server.update();
    let error = server
        .world()
        .get_resource::<simsync_ownership::OwnershipSetupError>();
    assert!(
        error.is_some_and(|e| e.0.to_string().contains("RapierPhysicsPlugin")),
        "{error:?}"
    );
    let state = server.world().resource::<EntityServer>();
    assert!(state.physics_host().is_none());
    // With Rapier it starts.
    let mut hosted = App::new();
    hosted
        .add_plugins((
            MinimalPlugins,
            TransformPlugin,
            RapierPhysicsPlugin::<bevy_rapier3d::prelude::NoUserData>::default(),
            NetServerPlugin::default().with_clock(NetClock::fixed_hz(64)),
        ))
        .add_plugins(
            OwnershipPlugin::entity_server().with_physics_host(PhysicsHostConfig::default()),
        )
        .insert_net_server(MemoryNetwork::perfect(2).server_transport().unwrap());
    hosted.finish();
    hosted.update();
    assert!(
        !hosted
            .world()
            .contains_resource::<simsync_ownership::OwnershipSetupError>()
    );
    assert!(
        hosted
            .world()
            .resource::<EntityServer>()
            .physics_host()
            .is_some()
    );
}
