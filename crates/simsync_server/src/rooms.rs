//! Every room of a server and the routing of connections to them
//! ([rooms](crate::rules#rooms)): [`Rooms`] is the UDP transport's [`ConnectionSink`] — a
//! connection enters the room its token names, in its slot, or is told why not
//! ([`RejectReason`]) and closed; its payloads go to its room's `RenetServer` only, so a
//! client of one room can never act in another.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use simsync_net::bevy_renet::RenetServer;
use simsync_net::renet::ClientId;
use simsync_net::renet_netcode::NETCODE_USER_DATA_BYTES;
use simsync_net::{
    ConnectionSink, MatchEndReason, RejectReason, ServerMessage, ServerNetExt, connection_config,
};

use crate::room::{RelayBuilder, Room, RoomState, RoomSummary, RoomTurn, fingerprint_relay};
use crate::room_config::{RoomConfig, RoomConfigError};
use crate::token::{RoomId, TokenClaims};

/// How long a refused connection stays open to receive why (then it is closed).
pub const REFUSED_LINGER: Duration = Duration::from_secs(1);

/// Ended rooms whose summaries are kept for the admin API.
pub const ENDED_KEPT: usize = 256;

/// Most rooms one server hosts at once.
pub const MAX_ROOMS: usize = 4_096;

/// Why a room was not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreateRoomError {
    /// The config does not validate.
    #[error("bad room config: {0}")]
    Config(#[from] RoomConfigError),
    /// A room with this id exists or existed on this server (ids are never reused).
    #[error("{0} exists already")]
    Exists(RoomId),
    /// The server drains: it makes no new rooms.
    #[error("the server is draining")]
    Draining,
    /// The server hosts [`MAX_ROOMS`] rooms already.
    #[error("the server hosts {MAX_ROOMS} rooms already")]
    Full,
}

/// A room the server does not have (or no longer has).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not on this server")]
pub struct UnknownRoom(pub RoomId);

/// The refusal reasons as metric labels, in a fixed order.
pub const REFUSAL_LABELS: [&str; 6] = [
    "not_a_room_token",
    "unknown_room",
    "draining",
    "slot_out_of_range",
    "room_full",
    "other",
];

/// Traffic and refusal counters of the sink (totals since the server started).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkCounters {
    /// Payloads received from connected clients, and their bytes.
    pub packets_in: u64,
    /// Payload bytes received.
    pub bytes_in: u64,
    /// Payloads sent to connected clients.
    pub packets_out: u64,
    /// Payload bytes sent.
    pub bytes_out: u64,
    /// Connections refused, per [`REFUSAL_LABELS`] entry.
    pub refused: [u64; REFUSAL_LABELS.len()],
}

/// The metric label of a refusal.
pub fn refusal_label(reason: &RejectReason) -> &'static str {
    match reason {
        RejectReason::UnknownRoom { .. } => "unknown_room",
        RejectReason::ServerDraining => "draining",
        RejectReason::SlotOutOfRange { .. } => "slot_out_of_range",
        RejectReason::ServerFull => "room_full",
        RejectReason::Other(_) => "not_a_room_token",
        _ => "other",
    }
}

/// Every room of a server, the connections' routes, and the connections refused.
pub struct Rooms {
    rooms: BTreeMap<RoomId, Room>,
    ended: VecDeque<RoomSummary>,
    /// Ids ever used (never reused while the server runs).
    used: std::collections::BTreeSet<RoomId>,
    routes: HashMap<ClientId, RoomId>,
    /// Connections refused: told why, closed after [`REFUSED_LINGER`].
    refused: RenetServer,
    refused_at: HashMap<ClientId, Duration>,
    counters: SinkCounters,
    accepting: bool,
    now: Duration,
    next_id: u64,
    relay: RelayBuilder,
    empty_timeout: Duration,
    /// The server's `--physics-host` switch ([`Self::with_physics_host`]).
    physics_host: bool,
}

