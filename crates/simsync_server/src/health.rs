//! Liveness and readiness ([operations](crate::rules#operations)): the main loop's
//! [`Heartbeat`], read by `/healthz` on the HTTP thread (and by the Agones adapter), and the
//! [`Readiness`] flags behind `/readyz`. Plain atomics: the HTTP thread never waits on the
//! main loop to answer a probe.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long the main loop may go without turning before `/healthz` fails.
pub const LIVENESS_TIMEOUT: Duration = Duration::from_secs(2);

/// The main loop's heartbeat: the time of its last turn, in milliseconds since the heartbeat
/// was made. Cloning shares it; the loop calls [`beat`](Self::beat) every turn, any thread may
/// ask whether it is [`alive`](Self::alive).
#[derive(Debug, Clone)]
pub struct Heartbeat {
    start: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self::new()
    }
}

impl Heartbeat {
    /// A heartbeat that beat just now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records a turn of the loop now.
    pub fn beat(&self) {
        self.beat_at(Instant::now());
    }

    /// Records a turn of the loop at `at` (tests give their own clock).
    pub fn beat_at(&self, at: Instant) {
        let ms = millis(at.saturating_duration_since(self.start));
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// How long since the last turn, at `now`.
    pub fn since_last(&self, now: Instant) -> Duration {
        let now_ms = millis(now.saturating_duration_since(self.start));
        Duration::from_millis(now_ms.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }

    /// Whether the loop turned within `within` of `now` ([`LIVENESS_TIMEOUT`] for
    /// `/healthz`).
    pub fn alive(&self, now: Instant, within: Duration) -> bool {
        self.since_last(now) <= within
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What `/readyz` reports: ready once the UDP socket is bound and the config loaded, and not
/// while the server drains. Cloning shares the flags.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    bound: Arc<AtomicBool>,
    config_loaded: Arc<AtomicBool>,
    draining: Arc<AtomicBool>,
}

/// Why the server is not ready (the body of a failed `/readyz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// The UDP socket is not bound yet.
    NotBound,
    /// The configuration is not loaded yet.
    NoConfig,
    /// The server drains: it takes no new rooms or clients.
    Draining,
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotReady::NotBound => "udp socket not bound",
            NotReady::NoConfig => "config not loaded",
            NotReady::Draining => "draining",
        })
    }
}

impl Readiness {
    /// The UDP socket is bound.
    pub fn set_bound(&self) {
        self.bound.store(true, Ordering::Relaxed);
    }

    /// The configuration is loaded.
    pub fn set_config_loaded(&self) {
        self.config_loaded.store(true, Ordering::Relaxed);
    }

    /// The server started draining.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// `Ok` when ready, else the first reason it is not.
    ///
    /// # Errors
    ///
    /// The [`NotReady`] reason.
    pub fn check(&self) -> Result<(), NotReady> {
        if self.draining.load(Ordering::Relaxed) {
            Err(NotReady::Draining)
        } else if !self.bound.load(Ordering::Relaxed) {
            Err(NotReady::NotBound)
        } else if !self.config_loaded.load(Ordering::Relaxed) {
            Err(NotReady::NoConfig)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_is_alive_within_the_timeout_of_the_last_turn_only() {
        let heart = Heartbeat::new();
        let t0 = heart.start;
        heart.beat_at(t0 + Duration::from_millis(500));
        assert!(heart.alive(t0 + Duration::from_millis(2_500), LIVENESS_TIMEOUT));
        assert!(!heart.alive(t0 + Duration::from_millis(2_501), LIVENESS_TIMEOUT));
        // A clone shares the beat (the HTTP thread's copy sees the loop's turns).
        let probe = heart.clone();
        heart.beat_at(t0 + Duration::from_millis(3_000));
        assert!(probe.alive(t0 + Duration::from_millis(4_000), LIVENESS_TIMEOUT));
        assert_eq!(
            probe.since_last(t0 + Duration::from_millis(4_000)),
            Duration::from_millis(1_000)
        );
    }

    #[test]
    fn readiness_needs_the_socket_and_the_config_and_ends_with_the_drain() {
        let ready = Readiness::default();
        assert_eq!(ready.check(), Err(NotReady::NotBound));
        ready.set_bound();
        assert_eq!(ready.check(), Err(NotReady::NoConfig));
        ready.set_config_loaded();
        assert_eq!(ready.check(), Ok(()));
        ready.clone().set_draining();
        assert_eq!(ready.check(), Err(NotReady::Draining));
    }
}
