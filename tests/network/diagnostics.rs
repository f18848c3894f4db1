//! `SessionDiagnosticsPlugin`: every `simsync/session/*` diagnostic is registered and moves in a
//! short networked run; the stats and config resources are in the type registry.

use bevy::diagnostic::{DiagnosticPath, DiagnosticsStore};
use bevy::prelude::*;
use simsync::SessionDiagnosticsPlugin;
use simsync::prelude::*;
use simsync::relay::RelayStats;
use simsync_net::LinkConditionerConfig;
use simsync_net::{DecodeStats, NetClock};

use super::harness::{Peers, PeersExt, peers};
use crate::common::TestGame;

fn game() -> TestGame {
    TestGame {
        boxes: 10,
        ..TestGame::default()
    }
}

/// A relay and two clients with the diagnostics plugin over a 40 ms (each way) link with
/// jitter, so that remote inputs are mispredicted and rollbacks happen.
fn session() -> Peers {
    let link = LinkConditionerConfig::PERFECT.with_latency(40, 10);
    peers(game(), link)
        .seed(5)
        .customize(|_, client| {
            client.add_plugins(SessionDiagnosticsPlugin::default());
        })
        .build()
        .expect("peers")
}

/// Every value a diagnostic recorded so far.
fn history(app: &App, path: &DiagnosticPath) -> Vec<f64> {
    app.world()
        .resource::<DiagnosticsStore>()
        .get(path)
        .unwrap_or_else(|| panic!("{path} is not registered"))
        .values()
        .copied()
        .collect()
}

#[test]
fn every_session_diagnostic_is_registered_and_moves_in_a_networked_run() {
    let mut peers = session();
    for path in &SessionDiagnosticsPlugin::ALL {
        assert!(
            peers
                .client(0)
                .expect("running")
                .world()
                .resource::<DiagnosticsStore>()
                .get(path)
                .is_some(),
            "{path} not registered"
        );
    }
    peers.run_frames(200).expect("playing");
    // Client 1 misses 30 frames: the relay replaces its inputs, and the ones it sends when it
    // comes back are late.
    peers.pause(1).expect("pause");
    peers.run_frames(30).expect("client 0 plays on");
    peers.resume(1).expect("resume");
    let mut seen: Vec<Vec<Vec<f64>>> = vec![Vec::new(); 2];
    for _ in 0..100 {
        peers.step();
        for (c, frames) in seen.iter_mut().enumerate() {
            let client = peers.client(c).expect("running");
            frames.push(
                SessionDiagnosticsPlugin::ALL
                    .iter()
                    .map(|p| history(client, p).last().copied().unwrap_or(f64::NAN))
                    .collect(),
            );
        }
    }
    let stats: Vec<SessionStats> = (0..2).map(|c| peers.stats_of(c)).collect();
    for (i, path) in SessionDiagnosticsPlugin::ALL.iter().enumerate() {
        // Moves: over the recorded frames of some client, the value changed or is non-zero.
        let moved = seen.iter().any(|frames| {
            let values: Vec<f64> = frames.iter().map(|f| f[i]).collect();
            values.iter().all(|v| v.is_finite())
                && values.iter().any(|v| *v != values[0] || *v > 0.0)
        });
        assert!(moved, "{path} did not move: {:?}", seen[1].last());
    }
    // The totals are the stats' own numbers.
    let last = |c: usize, path: &DiagnosticPath| {
        *history(peers.client(c).expect("running"), path)
            .last()
            .unwrap()
    };
    for (c, s) in stats.iter().enumerate() {
        let net = s.network.as_ref().expect("networked");
        assert_eq!(
            last(c, &SessionDiagnosticsPlugin::ALL[0]),
            s.rollbacks as f64
        );
        assert_eq!(
            last(c, &SessionDiagnosticsPlugin::ALL[2]),
            s.resimulated_ticks as f64
        );
        assert_eq!(
            last(c, &SessionDiagnosticsPlugin::ALL[3]),
            f64::from(s.predicted_tick - s.verified_tick)
        );
        assert_eq!(last(c, &SessionDiagnosticsPlugin::ALL[4]), net.rtt_ms);
        assert_eq!(
            last(c, &SessionDiagnosticsPlugin::ALL[8]),
            net.late_inputs as f64
        );
        assert_eq!(
            last(c, &SessionDiagnosticsPlugin::ALL[9]),
            net.replaced_inputs as f64
        );
    }
    assert!(
        stats[1].network.as_ref().unwrap().late_inputs > 0,
        "{:?}",
        stats[1].network
    );
    assert!(stats.iter().all(|s| s.rollbacks > 0), "{stats:?}");
}

#[test]
fn stats_and_config_resources_are_reflected_and_registered() {
    let peers = session();
    let client = peers.client(0).expect("running");
    let registry = client.world().resource::<AppTypeRegistry>().read();
    for (name, id) in [
        ("SessionStats", std::any::TypeId::of::<SessionStats>()),
        (
            "SimulatorContext",
            std::any::TypeId::of::<SimulatorContext>(),
        ),
        ("LocalPlayers", std::any::TypeId::of::<LocalPlayers>()),
        ("NetClock", std::any::TypeId::of::<NetClock>()),
        ("DecodeStats", std::any::TypeId::of::<DecodeStats>()),
        (
            "TickRate",
            std::any::TypeId::of::<simsync::time::TickRate>(),
        ),
        (
            "SimEventStats",
            std::any::TypeId::of::<simsync::deterministic::SimEventStats>(),
        ),
    ] {
        let registration = registry
            .get(id)
            .unwrap_or_else(|| panic!("{name} is not registered"));
        assert!(
            registration.data::<ReflectResource>().is_some(),
            "{name} has no #[reflect(Resource)]"
        );
    }
    let registry = peers.relay().world().resource::<AppTypeRegistry>().read();
    let relay = registry
        .get(std::any::TypeId::of::<RelayStats>())
        .expect("RelayStats registered");
    assert!(relay.data::<ReflectResource>().is_some());
}
