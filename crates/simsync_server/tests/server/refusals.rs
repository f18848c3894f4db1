//! Connections the server refuses, each with a typed reason the client sees and a counter:
//! an unknown room, a slot the room does not have, a draining server, a replayed or expired
//! token.

use simsync::deterministic::{SessionLifecycle, SessionState, SessionStateReason};
use simsync::net::renet_netcode::NetcodeDisconnectReason;
use simsync::net::{ClientTransport, RejectReason, RemoteErrorKind};
#[allow(unused_imports)]
use simsync::prelude::*;
use simsync_server::{REFUSAL_LABELS, RoomId, TokenClaims};

use crate::common::*;

fn refused(server: &simsync_server::DedicatedServer, label: &str) -> u64 {
    let i = REFUSAL_LABELS.iter().position(|l| *l == label).unwrap();
    server.rooms().counters().refused[i]
}

/// A server with room 1 of two slots and a client of slot 0 waiting in its lobby.
fn one_player_waiting() -> (simsync_server::DedicatedServer, Vec<bevy::app::App>) {
    let mut server = server();
    server
        .rooms_mut()
        .create(Some(RoomId(1)), relay_room(2))
        .unwrap();
    let mut clients = vec![client(2, token(&server, RoomId(1), 0, 1), 0)];
    run_until(&mut server, &mut clients, 400, |_, c| {
        lifecycle(&c[0]).state == SessionState::WaitingForPlayers
    });
    (server, clients)
}

fn rejected_with(
    server: &mut simsync_server::DedicatedServer,
    client_app: bevy::prelude::App,
) -> SessionLifecycle {
    let mut clients = vec![client_app];
    run_until(server, &mut clients, 400, |_, c| {
        lifecycle(&c[0]).state == SessionState::Rejected
    });
    lifecycle(&clients[0])
}

#[test]
fn a_token_for_a_room_the_server_does_not_have_is_refused_as_unknown_room() {
    let mut server = server();
    server
        .rooms_mut()
        .create(Some(RoomId(1)), relay_room(2))
        .unwrap();
    let app = client(2, token(&server, RoomId(99), 0, 1), 0);
    let seen = rejected_with(&mut server, app);
    assert_eq!(
        seen.reason,
        Some(SessionStateReason::Rejected(RejectReason::UnknownRoom {
            room: 99
        }))
    );
    assert_eq!(refused(&server, "unknown_room"), 1);
}

#[test]
fn a_slot_the_room_does_not_have_is_refused_as_out_of_range() {
    let mut server = server();
    server
        .rooms_mut()
        .create(Some(RoomId(1)), relay_room(2))
        .unwrap();
    let app = client(2, token(&server, RoomId(1), 5, 1), 0);
    let seen = rejected_with(&mut server, app);
    assert_eq!(
        seen.reason,
        Some(SessionStateReason::Rejected(RejectReason::SlotOutOfRange {
            slot: 5,
            players: 2
        }))
    );
    assert_eq!(refused(&server, "slot_out_of_range"), 1);
}

#[test]
fn a_draining_server_refuses_new_clients_as_draining() {
    // A client in the room keeps it live, so the drain does not end at once.
    let (mut server, _lobby) = one_player_waiting();
    server.drain_signal().raise();
    let app = client(2, token(&server, RoomId(1), 1, 2), 0);
    let seen = rejected_with(&mut server, app);
    assert_eq!(
        seen.reason,
        Some(SessionStateReason::Rejected(RejectReason::ServerDraining))
    );
    assert_eq!(refused(&server, "draining"), 1);
}

#[test]
fn a_token_used_from_a_second_socket_is_counted_as_replayed_and_never_connects() {
    let mut server = server();
    server
        .rooms_mut()
        .create(Some(RoomId(1)), relay_room(2))
        .unwrap();
    let token = token(&server, RoomId(1), 0, 1);
    let copy = simsync::net::renet_netcode::ConnectToken::read(&mut {
        let mut bytes = Vec::new();
        token.write(&mut bytes).unwrap();
        std::io::Cursor::new(bytes)
    })
    .unwrap();
    let mut clients = vec![client(2, token, 0)];
    run_until(&mut server, &mut clients, 400, |_, c| {
        lifecycle(&c[0]).state == SessionState::WaitingForPlayers
    });
    clients.push(client(2, copy, 0));
    run_until(&mut server, &mut clients, 400, |s, _| {
        s.remote_errors().count(RemoteErrorKind::ReplayedToken) > 0
    });
    for _ in 0..100 {
        frame(&mut server, &mut clients);
    }
    assert_eq!(lifecycle(&clients[1]).state, SessionState::Connecting);
    assert_eq!(server.rooms().room(RoomId(1)).unwrap().clients().len(), 1);
}

