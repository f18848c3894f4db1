//! [`RelayLoadClient`]: a fake player of a relay room — the deterministic client's side of the
//! relay protocol ([`simsync_relay_client`]) without a simulation.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use renetcode::ConnectToken;
use serde::Serialize;
use simsync_net::{Hello, InputFingerprint, InputSet, NetChannel, Protocols, Tick};
use simsync_relay_client::{
    InputAck, NextMatch, ProtocolConfig, ProtocolEvent, SessionProtocol, TransmitKind,
};
use simsync_server::{InputSpec, RelayRoomConfig, RoomConfig};

use crate::client::{ClientLink, ClientPhase, LoadClient};
use crate::link::{LoadLinkError, Traffic};

/// The input type name load rooms and load clients state (the fingerprint's name).
pub const LOAD_INPUT_NAME: &str = "simsync_loadgen::LoadInput";

/// Bytes of one load input.
pub const LOAD_INPUT_BYTES: usize = 4;

/// The input size bound load rooms and clients state, bytes.
pub const LOAD_INPUT_MAX_BYTES: u32 = 8;

/// Ticks a load client samples its inputs ahead of its estimate of the relay's clock, so they
/// arrive before the relay needs them (its hard tolerance is 8 ticks after).
pub const DEFAULT_LEAD_TICKS: Tick = 3;

/// Verified ticks between two checksums of a load client: the deterministic client's default
/// `checksum_interval`.
pub const DEFAULT_CHECKSUM_EVERY: u32 = 60;

/// Most ticks a load client samples in one frame (catching up after a stall).
const MAX_SAMPLES_PER_FRAME: Tick = 16;

/// Inputs a load client repeats in every message, at least (the deterministic client's
/// default redundancy).
const INPUT_REDUNDANCY: u32 = 3;

/// Checksums a load client remembers (the newest), for tests to compare.
pub const CHECKSUM_HISTORY: usize = 256;

/// Most confirmed sets held beyond the newest verified tick (waiting for a missing one).
const MAX_HELD_SETS: usize = 8_192;

/// The input of load rooms: `LOAD_INPUT_BYTES` opaque bytes, bounded by
/// `LOAD_INPUT_MAX_BYTES`; the default is zeros.
pub fn load_input_spec() -> InputSpec {
    InputSpec {
        name: LOAD_INPUT_NAME.into(),
        max_bytes: LOAD_INPUT_MAX_BYTES,
        default: vec![0; LOAD_INPUT_BYTES],
    }
}

/// A relay room for load clients: `players` slots at `tick_rate_hz`, the [`load_input_spec`]
/// input, every player needed to start, no snapshots.
pub fn relay_room_config(players: u8, tick_rate_hz: u16) -> RoomConfig {
    RoomConfig::Relay(RelayRoomConfig {
        players,
        tick_rate_hz,
        input: load_input_spec(),
        start_players: None,
        snapshots: false,
    })
}

/// The input slot `slot` of a room with `salt` plays at `tick`: `LOAD_INPUT_BYTES` bytes
/// mixed from the three (so rooms and players send different inputs).
pub fn load_input(salt: u32, slot: u8, tick: Tick) -> Vec<u8> {
    let mixed = (tick as u32)
        .wrapping_mul(0x9E37_79B9)
        .wrapping_add(salt.wrapping_mul(0x85EB_CA6B))
        .wrapping_add(u32::from(slot).wrapping_mul(0xC2B2_AE35));
    mixed.to_le_bytes().to_vec()
}

/// FNV-1a, 64 bits, over `bytes`, continuing from `hash`.
fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01B3);
    }
    hash
}

/// A confirmed set's hash: every input (length and bytes, in slot order) and the replaced and
/// disconnected masks. Clients that received the same set hash it the same.
pub fn set_hash(set: &InputSet) -> u64 {
    let mut hash = 0xCBF2_9CE4_8422_2325;
    for input in &set.inputs {
        hash = fnv1a(hash, &(input.len() as u32).to_le_bytes());
        hash = fnv1a(hash, input);
    }
    hash = fnv1a(hash, &set.replaced.to_le_bytes());
    fnv1a(hash, &set.disconnected.to_le_bytes())
}

