//! Multi-App test of the in-memory transport: a server App and two client Apps, each with its own
//! renet resource, connected through a conditioned `MemoryNetwork` (75 ± 15 ms, 10% loss, 5%
//! duplication, 10% held back 40 ms), stepped with a simulated 1/64 s.

use std::collections::BTreeMap;

use bevy::prelude::*;
use simsync_net::MatchMessage;
use simsync_net::prelude::*;

use crate::{batch_number, numbered_batch};
use simsync_net::{
    Direction, LinkConditionerConfig, OwnerRecord, PROTOCOL_VERSION, RttEstimator, check_hello,
    millis_u32,
};

const HZ: u32 = 64;
/// Data messages each side sends per channel (5 s at 64 Hz).
const SENDS: u32 = 320;
/// Total steps: sending, then time for the reliable channel to resend what was lost.
const STEPS: u32 = 640;
const CLIENTS: [ClientId; 2] = [11, 22];

fn conditioned() -> LinkConditionerConfig {
    LinkConditionerConfig::PERFECT
        .with_latency(75, 15)
        .with_loss(10.0)
        .with_duplication(5.0)
        .with_reordering(10.0, 40)
}

/// What one endpoint received: per peer, per channel, the message keys in arrival order.
type Log = BTreeMap<(ClientId, u8), Vec<i64>>;

#[derive(Resource, Default)]
struct Frame(u32);

#[derive(Resource, Default)]
struct ServerState {
    log: Log,
    sent: BTreeMap<ClientId, u32>,
    welcomed: Vec<ClientId>,
    stats: DecodeStats,
}

#[derive(Resource, Default)]
struct ClientState {
    log: Log,
    sent: u32,
    welcome: Option<Welcome>,
    first_control_was_welcome: Option<bool>,
    rtt: RttEstimator,
    stats: DecodeStats,
}

fn now_ms(frame: u32) -> u32 {
    millis_u32(std::time::Duration::from_micros(u64::from(frame) * 15_625))
}

fn server_system(
    mut frame: ResMut<Frame>,
    mut server: ResMut<RenetServer>,
    mut state: ResMut<ServerState>,
) {
    frame.0 += 1;
    let state = &mut *state;
    for received in server.receive_msgs(&mut state.stats) {
        let message = received.message.expect("clean bytes decode");
        let Some(key) = serve_message(&mut server, state, frame.0, received.client_id, message)
        else {
            continue;
        };
        state
            .log
            .entry((received.client_id, received.channel.id()))
            .or_default()
            .push(key);
    }
    send_server_data(&mut server, state);
}

/// The server's side of one message from `client_id` at `frame`: a `Hello` is checked and
/// welcomed, a `Ping` answered. Returns the message's key for the log; `None` for a ping, which
/// is not logged.
fn serve_message(
    server: &mut RenetServer,
    state: &mut ServerState,
    frame: u32,
    client_id: ClientId,
    message: ClientMessage,
) -> Option<i64> {
    let key = match message {
        ClientMessage::Hello(hello) => {
            assert_eq!(check_hello(&hello), Ok(()));
            let welcome = Welcome {
                protocol_version: PROTOCOL_VERSION,
                participant: ParticipantId(client_id as u16),
                player_slot: Some(state.welcomed.len() as u8),
                protocols: hello.protocols,
                tick_rate_hz: HZ as u16,
                server_tick: frame as i32,
                players: 0,
                reconnect_token: None,
            };
            server
                .send_msg(client_id, &ServerMessage::Welcome(welcome))
                .unwrap();
            state.welcomed.push(client_id);
            -1
        }
        ClientMessage::Ping { t } => {
            server
                .send_msg(
                    client_id,
                    &ServerMessage::Pong {
                        t,
                        server_time_ms: now_ms(frame),
                    },
                )
                .unwrap();
            return None;
        }
        ClientMessage::Session(MatchMessage {
            message: SessionClientMessage::Checksum { tick, .. },
            ..
        }) => i64::from(tick),
        ClientMessage::Session(MatchMessage {
            message: SessionClientMessage::Inputs { first_tick, .. },
            ..
        }) => i64::from(first_tick),
        ClientMessage::Ownership(OwnershipClientMessage::StateBatch(bytes)) => {
            i64::from(batch_number(&bytes))
        }
        other => panic!("unexpected {other:?}"),
    };
    Some(key)
}

