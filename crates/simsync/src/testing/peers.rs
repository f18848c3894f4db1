//! [`RelayPeers`]: a relay server App and client Apps over the in-memory transport, stepped
//! together one tick per frame.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use bevy::prelude::*;
use simsync_deterministic::testing::{RunLimits, RunUntilError, SessionWatch};
use simsync_deterministic::{
    ComponentBreakdown, DeterministicPlugin, HookFlow, PlayerIndex, SessionClock, SessionError,
    SessionLifecycle, SessionSetupError, SessionState, SessionStats, SimInput, Tick, TickChecksum,
    TickInputSource, VerifiedTick, VerifiedTickHook, VerifiedTickHookAppExt,
};
use simsync_net::prelude::*;
use simsync_net::testing::{PeerNetwork, PeerNetworkError};
use simsync_net::{Direction, LinkConditionerConfig, MemoryClientTransport, ReconnectToken};
use simsync_relay::{
    DeterministicServerPlugin, MatchEndReason, MatchId, MatchPhase, RelayCommand, RelayServer,
    RelayStats,
};
use thiserror::Error;

use super::agreement::{
    Agreement, Disagreement, breakdown_difference, compare_histories, differing_pair,
};
use super::checks::{ForcedRollbackPlugin, HarnessChecks};

/// A client of the harness: 0 for the first, in the order they were made (a rejoined client
/// keeps its index; a late joiner gets the next one).
pub type ClientIndex = usize;

/// Verified-tick breakdowns each client keeps by default (see
/// [`RelayPeersBuilder::breakdowns`]).
pub const DEFAULT_KEPT_BREAKDOWNS: usize = 256;

type PluginFn<I> = Arc<dyn Fn(ClientIndex) -> DeterministicPlugin<I> + Send + Sync>;
type AppFn = Arc<dyn Fn(ClientIndex, &mut App) + Send + Sync>;
type RelayFn = Box<dyn FnOnce(&mut App)>;
type BreakdownLog = Arc<Mutex<VecDeque<ComponentBreakdown>>>;

/// Why the harness could not build, step or change a peer.
#[derive(Debug, Error)]
pub enum PeersError {
    /// The in-memory network refused a link or a transport (an invalid conditioner), or no
    /// client has the index, or it is killed (for what needs it running) or running (for a
    /// rejoin); the client is the network's peer of the same index.
    #[error("{0}")]
    Network(#[from] PeerNetworkError),
    /// A client's session configuration was refused when its App was built.
    #[error("client {client}: the session setup failed: {error}")]
    Setup {
        /// The client.
        client: ClientIndex,
        /// Why ([`SessionSetupError`]'s error).
        error: SessionError,
    },
    /// A client stopped on a problem its session reported (desync, prediction mismatch, stall,
    /// unregistered simulation event, rejected or disconnected); see [`RunUntilError`].
    #[error("client {client}: {error}")]
    Client {
        /// The client.
        client: ClientIndex,
        /// What its session reported.
        error: RunUntilError,
    },
    /// The update budget ran out before every running client verified the target tick.
    #[error(
        "verified ticks {verified:?} of {target} after {updates} updates (client states: \
         {states:?}; None = killed)"
    )]
    Timeout {
        /// The tick asked for.
        target: Tick,
        /// Every client's verified tick (`None`: killed).
        verified: Vec<Option<Tick>>,
        /// Updates run.
        updates: u32,
        /// Every client's lifecycle state (`None`: killed), e.g. `WaitingForPlayers` while
        /// seats are empty.
        states: Vec<Option<SessionState>>,
    },
    /// The slowest running client's verified tick did not move for this many updates.
    #[error(
        "the slowest client stayed at verified tick {verified_tick} for {updates} updates \
         (client states: {states:?}; None = killed)"
    )]
    NoProgress {
        /// Where it stopped.
        verified_tick: Tick,
        /// Updates without progress.
        updates: u32,
        /// Every client's lifecycle state (`None`: killed).
        states: Vec<Option<SessionState>>,
    },
    /// Every client is killed or paused: nothing could verify the tick.
    #[error("no client is running and unpaused: nothing can verify tick {0}")]
    NoClientRunning(Tick),
    /// [`RelayPeers::builder`] with 0 players.
    #[error("a session needs at least one player (the harness was given 0)")]
    NoPlayers,
    /// More clients than seats at build ([`RelayPeersBuilder::clients`]). ([`RelayPeers::join`]
    /// beyond the seats is allowed: the relay refuses the client, which is what a test of that
    /// refusal wants.)
    #[error(
        "no free seat: {players} players and {clients} clients would be made; give more players"
    )]
    NoFreeSeat {
        /// Seats (the harness's players).
        players: PlayerIndex,
        /// Clients there would be.
        clients: usize,
    },
    /// [`RelayPeers::rejoin`] of a client that never got a reconnect token (it was killed
    /// before the relay welcomed it).
    #[error("client {0} has no reconnect token: it was never welcomed")]
    NoReconnectToken(ClientIndex),
    /// [`RelayPeers::agreement_of`]: the client's verified checksums differ from another's.
    #[error("{0}")]
    Disagreement(Box<Disagreement>),
    /// [`RelayPeers::rematch`]: the relay did not open a next match (its match is in its lobby:
    /// it has not started, so there is nothing to end).
    #[error("the relay refused the rematch: {match_id:?} is in phase {phase:?}")]
    RematchRefused {
        /// The relay's match.
        match_id: MatchId,
        /// Its phase.
        phase: MatchPhase,
    },
    /// [`RelayPeers::rematch`]: not every running client played the next match within the
    /// frames allowed.
    #[error(
        "clients did not reach {match_id:?} in {frames} frames (client matches: {matches:?}; \
         states: {states:?}; None = killed)"
    )]
    MatchNotReached {
        /// The match the relay opened.
        match_id: MatchId,
        /// Frames stepped.
        frames: u32,
        /// Every client's match (`None`: killed or not welcomed).
        matches: Vec<Option<MatchId>>,
        /// Every client's lifecycle state (`None`: killed).
        states: Vec<Option<SessionState>>,
    },
}

