//! The dedicated server ([`DedicatedServer`]): the UDP transport with every room behind it,
//! the HTTP thread, the metrics and the drain, turned by one main loop; the rooms run on the
//! worker threads ([rules](crate::rules), [workers](crate::rules#workers)).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use simsync_net::{MatchEndReason, UdpServerConfig, UdpServerTransport};

use crate::config::ServerConfig;
use crate::drain::{Drain, DrainAction, DrainPhase};
use crate::health::{Heartbeat, Readiness};
use crate::http::{AdminTicket, OpsConnections, OpsServer, OpsShared};
use crate::metrics::ServerMetrics;
use crate::room::RelayBuilder;
use crate::room_config::RelayRoomConfig;
use crate::rooms::Rooms;
use crate::{admin, token::TokenMinter};
use simsync_relay::{RelayServer, RelayServerConfig};

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The UDP socket could not be bound.
    #[error("udp {addr}: {message}")]
    Udp {
        /// The address.
        addr: SocketAddr,
        /// Why.
        message: String,
    },
    /// The HTTP port could not be bound.
    #[error("http {addr}: {message}")]
    Http {
        /// The address.
        addr: SocketAddr,
        /// Why.
        message: String,
    },
    /// The config has no address for tokens to name
    /// ([`ServerConfig::check_public_addr`]).
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    /// A room of the config could not be made.
    #[error("room of the config: {0}")]
    Room(String),
    /// The UDP socket failed while serving.
    #[error("udp socket failed: {0}")]
    Socket(String),
    /// The worker threads could not start.
    #[error("worker threads: {0}")]
    Workers(String),
    /// A worker thread stopped (a room's code panicked): its rooms are gone.
    #[error("{0}")]
    WorkerStopped(#[from] crate::pool::WorkerStopped),
}

/// A signal to start the drain from any thread (what SIGTERM and SIGINT set).
#[derive(Debug, Clone, Default)]
pub struct DrainSignal(Arc<AtomicBool>);

impl DrainSignal {
    /// Starts the drain at the main loop's next turn.
    pub fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the drain was asked for.
    pub fn raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// The flag, for `signal_hook::flag::register`.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

/// The dedicated server.
pub struct DedicatedServer {
    config: ServerConfig,
    transport: UdpServerTransport,
    rooms: Rooms,
    metrics: ServerMetrics,
    drain: Drain,
    signal: DrainSignal,
    heartbeat: Heartbeat,
    readiness: Readiness,
    admin: Receiver<AdminTicket>,
    ops: Option<OpsServer>,
    public_addr: SocketAddr,
}

impl std::fmt::Debug for DedicatedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DedicatedServer")
            .field("udp", &self.transport.local_addr())
            .field("ops", &self.ops)
            .field("rooms", &self.rooms)
            .finish_non_exhaustive()
    }
}

impl DedicatedServer {
    /// Binds the UDP and HTTP ports, makes the config's rooms, and is ready. Relay rooms check
    /// inputs by fingerprint.
    ///
    /// # Errors
    ///
    /// [`ServerError`] when a port cannot be bound or a room made, or
    /// [`ServerError::Config`] when the UDP port is bound to an unspecified address
    /// (`0.0.0.0`, `::`) without a public address.
    pub fn bind(config: ServerConfig) -> Result<Self, ServerError> {
        Self::bind_with(config, crate::room::fingerprint_relay)
    }

