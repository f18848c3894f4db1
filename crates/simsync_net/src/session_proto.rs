//! Messages of the networked deterministic session (relay server and clients). Each travels
//! in a [`MatchMessage`](crate::MatchMessage) naming the match it belongs to
//! ([wire rule 12](crate::rules)).
//!
//! Inputs are opaque bytes here: the game encodes its compact input type with the same codec
//! ([`crate::encode`]) and this crate never needs to know it; [`SimInput`] names the bounds that
//! type meets. Ticks are [`Tick`] (`i32`) frame numbers, players [`PlayerIndex`]es.
//!
//! Redundancy: both directions send the last few ticks again in every message
//! ([`SessionClientMessage::Inputs`], [`SessionServerMessage::ConfirmedInputs`]) on the
//! unreliable inputs channel, so a lost packet costs nothing as long as one of the next few
//! arrives; the receiver keeps the first copy of each tick and ignores the rest.

use core::fmt::Debug;
use core::hash::Hash;

use bevy::prelude::{Message, Reflect};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::channels::NetChannel;
use crate::matches::MatchEndReason;
use crate::snapshot_chunks::SnapshotChunk;

/// A simulation tick (frame number). Tick `n + 1` is simulated after tick `n`; one tick is one
/// fixed step of the session's tick rate. Tick `0` is the setup tick, where every input is
/// `Default`; the first tick that carries inputs is tick `1`.
pub type Tick = i32;

/// Index of a player in a session, `0..players`.
pub type PlayerIndex = u8;

/// The bounds a game's compact per-tick input type must satisfy.
///
/// Implemented automatically for every type with these bounds (blanket impl); games never implement it
/// by hand. `Default` is the "no input" value used for the setup tick and for predictions of players
/// with no confirmed input yet. `Eq` is used to detect conflicting confirmations and mispredictions, so
/// it must compare the full value bit for bit (no floats with `NaN`; prefer quantized integers such as
/// the deterministic session's `PackedInput`).
pub trait SimInput:
    Clone + Eq + Default + Debug + Hash + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

impl<T> SimInput for T where
    T: Clone + Eq + Default + Debug + Hash + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

/// The input size cap when none is configured: 256 encoded bytes (raised to the encoded
/// default input when that is longer). Relay and clients state the same cap in the handshake
/// ([`InputFingerprint::of_input`](crate::InputFingerprint::of_input)); a game with larger
/// inputs sets its own on both.
pub const DEFAULT_MAX_INPUT_BYTES: usize = 256;

/// What differs in a desync, as the relay found by comparing the clients' per-component hash
/// breakdowns of the tick ([`SessionClientMessage::ComponentHashes`]). Written as a Bevy
/// message on the relay's App and on every client that receives
/// [`SessionServerMessage::DesyncReport`].
#[derive(Message, Debug, Clone, PartialEq, Eq, Reflect)]
pub struct DesyncReport {
    /// The desynced tick.
    pub tick: Tick,
    /// Players whose breakdown differs from the majority's (every reporter without a majority).
    pub players: Vec<PlayerIndex>,
    /// Registered component type names whose hashes differ (resources as `resource <name>`).
    pub components: Vec<String>,
    /// Slots of simulation entities whose hashes differ.
    pub slots: Vec<u32>,
}

/// Who judged a desync: what the named players' checksums differ from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, Reflect)]
pub enum DesyncJudge {
    /// The players' own checksums: the named players differ from the value most players
    /// reported (every reporter is named when no value was reported more often than every
    /// other one).
    #[default]
    Majority,
    /// The verified world of an authoritative room: the named players differ from its
    /// checksum of the tick, whatever the other players reported.
    Authority,
}

impl std::fmt::Display for DesyncJudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DesyncJudge::Majority => "the majority",
            DesyncJudge::Authority => "the authority",
        })
    }
}

/// One player's input for one tick, encoded by the game (opaque to this crate).
pub type InputBytes = Vec<u8>;

/// The confirmed inputs of all players for one tick.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSet {
    /// One input per player slot, in slot order.
    pub inputs: Vec<InputBytes>,
    /// Bit `i` set: the server did not receive slot `i`'s input in time (hard tolerance) and
    /// replaced it with that player's last input. Slots ≥ 64 cannot be marked.
    pub replaced: u64,
    /// Bit `i` set: slot `i`'s player was disconnected when the server confirmed this set (its
    /// connection closed, or the server heard nothing from it for its silence timeout); its
    /// input is replaced as well. Slots ≥ 64 cannot be marked.
    pub disconnected: u64,
}

impl InputSet {
    /// Whether slot `slot`'s input was replaced by the server (always `false` for slots ≥ 64).
    pub fn is_replaced(&self, slot: usize) -> bool {
        slot < 64 && self.replaced & (1u64 << slot) != 0
    }

    /// Whether slot `slot`'s player was disconnected at this tick (always `false` for slots ≥ 64).
    pub fn is_disconnected(&self, slot: usize) -> bool {
        slot < 64 && self.disconnected & (1u64 << slot) != 0
    }
}

