//! `sandbox room-config`: the room a dedicated server (`simsync-server`) hosts for this game.

use serde_json::json;
use simsync::prelude::PackedInput;
use simsync_server::{BodySpec, OwnershipRoomConfig, RoomConfig};

use super::cli::RoomConfigArgs;
use super::driver::Failure;
use super::ownership::Setup;

/// `sandbox room-config`: prints this game's room for `simsync-server` as JSON.
///
/// # Errors
/// Exit code 2 for a scene that does not load.
pub fn print_room_config(args: &RoomConfigArgs) -> Result<(), Failure> {
    let room = if args.ownership {
        let setup = Setup::load(args.scene.as_deref(), args.participants)?;
        RoomConfig::Ownership(OwnershipRoomConfig {
            participants: args.participants,
            tick_rate_hz: 64,
            bodies: setup
                .bodies
                .iter()
                .map(|body| BodySpec {
                    id: body.id.0,
                    fixed: body.kind == bevy_rapier3d::prelude::RigidBody::Fixed,
                    position: body.transform.translation.to_array(),
                    rotation: body.transform.rotation.to_array(),
                })
                .collect(),
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
