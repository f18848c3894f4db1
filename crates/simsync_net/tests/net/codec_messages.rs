//! The codec on the real message types: exact round trips, every kind of bad bytes as a typed
//! error and a counter, the version handshake, wire sizes, and proptests that random bytes never
//! panic.

use bevy::math::Quat;
use proptest::prelude::*;

use crate::samples::{client_samples, server_samples, state, welcome};
use simsync_net::{
    BidRequest, BodyId, ClientMessage, DecodeStats, Hello, InputFingerprint, InputSet,
    MAX_MESSAGE_BYTES, MatchId, NetChannel, NetError, OwnerRecord, OwnershipClientMessage,
    OwnershipServerMessage, PROTOCOL_VERSION, PackedBodyState, PackedRotation, ParticipantId,
    Protocols, ReconnectToken, RejectReason, ServerMessage, SessionClientMessage,
    SessionServerMessage, Welcome, check_hello, decode, decode_client_message,
    decode_client_message_counted, decode_server_message, encode, peek_handshake_version,
};

#[test]
fn every_message_round_trips_exactly() {
    for message in client_samples() {
        let bytes = encode(&message).unwrap();
        assert_eq!(decode_client_message(&bytes).unwrap(), message);
    }
    for message in server_samples() {
        let bytes = encode(&message).unwrap();
        assert_eq!(decode_server_message(&bytes).unwrap(), message);
    }
}

#[test]
fn session_config_in_the_handshake_round_trips() {
    let hello = Hello::new(Protocols::SESSION, "configured")
        .with_tick_rate_hz(64)
        .with_players(4)
        .with_input(InputFingerprint::of::<[u8; 3]>(3));
    assert_eq!(hello.input.as_ref().unwrap().name, "[u8; 3]");
    let message = ClientMessage::Hello(hello);
    let bytes = encode(&message).unwrap();
    assert_eq!(decode_client_message(&bytes).unwrap(), message);
    // Unset: four `None` tags (tick rate, players, input, reconnect token), one byte each.
    let plain = encode(&ClientMessage::Hello(Hello::new(Protocols::SESSION, ""))).unwrap();
    assert_eq!(plain.len(), 1 + 1 + 1 + 1 + 4);
    let rejoin = Hello::new(Protocols::SESSION, "").with_reconnect_token(2, u64::MAX);
    let rejoin = encode(&ClientMessage::Hello(rejoin)).unwrap();
    // The token: a `Some` tag, the slot and a varint u64 (a marker byte and 8 bytes).
    assert_eq!(rejoin.len(), plain.len() + 1 + 9);
    assert_eq!(peek_handshake_version(&bytes), Some(PROTOCOL_VERSION));
    let reasons = [
        RejectReason::TickRateMismatch {
            server: 60,
            client: 64,
        },
        RejectReason::PlayerCountMismatch {
            server: 2,
            client: 4,
        },
        RejectReason::InputTypeMismatch {
            server: InputFingerprint::new("a::Input", 4),
            client: InputFingerprint::new("b::Input", 400),
        },
    ];
    for reason in reasons {
        let message = ServerMessage::Rejected { reason };
        let bytes = encode(&message).unwrap();
        assert_eq!(decode_server_message(&bytes).unwrap(), message);
    }
    let message = ServerMessage::Welcome(welcome());
    let bytes = encode(&message).unwrap();
    assert_eq!(decode_server_message(&bytes).unwrap(), message);
}

#[test]
fn each_message_goes_on_the_channel_of_its_kind() {
    use NetChannel::*;
    let client: Vec<NetChannel> = client_samples()
        .iter()
        .map(ClientMessage::channel)
        .collect();
    assert_eq!(
        client,
        [
            Control, Control, Inputs, Inputs, Control, Inputs, Control, Control, Control, Control,
            State, Control, Snapshot, Control, Control, Control
        ]
    );
    let server: Vec<NetChannel> = server_samples()
        .iter()
        .map(ServerMessage::channel)
        .collect();
    assert_eq!(
        server,
        [
            Control, Control, Control, Inputs, Inputs, Control, Inputs, Inputs, Control, Control,
            Control, Control, Control, Control, Control, Control, Control, Control, Control, State,
            Control, Control, Control, Snapshot, Control, Control, Control
        ]
    );
}

