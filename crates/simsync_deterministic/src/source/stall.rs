//! Stall detection of a networked client: no new verifiable tick for more than a second while
//! the session runs is a stall, reported once with its reason and cleared when ticks flow again
//! ([stalls are reported](crate::rules#stalls-are-reported)). Pure: the caller passes the time.

use std::time::Duration;

use bevy::reflect::Reflect;

use crate::tick::Tick;

/// How long without a new verifiable tick counts as a stall.
pub const STALL_AFTER: Duration = Duration::from_secs(1);

/// Why a networked session stopped verifying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub enum StallReason {
    /// The relay no longer holds the confirmed inputs this client misses (its history starts at
    /// `oldest_available`): the client cannot verify on and needs a snapshot.
    NeedsSnapshot {
        /// The oldest tick whose confirmed inputs the relay still holds.
        oldest_available: Tick,
    },
    /// The confirmed inputs of the next tick did not arrive (a broken link, a paused client, or
    /// a relay that stopped confirming).
    NoConfirmedInputs,
}

impl core::fmt::Display for StallReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NeedsSnapshot { oldest_available } => write!(
                f,
                "the relay no longer holds the confirmed inputs this client misses (its \
                 history starts at tick {oldest_available}): the client needs a snapshot"
            ),
            Self::NoConfirmedInputs => f.write_str(
                "the confirmed inputs of the next tick did not arrive (a broken link, a paused \
                 peer, or a relay that stopped confirming)",
            ),
        }
    }
}

/// A stall under way: no new verifiable tick since `since_tick` for more than [`STALL_AFTER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub struct SessionStall {
    /// The last verifiable tick before the stall.
    pub since_tick: Tick,
    /// Why.
    pub reason: StallReason,
}

/// A change of the stall state, reported once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StallChange {
    /// A stall began.
    Stalled(SessionStall),
    /// Ticks flow again: verifiable through `tick`, after a stall of `stalled_for`.
    Resumed { tick: Tick, stalled_for: Duration },
}

/// Watches the verifiable tick for stalls.
#[derive(Debug, Clone, Default)]
pub(crate) struct StallWatch {
    /// The last verifiable tick seen and when it was first seen.
    progress: Option<(Tick, Duration)>,
    stalled: Option<(SessionStall, Duration)>,
}

impl StallWatch {
    /// The stall under way, if any.
    pub(crate) fn stall(&self) -> Option<SessionStall> {
        self.stalled.map(|(stall, _)| stall)
    }

    /// Observes the verifiable tick at `now`. `running`: the session runs and the client is
    /// connected (time outside that does not count); `behind`: the relay's oldest held tick if
    /// it reported this client behind its history.
    pub(crate) fn observe(
        &mut self,
        now: Duration,
        verifiable: Tick,
        running: bool,
        behind: Option<Tick>,
    ) -> Option<StallChange> {
        let moved = self.progress.is_none_or(|(tick, _)| verifiable > tick);
        if moved || !running {
            self.progress = Some((verifiable, now));
            let (_, since) = self.stalled.take()?;
            return Some(StallChange::Resumed {
                tick: verifiable,
                stalled_for: now.saturating_sub(since),
            });
        }
        let (tick, since) = self.progress?;
        let reason = match behind {
            Some(oldest_available) => StallReason::NeedsSnapshot { oldest_available },
            None => StallReason::NoConfirmedInputs,
        };
        // A stall under way is reported again only when its reason changes.
        let same = self
            .stalled
            .is_some_and(|(stall, _)| stall.reason == reason);
        if same || now.saturating_sub(since) <= STALL_AFTER {
            return None;
        }
        let stall = SessionStall {
            since_tick: tick,
            reason,
        };
        self.stalled = Some((stall, since));
        Some(StallChange::Stalled(stall))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn a_second_without_progress_is_a_stall_reported_once_and_cleared_on_progress() {
        let mut watch = StallWatch::default();
        assert_eq!(watch.observe(ms(0), 10, true, None), None);
        assert_eq!(watch.observe(ms(1_000), 10, true, None), None);
        let stall = SessionStall {
            since_tick: 10,
            reason: StallReason::NoConfirmedInputs,
        };
        assert_eq!(
            watch.observe(ms(1_001), 10, true, None),
            Some(StallChange::Stalled(stall))
        );
        assert_eq!(watch.observe(ms(1_500), 10, true, None), None);
        assert_eq!(watch.stall(), Some(stall));
        // The relay says the missing sets are gone: reported again with the new reason.
        let needs = SessionStall {
            since_tick: 10,
            reason: StallReason::NeedsSnapshot {
                oldest_available: 90,
            },
        };
        assert_eq!(
            watch.observe(ms(1_600), 10, true, Some(90)),
            Some(StallChange::Stalled(needs))
        );
        assert_eq!(watch.observe(ms(1_700), 10, true, Some(90)), None);
        assert_eq!(
            watch.observe(ms(2_000), 11, true, None),
            Some(StallChange::Resumed {
                tick: 11,
                stalled_for: ms(2_000),
            })
        );
        assert_eq!(watch.stall(), None);
    }

    #[test]
    fn a_client_behind_the_history_stalls_needing_a_snapshot() {
        let mut watch = StallWatch::default();
        watch.observe(ms(0), 5, true, Some(700));
        let change = watch.observe(ms(1_100), 5, true, Some(700));
        assert_eq!(
            change,
            Some(StallChange::Stalled(SessionStall {
                since_tick: 5,
                reason: StallReason::NeedsSnapshot {
                    oldest_available: 700
                },
            }))
        );
    }

    #[test]
    fn time_before_the_session_runs_does_not_count() {
        let mut watch = StallWatch::default();
        assert_eq!(watch.observe(ms(0), 0, false, None), None);
        assert_eq!(watch.observe(ms(5_000), 0, false, None), None);
        assert_eq!(watch.observe(ms(5_500), 0, true, None), None);
        assert!(watch.observe(ms(6_100), 0, true, None).is_some());
    }
}
