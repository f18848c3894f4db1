//! The load clients against an in-process server over UDP on 127.0.0.1, stepped in lockstep
//! with it: the load tool's clients play the real protocols (every fake player gets every tick
//! confirmed, the relay finds their checksums agree; every fake participant gets its bodies and
//! the others' states), so what `examples/load.rs` measures is the server doing its real work.

use std::collections::BTreeMap;

use simsync_loadgen::{
    ClientPhase, LoadClient, OwnershipLoadClient, OwnershipLoadSpec, RelayLoadClient,
    RelayLoadSpec, ownership_room_config, relay_room_config,
};
use simsync_server::{DedicatedServer, RoomConfig, RoomId};

use super::common::*;

/// One frame of the server and every load client.
fn step<C>(server: &mut DedicatedServer, clients: &mut [C], frame: impl Fn(&mut C)) {
    server.turn(FRAME).expect("server turn");
    for client in clients.iter_mut() {
        frame(client);
    }
}

fn relay_clients(server: &DedicatedServer, rooms: &[RoomId]) -> Vec<RelayLoadClient> {
    let mut clients = Vec::new();
    for room in rooms {
        let RoomConfig::Relay(config) = server.rooms().room(*room).unwrap().config() else {
            unreachable!("a relay room")
        };
        for slot in 0..4 {
            let spec = RelayLoadSpec {
                checksum_every: 1,
                ..RelayLoadSpec::for_room(config, room.0 as u32)
            };
            let token = token(server, *room, slot, room.0 * 10 + u64::from(slot));
            clients.push(RelayLoadClient::connect(token, loopback(), spec).unwrap());
        }
    }
    clients
}

#[test]
fn fake_relay_players_get_every_tick_confirmed_and_their_checksums_agree() {
    let mut server = server();
    let rooms = [RoomId(11), RoomId(12), RoomId(13)];
    for room in rooms {
        server
            .rooms_mut()
            .create(Some(room), relay_room_config(4, 64))
            .unwrap();
    }
    let mut clients = relay_clients(&server, &rooms);
    let mut frames = 0;
    while clients.iter().any(|c| c.checksum().0 < 192) {
        step(&mut server, &mut clients, |c| c.frame(FRAME));
        frames += 1;
        assert!(
            frames < 1_500,
            "verified {:?}, phases {:?}",
            clients.iter().map(|c| c.checksum().0).collect::<Vec<_>>(),
            clients
                .iter()
                .map(|c| c.phase().clone())
                .collect::<Vec<_>>()
        );
    }
    for client in &clients {
        assert_eq!(client.phase(), &ClientPhase::Running);
        let counters = client.counters();
        assert!(counters.checksums_sent >= 192, "{counters:?}");
        assert!(counters.input_messages >= 150, "{counters:?}");
        assert_eq!(counters.desyncs, 0);
        assert_eq!(counters.own_inputs_replaced, 0, "inputs arrive in time");
        assert_eq!(counters.players_left, 0);
        assert!(counters.traffic.bytes_down > 0 && counters.traffic.bytes_up > 0);
    }
    // Tick by tick, the four players of a room reported the same checksum; rooms differ.
    let mut by_room: BTreeMap<u64, BTreeMap<i32, Vec<u64>>> = BTreeMap::new();
    for client in &clients {
        let room = client.client_id() / 10;
        for (tick, sum) in client.checksum_history() {
            by_room
                .entry(room)
                .or_default()
                .entry(tick)
                .or_default()
                .push(sum);
        }
    }
    for ticks in by_room.values() {
        let full: Vec<&Vec<u64>> = ticks.values().filter(|sums| sums.len() == 4).collect();
        assert!(full.len() >= 150, "{}", full.len());
        assert!(full.iter().all(|sums| sums.iter().all(|s| *s == sums[0])));
    }
    assert_ne!(by_room[&11][&100], by_room[&12][&100]);
    for room in rooms {
        let summary = server.rooms().summary(room).unwrap();
        assert_eq!(summary.clients, 4);
        assert_eq!(summary.relay.unwrap().desyncs, 0);
    }
    assert_eq!(server.rooms().counters().refused.iter().sum::<u64>(), 0);
}

#[test]
fn fake_participants_own_their_share_and_receive_the_others_states() {
    let mut server = server();
    let room = RoomId(21);
    let config = ownership_room_config(2, 16, 64);
    server
        .rooms_mut()
        .create(Some(room), config.clone())
        .unwrap();
    let RoomConfig::Ownership(config) = config else {
        unreachable!()
    };
    let mut clients: Vec<OwnershipLoadClient> = (0..2u8)
        .map(|seat| {
            let spec = OwnershipLoadSpec::for_seat(&config, seat);
            let token = token(&server, room, seat, 210 + u64::from(seat));
            OwnershipLoadClient::connect(token, loopback(), spec).unwrap()
        })
        .collect();
    let mut frames = 0;
    while clients
        .iter()
        .any(|c| c.counters().owned < 8 || c.counters().bodies_received < 400)
    {
        step(&mut server, &mut clients, |c| c.frame(FRAME));
        frames += 1;
        assert!(
            frames < 1_000,
            "{:?}",
            clients.iter().map(|c| c.counters()).collect::<Vec<_>>()
        );
    }
    for client in &clients {
        let counters = client.counters();
        assert_eq!(client.phase(), &ClientPhase::Running);
        assert_eq!(counters.grants, 8);
        assert_eq!(counters.refusals, 0);
        assert_eq!(counters.batch_errors, 0);
        assert_eq!(counters.deltas_rejected, 0);
        assert!(counters.bodies_sent >= 400, "{counters:?}");
    }
    let summary = server.rooms().summary(room).unwrap();
    let ownership = summary.ownership.unwrap();
    assert_eq!(ownership.participants, 2);
    assert!(ownership.state_updates_relayed >= 800);
}
