//! Snapshot transfers of the relay ([late join](crate::rules#late-join-and-rejoin-from-a-snapshot)):
//! the relay never simulates, so a player that needs a verified world (a late joiner, or a
//! player whose missing confirmed inputs are gone) gets one from a connected client, the
//! "buddy". Pure data, no I/O: [`Transfer`] is one joiner's transfer, [`pick_buddy`] the choice
//! of the buddy, [`check_snapshot`] the verdict on a received snapshot.

use std::collections::BTreeSet;
use std::time::Duration;

use bevy::prelude::*;
use simsync_net::{AssembledSnapshot, DEFAULT_MAX_SNAPSHOT_BYTES, SnapshotAssembly, SnapshotChunk};

use simsync_net::Tick;

/// How the relay serves snapshots ([late join](crate::rules#late-join-and-rejoin-from-a-snapshot)).
#[derive(Debug, Clone, PartialEq, Eq, Reflect)]
pub struct SnapshotServing {
    /// The largest snapshot accepted from a buddy, in bytes (default
    /// [`DEFAULT_MAX_SNAPSHOT_BYTES`]); a transfer announcing more is refused at its first
    /// chunk, before anything is allocated.
    pub max_bytes: usize,
    /// Milliseconds a buddy may take between two chunks (and the relay may wait for the other
    /// clients' checksums of the snapshot's tick) before the relay asks another client, and a
    /// verified snapshot may stay without progress towards the joiner before the relay drops it
    /// and asks again (default 5,000).
    pub timeout_ms: u32,
    /// Snapshot bytes forwarded to a joiner per relay update, at most (default 32,000; renet
    /// puts at most `BYTES_PER_UPDATE` = 60,000 on the wire per connection and update, shared
    /// with the other channels).
    pub bytes_per_update: usize,
}

impl Default for SnapshotServing {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_SNAPSHOT_BYTES,
            timeout_ms: 5_000,
            bytes_per_update: 32_000,
        }
    }
}

/// Snapshot counters of the relay (`RelayStats::snapshots`).
#[derive(Debug, Clone, Default, PartialEq, Reflect)]
pub struct SnapshotStats {
    /// Snapshot requests sent to buddies.
    pub requests: u64,
    /// Snapshots forwarded whole to a joiner.
    pub served: u64,
    /// Snapshot bytes forwarded to joiners.
    pub bytes_forwarded: u64,
    /// Transfers whose forwarding to the joiner made no progress for `timeout_ms` (the
    /// snapshot was dropped and requested again).
    pub forwarding_stalls: u64,
    /// Transfers abandoned because the buddy took longer than `timeout_ms` (or the checksums
    /// of its tick never came), or answered `SnapshotUnavailable`.
    pub abandoned: u64,
    /// Per slot: snapshots of this buddy whose checksum differed from the other clients'
    /// verified checksum of their tick (caught by the relay), or that the joiner refused.
    pub lying: Vec<u64>,
    /// Snapshot chunks refused, by reason.
    #[reflect(ignore)]
    pub rejected_chunks: simsync_net::ChunkRejections,
}

/// Who caught a lying snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub enum CaughtBy {
    /// The relay: the snapshot's checksum is not the one the other clients verified at its
    /// tick, or its header disagrees with the checksum the buddy stated.
    Relay,
    /// The joiner: the snapshot did not load, or the joiner's checksum of the loaded world is
    /// not the header's.
    Joiner,
}

/// A buddy served a snapshot that is not the verified world of its tick (written on the relay's
/// app, [late join](crate::rules#late-join-and-rejoin-from-a-snapshot)); the relay asks another
/// client.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub struct LyingSnapshot {
    /// The buddy's slot.
    pub slot: u8,
    /// The tick its snapshot claims.
    pub tick: Tick,
    /// Who caught it.
    pub caught_by: CaughtBy,
}

