//! The relay server of a networked deterministic session: owns the session clock, gathers each
//! player's input per tick, confirms input sets and broadcasts them with redundancy. It never
//! simulates. [`RelayServer`] is a state machine over an explicit `&mut RenetServer`; the
//! `DeterministicServerPlugin` (the `plugin` module) wires it into an app.
//!
//! Rules (see [the networked session](crate::rules#the-networked-session)):
//! - A player's identity is its connection: the `Hello` goes through the shared handshake of
//!   `simsync_net` (`ServerHandshake`: version, protocols, the session config the client
//!   states — tick rate, players, input fingerprint — once per connection, participant ids
//!   never reused), then takes the first free slot, in connection order; inputs are stored
//!   for the sender's slot only (messages carry no slot to spoof).
//! - Tick `t` is confirmed when every slot's input for `t` has arrived, or at the latest when
//!   the server clock reaches `t + input_hard_tolerance`: a missing input is then replaced by
//!   that player's last input and marked replaced, so one slow player never stalls the others.
//!   An input arriving after its tick was confirmed is late: dropped and counted (once per tick).
//! - A player that disconnects keeps its slot; its inputs are replaced from then on. A seated
//!   player the relay hears nothing from for `silence_timeout_ms` (default
//!   [`DEFAULT_SILENCE_TIMEOUT_MS`]) once the session runs is treated the same way (marked
//!   silent, counted, `PlayerLeft` sent to every client) while its connection stays open; its
//!   next message makes it connected again. Each confirmed set marks the players disconnected
//!   at its tick, so the simulation sees them (see
//!   [disconnected players](crate::rules#disconnected-players)).
//! - Every `Welcome` into a slot carries a fresh reconnect token for it. A `Hello` with the
//!   slot's current token takes the slot again once its player is disconnected, also after the
//!   start ([`seats`]); the new connection gets `Start`, every client `PlayerRejoined`, and
//!   the sets it misses are resent from the history by the acknowledgement rule below (or it
//!   is told it is `Behind`). See
//!   [rejoining](crate::rules#rejoining-a-running-session).
//! - Confirmed sets are sent to every client with redundancy: every set never sent to that
//!   client plus the last `input_redundancy` sets, in every update that has a set never sent
//!   to it (so a burst of confirmations leaves no gap, and a server updating several times a
//!   tick does not send the same sets again each time), and every set after the client's
//!   acknowledged tick once that acknowledgement is overdue (older than the redundancy plus a
//!   round trip: sets still in flight are not sent again) or no new set has gone to it for a
//!   retransmission timeout (confirmations stopped). A resend pass is split into messages of
//!   at most [`UNRELIABLE_MESSAGE_BUDGET`] bytes, at most `resend_bytes_per_update` bytes per
//!   update, and is not repeated before a retransmission timeout.
//! - Every input is checked before it is stored: longer than `max_input_bytes`, or not decodable
//!   as the game's input type, it is dropped and counted ([`DroppedInputs`](crate::DroppedInputs)); its slot is then
//!   missing and replaced at the hard tolerance like any missing input.
//! - Checksums are judged per tick by [`checksums`]: once every connected player reported, or
//!   after `checksum_timeout_ms`; the players that differ from the judge (the majority, or an
//!   authoritative room's authority) are named in the `Desync` sent to every client, with the
//!   judge, once per desync episode of each player (when it starts; counted and logged once,
//!   see [episodes](crate::rules#desyncs-are-reported-once-per-episode)). A report for a tick
//!   not confirmed yet is refused and counted.
//! - Every message is first checked against its sender's [`RelayLimits`] (token buckets per
//!   connection for inputs, checksums and control messages): one over its limit is dropped
//!   before its content is looked at and counted per player and kind ([`RateLimited`]).
//! - The relay keeps `input_history_ticks` confirmed sets (default 10 s); a client whose
//!   acknowledgement is older is told it is [`Behind`](SessionServerMessage::Behind) and needs
//!   a snapshot (at most once a second; no sets are resent to it) — unless the relay serves
//!   snapshots (`snapshots`), when it gets one instead, as a late joiner does.
//! - With snapshots served, the session starts once `start_players` slots are taken, and a new
//!   player may take a slot no one ever took while it runs. The relay asks a connected client
//!   (the buddy, [`snapshots`]) for a snapshot of its verified world, checks its checksum
//!   against the checksum the other clients verified at its tick (a liar is counted, reported
//!   as [`LyingSnapshot`] and another buddy is asked), forwards it to the joiner on the
//!   snapshot channel within `bytes_per_update`, then the confirmed sets after its tick. See
//!   [late join](crate::rules#late-join-and-rejoin-from-a-snapshot).
//! - Matches ([`rematch`]): every session message names its match and only the current
//!   match's, while it runs, is handled (others are dropped and counted by reason); the app's
//!   [`RelayCommand`](crate::RelayCommand)s end the match and open the next on the same
//!   connections, every seated player in its slot, and the next match starts once every seated
//!   player is ready. See [matches and rematches](crate::rules#matches-and-rematches).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use bevy::prelude::*;
use simsync_net::bevy_renet::RenetServer;
use simsync_net::renet::{Bytes, ClientId, ServerEvent};
use simsync_net::{
    ChunkError, ClientMessage, DEFAULT_MAX_DECODED_SNAPSHOT_BYTES, DecodeStats, DesyncReport,
    HandshakeStats, Hello, InputFingerprint, InputSet, MatchEndReason, MatchId, MatchMessage,
    MatchPhase, NetChannel, Protocols, RateLimiter, ReconnectTokens, ServerHandshake,
    ServerMessage, ServerNetExt, SessionClientMessage, SessionServerMessage, SimInput,
    SnapshotAssembly, SnapshotChunk, SnapshotError, SnapshotFrame, Tick, UNRELIABLE_MESSAGE_BUDGET,
    match_drop, millis_u32,
};

use crate::breakdowns::{Breakdown, BreakdownVotes};
use crate::checksums::{ChecksumRefusal, ChecksumVotes, Judgement};
use crate::episodes::DesyncEpisodes;
use crate::limits::{Limited, RelayLimits, input_tick_cost};
use crate::matches::MatchChanged;
use crate::seats::{Seat, SlotView, choose_assigned_seat, choose_seat};
use crate::snapshots::{
    Candidate, CaughtBy, LyingSnapshot, Phase, Rescue, SnapshotServed, SnapshotServing, Transfer,
    Verdict, check_snapshot, pick_buddy,
};
use crate::stats::RelayStats;

mod authority_feed;
mod rematch;
mod serving;

/// Milliseconds the relay waits for every player's checksum of a tick before judging it with
/// the reports it has (default of `checksum_timeout_ms`).
pub const DEFAULT_CHECKSUM_TIMEOUT_MS: u32 = 3_000;

/// Milliseconds of silence after which a seated player counts as disconnected (default of
/// `silence_timeout_ms`).
pub const DEFAULT_SILENCE_TIMEOUT_MS: u32 = 2_000;

/// Time between two `Behind` reports to a client that stays behind the history.
const BEHIND_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Ticks between two clock reports to a client whose lead did not change.
const CLOCK_REFRESH_TICKS: Tick = 8;

/// Configuration of the relay server.
#[derive(Debug, Clone, PartialEq, Reflect)]
pub struct RelayServerConfig {
    /// Player slots; the clock starts when all are taken.
    pub players: u8,
    /// Ticks per second.
    pub tick_rate_hz: u16,
    /// Ticks the server waits for a missing input before replacing it (default 8).
    pub input_hard_tolerance: u32,
    /// Confirmed sets repeated in every message (default 3).
    pub input_redundancy: u32,
    /// The encoded default input, used for a player that never sent one.
    pub default_input: Vec<u8>,
    /// Milliseconds between pings to each client (default 250).
    pub ping_interval_ms: u32,
    /// Longest accepted encoded input, in bytes (default [`DEFAULT_MAX_INPUT_BYTES`](simsync_net::DEFAULT_MAX_INPUT_BYTES)); longer
    /// inputs are dropped. Never below the encoded default input's length.
    pub max_input_bytes: usize,
    /// Milliseconds after a tick's first checksum report at which it is judged with the reports
    /// received (default [`DEFAULT_CHECKSUM_TIMEOUT_MS`]).
    pub checksum_timeout_ms: u32,
    /// Confirmed sets kept for resending, in ticks (default 10 s of ticks). A client whose
    /// acknowledgement falls further behind is told it needs a snapshot.
    pub input_history_ticks: u32,
    /// Bytes of resent confirmed sets per client per update, at most (default 24,000; renet
    /// puts at most `BYTES_PER_UPDATE` = 60,000 on the wire per connection and update).
    pub resend_bytes_per_update: usize,
    /// Per-connection rate limits (default [`RelayLimits::for_tick_rate`]; tests that flood on
    /// purpose may use [`RelayLimits::UNLIMITED`]).
    pub limits: RelayLimits,
    /// Milliseconds without any message from a seated player, once the session runs, after
    /// which the player counts as disconnected (default [`DEFAULT_SILENCE_TIMEOUT_MS`]).
    pub silence_timeout_ms: u32,
    /// Seed of the reconnect tokens given in `Welcome`s; `None` (default) seeds from
    /// [`simsync_net::entropy_seed`] when the relay is built, so no one can predict them.
    /// Tests set one to see the same tokens on every run.
    pub reconnect_seed: Option<u64>,
    /// Taken slots at which the session starts (default `players`; at most `players`). Below
    /// `players` only with `snapshots`: the free slots are then taken by late joiners.
    pub start_players: u8,
    /// Whether and how the relay serves snapshots to late joiners and to players whose missing
    /// confirmed sets are gone (default `None`: it does not; late joiners are refused with
    /// `SessionStarted`, and a player behind the history is told it is `Behind`).
    pub snapshots: Option<SnapshotServing>,
}

