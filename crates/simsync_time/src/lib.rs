//! Discrete-event virtual time and simulation frame phases for Bevy. Not Bevy's `Time<Virtual>`
//! (a pausable game clock in seconds): here time is whole ticks plus a priority. The rules this
//! crate follows are in [`rules`]; how it fits the other simsync crates is in the repository's
//! `docs/architecture.md`.
//!
//! Two parts, each a group of private modules re-exported here:
//!
//! - **time**: [`VirtualInstant`] (ticks + priority, total order, never wraps), [`TickRate`]
//!   (default 64 Hz, every tick ⇄ seconds conversion), [`VirtualEventQueue`], [`TimeError`], and
//!   [`VirtualTimePlugin`]: [`TickRate`], [`CurrentInstant`] advanced by an [`AdvancePolicy`]
//!   (one tick per fixed step, jump to the next event, or paused with [`ClockRequest`]s), and
//!   due events of registered queues dispatched as [`VirtualEvent`]s ([`VirtualEventAppExt`]).
//! - **frame**: [`FramePhase`] (setup → object tick → network tick → advance), double-buffered
//!   [`Current`]/[`Next`] state, [`FrameTimings`] (its `DiagnosticsStore` paths on
//!   [`FramePhasesPlugin`] and [`FramePhase::diagnostic_path`]), and
//!   [`FramePhasesPlugin`] wiring them into one schedule.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod clock;
mod error;
mod frame;
mod instant;
mod plugin;
mod queue;
mod rate;

pub use clock::{
    AdvancePolicy, ClockRequest, ClockStats, FrameBudget, MAX_PENDING_REQUESTS, VirtualClock,
};
pub use error::TimeError;
pub use instant::VirtualInstant;
pub use plugin::{
    CurrentInstant, Delivery, VirtualEvent, VirtualEventAppExt, VirtualTimePlugin, VirtualTimeSet,
};
pub use queue::{DrainDue, VirtualEventQueue};
pub use rate::{SecondsDisplay, TickRate};

pub use frame::FramePhase;
pub use frame::double_buffer::{
    Current, DoubleBufferAppExt, DoubleBufferRegistry, DoubleBuffered, Next,
};
pub use frame::plugin::FramePhasesPlugin;
pub use frame::timings::FrameTimings;

#[doc = include_str!("rules.md")]
pub mod rules {}

/// The types most users need: `use simsync_time::prelude::*;`.
pub mod prelude {
    pub use crate::{
        AdvancePolicy, ClockRequest, Current, CurrentInstant, Delivery, DoubleBufferAppExt,
        DoubleBuffered, FrameBudget, FramePhase, FramePhasesPlugin, FrameTimings, Next, TickRate,
        TimeError, VirtualClock, VirtualEvent, VirtualEventAppExt, VirtualEventQueue,
        VirtualInstant, VirtualTimePlugin, VirtualTimeSet,
    };
}
