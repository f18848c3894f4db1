//! [`ReplayPlayback`]: a replay's frames as a lockstep session's confirmed inputs, and the
//! check of every recorded checksum.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bevy::prelude::*;

use super::error::ReplayError;
use super::format::ReplayFrame;
use super::reader::{Replay, ReplayEnd};
use crate::input::{InputBuffer, SimInput};
use crate::source::RecordedInputs;
use crate::tick::Tick;

/// Where a playback is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayStatus {
    /// Frames are being played.
    Playing,
    /// Every frame was played and every recorded checksum matched. `end` says whether the
    /// replay was complete or cut (then its complete frames were played).
    Finished {
        /// How the file ended.
        end: ReplayEnd,
    },
    /// A verified checksum differed from the recorded one; playback stopped at that tick.
    Mismatch(ReplayMismatch),
    /// The replay cannot be played by this game (or its snapshot could not be loaded).
    Failed(ReplayError),
}

/// A verified tick of a replay playback whose checksum differs from the recorded one: the
/// simulation is not deterministic, the game changed, or the replay was tampered with. The
/// playback stops at this tick ([replays](crate::rules#replays)).
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayMismatch {
    /// The tick.
    pub tick: Tick,
    /// The recorded checksum.
    pub expected: u64,
    /// The checksum the playback verified.
    pub found: u64,
}

/// A replay playback could not start or go on ([`ReplayStatus::Failed`]).
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct ReplayPlaybackFailed(pub ReplayError);

/// A replay being played (main-app resource, inserted by
/// [`DeterministicPlugin::replay`](crate::DeterministicPlugin::replay) with [`ReplayMode::Play`](crate::ReplayMode::Play)): the session
/// takes its confirmed inputs (and disconnected players) from the frames, one polled tick per
/// frame, verifies every tick in lockstep and compares each recorded checksum with its own. At
/// the first difference it writes a [`ReplayMismatch`], stops verifying and holds
/// [`ReplayStatus::Mismatch`]; after the last frame, [`ReplayStatus::Finished`].
///
/// The resource shows the playback as of the end of the last session update; the session's
/// replay input source and replay check move it on.
#[derive(Resource, Debug)]
pub struct ReplayPlayback<I: SimInput> {
    handle: PlaybackHandle<I>,
    seek: Option<Tick>,
    /// The progress as of the last [`sync`](Self::sync) (what the getters read).
    view: Progress,
}

/// Where a playback is.
#[derive(Debug, Clone)]
struct Progress {
    /// Index of the next frame to feed.
    next: usize,
    status: ReplayStatus,
    /// The tick playback started from (0, or a snapshot's tick).
    start_tick: Tick,
    checksums_checked: u64,
    last_verified: Tick,
    started: bool,
}

impl Progress {
    fn new(start_tick: Tick) -> Self {
        Self {
            next: 0,
            status: ReplayStatus::Playing,
            start_tick,
            checksums_checked: 0,
            last_verified: start_tick,
            started: false,
        }
    }

    fn is_playing(&self) -> bool {
        self.status == ReplayStatus::Playing
    }
}

/// A playback's frames and progress, shared by the [`ReplayPlayback`] resource, the session's
/// replay input source ([`ReplayFeed`]) and its replay check hook.
#[derive(Debug)]
pub(crate) struct PlaybackHandle<I: SimInput> {
    replay: Arc<Replay<I>>,
    progress: Arc<Mutex<Progress>>,
}

impl<I: SimInput> Clone for PlaybackHandle<I> {
    fn clone(&self) -> Self {
        Self {
            replay: Arc::clone(&self.replay),
            progress: Arc::clone(&self.progress),
        }
    }
}

impl<I: SimInput> ReplayPlayback<I> {
    /// A playback of `replay` from its start.
    pub fn new(replay: Replay<I>) -> Self {
        let progress = Progress::new(replay.header().start_tick);
        Self {
            handle: PlaybackHandle {
                replay: Arc::new(replay),
                progress: Arc::new(Mutex::new(progress.clone())),
            },
            seek: None,
            view: progress,
        }
    }

    /// Starts the playback at `tick` instead: from the snapshot nearest at or before it (the
    /// ticks from there to `tick` are verified and checked too), or from the start without
    /// one. A tick outside the recording fails the playback with
    /// [`ReplayError::SeekOutOfRange`].
    pub fn with_seek(mut self, tick: Tick) -> Self {
        self.seek = Some(tick);
        self
    }

    /// The tick asked for with [`with_seek`](Self::with_seek).
    pub fn seek(&self) -> Option<Tick> {
        self.seek
    }

    /// The replay.
    pub fn replay(&self) -> &Replay<I> {
        &self.handle.replay
    }

    /// Where the playback is.
    pub fn status(&self) -> &ReplayStatus {
        &self.view.status
    }

    /// Whether frames are still being played.
    pub fn is_playing(&self) -> bool {
        self.view.is_playing()
    }

    /// The tick playback started from (0, or the tick of the snapshot it loaded).
    pub fn start_tick(&self) -> Tick {
        self.view.start_tick
    }

    /// The last tick verified by the playback.
    pub fn verified_tick(&self) -> Tick {
        self.view.last_verified
    }

    /// The last recorded tick.
    pub fn last_tick(&self) -> Tick {
        self.handle.replay.last_tick()
    }

    /// Recorded checksums compared so far (all matched unless the status is a mismatch).
    pub fn checksums_checked(&self) -> u64 {
        self.view.checksums_checked
    }

