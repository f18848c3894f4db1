//! Simulation ownership for distributed, non-deterministic physics: every participant simulates
//! every body, but each moving body has one *simulation owner* whose state updates the entity
//! server relays to everyone else, decided by the [ownership rules](rules) (fourteen about owners, six about state traffic) (after High
//! Fidelity's).
//!
//! The parts:
//! - **Plugin** — [`OwnershipPlugin`] wires an [`EntityServer`] (arbitrates bids, relays state)
//!   or an [`OwnershipClient`] (a participant: observes its Rapier world, bids, yields,
//!   releases, sends and applies state) into an App, in the [`OwnershipSet`]s, on
//!   [`OwnershipClock`]; bodies are matched across Apps by [`BodyNetId`].
//! - **Game API** — the components ([`SimulationOwner`], [`Ownable`], [`Held`], ...), the
//!   [`OwnershipEntityCommandsExt`] marks (`poke`, `grab`, `yield_ownership`) and the messages
//!   [`OwnershipChanged`], [`BidRefused`] and [`CountedSilent`] (participants),
//!   [`ParticipantGone`] and [`ParticipantReturned`] (entity server).
//! - **Pure core** — no clock, no network, no physics: [`OwnershipArbiter`] (the entity
//!   server's rules 1–5 and 7), [`ParticipantOwnership`] (a participant's rules 6–14 as a state
//!   machine over [`BodyObservation`]s → [`Action`]s), [`OwnershipConfig`] and [`Priority`],
//!   the send policy ([`should_send`]), [`BodyState`] and its wire forms
//!   ([`StateBatch`], many bodies quantized in one message, travelling as a [`WireBatch`] of
//!   absolute entries and deltas against acknowledged states, [`DeltaLink`]; [`state_to_wire`],
//!   one body), the
//!   byte budgets ([`StateBudgetConfig`], [`UploadBudget`], [`PriorityAccumulator`]),
//!   [`ActivityConfig`], the entity server's [`EntityServerLimits`], and its physics host's
//!   decisions ([`PhysicsHost`], [`PhysicsHostConfig`], [`StateLimits`]: [rules 21,
//!   22](rules#rule-21--the-physics-host)).
//! - **Traffic** — [`StateTraffic`], bytes per second up and down, bytes per body and budget
//!   use, a reflected resource of both roles (and [`OwnershipDiagnosticsPlugin`], whose constants are its `DiagnosticsStore` paths).
//! - **Errors** — [`OwnershipError`]; a refused request is a [`Refusal`] with a
//!   [`RefusalReason`], a protocol outcome rather than an error.
//! - **Testing** — [`testing::OwnershipPeers`]: an entity server and N participants in one
//!   process over the conditioned in-memory transport, for a game's own tests.
//!
//! ```
//! use bevy::prelude::*;
//! use bevy_rapier3d::prelude::*;
//! use simsync_net::{MemoryNetwork, NetAppExt, NetClientPlugin, NetClock, NetServerPlugin};
//! use simsync_ownership::prelude::*;
//!
//! let network = MemoryNetwork::perfect(1);
//! let mut server = App::new();
//! server
//!     .add_plugins((MinimalPlugins, NetServerPlugin::default().with_clock(NetClock::fixed_hz(64))))
//!     .add_plugins(OwnershipPlugin::entity_server())
//!     .insert_net_server(network.server_transport()?);
//! server.world_mut().spawn((BodyNetId(BodyId(7)), RigidBody::Dynamic, Transform::default()));
//!
//! let mut participant = App::new();
//! participant
//!     .add_plugins((MinimalPlugins, TransformPlugin, RapierPhysicsPlugin::<NoUserData>::default()))
//!     .add_plugins(NetClientPlugin::default().with_clock(NetClock::fixed_hz(64)))
//!     .add_plugins(OwnershipPlugin::participant())
//!     .insert_net_client(network.client_transport(1)?);
//! participant.world_mut().spawn((
//!     BodyNetId(BodyId(7)),
//!     Ownable,
//!     RigidBody::Dynamic,
//!     Collider::cuboid(0.5, 0.5, 0.5),
//!     Transform::default(),
//! ));
//! for _ in 0..4 {
//!     server.update();
//!     participant.update();
//! }
//! assert!(participant.world().resource::<OwnershipClient>().me().is_some());
//! # Ok::<(), simsync_net::NetError>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[doc = include_str!("rules.md")]
pub mod rules {}

