//! The stock server's physics host over real UDP: an ownership room whose bodies carry shapes
//! simulates them in the server's own Rapier world, flies and releases the bodies of a
//! participant that leaves mid-throw, and refuses an owner's teleport.

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync::net::renet_netcode::ConnectToken;
use simsync::net::{ClientTransport, NetAppExt, NetClientPlugin, NetClock, UdpClientTransport};
use simsync::ownership::prelude::*;
use simsync_ownership::{EntityServer, RefusalReason};
use simsync_server::{
    BodyProperties, BodySpec, CreateRoomError, DedicatedServer, OwnershipRoomConfig, RoomConfig,
    RoomConfigError, RoomId, ShapeSpec,
};

use crate::common::*;

const HOST: ParticipantId = ParticipantId::ENTITY_SERVER;

/// The ground (fixed, id 0) and a 0.5 m box (id 1) resting on it, damped so it settles soon.
fn ground_and_box() -> Vec<BodySpec> {
    let mut cube = BodySpec::new(1, false, [0.0, 0.25, 0.0]).with_shape(ShapeSpec::Cuboid {
        half_extents: [0.25; 3],
    });
    cube.properties = BodyProperties {
        friction: 0.8,
        linear_damping: 0.5,
        angular_damping: 0.5,
        ..BodyProperties::default()
    };
    vec![
        BodySpec::new(0, true, [0.0, -0.5, 0.0]).with_shape(ShapeSpec::Cuboid {
            half_extents: [20.0, 0.5, 20.0],
        }),
        cube,
    ]
}

/// A ball (id 1) floating at the origin: a velocity given to it lasts.
fn floating_ball() -> Vec<BodySpec> {
    let mut ball = BodySpec::new(1, false, [0.0; 3]).with_shape(ShapeSpec::Ball { radius: 0.3 });
    ball.properties.gravity_scale = 0.0;
    vec![ball]
}

/// The participants' copy of a body: the collider and properties the room's spec gives.
fn body_bundle(spec: &BodySpec) -> impl Bundle {
    let p = spec.properties;
    let collider = match spec.shape.expect("every test body has a shape") {
        ShapeSpec::Cuboid {
            half_extents: [x, y, z],
        } => Collider::cuboid(x, y, z),
        ShapeSpec::Ball { radius } => Collider::ball(radius),
        ShapeSpec::Capsule {
            half_height,
            radius,
        } => Collider::capsule_y(half_height, radius),
    };
    (
        BodyNetId(BodyId(spec.id)),
        if spec.fixed {
            RigidBody::Fixed
        } else {
            RigidBody::Dynamic
        },
        Transform::from_translation(Vec3::from_array(spec.position)),
        collider,
        ColliderMassProperties::Density(p.density),
        Friction::coefficient(p.friction),
        Damping {
            linear_damping: p.linear_damping,
            angular_damping: p.angular_damping,
        },
        GravityScale(p.gravity_scale),
        Velocity::zero(),
    )
}

fn participant(token: ConnectToken, bodies: &[BodySpec]) -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, TransformPlugin))
        .add_plugins(RapierPhysicsPlugin::<NoUserData>::default())
        .insert_resource(TimestepMode::Fixed {
            dt: FRAME.as_secs_f32(),
            substeps: 1,
        })
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::Fixed(FRAME)))
        .add_plugins(OwnershipPlugin::participant());
    for spec in bodies {
        let mut body = app.world_mut().spawn(body_bundle(spec));
        if !spec.fixed {
            body.insert(Ownable);
        }
    }
    let transport = UdpClientTransport::secure(token, loopback()).expect("client socket");
    app.insert_net_client(transport);
    app.finish();
    app.cleanup();
    app
}

/// A physics-hosting server (`--physics-host`) with room `id` of two participants on `bodies`,
/// both joined.
fn hosted(id: RoomId, bodies: Vec<BodySpec>) -> (DedicatedServer, Vec<App>) {
    let mut server = server_with(|config| config.physics_host = true);
    let room = RoomConfig::Ownership(OwnershipRoomConfig::new(2, bodies.clone()));
    server.rooms_mut().create(Some(id), room).unwrap();
    let mut apps = vec![
        participant(token(&server, id, 0, 1), &bodies),
        participant(token(&server, id, 1, 2), &bodies),
    ];
    run_until(&mut server, &mut apps, 400, |_, apps| {
        apps.iter().all(|a| me(a).is_some())
    });
    (server, apps)
}

fn me(app: &App) -> Option<ParticipantId> {
    app.world().resource::<OwnershipClient>().me()
}

/// `read` of room `id`'s entity server, run on the room's worker.
fn on_entity_server<R: Send + 'static>(
    server: &DedicatedServer,
    id: RoomId,
    read: impl FnOnce(&EntityServer) -> R + Send + 'static,
) -> R {
    server
        .rooms()
        .inspect(id, |room| room.entity_server().map(read))
        .flatten()
        .expect("the room's entity server")
}

fn body_of(app: &App) -> Entity {
    app.world()
        .resource::<OwnershipClient>()
        .entity_of(BodyId(1))
        .expect("body 1")
}

/// Participant `app`'s view of body 1: its owner, position and velocity.
fn seen(app: &App) -> (Option<ParticipantId>, Vec3, Velocity) {
    let e = body_of(app);
    let world = app.world();
    (
        world.get::<SimulationOwner>(e).and_then(|o| o.owner),
        world.get::<Transform>(e).expect("Transform").translation,
        *world.get::<Velocity>(e).expect("Velocity"),
    )
}