    /// [`Self::bind`], building relay rooms with `relay` (a server with the game's input type
    /// passes `|config, _| RelayServer::new::<Input>(config)`; an authoritative one adds
    /// `.with_authority(make(), Resync::On)` with its game's authority factory).
    ///
    /// # Errors
    ///
    /// As [`Self::bind`].
    pub fn bind_with(
        config: ServerConfig,
        relay: impl Fn(RelayServerConfig, &RelayRoomConfig) -> RelayServer + Send + Sync + 'static,
    ) -> Result<Self, ServerError> {
        config.check_public_addr()?;
        let relay: RelayBuilder = std::sync::Arc::new(relay);
        let readiness = Readiness::default();
        let heartbeat = Heartbeat::new();
        let transport = bind_udp(&config)?;
        readiness.set_bound();
        let public_addr = config.public_addr.unwrap_or(transport.local_addr());
        let metrics = ServerMetrics::new();
        let (ops, admin) = OpsServer::start(config.ops_bind, |tx| OpsShared {
            heartbeat: heartbeat.clone(),
            readiness: readiness.clone(),
            metrics: metrics.http(),
            admin_token: config.admin_token.clone(),
            admin: tx,
            limits: config.ops_limits,
        })
        .map_err(|message| ServerError::Http {
            addr: config.ops_bind,
            message,
        })?;
        let rooms = start_rooms(&config, relay)?;
        readiness.set_config_loaded();
        tracing::info!(
            udp = %transport.local_addr(),
            public = %public_addr,
            ops = %ops.addr(),
            rooms = config.rooms.len(),
            workers = config.workers,
            "simsync-server ready"
        );
        Ok(Self {
            drain: Drain::new(config.drain_timeout),
            config,
            transport,
            rooms,
            metrics,
            signal: DrainSignal::default(),
            heartbeat,
            readiness,
            admin,
            ops: Some(ops),
            public_addr,
        })
    }

    /// The bound UDP address.
    pub fn udp_addr(&self) -> SocketAddr {
        self.transport.local_addr()
    }

    /// The address tokens must name (the public address, or the bound one).
    pub fn public_addr(&self) -> SocketAddr {
        self.public_addr
    }

    /// The bound HTTP address.
    pub fn ops_addr(&self) -> Option<SocketAddr> {
        self.ops.as_ref().map(OpsServer::addr)
    }

    /// What the operations port counted so far (its open connections, threads...).
    pub fn ops_connections(&self) -> Option<OpsConnections> {
        self.ops.as_ref().map(OpsServer::connections)
    }

    /// A minter for this server's tokens (its key and public address).
    pub fn minter(&self) -> TokenMinter {
        TokenMinter::new(self.config.private_key, vec![self.public_addr])
            .expect("one address is a valid token address list")
    }

    /// The rooms.
    pub fn rooms(&self) -> &Rooms {
        &self.rooms
    }

    /// The rooms, to make or end rooms from the embedding program.
    pub fn rooms_mut(&mut self) -> &mut Rooms {
        &mut self.rooms
    }

    /// The transport's counters of what remote peers caused.
    pub fn remote_errors(&self) -> &simsync_net::RemoteErrors {
        self.transport.remote_errors()
    }

    /// `self` drained by `signal` instead of its own (the binary registers SIGTERM and SIGINT
    /// before it binds, while it waits for an Agones address).
    pub fn with_drain_signal(mut self, signal: DrainSignal) -> Self {
        self.signal = signal;
        self
    }

    /// The signal that starts the drain.
    pub fn drain_signal(&self) -> DrainSignal {
        self.signal.clone()
    }

    /// The main loop's heartbeat.
    pub fn heartbeat(&self) -> Heartbeat {
        self.heartbeat.clone()
    }

    /// Where the drain is.
    pub fn drain_phase(&self) -> DrainPhase {
        self.drain.phase()
    }

    /// One turn of the main loop over `dt`: admin commands, the socket, every room's turn
    /// sent to its worker, every worker's report waited for (their packets sent as each
    /// arrives), the metrics, and the drain's next step. Waiting for every worker makes the
    /// turn whole (tests and programs that step the server themselves); [`Self::run`] waits
    /// no longer than its period instead.
    ///
    /// # Errors
    ///
    /// [`ServerError::Socket`] when the socket fails, [`ServerError::WorkerStopped`] when a
    /// worker thread ended.
    pub fn turn(&mut self, dt: Duration) -> Result<DrainAction, ServerError> {
        self.turn_until(dt, None)
    }

