//! Rooms over real UDP on 127.0.0.1: two rooms on one port play apart, each client in the
//! slot its token names; a taken slot is refused; a killed client comes back with a new token.

use simsync::deterministic::{SessionState, SessionStateReason};
use simsync::net::RejectReason;
use simsync::net::renet::ClientId;
#[allow(unused_imports)]
use simsync::prelude::*;
use simsync_server::{RoomId, RoomState};

use crate::common::*;

fn relay_slot(server: &simsync_server::DedicatedServer, room: u64, client: ClientId) -> Option<u8> {
    server
        .rooms()
        .room(RoomId(room))?
        .relay_seats()?
        .slot_of(client)
}

#[test]
fn two_rooms_on_one_port_play_apart_each_client_in_its_tokens_slot() {
    let mut server = server();
    let (a, b) = (RoomId(1), RoomId(2));
    server.rooms_mut().create(Some(a), relay_room(2)).unwrap();
    server.rooms_mut().create(Some(b), relay_room(2)).unwrap();
    // Slot 1 connects first in each room: the token, not the order, names the seat.
    let mut clients = vec![
        client(2, token(&server, a, 1, 12), 1),
        client(2, token(&server, a, 0, 11), 1),
        client(2, token(&server, b, 1, 22), 2),
        client(2, token(&server, b, 0, 21), 2),
    ];
    run_until_verified(&mut server, &mut clients, 200, 3_000);
    assert_eq!(relay_slot(&server, 1, 12), Some(1));
    assert_eq!(relay_slot(&server, 1, 11), Some(0));
    assert_eq!(relay_slot(&server, 2, 22), Some(1));
    assert_eq!(relay_slot(&server, 2, 21), Some(0));
    // Inputs never cross rooms: no client of room 1 is known to room 2's relay.
    assert_eq!(relay_slot(&server, 2, 11), None);
    assert_eq!(relay_slot(&server, 1, 21), None);
    let sums = checksums_by_room(&clients);
    assert_eq!(sums[0][..200], sums[1][..200], "room 1's clients agree");
    assert_eq!(sums[2][..200], sums[3][..200], "room 2's clients agree");
    assert_ne!(
        sums[0][..200],
        sums[2][..200],
        "the rooms played different inputs"
    );
    for id in [a, b] {
        let room = server.rooms().summary(id).unwrap();
        assert_eq!(room.state, RoomState::Running);
        assert_eq!(room.clients, 2);
        assert_eq!(room.relay.as_ref().unwrap().desyncs, 0);
    }
    assert_eq!(server.rooms().counters().refused.iter().sum::<u64>(), 0);
}

fn checksums_by_room(clients: &[bevy::prelude::App]) -> Vec<Vec<(i32, u64)>> {
    clients
        .iter()
        .map(|c| checksums(c).into_iter().filter(|(t, _)| *t >= 1).collect())
        .collect()
}

#[test]
fn a_second_connection_for_a_connected_slot_is_refused_and_the_room_plays_on() {
    let mut server = server();
    let room = RoomId(7);
    server
        .rooms_mut()
        .create(Some(room), relay_room(2))
        .unwrap();
    let mut clients = vec![
        client(2, token(&server, room, 0, 1), 3),
        client(2, token(&server, room, 1, 2), 3),
    ];
    run_until_verified(&mut server, &mut clients, 60, 2_000);
    // Client 3 holds a valid token for the taken slot 0.
    clients.push(client(2, token(&server, room, 0, 3), 3));
    run_until(&mut server, &mut clients, 500, |_, c| {
        lifecycle(&c[2]).state == SessionState::Rejected
    });
    assert_eq!(
        lifecycle(&clients[2]).reason,
        Some(SessionStateReason::Rejected(
            RejectReason::SlotStillConnected { slot: 0 }
        ))
    );
    let mut players = clients.split_off(0);
    players.truncate(2);
    run_until_verified(&mut server, &mut players, 200, 2_000);
    let sums = checksums_by_room(&players);
    assert_eq!(sums[0][..150], sums[1][..150]);
}

#[test]
fn a_killed_client_takes_its_slot_again_with_a_new_token_and_agrees() {
    let mut server = server();
    let room = RoomId(3);
    server
        .rooms_mut()
        .create(Some(room), relay_room(2))
        .unwrap();
    let mut clients = vec![
        client(2, token(&server, room, 0, 1), 4),
        client(2, token(&server, room, 1, 2), 4),
    ];
    run_until_verified(&mut server, &mut clients, 100, 2_000);
    // Killed: the app and its socket vanish without a word.
    drop(clients.pop());
    // Past the relay's 2 s silence timeout, the slot's player counts as gone.
    for _ in 0..160 {
        frame(&mut server, &mut clients);
    }
    assert!(
        !server
            .rooms()
            .room(room)
            .unwrap()
            .relay_seats()
            .unwrap()
            .is_connected(1)
    );
    clients.push(client(2, token(&server, room, 1, 5), 4));
    let target = stats(&clients[0]).verified_tick + 100;
    run_until_verified(&mut server, &mut clients, target, 4_000);
    assert_eq!(relay_slot(&server, 3, 5), Some(1));
    let summary = server.rooms().summary(room).unwrap();
    assert_eq!(summary.relay.as_ref().unwrap().rejoins, 1);
    // The rejoined client's verified checksums equal the other's tick by tick.
    let (kept, back) = (checksums(&clients[0]), checksums(&clients[1]));
    let common: Vec<_> = back
        .iter()
        .filter(|(t, _)| *t > 0 && kept.iter().any(|(k, _)| k == t))
        .collect();
    assert!(common.len() >= 50, "{}", common.len());
    for (tick, sum) in common {
        assert_eq!(
            kept.iter().find(|(t, _)| t == tick).map(|(_, s)| s),
            Some(sum),
            "tick {tick}"
        );
    }
}
