//! One room ([rooms](crate::rules#rooms)): a relay ([`RelayServer`] over its own
//! `RenetServer`) or an entity server (a headless Bevy App with `OwnershipPlugin`), the
//! connections in it by slot, and where it is in its life ([`RoomState`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bevy::app::App;
use bevy::prelude::{Bundle, Quat, Transform, Vec3};
use bevy_rapier3d::prelude::{
    Collider, ColliderMassProperties, Damping, Friction, GravityScale, NoUserData,
    RapierPhysicsPlugin, Restitution, RigidBody, Sleeping, TimestepMode, Velocity,
};
use serde::Serialize;
use simsync_net::bevy_renet::RenetServer;
use simsync_net::renet::ClientId;
use simsync_net::{
    ConnectionSink, MatchEndReason, MatchPhase, NetClock, OwnershipServerMessage, RejectCounts,
    RejectReason, ServerMessage, ServerNetExt, SessionServerMessage, TickAccumulator,
    connection_config,
};
use simsync_ownership::{
    BodyId, BodyNetId, EntityServer, OwnershipPlugin, single_threaded_schedules,
};
use simsync_relay::{
    RelayLimits, RelayServer, RelayServerConfig, SnapshotServing, read_snapshot_header,
};

use crate::pace::OwnershipPace;
use crate::room_config::{
    BodyProperties, OwnershipRoomConfig, RelayRoomConfig, RoomConfig, ShapeSpec,
};
use crate::token::RoomId;

/// Builds a relay room's [`RelayServer`] from its config: the stock server checks inputs by
/// the room's input fingerprint ([`RelayServer::with_fingerprint`]); a server built with the
/// game's input type passes `RelayServer::new::<Input>` (every input decoded too); an
/// authoritative room adds its game's world (`RelayServer::with_authority`), which is why a
/// builder may capture (the game's factory).
pub type RelayBuilder =
    std::sync::Arc<dyn Fn(RelayServerConfig, &RelayRoomConfig) -> RelayServer + Send + Sync>;

/// The stock [`RelayBuilder`]: inputs checked by size, clients by the fingerprint.
pub fn fingerprint_relay(config: RelayServerConfig, room: &RelayRoomConfig) -> RelayServer {
    let relay = RelayServer::with_fingerprint(config, room.input.fingerprint());
    if room.snapshots {
        relay.with_header_reader(read_snapshot_header)
    } else {
        relay
    }
}

/// Where a room is in its life (ordered: a room only moves forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RoomState {
    /// Made; its players are joining (a relay room's match has not started, an ownership
    /// room has no participant yet).
    Open,
    /// Its match runs (relay) or a participant joined (ownership).
    Running,
    /// Ended by its operator or the drain: its clients were told why and are closed shortly.
    Ending,
    /// Over: every connection closed.
    Ended,
}

impl RoomState {
    /// The metrics' `state` label.
    pub fn name(self) -> &'static str {
        match self {
            RoomState::Open => "open",
            RoomState::Running => "running",
            RoomState::Ending => "ending",
            RoomState::Ended => "ended",
        }
    }

    /// Every state, in order.
    pub const ALL: [RoomState; 4] = [
        RoomState::Open,
        RoomState::Running,
        RoomState::Ending,
        RoomState::Ended,
    ];
}

/// A room as the admin API shows it (JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoomSummary {
    /// The room.
    pub id: RoomId,
    /// `"relay"` or `"ownership"`.
    pub kind: &'static str,
    /// Where it is.
    pub state: RoomState,
    /// Slots: players or participant seats.
    pub slots: u8,
    /// Connections in the room now.
    pub clients: usize,
    /// Seconds since it was made.
    pub age_seconds: f64,
    /// Why it ended, once ending.
    pub end_reason: Option<String>,
    /// Relay rooms: the relay's numbers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relay: Option<RelaySummary>,
    /// Ownership rooms: the entity server's numbers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ownership: Option<OwnershipSummary>,
}

