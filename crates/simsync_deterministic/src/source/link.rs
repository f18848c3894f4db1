//! [`RelayLink`]: a networked session's connection to the relay — the one owner of its relay
//! client. The input path polls the client through it ([`InputSource::poll`](super::InputSource::poll)
//! is handed the link); the rest of the session exchanges with the relay through it: verified
//! checksums and desync breakdowns sent, the relay's reports, snapshot requests and answers,
//! forwarded snapshots loaded or refused, the client's stats and a rematch's hand-over. A local
//! session and a replay have none.

use bevy::prelude::*;
use simsync_net::bevy_renet::RenetClient;

use super::relay_client::{NetReport, NextMatch, RelayClient, RelayClientStats};
use crate::checksum::TickChecksum;
use crate::input::{InputBuffer, SimInput};
use crate::snapshot::transfer::BuddyRequest;
use crate::tick::Tick;

/// The session's link to the relay server (networked sessions only): owns the relay client
/// (one connection, one protocol state machine, whose confirmed input sets wait while a
/// snapshot is awaited). No lock: the session update hands it to whichever step needs it.
pub(crate) struct RelayLink<I: SimInput> {
    // Boxed: the client is large and the session is a resource.
    client: Box<RelayClient<I>>,
}

impl<I: SimInput> RelayLink<I> {
    pub(super) fn new(client: RelayClient<I>) -> Self {
        Self {
            client: Box::new(client),
        }
    }

    /// The relay client, for the input path's poll.
    pub(super) fn client(&mut self) -> &mut RelayClient<I> {
        &mut self.client
    }

    /// The relay client's measurements.
    pub(crate) fn stats(&self) -> &RelayClientStats {
        self.client.stats()
    }

    /// The relay's later match this session is to be rebuilt for, if the relay moved on (a
    /// rematch).
    pub(crate) fn next_match(&self) -> Option<NextMatch> {
        self.client.next_match()
    }

    /// The link of a session rebuilt for the relay's `next` match takes over `old`'s
    /// connection to the relay.
    pub(crate) fn take_connection(&mut self, old: &mut RelayLink<I>, next: NextMatch) {
        self.client.take_connection(&mut old.client, next);
    }

    /// The relay client's reports since the last call — stall changes, snapshot requests,
    /// desyncs, substituted inputs — oldest first.
    pub(crate) fn take_reports(&mut self) -> Vec<NetReport> {
        self.client.take_reports()
    }

    /// The relay's snapshot request to serve at `verified_tick`.
    pub(crate) fn due_snapshot_request(&self, verified_tick: Tick) -> Option<BuddyRequest> {
        self.client.due_snapshot_request(verified_tick)
    }

    /// Answers the relay's snapshot request (no chunks: unavailable).
    pub(crate) fn answer_snapshot(
        &mut self,
        request: u32,
        chunks: Vec<simsync_net::SnapshotChunk>,
    ) {
        self.client.answer_snapshot(request, chunks);
    }

    /// The snapshot the relay forwarded, once complete.
    pub(crate) fn take_arrived_snapshot(&mut self) -> Option<simsync_net::AssembledSnapshot> {
        self.client.take_arrived_snapshot()
    }

    /// A snapshot of `tick` was loaded: the relay client applies the sets it held.
    pub(crate) fn snapshot_loaded(&mut self, tick: Tick, buffer: &mut InputBuffer<I>) {
        self.client.snapshot_loaded(tick, buffer);
    }

    /// Whether a snapshot loaded now is a resync (this client was named desynced).
    pub(crate) fn awaiting_resync(&self) -> bool {
        self.client.awaiting_resync()
    }

    /// A resync from `from_tick` to `to_tick` happened.
    pub(crate) fn resynced(&mut self, from_tick: Tick, to_tick: Tick) {
        self.client.resynced(from_tick, to_tick);
    }

    /// The snapshot forwarded with `request` was refused.
    pub(crate) fn snapshot_refused(&mut self, request: u32) {
        self.client.snapshot_refused(request);
    }

    /// Reports a verified checksum to the relay server (desync detection).
    pub(crate) fn send_checksum(&mut self, world: &mut World, checksum: TickChecksum) {
        let mut renet = world.get_resource_mut::<RenetClient>();
        self.client
            .send_checksum(renet.as_deref_mut(), checksum.tick, checksum.checksum);
    }

    /// Sends the relay this client's per-component hash breakdown of a desynced tick.
    pub(crate) fn send_breakdown(
        &mut self,
        world: &mut World,
        breakdown: &crate::checksum::ComponentBreakdown,
    ) {
        let mut renet = world.get_resource_mut::<RenetClient>();
        self.client.send_breakdown(renet.as_deref_mut(), breakdown);
    }
}
