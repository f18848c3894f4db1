//! `sandbox room-config`: the room a dedicated server (`simsync-server`) hosts for this game.

use bevy_rapier3d::prelude::RigidBody;
use serde_json::json;
use simsync::prelude::PackedInput;
use simsync_server::{BodyProperties, BodySpec, OwnershipRoomConfig, RoomConfig, ShapeSpec};

use super::cli::RoomConfigArgs;
use super::driver::Failure;
use super::ownership::{NetBody, Setup};

/// `sandbox room-config`: prints this game's room for `simsync-server` as JSON.
///
/// # Errors
/// Exit code 2 for a scene that does not load.
pub fn print_room_config(args: &RoomConfigArgs) -> Result<(), Failure> {
    let room = if args.ownership {
        let setup = Setup::load(args.scene.as_deref(), args.participants)?;
        let bodies = setup
            .bodies
            .iter()
            .map(body_spec)
            .collect::<Result<_, _>>()?;
        RoomConfig::Ownership(OwnershipRoomConfig {
            physics_host: args.physics_host.then_some(true),
            ..OwnershipRoomConfig::new(args.participants, bodies)
        })
    } else {
        relay_room(args.players)?
    };
    let mut value = json!(room);
    if let Some(id) = args.id {
        value["id"] = json!(id);
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&value).unwrap_or_default()
    );
    Ok(())
}

/// A scene body as the server's room config gives it: id, kind, pose, and the shape, density,
/// friction and damping the participants give it (so the server's physics host simulates the
/// same body).
///
/// # Errors
/// Exit code 2 for a collider the room config has no shape for (the sandbox makes cuboids and
/// balls only).
fn body_spec(body: &NetBody) -> Result<BodySpec, Failure> {
    let shape = if let Some(cuboid) = body.collider.as_cuboid() {
        ShapeSpec::Cuboid {
            half_extents: cuboid.half_extents().to_array(),
        }
    } else if let Some(ball) = body.collider.as_ball() {
        ShapeSpec::Ball {
            radius: ball.radius(),
        }
    } else {
        return Err(Failure::input(format!(
            "body {} has a collider the room config cannot describe",
            body.id.0
        )));
    };
    let mut spec = BodySpec::new(
        body.id.0,
        body.kind == RigidBody::Fixed,
        body.transform.translation.to_array(),
    )
    .with_shape(shape);
    spec.rotation = body.transform.rotation.to_array();
    spec.properties = BodyProperties {
        density: body.density,
        friction: body.friction,
        linear_damping: body.damping.map_or(0.0, |d| d.linear_damping),
        angular_damping: body.damping.map_or(0.0, |d| d.angular_damping),
        ..BodyProperties::default()
    };
    Ok(spec)
}

/// The sandbox's relay room of `players`: its input type, 64 ticks a second, snapshots on.
///
/// # Errors
/// Exit code 2 for a player count the room config refuses.
pub fn relay_room(players: u8) -> Result<RoomConfig, Failure> {
    let mut room =
        RoomConfig::relay_for::<PackedInput>(players, 64, simsync_net::DEFAULT_MAX_INPUT_BYTES)
            .map_err(|e| Failure::input(e.to_string()))?;
    if let RoomConfig::Relay(relay) = &mut room {
        // The sandbox's clients serve snapshots: a room can take late joiners.
        relay.snapshots = true;
    }
    Ok(room)
}
