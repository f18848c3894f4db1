//! Simulation events in a networked session over a conditioned link: each client's confirmed
//! stream carries exactly the events its verified world fired, and both clients confirm the
//! same events.

use bevy::prelude::*;
use simsync::deterministic::NetworkSessionConfig;
use simsync::prelude::*;
use simsync_net::prelude::*;
use simsync_net::{LinkConditionerConfig, MemoryNetwork};

use super::harness::{client_app_of, server_app};
use crate::common::scripted_input;
use crate::deterministic::sim_events::{Ev, EventGame, Fired, Received, check_run, collect};

fn verified_fired(app: &App) -> Fired {
    let worlds = app.world().resource::<SimulationWorlds>();
    worlds.verified().resource::<Fired>().clone()
}

#[test]
fn confirmed_events_match_the_verified_world_on_every_client_over_a_lossy_link() {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(60, 10)
        .with_loss(2.0);
    let network = MemoryNetwork::new(99, link).expect("valid link");
    let mut server = server_app(2);
    server.insert_net_server(network.server_transport().expect("server"));
    server.finish();
    server.cleanup();
    let mut clients: Vec<App> = (0..2u64)
        .map(|id| {
            let mut client = client_app_of(EventGame, 2, NetworkSessionConfig::default(), 60, 64);
            client
                .add_sim_event::<Ev>()
                .init_resource::<Received>()
                .insert_resource(TickInputSource::<PackedInput>::new(scripted_input))
                .add_systems(Update, collect);
            client.insert_net_client(network.client_transport(id + 1).expect("client"));
            client.finish();
            client.cleanup();
            client
        })
        .collect();
    for _ in 0..900 {
        server.update();
        for client in &mut clients {
            client.update();
        }
        if clients
            .iter()
            .all(|c| c.world().resource::<SessionStats>().verified_tick >= 240)
        {
            break;
        }
    }
    let mut confirmed = Vec::new();
    for client in &clients {
        let stats = client.world().resource::<SessionStats>();
        assert!(stats.verified_tick >= 240, "{stats:?}");
        assert!(stats.rollbacks > 0, "{stats:?}");
        let log = client.world().resource::<Received>();
        let fired = verified_fired(client);
        let (held, _, _) = check_run(log, &fired, stats.verified_tick);
        assert!(held > 0);
        confirmed.push((stats.verified_tick, log.confirmed.clone()));
    }
    // Both clients confirmed the same events, up to the lower verified tick.
    let through = confirmed[0].0.min(confirmed[1].0);
    let upto = |list: &Vec<simsync::deterministic::SimEventId<Ev>>| {
        list.iter()
            .filter(|id| id.tick <= through)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(upto(&confirmed[0].1), upto(&confirmed[1].1));
    assert!(!upto(&confirmed[0].1).is_empty());
}
