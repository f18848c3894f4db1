//! Bad input never panics: messages about other participants' bodies, out-of-range priorities,
//! unknown bodies, malformed bytes, stale updates, messages before the handshake — each is a
//! refusal sent back and counted, or a logged and counted drop.

use bevy::prelude::*;
use simsync_net::prelude::*;
use simsync_net::{NetChannel, OwnerRecord, PROTOCOL_VERSION, RejectReason};
use simsync_ownership::prelude::*;
use simsync_ownership::{BodyId, ParticipantId};
use simsync_ownership::{JoinStatus, OwnershipSetupError, Sequence, state_to_wire};

use super::harness::{Body, DT, Session, participant_app, steps};

pub(super) fn bid(body: u64, priority: u8) -> ClientMessage {
    ClientMessage::Ownership(OwnershipClientMessage::Bids(vec![
        simsync_net::BidRequest {
            body: simsync_net::BodyId(body),
            priority,
        },
    ]))
}

pub(super) fn release(body: u64) -> ClientMessage {
    ClientMessage::Ownership(OwnershipClientMessage::Release {
        body: simsync_net::BodyId(body),
    })
}

/// A state batch numbered `seq` with one body at rest at `position`.
pub(super) fn update(body: u64, seq: u32, position: Vec3) -> ClientMessage {
    let batch = simsync_ownership::StateBatch {
        seq,
        focus: None,
        bodies: vec![(
            BodyId(body),
            simsync_ownership::BodyState::resting(position, Quat::IDENTITY),
        )],
    };
    ClientMessage::Ownership(OwnershipClientMessage::StateBatch(
        batch.encode().expect("encodes"),
    ))
}

fn reasons(s: &Session, i: usize) -> Vec<RefusalReason> {
    s.log(i).refused.iter().map(|r| r.reason).collect()
}

/// The server takes identity from the connection: participant 2 releasing participant 1's body,
/// or sending state for it, is refused `NotOwner` and counted, and the state is not relayed;
/// releasing a body nobody owns is refused too.
#[test]
fn messages_about_someone_elses_body_are_refused_and_counted() {
    let mut s = Session::perfect(
        3,
        &[
            Body::floating(1, Vec3::ZERO),
            Body::floating(2, Vec3::X * 3.0),
        ],
    );
    s.command(0, 1, |e| {
        e.grab();
    });
    s.run(3);
    let owner = s.id_of(0);
    assert_eq!(s.server_owner(1), Some((owner, Priority::GRAB)));

    s.send_raw(1, release(1));
    s.send_raw(1, update(1, 1, Vec3::new(100.0, 0.0, 0.0)));
    s.send_raw(2, release(2));
    s.run(3);
    let stats = s.server_stats();
    assert_eq!(stats.releases_refused.get(RefusalReason::NotOwner), 2);
    assert_eq!(stats.state_updates_refused.get(RefusalReason::NotOwner), 1);
    assert_eq!(s.server_owner(1), Some((owner, Priority::GRAB)));
    assert_eq!(reasons(&s, 1), vec![RefusalReason::NotOwner; 2]);
    assert_eq!(reasons(&s, 2), vec![RefusalReason::NotOwner]);
    // Not relayed: nobody's copy jumped to x = 100.
    for i in 0..3 {
        assert!(s.body_on(i, 1).0.x < 10.0, "participant {i}");
    }
    assert_eq!(stats.refusals().get(RefusalReason::NotOwner), 3);
}

/// Out-of-range priorities, unknown bodies and static bodies are refused with their reason
/// (carried unchanged on the wire), and counted on both sides.
#[test]
fn out_of_range_priorities_and_unknown_or_static_bodies_are_refused() {
    let mut s = Session::perfect(
        1,
        &[
            Body::floating(1, Vec3::ZERO),
            Body::ground(9, Vec3::new(0.0, -5.0, 0.0)),
        ],
    );
    s.send_raw(0, bid(1, 255));
    s.send_raw(0, bid(1, 0));
    s.send_raw(0, bid(1, Priority::YIELD.0));
    s.send_raw(0, bid(77, Priority::POKE.0));
    s.send_raw(0, bid(9, Priority::POKE.0));
    s.send_raw(0, release(77));
    s.run(3);
    let stats = s.server_stats();
    assert_eq!(stats.bids_refused.get(RefusalReason::PriorityTooHigh), 1);
    assert_eq!(stats.bids_refused.get(RefusalReason::PriorityTooLow), 2);
    assert_eq!(stats.bids_refused.get(RefusalReason::UnknownBody), 1);
    assert_eq!(stats.bids_refused.get(RefusalReason::NotOwnable), 1);
    assert_eq!(stats.releases_refused.get(RefusalReason::UnknownBody), 1);
    assert_eq!(s.server_owner(1), None);
    // The wire carries `NotOwnable` for the static body 9; refusals about body 77 (unknown here
    // too) are counted but have no entity to report.
    let p = s.stats(0);
    assert_eq!(p.refusals_received.get(RefusalReason::NotOwnable), 1);
    assert_eq!(p.refusals_received.get(RefusalReason::UnknownBody), 2);
    assert_eq!(p.unknown_bodies, 2);
    // Raw bids bypass the state machine; the priority reasons arrive as the server decided them.
    assert_eq!(
        p.refusals_received.get(RefusalReason::PriorityTooLow)
            + p.refusals_received.get(RefusalReason::PriorityTooHigh),
        3
    );
}