/// Bytes of one body state on the wire, alone and in a `Respawn` (the encoded renet message),
/// by id and sequence size.
#[test]
fn body_state_wire_size() {
    let size = |body, seq| {
        encode(&ClientMessage::Ownership(OwnershipClientMessage::Respawn(
            state(body, seq),
        )))
        .unwrap()
        .len()
    };
    let bare = |body, seq| encode(&state(body, seq)).unwrap().len();
    // PackedBodyState alone: 12 + 6 + 12 + 12 = 42 bytes + varint id + varint seq.
    assert_eq!(bare(1, 1), 44);
    // Two enum tags (ClientMessage::Ownership, OwnershipClientMessage::Respawn).
    assert_eq!(size(1, 1), 46);
    assert_eq!(size(250, 250), 46);
    assert_eq!(size(250, 65_535), 48);
    assert_eq!(size(65_535, 65_535), 50);
    assert_eq!(size(250, u32::MAX), 50);
    assert_eq!(size(u64::MAX, u32::MAX), 58);
    // A `Reset` adds the body id and the option's tag: two bytes below 251.
    let reset = encode(&ServerMessage::Ownership(OwnershipServerMessage::Reset {
        body: BodyId(1),
        state: Some(state(1, 1)),
    }))
    .unwrap();
    assert_eq!(reset.len(), 48);
    // Ownership record: id + owner + priority.
    let record = encode(&OwnerRecord {
        body: BodyId(10),
        owner: Some(ParticipantId(1)),
        priority: 128,
    })
    .unwrap();
    assert_eq!(record.len(), 4);
}

#[test]
fn truncated_messages_are_typed_errors_and_counted() {
    let mut stats = DecodeStats::default();
    let mut cases = 0;
    for message in client_samples() {
        let bytes = encode(&message).unwrap();
        for cut in 0..bytes.len() {
            let result = decode_client_message_counted(&bytes[..cut], &mut stats);
            assert!(
                matches!(result, Err(NetError::Truncated)),
                "{message:?} cut at {cut}: {result:?}"
            );
            cases += 1;
        }
    }
    assert_eq!(stats.truncated, cases);
    assert_eq!(stats.rejected(), cases);
    assert_eq!(stats.accepted, 0);
}

#[test]
fn garbage_trailing_and_oversized_are_typed_errors_and_counted() {
    let mut stats = DecodeStats::default();
    // Unknown variant tag.
    assert!(matches!(
        decode_client_message_counted(&[200], &mut stats),
        Err(NetError::Malformed(_))
    ));
    // Known tag, invalid varint marker inside.
    assert!(matches!(
        decode_client_message_counted(&[1, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0], &mut stats),
        Err(NetError::Malformed(_))
    ));
    // Invalid UTF-8 in Hello's name.
    let mut hello = encode(&ClientMessage::Hello(Hello::new(Protocols::ALL, "ab"))).unwrap();
    let len = hello.len();
    hello[len - 1] = 0xFF;
    assert!(matches!(
        decode_client_message_counted(&hello, &mut stats),
        Err(NetError::Malformed(_))
    ));
    // Trailing bytes after a whole message.
    let mut ping = encode(&ClientMessage::Ping { t: 3 }).unwrap();
    ping.push(0);
    assert!(matches!(
        decode_client_message_counted(&ping, &mut stats),
        Err(NetError::TrailingBytes {
            consumed: 2,
            trailing: 1
        })
    ));
    // Longer than the limit.
    let huge = vec![3u8; MAX_MESSAGE_BYTES + 1];
    assert!(matches!(
        decode_client_message_counted(&huge, &mut stats),
        Err(NetError::Oversized { .. })
    ));
    // Short, but a length prefix announces 1 GiB of input bytes.
    let mut lying = vec![4, 0, 1, 0xFC];
    lying.extend_from_slice(&(1u32 << 30).to_le_bytes());
    let result = decode_client_message_counted(&lying, &mut stats);
    assert!(
        matches!(
            result,
            Err(NetError::Truncated | NetError::Oversized { .. })
        ),
        "{result:?}"
    );
    assert_eq!(stats.malformed, 3);
    assert_eq!(stats.trailing, 1);
    assert_eq!(stats.oversized + stats.truncated, 2);
    assert_eq!(stats.rejected(), 6);
    // And encode refuses to build a message above the limit.
    let too_big = ClientMessage::session(
        MatchId::FIRST,
        SessionClientMessage::Inputs {
            first_tick: 0,
            inputs: vec![vec![0; 1024]; 64],
            ack_tick: 0,
        },
    );
    assert!(matches!(
        encode(&too_big),
        Err(NetError::MessageTooLarge {
            limit: MAX_MESSAGE_BYTES,
            ..
        })
    ));
}

