//! [`VirtualClock`]: how the plugin advances [`CurrentInstant`](crate::CurrentInstant) — the
//! advance policy, the per-frame budget, step requests and counters. Plain data and pure
//! functions; the systems that apply them are in `plugin` and `dispatch`.

use core::num::NonZeroU32;
use std::collections::VecDeque;

use bevy::prelude::*;

use crate::{TimeError, VirtualInstant};

/// How [`VirtualTimePlugin`](crate::VirtualTimePlugin) moves the clock
/// ([time rule 16](crate::rules)).
#[derive(Reflect, Debug, Clone, Copy, PartialEq, Eq)]
#[reflect(Debug, Clone, PartialEq)]
pub enum AdvancePolicy {
    /// One tick per run of Bevy's fixed main loop (`FixedMain`), sharing Bevy's fixed step: at
    /// tick `t`, every event with `ticks ≤ t` is dispatched in `FixedFirst`
    /// ([`VirtualTimeSet::Dispatch`](crate::VirtualTimeSet::Dispatch)), and in `FixedLast`
    /// ([`VirtualTimeSet::Advance`](crate::VirtualTimeSet::Advance)) the clock moves to tick
    /// `t + 1`, priority 0. The default.
    FixedStep,
    /// Discrete-event "as fast as possible": each `PreUpdate`, the clock jumps straight to the
    /// next due event's instant, dispatches everything at that instant, and repeats until the
    /// [`FrameBudget`] is spent or no event is left.
    NextEvent(FrameBudget),
    /// The clock stands still except on [`ClockRequest`]s made with
    /// [`VirtualClock::request`], which run in the next `PreUpdate`.
    Paused,
    /// Someone else sets [`CurrentInstant`](crate::CurrentInstant) (a deterministic simulation
    /// world sets it at the start of each simulation tick); the plugin only dispatches, in the
    /// schedule given to [`VirtualTimePlugin::driven_by`](crate::VirtualTimePlugin::driven_by),
    /// every event with `ticks ≤` the current tick.
    Driven,
}

impl Default for AdvancePolicy {
    /// [`AdvancePolicy::FixedStep`].
    fn default() -> Self {
        AdvancePolicy::FixedStep
    }
}

/// How much one frame of [`AdvancePolicy::NextEvent`] may do: at most `events` dispatched events
/// and at most `ticks` ticks of virtual time past the instant the frame started at. The frame
/// stops before the event that would exceed either limit; that event is the first of the next
/// frame. When the next event lies beyond the tick limit, the clock still moves to the start of
/// the last tick the limit allows, `(start.ticks + ticks, 0)`, so a tick budget caps the speed
/// of virtual time without stalling it. `ticks: None` means no tick limit.
#[derive(Reflect, Debug, Clone, Copy, PartialEq, Eq)]
#[reflect(Debug, Clone, PartialEq)]
pub struct FrameBudget {
    /// Events dispatched per frame, at least 1.
    pub events: NonZeroU32,
    /// Ticks the clock may move per frame, or `None` for no limit.
    pub ticks: Option<u64>,
}

impl Default for FrameBudget {
    /// 10,000 events per frame, no tick limit.
    fn default() -> Self {
        FrameBudget {
            events: NonZeroU32::new(10_000).expect("non-zero"),
            ticks: None,
        }
    }
}

impl FrameBudget {
    /// At most `events` events per frame, no tick limit.
    ///
    /// # Errors
    ///
    /// [`TimeError::ZeroFrameBudget`] if `events` is 0 (a frame that may do nothing would never
    /// advance).
    pub const fn events(events: u32) -> Result<FrameBudget, TimeError> {
        match NonZeroU32::new(events) {
            Some(events) => Ok(FrameBudget {
                events,
                ticks: None,
            }),
            None => Err(TimeError::ZeroFrameBudget),
        }
    }

