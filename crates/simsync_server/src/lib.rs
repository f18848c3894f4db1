//! `simsync_server`: the dedicated server of simsync ([rules](rules)). One process hosts any
//! number of **rooms** — deterministic relay rooms and ownership entity-server rooms — on one
//! UDP port, admits clients by netcode's secure connect tokens whose user data names the room
//! and the slot, and serves an HTTP port for operations (`/healthz`, `/readyz`, `/metrics`)
//! and the admin API (rooms created, listed, read and ended with an admin token). SIGTERM or
//! SIGINT drains it. The `simsync-server` binary runs it from a config file, environment
//! variables and flags; this library is for studios that build their own server (with their
//! game's input type) and for matchmakers that mint tokens.
//!
//! The parts:
//! - Tokens: [`TokenClaims`] (room and slot in a token's user data), [`TokenMinter`].
//! - Health: [`Heartbeat`] (the main loop's), [`Readiness`].
//! - Agones: [`AgonesAdapter`] (the `--agones` mode's thread), [`AgonesSdk`] (single calls to
//!   the sidecar).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod agones;
mod health;
mod token;

/// The server's rules, in prose: rooms, tokens, operations, drain, fleets.
#[doc = include_str!("rules.md")]
pub mod rules {}

pub use agones::{
    AGONES_PORT_ENV, AGONES_REQUEST_TIMEOUT, AgonesAdapter, AgonesConfig, AgonesError,
    AgonesReport, AgonesSdk, AgonesStats, DEFAULT_HEALTH_INTERVAL, GameServerInfo, PLAYERS_COUNTER,
    ROOMS_COUNTER, ROOMS_LIST,
};
pub use health::{Heartbeat, LIVENESS_TIMEOUT, NotReady, Readiness};
pub use token::{ClaimsError, RoomId, TokenClaims, TokenError, TokenMinter, key_to_hex, parse_key};
