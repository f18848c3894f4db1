//! [`FramePhasesPlugin`]: wires the frame phases, the double-buffer copy and the timings into
//! one schedule. The only file of `frame` that imports the others.

use bevy::diagnostic::DiagnosticPath;
use bevy::ecs::schedule::{InternedScheduleLabel, InternedSystemSet, ScheduleLabel};
use bevy::prelude::*;

use super::{FramePhase, FramePhaseSchedules, PhaseBoundary, double_buffer, timings};

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

/// The `DiagnosticsStore` paths of the whole frame (Bevy's convention: constants on the plugin
/// that publishes them); each phase's wall time is under [`FramePhase::diagnostic_path`].
impl FramePhasesPlugin {
    /// Wall time of the whole frame, from the start of `FrameSetup` to the end of
    /// `AdvanceFrame`, milliseconds: `simsync/frame/frame_ms`.
    pub const FRAME_MS: DiagnosticPath = timings::FRAME_MS;
    /// Number of objects (entities with any registered [`Current<T>`](crate::Current)) at the
    /// end of the frame, a count: `simsync/frame/objects`.
    pub const FRAME_OBJECTS: DiagnosticPath = timings::FRAME_OBJECTS;
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
        configure_phase_sets(app, schedule, self.parent);
        timings::add_timing(app, schedule);
        double_buffer::add_copy_systems(app, schedule);
    }

    /// `false`: the plugin may be added once per schedule (see the type docs).
    fn is_unique(&self) -> bool {
        false
    }
}

/// Orders the sets of one frame in `schedule`: `Begin(p) → p → End(p)` for each phase, the
/// phases in frame order, `Publish` last; all inside `parent` when one is given.
fn configure_phase_sets(
    app: &mut App,
    schedule: InternedScheduleLabel,
    parent: Option<InternedSystemSet>,
) {
    for phase in FramePhase::ALL {
        app.configure_sets(schedule, PhaseBoundary::around(phase).chain());
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
    if let Some(parent) = parent {
        for phase in FramePhase::ALL {
            app.configure_sets(schedule, PhaseBoundary::around(phase).in_set(parent));
        }
        app.configure_sets(schedule, PhaseBoundary::Publish.in_set(parent));
    }
}
