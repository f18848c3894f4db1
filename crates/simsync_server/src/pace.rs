//! When an ownership room without the physics host updates its entity server's App
//! ([physics host and ticking](crate::rules#physics-host)): [`OwnershipPace`], plain data.
//!
//! An update of the App has a fixed cost (its schedules, every system's queries) whether or
//! not anything happened, and the main loop turns more often (250 a second by default) than
//! participants send (64 a second in the sandbox). So a room updates on a turn only when the
//! update has something to do:
//! - something arrived for it since its last update (a packet, a connection taken in or
//!   gone), or
//! - its entity server said at its last update that work is waiting (bodies its relay
//!   budgets left for later, owner changes or resyncs still to send:
//!   `EntityServer::work_waiting`), or
//! - a room tick (`1 / tick_rate_hz`) has passed since its last update: the entity server's
//!   timers (participant silence, owner expiry, acknowledgements without bodies) and the
//!   connections renet closed are looked at at least once per room tick.
//!
//! An update covers all the time since the last one (its clock steps by their sum), so no
//! time is lost and every timer fires at its time, looked at within one room tick.

use std::time::Duration;

/// When an ownership room without the physics host is due an update, and the time its next
/// update covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OwnershipPace {
    /// One room tick: the longest a room goes without an update.
    tick: Duration,
    /// Time since the last update.
    since: Duration,
    /// Something arrived since the last update.
    inbound: bool,
    /// The entity server said work was waiting at its last update.
    waiting: bool,
}

impl OwnershipPace {
    /// A room ticking at `tick_rate_hz` (0 reads as 1), due its first update at once.
    pub(crate) fn new(tick_rate_hz: u16) -> Self {
        Self {
            tick: Duration::from_secs_f64(1.0 / f64::from(tick_rate_hz.max(1))),
            since: Duration::ZERO,
            inbound: false,
            waiting: true,
        }
    }

    /// Something arrived for the room (a packet, a connection taken in or gone).
    pub(crate) fn on_inbound(&mut self) {
        self.inbound = true;
    }

    /// A turn of `dt`: `Some(time)` if the room updates now, its clock stepping `time` (all
    /// the time since its last update); `None` if it skips the turn (the time is kept for
    /// the next update).
    pub(crate) fn turn(&mut self, dt: Duration) -> Option<Duration> {
        self.since += dt;
        let due = self.inbound || self.waiting || self.since >= self.tick;
        due.then(|| {
            self.inbound = false;
            std::mem::take(&mut self.since)
        })
    }

    /// After an update: whether the entity server has work waiting (then the next turn
    /// updates it again).
    pub(crate) fn updated(&mut self, work_waiting: bool) {
        self.waiting = work_waiting;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A room at 64 Hz (15.625 ms a tick), its first update done with nothing waiting.
    fn idle_room() -> OwnershipPace {
        let mut pace = OwnershipPace::new(64);
        assert_eq!(pace.turn(4 * MS), Some(4 * MS), "the first turn updates");
        pace.updated(false);
        pace
    }

    #[test]
    fn an_idle_room_updates_once_a_room_tick_with_all_the_time_since() {
        let mut pace = idle_room();
        // 4 ms turns: 16 ms ≥ 15.625 ms at the fourth.
        let turns: Vec<Option<Duration>> = (0..8).map(|_| pace.turn(4 * MS)).collect();
        assert_eq!(
            turns,
            vec![
                None,
                None,
                None,
                Some(16 * MS),
                None,
                None,
                None,
                Some(16 * MS)
            ]
        );
    }

    #[test]
    fn an_arrival_makes_the_next_turn_update_and_only_that_one() {
        let mut pace = idle_room();
        assert_eq!(pace.turn(4 * MS), None);
        pace.on_inbound();
        assert_eq!(pace.turn(4 * MS), Some(8 * MS));
        pace.updated(false);
        assert_eq!(pace.turn(4 * MS), None);
    }

    #[test]
    fn waiting_work_updates_every_turn_until_the_server_says_none_is_left() {
        let mut pace = idle_room();
        pace.on_inbound();
        assert_eq!(pace.turn(MS), Some(MS));
        pace.updated(true);
        assert_eq!(pace.turn(MS), Some(MS));
        pace.updated(true);
        assert_eq!(pace.turn(MS), Some(MS));
        pace.updated(false);
        assert_eq!(pace.turn(MS), None);
    }

    #[test]
    fn a_turn_longer_than_a_tick_always_updates_and_a_zero_rate_reads_as_one_hertz() {
        let mut pace = idle_room();
        assert_eq!(pace.turn(20 * MS), Some(20 * MS));
        pace.updated(false);
        assert_eq!(pace.turn(20 * MS), Some(20 * MS));
        let mut slow = OwnershipPace::new(0);
        assert_eq!(slow.turn(MS), Some(MS));
        slow.updated(false);
        assert_eq!(slow.turn(998 * MS), None);
        assert_eq!(slow.turn(2 * MS), Some(1_000 * MS));
    }
}
