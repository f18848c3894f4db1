//! How a participant's session ends: its entity server dies (nothing heard for
//! `server_silence_timeout`: `ServerGone`), the server ends the room (`Closing`, then the
//! connection closes: `RoomEnded` with its reason), or the game leaves (`Left`).

use bevy::prelude::*;
use simsync_net::MatchEndReason;
use simsync_net::prelude::*;
use simsync_ownership::prelude::*;

use super::harness::{Body, HZ, Session, steps};

/// Participant `i`'s end, if its session ended.
fn ended(s: &Session, i: usize) -> Option<ParticipantEnd> {
    s.client(i).and_then(|c| c.ended().cloned())
}

/// The `ParticipantEnded` Messages participant `i` holds (written in the last two updates).
fn end_messages(s: &Session, i: usize) -> Vec<ParticipantEnd> {
    let messages = s.app(i).world().resource::<Messages<ParticipantEnded>>();
    messages
        .iter_current_update_messages()
        .map(|m| m.reason.clone())
        .collect()
}

/// A live server keeps idle participants' sessions running for 12 s (longer than the 10 s
/// timeout); then the server stops dead, as a `kill -9`: each participant ends with
/// `ServerGone` 10 s after it last heard the server (640 steps after the stop, less up to a
/// keepalive interval), writes it as a Message once, and sends nothing more.
#[test]
fn a_participant_ends_with_server_gone_when_its_server_dies() {
    let mut s = Session::perfect(2, &[Body::floating(1, Vec3::ZERO)]);
    s.run(steps(12_000));
    assert_eq!(ended(&s, 0), None, "a live server is heard from");
    assert_eq!(ended(&s, 1), None);
    s.stop_server();
    let timeout = OwnershipConfig::default().server_silence_timeout;
    let bound = steps(timeout.as_millis() as u64) + 2;
    let took = s
        .run_until(bound, |s| ended(s, 0).is_some())
        .expect("ended within the timeout");
    assert_eq!(ended(&s, 0), Some(ParticipantEnd::ServerGone));
    assert_eq!(end_messages(&s, 0), vec![ParticipantEnd::ServerGone]);
    // Heard last at most a keepalive interval (250 ms, 16 steps) before the server stopped:
    // the answer to the last keepalive.
    let config = OwnershipConfig::default();
    let (expected, slack) = (
        bound - 2,
        steps(config.keepalive_interval().as_millis() as u64),
    );
    assert_eq!(expected, 10 * HZ, "10 s");
    assert!(
        (expected - slack - 1..=expected + 1).contains(&took),
        "ended {took} steps after the server stopped"
    );
    s.run_until(slack + 2, |s| ended(s, 1).is_some())
        .expect("participant 1 ends too");
    assert_eq!(ended(&s, 1), Some(ParticipantEnd::ServerGone));
    let sent = s.stats(0).keepalives_sent;
    s.run(steps(1_000));
    assert_eq!(s.stats(0).keepalives_sent, sent, "nothing more is sent");
    assert_eq!(end_messages(&s, 0), vec![], "written once");
}

/// The server says the room ends (`Closing`, a shutdown) and closes participant 1's
/// connection: its session ends at once with `RoomEnded(ServerShutdown)`, not `ServerGone`.
#[test]
fn a_participant_told_its_room_ends_ends_with_the_reason() {
    let mut s = Session::perfect(1, &[Body::floating(1, Vec3::ZERO)]);
    let client = s.client_id(0).expect("joined");
    let closing = ServerMessage::Ownership(OwnershipServerMessage::Closing {
        reason: MatchEndReason::ServerShutdown,
    });
    s.server_mut()
        .world_mut()
        .resource_mut::<RenetServer>()
        .send_msg_on(client, NetChannel::Control, &closing)
        .expect("sent");
    s.run(3);
    assert_eq!(ended(&s, 0), None, "told, not ended yet");
    s.server_mut()
        .world_mut()
        .resource_mut::<RenetServer>()
        .disconnect(client);
    s.run_until(5, |s| ended(s, 0).is_some())
        .expect("ends when the connection closes");
    assert_eq!(
        ended(&s, 0),
        Some(ParticipantEnd::RoomEnded(MatchEndReason::ServerShutdown))
    );
    assert!(ended(&s, 0).unwrap().is_early());
}

/// A participant whose game closes the connection itself ends with `Left`, a normal end: one
/// with `RenetClient::disconnect`, one that said it leaves and closed its transport (which
/// the connection reports as a transport close).
#[test]
fn a_participant_that_leaves_ends_with_left() {
    let mut s = Session::perfect(2, &[Body::floating(1, Vec3::ZERO)]);
    s.p(0)
        .world_mut()
        .resource_mut::<RenetClient>()
        .disconnect();
    s.p(1).world_mut().resource_mut::<OwnershipClient>().leave();
    s.p(1)
        .world_mut()
        .resource_mut::<ClientTransport>()
        .disconnect();
    s.run(2);
    assert_eq!(ended(&s, 0), Some(ParticipantEnd::Left));
    assert_eq!(ended(&s, 1), Some(ParticipantEnd::Left));
    assert!(!ParticipantEnd::Left.is_early());
}
