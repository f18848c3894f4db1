//! World snapshots in replays: capturing the verified world for a recording, loading one to
//! start a playback from ([snapshots](crate::rules#snapshots)).

use bevy::prelude::*;

use super::ReplayError;
use super::ReplayPlayback;
use crate::input::SimInput;
use crate::late_join::{capture_snapshot, load_snapshot};
use crate::snapshot::{SnapshotLimits, WorldSnapshot};
use crate::tick::Tick;

/// The verified world of this App's session, encoded.
///
/// # Errors
/// [`ReplayError::Snapshot`] when it cannot be captured.
pub(crate) fn capture<I: SimInput>(world: &mut World) -> Result<Vec<u8>, ReplayError> {
    let tick = world
        .get_resource::<crate::worlds::SimulationWorlds>()
        .map_or(0, |w| w.verified.tick());
    capture_snapshot::<I>(world)
        .map(|snapshot| snapshot.encode())
        .map_err(|error| ReplayError::Snapshot {
            tick,
            reason: error.to_string(),
        })
}

/// Starts the playback of this App: from the snapshot nearest at or before the requested seek
/// tick (or the replay's own start), loaded into the session, else from tick 0. Returns the
/// tick playback starts from.
///
/// # Errors
/// [`ReplayError::SeekOutOfRange`], [`ReplayError::NoStartingPoint`],
/// [`ReplayError::Snapshot`].
pub(crate) fn start_playback<I: SimInput>(world: &mut World) -> Result<Tick, ReplayError> {
    let playback = world.resource::<ReplayPlayback<I>>();
    let replay = playback.replay();
    let first = replay.start_tick()?;
    let target = playback.seek().unwrap_or(first);
    let last = replay.last_tick();
    if !(first..=last).contains(&target) {
        return Err(ReplayError::SeekOutOfRange {
            tick: target,
            first,
            last,
        });
    }
    let snapshot = replay
        .snapshot_at_or_before(target)
        .map(|s| (s.tick, s.bytes.clone()));
    let start = match snapshot {
        Some((tick, bytes)) if tick > 0 => load::<I>(world, tick, &bytes)?,
        _ => 0,
    };
    world
        .resource::<ReplayPlayback<I>>()
        .handle()
        .start_from(start)?;
    Ok(start)
}

/// Loads the snapshot of `tick` (its `bytes`, decoded within the App's [`SnapshotLimits`])
/// into this App's session.
fn load<I: SimInput>(world: &mut World, tick: Tick, bytes: &[u8]) -> Result<Tick, ReplayError> {
    let failed = |reason: String| ReplayError::Snapshot { tick, reason };
    let limits = world
        .get_resource::<SnapshotLimits>()
        .copied()
        .unwrap_or_default();
    let snapshot =
        WorldSnapshot::decode(bytes, limits.max_bytes).map_err(|e| failed(e.to_string()))?;
    if snapshot.header.tick != tick {
        return Err(failed(format!(
            "the snapshot inside holds tick {}",
            snapshot.header.tick
        )));
    }
    load_snapshot::<I>(world, &snapshot).map_err(|e| failed(e.to_string()))
}
