//! [`SessionProtocol`]: the client's side of the session protocol as a state machine over
//! explicit time (see [the crate docs](crate)).

use std::collections::VecDeque;
use std::time::Duration;

use simsync_net::{
    ClientHandshake, ClientMessage, Hello, JoinStatus, MatchEndReason, MatchId, PlayerIndex,
    ReconnectToken, RejectReason, RttEstimator, ServerMessage, SessionClientMessage,
    SessionServerMessage, Tick, decode_server_message, millis_u32,
};

use crate::events::{
    ClockReport, NextMatch, ProtocolEvent, ProtocolStats, ReceiveError, Transmit, TransmitKind,
};

/// Most unconfirmed inputs kept (and sent in one `Inputs` message).
pub const MAX_PENDING_INPUTS: usize = 64;

/// Round trips longer than this (ms) are not counted in [`ProtocolStats::rtt_ms_sum`] (a pong
/// to a ping of another clock, or one that waited out a pause).
const MAX_COUNTED_RTT_MS: u32 = 60_000;

/// How a [`SessionProtocol`] behaves: what it says in its `Hello` and how often it sends.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtocolConfig {
    /// The `Hello` of the first connection (protocols, name, tick rate, players, input
    /// fingerprint, a reconnect token to take a slot again).
    pub hello: Hello,
    /// The session's tick rate, Hz (the idle resend of `Inputs`: two ticks' time).
    pub tick_rate_hz: u32,
    /// Time between two pings of the round-trip measurement (the first goes out one interval
    /// after the protocol's time 0).
    pub ping_interval: Duration,
    /// Unconfirmed inputs repeated in every `Inputs` message, at least (at least 1).
    pub input_redundancy: u32,
    /// A checksum goes out for every this many verified ticks reported (at least 1).
    pub checksum_every: u32,
    /// Whether the driver serves the relay's snapshot requests
    /// ([`ProtocolEvent::SnapshotRequest`]); if not, they are answered unavailable at once.
    pub serves_snapshots: bool,
}

impl ProtocolConfig {
    /// A config saying `hello`, at `tick_rate_hz`, with a ping every 250 ms, 3 inputs of
    /// redundancy, a checksum every 60 verified ticks and no snapshots served.
    pub fn new(hello: Hello, tick_rate_hz: u32) -> Self {
        Self {
            hello,
            tick_rate_hz,
            ping_interval: Duration::from_millis(250),
            input_redundancy: 3,
            checksum_every: 60,
            serves_snapshots: false,
        }
    }
}

/// The acknowledgement state an `Inputs` message carries, from the driver's confirmed inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputAck {
    /// The newest tick through which every confirmed set arrived (the relay resends from the
    /// next one).
    pub ack_tick: Tick,
    /// The newest tick through which this client's own inputs are confirmed: older unconfirmed
    /// inputs are dropped (keeping the redundancy).
    pub own_confirmed_through: Tick,
    /// The newest tick the driver sampled local input for (also ticks it sampled nothing
    /// for): with nothing pending, a started client still acknowledges from the next one.
    pub sampled_through: Tick,
}

/// The client's side of the relay's session protocol, sans IO: [`handle_message`]
/// takes the relay's messages as bytes, [`step`] queues what time makes due, and the driver
/// takes the [`Transmit`]s and [`ProtocolEvent`]s. Every call is given the time `now` (any
/// monotonic clock, from the protocol's time 0); nothing here reads a clock, a socket or a
/// renet client.
///
/// [`handle_message`]: Self::handle_message
/// [`step`]: Self::step
#[derive(Debug)]
pub struct SessionProtocol {
    pub(crate) config: ProtocolConfig,
    /// The `Hello` of the first connection (a reconnect adds the current token).
    hello: Hello,
    handshake: ClientHandshake,
    rtt: RttEstimator,
    last_ping: Duration,
    /// The slot of the last `Welcome` (kept while a new connection says hello again).
    slot: Option<PlayerIndex>,
    /// The reconnect token of the last `Welcome` (kept likewise).
    reconnect_token: Option<ReconnectToken>,
    pub(crate) match_id: Option<MatchId>,
    pub(crate) next_match: Option<NextMatch>,
    pub(crate) match_end: Option<MatchEndReason>,
    pub(crate) started: bool,
    pub(crate) ready_due: bool,
    pub(crate) left: bool,
    /// Unconfirmed local inputs, oldest first.
    pub(crate) pending: VecDeque<(Tick, Vec<u8>)>,
    /// When the last `Inputs` message went out, and the newest tick sampled then.
    pub(crate) last_sent: Option<(Duration, Tick)>,
    pub(crate) checksums_seen: u32,
    /// The relay's last clock report and its arrival time.
    pub(crate) clock: Option<(ClockReport, Duration)>,
    last_heard: Option<Duration>,
    /// Messages to send, oldest first.
    pub(crate) outbox: VecDeque<Transmit>,
    pub(crate) events: VecDeque<ProtocolEvent>,
    pub(crate) stats: ProtocolStats,
}

