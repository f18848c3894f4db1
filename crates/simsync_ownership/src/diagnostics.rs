//! [`OwnershipDiagnosticsPlugin`]: a participant's ownership numbers as Bevy [`Diagnostic`]s
//! under `simsync/ownership/*` ([diagnostics](crate::rules#diagnostics)).

use std::time::Duration;

use bevy::diagnostic::{Diagnostic, DiagnosticPath, Diagnostics, RegisterDiagnostic};
use bevy::prelude::*;

use crate::client::OwnershipClient;
use crate::clock::OwnershipClock;
use crate::components::SimulationOwner;
use crate::sets::OwnershipSet;

/// `simsync/ownership/owned_bodies`: bodies this participant owns now.
pub const OWNED_BODIES: DiagnosticPath =
    DiagnosticPath::const_new("simsync/ownership/owned_bodies");
/// `simsync/ownership/bids`: bids sent so far (resends and priority changes included).
pub const BIDS: DiagnosticPath = DiagnosticPath::const_new("simsync/ownership/bids");
/// `simsync/ownership/refusals`: refusals received so far, every reason.
pub const REFUSALS: DiagnosticPath = DiagnosticPath::const_new("simsync/ownership/refusals");
/// `simsync/ownership/owner_changes`: ownership changes received so far.
pub const OWNER_CHANGES: DiagnosticPath =
    DiagnosticPath::const_new("simsync/ownership/owner_changes");
/// `simsync/ownership/state_updates_per_second`: state updates sent for owned bodies per
/// second, averaged over the last full second.
pub const STATE_UPDATES_PER_SECOND: DiagnosticPath =
    DiagnosticPath::const_new("simsync/ownership/state_updates_per_second");

/// Every path [`OwnershipDiagnosticsPlugin`] registers.
pub const OWNERSHIP_DIAGNOSTICS: [DiagnosticPath; 5] = [
    OWNED_BODIES,
    BIDS,
    REFUSALS,
    OWNER_CHANGES,
    STATE_UPDATES_PER_SECOND,
];

/// The rate of a growing counter, averaged over windows of at least `window` (plain data).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CounterRate {
    window: Duration,
    last_count: Option<u64>,
    counted: u64,
    elapsed: Duration,
    rate: f64,
}

impl CounterRate {
    /// A rate averaged over `window` (at least 1 ms); 0 until the first window is full.
    pub fn new(window: Duration) -> Self {
        Self {
            window: window.max(Duration::from_millis(1)),
            last_count: None,
            counted: 0,
            elapsed: Duration::ZERO,
            rate: 0.0,
        }
    }

    /// Feeds the counter's value after `dt`; returns the rate per second of the last full
    /// window. A counter that went down (restarted) starts counting from its new value.
    pub fn update(&mut self, count: u64, dt: Duration) -> f64 {
        if let Some(last) = self.last_count {
            self.counted += count.saturating_sub(last);
            self.elapsed += dt;
        }
        self.last_count = Some(count);
        if self.elapsed >= self.window {
            self.rate = self.counted as f64 / self.elapsed.as_secs_f64();
            self.counted = 0;
            self.elapsed = Duration::ZERO;
        }
        self.rate
    }

    /// The rate of the last full window, per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

/// Registers the `simsync/ownership/*` [`Diagnostic`]s and records them every frame in
/// `PostUpdate`, after [`OwnershipSet::Send`], from the participant's [`OwnershipClient`]
/// (nothing is recorded in an App without one, e.g. the entity server). Rates are measured on
/// the [`OwnershipClock`].
///
/// | path | unit | kind |
/// |---|---|---|
/// | `simsync/ownership/owned_bodies` | bodies | now |
/// | `simsync/ownership/bids` | bids | total |
/// | `simsync/ownership/refusals` | refusals | total |
/// | `simsync/ownership/owner_changes` | changes | total |
/// | `simsync/ownership/state_updates_per_second` | updates/s | last second |
#[derive(Debug, Clone, Default)]
pub struct OwnershipDiagnosticsPlugin;

/// The state-update rate of the participant and the [`OwnershipClock`] time it was last fed.
#[derive(Resource)]
struct StateUpdateRate(CounterRate, Duration);

impl Plugin for OwnershipDiagnosticsPlugin {
    fn build(&self, app: &mut App) {
        for path in OWNERSHIP_DIAGNOSTICS {
            app.register_diagnostic(Diagnostic::new(path).with_smoothing_factor(0.0));
        }
        app.insert_resource(StateUpdateRate(
            CounterRate::new(Duration::from_secs(1)),
            Duration::ZERO,
        ))
        .add_systems(
            PostUpdate,
            record_ownership_diagnostics.after(OwnershipSet::Send),
        );
    }
}

fn record_ownership_diagnostics(
    client: Option<Res<OwnershipClient>>,
    owners: Query<&SimulationOwner>,
    clock: Option<Res<OwnershipClock>>,
    mut rate: ResMut<StateUpdateRate>,
    mut diagnostics: Diagnostics,
) {
    let Some(client) = client else {
        return;
    };
    let stats = client.stats();
    let now = clock.map(|c| c.now()).unwrap_or_default();
    let dt = now.saturating_sub(rate.1);
    rate.1 = now;
    let per_second = rate.0.update(stats.state_updates_sent, dt);
    let me = client.me();
    let owned = match me {
        Some(me) => owners.iter().filter(|o| o.owner == Some(me)).count(),
        None => 0,
    };
    diagnostics.add_measurement(&OWNED_BODIES, || owned as f64);
    diagnostics.add_measurement(&BIDS, || stats.bids_sent as f64);
    diagnostics.add_measurement(&REFUSALS, || stats.refusals_received.total() as f64);
    diagnostics.add_measurement(&OWNER_CHANGES, || stats.owner_changes_received as f64);
    diagnostics.add_measurement(&STATE_UPDATES_PER_SECOND, || per_second);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_the_count_of_the_last_full_window_per_second() {
        let mut rate = CounterRate::new(Duration::from_secs(1));
        assert_eq!(rate.update(100, Duration::from_millis(16)), 0.0);
        for frame in 1..=3 {
            rate.update(100 + frame * 10, Duration::from_millis(500));
        }
        // 2 frames of 0.5 s completed the first window with 20 updates.
        assert_eq!(rate.rate(), 20.0);
        // The third frame opened a new window: the rate holds until it is full.
        assert_eq!(rate.rate(), 20.0);
        // 10 + 20 updates in the second window's 1 s.
        assert_eq!(rate.update(150, Duration::from_millis(500)), 30.0);
    }

    #[test]
    fn a_restarted_counter_does_not_count_backwards() {
        let mut rate = CounterRate::new(Duration::from_secs(1));
        rate.update(500, Duration::ZERO);
        assert_eq!(rate.update(3, Duration::from_secs(1)), 0.0);
        assert_eq!(rate.update(13, Duration::from_secs(1)), 10.0);
    }
}