    /// This budget with at most `ticks` ticks of virtual time per frame.
    ///
    /// # Errors
    ///
    /// [`TimeError::ZeroFrameBudget`] if `ticks` is 0.
    pub const fn with_ticks(self, ticks: u64) -> Result<FrameBudget, TimeError> {
        if ticks == 0 {
            return Err(TimeError::ZeroFrameBudget);
        }
        Ok(FrameBudget {
            events: self.events,
            ticks: Some(ticks),
        })
    }

    /// Whether an event at `at` still fits a frame that started at `start`: its tick is at most
    /// `ticks` after the start tick (always true without a tick limit).
    pub fn allows_instant(&self, start: VirtualInstant, at: VirtualInstant) -> bool {
        match self.ticks {
            None => true,
            Some(limit) => {
                let moved = i128::from(at.ticks) - i128::from(start.ticks);
                moved <= i128::from(limit)
            }
        }
    }
}

/// A request to move a [`Paused`](AdvancePolicy::Paused) clock, made with
/// [`VirtualClock::request`] and carried out in the next `PreUpdate`.
#[derive(Reflect, Debug, Clone, Copy, PartialEq, Eq)]
#[reflect(Debug, Clone, PartialEq)]
pub enum ClockRequest {
    /// Run `n` ticks exactly as `n` runs of [`AdvancePolicy::FixedStep`] would: every event with
    /// `ticks` up to the last of them is dispatched, and the clock ends at the tick after it,
    /// priority 0.
    Ticks(u64),
    /// Dispatch every event at or before the instant, then set the clock to it.
    Until(VirtualInstant),
}

/// Counters of what the clock did, since the App started. Wall-clock independent; reset only
/// by replacing the resource.
#[derive(Reflect, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[reflect(Debug, Default, Clone, PartialEq)]
pub struct ClockStats {
    /// Events delivered by the dispatch, all queues together.
    pub events_dispatched: u64,
    /// Clock moves made by the plugin (ticks of `FixedStep`, jumps of `NextEvent`, requests).
    pub advances: u64,
    /// Requests refused by [`VirtualClock::request`].
    pub rejected_requests: u64,
}

/// Most requests that may wait at once; more are refused
/// ([`TimeError::TooManyClockRequests`]).
pub const MAX_PENDING_REQUESTS: usize = 1024;

/// The state of the plugin's clock: its [`AdvancePolicy`], pending [`ClockRequest`]s,
/// [`ClockStats`], and the instant of the next waiting event ([time rules 16–18](crate::rules)).
/// The current instant itself is [`CurrentInstant`](crate::CurrentInstant).
///
/// Change the policy at run time with [`set_policy`](Self::set_policy) (e.g. pause a running
/// clock); it takes effect in the next schedule that drives the clock.
#[derive(Resource, Reflect, Debug, Clone, PartialEq)]
#[reflect(Resource, Debug, Clone, PartialEq)]
pub struct VirtualClock {
    policy: AdvancePolicy,
    requests: VecDeque<ClockRequest>,
    stats: ClockStats,
    next_event: VirtualInstant,
}

impl Default for VirtualClock {
    fn default() -> Self {
        VirtualClock::new(AdvancePolicy::default())
    }
}

impl VirtualClock {
    /// A clock with `policy`, no requests, zero counters and no known next event.
    pub fn new(policy: AdvancePolicy) -> Self {
        VirtualClock {
            policy,
            requests: VecDeque::new(),
            stats: ClockStats::default(),
            next_event: VirtualInstant::INFINITY,
        }
    }

    /// The advance policy.
    pub fn policy(&self) -> AdvancePolicy {
        self.policy
    }

    /// Replaces the advance policy. Pending requests stay; they run once the clock is
    /// [`Paused`](AdvancePolicy::Paused) again.
    pub fn set_policy(&mut self, policy: AdvancePolicy) {
        self.policy = policy;
    }

    /// The counters.
    pub fn stats(&self) -> ClockStats {
        self.stats
    }