/// A relay room's numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RelaySummary {
    /// The current match's number.
    pub match_id: u32,
    /// Where the match is.
    pub phase: String,
    /// The relay's clock, in ticks.
    pub server_tick: i64,
    /// The newest tick confirmed for every player.
    pub confirmed_tick: i64,
    /// Ticks between the clock and the lowest tick every connected player acknowledged.
    pub tick_lag: i64,
    /// Desyncs this match: players' desync episodes (one per desynced player until it agrees
    /// again, however many of its ticks are judged; `RelayStats::desyncs`).
    pub desyncs: u64,
    /// Checksum reports this match the relay could not judge (late, with their tick's verdict
    /// gone or without a judge; `RelayStats::unjudged_checksums`).
    pub unjudged_checksums: u64,
    /// Slots taken again by a new connection this match.
    pub rejoins: u64,
    /// The room's world, when the room is authoritative (built with
    /// `RelayServer::with_authority`); `None` otherwise.
    pub authority: Option<AuthoritySummary>,
}

/// An authoritative relay room's world: where it is and what it did this match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AuthoritySummary {
    /// Its newest simulated tick.
    pub tick: i64,
    /// The newest confirmed tick minus its tick, in ticks.
    pub lag_ticks: i64,
    /// The largest `lag_ticks` seen.
    pub max_lag_ticks: i64,
    /// Desynced clients sent its snapshot to resync.
    pub resyncs: u64,
    /// Its snapshots forwarded (late join, rejoin, resync).
    pub snapshots_served: u64,
    /// Failures (`AuthorityStats::failures`): a failed tick (it stops the authority; the room
    /// goes on by majority) and each snapshot transfer it could not serve (counted once per
    /// transfer).
    pub failures: u64,
}

/// An ownership room's numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OwnershipSummary {
    /// Participants joined now.
    pub participants: usize,
    /// Bodies the entity server knows.
    pub bodies: usize,
    /// Owner states relayed.
    pub state_updates_relayed: u64,
    /// Whether the entity server hosts physics ([physics host](crate::rules#physics-host)).
    pub physics_host: bool,
    /// Owner states refused (impossible states, stale owners; every `RefusalReason`).
    pub state_updates_refused: u64,
    /// Bodies the physics host took (orphans, and others its settings let it take).
    pub host_takes: u64,
    /// Bodies the physics host released at rest.
    pub host_releases: u64,
}

/// Where a relay room's relay seated its connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelaySeats {
    /// Each seated connection and its slot (`RelayServer::slot_of`), by connection.
    pub seated: Vec<(ClientId, u8)>,
    /// The slots whose player counts as connected (`RelayServer::is_connected`: seated and
    /// heard from within the relay's silence timeout), ascending.
    pub connected: Vec<u8>,
}

impl RelaySeats {
    /// The slot the relay seated `client` in.
    pub fn slot_of(&self, client: ClientId) -> Option<u8> {
        self.seated
            .iter()
            .find(|(c, _)| *c == client)
            .map(|(_, slot)| *slot)
    }

    /// Whether slot `slot`'s player counts as connected.
    pub fn is_connected(&self, slot: u8) -> bool {
        self.connected.contains(&slot)
    }
}

/// The relay host of a room.
struct RelayHost {
    relay: RelayServer,
    server: RenetServer,
    clock: TickAccumulator,
}

/// The host of a room.
enum Host {
    Relay(Box<RelayHost>),
    Ownership(Box<App>, OwnershipPace),
}

/// Counters a room adds to the server's metrics, as totals since the room was made (kept
/// across the relay's per-match resets).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoomTotals {
    /// Desyncs (players' desync episodes) judged.
    pub desyncs: u64,
    /// Checksum reports a relay room could not judge (`RelayStats::unjudged_checksums`).
    pub unjudged_checksums: u64,
    /// Slots taken again by a new connection.
    pub rejoins: u64,
    /// Messages dropped by the connections' rate limits.
    pub rate_limited: u64,
    /// Snapshot bytes forwarded to joiners.
    pub snapshot_bytes: u64,
    /// Confirmed sets resent.
    pub resent_sets: u64,
    /// A relay room's refused `Hello`s, by reason (`SlotStillConnected`...).
    pub refused_hellos: RejectCounts,
    /// An ownership room's refused `Hello`s (version, protocols, joined twice, ids used up).
    pub refused_participants: u64,
}

