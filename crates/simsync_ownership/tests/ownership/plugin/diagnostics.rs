//! `OwnershipDiagnosticsPlugin`: every `simsync/ownership/*` diagnostic is registered and moves
//! when three participants volunteer for one moving body.

use bevy::diagnostic::DiagnosticsStore;
use bevy::prelude::*;
use simsync_ownership::{ActivityConfig, OwnershipConfig, OwnershipDiagnosticsPlugin};

use super::harness::{Body, Session, steps};

fn latest(app: &App, path: &bevy::diagnostic::DiagnosticPath) -> f64 {
    app.world()
        .resource::<DiagnosticsStore>()
        .get(path)
        .unwrap_or_else(|| panic!("{path} not registered"))
        .value()
        .unwrap_or_else(|| panic!("{path} has no measurement"))
}

#[test]
fn every_ownership_diagnostic_is_registered_and_moves_when_participants_bid() {
    let mut s = Session::perfect(3, &[Body::floating(1, Vec3::ZERO)]);
    for i in 0..3 {
        s.p(i).add_plugins(OwnershipDiagnosticsPlugin);
    }
    s.run(2);
    for i in 0..3 {
        for path in &OwnershipDiagnosticsPlugin::ALL {
            assert_eq!(latest(s.p(i), path), 0.0, "{path} before anything happened");
        }
        s.set_velocity(i, 1, Vec3::X);
    }
    s.run(steps(2_500));
    let owner = (0..3)
        .find(|&i| latest(s.p(i), &OwnershipDiagnosticsPlugin::OWNED_BODIES) == 1.0)
        .expect("one participant owns the body");
    for i in 0..3 {
        let stats = s.stats(i);
        assert_eq!(
            latest(s.p(i), &OwnershipDiagnosticsPlugin::BIDS),
            stats.bids_sent as f64
        );
        assert!(stats.bids_sent > 0, "{stats:?}");
        assert_eq!(
            latest(s.p(i), &OwnershipDiagnosticsPlugin::REFUSALS),
            stats.refusals_received.total() as f64
        );
        assert_eq!(
            latest(s.p(i), &OwnershipDiagnosticsPlugin::OWNER_CHANGES),
            stats.owner_changes_received as f64
        );
        assert!(stats.owner_changes_received > 0, "{stats:?}");
    }
    let refused: f64 = (0..3)
        .map(|i| latest(s.p(i), &OwnershipDiagnosticsPlugin::REFUSALS))
        .sum();
    assert!(refused >= 2.0, "the two losers were refused");
    // The same refusals by reason name, and nothing under another name.
    for i in 0..3 {
        let by_reason: f64 = simsync_ownership::RefusalReason::ALL
            .iter()
            .map(|r| latest(s.p(i), &OwnershipDiagnosticsPlugin::refusals_of(*r)))
            .sum();
        assert_eq!(
            by_reason,
            latest(s.p(i), &OwnershipDiagnosticsPlugin::REFUSALS)
        );
        for (name, n) in s.stats(i).refusals_received.counted() {
            let path =
                bevy::diagnostic::DiagnosticPath::new(format!("simsync/ownership/refusals/{name}"));
            assert_eq!(latest(s.p(i), &path), n as f64);
        }
    }
    assert!(
        latest(
            s.p(owner),
            &OwnershipDiagnosticsPlugin::STATE_UPDATES_PER_SECOND
        ) > 0.0,
        "the owner sends state updates"
    );
}

#[test]
fn ownership_configs_are_reflected_resources_in_the_type_registry() {
    let mut s = Session::perfect(1, &[Body::floating(1, Vec3::ZERO)]);
    let registry = s.p(0).world().resource::<AppTypeRegistry>().read();
    for id in [
        std::any::TypeId::of::<OwnershipConfig>(),
        std::any::TypeId::of::<ActivityConfig>(),
    ] {
        let registration = registry.get(id).expect("registered");
        assert!(registration.data::<ReflectResource>().is_some());
    }
}
