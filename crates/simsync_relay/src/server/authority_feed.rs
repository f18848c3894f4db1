//! The relay's side of an authoritative room ([authoritative
//! rooms](crate::rules#authoritative-rooms)): feeding the authority every confirmed set,
//! recording its checksums for the judge, serving its snapshots, and resyncing desynced
//! clients.

use std::time::Instant;

use bevy::prelude::*;

use super::{Phase, RelayServer, Transfer};
use crate::authority::{Authority, AuthorityHost, AuthoritySnapshot, Resync, SERVER_BUDDY};
use crate::snapshots::SnapshotServing;

impl RelayServer {
    /// Makes this an authoritative room: `world` is fed every confirmed set, the clients'
    /// checksums are judged against its own (a desynced client is named alone, also with one
    /// or two players), late joiners and rejoiners get its snapshot (snapshots are served:
    /// [`SnapshotServing::default`] unless configured; set `snapshots` in the config to start
    /// with fewer than every player, see `start_players`), and with [`Resync::On`] a desynced
    /// client is sent its snapshot.
    pub fn with_authority(mut self, world: Box<dyn Authority>, resync: Resync) -> Self {
        if self.config.snapshots.is_none() {
            self.config.snapshots = Some(SnapshotServing::default());
        }
        self.checksums.set_authoritative(true);
        self.authority = Some(AuthorityHost {
            world,
            resync,
            fed_through: 0,
            checked_through: 0,
            failed: false,
            snapshot_pending: false,
            resynced_at: vec![0; usize::from(self.config.players)],
        });
        self
    }

    /// Whether this room has a working authority.
    pub fn is_authoritative(&self) -> bool {
        self.authority.as_ref().is_some_and(|a| !a.failed)
    }

    /// Hands the authority every confirmed set it has not seen, in order, and records the
    /// checksums it computed since. A failure stops the authority (the judge falls back to the
    /// majority).
    pub(super) fn feed_authority(&mut self) {
        let Some(host) = self.authority.as_mut().filter(|a| !a.failed) else {
            return;
        };
        let started = Instant::now();
        let from = host.fed_through;
        let mut result: Result<(), String> = Ok(());
        for (tick, set) in self.confirmed.iter().filter(|(t, _)| *t > from) {
            if let Err(error) = host.world.confirmed(*tick, set) {
                result = Err(error);
                break;
            }
            host.fed_through = *tick;
        }
        let result = result.and_then(|()| host.world.checksums());
        match result {
            Ok(checksums) => {
                for (tick, checksum) in checksums {
                    self.checksums.set_authority(tick, checksum);
                    host.checked_through = host.checked_through.max(tick);
                    self.stats.authority.ticks += 1;
                }
            }
            Err(error) => {
                error!("relay: the authority failed: {error}; judging by majority");
                host.failed = true;
                self.stats.authority.failures += 1;
                self.checksums.set_authoritative(false);
            }
        }
        let spent = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let stats = &mut self.stats.authority;
        stats.relay_us += spent;
        stats.tick = host.checked_through;
        stats.lag_ticks = self.confirmed_tick - host.checked_through;
        stats.max_lag_ticks = stats.max_lag_ticks.max(stats.lag_ticks);
    }

    /// Serves `transfer` from the authority: puts it in the forwarding phase with the
    /// authority's snapshot once one is ready (asking for one first). `false` when there is no
    /// working authority, or it could not take one (a buddy is asked then). A snapshot the
    /// authority cannot take is counted (`authority.failures`) and logged once per transfer:
    /// the authority is not asked again for it.
    pub(super) fn serve_authority_snapshot(&mut self, transfer: &mut Transfer) -> bool {
        let Some(host) = self.authority.as_mut().filter(|a| !a.failed) else {
            return false;
        };
        if transfer.authority_failed || transfer.tried.contains(&SERVER_BUDDY) {
            // The authority could not serve it, or the joiner refused its snapshot: a buddy
            // serves it.
            return false;
        }
        let snapshot = match host.world.take_snapshot() {
            None => {
                if !host.snapshot_pending {
                    host.world.request_snapshot();
                    host.snapshot_pending = true;
                }
                return true;
            }
            // Older than the newest set sent to the client (the authority may lag the clients
            // by a few ticks; no set goes to a client while its transfer is under way): the
            // client may have verified past it and would refuse it, so a newer one is asked
            // for.
            Some(Ok(snapshot))
                if snapshot.tick < self.slots[usize::from(transfer.joiner)].sent_through =>
            {
                host.world.request_snapshot();
                host.snapshot_pending = true;
                return true;
            }
            Some(Ok(snapshot)) => snapshot,
            Some(Err(error)) => {
                host.snapshot_pending = false;
                warn!(
                    "relay: no snapshot of the authority for player {}: {error}; asking a buddy",
                    transfer.joiner
                );
                self.stats.authority.failures += 1;
                transfer.authority_failed = true;
                return false;
            }
        };
        host.snapshot_pending = false;
        self.forward_authority_snapshot(transfer, snapshot)
    }

