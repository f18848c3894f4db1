//! Discrete-event virtual time for Bevy simulations.
//!
//! Time here is a whole number of *ticks* plus a *priority* that orders events falling on the
//! same tick, the model of discrete-event simulators. It is a different idea from Bevy's
//! `Time<Virtual>` (a pausable, scalable game clock in seconds) and works alongside it.
//!
//! The parts, one per module:
//!
//! - [`VirtualInstant`] (`instant`): a point in virtual time, totally ordered by
//!   `(ticks, priority)`, with non-wrapping arithmetic and [`VirtualInstant::INFINITY`].
//! - [`TickRate`] (`rate`): ticks per second (default 64), a Bevy resource, and every
//!   ticks ⇄ seconds / microseconds / `Duration` conversion.
//! - [`VirtualEventQueue`] (`queue`): events waiting for their instant, popped in
//!   `(ticks, priority, insertion)` order; cloneable for snapshots.
//! - [`VirtualTimePlugin`] and [`CurrentInstant`] (`plugin`): wire the rate and the current
//!   instant into an App.
//! - [`FramePhase`] and [`FramePhasesPlugin`] (`phases`): the four ordered parts of a simulation
//!   frame (setup, object tick, network tick, advance — the VR-Forces frame), configurable into
//!   any schedule. A plugin separate from `VirtualTimePlugin` because it belongs to the schedule
//!   that runs one frame (`FixedUpdate`, or the deterministic `SimulationTick` of each
//!   simulation world).
//! - [`Current`], [`Next`], [`DoubleBuffered`] and [`DoubleBufferAppExt`] (`double_buffer`):
//!   double-buffered object state, copied `Next → Current` at the end of each frame.
//! - [`FrameTimings`] and the [`diagnostics`] paths: per-phase wall time and object counts,
//!   also published to Bevy's `DiagnosticsStore`.
//! - [`TimeError`] (`error`): the one error type; nothing in this crate panics on bad input.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod diagnostics;
mod double_buffer;
mod error;
mod instant;
mod phases;
mod plugin;
mod queue;
mod rate;

pub use diagnostics::FrameTimings;
pub use double_buffer::{Current, DoubleBufferAppExt, DoubleBufferRegistry, DoubleBuffered, Next};
pub use phases::{FramePhase, FramePhasesPlugin};

pub use error::TimeError;
pub use instant::{SecondsDisplay, VirtualInstant};
pub use plugin::{CurrentInstant, VirtualTimePlugin};
pub use queue::{DrainDue, VirtualEventQueue};
pub use rate::TickRate;

/// The types most users need: `use simsync_time::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Current, CurrentInstant, DoubleBufferAppExt, DoubleBuffered, FramePhase, FramePhasesPlugin,
        FrameTimings, Next, TickRate, TimeError, VirtualEventQueue, VirtualInstant,
        VirtualTimePlugin,
    };
}