/// The checksum a load client reports for `tick`: the previous tick's checksum mixed with the
/// tick and its set's hash — a hash of every confirmed set from tick 1, the load client's
/// "verified state".
pub fn rolling_checksum(previous: u64, tick: Tick, set_hash: u64) -> u64 {
    let hash = fnv1a(previous, &tick.to_le_bytes());
    fnv1a(hash, &set_hash.to_le_bytes())
}

/// What a [`RelayLoadClient`] states and plays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayLoadSpec {
    /// The room's player slots.
    pub players: u8,
    /// The room's tick rate, Hz.
    pub tick_rate_hz: u16,
    /// The input fingerprint stated in the `Hello`.
    pub fingerprint: InputFingerprint,
    /// Mixed into the inputs ([`load_input`]).
    pub salt: u32,
    /// Ticks sampled ahead of the relay's clock (`DEFAULT_LEAD_TICKS`).
    pub lead_ticks: Tick,
    /// Time between pings (the deterministic client's default is 250 ms).
    pub ping_interval: Duration,
    /// A checksum every this many verified ticks (the deterministic client's default
    /// `checksum_interval` is [`DEFAULT_CHECKSUM_EVERY`]; 1 checks every tick).
    pub checksum_every: u32,
    /// The display name in the `Hello`.
    pub name: String,
}

impl RelayLoadSpec {
    /// The spec for a player of `room`, with inputs mixed from `salt`.
    pub fn for_room(room: &RelayRoomConfig, salt: u32) -> Self {
        Self {
            players: room.players,
            tick_rate_hz: room.tick_rate_hz,
            fingerprint: room.input.fingerprint(),
            salt,
            lead_ticks: DEFAULT_LEAD_TICKS,
            ping_interval: Duration::from_millis(250),
            checksum_every: DEFAULT_CHECKSUM_EVERY,
            name: "load".into(),
        }
    }
}

/// What a [`RelayLoadClient`] counted since it was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RelayCounters {
    /// The connection's datagrams and bytes.
    pub traffic: Traffic,
    /// The newest tick up to which every confirmed set arrived (and was hashed).
    pub verified_tick: Tick,
    /// Confirmed sets received, repeats (the relay's redundancy) included.
    pub sets_received: u64,
    /// `Inputs` messages sent.
    pub input_messages: u64,
    /// Ticks of input sampled.
    pub input_ticks: u64,
    /// `Checksum` messages sent.
    pub checksums_sent: u64,
    /// Confirmed sets in which the relay replaced this client's own input (it came late).
    pub own_inputs_replaced: u64,
    /// Inputs of any player the relay replaced, over the confirmed sets.
    pub inputs_replaced: u64,
    /// `Desync` messages received.
    pub desyncs: u64,
    /// Of those, the ones that named this client's slot.
    pub desyncs_naming_self: u64,
    /// `PlayerLeft` messages received.
    pub players_left: u64,
    /// `PlayerRejoined` messages received.
    pub players_rejoined: u64,
    /// `Behind` messages received (the relay lost confirmed sets this client missed).
    pub behind: u64,
    /// `Clock` messages received.
    pub clock_messages: u64,
    /// Pings sent, and pongs received for them.
    pub pings_sent: u64,
    /// Pongs received.
    pub pongs: u64,
    /// Relay pings answered.
    pub pings_answered: u64,
    /// The sum of the round trips measured, ms (with `pongs`: the mean).
    pub rtt_ms_sum: u64,
    /// The longest round trip measured, ms.
    pub rtt_ms_max: u32,
    /// Messages that did not decode.
    pub decode_errors: u64,
    /// Messages of another match dropped.
    pub match_drops: u64,
    /// Messages renet refused to queue (a full channel).
    pub send_refused: u64,
}

