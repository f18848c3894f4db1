//! `simsync_relay`: the relay server of a networked deterministic session, by the rules in
//! [`rules`]. It owns the session's clock, gathers every player's input per tick, confirms
//! input sets and sends them to every client; it never simulates, so it links no simulation
//! world (only the wire, `simsync_net`). The client side is `simsync_deterministic`'s
//! networked session.
//!
//! The parts:
//! - [`RelayServer`]: the relay as a state machine over an explicit `&mut RenetServer`
//!   ([`RelayServerConfig`], its counters [`RelayStats`]); [`DeterministicServerPlugin`] runs
//!   it in a Bevy app.
//! - Inputs are checked before they are relayed ([`DroppedInputs`]); every message first meets
//!   its connection's [`RelayLimits`] ([`RateLimited`]).
//! - Seats and rejoin: a player's slot is its connection; a reconnect token takes it again.
//! - Checksums are judged by majority; a desync is reported once per episode, and the
//!   clients' hash breakdowns name what differs (a [`DesyncReport`](simsync_net::DesyncReport)).
//! - Matches: the app ends a match and opens the next on the same connections, every player in
//!   its slot ([`RelayCommand`] in; [`MatchChanged`], [`RelayCommandFailed`] out; see
//!   [matches and rematches](rules#matches-and-rematches)).
//! - Snapshots for late joiners and players behind the history ([`SnapshotServing`]): asked of
//!   a buddy, checked ([`read_snapshot_header`], [`LyingSnapshot`]) and forwarded
//!   ([`SnapshotServed`], [`SnapshotStats`]).
#![warn(missing_docs)]

mod authority;
mod ballots;
mod breakdowns;
mod checksums;
mod episodes;
mod limits;
mod matches;
mod plugin;
mod seats;
mod server;
mod snapshots;
mod stats;

#[doc = include_str!("rules.md")]
pub mod rules {}

pub use authority::{Authority, AuthoritySnapshot, AuthorityStats, Resync, SERVER_BUDDY};
pub use limits::{RateLimited, RelayLimits};
pub use matches::{MatchChanged, MatchCommandError, RelayCommand, RelayCommandFailed};
pub use plugin::{AuthorityFactory, DeterministicServerPlugin};
pub use server::{
    DEFAULT_CHECKSUM_TIMEOUT_MS, DEFAULT_SILENCE_TIMEOUT_MS, HeaderReader, RelayEvent, RelayServer,
    RelayServerConfig, read_snapshot_header,
};
/// The match types of the wire, re-exported for the relay's app.
pub use simsync_net::{MatchEndReason, MatchId, MatchPhase};
pub use snapshots::{CaughtBy, LyingSnapshot, SnapshotServed, SnapshotServing, SnapshotStats};
pub use stats::{DroppedInputs, RelayStats};