/// How a [`RelayPeers`] is made: the players, each client's plugin, the relay, the link, the
/// inputs. Made by [`RelayPeers::builder`]; [`build`](Self::build) makes the Apps.
pub struct RelayPeersBuilder<I: SimInput> {
    players: PlayerIndex,
    clients: Option<usize>,
    make_plugin: PluginFn<I>,
    customize: Option<AppFn>,
    customize_relay: Option<RelayFn>,
    relay: Option<DeterministicServerPlugin>,
    link: LinkConditionerConfig,
    seed: u64,
    inputs: Option<TickInputSource<I>>,
    breakdowns: usize,
    tolerate_desyncs: bool,
    checks: HarnessChecks,
    side_servers: Vec<App>,
}

impl<I: SimInput> RelayPeersBuilder<I> {
    /// Another server App (an entity server, on its own in-memory network) stepped with the
    /// harness: every [`step`](RelayPeers::step) updates it first, before the relay and the
    /// clients. Read it back with [`RelayPeers::side_server`]; `simsync::testing::HybridPeers`
    /// gives its clients' ownership participants an entity server this way.
    pub fn side_server(mut self, app: App) -> Self {
        self.side_servers.push(app);
        self
    }

    /// The checks every client's session runs on top of the game's configuration (default
    /// [`HarnessChecks::ON`]: prediction checks, a checksum every tick and a forced rollback of
    /// at least [`DEFAULT_FORCED_ROLLBACK`](super::DEFAULT_FORCED_ROLLBACK) ticks every
    /// [`DEFAULT_FORCED_ROLLBACK_EVERY`](super::DEFAULT_FORCED_ROLLBACK_EVERY) updates).
    /// [`HarnessChecks::OFF`] runs each session exactly as the game's plugin configured it: a
    /// test of the game's own settings (a checksum interval, rollback counts) or a long run
    /// that cannot pay the checks.
    pub fn checks(mut self, checks: HarnessChecks) -> Self {
        self.checks = checks;
        self
    }

    /// Runs `customize(app)` on the relay App after `MinimalPlugins` and before the network
    /// server and the relay plugin (a `LogPlugin`, message readers, extra resources).
    pub fn customize_relay(mut self, customize: impl FnOnce(&mut App) + 'static) -> Self {
        self.customize_relay = Some(Box::new(customize));
        self
    }

    /// Clients to start with (default: one per player). Fewer leave seats for
    /// [`RelayPeers::join`] (give the relay [`start_players`](DeterministicServerPlugin::start_players)
    /// through [`relay`](Self::relay)).
    pub fn clients(mut self, clients: usize) -> Self {
        self.clients = Some(clients);
        self
    }

    /// The link of every client, both directions (default: perfect, no delay).
    pub fn link(mut self, link: LinkConditionerConfig) -> Self {
        self.link = link;
        self
    }

    /// The seed of the link conditioner's loss and jitter (default 1).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The relay server plugin (default `DeterministicServerPlugin::new::<I>(players, hz)` at
    /// the clients' tick rate).
    pub fn relay(mut self, relay: DeterministicServerPlugin) -> Self {
        self.relay = Some(relay);
        self
    }

