//! [`ReplayPlayback`]: a replay's frames as a lockstep session's confirmed inputs, and the
//! check of every recorded checksum.

use bevy::prelude::*;

use super::error::ReplayError;
use super::reader::{Replay, ReplayEnd};
use crate::input::{InputBuffer, SimInput};
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
#[derive(Resource, Debug)]
pub struct ReplayPlayback<I: SimInput> {
    replay: Replay<I>,
    /// Index of the next frame to feed.
    next: usize,
    status: ReplayStatus,
    /// The tick playback started from (0, or a snapshot's tick).
    start_tick: Tick,
    checksums_checked: u64,
    last_verified: Tick,
    started: bool,
    seek: Option<Tick>,
}

impl<I: SimInput> ReplayPlayback<I> {
    /// A playback of `replay` from its start.
    pub fn new(replay: Replay<I>) -> Self {
        let start_tick = replay.header().start_tick;
        Self {
            replay,
            next: 0,
            status: ReplayStatus::Playing,
            start_tick,
            checksums_checked: 0,
            last_verified: start_tick,
            started: false,
            seek: None,
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
        &self.replay
    }

    /// Where the playback is.
    pub fn status(&self) -> &ReplayStatus {
        &self.status
    }

    /// Whether frames are still being played.
    pub fn is_playing(&self) -> bool {
        self.status == ReplayStatus::Playing
    }

    /// The tick playback started from (0, or the tick of the snapshot it loaded).
    pub fn start_tick(&self) -> Tick {
        self.start_tick
    }

    /// The last tick verified by the playback.
    pub fn verified_tick(&self) -> Tick {
        self.last_verified
    }

    /// The last recorded tick.
    pub fn last_tick(&self) -> Tick {
        self.replay.last_tick()
    }

    /// Recorded checksums compared so far (all matched unless the status is a mismatch).
    pub fn checksums_checked(&self) -> u64 {
        self.checksums_checked
    }

    /// Whether the session has started playing.
    pub(crate) fn started(&self) -> bool {
        self.started
    }

    /// Marks the playback started from `tick` (0, or a loaded snapshot's tick): the next frame
    /// fed is `tick + 1`'s.
    ///
    /// # Errors
    /// [`ReplayError::SeekOutOfRange`] for a tick outside the recording.
    pub(crate) fn start_from(&mut self, tick: Tick) -> Result<(), ReplayError> {
        let first = self.replay.header().start_tick;
        let last = self.replay.last_tick();
        if !(first..=last).contains(&tick) {
            return Err(ReplayError::SeekOutOfRange { tick, first, last });
        }
        self.next = usize::try_from(tick - first).unwrap_or(0);
        self.start_tick = tick;
        self.last_verified = tick;
        self.started = true;
        if tick == last {
            self.status = ReplayStatus::Finished {
                end: self.replay.end(),
            };
        }
        Ok(())
    }

    /// Stops the playback with `error`.
    pub(crate) fn fail(&mut self, error: ReplayError) {
        self.status = ReplayStatus::Failed(error);
    }

    /// Confirms the next `polls` frames into `buffer` (each player's input and disconnected
    /// mark), advancing `local_tick` with them; nothing once the playback stopped or the frames
    /// ran out. A frame the buffer cannot take yet (it is full) waits for the next poll.
    pub(crate) fn feed(&mut self, polls: u32, local_tick: &mut Tick, buffer: &mut InputBuffer<I>) {
        for _ in 0..polls {
            if !self.is_playing() || !self.started {
                return;
            }
            let Some(frame) = self.replay.frames().get(self.next) else {
                return;
            };
            if frame.tick != *local_tick + 1 {
                let error = ReplayError::Corrupt {
                    offset: 0,
                    reason: format!(
                        "the session polls tick {} where the next frame is tick {}",
                        *local_tick + 1,
                        frame.tick
                    ),
                };
                self.fail(error);
                return;
            }
            if !buffer.storable_ticks().contains(&frame.tick) {
                return;
            }
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
            *local_tick = frame.tick;
            self.next += 1;
        }
    }

    /// Whether the frame of `tick` carries a checksum to compare.
    pub(crate) fn expects_checksum(&self, tick: Tick) -> bool {
        self.is_playing()
            && self
                .replay
                .frame(tick)
                .is_some_and(|frame| frame.checksum.is_some())
    }

    /// Checks verified tick `tick` with its `checksum` (if computed): the first mismatch stops
    /// the playback and is returned; the last frame finishes it.
    pub(crate) fn verified(&mut self, tick: Tick, checksum: Option<u64>) -> Option<ReplayMismatch> {
        if !self.is_playing() {
            return None;
        }
        self.last_verified = tick;
        let expected = self.replay.frame(tick).and_then(|frame| frame.checksum);
        if let (Some(expected), Some(found)) = (expected, checksum) {
            self.checksums_checked += 1;
            if expected != found {
                let mismatch = ReplayMismatch {
                    tick,
                    expected,
                    found,
                };
                self.status = ReplayStatus::Mismatch(mismatch);
                return Some(mismatch);
            }
        }
        if tick >= self.replay.last_tick() {
            self.status = ReplayStatus::Finished {
                end: self.replay.end(),
            };
        }
        None
    }
}
