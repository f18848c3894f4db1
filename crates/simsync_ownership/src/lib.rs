//! Simulation ownership for distributed, non-deterministic physics: every participant simulates
//! every body, but each moving body has one *simulation owner* whose state updates the entity
//! server relays to everyone else (DESIGN §5, after High Fidelity's fourteen ownership rules).
//!
//! This crate is the pure core: plain data and functions that take the time as an argument
//! (a [`Duration`](core::time::Duration) since an epoch of the caller's choosing) and never read
//! a clock, send a packet or touch physics. The parts, one per module:
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
//!   (`components`): the ECS components the plugin will read and write.
//! - [`OwnershipError`] (`error`): the one error type.
//!
//! Where High Fidelity's shipped code deviates from its own header — the lockout checked on
//! the bid rather than the body, a 10 s stale-owner timeout without zeroing, no delay before
//! the first VOLUNTEER bid — this crate follows the header as written; see the `arbiter` and
//! `participant` module docs.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod arbiter;
mod components;
mod config;
mod error;
mod participant;
mod priority;
mod relay;

pub use arbiter::{
    ArbiterStats, BodyKind, BodyRecord, Expired, ExpiryCause, Grant, OwnershipArbiter, Refusal,
    RefusalCounts, RefusalReason, Released,
};
pub use components::{BodyNetId, Ownable, OwnershipBid, OwnershipLock, SimulationOwner};
pub use config::OwnershipConfig;
pub use error::OwnershipError;
pub use participant::{Action, BodyObservation, ParticipantOwnership, PendingRequest};
pub use priority::{BodyId, ParticipantId, Priority};
pub use relay::{BodyState, Sequence, SequenceFilter, is_newer, should_send};

/// The types most users need: `use simsync_ownership::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Action, BodyId, BodyNetId, BodyObservation, Ownable, OwnershipArbiter, OwnershipBid,
        OwnershipConfig, OwnershipError, OwnershipLock, ParticipantId, ParticipantOwnership,
        Priority, RefusalReason, SimulationOwner,
    };
}