    /// Every client's local players play `input(player, tick)` (a [`TickInputSource`] in each
    /// client App). Without it, clients send whatever the game writes to `LocalInputs`.
    pub fn inputs(
        mut self,
        input: impl Fn(PlayerIndex, Tick) -> I + Send + Sync + 'static,
    ) -> Self {
        self.inputs = Some(TickInputSource::new(input));
        self
    }

    /// Runs `customize(client, app)` on every client App after its plugins are added and before
    /// it is finished (input systems, message readers, extra resources).
    pub fn customize(
        mut self,
        customize: impl Fn(ClientIndex, &mut App) + Send + Sync + 'static,
    ) -> Self {
        self.customize = Some(Arc::new(customize));
        self
    }

    /// Per-component breakdowns of the most recent `keep` checksum ticks each client keeps, so
    /// a [`Disagreement`] can name what differs (default [`DEFAULT_KEPT_BREAKDOWNS`]; 0: none,
    /// and no cost). Each costs about one checksum to compute.
    pub fn breakdowns(mut self, keep: usize) -> Self {
        self.breakdowns = keep;
        self
    }

    /// Desync reports (a `DesyncDetected` message on a client) no longer stop
    /// [`run_until_verified`](RelayPeers::run_until_verified) and
    /// [`run_frames`](RelayPeers::run_frames): for tests of desync detection itself, which
    /// desync a client (or forge its checksums) on purpose and read the reports.
    /// [`agreement`](RelayPeers::agreement) still compares every verified checksum.
    pub fn tolerate_desyncs(mut self) -> Self {
        self.tolerate_desyncs = true;
        self
    }

    /// Makes the relay App and every client App, connected to an in-memory network with the
    /// link; nothing is stepped yet.
    ///
    /// # Errors
    /// [`PeersError::Network`] for an invalid link; [`PeersError::Setup`] when a client's
    /// session configuration is refused.
    pub fn build(self) -> Result<RelayPeers<I>, PeersError> {
        if self.players == 0 {
            return Err(PeersError::NoPlayers);
        }
        let clients = self.clients.unwrap_or(usize::from(self.players));
        if clients > usize::from(self.players) {
            return Err(PeersError::NoFreeSeat {
                players: self.players,
                clients,
            });
        }
        let hz = (self.make_plugin)(0).session_config().tick_rate.hz();
        let relay_plugin = match self.relay {
            Some(relay) => relay,
            None => DeterministicServerPlugin::new::<I>(
                self.players,
                u16::try_from(hz).unwrap_or(u16::MAX),
            ),
        };
        let customize_relay = self.customize_relay;
        let net = PeerNetwork::new(self.seed, self.link, self.link, |transport| {
            let mut relay = App::new();
            relay.add_plugins(MinimalPlugins);
            if let Some(customize) = customize_relay {
                customize(&mut relay);
            }
            relay
                .add_plugins(NetServerPlugin::default().with_clock(NetClock::fixed_hz(hz)))
                .add_plugins(relay_plugin)
                .insert_net_server(transport);
            relay.finish();
            relay.cleanup();
            Ok::<_, PeersError>(relay)
        })?;
        let mut peers = RelayPeers {
            net,
            spec: ClientSpec {
                players: self.players,
                hz,
                make_plugin: self.make_plugin,
                customize: self.customize,
                inputs: self.inputs,
                breakdowns: self.breakdowns,
                checks: self.checks,
            },
            tolerate_desyncs: self.tolerate_desyncs,
            side_servers: self.side_servers,
        };
        for _ in 0..clients {
            peers.join()?;
        }
        Ok(peers)
    }
}

/// What every client App is built from.
struct ClientSpec<I: SimInput> {
    players: PlayerIndex,
    hz: u32,
    make_plugin: PluginFn<I>,
    customize: Option<AppFn>,
    inputs: Option<TickInputSource<I>>,
    breakdowns: usize,
    checks: HarnessChecks,
}

/// What the harness keeps of a client beside its App (the network's record of the peer): the
/// watch of its session while it runs, its breakdowns, and once killed its last history and
/// reconnect token.
struct ClientRecord {
    watch: Option<SessionWatch>,
    breakdowns: BreakdownLog,
    history: Vec<TickChecksum>,
    token: Option<ReconnectToken>,
}

/// A relay server and clients of a deterministic game in one process, over the in-memory
/// transport with a seeded link conditioner, stepped together: each
/// [`step`](Self::step) updates the relay, then every running client, once (one tick of
/// simulated time; every session's clock is `Stepped { ticks_per_update: 1 }`).
///
/// Each client App is `MinimalPlugins`, the network client and the plugin the game's closure
/// returns for that client (made networked, with the harness's player count); see the
/// [module docs](super) for a whole test. The network, links, pauses, kills and rejoins are a
/// [`PeerNetwork`] whose server is the relay and whose peers are the clients.
pub struct RelayPeers<I: SimInput> {
    net: PeerNetwork<ClientRecord>,
    spec: ClientSpec<I>,
    tolerate_desyncs: bool,
    side_servers: Vec<App>,
}