/// A fake player of a relay room ([crate docs](crate)): the relay protocol is
/// [`simsync_relay_client::SessionProtocol`], the deterministic client's own; this client adds
/// the inputs it plays, a checksum of every confirmed set, and its counters.
#[derive(Debug)]
pub struct RelayLoadClient {
    link: ClientLink,
    protocol: SessionProtocol,
    spec: RelayLoadSpec,
    started_at: Option<Duration>,
    next_tick: Tick,
    /// Hashes of confirmed sets after `verified`, waiting for the ones before.
    held: BTreeMap<Tick, u64>,
    verified: Tick,
    rolling: u64,
    /// The newest checksums reported, oldest first.
    history: VecDeque<(Tick, u64)>,
    counters: RelayCounters,
}

impl RelayLoadClient {
    /// Starts connecting with `token` from a socket bound to `bind`.
    ///
    /// # Errors
    ///
    /// [`LoadLinkError`] as [`LoadLink::connect`](crate::LoadLink::connect).
    pub fn connect(
        token: ConnectToken,
        bind: SocketAddr,
        spec: RelayLoadSpec,
    ) -> Result<Self, LoadLinkError> {
        Ok(Self {
            link: ClientLink::connect(token, bind)?,
            protocol: SessionProtocol::new(protocol_config(&spec)),
            spec,
            started_at: None,
            next_tick: 1,
            held: BTreeMap::new(),
            verified: 0,
            rolling: 0,
            history: VecDeque::with_capacity(CHECKSUM_HISTORY),
            counters: RelayCounters::default(),
        })
    }

    /// The slot the relay seated it in, once welcomed.
    pub fn slot(&self) -> Option<u8> {
        self.protocol.slot()
    }

    /// The newest verified tick and the checksum reported for it.
    pub fn checksum(&self) -> (Tick, u64) {
        (self.verified, self.rolling)
    }