/// Why an input was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputFault {
    Undecodable,
    Oversized,
}

/// The fault of an encoded input: longer than `max_bytes`, or refused by `decodes`.
fn input_fault(bytes: &[u8], max_bytes: usize, decodes: fn(&[u8]) -> bool) -> Option<InputFault> {
    if bytes.len() > max_bytes {
        Some(InputFault::Oversized)
    } else if !decodes(bytes) {
        Some(InputFault::Undecodable)
    } else {
        None
    }
}

/// Whether `bytes` decode as an `I`.
fn decodes_as<I: SimInput>(bytes: &[u8]) -> bool {
    simsync_net::decode::<I>(bytes).is_ok()
}

/// The confirmed set of `tick` in the history, found by position: the history holds consecutive
/// ticks, oldest first.
fn confirmed_set(history: &VecDeque<(Tick, InputSet)>, tick: Tick) -> Option<&InputSet> {
    let oldest = history.front()?.0;
    let index = usize::try_from(i64::from(tick) - i64::from(oldest)).ok()?;
    history
        .get(index)
        .filter(|(t, _)| *t == tick)
        .map(|(_, set)| set)
}

/// What the relay reports to its app (written as Messages by
/// [`DeterministicServerPlugin`](crate::DeterministicServerPlugin); an app that drives the
/// relay itself takes them with [`RelayServer::take_events`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RelayEvent {
    /// The match started, ended, or the next one opened.
    Match(MatchChanged),
    /// A snapshot was forwarded whole.
    Served(SnapshotServed),
    /// A buddy lied.
    Lying(LyingSnapshot),
}

/// A snapshot forwarded to a joiner, kept so that the joiner's refusal names its buddy.
#[derive(Debug, Clone, Copy)]
struct Served {
    request: u32,
    joiner: u8,
    buddy: u8,
    tick: Tick,
}

/// Reads the tick and checksum an encoded snapshot's header states (`Err`: unreadable, and why).
pub type HeaderReader = fn(&[u8]) -> Result<(Tick, u64), SnapshotError>;

/// The snapshot format's [`HeaderReader`]: the tick and checksum of an encoded snapshot's
/// header, read without decoding the world ([`SnapshotFrame::read_header`], at most
/// [`DEFAULT_MAX_DECODED_SNAPSHOT_BYTES`] decompressed).
///
/// # Errors
/// The [`SnapshotError`] of bytes that are not a snapshot of this format.
pub fn read_snapshot_header(bytes: &[u8]) -> Result<(Tick, u64), SnapshotError> {
    SnapshotFrame::read_header(bytes, DEFAULT_MAX_DECODED_SNAPSHOT_BYTES)
        .map(|header| (header.tick, header.checksum))
}

/// Forwarded snapshots remembered for a joiner's refusal.
const SERVED_MEMORY: usize = 16;

#[derive(Debug, Default)]
struct Slot {
    client: Option<ClientId>,
    inputs: BTreeMap<Tick, Vec<u8>>,
    /// Ticks whose input was dropped or counted late: each is counted once, later copies are
    /// ignored.
    settled: std::collections::BTreeSet<Tick>,
    last_input: Vec<u8>,
    ack: Tick,
    rtt: simsync_net::RttEstimator,
    /// The last clock report sent: (lead, server tick).
    clock_sent: Option<(f32, Tick)>,
    /// `Desync` messages of the match sent to this slot's connections.
    desyncs_sent: u32,
    /// Every confirmed set through this tick was sent to the client at least once.
    sent_through: Tick,
    /// The next tick of the resend pass under way (`None`: no pass).
    resend_next: Option<Tick>,
    /// No new resend pass (nor `Behind` report) before this time.
    resend_after: Duration,
    /// When the client was last sent a set it had never been sent.
    sent_new_at: Duration,
    /// When the relay last received a message from the client.
    last_heard: Duration,
    /// Nothing was heard from the client for the silence timeout (and nothing since).
    silent: bool,
    /// The seated player is ready for the match (its session is set up for it): a new player
    /// at once, a player of an earlier match once it answered `MatchOpened` with `Ready`.
    ready: bool,
    /// How the slot's last player left the running match (`None` while seated, or when no
    /// player left it this match).
    departure: Option<Departure>,
}

/// How a player left the running match: said `Goodbye` first, or its connection closed
/// without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Departure {
    Goodbye,
    Lost,
}

impl Slot {
    /// Whether the slot's player counts as connected: seated and not silent.
    fn connected(&self) -> bool {
        self.client.is_some() && !self.silent
    }
}

/// The relay server's state (a resource).
#[derive(Resource)]
pub struct RelayServer {
    config: RelayServerConfig,
    slots: Vec<Slot>,
    by_client: HashMap<ClientId, u8>,
    /// The current match, and where it is.
    match_id: MatchId,
    phase: MatchPhase,
    /// Why the current match ended, once it did.
    end_reason: Option<MatchEndReason>,
    server_tick: Tick,
    confirmed: VecDeque<(Tick, InputSet)>,
    confirmed_tick: Tick,
    now: Duration,
    last_ping: Duration,
    decode: DecodeStats,
    checksums: ChecksumVotes,
    breakdowns: BreakdownVotes,
    /// The last judged tick disagreed (breakdowns are taken for the first tick of such a run).
    disagreement_run: bool,
    /// Each player's desync episode (reported once, when it starts).
    episodes: DesyncEpisodes,
    /// Desync reports not yet taken by the plugin (bounded: the oldest are dropped).
    reports: VecDeque<DesyncReport>,
    /// Whether an input decodes as the game's input type.
    decodes: fn(&[u8]) -> bool,
    stats: RelayStats,
    handshake: ServerHandshake,
    /// Each connection's token buckets, created full with its first message.
    buckets: HashMap<ClientId, RateLimiter<Limited>>,
    /// Each slot's reconnect token.
    tokens: ReconnectTokens,
    /// Snapshot transfers under way, one per joiner.
    transfers: Vec<Transfer>,
    /// The id of the next snapshot request.
    next_request: u32,
    /// The last snapshots forwarded.
    served: VecDeque<Served>,
    /// Events not yet taken by the plugin.
    events: Vec<RelayEvent>,
    /// Reads the tick and checksum a snapshot's header states (`None`: the relay takes the
    /// buddy's word in the chunks and relies on the joiner's check).
    read_header: Option<HeaderReader>,
    /// Slots assigned to connections before their `Hello` ([`Self::assign_slot`]).
    assigned: HashMap<ClientId, u8>,
    /// The verified world of an authoritative room ([`Self::with_authority`]).
    authority: Option<crate::authority::AuthorityHost>,
}

/// Most slot assignments kept for connections that have not said hello (netcode's limit on
/// clients per server).
const MAX_ASSIGNED: usize = simsync_net::NETCODE_MAX_CLIENTS;

impl RelayServer {
    /// A relay for `config.players` players of input type `I` (each input is decoded as `I`
    /// before it is relayed).
    pub fn new<I: SimInput>(config: RelayServerConfig) -> Self {
        let fingerprint =
            InputFingerprint::of_input::<I>(config.max_input_bytes.max(config.default_input.len()));
        Self::build(config, fingerprint, decodes_as::<I>)
    }

    /// A relay that knows its game's inputs only by `fingerprint` (a dedicated server built
    /// without the game's code): an input is checked against `config.max_input_bytes` alone,
    /// and a client is welcomed only when it states the same fingerprint (its input type's
    /// name and size bound, see [`InputFingerprint::of_input`]). A server built with the
    /// game's input type uses [`Self::new`], which also decodes every input.
    pub fn with_fingerprint(config: RelayServerConfig, fingerprint: InputFingerprint) -> Self {
        Self::build(config, fingerprint, |_| true)
    }

    fn build(
        mut config: RelayServerConfig,
        fingerprint: InputFingerprint,
        decodes: fn(&[u8]) -> bool,
    ) -> Self {
        config.max_input_bytes = config.max_input_bytes.max(config.default_input.len());
        config.start_players = if config.snapshots.is_some() {
            config.start_players.clamp(1, config.players.max(1))
        } else {
            config.players
        };
        let n = usize::from(config.players);
        let slots = (0..n)
            .map(|_| Slot {
                last_input: config.default_input.clone(),
                ..Slot::default()
            })
            .collect();
        let handshake = ServerHandshake::new(Protocols::SESSION)
            .with_tick_rate_hz(config.tick_rate_hz)
            .with_players(config.players)
            .with_input(fingerprint);
        Self {
            stats: RelayStats::zeroed(MatchId::FIRST, n),
            tokens: ReconnectTokens::new(
                n,
                config
                    .reconnect_seed
                    .unwrap_or_else(simsync_net::entropy_seed),
            ),
            config,
            slots,
            by_client: HashMap::new(),
            match_id: MatchId::FIRST,
            phase: MatchPhase::Lobby,
            end_reason: None,
            server_tick: 0,
            confirmed: VecDeque::new(),
            confirmed_tick: 0,
            now: Duration::ZERO,
            last_ping: Duration::ZERO,
            decode: DecodeStats::default(),
            checksums: ChecksumVotes::default(),
            breakdowns: BreakdownVotes::default(),
            disagreement_run: false,
            episodes: DesyncEpisodes::new(n),
            reports: VecDeque::new(),
            decodes,
            handshake,
            buckets: HashMap::new(),
            transfers: Vec::new(),
            next_request: 1,
            served: VecDeque::new(),
            events: Vec::new(),
            read_header: None,
            assigned: HashMap::new(),
            authority: None,
        }
    }

    /// Makes the relay read the tick and checksum of every snapshot's header with `read` and
    /// refuse a snapshot whose header contradicts the checksum its buddy stated, or that does
    /// not read (`Err`).
    pub fn with_header_reader(mut self, read: HeaderReader) -> Self {
        self.read_header = Some(read);
        self
    }

