//! The Apps of an ownership session: the entity server (ids, kinds and transforms, no physics)
//! and a participant (its own Rapier world and a scripted actor), each stepping a simulated
//! 1/64 s per update. The game parts ([`add_server_scene`], [`add_participant_game`]) are
//! shared by the in-process run (on `simsync_ownership::testing::OwnershipPeers`) and the UDP
//! roles (whole Apps, [`server_app`] and [`participant_app`]).

use std::sync::Arc;

use bevy::log::LogPlugin;
use bevy::prelude::*;
use bevy_rapier3d::prelude::{
    Collider, ColliderMassProperties, Friction, NoUserData, RapierPhysicsPlugin, RigidBody,
    Sleeping, TimestepMode, Velocity,
};
use simsync_net::ServerTransport;
use simsync_net::{ClientTransport, NetAppExt, NetClientPlugin, NetClock, NetServerPlugin};
use simsync_ownership::{BodyNetId, Ownable, OwnershipPlugin, ParticipantAvatar};

use super::DT;
use super::actors::{Actor, act};
use super::bodies::{AvatarBody, NetBody};
use super::script::Script;

/// An App with `MinimalPlugins` and, if given, log output.
fn headless_app(log: Option<LogPlugin>) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    if let Some(log) = log {
        app.add_plugins(log);
    }
    app
}

/// The entity-server App over `transport`, bodies registered by id and kind; `delta`:
/// ownership rule 20.
pub fn server_app(
    bodies: &[NetBody],
    transport: impl Into<ServerTransport>,
    log: Option<LogPlugin>,
    delta: bool,
) -> App {
    let mut app = headless_app(log);
    app.add_plugins(NetServerPlugin::default().with_clock(NetClock::Fixed(DT)))
        .add_plugins(OwnershipPlugin::entity_server().with_delta_encoding(delta))
        .insert_net_server(transport);
    add_server_scene(&mut app, bodies, false);
    app
}

/// The entity server's part of the scene: every body by id, kind and transform — and, for the
/// physics host (`physics`), the participants' colliders, friction, density and damping too.
pub fn add_server_scene(app: &mut App, bodies: &[NetBody], physics: bool) {
    for body in bodies {
        let mut entity = app
            .world_mut()
            .spawn((BodyNetId(body.id), body.kind, body.transform));
        if physics {
            entity.insert(shape(body));
            if body.kind == RigidBody::Dynamic {
                entity.insert(motion(body));
            }
            if let Some(damping) = body.damping {
                entity.insert(damping);
            }
        }
    }
}

/// `body`'s shape, the same in every world that simulates it: collider and friction.
fn shape(body: &NetBody) -> (Collider, Friction) {
    (body.collider.clone(), Friction::coefficient(body.friction))
}

/// A dynamic body's motion, the same in every world that simulates it: density, velocity and
/// sleep state.
fn motion(body: &NetBody) -> (ColliderMassProperties, Velocity, Sleeping) {
    (
        ColliderMassProperties::Density(body.density),
        Velocity::zero(),
        Sleeping::default(),
    )
}

/// A participant App over `transport` with its own Rapier world, playing trace participant
/// `index`; `delta`: ownership rule 20.
pub fn participant_app(
    bodies: &[NetBody],
    index: u8,
    script: Arc<Script>,
    transport: impl Into<ClientTransport>,
    log: Option<LogPlugin>,
    delta: bool,
) -> App {
    let mut app = headless_app(log);
    app.add_plugins((
        TransformPlugin,
        RapierPhysicsPlugin::<NoUserData>::default(),
    ))
    .add_plugins(NetClientPlugin::default().with_clock(NetClock::Fixed(DT)))
    .add_plugins(
        OwnershipPlugin::participant()
            .with_name(format!("participant {index}"))
            .with_delta_encoding(delta),
    )
    .insert_net_client(transport);
    add_participant_game(&mut app, bodies, index, script);
    app
}

/// A participant's part of the game: the physics step, the scripted actor of trace participant
/// `index` and its copy of every body.
pub fn add_participant_game(app: &mut App, bodies: &[NetBody], index: u8, script: Arc<Script>) {
    // The physics steps the same simulated 1/64 s as the network clock, so the ownership rules'
    // timings (rest delay, silence expiry) are in step with the bodies' motion.
    app.insert_resource(TimestepMode::Fixed {
        dt: DT.as_secs_f32(),
        substeps: 1,
    })
    .insert_resource(Actor::new(index, script))
    .add_systems(Update, act);
    for body in bodies {
        spawn_body(app.world_mut(), body, index);
    }
}

/// Spawns `body` in participant `index`'s world.
fn spawn_body(world: &mut World, body: &NetBody, index: u8) {
    let mut entity = world.spawn((BodyNetId(body.id), body.kind, body.transform, shape(body)));
    if body.kind == RigidBody::Dynamic {
        entity.insert((Ownable, motion(body)));
    }
    if let Some(damping) = body.damping {
        entity.insert(damping);
    }
    if let Some(owner) = body.avatar_of {
        entity.insert(AvatarBody);
        if owner == index {
            entity.insert(ParticipantAvatar);
        }
    }
}
