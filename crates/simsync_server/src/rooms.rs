//! Every room of a server as the main loop sees it, and the routing of connections to them
//! ([rooms](crate::rules#rooms), [workers](crate::rules#workers)): [`Rooms`] is the UDP
//! transport's [`ConnectionSink`] — a connection enters the room its token names, in its
//! slot, or is told why not ([`RejectReason`]) and closed; its payloads go to its room's
//! worker and its room's `RenetServer` only, so a client of one room can never act in
//! another. The rooms themselves run on the worker threads; [`Rooms`] keeps each one's
//! [`RoomEntry`] (its config, worker, connections and the numbers its worker last reported).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use simsync_net::bevy_renet::RenetServer;
use simsync_net::renet::ClientId;
use simsync_net::renet_netcode::NETCODE_USER_DATA_BYTES;
use simsync_net::{
    ConnectionSink, MatchEndReason, PacketSent, RejectReason, ServerMessage, ServerNetExt,
    connection_config,
};

use crate::pool::{Pool, WorkerStopped};
use crate::room::{
    RelayBuilder, RelaySeats, Room, RoomState, RoomSummary, RoomTotals, RoomTurn, fingerprint_relay,
};
use crate::room_config::{RoomConfig, RoomConfigError};
use crate::token::{RoomId, TokenClaims};
use crate::worker::{Inbound, Report, RoomReport, ToWorker, least_loaded};

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
    /// Payloads a room's connection could not take (counted by the workers; the transport
    /// counts the rest of `bad_payload`).
    pub bad_payloads: u64,
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

/// A room as the main loop knows it: its config, its worker, its connections (kept by the
/// routing) and what its worker reported last (one turn old at most while the worker keeps
/// up).
#[derive(Debug, Clone, PartialEq)]
pub struct RoomEntry {
    config: RoomConfig,
    worker: usize,
    clients: BTreeMap<ClientId, u8>,
    summary: RoomSummary,
    totals: RoomTotals,
    seats: Option<RelaySeats>,
}

impl RoomEntry {
    fn new(id: RoomId, config: RoomConfig, worker: usize) -> Self {
        let summary = RoomSummary {
            id,
            kind: config.kind_name(),
            state: RoomState::Open,
            slots: config.slots(),
            clients: 0,
            age_seconds: 0.0,
            end_reason: None,
            relay: None,
            ownership: None,
        };
        Self {
            config,
            worker,
            clients: BTreeMap::new(),
            summary,
            totals: RoomTotals::default(),
            seats: None,
        }
    }

    /// The room's id.
    pub fn id(&self) -> RoomId {
        self.summary.id
    }

    /// The room's config.
    pub fn config(&self) -> &RoomConfig {
        &self.config
    }

    /// The worker the room runs on (from 0).
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// Where the room is.
    pub fn state(&self) -> RoomState {
        self.summary.state
    }

    /// The connections routed to the room, with their slots (their tokens').
    pub fn clients(&self) -> &BTreeMap<ClientId, u8> {
        &self.clients
    }

    /// The room's counters since it was made, as its worker last reported them.
    pub fn totals(&self) -> RoomTotals {
        self.totals
    }

    /// The room's summary, as its worker last reported it (a room not yet run: `open`, no
    /// relay or ownership numbers).
    pub fn summary(&self) -> &RoomSummary {
        &self.summary
    }

    /// A relay room's seating, as its worker last reported it (`None` for an ownership room
    /// or before its first turn).
    pub fn relay_seats(&self) -> Option<&RelaySeats> {
        self.seats.as_ref()
    }

    fn update(&mut self, report: RoomReport) {
        self.summary = later_summary(report.summary, &self.summary);
        self.totals = report.totals;
        self.seats = report.seats;
    }

    /// Ends the entry as its room ends on its worker: at once when it has no connection,
    /// else `ending`; an ending or ended room stays as it is.
    fn end(&mut self, reason: &MatchEndReason) {
        if self.summary.state >= RoomState::Ending {
            return;
        }
        self.summary.state = if self.clients.is_empty() {
            RoomState::Ended
        } else {
            RoomState::Ending
        };
        self.summary.end_reason = Some(reason.to_string());
    }
}