#[test]
fn wrong_protocol_version_is_a_typed_error_and_counted() {
    let mut stats = DecodeStats::default();
    let mut hello = Hello::new(Protocols::ALL, "future");
    hello.protocol_version = PROTOCOL_VERSION + 1;
    assert_eq!(
        check_hello(&hello),
        Err(RejectReason::VersionMismatch {
            server: PROTOCOL_VERSION,
            client: PROTOCOL_VERSION + 1
        })
    );
    let bytes = encode(&ClientMessage::Hello(hello)).unwrap();
    assert_eq!(peek_handshake_version(&bytes), Some(PROTOCOL_VERSION + 1));
    assert!(matches!(
        decode_client_message_counted(&bytes, &mut stats),
        Err(NetError::VersionMismatch { ours: PROTOCOL_VERSION, theirs }) if theirs == PROTOCOL_VERSION + 1
    ));
    // A future Hello whose fields after the version no longer decode: still a version error.
    let future = [0u8, 0xFB, 0x34, 0x12, 0xFF, 0xFF];
    assert!(matches!(
        decode_client_message_counted(&future, &mut stats),
        Err(NetError::VersionMismatch { theirs: 0x1234, .. })
    ));
    // The same on the client side, for a Welcome.
    let mut old = welcome();
    old.protocol_version = 0;
    let bytes = encode(&ServerMessage::Welcome(old)).unwrap();
    assert!(matches!(
        decode_server_message(&bytes),
        Err(NetError::VersionMismatch { theirs: 0, .. })
    ));
    assert_eq!(stats.version_mismatch, 2);
    assert_eq!(stats.rejected(), 2);
    // Our own version passes.
    assert_eq!(check_hello(&Hello::new(Protocols::NONE, "")), Ok(()));
    assert!(decode_server_message(&encode(&ServerMessage::Welcome(welcome())).unwrap()).is_ok());
}

fn any_f32() -> impl Strategy<Value = f32> {
    any::<u32>().prop_map(f32::from_bits)
}

fn any_state() -> impl Strategy<Value = PackedBodyState> {
    (
        any::<u64>(),
        any::<u32>(),
        [any_f32(), any_f32(), any_f32()],
        any::<[u8; 6]>(),
        [any_f32(), any_f32(), any_f32()],
        [any_f32(), any_f32(), any_f32()],
    )
        .prop_map(
            |(body, seq, position, rotation, linvel, angvel)| PackedBodyState {
                body: BodyId(body),
                seq,
                position,
                rotation: PackedRotation(rotation),
                linvel,
                angvel,
            },
        )
}

