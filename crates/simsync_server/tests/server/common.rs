//! A tiny deterministic game (each player's tally of its inputs) and clients of a
//! [`DedicatedServer`] over UDP on 127.0.0.1, stepped frame by frame with the server.

use std::net::SocketAddr;
use std::time::Duration;

use bevy::prelude::*;
use simsync::deterministic::NetworkSessionConfig;
use simsync::deterministic::SessionLifecycle;
use simsync::net::renet_netcode::ConnectToken;
use simsync::net::{NetAppExt, NetClientPlugin, NetClock, UdpClientTransport};
#[allow(unused_imports)]
use simsync::prelude::*;
use simsync_server::{DedicatedServer, RoomConfig, RoomId, ServerConfig, TokenClaims};

/// One frame: the server and every client advance 1/64 s.
pub const FRAME: Duration = Duration::from_micros(15_625);

/// The admin token of the test servers.
pub const ADMIN: &str = "test-admin-token";

pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("address")
}

/// A server on free 127.0.0.1 ports with a fixed key, defaults otherwise.
pub fn server() -> DedicatedServer {
    server_with(|_| {})
}

/// [`server`] with `edit` applied to its config.
pub fn server_with(edit: impl FnOnce(&mut ServerConfig)) -> DedicatedServer {
    let mut config = ServerConfig::local(loopback(), loopback(), [9; 32], ADMIN);
    edit(&mut config);
    DedicatedServer::bind(config).expect("server binds")
}

/// A relay room for the test game's input.
pub fn relay_room(players: u8) -> RoomConfig {
    RoomConfig::relay_for::<PackedInput>(players, 64, simsync::net::DEFAULT_MAX_INPUT_BYTES)
        .expect("room config")
}

/// Each player's tally of its inputs' first axis and buttons.
#[derive(Component, Clone, Debug, SimHash)]
pub struct Tally {
    pub player: u8,
    pub sum: i64,
}

/// The test game: one tally per player.
#[derive(Clone)]
pub struct TallyGame {
    pub players: u8,
}

impl Plugin for TallyGame {
    fn build(&self, app: &mut App) {
        let players = self.players;
        app.rollback_hashed_component::<Tally>()
            .add_systems(SimulationStartup, move |mut sim: SimCommands| -> Result {
                for player in 0..players {
                    sim.spawn(Tally { player, sum: 0 })?;
                }
                Ok(())
            })
            .add_systems(SimulationTick, tally.in_set(SimulationSet::Game));
    }
}

fn tally(inputs: Res<PlayerInputs<PackedInput>>, mut tallies: Query<&mut Tally>) {
    for mut tally in &mut tallies {
        if let Some(input) = inputs.get(tally.player) {
            tally.sum += (input.axis(0) * 100.0) as i64 + i64::from(input.pressed(0)) * 1_000;
        }
    }
}

/// A bot's input for `player` at `tick`, different per `salt` (so two rooms play differently).
pub fn bot(salt: u32) -> impl Fn(u8, i32) -> PackedInput + Send + Sync + 'static {
    move |player, tick| {
        let h = (tick.max(0) as u32 / 5)
            .wrapping_mul(2_654_435_761)
            .wrapping_add(salt.wrapping_mul(97) + u32::from(player) * 31);
        let mut input = PackedInput::default();
        input
            .set_axis(0, (h % 201) as f32 / 100.0 - 1.0)
            .expect("valid slot");
        input.set_pressed(0, h & 0b100 == 0).expect("valid slot");
        input
    }
}

/// A client of the test game for `players` players, connected with `token` over UDP.
pub fn client(players: u8, token: ConnectToken, salt: u32) -> App {
    let plugin = DeterministicPlugin::<PackedInput>::new(TallyGame { players })
        .players(players)
        .networked(NetworkSessionConfig::default())
        .edit_config(|c| {
            c.clock = SessionClock::Stepped {
                ticks_per_update: 1,
            };
            c.rollback_window = 60;
            c.checksum_interval = 1;
        });
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::Fixed(FRAME)))
        .add_plugins(plugin)
        .insert_resource(TickInputSource::<PackedInput>::new(bot(salt)));
    let transport = UdpClientTransport::secure(token, loopback()).expect("client socket");
    app.insert_net_client(transport);
    app.finish();
    app.cleanup();
    app
}

/// A token of `server` for `room` and `slot`, as client `client_id`.
pub fn token(server: &DedicatedServer, room: RoomId, slot: u8, client_id: u64) -> ConnectToken {
    server
        .minter()
        .mint(client_id, TokenClaims { room, slot })
        .expect("token")
}

/// One frame of the server and every client.
pub fn frame(server: &mut DedicatedServer, clients: &mut [App]) {
    server.turn(FRAME).expect("server turn");
    for client in clients.iter_mut() {
        client.update();
    }
}

pub fn stats(app: &App) -> SessionStats {
    app.world().resource::<SessionStats>().clone()
}

pub fn lifecycle(app: &App) -> SessionLifecycle {
    app.world().resource::<SessionLifecycle>().clone()
}

/// Frames until every client verified `tick` (panics after `limit`).
pub fn run_until_verified(
    server: &mut DedicatedServer,
    clients: &mut [App],
    tick: i32,
    limit: u32,
) -> u32 {
    let mut frames = 0;
    while clients.iter().any(|c| stats(c).verified_tick < tick) {
        frame(server, clients);
        frames += 1;
        assert!(
            frames < limit,
            "not all verified {tick} in {limit} frames: {:?} / {:?}",
            clients
                .iter()
                .map(|c| stats(c).verified_tick)
                .collect::<Vec<_>>(),
            clients.iter().map(lifecycle).collect::<Vec<_>>()
        );
    }
    frames
}

/// Frames until `done` holds (panics after `limit`).
pub fn run_until(
    server: &mut DedicatedServer,
    clients: &mut [App],
    limit: u32,
    mut done: impl FnMut(&DedicatedServer, &[App]) -> bool,
) -> u32 {
    let mut frames = 0;
    while !done(server, clients) {
        frame(server, clients);
        frames += 1;
        assert!(
            frames < limit,
            "not done in {limit} frames: {:?}",
            clients.iter().map(lifecycle).collect::<Vec<_>>()
        );
    }
    frames
}

/// The verified checksums of `app` by tick.
pub fn checksums(app: &App) -> Vec<(i32, u64)> {
    stats(app)
        .checksum_history
        .iter()
        .map(|c| (c.tick, c.checksum))
        .collect()
}