/// What one room update measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RoomTurn {
    /// Relay rooms that ticked: how long the relay's update took.
    pub relay_tick: Option<Duration>,
    /// The room's kind (`relay`, `ownership`; set by `Rooms::step`).
    pub kind: &'static str,
    /// How long the room's whole update took (set by `Rooms::step`).
    pub update: Duration,
    /// An ownership room that was not due an update this turn and skipped it
    /// ([ticking](crate::rules#physics-host)): its `update` is not observed.
    pub skipped: bool,
}

/// How long an ending room's clients have to receive why before their connections close.
pub const END_GRACE: Duration = Duration::from_secs(1);

/// One room.
pub struct Room {
    id: RoomId,
    config: RoomConfig,
    host: Host,
    state: RoomState,
    /// The connections in the room, with their slots.
    clients: BTreeMap<ClientId, u8>,
    created: Duration,
    /// Since when the room has had no connection (from its creation until the first).
    empty_since: Option<Duration>,
    ending_since: Option<Duration>,
    end_reason: Option<MatchEndReason>,
    totals: RoomTotals,
    /// The relay's per-match counters at the last update (for `totals`).
    last_relay: RoomTotals,
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("id", &self.id)
            .field("state", &self.state)
            .field("clients", &self.clients)
            .finish_non_exhaustive()
    }
}

impl Room {
    /// A room made at `now` (server time) from a validated `config`.
    pub fn new(id: RoomId, config: RoomConfig, now: Duration, relay: &RelayBuilder) -> Self {
        let host = match &config {
            RoomConfig::Relay(room) => Host::Relay(Box::new(RelayHost {
                relay: relay(relay_config(room), room),
                server: RenetServer::new(connection_config()),
                clock: TickAccumulator::new().with_max_ticks_per_advance(8),
            })),
            RoomConfig::Ownership(room) => Host::Ownership(
                Box::new(ownership_app(room)),
                OwnershipPace::new(room.tick_rate_hz),
            ),
        };
        Self {
            id,
            config,
            host,
            state: RoomState::Open,
            clients: BTreeMap::new(),
            created: now,
            empty_since: Some(now),
            ending_since: None,
            end_reason: None,
            totals: RoomTotals::default(),
            last_relay: RoomTotals::default(),
        }
    }

    /// The room's id.
    pub fn id(&self) -> RoomId {
        self.id
    }

    /// The room's config.
    pub fn config(&self) -> &RoomConfig {
        &self.config
    }

    /// Where the room is.
    pub fn state(&self) -> RoomState {
        self.state
    }

    /// The connections in the room, with their slots.
    pub fn clients(&self) -> &BTreeMap<ClientId, u8> {
        &self.clients
    }

    /// The counters since the room was made.
    pub fn totals(&self) -> RoomTotals {
        self.totals
    }

    /// How long the room has had no connection at `now` (`None` while it has one).
    pub fn empty_for(&self, now: Duration) -> Option<Duration> {
        self.empty_since.map(|since| now.saturating_sub(since))
    }

    /// How long the room has been ending at `now`.
    pub fn ending_for(&self, now: Duration) -> Option<Duration> {
        self.ending_since.map(|since| now.saturating_sub(since))
    }

    /// The relay, for a relay room.
    pub fn relay(&self) -> Option<&RelayServer> {
        match &self.host {
            Host::Relay(host) => Some(&host.relay),
            Host::Ownership(..) => None,
        }
    }

    /// A relay room's seating (`None` for an ownership room).
    pub fn relay_seats(&self) -> Option<RelaySeats> {
        let relay = self.relay()?;
        Some(RelaySeats {
            seated: self
                .clients
                .keys()
                .filter_map(|c| relay.slot_of(*c).map(|slot| (*c, slot)))
                .collect(),
            connected: (0..self.config.slots())
                .filter(|slot| relay.is_connected(*slot))
                .collect(),
        })
    }

    /// The entity server, for an ownership room.
    pub fn entity_server(&self) -> Option<&EntityServer> {
        match &self.host {
            Host::Relay(_) => None,
            Host::Ownership(app, _) => app.world().get_resource::<EntityServer>(),
        }
    }

