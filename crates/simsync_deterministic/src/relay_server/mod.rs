//! The relay server of a networked deterministic session: owns the session clock, gathers each
//! player's input per tick, confirms input sets and broadcasts them with redundancy. It never
//! simulates. [`RelayServer`] is a state machine over an explicit `&mut RenetServer`; the
//! [`DeterministicServerPlugin`](crate::DeterministicServerPlugin) wires it into an app.
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
//! - A player that disconnects keeps its slot; its inputs are replaced from then on.
//! - Confirmed sets are sent to every client with redundancy: the last `input_redundancy` sets
//!   in every message, plus every set after the client's acknowledged tick (at most 32) once
//!   that acknowledgement is overdue (older than the redundancy plus a round trip: sets still in
//!   flight are not sent again, which keeps a message at `input_redundancy` sets on a healthy
//!   link).
//! - Every input is checked before it is stored: longer than `max_input_bytes`, or not decodable
//!   as the game's input type, it is dropped and counted ([`DroppedInputs`]); its slot is then
//!   missing and replaced at the hard tolerance like any missing input.
//! - Checksums are judged per tick by [`checksums`]: once every connected player reported, or
//!   after `checksum_timeout_ms`; the players that differ from the majority are named in the
//!   `Desync` sent to every client. A report for a tick not confirmed yet is refused and counted.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use bevy::prelude::*;
use simsync_net::bevy_renet::RenetServer;
use simsync_net::renet::{Bytes, ClientId, ServerEvent};
use simsync_net::{
    ClientMessage, DecodeStats, HandshakeStats, Hello, InputFingerprint, InputSet, NetChannel,
    Protocols, RejectReason, ServerHandshake, ServerMessage, ServerNetExt, SessionClientMessage,
    SessionServerMessage, millis_u32,
};

use crate::input::SimInput;
use crate::tick::Tick;
use checksums::{ChecksumRefusal, ChecksumVotes};

mod checksums;
pub(crate) mod plugin;

/// The input size cap when none is configured: 256 encoded bytes (raised to the encoded
/// default input when that is longer). A game with larger inputs sets its own.
pub const DEFAULT_MAX_INPUT_BYTES: usize = 256;

/// Milliseconds the relay waits for every player's checksum of a tick before judging it with
/// the reports it has (default of `checksum_timeout_ms`).
pub const DEFAULT_CHECKSUM_TIMEOUT_MS: u32 = 3_000;

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
    /// Longest accepted encoded input, in bytes (default [`DEFAULT_MAX_INPUT_BYTES`]); longer
    /// inputs are dropped. Never below the encoded default input's length.
    pub max_input_bytes: usize,
    /// Milliseconds after a tick's first checksum report at which it is judged with the reports
    /// received (default [`DEFAULT_CHECKSUM_TIMEOUT_MS`]).
    pub checksum_timeout_ms: u32,
}

/// Inputs of one player the relay dropped, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
pub struct DroppedInputs {
    /// Inputs that did not decode as the game's input type.
    pub undecodable: u64,
    /// Inputs longer than `max_input_bytes`.
    pub oversized: u64,
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

/// The fingerprint of input type `I` both sides state in the handshake: its type name and the
/// relay's size cap, `max_input_bytes` raised to the encoded default input (as
/// [`RelayServer::new`] does). A client and a relay configured with different caps, or built
/// with different input types, refuse each other.
pub(crate) fn input_fingerprint<I: SimInput>(max_input_bytes: usize) -> InputFingerprint {
    let default_len = simsync_net::encode(&I::default()).map_or(0, |bytes| bytes.len());
    let cap = max_input_bytes.max(default_len);
    InputFingerprint::of::<I>(u32::try_from(cap).unwrap_or(u32::MAX))
}

/// Whether `bytes` decode as an `I`.
fn decodes_as<I: SimInput>(bytes: &[u8]) -> bool {
    simsync_net::decode::<I>(bytes).is_ok()
}

/// Counters of the relay server (a resource).
#[derive(Resource, Debug, Clone, Default, PartialEq, Reflect)]
pub struct RelayStats {
    /// The server clock (ticks since start; 0 before start).
    pub server_tick: Tick,
    /// Last confirmed tick.
    pub confirmed_tick: Tick,
    /// Inputs replaced because they were missing at the hard tolerance, per slot.
    pub replaced_inputs: Vec<u64>,
    /// Inputs that arrived after their tick was confirmed replacing them, per slot (once per
    /// tick: copies resent for redundancy are not counted again).
    pub late_inputs: Vec<u64>,
    /// Messages that failed to decode.
    pub rejected_messages: u64,
    /// Messages ignored because the sender holds no player slot (or sent a wrong protocol).
    pub ignored_messages: u64,
    /// RTT per slot in ms (EWMA), 0 before the first sample.
    pub rtt_ms: Vec<f64>,
    /// Bytes sent in `ConfirmedInputs` messages, total.
    pub confirmed_bytes_sent: u64,
    /// Bytes sent in `Clock` messages, total.
    pub clock_bytes_sent: u64,
    /// Ticks judged with a checksum disagreement (each reported to every client once).
    pub desyncs: u64,
    /// Per slot: the desyncs naming that player (its checksum differed from the majority, or
    /// no majority existed).
    pub desyncs_named: Vec<u64>,
    /// Per slot: checksum reports refused because their tick was not confirmed yet.
    pub refused_checksums: Vec<u64>,
    /// Per slot: inputs dropped as undecodable or oversized.
    pub dropped_inputs: Vec<DroppedInputs>,
}

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
}

