//! Simulation events in a networked session over a conditioned link: each client's confirmed
//! stream carries exactly the events its verified world fired, and both clients confirm the
//! same events.

use bevy::prelude::*;
use simsync::prelude::*;
use simsync_net::LinkConditionerConfig;

use super::harness::{PeersExt, peers_of, plugin};
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
    let mut peers = peers_of(2, |_| plugin(EventGame))
        .link(link)
        .customize(|_, client| {
            client
                .add_sim_event::<Ev>()
                .init_resource::<Received>()
                .add_systems(Update, collect);
        })
        .build()
        .expect("peers");
    peers.verify(240, 900);
    let mut confirmed = Vec::new();
    for c in 0..2 {
        let client = peers.client(c).expect("running");
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