    /// The room's renet server.
    pub fn server_mut(&mut self) -> &mut RenetServer {
        match &mut self.host {
            Host::Relay(host) => &mut host.server,
            Host::Ownership(app, _) => app
                .world_mut()
                .get_resource_mut::<RenetServer>()
                .expect("an ownership room's app holds its RenetServer from its creation")
                .into_inner(),
        }
    }

    /// Takes connection `client` into `slot`, or says why not: a room that is ending or
    /// ended is [`RejectReason::UnknownRoom`], a slot it does not have
    /// [`RejectReason::SlotOutOfRange`]. A relay room's relay seats the client in its slot
    /// when it says hello ([`RelayServer::assign_slot`]); in an ownership room, a seat's
    /// older connection still open is closed (the token is the seat's credential).
    ///
    /// # Errors
    ///
    /// The reason the client is refused.
    pub fn admit(&mut self, client: ClientId, slot: u8) -> Result<(), RejectReason> {
        if matches!(self.state, RoomState::Ending | RoomState::Ended) {
            return Err(RejectReason::UnknownRoom { room: self.id.0 });
        }
        if slot >= self.config.slots() {
            return Err(RejectReason::SlotOutOfRange {
                slot,
                players: self.config.slots(),
            });
        }
        match &mut self.host {
            Host::Relay(host) => host.relay.assign_slot(client, slot),
            Host::Ownership(..) => {
                let older: Vec<ClientId> = self
                    .clients
                    .iter()
                    .filter(|(_, s)| **s == slot)
                    .map(|(c, _)| *c)
                    .collect();
                for old in older {
                    self.server_mut().disconnect(old);
                }
            }
        }
        self.on_inbound();
        self.server_mut().add_connection(client);
        self.clients.insert(client, slot);
        self.empty_since = None;
        Ok(())
    }

    /// A packet from connection `client` for the room's renet server; whether renet took it
    /// (an ownership room updates at its next turn:
    /// [ticking](crate::rules#physics-host)).
    pub fn receive(&mut self, client: ClientId, payload: &[u8]) -> bool {
        self.on_inbound();
        self.server_mut().receive(client, payload)
    }

    /// Something arrived for an ownership room: its next turn updates it.
    fn on_inbound(&mut self) {
        if let Host::Ownership(_, pace) = &mut self.host {
            pace.on_inbound();
        }
    }

    /// Connection `client` is gone (closed by either side, or timed out).
    pub fn remove(&mut self, client: ClientId, now: Duration) {
        self.on_inbound();
        self.server_mut().remove_connection(client);
        if self.clients.remove(&client).is_some() && self.clients.is_empty() {
            self.empty_since = Some(now);
        }
    }

    /// Advances the room's network by `dt` (renet's resend and timeout clocks). Call before
    /// the transport hands packets in.
    pub fn update_network(&mut self, dt: Duration) {
        self.server_mut().update(dt);
    }

    /// Runs the room for `dt`: the relay's ticks that fell due, or one update of the entity
    /// server's App.
    pub fn step(&mut self, dt: Duration) -> RoomTurn {
        if self.state == RoomState::Ended {
            return RoomTurn::default();
        }
        let turn = match &mut self.host {
            Host::Relay(host) => step_relay(host, dt),
            Host::Ownership(app, pace) => {
                if !step_ownership(app, pace, dt) {
                    return RoomTurn {
                        skipped: true,
                        ..RoomTurn::default()
                    };
                }
                RoomTurn::default()
            }
        };
        self.refresh_totals();
        if self.state == RoomState::Open && self.running() {
            self.state = RoomState::Running;
        }
        turn
    }

    /// The reason a live relay room ends now: its match ended (every player said goodbye,
    /// or the relay's app ended it) and no connection is left. `None` otherwise, and for
    /// ownership rooms.
    pub fn played_out(&self) -> Option<MatchEndReason> {
        let Host::Relay(host) = &self.host else {
            return None;
        };
        let live = matches!(self.state, RoomState::Open | RoomState::Running);
        (live && self.clients.is_empty() && host.relay.phase() == MatchPhase::Ended)
            .then(|| host.relay.end_reason().cloned())
            .flatten()
    }