/// The relay server's state (a resource).
#[derive(Resource)]
pub struct RelayServer {
    config: RelayServerConfig,
    slots: Vec<Slot>,
    by_client: HashMap<ClientId, u8>,
    started: bool,
    server_tick: Tick,
    confirmed: VecDeque<(Tick, InputSet)>,
    confirmed_tick: Tick,
    now: Duration,
    last_ping: Duration,
    decode: DecodeStats,
    checksums: ChecksumVotes,
    /// Whether an input decodes as the game's input type.
    decodes: fn(&[u8]) -> bool,
    stats: RelayStats,
    handshake: ServerHandshake,
}

impl RelayServer {
    /// A relay for `config.players` players of input type `I` (each input is decoded as `I`
    /// before it is relayed).
    pub fn new<I: SimInput>(mut config: RelayServerConfig) -> Self {
        config.max_input_bytes = config.max_input_bytes.max(config.default_input.len());
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
            .with_input(input_fingerprint::<I>(config.max_input_bytes));
        Self {
            stats: RelayStats {
                replaced_inputs: vec![0; n],
                late_inputs: vec![0; n],
                rtt_ms: vec![0.0; n],
                desyncs_named: vec![0; n],
                refused_checksums: vec![0; n],
                dropped_inputs: vec![DroppedInputs::default(); n],
                ..RelayStats::default()
            },
            config,
            slots,
            by_client: HashMap::new(),
            started: false,
            server_tick: 0,
            confirmed: VecDeque::new(),
            confirmed_tick: 0,
            now: Duration::ZERO,
            last_ping: Duration::ZERO,
            decode: DecodeStats::default(),
            checksums: ChecksumVotes::default(),
            decodes: decodes_as::<I>,
            handshake,
        }
    }

    /// Whether every slot was taken and the clock runs.
    pub fn started(&self) -> bool {
        self.started
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
            .filter(|s| s.client.is_some())
            .map(|s| s.ack)
            .min()
    }

    /// The slot of a connected client.
    pub fn slot_of(&self, client: ClientId) -> Option<u8> {
        self.by_client.get(&client).copied()
    }

