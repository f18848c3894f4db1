//! The relay's side of snapshot transfers: asking a buddy, taking its chunks, verifying the
//! snapshot against the other clients' checksums and forwarding it to the joiner
//! ([late join](crate::rules#late-join-and-rejoin-from-a-snapshot)). The decisions are the pure
//! functions of `crate::snapshots`; this is their I/O.

use bevy::prelude::*;
use simsync_net::bevy_renet::RenetServer;
use simsync_net::renet::ClientId;

use super::{
    Candidate, CaughtBy, ChunkError, LyingSnapshot, Phase, RelayEvent, RelayServer, Rescue,
    SERVED_MEMORY, Served, ServerMessage, ServerNetExt, SessionServerMessage, SnapshotAssembly,
    SnapshotChunk, SnapshotServed, SnapshotServing, Transfer, Verdict, check_snapshot, pick_buddy,
};
use simsync_net::Tick;

impl RelayServer {
    /// Starts a snapshot transfer for `slot` unless one is under way.
    pub(super) fn start_transfer(&mut self, slot: u8) {
        if self.config.snapshots.is_none() || self.transfers.iter().any(|t| t.joiner == slot) {
            return;
        }
        self.transfers.push(Transfer::new(slot, self.now));
    }

    /// Moves every transfer on by one step ([`RelayServer::drive_transfer`]) and drops the
    /// done ones ([`Transfer::is_done`]).
    pub(super) fn drive_transfers(&mut self, server: &mut RenetServer) {
        let Some(serving) = self.config.snapshots.clone() else {
            return;
        };
        let mut transfers = std::mem::take(&mut self.transfers);
        let joining: Vec<u8> = transfers.iter().map(|t| t.joiner).collect();
        for transfer in &mut transfers {
            self.drive_transfer(server, transfer, &joining, &serving);
        }
        transfers.retain(|t| !t.is_done());
        // Transfers started while driving (none today) are kept too.
        transfers.append(&mut self.transfers);
        self.transfers = transfers;
    }

    /// One step of `transfer` (`joining`: the slots every transfer is for): a stalled one or
    /// one whose buddy left is rescued, then its phase moves on. A silent joiner's transfer
    /// waits (a departed joiner's ended when it left).
    fn drive_transfer(
        &mut self,
        server: &mut RenetServer,
        transfer: &mut Transfer,
        joining: &[u8],
        serving: &SnapshotServing,
    ) {
        if self.slots[usize::from(transfer.joiner)].silent {
            // A silent joiner gets nothing, no snapshot either; its transfer waits (and
            // its stall clock with it) until it is heard from again.
            transfer.since = self.now;
            return;
        }
        self.rescue_transfer(transfer, serving);
        self.advance_transfer(server, transfer, joining, serving);
    }

    /// Rescues `transfer` when it stalled past the serving timeout or its buddy is no longer
    /// connected ([`Transfer::rescue`]): counted and logged.
    fn rescue_transfer(&mut self, transfer: &mut Transfer, serving: &SnapshotServing) {
        let timeout = std::time::Duration::from_millis(u64::from(serving.timeout_ms));
        let buddy_gone = transfer.buddy().is_some_and(|b| {
            self.slots
                .get(usize::from(b))
                .is_some_and(|slot| !slot.connected())
        });
        match transfer.rescue(self.now, timeout, buddy_gone) {
            Some(Rescue::Restarted) => {
                self.stats.snapshots.forwarding_stalls += 1;
                warn!(
                    "relay: the snapshot for player {} made no progress for {timeout:?}; \
                     asking again",
                    transfer.joiner
                );
            }
            Some(Rescue::BuddyFailed(buddy)) => {
                self.stats.snapshots.abandoned += 1;
                warn!(
                    "relay: snapshot buddy {buddy:?} for player {} is gone or too slow; \
                     asking another",
                    transfer.joiner
                );
            }
            None => {}
        }
    }

    /// Moves `transfer`'s phase on: without a buddy (past the retry pause) the authority's
    /// snapshot or a buddy is asked, a complete snapshot is verified, a verified one forwarded
    /// (progress when bytes went).
    fn advance_transfer(
        &mut self,
        server: &mut RenetServer,
        transfer: &mut Transfer,
        joining: &[u8],
        serving: &SnapshotServing,
    ) {
        match transfer.phase {
            Phase::NoBuddy if self.now >= transfer.retry_at => {
                if !self.serve_authority_snapshot(transfer) {
                    self.ask_buddy(server, transfer, joining, serving.max_bytes);
                }
            }
            Phase::NoBuddy => {}
            Phase::Receiving { .. } => {}
            Phase::Verifying { .. } => self.verify(transfer, joining),
            Phase::Forwarding { .. } => {
                let before = self.stats.snapshots.bytes_forwarded;
                self.forward(server, transfer, serving.bytes_per_update);
                if self.stats.snapshots.bytes_forwarded > before {
                    transfer.since = self.now; // progress
                }
            }
        }
    }

