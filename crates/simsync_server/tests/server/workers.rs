//! Rooms on two worker threads: rooms on different workers play apart, `/metrics` counts
//! every worker's rooms and clients, and the drain ends the rooms of both.

use std::time::Duration;

use simsync::deterministic::{SessionState, SessionStateReason};
use simsync::net::MatchEndReason;
#[allow(unused_imports)]
use simsync::prelude::*;
use simsync_server::{DrainAction, RoomId, RoomState};

use crate::common::*;

/// `/metrics` in the Prometheus text format.
fn scrape(server: &simsync_server::DedicatedServer) -> String {
    let url = format!("http://{}/metrics", server.ops_addr().unwrap());
    ureq::get(&url)
        .call()
        .expect("the metrics answer")
        .body_mut()
        .read_to_string()
        .expect("text")
}

/// The value of the sample `name` (with its labels) in `text`.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn rooms_on_two_workers_play_apart_are_counted_and_drained_together() {
    let mut server = server_with(|c| {
        c.workers = 2;
        c.drain_timeout = Duration::from_millis(250);
    });
    let (a, b) = (RoomId(1), RoomId(2));
    server.rooms_mut().create(Some(a), relay_room(2)).unwrap();
    server.rooms_mut().create(Some(b), relay_room(2)).unwrap();
    let workers = [a, b].map(|id| server.rooms().room(id).unwrap().worker());
    assert_eq!(workers, [0, 1], "one room per worker");
    let mut clients = vec![
        client(2, token(&server, a, 0, 11), 1),
        client(2, token(&server, a, 1, 12), 1),
        client(2, token(&server, b, 0, 21), 2),
        client(2, token(&server, b, 1, 22), 2),
    ];
    run_until_verified(&mut server, &mut clients, 60, 2_000);
    let sums: Vec<Vec<(i32, u64)>> = clients
        .iter()
        .map(|c| checksums(c).into_iter().filter(|(t, _)| *t >= 1).collect())
        .collect();
    assert_eq!(sums[0][..50], sums[1][..50], "room 1's clients agree");
    assert_eq!(sums[2][..50], sums[3][..50], "room 2's clients agree");
    assert_ne!(sums[0][..50], sums[2][..50], "the rooms played apart");

    let text = scrape(&server);
    for (name, value) in [
        (r#"simsync_rooms{kind="relay",state="running"}"#, 2.0),
        (r#"simsync_clients{kind="relay"}"#, 4.0),
        (r#"simsync_worker_rooms{worker="0"}"#, 1.0),
        (r#"simsync_worker_rooms{worker="1"}"#, 1.0),
    ] {
        assert_eq!(sample(&text, name), Some(value), "{name} in\n{text}");
    }
    for worker in 0..2 {
        let name = format!(r#"simsync_worker_busy_seconds_total{{worker="{worker}"}}"#);
        assert!(
            sample(&text, &name).is_some_and(|s| s > 0.0),
            "{name} in\n{text}"
        );
    }

    server.drain_signal().raise();
    let exit = (0..400).find(|_| {
        let action = server.turn(FRAME).unwrap();
        clients.iter_mut().for_each(bevy::prelude::App::update);
        action == DrainAction::Exit
    });
    assert!(exit.is_some(), "the server never exited");
    assert_eq!(server.rooms().rooms().count(), 0);
    for id in [a, b] {
        assert_eq!(server.rooms().summary(id).unwrap().state, RoomState::Ended);
    }
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
}