    /// Splits the authority's `snapshot` into chunks and puts `transfer` in the forwarding
    /// phase with them (counted as served, the joiner's resync tick raised to it); `false`,
    /// counted as a failure, when it cannot be split (a buddy is asked then).
    fn forward_authority_snapshot(
        &mut self,
        transfer: &mut Transfer,
        snapshot: AuthoritySnapshot,
    ) -> bool {
        let request = self.next_request;
        self.next_request = self.next_request.wrapping_add(1).max(1);
        let len = snapshot.bytes.len();
        let split = simsync_net::split_snapshot(
            request,
            snapshot.tick,
            snapshot.checksum,
            &snapshot.bytes,
            len,
        );
        match split {
            Ok(chunks) => {
                info!(
                    "relay: player {} gets the authority's snapshot of tick {} ({len} bytes)",
                    transfer.joiner, snapshot.tick
                );
                self.stats.authority.snapshots_served += 1;
                if let Some(at) = self
                    .authority
                    .as_mut()
                    .and_then(|a| a.resynced_at.get_mut(usize::from(transfer.joiner)))
                {
                    *at = (*at).max(snapshot.tick);
                }
                transfer.phase = Phase::Forwarding {
                    buddy: SERVER_BUDDY,
                    tick: snapshot.tick,
                    bytes: len,
                    chunks,
                    next: 0,
                };
                transfer.since = self.now;
                true
            }
            Err(error) => {
                warn!("relay: the authority's snapshot was not split: {error}; asking a buddy");
                self.stats.authority.failures += 1;
                transfer.authority_failed = true;
                false
            }
        }
    }

    /// Sends each of `players` (whose desync episode against the authority starts at `tick`)
    /// its snapshot, with [`Resync::On`] — unless it was already sent one of a later tick.
    pub(super) fn resync(&mut self, tick: simsync_net::Tick, players: &[u8]) {
        let on = self
            .authority
            .as_ref()
            .is_some_and(|a| !a.failed && a.resync == Resync::On);
        if !on {
            return;
        }
        for &slot in players {
            let resynced_after = self
                .authority
                .as_ref()
                .and_then(|a| a.resynced_at.get(usize::from(slot)))
                .is_some_and(|at| *at >= tick);
            if resynced_after || self.transfers.iter().any(|t| t.joiner == slot) {
                continue;
            }
            info!("relay: player {slot} desynced from the authority; sending it a resync snapshot");
            self.stats.authority.resyncs += 1;
            self.start_transfer(slot);
        }
    }

    /// The next match starts the authority's world over.
    pub(super) fn restart_authority(&mut self) {
        let Some(host) = self.authority.as_mut() else {
            return;
        };
        host.fed_through = 0;
        host.checked_through = 0;
        host.snapshot_pending = false;
        host.resynced_at.iter_mut().for_each(|at| *at = 0);
        host.world.restart();
        if !host.failed {
            self.checksums.set_authoritative(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use simsync_net::bevy_renet::RenetServer;

    use super::super::tests::relay_with_sets;
    use crate::authority::{Authority, AuthoritySnapshot, Resync};
    use simsync_net::{InputSet, Tick};

    /// An authority whose snapshots always fail (a game with a type it cannot serialize).
    #[derive(Default)]
    struct NoSnapshots {
        asked: bool,
    }

    impl Authority for NoSnapshots {
        fn confirmed(&mut self, _: Tick, _: &InputSet) -> Result<(), String> {
            Ok(())
        }

        fn checksums(&mut self) -> Result<Vec<(Tick, u64)>, String> {
            Ok(Vec::new())
        }

        fn request_snapshot(&mut self) {
            self.asked = true;
        }

        fn take_snapshot(&mut self) -> Option<Result<AuthoritySnapshot, String>> {
            std::mem::take(&mut self.asked).then(|| Err("`game::Heat` cannot be serialized".into()))
        }

        fn restart(&mut self) {}
    }

    #[test]
    fn a_snapshot_the_authority_cannot_take_is_counted_once_per_transfer() {
        let mut relay =
            relay_with_sets(10).with_authority(Box::new(NoSnapshots::default()), Resync::On);
        let mut server = RenetServer::new(simsync_net::connection_config());
        relay.start_transfer(0);
        // No other player can serve it: the transfer waits, many relay updates long.
        for _ in 0..200 {
            relay.drive_transfers(&mut server);
        }
        assert_eq!(relay.stats.authority.failures, 1);
        assert_eq!(relay.transfers.len(), 1, "still waiting for a buddy");
        assert!(relay.transfers[0].authority_failed);
        assert!(
            relay.is_authoritative(),
            "a snapshot failure does not stop the authority"
        );
        // A new transfer asks the authority again: one more failure.
        relay.transfers.clear();
        relay.start_transfer(0);
        for _ in 0..200 {
            relay.drive_transfers(&mut server);
        }
        assert_eq!(relay.stats.authority.failures, 2);
    }
}
