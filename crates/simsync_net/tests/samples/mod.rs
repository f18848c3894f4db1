//! Sample messages of every kind, shared by the codec tests (`tests/net`) and the allocation
//! fuzz (`tests/alloc_bound.rs`, its own binary for its global allocator): one list, so a new
//! message kind reaches both.

use bevy::math::{Quat, Vec3};
use simsync_net::{
    BidRequest, BodyId, ClientMessage, DesyncJudge, Hello, InputSet, MatchEndReason, MatchId,
    OwnerRecord, OwnershipClientMessage, OwnershipServerMessage, PROTOCOL_VERSION, PackedBodyState,
    ParticipantId, Protocols, RefusalReason, RejectReason, ServerMessage, SessionClientMessage,
    SessionServerMessage, SnapshotChunk, Welcome,
};

/// A snapshot chunk with every field set.
pub fn chunk() -> SnapshotChunk {
    SnapshotChunk {
        request: 7,
        tick: 200,
        checksum: 0xFEED_F00D_DEAD_BEEF,
        total_bytes: 70_000,
        index: 4,
        count: 5,
        bytes: (0..4_464u32).map(|i| i as u8).collect(),
    }
}

/// A body state of `body` at sequence `seq`.
pub fn state(body: u64, seq: u32) -> PackedBodyState {
    PackedBodyState::new(
        BodyId(body),
        seq,
        Vec3::new(1.5, -2.25, 1e6),
        Quat::from_rotation_z(1.0),
        Vec3::new(0.1, 0.2, 0.3),
        Vec3::new(-4.0, 5.0, -6.0),
    )
}

/// A `Welcome` with every field set.
pub fn welcome() -> Welcome {
    Welcome {
        protocol_version: PROTOCOL_VERSION,
        participant: ParticipantId(3),
        player_slot: Some(1),
        protocols: Protocols::ALL,
        tick_rate_hz: 64,
        server_tick: 1234,
        players: 4,
        reconnect_token: Some(u64::MAX - 5),
    }
}

/// One client message of every kind (two `Hello`s: plain and rejoining).
pub fn client_samples() -> Vec<ClientMessage> {
    vec![
        ClientMessage::Hello(Hello::new(Protocols::SESSION, "player one")),
        ClientMessage::Hello(
            Hello::new(Protocols::SESSION, "back again").with_reconnect_token(3, 0xDEAD_BEEF),
        ),
        ClientMessage::Ping { t: u32::MAX },
        ClientMessage::Pong { t: 7 },
        ClientMessage::Goodbye,
        ClientMessage::session(
            MatchId::FIRST,
            SessionClientMessage::Inputs {
                first_tick: -3,
                inputs: vec![vec![], vec![1, 2, 3], vec![255; 40]],
                ack_tick: i32::MIN,
            },
        ),
        ClientMessage::session(
            MatchId::FIRST,
            SessionClientMessage::Checksum {
                tick: 600,
                checksum: u64::MAX,
            },
        ),
        ClientMessage::session(
            MatchId::FIRST,
            SessionClientMessage::ComponentHashes {
                tick: 600,
                components: vec![
                    ("bevy_transform::components::transform::Transform".into(), 7),
                    ("game::Health".into(), u64::MAX),
                ],
                resources: vec![("game::Score".into(), 0)],
                slots: vec![(0, 1), (1_023, u64::MAX)],
            },
        ),
        ClientMessage::Ownership(OwnershipClientMessage::Bids(vec![
            BidRequest {
                body: BodyId(u64::MAX),
                priority: 128,
            },
            BidRequest {
                body: BodyId(3),
                priority: 1,
            },
        ])),
        ClientMessage::Ownership(OwnershipClientMessage::Release { body: BodyId(0) }),
        ClientMessage::Ownership(OwnershipClientMessage::StateBatch(vec![9; 300])),
        ClientMessage::Ownership(OwnershipClientMessage::Respawn(state(42, 70_000))),
        ClientMessage::session(MatchId::FIRST, SessionClientMessage::SnapshotChunk(chunk())),
        ClientMessage::session(
            MatchId::FIRST,
            SessionClientMessage::SnapshotUnavailable { request: 3 },
        ),
        ClientMessage::session(
            MatchId::FIRST,
            SessionClientMessage::SnapshotRefused { request: u32::MAX },
        ),
        ClientMessage::session(MatchId(u32::MAX), SessionClientMessage::Ready),
    ]
}

/// One server message of every kind (and every typed refusal the wire carries).
pub fn server_samples() -> Vec<ServerMessage> {
    let mut samples = connection_server_samples();
    samples.extend(session_server_samples());
    samples.extend(rejoin_rejection_samples());
    samples.extend(ownership_server_samples());
    samples.extend(snapshot_server_samples());
    samples
}