/// A raw client: only the net plugin, driven by the test.
fn raw_client(s: &Session, id: u64) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::Fixed(DT)))
        .insert_net_client(s.network().client_transport(id).expect("fresh id"));
    app
}

fn raw_step(s: &mut Session, raw: &mut App) -> Vec<ServerMessage> {
    s.step();
    raw.update();
    let mut stats = DecodeStats::default();
    raw.world_mut()
        .resource_mut::<RenetClient>()
        .receive_msgs(&mut stats)
        .into_iter()
        .map(|m| m.message.expect("the server sends clean bytes"))
        .collect()
}

fn raw_send(raw: &mut App, message: &ClientMessage) {
    raw.world_mut()
        .resource_mut::<RenetClient>()
        .send_msg(message)
        .expect("queued");
}

/// Messages before the handshake are dropped; a second Hello, a Hello without the ownership
/// protocol or of another version is rejected; garbage bytes are counted as malformed. The
/// server keeps working.
#[test]
fn handshake_misuse_and_garbage_are_rejected_and_counted() {
    let mut s = Session::perfect(1, &[Body::floating(1, Vec3::ZERO)]);
    let mut raw = raw_client(&s, 50);
    for _ in 0..3 {
        raw_step(&mut s, &mut raw);
    }
    // Before Hello: dropped.
    raw_send(&mut raw, &bid(1, Priority::POKE.0));
    raw_step(&mut s, &mut raw);
    raw_step(&mut s, &mut raw);
    assert_eq!(s.server_stats().messages_ignored, 1);
    assert_eq!(s.server_owner(1), None);
    // Wrong protocols, wrong version, then a good Hello, then a second one.
    raw_send(
        &mut raw,
        &ClientMessage::Hello(Hello::new(Protocols::SESSION, "raw")),
    );
    let mut old = Hello::new(Protocols::OWNERSHIP, "old");
    old.protocol_version = PROTOCOL_VERSION + 1;
    raw_send(&mut raw, &ClientMessage::Hello(old));
    raw_send(
        &mut raw,
        &ClientMessage::Hello(Hello::new(Protocols::OWNERSHIP, "raw")),
    );
    raw_send(
        &mut raw,
        &ClientMessage::Hello(Hello::new(Protocols::OWNERSHIP, "raw")),
    );
    // Garbage on the control and state channels.
    {
        let mut client = raw.world_mut().resource_mut::<RenetClient>();
        client.send_message(NetChannel::Control, vec![0xff, 0x13, 0x00, 0x42]);
        client.send_message(NetChannel::State, vec![5, 1]);
    }
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.extend(raw_step(&mut s, &mut raw));
    }
    let rejected: Vec<RejectReason> = answers
        .iter()
        .filter_map(|m| match m {
            ServerMessage::Rejected { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        rejected,
        vec![
            RejectReason::UnsupportedProtocols(Protocols::SESSION),
            RejectReason::VersionMismatch {
                server: PROTOCOL_VERSION,
                client: PROTOCOL_VERSION + 1
            },
            RejectReason::AlreadyJoined,
        ]
    );
    assert!(
        answers
            .iter()
            .any(|m| matches!(m, ServerMessage::Welcome(w) if w.participant.0 == 2))
    );
    let server = s.server().world().resource::<EntityServer>();
    assert_eq!(server.stats().hellos_rejected, 3);
    assert!(
        server.decode_stats().rejected() >= 3,
        "{:?}",
        server.decode_stats()
    );
    // Still works: the joined raw client can bid.
    raw_send(&mut raw, &bid(1, Priority::POKE.0));
    let answers: Vec<ServerMessage> = (0..3).flat_map(|_| raw_step(&mut s, &mut raw)).collect();
    assert!(answers.iter().any(|m| matches!(
        m,
        ServerMessage::Ownership(OwnershipServerMessage::Grant { priority: 127, .. })
    )));
}

/// State batches from the owner: undecodable ones are dropped whole, stale and duplicated ones
/// are dropped (wrap-safe across the u32 batch numbers), fresh ones are relayed and applied by
/// the participants.
#[test]
fn stale_duplicate_and_invalid_state_batches_are_dropped() {
    let mut s = Session::perfect(2, &[Body::floating(1, Vec3::ZERO)]);
    let mut raw = raw_client(&s, 60);
    raw_step(&mut s, &mut raw);
    raw_send(
        &mut raw,
        &ClientMessage::Hello(Hello::new(Protocols::OWNERSHIP, "owner")),
    );
    raw_send(&mut raw, &bid(1, Priority::GRAB.0));
    for _ in 0..3 {
        raw_step(&mut s, &mut raw);
    }
    assert!(s.server_owner(1).is_some_and(|(_, p)| p == Priority::GRAB));
    let at = |x: f32| Vec3::new(x, 0.0, 0.0);
    for (seq, x) in [
        (u32::MAX - 1, 1.0), // relayed
        (u32::MAX - 2, 9.0), // stale
        (u32::MAX - 1, 9.0), // duplicate
        (1, 2.0),            // newer across the wrap: relayed
    ] {
        raw_send(&mut raw, &update(1, seq, at(x)));
    }
    // Undecodable: dropped whole.
    raw_send(
        &mut raw,
        &ClientMessage::Ownership(OwnershipClientMessage::StateBatch(vec![0xff; 40])),
    );
    for _ in 0..3 {
        raw_step(&mut s, &mut raw);
    }
    let stats = s.server_stats();
    assert_eq!(stats.state_updates_relayed, 2);
    assert_eq!(stats.state_updates_stale, 2);
    assert_eq!(stats.state_batches_invalid, 1);
    for i in 0..2 {
        let (position, _) = s.body_on(i, 1);
        assert!(
            (position.x - 2.0).abs() < 0.05,
            "participant {i}: {position}"
        );
        // Both accepted updates came in one server update: the relay batch carries the
        // latest (rule 15).
        assert_eq!(s.stats(i).relays_applied, 1);
    }
}

/// A fake server App: only the net plugin, sending what the test says.
fn fake_server(network: &MemoryNetwork) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(NetServerPlugin::default().with_clock(NetClock::Fixed(DT)))
        .insert_net_server(network.server_transport().expect("one server"));
    app
}

