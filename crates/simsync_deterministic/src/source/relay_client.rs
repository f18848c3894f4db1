//! The relay client: the poll of a networked deterministic session, a state machine over an
//! explicit `&mut RenetClient` (no `World`). The relay protocol itself — handshake, pings,
//! which match's messages to take, inputs with redundancy and acknowledgements, checksums — is
//! [`simsync_relay_client::SessionProtocol`], sans IO; this client moves its bytes over renet
//! and adds what the session needs: the input buffer, the clock's lead, stalls, reconnects and
//! snapshots.
//!
//! Each session update the client (see [the networked session](crate::rules#the-networked-session)):
//! - receives: `Welcome` (its player slot), `Start`, confirmed input sets (decoded into the input
//!   buffer, so `MaxVerifiableTick` advances), the server's `Clock` (how early its inputs
//!   arrive), pings and pongs (RTT);
//! - keeps its local tick ahead of the server so that its inputs arrive early by a jitter
//!   margin: it runs slightly faster or slower (at most ±5 %, `LeadControl`) and snaps when more
//!   than 8 ticks off (at most once per RTT);
//! - picks its input delay from the RTT (`input_delay_ticks`: the minimum plus half the RTT
//!   above 100 ms, in ticks, capped) unless a fixed delay is configured;
//! - substitutes a confirmed input that does not decode (the relay checks inputs, so only a
//!   faulty relay sends one) with the player's confirmed input of the tick before, or the
//!   default: counted and reported as [`InputSubstituted`], the session goes on;
//! - states its session's tick rate, player count and input fingerprint in its `Hello`; a relay
//!   configured otherwise refuses it, reported as [`SessionRejected`];
//! - reports the desync episodes the relay reports: as [`DesyncDetected`] when its own player is
//!   named (this client desynced), as [`PlayerDesynced`] when only other players are ("player N
//!   desynced": not a desync of this client), each with its judge; and players leaving and
//!   coming back as [`PlayerLeft`] and [`PlayerRejoined`];
//! - keeps the reconnect token of its `Welcome` ([`RelayClientStats::reconnect_token`]) and, when
//!   configured with one ([`NetworkSessionConfig::rejoin`]), sends it to take its slot again;
//!   it samples no input for the ticks the session ran before its `Welcome` (see
//!   [rejoining](crate::rules#rejoining-a-running-session));
//! - samples its local input for tick `now + input_delay` and sends its unconfirmed inputs with
//!   redundancy (at least the last 3);
//! - names its match in every session message and takes the relay's only for its match while
//!   it runs (the rest is dropped and counted, [`RelayClientStats::match_drops`]); follows the
//!   relay's matches: `MatchEnded` ends its match, `MatchOpened` or `Start` of a later match
//!   makes the session rebuild itself for it on the same connection ([`NextMatch`]), and the
//!   rebuilt session answers `Ready` (see
//!   [what survives a rematch](crate::rules#what-survives-a-rematch));
//! - with snapshots on ([`NetworkSessionConfig::snapshots`]), keeps the relay's snapshot request
//!   for the capture outside the session update and sends the chunks within the snapshot
//!   channel's room; reassembles a snapshot the relay forwards and holds the confirmed sets that
//!   arrive before it is loaded ([late join](crate::rules#late-join-and-rejoin-from-a-snapshot)).

use std::time::Duration;

use bevy::ecs::message::Message;
use bevy::log::{debug, error, info, warn};
use bevy::reflect::Reflect;
use simsync_net::bevy_renet::RenetClient;
use simsync_net::{
    ClientMessage, ClientNetExt, ClockAdjustment, DesyncJudge, Hello, InputFingerprint,
    LeadControl, MatchDrops, MatchEndReason, MatchId, MatchMessage, NetChannel, Protocols,
    ReconnectToken, RejectReason, SessionClientMessage, TickAccumulator, estimated_server_tick,
    input_delay_ticks, target_lead_ticks,
};
use simsync_relay_client::{
    InputAck, ProtocolConfig, ProtocolEvent, ProtocolStats, SessionProtocol,
};

use super::local_inputs::LocalInputProvider;
use super::presence::{PlayerLeft, PlayerRejoined};
use super::reconnect::{ReconnectAction, ReconnectPhase, ReconnectWatch};
use super::stall::{SessionStall, StallChange, StallWatch};
use crate::config::{NetworkSessionConfig, SessionConfig, SessionMode};
use crate::input::{ConfirmOutcome, InputBuffer, SimInput};
use crate::snapshot::transfer::{BuddyRequest, ClientSnapshotStats, SnapshotExchange};
use crate::tick::{PlayerIndex, Tick};

mod liveness;
mod matches;

/// Most ticks the client's clock polls in one update.
const MAX_CLIENT_POLLS: u32 = 64;