fn any_client_message() -> impl Strategy<Value = ClientMessage> {
    prop_oneof![
        (
            any::<u16>(),
            any::<u8>(),
            ".{0,20}",
            proptest::option::of(any::<u16>()),
            proptest::option::of(any::<u8>()),
            proptest::option::of((".{0,20}", any::<u32>())),
            proptest::option::of((any::<u8>(), any::<u64>())),
        )
            .prop_map(
                |(protocol_version, p, name, tick_rate_hz, players, input, reconnect)| {
                    ClientMessage::Hello(Hello {
                        protocol_version,
                        protocols: Protocols(p),
                        name,
                        tick_rate_hz,
                        players,
                        input: input.map(|(name, bound)| InputFingerprint::new(name, bound)),
                        reconnect: reconnect.map(|(slot, token)| ReconnectToken { slot, token }),
                    })
                }
            ),
        any::<u32>().prop_map(|t| ClientMessage::Ping { t }),
        any::<u32>().prop_map(|t| ClientMessage::Pong { t }),
        Just(ClientMessage::Goodbye),
        (
            any::<i32>(),
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..16), 0..8),
            any::<i32>()
        )
            .prop_map(|(first_tick, inputs, ack_tick)| ClientMessage::session(
                MatchId::FIRST,
                SessionClientMessage::Inputs {
                    first_tick,
                    inputs,
                    ack_tick
                }
            )),
        (any::<i32>(), any::<u64>()).prop_map(|(tick, checksum)| ClientMessage::session(
            MatchId::FIRST,
            SessionClientMessage::Checksum { tick, checksum }
        )),
        (
            any::<i32>(),
            prop::collection::vec(("[a-z:]{0,12}", any::<u64>()), 0..6),
            prop::collection::vec(("[a-z:]{0,12}", any::<u64>()), 0..3),
            prop::collection::vec((any::<u32>(), any::<u64>()), 0..8)
        )
            .prop_map(
                |(tick, components, resources, slots)| ClientMessage::session(
                    MatchId::FIRST,
                    SessionClientMessage::ComponentHashes {
                        tick,
                        components,
                        resources,
                        slots
                    }
                )
            ),
        proptest::collection::vec((any::<u64>(), any::<u8>()), 0..8).prop_map(|bids| {
            ClientMessage::Ownership(OwnershipClientMessage::Bids(
                bids.into_iter()
                    .map(|(body, priority)| BidRequest {
                        body: BodyId(body),
                        priority,
                    })
                    .collect(),
            ))
        }),
        any_state().prop_map(|s| ClientMessage::Ownership(OwnershipClientMessage::Respawn(s))),
        proptest::collection::vec(any::<u8>(), 0..64)
            .prop_map(|b| ClientMessage::Ownership(OwnershipClientMessage::StateBatch(b))),
    ]
}

fn any_server_message() -> impl Strategy<Value = ServerMessage> {
    prop_oneof![
        any_welcome(),
        (any::<u32>(), any::<u32>())
            .prop_map(|(t, server_time_ms)| ServerMessage::Pong { t, server_time_ms }),
        any_confirmed_inputs(),
        (any::<i32>(), any_f32(), any::<i32>(), any::<(u32, u32)>()).prop_map(
            |(
                server_tick,
                input_lead_ticks,
                judged_through,
                (desyncs_sent, unjudged_checksums),
            )| {
                ServerMessage::session(
                    MatchId::FIRST,
                    SessionServerMessage::Clock {
                        server_tick,
                        input_lead_ticks,
                        judged_through,
                        desyncs_sent,
                        unjudged_checksums,
                    },
                )
            }
        ),
        any_desync_report(),
        any_owner_snapshot(),
        (any::<u64>(), proptest::option::of(any_state())).prop_map(|(body, state)| {
            ServerMessage::Ownership(OwnershipServerMessage::Reset {
                body: BodyId(body),
                state,
            })
        }),
        proptest::collection::vec(any::<u8>(), 0..64)
            .prop_map(|b| ServerMessage::Ownership(OwnershipServerMessage::StateBatch(b))),
        (any::<u32>(), any::<u32>()).prop_map(|(silent_ms, bodies_cleared)| {
            ServerMessage::Ownership(OwnershipServerMessage::CountedSilent {
                silent_ms,
                bodies_cleared,
            })
        }),
    ]
}

/// A `Welcome` with a random participant, slot, server tick and player count.
fn any_welcome() -> impl Strategy<Value = ServerMessage> {
    (
        any::<u16>(),
        proptest::option::of(any::<u8>()),
        any::<i32>(),
        any::<u8>(),
    )
        .prop_map(|(participant, player_slot, server_tick, players)| {
            ServerMessage::Welcome(Welcome {
                protocol_version: PROTOCOL_VERSION,
                participant: ParticipantId(participant),
                player_slot,
                protocols: Protocols::ALL,
                tick_rate_hz: 64,
                server_tick,
                players,
                reconnect_token: None,
            })
        })
}

