//! The network tests' session setup: the client plugin of a game (64 Hz, a checksum every
//! tick), [`RelayPeers`] of the test game with its scripted inputs, a few shorthands over
//! `RelayPeers`, and client/relay Apps for the UDP tests (`RelayPeers` runs in memory only).

use bevy::prelude::*;
use simsync::deterministic::RelayClientStats;
use simsync::deterministic::{NetworkSessionConfig, SessionClock};
use simsync::prelude::*;
use simsync::relay::DeterministicServerPlugin;
use simsync::testing::{ClientIndex, RelayPeers, RelayPeersBuilder, RunLimits};
use simsync_net::prelude::*;
use simsync_net::{ClientMessage, LinkConditionerConfig, NetChannel, NetClock};

use crate::common::{TestGame, scripted_input};

/// The peers of every in-memory network test.
pub type Peers = RelayPeers<PackedInput>;

/// A client plugin of `game`: 64 Hz, rollback window 60, a checksum every tick (the relay
/// compares each), default network settings (chain `.networked(..)`/`.edit_config(..)` to
/// change them).
pub fn plugin(game: impl Plugin + Clone) -> DeterministicPlugin<PackedInput> {
    DeterministicPlugin::<PackedInput>::new(game)
        .config(SessionConfig {
            rollback_window: 60,
            checksum_interval: 1,
            ..Default::default()
        })
        .networked(NetworkSessionConfig::default())
}

/// [`plugin`] with snapshots on (the plugin's capture and load, and the network's).
pub fn snapshot_plugin(
    game: impl Plugin + Clone,
    net: NetworkSessionConfig,
) -> DeterministicPlugin<PackedInput> {
    let net = NetworkSessionConfig {
        snapshots: true,
        ..net
    };
    plugin(game)
        .networked(net)
        .snapshots(simsync::deterministic::SnapshotLimits::default())
}

/// Peers of `players` players whose client `c` runs `make(c)`, playing the scripted inputs over
/// a network seeded 99. No per-component breakdowns are kept: each costs about one checksum per
/// tick, which made the network tests half again as slow; to see what differs in a failing
/// agreement, chain `.breakdowns(256)`.
pub fn peers_of(
    players: u8,
    make: impl Fn(ClientIndex) -> DeterministicPlugin<PackedInput> + Send + Sync + 'static,
) -> RelayPeersBuilder<PackedInput> {
    RelayPeers::builder(players, make)
        .inputs(scripted_input)
        .seed(99)
        .breakdowns(0)
}

/// Peers of the test game (one client per player) over `link`.
pub fn peers(game: TestGame, link: LinkConditionerConfig) -> RelayPeersBuilder<PackedInput> {
    peers_of(game.players, move |_| plugin(game.clone())).link(link)
}

/// Shorthands of the tests over [`Peers`], panicking with the harness's error.
pub trait PeersExt {
    /// Steps until every running client verified `tick`, within `frames` frames.
    fn verify(&mut self, tick: i32, frames: u32) -> i32;
    /// Client `client`'s session stats (it runs).
    fn stats_of(&self, client: ClientIndex) -> SessionStats;
    /// Client `client`'s network stats (it runs).
    fn net_of(&self, client: ClientIndex) -> RelayClientStats;
    /// Sends `bytes` on `channel` straight through client `client`'s renet client.
    fn send_raw(&mut self, client: ClientIndex, channel: NetChannel, bytes: Vec<u8>);
    /// Sends `message`, encoded, on `channel` through client `client`'s renet client.
    fn send(&mut self, client: ClientIndex, channel: NetChannel, message: &ClientMessage) {
        let bytes = simsync_net::encode(message).expect("encodes");
        self.send_raw(client, channel, bytes);
    }
}

impl PeersExt for Peers {
    #[track_caller]
    fn verify(&mut self, tick: i32, frames: u32) -> i32 {
        self.run_until_verified_with(tick, RunLimits::new(frames))
            .unwrap_or_else(|e| panic!("{e}; relay {:?}", self.relay_stats()))
    }

    #[track_caller]
    fn stats_of(&self, client: ClientIndex) -> SessionStats {
        self.stats(client).unwrap_or_else(|e| panic!("{e}"))
    }

    #[track_caller]
    fn net_of(&self, client: ClientIndex) -> RelayClientStats {
        self.stats_of(client).network.expect("networked")
    }

    fn send_raw(&mut self, client: ClientIndex, channel: NetChannel, bytes: Vec<u8>) {
        self.client_mut(client)
            .unwrap_or_else(|e| panic!("{e}"))
            .world_mut()
            .resource_mut::<RenetClient>()
            .send_message(channel, bytes);
    }
}

// --- Apps for the UDP tests and the real-time client ------------------------------------------

/// A relay server App running `relay` (at 64 Hz), without transport.
pub fn server_app_with(relay: DeterministicServerPlugin) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(NetServerPlugin::default().with_clock(NetClock::fixed_hz(64)))
        .add_plugins(relay);
    app
}

/// A client App of `game` (stepped, one tick per update, scripted inputs), without transport.
pub fn client_app(game: TestGame, network: NetworkSessionConfig, window: u32) -> App {
    let players = game.players;
    client_app_configured(game, players, network, window, 64, |p| p)
}

/// A client of `players` players running `game` at `tick_rate_hz`, `configure` applied to the
/// plugin last.
pub fn client_app_configured(
    game: impl Plugin + Clone,
    players: u8,
    network: NetworkSessionConfig,
    window: u32,
    tick_rate_hz: u32,
    configure: impl FnOnce(DeterministicPlugin<PackedInput>) -> DeterministicPlugin<PackedInput>,
) -> App {
    let stepped = |p: DeterministicPlugin<PackedInput>| {
        configure(p.edit_config(|c| {
            c.clock = SessionClock::Stepped {
                ticks_per_update: 1,
            }
        }))
    };
    client_app_clocked(
        game,
        players,
        network,
        window,
        tick_rate_hz,
        NetClock::fixed_hz(64),
        stepped,
    )
}

/// A client App whose network layer advances by `net_clock` per update, `configure` applied to
/// the plugin last (its session clock is the default real time unless `configure` sets one).
pub fn client_app_clocked(
    game: impl Plugin + Clone,
    players: u8,
    network: NetworkSessionConfig,
    window: u32,
    tick_rate_hz: u32,
    net_clock: NetClock,
    configure: impl FnOnce(DeterministicPlugin<PackedInput>) -> DeterministicPlugin<PackedInput>,
) -> App {
    let plugin = plugin(game).edit_config(|c| {
        c.tick_rate = simsync::time::TickRate::new(tick_rate_hz).expect("valid tick rate");
        c.rollback_window = window;
    });
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(NetClientPlugin::default().with_clock(net_clock))
        .add_plugins(configure(plugin.players(players).networked(network)))
        .insert_resource(TickInputSource::<PackedInput>::new(scripted_input));
    app
}