impl SessionProtocol {
    /// A client that has not said hello yet.
    pub fn new(config: ProtocolConfig) -> Self {
        Self {
            hello: config.hello.clone(),
            handshake: ClientHandshake::new(config.hello.clone()),
            config,
            rtt: RttEstimator::new(),
            last_ping: Duration::ZERO,
            slot: None,
            reconnect_token: None,
            match_id: None,
            next_match: None,
            match_end: None,
            started: false,
            ready_due: false,
            left: false,
            pending: VecDeque::new(),
            last_sent: None,
            checksums_seen: 0,
            clock: None,
            last_heard: None,
            outbox: VecDeque::new(),
            events: VecDeque::new(),
            stats: ProtocolStats::default(),
        }
    }

    /// The config it was made with.
    pub fn config(&self) -> &ProtocolConfig {
        &self.config
    }

    /// What it counted so far.
    pub fn stats(&self) -> &ProtocolStats {
        &self.stats
    }

    /// The handshake's state.
    pub fn join_status(&self) -> &JoinStatus {
        self.handshake.status()
    }

    /// This client's player slot, once joined into one (kept while a new connection says
    /// hello again after a loss).
    pub fn slot(&self) -> Option<PlayerIndex> {
        self.slot
    }

    /// The slot's reconnect token, once joined by a relay that gives one (kept likewise).
    pub fn reconnect_token(&self) -> Option<ReconnectToken> {
        self.reconnect_token
    }

    /// Whether the played match started.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Why the relay ended the played match, once it did.
    pub fn match_end(&self) -> Option<&MatchEndReason> {
        self.match_end.as_ref()
    }

    /// The match the client plays or played last, once the relay named one.
    pub fn match_id(&self) -> Option<MatchId> {
        self.match_id
    }

    /// Whether the client left ([`leave`](Self::leave)).
    pub fn has_left(&self) -> bool {
        self.left
    }

    /// The smoothed round-trip time, ms (0 before the first pong).
    pub fn rtt_ms(&self) -> f64 {
        self.rtt.rtt_ms_or(0.0)
    }

    /// The round-trip jitter, ms.
    pub fn jitter_ms(&self) -> f64 {
        self.rtt.jitter_ms()
    }

    /// The relay's last clock report of the played match and when it arrived.
    pub fn clock(&self) -> Option<(ClockReport, Duration)> {
        self.clock
    }

    /// When a message of the relay last arrived (`None` before the first).
    pub fn last_heard(&self) -> Option<Duration> {
        self.last_heard
    }

    /// Counts the time up to `now` as heard from the relay (a pause of the process is not
    /// the relay's silence); nothing before the first message.
    pub fn excuse_silence(&mut self, now: Duration) {
        if self.last_heard.is_some() {
            self.last_heard = Some(now);
        }
    }

