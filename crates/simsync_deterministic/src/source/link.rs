//! [`RelayLink`]: what a networked session exchanges with the relay besides inputs — verified
//! checksums and desync breakdowns sent, the relay's reports, snapshot requests and answers,
//! forwarded snapshots loaded or refused. A local session and a replay have none.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bevy::prelude::*;
use simsync_net::bevy_renet::RenetClient;

use super::relay_client::{NetReport, RelayClient};
use super::snapshot_exchange::BuddyRequest;
use crate::checksum::TickChecksum;
use crate::input::{InputBuffer, SimInput};
use crate::tick::Tick;

/// The relay client of a networked session, shared by its input path (which polls it) and its
/// [`RelayLink`]: one connection, one protocol state machine, whose confirmed input sets wait
/// while a snapshot is awaited.
pub(super) type SharedClient<I> = Arc<Mutex<RelayClient<I>>>;

/// The relay client behind `client` (a panic while it was held leaves it usable).
pub(super) fn lock<I: SimInput>(client: &SharedClient<I>) -> MutexGuard<'_, RelayClient<I>> {
    client.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The session's link to the relay server for everything but inputs (networked sessions only).
pub(crate) struct RelayLink<I: SimInput> {
    client: SharedClient<I>,
}

impl<I: SimInput> RelayLink<I> {
    pub(super) fn new(client: SharedClient<I>) -> Self {
        Self { client }
    }

    /// The relay client's reports since the last call — stall changes, snapshot requests,
    /// desyncs, substituted inputs — oldest first.
    pub(crate) fn take_reports(&mut self) -> Vec<NetReport> {
        lock(&self.client).take_reports()
    }

    /// The relay's snapshot request to serve at `verified_tick`.
    pub(crate) fn due_snapshot_request(&self, verified_tick: Tick) -> Option<BuddyRequest> {
        lock(&self.client).due_snapshot_request(verified_tick)
    }

    /// Answers the relay's snapshot request (no chunks: unavailable).
    pub(crate) fn answer_snapshot(
        &mut self,
        request: u32,
        chunks: Vec<simsync_net::SnapshotChunk>,
    ) {
        lock(&self.client).answer_snapshot(request, chunks);
    }

    /// The snapshot the relay forwarded, once complete.
    pub(crate) fn take_arrived_snapshot(&mut self) -> Option<simsync_net::AssembledSnapshot> {
        lock(&self.client).take_arrived_snapshot()
    }

    /// A snapshot of `tick` was loaded: the relay client applies the sets it held.
    pub(crate) fn snapshot_loaded(&mut self, tick: Tick, buffer: &mut InputBuffer<I>) {
        lock(&self.client).snapshot_loaded(tick, buffer);
    }

    /// Whether a snapshot loaded now is a resync (this client was named desynced).
    pub(crate) fn awaiting_resync(&self) -> bool {
        lock(&self.client).awaiting_resync()
    }

    /// A resync from `from_tick` to `to_tick` happened.
    pub(crate) fn resynced(&mut self, from_tick: Tick, to_tick: Tick) {
        lock(&self.client).resynced(from_tick, to_tick);
    }

    /// The snapshot forwarded with `request` was refused.
    pub(crate) fn snapshot_refused(&mut self, request: u32) {
        lock(&self.client).snapshot_refused(request);
    }

    /// Reports a verified checksum to the relay server (desync detection).
    pub(crate) fn send_checksum(&mut self, world: &mut World, checksum: TickChecksum) {
        let mut renet = world.get_resource_mut::<RenetClient>();
        lock(&self.client).send_checksum(renet.as_deref_mut(), checksum.tick, checksum.checksum);
    }

    /// Sends the relay this client's per-component hash breakdown of a desynced tick.
    pub(crate) fn send_breakdown(
        &mut self,
        world: &mut World,
        breakdown: &crate::checksum::ComponentBreakdown,
    ) {
        let mut renet = world.get_resource_mut::<RenetClient>();
        lock(&self.client).send_breakdown(renet.as_deref_mut(), breakdown);
    }
}
