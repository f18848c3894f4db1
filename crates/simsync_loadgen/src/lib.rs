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
//! - [`LoadLink`]: the connection under both — netcode's client and renet's over a UDP socket,
//!   as `UdpClientTransport` runs them, with every datagram and byte counted ([`Traffic`]).
//! - [`report`]: what a load run reads from the server (the `/metrics` text, histogram
//!   quantiles, the process's CPU time from `/proc`) and summarizes.
//!
//! Every client is stepped by its owner with the time since its last step
//! ([`RelayLoadClient::frame`]), so many run on one thread, and a test can step them in lockstep
//! with an in-process [`DedicatedServer`](simsync_server::DedicatedServer).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod link;
mod ownership;
mod relay;
pub mod report;

pub use link::{IPV4_UDP_HEADER_BYTES, LoadLink, LoadLinkError, Traffic};
pub use ownership::{
    OwnershipCounters, OwnershipLoadClient, OwnershipLoadSpec, circle_state, owned_bodies,
    ownership_room_config,
};
pub use relay::{
    CHECKSUM_HISTORY, DEFAULT_CHECKSUM_EVERY, RelayCounters, RelayLoadClient, RelayLoadSpec,
    load_input, load_input_spec, relay_room_config, rolling_checksum, set_hash,
};

use serde::Serialize;

/// Where a load client is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "why")]
pub enum ClientPhase {
    /// netcode's handshake, or the `Hello` not answered yet.
    Connecting,
    /// Welcomed; a relay client waits for its match to start.
    Joined,
    /// Playing: a relay client's match runs, a participant sends states.
    Running,
    /// The server ended the match or the room (the reason as the server said).
    Ended(String),
    /// The server refused the client (the reason).
    Refused(String),
    /// The connection was lost (netcode's or renet's reason).
    Lost(String),
}

impl ClientPhase {
    /// A short name for counting: `connecting`, `joined`, `running`, `ended`, `refused`,
    /// `lost`.
    pub fn name(&self) -> &'static str {
        match self {
            ClientPhase::Connecting => "connecting",
            ClientPhase::Joined => "joined",
            ClientPhase::Running => "running",
            ClientPhase::Ended(_) => "ended",
            ClientPhase::Refused(_) => "refused",
            ClientPhase::Lost(_) => "lost",
        }
    }

    /// Whether the client is done (ended, refused or lost): it sends nothing any more.
    pub fn is_over(&self) -> bool {
        matches!(
            self,
            ClientPhase::Ended(_) | ClientPhase::Refused(_) | ClientPhase::Lost(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_have_names_and_only_the_last_three_are_over() {
        let phases = [
            ClientPhase::Connecting,
            ClientPhase::Joined,
            ClientPhase::Running,
            ClientPhase::Ended("x".into()),
            ClientPhase::Refused("y".into()),
            ClientPhase::Lost("z".into()),
        ];
        let names: Vec<&str> = phases.iter().map(ClientPhase::name).collect();
        assert_eq!(
            names,
            [
                "connecting",
                "joined",
                "running",
                "ended",
                "refused",
                "lost"
            ]
        );
        let over: Vec<bool> = phases.iter().map(ClientPhase::is_over).collect();
        assert_eq!(over, [false, false, false, true, true, true]);
        assert_eq!(
            serde_json::to_string(&ClientPhase::Lost("timeout".into())).unwrap(),
            r#"{"state":"lost","why":"timeout"}"#
        );
    }
}
