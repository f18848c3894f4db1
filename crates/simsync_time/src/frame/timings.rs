//! Per-phase wall time and object counts of the simulation frame: the [`FrameTimings`] resource
//! and Bevy's `DiagnosticsStore` (the VR-Forces performance monitor's "time spent in each part of
//! the frame").
//!
//! Measured by marker systems at the phase boundaries: one just before each [`FramePhase`]'s
//! systems, one just after, and a publishing system after the whole frame. A phase's time is
//! therefore the wall time from its first system starting to its last system ending, including
//! the scheduler's own overhead and any sync point (command application) inside the phase.

use core::time::Duration;
use std::time::Instant;

use bevy::diagnostic::{
    Diagnostic, DiagnosticMeasurement, DiagnosticPath, DiagnosticsStore, RegisterDiagnostic,
};
use bevy::ecs::archetype::Archetypes;
use bevy::ecs::schedule::InternedScheduleLabel;
use bevy::prelude::*;

use super::double_buffer::DoubleBufferRegistry;
use super::{FramePhase, PhaseBoundary};

/// Wall time of [`FramePhase::FrameSetup`], milliseconds.
pub(crate) const FRAME_SETUP_MS: DiagnosticPath =
    DiagnosticPath::const_new("simsync/frame/frame_setup_ms");
/// Wall time of [`FramePhase::ObjectTick`], milliseconds.
pub(crate) const OBJECT_TICK_MS: DiagnosticPath =
    DiagnosticPath::const_new("simsync/frame/object_tick_ms");
/// Wall time of [`FramePhase::NetworkTick`], milliseconds.
pub(crate) const NETWORK_TICK_MS: DiagnosticPath =
    DiagnosticPath::const_new("simsync/frame/network_tick_ms");
/// Wall time of [`FramePhase::AdvanceFrame`], milliseconds.
pub(crate) const ADVANCE_FRAME_MS: DiagnosticPath =
    DiagnosticPath::const_new("simsync/frame/advance_frame_ms");
/// Wall time of the whole frame, from the start of `FrameSetup` to the end of `AdvanceFrame`,
/// milliseconds.
pub(crate) const FRAME_MS: DiagnosticPath = DiagnosticPath::const_new("simsync/frame/frame_ms");
/// Number of objects (entities with any registered [`Current<T>`](crate::Current)) at the end of
/// the frame; a count, no unit.
pub(crate) const FRAME_OBJECTS: DiagnosticPath = DiagnosticPath::const_new("simsync/frame/objects");

impl FramePhase {
    /// The `DiagnosticsStore` path of this phase's wall time in milliseconds, e.g.
    /// `simsync/frame/object_tick_ms`.
    pub const fn diagnostic_path(self) -> DiagnosticPath {
        match self {
            FramePhase::FrameSetup => FRAME_SETUP_MS,
            FramePhase::ObjectTick => OBJECT_TICK_MS,
            FramePhase::NetworkTick => NETWORK_TICK_MS,
            FramePhase::AdvanceFrame => ADVANCE_FRAME_MS,
        }
    }
}

/// Timings and object count of the last complete simulation frame, for a game to show (the
/// same numbers go to Bevy's `DiagnosticsStore`: each phase under
/// [`FramePhase::diagnostic_path`], the whole frame under
/// [`FramePhasesPlugin::FRAME_MS`](crate::FramePhasesPlugin::FRAME_MS) and the object count
/// under [`FramePhasesPlugin::FRAME_OBJECTS`](crate::FramePhasesPlugin::FRAME_OBJECTS)).
///
/// Updated once per frame, after [`FramePhase::AdvanceFrame`]; between frames it holds the last
/// frame's values. Wall-clock data: never part of a deterministic simulation's state (it is not
/// registered for rollback and differs between runs).
#[derive(Resource, Reflect, Debug, Clone, Default, PartialEq)]
#[reflect(Resource, Debug, Default, Clone, PartialEq)]
pub struct FrameTimings {
    /// Wall time of each phase, indexed by [`FramePhase::index`].
    pub phases: [Duration; 4],
    /// Wall time from the start of `FrameSetup` to the end of `AdvanceFrame`.
    pub frame: Duration,
    /// Entities with at least one registered [`Current<T>`](crate::Current) at the end of the
    /// frame.
    pub objects: usize,
    /// Frames measured so far.
    pub frames: u64,
}

