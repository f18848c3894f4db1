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

use super::state::DeterministicSession;
use super::stats::SessionStats;
use crate::input::SimInput;
use crate::source::{SnapshotReceived, SnapshotRejected};
use crate::tick::Tick;

/// A captured, encoded snapshot of the verified world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CapturedSnapshot {
    /// The verified tick it holds.
    pub tick: Tick,
    /// The verified checksum at `tick` (its header's).
    pub checksum: u64,
    /// The encoded snapshot.
    pub bytes: Vec<u8>,
}

/// How the exchange captures and loads snapshots: the snapshot module's functions for the
/// game's input type, installed by the plugin when snapshots are on.
#[derive(Resource, Clone, Copy)]
pub(crate) struct SnapshotHooks {
    /// Captures and encodes the verified world.
    pub capture: fn(&mut World) -> Result<CapturedSnapshot, String>,
    /// Decodes (at most `max_bytes`) and loads a snapshot; returns the loaded verified tick and
    /// the checksum of the loaded world at that tick.
    pub load: fn(&mut World, &[u8], usize) -> Result<(Tick, u64), String>,
    /// The largest snapshot decoded, in bytes.
    pub max_bytes: usize,
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
        .and_then(|s| s.source.due_snapshot_request(verified))
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
        .unwrap_or_else(|error| {
            warn!(
                "session client: snapshot of tick {} not served: {error}",
                snapshot.tick
            );
            Vec::new()
        }),
        Err(error) => {
            warn!("session client: snapshot not captured: {error}");
            Vec::new()
        }
    };
    if let Some(first) = chunks.first() {
        info!(
            "session client: serving a snapshot of tick {} ({} bytes) to the relay",
            first.tick, first.total_bytes
        );
    }
    if let Some(mut session) = world.get_resource_mut::<DeterministicSession<I>>() {
        session.source.answer_snapshot(request.request, chunks);
    }
}

/// Loads a snapshot the relay forwarded, or refuses it.
fn load_arrived<I: SimInput>(world: &mut World, hooks: SnapshotHooks) {
    let Some(snapshot) = world
        .get_resource_mut::<DeterministicSession<I>>()
        .and_then(|mut s| s.source.take_arrived_snapshot())
    else {
        return;
    };
    let size = snapshot.bytes.len();
    let reason = match (hooks.load)(world, &snapshot.bytes, hooks.max_bytes) {
        Ok((tick, checksum)) if (tick, checksum) == (snapshot.tick, snapshot.checksum) => None,
        Ok((tick, checksum)) => Some(format!(
            "the loaded world's checksum at tick {tick} is {checksum:#018x}; the snapshot \
             states {:#018x} at tick {}",
            snapshot.checksum, snapshot.tick
        )),
        Err(error) => Some(error),
    };
    let Some(mut session) = world.get_resource_mut::<DeterministicSession<I>>() else {
        return;
    };
    let session = &mut *session;
    match reason {
        None => {
            session
                .source
                .snapshot_loaded(snapshot.tick, &mut session.buffer);
            info!(
                "session client: loaded the relay's snapshot of tick {} ({size} bytes)",
                snapshot.tick
            );
            world.write_message(SnapshotReceived {
                tick: snapshot.tick,
                bytes: size,
            });
        }
        Some(reason) => {
            session.source.snapshot_refused(snapshot.request);
            warn!(
                "session client: snapshot of tick {} refused: {reason}",
                snapshot.tick
            );
            world.write_message(SnapshotRejected {
                tick: snapshot.tick,
                reason,
            });
        }
    }
}
