//! [`ReplayRecorder`]: records a running session's verified ticks to a replay file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use bevy::prelude::*;

use super::error::ReplayError;
use super::format::ReplayHeader;
use super::writer::{FrameRef, ReplayWriter};
use crate::input::SimInput;
use crate::tick::Tick;

/// Where a recorder writes.
type Sink = Box<dyn Write + Send + Sync>;

/// Records the session's verified ticks to a replay (main-app resource; any session: local,
/// networked over the in-memory transport or UDP, predicted or lockstep).
///
/// Insert it before the session's first update, with
/// [`DeterministicPlugin::replay(ReplayMode::Record(..))`](crate::DeterministicPlugin::replay) or as a
/// resource. At the next session update it writes the header (tick rate, players, input type,
/// registered rollback types, and the verified tick recording starts from), then one frame per
/// verified tick: every player's confirmed input, the disconnected players, and the verified
/// checksum on the session's checksum ticks ([`SessionConfig::checksum_interval`]: a replay
/// checks the ticks its session checked). With
/// [`with_snapshot_every`](Self::with_snapshot_every) it adds a world snapshot every that many
/// ticks, where playback can seek to.
///
/// Records are streamed and flushed after every session update, so a crash loses at most the
/// last update's frames; the end record is written by [`finish`](Self::finish) or when the
/// recorder is dropped (with the App). A write error stops the recording: it is written as a
/// [`ReplayWriteFailed`] message, counted in
/// [`SessionStats::replay_write_errors`](crate::SessionStats::replay_write_errors) and kept in
/// [`error`](Self::error) ([replays](crate::rules#replays)).
///
/// [`SessionConfig::checksum_interval`]: crate::SessionConfig::checksum_interval
#[derive(Resource)]
pub struct ReplayRecorder {
    writer: ReplayWriter<Sink>,
    initial_snapshot: bool,
    snapshot_every: Option<u32>,
    last_snapshot: Option<Tick>,
    error: Option<ReplayError>,
    /// Whether the error was reported (message and stats) already.
    reported: bool,
    snapshots: u64,
}

/// A replay recorder stopped: writing failed (the disk is full, the file went away) or a value
/// could not be recorded. Written once; the recording is over (the file reads as cut after its
/// last complete frame).
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct ReplayWriteFailed {
    /// The verified tick the recording stopped at.
    pub tick: Tick,
    /// What went wrong.
    pub error: ReplayError,
}

