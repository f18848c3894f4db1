//! [`OwnershipDiagnosticsPlugin`]: a participant's ownership numbers as Bevy [`Diagnostic`]s
//! under `simsync/ownership/*` ([diagnostics](crate::rules#diagnostics)).

use std::time::Duration;

use bevy::diagnostic::{Diagnostic, DiagnosticPath, Diagnostics, RegisterDiagnostic};
use bevy::prelude::*;

use crate::client::OwnershipClient;
use crate::clock::OwnershipClock;
use crate::components::SimulationOwner;
use crate::sets::OwnershipSet;
use crate::traffic::StateTraffic;
use simsync_net::RefusalReason;

/// `simsync/ownership/owned_bodies`: bodies this participant owns now.
const OWNED_BODIES: DiagnosticPath = DiagnosticPath::const_new("simsync/ownership/owned_bodies");
/// `simsync/ownership/bids`: bids sent so far (resends and priority changes included).
const BIDS: DiagnosticPath = DiagnosticPath::const_new("simsync/ownership/bids");
/// `simsync/ownership/refusals`: refusals received so far, every reason.
const REFUSALS: DiagnosticPath = DiagnosticPath::const_new("simsync/ownership/refusals");
/// `simsync/ownership/owner_changes`: ownership changes received so far.
const OWNER_CHANGES: DiagnosticPath = DiagnosticPath::const_new("simsync/ownership/owner_changes");
/// `simsync/ownership/state_updates_per_second`: state updates sent for owned bodies per
/// second, averaged over the last full second.
const STATE_UPDATES_PER_SECOND: DiagnosticPath =
    DiagnosticPath::const_new("simsync/ownership/state_updates_per_second");

/// `simsync/ownership/bytes_up_per_second`: bytes of state sent per second
/// ([`StateTraffic::bytes_up_per_second`]).
const BYTES_UP_PER_SECOND: DiagnosticPath =
    DiagnosticPath::const_new("simsync/ownership/bytes_up_per_second");
/// `simsync/ownership/bytes_down_per_second`: bytes of state received per second.
const BYTES_DOWN_PER_SECOND: DiagnosticPath =
    DiagnosticPath::const_new("simsync/ownership/bytes_down_per_second");
/// `simsync/ownership/bytes_per_body`: mean bytes per body state sent.
const BYTES_PER_BODY: DiagnosticPath =
    DiagnosticPath::const_new("simsync/ownership/bytes_per_body");
/// `simsync/ownership/budget_use`: bytes sent per second over the budget (1 = all of it).
const BUDGET_USE: DiagnosticPath = DiagnosticPath::const_new("simsync/ownership/budget_use");
/// `simsync/ownership/deferred_bodies`: bodies the budget left waiting in the last frame.
const DEFERRED_BODIES: DiagnosticPath =
    DiagnosticPath::const_new("simsync/ownership/deferred_bodies");

/// `simsync/ownership/delta_share`: of the body states sent so far, the share sent as deltas
/// against an acknowledged state ([`StateTraffic::delta_share`]).
const DELTA_SHARE: DiagnosticPath = DiagnosticPath::const_new("simsync/ownership/delta_share");
/// `simsync/ownership/deltas_rejected`: delta entries received that could not be applied, so
/// far.
const DELTAS_REJECTED: DiagnosticPath =
    DiagnosticPath::const_new("simsync/ownership/deltas_rejected");

/// Every path [`OwnershipDiagnosticsPlugin`] registers.
const OWNERSHIP_DIAGNOSTICS: [DiagnosticPath; 12] = [
    OWNED_BODIES,
    BIDS,
    REFUSALS,
    OWNER_CHANGES,
    STATE_UPDATES_PER_SECOND,
    BYTES_UP_PER_SECOND,
    BYTES_DOWN_PER_SECOND,
    BYTES_PER_BODY,
    BUDGET_USE,
    DEFERRED_BODIES,
    DELTA_SHARE,
    DELTAS_REJECTED,
];

use crate::traffic::CounterRate;

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
/// | `simsync/ownership/bytes_up_per_second` | B/s | last second ([`StateTraffic`]) |
/// | `simsync/ownership/bytes_down_per_second` | B/s | last second |
/// | `simsync/ownership/bytes_per_body` | B | mean over the run |
/// | `simsync/ownership/budget_use` | fraction | last second |
/// | `simsync/ownership/deferred_bodies` | bodies | last frame |
/// | `simsync/ownership/delta_share` | fraction | over the run |
/// | `simsync/ownership/deltas_rejected` | entries | total |
/// | `simsync/ownership/refusals/<reason>` | refusals | total, one per [`RefusalReason`] by [name](RefusalReason::name) ([`refusals_of`](Self::refusals_of)) |
#[derive(Debug, Clone, Default)]
pub struct OwnershipDiagnosticsPlugin;

/// The state-update rate of the participant and the [`OwnershipClock`] time it was last fed.
#[derive(Resource)]
struct StateUpdateRate(CounterRate, Duration);

