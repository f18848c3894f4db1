//! The graceful shutdown ([drain](crate::rules#drain)) as a pure state machine: [`Drain`]
//! says what the main loop does next from the time and the rooms still live.

use std::time::Duration;

/// Where the server is in shutting down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainPhase {
    /// Serving: ready, taking rooms and clients.
    Serving,
    /// Draining since `since`: not ready, no new rooms or clients; running rooms may finish
    /// until `since + timeout`.
    Draining {
        /// When the drain started (server time).
        since: Duration,
    },
    /// The timeout passed with rooms still live: they were ended (their clients told the
    /// server shut down) at `since`; the server waits for them to close.
    Ending {
        /// When the rooms were ended.
        since: Duration,
    },
    /// Every room is over: the server exits (code 0).
    Done,
}

/// What the main loop must do after [`Drain::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainAction {
    /// Nothing new.
    Continue,
    /// End every live room with the shutdown reason.
    EndRooms,
    /// Stop the loop and exit.
    Exit,
}

/// The longest the server waits for ended rooms to close their connections before it exits
/// anyway (their clients were told; the grace lets the message arrive).
pub const ENDING_WAIT: Duration = Duration::from_secs(3);

/// The drain state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drain {
    phase: DrainPhase,
    timeout: Duration,
}

impl Drain {
    /// A serving server that gives running rooms `timeout` to finish once the drain starts.
    pub fn new(timeout: Duration) -> Self {
        Self {
            phase: DrainPhase::Serving,
            timeout,
        }
    }

    /// Where the drain is.
    pub fn phase(&self) -> DrainPhase {
        self.phase
    }

    /// Whether the server takes new rooms and clients.
    pub fn serving(&self) -> bool {
        self.phase == DrainPhase::Serving
    }

    /// Starts the drain at `now` (a second signal changes nothing).
    pub fn begin(&mut self, now: Duration) {
        if self.phase == DrainPhase::Serving {
            self.phase = DrainPhase::Draining { since: now };
        }
    }

    /// The next step at `now` with `live_rooms` rooms not yet over.
    pub fn step(&mut self, now: Duration, live_rooms: usize) -> DrainAction {
        match self.phase {
            DrainPhase::Serving => DrainAction::Continue,
            DrainPhase::Draining { .. } | DrainPhase::Ending { .. } if live_rooms == 0 => {
                self.phase = DrainPhase::Done;
                DrainAction::Exit
            }
            DrainPhase::Draining { since } if now.saturating_sub(since) >= self.timeout => {
                self.phase = DrainPhase::Ending { since: now };
                DrainAction::EndRooms
            }
            DrainPhase::Ending { since } if now.saturating_sub(since) >= ENDING_WAIT => {
                self.phase = DrainPhase::Done;
                DrainAction::Exit
            }
            DrainPhase::Done => DrainAction::Exit,
            _ => DrainAction::Continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn serving_never_exits_whatever_the_rooms() {
        let mut drain = Drain::new(s(30));
        assert_eq!(drain.step(s(100), 0), DrainAction::Continue);
        assert!(drain.serving());
    }

    #[test]
    fn a_drain_exits_as_soon_as_the_last_room_finished() {
        let mut drain = Drain::new(s(30));
        drain.begin(s(10));
        assert!(!drain.serving());
        assert_eq!(drain.step(s(11), 2), DrainAction::Continue);
        assert_eq!(drain.step(s(20), 0), DrainAction::Exit);
        assert_eq!(drain.phase(), DrainPhase::Done);
    }

    #[test]
    fn rooms_still_live_at_the_timeout_are_ended_then_the_server_exits() {
        let mut drain = Drain::new(s(30));
        drain.begin(s(10));
        assert_eq!(drain.step(s(39), 1), DrainAction::Continue);
        assert_eq!(drain.step(s(40), 1), DrainAction::EndRooms);
        assert_eq!(drain.phase(), DrainPhase::Ending { since: s(40) });
        // Their connections close within the grace: exit then.
        assert_eq!(drain.step(s(41), 0), DrainAction::Exit);
    }

    #[test]
    fn ended_rooms_that_never_close_do_not_hold_the_exit_forever() {
        let mut drain = Drain::new(s(0));
        drain.begin(s(5));
        assert_eq!(drain.step(s(5), 1), DrainAction::EndRooms);
        assert_eq!(drain.step(s(7), 1), DrainAction::Continue);
        assert_eq!(drain.step(s(8), 1), DrainAction::Exit);
    }

    #[test]
    fn a_second_signal_keeps_the_first_drain_start() {
        let mut drain = Drain::new(s(30));
        drain.begin(s(10));
        drain.begin(s(25));
        assert_eq!(drain.phase(), DrainPhase::Draining { since: s(10) });
    }
}