impl<I: SimInput> RelayPeers<I> {
    /// A harness of `players` players whose client `c` runs `make_plugin(c)` (called again when
    /// a client rejoins). Configure it with the builder's methods, then
    /// [`build`](RelayPeersBuilder::build).
    pub fn builder(
        players: PlayerIndex,
        make_plugin: impl Fn(ClientIndex) -> DeterministicPlugin<I> + Send + Sync + 'static,
    ) -> RelayPeersBuilder<I> {
        RelayPeersBuilder {
            players,
            clients: None,
            make_plugin: Arc::new(make_plugin),
            customize: None,
            customize_relay: None,
            relay: None,
            link: LinkConditionerConfig::PERFECT,
            seed: 1,
            inputs: None,
            breakdowns: DEFAULT_KEPT_BREAKDOWNS,
            tolerate_desyncs: false,
            checks: HarnessChecks::ON,
            side_servers: Vec::new(),
        }
    }

    /// One frame: the [side servers](RelayPeersBuilder::side_server), the relay, then every
    /// running client that is not paused.
    pub fn step(&mut self) {
        for server in &mut self.side_servers {
            server.update();
        }
        self.net.step();
    }

    /// Side server `index` ([`RelayPeersBuilder::side_server`], in the order given).
    pub fn side_server(&self, index: usize) -> Option<&App> {
        self.side_servers.get(index)
    }

    /// Side server `index`, mutably.
    pub fn side_server_mut(&mut self, index: usize) -> Option<&mut App> {
        self.side_servers.get_mut(index)
    }

    /// Steps until every running client that is not paused verified `tick` of the relay's
    /// current match (at most `4 × tick + 2,000` frames, saturating at `u32::MAX`: give a far
    /// target explicit limits with [`run_until_verified_with`](Self::run_until_verified_with));
    /// returns the lowest of their verified ticks.
    ///
    /// It always steps at least one frame, then stops as soon as the target is reached: a
    /// command written to the relay before the call (a `RelayCommand::Rematch` through
    /// [`relay_mut`](Self::relay_mut)) is taken in that frame. A client still playing an
    /// earlier match than the relay's counts as having verified nothing of it, so after a
    /// rematch this runs the next match to `tick`, it does not return on the ended match's ticks
    /// ([`rematch`](Self::rematch) does both steps and checks them).
    ///
    /// # Errors
    /// As [`run_until_verified_with`](Self::run_until_verified_with).
    pub fn run_until_verified(&mut self, tick: Tick) -> Result<Tick, PeersError> {
        let budget = u32::try_from(tick.max(0)).unwrap_or(u32::MAX);
        let limit = budget.saturating_mul(4).saturating_add(2_000);
        self.run_until_verified_with(tick, RunLimits::new(limit))
    }

    /// [`run_until_verified`](Self::run_until_verified) with explicit limits.
    ///
    /// # Errors
    /// After each frame, the first client (by index) whose session reported a problem, as
    /// [`PeersError::Client`] (desync, prediction mismatch, unregistered simulation event,
    /// rejected or disconnected — [`RunUntilError`]; desyncs not with
    /// [`tolerate_desyncs`](RelayPeersBuilder::tolerate_desyncs)); then
    /// [`PeersError::NoProgress`] and [`PeersError::Timeout`] as the limits say. A stall (an outage, a paused peer) is waited
    /// out: it counts against `max_updates_without_progress` only.
    pub fn run_until_verified_with(
        &mut self,
        tick: Tick,
        limits: RunLimits,
    ) -> Result<Tick, PeersError> {
        let mut last = self.slowest();
        if last.is_none() {
            return Err(PeersError::NoClientRunning(tick));
        }
        let mut idle = 0u32;
        for _ in 0..limits.max_updates {
            self.step();
            self.check()?;
            let now = self.slowest();
            if let Some(reached) = now.filter(|t| *t >= tick) {
                return Ok(reached);
            }
            // Any move counts: the slowest tick drops to 0 when a rematch resets the clients.
            if now != last || self.any_waiting() {
                last = now;
                idle = 0;
            } else {
                idle += 1;
            }
            if idle >= limits.max_updates_without_progress {
                return Err(PeersError::NoProgress {
                    verified_tick: now.unwrap_or(0),
                    updates: idle,
                    states: self.states(),
                });
            }
        }
        Err(PeersError::Timeout {
            target: tick,
            verified: self.verified_ticks(),
            updates: limits.max_updates,
            states: self.states(),
        })
    }

