//! Per-player simulation inputs: the input buffer, the leafwing adapter and the input set a
//! simulation tick reads.
//!
//! Every peer simulates the same ticks from the same per-player inputs. The **verified** world runs tick
//! `T` only when every player's input for `T` and for all earlier ticks is [`InputStatus::Confirmed`]
//! ([`InputBuffer::max_verifiable_tick`]). The **predicted** world runs ahead on predicted inputs
//! ([`InputBuffer::predicted`]): the confirmed input where known, else the input of a local player known
//! to this peer, else the player's last confirmed input repeated, else `Default`.
//!
//! * [`InputBuffer`] stores confirmed and local inputs per player and tick in bounded ring buffers.
//! * [`PackedInput`] and [`InputEncoder`] turn a leafwing-input-manager `ActionState<A>` into a compact,
//!   deterministic input (buttons as bits, axes quantized to `i8`).
//! * [`PlayerInputs`] is the input set of the tick being simulated, as simulation systems read it.
//! * [`InputLatch`] latches local input sampled every frame into the next polled tick, so no
//!   press is lost between ticks.
//!
//! Ticks are [`Tick`] (`i32`) frame numbers. Tick `0` is the setup tick, where every input is
//! `Default`; the first tick that carries inputs is tick `1`. No function of this module panics on bad
//! input: invalid player indices, ticks, bits or slots are reported as [`InputError`]s.

mod buffer;
mod latch;
mod leafwing;
mod player_inputs;

use bevy::reflect::Reflect;
use serde::Serialize;

pub use buffer::{ConfirmOutcome, InputBuffer, MAX_CAPACITY_TICKS};
pub use latch::{FrameMergeFn, InputLatch, default_frame_merge, merge_latest_non_default};
pub use leafwing::{InputEncoder, PackedInput};
pub use player_inputs::PlayerInputs;

use crate::tick::{PlayerIndex, Tick};

// The bounds of a game's input type are the wire's: the relay checks inputs against them too.
pub use simsync_net::SimInput;

/// How trustworthy an input value handed to the simulation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect, Serialize, serde::Deserialize)]
pub enum InputStatus {
    /// Confirmed by the relay: every peer simulates this exact value for this player and tick.
    Confirmed,
    /// Not confirmed yet: the local player's own input, or the player's last confirmed input repeated.
    /// The verified world never sees predicted inputs; the predicted world may be rolled back.
    Predicted,
    /// Nothing is known about this player's input (no confirmed input yet, or the tick was discarded):
    /// the value is `Default`.
    Missing,
}

/// Errors of the input buffer, the local relay and the leafwing adapter.
///
/// Every error leaves the object that returned it unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// A session, buffer or relay needs at least one player.
    #[error("a session needs at least one player, got 0")]
    NoPlayers,
    /// The buffer capacity (in ticks) must be in `1..=max`.
    #[error("input buffer capacity {capacity} ticks is outside 1..={max}")]
    InvalidCapacity {
        /// The requested capacity, in ticks.
        capacity: u32,
        /// The largest accepted capacity, in ticks ([`MAX_CAPACITY_TICKS`]).
        max: u32,
    },
    /// The player index is not below the number of players.
    #[error("unknown player index {player} (the session has {players} players)")]
    UnknownPlayer {
        /// The rejected player index.
        player: PlayerIndex,
        /// The number of players; valid indices are `0..players`.
        players: u8,
    },
    /// The tick was already discarded from the buffer (`tick <= discarded_through`).
    #[error(
        "tick {tick} is too old: inputs through tick {discarded_through} were already discarded"
    )]
    TooOld {
        /// The rejected tick.
        tick: Tick,
        /// The last discarded tick; only later ticks are stored.
        discarded_through: Tick,
    },
    /// The tick is outside `first..=last`: not a positive input tick (tick `0` is the setup tick,
    /// negative ticks do not exist), or more than the capacity beyond the discarded ticks.
    #[error("tick {tick} is out of range {first}..={last}")]
    TickOutOfRange {
        /// The rejected tick.
        tick: Tick,
        /// The first tick accepted right now.
        first: Tick,
        /// The last tick accepted right now.
        last: Tick,
    },
    /// A different value was confirmed earlier for this player and tick; the earlier value is kept.
    #[error(
        "conflicting confirmation for player {player} at tick {tick}: a different input was already confirmed"
    )]
    ConflictingConfirmation {
        /// The player.
        player: PlayerIndex,
        /// The tick.
        tick: Tick,
    },
    /// The local relay needs exactly one latency per player.
    #[error("local relay config has {latencies} latencies for {players} players")]
    LatencyCountMismatch {
        /// The number of players in the config.
        players: u8,
        /// The number of per-player latencies in the config.
        latencies: usize,
    },
    /// A button bit index must be below `bits` (16 for [`PackedInput`]).
    #[error("button bit {bit} is out of range 0..{bits}")]
    BitOutOfRange {
        /// The rejected bit index.
        bit: u8,
        /// The number of button bits.
        bits: u8,
    },
    /// An axis slot index must be below `slots` (2 for [`PackedInput`]).
    #[error("axis slot {slot} is out of range 0..{slots}")]
    AxisSlotOutOfRange {
        /// The rejected slot index.
        slot: usize,
        /// The number of axis slots.
        slots: usize,
    },
    /// The button bit is already mapped to another action of the encoder.
    #[error("button bit {bit} is already mapped")]
    BitAlreadyMapped {
        /// The bit index.
        bit: u8,
    },
    /// The axis slot is already mapped to another action (or axis) of the encoder.
    #[error("axis slot {slot} is already mapped")]
    AxisSlotAlreadyMapped {
        /// The slot index.
        slot: usize,
    },
    /// The action's leafwing `InputControlKind` does not fit the mapping (for example an axis action
    /// mapped to a button bit).
    #[error("action {action} is a {found} action, but it was mapped as a {expected}")]
    WrongActionKind {
        /// The action, formatted with `Debug`.
        action: String,
        /// The kind the mapping needs: `"Button"`, `"Axis"` or `"DualAxis"`.
        expected: &'static str,
        /// The action's kind: `"Button"`, `"Axis"`, `"DualAxis"` or `"TripleAxis"`.
        found: &'static str,
    },
}

/// The hash of one input set (every player's input of one tick, in player order) and its
/// disconnected players (one bit per player index): the inputs' hash alone while every player
/// is connected, so a player marked disconnected is a misprediction like a changed input. The
/// session compares predicted and confirmed input sets by it, and the prediction check chains
/// it.
pub(crate) fn input_set_hash<I: SimInput>(inputs: &[I], disconnected: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = crate::checksum::StateHasher::default();
    inputs.hash(&mut h);
    h.finish() ^ disconnected.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}