/// What the relay client measured (part of [`SessionStats`](crate::SessionStats)).
#[derive(Debug, Clone, Default, PartialEq, Reflect)]
pub struct RelayClientStats {
    /// This client's player slot, once welcomed. The game should read
    /// [`LocalPlayers`](crate::LocalPlayers) instead: the same slot, kept up to date in the same
    /// update and the same resource in local and networked sessions.
    pub slot: Option<PlayerIndex>,
    /// Round-trip time in ms (EWMA; 0 before the first sample).
    pub rtt_ms: f64,
    /// RTT jitter in ms.
    pub jitter_ms: f64,
    /// The input delay in use (ticks).
    pub input_delay_ticks: u32,
    /// How early this client's inputs reach the server, in ticks (server's report).
    pub input_lead_ticks: f32,
    /// The clock speed factor in use (1.0 = real time).
    pub speed: f64,
    /// Clock snaps performed.
    pub snaps: u64,
    /// This client's own inputs the server replaced because they arrived late (or never).
    pub late_inputs: u64,
    /// Inputs (any player) the server replaced.
    pub replaced_inputs: u64,
    /// Server messages that failed to decode.
    pub rejected_messages: u64,
    /// Confirmed inputs that failed to decode or conflicted with an earlier confirmation.
    pub rejected_inputs: u64,
    /// This client's desyncs: the relay's reports naming its own player (its checksum differed
    /// from the judge's), one per desync episode, not one per desynced tick
    /// ([`DesyncDetected`]).
    pub desyncs: u64,
    /// Reports that other players desynced while this client's player was not named ("player N
    /// desynced", [`PlayerDesynced`]): this client agreed with the judge. Never a desync of
    /// this client.
    pub others_desynced: u64,
    /// This client's last desync the server reported.
    pub last_desync: Option<DesyncDetected>,
    /// The newest tick through which the relay judged every seated player's checksums, or
    /// counted them unjudged (its last clock report; 0 before any). It goes back when a player
    /// behind is seated again. Once it reaches this client's
    /// last checksummed tick, every desync of the match up to there was reported
    /// ([the end of a match](crate::rules#the-end-of-a-match-waits-for-its-judgement)).
    pub judged_through: Tick,
    /// Checksum reports of this match the relay could not judge, all players together (they
    /// came after their tick's verdict was gone, or the tick had no judge; the relay's clock
    /// clock report).
    pub unjudged_checksums: u64,
    /// `Desync` messages of the match the relay says it sent this client (its last clock
    /// report): the desyncs covered by `judged_through` have all arrived once `desyncs` and
    /// `others_desynced` add up to it.
    pub relay_desyncs_sent: u64,
    /// Times this client was resynced from an authoritative room's snapshot ([`Resynced`](crate::Resynced)).
    pub resyncs: u64,
    /// The last resync `(from_tick, to_tick)`, while no desync of this client was reported after
    /// it.
    pub resynced: Option<(Tick, Tick)>,
    /// The last desync report (the components that differ) the server sent.
    pub last_desync_report: Option<simsync_net::DesyncReport>,
    /// Confirmed inputs that did not decode and were substituted ([`InputSubstituted`]).
    pub substituted_inputs: u64,
    /// Encoded bytes of the `Inputs` messages sent (message payload, before renet's headers).
    pub input_bytes_sent: u64,
    /// `Inputs` messages sent: at most one per tick of the client's clock, whatever the frame
    /// rate ([rate limits](crate::rules#rate-limits)).
    pub input_messages_sent: u64,
    /// Why the server refused this client, if it did (also written as [`SessionRejected`]).
    #[reflect(ignore)]
    pub rejected: Option<RejectReason>,
    /// Whether the server started the session.
    pub started: bool,
    /// The stall under way (no new verifiable tick for more than a second while running).
    pub stall: Option<SessionStall>,
    /// Set when the relay reported this client behind its history: the oldest tick it holds
    /// (the client needs a snapshot).
    pub needs_snapshot_from: Option<Tick>,
    /// Stalls reported so far.
    pub stalls_reported: u64,
    /// This client's slot and the token that takes it again after a drop, from the `Welcome`
    /// (store it to rejoin with [`NetworkSessionConfig::rejoin`]); `None` before the welcome or
    /// from a relay that gives none.
    pub reconnect_token: Option<ReconnectToken>,
    /// Snapshots served, loaded and refused ([late
    /// join](crate::rules#late-join-and-rejoin-from-a-snapshot)).
    pub snapshots: ClientSnapshotStats,
    /// Where the client is in coming back after a lost connection
    /// ([reconnecting](crate::rules#reconnecting-after-a-lost-connection)).
    pub reconnect: ReconnectPhase,
    /// New connections started after a loss (attempts, successful or not).
    pub reconnect_attempts: u64,
    /// Times this client came back into its slot by itself (welcomed on a new connection).
    pub reconnects: u64,
    /// The relay's match this session plays, once the relay named it (`Start` or
    /// `MatchOpened`); a rematch rebuilds the session for the next one.
    pub match_id: Option<MatchId>,
    /// Why the relay ended this session's match, once it did.
    pub match_end: Option<MatchEndReason>,
    /// The relay's session messages dropped because they belong to another match than this
    /// session's (a message of the previous match that arrived after the rematch is
    /// `ended_match`), or to this match after it ended.
    pub match_drops: MatchDrops,
    /// The game left the session ([`LeaveSession`](crate::LeaveSession)): the client said
    /// goodbye, sends nothing more and never reconnects.
    pub left: bool,
    /// Set when the client gave the relay up: nothing was heard from it for this long (at
    /// least [`NetworkSessionConfig::server_timeout`]); the connection is closed and nothing
    /// more is tried ([a dead server](crate::rules#a-dead-server-and-a-long-pause)).
    pub server_gone: Option<Duration>,
    /// Rejoins started at once after a pause of this process of at least
    /// [`NetworkSessionConfig::rejoin_after_pause`] ([a long
    /// pause](crate::rules#a-dead-server-and-a-long-pause)).
    pub rejoins_after_pause: u64,
}

impl RelayClientStats {
    /// Whether the relay judged every seated player's checksums through `tick` (or counted
    /// them unjudged) and every `Desync` it sent before saying so has arrived: then this
    /// client has heard of every desync up to `tick`
    /// ([the end of a match](crate::rules#the-end-of-a-match-waits-for-its-judgement)).
    pub fn judged(&self, tick: Tick) -> bool {
        self.judged_through >= tick
            && self.desyncs + self.others_desynced >= self.relay_desyncs_sent
    }
}

/// The relay moved on to a later match than the session's (a rematch): the session is rebuilt
/// for it on the same connection (`running`: it starts `Running`, else it waits in the lobby
/// and says it is ready).
pub(crate) use simsync_relay_client::NextMatch;

/// What the relay client reports to the session (written as Messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NetReport {
    /// A stall began.
    Stalled(SessionStall),
    /// Ticks flow again.
    Resumed {
        /// The verifiable tick now.
        tick: Tick,
        /// How long the stall lasted.
        stalled_for: Duration,
    },
    /// The relay no longer holds the confirmed inputs this client misses.
    NeedsSnapshot {
        /// The oldest tick the relay holds.
        oldest_available: Tick,
    },
    /// The server judged a tick's checksums and named this client's player.
    Desync(DesyncDetected),
    /// The server judged a tick's checksums and named other players only.
    PlayerDesynced(PlayerDesynced),
    /// The server compared the breakdowns of a desynced tick.
    DesyncReport(simsync_net::DesyncReport),
    /// A confirmed input did not decode and was substituted.
    Substituted(InputSubstituted),
    /// The relay refused this client in the handshake.
    Rejected(SessionRejected),
    /// A player left.
    PlayerLeft(PlayerLeft),
    /// A player came back.
    PlayerRejoined(PlayerRejoined),
}

/// This client desynced: the relay judged the checksums reported for `tick` and this client's
/// own player is among `players`, whose checksums differ from the `judge`'s — an authoritative
/// room's verified world, or the majority of players (every reporter when there was none) —
/// and each of which starts a desync episode at `tick`. Written once per episode, not per
/// desynced tick: a player stays desynced until a checksum of it agrees with the judge again,
/// and only its next disagreement after that is written again
/// ([rule](crate::rules#desyncs-are-reported-once-per-episode)). A report naming only other
/// players is a [`PlayerDesynced`] instead.
#[derive(Message, Debug, Clone, PartialEq, Eq, Reflect)]
pub struct DesyncDetected {
    /// The tick judged: the first desynced tick of the episodes.
    pub tick: Tick,
    /// The players whose episode starts, in slot order (this client's among them).
    pub players: Vec<PlayerIndex>,
    /// What their checksums differ from.
    pub judge: DesyncJudge,
}

/// Other players desynced ("player N desynced"): the relay judged the checksums reported for
/// `tick` and `players` — not this client's own player — differ from the `judge`'s, each
/// starting a desync episode at `tick` (once per episode, as [`DesyncDetected`]). This
/// client's world agrees with the judge: it is not desynced, and its session stays `Running`
/// (counted in [`RelayClientStats::others_desynced`], never as a desync of its own).
#[derive(Message, Debug, Clone, PartialEq, Eq, Reflect)]
pub struct PlayerDesynced {
    /// The tick judged: the first desynced tick of the episodes.
    pub tick: Tick,
    /// The players whose episode starts, in slot order (all before this client's slot is known).
    pub players: Vec<PlayerIndex>,
    /// What their checksums differ from.
    pub judge: DesyncJudge,
}

/// The relay refused this client's `Hello`: another protocol version, a full or started session,
/// or a session config that differs from the client's (tick rate, player count, input type;
/// see [the networked session](crate::rules#the-networked-session)). Written once; the client
/// never joins this session.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct SessionRejected {
    /// The relay's reason.
    pub reason: RejectReason,
}

/// A confirmed input did not decode as the game's input type: the session used `player`'s
/// confirmed input of the tick before (or the default) for `tick` instead, and goes on.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub struct InputSubstituted {
    /// The tick.
    pub tick: Tick,
    /// The player whose input was substituted.
    pub player: PlayerIndex,
}

