//! Snapshot exchange of a networked client, outside the session update (the capture and the
//! load need the session and the simulation worlds in the main world,
//! [late join](crate::rules#late-join-and-rejoin-from-a-snapshot)):
//! - as a buddy, once its verified tick reaches the relay's request, it captures its verified
//!   world, encodes it and hands the chunks to the relay client (nothing: unavailable);
//! - as a joiner, it decodes a snapshot the relay forwarded (within the configured size), loads
//!   it, and accepts it only if the loaded world's checksum at its tick is the one the chunks
//!   state ([`SnapshotReceived`]); otherwise it tells the relay ([`SnapshotRejected`]).

use bevy::log::{info, warn};
use bevy::prelude::*;

use super::session_snapshot::SnapshotRewind;
use crate::input::SimInput;
use crate::session::DeterministicSession;
use crate::stats::SessionStats;
use crate::tick::Tick;

/// A verified snapshot arrived from the relay and was loaded (written on the joiner's app).
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub struct SnapshotReceived {
    /// The snapshot's verified tick: the session continues from the next one.
    pub tick: Tick,
    /// The encoded snapshot's size.
    pub bytes: usize,
}

/// This client was resynced: the relay named it desynced against its authority (an
/// authoritative room) and sent it a snapshot of the authority's verified world, which it
/// loaded and goes on from (written on the client's app; the session goes from `Desynced` back
/// to `Running`). Its desync dump, if it writes dumps, was written before.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub struct Resynced {
    /// The verified tick this client had reached on its own, diverged, world.
    pub from_tick: Tick,
    /// The authority's verified tick it loaded: the session goes on from the next one.
    pub to_tick: Tick,
}

/// A snapshot from the relay was refused (written on the joiner's app); the relay is told and
/// serves one from another client.
#[derive(Message, Debug, Clone, PartialEq, Eq, Reflect)]
pub struct SnapshotRejected {
    /// The snapshot's tick as its chunks state it.
    pub tick: Tick,
    /// Why: the decode or load error, or the checksum mismatch.
    pub reason: String,
}

/// A captured, encoded snapshot of the verified world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedSnapshot {
    /// The verified tick it holds.
    pub tick: Tick,
    /// The verified checksum at `tick` (its header's).
    pub checksum: u64,
    /// The encoded snapshot.
    pub bytes: Vec<u8>,
}

/// Decodes (at most the given bytes) and loads an encoded snapshot into the main world;
/// returns the loaded verified tick and the loaded world's checksum at it.
pub type SnapshotLoad = fn(&mut World, &[u8], usize) -> Result<(Tick, u64), String>;

/// How a networked client captures and loads the snapshots it exchanges with the relay
/// ([late join](crate::rules#late-join-and-rejoin-from-a-snapshot)): a resource of the client's
/// app. Without it, the client answers every request unavailable and keeps snapshots it is
/// sent unloaded. The plugin installs the snapshot core's capture and load when
/// [`NetworkSessionConfig::snapshots`](crate::NetworkSessionConfig::snapshots) is set; replace
/// it to wrap them (an audit log, a test that plays a lying buddy).
#[derive(Resource, Clone, Copy)]
pub struct SnapshotHooks {
    /// Captures and encodes the verified world.
    pub capture: fn(&mut World) -> Result<CapturedSnapshot, String>,
    /// Decodes (at most `max_bytes`) and loads a snapshot; returns the loaded verified tick and
    /// the checksum of the loaded world at that tick.
    pub load: SnapshotLoad,
    /// The largest snapshot decoded, in bytes.
    pub max_bytes: usize,
}

impl SnapshotHooks {
    /// The snapshot core's capture ([`capture_snapshot`](crate::capture_snapshot), encoded) and
    /// load ([`WorldSnapshot::decode`](crate::WorldSnapshot::decode) within `max_bytes`, then
    /// [`load_snapshot`](crate::load_snapshot), then the loaded verified world's checksum) for
    /// input type `I`.
    pub fn core<I: SimInput>(max_bytes: usize) -> Self {
        Self {
            capture: core_capture::<I>,
            load: core_load::<I>,
            max_bytes,
        }
    }
}

fn core_capture<I: SimInput>(world: &mut World) -> Result<CapturedSnapshot, String> {
    let snapshot = crate::capture_snapshot::<I>(world).map_err(|e| e.to_string())?;
    Ok(CapturedSnapshot {
        tick: snapshot.header.tick,
        checksum: snapshot.header.checksum,
        bytes: snapshot.encode(),
    })
}

fn core_load<I: SimInput>(
    world: &mut World,
    bytes: &[u8],
    max_bytes: usize,
) -> Result<(Tick, u64), String> {
    let snapshot = crate::WorldSnapshot::decode(bytes, max_bytes).map_err(|e| e.to_string())?;
    let tick = crate::load_snapshot::<I>(world, &snapshot).map_err(|e| e.to_string())?;
    let checksum = world
        .get_resource_mut::<crate::SimulationWorlds>()
        .ok_or_else(|| "no simulation worlds".to_string())?
        .verified_checksum();
    Ok((tick, checksum))
}

/// The exchange system (see the module docs); runs after the session update.
pub(crate) fn exchange_snapshots<I: SimInput>(world: &mut World) {
    let Some(hooks) = world.get_resource::<SnapshotHooks>().copied() else {
        return;
    };
    serve_request::<I>(world, hooks);
    load_arrived::<I>(world, hooks);
}