#[test]
fn an_expired_token_never_connects_and_the_client_says_why() {
    let mut server = server();
    server
        .rooms_mut()
        .create(Some(RoomId(1)), relay_room(2))
        .unwrap();
    let expired = server
        .minter()
        .expire_seconds(0)
        .mint(
            1,
            TokenClaims {
                room: RoomId(1),
                slot: 0,
            },
        )
        .unwrap();
    let mut clients = vec![client(2, expired, 0)];
    run_until(&mut server, &mut clients, 400, |_, c| {
        lifecycle(&c[0]).state.is_final()
    });
    let reason = match clients[0].world().resource::<ClientTransport>() {
        ClientTransport::Udp(udp) => udp.disconnect_reason(),
        ClientTransport::Memory(_) => None,
    };
    assert_eq!(reason, Some(NetcodeDisconnectReason::ConnectTokenExpired));
    assert_eq!(lifecycle(&clients[0]).state, SessionState::Disconnected);
    assert!(server.rooms().room(RoomId(1)).unwrap().clients().is_empty());
}

#[test]
fn a_token_naming_another_address_is_counted_and_its_client_names_the_possible_causes() {
    // The server believes it is reached at port 9; the matchmaker minted the address it
    // really has (a public address set wrong).
    let mut server = server_with(|c| c.public_addr = Some("127.0.0.1:9".parse().unwrap()));
    server
        .rooms_mut()
        .create(Some(RoomId(1)), relay_room(2))
        .unwrap();
    let claims = TokenClaims {
        room: RoomId(1),
        slot: 0,
    };
    let token = simsync_server::TokenMinter::new([9; 32], vec![server.udp_addr()])
        .unwrap()
        .timeout_seconds(1)
        .mint(1, claims)
        .unwrap();
    let mut clients = vec![client(2, token, 0)];
    run_until(&mut server, &mut clients, 400, |_, c| {
        lifecycle(&c[0]).state.is_final()
    });
    let wrong = server
        .remote_errors()
        .count(RemoteErrorKind::WrongServerAddress);
    // netcode resends its request 4 times a second until the 1 s timeout.
    assert!((2..=8).contains(&wrong), "{wrong}");
    assert_eq!(server.remote_errors().count(RemoteErrorKind::BadToken), 0);
    assert!(server.rooms().room(RoomId(1)).unwrap().clients().is_empty());
    let failure = match clients[0].world().resource::<ClientTransport>() {
        ClientTransport::Udp(udp) => udp.connect_failure(),
        ClientTransport::Memory(_) => None,
    };
    assert_eq!(
        failure,
        Some(simsync::net::ConnectFailure::NoAnswer {
            server: server.udp_addr(),
            timeout_secs: 1
        })
    );
    let text = failure.unwrap().to_string();
    for cause in ["replayed_token", "wrong_server_address", "bad_token"] {
        assert!(text.contains(cause), "{text}");
    }
}

#[test]
fn a_second_token_for_a_held_slot_is_refused_and_counted_as_slot_still_connected() {
    let (mut server, mut clients) = one_player_waiting();
    // Another client id with a token for the same slot, while its player is connected.
    clients.push(client(2, token(&server, RoomId(1), 0, 2), 0));
    run_until(&mut server, &mut clients, 400, |_, c| {
        lifecycle(&c[1]).state == SessionState::Rejected
    });
    assert_eq!(
        lifecycle(&clients[1]).reason,
        Some(SessionStateReason::Rejected(
            RejectReason::SlotStillConnected { slot: 0 }
        ))
    );
    let totals = server.rooms().room(RoomId(1)).unwrap().totals();
    assert_eq!(totals.refused_hellos.count("slot_still_connected"), 1);
    assert_eq!(totals.refused_hellos.total(), 1);
    let url = format!("http://{}/metrics", server.ops_addr().unwrap());
    let text = ureq::get(&url)
        .call()
        .expect("metrics answer")
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(
        text.contains(r#"simsync_refused_total{reason="slot_still_connected"} 1"#),
        "{text}"
    );
}
