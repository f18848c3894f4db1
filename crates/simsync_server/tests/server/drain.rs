//! The drain: SIGTERM (the drain signal) → not ready, no new clients, running rooms go on
//! until the drain timeout, then every client is told the server shut down and the server
//! exits; empty rooms end by themselves.

use std::time::Duration;

use simsync::deterministic::{SessionState, SessionStateReason};
use simsync::net::MatchEndReason;
#[allow(unused_imports)]
use simsync::prelude::*;
use simsync_server::{DrainAction, DrainPhase, RoomId, RoomState};

use crate::common::*;

#[test]
fn running_rooms_play_on_through_the_drain_timeout_then_end_with_the_shutdown_reason() {
    let mut server = server_with(|c| c.drain_timeout = Duration::from_secs(1));
    server
        .rooms_mut()
        .create(Some(RoomId(1)), relay_room(2))
        .unwrap();
    let mut clients = vec![
        client(2, token(&server, RoomId(1), 0, 1), 5),
        client(2, token(&server, RoomId(1), 1, 2), 5),
    ];
    run_until_verified(&mut server, &mut clients, 30, 2_000);
    server.drain_signal().raise();
    let verified_at_signal = stats(&clients[0]).verified_tick;
    // Half the timeout later the match still runs.
    for _ in 0..32 {
        frame(&mut server, &mut clients);
    }
    assert!(matches!(server.drain_phase(), DrainPhase::Draining { .. }));
    assert_eq!(lifecycle(&clients[0]).state, SessionState::Running);
    assert!(stats(&clients[0]).verified_tick > verified_at_signal + 20);
    // Then the room is ended: every client sees why, and the server exits.
    let mut exit_after = None;
    for n in 0..400 {
        let action = server.turn(FRAME).unwrap();
        clients.iter_mut().for_each(bevy::prelude::App::update);
        if action == DrainAction::Exit {
            exit_after = Some(n);
            break;
        }
    }
    assert!(exit_after.is_some(), "the server never exited");
    for client in &mut clients {
        for _ in 0..10 {
            client.update();
        }
        let seen = lifecycle(client);
        assert_eq!(seen.state, SessionState::Ended);
        assert!(
            matches!(
                seen.reason,
                Some(SessionStateReason::MatchEnded {
                    reason: MatchEndReason::ServerShutdown,
                    ..
                })
            ),
            "{seen:?}"
        );
    }
    assert_eq!(server.drain_phase(), DrainPhase::Done);
}

#[test]
fn a_drain_with_no_live_room_exits_at_once() {
    let mut server = server();
    server.drain_signal().raise();
    assert_eq!(server.turn(FRAME).unwrap(), DrainAction::Exit);
}

#[test]
fn a_room_left_empty_ends_by_itself_after_the_empty_room_timeout() {
    let mut server = server_with(|c| c.empty_room_timeout = Duration::from_millis(500));
    server
        .rooms_mut()
        .create(Some(RoomId(4)), relay_room(2))
        .unwrap();
    let mut clients = vec![client(2, token(&server, RoomId(4), 0, 1), 0)];
    // While a client is in it, the room stays.
    for _ in 0..64 {
        frame(&mut server, &mut clients);
    }
    assert!(server.rooms().room(RoomId(4)).is_some());
    // The client leaves: half a second later the room is over.
    clients[0]
        .world_mut()
        .resource_mut::<simsync::net::ClientTransport>()
        .disconnect();
    let frames = run_until(&mut server, &mut [], 200, |s, _| {
        s.rooms().room(RoomId(4)).is_none()
    });
    assert!((30..=60).contains(&frames), "{frames}");
    assert_eq!(
        server.rooms().summary(RoomId(4)).unwrap().state,
        RoomState::Ended
    );
}

#[test]
fn clients_of_a_server_that_vanished_reach_a_final_state_within_the_token_timeout() {
    let mut server = server();
    server
        .rooms_mut()
        .create(Some(RoomId(1)), relay_room(2))
        .unwrap();
    let minter = server.minter().timeout_seconds(2);
    let mut clients: Vec<_> = (0..2u8)
        .map(|slot| {
            let claims = simsync_server::TokenClaims {
                room: RoomId(1),
                slot,
            };
            client(2, minter.mint(u64::from(slot) + 1, claims).unwrap(), 6)
        })
        .collect();
    run_until_verified(&mut server, &mut clients, 30, 2_000);
    // The server process is gone without a word.
    drop(server);
    let mut frames = 0;
    while clients
        .iter()
        .any(|c| lifecycle(c).state == SessionState::Running)
    {
        clients.iter_mut().for_each(bevy::prelude::App::update);
        frames += 1;
        assert!(
            frames < 64 * 4,
            "still running {frames} frames after the server vanished"
        );
    }
    // Netcode's 2 s timeout (128 frames of 1/64 s), then the session says why.
    assert!(frames >= 100, "{frames}");
    for client in &clients {
        let seen = lifecycle(client);
        assert!(
            matches!(
                seen.state,
                SessionState::Reconnecting | SessionState::Disconnected
            ),
            "{seen:?}"
        );
        assert_eq!(seen.reason, Some(SessionStateReason::ConnectionLost));
    }
}
