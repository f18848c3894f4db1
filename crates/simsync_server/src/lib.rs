//! `simsync_server`: the dedicated server of simsync ([its rules](rules)). One process hosts any
//! number of **rooms** — deterministic relay rooms and ownership entity-server rooms — on one
//! UDP port, admits clients by netcode's secure connect tokens whose user data names the room
//! and the slot, and serves an HTTP port for operations (`/healthz`, `/readyz`, `/metrics`)
//! and the admin API (rooms created, listed, read and ended with an admin token). SIGTERM or
//! SIGINT drains it. The `simsync-server` binary runs it from a config file, environment
//! variables and flags; this library is for studios that build their own server (with their
//! game's input type, [`DedicatedServer::bind_with`]) and for matchmakers that mint tokens
//! ([`TokenMinter`]).
//!
//! The parts:
//! - [`DedicatedServer`]: the main loop's turn ([`DedicatedServer::turn`]) and real-time loop
//!   ([`DedicatedServer::run`]); [`DrainSignal`] starts the drain ([`Drain`]).
//! - Rooms: [`Rooms`] (the transport's connection sink: routing by token; the worker
//!   threads the rooms run on, [`RoomEntry`], [`WorkerLoad`]), [`Room`], [`RoomConfig`]
//!   ([`RelayRoomConfig`], [`OwnershipRoomConfig`]), [`RoomSummary`].
//! - Tokens: [`TokenClaims`] (room and slot in a token's user data), [`TokenMinter`].
//! - Operations: [`Heartbeat`], [`Readiness`], [`ServerMetrics`], the admin API
//!   ([`AdminCommand`], [`AdminError`]).
//! - Agones: [`AgonesAdapter`] (the `--agones` mode's thread), [`AgonesSdk`] (single calls to
//!   the sidecar).
//! - Configuration: [`ServeArgs`] (flags and environment), [`FileConfig`], [`ServerConfig`].
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod admin;
mod agones;
mod config;
mod drain;
mod health;
mod http;
mod metrics;
mod metrics_format;
mod pace;
mod pool;
mod process;
mod room;
mod room_config;
mod rooms;
mod server;
mod token;
mod worker;

/// The server's rules, in prose: rooms, tokens, operations, drain, fleets.
#[doc = include_str!("rules.md")]
pub mod rules {}

pub use admin::{AdminCommand, AdminError, AdminRequest, AdminResponse, MAX_BODY_BYTES};
pub use agones::{
    AGONES_PORT_ENV, AGONES_REQUEST_TIMEOUT, AgonesAdapter, AgonesConfig, AgonesError,
    AgonesReport, AgonesSdk, AgonesStats, DEFAULT_HEALTH_INTERVAL, GameServerInfo, PLAYERS_COUNTER,
    ROOMS_COUNTER, ROOMS_LIST,
};
pub use config::{
    ConfigError, DEFAULT_AGONES_URL, DEFAULT_BIND, DEFAULT_DRAIN_TIMEOUT_SECS,
    DEFAULT_EMPTY_ROOM_TIMEOUT_SECS, DEFAULT_LOOP_HZ, DEFAULT_OPS_BIND, FileConfig, FileRoom,
    LogFormat, MAX_WORKERS, ServeArgs, ServerConfig, default_workers,
};
pub use drain::{Drain, DrainAction, DrainPhase, ENDING_WAIT};
pub use health::{Heartbeat, LIVENESS_TIMEOUT, NotReady, Readiness};
pub use http::{ADMIN_ANSWER_TIMEOUT, MetricsFormat, OPS_THREADS, OpsConnections, OpsLimits};
pub use metrics::{
    HttpMetrics, METRIC_NAMES, ServerMetrics, build_profile, hello_refusal_label,
    remote_error_label, render, to_prometheus_text,
};
pub use pool::WorkerStopped;
pub use process::{ProcFiles, ProcessSample, USER_HZ};
pub use room::{
    AuthoritySummary, END_GRACE, OwnershipSummary, RelayBuilder, RelaySeats, RelaySummary, Room,
    RoomState, RoomSummary, RoomTotals, RoomTurn, fingerprint_relay,
};
pub use room_config::{
    BodyProperties, BodySpec, InputSpec, MAX_BODIES, MAX_INPUT_BYTES, MAX_INPUT_NAME_BYTES,
    MAX_PARTICIPANTS, MAX_PLAYERS, MAX_SIZE, OwnershipRoomConfig, PhysicsHostSpec, RelayRoomConfig,
    RoomConfig, RoomConfigError, ShapeSpec, TICK_RATES_HZ,
};
pub use rooms::{
    CreateRoomError, ENDED_KEPT, MAX_ROOMS, REFUSAL_LABELS, REFUSED_LINGER, RoomEntry, Rooms,
    SinkCounters, UnknownRoom, WorkerLoad, refusal_label,
};
pub use server::{DedicatedServer, DrainSignal, ServerError};
pub use token::{ClaimsError, RoomId, TokenClaims, TokenError, TokenMinter, key_to_hex, parse_key};
pub use worker::thread_name as worker_thread_name;