/// The client side of a networked session: the relay protocol ([`SessionProtocol`]) over
/// renet, the clock, the input buffer. Owned by the session's relay link; every call takes the
/// renet client explicitly.
pub(crate) struct RelayClient<I: SimInput> {
    config: NetworkSessionConfig,
    stats: RelayClientStats,
    /// The relay protocol: handshake, pings, match, inputs, checksums (sans IO).
    protocol: SessionProtocol,
    /// The protocol's counters when this session's match began (a rebuilt session's counters
    /// start over).
    base: ProtocolStats,
    tick_rate_hz: u32,
    window: Tick,
    predicted: bool,
    now: Duration,
    lead: LeadControl,
    /// The local clock: the session's polls at the lead-control speed, snaps as jumps.
    clock: TickAccumulator,
    snap_cooldown_until: Duration,
    last_input_tick: Tick,
    /// No local input is sampled for this tick or earlier: the server tick of the `Welcome`
    /// (0 for a client that joined before the start; a rejoining client's session has run
    /// those ticks without it).
    input_floor: Tick,
    /// The prediction cap (`max_verifiable + window`) at the end of the last poll (stall
    /// detection).
    prediction_cap: Tick,
    stall: StallWatch,
    /// Stall changes and snapshot requests not yet taken by the session.
    reports: Vec<NetReport>,
    /// Snapshot transfers, both ways.
    snapshots: SnapshotExchange,
    /// When to come back after a lost connection.
    reconnect: ReconnectWatch,
    /// A new connection is to be started (taken by the input source, which owns the transport).
    reconnect_due: bool,
    /// When the client said goodbye, while it waits for the relay to close the connection.
    leaving_since: Option<Duration>,
    /// The connection is to be closed now (taken by the input source, which owns the
    /// transport): after a goodbye, before a rejoin after a pause, once the server is gone.
    close_due: bool,
    _input: std::marker::PhantomData<fn() -> I>,
}

/// How long a leaving client waits for the relay to close its connection after its goodbye
/// before it closes the connection itself (client time).
const LEAVE_GRACE: Duration = Duration::from_secs(1);

/// The client's `Hello`: its name and the session config it runs (tick rate, players, the
/// fingerprint of `I` with the relay's input size cap), which the relay checks against its own.
fn hello<I: SimInput>(config: &NetworkSessionConfig, session: &SessionConfig) -> Hello {
    let hello = Hello::new(Protocols::SESSION, config.name.clone())
        .with_tick_rate_hz(u16::try_from(session.tick_rate.hz()).unwrap_or(u16::MAX))
        .with_players(session.players)
        .with_input(InputFingerprint::of_input::<I>(config.max_input_bytes));
    match config.rejoin {
        Some(rejoin) => hello.with_reconnect_token(rejoin.slot, rejoin.token),
        None => hello,
    }
}

/// The relay protocol's config of a session configured by `session` and `config`: its
/// `Hello`, its ping interval, redundancy and checksum rate. The session serves snapshot
/// requests itself (answering unavailable when [`NetworkSessionConfig::snapshots`] is off).
fn protocol_config<I: SimInput>(
    config: &NetworkSessionConfig,
    session: &SessionConfig,
) -> ProtocolConfig {
    ProtocolConfig {
        ping_interval: Duration::from_millis(u64::from(config.ping_interval_ms)),
        input_redundancy: config.input_redundancy,
        checksum_every: config.checksum_every,
        serves_snapshots: true,
        ..ProtocolConfig::new(hello::<I>(config, session), session.tick_rate.hz())
    }
}

impl<I: SimInput> RelayClient<I> {
    /// A client that has not said hello yet, for a session configured by `session`.
    pub(crate) fn new(config: NetworkSessionConfig, session: &SessionConfig) -> Self {
        Self {
            stats: RelayClientStats {
                speed: 1.0,
                input_delay_ticks: config.fixed_input_delay.unwrap_or(config.min_input_delay),
                ..RelayClientStats::default()
            },
            protocol: SessionProtocol::new(protocol_config::<I>(&config, session)),
            base: ProtocolStats::default(),
            reconnect: ReconnectWatch::new(config.reconnect),
            reconnect_due: false,
            config,
            tick_rate_hz: session.tick_rate.hz(),
            window: session.rollback_window as Tick,
            predicted: session.mode == SessionMode::Predicted,
            now: Duration::ZERO,
            lead: LeadControl::default(),
            clock: TickAccumulator::new(),
            snap_cooldown_until: Duration::ZERO,
            last_input_tick: 0,
            input_floor: 0,
            prediction_cap: 0,
            stall: StallWatch::default(),
            reports: Vec::new(),
            snapshots: SnapshotExchange::default(),
            leaving_since: None,
            close_due: false,
            _input: std::marker::PhantomData,
        }
    }

    /// What the client measured so far.
    pub(crate) fn stats(&self) -> &RelayClientStats {
        &self.stats
    }

    /// The reports since the last call (stalls, snapshot requests, desyncs, substitutions,
    /// refusals), oldest
    /// first.
    pub(crate) fn take_reports(&mut self) -> Vec<NetReport> {
        std::mem::take(&mut self.reports)
    }

    /// Observes the renet connection for the reconnect policy (see [`ReconnectWatch`]): a
    /// lost connection (not closed by this client itself) with a token to come back with waits
    /// its backoff, then marks a new connection due ([`take_reconnect_due`](Self::take_reconnect_due)).
    fn watch_connection(&mut self, renet: Option<&RenetClient>) {
        if self.stats.left || self.stats.server_gone.is_some() {
            return;
        }
        let lost = renet.is_some_and(|client| client.is_disconnected());
        // A connection this client closed itself is a leave, not a loss.
        let left = renet.and_then(|client| client.disconnect_reason())
            == Some(simsync_net::renet::DisconnectReason::DisconnectedByClient);
        // After its match ended the relay closes the connection: nothing to come back to (a
        // rematch comes on the same connection).
        let can_rejoin = self.stats.reconnect_token.is_some()
            && self.stats.rejected.is_none()
            && self.stats.match_end.is_none()
            && !left;
        let before = self.reconnect.phase();
        if let ReconnectAction::Reconnect { attempt } =
            self.reconnect.observe(self.now, lost, can_rejoin)
        {
            info!(
                "session client: reconnecting (attempt {attempt} of {})",
                self.config.reconnect.attempts
            );
            self.reconnect_due = true;
        }
        let phase = self.reconnect.phase();
        if phase != before {
            match phase {
                ReconnectPhase::Waiting { attempt: 1, .. } => {
                    warn!("session client: connection lost; reconnecting with its token");
                }
                ReconnectPhase::Failed { attempts } => {
                    warn!("session client: gave up after {attempts} reconnect attempts");
                }
                _ => {}
            }
        }
        self.stats.reconnect = phase;
    }

    /// Whether a new connection is due now (once per attempt): the caller reconnects the
    /// transport, gives it a new renet client and reports with
    /// [`reconnect_started`](Self::reconnect_started).
    pub(crate) fn take_reconnect_due(&mut self) -> bool {
        std::mem::take(&mut self.reconnect_due)
    }

    /// The transport started a new connection (`started`), or could not (the attempt failed).
    /// A started one says hello again with the slot's current reconnect token; what belonged
    /// to the old connection (a snapshot transfer, unsent control messages, the last send) is
    /// dropped. The buffer, the clock and the verified world stay: the relay resends what this
    /// client has not acknowledged, or serves a snapshot.
    pub(crate) fn reconnect_started(&mut self, started: bool) {
        self.stats.reconnect_attempts += 1;
        if !started {
            self.reconnect.attempt_failed(self.now);
            self.stats.reconnect = self.reconnect.phase();
            return;
        }
        self.protocol.restart_handshake();
        self.snapshots = SnapshotExchange::default();
    }