    fn running(&self) -> bool {
        match &self.host {
            Host::Relay(host) => host.relay.phase() != MatchPhase::Lobby,
            Host::Ownership(app, _) => app
                .world()
                .get_resource::<EntityServer>()
                .is_some_and(|s| s.participants().next().is_some()),
        }
    }

    fn refresh_totals(&mut self) {
        let Host::Relay(host) = &self.host else {
            if let Some(server) = self.entity_server() {
                let stats = server.stats();
                let (rate_limited, refused) = (stats.rate_limited.total(), stats.hellos_rejected);
                self.totals.rate_limited = rate_limited;
                self.totals.refused_participants = refused;
            }
            return;
        };
        let stats = host.relay.stats();
        let now = RoomTotals {
            desyncs: stats.desyncs,
            unjudged_checksums: stats.unjudged_checksums.iter().sum(),
            rejoins: stats.rejoins.iter().sum(),
            rate_limited: stats.rate_limited.iter().map(|r| r.total()).sum::<u64>()
                + stats.rate_limited_unseated,
            snapshot_bytes: stats.snapshots.bytes_forwarded,
            resent_sets: stats.resent_sets,
            refused_hellos: stats.refused_hellos,
            refused_participants: 0,
        };
        // The relay's counters start over with each match: a smaller count is a new match.
        let grow = |total: &mut u64, now: u64, last: u64| {
            *total += if now >= last { now - last } else { now };
        };
        grow(
            &mut self.totals.desyncs,
            now.desyncs,
            self.last_relay.desyncs,
        );
        grow(
            &mut self.totals.unjudged_checksums,
            now.unjudged_checksums,
            self.last_relay.unjudged_checksums,
        );
        grow(
            &mut self.totals.rejoins,
            now.rejoins,
            self.last_relay.rejoins,
        );
        grow(
            &mut self.totals.rate_limited,
            now.rate_limited,
            self.last_relay.rate_limited,
        );
        grow(
            &mut self.totals.snapshot_bytes,
            now.snapshot_bytes,
            self.last_relay.snapshot_bytes,
        );
        grow(
            &mut self.totals.resent_sets,
            now.resent_sets,
            self.last_relay.resent_sets,
        );
        // Kept across matches by the relay: its total is the room's.
        self.totals.refused_hellos = now.refused_hellos;
        self.last_relay = now;
    }

    /// Ends the room at `now`: every client is told `reason` — a relay room's match ends with
    /// it (`MatchEnded`), an ownership room's participants get `Closing` — and the
    /// connections close after [`END_GRACE`]. A room with no client ends at once. Ending an
    /// ending or ended room does nothing.
    pub fn end(&mut self, reason: MatchEndReason, now: Duration) {
        if matches!(self.state, RoomState::Ending | RoomState::Ended) {
            return;
        }
        self.end_reason = Some(reason.clone());
        if self.clients.is_empty() {
            self.state = RoomState::Ended;
            return;
        }
        self.state = RoomState::Ending;
        self.ending_since = Some(now);
        let message = match &mut self.host {
            Host::Relay(host) => ServerMessage::session(
                host.relay.match_id(),
                SessionServerMessage::MatchEnded { reason },
            ),
            Host::Ownership(..) => {
                ServerMessage::Ownership(OwnershipServerMessage::Closing { reason })
            }
        };
        if let Err(error) = self.server_mut().broadcast_msg(&message) {
            tracing::warn!("{}: the end was not sent: {error}", self.id);
        }
    }

    /// Closes every connection of an ending room once [`END_GRACE`] has passed at `now`; the
    /// room is then [`RoomState::Ended`].
    pub fn close_if_due(&mut self, now: Duration) {
        if self
            .ending_for(now)
            .is_some_and(|ending| ending >= END_GRACE)
        {
            self.server_mut().disconnect_all();
            self.state = RoomState::Ended;
        }
    }