/// The summary a worker `reported`, unless the main loop already knows its room further on
/// in its life (it ended the room after the worker's turn): a room never moves back.
pub(crate) fn later_summary(mut reported: RoomSummary, known: &RoomSummary) -> RoomSummary {
    if known.state > reported.state {
        reported.state = known.state;
        reported.end_reason.clone_from(&known.end_reason);
    }
    reported
}

/// What a worker has: its rooms now and its busy time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerLoad {
    /// Live rooms on the worker.
    pub rooms: usize,
    /// Time it spent running its rooms since it started.
    pub busy: Duration,
}

/// One worker report's packets: each connection and its packet's length, and their bytes one
/// after another.
type Outgoing = (Vec<(ClientId, usize)>, Vec<u8>);

/// Every room of a server (their [`RoomEntry`]s), the worker threads that run them, the
/// connections' routes, and the connections refused.
pub struct Rooms {
    entries: BTreeMap<RoomId, RoomEntry>,
    ended: VecDeque<RoomSummary>,
    /// Ids ever used (never reused while the server runs).
    used: BTreeSet<RoomId>,
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
    pool: Pool,
    /// The rooms' turns reported since [`Self::take_turns`].
    turns: Vec<(RoomId, RoomTurn)>,
    /// Connections the rooms closed, for the transport.
    closed: Vec<ClientId>,
    /// Reported packets not yet sent, a batch per report.
    outgoing: Vec<Outgoing>,
    /// The server's `--physics-host` switch ([`Self::with_physics_host`]).
    physics_host: bool,
}

impl std::fmt::Debug for Rooms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rooms")
            .field("rooms", &self.entries)
            .field("routes", &self.routes.len())
            .field("counters", &self.counters)
            .field("workers", &self.pool)
            .finish_non_exhaustive()
    }
}

impl Rooms {
    /// No rooms, one worker; rooms with no connection for `empty_timeout` end by themselves;
    /// relay rooms check inputs by fingerprint ([`fingerprint_relay`]).
    pub fn new(empty_timeout: Duration) -> Self {
        Self {
            entries: BTreeMap::new(),
            ended: VecDeque::new(),
            used: BTreeSet::new(),
            routes: HashMap::new(),
            refused: RenetServer::new(connection_config()),
            refused_at: HashMap::new(),
            counters: SinkCounters::default(),
            accepting: true,
            now: Duration::ZERO,
            next_id: 1,
            relay: std::sync::Arc::new(fingerprint_relay),
            empty_timeout,
            pool: Pool::new(1),
            turns: Vec::new(),
            closed: Vec::new(),
            outgoing: Vec::new(),
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

    /// The rooms run on `workers` threads (at least one).
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.pool = Pool::new(workers);
        self
    }

    /// Starts the worker threads (else the first room or turn does).
    ///
    /// # Errors
    ///
    /// The OS's, when a thread cannot be made.
    pub fn start_workers(&mut self) -> std::io::Result<()> {
        if self.pool.started() {
            return Ok(());
        }
        self.pool.start(self.empty_timeout, &self.relay)?;
        if !self.accepting {
            self.pool.broadcast(|| ToWorker::StopAccepting);
        }
        Ok(())
    }

    fn started(&mut self) -> &mut Pool {
        if let Err(error) = self.start_workers() {
            panic!("the worker threads could not start: {error}");
        }
        &mut self.pool
    }

    /// Each worker's rooms and busy time, by worker.
    pub fn workers(&self) -> Vec<WorkerLoad> {
        let mut loads = vec![WorkerLoad::default(); self.pool.size()];
        for entry in self.entries.values() {
            loads[entry.worker].rooms += 1;
        }
        for (load, busy) in loads.iter_mut().zip(self.pool.busy()) {
            load.busy = busy;
        }
        loads
    }

    /// Time since the rooms were made (advanced by [`Self::dispatch`]).
    pub fn now(&self) -> Duration {
        self.now
    }

    /// The counters.
    pub fn counters(&self) -> &SinkCounters {
        &self.counters
    }

    /// The live rooms (not forgotten by their worker yet), by id.
    pub fn rooms(&self) -> impl Iterator<Item = &RoomEntry> {
        self.entries.values()
    }

    /// A live room.
    pub fn room(&self, id: RoomId) -> Option<&RoomEntry> {
        self.entries.get(&id)
    }

    /// Runs `visit` on live room `id` on its worker, between two of its turns, and returns
    /// what it returns (tests and tools that read a room's relay or entity server; the admin
    /// API reads [`RoomEntry`] instead). Blocks until the worker has run it.
    ///
    /// # Errors
    /// `None` when the room is unknown, the workers are not started, or the worker stopped.
    pub fn inspect<R: Send + 'static>(
        &self,
        id: RoomId,
        visit: impl FnOnce(&Room) -> R + Send + 'static,
    ) -> Option<R> {
        let worker = self.entries.get(&id)?.worker();
        if !self.pool.started() {
            return None;
        }
        let (answer, answered) = std::sync::mpsc::channel();
        let visit = Box::new(move |room: Option<&Room>| {
            let _ = answer.send(room.map(visit));
        });
        self.pool.send(worker, ToWorker::Inspect { id, visit });
        answered.recv().ok().flatten()
    }