    /// The events since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<RelayEvent> {
        std::mem::take(&mut self.events)
    }

    /// Whether the current match runs (its players took their slots and were ready; the
    /// clock runs).
    pub fn started(&self) -> bool {
        self.phase == MatchPhase::Running
    }

    /// The current match ([matches](crate::rules#matches-and-rematches)).
    pub fn match_id(&self) -> MatchId {
        self.match_id
    }

    /// Where the current match is: its lobby, running, or ended.
    pub fn phase(&self) -> MatchPhase {
        self.phase
    }

    /// Why the current match ended, once it did (`None` in its lobby and while it runs).
    pub fn end_reason(&self) -> Option<&MatchEndReason> {
        self.end_reason.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &RelayServerConfig {
        &self.config
    }

    /// The counters.
    pub fn stats(&self) -> &RelayStats {
        &self.stats
    }

    /// The handshake's counters: hellos accepted and refused (a refusal for a config mismatch
    /// counts here, see [the networked session](crate::rules#the-networked-session)).
    pub fn handshake_stats(&self) -> HandshakeStats {
        self.handshake.stats()
    }

    /// The lowest tick every connected player acknowledged holding all confirmed sets through
    /// (`None` when no player is connected).
    pub fn acknowledged_through(&self) -> Option<Tick> {
        self.slots
            .iter()
            .filter(|s| s.connected())
            .map(|s| s.ack)
            .min()
    }

    /// Whether slot `slot`'s player counts as connected (seated, and heard from within the
    /// silence timeout); `false` for an unknown slot.
    pub fn is_connected(&self, slot: u8) -> bool {
        self.slots
            .get(usize::from(slot))
            .is_some_and(Slot::connected)
    }

    /// Seats `client` in `slot` when it says hello, instead of the first free slot (a
    /// dedicated server reads the slot from the client's connect token, which authenticates
    /// it, so the token also takes the slot again after its player left; see
    /// [seats](crate::rules#seats-named-by-the-connect-token)). Call before the connection's
    /// first message; the assignment is used by its `Hello` and forgotten when it disconnects.
    /// A `Hello` with a reconnect token follows the token's rule instead.
    pub fn assign_slot(&mut self, client: ClientId, slot: u8) {
        if self.assigned.len() < MAX_ASSIGNED || self.assigned.contains_key(&client) {
            self.assigned.insert(client, slot);
        }
    }

    /// The slot of a connected client.
    pub fn slot_of(&self, client: ClientId) -> Option<u8> {
        self.by_client.get(&client).copied()
    }

    /// A `Hello`: the shared handshake's rules, then the seat rule ([`choose_seat`]): a free
    /// slot before the start, or the slot of a valid reconnect token whose player is gone. The
    /// `Welcome` carries the slot's new reconnect token.
    fn on_hello(&mut self, client: ClientId, server: &mut RenetServer, hello: &Hello) {
        let views: Vec<SlotView> = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| SlotView {
                seated: s.client.is_some(),
                connected: s.connected(),
                claimed: self.tokens.current(i as u8).is_some(),
            })
            .collect();
        let late_join = self.config.snapshots.is_some();
        let seat = match self.assigned.remove(&client) {
            Some(slot) if hello.reconnect.is_none() => {
                choose_assigned_seat(&views, slot, self.started(), late_join)
            }
            _ => choose_seat(
                &views,
                self.started(),
                late_join,
                hello.reconnect,
                &self.tokens,
            ),
        };
        let reply = match self
            .handshake
            .on_hello(client, hello, self.server_tick, || {
                seat.clone().map(|s| Some(s.slot()))
            }) {
            Ok(mut welcome) => {
                if let Ok(seat) = seat {
                    welcome.reconnect_token = self.tokens.issue(seat.slot());
                }
                ServerMessage::Welcome(welcome)
            }
            Err(reason) => {
                if hello.reconnect.is_some() {
                    self.stats.refused_rejoins += 1;
                }
                self.stats.refused_hellos.record(&reason);
                ServerMessage::Rejected { reason }
            }
        };
        let welcomed = matches!(reply, ServerMessage::Welcome(_));
        if let Err(error) = server.send_msg(client, &reply) {
            warn!("relay: reply to {client} not sent: {error}");
        }
        if let (Ok(seat), true) = (seat, welcomed) {
            self.seat(server, client, seat, hello.reconnect.is_some());
        }
        self.try_start(server);
    }

    /// The welcomed `client` takes `seat`: a rejoin or a late join into the running match, or
    /// a seat between matches ([`Self::seat_between_matches`]; `with_token`: the `Hello` had a
    /// reconnect token).
    fn seat(&mut self, server: &mut RenetServer, client: ClientId, seat: Seat, with_token: bool) {
        match seat {
            Seat::Rejoin(slot) if self.started() => self.rejoin(server, client, slot),
            Seat::Late(slot) => {
                self.take_running_slot(server, client, slot);
                self.stats.late_joins[usize::from(slot)] += 1;
                info!(
                    "relay: a new player took free slot {slot} at server tick {}; it gets a \
                     snapshot",
                    self.server_tick
                );
                self.start_transfer(slot);
            }
            seat => self.seat_between_matches(server, client, seat.slot(), with_token),
        }
    }

    /// The match's players took their slots and are ready: the clock starts and every client
    /// is told.
    fn start(&mut self, server: &mut RenetServer) {
        self.phase = MatchPhase::Running;
        self.stats.phase = MatchPhase::Running;
        for slot in &mut self.slots {
            slot.last_heard = self.now;
            // A player who left the lobby did not leave this match.
            slot.departure = None;
        }
        let players = self.slots.iter().filter(|s| s.client.is_some()).count() as u8;
        info!(
            "relay: {players} of {} players joined; {} starts",
            self.slots.len(),
            self.match_id
        );
        if let Err(error) = server.broadcast_msg(&self.start_message()) {
            warn!("relay: start not sent: {error}");
        }
        self.events.push(RelayEvent::Match(MatchChanged::Started {
            match_id: self.match_id,
            players,
        }));
    }

    fn start_message(&self) -> ServerMessage {
        ServerMessage::session(
            self.match_id,
            SessionServerMessage::Start {
                tick: 0,
                players: self.config.players,
                tick_rate_hz: self.config.tick_rate_hz,
            },
        )
    }

    /// `client` takes `slot` again while the session runs: a connection still bound to the slot
    /// is closed; the slot forgets what it knew of the old connection and acknowledges nothing,
    /// so the next update starts resending the history from tick 1 (or reports it `Behind`).
    /// The client gets `Start`, every client `PlayerRejoined`.
    fn rejoin(&mut self, server: &mut RenetServer, client: ClientId, slot: u8) {
        self.take_running_slot(server, client, slot);
        self.stats.rejoins[usize::from(slot)] += 1;
        info!(
            "relay: player {slot} rejoined at server tick {} with its reconnect token",
            self.server_tick
        );
    }

    /// `client` takes `slot` in the running session (a rejoin, or a late join): see
    /// [`Self::rejoin`]. A snapshot transfer for the slot's previous connection ends.
    fn take_running_slot(&mut self, server: &mut RenetServer, client: ClientId, slot: u8) {
        let index = usize::from(slot);
        self.transfers.retain(|t| t.joiner != slot);
        // A new connection's next disagreement is a new episode.
        self.episodes.end(index);
        let s = &mut self.slots[index];
        if let Some(old) = s.client.replace(client) {
            self.by_client.remove(&old);
            server.disconnect(old);
        }
        self.by_client.insert(client, slot);
        s.inputs.clear();
        s.ack = 0;
        s.rtt = simsync_net::RttEstimator::new();
        s.clock_sent = None;
        s.sent_through = self.confirmed_tick;
        s.resend_next = None;
        s.resend_after = self.now;
        s.sent_new_at = self.now;
        s.last_heard = self.now;
        s.silent = false;
        s.departure = None;
        s.ready = true;
        self.stats.ready[index] = true;
        if let Err(error) = server.send_msg(client, &self.start_message()) {
            warn!("relay: start not sent to rejoined player {slot}: {error}");
        }
        self.player_rejoined(server, slot);
    }

    /// A player's inputs from `first_tick` on: each is checked, then stored for its tick unless
    /// one is stored already (a confirmed tick's input is late or a duplicate).
    fn on_inputs(&mut self, slot: usize, first_tick: Tick, inputs: Vec<Vec<u8>>, ack: Tick) {
        let s = &mut self.slots[slot];
        s.ack = s.ack.max(ack.min(self.confirmed_tick));
        for (i, input) in inputs.into_iter().enumerate() {
            let tick = first_tick.saturating_add(i as Tick);
            // Bounded: never store inputs far in the future (hostile clients).
            if tick <= 0 || tick > self.server_tick + 1_024 || s.settled.contains(&tick) {
                continue;
            }
            if tick > self.confirmed_tick && s.inputs.contains_key(&tick) {
                continue;
            }
            if let Some(fault) = input_fault(&input, self.config.max_input_bytes, self.decodes) {
                s.settled.insert(tick);
                let dropped = &mut self.stats.dropped_inputs[slot];
                match fault {
                    InputFault::Undecodable => dropped.undecodable += 1,
                    InputFault::Oversized => dropped.oversized += 1,
                }
                debug!("relay: player {slot}'s input for tick {tick} dropped: {fault:?}");
                continue;
            }
            if tick <= self.confirmed_tick {
                // Confirmed already: late if it was replaced (a duplicate otherwise).
                if confirmed_set(&self.confirmed, tick).is_some_and(|set| set.is_replaced(slot)) {
                    self.stats.late_inputs[slot] += 1;
                    s.settled.insert(tick);
                }
                continue;
            }
            s.inputs.insert(tick, input);
        }
        // Settled ticks are remembered as long as confirmed sets are kept.
        let keep_from = self
            .confirmed
            .front()
            .map_or(self.confirmed_tick, |(t, _)| *t);
        while s.settled.first().is_some_and(|t| *t < keep_from) {
            s.settled.pop_first();
        }
    }

    /// Handles received messages, advances the clock by `ticks`, confirms and broadcasts.
    pub fn update(&mut self, server: &mut RenetServer, dt: Duration, ticks: u32) {
        self.now += dt;
        while let Some(event) = server.get_event() {
            self.on_event(server, event);
        }
        for received in server.receive_msgs(&mut self.decode) {
            let client = received.client_id;
            if let Some(slot) = self.heard_from(client) {
                self.player_rejoined(server, slot);
            }
            match received.message {
                Ok(message) => {
                    if self.admit(client, &message) {
                        self.on_message(server, client, message);
                    }
                }
                Err(error) => {
                    self.stats.rejected_messages += 1;
                    debug!("relay: bad message from {client}: {error}");
                    if let Some(reason) = self.handshake.on_decode_error(&error) {
                        self.stats.refused_hellos.record(&reason);
                        let _ = server.send_msg(client, &ServerMessage::Rejected { reason });
                    }
                }
            }
        }
        self.end_if_all_said_goodbye(server);
        if !self.started() {
            return;
        }
        self.server_tick += ticks as Tick;
        self.stats.server_tick = self.server_tick;
        self.mark_silent(server);
        self.confirm_ready();
        self.feed_authority();
        self.judge_checksums(server);
        self.judge_breakdowns(server);
        self.drive_transfers(server);
        self.broadcast(server);
        if self.now.saturating_sub(self.last_ping).as_millis() as u32
            >= self.config.ping_interval_ms
        {
            self.last_ping = self.now;
            let ping = ServerMessage::Ping {
                t: millis_u32(self.now),
            };
            self.broadcast_live(server, &ping);
        }
    }

    /// Whether `message` from `client` is within the connection's [`RelayLimits`] (taking a
    /// token if so); counts it as admitted or rate limited for the sender's slot.
    fn admit(&mut self, client: ClientId, message: &ClientMessage) -> bool {
        let kind = Limited::of(message);
        let cost = self.cost_of(client, message);
        let limits = &self.config.limits;
        let admitted = self
            .buckets
            .entry(client)
            .or_insert_with(|| limits.limiter())
            .try_take_n(kind, cost, self.now);
        match (
            self.by_client.get(&client).map(|s| usize::from(*s)),
            admitted,
        ) {
            (Some(slot), true) => self.stats.admitted_messages[slot] += 1,
            (Some(slot), false) => self.stats.rate_limited[slot].add(kind),
            (None, false) => self.stats.rate_limited_unseated += 1,
            (None, true) => {}
        }
        if !admitted {
            trace!("relay: {client} over its {kind:?} limit, dropped");
        }
        admitted
    }

    /// The tokens `message` from `client` costs in its bucket ([rate
    /// limits](crate::rules#rate-limits)): an `Inputs` message from a seated client costs the
    /// ticks of input it adds beyond the newest its slot holds (unconfirmed or confirmed), at
    /// least one; every other message one.
    fn cost_of(&self, client: ClientId, message: &ClientMessage) -> u32 {
        let ClientMessage::Session(MatchMessage {
            message:
                SessionClientMessage::Inputs {
                    first_tick, inputs, ..
                },
            ..
        }) = message
        else {
            return 1;
        };
        let Some(slot) = self.by_client.get(&client) else {
            return 1;
        };
        let s = &self.slots[usize::from(*slot)];
        let newest = s
            .inputs
            .last_key_value()
            .map_or(self.confirmed_tick, |(t, _)| (*t).max(self.confirmed_tick));
        input_tick_cost(*first_tick, inputs.len(), newest)
    }

    fn on_event(&mut self, server: &mut RenetServer, event: ServerEvent) {
        match event {
            ServerEvent::ClientConnected { client_id } => {
                debug!("relay: {client_id} connected");
            }
            ServerEvent::ClientDisconnected { client_id, reason } => {
                self.handshake.on_left(client_id);
                self.assigned.remove(&client_id);
                self.buckets.remove(&client_id);
                if let Some(slot) = self.by_client.remove(&client_id) {
                    self.transfers.retain(|t| t.joiner != slot);
                    info!(
                        "relay: player {slot} left ({reason}); its inputs are replaced from now on"
                    );
                    let s = &mut self.slots[usize::from(slot)];
                    let was_connected = s.connected();
                    if s.departure != Some(Departure::Goodbye) {
                        s.departure = Some(Departure::Lost);
                    }
                    s.client = None;
                    s.ready = false;
                    self.stats.ready[usize::from(slot)] = false;
                    if was_connected {
                        self.player_left(server, slot);
                    }
                }
            }
        }
    }

    /// Any message from `client`: a seated player is heard from now; a silent one counts as
    /// connected again, and its slot is returned.
    fn heard_from(&mut self, client: ClientId) -> Option<u8> {
        let slot = self.by_client.get(&client).copied()?;
        let s = &mut self.slots[usize::from(slot)];
        s.last_heard = self.now;
        if !s.silent {
            return None;
        }
        s.silent = false;
        info!("relay: player {slot} is heard from again; its inputs are used again");
        Some(slot)
    }

    /// Marks every seated player not heard from for `silence_timeout_ms` as disconnected.
    fn mark_silent(&mut self, server: &mut RenetServer) {
        let timeout = Duration::from_millis(u64::from(self.config.silence_timeout_ms));
        for index in silent_slots(&self.slots, self.now, timeout) {
            self.slots[index].silent = true;
            self.stats.silent_disconnects[index] += 1;
            info!(
                "relay: nothing heard from player {index} for {timeout:?}; it counts as \
                 disconnected and its inputs are replaced"
            );
            self.player_left(server, index as u8);
        }
    }

    /// Sends `message` to every connection but the seated players counted silent: nothing
    /// goes to a player that stopped answering ([silent players](crate::rules#disconnected-players));
    /// it hears what it missed once it is heard from again.
    fn broadcast_live(&self, server: &mut RenetServer, message: &ServerMessage) {
        let bytes = match simsync_net::encode(message) {
            Ok(bytes) => Bytes::from(bytes),
            Err(error) => {
                warn!("relay: {message:?} not encoded: {error}");
                return;
            }
        };
        let channel = message.channel();
        for client in server.clients_id() {
            let silent = self
                .by_client
                .get(&client)
                .is_some_and(|slot| self.slots[usize::from(*slot)].silent);
            if !silent && server.can_send_message(client, channel.id(), bytes.len()) {
                server.send_message(client, channel, bytes.clone());
            }
        }
    }

    /// `client` says it leaves: its player's departure is clean (a match whose players all
    /// left so ends `Completed`, [matches](crate::rules#matches-and-rematches)) and its
    /// connection is closed at once.
    fn on_goodbye(&mut self, server: &mut RenetServer, client: ClientId) {
        if let Some(slot) = self.by_client.get(&client).copied() {
            info!("relay: player {slot} says goodbye");
            self.slots[usize::from(slot)].departure = Some(Departure::Goodbye);
        }
        server.disconnect(client);
    }

    /// Ends the running match `Completed` once every player of it left and each said goodbye
    /// first (no slot seated, none left without a goodbye, at least one goodbye).
    fn end_if_all_said_goodbye(&mut self, server: &mut RenetServer) {
        if self.phase != MatchPhase::Running {
            return;
        }
        let all_gone = self
            .slots
            .iter()
            .all(|s| s.client.is_none() && s.departure != Some(Departure::Lost));
        let any_goodbye = self
            .slots
            .iter()
            .any(|s| s.departure == Some(Departure::Goodbye));
        if all_gone && any_goodbye {
            info!("relay: every player of {} said goodbye", self.match_id);
            self.end_match(server, MatchEndReason::Completed);
        }
    }

    /// Counts `slot`'s player as gone at the current server tick and tells every client.
    fn player_left(&mut self, server: &mut RenetServer, slot: u8) {
        self.stats.disconnected_at[usize::from(slot)] = Some(self.server_tick);
        let left = ServerMessage::session(
            self.match_id,
            SessionServerMessage::PlayerLeft {
                slot,
                tick: self.server_tick,
            },
        );
        self.broadcast_live(server, &left);
    }

    /// Counts `slot`'s player as back at the current server tick and tells every client.
    fn player_rejoined(&mut self, server: &mut RenetServer, slot: u8) {
        self.stats.rejoined_at[usize::from(slot)] = Some(self.server_tick);
        let back = ServerMessage::session(
            self.match_id,
            SessionServerMessage::PlayerRejoined {
                slot,
                tick: self.server_tick,
            },
        );
        self.broadcast_live(server, &back);
    }

    fn on_message(&mut self, server: &mut RenetServer, client: ClientId, message: ClientMessage) {
        match message {
            ClientMessage::Hello(hello) => self.on_hello(client, server, &hello),
            ClientMessage::Ping { t } => {
                let pong = ServerMessage::Pong {
                    t,
                    server_time_ms: millis_u32(self.now),
                };
                let _ = server.send_msg(client, &pong);
            }
            ClientMessage::Pong { t } => {
                if let Some(slot) = self.by_client.get(&client) {
                    let s = &mut self.slots[usize::from(*slot)];
                    if let Some(rtt) = s.rtt.on_pong(t, millis_u32(self.now)) {
                        self.stats.rtt_ms[usize::from(*slot)] = s.rtt.rtt_ms_or(rtt);
                    }
                }
            }
            ClientMessage::Session(session) => self.on_session(server, client, session),
            ClientMessage::Goodbye => self.on_goodbye(server, client),
            ClientMessage::Ownership(_) => self.stats.ignored_messages += 1,
        }
    }

    /// A session message of match `session.match_id`: `Ready` goes to the match rule
    /// ([`Self::on_ready`]); any other is dropped and counted unless it belongs to the current
    /// match while it runs ([`match_drop`]), then handled for the sender's slot.
    fn on_session(
        &mut self,
        server: &mut RenetServer,
        client: ClientId,
        session: MatchMessage<SessionClientMessage>,
    ) {
        let MatchMessage { match_id, message } = session;
        if message == SessionClientMessage::Ready {
            self.on_ready(server, client, match_id);
            return;
        }
        if let Some(drop) = match_drop(match_id, Some((self.match_id, self.phase))) {
            self.stats.match_drops.count(drop);
            debug!("relay: a session message of {match_id} from {client} dropped: {drop:?}");
            return;
        }
        let slot = self.by_client.get(&client).map(|s| usize::from(*s));
        match (message, slot) {
            (
                SessionClientMessage::Inputs {
                    first_tick,
                    inputs,
                    ack_tick,
                },
                Some(slot),
            ) => self.on_inputs(slot, first_tick, inputs, ack_tick),
            (SessionClientMessage::Checksum { tick, checksum }, Some(slot)) => {
                self.on_checksum(slot, tick, checksum);
            }
            (
                SessionClientMessage::ComponentHashes {
                    tick,
                    components,
                    resources,
                    slots,
                },
                Some(slot),
            ) => self.on_breakdown(
                slot,
                tick,
                Breakdown {
                    components,
                    resources,
                    slots,
                },
            ),
            (SessionClientMessage::SnapshotChunk(chunk), _) => {
                self.on_snapshot_chunk(client, chunk);
            }
            (SessionClientMessage::SnapshotUnavailable { request }, _) => {
                self.on_snapshot_unavailable(client, request);
            }
            (SessionClientMessage::SnapshotRefused { request }, _) => {
                self.on_snapshot_refused(client, request);
            }
            (_, _) => self.stats.ignored_messages += 1,
        }
    }

    /// A player's checksum for `tick`: refused (and counted) unless the tick is confirmed, then
    /// judged with the others' by [`ChecksumVotes`] at the end of the update.
    fn on_checksum(&mut self, slot: usize, tick: Tick, checksum: u64) {
        let players = self.slots.len();
        match self
            .checksums
            .report(slot, tick, checksum, self.confirmed_tick, players, self.now)
        {
            Ok(()) => {}
            Err(ChecksumRefusal::Unverifiable) => {
                self.stats.refused_checksums[slot] += 1;
                debug!("relay: player {slot}'s checksum for unconfirmed tick {tick} refused");
            }
            Err(ChecksumRefusal::Repeated) => {}
            Err(ChecksumRefusal::Unjudgeable) => {
                self.stats.unjudged_checksums[slot] += 1;
                if self.stats.unjudged_checksums[slot] == 1 {
                    warn!(
                        "relay: player {slot}'s checksum for tick {tick} came after its tick was \
                         judged without a verdict to judge it by; counted unjudged \
                         (RelayStats::unjudged_checksums)"
                    );
                }
            }
        }
    }

    /// A player's component hash breakdown of a desynced tick: refused (and counted) unless a
    /// desync of that tick waits for breakdowns.
    fn on_breakdown(&mut self, slot: usize, tick: Tick, breakdown: Breakdown) {
        if let Err(refusal) = self.breakdowns.report(slot, tick, breakdown) {
            self.stats.refused_breakdowns[slot] += 1;
            debug!("relay: player {slot}'s breakdown of tick {tick} refused: {refusal:?}");
        }
    }

    /// The desync reports written since the last call, oldest first.
    pub fn take_desync_reports(&mut self) -> Vec<DesyncReport> {
        self.reports.drain(..).collect()
    }

    /// Compares the breakdowns of every desynced tick that has them all (or timed out) and
    /// sends the report to every client.
    fn judge_breakdowns(&mut self, server: &mut RenetServer) {
        let connected: Vec<bool> = self.slots.iter().map(Slot::connected).collect();
        let timeout = Duration::from_millis(u64::from(self.config.checksum_timeout_ms));
        for found in self.breakdowns.judge(&connected, self.now, timeout) {
            for liar in &found.contradicting {
                self.stats.contradicting_breakdowns[usize::from(*liar)] += 1;
            }
            warn!(
                "relay: desync at tick {}: players {:?}, components {:?}, slots {:?}",
                found.tick, found.players, found.components, found.slots
            );
            let report = DesyncReport {
                tick: found.tick,
                players: found.players,
                components: found.components,
                slots: found.slots,
            };
            let message = ServerMessage::session(
                self.match_id,
                SessionServerMessage::DesyncReport {
                    tick: report.tick,
                    players: report.players.clone(),
                    components: report.components.clone(),
                    slots: report.slots.clone(),
                },
            );
            self.broadcast_live(server, &message);
            self.stats.desync_reports += 1;
            self.stats.last_desync_report = Some(report.clone());
            self.reports.push_back(report);
            while self.reports.len() > crate::breakdowns::MAX_OPEN_REPORTS {
                self.reports.pop_front();
            }
        }
    }

    /// Judges the late reports that came this update against their ticks' kept verdicts, then
    /// every tick all connected players reported, or whose timeout passed; a disagreement is
    /// counted per tick (`desynced_ticks`, in-time judgements only) and per player named
    /// (`desyncs_named`), and the players whose desync episode it starts are counted once each
    /// (`desyncs`, `desync_episodes`), logged once and sent to every client with the judge
    /// ([episodes](crate::rules#desyncs-are-reported-once-per-episode),
    /// [late checksums](crate::rules#late-checksums)).
    fn judge_checksum_votes(&mut self, server: &mut RenetServer) -> Vec<(Tick, Vec<u8>)> {
        let connected: Vec<bool> = self.slots.iter().map(Slot::connected).collect();
        let timeout = Duration::from_millis(u64::from(self.config.checksum_timeout_ms));
        let late = self.checksums.take_late();
        let in_time = self.checksums.judge(&connected, self.now, timeout);
        let late = late.into_iter().map(|j| (j, true));
        late.chain(in_time.into_iter().map(|j| (j, false)))
            .filter_map(|(judgement, late)| self.count_judgement(server, judgement, late))
            .collect()
    }

    /// Counts one judgement (`late`: of a report that came after its tick was judged), asks for
    /// breakdowns at the first desynced tick of a run (in-time judgements only), and reports the
    /// episodes it starts: `(tick, players)`, `None` when it starts none.
    fn count_judgement(
        &mut self,
        server: &mut RenetServer,
        judgement: Judgement,
        late: bool,
    ) -> Option<(Tick, Vec<u8>)> {
        let started = self.episodes.judge(&judgement);
        if late {
            for slot in judgement.players.iter().chain(&judgement.agreeing) {
                self.stats.late_checksums[usize::from(*slot)] += 1;
            }
        }
        if judgement.players.is_empty() {
            if !late {
                self.disagreement_run = false;
            }
            return None;
        }
        for player in &judgement.players {
            self.stats.desyncs_named[usize::from(*player)] += 1;
        }
        let when = if late { "late report, " } else { "" };
        debug!(
            "relay: checksum disagreement at tick {}, players {:?} ({when}judged by {})",
            judgement.tick, judgement.players, judgement.judge
        );
        if !late {
            self.stats.desynced_ticks += 1;
            if !std::mem::replace(&mut self.disagreement_run, true) {
                // Breakdowns are asked for the first desynced tick of a run of disagreements.
                self.breakdowns.open(
                    judgement.tick,
                    judgement.players.clone(),
                    self.slots.len(),
                    self.now,
                );
            }
        }
        if started.is_empty() {
            // Every player named is in an episode already reported.
            return None;
        }
        self.report_desync(server, &judgement, &started, when);
        Some((judgement.tick, started))
    }

    /// A desync episode of `started` began at `judgement`'s tick: counted once per player
    /// (`desync_episodes`, `desyncs`), logged once, and told to every live client.
    fn report_desync(
        &mut self,
        server: &mut RenetServer,
        judgement: &Judgement,
        started: &[u8],
        when: &str,
    ) {
        for player in started {
            self.stats.desync_episodes[usize::from(*player)] += 1;
        }
        self.stats.desyncs += started.len() as u64;
        warn!(
            "relay: players {started:?} desynced at tick {} ({when}judged by {})",
            judgement.tick, judgement.judge
        );
        let desync = ServerMessage::session(
            self.match_id,
            SessionServerMessage::Desync {
                tick: judgement.tick,
                players: started.to_vec(),
                judge: judgement.judge,
            },
        );
        self.broadcast_live(server, &desync);
        for slot in self
            .slots
            .iter_mut()
            .filter(|s| s.client.is_some() && !s.silent)
        {
            slot.desyncs_sent += 1;
        }
    }

    /// Judges the checksums, then sends every client whose desync episode against the
    /// authority starts a snapshot of it (with [`Resync::On`](crate::Resync::On)).
    fn judge_checksums(&mut self, server: &mut RenetServer) {
        for (tick, started) in self.judge_checksum_votes(server) {
            self.resync(tick, &started);
        }
        // A seated player counted silent may come back with its reports: it is waited for.
        let seated: Vec<bool> = self.slots.iter().map(|s| s.client.is_some()).collect();
        self.stats.judged_through = self.checksums.judged_through(&seated);
    }

    /// Confirms every tick whose inputs are complete, or that reached the hard tolerance.
    fn confirm_ready(&mut self) {
        loop {
            let tick = self.confirmed_tick + 1;
            if tick > self.server_tick {
                return;
            }
            let complete = self.slots.iter().all(|s| s.inputs.contains_key(&tick));
            let overdue = self.server_tick >= tick + self.config.input_hard_tolerance as Tick;
            if !complete && !overdue {
                return;
            }
            let mut set = InputSet::default();
            for (i, slot) in self.slots.iter_mut().enumerate() {
                if !slot.connected() && i < 64 {
                    set.disconnected |= 1 << i;
                }
                match slot.inputs.remove(&tick) {
                    Some(input) => {
                        slot.last_input.clone_from(&input);
                        set.inputs.push(input);
                    }
                    None => {
                        set.inputs.push(slot.last_input.clone());
                        if i < 64 {
                            set.replaced |= 1 << i;
                        }
                        self.stats.replaced_inputs[i] += 1;
                    }
                }
                slot.inputs.retain(|t, _| *t > tick);
            }
            self.confirmed.push_back((tick, set));
            while self.confirmed.len() > self.config.input_history_ticks.max(1) as usize {
                self.confirmed.pop_front();
            }
            self.confirmed_tick = tick;
            self.stats.confirmed_tick = tick;
        }
    }

    /// Sends every seated client its part of the confirmed sets ([`RelayServer::plan_sends`])
    /// and the clock report: nothing to a silent one (its sets count as sent), only the clock
    /// to one waiting for a snapshot (the sets after its tick follow it), and a client behind
    /// the history gets a snapshot or is told ([`RelayServer::on_behind`]).
    fn broadcast(&mut self, server: &mut RenetServer) {
        let Some(newest) = self.confirmed.back().map(|(t, _)| *t) else {
            return;
        };
        let redundancy = self.config.input_redundancy.max(1) as Tick;
        let hz = f64::from(self.config.tick_rate_hz);
        let mut encoded = EncodedChunks::new(self.match_id);
        for index in 0..self.slots.len() {
            let Some(client) = self.slots[index].client else {
                continue;
            };
            if self.slots[index].silent {
                // Nothing goes to a silent player; heard from again, it gets what it did not
                // acknowledge by the resend rule (budgeted), not a burst of every set since.
                self.slots[index].sent_through = newest;
                continue;
            }
            if self
                .transfers
                .iter()
                .any(|t| usize::from(t.joiner) == index)
            {
                // It gets a snapshot first, then the sets after its tick.
                self.send_clock(server, index, client);
                continue;
            }
            let plan = self.plan_sends(index, newest, redundancy, hz);
            self.send_sets(server, client, &plan.chunks, &mut encoded);
            self.stats.resent_sets += plan.resent;
            if let Some(oldest_available) = plan.behind {
                self.on_behind(server, index, client, oldest_available);
            }
            self.send_clock(server, index, client);
        }
    }

    /// Sends `client` the confirmed sets of `chunks` (inclusive tick ranges, one
    /// `ConfirmedInputs` message each, encoded once per update for all clients by `encoded`);
    /// a message its channel has no room for is not sent (the resend rule sends it again).
    fn send_sets(
        &mut self,
        server: &mut RenetServer,
        client: ClientId,
        chunks: &[(Tick, Tick)],
        encoded: &mut EncodedChunks,
    ) {
        for &(first, last) in chunks {
            let Some(bytes) = encoded.get(&self.confirmed, first, last) else {
                continue;
            };
            let channel = NetChannel::Inputs;
            if server.can_send_message(client, channel.id(), bytes.len()) {
                self.stats.confirmed_bytes_sent += bytes.len() as u64;
                server.send_message(client, channel, bytes);
            } else {
                debug!("relay: confirmed inputs to {client} not sent: channel full");
            }
        }
    }

    /// Slot `index` acknowledged less than the history holds (it starts at
    /// `oldest_available`): it gets a snapshot when the relay serves them, else it is sent
    /// `Behind` (counted).
    fn on_behind(
        &mut self,
        server: &mut RenetServer,
        index: usize,
        client: ClientId,
        oldest_available: Tick,
    ) {
        if self.config.snapshots.is_some() {
            info!(
                "relay: player {index} acknowledged tick {} only; the history starts later: \
                 it gets a snapshot",
                self.slots[index].ack
            );
            self.start_transfer(index as u8);
            return;
        }
        self.stats.behind_reports += 1;
        warn!(
            "relay: player {index} acknowledged tick {} only; the history starts at \
             {oldest_available}: it needs a snapshot",
            self.slots[index].ack
        );
        let behind = ServerMessage::session(
            self.match_id,
            SessionServerMessage::Behind { oldest_available },
        );
        let _ = server.send_msg(client, &behind);
    }

    /// What to send to slot `index` this update: the sets never sent plus the redundancy, and
    /// the next part of a resend pass (see the module docs).
    fn plan_sends(&mut self, index: usize, newest: Tick, redundancy: Tick, hz: f64) -> SendPlan {
        let oldest = self.confirmed.front().map_or(1, |(t, _)| *t);
        let now = self.now;
        let budget = self.config.resend_bytes_per_update;
        let slot = &mut self.slots[index];
        // The redundancy rides with sets never sent: an update that confirmed nothing new for
        // this client sends nothing again (a server may update several times a tick).
        let fresh = slot.sent_through < newest;
        let live_first = (slot.sent_through + 1)
            .min(newest - redundancy + 1)
            .max(oldest)
            .max(1);
        let mut plan = SendPlan {
            chunks: if fresh {
                chunk_ranges(&self.confirmed, live_first, newest, usize::MAX)
            } else {
                Vec::new()
            },
            ..SendPlan::default()
        };
        slot.sent_through = newest;
        if fresh {
            slot.sent_new_at = now;
        }
        // Confirmations stopped (the host stalled, or the match's last ticks) and the client
        // has not acknowledged the newest sets for a retransmission timeout: with no new set to
        // carry the redundancy, they are resent like an overdue acknowledgement's.
        let stalled = !fresh
            && slot.ack < newest
            && now.saturating_sub(slot.sent_new_at) >= retransmission_timeout(&slot.rtt);
        let overdue = stalled || slot.ack < newest - redundancy - in_flight_ticks(&slot.rtt, hz);
        if slot.ack + 1 < oldest {
            // The sets it misses are gone: resending the rest cannot help it.
            slot.resend_next = None;
            if now >= slot.resend_after {
                plan.behind = Some(oldest);
                slot.resend_after = now + BEHIND_REPORT_INTERVAL;
            }
        } else if slot.resend_next.is_none() && now >= slot.resend_after && overdue {
            slot.resend_next = Some(slot.ack + 1);
        }
        if let Some(next) = slot.resend_next {
            let next = next.max(slot.ack + 1).max(oldest);
            // Up to the redundancy sent now, or to the newest when none is sent.
            let last = if fresh { live_first - 1 } else { newest };
            let chunks = chunk_ranges(&self.confirmed, next, last, budget);
            let sent_last = chunks.last().map_or(last, |(_, l)| *l);
            plan.resent = chunks.iter().map(|(f, l)| (l - f + 1) as u64).sum();
            plan.chunks.extend(chunks);
            if sent_last >= last {
                slot.resend_next = None;
                slot.resend_after = now + retransmission_timeout(&slot.rtt);
            } else {
                slot.resend_next = Some(sent_last + 1);
            }
        }
        plan
    }

    /// Sends slot `index` its clock report when its lead changed, or every
    /// [`CLOCK_REFRESH_TICKS`] in case a report was lost (unreliable channel).
    fn send_clock(&mut self, server: &mut RenetServer, index: usize, client: ClientId) {
        let slot = &mut self.slots[index];
        let lead = match slot.inputs.keys().next_back() {
            Some(newest_input) => (newest_input - self.server_tick) as f32,
            None => (self.confirmed_tick - self.server_tick) as f32,
        };
        let due = slot
            .clock_sent
            .is_none_or(|(sent, at)| sent != lead || self.server_tick - at >= CLOCK_REFRESH_TICKS);
        if !due {
            return;
        }
        let clock = ServerMessage::session(
            self.match_id,
            SessionServerMessage::Clock {
                server_tick: self.server_tick,
                input_lead_ticks: lead,
                judged_through: self.stats.judged_through,
                desyncs_sent: slot.desyncs_sent,
                unjudged_checksums: u32::try_from(
                    self.stats.unjudged_checksums.iter().sum::<u64>(),
                )
                .unwrap_or(u32::MAX),
            },
        );
        if server.send_msg(client, &clock).is_ok() {
            slot.clock_sent = Some((lead, self.server_tick));
            if let Ok(bytes) = simsync_net::encode(&clock) {
                self.stats.clock_bytes_sent += bytes.len() as u64;
            }
        }
    }
}

