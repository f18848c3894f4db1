//! Simulation ownership for distributed, non-deterministic physics: every participant simulates
//! every body, but each moving body has one *simulation owner* whose state updates the entity
//! server relays to everyone else (DESIGN §5, after High Fidelity's fourteen ownership rules).
//!
//! # The plugin
//! [`OwnershipPlugin::entity_server`] and [`OwnershipPlugin::participant`] run the rules over
//! renet (`simsync_net`): the entity server arbitrates bids (rules 1–5, 7) and relays owners'
//! state; each participant, with its own Rapier world, decides from its physics when to bid,
//! yield and release (rules 6–14), sends its owned bodies' state and applies everyone else's.
//! Bodies are matched across Apps by [`BodyNetId`]. Game code marks bodies through
//! [`OwnershipEntityCommandsExt`] (`poke`, `grab`, `release_grab`, `yield_ownership`) and reads
//! [`OwnershipChanged`] and [`BidRefused`] messages. See the [`plugin`] module for schedules,
//! [`server`] for the entity server and [`client`] for a participant.
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
//! assert!(participant.world().resource::<OwnershipParticipant>().me().is_some());
//! # Ok::<(), simsync_net::NetError>(())
//! ```
//!
//! # The pure core
//! Under the plugin, plain data and functions that take the time as an argument (a
//! [`Duration`](core::time::Duration) since an epoch of the caller's choosing) and never read a
//! clock, send a packet or touch physics:
//!
//! - [`Priority`], [`ParticipantId`], [`BodyId`] (`priority`): who bids, how hard, for what.
//! - [`OwnershipConfig`] (`config`): every priority level and timing of the rules, with the
//!   defaults of DESIGN §5 (200 ms lockout, 5 s silence expiry, 0.5 s volunteer delay, 200 ms
//!   bid resend, 2 mm / 0.5° relay thresholds).
//! - [`OwnershipArbiter`] (`arbiter`): the entity server's table — bids, releases, priority
//!   changes, owner updates, silence expiry and disconnects (rules 1–5 and the server half
//!   of 7), with counters per refusal reason.
//! - [`ParticipantOwnership`] (`participant`): a participant's state machine per body
//!   (rules 6–14), turning observations into [`Action`]s.
//! - [`should_send`], [`Sequence`], [`SequenceFilter`] (`relay`): when an owner sends state, and
//!   which received updates are fresh.
//! - [`SimulationOwner`], [`OwnershipBid`], [`Ownable`], [`OwnershipLock`], [`BodyNetId`]
//!   (`components`): the ECS components the plugin reads and writes.
//! - [`wire`]: conversions to and from `simsync_net`'s ownership messages.
//! - [`OwnershipError`] (`error`): the one error type.
//!
//! Where High Fidelity's shipped code deviates from its own header — the lockout checked on
//! the bid rather than the body, a 10 s stale-owner timeout without zeroing, no delay before
//! the first VOLUNTEER bid — this crate follows the header as written; see the `arbiter` and
//! `participant` module docs.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod arbiter;
pub mod client;
mod components;
mod config;
mod error;
mod participant;
pub mod plugin;
mod priority;
mod relay;
pub mod server;
pub mod wire;

pub use arbiter::{
    ArbiterStats, BodyKind, BodyRecord, Expired, ExpiryCause, Grant, OwnershipArbiter, Refusal,
    RefusalCounts, RefusalReason, Released,
};
pub use client::{JoinStatus, OwnershipParticipant, ParticipantStats};
pub use components::{BodyNetId, Ownable, OwnershipBid, OwnershipLock, SimulationOwner};
pub use config::OwnershipConfig;
pub use error::OwnershipError;
pub use participant::{Action, BodyObservation, ParticipantOwnership, PendingRequest};
pub use plugin::{
    ActivityConfig, BidRefused, Held, OwnershipChanged, OwnershipClock, OwnershipEntityCommandsExt,
    OwnershipPlugin, OwnershipRole, OwnershipSet, OwnershipSetupError, ParticipantAvatar, Poked,
    Uninterested,
};
pub use priority::{BodyId, ParticipantId, Priority};
pub use relay::{BodyState, Sequence, SequenceFilter, is_newer, should_send};
pub use server::{EntityServer, EntityServerStats};
pub use wire::MAX_STATE_MAGNITUDE;

/// The types most users need: `use simsync_ownership::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Action, BidRefused, BodyId, BodyNetId, BodyObservation, EntityServer, Held, Ownable,
        OwnershipArbiter, OwnershipBid, OwnershipChanged, OwnershipConfig,
        OwnershipEntityCommandsExt, OwnershipError, OwnershipLock, OwnershipParticipant,
        OwnershipPlugin, OwnershipSet, ParticipantAvatar, ParticipantId, ParticipantOwnership,
        Priority, RefusalReason, SimulationOwner,
    };
}
