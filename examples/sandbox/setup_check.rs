//! Stops a sandbox run whose session reported a registration error when it started: a
//! [`RollbackSetupFailed`] message (a type that cannot be rolled back, or with snapshots on a
//! type that cannot be serialized: `SessionError::NotSerializable`). The run would otherwise go
//! on with state a rollback or a snapshot silently misses; the sandbox exits with code 2 (bad
//! input: the game's registrations) and the errors as its message.

use bevy::prelude::*;
use simsync::deterministic::RollbackSetupFailed;

/// The registration errors the session reported, as lines (main-app resource).
#[derive(Resource, Default, Debug)]
pub struct SetupFailures(pub Vec<String>);

fn collect(mut read: MessageReader<RollbackSetupFailed>, mut failures: ResMut<SetupFailures>) {
    failures
        .0
        .extend(read.read().map(|failed| failed.error.to_string()));
}

/// Collects the session's [`RollbackSetupFailed`] messages into [`SetupFailures`] (`Last`).
pub fn watch(app: &mut App) {
    app.init_resource::<SetupFailures>()
        .add_systems(Last, collect);
}

/// The message a run stops with when the session of `app` reported registration errors (after
/// an update), naming each; `None` while there are none.
pub fn failure(app: &App) -> Option<String> {
    failure_in(app.world())
}

/// As [`failure`], for the world of the session's app.
pub fn failure_in(world: &World) -> Option<String> {
    let failures = world.get_resource::<SetupFailures>()?;
    if failures.0.is_empty() {
        return None;
    }
    Some(format!(
        "the session could not register its state for rollback and snapshots: {}",
        failures.0.join("; ")
    ))
}
