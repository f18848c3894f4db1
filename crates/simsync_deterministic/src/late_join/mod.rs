//! Late join, rejoin and resync: a session's snapshots and their exchange with the relay
//! ([snapshots](crate::rules#snapshots),
//! [late join](crate::rules#late-join-and-rejoin-from-a-snapshot),
//! [resync](crate::rules#resync-from-an-authoritative-relay)).
//!
//! - [`session_snapshot`]: [`capture_snapshot`] takes the verified world of a session at its
//!   tick, [`load_snapshot`] makes a session continue from one (also a replay's seek);
//! - [`exchange`]: after each session update, a networked client serves the relay's snapshot
//!   request as a buddy and loads (or refuses) the snapshot the relay forwards as a joiner, with
//!   the [`SnapshotHooks`] the plugin installs.
//!
//! The snapshot itself (the world's state, its format and checks) is `snapshot/`, and the
//! relay client keeps the transfer's chunks and held sets in `snapshot/transfer.rs`. The
//! session knows none of this: loading asks it to go on from the snapshot's tick
//! ([`DeterministicSession`](crate::DeterministicSession)'s `resume_after_snapshot`), and the
//! hooks hear of it through [`VerifiedTickHook::on_snapshot_loaded`](crate::VerifiedTickHook::on_snapshot_loaded).

mod exchange;
mod session_snapshot;

use bevy::prelude::*;

use crate::input::SimInput;
use crate::snapshot::SnapshotLimits;

pub(crate) use exchange::exchange_snapshots;
pub use exchange::{
    CapturedSnapshot, Resynced, SnapshotHooks, SnapshotLoad, SnapshotReceived, SnapshotRejected,
};
pub use session_snapshot::{SnapshotAppExt, capture_snapshot, load_snapshot};

/// The snapshot limits given to the plugin's builder, with the core's [`SnapshotHooks`] unless
/// the app brought its own; registers the limits' type either way.
pub(crate) fn install<I: SimInput>(app: &mut App, limits: Option<SnapshotLimits>) {
    if let Some(limits) = limits {
        app.insert_resource(limits);
        // The snapshot core's capture and load for a networked client's exchange, unless
        // the app brought its own hooks.
        if !app.world().contains_resource::<SnapshotHooks>() {
            app.insert_resource(SnapshotHooks::core::<I>(limits.max_bytes));
        }
    }
    app.register_type::<SnapshotLimits>();
}

/// Registers the messages the exchange writes.
pub(crate) fn add_messages(app: &mut App) {
    app.add_message::<SnapshotReceived>()
        .add_message::<Resynced>()
        .add_message::<SnapshotRejected>();
}
