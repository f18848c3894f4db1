//! A desync the relay detects between networked clients: every client dumps the same verified
//! tick, sends the relay its per-component hash breakdown of the desynced tick, and the relay's
//! report (to the server App and to every client) names the component and the slot; the
//! dumps' diff names entity and component.

use bevy::prelude::*;
use simsync::deterministic::dump::{Difference, DumpReason, diff_dumps};
use simsync::deterministic::{
    DesyncDumpWritten, DesyncReport, DeterministicServerPlugin, NetworkSessionConfig,
};
use simsync::prelude::*;
use simsync_net::prelude::*;
use simsync_net::{LinkConditionerConfig, MemoryNetwork};

use super::harness::{client_app_configured, server_app_with};
use crate::deterministic::desync_dumps::{MarbleGame, dump_dir};

#[derive(Resource, Default)]
struct Seen {
    dumps: Vec<DesyncDumpWritten>,
    reports: Vec<DesyncReport>,
}

fn collect(
    mut seen: ResMut<Seen>,
    mut dumps: MessageReader<DesyncDumpWritten>,
    mut reports: MessageReader<DesyncReport>,
) {
    seen.dumps.extend(dumps.read().cloned());
    seen.reports.extend(reports.read().cloned());
}

fn collect_reports(mut seen: ResMut<Seen>, mut reports: MessageReader<DesyncReport>) {
    seen.reports.extend(reports.read().cloned());
}

#[test]
fn a_desync_between_networked_clients_is_dumped_and_named_by_component_and_slot() {
    let players = 3;
    let network = MemoryNetwork::new(
        5,
        LinkConditionerConfig::PERFECT
            .with_latency(20, 2)
            .with_loss(1.0),
    )
    .expect("link");
    let mut server = server_app_with(DeterministicServerPlugin::new::<PackedInput>(players, 64));
    server.insert_net_server(network.server_transport().expect("server"));
    server
        .init_resource::<Seen>()
        .add_systems(Update, collect_reports);
    server.finish();
    server.cleanup();
    let dirs: Vec<_> = (0..players)
        .map(|i| dump_dir(&format!("net-{i}")))
        .collect();
    let mut clients: Vec<App> = (0..players)
        .map(|i| {
            // Client 0's simulation nudges the marble in slot 1 at tick 30, in both worlds.
            let game = MarbleGame {
                plant_at: (i == 0).then_some(30),
                plant_in: None,
            };
            let dir = dirs[usize::from(i)].clone();
            let mut app = client_app_configured(
                game,
                players,
                NetworkSessionConfig::default(),
                60,
                64,
                |p| p.desync_dumps(dir),
            );
            app.insert_net_client(network.client_transport(u64::from(i) + 1).expect("client"));
            app.init_resource::<Seen>().add_systems(Update, collect);
            app.finish();
            app.cleanup();
            app
        })
        .collect();
    let verified = |c: &App| c.world().resource::<SessionStats>().verified_tick;
    for _ in 0..3_000 {
        if clients.iter().all(|c| verified(c) >= 150) {
            break;
        }
        server.update();
        for client in &mut clients {
            client.update();
        }
    }
    assert!(
        clients.iter().all(|c| verified(c) >= 150),
        "clients stalled"
    );
    // The relay's report of the first desynced tick names the component and the slot.
    let server_seen = server.world().resource::<Seen>();
    let first = server_seen
        .reports
        .first()
        .expect("a desync report on the relay");
    assert_eq!(first.tick, 30);
    assert_eq!(first.players, vec![0]);
    assert_eq!(first.components.len(), 1, "{first:?}");
    assert!(first.components[0].ends_with("Marble"), "{first:?}");
    assert_eq!(first.slots, vec![1]);
    let relay = server
        .world()
        .resource::<simsync::deterministic::RelayStats>();
    assert!(relay.desync_reports >= 1);
    assert_eq!(relay.contradicting_breakdowns, vec![0; 3]);
    // Every client got the report and dumped the same tick (the first 32-aligned tick at least
    // 32 after the desync).
    let mut files = Vec::new();
    for client in &clients {
        let seen = client.world().resource::<Seen>();
        assert_eq!(
            seen.reports.first().map(|r| (r.tick, r.components.clone())),
            Some((first.tick, first.components.clone()))
        );
        assert_eq!(seen.dumps.len(), 1, "one dump per client: {:?}", seen.dumps);
        let written = &seen.dumps[0];
        assert_eq!(written.tick, 64);
        assert!(matches!(
            &written.reason,
            DumpReason::ServerDesync { tick: 30, players } if players == &vec![0]
        ));
        files.push(
            simsync::deterministic::read_dump_file(&written.path, 1 << 24).expect("valid dump"),
        );
    }
    // The desynced tick's breakdown is in each dump.
    assert!(
        files
            .iter()
            .all(|f| f.breakdowns.iter().any(|b| b.tick == 30))
    );
    // Honest clients' dumps agree; the planted one differs in slot 1's Marble, field y.
    assert!(
        diff_dumps(&files[1], &files[2])
            .expect("same game")
            .is_empty()
    );
    let diff = diff_dumps(&files[0], &files[1]).expect("same game");
    let Some(Difference::Component {
        slot,
        type_name,
        fields,
        ..
    }) = &diff.first
    else {
        panic!("expected a component difference: {diff}");
    };
    assert_eq!(*slot, 1);
    assert!(type_name.ends_with("Marble"));
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].path, "y");
    // Startup plus ticks 1..=64: 65 climbs, and client 0's planted half unit.
    assert_eq!(fields[0].a.as_deref(), Some("65.5"));
    assert_eq!(fields[0].b.as_deref(), Some("65.0"));
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}