    /// The unconfirmed local inputs, `(tick, bytes)`, oldest first.
    pub fn pending_inputs(&self) -> impl Iterator<Item = &(Tick, Vec<u8>)> + '_ {
        self.pending.iter()
    }

    /// The events since the last call, oldest first.
    pub fn events(&mut self) -> impl Iterator<Item = ProtocolEvent> + '_ {
        self.events.drain(..)
    }

    /// The next message to put on the connection, oldest first.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.outbox.pop_front()
    }

    /// Every queued message, oldest first.
    pub fn transmits(&mut self) -> impl Iterator<Item = Transmit> + '_ {
        self.outbox.drain(..)
    }

    /// The driver could not queue `transmit` (a full channel, no connection): counted; a
    /// `Hello` or a `Ready` is said again at the next [`step`](Self::step), anything else is
    /// dropped (inputs are repeated by the next `Inputs` message anyway).
    pub fn transmit_refused(&mut self, transmit: Transmit) {
        self.stats.transmits_refused += 1;
        match transmit.kind {
            TransmitKind::Hello => {
                self.handshake = ClientHandshake::new(self.handshake.hello().clone());
            }
            TransmitKind::Ready => self.ready_due = true,
            _ => {}
        }
    }

    /// Takes one message of the relay: the handshake, pings (answered) and pongs (round trips)
    /// here; session messages by the match rule; ownership messages are not for this client.
    ///
    /// # Errors
    /// [`ReceiveError::Decode`] for bytes that are no server message (counted; a decode error
    /// that the handshake reads as the relay's protocol being another version ends it with
    /// [`ProtocolEvent::Refused`]).
    pub fn handle_message(&mut self, now: Duration, bytes: &[u8]) -> Result<(), ReceiveError> {
        self.last_heard = Some(now);
        let message = match decode_server_message(bytes) {
            Ok(message) => message,
            Err(error) => {
                self.stats.rejected_messages += 1;
                if self.handshake.on_decode_error(&error) {
                    self.on_join_refused();
                }
                return Err(ReceiveError::Decode(error));
            }
        };
        match message {
            ServerMessage::Welcome(welcome) => self.on_welcome(welcome),
            ServerMessage::Rejected { reason } => {
                if self.handshake.on_rejected(reason) {
                    self.on_join_refused();
                }
            }
            ServerMessage::Ping { t } => {
                self.stats.pings_answered += 1;
                self.queue(&ClientMessage::Pong { t }, TransmitKind::Pong);
            }
            ServerMessage::Pong { t, .. } => self.on_pong(now, t),
            ServerMessage::Session(session) => self.on_match_message(session),
            ServerMessage::Ownership(_) => {}
        }
        Ok(())
    }

    /// The relay's `Welcome`: joined (reported), or refused when it disagrees with the `Hello`.
    fn on_welcome(&mut self, welcome: simsync_net::Welcome) {
        let (slot, server_tick) = (welcome.player_slot, welcome.server_tick);
        if !self.handshake.on_welcome(welcome) {
            return;
        }
        if self.handshake.is_joined() {
            self.slot = slot;
            self.reconnect_token = self.handshake.reconnect_token();
            self.events.push_back(ProtocolEvent::Joined {
                slot,
                server_tick,
                reconnect_token: self.reconnect_token,
            });
        } else {
            self.on_join_refused();
        }
    }

    /// The handshake ended in a refusal: reported.
    fn on_join_refused(&mut self) {
        if let JoinStatus::Rejected(reason) = self.handshake.status() {
            let reason: RejectReason = reason.clone();
            self.events.push_back(ProtocolEvent::Refused(reason));
        }
    }

    /// A pong to the ping sent at `t` (ms of the protocol's clock): a round trip measured.
    fn on_pong(&mut self, now: Duration, t: u32) {
        let rtt = millis_u32(now).wrapping_sub(t);
        if rtt < MAX_COUNTED_RTT_MS {
            self.stats.pongs += 1;
            self.stats.rtt_ms_sum += u64::from(rtt);
            self.stats.rtt_ms_max = self.stats.rtt_ms_max.max(rtt);
        }
        self.rtt.on_pong(t, millis_u32(now));
    }

    /// A session message of the played match while it is played: reported as its event
    /// ([`ProtocolEvent::of_session_message`]), after the protocol's own part of it — a
    /// snapshot request it does not serve answered, a clock report kept.
    pub(crate) fn on_session_message(&mut self, match_id: MatchId, message: SessionServerMessage) {
        let Some(event) = ProtocolEvent::of_session_message(message) else {
            return;
        };
        match &event {
            ProtocolEvent::SnapshotRequest { request, .. } if !self.config.serves_snapshots => {
                self.answer_snapshot_unavailable(match_id, *request);
            }
            ProtocolEvent::Clock(report) => self.keep_clock_report(*report),
            _ => {}
        }
        self.events.push_back(event);
    }

    /// A snapshot request of `match_id` while the driver serves no snapshots: answered
    /// `SnapshotUnavailable` at once (the relay asks another client).
    fn answer_snapshot_unavailable(&mut self, match_id: MatchId, request: u32) {
        let answer = SessionClientMessage::SnapshotUnavailable { request };
        self.queue(
            &ClientMessage::session(match_id, answer),
            TransmitKind::Session,
        );
    }

    /// The relay's clock report: counted and kept with the time the last message arrived
    /// ([`SessionProtocol::clock`]).
    fn keep_clock_report(&mut self, report: ClockReport) {
        self.stats.clock_reports += 1;
        self.clock = Some((report, self.last_heard.unwrap_or_default()));
    }

    /// Queues what time and the connection make due at `now`: the `Hello` once `connected`,
    /// then (connected, not gone) a ping every [`ProtocolConfig::ping_interval`] and `Ready`
    /// for the played lobby.
    pub fn step(&mut self, now: Duration, connected: bool) {
        if let Some(hello) = self.handshake.hello_to_send(connected) {
            let hello = ClientMessage::Hello(hello.clone());
            self.queue(&hello, TransmitKind::Hello);
            self.handshake.on_hello_sent();
        }
        if !connected || self.left {
            return;
        }
        let since_ping = now.saturating_sub(self.last_ping).as_millis();
        if since_ping >= self.config.ping_interval.as_millis() {
            self.last_ping = now;
            self.stats.pings_sent += 1;
            let ping = ClientMessage::Ping { t: millis_u32(now) };
            self.queue(&ping, TransmitKind::Ping);
        }
        if let (true, Some(match_id)) = (self.ready_due, self.playing()) {
            self.ready_due = false;
            let ready = ClientMessage::session(match_id, SessionClientMessage::Ready);
            self.queue(&ready, TransmitKind::Ready);
        }
    }

    /// Encodes `message` into the outbox. Returns its encoded length (`None`: it does not
    /// encode, which only a message above the codec's limit does; nothing is queued).
    pub(crate) fn queue(&mut self, message: &ClientMessage, kind: TransmitKind) -> Option<usize> {
        let bytes = simsync_net::encode(message).ok()?;
        let len = bytes.len();
        self.outbox.push_back(Transmit {
            channel: message.channel(),
            bytes,
            kind,
        });
        Some(len)
    }

    /// Queues a session message of the played match (a desync breakdown, a snapshot answer or
    /// chunk). Returns whether it was queued: nothing goes out while no match is played.
    pub fn queue_session_message(&mut self, message: SessionClientMessage) -> bool {
        let Some(match_id) = self.playing() else {
            return false;
        };
        let message = ClientMessage::session(match_id, message);
        self.queue(&message, TransmitKind::Session).is_some()
    }

    /// The game leaves: a `Goodbye` is queued when `connected` (returned: whether it was);
    /// unconfirmed inputs and queued messages are dropped, and nothing of the session goes out
    /// any more. A second call does nothing.
    pub fn leave(&mut self, connected: bool) -> bool {
        if self.left {
            return false;
        }
        self.left = true;
        self.pending.clear();
        self.outbox.clear();
        connected
            && self
                .queue(&ClientMessage::Goodbye, TransmitKind::Goodbye)
                .is_some()
    }

    /// A new connection replaces the lost one: the `Hello` is said again (with the slot's
    /// current reconnect token), and what belonged to the old connection — queued messages,
    /// the last send, the clock report — is dropped. The match, the unconfirmed inputs and the
    /// round-trip estimate stay.
    pub fn restart_handshake(&mut self) {
        let hello = match self.reconnect_token {
            Some(token) => self
                .hello
                .clone()
                .with_reconnect_token(token.slot, token.token),
            None => self.hello.clone(),
        };
        self.handshake = ClientHandshake::new(hello);
        self.outbox.clear();
        self.last_sent = None;
        self.clock = None;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use simsync_net::{Protocols, Welcome};

    use super::*;

    pub(crate) const MS: Duration = Duration::from_millis(1);

    pub(crate) fn server_bytes(message: &ServerMessage) -> Vec<u8> {
        simsync_net::encode(message).expect("encodes")
    }

    pub(crate) fn hello() -> Hello {
        Hello::new(Protocols::SESSION, "test")
            .with_tick_rate_hz(64)
            .with_players(2)
    }

    pub(crate) fn welcome(slot: u8, server_tick: Tick) -> ServerMessage {
        ServerMessage::Welcome(Welcome {
            protocol_version: simsync_net::PROTOCOL_VERSION,
            participant: simsync_net::ParticipantId(7),
            player_slot: Some(slot),
            protocols: Protocols::SESSION,
            tick_rate_hz: 64,
            server_tick,
            players: 2,
            reconnect_token: Some(99),
        })
    }

    /// A protocol welcomed into slot 1 at time 10 ms, its transmits and events taken.
    pub(crate) fn joined() -> (SessionProtocol, Duration) {
        let mut p = SessionProtocol::new(ProtocolConfig::new(hello(), 64));
        let now = 10 * MS;
        p.step(now, true);
        p.handle_message(now, &server_bytes(&welcome(1, 0)))
            .expect("decodes");
        p.transmits().for_each(drop);
        p.events().for_each(drop);
        (p, now)
    }

    fn decoded(t: &Transmit) -> ClientMessage {
        simsync_net::decode(&t.bytes).expect("decodes")
    }

    #[test]
    fn the_hello_goes_out_once_connected_and_the_welcome_seats_the_client() {
        let mut p = SessionProtocol::new(ProtocolConfig::new(hello(), 64));
        p.step(Duration::ZERO, false);
        assert!(p.poll_transmit().is_none(), "nothing before the connection");
        p.step(MS, true);
        let sent = p.poll_transmit().expect("hello");
        assert_eq!(sent.kind, TransmitKind::Hello);
        assert_eq!(decoded(&sent), ClientMessage::Hello(hello()));
        p.step(2 * MS, true);
        assert!(p.poll_transmit().is_none(), "said once");
        p.handle_message(3 * MS, &server_bytes(&welcome(1, 40)))
            .expect("decodes");
        assert_eq!(p.slot(), Some(1));
        let token = ReconnectToken { slot: 1, token: 99 };
        assert_eq!(
            p.events().collect::<Vec<_>>(),
            vec![ProtocolEvent::Joined {
                slot: Some(1),
                server_tick: 40,
                reconnect_token: Some(token)
            }]
        );
        // A new connection says hello again, with the token.
        p.restart_handshake();
        p.step(4 * MS, true);
        let again = p.poll_transmit().expect("hello again");
        assert_eq!(
            decoded(&again),
            ClientMessage::Hello(hello().with_reconnect_token(1, 99))
        );
    }

    #[test]
    fn a_refused_hello_is_said_again_and_a_rejection_is_final() {
        let mut p = SessionProtocol::new(ProtocolConfig::new(hello(), 64));
        p.step(MS, true);
        let hello_transmit = p.poll_transmit().expect("hello");
        p.transmit_refused(hello_transmit);
        p.step(2 * MS, true);
        assert_eq!(p.poll_transmit().map(|t| t.kind), Some(TransmitKind::Hello));
        let rejected = ServerMessage::Rejected {
            reason: RejectReason::ServerFull,
        };
        p.handle_message(3 * MS, &server_bytes(&rejected))
            .expect("decodes");
        assert_eq!(
            p.events().collect::<Vec<_>>(),
            vec![ProtocolEvent::Refused(RejectReason::ServerFull)]
        );
        assert!(matches!(p.join_status(), JoinStatus::Rejected(_)));
        assert_eq!(p.stats().transmits_refused, 1);
    }

    #[test]
    fn pings_go_out_every_interval_and_pongs_measure_the_round_trip() {
        let (mut p, _) = joined();
        p.step(249 * MS, true);
        assert!(
            p.poll_transmit().is_none(),
            "the first ping after one interval"
        );
        p.step(250 * MS, true);
        let ping = p.poll_transmit().expect("ping");
        assert_eq!(decoded(&ping), ClientMessage::Ping { t: 250 });
        p.step(400 * MS, true);
        assert!(p.poll_transmit().is_none());
        let pong = ServerMessage::Pong {
            t: 250,
            server_time_ms: 0,
        };
        p.handle_message(330 * MS, &server_bytes(&pong))
            .expect("decodes");
        assert_eq!((p.stats().pongs, p.stats().rtt_ms_sum), (1, 80));
        assert_eq!(p.rtt_ms(), 80.0);
        // The relay's ping is answered with its own time.
        let ping = ServerMessage::Ping { t: 1_234 };
        p.handle_message(331 * MS, &server_bytes(&ping))
            .expect("decodes");
        let pong = p.poll_transmit().expect("pong");
        assert_eq!(decoded(&pong), ClientMessage::Pong { t: 1_234 });
        assert_eq!(p.stats().pings_answered, 1);
    }

    #[test]
    fn hostile_bytes_are_counted_and_never_panic() {
        let (mut p, now) = joined();
        let mut rejected = 0;
        let samples: [&[u8]; 5] = [
            &[],
            &[0xff; 3],
            &[200, 1, 2, 3, 4, 5, 6, 7, 8],
            &[4, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            &[4, 0, 1, 0, 252, 0xff, 0xff, 0xff, 0x7f],
        ];
        for bytes in samples {
            if p.handle_message(now, bytes).is_err() {
                rejected += 1;
            }
        }
        // Every truncation of a real message, too.
        let real = server_bytes(&welcome(1, 0));
        for end in 0..real.len() {
            if p.handle_message(now, &real[..end]).is_err() {
                rejected += 1;
            }
        }
        assert_eq!(p.stats().rejected_messages, rejected);
        assert!(rejected >= samples.len() as u64);
        assert_eq!(p.slot(), Some(1), "still seated");
    }

    #[test]
    fn a_snapshot_request_is_answered_unavailable_unless_the_driver_serves_snapshots() {
        let start = SessionServerMessage::Start {
            tick: 0,
            players: 2,
            tick_rate_hz: 64,
        };
        let request = SessionServerMessage::SnapshotRequest {
            request: 5,
            min_tick: 30,
            max_bytes: 4_096,
        };
        let session = |m| server_bytes(&ServerMessage::session(MatchId(1), m));
        for serves_snapshots in [false, true] {
            let (mut p, now) = joined();
            p.config.serves_snapshots = serves_snapshots;
            p.handle_message(now, &session(start.clone()))
                .expect("decodes");
            p.transmits().for_each(drop);
            p.handle_message(now, &session(request.clone()))
                .expect("decodes");
            let answers: Vec<ClientMessage> = p.transmits().map(|t| decoded(&t)).collect();
            let unavailable = ClientMessage::session(
                MatchId(1),
                SessionClientMessage::SnapshotUnavailable { request: 5 },
            );
            let expected = if serves_snapshots {
                vec![]
            } else {
                vec![unavailable]
            };
            assert_eq!(answers, expected, "serves snapshots: {serves_snapshots}");
            // Reported either way: a driver that serves snapshots answers it.
            let reported = ProtocolEvent::SnapshotRequest {
                request: 5,
                min_tick: 30,
                max_bytes: 4_096,
            };
            assert_eq!(p.events().last(), Some(reported));
        }
    }

    #[test]
    fn the_relays_clock_report_is_kept_with_its_arrival_time() {
        let (mut p, _) = joined();
        let start = SessionServerMessage::Start {
            tick: 0,
            players: 2,
            tick_rate_hz: 64,
        };
        let clock = SessionServerMessage::Clock {
            input_lead_ticks: 2.5,
            server_tick: 300,
            judged_through: 240,
            desyncs_sent: 1,
            unjudged_checksums: 4,
        };
        let session = |m| server_bytes(&ServerMessage::session(MatchId(1), m));
        p.handle_message(20 * MS, &session(start)).expect("decodes");
        p.handle_message(70 * MS, &session(clock)).expect("decodes");
        let report = ClockReport {
            input_lead_ticks: 2.5,
            server_tick: 300,
            judged_through: 240,
            desyncs_sent: 1,
            unjudged_checksums: 4,
        };
        assert_eq!(p.clock(), Some((report, 70 * MS)));
        assert_eq!(p.events().last(), Some(ProtocolEvent::Clock(report)));
        assert_eq!(p.stats().clock_reports, 1);
        // A new connection forgets it: the relay's next report is the one to go by.
        p.restart_handshake();
        assert_eq!(p.clock(), None);
    }
}