    /// Ends the relay's running match and opens the next on the same connections
    /// (`RelayCommand::Rematch` with reason `Completed`), then steps until every running,
    /// unpaused client plays the new match (its session rebuilt from tick 0 and `Running`, at
    /// most `max_frames` frames); returns the new match. Then
    /// [`run_until_verified`](Self::run_until_verified) runs it and
    /// [`assert_all_agree`](Self::assert_all_agree) compares its checksums (every client's
    /// history starts over with the match; a killed client keeps the one it had).
    ///
    /// # Errors
    /// [`PeersError::RematchRefused`] when the relay's match has not started (a lobby: nothing
    /// to end); [`PeersError::MatchNotReached`] when a client did not play the new match in
    /// time; [`PeersError::Client`] for a problem a session reported while stepping;
    /// [`PeersError::NoClientRunning`] without a running, unpaused client.
    pub fn rematch(&mut self, max_frames: u32) -> Result<MatchId, PeersError> {
        let before = self.relay_match();
        let relay = self.net.server_mut().world_mut();
        relay.write_message(RelayCommand::Rematch {
            reason: MatchEndReason::Completed,
        });
        self.step();
        self.check()?;
        // The relay App always holds the relay server (the builder adds it).
        let server = self.net.server().world().get_resource::<RelayServer>();
        let next = server.map_or(MatchId::FIRST, RelayServer::match_id);
        if Some(next) == before || server.is_none() {
            return Err(PeersError::RematchRefused {
                match_id: next,
                phase: server.map_or(MatchPhase::Lobby, RelayServer::phase),
            });
        }
        for _ in 1..max_frames {
            if self.all_playing(next)? {
                return Ok(next);
            }
            self.step();
            self.check()?;
        }
        if self.all_playing(next)? {
            return Ok(next);
        }
        Err(PeersError::MatchNotReached {
            match_id: next,
            frames: max_frames,
            matches: self.matches(),
            states: self.states(),
        })
    }

    /// Whether every running, unpaused client plays match `id` and runs it.
    fn all_playing(&self, id: MatchId) -> Result<bool, PeersError> {
        let mut running = self.net.unpaused().peekable();
        if running.peek().is_none() {
            return Err(PeersError::NoClientRunning(0));
        }
        Ok(running.all(|app| {
            let world = app.world();
            let playing = world
                .get_resource::<SessionStats>()
                .and_then(|s| s.network.as_ref().and_then(|n| n.match_id));
            let state = world.get_resource::<SessionLifecycle>().map(|l| l.state);
            playing == Some(id) && state == Some(SessionState::Running)
        }))
    }

    /// Steps `frames` frames, stopping at the first problem a client's session reports.
    ///
    /// # Errors
    /// [`PeersError::Client`], as in [`run_until_verified_with`](Self::run_until_verified_with).
    pub fn run_frames(&mut self, frames: u32) -> Result<(), PeersError> {
        for _ in 0..frames {
            self.step();
            self.check()?;
        }
        Ok(())
    }

    /// Compares every client's verified checksums (killed clients' as they were when killed):
    /// every tick two or more clients hold must carry one checksum.
    ///
    /// # Errors
    /// The first differing tick, every client's checksum of it, and — when both clients kept
    /// their breakdown of it — the components, entity slots and resources that differ.
    pub fn agreement(&self) -> Result<Agreement, Disagreement> {
        let histories: Vec<Vec<TickChecksum>> =
            (0..self.net.len()).map(|c| self.history(c)).collect();
        self.compare(&histories)
    }