/// Sends every welcomed client its next numbered message on each channel, until `SENDS` each.
fn send_server_data(server: &mut RenetServer, state: &mut ServerState) {
    let welcomed = state.welcomed.clone();
    for client_id in welcomed {
        let sent = state.sent.entry(client_id).or_default();
        if *sent >= SENDS {
            continue;
        }
        let n = *sent;
        *sent += 1;
        let messages = [
            ServerMessage::Ownership(OwnershipServerMessage::OwnerChanged(OwnerRecord {
                body: BodyId(u64::from(n)),
                owner: Some(ParticipantId(1)),
                priority: 3,
            })),
            ServerMessage::session(
                MatchId::FIRST,
                SessionServerMessage::ConfirmedInputs {
                    first_tick: n as i32,
                    sets: vec![InputSet {
                        inputs: vec![vec![1, 2], vec![3]],
                        replaced: 0b10,
                        disconnected: 0,
                    }],
                },
            ),
            ServerMessage::Ownership(OwnershipServerMessage::StateBatch(numbered_batch(n, 47))),
        ];
        for message in &messages {
            server.send_msg(client_id, message).unwrap();
        }
    }
}

fn client_system(
    mut frame: ResMut<Frame>,
    mut client: ResMut<RenetClient>,
    mut state: ResMut<ClientState>,
) {
    frame.0 += 1;
    let state = &mut *state;
    for received in client.receive_msgs(&mut state.stats) {
        let message = received.message.expect("clean bytes decode");
        let key = match message {
            ServerMessage::Welcome(welcome) => {
                state.first_control_was_welcome.get_or_insert(true);
                state.welcome = Some(welcome);
                -1
            }
            ServerMessage::Pong { t, .. } => {
                state.rtt.on_pong(t, now_ms(frame.0));
                continue;
            }
            ServerMessage::Ownership(OwnershipServerMessage::OwnerChanged(record)) => {
                state.first_control_was_welcome.get_or_insert(false);
                record.body.0 as i64
            }
            ServerMessage::Session(MatchMessage {
                message: SessionServerMessage::ConfirmedInputs { first_tick, .. },
                ..
            }) => i64::from(first_tick),
            ServerMessage::Ownership(OwnershipServerMessage::StateBatch(bytes)) => {
                i64::from(batch_number(&bytes))
            }
            other => panic!("unexpected {other:?}"),
        };
        state
            .log
            .entry((0, received.channel.id()))
            .or_default()
            .push(key);
    }
    if frame.0 == 1 {
        // Queued while connecting; renet sends it once connected.
        client
            .send_msg(&ClientMessage::Hello(Hello::new(Protocols::ALL, "test")))
            .unwrap();
    }
    if !client.is_connected() {
        return;
    }
    if frame.0.is_multiple_of(8) {
        client
            .send_msg(&ClientMessage::Ping { t: now_ms(frame.0) })
            .unwrap();
    }
    if state.sent < SENDS {
        let n = state.sent;
        state.sent += 1;
        let messages = [
            ClientMessage::session(
                MatchId::FIRST,
                SessionClientMessage::Checksum {
                    tick: n as i32,
                    checksum: 0xABCD,
                },
            ),
            ClientMessage::session(
                MatchId::FIRST,
                SessionClientMessage::Inputs {
                    first_tick: n as i32,
                    inputs: vec![vec![n as u8]; 3],
                    ack_tick: n as i32 - 5,
                },
            ),
            ClientMessage::Ownership(OwnershipClientMessage::StateBatch(numbered_batch(n, 46))),
        ];
        for message in &messages {
            client.send_msg(message).unwrap();
        }
    }
}

struct Outcome {
    server: Log,
    clients: Vec<Log>,
    server_stats: DecodeStats,
    client_states: Vec<(Option<Welcome>, Option<bool>, RttEstimator, DecodeStats)>,
    link_duplicated: u64,
}

fn run(seed: u64) -> Outcome {
    let network = MemoryNetwork::new(seed, conditioned()).unwrap();
    let clock = NetClock::fixed_hz(HZ);
    let mut server = App::new();
    server
        .add_plugins(NetServerPlugin::default().with_clock(clock))
        .insert_net_server(network.server_transport().unwrap())
        .init_resource::<Frame>()
        .init_resource::<ServerState>()
        .add_systems(Update, server_system);
    let mut clients: Vec<App> = CLIENTS
        .iter()
        .map(|&id| {
            let mut app = App::new();
            app.add_plugins(NetClientPlugin::default().with_clock(clock))
                .insert_net_client(network.client_transport(id).unwrap())
                .init_resource::<Frame>()
                .init_resource::<ClientState>()
                .add_systems(Update, client_system);
            app
        })
        .collect();
    for _ in 0..STEPS {
        server.update();
        for client in &mut clients {
            client.update();
        }
    }
    let link_duplicated = CLIENTS
        .iter()
        .flat_map(|&id| {
            [Direction::ToServer, Direction::ToClient]
                .map(|direction| network.link_stats(id, direction).unwrap().duplicated)
        })
        .sum();
    let server_state = server.world_mut().remove_resource::<ServerState>().unwrap();
    let mut client_logs = Vec::new();
    let mut client_states = Vec::new();
    for client in &mut clients {
        let state = client.world_mut().remove_resource::<ClientState>().unwrap();
        client_logs.push(state.log);
        client_states.push((
            state.welcome,
            state.first_control_was_welcome,
            state.rtt,
            state.stats,
        ));
    }
    Outcome {
        server: server_state.log,
        clients: client_logs,
        server_stats: server_state.stats,
        client_states,
        link_duplicated,
    }
}