    /// [`Self::turn`], waiting for the workers' reports until `until` at most (`None`: until
    /// every worker ran the turn). A worker still busy then reports at a later turn.
    fn turn_until(
        &mut self,
        dt: Duration,
        until: Option<Instant>,
    ) -> Result<DrainAction, ServerError> {
        let started = Instant::now();
        self.heartbeat.beat();
        if self.signal.raised() && self.drain.serving() {
            tracing::info!(
                timeout_secs = self.config.drain_timeout.as_secs_f64(),
                "drain: not ready; no new rooms or clients"
            );
            self.drain.begin(self.rooms.now());
            self.readiness.set_draining();
            self.rooms.stop_accepting();
        }
        while let Ok((command, answer)) = self.admin.try_recv() {
            let _ = answer.send(admin::execute(command, &mut self.rooms));
        }
        self.rooms.update_network(dt);
        self.transport
            .update(dt, &mut self.rooms)
            .map_err(|e| ServerError::Socket(e.to_string()))?;
        self.rooms.dispatch(dt);
        // The refused connections' answers go at once; each worker's as it reports.
        self.transport.send_packets(&mut self.rooms);
        let waited = self.collect(until)?;
        let turns = self.rooms.take_turns();
        self.metrics
            .record(&self.rooms, &turns, self.transport.remote_errors());
        let action = self
            .drain
            .step(self.rooms.now(), self.rooms.rooms().count());
        if action == DrainAction::EndRooms {
            tracing::info!("drain: timeout reached; ending every room");
            self.rooms.end_all(MatchEndReason::ServerShutdown);
        }
        self.metrics
            .observe_turn(started.elapsed().saturating_sub(waited));
        Ok(action)
    }

    /// Reads the workers' reports until `until` (see [`Rooms::collect`]), sending each one's
    /// packets as it arrives; returns the time spent waiting.
    fn collect(&mut self, until: Option<Instant>) -> Result<Duration, ServerError> {
        let mut waited = Duration::ZERO;
        loop {
            let asked = Instant::now();
            let read = self.rooms.collect(until)?;
            waited += asked.elapsed();
            if !read {
                return Ok(waited);
            }
            self.transport.send_packets(&mut self.rooms);
        }
    }

    /// Turns the loop in real time at the config's rate until the drain is over (after the
    /// [`DrainSignal`]), then closes every connection and stops the HTTP thread. `each_turn`
    /// runs after every turn (the Agones adapter's reports, say). A turn waits for the
    /// workers' reports until its period is over, no longer: a worker still busy (a slow
    /// room) reports at a later turn, and the other workers' rooms go on at the loop's rate.
    ///
    /// # Errors
    ///
    /// [`ServerError::Socket`] when the socket fails.
    pub fn run(mut self, mut each_turn: impl FnMut(&Self)) -> Result<(), ServerError> {
        let period = Duration::from_secs_f64(1.0 / f64::from(self.config.loop_hz.max(1)));
        let mut last = Instant::now();
        loop {
            let now = Instant::now();
            let dt = now - last;
            last = now;
            let action = self.turn_until(dt, Some(now + period))?;
            each_turn(&self);
            if action == DrainAction::Exit {
                break;
            }
            let spent = now.elapsed();
            if spent < period {
                std::thread::sleep(period - spent);
            }
        }
        self.transport.disconnect_all(&mut self.rooms);
        if let Some(ops) = self.ops.take() {
            ops.stop();
        }
        tracing::info!("drain: done; exiting");
        Ok(())
    }
}

/// The UDP socket and netcode of `config` (its bind and public address, key, client cap).
///
/// # Errors
/// [`ServerError::Udp`] when the address cannot be bound.
fn bind_udp(config: &ServerConfig) -> Result<UdpServerTransport, ServerError> {
    let mut udp = UdpServerConfig::secure(config.bind, config.private_key);
    udp.public_addr = config.public_addr;
    udp.max_clients = config.max_clients;
    UdpServerTransport::bind(udp).map_err(|e| ServerError::Udp {
        addr: config.bind,
        message: e.to_string(),
    })
}

/// The rooms of `config`: its workers started, its configured rooms made (relay rooms built
/// by `relay`).
///
/// # Errors
/// [`ServerError::Workers`] when a worker thread cannot start, [`ServerError::Room`] for a
/// configured room that cannot be made.
fn start_rooms(config: &ServerConfig, relay: RelayBuilder) -> Result<Rooms, ServerError> {
    let mut rooms = Rooms::new(config.empty_room_timeout)
        .with_workers(config.workers)
        .with_relay_builder(relay)
        .with_physics_host(config.physics_host);
    rooms
        .start_workers()
        .map_err(|e| ServerError::Workers(e.to_string()))?;
    for (id, room) in config.rooms.clone() {
        rooms
            .create(id, room)
            .map_err(|e| ServerError::Room(e.to_string()))?;
    }
    Ok(rooms)
}