/// Session messages from a client to the relay server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionClientMessage {
    /// The client's inputs for ticks `first_tick ..= first_tick + inputs.len() - 1`, oldest
    /// first, including ticks already sent (redundancy). Channel: inputs.
    Inputs {
        /// Tick of `inputs[0]`.
        first_tick: i32,
        /// One encoded input per tick.
        inputs: Vec<InputBytes>,
        /// The last tick up to which the client holds every confirmed input set, so the server
        /// can stop repeating older ones; `i32::MIN` before the first.
        ack_tick: i32,
    },
    /// Checksum of the client's verified state at `tick`, for desync detection.
    /// Channel: control.
    Checksum {
        /// Verified tick the checksum is for.
        tick: i32,
        /// The checksum.
        checksum: u64,
    },
    /// The client's per-component hash breakdown of its verified state at `tick`, sent after
    /// the relay reported a desync of `tick`, so the relay can name the component that differs.
    /// Each list holds at most [`MAX_BREAKDOWN_ENTRIES`] (slots: [`MAX_BREAKDOWN_SLOTS`])
    /// entries and each name at most [`MAX_BREAKDOWN_NAME_BYTES`] bytes; the relay refuses
    /// (and counts) a longer one. Channel: control.
    ComponentHashes {
        /// The desynced tick.
        tick: i32,
        /// Per registered component type: its name and the hash of its values on every
        /// simulation entity, in registration order.
        components: Vec<(String, u64)>,
        /// Per registered resource type: its name and the hash of its value.
        resources: Vec<(String, u64)>,
        /// Per live simulation entity: its slot and the hash of its registered components.
        slots: Vec<(u32, u64)>,
    },
    /// A buddy's answer to [`SessionServerMessage::SnapshotRequest`]: one chunk of its encoded
    /// snapshot, in order. Channel: snapshot.
    SnapshotChunk(SnapshotChunk),
    /// A buddy cannot serve the snapshot asked for with `request` (no snapshot support, nothing
    /// verified at or after the tick asked for, or a capture error); the relay asks another
    /// client. Channel: control.
    SnapshotUnavailable {
        /// The request id.
        request: u32,
    },
    /// The joiner refused the snapshot the relay forwarded with `request` (it did not decode,
    /// did not load, or its checksum at its tick is not the one its header states); the relay
    /// counts the buddy that served it as a liar and asks another. Channel: control.
    SnapshotRefused {
        /// The request id.
        request: u32,
    },
    /// This client's session is set up for the match the message names (its worlds are at
    /// tick 0): the answer to [`SessionServerMessage::MatchOpened`]. The relay starts the match
    /// once every seated player is ready. Channel: control.
    Ready,
}

/// Most component (or resource) entries of one [`SessionClientMessage::ComponentHashes`].
pub const MAX_BREAKDOWN_ENTRIES: usize = 128;

/// Longest type name in a [`SessionClientMessage::ComponentHashes`], in bytes.
pub const MAX_BREAKDOWN_NAME_BYTES: usize = 160;

/// Most slot entries of one [`SessionClientMessage::ComponentHashes`] (a breakdown of a larger
/// world names slots among the first this many only).
pub const MAX_BREAKDOWN_SLOTS: usize = 1_024;

impl SessionClientMessage {
    /// The channel this message is meant to be sent on.
    pub fn channel(&self) -> NetChannel {
        match self {
            SessionClientMessage::Inputs { .. } => NetChannel::Inputs,
            SessionClientMessage::Checksum { .. }
            | SessionClientMessage::ComponentHashes { .. }
            | SessionClientMessage::SnapshotUnavailable { .. }
            | SessionClientMessage::SnapshotRefused { .. }
            | SessionClientMessage::Ready => NetChannel::Control,
            SessionClientMessage::SnapshotChunk(_) => NetChannel::Snapshot,
        }
    }
}