    /// The instant of the earliest waiting event over every registered queue as of the last
    /// dispatch, or [`VirtualInstant::INFINITY`] when nothing is waiting ("no more events").
    pub fn next_event(&self) -> VirtualInstant {
        self.next_event
    }

    /// Requests waiting for the next `PreUpdate`, oldest first.
    pub fn pending_requests(&self) -> impl ExactSizeIterator<Item = &ClockRequest> {
        self.requests.iter()
    }

    /// Asks a paused clock to move; `now` is the current instant. Requests run in order, each
    /// from where the previous one left the clock.
    ///
    /// # Errors
    ///
    /// - [`TimeError::ClockNotPaused`] unless the policy is [`AdvancePolicy::Paused`];
    /// - [`TimeError::ClockRequestInPast`] for `Until(x)` with `x` before where the clock will be
    ///   after the requests already waiting;
    /// - [`TimeError::TooManyClockRequests`] with [`MAX_PENDING_REQUESTS`] already waiting.
    ///
    /// Every refusal also counts in [`ClockStats::rejected_requests`].
    pub fn request(&mut self, now: VirtualInstant, request: ClockRequest) -> Result<(), TimeError> {
        let result = self.check_request(now, request);
        match result {
            Ok(()) => self.requests.push_back(request),
            Err(_) => self.stats.rejected_requests += 1,
        }
        result
    }

    fn check_request(&self, now: VirtualInstant, request: ClockRequest) -> Result<(), TimeError> {
        if self.policy != AdvancePolicy::Paused {
            return Err(TimeError::ClockNotPaused);
        }
        if self.requests.len() >= MAX_PENDING_REQUESTS {
            return Err(TimeError::TooManyClockRequests {
                max: MAX_PENDING_REQUESTS,
            });
        }
        let planned = self
            .requests
            .iter()
            .fold(now, |at, r| planned_after(at, *r));
        match request {
            ClockRequest::Until(target) if target < planned => Err(TimeError::ClockRequestInPast {
                target,
                clock: planned,
            }),
            _ => Ok(()),
        }
    }

    pub(crate) fn take_request(&mut self) -> Option<ClockRequest> {
        self.requests.pop_front()
    }

    pub(crate) fn record(&mut self, events: u64, advances: u64, next_event: VirtualInstant) {
        self.stats.events_dispatched += events;
        self.stats.advances += advances;
        self.next_event = next_event;
    }
}

/// The instant at which tick `ticks` starts: `(ticks, 0)`.
pub const fn tick_start(ticks: i64) -> VirtualInstant {
    VirtualInstant::from_ticks(ticks)
}

/// The last instant of the tick of `at`: `(at.ticks, i64::MAX)`; every event of that tick is at
/// or before it. [`VirtualInstant::INFINITY`] for the last tick.
pub const fn tick_end(at: VirtualInstant) -> VirtualInstant {
    VirtualInstant::new(at.ticks, i64::MAX)
}

/// The start of the tick after the one of `at`: `(at.ticks + 1, 0)`, saturating at
/// [`VirtualInstant::INFINITY`].
pub const fn next_tick(at: VirtualInstant) -> VirtualInstant {
    match at.ticks.checked_add(1) {
        Some(t) if !at.is_infinity() => tick_start(t),
        _ => VirtualInstant::INFINITY,
    }
}

/// Where the clock stands after `request` runs from `now` (the later of `now` and the target).
pub fn planned_after(now: VirtualInstant, request: ClockRequest) -> VirtualInstant {
    match request {
        ClockRequest::Ticks(0) => now,
        ClockRequest::Ticks(n) => {
            let last = last_tick_of(now, n);
            now.max(next_tick(tick_start(last)))
        }
        ClockRequest::Until(target) => now.max(target),
    }
}