    /// Updates the stall state from the verifiable tick (see [`StallWatch`]).
    fn watch_stall(&mut self, renet: Option<&RenetClient>, verifiable: Tick) {
        // The sets the relay thought lost arrived after all (they were in flight).
        if self
            .stats
            .needs_snapshot_from
            .is_some_and(|oldest| verifiable + 1 >= oldest)
        {
            self.stats.needs_snapshot_from = None;
        }
        let running = self.stats.started
            && self.protocol.playing().is_some()
            && renet.is_some_and(|c| c.is_connected());
        let change = self.stall.observe(
            self.now,
            verifiable,
            running,
            self.stats.needs_snapshot_from,
        );
        self.stats.stall = self.stall.stall();
        match change {
            Some(StallChange::Stalled(stall)) => {
                self.stats.stalls_reported += 1;
                warn!(
                    "session client: stalled since tick {}: {:?}",
                    stall.since_tick, stall.reason
                );
                self.reports.push(NetReport::Stalled(stall));
            }
            Some(StallChange::Resumed { tick, stalled_for }) => {
                info!("session client: resumed at tick {tick} after {stalled_for:?}");
                self.reports.push(NetReport::Resumed { tick, stalled_for });
            }
            None => {}
        }
    }

    /// One poll: receives from the server into `buffer`, advances the local clock (`local_tick`)
    /// by `polls` ticks scaled by lead control, samples the local input of every new tick at
    /// `tick + input_delay` and sends the unconfirmed inputs. `dt` is the time since the last
    /// poll on the network clock, `wall_dt` on the wall clock (a pause of the process shows
    /// there, [a long pause](crate::rules#a-dead-server-and-a-long-pause)). Returns whether the
    /// session is stalling.
    ///
    /// The local tick is the client's clock, synchronised to the server's (plus the lead its
    /// inputs need to arrive in time): it advances whatever the simulation can do, so inputs are
    /// sampled and sent on time even when confirmations lag. Prediction is capped at
    /// `max_verifiable + window` by the context. Stopping the clock at that cap (as a local
    /// session does) would make a client whose round trip exceeds its input delay plus the
    /// window (lockstep: window 0) send every input late: the server then waits for its hard
    /// tolerance, confirmations come later still, and the session settles with every input of
    /// that client replaced.
    ///
    /// Stalling: the clock is past what can be predicted and the prediction horizon did not move
    /// in this poll (no new confirmations), or the clock hit its run-ahead bound (one second
    /// past the prediction cap, and never past the input buffer).
    pub(crate) fn poll(
        &mut self,
        polls: u32,
        (dt, wall_dt): (Duration, Duration),
        mut renet: Option<&mut RenetClient>,
        local: &mut LocalInputProvider<'_, I>,
        local_tick: &mut Tick,
        buffer: &mut InputBuffer<I>,
    ) -> bool {
        self.now += dt;
        self.watch_pause(wall_dt);
        self.receive(renet.as_deref_mut(), buffer);
        self.watch_leave(renet.as_deref());
        self.watch_server();
        self.watch_connection(renet.as_deref());
        self.watch_stall(renet.as_deref(), buffer.max_verifiable_tick());
        let ticks = self.ticks_to_poll(polls);
        let delay = self.input_delay() as Tick;
        let max_verifiable = buffer.max_verifiable_tick();
        let clock_limit = max_verifiable
            .saturating_add(self.window)
            .saturating_add(self.tick_rate_hz as Tick)
            .min(buffer.storable_ticks().end().saturating_sub(delay));
        let horizon_before = (*local_tick).min(self.prediction_cap);
        let mut blocked = false;
        for _ in 0..ticks {
            let next = *local_tick + 1;
            if next > clock_limit {
                blocked = true;
                break;
            }
            *local_tick = next;
            self.sample_through(next + delay, local, buffer);
        }
        // Nothing is queued on a connection still connecting (a reconnect attempt): netcode
        // would refuse every packet; the unconfirmed inputs go out once it is connected.
        let mut renet = renet.filter(|client| client.is_connected());
        self.send_snapshot_chunks(renet.as_deref_mut());
        self.send(renet, buffer);
        let cap = if self.predicted {
            max_verifiable.saturating_add(self.window)
        } else {
            Tick::MAX
        };
        self.prediction_cap = cap;
        let horizon = (*local_tick).min(cap);
        blocked || (*local_tick > cap && horizon <= horizon_before)
    }

    /// Receives everything from the server into `buffer` (any message counts as heard from
    /// the relay, [`SessionProtocol::handle_message`]), acting on each message's events at
    /// once; then the protocol says hello once connected, pings every `ping_interval_ms` and
    /// says `Ready` when due, and its messages go out.
    fn receive(&mut self, renet: Option<&mut RenetClient>, buffer: &mut InputBuffer<I>) {
        let Some(client) = renet else {
            return;
        };
        for channel in NetChannel::ALL {
            while let Some(bytes) = client.receive_message(channel) {
                if let Err(error) = self.protocol.handle_message(self.now, &bytes) {
                    debug!("session client: bad message: {error}");
                }
                self.take_events(buffer);
            }
        }
        self.protocol.step(self.now, client.is_connected());
        self.sync_stats();
        self.flush(Some(client));
    }

    /// Puts the protocol's queued messages on `renet` (without one, they are dropped); one that
    /// does not fit is handed back to the protocol.
    fn flush(&mut self, renet: Option<&mut RenetClient>) {
        let Some(client) = renet else {
            self.protocol.transmits().for_each(drop);
            return;
        };
        while let Some(transmit) = self.protocol.poll_transmit() {
            if client.is_disconnected()
                || !client.can_send_message(transmit.channel, transmit.bytes.len())
            {
                debug!("session client: {:?} not sent: no room", transmit.kind);
                self.protocol.transmit_refused(transmit);
                continue;
            }
            client.send_message(transmit.channel, transmit.bytes);
        }
    }

    /// Copies the protocol's state into the stats: the match, the round trip and the counters
    /// of this session's match.
    fn sync_stats(&mut self) {
        let (now, base) = (self.protocol.stats(), &self.base);
        self.stats.rejected_messages = now.rejected_messages - base.rejected_messages;
        self.stats.input_messages_sent = now.input_messages_sent - base.input_messages_sent;
        self.stats.input_bytes_sent = now.input_bytes_sent - base.input_bytes_sent;
        let (drops, before) = (now.match_drops, base.match_drops);
        self.stats.match_drops = MatchDrops {
            ended_match: drops.ended_match - before.ended_match,
            not_started: drops.not_started - before.not_started,
            unknown_match: drops.unknown_match - before.unknown_match,
        };
        self.stats.rtt_ms = self.protocol.rtt_ms();
        self.stats.jitter_ms = self.protocol.jitter_ms();
        self.stats.started = self.protocol.started();
        self.stats.match_id = self.protocol.match_id();
        self.stats.match_end = self.protocol.match_end().cloned();
    }

    /// Acts on the protocol's events, in order.
    fn take_events(&mut self, buffer: &mut InputBuffer<I>) {
        let events: Vec<ProtocolEvent> = self.protocol.events().collect();
        for event in events {
            self.on_event(buffer, event);
        }
        self.sync_stats();
    }