impl std::fmt::Debug for Rooms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rooms")
            .field("rooms", &self.rooms)
            .field("routes", &self.routes.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Rooms {
    /// No rooms; rooms with no connection for `empty_timeout` end by themselves; relay rooms
    /// check inputs by fingerprint ([`fingerprint_relay`]).
    pub fn new(empty_timeout: Duration) -> Self {
        Self {
            rooms: BTreeMap::new(),
            ended: VecDeque::new(),
            used: std::collections::BTreeSet::new(),
            routes: HashMap::new(),
            refused: RenetServer::new(connection_config()),
            refused_at: HashMap::new(),
            counters: SinkCounters::default(),
            accepting: true,
            now: Duration::ZERO,
            next_id: 1,
            relay: std::sync::Arc::new(fingerprint_relay),
            empty_timeout,
            physics_host: false,
        }
    }

    /// The server's physics-host switch (`--physics-host`): an ownership room made without its
    /// own `physics_host` hosts physics when `on` and its every dynamic body has a shape
    /// ([`OwnershipRoomConfig::resolve_physics_host`](crate::OwnershipRoomConfig::resolve_physics_host)).
    /// Default off.
    pub fn with_physics_host(mut self, on: bool) -> Self {
        self.physics_host = on;
        self
    }

    /// Relay rooms are built by `relay` (a server built with the game's input type).
    pub fn with_relay_builder(mut self, relay: RelayBuilder) -> Self {
        self.relay = relay;
        self
    }

    /// Time since the rooms were made (advanced by [`Self::step`]).
    pub fn now(&self) -> Duration {
        self.now
    }

    /// The counters.
    pub fn counters(&self) -> &SinkCounters {
        &self.counters
    }

    /// The live rooms (not ended), by id.
    pub fn rooms(&self) -> impl Iterator<Item = &Room> {
        self.rooms.values()
    }

    /// A live room.
    pub fn room(&self, id: RoomId) -> Option<&Room> {
        self.rooms.get(&id)
    }

    /// Stops taking new rooms and clients (the drain): new connections are refused with
    /// [`RejectReason::ServerDraining`], and a room ends as soon as it is empty.
    pub fn stop_accepting(&mut self) {
        self.accepting = false;
    }

    /// Whether new rooms and clients are taken.
    pub fn accepting(&self) -> bool {
        self.accepting
    }

    /// Makes a room from `config` under `id` (or the next free id). An ownership room's
    /// physics-host switch is settled first, with the server's ([`Self::with_physics_host`]).
    ///
    /// # Errors
    ///
    /// [`CreateRoomError`]: a bad config, an id used before, a draining or full server.
    pub fn create(
        &mut self,
        id: Option<RoomId>,
        mut config: RoomConfig,
    ) -> Result<RoomId, CreateRoomError> {
        if !self.accepting {
            return Err(CreateRoomError::Draining);
        }
        if let RoomConfig::Ownership(room) = &mut config {
            room.resolve_physics_host(self.physics_host);
        }
        config.validate()?;
        if self.rooms.len() >= MAX_ROOMS {
            return Err(CreateRoomError::Full);
        }
        let id = match id {
            Some(id) if self.used.contains(&id) => return Err(CreateRoomError::Exists(id)),
            Some(id) => id,
            None => {
                while self.used.contains(&RoomId(self.next_id)) {
                    self.next_id += 1;
                }
                RoomId(self.next_id)
            }
        };
        self.used.insert(id);
        tracing::info!(
            room = id.0,
            kind = config.kind_name(),
            slots = config.slots(),
            "room made"
        );
        self.rooms
            .insert(id, Room::new(id, config, self.now, &self.relay));
        Ok(id)
    }

    /// Ends room `id` with `reason` (its clients are told, then closed).
    ///
    /// # Errors
    ///
    /// [`UnknownRoom`] for a room that is not live.
    pub fn end(&mut self, id: RoomId, reason: MatchEndReason) -> Result<(), UnknownRoom> {
        let room = self.rooms.get_mut(&id).ok_or(UnknownRoom(id))?;
        tracing::info!(room = id.0, %reason, "room ends");
        room.end(reason, self.now);
        Ok(())
    }

    /// Ends every live room with `reason`.
    pub fn end_all(&mut self, reason: MatchEndReason) {
        let ids: Vec<RoomId> = self.rooms.keys().copied().collect();
        for id in ids {
            let _ = self.end(id, reason.clone());
        }
    }

    /// The summary of a live or recently ended room.
    pub fn summary(&self, id: RoomId) -> Option<RoomSummary> {
        self.rooms
            .get(&id)
            .map(|room| room.summary(self.now))
            .or_else(|| self.ended.iter().find(|s| s.id == id).cloned())
    }

    /// Every live room's summary, by id.
    pub fn summaries(&self) -> Vec<RoomSummary> {
        self.rooms.values().map(|r| r.summary(self.now)).collect()
    }

    /// Connections in rooms now.
    pub fn clients(&self) -> usize {
        self.routes.len()
    }

    /// Advances every room's network clocks by `dt`; call before the transport hands packets
    /// in.
    pub fn update_network(&mut self, dt: Duration) {
        self.refused.update(dt);
        for room in self.rooms.values_mut() {
            room.update_network(dt);
        }
    }

    /// Runs every room for `dt`, ends the relay rooms whose match ended once their last
    /// client left (with the match's reason: `completed` when its players said goodbye), ends
    /// the rooms empty for too long (at once while draining),
    /// closes ending rooms after their grace and the refused connections after theirs, and
    /// forgets ended rooms. Returns each room's turn.
    pub fn step(&mut self, dt: Duration) -> Vec<(RoomId, RoomTurn)> {
        self.now += dt;
        let now = self.now;
        let timeout = if self.accepting {
            self.empty_timeout
        } else {
            Duration::ZERO
        };
        let mut turns = Vec::with_capacity(self.rooms.len());
        for room in self.rooms.values_mut() {
            let started = Instant::now();
            let mut turn = room.step(dt);
            turn.kind = room.config().kind_name();
            turn.update = started.elapsed();
            turns.push((room.id(), turn));
            if let Some(reason) = room.played_out() {
                tracing::info!(room = room.id().0, %reason, "room ends: its match ended and its players left");
                room.end(reason, now);
            }
            if room.empty_for(now).is_some_and(|empty| empty >= timeout)
                && room.state() != RoomState::Ending
            {
                room.end(MatchEndReason::Abandoned, now);
            }
            room.close_if_due(now);
        }
        self.forget_ended();
        self.expire_refused();
        turns
    }

    fn forget_ended(&mut self) {
        let ended: Vec<RoomId> = self
            .rooms
            .values()
            .filter(|r| r.state() == RoomState::Ended && r.clients().is_empty())
            .map(Room::id)
            .collect();
        for id in ended {
            if let Some(room) = self.rooms.remove(&id) {
                tracing::info!(room = id.0, "room ended");
                if self.ended.len() >= ENDED_KEPT {
                    self.ended.pop_front();
                }
                self.ended.push_back(room.summary(self.now));
            }
        }
    }

    fn expire_refused(&mut self) {
        let now = self.now;
        for client in self.refused.clients_id() {
            for channel in 0..3u8 {
                while self.refused.receive_message(client, channel).is_some() {}
            }
            if self
                .refused_at
                .get(&client)
                .is_none_or(|at| now.saturating_sub(*at) >= REFUSED_LINGER)
            {
                self.refused.disconnect(client);
            }
        }
    }

    /// Where connection `client` with token `user_data` goes: its room and slot, or why not.
    fn route(
        &self,
        user_data: &[u8; NETCODE_USER_DATA_BYTES],
    ) -> Result<TokenClaims, RejectReason> {
        let claims = TokenClaims::from_user_data(user_data)
            .map_err(|e| RejectReason::Other(e.to_string()))?;
        if !self.accepting {
            return Err(RejectReason::ServerDraining);
        }
        if !self.rooms.contains_key(&claims.room) {
            return Err(RejectReason::UnknownRoom {
                room: claims.room.0,
            });
        }
        Ok(claims)
    }

    fn refuse(&mut self, client: ClientId, reason: RejectReason) {
        let label = refusal_label(&reason);
        if let Some(i) = REFUSAL_LABELS.iter().position(|l| *l == label) {
            self.counters.refused[i] += 1;
        }
        tracing::info!(client, reason = ?reason, "connection refused");
        self.refused.add_connection(client);
        self.refused_at.insert(client, self.now);
        if let Err(error) = self
            .refused
            .send_msg(client, &ServerMessage::Rejected { reason })
        {
            tracing::warn!(client, "refusal not sent: {error}");
        }
    }
}

impl ConnectionSink for Rooms {
    fn connect(&mut self, client_id: ClientId, user_data: &[u8; NETCODE_USER_DATA_BYTES]) {
        let admitted = self.route(user_data).and_then(|claims| {
            let room = self
                .rooms
                .get_mut(&claims.room)
                .ok_or(RejectReason::UnknownRoom {
                    room: claims.room.0,
                })?;
            room.admit(client_id, claims.slot)?;
            Ok(claims)
        });
        match admitted {
            Ok(claims) => {
                tracing::info!(
                    client = client_id,
                    room = claims.room.0,
                    slot = claims.slot,
                    "client entered its room"
                );
                self.routes.insert(client_id, claims.room);
            }
            Err(reason) => self.refuse(client_id, reason),
        }
    }

    fn receive(&mut self, client_id: ClientId, payload: &[u8]) -> bool {
        self.counters.packets_in += 1;
        self.counters.bytes_in += payload.len() as u64;
        if let Some(room) = self
            .routes
            .get(&client_id)
            .and_then(|id| self.rooms.get_mut(id))
        {
            return room
                .server_mut()
                .process_packet_from(payload, client_id)
                .is_ok();
        }
        self.refused.process_packet_from(payload, client_id).is_ok()
    }

    fn disconnect(&mut self, client_id: ClientId) {
        let now = self.now;
        match self.routes.remove(&client_id) {
            Some(id) => {
                if let Some(room) = self.rooms.get_mut(&id) {
                    room.remove(client_id, now);
                }
            }
            None => {
                self.refused.remove_connection(client_id);
                self.refused_at.remove(&client_id);
            }
        }
    }

    fn take_disconnections(&mut self) -> Vec<ClientId> {
        let mut out = self.refused.disconnections_id();
        for room in self.rooms.values_mut() {
            out.extend(room.server_mut().disconnections_id());
        }
        out
    }

    fn drain_packets(&mut self, send: &mut dyn FnMut(ClientId, &[u8]) -> bool) {
        let counters = &mut self.counters;
        let mut counted = |client: ClientId, packet: &[u8]| {
            counters.packets_out += 1;
            counters.bytes_out += packet.len() as u64;
            send(client, packet)
        };
        self.refused.drain_packets(&mut counted);
        for room in self.rooms.values_mut() {
            room.server_mut().drain_packets(&mut counted);
        }
    }
}