/// Updates the fake server, then the participant, `n` times.
fn step_server_and_participant(server: &mut App, p: &mut App, n: usize) {
    for _ in 0..n {
        server.update();
        p.update();
    }
}

/// A state batch numbered `seq` relaying body `body` at rest at `x` along the x axis.
fn relay(body: u64, seq: u32, x: f32) -> ServerMessage {
    let batch = simsync_ownership::StateBatch {
        seq,
        focus: None,
        bodies: vec![(
            BodyId(body),
            simsync_ownership::BodyState::resting(Vec3::new(x, 0.0, 0.0), Quat::IDENTITY),
        )],
    };
    ServerMessage::Ownership(OwnershipServerMessage::StateBatch(
        batch.encode().expect("encodes"),
    ))
}

/// What the misbehaving server sends: two Welcomes, a grant, refusal and owner change about
/// unknown body 404, relays of body 404 and of body 1 (one applied, two stale), and a batch
/// that does not decode.
fn misbehaving_messages() -> [ServerMessage; 10] {
    let welcome = ServerMessage::Welcome(Welcome {
        protocol_version: PROTOCOL_VERSION,
        participant: simsync_net::ParticipantId(4),
        player_slot: None,
        protocols: Protocols::OWNERSHIP,
        tick_rate_hz: 64,
        server_tick: 0,
        players: 0,
        reconnect_token: None,
    });
    [
        welcome.clone(),
        welcome,
        ServerMessage::Ownership(OwnershipServerMessage::Grant {
            body: simsync_net::BodyId(404),
            priority: 3,
        }),
        ServerMessage::Ownership(OwnershipServerMessage::Refused {
            body: simsync_net::BodyId(404),
            reason: RefusalReason::LockedOutEqualPriority,
            owner: Some(ParticipantId(9)),
            priority: 127,
        }),
        ServerMessage::Ownership(OwnershipServerMessage::OwnerChanged(OwnerRecord {
            body: simsync_net::BodyId(404),
            owner: None,
            priority: 0,
        })),
        relay(404, 1, 1.0),
        relay(1, 5, 3.0),
        relay(1, 4, 8.0),
        relay(1, 5, 8.0),
        ServerMessage::Ownership(OwnershipServerMessage::StateBatch(vec![0xff; 40])),
    ]
}