/// The connection-level server messages: welcome, the first refusals, ping and pong.
fn connection_server_samples() -> Vec<ServerMessage> {
    vec![
        ServerMessage::Welcome(welcome()),
        ServerMessage::Rejected {
            reason: RejectReason::VersionMismatch {
                server: 1,
                client: 2,
            },
        },
        ServerMessage::Rejected {
            reason: RejectReason::Other("full moon".into()),
        },
        ServerMessage::Ping { t: 0 },
        ServerMessage::Pong {
            t: 5,
            server_time_ms: 99,
        },
    ]
}

/// The lockstep session's server messages, up to a player rejoining.
fn session_server_samples() -> Vec<ServerMessage> {
    vec![
        ServerMessage::session(
            MatchId::FIRST,
            SessionServerMessage::Start {
                tick: 0,
                players: 4,
                tick_rate_hz: 60,
            },
        ),
        ServerMessage::session(
            MatchId::FIRST,
            SessionServerMessage::ConfirmedInputs {
                first_tick: 100,
                sets: vec![
                    InputSet {
                        inputs: vec![vec![1], vec![2, 2]],
                        replaced: 0,
                        disconnected: 0,
                    },
                    InputSet {
                        inputs: vec![vec![1], vec![2, 2]],
                        replaced: 0b10,
                        disconnected: 0,
                    },
                ],
            },
        ),
        ServerMessage::session(
            MatchId::FIRST,
            SessionServerMessage::Clock {
                server_tick: 77,
                input_lead_ticks: -1.5,
                judged_through: 60,
                desyncs_sent: 1,
                unjudged_checksums: 2,
            },
        ),
        ServerMessage::session(
            MatchId::FIRST,
            SessionServerMessage::Desync {
                tick: 60,
                players: vec![0, 2],
                judge: DesyncJudge::Authority,
            },
        ),
        ServerMessage::session(
            MatchId::FIRST,
            SessionServerMessage::DesyncReport {
                tick: 60,
                players: vec![2],
                components: vec!["game::Health".into(), "resource game::Score".into()],
                slots: vec![3, 1_000],
            },
        ),
        ServerMessage::session(
            MatchId::FIRST,
            SessionServerMessage::PlayerLeft { slot: 2, tick: 640 },
        ),
        ServerMessage::session(
            MatchId::FIRST,
            SessionServerMessage::PlayerRejoined { slot: 2, tick: 900 },
        ),
    ]
}

/// The refusals a rejoining client can get.
fn rejoin_rejection_samples() -> Vec<ServerMessage> {
    vec![
        ServerMessage::Rejected {
            reason: RejectReason::BadReconnectToken { slot: 2 },
        },
        ServerMessage::Rejected {
            reason: RejectReason::SlotStillConnected { slot: 1 },
        },
    ]
}

/// The ownership protocol's server messages.
fn ownership_server_samples() -> Vec<ServerMessage> {
    vec![
        ServerMessage::Ownership(OwnershipServerMessage::Grant {
            body: BodyId(8),
            priority: 3,
        }),
        ServerMessage::Ownership(OwnershipServerMessage::Refused {
            body: BodyId(8),
            reason: RefusalReason::LockedOutEqualPriority,
            owner: Some(ParticipantId(3)),
            priority: 127,
        }),
        ServerMessage::Ownership(OwnershipServerMessage::Refused {
            body: BodyId(9),
            reason: RefusalReason::HeldExclusively,
            owner: Some(ParticipantId(1)),
            priority: 128,
        }),
        ServerMessage::Ownership(OwnershipServerMessage::OwnerChanged(OwnerRecord {
            body: BodyId(8),
            owner: None,
            priority: 0,
        })),
        ServerMessage::Ownership(OwnershipServerMessage::Snapshot(vec![OwnerRecord {
            body: BodyId(1),
            owner: Some(ParticipantId(2)),
            priority: 128,
        }])),
        ServerMessage::Ownership(OwnershipServerMessage::StateBatch(vec![7; 300])),
        ServerMessage::Ownership(OwnershipServerMessage::Reset {
            body: BodyId(1),
            state: Some(state(1, 1)),
        }),
        ServerMessage::Ownership(OwnershipServerMessage::CountedSilent {
            silent_ms: 2_016,
            bodies_cleared: 3,
        }),
    ]
}

/// The snapshot-transfer server messages: a request and a chunk.
fn snapshot_server_samples() -> Vec<ServerMessage> {
    vec![
        ServerMessage::session(
            MatchId::FIRST,
            SessionServerMessage::SnapshotRequest {
                request: 9,
                min_tick: 180,
                max_bytes: 32 << 20,
            },
        ),
        ServerMessage::session(MatchId::FIRST, SessionServerMessage::SnapshotChunk(chunk())),
        ServerMessage::session(MatchId(2), SessionServerMessage::MatchOpened),
        ServerMessage::session(
            MatchId::FIRST,
            SessionServerMessage::MatchEnded {
                reason: MatchEndReason::Completed,
            },
        ),
        ServerMessage::session(
            MatchId(u32::MAX),
            SessionServerMessage::MatchEnded {
                reason: MatchEndReason::Other("the host left".into()),
            },
        ),
    ]
}