    /// Asks the best buddy for `transfer`'s snapshot (nothing when no other player is
    /// connected: asked again next update).
    fn ask_buddy(
        &mut self,
        server: &mut RenetServer,
        transfer: &mut Transfer,
        joining: &[u8],
        max_bytes: usize,
    ) {
        let candidates: Vec<Candidate> = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| Candidate {
                connected: s.connected(),
                joining: joining.contains(&(i as u8)),
                ack: s.ack,
            })
            .collect();
        let Some(buddy) = pick_buddy(&candidates, transfer.joiner, &mut transfer.tried) else {
            return;
        };
        let Some(client) = self.slots[usize::from(buddy)].client else {
            return;
        };
        let request = self.next_request;
        self.next_request = self.next_request.wrapping_add(1).max(1);
        let min_tick = self.confirmed.front().map_or(1, |(t, _)| *t).max(1);
        let message = ServerMessage::session(
            self.match_id,
            SessionServerMessage::SnapshotRequest {
                request,
                min_tick,
                max_bytes: u32::try_from(max_bytes).unwrap_or(u32::MAX),
            },
        );
        if let Err(error) = server.send_msg(client, &message) {
            debug!("relay: snapshot request to player {buddy} not sent: {error}");
            return;
        }
        self.stats.snapshots.requests += 1;
        info!(
            "relay: asked player {buddy} for a snapshot (request {request}, tick >= {min_tick}) \
             for player {}",
            transfer.joiner
        );
        transfer.phase = Phase::Receiving {
            buddy,
            request,
            assembly: SnapshotAssembly::new(request, max_bytes),
        };
        transfer.since = self.now;
    }

    /// Judges a complete snapshot against the other clients' checksum of its tick.
    fn verify(&mut self, transfer: &mut Transfer, joining: &[u8]) {
        let Phase::Verifying { buddy, snapshot } = &transfer.phase else {
            return;
        };
        let buddy = *buddy;
        let others = self
            .slots
            .iter()
            .enumerate()
            .filter(|(i, s)| {
                *i != usize::from(buddy) && !joining.contains(&(*i as u8)) && s.connected()
            })
            .count();
        let reference = self.checksums.reference(
            snapshot.tick,
            usize::from(buddy),
            usize::from(transfer.joiner),
            others == 0,
        );
        let header = self.read_header.map(|read| read(&snapshot.bytes));
        match check_snapshot(snapshot, reference, header) {
            Verdict::Wait => {}
            Verdict::Lying => {
                let tick = snapshot.tick;
                self.lying(buddy, tick, CaughtBy::Relay);
                transfer.fail_buddy(self.now);
            }
            Verdict::Verified => {
                let (tick, checksum, bytes) = (snapshot.tick, snapshot.checksum, &snapshot.bytes);
                let request = snapshot.request;
                let max = bytes.len();
                match simsync_net::split_snapshot(request, tick, checksum, bytes, max) {
                    Ok(chunks) => {
                        transfer.phase = Phase::Forwarding {
                            buddy,
                            tick,
                            bytes: max,
                            chunks,
                            next: 0,
                        };
                        transfer.since = self.now;
                    }
                    Err(error) => {
                        warn!("relay: verified snapshot not split: {error}");
                        transfer.fail_buddy(self.now);
                    }
                }
            }
        }
    }

    /// Counts and reports a lying buddy (the authority's snapshot refused by a joiner is
    /// counted apart: its build computes another state).
    fn lying(&mut self, buddy: u8, tick: Tick, caught_by: CaughtBy) {
        let Some(count) = self.stats.snapshots.lying.get_mut(usize::from(buddy)) else {
            self.stats.authority.snapshots_refused += 1;
            warn!("relay: a joiner refused the authority's snapshot of tick {tick}");
            return;
        };
        *count += 1;
        warn!(
            "relay: player {buddy}'s snapshot of tick {tick} is not the verified world ({caught_by:?})"
        );
        self.events.push(RelayEvent::Lying(LyingSnapshot {
            slot: buddy,
            tick,
            caught_by,
        }));
    }

    /// Sends the joiner the next chunks of a verified snapshot ([`RelayServer::send_chunks`]);
    /// once the last one went, the snapshot is served ([`RelayServer::snapshot_served`]).
    fn forward(&mut self, server: &mut RenetServer, transfer: &mut Transfer, budget: usize) {
        let joiner = transfer.joiner;
        let Phase::Forwarding {
            buddy,
            tick,
            bytes,
            chunks,
            next,
        } = &mut transfer.phase
        else {
            return;
        };
        let Some(client) = self.slots[usize::from(joiner)].client else {
            return;
        };
        let sent = self.send_chunks(server, client, chunks, next, budget);
        self.stats.snapshots.bytes_forwarded += sent as u64;
        if *next < chunks.len() {
            return;
        }
        let served = Served {
            request: chunks[0].request,
            joiner,
            buddy: *buddy,
            tick: *tick,
        };
        self.snapshot_served(served, *bytes);
    }

    /// Sends `client` the chunks from `next` on (moved past the sent ones) while fewer than
    /// `budget` bytes went in this update (the chunk that crosses it goes too) and the
    /// channel has room (the rest goes in a later update). Returns the bytes sent.
    fn send_chunks(
        &self,
        server: &mut RenetServer,
        client: ClientId,
        chunks: &[SnapshotChunk],
        next: &mut usize,
        budget: usize,
    ) -> usize {
        let mut sent = 0usize;
        while *next < chunks.len() && sent < budget {
            let message = ServerMessage::session(
                self.match_id,
                SessionServerMessage::SnapshotChunk(chunks[*next].clone()),
            );
            if server.send_msg(client, &message).is_err() {
                break; // the channel is full: the rest goes in a later update
            }
            sent += chunks[*next].bytes.len();
            *next += 1;
        }
        sent
    }

    /// The joiner got every chunk of `served`'s snapshot (`bytes` long): it acknowledges the
    /// snapshot's tick, so the confirmed sets after it follow; the transfer is remembered
    /// (a refusal names its buddy), counted, logged and reported.
    fn snapshot_served(&mut self, served: Served, bytes: usize) {
        let Served {
            joiner,
            buddy,
            tick,
            ..
        } = served;
        let slot = &mut self.slots[usize::from(joiner)];
        slot.ack = slot.ack.max(tick);
        slot.sent_through = tick;
        slot.resend_next = None;
        slot.resend_after = self.now;
        self.stats.snapshots.served += 1;
        self.served.push_back(served);
        while self.served.len() > SERVED_MEMORY {
            self.served.pop_front();
        }
        info!(
            "relay: player {joiner} got player {buddy}'s snapshot of tick {tick} ({bytes} bytes)"
        );
        self.events.push(RelayEvent::Served(SnapshotServed {
            slot: joiner,
            buddy,
            tick,
            bytes,
        }));
    }

    /// A chunk from `client`: taken if it is the next one of the transfer its slot was asked
    /// for; otherwise refused and counted, and a faulty transfer is abandoned.
    pub(super) fn on_snapshot_chunk(&mut self, client: ClientId, chunk: SnapshotChunk) {
        let slot = self.by_client.get(&client).copied();
        let transfer = self
            .transfers
            .iter_mut()
            .find(|t| matches!(&t.phase, Phase::Receiving { buddy, .. } if Some(*buddy) == slot));
        let Some(transfer) = transfer else {
            let error = ChunkError::Unasked {
                request: chunk.request,
                index: chunk.index,
            };
            self.stats.snapshots.rejected_chunks.record(&error);
            debug!("relay: chunk from {client} refused: {error}");
            return;
        };
        let Phase::Receiving {
            buddy, assembly, ..
        } = &mut transfer.phase
        else {
            return;
        };
        let buddy = *buddy;
        match assembly.accept(chunk) {
            Ok(None) => transfer.since = self.now,
            Ok(Some(snapshot)) => {
                transfer.since = self.now;
                transfer.phase = Phase::Verifying { buddy, snapshot };
            }
            Err(error) => {
                self.stats.snapshots.rejected_chunks.record(&error);
                warn!("relay: player {buddy}'s snapshot chunk refused ({error}); asking another");
                transfer.fail_buddy(self.now);
            }
        }
    }

    /// The buddy cannot serve `request`: another is asked.
    pub(super) fn on_snapshot_unavailable(&mut self, client: ClientId, request: u32) {
        let slot = self.by_client.get(&client).copied();
        let now = self.now;
        if let Some(transfer) = self.transfers.iter_mut().find(|t| {
            matches!(&t.phase, Phase::Receiving { buddy, request: r, .. }
                if Some(*buddy) == slot && *r == request)
        }) {
            self.stats.snapshots.abandoned += 1;
            transfer.fail_buddy(now);
        }
    }

    /// The joiner refused the snapshot forwarded with `request`: its buddy is counted as a liar
    /// and the joiner gets a snapshot from another.
    pub(super) fn on_snapshot_refused(&mut self, client: ClientId, request: u32) {
        let Some(slot) = self.by_client.get(&client).copied() else {
            self.stats.ignored_messages += 1;
            return;
        };
        let Some(index) = self
            .served
            .iter()
            .position(|s| s.request == request && s.joiner == slot)
        else {
            self.stats.ignored_messages += 1;
            return;
        };
        let Some(served) = self.served.remove(index) else {
            return;
        };
        self.lying(served.buddy, served.tick, CaughtBy::Joiner);
        self.start_transfer(slot);
        if let Some(transfer) = self.transfers.iter_mut().find(|t| t.joiner == slot) {
            transfer.tried.insert(served.buddy);
        }
    }
}
