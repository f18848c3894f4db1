//! `SessionDiagnosticsPlugin`: every `simsync/session/*` diagnostic is registered and moves in a
//! short networked run; the stats and config resources are in the type registry.

use bevy::diagnostic::{DiagnosticPath, DiagnosticsStore};
use bevy::prelude::*;
use simsync::SessionDiagnosticsPlugin;
use simsync::deterministic::NetworkSessionConfig;
use simsync::prelude::*;
use simsync::relay::RelayStats;
use simsync_net::LinkConditionerConfig;
use simsync_net::prelude::*;
use simsync_net::{DecodeStats, MemoryNetwork, NetClock};

use super::harness::{client_app, server_app};
use crate::common::TestGame;

fn game() -> TestGame {
    TestGame {
        boxes: 10,
        ..TestGame::default()
    }
}

/// A relay and two clients with the diagnostics plugin over a 40 ms (each way) link with
/// jitter, so that remote inputs are mispredicted and rollbacks happen.
fn session() -> (MemoryNetwork, App, Vec<App>) {
    let link = LinkConditionerConfig::PERFECT.with_latency(40, 10);
    let network = MemoryNetwork::new(5, link).expect("valid link");
    let mut server = server_app(2);
    server.insert_net_server(network.server_transport().expect("server"));
    server.finish();
    server.cleanup();
    let clients = (0..2u64)
        .map(|id| {
            let mut client = client_app(game(), NetworkSessionConfig::default(), 60);
            client.add_plugins(SessionDiagnosticsPlugin::default());
            client.insert_net_client(network.client_transport(id + 1).expect("client"));
            client.finish();
            client.cleanup();
            client
        })
        .collect();
    (network, server, clients)
}

fn step(server: &mut App, clients: &mut [App], skip: Option<usize>) {
    server.update();
    for (i, client) in clients.iter_mut().enumerate() {
        if Some(i) != skip {
            client.update();
        }
    }
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
    let (_network, mut server, mut clients) = session();
    for path in &SessionDiagnosticsPlugin::ALL {
        assert!(
            clients[0]
                .world()
                .resource::<DiagnosticsStore>()
                .get(path)
                .is_some(),
            "{path} not registered"
        );
    }
    for _ in 0..200 {
        step(&mut server, &mut clients, None);
    }
    // Client 1 misses 30 frames: the relay replaces its inputs, and the ones it sends when it
    // comes back are late.
    for _ in 0..30 {
        step(&mut server, &mut clients, Some(1));
    }
    let mut seen: Vec<Vec<Vec<f64>>> = vec![Vec::new(); 2];
    for _ in 0..100 {
        step(&mut server, &mut clients, None);
        for (c, client) in clients.iter().enumerate() {
            seen[c].push(
                SessionDiagnosticsPlugin::ALL
                    .iter()
                    .map(|p| history(client, p).last().copied().unwrap_or(f64::NAN))
                    .collect(),
            );
        }
    }
    let stats: Vec<SessionStats> = clients
        .iter()
        .map(|c| c.world().resource::<SessionStats>().clone())
        .collect();
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
    let last = |c: usize, path: &DiagnosticPath| *history(&clients[c], path).last().unwrap();
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
    let (_network, server, clients) = session();
    let registry = clients[0].world().resource::<AppTypeRegistry>().read();
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
    let registry = server.world().resource::<AppTypeRegistry>().read();
    let relay = registry
        .get(std::any::TypeId::of::<RelayStats>())
        .expect("RelayStats registered");
    assert!(relay.data::<ReflectResource>().is_some());
}
