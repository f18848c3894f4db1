//! The authority of an authoritative relay room ([authoritative rooms](crate::rules#authoritative-rooms)):
//! a verified world the relay's app runs from the confirmed input sets it relays. The relay
//! feeds it every confirmed set in order, judges the clients' checksums against its own, serves
//! its snapshots to late joiners (no buddy), and — with [`Resync::On`] — sends a desynced client
//! a snapshot of it. Nothing the relay asks of it blocks: the world may run on a thread of its
//! own and answer in a later update. The relay links no simulation: the world is behind the [`Authority`] trait,
//! which a crate with the simulation implements (`simsync`'s `LockstepAuthority`).

use bevy::prelude::*;
use simsync_net::{InputSet, Tick};

/// The slot a snapshot "buddy" has when the snapshot is the relay's own verified world (in
/// [`SnapshotServed::buddy`](crate::SnapshotServed) and [`LyingSnapshot::slot`](crate::LyingSnapshot)):
/// above every player slot.
pub const SERVER_BUDDY: u8 = u8::MAX;

/// A verified world run from the confirmed sets. The relay never waits for it: it hands each
/// confirmed set over as it confirms it and takes the checksums computed since its last update
/// (the judge waits for the authority's checksum of a tick, up to the checksum timeout).
pub trait Authority: Send + Sync + 'static {
    /// Simulates `tick` with its confirmed `set` (ticks come in order from 1, each once), now
    /// or later.
    ///
    /// # Errors
    ///
    /// Why the world cannot go on (as text for the log); the relay stops feeding it and judges
    /// by majority from then on.
    fn confirmed(&mut self, tick: Tick, set: &InputSet) -> Result<(), String>;

    /// The `(tick, checksum)` of every tick simulated since the last call, oldest first: the
    /// verified world's checksum after that tick.
    ///
    /// # Errors
    ///
    /// As [`Self::confirmed`].
    fn checksums(&mut self) -> Result<Vec<(Tick, u64)>, String>;

    /// Asks for a snapshot of the verified world at its newest tick (taken now or later; a
    /// request while one is pending changes nothing).
    fn request_snapshot(&mut self);

    /// The snapshot asked for, once taken: encoded as clients load it, or why none could be
    /// (as text for the log). `None` while it is not ready.
    fn take_snapshot(&mut self) -> Option<Result<AuthoritySnapshot, String>>;

    /// The relay opened its next match: the world starts over from its setup (tick 0), and
    /// nothing of the last match is answered any more (a failure to start over comes back
    /// from [`Self::confirmed`] or [`Self::checksums`]).
    fn restart(&mut self);
}

/// A snapshot of the authority's verified world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthoritySnapshot {
    /// Its tick.
    pub tick: Tick,
    /// The world's checksum at that tick.
    pub checksum: u64,
    /// The encoded snapshot.
    pub bytes: Vec<u8>,
}

/// Whether a desynced client is sent the authority's snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Reflect)]
pub enum Resync {
    /// A desynced client is named and plays on diverged (its desync is reported once per
    /// episode).
    #[default]
    Off,
    /// A desynced client is named, then sent a snapshot of the authority's verified world,
    /// which it loads and goes on from.
    On,
}

/// The authority's counters (in [`RelayStats::authority`](crate::RelayStats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
pub struct AuthorityStats {
    /// Ticks the authority simulated (their checksums came back).
    pub ticks: u64,
    /// Its newest simulated tick.
    pub tick: Tick,
    /// The newest confirmed tick minus the authority's, after the relay's last update.
    pub lag_ticks: Tick,
    /// The largest `lag_ticks` seen.
    pub max_lag_ticks: Tick,
    /// Microseconds the relay spent handing sets over and taking checksums, in total (the
    /// simulation itself runs wherever the authority runs it).
    pub relay_us: u64,
    /// Failures: a tick that failed (it stops the authority: the room judges by majority from
    /// then on, so at most one), plus each snapshot transfer the authority could not serve (its
    /// snapshot failed: counted once per transfer, which a buddy serves instead; the authority
    /// goes on judging).
    pub failures: u64,
    /// Snapshots of the authority forwarded (late join, rejoin, resync).
    pub snapshots_served: u64,
    /// Resyncs started: a desynced client sent the authority's snapshot.
    pub resyncs: u64,
    /// Snapshots of the authority a joiner refused (its build computes another state).
    pub snapshots_refused: u64,
}

/// The relay's authority and where it is.
pub(crate) struct AuthorityHost {
    pub world: Box<dyn Authority>,
    pub resync: Resync,
    /// The newest tick fed (0: none).
    pub fed_through: Tick,
    /// The newest tick whose checksum came back (0: none).
    pub checked_through: Tick,
    /// The world failed: nothing more is fed.
    pub failed: bool,
    /// A snapshot was asked for and has not come yet.
    pub snapshot_pending: bool,
    /// Per slot: the tick of the last snapshot of the authority sent to it (0: none).
    pub resynced_at: Vec<Tick>,
}

impl std::fmt::Debug for AuthorityHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorityHost")
            .field("resync", &self.resync)
            .field("fed_through", &self.fed_through)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}
