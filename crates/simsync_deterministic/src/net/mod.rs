//! The networked session (DESIGN §3 "Networked session"): a relay server that owns the tick
//! clock and confirms input sets without simulating ([`server`]), and the client side of the
//! deterministic session ([`client`]), over `simsync_net` (renet; in-memory or UDP transport).

pub mod client;
pub mod server;

pub use client::{NetworkClientStats, NetworkSessionConfig};
pub use server::{DeterministicServerPlugin, RelayServer, RelayServerConfig, RelayStats};
