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
//! - This module: the configuration ([`DesyncDumpConfig`]), the messages
//!   ([`DesyncDumpWritten`], [`DesyncDumpFailed`]), files ([`write_dump_file`],
//!   [`read_dump_file`]) and [`write_desync_dump`] for callers outside the session (replays).

pub(crate) mod capture;
mod diff;
pub(crate) mod format;

use std::collections::{BTreeMap, VecDeque};
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

/// The dump bookkeeping of a session.
#[derive(Default)]
pub(crate) struct DumpState {
    /// Where and how dumps are written; `None`: dumps are off
    /// ([`DebugConfig::desync_dumps`](crate::DebugConfig::desync_dumps)).
    pub config: Option<DesyncDumpConfig>,
    /// Dumps of the predicted world per predicted tick, waiting for the prediction check.
    pub predicted: BTreeMap<Tick, DesyncDump>,
    /// Breakdowns of recent checksum ticks, oldest first.
    pub breakdowns: VecDeque<ComponentBreakdown>,
    /// Dumps of the verified world at recent checksum ticks and the tick before each (without
    /// breakdowns), by tick: the world a desync the relay reports later was judged on.
    pub recent: BTreeMap<Tick, DesyncDump>,
    /// The prediction-mismatch dumps were written (only the first mismatch is dumped).
    pub prediction_written: bool,
    /// The server-desync dumps were written.
    pub desync_written: bool,
    /// The breakdown of the first desynced tick was sent to the relay.
    pub breakdown_sent: bool,
    /// Desyncs reported by the relay in this update's poll, this client's or other players'
    /// (`(tick, players named)`), handled before verification.
    pub pending_desyncs: Vec<(Tick, Vec<crate::tick::PlayerIndex>)>,
}

impl DumpState {
    /// Keeps a desync the relay reported (of `players` at `tick`) for this update's dump
    /// handling, when dumps are on.
    pub fn note_desync(&mut self, tick: Tick, players: &[PlayerIndex]) {
        if self.config.is_some() {
            self.pending_desyncs.push((tick, players.to_vec()));
        }
    }

    /// Keeps `breakdown`, forgetting the oldest beyond `keep`.
    pub(crate) fn keep_breakdown(&mut self, breakdown: ComponentBreakdown, keep: usize) {
        self.breakdowns.push_back(breakdown);
        while self.breakdowns.len() > keep {
            self.breakdowns.pop_front();
        }
    }

    /// The breakdown of `tick`, if kept.
    pub(crate) fn breakdown_of(&self, tick: Tick) -> Option<&ComponentBreakdown> {
        self.breakdowns.iter().find(|b| b.tick == tick)
    }

    /// Keeps `dump` (of the verified world at its tick), replacing a dump of the same tick (a
    /// tick verified again after a snapshot load) and forgetting the oldest beyond `keep`.
    pub(crate) fn keep_recent(&mut self, dump: DesyncDump, keep: usize) {
        self.recent.insert(dump.header.tick, dump);
        while self.recent.len() > keep {
            self.recent.pop_first();
        }
    }

    /// The kept dumps of a desync judged at `tick`: the dumps of `tick − 1` (when kept) and of
    /// `tick`, oldest first, each with `reason` and the kept breakdowns of ticks up to its own;
    /// empty when `tick` itself was not kept.
    pub(crate) fn recent_for(&self, tick: Tick, reason: &DumpReason) -> Vec<DesyncDump> {
        if !self.recent.contains_key(&tick) {
            return Vec::new();
        }
        self.recent
            .range(tick.saturating_sub(1)..=tick)
            .map(|(t, dump)| {
                let mut dump = dump.clone();
                dump.header.reason = reason.clone();
                dump.breakdowns = self
                    .breakdowns
                    .iter()
                    .filter(|b| b.tick <= *t)
                    .cloned()
                    .collect();
                dump
            })
            .collect()
    }
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
