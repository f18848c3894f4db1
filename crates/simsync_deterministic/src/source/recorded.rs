//! Recorded confirmed inputs as the origin of a session's input path ([`RecordedInputs`]): a
//! replay playback feeds its frames through it, so the input path knows a recording only by
//! this trait and the replay feature plugs in from above.

use crate::input::{InputBuffer, SimInput};
use crate::tick::{PlayerIndex, Tick};

/// Confirmed inputs read from a recording instead of a relay: each polled tick confirms the
/// next recorded frame (every player's input and disconnected mark).
pub(crate) trait RecordedInputs<I: SimInput>: Send + Sync + 'static {
    /// The recorded session's players.
    fn players(&self) -> PlayerIndex;

    /// Confirms the next `polls` frames into `buffer`, advancing `local_tick` with them;
    /// nothing once the recording stopped or ran out. A frame the buffer cannot take yet (it is
    /// full) waits for the next poll.
    fn feed(&mut self, polls: u32, local_tick: &mut Tick, buffer: &mut InputBuffer<I>);

    /// Moves the recording back to its start, not started (a restarted session).
    fn restart(&self);

    /// Another handle on the same recording (the session blueprint keeps one for restarts).
    fn boxed_clone(&self) -> Box<dyn RecordedInputs<I>>;
}

impl<I: SimInput> Clone for Box<dyn RecordedInputs<I>> {
    fn clone(&self) -> Self {
        self.boxed_clone()
    }
}