/// A verified snapshot was forwarded whole to a joiner (written on the relay's app).
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub struct SnapshotServed {
    /// The joiner's slot.
    pub slot: u8,
    /// The buddy's slot.
    pub buddy: u8,
    /// The snapshot's verified tick.
    pub tick: Tick,
    /// The encoded snapshot's size in bytes.
    pub bytes: usize,
}

/// Where one joiner's transfer stands.
#[derive(Debug)]
pub(crate) enum Phase {
    /// No buddy asked yet (none connected, or the last one failed).
    NoBuddy,
    /// `buddy` was asked with `request`; its chunks go into the assembly.
    Receiving {
        buddy: u8,
        request: u32,
        assembly: SnapshotAssembly,
    },
    /// The snapshot arrived whole; the relay waits for the other clients' checksums of its
    /// tick.
    Verifying {
        buddy: u8,
        snapshot: AssembledSnapshot,
    },
    /// Verified: the chunks go to the joiner, `next` first.
    Forwarding {
        buddy: u8,
        tick: Tick,
        bytes: usize,
        chunks: Vec<SnapshotChunk>,
        next: usize,
    },
}

/// One joiner's snapshot transfer.
#[derive(Debug)]
pub(crate) struct Transfer {
    /// The joiner's slot.
    pub joiner: u8,
    /// Buddies that failed or lied in this transfer: not asked again (until every other one
    /// was).
    pub tried: BTreeSet<u8>,
    /// The authority could not give this transfer a snapshot (counted and logged once): it is
    /// not asked again in this transfer, a buddy serves it.
    pub authority_failed: bool,
    pub phase: Phase,
    /// The last progress (request sent, chunk received, snapshot complete).
    pub since: Duration,
    /// No buddy is asked before this time (a failed buddy is followed by a pause).
    pub retry_at: Duration,
}

/// Why a transfer is given up ([`Transfer::stall`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stall {
    /// The buddy (or the checksums to check its snapshot) took too long: ask another.
    Buddy,
    /// The verified snapshot did not reach the joiner in time: ask again.
    Forwarding,
}

/// What [`Transfer::rescue`] did to a transfer that stalled or lost its buddy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rescue {
    /// Forwarding stalled: the snapshot is asked for again, the buddy not blamed.
    Restarted,
    /// The buddy (`Some`, the one asked) is gone or too slow: another is asked.
    BuddyFailed(Option<u8>),
}

/// The pause after a failed buddy before the next is asked.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(250);

impl Transfer {
    /// A transfer for `joiner`, no buddy asked yet.
    pub(crate) fn new(joiner: u8, now: Duration) -> Self {
        Self {
            joiner,
            tried: BTreeSet::new(),
            authority_failed: false,
            phase: Phase::NoBuddy,
            since: now,
            retry_at: now,
        }
    }

    /// The buddy asked, if any.
    pub(crate) fn buddy(&self) -> Option<u8> {
        match &self.phase {
            Phase::NoBuddy => None,
            Phase::Receiving { buddy, .. }
            | Phase::Verifying { buddy, .. }
            | Phase::Forwarding { buddy, .. } => Some(*buddy),
        }
    }

    /// What to do about a transfer that made no progress for `timeout` by `now`: nothing while
    /// no buddy is asked (or progress is recent); [`Stall::Buddy`] when the buddy is slow to
    /// send or the others' checksums of its tick are late; [`Stall::Forwarding`] when a
    /// verified snapshot has not moved to the joiner (its channel stayed full, or it is not
    /// connected).
    pub(crate) fn stall(&self, now: Duration, timeout: Duration) -> Option<Stall> {
        if now.saturating_sub(self.since) < timeout {
            return None;
        }
        match self.phase {
            Phase::NoBuddy => None,
            Phase::Receiving { .. } | Phase::Verifying { .. } => Some(Stall::Buddy),
            Phase::Forwarding { .. } => Some(Stall::Forwarding),
        }
    }