impl FrameTimings {
    /// Wall time of `phase` in the last frame.
    pub fn phase(&self, phase: FramePhase) -> Duration {
        self.phases[phase.index()]
    }
}

/// Start instants of the frame in progress (crate-internal).
#[derive(Resource, Debug, Default)]
struct PhaseStopwatch {
    frame_start: Option<Instant>,
    phase_start: [Option<Instant>; 4],
    phases: [Duration; 4],
}

/// Adds the boundary markers and the publishing system to `schedule`, the [`FrameTimings`]
/// resource and the diagnostics (once per App).
pub(crate) fn add_timing(app: &mut App, schedule: InternedScheduleLabel) {
    app.init_resource::<PhaseStopwatch>()
        .init_resource::<FrameTimings>()
        .register_type::<FrameTimings>();
    let already = app
        .world()
        .get_resource::<DiagnosticsStore>()
        .is_some_and(|store| store.get(&FRAME_MS).is_some());
    if !already {
        for phase in FramePhase::ALL {
            app.register_diagnostic(Diagnostic::new(phase.diagnostic_path()).with_suffix("ms"));
        }
        app.register_diagnostic(Diagnostic::new(FRAME_MS).with_suffix("ms"))
            .register_diagnostic(Diagnostic::new(FRAME_OBJECTS));
    }
    for phase in FramePhase::ALL {
        app.add_systems(
            schedule,
            (
                (move |mut watch: ResMut<PhaseStopwatch>| {
                    let now = Instant::now();
                    if phase == FramePhase::FrameSetup {
                        watch.frame_start = Some(now);
                    }
                    watch.phase_start[phase.index()] = Some(now);
                })
                .in_set(PhaseBoundary::Begin(phase)),
                (move |mut watch: ResMut<PhaseStopwatch>| {
                    let i = phase.index();
                    watch.phases[i] = watch.phase_start[i]
                        .take()
                        .map(|start| start.elapsed())
                        .unwrap_or_default();
                })
                .in_set(PhaseBoundary::End(phase)),
            ),
        );
    }
    app.add_systems(schedule, publish.in_set(PhaseBoundary::Publish));
}

/// Copies the frame's timings into [`FrameTimings`] and the `DiagnosticsStore` (if present),
/// with the object count.
fn publish(
    mut watch: ResMut<PhaseStopwatch>,
    mut timings: ResMut<FrameTimings>,
    registry: Option<Res<DoubleBufferRegistry>>,
    archetypes: &Archetypes,
    store: Option<ResMut<DiagnosticsStore>>,
) {
    let now = Instant::now();
    let objects = registry.map_or(0, |registry| {
        let ids: Vec<_> = registry.current_components().collect();
        archetypes
            .iter()
            .filter(|archetype| ids.iter().any(|id| archetype.contains(*id)))
            .map(|archetype| archetype.len() as usize)
            .sum()
    });
    let frame = watch
        .frame_start
        .take()
        .map(|start| now.duration_since(start))
        .unwrap_or_default();
    let phases = core::mem::take(&mut watch.phases);
    *timings = FrameTimings {
        phases,
        frame,
        objects,
        frames: timings.frames + 1,
    };
    let Some(mut store) = store else {
        return;
    };
    let mut add = |path: &DiagnosticPath, value: f64| {
        if let Some(diagnostic) = store.get_mut(path).filter(|d| d.is_enabled) {
            diagnostic.add_measurement(DiagnosticMeasurement { time: now, value });
        }
    };
    for phase in FramePhase::ALL {
        add(
            &phase.diagnostic_path(),
            phases[phase.index()].as_secs_f64() * 1000.0,
        );
    }
    add(&FRAME_MS, frame.as_secs_f64() * 1000.0);
    add(&FRAME_OBJECTS, objects as f64);
}
