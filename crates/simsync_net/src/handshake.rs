//! The handshake every connection starts with, one set of rules for every server and client
//! ([wire rule 5](crate::rules)):
//!
//! 1. Once connected, the client sends a [`Hello`] ([`PROTOCOL_VERSION`], the [`Protocols`] it
//!    wants, a display name, and optionally the session config it expects: tick rate, player
//!    count, [`InputFingerprint`]) on the control channel.
//! 2. The server answers [`Welcome`] (participant id, player slot, granted protocols, tick rate,
//!    player count, server tick, and a reconnect token for the slot) or `Rejected` with a
//!    [`RejectReason`].
//!
//! A `Hello` may carry a [`ReconnectToken`] ([`Hello::with_reconnect_token`]) to take a slot
//! again after its player dropped; the server that seats players checks it in its seat rule
//! ([wire rule 9](crate::rules)).
//!
//! [`ServerHandshake`] applies the server's side and [`ClientHandshake`] tracks the client's
//! ([`JoinStatus`]); both are plain state without Bevy or renet, so a server or client only moves
//! the messages. A participant's identity is its connection: no later message carries its id.
//!
//! # Adding a field
//!
//! A new `Hello` field (a reconnect token, ...) is an `Option` set by a `Hello::with_` method and
//! checked in one place, `ServerHandshake::check_config`, with its own [`RejectReason`]; a new
//! fact the server states is a field of [`ServerHandshake`] set by a `with_` method and copied
//! into every [`Welcome`] in `ServerHandshake::welcome`. Either changes the message layout: bump
//! [`PROTOCOL_VERSION`], keeping `protocol_version` the first field of `Hello` and `Welcome`.

use std::collections::BTreeMap;

use renet::ClientId;
use serde::{Deserialize, Serialize};

use crate::codec::encode;
use crate::error::NetError;
use crate::ids::ParticipantId;
use crate::session_proto::SimInput;

/// The version of the message layout of this build. Peers with different versions refuse each
/// other in the handshake. Bump it with every change to a message type.
///
/// Version 2 (version 1 was the first release): a refusal carries every reason the arbiter has;
/// `Hello` states the session config it expects (tick rate, players, input fingerprint),
/// `Welcome` the player count, and `RejectReason` has the config mismatches; `Desync` names the
/// players whose checksum differs from the majority; `Behind` tells a client the relay no longer
/// holds the confirmed inputs it misses; `InputSet` marks the players disconnected at its tick;
/// `Hello` may carry a [`ReconnectToken`] to take its slot again, `Welcome` gives the slot's
/// reconnect token, and `RejectReason` has the refusals of a rejoin (`BadReconnectToken`,
/// `SlotStillConnected`); `PlayerLeft` carries the server tick and `PlayerRejoined` announces a
/// player back in its slot.
///
/// Version 3: the snapshot channel ([`crate::NetChannel::Snapshot`]) and the snapshot transfer
/// of a late join or a rejoin after the relay's history is gone (`SnapshotRequest`,
/// `SnapshotChunk` both ways, `SnapshotUnavailable`, `SnapshotRefused`); the relay may seat a
/// new player in a free slot of a running session.
///
/// Version 4: an ownership `Refused` names the body's owner and priority, and `RefusalReason`
/// has `HeldExclusively` (the exclusive-grab option).
///
/// Version 5: batched ownership state — `OwnershipClientMessage::StateBatch` and
/// `OwnershipServerMessage::StateBatch` carry many bodies' quantized states in one message.
///
/// Version 6: the bytes of those `StateBatch`es carry an acknowledgement of the batches the
/// sender received, and a body may be a delta against a state the receiver acknowledged
/// (`simsync_ownership`'s ownership rule 20); the message types are unchanged, but a
/// version-5 peer would misread the batches, so it is refused in the handshake.
///
/// Version 7: a participant's bids of one frame travel as one `OwnershipClientMessage::Bids`;
/// a body respawned under its id is announced with `OwnershipServerMessage::Reset`, and a
/// participant's own respawn is sent as `OwnershipClientMessage::Respawn`.
///
/// Version 8: the one-body ownership messages nothing sent any more are gone —
/// `OwnershipClientMessage::Bid` and `StateUpdate`, `OwnershipServerMessage::StateRelay` — so
/// the enum tags of the later variants moved.
///
/// Version 9: matches ([wire rule 12](crate::rules)) — every session message travels in a
/// [`MatchMessage`](crate::MatchMessage) naming its match; the relay ends a match
/// (`MatchEnded`) and opens the next (`MatchOpened`), which its clients answer with `Ready`;
/// and `OwnershipServerMessage::CountedSilent` tells a participant the entity server counted
/// it as gone after hearing nothing from it for its silence timeout.
///
/// Version 10: a dedicated server hosts rooms — `RejectReason` names an unknown room, a
/// draining server and a slot out of range, `MatchEndReason::ServerShutdown` ends a match when
/// its server shuts down, and `OwnershipServerMessage::Closing` tells a participant its room
/// ends.
///
/// Version 11: the entity server may hold bodies itself (its physics host, as
/// [`ParticipantId::ENTITY_SERVER`](crate::ParticipantId::ENTITY_SERVER) in owner records), and
/// refuses implausible state updates with `RefusalReason::TooFast` and `Teleported` (and, for a
/// while after, that sender's bids for the body with `Penalized`).
///
/// Version 12: `SessionServerMessage::Desync` names its judge ([`DesyncJudge`](crate::DesyncJudge):
/// the majority, or an authoritative room's verified world); `MatchEndReason::EndedByOperator`
/// ends a match whose room its operator ended.
///
/// Version 13: `SessionServerMessage::Clock` tells the client the tick through which the relay
/// judged every seated player's checksums, the `Desync` messages it sent it and how many
/// checksums it could not judge, so a client that ends its match can wait for the match's
/// judgement.
pub const PROTOCOL_VERSION: u16 = 13;

/// A set of protocols, as bits. A client asks for some in [`Hello`]; the server grants a subset
/// in [`Welcome`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Protocols(pub u8);

impl Protocols {
    /// No protocol (handshake and ping only).
    pub const NONE: Protocols = Protocols(0);
    /// The deterministic session ([`crate::SessionClientMessage`],
    /// [`crate::SessionServerMessage`]).
    pub const SESSION: Protocols = Protocols(1);
    /// Simulation ownership ([`crate::OwnershipClientMessage`], [`crate::OwnershipServerMessage`]).
    pub const OWNERSHIP: Protocols = Protocols(2);
    /// Both protocols.
    pub const ALL: Protocols = Protocols(3);

    /// Whether every protocol of `other` is in `self`.
    pub const fn contains(self, other: Protocols) -> bool {
        self.0 & other.0 == other.0
    }

    /// The protocols in both sets.
    pub const fn intersection(self, other: Protocols) -> Protocols {
        Protocols(self.0 & other.0)
    }