    /// Forwarding stalled: the snapshot is dropped and a new one requested after the pause; the
    /// buddy is not blamed (it may be asked again).
    pub(crate) fn restart(&mut self, now: Duration) {
        self.phase = Phase::NoBuddy;
        self.since = now;
        self.retry_at = now + RETRY_PAUSE;
    }

    /// Rescues a transfer that made no progress for `timeout` by `now`, or whose buddy is
    /// gone (`buddy_gone`): a stalled forwarding is restarted ([`Transfer::restart`]) even when
    /// the buddy left meanwhile; a forwarding that moves goes on without its buddy (the relay
    /// holds the verified chunks); otherwise a gone or slow buddy is failed
    /// ([`Transfer::fail_buddy`]). Returns what it did (`None`: nothing to rescue).
    pub(crate) fn rescue(
        &mut self,
        now: Duration,
        timeout: Duration,
        buddy_gone: bool,
    ) -> Option<Rescue> {
        let stall = self.stall(now, timeout);
        let forwarding = matches!(self.phase, Phase::Forwarding { .. });
        if stall == Some(Stall::Forwarding) {
            self.restart(now);
            Some(Rescue::Restarted)
        } else if (buddy_gone && !forwarding) || stall == Some(Stall::Buddy) {
            let buddy = self.buddy();
            self.fail_buddy(now);
            Some(Rescue::BuddyFailed(buddy))
        } else {
            None
        }
    }

    /// Whether the transfer is done: forwarding, every chunk sent to the joiner.
    pub(crate) fn is_done(&self) -> bool {
        matches!(&self.phase, Phase::Forwarding { chunks, next, .. } if *next >= chunks.len())
    }

    /// The current buddy failed: it is not asked again in this transfer, and another is.
    pub(crate) fn fail_buddy(&mut self, now: Duration) {
        if let Some(buddy) = self.buddy() {
            self.tried.insert(buddy);
        }
        self.phase = Phase::NoBuddy;
        self.since = now;
        self.retry_at = now + RETRY_PAUSE;
    }
}

/// A candidate buddy as [`pick_buddy`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// The slot's player is connected.
    pub connected: bool,
    /// The slot waits for a snapshot itself.
    pub joining: bool,
    /// The last tick it acknowledged holding every confirmed set through.
    pub ack: Tick,
}

/// The buddy for `joiner`: the connected slot, not itself joining and not in `tried`, that
/// acknowledged the most confirmed sets (the lowest slot on a tie); when every candidate was
/// tried, `tried` is cleared and they are asked again. `None`: no other connected player.
pub(crate) fn pick_buddy(
    candidates: &[Candidate],
    joiner: u8,
    tried: &mut BTreeSet<u8>,
) -> Option<u8> {
    let eligible = |tried: &BTreeSet<u8>| {
        candidates
            .iter()
            .enumerate()
            .filter(|(slot, c)| {
                c.connected && !c.joining && *slot != usize::from(joiner) && {
                    let slot = *slot as u8;
                    !tried.contains(&slot)
                }
            })
            .max_by_key(|(slot, c)| (c.ack, std::cmp::Reverse(*slot)))
            .map(|(slot, _)| slot as u8)
    };
    eligible(tried).or_else(|| {
        tried.clear();
        eligible(tried)
    })
}

/// The verdict on a whole snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Its checksum is the one the other clients verified at its tick.
    Verified,
    /// Its checksum differs, or its header contradicts what the buddy stated.
    Lying,
    /// The other clients' checksum of its tick is not known yet.
    Wait,
}