/// Participant `app` pokes body 1 and sets it moving at `v`.
fn throw(app: &mut App, v: Vec3) {
    let e = body_of(app);
    app.world_mut().commands().entity(e).poke();
    app.world_mut().flush();
    app.world_mut()
        .get_mut::<Velocity>(e)
        .expect("Velocity")
        .linear = v;
}

#[test]
fn the_stock_server_flies_and_releases_the_box_of_a_participant_that_left_mid_throw() {
    let id = RoomId(21);
    let (mut server, mut apps) = hosted(id, ground_and_box());
    let thrower = me(&apps[1]).unwrap();
    throw(&mut apps[1], Vec3::new(2.0, 4.0, 0.0));
    run_until(&mut server, &mut apps, 200, |_, apps| {
        let (owner, at, _) = seen(&apps[0]);
        owner == Some(thrower) && at.y > 0.6
    });
    // Mid-flight, the thrower leaves.
    apps[1]
        .world_mut()
        .resource_mut::<OwnershipClient>()
        .leave();
    apps[1]
        .world_mut()
        .resource_mut::<ClientTransport>()
        .disconnect();
    let mut stayer = vec![apps.remove(0)];
    run_until(&mut server, &mut stayer, 100, |_, apps| {
        seen(&apps[0]).0 == Some(HOST)
    });
    assert!(seen(&stayer[0]).1.y > 0.3, "taken in the air");
    // The server flies it to the ground and lets it go there.
    run_until(&mut server, &mut stayer, 1_000, |_, apps| {
        seen(&apps[0]).0.is_none()
    });
    let stats = on_entity_server(&server, id, |es| *es.stats());
    assert_eq!(stats.disconnect_clears, 1, "{stats:?}");
    assert_eq!(stats.host_takes, 1, "{stats:?}");
    assert_eq!(stats.host_releases, 1, "{stats:?}");
    assert!(stats.host_states_published > 10, "{stats:?}");
    let (_, at, v) = seen(&stayer[0]);
    assert!(at.x > 0.5, "it flew: {at}");
    assert!((at.y - 0.25).abs() < 0.05, "on the ground: {at}");
    assert!(v.linear.length() < 0.1, "at rest: {v:?}");
    // The admin API shows the host at work.
    let summary = server.rooms().summary(id).unwrap().ownership.unwrap();
    assert!(summary.physics_host);
    assert_eq!((summary.host_takes, summary.host_releases), (1, 1));
    let (server_state, _) = on_entity_server(&server, id, |es| es.server_state(BodyId(1)).unwrap());
    assert!(
        server_state.position.distance(at) < 0.05,
        "{at} vs {server_state:?}"
    );
}

#[test]
fn the_stock_server_refuses_a_teleporting_owner() {
    let id = RoomId(22);
    let (mut server, mut apps) = hosted(id, floating_ball());
    let owner = me(&apps[0]).unwrap();
    throw(&mut apps[0], Vec3::X);
    run_until(&mut server, &mut apps, 200, |_, apps| {
        let (seen_owner, at, _) = seen(&apps[1]);
        seen_owner == Some(owner) && at.x > 0.2
    });
    // The owner moves it 50 m at once.
    let e = body_of(&apps[0]);
    apps[0]
        .world_mut()
        .get_mut::<Transform>(e)
        .expect("Transform")
        .translation
        .x += 50.0;
    run_until(&mut server, &mut apps, 100, |s, _| {
        on_entity_server(s, id, |es| {
            es.stats()
                .state_updates_refused
                .get(RefusalReason::Teleported)
        }) >= 1
    });
    run_until(&mut server, &mut apps, 100, |_, apps| {
        apps.iter().all(|a| seen(a).0 == Some(HOST))
    });
    let stats = on_entity_server(&server, id, |es| *es.stats());
    assert_eq!(stats.owners_revoked, 1, "{stats:?}");
    let summary = server.rooms().summary(id).unwrap().ownership.unwrap();
    assert_eq!(
        summary.state_updates_refused,
        stats.state_updates_refused.total()
    );
    assert!(summary.state_updates_refused >= 1);
    for (i, app) in apps.iter().enumerate() {
        let (_, at, v) = seen(app);
        assert!(at.x < 3.0, "participant {i} keeps the server's state: {at}");
        assert!((v.linear.x - 1.0).abs() < 0.05, "participant {i}: {v:?}");
    }
}

#[test]
fn a_hosted_room_with_a_bare_dynamic_body_is_refused() {
    let mut server = server();
    let mut bodies = ground_and_box();
    bodies.push(BodySpec::new(2, false, [1.0, 0.25, 0.0]));
    let room = OwnershipRoomConfig {
        physics_host: Some(true),
        ..OwnershipRoomConfig::new(2, bodies.clone())
    };
    assert_eq!(
        server.rooms_mut().create(None, RoomConfig::Ownership(room)),
        Err(CreateRoomError::Config(RoomConfigError::ShapeMissing(2)))
    );
    // Under the server's switch alone, the same room is relayed (no host), not refused.
    let mut server = server_with(|config| config.physics_host = true);
    let id = server
        .rooms_mut()
        .create(
            None,
            RoomConfig::Ownership(OwnershipRoomConfig::new(2, bodies)),
        )
        .unwrap();
    let RoomConfig::Ownership(made) = server.rooms().room(id).unwrap().config() else {
        panic!("an ownership room")
    };
    assert_eq!(made.physics_host, Some(false));
    assert!(on_entity_server(&server, id, |es| es
        .physics_host()
        .is_none()));
}
