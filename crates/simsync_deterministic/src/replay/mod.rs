//! Replays ([replays](crate::rules#replays)): a session's confirmed inputs and verified
//! checksums recorded to a file, and played back in lockstep with every checksum checked.
//!
//! - Recording: [`ReplayRecorder`] (a main-app resource; turn it on with
//!   [`DeterministicPlugin::replay(ReplayMode::Record(..))`](crate::DeterministicPlugin::replay)) writes
//!   the header, one frame per verified tick and optional world snapshots through a
//!   [`ReplayWriter`]; a failure is a [`ReplayWriteFailed`] message.
//! - Reading: [`Replay::read_file`] / [`Replay::from_bytes`] check every byte
//!   ([`ReplayError`], bounded by [`ReplayLimits`]); a file cut short keeps its complete frames
//!   ([`ReplayEnd::Cut`]).
//! - Playback: [`ReplayPlayback`] (inserted by
//!   [`DeterministicPlugin::replay`](crate::DeterministicPlugin::replay) with
//!   [`ReplayMode::Play`](crate::ReplayMode::Play)) makes the session's input source feed the
//!   frames to a lockstep session, and its replay check (a verified-tick hook) stop at the
//!   first [`ReplayMismatch`]; it may start from a snapshot ([`ReplayPlayback::with_seek`]).
//! - Recording and checking are session hooks the plugin installs (`hook.rs`:
//!   [`ReplayRecording`], [`ReplayCheck`]); the playback feeds the session's input path as its
//!   recorded inputs (`playback.rs`); `seek.rs` captures and loads the recording's snapshots
//!   (a seek, a recording's snapshots) and `systems.rs` starts and syncs recording and playback
//!   around each session update.

mod error;
mod format;
mod hook;
mod playback;
mod reader;
mod recorder;
mod seek;
pub(crate) mod systems;
mod writer;

pub use error::{ForeignPart, ReplayError};
pub use format::{
    MAX_RECORD_BYTES, REPLAY_FORMAT_VERSION, REPLAY_MAGIC, ReplayFrame, ReplayHeader,
};
pub(crate) use hook::{ReplayCheck, ReplayRecording};
pub(crate) use playback::{PlaybackHandle, ReplayFeed};
pub use playback::{ReplayMismatch, ReplayPlayback, ReplayPlaybackFailed, ReplayStatus};
pub use reader::{Replay, ReplayEnd, ReplayLimits, ReplaySnapshot};
pub use recorder::{ReplayRecorder, ReplayWriteFailed};
pub use writer::ReplayWriter;