    /// Stops taking new rooms and clients (the drain): new connections are refused with
    /// [`RejectReason::ServerDraining`], and a room ends as soon as it is empty.
    pub fn stop_accepting(&mut self) {
        self.accepting = false;
        self.pool.broadcast(|| ToWorker::StopAccepting);
    }

    /// Whether new rooms and clients are taken.
    pub fn accepting(&self) -> bool {
        self.accepting
    }

    /// Makes a room from `config` under `id` (or the next free id), on the worker with the
    /// fewest rooms. An ownership room's physics-host switch is settled first, with the
    /// server's ([`Self::with_physics_host`]).
    ///
    /// # Errors
    ///
    /// [`CreateRoomError`]: a bad config, an id used before, a draining or full server.
    ///
    /// # Panics
    ///
    /// When the worker threads are not started and cannot be
    /// ([`Self::start_workers`] says why instead).
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
        if self.entries.len() >= MAX_ROOMS {
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
        let loads: Vec<usize> = self.workers().iter().map(|w| w.rooms).collect();
        let worker = least_loaded(&loads);
        tracing::info!(
            room = id.0,
            kind = config.kind_name(),
            slots = config.slots(),
            worker,
            "room made"
        );
        let entry = RoomEntry::new(id, config.clone(), worker);
        self.started().send(worker, ToWorker::Create { id, config });
        self.entries.insert(id, entry);
        Ok(id)
    }

    /// Ends room `id` with `reason` (its clients are told, then closed).
    ///
    /// # Errors
    ///
    /// [`UnknownRoom`] for a room that is not live.
    pub fn end(&mut self, id: RoomId, reason: MatchEndReason) -> Result<(), UnknownRoom> {
        let entry = self.entries.get_mut(&id).ok_or(UnknownRoom(id))?;
        tracing::info!(room = id.0, %reason, "room ends");
        entry.end(&reason);
        let worker = entry.worker;
        self.pool.send(worker, ToWorker::End { id, reason });
        Ok(())
    }

    /// Ends every live room with `reason`.
    pub fn end_all(&mut self, reason: MatchEndReason) {
        let ids: Vec<RoomId> = self.entries.keys().copied().collect();
        for id in ids {
            let _ = self.end(id, reason.clone());
        }
    }

    /// The summary of a live or recently ended room.
    pub fn summary(&self, id: RoomId) -> Option<RoomSummary> {
        self.entries
            .get(&id)
            .map(|entry| entry.summary.clone())
            .or_else(|| self.ended.iter().find(|s| s.id == id).cloned())
    }

    /// Every live room's summary, by id.
    pub fn summaries(&self) -> Vec<RoomSummary> {
        self.entries.values().map(|e| e.summary.clone()).collect()
    }

    /// Connections in rooms now.
    pub fn clients(&self) -> usize {
        self.routes.len()
    }

    /// Advances the refused connections' network clock by `dt`; call before the transport
    /// hands packets in (each room's clock is advanced by its worker).
    pub fn update_network(&mut self, dt: Duration) {
        self.refused.update(dt);
    }

