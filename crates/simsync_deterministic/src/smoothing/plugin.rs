//! [`VisualSmoothingPlugin`]: mirrors the predicted world's simulation entities into main-app
//! entities through [`VisualSmoothing`].

use bevy::prelude::*;
use bevy::transform::TransformSystems;
use simsync_time::TickRate;

use super::{TickPose, VisualSmoothing, VisualSmoothingConfig};
use crate::stats::SessionStats;
use crate::tick::SimTick;
use crate::worlds::SimulationWorlds;

/// A main-app entity presenting simulation entity `sim` of the predicted world: every frame its
/// `Transform` is set to `sim`'s `Transform`, smoothed by `smoothing`. The entity ids of
/// simulation entities are the same in both simulation worlds and stable across rollbacks, so
/// the `Entity` returned when the game spawned it (or read from the predicted world) is the id
/// to give here.
#[derive(Component, Reflect, Debug, Clone, Copy, PartialEq)]
#[reflect(Component, Debug, PartialEq, Clone)]
#[require(Transform)]
pub struct PresentedSimEntity {
    /// The simulation entity (in the predicted world).
    pub sim: Entity,
    /// Its smoothing state.
    pub smoothing: VisualSmoothing,
}

impl PresentedSimEntity {
    /// Presents simulation entity `sim`.
    pub fn new(sim: Entity) -> Self {
        Self {
            sim,
            smoothing: VisualSmoothing::default(),
        }
    }
}

/// Where [`VisualSmoothingPlugin`] writes presented transforms: `PostUpdate`, before
/// transform propagation. Systems reading presented transforms run after it.
#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
pub struct PresentationSet;

/// Presents the predicted world in the main app, smoothed ([visual
/// smoothing](crate::rules#visual-smoothing)): every frame, in `PostUpdate`
/// ([`PresentationSet`]), each entity with [`PresentedSimEntity`] gets the transform of its
/// simulation entity in the predicted world, with rollback corrections decayed and ticks
/// interpolated per the [`VisualSmoothingConfig`] resource (frame time: the main app's `Time`). It only reads
/// [`SimulationWorlds`]: simulation state, checksums and rollbacks are the same with or
/// without it. A simulation entity missing from the predicted world (despawned, parked) leaves
/// its presenter where it was.
#[derive(Debug, Clone, Default)]
pub struct VisualSmoothingPlugin {
    config: VisualSmoothingConfig,
}

impl VisualSmoothingPlugin {
    /// Smoothing with `config` instead of the default.
    pub fn config(mut self, config: VisualSmoothingConfig) -> Self {
        self.config = config;
        self
    }

    /// Smoothing switched on or off (on by default).
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.config.enabled = enabled;
        self
    }
}

/// The corrective rollback count (`SessionStats::corrective_rollbacks`) seen at the previous
/// frame.
#[derive(Resource, Default)]
struct SeenRollbacks(u64);

impl Plugin for VisualSmoothingPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(self.config)
            .init_resource::<SeenRollbacks>()
            .register_type::<VisualSmoothingConfig>()
            .register_type::<PresentedSimEntity>()
            .configure_sets(
                PostUpdate,
                PresentationSet.before(TransformSystems::Propagate),
            )
            .add_systems(PostUpdate, present_predicted_world.in_set(PresentationSet));
    }
}

fn present_predicted_world(
    worlds: Option<Res<SimulationWorlds>>,
    stats: Option<Res<SessionStats>>,
    config: Res<VisualSmoothingConfig>,
    rate: Option<Res<TickRate>>,
    time: Option<Res<Time>>,
    mut seen: ResMut<SeenRollbacks>,
    mut presented: Query<(&mut PresentedSimEntity, &mut Transform)>,
) {
    let Some(worlds) = worlds else {
        return;
    };
    // Only a rollback that replaced the timeline with a different one moves what was shown
    // ([rule](crate::rules#visual-smoothing)).
    let rollbacks = stats.map(|s| s.corrective_rollbacks).unwrap_or_default();
    let rolled_back = rollbacks != seen.0;
    seen.0 = rollbacks;
    let world = worlds.predicted();
    let tick = world
        .get_resource::<SimTick>()
        .map(|t| t.0)
        .unwrap_or_default();
    let tick_duration = rate.map(|r| r.tick_duration()).unwrap_or_default();
    let dt = time.map(|t| t.delta()).unwrap_or_default();
    for (mut presenter, mut transform) in &mut presented {
        let Some(simulated) = world
            .get_entity(presenter.sim)
            .ok()
            .and_then(|e| e.get::<Transform>())
        else {
            continue;
        };
        let pose = TickPose {
            tick,
            transform: *simulated,
        };
        let shown = presenter
            .smoothing
            .present(&config, pose, rolled_back, dt, tick_duration);
        if *transform != shown {
            *transform = shown;
        }
    }
}