    /// The newest checksums it reported (at most [`CHECKSUM_HISTORY`]), `(tick, checksum)`,
    /// oldest first.
    pub fn checksum_history(&self) -> impl Iterator<Item = (Tick, u64)> + '_ {
        self.history.iter().copied()
    }

    /// What it counted so far.
    pub fn counters(&self) -> RelayCounters {
        let stats = self.protocol.stats();
        RelayCounters {
            traffic: self.link.traffic(),
            verified_tick: self.verified,
            clock_messages: stats.clock_reports,
            pings_sent: stats.pings_sent,
            pongs: stats.pongs,
            pings_answered: stats.pings_answered,
            rtt_ms_sum: stats.rtt_ms_sum,
            rtt_ms_max: stats.rtt_ms_max,
            decode_errors: stats.rejected_messages,
            match_drops: stats.match_drops.total(),
            ..self.counters.clone()
        }
    }

    /// The client's time (the sum of its frames' steps).
    fn now(&self) -> Duration {
        self.link.now()
    }

    /// Queues the protocol's messages on renet; one that does not fit is handed back.
    fn transmit(&mut self) {
        while let Some(transmit) = self.protocol.poll_transmit() {
            let renet = self.link.renet();
            if renet.is_disconnected()
                || !renet.can_send_message(transmit.channel, transmit.bytes.len())
            {
                self.counters.send_refused += 1;
                self.protocol.transmit_refused(transmit);
                continue;
            }
            match transmit.kind {
                TransmitKind::Inputs => self.counters.input_messages += 1,
                TransmitKind::Checksum => self.counters.checksums_sent += 1,
                _ => {}
            }
            renet.send_message(transmit.channel, transmit.bytes);
        }
    }

    /// Acts on what the relay said.
    fn take_events(&mut self) {
        let events: Vec<ProtocolEvent> = self.protocol.events().collect();
        for event in events {
            let c = &mut self.counters;
            match event {
                ProtocolEvent::Joined { .. } if self.link.phase() == &ClientPhase::Connecting => {
                    self.link.set_phase(ClientPhase::Joined);
                }
                ProtocolEvent::Refused(reason) => {
                    self.link
                        .set_phase(ClientPhase::Refused(format!("{reason:?}")));
                }
                ProtocolEvent::Started { .. } => self.start(),
                ProtocolEvent::ConfirmedInputs { first_tick, sets } => {
                    self.on_sets(first_tick, &sets);
                }
                ProtocolEvent::Desync { players, .. } => {
                    c.desyncs += 1;
                    if self.protocol.slot().is_some_and(|s| players.contains(&s)) {
                        c.desyncs_naming_self += 1;
                    }
                }
                ProtocolEvent::PlayerLeft { .. } => c.players_left += 1,
                ProtocolEvent::PlayerRejoined { .. } => c.players_rejoined += 1,
                ProtocolEvent::Behind { .. } => c.behind += 1,
                ProtocolEvent::MatchEnded { reason, .. } => {
                    self.link.set_phase(ClientPhase::Ended(reason.to_string()));
                }
                ProtocolEvent::NextMatch(next) => self.enter_match(next),
                _ => {}
            }
        }
    }

    /// The relay moved on to `next`: its inputs and checksums start over from tick 0.
    fn enter_match(&mut self, next: NextMatch) {
        self.protocol.enter_next_match(next);
        self.started_at = None;
        self.next_tick = 1;
        self.held.clear();
        self.verified = 0;
        self.rolling = 0;
        self.history.clear();
        self.link.set_phase(ClientPhase::Joined);
        if next.running {
            self.start();
        }
    }

    fn start(&mut self) {
        if self.started_at.is_none() {
            self.started_at = Some(self.now());
        }
        self.link.set_phase(ClientPhase::Running);
    }

    /// Confirmed sets from `first_tick` on: new ones are held by tick; every tick that
    /// completes the verified run is checksummed and reported.
    fn on_sets(&mut self, first_tick: Tick, sets: &[InputSet]) {
        let slot = self.protocol.slot();
        for (i, set) in sets.iter().enumerate() {
            let tick = first_tick.saturating_add(i as Tick);
            self.counters.sets_received += 1;
            if tick <= self.verified || self.held.contains_key(&tick) {
                continue;
            }
            if slot.is_some_and(|slot| set.is_replaced(usize::from(slot))) {
                self.counters.own_inputs_replaced += 1;
            }
            self.counters.inputs_replaced += u64::from(set.replaced.count_ones());
            if self.held.len() < MAX_HELD_SETS {
                self.held.insert(tick, set_hash(set));
            }
        }
        while let Some(hash) = self.held.remove(&(self.verified + 1)) {
            self.verified += 1;
            self.rolling = rolling_checksum(self.rolling, self.verified, hash);
            if self.protocol.send_checksum(self.verified, self.rolling) {
                if self.history.len() == CHECKSUM_HISTORY {
                    self.history.pop_front();
                }
                self.history.push_back((self.verified, self.rolling));
            }
        }
    }

    /// The relay's tick now, estimated from its last `Clock` (or the start) and half the round
    /// trip.
    fn estimated_server_tick(&self) -> f64 {
        let hz = f64::from(self.spec.tick_rate_hz.max(1));
        let (tick, at) = match self.protocol.clock() {
            Some((report, at)) => (report.server_tick, at),
            None => (0, self.started_at.unwrap_or(self.now())),
        };
        let since = self.now().saturating_sub(at).as_secs_f64();
        f64::from(tick) + since * hz + self.protocol.rtt_ms() / 2_000.0 * hz
    }

    /// Samples the ticks due ([`RelayLoadSpec::lead_ticks`] ahead of the relay's clock) and
    /// hands them to the protocol, which sends the unconfirmed inputs with the
    /// acknowledgement (once per new tick, or after two ticks' time without a message).
    fn send_inputs(&mut self) {
        let Some(slot) = self.protocol.slot() else {
            return;
        };
        let target = self.estimated_server_tick().floor() as Tick + self.spec.lead_ticks;
        let mut budget = MAX_SAMPLES_PER_FRAME;
        while self.next_tick <= target && budget > 0 {
            let tick = self.next_tick;
            let input = load_input(self.spec.salt, slot, tick);
            self.protocol.add_local_input(tick, input);
            self.next_tick += 1;
            self.counters.input_ticks += 1;
            budget -= 1;
        }
        let ack = InputAck {
            ack_tick: self.verified,
            own_confirmed_through: self.verified,
            sampled_through: self.next_tick - 1,
        };
        self.protocol.send_inputs(self.now(), ack);
    }
}

