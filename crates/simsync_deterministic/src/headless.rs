//! Stepping an App with `app.update()` alone: the simulation worlds are normally built by
//! `App::cleanup` (which `App::run` calls); a headless loop that never calls `app.finish()` and
//! `app.cleanup()` gets them built by its first session update instead
//! ([headless stepping](crate::rules#headless-stepping)).

use bevy::prelude::*;

use crate::error::SessionError;
use crate::input::SimInput;
use crate::worlds::{SessionBlueprint, SimulationWorlds, build_worlds};

/// Builds both simulation worlds from the plugin's blueprint when they do not exist yet (the
/// App was not cleaned up) and inserts them. Returns the error to keep as the session's setup
/// error: the worlds could not be built (none inserted), or were built with a Rapier context
/// mismatch (inserted). Does nothing without a blueprint (no plugin of this input type).
pub(crate) fn build_missing_worlds<I: SimInput>(world: &mut World) -> Option<SessionError> {
    if world.contains_resource::<SimulationWorlds>() {
        return None;
    }
    let blueprint = world.get_resource::<SessionBlueprint<I>>()?;
    match build_worlds(blueprint) {
        Ok((worlds, error)) => {
            world.insert_resource(worlds);
            error
        }
        Err(error) => Some(error),
    }
}