    /// Whether the set holds no protocol.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// What a client's input type is, so that a server can refuse a client built with another one
/// ([wire rule 5](crate::rules)): a name and the most bytes one encoded input may take.
///
/// Two builds of a game agree when they use the same input type; build it on both sides the
/// same way, e.g. with [`InputFingerprint::of`]. The name is compared as text: `of` uses
/// [`std::any::type_name`], which is the same for the same type and compiler but may differ
/// between compiler versions, so cross-compiler builds should give a name of their own with
/// [`InputFingerprint::new`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InputFingerprint {
    /// The input type's name (a few dozen bytes; the codec limit bounds it).
    pub name: String,
    /// The most bytes one encoded input may take (the encoded size bound of the type).
    pub max_encoded_bytes: u32,
}

impl InputFingerprint {
    /// A fingerprint from a name and a size bound in bytes.
    pub fn new(name: impl Into<String>, max_encoded_bytes: u32) -> Self {
        Self {
            name: name.into(),
            max_encoded_bytes,
        }
    }

    /// The fingerprint of type `I` (its [`std::any::type_name`]) with a size bound in bytes.
    pub fn of<I: ?Sized>(max_encoded_bytes: u32) -> Self {
        Self::new(std::any::type_name::<I>(), max_encoded_bytes)
    }

    /// The fingerprint of input type `I` both ends of a session state in the handshake: its
    /// type name and the relay's size cap, `max_input_bytes` raised to the encoded default
    /// input (as the relay raises its own cap). A client and a relay configured with different
    /// caps, or built with different input types, refuse each other.
    pub fn of_input<I: SimInput>(max_input_bytes: usize) -> Self {
        let default_len = encode(&I::default()).map_or(0, |bytes| bytes.len());
        let cap = max_input_bytes.max(default_len);
        Self::of::<I>(u32::try_from(cap).unwrap_or(u32::MAX))
    }
}

/// A player slot and the token that lets a new connection take it again (from the
/// [`Welcome`](crate::Welcome) that seated the player; sent back in a `Hello`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, bevy::reflect::Reflect,
)]
pub struct ReconnectToken {
    /// The player slot.
    pub slot: u8,
    /// The slot's token: 64 bits the server drew for it.
    pub token: u64,
}

/// The first message of a client. Its layout up to `protocol_version` is frozen across versions
/// (see [`crate::peek_handshake_version`]).
///
/// The session config fields are optional: a client that states one is refused by a server
/// configured with another value ([`ServerHandshake`] rule 3); a client that leaves one unset
/// learns it from the [`Welcome`] ([`ClientHandshake::tick_rate_hz`],
/// [`ClientHandshake::players`]). The ownership protocol leaves them unset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The client's [`PROTOCOL_VERSION`].
    pub protocol_version: u16,
    /// The protocols the client wants to use.
    pub protocols: Protocols,
    /// A display name; the server may truncate or ignore it. At most a few dozen bytes is
    /// expected; the codec limit bounds it at [`crate::MAX_MESSAGE_BYTES`].
    pub name: String,
    /// The session's tick rate (Hz) the client runs at, if it has one of its own.
    pub tick_rate_hz: Option<u16>,
    /// The number of player slots the client expects, if it has its own.
    pub players: Option<u8>,
    /// The client's input type, if it plays a deterministic session.
    pub input: Option<InputFingerprint>,
    /// The slot this client takes again and its token, if it rejoins ([wire rule
    /// 9](crate::rules)).
    pub reconnect: Option<ReconnectToken>,
}

impl Hello {
    /// A `Hello` for this build's [`PROTOCOL_VERSION`], stating no session config.
    pub fn new(protocols: Protocols, name: impl Into<String>) -> Self {
        Self {
            protocol_version: PROTOCOL_VERSION,
            protocols,
            name: name.into(),
            tick_rate_hz: None,
            players: None,
            input: None,
            reconnect: None,
        }
    }

    /// States the tick rate (Hz) the client runs at.
    #[must_use]
    pub fn with_tick_rate_hz(mut self, tick_rate_hz: u16) -> Self {
        self.tick_rate_hz = Some(tick_rate_hz);
        self
    }

    /// States the number of player slots the client expects.
    #[must_use]
    pub fn with_players(mut self, players: u8) -> Self {
        self.players = Some(players);
        self
    }

    /// States the client's input type.
    #[must_use]
    pub fn with_input(mut self, input: InputFingerprint) -> Self {
        self.input = Some(input);
        self
    }

    /// Asks for player slot `slot` again, proving it with the reconnect `token` a
    /// [`Welcome`] gave for it ([wire rule 9](crate::rules)).
    #[must_use]
    pub fn with_reconnect_token(mut self, slot: u8, token: u64) -> Self {
        self.reconnect = Some(ReconnectToken { slot, token });
        self
    }
}

/// The server's acceptance of a [`Hello`]. Its layout up to `protocol_version` is frozen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The server's [`PROTOCOL_VERSION`] (equal to the client's, or the server would have
    /// rejected it).
    pub protocol_version: u16,
    /// The id the server gave this participant; it stamps relayed messages with it.
    pub participant: ParticipantId,
    /// The player slot in a deterministic session (index into confirmed input sets), or `None`
    /// for a spectator or an ownership-only participant.
    pub player_slot: Option<u8>,
    /// The protocols granted (a subset of those asked for).
    pub protocols: Protocols,
    /// Simulation ticks per second (Hz) of the server's clock; 0 if the server has no fixed
    /// rate.
    pub tick_rate_hz: u16,
    /// The server's current tick when it sent this message.
    pub server_tick: i32,
    /// Player slots of the server's deterministic session; 0 if the server states none.
    pub players: u8,
    /// The token that lets a later connection take `player_slot` again once this one is gone
    /// ([wire rule 9](crate::rules)); `None` without a slot or from a server that takes no
    /// rejoins.
    pub reconnect_token: Option<u64>,
}