/// Answers the relay's request once the verified tick reached it.
fn serve_request<I: SimInput>(world: &mut World, hooks: SnapshotHooks) {
    let verified = world
        .get_resource::<SessionStats>()
        .map_or(0, |s| s.verified_tick);
    let Some(request) = world
        .get_resource::<DeterministicSession<I>>()
        .and_then(|s| s.link()?.due_snapshot_request(verified))
    else {
        return;
    };
    let chunks = match (hooks.capture)(world) {
        Ok(snapshot) => simsync_net::split_snapshot(
            request.request,
            snapshot.tick,
            snapshot.checksum,
            &snapshot.bytes,
            request.max_bytes,
        )
        .map_err(|error| format!("snapshot of tick {} not split: {error}", snapshot.tick)),
        Err(error) => Err(format!("snapshot not captured: {error}")),
    };
    let chunks = chunks.unwrap_or_else(|reason| {
        crate::warning::report(
            world,
            crate::warning::SessionWarning::SnapshotNotServed { reason },
        );
        Vec::new()
    });
    if let Some(first) = chunks.first() {
        info!(
            "session client: serving a snapshot of tick {} ({} bytes) to the relay",
            first.tick, first.total_bytes
        );
    }
    if let Some(link) = world
        .get_resource_mut::<DeterministicSession<I>>()
        .and_then(|s| s.into_inner().link_mut())
    {
        link.answer_snapshot(request.request, chunks);
    }
    publish_network_stats::<I>(world);
}

/// Copies the relay client's counters into [`SessionStats`] now (the session update publishes
/// them only when it runs to its end).
fn publish_network_stats<I: SimInput>(world: &mut World) {
    let network = world
        .get_resource::<DeterministicSession<I>>()
        .and_then(|s| Some(s.link()?.stats().clone()));
    if let (Some(network), Some(mut stats)) = (network, world.get_resource_mut::<SessionStats>()) {
        stats.network = Some(network);
    }
}

/// Loads a snapshot the relay forwarded, or refuses it.
fn load_arrived<I: SimInput>(world: &mut World, hooks: SnapshotHooks) {
    let Some(snapshot) = world
        .get_resource_mut::<DeterministicSession<I>>()
        .and_then(|s| s.into_inner().link_mut()?.take_arrived_snapshot())
    else {
        return;
    };
    let before = world
        .get_resource::<DeterministicSession<I>>()
        .map_or(0, DeterministicSession::verified_tick);
    let resync = world
        .get_resource::<DeterministicSession<I>>()
        .and_then(DeterministicSession::link)
        .is_some_and(|link| link.awaiting_resync());
    if resync {
        world.insert_resource(SnapshotRewind);
    }
    let refused = load_checked(world, hooks, &snapshot);
    world.remove_resource::<SnapshotRewind>();
    match refused {
        None => on_loaded::<I>(world, &snapshot, before, resync),
        Some(reason) => on_refused::<I>(world, &snapshot, reason),
    }
    publish_network_stats::<I>(world);
}

/// Loads `snapshot` with `hooks`; why it is refused, if it is: a load error, or a loaded world
/// whose tick and checksum are not the ones the snapshot states.
fn load_checked(
    world: &mut World,
    hooks: SnapshotHooks,
    snapshot: &simsync_net::AssembledSnapshot,
) -> Option<String> {
    match (hooks.load)(world, &snapshot.bytes, hooks.max_bytes) {
        Ok((tick, checksum)) if (tick, checksum) == (snapshot.tick, snapshot.checksum) => None,
        Ok((tick, checksum)) => Some(format!(
            "the loaded world's checksum at tick {tick} is {checksum:#018x}; the snapshot \
             states {:#018x} at tick {}",
            snapshot.checksum, snapshot.tick
        )),
        Err(error) => Some(error),
    }
}

/// The relay's snapshot was loaded: the input path and the link go on from its tick (a resync
/// from `before` is reported as [`Resynced`]), and
/// [`SnapshotReceived`] is written.
fn on_loaded<I: SimInput>(
    world: &mut World,
    snapshot: &simsync_net::AssembledSnapshot,
    before: Tick,
    resync: bool,
) {
    let Some(mut session) = world.get_resource_mut::<DeterministicSession<I>>() else {
        return;
    };
    let Some(link) = session.link_mut() else {
        return;
    };
    if resync {
        link.resynced(before, snapshot.tick);
    }
    session.relay_snapshot_loaded(snapshot.tick);
    if resync {
        info!(
            "session client: resynced from the authority's snapshot of tick {} (this client \
             was at verified tick {before})",
            snapshot.tick
        );
        world.write_message(Resynced {
            from_tick: before,
            to_tick: snapshot.tick,
        });
    }
    let size = snapshot.bytes.len();
    info!(
        "session client: loaded the relay's snapshot of tick {} ({size} bytes)",
        snapshot.tick
    );
    world.write_message(SnapshotReceived {
        tick: snapshot.tick,
        bytes: size,
    });
}

/// The relay's snapshot was refused for `reason`: the link asks for another, and
/// [`SnapshotRejected`] is written.
fn on_refused<I: SimInput>(
    world: &mut World,
    snapshot: &simsync_net::AssembledSnapshot,
    reason: String,
) {
    let Some(link) = world
        .get_resource_mut::<DeterministicSession<I>>()
        .and_then(|s| s.into_inner().link_mut())
    else {
        return;
    };
    link.snapshot_refused(snapshot.request);
    warn!(
        "session client: snapshot of tick {} refused: {reason}",
        snapshot.tick
    );
    world.write_message(SnapshotRejected {
        tick: snapshot.tick,
        reason,
    });
}