    /// One event of the relay protocol: the welcome, a refusal, confirmed inputs, snapshots,
    /// the clock, desyncs, presence, falling behind and the match's end or rematch.
    fn on_event(&mut self, buffer: &mut InputBuffer<I>, event: ProtocolEvent) {
        match event {
            ProtocolEvent::Joined {
                slot,
                server_tick,
                reconnect_token,
            } => self.on_welcome(slot, server_tick, reconnect_token),
            ProtocolEvent::Refused(reason) => self.on_join_refused(reason),
            ProtocolEvent::Started { .. } => {}
            ProtocolEvent::ConfirmedInputs { first_tick, sets } => {
                if self.snapshots.awaiting() {
                    self.snapshots.hold(first_tick, sets);
                } else {
                    self.on_confirmed(buffer, first_tick, &sets);
                }
            }
            ProtocolEvent::SnapshotRequest {
                request,
                min_tick,
                max_bytes,
            } => self.on_snapshot_request(request, min_tick, max_bytes),
            ProtocolEvent::SnapshotChunk(chunk) => self.on_snapshot_chunk(chunk),
            ProtocolEvent::Clock(report) => {
                self.stats.input_lead_ticks = report.input_lead_ticks;
                self.stats.judged_through = report.judged_through;
                self.stats.relay_desyncs_sent = u64::from(report.desyncs_sent);
                self.stats.unjudged_checksums = u64::from(report.unjudged_checksums);
            }
            ProtocolEvent::Desync {
                tick,
                players,
                judge,
            } => self.on_desync(tick, players, judge),
            ProtocolEvent::DesyncReport(report) => self.on_desync_report(report),
            ProtocolEvent::PlayerLeft { slot, tick } => self.on_player_left(slot, tick),
            ProtocolEvent::PlayerRejoined { slot, tick } => self.on_player_rejoined(slot, tick),
            ProtocolEvent::Behind { oldest_available } => self.on_behind(buffer, oldest_available),
            ProtocolEvent::MatchEnded { match_id, reason } => {
                info!("session client: the relay ended {match_id} ({reason})");
            }
            ProtocolEvent::NextMatch(next) => {
                info!(
                    "session client: the relay moved on to {}; the session starts over",
                    next.match_id
                );
            }
        }
    }

    /// The relay's `Welcome`: slot, reconnect token and input floor kept; a reconnect counted
    /// as rejoined.
    fn on_welcome(
        &mut self,
        slot: Option<PlayerIndex>,
        server_tick: Tick,
        reconnect_token: Option<ReconnectToken>,
    ) {
        self.stats.slot = slot;
        self.stats.reconnect_token = reconnect_token;
        self.input_floor = server_tick.max(0);
        if self.reconnect.phase().is_reconnecting() {
            self.reconnect.rejoined();
            self.stats.reconnect = self.reconnect.phase();
            self.stats.reconnects += 1;
        }
        info!("session client: welcomed as player {slot:?} at server tick {server_tick}");
    }

    /// One chunk of the snapshot this client awaits: assembled (or refused with a warning), and
    /// the snapshot stats updated.
    fn on_snapshot_chunk(&mut self, chunk: simsync_net::SnapshotChunk) {
        let max = self.config.max_snapshot_bytes;
        if let Err(error) = self.snapshots.on_chunk(chunk, max) {
            warn!("session client: snapshot chunk refused: {error}");
        }
        self.stats.snapshots = self.snapshots.stats.clone();
    }

    /// Player `slot` left at server tick `tick`: logged and reported.
    fn on_player_left(&mut self, slot: PlayerIndex, tick: Tick) {
        info!("session client: player {slot} left at tick {tick}; its inputs are replaced");
        self.reports
            .push(NetReport::PlayerLeft(PlayerLeft { player: slot, tick }));
    }

    /// Player `slot` came back at server tick `tick`: logged and reported.
    fn on_player_rejoined(&mut self, slot: PlayerIndex, tick: Tick) {
        info!("session client: player {slot} is back at tick {tick}");
        self.reports.push(NetReport::PlayerRejoined(PlayerRejoined {
            player: slot,
            tick,
        }));
    }

    /// The relay holds confirmed inputs from `oldest_available` only: unless the missing sets
    /// arrived meanwhile, this client needs a snapshot (logged, kept and reported).
    fn on_behind(&mut self, buffer: &InputBuffer<I>, oldest_available: Tick) {
        // Stale if the sets it missed arrived meanwhile.
        if buffer.max_verifiable_tick() + 1 < oldest_available {
            error!(
                "session client: the relay holds confirmed inputs from tick \
                 {oldest_available} only; this client needs a snapshot"
            );
            self.stats.needs_snapshot_from = Some(oldest_available);
            self.reports
                .push(NetReport::NeedsSnapshot { oldest_available });
        }
    }

    /// The relay's breakdown of a desynced tick: logged (an error when it names this
    /// client's player, else a warning: [`desync_report_line`]), kept as the last report and
    /// reported.
    fn on_desync_report(&mut self, report: simsync_net::DesyncReport) {
        match desync_report_line(&report, self.names_this_client(&report.players)) {
            (true, line) => error!("{line}"),
            (false, line) => warn!("{line}"),
        }
        self.stats.last_desync_report = Some(report.clone());
        self.reports.push(NetReport::DesyncReport(report));
    }

    /// The relay asks for a snapshot: kept for the capture outside the session update, or
    /// answered unavailable at once when this client does not serve snapshots.
    fn on_snapshot_request(&mut self, request: u32, min_tick: Tick, max_bytes: u32) {
        let request = BuddyRequest {
            request,
            min_tick,
            max_bytes: max_bytes as usize,
        };
        self.snapshots.on_request(request);
        if !self.config.snapshots {
            self.answer_snapshot(request.request, Vec::new());
        }
    }

    /// The relay's snapshot request to serve now that the verified tick is `verified_tick`.
    pub(crate) fn due_snapshot_request(&self, verified_tick: Tick) -> Option<BuddyRequest> {
        self.snapshots.due_request(verified_tick)
    }

    /// Answers the relay's request `request` with `chunks` (none: unavailable).
    pub(crate) fn answer_snapshot(
        &mut self,
        request: u32,
        chunks: Vec<simsync_net::SnapshotChunk>,
    ) {
        if chunks.is_empty() {
            self.protocol
                .queue_session_message(SessionClientMessage::SnapshotUnavailable { request });
        }
        self.snapshots.answer(request, chunks);
        self.stats.snapshots = self.snapshots.stats.clone();
    }

    /// The snapshot the relay forwarded, once complete.
    pub(crate) fn take_arrived_snapshot(&mut self) -> Option<simsync_net::AssembledSnapshot> {
        self.snapshots.take_arrived()
    }

    /// The snapshot of `tick` is loaded: the clock and the inputs go on from there, and the sets
    /// held while it came are applied.
    pub(crate) fn snapshot_loaded(&mut self, tick: Tick, buffer: &mut InputBuffer<I>) {
        self.snapshots.stats.loaded += 1;
        self.snapshots.stats.loaded_tick = Some(tick);
        self.stats.snapshots = self.snapshots.stats.clone();
        self.stats.needs_snapshot_from = None;
        self.input_floor = self.input_floor.max(tick);
        self.last_input_tick = self.last_input_tick.max(tick);
        self.protocol.drop_inputs_through(tick);
        for (first_tick, sets) in self.snapshots.take_held() {
            self.on_confirmed(buffer, first_tick, &sets);
        }
    }