/// The `DiagnosticsStore` paths this plugin publishes (Bevy's convention: constants on the
/// plugin that publishes them).
impl OwnershipDiagnosticsPlugin {
    /// `simsync/ownership/owned_bodies`: bodies this participant owns now.
    pub const OWNED_BODIES: DiagnosticPath = OWNED_BODIES;
    /// `simsync/ownership/bids`: bids sent so far (resends and priority changes included).
    pub const BIDS: DiagnosticPath = BIDS;
    /// `simsync/ownership/refusals`: refusals received so far, every reason.
    pub const REFUSALS: DiagnosticPath = REFUSALS;
    /// `simsync/ownership/owner_changes`: ownership changes received so far.
    pub const OWNER_CHANGES: DiagnosticPath = OWNER_CHANGES;
    /// `simsync/ownership/state_updates_per_second`: state updates sent for owned bodies per
    /// second, averaged over the last full second.
    pub const STATE_UPDATES_PER_SECOND: DiagnosticPath = STATE_UPDATES_PER_SECOND;
    /// `simsync/ownership/bytes_up_per_second`: bytes of state sent per second
    /// ([`StateTraffic::bytes_up_per_second`]).
    pub const BYTES_UP_PER_SECOND: DiagnosticPath = BYTES_UP_PER_SECOND;
    /// `simsync/ownership/bytes_down_per_second`: bytes of state received per second.
    pub const BYTES_DOWN_PER_SECOND: DiagnosticPath = BYTES_DOWN_PER_SECOND;
    /// `simsync/ownership/bytes_per_body`: mean bytes per body state sent.
    pub const BYTES_PER_BODY: DiagnosticPath = BYTES_PER_BODY;
    /// `simsync/ownership/budget_use`: bytes sent per second over the budget (1 = all of it).
    pub const BUDGET_USE: DiagnosticPath = BUDGET_USE;
    /// `simsync/ownership/deferred_bodies`: bodies the budget left waiting in the last frame.
    pub const DEFERRED_BODIES: DiagnosticPath = DEFERRED_BODIES;
    /// `simsync/ownership/delta_share`: of the body states sent so far, the share sent as deltas
    /// against an acknowledged state ([`StateTraffic::delta_share`]).
    pub const DELTA_SHARE: DiagnosticPath = DELTA_SHARE;
    /// `simsync/ownership/deltas_rejected`: delta entries received that could not be applied, so
    /// far.
    pub const DELTAS_REJECTED: DiagnosticPath = DELTAS_REJECTED;
    /// Every fixed path [`OwnershipDiagnosticsPlugin`] registers (the per-reason refusal paths,
    /// [`refusals_of`](Self::refusals_of), come on top).
    pub const ALL: [DiagnosticPath; 12] = OWNERSHIP_DIAGNOSTICS;

    /// `simsync/ownership/refusals/<reason>`: refusals received so far for `reason`, by its
    /// [name](RefusalReason::name) (`simsync/ownership/refusals/lower_priority`); their sum is
    /// [`REFUSALS`](Self::REFUSALS).
    pub fn refusals_of(reason: RefusalReason) -> DiagnosticPath {
        DiagnosticPath::new(format!("simsync/ownership/refusals/{}", reason.name()))
    }
}

impl Plugin for OwnershipDiagnosticsPlugin {
    fn build(&self, app: &mut App) {
        let per_reason = RefusalReason::ALL.map(Self::refusals_of);
        for path in OWNERSHIP_DIAGNOSTICS.into_iter().chain(per_reason) {
            app.register_diagnostic(Diagnostic::new(path).with_smoothing_factor(0.0));
        }
        app.insert_resource(StateUpdateRate(
            CounterRate::new(Duration::from_secs(1)),
            Duration::ZERO,
        ))
        .add_systems(
            PostUpdate,
            record_ownership_diagnostics
                .after(OwnershipSet::Send)
                .after(crate::plugin::measure_traffic),
        );
    }
}

fn record_ownership_diagnostics(
    client: Option<Res<OwnershipClient>>,
    owners: Query<&SimulationOwner>,
    clock: Option<Res<OwnershipClock>>,
    traffic: Option<Res<StateTraffic>>,
    mut rate: ResMut<StateUpdateRate>,
    mut per_reason: Local<Vec<DiagnosticPath>>,
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
    if per_reason.is_empty() {
        *per_reason = RefusalReason::ALL
            .map(OwnershipDiagnosticsPlugin::refusals_of)
            .to_vec();
    }
    for ((_, n), path) in stats.refusals_received.iter().zip(per_reason.iter()) {
        diagnostics.add_measurement(path, || n as f64);
    }
    diagnostics.add_measurement(&OWNER_CHANGES, || stats.owner_changes_received as f64);
    diagnostics.add_measurement(&STATE_UPDATES_PER_SECOND, || per_second);
    let traffic = traffic.map(|t| *t).unwrap_or_default();
    diagnostics.add_measurement(&BYTES_UP_PER_SECOND, || traffic.bytes_up_per_second);
    diagnostics.add_measurement(&BYTES_DOWN_PER_SECOND, || traffic.bytes_down_per_second);
    diagnostics.add_measurement(&BYTES_PER_BODY, || traffic.bytes_per_body);
    diagnostics.add_measurement(&BUDGET_USE, || traffic.budget_use);
    diagnostics.add_measurement(&DEFERRED_BODIES, || traffic.deferred_bodies as f64);
    diagnostics.add_measurement(&DELTA_SHARE, || traffic.delta_share);
    diagnostics.add_measurement(&DELTAS_REJECTED, || traffic.deltas_rejected_total as f64);
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