/// Why the server refused a [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectReason {
    /// The client's protocol version differs from the server's.
    VersionMismatch {
        /// The server's [`PROTOCOL_VERSION`].
        server: u16,
        /// The version the client sent.
        client: u16,
    },
    /// No room: every participant or player slot is taken, or the server gave out every
    /// participant id it has (ids are never reused).
    ServerFull,
    /// The session has started and does not take late joiners.
    SessionStarted,
    /// The client asked for no protocol this server runs.
    UnsupportedProtocols(Protocols),
    /// This connection already completed a handshake.
    AlreadyJoined,
    /// Anything else, as text for a log.
    Other(String),
    /// The client runs another tick rate than the server's session.
    TickRateMismatch {
        /// The server's tick rate (Hz).
        server: u16,
        /// The tick rate the client stated (Hz).
        client: u16,
    },
    /// The client expects another number of player slots than the server's session has.
    PlayerCountMismatch {
        /// The server's player slots.
        server: u8,
        /// The player slots the client stated.
        client: u8,
    },
    /// The client's input type differs from the server's.
    InputTypeMismatch {
        /// The server's input type.
        server: InputFingerprint,
        /// The input type the client stated.
        client: InputFingerprint,
    },
    /// The reconnect token is not the one the slot holds (or the slot does not exist or never
    /// had one): the client may not take it ([wire rule 9](crate::rules)).
    BadReconnectToken {
        /// The slot asked for.
        slot: u8,
    },
    /// The token is right but the slot's player is still connected: a slot is taken again only
    /// once its player is gone.
    SlotStillConnected {
        /// The slot asked for.
        slot: u8,
    },
    /// The slot assigned to this connection (by its connect token, on a dedicated server) is
    /// not one of the session's.
    SlotOutOfRange {
        /// The slot assigned.
        slot: u8,
        /// The session's player slots.
        players: u8,
    },
    /// The connect token names a room this server does not host (never created, or ended).
    UnknownRoom {
        /// The room named.
        room: u64,
    },
    /// The server is shutting down (draining) and takes no new clients.
    ServerDraining,
}

impl RejectReason {
    /// Every reason's label (snake_case), in the order of the variants: metric labels and
    /// [`RejectCounts`]'s order.
    pub const LABELS: [&'static str; 14] = [
        "version_mismatch",
        "server_full",
        "session_started",
        "unsupported_protocols",
        "already_joined",
        "other",
        "tick_rate_mismatch",
        "player_count_mismatch",
        "input_type_mismatch",
        "bad_reconnect_token",
        "slot_still_connected",
        "slot_out_of_range",
        "unknown_room",
        "server_draining",
    ];

    /// The reason's position in [`Self::LABELS`].
    pub fn index(&self) -> usize {
        match self {
            Self::VersionMismatch { .. } => 0,
            Self::ServerFull => 1,
            Self::SessionStarted => 2,
            Self::UnsupportedProtocols(_) => 3,
            Self::AlreadyJoined => 4,
            Self::Other(_) => 5,
            Self::TickRateMismatch { .. } => 6,
            Self::PlayerCountMismatch { .. } => 7,
            Self::InputTypeMismatch { .. } => 8,
            Self::BadReconnectToken { .. } => 9,
            Self::SlotStillConnected { .. } => 10,
            Self::SlotOutOfRange { .. } => 11,
            Self::UnknownRoom { .. } => 12,
            Self::ServerDraining => 13,
        }
    }

    /// The reason's label (snake_case), an entry of [`Self::LABELS`].
    pub fn label(&self) -> &'static str {
        Self::LABELS[self.index()]
    }
}

/// Refused [`Hello`]s counted by reason ([`RejectReason::LABELS`] order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bevy::reflect::Reflect)]
pub struct RejectCounts {
    counts: [u64; RejectReason::LABELS.len()],
}

impl RejectCounts {
    /// Counts one refusal.
    pub fn record(&mut self, reason: &RejectReason) {
        self.counts[reason.index()] += 1;
    }

    /// Refusals with the label `label` (0 for a label that is none).
    pub fn count(&self, label: &str) -> u64 {
        RejectReason::LABELS
            .iter()
            .position(|l| *l == label)
            .map_or(0, |i| self.counts[i])
    }

    /// Every label with its count, in [`RejectReason::LABELS`] order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        RejectReason::LABELS.iter().copied().zip(self.counts)
    }

    /// Refusals of every reason.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// The refusal as a sentence for a log or a player; an input type or size that differs says
/// where each side sets it.
impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InputTypeMismatch { server, client } => write!(
                f,
                "input type mismatch: the server's room takes `{}` of at most {} bytes, this \
                 client sends `{}` of at most {} bytes. Build both with the same input type; the \
                 size limit is the room's `max_input_bytes` (the third argument of \
                 `RoomConfig::relay_for`, or `RelayServerConfig::max_input_bytes`) and the \
                 client's `NetworkSessionConfig::max_input_bytes` (both default to \
                 DEFAULT_MAX_INPUT_BYTES, {} bytes): give them the same value",
                server.name,
                server.max_encoded_bytes,
                client.name,
                client.max_encoded_bytes,
                crate::DEFAULT_MAX_INPUT_BYTES,
            ),
            Self::TickRateMismatch { server, client } => write!(
                f,
                "tick rate mismatch: the server runs {server} Hz, this client {client} Hz \
                 (`SessionConfig::tick_rate`)"
            ),
            Self::PlayerCountMismatch { server, client } => write!(
                f,
                "player count mismatch: the server's session has {server} player slots, this \
                 client expects {client} (`SessionConfig::players`)"
            ),
            other => write!(f, "{other:?}"),
        }
    }
}

/// Applies the version rule of the handshake ([wire rule 2](crate::rules)): a client is accepted
/// only with exactly this build's [`PROTOCOL_VERSION`].
///
/// # Errors
///
/// [`RejectReason::VersionMismatch`] otherwise.
pub fn check_hello(hello: &Hello) -> Result<(), RejectReason> {
    if hello.protocol_version == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(RejectReason::VersionMismatch {
            server: PROTOCOL_VERSION,
            client: hello.protocol_version,
        })
    }
}

/// The tick rate and player count of [`ServerHandshake`] rule 3, applied by both sides: the
/// server's values (0: none stated) against those the `hello` states.
fn check_rate_and_players(
    tick_rate_hz: u16,
    players: u8,
    hello: &Hello,
) -> Result<(), RejectReason> {
    match hello.tick_rate_hz {
        Some(client) if tick_rate_hz != 0 && client != tick_rate_hz => {
            return Err(RejectReason::TickRateMismatch {
                server: tick_rate_hz,
                client,
            });
        }
        _ => {}
    }
    match hello.players {
        Some(client) if players != 0 && client != players => {
            Err(RejectReason::PlayerCountMismatch {
                server: players,
                client,
            })
        }
        _ => Ok(()),
    }
}

/// What a [`ServerHandshake`] has done since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandshakeStats {
    /// `Hello`s answered with a `Welcome`.
    pub joined: u64,
    /// Joined participants that left ([`ServerHandshake::on_left`]).
    pub left: u64,
    /// `Hello`s answered with `Rejected`, version mismatches found by the decoder included.
    pub rejected: u64,
}

