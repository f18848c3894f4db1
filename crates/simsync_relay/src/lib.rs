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
//! - Snapshots for late joiners and players behind the history ([`SnapshotServing`]): asked of
//!   a buddy, checked ([`read_snapshot_header`], [`LyingSnapshot`]) and forwarded
//!   ([`SnapshotServed`], [`SnapshotStats`]).
#![warn(missing_docs)]

mod breakdowns;
mod checksums;
mod episodes;
mod limits;
mod plugin;
mod seats;
mod server;
mod snapshots;

#[doc = include_str!("rules.md")]
pub mod rules {}

pub use limits::{RateLimited, RelayLimits};
pub use plugin::DeterministicServerPlugin;
pub use server::{
    DEFAULT_CHECKSUM_TIMEOUT_MS, DEFAULT_SILENCE_TIMEOUT_MS, DroppedInputs, HeaderReader,
    RelayServer, RelayServerConfig, RelayStats, read_snapshot_header,
};
pub use snapshots::{CaughtBy, LyingSnapshot, SnapshotServed, SnapshotServing, SnapshotStats};
