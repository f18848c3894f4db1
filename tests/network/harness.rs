//! A relay server App and client Apps over a `MemoryNetwork`, stepped with simulated time.

use bevy::prelude::*;
use simsync::deterministic::NetworkSessionConfig;
use simsync::deterministic::SessionClock;
use simsync::prelude::*;
use simsync::relay::{DeterministicServerPlugin, RelayStats};
use simsync::time::TickRate;
use simsync_net::LinkConditionerConfig;
use simsync_net::prelude::*;
use simsync_net::{MemoryNetwork, NetClock};

use crate::common::{TestGame, scripted_input};

/// Writes the scripted input of this client's slot for the tick the next update samples.
fn feed(
    session: Res<DeterministicSession<PackedInput>>,
    stats: Res<SessionStats>,
    mut local: ResMut<LocalInputs<PackedInput>>,
    silent: Option<Res<Silent>>,
) {
    let Some(slot) = stats.network.as_ref().and_then(|n| n.slot) else {
        return;
    };
    if silent.is_some() {
        return;
    }
    let delay = stats.network.as_ref().map_or(0, |n| n.input_delay_ticks) as i32;
    let tick = session.next_poll_tick() + delay;
    let _ = local.set(slot, scripted_input(slot, tick));
}

/// Present on a client that must stop sending (the test removes its transport).
#[derive(Resource)]
pub struct Silent;

pub struct Harness {
    #[allow(dead_code)] // kept alive for the transports; tests may change links
    pub network: MemoryNetwork,
    pub server: App,
    pub clients: Vec<App>,
}

pub fn server_app(players: u8) -> App {
    server_app_with(DeterministicServerPlugin::new::<PackedInput>(players, 64))
}

/// A relay server App running `relay` (at 64 Hz).
pub fn server_app_with(relay: DeterministicServerPlugin) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(NetServerPlugin::default().with_clock(NetClock::fixed_hz(64)))
        .add_plugins(relay);
    app
}

pub fn client_app(game: TestGame, network: NetworkSessionConfig, window: u32) -> App {
    client_app_at(game, network, window, 64)
}

/// A client whose session runs at `tick_rate_hz` (the relay of [`server_app`] runs at 64).
pub fn client_app_at(
    game: TestGame,
    network: NetworkSessionConfig,
    window: u32,
    tick_rate_hz: u32,
) -> App {
    let players = game.players;
    client_app_of(game, players, network, window, tick_rate_hz)
}

/// A client of `players` players running `game` (any game plugin) at `tick_rate_hz`.
pub fn client_app_of(
    game: impl Plugin + Clone,
    players: u8,
    network: NetworkSessionConfig,
    window: u32,
    tick_rate_hz: u32,
) -> App {
    client_app_configured(game, players, network, window, tick_rate_hz, |p| p)
}

/// [`client_app_of`] with `configure` applied to the plugin last.
pub fn client_app_configured(
    game: impl Plugin + Clone,
    players: u8,
    network: NetworkSessionConfig,
    window: u32,
    tick_rate_hz: u32,
    configure: impl FnOnce(DeterministicPlugin<PackedInput>) -> DeterministicPlugin<PackedInput>,
) -> App {
    let net_clock = NetClock::fixed_hz(64);
    client_app_clocked(
        game,
        players,
        network,
        window,
        tick_rate_hz,
        net_clock,
        configure,
    )
}

/// [`client_app_configured`] whose network layer advances by `net_clock` per update.
pub fn client_app_clocked(
    game: impl Plugin + Clone,
    players: u8,
    network: NetworkSessionConfig,
    window: u32,
    tick_rate_hz: u32,
    net_clock: NetClock,
    configure: impl FnOnce(DeterministicPlugin<PackedInput>) -> DeterministicPlugin<PackedInput>,
) -> App {
    let rate = TickRate::new(tick_rate_hz).expect("valid tick rate");
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(NetClientPlugin::default().with_clock(net_clock))
        .add_plugins(configure(
            DeterministicPlugin::<PackedInput>::new(game)
                .config(SessionConfig {
                    tick_rate: rate,
                    rollback_window: window,
                    checksum_interval: 1,
                    clock: SessionClock::Stepped {
                        ticks_per_update: 1,
                    },
                    ..Default::default()
                })
                .players(players)
                .networked(network),
        ))
        .add_systems(PreUpdate, feed.before(DeterministicSet::SessionUpdate));
    app
}

impl Harness {
    /// A server and `players` clients over a network conditioned by `link` in both directions.
    pub fn new(game: TestGame, link: LinkConditionerConfig, net: NetworkSessionConfig) -> Self {
        Self::with_window(game, link, net, 60)
    }

    pub fn with_window(
        game: TestGame,
        link: LinkConditionerConfig,
        net: NetworkSessionConfig,
        window: u32,
    ) -> Self {
        let relay = DeterministicServerPlugin::new::<PackedInput>(game.players, 64);
        Self::with_relay(game, link, net, window, relay)
    }

    /// A harness whose relay server runs `relay`.
    pub fn with_relay(
        game: TestGame,
        link: LinkConditionerConfig,
        net: NetworkSessionConfig,
        window: u32,
        relay: DeterministicServerPlugin,
    ) -> Self {
        let network = MemoryNetwork::new(99, link).expect("valid link");
        let mut server = server_app_with(relay);
        server.insert_net_server(network.server_transport().expect("server"));
        server.finish();
        server.cleanup();
        let mut clients = Vec::new();
        for id in 0..game.players {
            let mut client = client_app(game.clone(), net.clone(), window);
            client.insert_net_client(network.client_transport(u64::from(id) + 1).expect("client"));
            client.finish();
            client.cleanup();
            clients.push(client);
        }
        Self {
            network,
            server,
            clients,
        }
    }

    /// One frame of 1/64 s: the server, then every client.
    pub fn step(&mut self) {
        self.server.update();
        for client in &mut self.clients {
            client.update();
        }
    }

    pub fn stats(&self, client: usize) -> SessionStats {
        self.clients[client]
            .world()
            .resource::<SessionStats>()
            .clone()
    }

    pub fn relay(&self) -> RelayStats {
        self.server.world().resource::<RelayStats>().clone()
    }

    /// Steps until every client verified `tick` (at most `limit` frames).
    pub fn run_until_verified(&mut self, tick: i32, limit: u32) {
        for _ in 0..limit {
            if (0..self.clients.len()).all(|c| self.stats(c).verified_tick >= tick) {
                return;
            }
            self.step();
        }
        panic!(
            "not all clients verified tick {tick}: {:?} / relay {:?}",
            (0..self.clients.len())
                .map(|c| (self.stats(c).verified_tick, self.stats(c).network))
                .collect::<Vec<_>>(),
            self.relay()
        );
    }

    /// Whether every pair of clients agrees on every checksum both recorded.
    pub fn checksums_agree(&self) -> (usize, usize) {
        let histories: Vec<Vec<_>> = (0..self.clients.len())
            .map(|c| self.stats(c).checksum_history)
            .collect();
        let n = histories.iter().map(Vec::len).min().unwrap_or(0);
        let mismatches = (0..n)
            .filter(|i| histories.iter().any(|h| h[*i] != histories[0][*i]))
            .count();
        (n, mismatches)
    }
}
