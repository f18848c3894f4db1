//! How a room's end reaches its clients and how a played-out room ends: a room ended in its
//! lobby tells its lobby clients why (they end at once, no reconnecting), and a match whose
//! players all leave with a goodbye ends its room `completed` as soon as the last one is gone.

use simsync::deterministic::{LeaveSession, SessionState, SessionStateReason};
use simsync::net::{MatchEndReason, MatchId};
#[allow(unused_imports)]
use simsync::prelude::*;
use simsync_server::{RoomId, RoomState};

use crate::common::*;

#[test]
fn a_room_ended_in_its_lobby_tells_its_lobby_client_why_and_it_ends_at_once() {
    let mut server = server();
    let id = RoomId(7);
    server.rooms_mut().create(Some(id), relay_room(2)).unwrap();
    // One player of two: it waits in the lobby.
    let mut clients = vec![client(2, token(&server, id, 0, 1), 3)];
    run_until(&mut server, &mut clients, 400, |_, c| {
        lifecycle(&c[0]).state == SessionState::WaitingForPlayers
    });
    // The operator ends the room (`DELETE /rooms/7`).
    server
        .rooms_mut()
        .end(id, MatchEndReason::EndedByOperator)
        .unwrap();
    let frames = run_until(&mut server, &mut clients, 64, |_, c| {
        lifecycle(&c[0]).state != SessionState::WaitingForPlayers
    });
    let seen = lifecycle(&clients[0]);
    assert_eq!(seen.state, SessionState::Ended, "{seen:?}");
    assert_eq!(
        seen.reason,
        Some(SessionStateReason::MatchEnded {
            match_id: MatchId(1),
            reason: MatchEndReason::EndedByOperator,
        })
    );
    // The room closes the connection a second later: the client stays ended and never tries
    // to come back.
    for _ in 0..192 {
        frame(&mut server, &mut clients);
    }
    let net = stats(&clients[0]).network.expect("networked");
    assert_eq!(lifecycle(&clients[0]).state, SessionState::Ended);
    assert_eq!(net.reconnect_attempts, 0, "{net:?}");
    let summary = server.rooms().summary(id).unwrap();
    assert_eq!(summary.state, RoomState::Ended);
    assert_eq!(summary.end_reason.as_deref(), Some("ended by the operator"));
    eprintln!("lobby end reached the lobby client after {frames} frames");
}

#[test]
fn players_leaving_with_a_goodbye_after_the_match_end_its_room_completed_at_once() {
    let mut server = server();
    let id = RoomId(8);
    server.rooms_mut().create(Some(id), relay_room(2)).unwrap();
    let mut clients = vec![
        client(2, token(&server, id, 0, 1), 4),
        client(2, token(&server, id, 1, 2), 4),
    ];
    run_until_verified(&mut server, &mut clients, 120, 2_000);
    assert_eq!(
        server.rooms().summary(id).unwrap().state,
        RoomState::Running
    );
    // Both finish and leave.
    for client in &mut clients {
        client.world_mut().write_message(LeaveSession);
    }
    let frames = run_until(&mut server, &mut clients, 64, |s, _| {
        s.rooms().room(id).is_none()
    });
    let summary = server.rooms().summary(id).unwrap();
    assert_eq!(summary.state, RoomState::Ended);
    assert_eq!(summary.end_reason.as_deref(), Some("completed"));
    for client in &clients {
        let seen = lifecycle(client);
        assert_eq!(
            (seen.state, seen.reason),
            (SessionState::Ended, Some(SessionStateReason::Left))
        );
    }
    // The relay closed their connections: the clients see it within a few frames.
    run_until(&mut server, &mut clients, 16, |_, c| {
        c.iter().all(|client| {
            let renet = client
                .world()
                .resource::<simsync::net::bevy_renet::RenetClient>();
            renet.is_disconnected()
        })
    });
    // A goodbye crosses the link, the relay closes the connection, the room ends: a few
    // frames, not netcode's 15 s nor the empty room's 30 s.
    assert!(frames <= 8, "{frames} frames");
    eprintln!("a finished room ended `completed` {frames} frames after its players left");
}
