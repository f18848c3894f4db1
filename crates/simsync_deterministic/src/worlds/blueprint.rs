//! Building both simulation worlds from what the plugin was given: [`SessionBlueprint`] (kept
//! so a session can be started again) and the assembly of the two built sub-apps into
//! [`SimulationWorlds`]. Used at plugin build, by headless stepping and by a restart.

use std::marker::PhantomData;

use bevy::app::SubApp;
use bevy::prelude::*;

use super::{
    GameBuilder, SimulationWorlds, WorldSpec, build_sub_apps, context_entities,
    into_simulation_world,
};
use crate::config::SessionConfig;
use crate::error::SessionError;
use crate::input::SimInput;
use crate::snapshot::RollbackRegistry;
use crate::source::RecordedInputs;

/// What a session is built from: kept by the plugin so a session can be started again
/// (main-app resource).
#[derive(Resource)]
pub(crate) struct SessionBlueprint<I: SimInput> {
    pub game: GameBuilder,
    // Boxed: Bevy keeps room for 64 values of every resource type.
    pub config: Box<SessionConfig>,
    pub spec: WorldSpec,
    /// The input source of a replay playback (started again from its start).
    pub replay: Option<Box<dyn RecordedInputs<I>>>,
    pub _input: PhantomData<fn() -> I>,
}

/// The two worlds from their built (finished and cleaned up) sub-apps: startup schedules and
/// the setup tick run, the rollback registry taken from the verified world. The error, if any,
/// says the Rapier context entity differs between the worlds.
pub(crate) fn assemble_worlds<I: SimInput>(
    verified: SubApp,
    predicted: SubApp,
) -> (SimulationWorlds, Option<SessionError>) {
    let mut verified = into_simulation_world::<I>(verified);
    let mut predicted = into_simulation_world::<I>(predicted);
    let registry = verified
        .world
        .remove_resource::<RollbackRegistry>()
        .unwrap_or_default();
    let (cv, cp) = (
        context_entities(&mut verified.world),
        context_entities(&mut predicted.world),
    );
    let error = (cv != cp).then(|| SessionError::ContextEntityMismatch {
        verified: cv.first().copied().unwrap_or(Entity::PLACEHOLDER),
        predicted: cp.first().copied().unwrap_or(Entity::PLACEHOLDER),
    });
    let worlds = SimulationWorlds {
        verified: Box::new(verified),
        predicted: Box::new(predicted),
        registry: Box::new(registry),
        shared: false,
    };
    (worlds, error)
}

/// Both simulation worlds built from `blueprint` now (sub-apps built, finished, cleaned up and
/// assembled as by [`assemble_worlds`]), with the error `assemble_worlds` reports, if any.
///
/// # Errors
/// A world-building error, as at build time.
pub(crate) fn build_worlds<I: SimInput>(
    blueprint: &SessionBlueprint<I>,
) -> Result<(SimulationWorlds, Option<SessionError>), SessionError> {
    let (mut verified, mut predicted) = build_sub_apps::<I>(&blueprint.spec, &blueprint.game)?;
    for sub in [&mut verified, &mut predicted] {
        sub.finish();
        sub.cleanup();
    }
    Ok(assemble_worlds::<I>(verified, predicted))
}