    /// Whether a snapshot loaded now is a resync: this client was named desynced and has not
    /// been resynced since.
    pub(crate) fn awaiting_resync(&self) -> bool {
        self.stats.resynced.is_none() && self.stats.last_desync.is_some()
    }

    /// A snapshot loaded after this client was named desynced: a resync from `from_tick` (its
    /// own verified tick) to `to_tick`.
    pub(crate) fn resynced(&mut self, from_tick: Tick, to_tick: Tick) {
        self.stats.resyncs += 1;
        self.stats.resynced = Some((from_tick, to_tick));
    }

    /// The snapshot forwarded with `request` was refused: the relay is told.
    pub(crate) fn snapshot_refused(&mut self, request: u32) {
        self.snapshots.stats.refused += 1;
        self.stats.snapshots = self.snapshots.stats.clone();
        self.snapshots.take_held();
        self.protocol
            .queue_session_message(SessionClientMessage::SnapshotRefused { request });
    }

    /// Sends the next snapshot chunks the snapshot channel has room for (the protocol's other
    /// messages went out with the receive), for the session's match while it is played.
    fn send_snapshot_chunks(&mut self, renet: Option<&mut RenetClient>) {
        let (Some(client), Some(match_id)) = (renet, self.protocol.playing()) else {
            return;
        };
        while let Some(chunk) = self.snapshots.next_chunk() {
            let message =
                ClientMessage::session(match_id, SessionClientMessage::SnapshotChunk(chunk));
            if client.send_msg(&message).is_err() {
                if let ClientMessage::Session(MatchMessage {
                    message: SessionClientMessage::SnapshotChunk(chunk),
                    ..
                }) = message
                {
                    self.snapshots.unsend(chunk);
                }
                break;
            }
        }
    }

    /// Whether `players` include this client's own player (never before its slot is known).
    fn names_this_client(&self, players: &[PlayerIndex]) -> bool {
        self.stats.slot.is_some_and(|s| players.contains(&s))
    }

    /// The server reports the desync episodes of `players` starting at `tick`, judged by
    /// `judge`: this client's own desync when its player is named (counted, kept, logged as an
    /// error), else other players' ("player N desynced": counted apart, logged as a warning).
    fn on_desync(&mut self, tick: Tick, players: Vec<PlayerIndex>, judge: DesyncJudge) {
        let own = self.names_this_client(&players);
        if !own {
            self.stats.others_desynced += 1;
            warn!(
                "session client: players {players:?} desynced at tick {tick} (judged by {judge}); \
                 this client agrees with it"
            );
            self.reports.push(NetReport::PlayerDesynced(PlayerDesynced {
                tick,
                players,
                judge,
            }));
            return;
        }
        self.stats.desyncs += 1;
        let differs_from = match judge {
            DesyncJudge::Authority => "the authority's verified world",
            DesyncJudge::Majority => "the majority of players",
        };
        error!(
            "session client: the server reports this client desynced from tick {tick}: its \
             checksum differs from {differs_from} (players {players:?} named)"
        );
        let desync = DesyncDetected {
            tick,
            players,
            judge,
        };
        self.stats.last_desync = Some(desync.clone());
        self.stats.resynced = None;
        self.reports.push(NetReport::Desync(desync));
    }

    /// The handshake ended in a refusal: logs it, keeps the reason in the stats and reports it.
    fn on_join_refused(&mut self, reason: RejectReason) {
        error!("session client: rejected by the server: {reason:?}");
        self.stats.rejected = Some(reason.clone());
        self.reports
            .push(NetReport::Rejected(SessionRejected { reason }));
    }

    /// Decodes confirmed input sets from `first_tick` on into `buffer` (ticks already verifiable
    /// or discarded are skipped), with the players each set marks disconnected, and counts
    /// replaced, late and rejected inputs. An input that
    /// does not decode is substituted (see [`substitute`]).
    fn on_confirmed(
        &mut self,
        buffer: &mut InputBuffer<I>,
        first_tick: Tick,
        sets: &[simsync_net::InputSet],
    ) {
        for (i, set) in sets.iter().enumerate() {
            let tick = first_tick.saturating_add(i as Tick);
            if tick <= buffer.discarded_through() || buffer.max_verifiable_tick() >= tick {
                continue;
            }
            for (p, bytes) in set.inputs.iter().enumerate() {
                let Ok(player) = PlayerIndex::try_from(p) else {
                    self.stats.rejected_inputs += 1;
                    continue;
                };
                let decoded = simsync_net::decode::<I>(bytes).ok();
                let substituted = decoded.is_none();
                let input = decoded.unwrap_or_else(|| substitute(buffer, player, tick));
                match buffer.confirm(player, tick, input) {
                    Ok(ConfirmOutcome::New) => {
                        if substituted {
                            self.stats.substituted_inputs += 1;
                            warn!(
                                "session client: player {player}'s confirmed input for tick {tick} \
                                 does not decode; its previous input is used"
                            );
                            self.reports
                                .push(NetReport::Substituted(InputSubstituted { tick, player }));
                        }
                        if set.is_replaced(p) {
                            self.stats.replaced_inputs += 1;
                            if self.stats.slot == Some(player) {
                                self.stats.late_inputs += 1;
                            }
                        }
                    }
                    Ok(ConfirmOutcome::Duplicate) => {}
                    Err(_) => {
                        self.stats.rejected_inputs += 1;
                        continue;
                    }
                }
                if set.is_disconnected(p) && buffer.mark_disconnected(player, tick).is_err() {
                    self.stats.rejected_inputs += 1;
                }
            }
        }
    }

    /// Ticks to poll this update: `base` ticks scaled by the clock speed, plus snaps (lead
    /// control). 0 until welcomed and started.
    fn ticks_to_poll(&mut self, base: u32) -> u32 {
        if !self.stats.started || self.stats.slot.is_none() || self.protocol.playing().is_none() {
            return 0;
        }
        let tick_rate_hz = self.tick_rate_hz;
        let target = target_lead_ticks(0.0, self.stats.jitter_ms, tick_rate_hz);
        // The lead is measured at the server: a correction shows in it only about one round trip
        // later. Until then (after a snap) the reported lead is stale: acting on it again would
        // correct twice and overshoot, so the clock runs at real speed.
        let settling = self.now < self.snap_cooldown_until;
        match self.lead.adjust(self.current_lead(), target) {
            _ if settling => self.stats.speed = 1.0,
            ClockAdjustment::Speed(factor) => self.stats.speed = factor,
            ClockAdjustment::Snap { ticks } => {
                self.clock.jump(i64::from(ticks));
                self.stats.snaps += 1;
                // A conservative round trip, as TCP's retransmission timeout (RFC 6298:
                // srtt + 4·rttvar): the smoothed RTT lags a sudden RTT increase, the very case
                // that makes the lead jump. Plus a tick for the server's report.
                let wait_ms = self.stats.rtt_ms
                    + 4.0 * self.stats.jitter_ms
                    + 1_000.0 / f64::from(tick_rate_hz.max(1));
                self.snap_cooldown_until = self.now + Duration::from_secs_f64(wait_ms / 1_000.0);
                self.stats.speed = 1.0;
            }
        }
        // A backward snap beyond this update's ticks stays as a debt in the clock; ticks beyond
        // `MAX_CLIENT_POLLS` (a large forward snap) are dropped: lead control snaps again if the
        // lead is still off.
        self.clock.set_speed(self.stats.speed);
        self.clock
            .advance_ticks(f64::from(base))
            .min(MAX_CLIENT_POLLS)
    }