    /// A `Hello`: the shared handshake's rules, then a free player slot while the session has
    /// not started ([`RejectReason::SessionStarted`] after, [`RejectReason::ServerFull`] when
    /// every slot is taken).
    fn on_hello(&mut self, client: ClientId, server: &mut RenetServer, hello: &Hello) {
        let started = self.started;
        let free = self
            .slots
            .iter()
            .position(|s| s.client.is_none() && !started);
        let seat = || match free {
            Some(slot) => Ok(Some(slot as u8)),
            None if started => Err(RejectReason::SessionStarted),
            None => Err(RejectReason::ServerFull),
        };
        let reply = match self
            .handshake
            .on_hello(client, hello, self.server_tick, seat)
        {
            Ok(welcome) => {
                if let Some(slot) = welcome.player_slot {
                    self.slots[usize::from(slot)].client = Some(client);
                    self.by_client.insert(client, slot);
                }
                ServerMessage::Welcome(welcome)
            }
            Err(reason) => ServerMessage::Rejected { reason },
        };
        if let Err(error) = server.send_msg(client, &reply) {
            warn!("relay: reply to {client} not sent: {error}");
        }
        if !self.started && self.slots.iter().all(|s| s.client.is_some()) {
            self.started = true;
            info!(
                "relay: all {} players joined; the session starts",
                self.slots.len()
            );
            let start = ServerMessage::Session(SessionServerMessage::Start {
                tick: 0,
                players: self.config.players,
                tick_rate_hz: self.config.tick_rate_hz,
            });
            if let Err(error) = server.broadcast_msg(&start) {
                warn!("relay: start not sent: {error}");
            }
        }
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
                if self
                    .confirmed
                    .iter()
                    .find(|(t, _)| *t == tick)
                    .is_some_and(|(_, set)| set.is_replaced(slot))
                {
                    self.stats.late_inputs[slot] += 1;
                    s.settled.insert(tick);
                }
                continue;
            }
            s.inputs.insert(tick, input);
        }
        // Settled ticks are remembered as long as confirmed sets are kept.
        let keep_from = self.confirmed_tick.saturating_sub(256);
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
            match received.message {
                Ok(message) => self.on_message(server, client, message),
                Err(error) => {
                    self.stats.rejected_messages += 1;
                    debug!("relay: bad message from {client}: {error}");
                    if let Some(reason) = self.handshake.on_decode_error(&error) {
                        let _ = server.send_msg(client, &ServerMessage::Rejected { reason });
                    }
                }
            }
        }
        if !self.started {
            return;
        }
        self.server_tick += ticks as Tick;
        self.stats.server_tick = self.server_tick;
        self.confirm_ready();
        self.judge_checksums(server);
        self.broadcast(server);
        if self.now.saturating_sub(self.last_ping).as_millis() as u32
            >= self.config.ping_interval_ms
        {
            self.last_ping = self.now;
            let ping = ServerMessage::Ping {
                t: millis_u32(self.now),
            };
            let _ = server.broadcast_msg(&ping);
        }
    }

    fn on_event(&mut self, server: &mut RenetServer, event: ServerEvent) {
        match event {
            ServerEvent::ClientConnected { client_id } => {
                debug!("relay: {client_id} connected");
            }
            ServerEvent::ClientDisconnected { client_id, reason } => {
                self.handshake.on_left(client_id);
                if let Some(slot) = self.by_client.remove(&client_id) {
                    info!(
                        "relay: player {slot} left ({reason}); its inputs are replaced from now on"
                    );
                    self.slots[usize::from(slot)].client = None;
                    let left = ServerMessage::Session(SessionServerMessage::PlayerLeft { slot });
                    let _ = server.broadcast_msg(&left);
                }
            }
        }
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
            ClientMessage::Session(SessionClientMessage::Inputs {
                first_tick,
                inputs,
                ack_tick,
            }) => match self.by_client.get(&client) {
                Some(slot) => self.on_inputs(usize::from(*slot), first_tick, inputs, ack_tick),
                None => self.stats.ignored_messages += 1,
            },
            ClientMessage::Session(SessionClientMessage::Checksum { tick, checksum }) => {
                match self.by_client.get(&client) {
                    Some(slot) => self.on_checksum(usize::from(*slot), tick, checksum),
                    None => self.stats.ignored_messages += 1,
                }
            }
            ClientMessage::Goodbye => server.disconnect(client),
            ClientMessage::Ownership(_) => self.stats.ignored_messages += 1,
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
        }
    }

    /// Judges every tick all connected players reported, or whose timeout passed; a
    /// disagreement is counted and sent to every client with the players it names.
    fn judge_checksums(&mut self, server: &mut RenetServer) {
        let connected: Vec<bool> = self.slots.iter().map(|s| s.client.is_some()).collect();
        let timeout = Duration::from_millis(u64::from(self.config.checksum_timeout_ms));
        for judgement in self.checksums.judge(&connected, self.now, timeout) {
            if judgement.players.is_empty() {
                continue;
            }
            self.stats.desyncs += 1;
            for player in &judgement.players {
                self.stats.desyncs_named[usize::from(*player)] += 1;
            }
            warn!(
                "relay: checksum disagreement at tick {}, players {:?}",
                judgement.tick, judgement.players
            );
            let desync = ServerMessage::Session(SessionServerMessage::Desync {
                tick: judgement.tick,
                players: judgement.players,
            });
            let _ = server.broadcast_msg(&desync);
        }
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
            while self.confirmed.len() > 256 {
                self.confirmed.pop_front();
            }
            self.confirmed_tick = tick;
            self.stats.confirmed_tick = tick;
        }
    }

    fn broadcast(&mut self, server: &mut RenetServer) {
        let Some(newest) = self.confirmed.back().map(|(t, _)| *t) else {
            return;
        };
        let oldest = self.confirmed.front().map_or(1, |(t, _)| *t);
        let redundancy = self.config.input_redundancy.max(1) as Tick;
        let hz = f64::from(self.config.tick_rate_hz);
        let mut encoded: Vec<(Tick, Bytes)> = Vec::new();
        for slot in &mut self.slots {
            let Some(client) = slot.client else {
                continue;
            };
            let first = first_to_send(slot, newest, redundancy, hz).max(oldest);
            // Most clients get the same range: encode each range once.
            let bytes = match encoded.iter().find(|(f, _)| *f == first) {
                Some((_, bytes)) => bytes.clone(),
                None => match encode_from(&self.confirmed, first) {
                    Ok(bytes) => {
                        encoded.push((first, bytes.clone()));
                        bytes
                    }
                    Err(error) => {
                        warn!("relay: confirmed inputs not encoded: {error}");
                        continue;
                    }
                },
            };
            let channel = NetChannel::Inputs;
            if server.can_send_message(client, channel.id(), bytes.len()) {
                self.stats.confirmed_bytes_sent += bytes.len() as u64;
                server.send_message(client, channel, bytes);
            } else {
                debug!("relay: confirmed inputs to {client} not sent: channel full");
            }
            let lead = match slot.inputs.keys().next_back() {
                Some(newest_input) => (newest_input - self.server_tick) as f32,
                None => (self.confirmed_tick - self.server_tick) as f32,
            };
            // The lead changes rarely: report it when it changed, and every
            // `CLOCK_REFRESH_TICKS` in case a report was lost (unreliable channel).
            let due = slot.clock_sent.is_none_or(|(sent, at)| {
                sent != lead || self.server_tick - at >= CLOCK_REFRESH_TICKS
            });
            if due {
                let clock = ServerMessage::Session(SessionServerMessage::Clock {
                    server_tick: self.server_tick,
                    input_lead_ticks: lead,
                });
                if server.send_msg(client, &clock).is_ok() {
                    slot.clock_sent = Some((lead, self.server_tick));
                    if let Ok(bytes) = simsync_net::encode(&clock) {
                        self.stats.clock_bytes_sent += bytes.len() as u64;
                    }
                }
            }
        }
    }
}