/// Judges `snapshot` against `reference` (the other clients' verified checksum of its tick, if
/// known) and `header` (the tick and checksum its encoded header states, when the relay can
/// read headers; `Err` when it cannot be read).
pub(crate) fn check_snapshot(
    snapshot: &AssembledSnapshot,
    reference: Option<u64>,
    header: Option<Result<(Tick, u64), simsync_net::SnapshotError>>,
) -> Verdict {
    match header {
        Some(Ok(stated)) if stated != (snapshot.tick, snapshot.checksum) => return Verdict::Lying,
        Some(Err(_)) => return Verdict::Lying,
        _ => {}
    }
    match reference {
        Some(checksum) if checksum == snapshot.checksum => Verdict::Verified,
        Some(_) => Verdict::Lying,
        None => Verdict::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVE: Candidate = Candidate {
        connected: true,
        joining: false,
        ack: 100,
    };

    fn forwarding(now: Duration) -> Transfer {
        let mut transfer = Transfer::new(2, Duration::ZERO);
        transfer.phase = Phase::Forwarding {
            buddy: 0,
            tick: 40,
            bytes: 10,
            chunks: Vec::new(),
            next: 0,
        };
        transfer.since = now;
        transfer
    }

    #[test]
    fn a_transfer_stuck_forwarding_is_restarted_after_the_timeout_without_blaming_the_buddy() {
        let timeout = Duration::from_secs(5);
        let mut transfer = forwarding(Duration::from_secs(1));
        assert_eq!(transfer.stall(Duration::from_millis(5_999), timeout), None);
        let now = Duration::from_secs(6);
        assert_eq!(transfer.stall(now, timeout), Some(Stall::Forwarding));
        transfer.restart(now);
        assert!(matches!(transfer.phase, Phase::NoBuddy));
        assert!(transfer.tried.is_empty(), "the buddy may be asked again");
        assert_eq!(transfer.retry_at, now + RETRY_PAUSE);
        assert_eq!(transfer.stall(now + timeout * 2, timeout), None);
    }

    #[test]
    fn a_slow_buddy_stalls_as_the_buddys_fault() {
        let timeout = Duration::from_secs(5);
        let mut transfer = Transfer::new(2, Duration::ZERO);
        transfer.phase = Phase::Receiving {
            buddy: 1,
            request: 3,
            assembly: SnapshotAssembly::new(3, 1_000),
        };
        assert_eq!(transfer.stall(Duration::from_secs(4), timeout), None);
        assert_eq!(transfer.stall(timeout, timeout), Some(Stall::Buddy));
    }

    fn receiving_from(buddy: u8) -> Transfer {
        let mut transfer = Transfer::new(2, Duration::ZERO);
        transfer.phase = Phase::Receiving {
            buddy,
            request: 3,
            assembly: SnapshotAssembly::new(3, 1_000),
        };
        transfer
    }

    #[test]
    fn a_stalled_forwarding_is_restarted_even_when_its_buddy_left() {
        let timeout = Duration::from_secs(5);
        let mut transfer = forwarding(Duration::from_secs(1));
        let now = Duration::from_secs(6);
        assert_eq!(transfer.rescue(now, timeout, true), Some(Rescue::Restarted));
        assert!(matches!(transfer.phase, Phase::NoBuddy));
        assert!(transfer.tried.is_empty(), "the buddy is not blamed");
        assert_eq!(transfer.retry_at, now + RETRY_PAUSE);
    }

    #[test]
    fn a_forwarding_that_moves_goes_on_when_its_buddy_leaves() {
        let timeout = Duration::from_secs(5);
        let mut transfer = forwarding(Duration::from_secs(1));
        assert_eq!(transfer.rescue(Duration::from_secs(2), timeout, true), None);
        assert!(matches!(transfer.phase, Phase::Forwarding { .. }));
        assert!(transfer.tried.is_empty(), "the buddy is not blamed");
    }

    #[test]
    fn a_gone_or_slow_buddy_is_failed_and_another_asked() {
        let timeout = Duration::from_secs(5);
        let early = Duration::from_secs(1);
        let mut transfer = receiving_from(1);
        assert_eq!(transfer.rescue(early, timeout, false), None);
        assert_eq!(transfer.buddy(), Some(1), "in time and connected: kept");
        assert_eq!(
            transfer.rescue(early, timeout, true),
            Some(Rescue::BuddyFailed(Some(1)))
        );
        assert_eq!(transfer.tried, BTreeSet::from([1]));
        assert_eq!(transfer.retry_at, early + RETRY_PAUSE);
        let mut slow = receiving_from(0);
        assert_eq!(
            slow.rescue(timeout, timeout, false),
            Some(Rescue::BuddyFailed(Some(0)))
        );
        assert!(matches!(slow.phase, Phase::NoBuddy));
        assert_eq!(slow.tried, BTreeSet::from([0]));
    }

    #[test]
    fn a_transfer_is_done_once_every_chunk_went_to_the_joiner() {
        let chunk = SnapshotChunk {
            request: 3,
            tick: 40,
            checksum: 9,
            total_bytes: 2,
            index: 0,
            count: 2,
            bytes: vec![1],
        };
        let mut transfer = forwarding(Duration::ZERO);
        let chunks = vec![chunk.clone(), SnapshotChunk { index: 1, ..chunk }];
        for (next, done) in [(0, false), (1, false), (2, true)] {
            if let Phase::Forwarding {
                chunks: c, next: n, ..
            } = &mut transfer.phase
            {
                (*c, *n) = (chunks.clone(), next);
            }
            assert_eq!(transfer.is_done(), done, "{next} of 2 chunks sent");
        }
        assert!(!receiving_from(1).is_done());
        assert!(!Transfer::new(2, Duration::ZERO).is_done());
    }

    #[test]
    fn the_buddy_is_the_connected_player_with_the_most_acknowledged() {
        let mut tried = BTreeSet::new();
        let slots = [
            LIVE,
            Candidate { ack: 120, ..LIVE },
            Candidate {
                connected: false,
                ack: 500,
                ..LIVE
            },
            Candidate {
                joining: true,
                ack: 900,
                ..LIVE
            },
        ];
        assert_eq!(pick_buddy(&slots, 3, &mut tried), Some(1));
        // Not the joiner itself, even when it acknowledged most.
        assert_eq!(pick_buddy(&slots, 1, &mut tried), Some(0));
    }

    #[test]
    fn a_failed_buddy_is_skipped_until_every_other_was_tried() {
        let slots = [LIVE, LIVE, Candidate { ack: 0, ..LIVE }];
        let mut tried = BTreeSet::from([0]);
        assert_eq!(pick_buddy(&slots, 2, &mut tried), Some(1));
        tried.insert(1);
        // Everyone failed once: the list starts over.
        assert_eq!(pick_buddy(&slots, 2, &mut tried), Some(0));
        assert!(tried.is_empty());
        assert_eq!(pick_buddy(&[LIVE], 0, &mut tried), None);
    }

    fn snapshot(tick: Tick, checksum: u64) -> AssembledSnapshot {
        AssembledSnapshot {
            request: 1,
            tick,
            checksum,
            bytes: vec![1, 2, 3],
        }
    }

    #[test]
    fn a_snapshot_is_verified_by_the_others_checksum_of_its_tick() {
        let s = snapshot(200, 77);
        assert_eq!(check_snapshot(&s, Some(77), None), Verdict::Verified);
        assert_eq!(check_snapshot(&s, Some(78), None), Verdict::Lying);
        assert_eq!(check_snapshot(&s, None, None), Verdict::Wait);
        assert_eq!(
            check_snapshot(&s, Some(77), Some(Ok((200, 77)))),
            Verdict::Verified
        );
    }

    #[test]
    fn a_header_that_contradicts_the_stated_checksum_or_does_not_read_is_a_lie() {
        let s = snapshot(200, 77);
        assert_eq!(
            check_snapshot(&s, Some(77), Some(Ok((200, 5)))),
            Verdict::Lying
        );
        assert_eq!(
            check_snapshot(&s, Some(77), Some(Ok((199, 77)))),
            Verdict::Lying
        );
        assert_eq!(
            check_snapshot(
                &s,
                None,
                Some(Err(simsync_net::SnapshotError::Truncated {
                    offset: 0,
                    len: 0,
                    needed: 33,
                }))
            ),
            Verdict::Lying
        );
    }
}
