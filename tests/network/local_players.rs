//! `LocalPlayers` of a networked client: empty until the relay server's `Welcome`, then the
//! slot it assigned, in the same update as the session's own record of it.

use simsync::deterministic::LocalPlayers;
use simsync_net::LinkConditionerConfig;

use super::harness::{Peers, PeersExt, peers};
use crate::common::TestGame;

fn local_players(h: &Peers, client: usize) -> LocalPlayers {
    let client = h.client(client).expect("running");
    client.world().resource::<LocalPlayers>().clone()
}

#[test]
fn a_networked_client_controls_exactly_its_welcomed_slot() {
    let game = TestGame {
        boxes: 10,
        ..TestGame::default()
    };
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 0);
    let mut h = peers(game, link).build().expect("peers");
    for c in 0..2 {
        assert!(
            local_players(&h, c).is_empty(),
            "no slot before the welcome"
        );
    }
    let mut welcomed_at = [None, None];
    for frame in 0..200 {
        h.step();
        for (c, welcomed) in welcomed_at.iter_mut().enumerate() {
            let slot = h.net_of(c).slot;
            let local = local_players(&h, c);
            // The resource and the stats agree after every update.
            assert_eq!(
                local.as_slice(),
                slot.as_slice(),
                "client {c}, frame {frame}"
            );
            if slot.is_some() && welcomed.is_none() {
                *welcomed = Some(frame);
            }
        }
    }
    assert!(welcomed_at.iter().all(Option::is_some), "{welcomed_at:?}");
    let mut slots: Vec<u8> = (0..2)
        .map(|c| local_players(&h, c).get(0).expect("welcomed"))
        .collect();
    slots.sort_unstable();
    assert_eq!(slots, [0, 1], "each client controls its own slot");
    assert!(h.stats_of(0).verified_tick > 100);
}