/// The server's side of the handshake ([wire rule 5](crate::rules)): which connection is which
/// participant, and what to answer a `Hello`. Plain state: the server passes in what it received
/// and sends what it gets back.
///
/// Rules, in the order [`on_hello`](Self::on_hello) applies them (the first that fails is the
/// answer):
///
/// 1. **Version**: exactly [`PROTOCOL_VERSION`], else [`RejectReason::VersionMismatch`]. A `Hello`
///    of another version usually fails to decode; [`on_decode_error`](Self::on_decode_error)
///    gives the same answer for it, so a client of another build always learns why.
/// 2. **Protocols**: the server grants what was asked for and it runs (the intersection); if
///    that is nothing, [`RejectReason::UnsupportedProtocols`] with what was asked for.
/// 3. **Session config**: each value both sides state must be equal — tick rate
///    ([`with_tick_rate_hz`](Self::with_tick_rate_hz), else
///    [`RejectReason::TickRateMismatch`]), player count ([`with_players`](Self::with_players),
///    else [`RejectReason::PlayerCountMismatch`]) and input type
///    ([`with_input`](Self::with_input), else [`RejectReason::InputTypeMismatch`]), checked in
///    that order. A value either side leaves unset is not checked; the client learns the tick
///    rate and player count from the `Welcome`.
/// 4. **Once per connection**: a connection that joined gets [`RejectReason::AlreadyJoined`].
/// 5. **Room**: at most `max_participants` joined at once (no limit by default), and ids from
///    1 to `u16::MAX`, each given once while the server runs (never wrapping, never reused, so a
///    departed participant's id never names a newcomer): [`RejectReason::ServerFull`] when
///    either runs out.
/// 6. **Seat**: the server's own rule (player slots, late joiners), a closure called last; when
///    it returns `Ok`, the join is committed.
///
/// Identity is the connection: the participant id is bound to the `ClientId` the `Hello` came
/// on, and the server attributes every later message of that connection to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerHandshake {
    offered: Protocols,
    tick_rate_hz: u16,
    players: u8,
    input: Option<InputFingerprint>,
    max_participants: Option<usize>,
    /// The next id to give; `None` once `u16::MAX` was given.
    next_id: Option<u16>,
    joined: BTreeMap<ClientId, ParticipantId>,
    stats: HandshakeStats,
}

impl ServerHandshake {
    /// A handshake for a server that runs `offered`, with tick rate and player count 0 (none
    /// stated, nothing checked), no input type and no limit on participants.
    pub fn new(offered: Protocols) -> Self {
        Self {
            offered,
            tick_rate_hz: 0,
            players: 0,
            input: None,
            max_participants: None,
            next_id: Some(1),
            joined: BTreeMap::new(),
            stats: HandshakeStats::default(),
        }
    }

    /// Sets the tick rate (Hz) stated in every [`Welcome`] and checked against the one a `Hello`
    /// states (rule 3); 0 states and checks none.
    #[must_use]
    pub fn with_tick_rate_hz(mut self, tick_rate_hz: u16) -> Self {
        self.tick_rate_hz = tick_rate_hz;
        self
    }

    /// Sets the player slots stated in every [`Welcome`] and checked against the count a
    /// `Hello` states (rule 3); 0 states and checks none.
    #[must_use]
    pub fn with_players(mut self, players: u8) -> Self {
        self.players = players;
        self
    }

    /// Sets the input type checked against the one a `Hello` states (rule 3).
    #[must_use]
    pub fn with_input(mut self, input: InputFingerprint) -> Self {
        self.input = Some(input);
        self
    }

    /// Sets the most participants joined at once (rule 5).
    #[must_use]
    pub fn with_max_participants(mut self, max_participants: usize) -> Self {
        self.max_participants = Some(max_participants);
        self
    }

    /// Changes the tick rate (Hz) stated in later [`Welcome`]s.
    pub fn set_tick_rate_hz(&mut self, tick_rate_hz: u16) {
        self.tick_rate_hz = tick_rate_hz;
    }

    /// The protocols this server runs.
    pub fn offered(&self) -> Protocols {
        self.offered
    }

    /// The tick rate (Hz) stated in [`Welcome`]s.
    pub fn tick_rate_hz(&self) -> u16 {
        self.tick_rate_hz
    }

    /// The player slots stated in [`Welcome`]s (0: none).
    pub fn players(&self) -> u8 {
        self.players
    }

    /// The input type `Hello`s are checked against, if any.
    pub fn input(&self) -> Option<&InputFingerprint> {
        self.input.as_ref()
    }

    /// Answers the `Hello` that arrived on `connection` (rules 1–6 of the type docs). `seat` is
    /// called last, only if rules 1–5 pass, and returns the player slot to put in the
    /// [`Welcome`] (`None`: no slot) or the reason to refuse; `server_tick` is copied into the
    /// `Welcome`.
    ///
    /// On `Ok` the connection has joined with `welcome.participant`.
    ///
    /// # Errors
    ///
    /// The [`RejectReason`] to send back in `Rejected`.
    pub fn on_hello(
        &mut self,
        connection: ClientId,
        hello: &Hello,
        server_tick: i32,
        seat: impl FnOnce() -> Result<Option<u8>, RejectReason>,
    ) -> Result<Welcome, RejectReason> {
        let result = self
            .check(connection, hello)
            .and_then(|(participant, protocols)| {
                let player_slot = seat()?;
                Ok(self.welcome(participant, protocols, player_slot, server_tick))
            });
        match &result {
            Ok(welcome) => {
                self.joined.insert(connection, welcome.participant);
                self.next_id = welcome.participant.0.checked_add(1);
                self.stats.joined += 1;
            }
            Err(_) => self.stats.rejected += 1,
        }
        result
    }

    /// Rules 1–5: the id the connection would get and the protocols granted.
    fn check(
        &self,
        connection: ClientId,
        hello: &Hello,
    ) -> Result<(ParticipantId, Protocols), RejectReason> {
        check_hello(hello)?;
        let granted = hello.protocols.intersection(self.offered);
        if granted.is_empty() {
            return Err(RejectReason::UnsupportedProtocols(hello.protocols));
        }
        self.check_config(hello)?;
        if self.joined.contains_key(&connection) {
            return Err(RejectReason::AlreadyJoined);
        }
        let full = self
            .max_participants
            .is_some_and(|max| self.joined.len() >= max);
        match self.next_id {
            Some(id) if !full => Ok((ParticipantId(id), granted)),
            _ => Err(RejectReason::ServerFull),
        }
    }