    /// Sends every worker its turn over `dt` with what the transport handed in for its rooms
    /// since the last one, and closes the refused connections whose linger passed. The
    /// workers run the turn on their threads: [`Self::collect`] reads what they did.
    ///
    /// # Panics
    ///
    /// As [`Self::create`].
    pub fn dispatch(&mut self, dt: Duration) {
        self.now += dt;
        self.started().dispatch(dt);
        self.expire_refused();
    }

    /// Reads one worker's report, waiting for it until `until` at most (`None`: until every
    /// worker ran the last turn sent): its rooms' numbers, the rooms it forgot, the
    /// connections it refused or closed, and its packets (then handed to the transport by
    /// [`ConnectionSink::drain_packets`]). `false` when there is nothing more to read: every
    /// worker ran the last turn, or `until` passed.
    ///
    /// # Errors
    ///
    /// [`WorkerStopped`] when a worker's thread ended (a room's code panicked): its rooms
    /// are gone.
    pub fn collect(&mut self, until: Option<Instant>) -> Result<bool, WorkerStopped> {
        match self.pool.next_report(until)? {
            Some(report) => {
                self.apply(report);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The rooms' turns reported since the last call.
    pub fn take_turns(&mut self) -> Vec<(RoomId, RoomTurn)> {
        std::mem::take(&mut self.turns)
    }

    fn apply(&mut self, report: Report) {
        for room in report.rooms {
            let id = room.summary.id;
            self.turns.push((id, room.turn));
            if let Some(entry) = self.entries.get_mut(&id) {
                entry.update(room);
            }
        }
        for summary in report.forgotten {
            self.entries.remove(&summary.id);
            if self.ended.len() >= ENDED_KEPT {
                self.ended.pop_front();
            }
            self.ended.push_back(summary);
        }
        for (client, reason) in report.refused {
            if let Some(room) = self.routes.remove(&client)
                && let Some(entry) = self.entries.get_mut(&room)
            {
                entry.clients.remove(&client);
            }
            self.refuse(client, reason);
        }
        self.closed.extend(report.disconnections);
        self.counters.bad_payloads += report.bad_payloads;
        if !report.packets.is_empty() {
            self.outgoing.push((report.packets, report.bytes));
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

    /// Where connection `client` with token `user_data` goes: its room and slot, or why not
    /// (a room ending or ended is unknown to new connections; its worker checks again).
    fn route(
        &self,
        user_data: &[u8; NETCODE_USER_DATA_BYTES],
    ) -> Result<TokenClaims, RejectReason> {
        let claims = TokenClaims::from_user_data(user_data)
            .map_err(|e| RejectReason::Other(e.to_string()))?;
        if !self.accepting {
            return Err(RejectReason::ServerDraining);
        }
        let unknown = RejectReason::UnknownRoom {
            room: claims.room.0,
        };
        let entry = self.entries.get(&claims.room).ok_or(unknown.clone())?;
        if entry.state() >= RoomState::Ending {
            return Err(unknown);
        }
        let players = entry.config.slots();
        if claims.slot >= players {
            return Err(RejectReason::SlotOutOfRange {
                slot: claims.slot,
                players,
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
        let claims = match self.route(user_data) {
            Ok(claims) => claims,
            Err(reason) => return self.refuse(client_id, reason),
        };
        let Some(entry) = self.entries.get_mut(&claims.room) else {
            return;
        };
        tracing::info!(
            client = client_id,
            room = claims.room.0,
            slot = claims.slot,
            worker = entry.worker,
            "client entered its room"
        );
        entry.clients.insert(client_id, claims.slot);
        let worker = entry.worker;
        self.routes.insert(client_id, claims.room);
        let admit = Inbound::Admit {
            client: client_id,
            room: claims.room,
            slot: claims.slot,
        };
        self.pool.push(worker, admit, &[]);
    }

    fn receive(&mut self, client_id: ClientId, payload: &[u8]) -> bool {
        self.counters.packets_in += 1;
        self.counters.bytes_in += payload.len() as u64;
        let routed = self
            .routes
            .get(&client_id)
            .and_then(|id| Some((*id, self.entries.get(id)?.worker)));
        if let Some((room, worker)) = routed {
            let event = Inbound::Payload {
                client: client_id,
                room,
                start: 0,
                len: payload.len(),
            };
            self.pool.push(worker, event, payload);
            return true;
        }
        self.refused.process_packet_from(payload, client_id).is_ok()
    }

    fn disconnect(&mut self, client_id: ClientId) {
        match self.routes.remove(&client_id) {
            Some(room) => {
                if let Some(entry) = self.entries.get_mut(&room) {
                    entry.clients.remove(&client_id);
                    let worker = entry.worker;
                    let event = Inbound::Remove {
                        client: client_id,
                        room,
                    };
                    self.pool.push(worker, event, &[]);
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
        out.append(&mut self.closed);
        out
    }

    fn drain_packets(&mut self, send: &mut dyn FnMut(ClientId, &[u8]) -> PacketSent) {
        let counters = &mut self.counters;
        // Counted when sent: held-back acknowledgements and refused sends are not traffic.
        let mut counted = |client: ClientId, packet: &[u8]| {
            let sent = send(client, packet);
            if sent == PacketSent::Sent {
                counters.packets_out += 1;
                counters.bytes_out += packet.len() as u64;
            }
            sent
        };
        self.refused.drain_packets(&mut counted);
        for (packets, bytes) in self.outgoing.drain(..) {
            let mut at = 0;
            let mut failed: Option<ClientId> = None;
            for (client, len) in packets {
                let packet = bytes.get(at..at + len).unwrap_or_default();
                at += len;
                // A connection whose packet could not be sent loses the rest of this batch
                // (renet resends what must arrive).
                if failed == Some(client) {
                    continue;
                }
                if counted(client, packet) == PacketSent::Failed {
                    failed = Some(client);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(state: RoomState, end_reason: Option<&str>) -> RoomSummary {
        let mut entry =
            RoomEntry::new(RoomId(1), RoomConfig::relay_for::<u8>(2, 64, 8).unwrap(), 0);
        entry.summary.state = state;
        entry.summary.end_reason = end_reason.map(str::to_string);
        entry.summary
    }

    #[test]
    fn a_worker_s_report_never_moves_a_room_back_in_its_life() {
        let ending = summary(RoomState::Ending, Some("ended by the operator"));
        // The worker ran its turn before it was told to end the room.
        let late = later_summary(summary(RoomState::Running, None), &ending);
        assert_eq!(late.state, RoomState::Ending);
        assert_eq!(late.end_reason.as_deref(), Some("ended by the operator"));
        // Its next report, further on, is taken as it is.
        let ended = summary(RoomState::Ended, Some("ended by the operator"));
        assert_eq!(later_summary(ended.clone(), &ending), ended);
    }

    #[test]
    fn rooms_are_spread_over_the_workers_by_their_load() {
        let mut rooms = Rooms::new(Duration::from_secs(30)).with_workers(2);
        let relay = || RoomConfig::relay_for::<u8>(2, 64, 8).unwrap();
        for id in 1..=3 {
            rooms.create(Some(RoomId(id)), relay()).unwrap();
        }
        let workers: Vec<usize> = rooms.rooms().map(RoomEntry::worker).collect();
        assert_eq!(workers, vec![0, 1, 0]);
        // Room 1 ends (empty: at once) and is forgotten after its worker's turn; the next
        // room goes to worker 0 again, now as loaded as worker 1.
        rooms
            .end(RoomId(1), MatchEndReason::EndedByOperator)
            .unwrap();
        rooms.dispatch(Duration::from_millis(10));
        while rooms.collect(None).unwrap() {}
        assert!(rooms.room(RoomId(1)).is_none());
        assert_eq!(rooms.summary(RoomId(1)).unwrap().state, RoomState::Ended);
        rooms.create(Some(RoomId(4)), relay()).unwrap();
        assert_eq!(rooms.room(RoomId(4)).unwrap().worker(), 0);
        let loads: Vec<usize> = rooms.workers().iter().map(|w| w.rooms).collect();
        assert_eq!(loads, vec![2, 1]);
    }
}
