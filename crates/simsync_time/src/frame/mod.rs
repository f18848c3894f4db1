//! Frame phases: the four ordered parts of one simulation frame, and the state they share.
//!
//! The split follows the VR-Forces simulation engine's frame: *setup*, then *object tick*
//! (every object's own logic, many threads), then *network tick* (exchange with the outside),
//! then *advance* (next-frame state becomes current). The rules are in
//! [time rules: frame phases](crate::rules).
//!
//! This file holds data only ([`FramePhase`], the timing markers, the list of configured
//! schedules). The files beside it import it and nothing imports them back except `plugin`:
//!
//! - `double_buffer`: [`Current`](crate::Current) / [`Next`](crate::Next) and the copy systems;
//!   imports this file.
//! - `timings`: [`FrameTimings`](crate::FrameTimings) and the timing systems; imports this file
//!   and `double_buffer` (to count objects).
//! - `plugin`: [`FramePhasesPlugin`](crate::FramePhasesPlugin), the only wiring; imports all
//!   three.

use bevy::ecs::schedule::InternedScheduleLabel;
use bevy::prelude::*;

pub(crate) mod double_buffer;
pub(crate) mod plugin;
pub(crate) mod timings;

/// The four parts of a simulation frame, in this order: `FrameSetup → ObjectTick → NetworkTick →
/// AdvanceFrame` (the VR-Forces frame phases; [time rules 11–14](crate::rules)). A chained
/// [`SystemSet`]: put a system in a phase with `.in_set(FramePhase::ObjectTick)`, or order other
/// systems against a phase with `.before(..)` / `.after(..)`.
///
/// [`FramePhasesPlugin`](crate::FramePhasesPlugin) configures the chain in one schedule (by
/// default `FixedUpdate`, so one frame per fixed step).
///
/// Rules of each phase for [double-buffered](crate::Current) state:
///
/// | phase | reads | writes |
/// |---|---|---|
/// | `FrameSetup` | anything | per-frame scratch data, queues (e.g. pop due events of a [`VirtualEventQueue`](crate::VirtualEventQueue)) |
/// | `ObjectTick` | [`Current<T>`](crate::Current) of *any* object | [`Next<T>`](crate::Next) of the object being ticked only |
/// | `NetworkTick` | [`Current<T>`](crate::Current) (to send) | [`Next<T>`](crate::Next) of remotely owned objects (received) |
/// | `AdvanceFrame` | [`Next<T>`](crate::Next) | [`Current<T>`](crate::Current), copied by the plugin for every registered `T` |
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Reflect)]
#[reflect(Debug, Clone, PartialEq, Hash)]
pub enum FramePhase {
    /// Start of the frame: set up the data structures the frame needs.
    FrameSetup,
    /// Every object's own logic. Systems here read other objects' [`Current<T>`](crate::Current)
    /// (the frame-start state) and write their own [`Next<T>`](crate::Next): the scheduler may
    /// run them, and `par_iter_mut` may split their objects over threads, with no lock and no
    /// dependence on order (time rule 14). Usually the most expensive phase.
    ObjectTick,
    /// Exchange with the network or session: publish current state, receive remote state.
    NetworkTick,
    /// End of the frame: [`Next<T>`](crate::Next) is copied into [`Current<T>`](crate::Current)
    /// for every type registered with
    /// [`register_double_buffered`](crate::DoubleBufferAppExt::register_double_buffered).
    AdvanceFrame,
}

impl FramePhase {
    /// All phases in frame order.
    pub const ALL: [FramePhase; 4] = [
        FramePhase::FrameSetup,
        FramePhase::ObjectTick,
        FramePhase::NetworkTick,
        FramePhase::AdvanceFrame,
    ];

    /// Position of the phase in the frame, `0..4` (index into [`FramePhase::ALL`]).
    pub const fn index(self) -> usize {
        match self {
            FramePhase::FrameSetup => 0,
            FramePhase::ObjectTick => 1,
            FramePhase::NetworkTick => 2,
            FramePhase::AdvanceFrame => 3,
        }
    }

    /// Short snake-case name, used in diagnostic paths: `frame_setup`, `object_tick`,
    /// `network_tick`, `advance_frame`.
    pub const fn name(self) -> &'static str {
        match self {
            FramePhase::FrameSetup => "frame_setup",
            FramePhase::ObjectTick => "object_tick",
            FramePhase::NetworkTick => "network_tick",
            FramePhase::AdvanceFrame => "advance_frame",
        }
    }
}

/// Timing markers around each phase (crate-internal: a marker system sits in each). Frame order:
/// `Begin(p)`, `p`, `End(p)` for each phase `p`, then `Publish`.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PhaseBoundary {
    /// Just before the phase's systems.
    Begin(FramePhase),
    /// Just after the phase's systems.
    End(FramePhase),
    /// After the whole frame: timings and object counts are published.
    Publish,
}

impl PhaseBoundary {
    /// The phase between its two markers, `(Begin(phase), phase, End(phase))`, ready to be
    /// chained or nested as one group.
    pub(crate) const fn around(phase: FramePhase) -> (PhaseBoundary, FramePhase, PhaseBoundary) {
        (
            PhaseBoundary::Begin(phase),
            phase,
            PhaseBoundary::End(phase),
        )
    }
}

/// The schedules [`FramePhasesPlugin`](crate::FramePhasesPlugin) has configured in this App
/// (crate-internal).
#[derive(Resource, Debug, Default)]
pub(crate) struct FramePhaseSchedules(pub(crate) Vec<InternedScheduleLabel>);