mod activity;
mod arbiter;
mod baseline;
mod batch;
mod body;
mod body_map;
mod budget;
mod client;
mod clock;
mod coalesce;
mod commands;
mod components;
mod config;
mod diagnostics;
mod error;
mod host;
mod limits;
mod messages;
mod participant;
mod plugin;
mod priority;
mod relay;
mod send_policy;
mod server;
mod sets;
pub mod testing;
mod traffic;
mod wire;

pub use activity::ActivityConfig;
pub use arbiter::{
    ArbiterStats, BodyRecord, Expired, ExpiryCause, Grant, OwnershipArbiter, Refusal,
    RefusalCounts, Released,
};
pub use baseline::{
    ACK_INTERVAL, AckRejection, AckWindow, DeltaLink, DeltaRejection, HISTORY_BATCHES, RING_LEN,
    Received, ReceivedStates, Resolved, SentHistory,
};
pub use batch::{
    BatchAck, BatchError, Delta, Entry, MAX_BASELINE_AGO, MAX_BATCH_BODIES, MAX_BATCH_BODY_ID,
    MAX_BATCH_BYTES, POSITION_STEP, QuantizedState, RotationDelta, StateBatch, VELOCITY_STEP,
    WireBatch, choose_entry, entry_size_with, header_size, is_newer_batch, quantize,
};
pub use body::{BodyKind, BodyState, MAX_STATE_AGE, one_way_latency};
pub use budget::{
    Candidate, MAX_WEIGHT, MIN_BUDGET_BYTES_PER_SECOND, MIN_WEIGHT, NEAR_METERS,
    PriorityAccumulator, Selection, StateBudgetConfig, UploadBudget, nearest, send_weight,
};
pub use client::{OwnershipClient, ParticipantStats};
pub use clock::OwnershipClock;
pub use commands::OwnershipEntityCommandsExt;
pub use components::{
    BodyNetId, Held, Ownable, OwnershipBid, OwnershipLock, ParticipantAvatar, Poked,
    SimulationOwner, Uninterested,
};
pub use config::OwnershipConfig;
pub use diagnostics::OwnershipDiagnosticsPlugin;
pub use error::OwnershipError;
pub use host::{HostAction, HostObservation, PhysicsHost, PhysicsHostConfig, Reach, StateLimits};
pub use limits::{EntityServerLimits, RateLimitedCounts};
pub use messages::{
    BidRefused, CountedSilent, GoneCause, OwnershipChanged, ParticipantEnd, ParticipantEnded,
    ParticipantGone, ParticipantReturned, RefusedBy, RoomClosing,
};
pub use participant::{Action, BodyObservation, ParticipantOwnership, PendingRequest};
pub use plugin::{OwnershipPlugin, OwnershipRole, OwnershipSetupError, fixed_physics_step};
pub use priority::{BodyId, ParticipantId, Priority};
pub use send_policy::{Sequence, should_send};
pub use server::{EntityServer, EntityServerStats};
pub use sets::OwnershipSet;
/// Where a participant is in `simsync_net`'s one handshake ([`OwnershipClient::status`]).
pub use simsync_net::JoinStatus;
/// One token bucket's numbers, for [`EntityServerLimits`]: `simsync_net`'s type.
pub use simsync_net::RateLimit;
/// Why the entity server refused a message: `simsync_net`'s type, the same on the wire.
pub use simsync_net::RefusalReason;
pub use simsync_net::single_threaded_schedules;
pub use traffic::CounterRate;
pub use traffic::{StateTraffic, TrafficMeter, TrafficTotals};
pub use wire::{MAX_STATE_MAGNITUDE, state_from_wire, state_to_wire};

/// The types a game needs: `use simsync_ownership::prelude::*;`. The pure core
/// ([`OwnershipArbiter`], [`ParticipantOwnership`], [`Action`], [`BodyObservation`]) stays at
/// the crate root.
pub mod prelude {
    pub use crate::{
        BidRefused, BodyId, BodyNetId, CountedSilent, EntityServer, GoneCause, Held, Ownable,
        OwnershipBid, OwnershipChanged, OwnershipClient, OwnershipConfig,
        OwnershipEntityCommandsExt, OwnershipError, OwnershipLock, OwnershipPlugin, OwnershipSet,
        ParticipantAvatar, ParticipantEnd, ParticipantEnded, ParticipantGone, ParticipantId,
        ParticipantReturned, PhysicsHostConfig, Priority, RefusalReason, RefusedBy, RoomClosing,
        SimulationOwner, StateBudgetConfig, StateLimits, StateTraffic,
    };
}