    /// [`agreement`](Self::agreement) of one client with the others: every verified checksum
    /// `client` holds must equal the checksum of that tick every other client holds (a late
    /// joiner, or a client rejoined, agrees from its first verified tick). The
    /// [`Agreement`] counts the ticks of `client` that another client holds.
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`]; [`PeersError::Disagreement`] with the first of its ticks
    /// where a checksum differs, as [`agreement`](Self::agreement) reports it.
    pub fn agreement_of(&self, client: ClientIndex) -> Result<Agreement, PeersError> {
        self.net.state(client)?;
        let ticks: BTreeSet<Tick> = self.history(client).iter().map(|c| c.tick).collect();
        let histories: Vec<Vec<TickChecksum>> = (0..self.net.len())
            .map(|c| {
                let mut history = self.history(c);
                history.retain(|t| ticks.contains(&t.tick));
                history
            })
            .collect();
        self.compare(&histories)
            .map_err(|d| PeersError::Disagreement(Box::new(d)))
    }

    /// Compares `histories` (by client), naming what differs from the kept breakdowns.
    fn compare(&self, histories: &[Vec<TickChecksum>]) -> Result<Agreement, Disagreement> {
        let refs: Vec<&[TickChecksum]> = histories.iter().map(Vec::as_slice).collect();
        compare_histories(&refs).map_err(|mut disagreement| {
            disagreement.breakdown = differing_pair(&disagreement.checksums).and_then(|(a, b)| {
                let left = self.breakdown_of(a, disagreement.tick)?;
                let right = self.breakdown_of(b, disagreement.tick)?;
                Some(Box::new(breakdown_difference((a, b), &left, &right)))
            });
            disagreement
        })
    }

    /// [`agreement`](Self::agreement), panicking with the [`Disagreement`] (first differing
    /// tick, checksums, breakdown) when clients disagree, or when no tick was compared at all.
    ///
    /// # Panics
    /// On a disagreement, or when no two clients share a verified checksum.
    #[track_caller]
    pub fn assert_all_agree(&self) -> Agreement {
        match self.agreement() {
            Ok(agreement) if agreement.ticks_compared > 0 => agreement,
            Ok(_) => panic!("no verified checksum is held by two clients: nothing was compared"),
            Err(disagreement) => panic!("{disagreement}"),
        }
    }

    /// Client `client`'s link, both directions, from now on.
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`]; [`PeerNetworkError::Network`] for an invalid link.
    pub fn set_link(
        &mut self,
        client: ClientIndex,
        link: LinkConditionerConfig,
    ) -> Result<(), PeersError> {
        Ok(self.net.set_link(client, link)?)
    }

    /// Client `client`'s link in one direction, from now on.
    ///
    /// # Errors
    /// As [`set_link`](Self::set_link).
    pub fn set_link_direction(
        &mut self,
        client: ClientIndex,
        direction: Direction,
        link: LinkConditionerConfig,
    ) -> Result<(), PeersError> {
        Ok(self.net.set_link_direction(client, direction, link)?)
    }

    /// An outage: every packet of client `client` is lost, both ways, until
    /// [`restore_link`](Self::restore_link) (the link does not close).
    ///
    /// # Errors
    /// As [`set_link`](Self::set_link).
    pub fn cut_link(&mut self, client: ClientIndex) -> Result<(), PeersError> {
        Ok(self.net.cut_link(client)?)
    }

    /// Client `client`'s link back to the harness's link.
    ///
    /// # Errors
    /// As [`set_link`](Self::set_link).
    pub fn restore_link(&mut self, client: ClientIndex) -> Result<(), PeersError> {
        Ok(self.net.restore_link(client)?)
    }

    /// Stops updating client `client` (its App freezes, as a process that hangs), until
    /// [`resume`](Self::resume). Paused clients are not waited for by
    /// [`run_until_verified`](Self::run_until_verified).
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`], [`PeerNetworkError::NotRunning`].
    pub fn pause(&mut self, client: ClientIndex) -> Result<(), PeersError> {
        Ok(self.net.pause(client)?)
    }

    /// Updates client `client` again from the next frame, from where it froze (its session
    /// catches up on its own, as after a hang: the frames it missed are not run).
    ///
    /// # Errors
    /// As [`pause`](Self::pause).
    pub fn resume(&mut self, client: ClientIndex) -> Result<(), PeersError> {
        self.net.resume(client)?;
        Ok(())
    }

    /// Kills client `client`: its App and transport are dropped (the relay sees the connection
    /// close). Its checksum history stays in [`agreement`](Self::agreement).
    ///
    /// # Errors
    /// As [`pause`](Self::pause).
    pub fn kill(&mut self, client: ClientIndex) -> Result<(), PeersError> {
        let app = self.net.kill(client)?;
        let stats = app.world().get_resource::<SessionStats>();
        let record = self.net.record_mut(client)?;
        record.history = stats
            .map(|s| s.checksum_history.clone())
            .unwrap_or_default();
        record.token = stats
            .and_then(|s| s.network.as_ref())
            .and_then(|n| n.reconnect_token);
        record.watch = None;
        Ok(())
    }

    /// A killed client comes back into its seat: a new App from the game's closure with the
    /// reconnect token of its last welcome, on a new transport.
    ///
    /// # Errors
    /// [`PeerNetworkError::StillRunning`], [`PeersError::NoReconnectToken`], or the errors of
    /// [`RelayPeersBuilder::build`].
    pub fn rejoin(&mut self, client: ClientIndex) -> Result<(), PeersError> {
        let token = self.net.record(client)?.token;
        if self.net.is_running(client) {
            return Err(PeerNetworkError::StillRunning(client).into());
        }
        let token = token.ok_or(PeersError::NoReconnectToken(client))?;
        let spec = &self.spec;
        let old = self.net.rejoin(client, |client, transport| {
            make_client(spec, client, transport, Some(token))
        })?;
        self.net.record_mut(client)?.history = old.history;
        Ok(())
    }

    /// A new client, with the next index: a late joiner when the session runs (the relay needs
    /// a free seat and snapshots); beyond the seats, the relay refuses it.
    ///
    /// # Errors
    /// As [`RelayPeersBuilder::build`].
    pub fn join(&mut self) -> Result<ClientIndex, PeersError> {
        let spec = &self.spec;
        self.net
            .join(|client, transport| make_client(spec, client, transport, None))
    }

    /// Clients made so far (running or killed).
    pub fn clients(&self) -> usize {
        self.net.len()
    }

    /// Whether client `client` runs (made and not killed; paused or not).
    pub fn is_running(&self, client: ClientIndex) -> bool {
        self.net.is_running(client)
    }

    /// Whether client `client` runs and is paused.
    pub fn is_paused(&self, client: ClientIndex) -> bool {
        self.net.is_paused(client)
    }

    /// Client `client`'s App.
    ///
    /// # Errors
    /// [`PeerNetworkError::UnknownPeer`], [`PeerNetworkError::NotRunning`].
    pub fn client(&self, client: ClientIndex) -> Result<&App, PeersError> {
        Ok(self.net.app(client)?)
    }

    /// Client `client`'s App, mutably.
    ///
    /// # Errors
    /// As [`client`](Self::client).
    pub fn client_mut(&mut self, client: ClientIndex) -> Result<&mut App, PeersError> {
        Ok(self.net.app_mut(client)?)
    }

    /// Client `client`'s [`SessionStats`].
    ///
    /// # Errors
    /// As [`client`](Self::client).
    pub fn stats(&self, client: ClientIndex) -> Result<SessionStats, PeersError> {
        let app = self.client(client)?;
        Ok(app
            .world()
            .get_resource::<SessionStats>()
            .cloned()
            .unwrap_or_default())
    }

    /// The relay server's App and every running client's App (in client order), mutably, at
    /// once (e.g. to read every world for a summary).
    pub fn apps_mut(&mut self) -> (&mut App, Vec<&mut App>) {
        self.net.apps_mut()
    }

    /// The relay server's App.
    pub fn relay(&self) -> &App {
        self.net.server()
    }

    /// The relay server's App, mutably.
    pub fn relay_mut(&mut self) -> &mut App {
        self.net.server_mut()
    }

    /// The relay's [`RelayStats`].
    pub fn relay_stats(&self) -> RelayStats {
        self.relay()
            .world()
            .get_resource::<RelayStats>()
            .cloned()
            .unwrap_or_default()
    }

    /// The in-memory network (link counters, per-direction links).
    pub fn network(&self) -> &MemoryNetwork {
        self.net.network()
    }

    /// Every client's lifecycle state (`None`: killed).
    pub fn states(&self) -> Vec<Option<SessionState>> {
        (0..self.net.len())
            .map(|c| {
                let app = self.net.app(c).ok()?;
                app.world()
                    .get_resource::<SessionLifecycle>()
                    .map(|l| l.state)
            })
            .collect()
    }

    /// Every client's verified tick (`None`: killed).
    pub fn verified_ticks(&self) -> Vec<Option<Tick>> {
        (0..self.net.len())
            .map(|c| self.stats(c).ok().map(|s| s.verified_tick))
            .collect()
    }

    /// The lowest verified tick of the running, unpaused clients (`None` without any); a client
    /// whose session plays another match than the relay's counts as 0.
    fn slowest(&self) -> Option<Tick> {
        let current = self.relay_match();
        self.net
            .unpaused()
            .map(|app| {
                app.world()
                    .get_resource::<SessionStats>()
                    .filter(|s| {
                        let playing = s.network.as_ref().and_then(|n| n.match_id);
                        current.is_none() || playing.is_none() || playing == current
                    })
                    .map_or(0, |s| s.verified_tick)
            })
            .min()
    }

    /// The relay's current match (`None` when the relay App has no relay server).
    fn relay_match(&self) -> Option<MatchId> {
        self.relay()
            .world()
            .get_resource::<RelayServer>()
            .map(RelayServer::match_id)
    }

    /// Every client's match, as its session says (`None`: killed, or not welcomed yet).
    pub fn matches(&self) -> Vec<Option<MatchId>> {
        (0..self.net.len())
            .map(|c| {
                let stats = self
                    .net
                    .app(c)
                    .ok()?
                    .world()
                    .get_resource::<SessionStats>()?;
                stats.network.as_ref().and_then(|n| n.match_id)
            })
            .collect()
    }

    /// Whether a running client is still connecting or waiting for players.
    fn any_waiting(&self) -> bool {
        self.net.running().any(|(_, app)| {
            app.world()
                .get_resource::<SessionLifecycle>()
                .is_some_and(|l| {
                    matches!(
                        l.state,
                        SessionState::Connecting | SessionState::WaitingForPlayers
                    )
                })
        })
    }

    /// The first problem a running client reported since the last check. A stall is not one:
    /// outages and paused peers stall the others until they resume, which the progress limit
    /// watches instead.
    fn check(&mut self) -> Result<(), PeersError> {
        let tolerate_desyncs = self.tolerate_desyncs;
        for (client, app, record) in self.net.running_mut() {
            if let Some(watch) = &mut record.watch {
                match watch.check(app.world()) {
                    Ok(()) | Err(RunUntilError::Stalled { .. }) => {}
                    Err(RunUntilError::Desync(_)) if tolerate_desyncs => {}
                    Err(error) => return Err(PeersError::Client { client, error }),
                }
            }
        }
        Ok(())
    }

    fn history(&self, client: ClientIndex) -> Vec<TickChecksum> {
        match self.stats(client) {
            Ok(stats) => stats.checksum_history,
            Err(_) => self
                .net
                .record(client)
                .map(|r| r.history.clone())
                .unwrap_or_default(),
        }
    }

    fn breakdown_of(&self, client: ClientIndex, tick: Tick) -> Option<ComponentBreakdown> {
        let log = self.net.record(client).ok()?.breakdowns.lock();
        let log = log.unwrap_or_else(PoisonError::into_inner);
        log.iter().find(|b| b.tick == tick).cloned()
    }
}

/// A new client App for index `client` around its transport, finished, and its record.
fn make_client<I: SimInput>(
    spec: &ClientSpec<I>,
    client: ClientIndex,
    transport: MemoryClientTransport,
    rejoin: Option<ReconnectToken>,
) -> Result<(App, ClientRecord), PeersError> {
    let mut app = client_app(spec, client, rejoin);
    app.insert_net_client(transport);
    app.finish();
    app.cleanup();
    if let Some(SessionSetupError(error)) = app.world().get_resource::<SessionSetupError>() {
        let error = error.clone();
        return Err(PeersError::Setup { client, error });
    }
    let breakdowns = BreakdownLog::default();
    if spec.breakdowns > 0 {
        let hook = KeepBreakdowns {
            log: breakdowns.clone(),
            keep: spec.breakdowns,
        };
        app.add_verified_tick_hook::<I>(hook)
            .map_err(|error| PeersError::Setup { client, error })?;
    }
    let watch =
        SessionWatch::new(app.world()).map_err(|error| PeersError::Client { client, error })?;
    let record = ClientRecord {
        watch: Some(watch),
        breakdowns,
        history: Vec::new(),
        token: None,
    };
    Ok((app, record))
}

impl<I: SimInput> std::fmt::Debug for RelayPeers<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayPeers")
            .field("players", &self.spec.players)
            .field("verified_ticks", &self.verified_ticks())
            .field("states", &self.states())
            .finish_non_exhaustive()
    }
}

/// Client `client`'s App before its transport: `MinimalPlugins`, the network client at the tick
/// rate, the game's plugin made networked and stepped, the scripted inputs, the customization.
fn client_app<I: SimInput>(
    spec: &ClientSpec<I>,
    client: ClientIndex,
    rejoin: Option<ReconnectToken>,
) -> App {
    let plugin = (spec.make_plugin)(client);
    let mut network = plugin.session_config().network.unwrap_or_default();
    if rejoin.is_some() {
        network.rejoin = rejoin;
    }
    if network.name.is_empty() {
        network.name = format!("client-{client}");
    }
    let plugin = plugin
        .players(spec.players)
        .edit_config(|c| {
            c.clock = SessionClock::Stepped {
                ticks_per_update: 1,
            };
            spec.checks.apply(c);
        })
        .networked(network);
    let forced_rollback = spec.checks.forced_rollback_for(&plugin.session_config());
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::fixed_hz(spec.hz)))
        .add_plugins(plugin);
    if forced_rollback > 0 {
        app.add_plugins(ForcedRollbackPlugin {
            distance: forced_rollback,
            every: spec.checks.forced_rollback_every,
        });
    }
    if let Some(inputs) = &spec.inputs {
        app.insert_resource(inputs.clone());
    }
    if let Some(customize) = &spec.customize {
        customize(client, &mut app);
    }
    app
}

/// Keeps the breakdowns of the most recent `keep` checksum ticks.
struct KeepBreakdowns {
    log: BreakdownLog,
    keep: usize,
}

impl<I: SimInput> VerifiedTickHook<I> for KeepBreakdowns {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow {
        if verified.is_checksum_tick() {
            let breakdown = verified.breakdown();
            let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
            log.push_back(breakdown);
            while log.len() > self.keep {
                log.pop_front();
            }
        }
        HookFlow::Continue
    }
}
