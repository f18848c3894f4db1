//! `simsync_loadgen`: load generation for the dedicated server — **a tool for load tests, not
//! for games**. A dev tool of the simsync workspace (not published, not part of the `simsync`
//! facade); the server crate, `simsync_server`, contains no load-generation code.
//!
//! Fake clients that speak the server's wire protocols without simulating anything, so one
//! process can drive hundreds of connections over loopback UDP against one server process
//! (`cargo run --ignore-rust-version --release -p simsync_loadgen --example load -- --help`,
//! and `docs/load.md`):
//!
//! - [`RelayLoadClient`]: a player of a relay room. It says hello with the room's session
//!   config (tick rate, players, the input fingerprint of [`load_input_spec`]), answers
//!   `MatchOpened` with `Ready`, sends one small input per tick with redundancy and the
//!   acknowledgement of the confirmed sets it holds (as the deterministic client does), answers
//!   pings and pings the relay, and sends a checksum of every `checksum_every`-th tick it verified (the
//!   deterministic client's default interval, 60, or every tick): a rolling hash of the
//!   confirmed input sets ([`set_hash`], [`rolling_checksum`]), the same on every honest client
//!   of a room, so a desync means the relay confirmed different sets to different clients.
//! - [`OwnershipLoadClient`]: a participant of an ownership room. It joins with the ownership
//!   protocol, bids GRAB for its share of the room's bodies ([`owned_bodies`]), and sends a
//!   state batch every frame of the bodies granted to it moving on circles ([`circle_state`]),
//!   with deltas and acknowledgements through a [`DeltaLink`](simsync_ownership::DeltaLink) as
//!   participants do; it decodes every relay batch the entity server sends it.
//! - [`ClientLink`]: what both clients share — the connection, the client's clock and its
//!   [`ClientPhase`], and the frame around the protocol (the link read first, a lost
//!   connection ending the client, renet's packets sent last); [`LoadClient`] is the steps an
//!   owner calls on either kind.
//! - [`LoadLink`]: the connection under both — netcode's client and renet's over a UDP socket,
//!   as `UdpClientTransport` runs them, with every datagram and byte counted ([`Traffic`]).
//! - [`report`]: what a load run reads from the server (the `/metrics` text, histogram
//!   quantiles, the process's CPU time from `/proc`) and summarizes.
//!
//! Every client is stepped by its owner with the time since its last step
//! ([`LoadClient::frame`]), so many run on one thread, and a test can step them in lockstep
//! with an in-process [`DedicatedServer`](simsync_server::DedicatedServer).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod affinity;
mod client;
mod link;
mod ownership;
mod relay;
pub mod report;

pub use client::{ClientLink, ClientPhase, LoadClient, is_due};
pub use link::{IPV4_UDP_HEADER_BYTES, LoadLink, LoadLinkError, Traffic};
pub use ownership::{
    OwnershipCounters, OwnershipLoadClient, OwnershipLoadSpec, circle_state, owned_bodies,
    ownership_room_config,
};
pub use relay::{
    CHECKSUM_HISTORY, DEFAULT_CHECKSUM_EVERY, RelayCounters, RelayLoadClient, RelayLoadSpec,
    load_input, load_input_spec, relay_room_config, rolling_checksum, set_hash,
};