    /// The shared frames and progress, for the session's replay source and check.
    pub(crate) fn handle(&self) -> &PlaybackHandle<I> {
        &self.handle
    }

    /// Shows the progress the session made (after it moved the playback on).
    pub(crate) fn sync(&mut self) {
        self.view = self.handle.progress().clone();
    }
}

impl<I: SimInput> PlaybackHandle<I> {
    fn progress(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the session has started playing and frames are still being played.
    pub(crate) fn waits_for_start(&self) -> bool {
        let progress = self.progress();
        !progress.started && progress.is_playing()
    }

    /// Moves the playback back to the replay's start, not started (a restarted session).
    fn restart(&self) {
        *self.progress() = Progress::new(self.replay.header().start_tick);
    }

    /// Marks the playback started from `tick` (0, or a loaded snapshot's tick): the next frame
    /// fed is `tick + 1`'s.
    ///
    /// # Errors
    /// [`ReplayError::SeekOutOfRange`] for a tick outside the recording.
    pub(crate) fn start_from(&self, tick: Tick) -> Result<(), ReplayError> {
        let first = self.replay.header().start_tick;
        let last = self.replay.last_tick();
        if !(first..=last).contains(&tick) {
            return Err(ReplayError::SeekOutOfRange { tick, first, last });
        }
        let mut progress = self.progress();
        progress.next = usize::try_from(tick - first).unwrap_or(0);
        progress.start_tick = tick;
        progress.last_verified = tick;
        progress.started = true;
        if tick == last {
            progress.status = ReplayStatus::Finished {
                end: self.replay.end(),
            };
        }
        Ok(())
    }

    /// Stops the playback with `error`.
    pub(crate) fn fail(&self, error: ReplayError) {
        self.progress().status = ReplayStatus::Failed(error);
    }

    /// Whether the frame of `tick` carries a checksum to compare.
    pub(crate) fn expects_checksum(&self, tick: Tick) -> bool {
        self.progress().is_playing()
            && self
                .replay
                .frame(tick)
                .is_some_and(|frame| frame.checksum.is_some())
    }

    /// Checks verified tick `tick` with its `checksum` (if computed): the first mismatch stops
    /// the playback and is returned; the last frame finishes it.
    pub(crate) fn verified(&self, tick: Tick, checksum: Option<u64>) -> Option<ReplayMismatch> {
        let mut progress = self.progress();
        if !progress.is_playing() {
            return None;
        }
        progress.last_verified = tick;
        let expected = self.replay.frame(tick).and_then(|frame| frame.checksum);
        if let (Some(expected), Some(found)) = (expected, checksum) {
            progress.checksums_checked += 1;
            if expected != found {
                let mismatch = ReplayMismatch {
                    tick,
                    expected,
                    found,
                };
                progress.status = ReplayStatus::Mismatch(mismatch);
                return Some(mismatch);
            }
        }
        if tick >= self.replay.last_tick() {
            progress.status = ReplayStatus::Finished {
                end: self.replay.end(),
            };
        }
        None
    }
}

/// A replay playback as a session's input source: each polled tick confirms the next frame's
/// inputs and disconnected marks (chosen when the session is set up).
#[derive(Debug, Clone)]
pub(crate) struct ReplayFeed<I: SimInput> {
    handle: PlaybackHandle<I>,
}

impl<I: SimInput> ReplayFeed<I> {
    /// The input source of `playback`.
    pub(crate) fn new(playback: &ReplayPlayback<I>) -> Self {
        Self {
            handle: playback.handle.clone(),
        }
    }
}

impl<I: SimInput> RecordedInputs<I> for ReplayFeed<I> {
    fn restart(&self) {
        self.handle.restart();
    }

    fn players(&self) -> crate::tick::PlayerIndex {
        self.handle.replay.header().players
    }

    fn boxed_clone(&self) -> Box<dyn RecordedInputs<I>> {
        Box::new(self.clone())
    }

    /// Confirms the next `polls` frames of the playback into `buffer` (each player's input and
    /// disconnected mark); a frame whose tick is not the next polled tick fails the playback.
    fn feed(&mut self, polls: u32, local_tick: &mut Tick, buffer: &mut InputBuffer<I>) {
        let mut progress = self.handle.progress();
        for _ in 0..polls {
            if !progress.is_playing() || !progress.started {
                return;
            }
            let Some(frame) = self.handle.replay.frames().get(progress.next) else {
                return;
            };
            if frame.tick != *local_tick + 1 {
                progress.status = ReplayStatus::Failed(ReplayError::Corrupt {
                    offset: 0,
                    reason: format!(
                        "the session polls tick {} where the next frame is tick {}",
                        *local_tick + 1,
                        frame.tick
                    ),
                });
                return;
            }
            if !buffer.storable_ticks().contains(&frame.tick) {
                return;
            }
            confirm_frame(frame, buffer);
            *local_tick = frame.tick;
            progress.next += 1;
        }
    }
}

/// Confirms `frame`'s inputs and disconnected marks into `buffer`.
fn confirm_frame<I: SimInput>(frame: &ReplayFrame<I>, buffer: &mut InputBuffer<I>) {
    for (player, input) in frame.inputs.iter().enumerate() {
        let player = player as u8;
        if let Err(error) = buffer.confirm(player, frame.tick, input.clone()) {
            warn!(
                "replay input of player {player} at tick {}: {error}",
                frame.tick
            );
        }
        if player < 64 && frame.disconnected & (1u64 << player) != 0 {
            let _ = buffer.mark_disconnected(player, frame.tick);
        }
    }
}
