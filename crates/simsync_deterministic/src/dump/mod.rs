//! Desync dumps ([desync dumps](crate::rules#desync-dumps)): the state of a simulation world
//! at one tick — per simulation entity (slot and generation) per registered component its type,
//! digest and field values through Bevy reflection, the registered resources and the inputs of
//! the tick — written to a file on the first mismatch, and [`diff_dumps`] naming the first
//! entity, component and field values that differ between two dumps.
//!
//! - [`format`](mod@format) holds the data ([`DesyncDump`]) and the versioned file ([`DesyncDump::encode`],
//!   [`DesyncDump::decode`], [`DumpError`]).
//! - [`capture`] reads a world into a dump, and the per-component hash breakdown
//!   ([`ComponentBreakdown`]) a client sends the relay on a desync.
//! - [`diff`] holds [`diff_dumps`].
//! - [`hook`]: the session hook that keeps what a dump needs and writes the dumps
//!   ([`DesyncDumps`]), with its own state.
//! - [`world`]: [`capture_desync_dump`] and [`write_desync_dump`] for callers outside the
//!   session update (replays, tests).
//! - This module: the configuration ([`DesyncDumpConfig`]), the messages
//!   ([`DesyncDumpWritten`], [`DesyncDumpFailed`]) and files ([`write_dump_file`],
//!   [`read_dump_file`]).

pub(crate) mod capture;
mod diff;
pub(crate) mod format;
mod hook;
mod world;

use std::path::{Path, PathBuf};

use bevy::prelude::*;

pub use crate::checksum::ComponentBreakdown;
pub use crate::config::DesyncDumpConfig;
pub use capture::flatten;
pub use diff::{Difference, DumpDiff, DumpSide, FieldDifference, RootDifference, diff_dumps};
pub use format::{
    DEFAULT_MAX_DUMP_BYTES, DUMP_FORMAT_VERSION, DesyncDump, DumpError, DumpHeader, DumpReason,
    DumpedEntity, DumpedField, DumpedInput, DumpedValue, DumpedWorld, GameFingerprint,
};
pub(crate) use hook::{DesyncDumps, capture_view};
pub use world::{capture_desync_dump, write_desync_dump};

use crate::input::{InputStatus, SimInput};
use crate::source::LocalPlayers;
use crate::tick::{PlayerIndex, Tick};

/// A desync dump was written.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct DesyncDumpWritten {
    /// The file.
    pub path: PathBuf,
    /// The tick of the dumped world.
    pub tick: Tick,
    /// Which world.
    pub world: DumpedWorld,
    /// Why.
    pub reason: DumpReason,
}

/// A desync dump could not be written (the session goes on).
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct DesyncDumpFailed {
    /// The tick that was to be dumped.
    pub tick: Tick,
    /// Why it failed.
    pub error: DumpError,
}

/// The inputs of a tick as dumped: every player's `Debug` text and status.
pub(crate) fn dumped_inputs<I: SimInput>(inputs: &[I], status: &[InputStatus]) -> Vec<DumpedInput> {
    inputs
        .iter()
        .enumerate()
        .map(|(p, input)| DumpedInput {
            player: PlayerIndex::try_from(p).unwrap_or(PlayerIndex::MAX),
            status: format!(
                "{:?}",
                status.get(p).copied().unwrap_or(InputStatus::Missing)
            ),
            value: format!("{input:?}"),
        })
        .collect()
}

/// The first local player of the App, if any (names the writer of a dump).
pub(crate) fn writer_of(world: &World) -> Option<PlayerIndex> {
    world.get_resource::<LocalPlayers>().and_then(|p| p.get(0))
}

/// Writes `dump` into `dir` as `desync-t{tick}-{world}[-p{player}].simdump` (a numbered name
/// when that file exists: a dump never overwrites another) and returns the path.
///
/// # Errors
/// [`DumpError::TooLarge`] above `max_bytes`; [`DumpError::Io`] when the directory or file
/// cannot be written.
pub fn write_dump_file(
    dir: &Path,
    dump: &DesyncDump,
    max_bytes: usize,
) -> Result<PathBuf, DumpError> {
    let bytes = dump.encode(max_bytes)?;
    let io = |path: &Path, e: std::io::Error| DumpError::Io {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let world = match dump.header.world {
        DumpedWorld::Verified => "verified",
        DumpedWorld::Predicted => "predicted",
    };
    let player = dump
        .header
        .writer
        .map(|p| format!("-p{p}"))
        .unwrap_or_default();
    let stem = format!("desync-t{}-{world}{player}", dump.header.tick);
    let mut path = dir.join(format!("{stem}.simdump"));
    let mut n = 1;
    while path.exists() {
        n += 1;
        path = dir.join(format!("{stem}-{n}.simdump"));
    }
    std::fs::write(&path, bytes).map_err(|e| io(&path, e))?;
    Ok(path)
}

/// Reads a dump file, refusing a file larger than `max_bytes` before reading it.
///
/// # Errors
/// [`DumpError::Io`] when the file cannot be read; the errors of [`DesyncDump::decode`].
pub fn read_dump_file(path: &Path, max_bytes: usize) -> Result<DesyncDump, DumpError> {
    let io = |e: std::io::Error| DumpError::Io {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > max_bytes as u64 {
        return Err(DumpError::TooLarge {
            size,
            limit: max_bytes,
        });
    }
    let bytes = std::fs::read(path).map_err(io)?;
    DesyncDump::decode(&bytes, max_bytes)
}

/// Writes `dump` with `config` and reports the outcome as a message; returns the dump's path.
pub(crate) fn write_and_report(
    world: &mut World,
    config: &DesyncDumpConfig,
    dump: &DesyncDump,
) -> Option<PathBuf> {
    match write_dump_file(&config.dir, dump, config.max_bytes) {
        Ok(path) => {
            info!("desync dump written: {}", path.display());
            world.write_message(DesyncDumpWritten {
                path: path.clone(),
                tick: dump.header.tick,
                world: dump.header.world,
                reason: dump.header.reason.clone(),
            });
            Some(path)
        }
        Err(error) => {
            error!(
                "desync dump of tick {} not written: {error}",
                dump.header.tick
            );
            world.write_message(DesyncDumpFailed {
                tick: dump.header.tick,
                error,
            });
            None
        }
    }
}
