//! UDP on 127.0.0.1 through renet_netcode: a server App and two client Apps in one process, on a
//! free port, driven by the same plugins as the in-memory transport.

use std::net::SocketAddr;
use std::time::Duration;

use bevy::prelude::*;
use simsync_net::MatchMessage;
use simsync_net::prelude::*;

use crate::{batch_number, numbered_batch};
use simsync_net::{
    DEFAULT_TOKEN_EXPIRE_SECONDS, DEFAULT_TOKEN_TIMEOUT_SECONDS, NETCODE_PROTOCOL_ID,
    PROTOCOL_VERSION, UdpClientTransport, UdpServerConfig, UdpServerTransport, check_hello,
    connection_config, generate_connect_token, generate_private_key,
};

const MESSAGES: u32 = 5;
const MAX_STEPS: u32 = 600;

#[derive(Resource, Default)]
struct ServerLog {
    control: Vec<(ClientId, i32)>,
    inputs: Vec<(ClientId, i32)>,
    state: Vec<(ClientId, u32)>,
    hellos: Vec<ClientId>,
}

#[derive(Resource, Default)]
struct ClientLog {
    welcome: Option<Welcome>,
    confirmed: Vec<i32>,
    relays: Vec<u32>,
    hello_sent: bool,
    sent: u32,
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn server_system(mut server: ResMut<RenetServer>, mut log: ResMut<ServerLog>) {
    let mut stats = DecodeStats::default();
    for received in server.receive_msgs(&mut stats) {
        let id = received.client_id;
        match received.message.expect("decodes") {
            ClientMessage::Hello(hello) => {
                assert_eq!(check_hello(&hello), Ok(()));
                log.hellos.push(id);
                let welcome = Welcome {
                    protocol_version: PROTOCOL_VERSION,
                    participant: ParticipantId(id as u16),
                    player_slot: Some(log.hellos.len() as u8 - 1),
                    protocols: hello.protocols,
                    tick_rate_hz: 64,
                    server_tick: 0,
                    players: 0,
                    reconnect_token: None,
                };
                server
                    .send_msg(id, &ServerMessage::Welcome(welcome))
                    .unwrap();
            }
            ClientMessage::Session(MatchMessage {
                message: SessionClientMessage::Checksum { tick, .. },
                ..
            }) => {
                log.control.push((id, tick));
            }
            ClientMessage::Session(MatchMessage {
                message: SessionClientMessage::Inputs { first_tick, .. },
                ..
            }) => {
                log.inputs.push((id, first_tick));
                server
                    .send_msg(
                        id,
                        &ServerMessage::session(
                            MatchId::FIRST,
                            SessionServerMessage::ConfirmedInputs {
                                first_tick,
                                sets: vec![InputSet::default()],
                            },
                        ),
                    )
                    .unwrap();
            }
            ClientMessage::Ownership(OwnershipClientMessage::StateBatch(bytes)) => {
                log.state.push((id, batch_number(&bytes)));
                server
                    .broadcast_msg(&ServerMessage::Ownership(
                        OwnershipServerMessage::StateBatch(bytes),
                    ))
                    .unwrap();
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(stats.rejected(), 0);
}

fn client_system(mut client: ResMut<RenetClient>, mut log: ResMut<ClientLog>) {
    let mut stats = DecodeStats::default();
    for received in client.receive_msgs(&mut stats) {
        match received.message.expect("decodes") {
            ServerMessage::Welcome(welcome) => log.welcome = Some(welcome),
            ServerMessage::Session(MatchMessage {
                message: SessionServerMessage::ConfirmedInputs { first_tick, .. },
                ..
            }) => {
                log.confirmed.push(first_tick);
            }
            ServerMessage::Ownership(OwnershipServerMessage::StateBatch(bytes)) => {
                log.relays.push(batch_number(&bytes));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    if !client.is_connected() {
        return;
    }
    if !log.hello_sent {
        log.hello_sent = true;
        client
            .send_msg(&ClientMessage::Hello(Hello::new(Protocols::ALL, "udp")))
            .unwrap();
    }
    // Data only after the handshake, a message per channel per frame.
    if log.welcome.is_some() && log.sent < MESSAGES {
        let n = log.sent;
        log.sent += 1;
        for message in [
            ClientMessage::session(
                MatchId::FIRST,
                SessionClientMessage::Checksum {
                    tick: n as i32,
                    checksum: 1,
                },
            ),
            ClientMessage::session(
                MatchId::FIRST,
                SessionClientMessage::Inputs {
                    first_tick: n as i32,
                    inputs: vec![vec![7]],
                    ack_tick: -1,
                },
            ),
            ClientMessage::Ownership(OwnershipClientMessage::StateBatch(numbered_batch(n, 44))),
        ] {
            client.send_msg(&message).unwrap();
        }
    }
}

fn server_app(config: UdpServerConfig) -> (App, SocketAddr) {
    let transport = UdpServerTransport::bind(config).unwrap();
    let addr = transport.local_addr();
    let mut app = App::new();
    app.add_plugins(NetServerPlugin::default().with_clock(NetClock::fixed_hz(64)))
        .insert_net_server(transport)
        .init_resource::<ServerLog>()
        .add_systems(Update, server_system);
    (app, addr)
}

fn client_app(transport: UdpClientTransport) -> App {
    let mut app = App::new();
    app.add_plugins(NetClientPlugin::default().with_clock(NetClock::fixed_hz(64)))
        .insert_net_client(transport)
        .init_resource::<ClientLog>()
        .add_systems(Update, client_system);
    app
}

/// Steps every App (sleeping 1 ms per step so datagrams cross the loopback) until `done`.
fn run_until(server: &mut App, clients: &mut [App], done: impl Fn(&mut App, &mut [App]) -> bool) {
    for _ in 0..MAX_STEPS {
        server.update();
        for client in clients.iter_mut() {
            client.update();
        }
        if done(server, clients) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("did not finish within {MAX_STEPS} steps");
}

fn exchange_finished(server: &mut App, clients: &mut [App]) -> bool {
    let log = server.world().resource::<ServerLog>();
    let expected = MESSAGES as usize * clients.len();
    let relays_done = clients
        .iter()
        .all(|client| client.world().resource::<ClientLog>().relays.len() >= expected);
    log.control.len() == expected && relays_done
}

#[test]
fn udp_server_and_two_clients_exchange_messages() {
    let (mut server, addr) = server_app(UdpServerConfig::unsecure(loopback()));
    assert_eq!(addr.ip().to_string(), "127.0.0.1");
    assert_ne!(addr.port(), 0);
    let mut clients: Vec<App> = [1u64, 2]
        .iter()
        .map(|&id| {
            client_app(
                UdpClientTransport::unsecure(addr, id, NETCODE_PROTOCOL_ID, loopback()).unwrap(),
            )
        })
        .collect();
    run_until(&mut server, &mut clients, exchange_finished);

    let log = server.world().resource::<ServerLog>();
    let mut hellos = log.hellos.clone();
    hellos.sort_unstable();
    assert_eq!(hellos, vec![1, 2]);
    for id in [1u64, 2] {
        let reliable: Vec<i32> = log
            .control
            .iter()
            .filter(|(from, _)| *from == id)
            .map(|&(_, tick)| tick)
            .collect();
        assert_eq!(reliable, (0..MESSAGES as i32).collect::<Vec<_>>());
        // Loopback loses nothing in practice; allow for it all the same.
        assert!(log.inputs.iter().filter(|(from, _)| *from == id).count() >= 3);
        assert!(log.state.iter().filter(|(from, _)| *from == id).count() >= 3);
    }
    for client in &clients {
        let log = client.world().resource::<ClientLog>();
        let welcome = log.welcome.as_ref().unwrap();
        assert_eq!(welcome.protocol_version, PROTOCOL_VERSION);
        assert!(log.confirmed.len() >= 3);
        // Every client sees both clients' state relayed.
        assert!(log.relays.len() >= 2 * MESSAGES as usize);
    }
}

#[test]
fn secure_udp_accepts_valid_tokens_only() {
    let key = generate_private_key();
    let (mut server, addr) = server_app(UdpServerConfig::secure(loopback(), key));
    let token = |client_id, key: &[u8; 32]| {
        generate_connect_token(
            key,
            NETCODE_PROTOCOL_ID,
            client_id,
            vec![addr],
            DEFAULT_TOKEN_EXPIRE_SECONDS,
            DEFAULT_TOKEN_TIMEOUT_SECONDS,
            None,
        )
        .unwrap()
    };
    let good = client_app(UdpClientTransport::secure(token(5, &key), loopback()).unwrap());
    let wrong_key = generate_private_key();
    let forged = client_app(UdpClientTransport::secure(token(6, &wrong_key), loopback()).unwrap());
    let mut clients = vec![good, forged];
    run_until(&mut server, &mut clients, |server, clients| {
        let log = server.world().resource::<ServerLog>();
        let relays = clients[0].world().resource::<ClientLog>().relays.len();
        log.control.len() == MESSAGES as usize && relays >= MESSAGES as usize
    });
    assert_eq!(server.world().resource::<ServerLog>().hellos, vec![5]);
    assert!(clients[0].world().resource::<RenetClient>().is_connected());
    assert!(!clients[1].world().resource::<RenetClient>().is_connected());
    assert!(clients[1].world().resource::<ClientLog>().welcome.is_none());
    let server_renet = server.world().resource::<RenetServer>();
    assert_eq!(server_renet.clients_id(), vec![5]);
}

/// Wire rule 13 over real UDP: a server turning every 4 ms (simulated clocks, real sockets) and
/// a client that updates and sends once a 16 ms frame, as a game client does. renet would put an
/// ack packet in every server turn; the transport sends the ones with new ranges at once and holds
/// the repeats, and nothing reliable is lost, nor does the client's round trip grow.
#[test]
fn repeated_acknowledgements_are_held_without_losing_messages_or_round_trip() {
    const TURN: Duration = Duration::from_millis(4);
    const FRAME: u32 = 4;
    const TURNS: u32 = 600;
    let mut transport = UdpServerTransport::bind(UdpServerConfig::unsecure(loopback())).unwrap();
    let mut server = simsync_net::renet::RenetServer::new(connection_config());
    let mut client_transport =
        UdpClientTransport::unsecure(transport.local_addr(), 7, NETCODE_PROTOCOL_ID, loopback())
            .unwrap();
    let mut client = simsync_net::renet::RenetClient::new(connection_config());
    let (mut sent_up, mut sent_down, mut got_up, mut got_down) = (0u32, 0u32, 0u32, 0u32);
    let mut held_at_connect = None;
    let mut turns_connected = 0u64;
    for turn in 0..TURNS {
        server.update(TURN);
        transport.update(TURN, &mut server).unwrap();
        while server
            .receive_message(7, NetChannel::Control.id())
            .is_some()
        {
            got_up += 1;
        }
        let frame = turn % FRAME == 0;
        if frame {
            client.update(TURN * FRAME);
            client_transport.update(TURN * FRAME, &mut client).unwrap();
            while client.receive_message(NetChannel::Control.id()).is_some() {
                got_down += 1;
            }
        }
        if client.is_connected() {
            held_at_connect.get_or_insert(transport.acks_held());
            turns_connected += 1;
            // A reliable message each way a frame, until the last 100 turns.
            if frame && turn < TURNS - 100 {
                client.send_message(NetChannel::Control.id(), vec![1u8; 16]);
                server.send_message(7, NetChannel::Control.id(), vec![2u8; 16]);
                sent_up += 1;
                sent_down += 1;
            }
        }
        transport.send_packets(&mut server);
        if frame {
            client_transport.send_packets(&mut client).unwrap();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(sent_up > 80, "the client connected early: {sent_up} frames");
    assert_eq!(
        (got_up, got_down),
        (sent_up, sent_down),
        "every reliable message arrived"
    );
    // The turns between the client's frames bring nothing new: about three in four acks are
    // repeats and held. Without the rule nothing is held.
    let held = transport.acks_held() - held_at_connect.unwrap();
    assert!(
        held * 2 > turns_connected,
        "{held} acks held over {turns_connected} turns"
    );
    // The first acknowledgement of each client packet still goes out at the next turn: the
    // client, reading once a 16 ms frame, measures one frame (holding every acknowledgement
    // to the 50 ms repeat measures about 38 ms).
    let rtt = client.rtt();
    assert!(rtt > 0.0 && rtt < 0.025, "client round trip {rtt} s");
}