/// What [`RelayServer::plan_sends`] decided for one client.
#[derive(Debug, Default)]
struct SendPlan {
    /// Inclusive tick ranges, one `ConfirmedInputs` message each.
    chunks: Vec<(Tick, Tick)>,
    /// Sets resent in this update.
    resent: u64,
    /// The client acknowledged less than the history holds: the oldest tick held.
    behind: Option<Tick>,
}

/// Ticks a set sent now is in flight before its acknowledgement can arrive: the RTT plus twice
/// the jitter, plus a tick (0 before the first RTT sample).
fn in_flight_ticks(rtt: &simsync_net::RttEstimator, hz: f64) -> Tick {
    rtt.rtt_ms().map_or(0, |ms| {
        ((ms + 2.0 * rtt.jitter_ms()) * hz / 1_000.0).ceil() as Tick + 1
    })
}

/// How long a resend pass waits before the next one: TCP's retransmission timeout
/// (RFC 6298: srtt + 4·rttvar), at least 100 ms; 250 ms before the first RTT sample.
fn retransmission_timeout(rtt: &simsync_net::RttEstimator) -> Duration {
    let ms = rtt
        .rtt_ms()
        .map_or(250.0, |ms| (ms + 4.0 * rtt.jitter_ms()).max(100.0));
    Duration::from_secs_f64(ms / 1_000.0)
}