    /// How early this client's inputs reach the server, in ticks: the server's report, unless
    /// the client's own estimate from the server clock is lower by more than the snap
    /// threshold. The report cannot see further back than the server's hard tolerance (with no
    /// input of this client waiting it reports the confirmed tick), so after a pause or an
    /// outage only the server clock shows how far behind the client's clock is.
    fn current_lead(&self) -> f64 {
        let reported = f64::from(self.stats.input_lead_ticks);
        let Some((report, received)) = self.protocol.clock() else {
            return reported;
        };
        let server_tick = report.server_tick;
        let since_ms = self.now.saturating_sub(received).as_secs_f64() * 1_000.0;
        // The server's tick when an input sent now arrives: now, plus half a round trip.
        let rtt_ms = self.stats.rtt_ms;
        let at_arrival = estimated_server_tick(
            server_tick,
            since_ms + rtt_ms / 2.0,
            rtt_ms,
            self.tick_rate_hz,
        );
        let own = f64::from(self.last_input_tick) - at_arrival;
        if own < reported - self.lead.snap_threshold_ticks {
            own
        } else {
            reported
        }
    }

    /// The input delay for new inputs: fixed, or picked from the RTT, at most
    /// `max_input_delay` and, in a predicted session, at most the rollback window (a delay
    /// beyond the window would hold back inputs longer than any prediction could cover).
    fn input_delay(&mut self) -> u32 {
        let max_delay = if self.predicted {
            self.config.max_input_delay.min(self.window as u32)
        } else {
            self.config.max_input_delay
        };
        let delay = self.config.fixed_input_delay.unwrap_or_else(|| {
            input_delay_ticks(
                self.stats.rtt_ms,
                self.tick_rate_hz,
                self.config.min_input_delay,
                self.config.input_delay_start_ms,
                max_delay,
            )
        });
        self.stats.input_delay_ticks = delay;
        delay
    }

    /// Records this client's local input for every tick up to `for_tick` not sampled yet (a
    /// grown delay fills the gap; a shrunk one samples nothing). Nothing before the welcome,
    /// nor for ticks up to the input floor (the session ran them before this client joined).
    fn sample_through(
        &mut self,
        for_tick: Tick,
        local: &mut LocalInputProvider<'_, I>,
        buffer: &mut InputBuffer<I>,
    ) {
        let Some(slot) = self.stats.slot else {
            return;
        };
        while self.last_input_tick < for_tick {
            self.last_input_tick += 1;
            let tick = self.last_input_tick;
            if tick <= self.input_floor {
                continue;
            }
            let input = local.input(slot, tick);
            let bytes = simsync_net::encode(&input).unwrap_or_default();
            if let Err(error) = buffer.set_local(slot, tick, input) {
                debug!("session client: local input for tick {tick} not stored: {error}");
            }
            self.protocol.add_local_input(tick, bytes);
        }
    }

    /// Sends unconfirmed local inputs (at least the last `input_redundancy`) with the
    /// acknowledgement of the confirmed sets, when an `Inputs` message is due
    /// ([rate limits](crate::rules#rate-limits), [`SessionProtocol::send_inputs`]).
    fn send(&mut self, renet: Option<&mut RenetClient>, buffer: &InputBuffer<I>) {
        let (Some(slot), Some(client)) = (self.stats.slot, renet) else {
            return;
        };
        let ack = InputAck {
            ack_tick: buffer.max_verifiable_tick(),
            own_confirmed_through: buffer.confirmed_through(slot).unwrap_or(0),
            sampled_through: self.last_input_tick,
        };
        self.protocol.send_inputs(self.now, ack);
        self.sync_stats();
        self.flush(Some(client));
    }

    /// Sends the checksum of a verified tick to the server (desync detection), every
    /// `checksum_every`-th one.
    pub(crate) fn send_checksum(
        &mut self,
        renet: Option<&mut RenetClient>,
        tick: Tick,
        checksum: u64,
    ) {
        self.protocol.send_checksum(tick, checksum);
        self.flush(renet);
    }
}

impl<I: SimInput> RelayClient<I> {
    /// Sends the relay this client's per-component hash breakdown of a desynced tick, cut to
    /// the message's bounds ([`simsync_net::MAX_BREAKDOWN_ENTRIES`]).
    pub(crate) fn send_breakdown(
        &mut self,
        renet: Option<&mut RenetClient>,
        breakdown: &crate::checksum::ComponentBreakdown,
    ) {
        let Some(client) = renet else {
            return;
        };
        self.protocol
            .queue_session_message(breakdown_message(breakdown));
        self.flush(Some(client));
    }
}

/// The wire form of a breakdown: at most [`simsync_net::MAX_BREAKDOWN_ENTRIES`] entries per
/// list and names cut to [`simsync_net::MAX_BREAKDOWN_NAME_BYTES`].
pub(crate) fn breakdown_message(
    breakdown: &crate::checksum::ComponentBreakdown,
) -> SessionClientMessage {
    let names = |list: &[(String, u64)]| {
        list.iter()
            .take(simsync_net::MAX_BREAKDOWN_ENTRIES)
            .map(|(name, hash)| (cut(name, simsync_net::MAX_BREAKDOWN_NAME_BYTES), *hash))
            .collect()
    };
    SessionClientMessage::ComponentHashes {
        tick: breakdown.tick,
        components: names(&breakdown.components),
        resources: names(&breakdown.resources),
        slots: breakdown
            .slots
            .iter()
            .take(simsync_net::MAX_BREAKDOWN_SLOTS)
            .copied()
            .collect(),
    }
}