impl LoadClient for RelayLoadClient {
    fn link(&self) -> &ClientLink {
        &self.link
    }

    fn link_mut(&mut self) -> &mut ClientLink {
        &mut self.link
    }

    /// One step of `dt`: receive, answer, sample and send what is due, flush.
    fn frame(&mut self, dt: Duration) {
        if !self.link.begin_frame(dt) {
            return;
        }
        let now = self.now();
        for channel in NetChannel::ALL {
            while let Some(bytes) = self.link.renet().receive_message(channel) {
                // A message that does not decode is counted by the protocol.
                let _ = self.protocol.handle_message(now, &bytes);
            }
        }
        self.take_events();
        self.protocol.step(now, self.link.is_up());
        if self.link.is_running() {
            self.send_inputs();
        }
        self.transmit();
        self.link.end_frame();
    }
}

/// The protocol config of a load client of `spec`: its `Hello`, its ping interval and checksum
/// rate, the deterministic client's default redundancy; it serves no snapshots.
fn protocol_config(spec: &RelayLoadSpec) -> ProtocolConfig {
    let hello = Hello::new(Protocols::SESSION, spec.name.clone())
        .with_tick_rate_hz(spec.tick_rate_hz)
        .with_players(spec.players)
        .with_input(spec.fingerprint.clone());
    ProtocolConfig {
        ping_interval: spec.ping_interval,
        input_redundancy: INPUT_REDUNDANCY,
        checksum_every: spec.checksum_every,
        serves_snapshots: false,
        ..ProtocolConfig::new(hello, u32::from(spec.tick_rate_hz))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_room_validates_and_states_the_load_fingerprint() {
        let room = relay_room_config(4, 64);
        assert_eq!(room.validate(), Ok(()));
        let RoomConfig::Relay(relay) = room else {
            unreachable!()
        };
        let spec = RelayLoadSpec::for_room(&relay, 9);
        assert_eq!(
            spec.fingerprint,
            InputFingerprint::new(LOAD_INPUT_NAME, LOAD_INPUT_MAX_BYTES)
        );
        assert_eq!((spec.players, spec.tick_rate_hz), (4, 64));
    }

    #[test]
    fn inputs_are_four_bytes_and_differ_by_salt_slot_and_tick() {
        let a = load_input(1, 0, 10);
        assert_eq!(a.len(), LOAD_INPUT_BYTES);
        assert_eq!(a, load_input(1, 0, 10));
        assert_ne!(a, load_input(2, 0, 10));
        assert_ne!(a, load_input(1, 1, 10));
        assert_ne!(a, load_input(1, 0, 11));
    }

    #[test]
    fn set_hashes_see_every_input_and_mask() {
        let set = InputSet {
            inputs: vec![vec![1, 2], vec![3]],
            replaced: 0,
            disconnected: 0,
        };
        let hash = set_hash(&set);
        assert_eq!(hash, set_hash(&set.clone()));
        let mut moved = set.clone();
        moved.inputs = vec![vec![1], vec![2, 3]];
        assert_ne!(hash, set_hash(&moved), "the split between inputs counts");
        let mut replaced = set.clone();
        replaced.replaced = 1;
        assert_ne!(hash, set_hash(&replaced));
        let mut gone = set;
        gone.disconnected = 2;
        assert_ne!(hash, set_hash(&gone));
    }

    #[test]
    fn the_rolling_checksum_depends_on_the_whole_history() {
        let one = rolling_checksum(0, 1, 11);
        let two = rolling_checksum(one, 2, 22);
        assert_eq!(two, rolling_checksum(rolling_checksum(0, 1, 11), 2, 22));
        assert_ne!(two, rolling_checksum(rolling_checksum(0, 1, 12), 2, 22));
        assert_ne!(two, rolling_checksum(one, 3, 22));
    }
}