/// Encoded size in bytes of a `u64` as a bincode varint.
fn varint_bytes(value: u64) -> usize {
    match value {
        0..=250 => 1,
        251..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

/// Encoded size in bytes of an input set.
fn set_bytes(set: &InputSet) -> usize {
    let inputs: usize = set
        .inputs
        .iter()
        .map(|i| varint_bytes(i.len() as u64) + i.len())
        .sum();
    varint_bytes(set.inputs.len() as u64)
        + inputs
        + varint_bytes(set.replaced)
        + varint_bytes(set.disconnected)
}

/// The seated, not yet silent slots whose client was last heard from `timeout` or longer
/// before `now`.
fn silent_slots(slots: &[Slot], now: Duration, timeout: Duration) -> Vec<usize> {
    slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.connected() && now.saturating_sub(s.last_heard) >= timeout)
        .map(|(i, _)| i)
        .collect()
}

/// Bytes of a `ConfirmedInputs` message besides its sets, at most (two enum tags, the match
/// id, the first tick and the sequence length).
const CONFIRMED_HEADER_BYTES: usize = 24;

/// Splits the held confirmed sets of ticks `first..=last` into consecutive ranges whose
/// messages stay within [`UNRELIABLE_MESSAGE_BUDGET`] bytes (a set larger than that goes
/// alone), stopping before the ranges exceed `budget` bytes in total (the first range is always
/// included). The history is in tick order (oldest first), so only the sets in the range are
/// read: a client's few new ticks cost a few steps, not a walk over the whole history.
fn chunk_ranges(
    confirmed: &VecDeque<(Tick, InputSet)>,
    first: Tick,
    last: Tick,
    budget: usize,
) -> Vec<(Tick, Tick)> {
    let mut chunks = Vec::new();
    let mut total = 0usize;
    let mut current: Option<(Tick, Tick, usize)> = None;
    let start = confirmed.partition_point(|(t, _)| *t < first);
    let in_range = confirmed.range(start..).take_while(|(t, _)| *t <= last);
    for (tick, set) in in_range {
        let bytes = set_bytes(set);
        if let Some((f, _, size)) = current
            && size + bytes <= UNRELIABLE_MESSAGE_BUDGET
            && total + size + bytes <= budget
        {
            current = Some((f, *tick, size + bytes));
            continue;
        }
        if let Some((f, l, size)) = current.take() {
            total += size;
            chunks.push((f, l));
        }
        let size = CONFIRMED_HEADER_BYTES + bytes;
        if !chunks.is_empty() && total + size > budget {
            return chunks;
        }
        current = Some((*tick, *tick, size));
    }
    chunks.extend(current.map(|(f, l, _)| (f, l)));
    chunks
}

/// The encoded messages of this update's ranges, of one match: most clients get the same
/// ranges, so each is encoded once.
struct EncodedChunks(MatchId, HashMap<(Tick, Tick), Bytes>);

impl EncodedChunks {
    fn new(match_id: MatchId) -> Self {
        Self(match_id, HashMap::new())
    }

    fn get(
        &mut self,
        confirmed: &VecDeque<(Tick, InputSet)>,
        first: Tick,
        last: Tick,
    ) -> Option<Bytes> {
        if let Some(bytes) = self.1.get(&(first, last)) {
            return Some(bytes.clone());
        }
        match encode_range(self.0, confirmed, first, last) {
            Ok(bytes) => {
                self.1.insert((first, last), bytes.clone());
                Some(bytes)
            }
            Err(error) => {
                warn!("relay: confirmed inputs not encoded: {error}");
                None
            }
        }
    }
}

/// The encoded `ConfirmedInputs` message of match `match_id`'s confirmed sets of ticks
/// `first..=last`.
fn encode_range(
    match_id: MatchId,
    confirmed: &VecDeque<(Tick, InputSet)>,
    first: Tick,
    last: Tick,
) -> Result<Bytes, simsync_net::NetError> {
    let sets: Vec<InputSet> = confirmed
        .iter()
        .filter(|(t, _)| (first..=last).contains(t))
        .map(|(_, s)| s.clone())
        .collect();
    let message = ServerMessage::session(
        match_id,
        SessionServerMessage::ConfirmedInputs {
            first_tick: first,
            sets,
        },
    );
    simsync_net::encode(&message).map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(
        ticks: std::ops::RangeInclusive<Tick>,
        input_bytes: usize,
    ) -> VecDeque<(Tick, InputSet)> {
        ticks
            .map(|t| {
                let set = InputSet {
                    inputs: vec![vec![t as u8; input_bytes]; 2],
                    replaced: u64::from(t as u8),
                    disconnected: u64::from(t as u8 / 2),
                };
                (t, set)
            })
            .collect()
    }

    /// A relay with one connected slot holding confirmed sets of ticks `1..=newest`.
    pub(super) fn relay_with_sets(newest: Tick) -> RelayServer {
        let mut relay = RelayServer::new::<u32>(RelayServerConfig {
            players: 1,
            tick_rate_hz: 64,
            input_hard_tolerance: 8,
            input_redundancy: 3,
            default_input: vec![0],
            ping_interval_ms: 250,
            max_input_bytes: simsync_net::DEFAULT_MAX_INPUT_BYTES,
            checksum_timeout_ms: DEFAULT_CHECKSUM_TIMEOUT_MS,
            input_history_ticks: 640,
            resend_bytes_per_update: 24_000,
            limits: RelayLimits::for_tick_rate(64),
            silence_timeout_ms: DEFAULT_SILENCE_TIMEOUT_MS,
            reconnect_seed: Some(1),
            start_players: 1,
            snapshots: None,
        });
        relay.slots[0].client = Some(1);
        relay.confirmed = history(1..=newest, 4);
        relay.confirmed_tick = newest;
        relay
    }

    fn ticks(chunks: &[(Tick, Tick)]) -> Vec<Tick> {
        chunks.iter().flat_map(|(f, l)| *f..=*l).collect()
    }

    #[test]
    fn a_burst_of_confirmations_is_sent_whole_then_only_the_redundancy() {
        let mut relay = relay_with_sets(20);
        relay.slots[0].sent_through = 12;
        relay.slots[0].ack = 12;
        // Eight ticks confirmed in one update: all eight go, not only the newest three.
        let plan = relay.plan_sends(0, 20, 3, 64.0);
        assert_eq!(ticks(&plan.chunks), (13..=20).collect::<Vec<_>>());
        relay.confirmed.extend(history(21..=21, 4));
        let plan = relay.plan_sends(0, 21, 3, 64.0);
        assert_eq!(ticks(&plan.chunks), vec![19, 20, 21]);
    }

    #[test]
    fn an_overdue_ack_is_resent_from_the_ack_without_a_window_clamp() {
        let mut relay = relay_with_sets(400);
        relay.slots[0].sent_through = 399;
        relay.slots[0].ack = 250;
        relay.slots[0].rtt.add_sample(230.0);
        let plan = relay.plan_sends(0, 400, 3, 64.0);
        // 251..=397 again, then the redundancy 398..=400.
        let sent = ticks(&plan.chunks);
        assert_eq!(sent[..3], [398, 399, 400]);
        assert_eq!(sent[3..], (251..=397).collect::<Vec<_>>()[..]);
        assert_eq!(plan.resent, 147);
        assert_eq!(plan.behind, None);
        // Not again before a retransmission timeout, and no redundancy: nothing new was
        // confirmed.
        let plan = relay.plan_sends(0, 400, 3, 64.0);
        assert_eq!(ticks(&plan.chunks), Vec::<Tick>::new());
        relay.now += Duration::from_secs(1);
        // A resend pass without new sets runs to the newest.
        let plan = relay.plan_sends(0, 400, 3, 64.0);
        assert_eq!(ticks(&plan.chunks), (251..=400).collect::<Vec<_>>());
        assert_eq!(plan.resent, 150);
    }

    /// A relay that confirmed 1..=20 and has just sent slot 0 (which acknowledged 17) its three
    /// new sets, 18..=20.
    fn sent_three_new_sets() -> RelayServer {
        let mut relay = relay_with_sets(20);
        relay.slots[0].sent_through = 17;
        relay.slots[0].ack = 17;
        let plan = relay.plan_sends(0, 20, 3, 64.0);
        assert_eq!(ticks(&plan.chunks), vec![18, 19, 20]);
        relay
    }

    #[test]
    fn an_update_that_confirmed_nothing_new_sends_nothing_again() {
        let mut relay = sent_three_new_sets();
        // More updates in the same tick: nothing to send again.
        for _ in 0..3 {
            let plan = relay.plan_sends(0, 20, 3, 64.0);
            assert_eq!(ticks(&plan.chunks), Vec::<Tick>::new());
            assert_eq!(plan.resent, 0);
        }
        // The next confirmation goes with the two before it (the client acknowledged 20).
        relay.slots[0].ack = 20;
        relay.confirmed.extend(history(21..=21, 4));
        let plan = relay.plan_sends(0, 21, 3, 64.0);
        assert_eq!(ticks(&plan.chunks), vec![19, 20, 21]);
    }

    #[test]
    fn when_confirmations_stop_the_unacknowledged_newest_sets_are_resent_after_a_timeout() {
        let mut relay = sent_three_new_sets();
        relay.slots[0].rtt.add_sample(50.0);
        // 18..=20 were lost; nothing new is confirmed. Before a retransmission timeout (150 ms
        // for one 50 ms sample) nothing goes again.
        let rto = retransmission_timeout(&relay.slots[0].rtt);
        assert_eq!(rto, Duration::from_millis(150));
        relay.now += rto - Duration::from_millis(1);
        assert_eq!(
            ticks(&relay.plan_sends(0, 20, 3, 64.0).chunks),
            Vec::<Tick>::new()
        );
        relay.now += Duration::from_millis(1);
        let plan = relay.plan_sends(0, 20, 3, 64.0);
        assert_eq!(ticks(&plan.chunks), vec![18, 19, 20]);
        assert_eq!(plan.resent, 3);
        // Then not before another timeout.
        relay.now += Duration::from_millis(50);
        assert_eq!(
            ticks(&relay.plan_sends(0, 20, 3, 64.0).chunks),
            Vec::<Tick>::new()
        );
        // Acknowledged: nothing more.
        relay.slots[0].ack = 20;
        relay.now += Duration::from_secs(1);
        assert_eq!(
            ticks(&relay.plan_sends(0, 20, 3, 64.0).chunks),
            Vec::<Tick>::new()
        );
    }

    #[test]
    fn an_ack_older_than_the_history_is_reported_behind_once_a_second() {
        let mut relay = relay_with_sets(400);
        relay.confirmed.drain(..100);
        relay.slots[0].sent_through = 400;
        relay.slots[0].ack = 50;
        let plan = relay.plan_sends(0, 400, 3, 64.0);
        assert_eq!(plan.behind, Some(101));
        assert_eq!(plan.resent, 0);
        assert_eq!(relay.plan_sends(0, 400, 3, 64.0).behind, None);
        relay.now += Duration::from_secs(1);
        assert_eq!(relay.plan_sends(0, 400, 3, 64.0).behind, Some(101));
    }

    #[test]
    fn a_seated_player_silent_for_the_timeout_is_found_once() {
        let mut relay = relay_with_sets(10);
        let timeout = Duration::from_millis(u64::from(DEFAULT_SILENCE_TIMEOUT_MS));
        relay.now = Duration::from_millis(1_999);
        assert!(silent_slots(&relay.slots, relay.now, timeout).is_empty());
        relay.now = timeout;
        assert_eq!(silent_slots(&relay.slots, relay.now, timeout), vec![0]);
        relay.slots[0].silent = true;
        assert!(!relay.is_connected(0));
        assert!(silent_slots(&relay.slots, relay.now, timeout).is_empty());
        // Any message makes it connected again, and its clock restarts.
        relay.heard_from(1);
        assert!(
            relay.by_client.is_empty(),
            "not seated through on_hello here"
        );
        relay.by_client.insert(1, 0);
        relay.heard_from(1);
        assert!(relay.is_connected(0));
        assert!(silent_slots(&relay.slots, relay.now, timeout).is_empty());
        // An empty slot is never silent (its player is disconnected already).
        relay.slots[0].client = None;
        relay.now += timeout * 2;
        assert!(silent_slots(&relay.slots, relay.now, timeout).is_empty());
    }

    #[test]
    fn a_rematch_keeps_the_seat_and_starts_the_match_over_once_the_player_is_ready() {
        use crate::matches::{MatchCommandError, RelayCommand};
        let mut server = RenetServer::new(simsync_net::connection_config());
        let mut relay = relay_with_sets(300);
        relay.by_client.insert(1, 0);
        relay.phase = MatchPhase::Running;
        relay.server_tick = 305;
        relay.slots[0].ack = 290;
        relay.slots[0].inputs.insert(301, vec![7]);
        relay.slots[0].last_input = vec![5];
        relay.stats.rejected_messages = 4;
        relay.stats.replaced_inputs = vec![9];
        let rematch = RelayCommand::Rematch {
            reason: MatchEndReason::Completed,
        };
        assert_eq!(relay.command(&mut server, &rematch), Ok(MatchId(2)));
        // The seat stays; everything of match 1 is gone; the player is not ready yet.
        assert_eq!(
            (relay.match_id(), relay.phase()),
            (MatchId(2), MatchPhase::Lobby)
        );
        assert_eq!(relay.slot_of(1), Some(0));
        assert_eq!(relay.slots[0].client, Some(1));
        assert!(relay.confirmed.is_empty() && relay.slots[0].inputs.is_empty());
        // A missing input of the new match is replaced by the default, not match 1's last.
        assert_eq!(relay.slots[0].last_input, vec![0]);
        assert_eq!(
            (relay.server_tick, relay.confirmed_tick, relay.slots[0].ack),
            (0, 0, 0)
        );
        assert_eq!(relay.stats.replaced_inputs, vec![0]);
        assert_eq!(relay.stats.rejected_messages, 4, "a connection total");
        assert_eq!(relay.stats.ready, vec![false]);
        assert_eq!(
            relay.command(&mut server, &rematch),
            Err(MatchCommandError::MatchNotStarted {
                match_id: MatchId(2)
            })
        );
        // A `Ready` of match 1 does nothing but count; one of match 2 starts the match.
        relay.on_ready(&mut server, 1, MatchId::FIRST);
        assert!(!relay.started());
        assert_eq!(relay.stats.match_drops.ended_match, 1);
        relay.on_ready(&mut server, 1, MatchId(2));
        assert!(relay.started());
        assert_eq!(relay.stats.ready, vec![true]);
        // Inputs of match 1 still arriving are dropped and counted, never stored.
        let old_inputs = MatchMessage {
            match_id: MatchId::FIRST,
            message: SessionClientMessage::Inputs {
                first_tick: 1,
                inputs: vec![vec![3]; 4],
                ack_tick: 290,
            },
        };
        relay.on_session(&mut server, 1, old_inputs);
        assert!(relay.slots[0].inputs.is_empty());
        assert_eq!(relay.stats.match_drops.ended_match, 2);
        let events = relay.take_events();
        let kinds: Vec<&str> = events
            .iter()
            .map(|e| match e {
                RelayEvent::Match(MatchChanged::Ended { .. }) => "ended",
                RelayEvent::Match(MatchChanged::Opened { .. }) => "opened",
                RelayEvent::Match(MatchChanged::Started { .. }) => "started",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["ended", "opened", "started"]);
    }

    #[test]
    fn a_confirmed_set_is_found_by_its_position_in_the_history() {
        let mut confirmed = history(101..=110, 1);
        assert_eq!(
            confirmed_set(&confirmed, 101).map(|s| s.replaced),
            Some(101)
        );
        assert_eq!(
            confirmed_set(&confirmed, 107).map(|s| s.replaced),
            Some(107)
        );
        assert!(confirmed_set(&confirmed, 100).is_none());
        assert!(confirmed_set(&confirmed, 111).is_none());
        confirmed.drain(..3);
        assert_eq!(
            confirmed_set(&confirmed, 104).map(|s| s.replaced),
            Some(104)
        );
        assert!(confirmed_set(&confirmed, 103).is_none());
        assert!(confirmed_set(&VecDeque::new(), 1).is_none());
    }

    #[test]
    fn set_bytes_is_the_encoded_size() {
        for input_bytes in [0, 4, 300, 20_000] {
            for (_, set) in history(248..=253, input_bytes) {
                let encoded = simsync_net::encode(&set).expect("encodes");
                assert_eq!(set_bytes(&set), encoded.len(), "{input_bytes}");
            }
        }
    }

    #[test]
    fn chunks_cover_the_range_in_messages_within_the_unreliable_budget() {
        let confirmed = history(1..=200, 40);
        let chunks = chunk_ranges(&confirmed, 10, 190, usize::MAX);
        assert_eq!(chunks.first().map(|c| c.0), Some(10));
        assert_eq!(chunks.last().map(|c| c.1), Some(190));
        for pair in chunks.windows(2) {
            assert_eq!(pair[0].1 + 1, pair[1].0);
        }
        for (first, last) in &chunks {
            let bytes =
                encode_range(MatchId(u32::MAX), &confirmed, *first, *last).expect("encodes");
            assert!(bytes.len() <= UNRELIABLE_MESSAGE_BUDGET, "{}", bytes.len());
        }
        assert!(
            chunks.len() >= 181 * 90 / UNRELIABLE_MESSAGE_BUDGET,
            "{chunks:?}"
        );
    }

    #[test]
    fn chunks_start_at_the_first_tick_held_in_range_wherever_the_range_lies() {
        // The history holds ticks 101..=300; ranges before, across, inside and after it.
        let confirmed = history(101..=300, 40);
        let held = |first: Tick, last: Tick| -> Vec<Tick> {
            chunk_ranges(&confirmed, first, last, usize::MAX)
                .iter()
                .flat_map(|&(f, l)| f..=l)
                .collect()
        };
        assert_eq!(held(1, 50), Vec::<Tick>::new());
        assert_eq!(held(90, 105), (101..=105).collect::<Vec<_>>());
        assert_eq!(held(298, 400), vec![298, 299, 300]);
        assert_eq!(held(150, 150), vec![150]);
        assert_eq!(held(301, 400), Vec::<Tick>::new());
        assert_eq!(held(160, 150), Vec::<Tick>::new());
        assert_eq!(held(1, 400), (101..=300).collect::<Vec<_>>());
        // With a budget, the first range starts at the first tick held in range.
        assert_eq!(chunk_ranges(&confirmed, 250, 300, 100)[0].0, 250);
    }

    #[test]
    fn the_byte_budget_stops_a_resend_after_whole_messages() {
        let confirmed = history(1..=200, 40);
        let chunks = chunk_ranges(&confirmed, 1, 200, 3_000);
        let total: usize = chunks
            .iter()
            .map(|(f, l)| {
                encode_range(MatchId(u32::MAX), &confirmed, *f, *l)
                    .expect("encodes")
                    .len()
            })
            .sum();
        assert!(total <= 3_000 && total > 2_900, "{chunks:?} {total}");
        assert_eq!(chunks[0].0, 1);
        // A set larger than the budget still goes, alone.
        let big = history(1..=3, 2_000);
        assert_eq!(chunk_ranges(&big, 1, 3, 100), vec![(1, 1)]);
        assert_eq!(
            chunk_ranges(&big, 1, 3, usize::MAX),
            vec![(1, 1), (2, 2), (3, 3)]
        );
    }
}