fn unique_fraction(keys: &[i64]) -> f64 {
    let mut unique: Vec<i64> = keys.to_vec();
    unique.sort_unstable();
    unique.dedup();
    assert!(unique.iter().all(|&k| (0..i64::from(SENDS)).contains(&k)));
    unique.len() as f64 / f64::from(SENDS)
}

fn in_order(keys: &[i64]) -> bool {
    keys.windows(2).all(|w| w[0] < w[1])
}

fn count_duplicates(keys: &[i64]) -> usize {
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).filter(|w| w[0] == w[1]).count()
}

#[test]
fn two_clients_exchange_on_all_channels_through_a_lossy_network() {
    let outcome = run(2024);
    let control = NetChannel::Control.id();
    let expected: Vec<i64> = (0..i64::from(SENDS)).collect();
    let mut losses = Vec::new();
    let mut duplicates = 0;
    let mut reordered = 0;

    // Server side: per client, the handshake then every reliable message exactly once, in order.
    for &id in &CLIENTS {
        let reliable = &outcome.server[&(id, control)];
        assert_eq!(reliable[0], -1, "Hello first");
        assert_eq!(&reliable[1..], &expected[..], "client {id} control channel");
        for channel in [NetChannel::Inputs, NetChannel::State] {
            let keys = &outcome.server[&(id, channel.id())];
            losses.push(1.0 - unique_fraction(keys));
            duplicates += count_duplicates(keys);
            reordered += usize::from(!in_order(keys));
        }
    }
    // Client side.
    for (log, (welcome, first_was_welcome, rtt, stats)) in
        outcome.clients.iter().zip(&outcome.client_states)
    {
        let welcome = welcome.as_ref().expect("welcomed");
        assert_eq!(welcome.protocol_version, PROTOCOL_VERSION);
        assert_eq!(welcome.tick_rate_hz, 64);
        assert_eq!(*first_was_welcome, Some(true));
        let reliable = &log[&(0, control)];
        assert_eq!(reliable[0], -1);
        assert_eq!(&reliable[1..], &expected[..]);
        for channel in [NetChannel::Inputs, NetChannel::State] {
            let keys = &log[&(0, channel.id())];
            losses.push(1.0 - unique_fraction(keys));
            duplicates += count_duplicates(keys);
            reordered += usize::from(!in_order(keys));
        }
        // 75 ms each way, ± 15 ms jitter, delivery rounded up to 15.625 ms steps.
        let rtt_ms = rtt.rtt_ms().expect("pongs arrived");
        assert!((150.0..=215.0).contains(&rtt_ms), "rtt {rtt_ms} ms");
        assert!(rtt.jitter_ms() > 0.0 && rtt.jitter_ms() < 40.0);
        assert_eq!(stats.rejected(), 0);
    }
    assert_eq!(outcome.server_stats.rejected(), 0);

    // Unreliable channels lose about the configured 10%, each stream and overall.
    for &loss in &losses {
        assert!(
            (0.04..=0.17).contains(&loss),
            "stream loss {loss} ({losses:?})"
        );
    }
    let mean = losses.iter().sum::<f64>() / losses.len() as f64;
    eprintln!(
        "unreliable loss per stream {losses:.3?}, mean {mean:.3}; duplicates {duplicates}; \
         rtt {:?} ms, jitter {:.1} ms",
        outcome.client_states[0].2.rtt_ms(),
        outcome.client_states[0].2.jitter_ms()
    );
    assert!((0.07..=0.13).contains(&mean), "mean loss {mean}");
    // Duplication and reordering reach the application on unreliable channels (renet passes
    // them through), and were absorbed by the reliable channel above.
    assert!(outcome.link_duplicated > 0);
    assert!(duplicates > 0, "no duplicate reached an unreliable channel");
    assert_eq!(
        reordered,
        losses.len(),
        "every unreliable stream saw reordering"
    );
}

#[test]
fn same_seed_gives_the_same_delivery_sequence() {
    let a = run(99);
    let b = run(99);
    assert_eq!(a.server, b.server);
    assert_eq!(a.clients, b.clients);
    let c = run(100);
    assert!(
        a.server != c.server || a.clients != c.clients,
        "another seed should change the deliveries"
    );
}