    /// The room as the admin API shows it, at `now`.
    pub fn summary(&self, now: Duration) -> RoomSummary {
        let relay = self.relay().map(|relay| {
            let stats = relay.stats();
            let server_tick = i64::from(stats.server_tick);
            RelaySummary {
                match_id: relay.match_id().0,
                phase: format!("{:?}", relay.phase()).to_lowercase(),
                server_tick,
                confirmed_tick: i64::from(stats.confirmed_tick),
                tick_lag: relay
                    .acknowledged_through()
                    .map_or(0, |ack| server_tick - i64::from(ack)),
                desyncs: stats.desyncs,
                unjudged_checksums: stats.unjudged_checksums.iter().sum(),
                rejoins: stats.rejoins.iter().sum(),
                authority: relay.is_authoritative().then(|| {
                    let a = &stats.authority;
                    AuthoritySummary {
                        tick: i64::from(a.tick),
                        lag_ticks: i64::from(a.lag_ticks),
                        max_lag_ticks: i64::from(a.max_lag_ticks),
                        resyncs: a.resyncs,
                        snapshots_served: a.snapshots_served,
                        failures: a.failures,
                    }
                }),
            }
        });
        let ownership = self.entity_server().map(|server| {
            let stats = server.stats();
            OwnershipSummary {
                participants: server.participants().count(),
                bodies: match &self.config {
                    RoomConfig::Ownership(config) => config.bodies.len(),
                    RoomConfig::Relay(_) => 0,
                },
                state_updates_relayed: stats.state_updates_relayed,
                physics_host: server.physics_host().is_some(),
                state_updates_refused: stats.state_updates_refused.total(),
                host_takes: stats.host_takes,
                host_releases: stats.host_releases,
            }
        });
        RoomSummary {
            id: self.id,
            kind: self.config.kind_name(),
            state: self.state,
            slots: self.config.slots(),
            clients: self.clients.len(),
            age_seconds: now.saturating_sub(self.created).as_secs_f64(),
            end_reason: self.end_reason.as_ref().map(ToString::to_string),
            relay,
            ownership,
        }
    }
}

/// One relay update: the ticks due at the room's rate, timed when there are any.
fn step_relay(host: &mut RelayHost, dt: Duration) -> RoomTurn {
    let hz = f64::from(host.relay.config().tick_rate_hz.max(1));
    let ticks = host.clock.advance_secs(dt.as_secs_f64(), hz);
    let started = Instant::now();
    host.relay.update(&mut host.server, dt, ticks);
    let relay_tick = (ticks > 0).then(|| started.elapsed());
    for report in host.relay.take_desync_reports() {
        // The relay logged the desync when it started; this is what differs.
        tracing::info!(tick = report.tick, "relay room: desync report: {report:?}");
    }
    for event in host.relay.take_events() {
        tracing::info!("relay room: {event:?}");
    }
    RoomTurn {
        relay_tick,
        ..RoomTurn::default()
    }
}

/// The relay's config for a room, with the relay's defaults for everything the room does not
/// say.
fn relay_config(room: &RelayRoomConfig) -> RelayServerConfig {
    let hz = room.tick_rate_hz;
    RelayServerConfig {
        players: room.players,
        tick_rate_hz: hz,
        input_hard_tolerance: 8,
        input_redundancy: 3,
        default_input: room.input.default.clone(),
        ping_interval_ms: 250,
        max_input_bytes: usize::try_from(room.input.max_bytes).unwrap_or(usize::MAX),
        checksum_timeout_ms: simsync_relay::DEFAULT_CHECKSUM_TIMEOUT_MS,
        input_history_ticks: 10 * u32::from(hz),
        resend_bytes_per_update: 24_000,
        limits: RelayLimits::for_tick_rate(hz),
        silence_timeout_ms: simsync_relay::DEFAULT_SILENCE_TIMEOUT_MS,
        reconnect_seed: None,
        start_players: room.start_players.unwrap_or(room.players),
        snapshots: room.snapshots.then(SnapshotServing::default),
    }
}