/// The last tick `n ≥ 1` ticks run from `now` cover: `now.ticks + n − 1`, saturating.
pub fn last_tick_of(now: VirtualInstant, n: u64) -> i64 {
    let n = i64::try_from(n.saturating_sub(1)).unwrap_or(i64::MAX);
    now.ticks.saturating_add(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_bounds() {
        assert_eq!(
            tick_end(VirtualInstant::new(4, -7)),
            VirtualInstant::new(4, i64::MAX)
        );
        assert_eq!(
            next_tick(VirtualInstant::new(4, 9)),
            VirtualInstant::new(5, 0)
        );
        assert_eq!(
            next_tick(VirtualInstant::new(i64::MAX, 0)),
            VirtualInstant::INFINITY
        );
        assert_eq!(
            next_tick(VirtualInstant::INFINITY),
            VirtualInstant::INFINITY
        );
    }

    #[test]
    fn planned_position_of_requests() {
        let now = VirtualInstant::new(10, 3);
        assert_eq!(planned_after(now, ClockRequest::Ticks(0)), now);
        assert_eq!(
            planned_after(now, ClockRequest::Ticks(1)),
            VirtualInstant::new(11, 0)
        );
        assert_eq!(
            planned_after(now, ClockRequest::Ticks(5)),
            VirtualInstant::new(15, 0)
        );
        assert_eq!(
            planned_after(now, ClockRequest::Until(VirtualInstant::new(12, 1))),
            VirtualInstant::new(12, 1)
        );
        assert_eq!(
            planned_after(now, ClockRequest::Ticks(u64::MAX)),
            VirtualInstant::INFINITY
        );
    }

    #[test]
    fn requests_need_a_paused_clock() {
        let mut clock = VirtualClock::new(AdvancePolicy::FixedStep);
        assert_eq!(
            clock.request(VirtualInstant::ZERO, ClockRequest::Ticks(1)),
            Err(TimeError::ClockNotPaused)
        );
        assert_eq!(clock.stats().rejected_requests, 1);
        assert_eq!(clock.pending_requests().len(), 0);
    }

    #[test]
    fn a_request_into_the_past_is_refused_counting_earlier_requests() {
        let mut clock = VirtualClock::new(AdvancePolicy::Paused);
        let now = VirtualInstant::new(5, 0);
        clock.request(now, ClockRequest::Ticks(10)).unwrap();
        assert_eq!(
            clock.request(now, ClockRequest::Until(VirtualInstant::new(9, 0))),
            Err(TimeError::ClockRequestInPast {
                target: VirtualInstant::new(9, 0),
                clock: VirtualInstant::new(15, 0),
            })
        );
        clock
            .request(now, ClockRequest::Until(VirtualInstant::new(15, 0)))
            .unwrap();
        assert_eq!(clock.pending_requests().len(), 2);
        assert_eq!(clock.stats().rejected_requests, 1);
    }

    #[test]
    fn a_flood_of_requests_is_bounded() {
        let mut clock = VirtualClock::new(AdvancePolicy::Paused);
        for _ in 0..MAX_PENDING_REQUESTS {
            clock
                .request(VirtualInstant::ZERO, ClockRequest::Ticks(1))
                .unwrap();
        }
        assert_eq!(
            clock.request(VirtualInstant::ZERO, ClockRequest::Ticks(1)),
            Err(TimeError::TooManyClockRequests {
                max: MAX_PENDING_REQUESTS
            })
        );
        assert_eq!(clock.pending_requests().len(), MAX_PENDING_REQUESTS);
    }

    #[test]
    fn budgets_refuse_zero_and_limit_ticks() {
        assert_eq!(FrameBudget::events(0), Err(TimeError::ZeroFrameBudget));
        let b = FrameBudget::events(3).unwrap();
        assert_eq!(b.with_ticks(0), Err(TimeError::ZeroFrameBudget));
        let b = b.with_ticks(2).unwrap();
        let start = VirtualInstant::new(10, 5);
        assert!(b.allows_instant(start, VirtualInstant::new(12, 99)));
        assert!(!b.allows_instant(start, VirtualInstant::new(13, -1)));
        assert!(FrameBudget::default().allows_instant(start, VirtualInstant::INFINITY));
    }
}