    /// Rule 3: every session config value both sides state is equal.
    fn check_config(&self, hello: &Hello) -> Result<(), RejectReason> {
        check_rate_and_players(self.tick_rate_hz, self.players, hello)?;
        match (&self.input, &hello.input) {
            (Some(server), Some(client)) if server != client => {
                Err(RejectReason::InputTypeMismatch {
                    server: server.clone(),
                    client: client.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The one place a [`Welcome`] is filled in. The reconnect token is left to the server
    /// that seats players: it knows the slot's token ([wire rule 9](crate::rules)).
    fn welcome(
        &self,
        participant: ParticipantId,
        protocols: Protocols,
        player_slot: Option<u8>,
        server_tick: i32,
    ) -> Welcome {
        Welcome {
            protocol_version: PROTOCOL_VERSION,
            participant,
            player_slot,
            protocols,
            tick_rate_hz: self.tick_rate_hz,
            server_tick,
            players: self.players,
            reconnect_token: None,
        }
    }

    /// The answer to a message that failed to decode: `Some(`[`RejectReason::VersionMismatch`]`)`
    /// for [`NetError::VersionMismatch`] (a `Hello` of another build, see
    /// [`crate::decode_client_message`]), to send back in `Rejected`; `None` for any other error
    /// (bad bytes get no answer).
    pub fn on_decode_error(&mut self, error: &NetError) -> Option<RejectReason> {
        match *error {
            NetError::VersionMismatch { theirs, .. } => {
                self.stats.rejected += 1;
                Some(RejectReason::VersionMismatch {
                    server: PROTOCOL_VERSION,
                    client: theirs,
                })
            }
            _ => None,
        }
    }

    /// Forgets `connection` (it disconnected or said `Goodbye`) and returns the participant it
    /// was, if it had joined. Its id is not given again.
    pub fn on_left(&mut self, connection: ClientId) -> Option<ParticipantId> {
        let participant = self.joined.remove(&connection)?;
        self.stats.left += 1;
        Some(participant)
    }

    /// The participant of a joined connection.
    pub fn participant(&self, connection: ClientId) -> Option<ParticipantId> {
        self.joined.get(&connection).copied()
    }

    /// The joined connections and their participants, by connection.
    pub fn participants(&self) -> impl Iterator<Item = (ClientId, ParticipantId)> + '_ {
        self.joined.iter().map(|(c, p)| (*c, *p))
    }

    /// How many connections are joined now.
    pub fn joined_count(&self) -> usize {
        self.joined.len()
    }

    /// The counters.
    pub fn stats(&self) -> HandshakeStats {
        self.stats
    }
}

/// Where a client is in the handshake ([`ClientHandshake::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinStatus {
    /// Not sent yet: waiting for the connection (or for room to send the `Hello`).
    Connecting,
    /// `Hello` sent, waiting for the answer.
    HelloSent,
    /// Joined with this id (the whole [`Welcome`] is in [`ClientHandshake::welcome`]).
    Joined(ParticipantId),
    /// The server refused the `Hello`; nothing more happens.
    Rejected(RejectReason),
    /// The connection closed before the answer or after joining; nothing more happens.
    Disconnected,
}

/// The client's side of the handshake ([wire rule 5](crate::rules)): sends one `Hello`, then takes
/// the first answer.
///
/// [`JoinStatus::Connecting`] → (sent) [`JoinStatus::HelloSent`] → [`JoinStatus::Joined`] or
/// [`JoinStatus::Rejected`]; [`JoinStatus::Disconnected`] if the connection closes on the way or
/// after joining. `Rejected` and `Disconnected` are final. A second `Welcome`, or a `Rejected`
/// after joining, is ignored (the event methods return `false`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHandshake {
    hello: Hello,
    status: JoinStatus,
    welcome: Option<Welcome>,
}

impl ClientHandshake {
    /// A client that will send `hello`.
    pub fn new(hello: Hello) -> Self {
        Self {
            hello,
            status: JoinStatus::Connecting,
            welcome: None,
        }
    }

    /// The `Hello` this client sends.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    /// Where the handshake is.
    pub fn status(&self) -> &JoinStatus {
        &self.status
    }

    /// The participant id, once joined (still `Some` after a later disconnect).
    pub fn participant(&self) -> Option<ParticipantId> {
        self.welcome.as_ref().map(|w| w.participant)
    }

    /// The server's `Welcome`, once joined.
    pub fn welcome(&self) -> Option<&Welcome> {
        self.welcome.as_ref()
    }

    /// Whether the client is joined now.
    pub fn is_joined(&self) -> bool {
        matches!(self.status, JoinStatus::Joined(_))
    }

    /// The `Hello` to send now: `Some` while [`JoinStatus::Connecting`] and `connected`. Call
    /// [`on_hello_sent`](Self::on_hello_sent) once it was queued (a failed send is tried again
    /// next time).
    pub fn hello_to_send(&self, connected: bool) -> Option<&Hello> {
        (connected && self.status == JoinStatus::Connecting).then_some(&self.hello)
    }

    /// The `Hello` was queued: [`JoinStatus::Connecting`] → [`JoinStatus::HelloSent`].
    pub fn on_hello_sent(&mut self) {
        if self.status == JoinStatus::Connecting {
            self.status = JoinStatus::HelloSent;
        }
    }

    /// A `Welcome` arrived. Before joining it is taken (→ [`JoinStatus::Joined`]); returns
    /// whether it was taken. The client checks it as the server checked the `Hello`: it is
    /// taken as [`JoinStatus::Rejected`] if it states another [`PROTOCOL_VERSION`]
    /// ([`RejectReason::VersionMismatch`]), or a tick rate or player count other than the
    /// `Hello` stated ([`RejectReason::TickRateMismatch`],
    /// [`RejectReason::PlayerCountMismatch`]; a server that states none is not checked).
    pub fn on_welcome(&mut self, welcome: Welcome) -> bool {
        if !self.waiting() {
            return false;
        }
        self.status = match self.check_welcome(&welcome) {
            Err(reason) => JoinStatus::Rejected(reason),
            Ok(()) => {
                let participant = welcome.participant;
                self.welcome = Some(welcome);
                JoinStatus::Joined(participant)
            }
        };
        true
    }

    fn check_welcome(&self, welcome: &Welcome) -> Result<(), RejectReason> {
        if welcome.protocol_version != PROTOCOL_VERSION {
            return Err(RejectReason::VersionMismatch {
                server: welcome.protocol_version,
                client: PROTOCOL_VERSION,
            });
        }
        check_rate_and_players(welcome.tick_rate_hz, welcome.players, &self.hello)
    }

    /// The session's tick rate (Hz): the one the `Welcome` states, else the one the `Hello`
    /// stated; `None` if neither did (or not joined and the `Hello` stated none).
    pub fn tick_rate_hz(&self) -> Option<u16> {
        self.welcome
            .as_ref()
            .map(|w| w.tick_rate_hz)
            .filter(|&hz| hz != 0)
            .or(self.hello.tick_rate_hz)
    }

    /// The slot this client was seated in and the token to take it again later, once joined
    /// into a slot by a server that takes rejoins ([wire rule 9](crate::rules)).
    pub fn reconnect_token(&self) -> Option<ReconnectToken> {
        let welcome = self.welcome.as_ref()?;
        Some(ReconnectToken {
            slot: welcome.player_slot?,
            token: welcome.reconnect_token?,
        })
    }

    /// The session's player slots: the count the `Welcome` states, else the one the `Hello`
    /// stated; `None` if neither did.
    pub fn players(&self) -> Option<u8> {
        self.welcome
            .as_ref()
            .map(|w| w.players)
            .filter(|&players| players != 0)
            .or(self.hello.players)
    }

    /// A `Rejected` arrived. Before joining it is taken (→ [`JoinStatus::Rejected`]); returns
    /// whether it was taken.
    pub fn on_rejected(&mut self, reason: RejectReason) -> bool {
        if !self.waiting() {
            return false;
        }
        self.status = JoinStatus::Rejected(reason);
        true
    }

    /// A server message failed to decode. [`NetError::VersionMismatch`] (a `Welcome` of another
    /// build, see [`crate::decode_server_message`]) before joining counts as a rejection
    /// ([`RejectReason::VersionMismatch`]); returns whether the status changed.
    pub fn on_decode_error(&mut self, error: &NetError) -> bool {
        match *error {
            NetError::VersionMismatch { theirs, .. } => {
                self.on_rejected(RejectReason::VersionMismatch {
                    server: theirs,
                    client: PROTOCOL_VERSION,
                })
            }
            _ => false,
        }
    }

    /// The connection closed: [`JoinStatus::HelloSent`] or [`JoinStatus::Joined`] →
    /// [`JoinStatus::Disconnected`]; returns whether the status changed.
    pub fn on_disconnected(&mut self) -> bool {
        match self.status {
            JoinStatus::HelloSent | JoinStatus::Joined(_) => {
                self.status = JoinStatus::Disconnected;
                true
            }
            _ => false,
        }
    }

    fn waiting(&self) -> bool {
        matches!(self.status, JoinStatus::Connecting | JoinStatus::HelloSent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(protocols: Protocols) -> Hello {
        Hello::new(protocols, "ada")
    }

    fn seated() -> Result<Option<u8>, RejectReason> {
        Ok(None)
    }

    #[test]
    fn an_input_size_mismatch_says_where_each_side_sets_the_limit() {
        let text = RejectReason::InputTypeMismatch {
            server: InputFingerprint::new("arena::Move", 16),
            client: InputFingerprint::new("arena::Move", 256),
        }
        .to_string();
        for part in [
            "`arena::Move` of at most 16 bytes",
            "`arena::Move` of at most 256 bytes",
            "RoomConfig::relay_for",
            "NetworkSessionConfig::max_input_bytes",
        ] {
            assert!(text.contains(part), "{part} not in: {text}");
        }
        assert_eq!(RejectReason::ServerFull.to_string(), "ServerFull");
    }

    #[test]
    fn welcome_carries_id_slot_granted_protocols_rate_and_tick() {
        let mut server = ServerHandshake::new(Protocols::SESSION).with_tick_rate_hz(60);
        let welcome = server
            .on_hello(7, &hello(Protocols::ALL), 42, || Ok(Some(3)))
            .unwrap();
        assert_eq!(
            welcome,
            Welcome {
                protocol_version: PROTOCOL_VERSION,
                participant: ParticipantId(1),
                player_slot: Some(3),
                protocols: Protocols::SESSION,
                tick_rate_hz: 60,
                server_tick: 42,
                players: 0,
                reconnect_token: None,
            }
        );
        assert_eq!(server.participant(7), Some(ParticipantId(1)));
        assert_eq!(server.joined_count(), 1);
        assert_eq!(server.stats().joined, 1);
    }

    #[test]
    fn ids_count_up_from_one_and_are_never_reused() {
        let mut server = ServerHandshake::new(Protocols::OWNERSHIP);
        let ownership = hello(Protocols::OWNERSHIP);
        let first = server.on_hello(10, &ownership, 0, seated).unwrap();
        let second = server.on_hello(11, &ownership, 0, seated).unwrap();
        assert_eq!(first.participant, ParticipantId(1));
        assert_eq!(second.participant, ParticipantId(2));
        assert_eq!(server.on_left(10), Some(ParticipantId(1)));
        assert_eq!(server.on_left(10), None);
        // The same connection id joining again gets a fresh participant id.
        let again = server.on_hello(10, &ownership, 0, seated).unwrap();
        assert_eq!(again.participant, ParticipantId(3));
        let all: Vec<_> = server.participants().collect();
        assert_eq!(all, [(10, ParticipantId(3)), (11, ParticipantId(2))]);
        assert_eq!(server.stats().left, 1);
    }

    #[test]
    fn refuses_instead_of_wrapping_when_ids_run_out() {
        let mut server = ServerHandshake::new(Protocols::OWNERSHIP);
        server.next_id = Some(u16::MAX);
        let ownership = hello(Protocols::OWNERSHIP);
        let last = server.on_hello(1, &ownership, 0, seated).unwrap();
        assert_eq!(last.participant, ParticipantId(u16::MAX));
        server.on_left(1);
        assert_eq!(
            server.on_hello(2, &ownership, 0, seated),
            Err(RejectReason::ServerFull)
        );
        assert_eq!(server.stats().rejected, 1);
    }

    #[test]
    fn refuses_when_max_participants_are_joined() {
        let mut server = ServerHandshake::new(Protocols::SESSION).with_max_participants(1);
        let session = hello(Protocols::SESSION);
        server.on_hello(1, &session, 0, seated).unwrap();
        assert_eq!(
            server.on_hello(2, &session, 0, seated),
            Err(RejectReason::ServerFull)
        );
        server.on_left(1);
        assert_eq!(
            server
                .on_hello(2, &session, 0, seated)
                .map(|w| w.participant),
            Ok(ParticipantId(2))
        );
    }

    #[test]
    fn rules_apply_in_order_version_protocols_once_room_seat() {
        let mut server = ServerHandshake::new(Protocols::SESSION).with_max_participants(1);
        let old = Hello {
            protocol_version: PROTOCOL_VERSION + 1,
            ..hello(Protocols::OWNERSHIP)
        };
        let version = RejectReason::VersionMismatch {
            server: PROTOCOL_VERSION,
            client: PROTOCOL_VERSION + 1,
        };
        assert_eq!(server.on_hello(1, &old, 0, seated), Err(version));
        assert_eq!(
            server.on_hello(1, &hello(Protocols::OWNERSHIP), 0, seated),
            Err(RejectReason::UnsupportedProtocols(Protocols::OWNERSHIP))
        );
        assert_eq!(
            server.on_hello(1, &hello(Protocols::NONE), 0, seated),
            Err(RejectReason::UnsupportedProtocols(Protocols::NONE))
        );
        let session = hello(Protocols::SESSION);
        server.on_hello(1, &session, 0, seated).unwrap();
        assert_eq!(
            server.on_hello(1, &session, 0, seated),
            Err(RejectReason::AlreadyJoined)
        );
        // Full: the seat rule is not asked.
        let asked = std::cell::Cell::new(false);
        let seat = || {
            asked.set(true);
            Ok(None)
        };
        assert_eq!(
            server.on_hello(2, &session, 0, seat),
            Err(RejectReason::ServerFull)
        );
        assert!(!asked.get());
        assert_eq!(server.stats().rejected, 5);
    }

    #[test]
    fn a_refused_seat_commits_nothing() {
        let mut server = ServerHandshake::new(Protocols::SESSION);
        let session = hello(Protocols::SESSION);
        assert_eq!(
            server.on_hello(1, &session, 0, || Err(RejectReason::SessionStarted)),
            Err(RejectReason::SessionStarted)
        );
        assert_eq!(server.participant(1), None);
        // The id was not used up.
        let welcome = server.on_hello(2, &session, 0, seated).unwrap();
        assert_eq!(welcome.participant, ParticipantId(1));
    }

    #[test]
    fn a_version_mismatch_found_by_the_decoder_is_answered() {
        let mut server = ServerHandshake::new(Protocols::ALL);
        let mismatch = NetError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: 9,
        };
        assert_eq!(
            server.on_decode_error(&mismatch),
            Some(RejectReason::VersionMismatch {
                server: PROTOCOL_VERSION,
                client: 9
            })
        );
        assert_eq!(server.on_decode_error(&NetError::Truncated), None);
        assert_eq!(server.stats().rejected, 1);
    }

    #[test]
    fn client_sends_one_hello_then_joins() {
        let mut client = ClientHandshake::new(hello(Protocols::SESSION));
        assert_eq!(client.status(), &JoinStatus::Connecting);
        assert_eq!(client.hello_to_send(false), None);
        assert_eq!(client.hello_to_send(true), Some(&hello(Protocols::SESSION)));
        // A failed send leaves it to send again.
        assert!(client.hello_to_send(true).is_some());
        client.on_hello_sent();
        assert_eq!(client.status(), &JoinStatus::HelloSent);
        assert_eq!(client.hello_to_send(true), None);
        let mut server = ServerHandshake::new(Protocols::SESSION);
        let welcome = server
            .on_hello(1, client.hello(), 5, || Ok(Some(0)))
            .unwrap();
        assert!(client.on_welcome(welcome.clone()));
        assert_eq!(client.status(), &JoinStatus::Joined(ParticipantId(1)));
        assert!(client.is_joined());
        assert_eq!(client.participant(), Some(ParticipantId(1)));
        assert_eq!(client.welcome(), Some(&welcome));
        // Later answers are ignored.
        assert!(!client.on_welcome(Welcome {
            participant: ParticipantId(9),
            ..welcome
        }));
        assert!(!client.on_rejected(RejectReason::AlreadyJoined));
        assert_eq!(client.participant(), Some(ParticipantId(1)));
        assert!(client.on_disconnected());
        assert_eq!(client.status(), &JoinStatus::Disconnected);
        assert_eq!(client.participant(), Some(ParticipantId(1)));
    }

    #[test]
    fn client_rejection_is_final() {
        let mut client = ClientHandshake::new(hello(Protocols::OWNERSHIP));
        client.on_hello_sent();
        assert!(client.on_rejected(RejectReason::ServerFull));
        assert_eq!(
            client.status(),
            &JoinStatus::Rejected(RejectReason::ServerFull)
        );
        assert!(!client.on_disconnected());
        assert_eq!(client.hello_to_send(true), None);
        assert_eq!(client.participant(), None);
    }

    #[test]
    fn client_rejects_a_welcome_of_another_version() {
        let mut client = ClientHandshake::new(hello(Protocols::SESSION));
        client.on_hello_sent();
        assert!(client.on_decode_error(&NetError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: PROTOCOL_VERSION + 1
        }));
        let expected = RejectReason::VersionMismatch {
            server: PROTOCOL_VERSION + 1,
            client: PROTOCOL_VERSION,
        };
        assert_eq!(client.status(), &JoinStatus::Rejected(expected.clone()));
        let mut client = ClientHandshake::new(hello(Protocols::SESSION));
        assert!(!client.on_decode_error(&NetError::Truncated));
        assert!(client.on_welcome(Welcome {
            protocol_version: PROTOCOL_VERSION + 1,
            participant: ParticipantId(1),
            player_slot: None,
            protocols: Protocols::SESSION,
            tick_rate_hz: 0,
            server_tick: 0,
            players: 0,
            reconnect_token: None,
        }));
        assert_eq!(client.status(), &JoinStatus::Rejected(expected));
        assert_eq!(client.welcome(), None);
    }

    #[test]
    fn client_disconnect_before_the_answer_is_final() {
        let mut client = ClientHandshake::new(hello(Protocols::SESSION));
        assert!(!client.on_disconnected());
        client.on_hello_sent();
        assert!(client.on_disconnected());
        assert!(!client.on_rejected(RejectReason::ServerFull));
        assert_eq!(client.status(), &JoinStatus::Disconnected);
    }

    #[test]
    fn a_rejoining_hello_carries_its_slot_and_token_and_the_client_keeps_the_new_one() {
        let hello = hello(Protocols::SESSION).with_reconnect_token(2, 99);
        assert_eq!(hello.reconnect, Some(ReconnectToken { slot: 2, token: 99 }));
        let mut server = ServerHandshake::new(Protocols::SESSION);
        let mut client = ClientHandshake::new(hello);
        client.on_hello_sent();
        let welcome = server
            .on_hello(1, client.hello(), 300, || Ok(Some(2)))
            .unwrap();
        // The handshake leaves the token to the seat rule's server.
        assert_eq!(welcome.reconnect_token, None);
        assert!(client.on_welcome(Welcome {
            reconnect_token: Some(1234),
            ..welcome.clone()
        }));
        assert_eq!(
            client.reconnect_token(),
            Some(ReconnectToken {
                slot: 2,
                token: 1234
            })
        );
        // No slot, or no token: nothing to rejoin with.
        for (player_slot, reconnect_token) in [(None, Some(5)), (Some(1), None)] {
            let mut client = ClientHandshake::new(self::hello(Protocols::SESSION));
            assert!(client.on_welcome(Welcome {
                player_slot,
                reconnect_token,
                ..welcome.clone()
            }));
            assert!(client.is_joined());
            assert_eq!(client.reconnect_token(), None);
        }
    }

    fn configured_server() -> ServerHandshake {
        ServerHandshake::new(Protocols::SESSION)
            .with_tick_rate_hz(60)
            .with_players(2)
            .with_input(InputFingerprint::new("game::Input", 8))
    }

    fn configured_hello() -> Hello {
        hello(Protocols::SESSION)
            .with_tick_rate_hz(60)
            .with_players(2)
            .with_input(InputFingerprint::new("game::Input", 8))
    }

    #[test]
    fn a_hello_with_the_same_config_joins_and_the_welcome_states_it() {
        let mut server = configured_server();
        let welcome = server
            .on_hello(1, &configured_hello(), 0, || Ok(Some(0)))
            .unwrap();
        assert_eq!((welcome.tick_rate_hz, welcome.players), (60, 2));
        let mut client = ClientHandshake::new(configured_hello());
        client.on_hello_sent();
        assert!(client.on_welcome(welcome));
        assert!(client.is_joined());
        assert_eq!(client.tick_rate_hz(), Some(60));
        assert_eq!(client.players(), Some(2));
    }

    #[test]
    fn a_hello_without_config_joins_and_learns_it_from_the_welcome() {
        let mut server = configured_server();
        let mut client = ClientHandshake::new(hello(Protocols::SESSION));
        assert_eq!((client.tick_rate_hz(), client.players()), (None, None));
        client.on_hello_sent();
        let welcome = server.on_hello(1, client.hello(), 0, seated).unwrap();
        assert!(client.on_welcome(welcome));
        assert_eq!(client.tick_rate_hz(), Some(60));
        assert_eq!(client.players(), Some(2));
        // A server that states nothing checks nothing; the client keeps its own values.
        let mut plain = ServerHandshake::new(Protocols::SESSION);
        let mut client = ClientHandshake::new(configured_hello());
        let welcome = plain.on_hello(1, client.hello(), 0, seated).unwrap();
        assert_eq!((welcome.tick_rate_hz, welcome.players), (0, 0));
        assert!(client.on_welcome(welcome));
        assert!(client.is_joined());
        assert_eq!(client.tick_rate_hz(), Some(60));
        assert_eq!(client.players(), Some(2));
    }

    #[test]
    fn another_tick_rate_is_refused_with_both_rates() {
        let mut server = configured_server();
        let hello = configured_hello().with_tick_rate_hz(64);
        assert_eq!(
            server.on_hello(1, &hello, 0, seated),
            Err(RejectReason::TickRateMismatch {
                server: 60,
                client: 64
            })
        );
        assert_eq!(server.joined_count(), 0);
        assert_eq!(server.stats().rejected, 1);
    }

    #[test]
    fn another_player_count_is_refused_with_both_counts() {
        let mut server = configured_server();
        let hello = configured_hello().with_players(4);
        assert_eq!(
            server.on_hello(1, &hello, 0, seated),
            Err(RejectReason::PlayerCountMismatch {
                server: 2,
                client: 4
            })
        );
    }

    #[test]
    fn another_input_type_is_refused_with_both_fingerprints() {
        let mut server = configured_server();
        for other in [
            InputFingerprint::new("other::Input", 8),
            InputFingerprint::new("game::Input", 9),
        ] {
            let hello = configured_hello().with_input(other.clone());
            assert_eq!(
                server.on_hello(1, &hello, 0, seated),
                Err(RejectReason::InputTypeMismatch {
                    server: InputFingerprint::new("game::Input", 8),
                    client: other,
                })
            );
        }
        assert_eq!(
            InputFingerprint::of::<u32>(5),
            InputFingerprint::new("u32", 5)
        );
    }

    #[test]
    fn config_is_checked_after_protocols_and_before_room_and_seat() {
        let mut server = configured_server().with_max_participants(0);
        let wrong = configured_hello().with_tick_rate_hz(30);
        let unsupported = Hello {
            protocols: Protocols::OWNERSHIP,
            ..wrong.clone()
        };
        assert_eq!(
            server.on_hello(1, &unsupported, 0, seated),
            Err(RejectReason::UnsupportedProtocols(Protocols::OWNERSHIP))
        );
        let asked = std::cell::Cell::new(false);
        let seat = || {
            asked.set(true);
            Ok(None)
        };
        assert_eq!(
            server.on_hello(1, &wrong, 0, seat),
            Err(RejectReason::TickRateMismatch {
                server: 60,
                client: 30
            })
        );
        assert!(!asked.get());
        assert_eq!(
            server.on_hello(1, &configured_hello(), 0, seated),
            Err(RejectReason::ServerFull)
        );
    }

    #[test]
    fn a_client_refuses_a_welcome_with_another_config() {
        let welcome = |tick_rate_hz, players| Welcome {
            protocol_version: PROTOCOL_VERSION,
            participant: ParticipantId(1),
            player_slot: Some(0),
            protocols: Protocols::SESSION,
            tick_rate_hz,
            server_tick: 0,
            players,
            reconnect_token: None,
        };
        let mut client = ClientHandshake::new(configured_hello());
        client.on_hello_sent();
        assert!(client.on_welcome(welcome(64, 2)));
        assert_eq!(
            client.status(),
            &JoinStatus::Rejected(RejectReason::TickRateMismatch {
                server: 64,
                client: 60
            })
        );
        assert_eq!(client.welcome(), None);
        let mut client = ClientHandshake::new(configured_hello());
        assert!(client.on_welcome(welcome(60, 3)));
        assert_eq!(
            client.status(),
            &JoinStatus::Rejected(RejectReason::PlayerCountMismatch {
                server: 3,
                client: 2
            })
        );
    }

    #[test]
    fn the_input_fingerprint_names_the_type_and_the_cap_raised_to_the_default_input() {
        let fingerprint = InputFingerprint::of_input::<u64>(300);
        assert_eq!(fingerprint, InputFingerprint::new("u64", 300));
        // A cap below the encoded default input is raised to it, as the relay raises its own.
        let default_len = encode(&[7u8; 4]).expect("encodes").len();
        assert_eq!(
            InputFingerprint::of_input::<[u8; 4]>(0).max_encoded_bytes as usize,
            default_len
        );
        assert_ne!(InputFingerprint::of_input::<u32>(300), fingerprint);
    }

    #[test]
    fn every_reject_reason_has_its_own_label_and_count() {
        let reasons = [
            RejectReason::VersionMismatch {
                server: 1,
                client: 2,
            },
            RejectReason::ServerFull,
            RejectReason::SessionStarted,
            RejectReason::UnsupportedProtocols(Protocols::default()),
            RejectReason::AlreadyJoined,
            RejectReason::Other("x".into()),
            RejectReason::TickRateMismatch {
                server: 1,
                client: 2,
            },
            RejectReason::PlayerCountMismatch {
                server: 1,
                client: 2,
            },
            RejectReason::InputTypeMismatch {
                server: InputFingerprint::new("a", 1),
                client: InputFingerprint::new("b", 1),
            },
            RejectReason::BadReconnectToken { slot: 0 },
            RejectReason::SlotStillConnected { slot: 0 },
            RejectReason::SlotOutOfRange {
                slot: 3,
                players: 2,
            },
            RejectReason::UnknownRoom { room: 9 },
            RejectReason::ServerDraining,
        ];
        let mut counts = RejectCounts::default();
        for (i, reason) in reasons.iter().enumerate() {
            assert_eq!(reason.index(), i);
            counts.record(reason);
        }
        counts.record(&RejectReason::SlotStillConnected { slot: 1 });
        assert_eq!(counts.count("slot_still_connected"), 2);
        assert_eq!(counts.count("server_full"), 1);
        assert_eq!(counts.count("no_such_label"), 0);
        assert_eq!(counts.total(), 15);
    }
}