/// An entity server's App: headless, single-threaded (a server runs many rooms), with the
/// room's bodies; its `RenetServer` fed by the server's transport. A room that hosts physics
/// ([physics host](crate::rules#physics-host)) also gets Rapier on the room's tick and every
/// body's collider and properties ([`add_host_physics`]).
fn ownership_app(room: &OwnershipRoomConfig) -> App {
    let tick = Duration::from_secs_f64(1.0 / f64::from(room.tick_rate_hz.max(1)));
    let mut plugin = OwnershipPlugin::entity_server();
    if room.hosts_physics() {
        plugin = plugin.with_physics_host(room.host.config());
    }
    simsync_net::task_pools_without_local_tick();
    let mut app = App::new();
    app.add_plugins(plugin)
        .insert_resource(RenetServer::new(connection_config()))
        .insert_resource(NetClock::Fixed(tick));
    if room.hosts_physics() {
        add_host_physics(&mut app, tick);
    }
    for body in &room.bodies {
        let kind = if body.fixed {
            RigidBody::Fixed
        } else {
            RigidBody::Dynamic
        };
        let at = Transform::from_translation(Vec3::from_array(body.position))
            .with_rotation(Quat::from_array(body.rotation).normalize());
        let mut entity = app
            .world_mut()
            .spawn((BodyNetId(BodyId(body.id)), kind, at));
        if room.hosts_physics()
            && let Some(shape) = body.shape
        {
            entity.insert(body_physics(shape, &body.properties));
            if !body.fixed {
                entity.insert((Velocity::zero(), Sleeping::default()));
            }
        }
    }
    app.finish();
    app.cleanup();
    single_threaded_schedules(&mut app);
    app
}

/// The physics host's part of a room's App: time, transforms and Rapier (the same plugins a
/// participant runs), Rapier stepping one room tick (`tick`) per update, and the room's
/// [`HostTicks`] so that [`Room::step`] updates the App once per tick.
fn add_host_physics(app: &mut App, tick: Duration) {
    app.add_plugins((
        bevy::time::TimePlugin,
        bevy::transform::TransformPlugin,
        RapierPhysicsPlugin::<NoUserData>::default(),
    ))
    .insert_resource(TimestepMode::Fixed {
        dt: tick.as_secs_f32(),
        substeps: 1,
    })
    .insert_resource(HostTicks {
        clock: TickAccumulator::new().with_max_ticks_per_advance(8),
        hz: 1.0 / tick.as_secs_f64(),
    });
}

/// A body's collider and properties in the host's Rapier world, as [`BodySpec`](crate::BodySpec) gives them.
fn body_physics(shape: ShapeSpec, properties: &BodyProperties) -> impl Bundle {
    let collider = match shape {
        ShapeSpec::Cuboid {
            half_extents: [x, y, z],
        } => Collider::cuboid(x, y, z),
        ShapeSpec::Ball { radius } => Collider::ball(radius),
        ShapeSpec::Capsule {
            half_height,
            radius,
        } => Collider::capsule_y(half_height, radius),
    };
    let mass = properties.mass.map_or(
        ColliderMassProperties::Density(properties.density),
        ColliderMassProperties::Mass,
    );
    (
        collider,
        mass,
        Friction::coefficient(properties.friction),
        Restitution::coefficient(properties.restitution),
        Damping {
            linear_damping: properties.linear_damping,
            angular_damping: properties.angular_damping,
        },
        GravityScale(properties.gravity_scale),
    )
}

/// A physics-hosting room's tick clock: its App runs once per room tick, with a fixed
/// `NetClock` and Rapier step of one tick, however long the server's turns are.
#[derive(bevy::prelude::Resource)]
struct HostTicks {
    clock: TickAccumulator,
    hz: f64,
}

/// One turn of an ownership room: a room that hosts physics updates its App once per room tick
/// due ([`HostTicks`]); any other updates it when `pace` says it is due, its clock stepping
/// all the time since its last update. Returns whether the App was updated.
fn step_ownership(app: &mut App, pace: &mut OwnershipPace, dt: Duration) -> bool {
    match app.world_mut().remove_resource::<HostTicks>() {
        Some(mut ticks) => {
            let due = ticks.clock.advance_secs(dt.as_secs_f64(), ticks.hz);
            app.insert_resource(ticks);
            for _ in 0..due {
                app.update();
            }
            due > 0
        }
        None => {
            let Some(step) = pace.turn(dt) else {
                return false;
            };
            app.world_mut().insert_resource(NetClock::Fixed(step));
            app.update();
            pace.updated(
                app.world()
                    .get_resource::<EntityServer>()
                    .is_some_and(EntityServer::work_waiting),
            );
            true
        }
    }
}