impl ReplayRecorder {
    /// A recorder writing to a new file at `path` (created or truncated), buffered.
    ///
    /// # Errors
    /// [`ReplayError::Io`] if the file cannot be created.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, ReplayError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = File::create(path).map_err(|e| ReplayError::io(name.clone(), &e))?;
        Ok(Self::to_writer(BufWriter::new(file), name))
    }

    /// A recorder writing to `out` (`name` names it in errors).
    pub fn to_writer(out: impl Write + Send + Sync + 'static, name: impl Into<String>) -> Self {
        Self {
            writer: ReplayWriter::new(Box::new(out), name),
            initial_snapshot: false,
            snapshot_every: None,
            last_snapshot: None,
            error: None,
            reported: false,
            snapshots: 0,
        }
    }

    /// Also record a snapshot of the verified world where the recording starts (needed to play
    /// a recording that starts after tick 0, e.g. of a client that joined late).
    pub fn with_initial_snapshot(mut self, on: bool) -> Self {
        self.initial_snapshot = on;
        self
    }

    /// Record a snapshot of the verified world at the end of the first session update at least
    /// `ticks` verified ticks after the previous one (`0`: none, the default).
    pub fn with_snapshot_every(mut self, ticks: u32) -> Self {
        self.snapshot_every = (ticks > 0).then_some(ticks);
        self
    }

    /// Writes the end record and flushes: the replay is complete. Later frames are not
    /// recorded.
    ///
    /// # Errors
    /// [`ReplayError::Recording`] before the header was written, after a failure or twice;
    /// [`ReplayError::Io`].
    pub fn finish(&mut self) -> Result<(), ReplayError> {
        self.writer.finish()
    }

    /// Frames recorded.
    pub fn frames(&self) -> u64 {
        self.writer.frames()
    }

    /// Snapshots recorded.
    pub fn snapshots(&self) -> u64 {
        self.snapshots
    }

    /// Bytes written.
    pub fn bytes(&self) -> u64 {
        self.writer.bytes()
    }

    /// The last recorded frame's tick.
    pub fn last_tick(&self) -> Tick {
        self.writer.last_tick()
    }

    /// Why the recording stopped, if it failed.
    pub fn error(&self) -> Option<&ReplayError> {
        self.error.as_ref()
    }

    /// Whether the header is written and frames are being recorded.
    pub fn is_recording(&self) -> bool {
        self.error.is_none() && self.writer.is_writing()
    }

    /// Whether the header is still to be written (the recorder has not started nor failed).
    pub(crate) fn needs_header(&self) -> bool {
        self.error.is_none() && self.writer.bytes() == 0
    }

    /// Whether a snapshot is due where the recording starts.
    pub(crate) fn wants_initial_snapshot(&self) -> bool {
        self.initial_snapshot
    }

    /// Writes the header.
    pub(crate) fn start(&mut self, header: &ReplayHeader) {
        let result = self.writer.header(header);
        self.keep(result);
    }

    /// Records the frame of a verified tick (nothing once stopped).
    pub(crate) fn record_frame<I: SimInput>(
        &mut self,
        tick: Tick,
        inputs: &[I],
        disconnected: u64,
        checksum: Option<u64>,
    ) {
        if !self.is_recording() {
            return;
        }
        let result = self.writer.frame_of(FrameRef {
            tick,
            inputs,
            disconnected,
            checksum,
        });
        self.keep(result);
    }

    /// Whether a periodic snapshot is due with the verified world at `verified_tick`.
    pub(crate) fn wants_snapshot(&self, verified_tick: Tick) -> bool {
        let Some(every) = self.snapshot_every else {
            return false;
        };
        self.is_recording()
            && verified_tick == self.writer.last_tick()
            && match self.last_snapshot {
                Some(last) => i64::from(verified_tick) - i64::from(last) >= i64::from(every),
                None => true,
            }
    }

    /// Records a snapshot of the verified world at `tick` (the last recorded frame's).
    pub(crate) fn record_snapshot(&mut self, tick: Tick, bytes: &[u8]) {
        if !self.is_recording() {
            return;
        }
        let result = self.writer.snapshot(tick, bytes);
        if result.is_ok() {
            self.last_snapshot = Some(tick);
            self.snapshots += 1;
        }
        self.keep(result);
    }

    /// Stops the recording with `error` (a snapshot that could not be taken).
    pub(crate) fn fail(&mut self, error: ReplayError) {
        self.keep(Err(error));
    }

    /// Flushes what was written this update.
    pub(crate) fn flush(&mut self) {
        if self.is_recording() {
            let result = self.writer.flush();
            self.keep(result);
        }
    }

    /// The error not reported yet, marking it reported.
    pub(crate) fn take_unreported(&mut self) -> Option<ReplayError> {
        if self.reported {
            return None;
        }
        let error = self.error.clone()?;
        self.reported = true;
        Some(error)
    }

    /// Keeps the first error; the writer refuses everything after it.
    fn keep(&mut self, result: Result<(), ReplayError>) {
        if let Err(error) = result
            && self.error.is_none()
        {
            warn!("replay recording stopped: {error}");
            self.error = Some(error);
        }
    }
}

impl Drop for ReplayRecorder {
    fn drop(&mut self) {
        if self.is_recording() {
            let _ = self.writer.finish();
        }
    }
}