/// A participant fed garbage and nonsense by a misbehaving server: unknown bodies, invalid and
/// stale relays, grants it never asked for, undecodable bytes, a second Welcome. Nothing
/// panics; each is counted.
#[test]
fn a_participant_survives_a_misbehaving_server() {
    let network = MemoryNetwork::perfect(3);
    let mut server = fake_server(&network);
    let mut p = participant_app(&network, 1, &[Body::floating(1, Vec3::ZERO)]);
    step_server_and_participant(&mut server, &mut p, 3);
    {
        let mut renet = server.world_mut().resource_mut::<RenetServer>();
        for m in &misbehaving_messages() {
            renet.send_msg_on(1, NetChannel::Control, m).unwrap();
        }
        renet.send_message(1, NetChannel::Control, vec![0xde, 0xad, 0xbe, 0xef]);
    }
    step_server_and_participant(&mut server, &mut p, 3);
    let state = p.world().resource::<OwnershipClient>();
    assert_eq!(state.status(), &JoinStatus::Joined(ParticipantId(4)));
    let stats = *state.stats();
    assert_eq!(stats.messages_ignored, 1, "second Welcome");
    assert_eq!(stats.unknown_bodies, 4, "{stats:?}");
    assert_eq!(stats.relays_applied, 1);
    assert_eq!(stats.relays_stale, 2);
    assert_eq!(stats.state_batches_invalid, 1);
    assert!(state.decode_stats().rejected() >= 1);
    // The applied relay is the batch of x = 3 (positions are quantized in batches).
    let e = Session::entity(&p, 1);
    let x = p.world().get::<Transform>(e).unwrap().translation.x;
    assert!((x - 3.0).abs() < 1e-3, "{x}");
}

/// An invalid config is reported as a resource, not a panic, and the plugin stays inert.
#[test]
fn invalid_config_is_reported_not_panicked() {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(OwnershipPlugin::participant().with_config(OwnershipConfig {
            heartbeat_interval: std::time::Duration::from_secs(10),
            ..OwnershipConfig::default()
        }));
    app.update();
    assert!(app.world().contains_resource::<OwnershipSetupError>());
    assert!(!app.world().contains_resource::<OwnershipClient>());
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(OwnershipPlugin::entity_server().with_activity(
            simsync_ownership::ActivityConfig {
                rest_linear_speed: f32::NAN,
                ..Default::default()
            },
        ));
    app.update();
    assert!(app.world().contains_resource::<OwnershipSetupError>());
}

/// Sequence numbers survive wrap-around on the way out too: an owner past 65,535 updates keeps
/// being relayed (the encoded sequence stays 16-bit).
#[test]
fn wire_sequence_is_16_bit() {
    let s = simsync_ownership::BodyState::default();
    let w = state_to_wire(BodyId(1), Sequence(u16::MAX).next(), &s);
    assert_eq!(w.seq, 0);
}

/// Rule 1 at the plugin level: `OwnershipLock` on the server's entity refuses every bid
/// (`Locked`, sent back and counted); removing it lets the next bid win.
#[test]
fn a_locked_body_refuses_bids_until_unlocked() {
    let mut s = Session::perfect(2, &[Body::floating(1, Vec3::ZERO)]);
    let entity = s
        .server()
        .world()
        .resource::<EntityServer>()
        .entity_of(BodyId(1))
        .unwrap();
    s.server_mut()
        .world_mut()
        .entity_mut(entity)
        .insert(simsync_ownership::OwnershipLock);
    s.run(1);
    s.command(0, 1, |e| {
        e.grab();
    });
    s.run(3);
    assert_eq!(s.server_owner(1), None);
    assert_eq!(reasons(&s, 0), vec![RefusalReason::Locked]);
    assert_eq!(s.server_stats().bids_refused.get(RefusalReason::Locked), 1);
    s.server_mut()
        .world_mut()
        .entity_mut(entity)
        .remove::<simsync_ownership::OwnershipLock>();
    s.run(1);
    // The held body is bid for again after the back-off (ownership rule 6).
    s.run(steps(300));
    assert_eq!(s.server_owner(1), Some((s.id_of(0), Priority::GRAB)));
    assert!(s.owners_agree(1));
}
