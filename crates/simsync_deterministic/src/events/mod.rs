//! Simulation events: how something that happens in a simulation tick reaches the main app
//! once, although the tick runs several times (predicted, re-simulated after each rollback,
//! verified). The rules are in [simulation events](crate::rules#simulation-events).
//!
//! - A [`SimulationTick`](crate::SimulationTick) system emits with the [`SimEvents<E>`]
//!   parameter; `E` is any [`SimEvent`] (every `Clone + Eq + Hash` type is one).
//! - The main app registers `E` with [`add_sim_event`](SimEventAppExt::add_sim_event) and reads
//!   two message streams, written in each session update after prediction:
//!   - [`SimEventReceived<E>`]: each event identity (tick, key, occurrence) once as
//!     [`Predicted`](SimEventStatus::Predicted) or [`Late`](SimEventStatus::Late), then once as
//!     [`Confirmed`](SimEventStatus::Confirmed) or [`Cancelled`](SimEventStatus::Cancelled);
//!   - [`ConfirmedSimEvent<E>`]: each event the verified world produced, exactly once.
//! - [`SimEventLedger<E>`] is the bookkeeping behind it, [`SimEventStats`] its counters.
//!
//! The side-effect patterns (sound, visual effects, network sends) are in
//! [simulation events](crate::rules#side-effects-two-kinds-two-streams).

mod event;
mod ledger;
mod plugin;
mod stats;
mod writer;

pub use event::{ConfirmedSimEvent, SimEvent, SimEventId, SimEventReceived, SimEventStatus};
pub use ledger::SimEventLedger;
pub use plugin::{SimEventAppExt, SimEventError};
pub(crate) use plugin::{deliver, settle_through, start_session};
pub use stats::{SimEventStats, UnregisteredSimEvent};
pub use writer::SimEvents;
