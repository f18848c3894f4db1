//! An ownership room over real UDP: participants enter it with tokens, an ownership change of
//! one reaches the other through the room's entity server, and ending the room tells every
//! participant why (`RoomClosing`).

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync::net::renet_netcode::ConnectToken;
use simsync::net::{MatchEndReason, NetAppExt, NetClientPlugin, NetClock, UdpClientTransport};
use simsync::ownership::prelude::*;
use simsync_server::{BodySpec, OwnershipRoomConfig, RoomConfig, RoomId, RoomState};

use crate::common::*;

/// The ground (fixed, id 0) and two boxes: `(id, fixed, centre, half extent)`.
const BODIES: [(u64, bool, Vec3, f32); 3] = [
    (0, true, Vec3::new(0.0, -0.5, 0.0), 10.0),
    (1, false, Vec3::new(-1.0, 0.25, 0.0), 0.25),
    (2, false, Vec3::new(1.0, 0.25, 0.0), 0.25),
];

fn room() -> RoomConfig {
    RoomConfig::Ownership(OwnershipRoomConfig::new(
        2,
        BODIES
            .iter()
            .map(|&(id, fixed, at, _)| BodySpec::new(id, fixed, at.to_array()))
            .collect(),
    ))
}

fn participant(token: ConnectToken) -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, TransformPlugin))
        .add_plugins(RapierPhysicsPlugin::<NoUserData>::default())
        .insert_resource(TimestepMode::Fixed {
            dt: FRAME.as_secs_f32(),
            substeps: 1,
        })
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::Fixed(FRAME)))
        .add_plugins(OwnershipPlugin::participant());
    for (id, fixed, at, half) in BODIES {
        let kind = if fixed {
            RigidBody::Fixed
        } else {
            RigidBody::Dynamic
        };
        let mut body = app.world_mut().spawn((
            BodyNetId(BodyId(id)),
            kind,
            Transform::from_translation(at),
            Collider::cuboid(half, if fixed { 0.5 } else { half }, half),
        ));
        if !fixed {
            body.insert(Ownable);
        }
    }
    let transport = UdpClientTransport::secure(token, loopback()).expect("client socket");
    app.insert_net_client(transport);
    app.finish();
    app.cleanup();
    app
}

fn me(app: &App) -> Option<ParticipantId> {
    app.world().resource::<OwnershipClient>().me()
}

#[test]
fn participants_meet_in_their_room_and_are_told_when_it_ends() {
    let mut server = server();
    let id = RoomId(8);
    server.rooms_mut().create(Some(id), room()).unwrap();
    let mut apps = vec![
        participant(token(&server, id, 0, 1)),
        participant(token(&server, id, 1, 2)),
    ];
    run_until(&mut server, &mut apps, 400, |_, apps| {
        apps.iter().all(|a| me(a).is_some())
    });
    let summary = server.rooms().summary(id).unwrap();
    assert_eq!(summary.state, RoomState::Running);
    assert_eq!(summary.ownership.as_ref().unwrap().participants, 2);
    // Participant 0 grabs box 1: participant 1 hears of the new owner through the room.
    let grabber = me(&apps[0]).unwrap();
    let body = apps[0]
        .world()
        .resource::<OwnershipClient>()
        .entity_of(BodyId(1))
        .unwrap();
    apps[0].world_mut().commands().entity(body).grab();
    apps[0].world_mut().flush();
    run_until(&mut server, &mut apps, 400, |_, apps| {
        let other = apps[1].world().resource::<OwnershipClient>();
        other
            .entity_of(BodyId(1))
            .and_then(|e| apps[1].world().get::<SimulationOwner>(e))
            .is_some_and(|owner| owner.owner == Some(grabber))
    });
    // The operator ends the room: both participants are told why.
    server
        .rooms_mut()
        .end(id, MatchEndReason::ServerShutdown)
        .unwrap();
    run_until(&mut server, &mut apps, 200, |_, apps| {
        apps.iter().all(|a| {
            a.world().resource::<OwnershipClient>().closing()
                == Some(&MatchEndReason::ServerShutdown)
        })
    });
    run_until(&mut server, &mut apps, 200, |s, _| {
        s.rooms().room(id).is_none()
    });
    assert_eq!(server.rooms().summary(id).unwrap().state, RoomState::Ended);
}