/// `name` cut to at most `max` bytes at a character boundary.
fn cut(name: &str, max: usize) -> String {
    let mut end = name.len().min(max);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// The input used for `player` at `tick` when its confirmed input does not decode: the
/// player's confirmed input of the tick before, or the default when that is not held.
fn substitute<I: SimInput>(buffer: &InputBuffer<I>, player: PlayerIndex, tick: Tick) -> I {
    buffer
        .confirmed(player, tick - 1)
        .cloned()
        .unwrap_or_default()
}

/// The log line of the relay's desync `report` on a client, and whether it is an error: it
/// is when the report names this client's player (`own`); else only other players desynced,
/// this client agrees with the judge, and the line is a warning that says so (an honest
/// client's log holds no error for another player's desync).
fn desync_report_line(report: &simsync_net::DesyncReport, own: bool) -> (bool, String) {
    let simsync_net::DesyncReport {
        tick,
        players,
        components,
        slots,
    } = report;
    let whose = if own {
        "this client's desync"
    } else {
        "other players' desync; this client agrees with the judge"
    };
    let line = format!(
        "session client: desync at tick {tick} is in components {components:?}, slots \
         {slots:?} (players {players:?}: {whose})"
    );
    (own, line)
}

#[cfg(test)]
pub(super) mod tests {
    use simsync_net::{InputSet, ServerMessage};

    use super::*;

    /// `message` of the relay arrives now, and the client acts on it.
    pub(crate) fn hear<I: SimInput>(
        client: &mut RelayClient<I>,
        buffer: &mut InputBuffer<I>,
        message: ServerMessage,
    ) {
        let bytes = simsync_net::encode(&message).expect("encodes");
        client
            .protocol
            .handle_message(client.now, &bytes)
            .expect("decodes");
        client.take_events(buffer);
    }

    /// The client says hello and the relay welcomes it into `slot` at its tick `server_tick`.
    pub(crate) fn join<I: SimInput>(
        client: &mut RelayClient<I>,
        buffer: &mut InputBuffer<I>,
        slot: PlayerIndex,
        server_tick: Tick,
    ) {
        client.protocol.step(client.now, true);
        client.protocol.transmits().for_each(drop);
        let welcome = simsync_net::Welcome {
            protocol_version: simsync_net::PROTOCOL_VERSION,
            participant: simsync_net::ParticipantId(1),
            player_slot: Some(slot),
            protocols: Protocols::SESSION,
            tick_rate_hz: 0,
            server_tick,
            players: 0,
            reconnect_token: Some(5),
        };
        hear(client, buffer, ServerMessage::Welcome(welcome));
    }

    #[test]
    fn a_match_is_judged_through_a_tick_once_every_desync_sent_before_arrived() {
        let mut stats = RelayClientStats {
            judged_through: 600,
            relay_desyncs_sent: 1,
            ..RelayClientStats::default()
        };
        // The clock report overtook the relay's `Desync`.
        assert!(!stats.judged(600));
        stats.others_desynced = 1;
        assert!(stats.judged(600));
        assert!(!stats.judged(601), "judged through 600 only");
        stats.judged_through = 119;
        assert!(!stats.judged(600), "a player behind was seated again");
    }

    fn set(inputs: Vec<Vec<u8>>) -> InputSet {
        InputSet {
            inputs,
            replaced: 0,
            disconnected: 0,
        }
    }

    fn bytes(value: u32) -> Vec<u8> {
        simsync_net::encode(&value).expect("encodes")
    }

    #[test]
    fn an_undecodable_confirmed_input_is_substituted_counted_and_reported() {
        let mut client =
            RelayClient::<u32>::new(NetworkSessionConfig::default(), &SessionConfig::default());
        let mut buffer = InputBuffer::<u32>::new(2, 64).expect("buffer");
        let garbage = vec![0xff; 9];
        let sets = [
            set(vec![bytes(7), garbage.clone()]),
            set(vec![bytes(8), bytes(5)]),
            set(vec![bytes(9), garbage.clone()]),
        ];
        client.on_confirmed(&mut buffer, 1, &sets);
        // Sent again (redundancy): nothing new, nothing counted twice.
        client.on_confirmed(&mut buffer, 1, &sets);
        assert_eq!(buffer.max_verifiable_tick(), 3, "it never stalls");
        assert_eq!(
            buffer.confirmed(1, 1),
            Some(&0),
            "default: no earlier input"
        );
        assert_eq!(
            buffer.confirmed(1, 3),
            Some(&5),
            "the input of the tick before"
        );
        assert_eq!(client.stats().substituted_inputs, 2);
        assert_eq!(client.stats().rejected_inputs, 0);
        assert_eq!(
            client.take_reports(),
            vec![
                NetReport::Substituted(InputSubstituted { tick: 1, player: 1 }),
                NetReport::Substituted(InputSubstituted { tick: 3, player: 1 })
            ]
        );
    }

    #[test]
    fn no_input_is_sampled_up_to_the_server_tick_of_the_welcome() {
        let mut client =
            RelayClient::<u32>::new(NetworkSessionConfig::default(), &SessionConfig::default());
        let mut buffer = InputBuffer::<u32>::new(2, 128).expect("buffer");
        join(&mut client, &mut buffer, 1, 40);
        assert_eq!((client.stats.slot, client.input_floor), (Some(1), 40));
        assert_eq!(
            client.stats.reconnect_token,
            Some(ReconnectToken { slot: 1, token: 5 })
        );
        let mut local =
            LocalInputProvider::Scripted(crate::source::TickInputSource::new(|_, tick| {
                tick as u32
            }));
        client.sample_through(38, &mut local, &mut buffer);
        assert_eq!(client.protocol.pending_inputs().count(), 0);
        assert_eq!(client.last_input_tick, 38, "the clock still moves on");
        client.sample_through(43, &mut local, &mut buffer);
        let pending: Vec<_> = client.protocol.pending_inputs().cloned().collect();
        let ticks: Vec<Tick> = pending.iter().map(|(t, _)| *t).collect();
        assert_eq!(ticks, vec![41, 42, 43]);
        assert_eq!(pending[0].1, bytes(41));
    }

    #[test]
    fn a_hello_carries_the_configured_reconnect_token() {
        let session = SessionConfig::default();
        let plain = hello::<u32>(&NetworkSessionConfig::default(), &session);
        assert_eq!(plain.reconnect, None);
        let rejoin = hello::<u32>(&NetworkSessionConfig::rejoin(1, 77), &session);
        assert_eq!(
            rejoin.reconnect,
            Some(ReconnectToken { slot: 1, token: 77 })
        );
        assert_eq!(rejoin.input, plain.input);
    }

    #[test]
    fn only_a_desync_naming_this_client_counts_as_its_own() {
        let mut client =
            RelayClient::<u32>::new(NetworkSessionConfig::default(), &SessionConfig::default());
        client.stats.slot = Some(1);
        client.on_desync(4, vec![2], DesyncJudge::Authority);
        assert_eq!(
            (client.stats().desyncs, client.stats().others_desynced),
            (0, 1)
        );
        assert_eq!(client.stats().last_desync, None);
        client.on_desync(5, vec![0, 1], DesyncJudge::Majority);
        assert_eq!(
            (client.stats().desyncs, client.stats().others_desynced),
            (1, 1)
        );
        let reports = client.take_reports();
        assert_eq!(reports.len(), 2);
        assert!(matches!(
            &reports[0],
            NetReport::PlayerDesynced(d)
                if d.tick == 4 && d.players == vec![2] && d.judge == DesyncJudge::Authority
        ));
        let own = DesyncDetected {
            tick: 5,
            players: vec![0, 1],
            judge: DesyncJudge::Majority,
        };
        assert!(matches!(&reports[1], NetReport::Desync(d) if *d == own));
        assert_eq!(client.stats().last_desync, Some(own));
        assert!(client.take_reports().is_empty());
    }

    #[test]
    fn a_desync_report_is_an_error_only_on_a_client_it_names() {
        let report = simsync_net::DesyncReport {
            tick: 120,
            players: vec![0],
            components: vec!["Velocity".into()],
            slots: vec![264],
        };
        let mut client =
            RelayClient::<u32>::new(NetworkSessionConfig::default(), &SessionConfig::default());
        for (slot, error) in [(0, true), (1, false)] {
            client.stats.slot = Some(slot);
            let own = client.names_this_client(&report.players);
            let (is_error, line) = desync_report_line(&report, own);
            assert_eq!(is_error, error, "slot {slot}: {line}");
            assert!(
                line.contains("tick 120") && line.contains("[264]"),
                "{line}"
            );
            assert_eq!(line.contains("this client agrees"), !error, "{line}");
        }
        client.stats.slot = None;
        assert!(!client.names_this_client(&report.players));
        client.on_desync_report(report.clone());
        assert_eq!(client.stats().last_desync_report, Some(report.clone()));
        assert!(matches!(
            &client.take_reports()[..],
            [NetReport::DesyncReport(r)] if *r == report
        ));
    }

    #[test]
    fn before_its_slot_is_known_a_desync_names_other_players() {
        let mut client =
            RelayClient::<u32>::new(NetworkSessionConfig::default(), &SessionConfig::default());
        client.on_desync(9, vec![0], DesyncJudge::Majority);
        assert_eq!(
            (client.stats().desyncs, client.stats().others_desynced),
            (0, 1)
        );
    }
}