/// Session messages from the relay server to a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SessionServerMessage {
    /// The match the message names starts (or started) at `tick`: the relay's clock runs and
    /// ticks are confirmed. Channel: control.
    Start {
        /// First tick of the session.
        tick: i32,
        /// Number of player slots (length of every [`InputSet::inputs`]).
        players: u8,
        /// Simulation ticks per second (Hz).
        tick_rate_hz: u16,
    },
    /// Confirmed input sets of ticks `first_tick ..= first_tick + sets.len() - 1`, oldest first,
    /// including sets already sent (redundancy). Channel: inputs.
    ConfirmedInputs {
        /// Tick of `sets[0]`.
        first_tick: i32,
        /// One set per tick.
        sets: Vec<InputSet>,
    },
    /// Clock information for the client's lead control. Channel: inputs.
    Clock {
        /// The server's tick when it sent this message.
        server_tick: i32,
        /// How early this client's inputs arrive, in ticks: the tick of the newest input
        /// received minus the server tick at its arrival (negative: late). Fractional.
        input_lead_ticks: f32,
        /// The newest tick through which every seated player's checksums are judged, or
        /// counted unjudged (0: none yet). It covers the desyncs the relay judged up to there
        /// once this client received `desyncs_sent` `Desync` messages of the match: a client
        /// at its last tick knows then that its match's desyncs are all reported.
        judged_through: i32,
        /// `Desync` messages of this match the relay sent to this client so far.
        desyncs_sent: u32,
        /// Checksum reports of this match the relay could not judge (they came after their
        /// tick's verdict was gone, or the tick had no judge), all players together.
        unjudged_checksums: u32,
    },
    /// The checksums reported for `tick` disagree and start a desync episode of `players`: sent
    /// once per episode of each player, not per desynced tick (a player's episode lasts until a
    /// checksum of it agrees with the judge again). Channel: control.
    Desync {
        /// The tick judged.
        tick: i32,
        /// The player slots whose checksum differs from the judge's (with the majority as judge,
        /// every reporter when no checksum was reported by more players than every other one)
        /// and that were not desynced already.
        players: Vec<u8>,
        /// What their checksums differ from: the majority, or the room's authority.
        judge: DesyncJudge,
    },
    /// A player left (its connection closed, or the server heard nothing from it for its
    /// silence timeout); from now on the server replaces its inputs. Channel: control.
    PlayerLeft {
        /// The player's slot.
        slot: u8,
        /// The server's tick when it noticed.
        tick: i32,
    },
    /// A player who left is back in its slot: a new connection took it with the slot's
    /// reconnect token, or the silent connection was heard from again; from the next confirmed
    /// set on its own inputs are used again. Channel: control.
    PlayerRejoined {
        /// The player's slot.
        slot: u8,
        /// The server's tick when it came back.
        tick: i32,
    },
    /// The client acknowledged fewer confirmed sets than the server still holds: the sets
    /// before `oldest_available` are gone, so the client cannot verify on from its inputs and
    /// needs a snapshot. Channel: control.
    Behind {
        /// The oldest tick whose confirmed set the server still holds.
        oldest_available: i32,
    },
    /// The relay compared the per-component hash breakdowns of desynced `tick`
    /// ([`SessionClientMessage::ComponentHashes`]) and names what differs. Channel: control.
    DesyncReport {
        /// The desynced tick.
        tick: i32,
        /// The player slots whose breakdown differs from the majority's.
        players: Vec<u8>,
        /// Registered component and resource type names whose hashes differ (resources as
        /// `resource <name>`), at most [`MAX_BREAKDOWN_ENTRIES`].
        components: Vec<String>,
        /// Slots of simulation entities whose hashes differ, at most [`MAX_BREAKDOWN_SLOTS`].
        slots: Vec<u32>,
    },
    /// The relay asks this client (the "buddy") for a snapshot of its verified world at its
    /// latest verified tick, which must be at least `min_tick`; it answers with
    /// [`SessionClientMessage::SnapshotChunk`]s of at most `max_bytes` in all, or
    /// [`SessionClientMessage::SnapshotUnavailable`]. Channel: control.
    SnapshotRequest {
        /// The request id, repeated in every chunk of the answer.
        request: u32,
        /// The oldest verified tick the snapshot may hold.
        min_tick: i32,
        /// The largest snapshot the relay accepts, in bytes.
        max_bytes: u32,
    },
    /// One chunk of a verified snapshot for this client (a late joiner, or a player whose
    /// missing confirmed inputs are gone), in order; the confirmed inputs from the snapshot's
    /// tick + 1 follow on the inputs channel. Channel: snapshot.
    SnapshotChunk(SnapshotChunk),
    /// The match the message names ended: the relay's clock stopped, and nothing more of that
    /// match is sent or taken. Channel: control.
    MatchEnded {
        /// Why, as the server's app said.
        reason: MatchEndReason,
    },
    /// The lobby of the match the message names is open: every seated player keeps its slot,
    /// sets its session up anew (worlds rebuilt from tick 0) and answers
    /// [`SessionClientMessage::Ready`]; the match starts (`Start`) once every seated player is
    /// ready. Channel: control.
    MatchOpened,
}

impl SessionServerMessage {
    /// The channel this message is meant to be sent on.
    pub fn channel(&self) -> NetChannel {
        match self {
            SessionServerMessage::ConfirmedInputs { .. } | SessionServerMessage::Clock { .. } => {
                NetChannel::Inputs
            }
            SessionServerMessage::Start { .. }
            | SessionServerMessage::Desync { .. }
            | SessionServerMessage::PlayerLeft { .. }
            | SessionServerMessage::PlayerRejoined { .. }
            | SessionServerMessage::Behind { .. }
            | SessionServerMessage::DesyncReport { .. }
            | SessionServerMessage::SnapshotRequest { .. }
            | SessionServerMessage::MatchEnded { .. }
            | SessionServerMessage::MatchOpened => NetChannel::Control,
            SessionServerMessage::SnapshotChunk(_) => NetChannel::Snapshot,
        }
    }
}
