//! [`FramePhase`] and [`FramePhasesPlugin`]: the four ordered parts of one simulation frame.
//!
//! The split follows the VR-Forces simulation engine's frame: *setup*, then *object tick*
//! (every object's own logic, many threads), then *network tick* (exchange with the outside),
//! then *advance* (next-frame state becomes current). See [`crate::double_buffer`] for why the
//! object tick can run in parallel.

use bevy::ecs::schedule::{InternedScheduleLabel, InternedSystemSet, ScheduleLabel};
use bevy::prelude::*;

use crate::{diagnostics, double_buffer};

/// The four parts of a simulation frame, in this order: `FrameSetup → ObjectTick → NetworkTick →
/// AdvanceFrame` (the VR-Forces frame phases). A chained [`SystemSet`]: put a system in a phase
/// with `.in_set(FramePhase::ObjectTick)`, or order other systems against a phase with
/// `.before(..)` / `.after(..)`.
///
/// [`FramePhasesPlugin`] configures the chain in one schedule (by default `FixedUpdate`, so one
/// frame per fixed step).
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
    /// (the frame-start state) and write their own [`Next<T>`](crate::Next), so they (and
    /// `par_iter_mut` inside them) run in parallel without locks and without order effects.
    /// Usually the most expensive phase.
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

/// The schedules [`FramePhasesPlugin`] has configured in this App (crate-internal).
#[derive(Resource, Debug, Default)]
pub(crate) struct FramePhaseSchedules(pub(crate) Vec<InternedScheduleLabel>);

/// Configures the [`FramePhase`] chain in one schedule, with the double-buffer copy in
/// [`FramePhase::AdvanceFrame`] and per-phase timing ([`FrameTimings`](crate::FrameTimings), Bevy
/// `DiagnosticsStore`).
///
/// A plugin of its own, separate from [`VirtualTimePlugin`](crate::VirtualTimePlugin) (which only
/// holds the clock), because the phases belong to whichever schedule runs one simulation frame:
/// `FixedUpdate` in a plain game ([`FramePhasesPlugin::default`]), or the deterministic
/// `SimulationTick` inside each simulation world, where the game plugin adds
/// `FramePhasesPlugin::in_schedule(SimulationTick).within(SimulationSet::Game)` so the frame runs
/// before physics. This crate does not depend on the deterministic crate; the schedule and the
/// optional parent set are plain labels.
///
/// # Idempotent
///
/// Adding the plugin again for a schedule it already configured does nothing (no second copy
/// system, no double timing). Adding it for a second schedule configures that one too; both then
/// write the same [`FrameTimings`](crate::FrameTimings).
///
/// # Example
///
/// ```
/// use bevy::prelude::*;
/// use simsync_time::prelude::*;
///
/// #[derive(Clone, PartialEq)]
/// struct Heading(f32);
///
/// let mut app = App::new();
/// app.add_plugins(FramePhasesPlugin::default()) // FixedUpdate
///     .register_double_buffered::<Heading>()
///     .add_systems(
///         FixedUpdate,
///         (|mut q: Query<(&Current<Heading>, &mut Next<Heading>)>| {
///             for (now, mut next) in &mut q {
///                 next.0 = Heading(now.0.0 + 1.0);
///             }
///         })
///         .in_set(FramePhase::ObjectTick),
///     );
/// app.world_mut().spawn(DoubleBuffered::new(Heading(0.0)));
/// app.world_mut().run_schedule(FixedUpdate);
/// let heading = app.world_mut().query::<&Current<Heading>>().single(app.world()).unwrap();
/// assert_eq!(heading.0.0, 1.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramePhasesPlugin {
    schedule: InternedScheduleLabel,
    parent: Option<InternedSystemSet>,
}

impl Default for FramePhasesPlugin {
    /// Phases in `FixedUpdate`: one simulation frame per fixed time step.
    fn default() -> Self {
        FramePhasesPlugin::in_schedule(FixedUpdate)
    }
}

impl FramePhasesPlugin {
    /// Phases in the schedule `label`, e.g. `simsync_deterministic::SimulationTick`.
    pub fn in_schedule(label: impl ScheduleLabel) -> Self {
        FramePhasesPlugin {
            schedule: label.intern(),
            parent: None,
        }
    }

    /// Puts the whole frame (the four phases and the timing markers) inside the system set
    /// `parent` of the schedule, e.g. `SimulationSet::Game` so the frame runs before physics.
    #[must_use]
    pub fn within(mut self, parent: impl SystemSet) -> Self {
        self.parent = Some(parent.intern());
        self
    }

    /// The schedule the phases are configured in.
    pub fn schedule(&self) -> InternedScheduleLabel {
        self.schedule
    }

    /// The set the frame is nested in, if any.
    pub fn parent(&self) -> Option<InternedSystemSet> {
        self.parent
    }
}

impl Plugin for FramePhasesPlugin {
    /// Configures the chain `Begin(p) → p → End(p)` for each phase in frame order, the timing
    /// and publishing systems, and the copy systems of the types registered so far. Later
    /// registrations add their copy system to every configured schedule.
    fn build(&self, app: &mut App) {
        let schedule = self.schedule;
        let mut installed = app
            .world_mut()
            .get_resource_or_init::<FramePhaseSchedules>();
        if installed.0.contains(&schedule) {
            debug!("FramePhasesPlugin: phases already configured in {schedule:?}");
            return;
        }
        installed.0.push(schedule);
        app.register_type::<FramePhase>();

        for phase in FramePhase::ALL {
            app.configure_sets(
                schedule,
                (
                    PhaseBoundary::Begin(phase),
                    phase,
                    PhaseBoundary::End(phase),
                )
                    .chain(),
            );
        }
        for pair in FramePhase::ALL.windows(2) {
            app.configure_sets(
                schedule,
                PhaseBoundary::End(pair[0]).before(PhaseBoundary::Begin(pair[1])),
            );
        }
        app.configure_sets(
            schedule,
            (
                FramePhase::FrameSetup,
                FramePhase::ObjectTick,
                FramePhase::NetworkTick,
                FramePhase::AdvanceFrame,
            )
                .chain(),
        );
        app.configure_sets(
            schedule,
            PhaseBoundary::Publish.after(PhaseBoundary::End(FramePhase::AdvanceFrame)),
        );
        if let Some(parent) = self.parent {
            for phase in FramePhase::ALL {
                app.configure_sets(
                    schedule,
                    (
                        PhaseBoundary::Begin(phase),
                        phase,
                        PhaseBoundary::End(phase),
                    )
                        .in_set(parent),
                );
            }
            app.configure_sets(schedule, PhaseBoundary::Publish.in_set(parent));
        }

        diagnostics::add_timing(app, schedule);
        double_buffer::add_copy_systems(app, schedule);
    }

    /// `false`: the plugin may be added once per schedule (see the type docs).
    fn is_unique(&self) -> bool {
        false
    }
}
