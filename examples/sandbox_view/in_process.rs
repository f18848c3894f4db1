//! The in-process network the rendered `network` mode draws: the relay and the clients of
//! `sandbox network` over the in-memory transport, one client App being the window's. (The
//! headless run steps the same relay and clients with `simsync::testing::RelayPeers`, which
//! builds headless client Apps only.)

use bevy::log::LogPlugin;
use bevy::prelude::*;
use simsync_net::{ClientTransport, MemoryNetwork};

use super::cli::NetworkArgs;
use super::driver::Failure;
use super::game::SandboxGame;
use super::network::{self, ClientSession};
use super::trace::CompiledTrace;

/// The in-process network of `sandbox network` before its clients join: the link, the relay
/// App and the clients' session settings.
pub struct InProcessNetwork {
    /// The in-memory transport with the link conditioner of `--rtt-ms`, `--net-jitter-ms` and
    /// `--loss-percent`.
    pub network: MemoryNetwork,
    /// The relay server (headless, finished).
    pub server: App,
    /// What every client's session needs besides the game and the trace.
    pub session: ClientSession,
}

impl InProcessNetwork {
    /// The network and relay of `args` (one more slot with `--late-join-at`).
    ///
    /// # Errors
    /// Exit code 2 for a bad link configuration; 1 if the transport cannot be made.
    pub fn new(args: &NetworkArgs, log: Option<LogPlugin>) -> Result<Self, Failure> {
        let session = network::client_session(args);
        let (slots, players) = (session.players, args.session.players);
        let link = network::link(args);
        let network =
            MemoryNetwork::new(0x51_u64, link).map_err(|e| Failure::input(format!("link: {e}")))?;
        let server_transport = network
            .server_transport()
            .map_err(|e| Failure::run(e.to_string()))?;
        let server = network::server_app(slots, players, server_transport.into(), log);
        Ok(Self {
            network,
            server,
            session,
        })
    }

    /// The transport of client `id` (0-based; the late joiner's is the last slot).
    ///
    /// # Errors
    /// Exit code 1 if the in-memory network refuses it.
    pub fn client_transport(&self, id: u8) -> Result<ClientTransport, Failure> {
        self.network
            .client_transport(u64::from(id) + 1)
            .map(Into::into)
            .map_err(|e| Failure::run(e.to_string()))
    }

    /// Headless client `id`, simulating `game`, fed by `trace`, stopping at `ticks`.
    ///
    /// # Errors
    /// As [`InProcessNetwork::client_transport`]; exit code 2 when the session configuration is
    /// rejected.
    pub fn client(
        &self,
        id: u8,
        ticks: u32,
        game: SandboxGame,
        trace: CompiledTrace,
        name: String,
    ) -> Result<App, Failure> {
        let transport = self.client_transport(id)?;
        network::client_app(
            self.session.clone(),
            ticks,
            game,
            trace,
            transport,
            name,
            None,
        )
    }
}

/// The game client `id` simulates: `--plant-desync` nudges client 0's simulation only.
pub fn client_game(args: &NetworkArgs, game: &SandboxGame, id: u8) -> SandboxGame {
    match args.plant_desync {
        Some(tick) if id == 0 => game.clone().with_planted_desync(tick as i32),
        _ => game.clone(),
    }
}