/// The first confirmed tick to send to `slot` when `newest` is the newest confirmed tick.
///
/// The client acknowledges what it holds about one round trip after it was sent: the sets
/// confirmed within that time are in flight, not lost, and the last `redundancy` sets cover
/// their loss. Only when the acknowledgement lags further (a burst longer than the redundancy)
/// are the sets after it sent again, at most 32.
fn first_to_send(slot: &Slot, newest: Tick, redundancy: Tick, hz: f64) -> Tick {
    let in_flight = slot.rtt.rtt_ms().map_or(0, |rtt| {
        let ms = rtt + 2.0 * slot.rtt.jitter_ms();
        (ms * hz / 1_000.0).ceil() as Tick + 1
    });
    let lost = slot.ack < newest - redundancy - in_flight;
    if lost {
        slot.ack + 1
    } else {
        newest - redundancy + 1
    }
    .max(newest - 31)
    .min(newest - redundancy + 1)
}

/// The encoded `ConfirmedInputs` message of every confirmed set from tick `first` on.
fn encode_from(
    confirmed: &VecDeque<(Tick, InputSet)>,
    first: Tick,
) -> Result<Bytes, simsync_net::NetError> {
    let sets: Vec<InputSet> = confirmed
        .iter()
        .filter(|(t, _)| *t >= first)
        .map(|(_, s)| s.clone())
        .collect();
    let message = ServerMessage::Session(SessionServerMessage::ConfirmedInputs {
        first_tick: first,
        sets,
    });
    simsync_net::encode(&message).map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_names_the_type_and_the_cap_raised_to_the_default_input() {
        let fingerprint = input_fingerprint::<u64>(300);
        assert_eq!(fingerprint, InputFingerprint::new("u64", 300));
        // A cap below the encoded default input is raised to it, as `RelayServer::new` does.
        let default_len = simsync_net::encode(&[7u8; 4]).expect("encodes").len();
        assert_eq!(
            input_fingerprint::<[u8; 4]>(0).max_encoded_bytes as usize,
            default_len
        );
        assert_ne!(input_fingerprint::<u32>(300), fingerprint);
    }
}