/// Confirmed inputs: random input sets from a random first tick.
fn any_confirmed_inputs() -> impl Strategy<Value = ServerMessage> {
    (
        any::<i32>(),
        prop::collection::vec(
            (
                prop::collection::vec(prop::collection::vec(any::<u8>(), 0..8), 0..4),
                any::<u64>(),
            ),
            0..6,
        ),
    )
        .prop_map(|(first_tick, sets)| {
            ServerMessage::session(
                MatchId::FIRST,
                SessionServerMessage::ConfirmedInputs {
                    first_tick,
                    sets: sets
                        .into_iter()
                        .map(|(inputs, replaced)| InputSet {
                            inputs,
                            replaced,
                            disconnected: 0,
                        })
                        .collect(),
                },
            )
        })
}

/// A desync report with random players, component names and slots.
fn any_desync_report() -> impl Strategy<Value = ServerMessage> {
    (
        any::<i32>(),
        prop::collection::vec(any::<u8>(), 0..4),
        prop::collection::vec("[a-z:]{0,12}", 0..4),
        prop::collection::vec(any::<u32>(), 0..8),
    )
        .prop_map(|(tick, players, components, slots)| {
            ServerMessage::session(
                MatchId::FIRST,
                SessionServerMessage::DesyncReport {
                    tick,
                    players,
                    components,
                    slots,
                },
            )
        })
}

/// An owner snapshot of random records.
fn any_owner_snapshot() -> impl Strategy<Value = ServerMessage> {
    prop::collection::vec(
        (
            any::<u64>(),
            proptest::option::of(any::<u16>()),
            any::<u8>(),
        ),
        0..8,
    )
    .prop_map(|records| {
        ServerMessage::Ownership(OwnershipServerMessage::Snapshot(
            records
                .into_iter()
                .map(|(body, owner, priority)| OwnerRecord {
                    body: BodyId(body),
                    owner: owner.map(ParticipantId),
                    priority,
                })
                .collect(),
        ))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut stats = DecodeStats::default();
        let client = decode_client_message_counted(&bytes, &mut stats);
        let server = decode_server_message(&bytes);
        let state = decode::<PackedBodyState>(&bytes);
        for error in [client.err(), server.err(), state.err()].into_iter().flatten() {
            prop_assert!(error.is_decode_error(), "{error:?}");
        }
        prop_assert_eq!(stats.total(), 1);
    }

    #[test]
    fn mutated_messages_never_panic(
        message in any_client_message(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode(&message).unwrap();
        for (index, value) in flips {
            let i = index.index(bytes.len());
            bytes[i] ^= value;
        }
        let _ = decode_client_message(&bytes);
    }

    #[test]
    fn client_messages_round_trip_bit_exactly(message in any_client_message()) {
        let bytes = encode(&message).unwrap();
        let back = decode::<ClientMessage>(&bytes).unwrap();
        prop_assert_eq!(encode(&back).unwrap(), bytes);
        // Equal field by field too (compared through Debug, where NaN equals NaN).
        prop_assert_eq!(format!("{back:?}"), format!("{message:?}"));
    }

    #[test]
    fn server_messages_round_trip_bit_exactly(message in any_server_message()) {
        let bytes = encode(&message).unwrap();
        let back = decode_server_message(&bytes).unwrap();
        prop_assert_eq!(encode(&back).unwrap(), bytes);
        prop_assert_eq!(format!("{back:?}"), format!("{message:?}"));
    }

    #[test]
    fn packed_rotation_is_close_and_always_unit(
        x in -1.0f32..1.0, y in -1.0f32..1.0, z in -1.0f32..1.0, w in -1.0f32..1.0,
        bytes in any::<[u8; 6]>(),
    ) {
        let q = Quat::from_xyzw(x, y, z, w);
        prop_assume!(q.length() > 1e-3);
        let q = q.normalize();
        let back = PackedRotation::from_quat(q).to_quat();
        // Chordal distance (q and −q are the same rotation); the rotation angle is about twice
        // it. f32 `angle_between` is too coarse here (acos near 1).
        let chord = (q - back).length().min((q + back).length());
        prop_assert!(chord < 1e-4, "{:?} → {:?}: {}", q, back, chord);
        let any = PackedRotation(bytes).to_quat();
        prop_assert!(any.is_finite() && (any.length() - 1.0).abs() < 1e-5);
    }
}
