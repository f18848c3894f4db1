//! Dumps on demand, from outside the session update: [`capture_desync_dump`] and
//! [`write_desync_dump`] read the verified world of an App's session (a replay that found a
//! checksum mismatch, a test, a debug key).

use std::path::{Path, PathBuf};

use bevy::prelude::*;

use super::capture;
use super::hook::DesyncDumps;
use super::{
    ComponentBreakdown, DEFAULT_MAX_DUMP_BYTES, DesyncDump, DesyncDumpWritten, DumpError,
    DumpReason, DumpedWorld, dumped_inputs, write_dump_file, writer_of,
};
use crate::input::SimInput;
use crate::session::DeterministicSession;
use crate::worlds::SimulationWorlds;

/// Captures a dump of the verified world of the App's session (on the main world) at its
/// current tick, with the confirmed inputs of that tick and the breakdowns the session's dump hook kept (none
/// with dumps off).
///
/// # Errors
/// [`DumpError::NoSession`](crate::DumpError::NoSession) when the App has no running session of input type `I` (or its
/// worlds are not built).
pub fn capture_desync_dump<I: SimInput>(
    world: &mut World,
    reason: DumpReason,
) -> Result<DesyncDump, DumpError> {
    let writer = writer_of(world);
    let Some(session) = world.get_resource::<DeterministicSession<I>>() else {
        return Err(DumpError::NoSession);
    };
    let breakdowns: Vec<ComponentBreakdown> = session
        .hook::<DesyncDumps>()
        .map(DesyncDumps::breakdowns)
        .unwrap_or_default();
    let mut worlds = world
        .remove_resource::<SimulationWorlds>()
        .ok_or(DumpError::NoSession)?;
    let tick = worlds.verified.tick();
    let session = world.resource::<DeterministicSession<I>>();
    let (mut inputs, mut status) = (Vec::new(), Vec::new());
    session.buffer().fill_known(tick, &mut inputs, &mut status);
    let dump = capture::capture(
        &mut worlds.verified,
        &worlds.registry,
        capture::DumpContext {
            world: DumpedWorld::Verified,
            reason,
            inputs: dumped_inputs(&inputs, &status),
            breakdowns,
            writer,
        },
    );
    world.insert_resource(worlds);
    Ok(dump)
}

/// Writes a dump of the verified world of the App's session (captured as the session captures its own dumps)
/// into `dir` and writes a [`DesyncDumpWritten`](crate::DesyncDumpWritten) message; for callers outside the session's
/// own triggers, such as a replay that found a checksum mismatch.
///
/// # Errors
/// The capture's and the file write's [`DumpError`](crate::DumpError)s (the file limited to
/// [`DEFAULT_MAX_DUMP_BYTES`](crate::DEFAULT_MAX_DUMP_BYTES)).
pub fn write_desync_dump<I: SimInput>(
    world: &mut World,
    dir: &Path,
    reason: DumpReason,
) -> Result<PathBuf, DumpError> {
    let dump = capture_desync_dump::<I>(world, reason)?;
    let path = write_dump_file(dir, &dump, DEFAULT_MAX_DUMP_BYTES)?;
    world.write_message(DesyncDumpWritten {
        path: path.clone(),
        tick: dump.header.tick,
        world: dump.header.world,
        reason: dump.header.reason.clone(),
    });
    Ok(path)
}
