//! [`InputBuffer`]: confirmed and local inputs per player and tick, in bounded ring buffers.

use std::collections::VecDeque;
use std::ops::RangeInclusive;

use super::{InputError, InputStatus, SimInput};
use crate::tick::{PlayerIndex, Tick};

/// The largest capacity, in ticks, an [`InputBuffer`] accepts (2^20 ticks, about 4.8 hours at 60 Hz).
///
/// Storage grows lazily, so a large capacity only costs memory for ticks actually stored.
pub const MAX_CAPACITY_TICKS: u32 = 1 << 20;

/// What [`InputBuffer::confirm`] did with a valid confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfirmOutcome {
    /// The input was not confirmed before and is now stored.
    New,
    /// The same value was already confirmed for this player and tick; nothing changed.
    Duplicate,
}

/// Which values the predicted world used for a (player, tick) that is not confirmed yet.
#[derive(Debug, Clone, Default)]
enum UsedPrediction<I> {
    /// No prediction recorded.
    #[default]
    Nothing,
    /// Every recorded prediction used this value.
    One(I),
    /// At least two different values were used, so at least one of them is a misprediction.
    Several,
}

/// Everything stored for one player at one tick.
#[derive(Debug, Clone, Default)]
struct Slot<I> {
    confirmed: Option<I>,
    /// The relay marked the player disconnected at this tick (meaningful once confirmed).
    disconnected: bool,
    local: Option<I>,
    used: UsedPrediction<I>,
}

/// Storage of one player.
#[derive(Debug, Clone)]
struct PlayerTrack<I> {
    /// `slots[i]` holds tick `base + 1 + i`; never longer than the capacity.
    slots: VecDeque<Slot<I>>,
    /// Every tick `1..=confirmed_through` is confirmed (`>= base`).
    confirmed_through: Tick,
    /// The greatest confirmed tick (`>= confirmed_through`; `0` when none).
    latest_confirmed: Tick,
    /// The confirmed input at tick `base`; `None` while `base == 0` (the setup tick is not a prediction
    /// source).
    base_input: Option<I>,
    /// Whether the player was marked disconnected at tick `base`.
    base_disconnected: bool,
}

/// Confirmed and local inputs of `players` players, per tick, with prediction and misprediction
/// tracking.
///
/// Plain data (no Bevy types); every operation is deterministic (no hash-map iteration anywhere).
///
/// **Ticks.** Tick `0` is the setup tick: every input is `Default` there and it cannot be confirmed.
/// The buffer stores the ticks [`storable_ticks`](Self::storable_ticks):
/// `discarded_through() + 1 ..= discarded_through() + capacity_ticks`. Operations on a tick at or before
/// [`discarded_through`](Self::discarded_through) fail with [`InputError::TooOld`]; on a tick below `1` or
/// past the window with [`InputError::TickOutOfRange`]. The window moves forward only through
/// [`discard_through`](Self::discard_through), which the session calls after the verified world ran the
/// ticks. The capacity must therefore cover the rollback window plus the input delay plus the relay's
/// latency, or local inputs of a stalled session are rejected.
///
/// **Memory** is bounded by `players * capacity_ticks` slots (each up to three `I` values), allocated
/// lazily.
#[derive(Debug, Clone)]
pub struct InputBuffer<I: SimInput> {
    players: u8,
    capacity: u32,
    /// Every tick `<= base` is discarded.
    base: Tick,
    /// Cached minimum of the players' `confirmed_through`.
    max_verifiable: Tick,
    tracks: Vec<PlayerTrack<I>>,
    default: I,
    mispredicted: u64,
}

impl<I: SimInput> InputBuffer<I> {
    /// Creates an empty buffer for `players` players (indices `0..players`) storing up to
    /// `capacity_ticks` ticks beyond the discarded ones.
    ///
    /// # Errors
    /// [`InputError::NoPlayers`] when `players == 0`; [`InputError::InvalidCapacity`] when
    /// `capacity_ticks` is `0` or above [`MAX_CAPACITY_TICKS`].
    pub fn new(players: u8, capacity_ticks: u32) -> Result<Self, InputError> {
        if players == 0 {
            return Err(InputError::NoPlayers);
        }
        if capacity_ticks == 0 || capacity_ticks > MAX_CAPACITY_TICKS {
            return Err(InputError::InvalidCapacity {
                capacity: capacity_ticks,
                max: MAX_CAPACITY_TICKS,
            });
        }
        let track = PlayerTrack {
            slots: VecDeque::new(),
            confirmed_through: 0,
            latest_confirmed: 0,
            base_input: None,
            base_disconnected: false,
        };
        Ok(Self {
            players,
            capacity: capacity_ticks,
            base: 0,
            max_verifiable: 0,
            tracks: vec![track; usize::from(players)],
            default: I::default(),
            mispredicted: 0,
        })
    }

    /// The number of players; valid player indices are `0..players()`.
    pub fn players(&self) -> u8 {
        self.players
    }

    /// The capacity in ticks given to [`new`](Self::new).
    pub fn capacity_ticks(&self) -> u32 {
        self.capacity
    }

    /// The last discarded tick (`0` before any discard): ticks up to and including it are no longer
    /// stored.
    pub fn discarded_through(&self) -> Tick {
        self.base
    }

    /// The ticks that [`confirm`](Self::confirm), [`set_local`](Self::set_local) and
    /// [`record_prediction_used`](Self::record_prediction_used) accept right now:
    /// `discarded_through() + 1 ..= discarded_through() + capacity_ticks()` (the upper end saturates at
    /// `Tick::MAX`).
    pub fn storable_ticks(&self) -> RangeInclusive<Tick> {
        (self.base + 1)..=self.last_storable()
    }

    fn last_storable(&self) -> Tick {
        let last = i64::from(self.base) + i64::from(self.capacity);
        Tick::try_from(last).unwrap_or(Tick::MAX)
    }

    fn player_index(&self, player: PlayerIndex) -> Result<usize, InputError> {
        if player < self.players {
            Ok(usize::from(player))
        } else {
            Err(InputError::UnknownPlayer {
                player,
                players: self.players,
            })
        }
    }

    /// The ring index of `tick`, if it is storable.
    fn slot_index(&self, tick: Tick) -> Result<usize, InputError> {
        let first = self.base + 1;
        let last = self.last_storable();
        if tick < 1 || tick > last {
            return Err(InputError::TickOutOfRange { tick, first, last });
        }
        if tick <= self.base {
            return Err(InputError::TooOld {
                tick,
                discarded_through: self.base,
            });
        }
        // 0 <= tick - base - 1 < capacity <= MAX_CAPACITY_TICKS: fits usize.
        Ok((tick - self.base - 1) as usize)
    }

    /// The slot at `index` of `player`, growing the ring with empty slots up to it
    /// (`index < capacity`, checked by `slot_index`).
    fn slot_mut(&mut self, player: usize, index: usize) -> &mut Slot<I> {
        let slots = &mut self.tracks[player].slots;
        while slots.len() <= index {
            slots.push_back(Slot::default());
        }
        &mut slots[index]
    }

    /// Stores the confirmed `input` of `player` for `tick` (from the relay).
    ///
    /// Advances the player's contiguous-confirmed watermark and [`max_verifiable_tick`](
    /// Self::max_verifiable_tick) in amortised O(1) (O(players) when the slowest player advances). If the
    /// predicted world used a different value for this (player, tick) (see
    /// [`record_prediction_used`](Self::record_prediction_used)), [`mispredicted_inputs`](
    /// Self::mispredicted_inputs) grows by one.
    ///
    /// # Errors
    /// [`InputError::UnknownPlayer`]; [`InputError::TooOld`] when `tick <= discarded_through()`;
    /// [`InputError::TickOutOfRange`] when `tick < 1` or past [`storable_ticks`](Self::storable_ticks);
    /// [`InputError::ConflictingConfirmation`] when a different value is already confirmed for this
    /// (player, tick) — the first value is kept. Re-confirming the same value is
    /// `Ok(ConfirmOutcome::Duplicate)`.
    pub fn confirm(
        &mut self,
        player: PlayerIndex,
        tick: Tick,
        input: I,
    ) -> Result<ConfirmOutcome, InputError> {
        let p = self.player_index(player)?;
        let index = self.slot_index(tick)?;
        let slot = self.slot_mut(p, index);
        if let Some(existing) = &slot.confirmed {
            return if *existing == input {
                Ok(ConfirmOutcome::Duplicate)
            } else {
                Err(InputError::ConflictingConfirmation { player, tick })
            };
        }
        let mispredicted = match std::mem::take(&mut slot.used) {
            UsedPrediction::Nothing => false,
            UsedPrediction::One(used) => used != input,
            UsedPrediction::Several => true,
        };
        slot.confirmed = Some(input);
        if mispredicted {
            self.mispredicted += 1;
        }

        let base = self.base;
        let track = &mut self.tracks[p];
        track.latest_confirmed = track.latest_confirmed.max(tick);
        if tick == track.confirmed_through + 1 {
            let old = track.confirmed_through;
            let mut through = tick;
            // The slot of tick `through + 1` is at index `through - base`; an index inside the ring
            // implies `through + 1 <= base + len <= Tick::MAX`, so the increment cannot overflow.
            while track
                .slots
                .get((through - base) as usize)
                .is_some_and(|s| s.confirmed.is_some())
            {
                through += 1;
            }
            track.confirmed_through = through;
            if old == self.max_verifiable {
                self.max_verifiable = self
                    .tracks
                    .iter()
                    .map(|t| t.confirmed_through)
                    .min()
                    .unwrap_or(0);
            }
        }
        Ok(ConfirmOutcome::New)
    }

    /// Records the input of a *local* player of this peer for `tick` (known here, not confirmed yet).
    ///
    /// [`predicted`](Self::predicted) uses it while the tick is not confirmed. Setting it again replaces
    /// the previous local value; a confirmed value always takes precedence.
    ///
    /// # Errors
    /// The same player and tick errors as [`confirm`](Self::confirm) (never `ConflictingConfirmation`).
    pub fn set_local(
        &mut self,
        player: PlayerIndex,
        tick: Tick,
        input: I,
    ) -> Result<(), InputError> {
        let p = self.player_index(player)?;
        let index = self.slot_index(tick)?;
        self.slot_mut(p, index).local = Some(input);
        Ok(())
    }

    /// Records that the predicted world simulated `tick` with `input` for `player`.
    ///
    /// When the tick is confirmed later, the (player, tick) counts as **one** misprediction in
    /// [`mispredicted_inputs`](Self::mispredicted_inputs) if any recorded value differs from the
    /// confirmed one. Recording for an already confirmed (player, tick) is ignored (the predicted world
    /// used the confirmed value, no prediction).
    ///
    /// # Errors
    /// The same player and tick errors as [`confirm`](Self::confirm) (never `ConflictingConfirmation`).
    pub fn record_prediction_used(
        &mut self,
        player: PlayerIndex,
        tick: Tick,
        input: &I,
    ) -> Result<(), InputError> {
        let p = self.player_index(player)?;
        let index = self.slot_index(tick)?;
        let slot = self.slot_mut(p, index);
        if slot.confirmed.is_some() {
            return Ok(());
        }
        slot.used = match std::mem::take(&mut slot.used) {
            UsedPrediction::Nothing => UsedPrediction::One(input.clone()),
            UsedPrediction::One(used) if used == *input => UsedPrediction::One(used),
            UsedPrediction::One(_) | UsedPrediction::Several => UsedPrediction::Several,
        };
        Ok(())
    }

    /// The number of (player, tick) pairs whose confirmed input differed from a value the predicted world
    /// had used for them. Each pair counts at most once; pairs without a recorded prediction never count.
    pub fn mispredicted_inputs(&self) -> u64 {
        self.mispredicted
    }

    /// The last tick `T` such that every player has a confirmed input for every tick `1..=T`; `0` when
    /// there is none. The verified world may run every tick up to it. O(1).
    pub fn max_verifiable_tick(&self) -> Tick {
        self.max_verifiable
    }

    /// The last tick `T` such that `player` has a confirmed input for every tick `1..=T` (`0` when none),
    /// or `None` for an unknown player.
    pub fn confirmed_through(&self, player: PlayerIndex) -> Option<Tick> {
        self.tracks
            .get(usize::from(player))
            .map(|t| t.confirmed_through)
    }

    /// The confirmed input at `tick` in `track`, for `tick >= base` (`None` for the setup tick).
    fn confirmed_in<'a>(&self, track: &'a PlayerTrack<I>, tick: Tick) -> Option<&'a I> {
        if tick == self.base {
            return track.base_input.as_ref();
        }
        if tick < self.base {
            return None;
        }
        let index = usize::try_from(i64::from(tick) - i64::from(self.base) - 1).ok()?;
        track.slots.get(index)?.confirmed.as_ref()
    }

    /// The confirmed input of `player` at `tick`.
    ///
    /// Tick `0` (the setup tick) gives `Some(&Default)` for every known player. `None` for an unknown
    /// player, a negative tick, a tick not confirmed yet, or a tick before
    /// [`discarded_through`](Self::discarded_through) (the discarded tick itself stays readable).
    pub fn confirmed(&self, player: PlayerIndex, tick: Tick) -> Option<&I> {
        let track = self.tracks.get(usize::from(player))?;
        match tick {
            0 => Some(&self.default),
            t if t < 0 => None,
            t => self.confirmed_in(track, t),
        }
    }

    /// Fills `out` with the confirmed inputs of all players at `tick`, in player order, and returns
    /// `true`; if any player's input is not confirmed (see [`confirmed`](Self::confirmed)), leaves `out`
    /// empty and returns `false`. Does not allocate when `out` has room for `players()` inputs.
    pub fn confirmed_set_into(&self, tick: Tick, out: &mut Vec<I>) -> bool {
        out.clear();
        for player in 0..self.players {
            match self.confirmed(player, tick) {
                Some(input) => out.push(input.clone()),
                None => {
                    out.clear();
                    return false;
                }
            }
        }
        true
    }

    /// The confirmed inputs of all players at `tick`, in player order, or `None` if any is not confirmed.
    /// Allocates; see [`confirmed_set_into`](Self::confirmed_set_into) for the reusing variant.
    pub fn confirmed_set(&self, tick: Tick) -> Option<Vec<I>> {
        let mut out = Vec::with_capacity(usize::from(self.players));
        self.confirmed_set_into(tick, &mut out).then_some(out)
    }

    /// The latest tick before `tick` (`tick > base`) at which `track` holds a confirmed input,
    /// ignoring the setup tick.
    fn last_confirmed_before(&self, track: &PlayerTrack<I>, tick: Tick) -> Option<Tick> {
        let before = tick - 1; // >= base >= 0
        let found = if track.latest_confirmed <= before {
            track.latest_confirmed
        } else if before <= track.confirmed_through {
            before
        } else {
            // Out-of-order confirmations: scan back (bounded by the capacity) to the watermark.
            let mut t = before;
            while t > track.confirmed_through && self.confirmed_in(track, t).is_none() {
                t -= 1;
            }
            t
        };
        self.confirmed_in(track, found).map(|_| found)
    }

    /// Whether `track` is marked disconnected at confirmed tick `tick` (`tick >= base`).
    fn disconnected_in(&self, track: &PlayerTrack<I>, tick: Tick) -> bool {
        if tick == self.base {
            return track.base_disconnected;
        }
        usize::try_from(i64::from(tick) - i64::from(self.base) - 1)
            .ok()
            .and_then(|index| track.slots.get(index))
            .is_some_and(|slot| slot.confirmed.is_some() && slot.disconnected)
    }

    /// Marks `player` disconnected at `tick`, as the relay's confirmed set of that tick says
    /// (see [disconnected players](crate::rules#disconnected-players)); read through
    /// [`disconnected`](Self::disconnected) and
    /// [`predicted_disconnected`](Self::predicted_disconnected) once the tick's input is
    /// confirmed. Marking again does nothing.
    ///
    /// # Errors
    /// As [`confirm`](Self::confirm): [`InputError::UnknownPlayer`], [`InputError::TooOld`],
    /// [`InputError::TickOutOfRange`].
    pub fn mark_disconnected(&mut self, player: PlayerIndex, tick: Tick) -> Result<(), InputError> {
        let p = self.player_index(player)?;
        let index = self.slot_index(tick)?;
        self.slot_mut(p, index).disconnected = true;
        Ok(())
    }

    /// Sets or clears `player`'s disconnected mark at `tick` (a local session's own marks,
    /// [`DeterministicSession::set_player_connected`](crate::DeterministicSession::set_player_connected));
    /// read like [`mark_disconnected`](Self::mark_disconnected)'s.
    ///
    /// # Errors
    /// As [`mark_disconnected`](Self::mark_disconnected).
    pub(crate) fn set_disconnected(
        &mut self,
        player: PlayerIndex,
        tick: Tick,
        disconnected: bool,
    ) -> Result<(), InputError> {
        let p = self.player_index(player)?;
        let index = self.slot_index(tick)?;
        self.slot_mut(p, index).disconnected = disconnected;
        Ok(())
    }

    /// The players marked disconnected at confirmed tick `tick`, as a bitmask (bit `i`: player
    /// `i`; players ≥ 64 are never marked). What the verified world sees.
    pub fn disconnected(&self, tick: Tick) -> u64 {
        self.mask(|track| tick > 0 && tick >= self.base && self.disconnected_in(track, tick))
    }

    /// The players the predicted world treats as disconnected at `tick`: each player's mark at
    /// `tick` when its input is confirmed there, else at its latest confirmed tick before (the
    /// last confirmed state), else connected. Depends only on the confirmed inputs held, so a
    /// re-simulated tick sees the same mask and a confirmed tick sees what the verified world
    /// sees.
    pub fn predicted_disconnected(&self, tick: Tick) -> u64 {
        self.mask(|track| {
            if tick <= 0 || tick < self.base {
                return false;
            }
            if self.confirmed_in(track, tick).is_some() {
                return self.disconnected_in(track, tick);
            }
            tick > self.base
                && self
                    .last_confirmed_before(track, tick)
                    .is_some_and(|t| self.disconnected_in(track, t))
        })
    }

    /// Bit `i` set for every player `i < 64` whose track satisfies `marked`.
    fn mask(&self, marked: impl Fn(&PlayerTrack<I>) -> bool) -> u64 {
        self.tracks
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, track)| marked(track))
            .fold(0, |mask, (i, _)| mask | (1 << i))
    }

    /// The input the predicted world uses for `player` at `tick`, with its status:
    ///
    /// 1. the confirmed input → [`InputStatus::Confirmed`];
    /// 2. else the local input from [`set_local`](Self::set_local) → [`InputStatus::Predicted`];
    /// 3. else the player's latest confirmed input at a tick before `tick` (repeat last) →
    ///    [`InputStatus::Predicted`];
    /// 4. else `Default` → [`InputStatus::Missing`].
    ///
    /// Works for any tick, also past the storable window (rules 3–4). Tick `0` is `(Default, Confirmed)`.
    /// An unknown player, a negative tick or a tick before [`discarded_through`](
    /// Self::discarded_through) (its value is gone) gives `(Default, Missing)`.
    pub fn predicted(&self, player: PlayerIndex, tick: Tick) -> (I, InputStatus) {
        let missing = || (I::default(), InputStatus::Missing);
        let Some(track) = self.tracks.get(usize::from(player)) else {
            return missing();
        };
        if tick == 0 {
            return (I::default(), InputStatus::Confirmed);
        }
        if tick < 0 || tick < self.base {
            return missing();
        }
        if let Some(input) = self.confirmed_in(track, tick) {
            return (input.clone(), InputStatus::Confirmed);
        }
        if tick == self.base {
            return missing();
        }
        let local = usize::try_from(i64::from(tick) - i64::from(self.base) - 1)
            .ok()
            .and_then(|index| track.slots.get(index))
            .and_then(|slot| slot.local.as_ref());
        if let Some(input) = local {
            return (input.clone(), InputStatus::Predicted);
        }
        match self
            .last_confirmed_before(track, tick)
            .and_then(|t| self.confirmed_in(track, t))
        {
            Some(input) => (input.clone(), InputStatus::Predicted),
            None => missing(),
        }
    }

    /// Fills `out_inputs` and `out_status` with [`predicted`](Self::predicted) for every player at
    /// `tick`, in player order (both cleared first, both end with `players()` entries). Does not allocate
    /// when the vectors have room.
    pub fn fill_predicted(
        &self,
        tick: Tick,
        out_inputs: &mut Vec<I>,
        out_status: &mut Vec<InputStatus>,
    ) {
        out_inputs.clear();
        out_status.clear();
        for player in 0..self.players {
            let (input, status) = self.predicted(player, tick);
            out_inputs.push(input);
            out_status.push(status);
        }
    }

    /// Fills `out_inputs` and `out_status` with every player's [`confirmed`](Self::confirmed)
    /// input at `tick` (status `Confirmed`), or the default input with status `Missing` where
    /// none is known, in player order (both cleared first). Does not allocate when the vectors
    /// have room.
    pub fn fill_known(
        &self,
        tick: Tick,
        out_inputs: &mut Vec<I>,
        out_status: &mut Vec<InputStatus>,
    ) {
        out_inputs.clear();
        out_status.clear();
        for player in 0..self.players {
            match self.confirmed(player, tick) {
                Some(input) => {
                    out_inputs.push(input.clone());
                    out_status.push(InputStatus::Confirmed);
                }
                None => {
                    out_inputs.push(I::default());
                    out_status.push(InputStatus::Missing);
                }
            }
        }
    }

    /// Drops the storage of every tick `<= min(tick, max_verifiable_tick())` and returns the new
    /// [`discarded_through`](Self::discarded_through).
    ///
    /// Ticks that are not verifiable yet are never discarded (their confirmations are still needed).
    /// The confirmed input of each player at the new discarded tick is kept, so repeat-last prediction
    /// and [`confirmed`](Self::confirmed) of that tick keep working. A `tick` at or before the current
    /// discarded tick does nothing.
    pub fn discard_through(&mut self, tick: Tick) -> Tick {
        let target = tick.min(self.max_verifiable);
        if target <= self.base {
            return self.base;
        }
        let count = (target - self.base) as usize; // 1..=capacity: target <= every watermark
        for track in &mut self.tracks {
            if let Some(slot) = track.slots.get(count - 1)
                && let Some(input) = slot.confirmed.clone()
            {
                track.base_input = Some(input);
                track.base_disconnected = slot.disconnected;
            }
            let drop = count.min(track.slots.len());
            track.slots.drain(..drop);
        }
        self.base = target;
        self.base
    }
}

impl<I: SimInput> InputBuffer<I> {
    /// Continues the buffer after tick `tick` from a loaded snapshot
    /// ([snapshots](crate::rules#snapshots)): every tick up to `tick` counts as confirmed and is
    /// discarded (its inputs are in the snapshot's world), `inputs` (the confirmed inputs of
    /// `tick`, one per player; missing ones are `Default`) become the base of repeat-last
    /// prediction, and confirmations already held for later ticks are kept. A `tick` at or
    /// before [`discarded_through`](Self::discarded_through) does nothing.
    pub fn resume_after(&mut self, tick: Tick, inputs: &[I]) {
        if tick <= self.base {
            return;
        }
        let count = usize::try_from(i64::from(tick) - i64::from(self.base)).unwrap_or(usize::MAX);
        for (p, track) in self.tracks.iter_mut().enumerate() {
            let drop = count.min(track.slots.len());
            track.slots.drain(..drop);
            let mut through = track.confirmed_through.max(tick);
            while track
                .slots
                .get((through - tick) as usize)
                .is_some_and(|s| s.confirmed.is_some())
            {
                through += 1;
            }
            track.confirmed_through = through;
            track.latest_confirmed = track.latest_confirmed.max(tick);
            track.base_input = Some(
                inputs
                    .get(p)
                    .cloned()
                    .unwrap_or_else(|| self.default.clone()),
            );
            track.base_disconnected = false;
        }
        self.base = tick;
        self.max_verifiable = self
            .tracks
            .iter()
            .map(|t| t.confirmed_through)
            .min()
            .unwrap_or(tick);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Buf = InputBuffer<u32>;

    fn buf(players: u8, capacity: u32) -> Buf {
        InputBuffer::new(players, capacity).expect("valid buffer")
    }

    #[test]
    fn resume_after_continues_from_the_next_tick_and_keeps_later_confirmations() {
        let mut b = buf(2, 16);
        b.confirm(0, 1, 5).unwrap();
        b.confirm(0, 12, 7).unwrap();
        b.confirm(1, 11, 3).unwrap();
        b.resume_after(10, &[4, 9]);
        assert_eq!(b.discarded_through(), 10);
        assert_eq!(b.confirmed_through(0), Some(10));
        assert_eq!(b.confirmed_through(1), Some(11));
        assert_eq!(b.max_verifiable_tick(), 10);
        assert_eq!(b.confirmed(0, 12), Some(&7));
        // Repeat-last prediction starts from the given inputs.
        assert_eq!(b.predicted(0, 11), (4, InputStatus::Predicted));
        assert_eq!(
            b.confirm(0, 5, 1),
            Err(InputError::TooOld {
                tick: 5,
                discarded_through: 10
            })
        );
        b.confirm(0, 11, 2).unwrap();
        assert_eq!(b.max_verifiable_tick(), 11);
        assert_eq!(b.confirmed_through(0), Some(12));
    }

    #[test]
    fn constructor_rejects_zero_players_and_bad_capacity() {
        assert_eq!(Buf::new(0, 8).unwrap_err(), InputError::NoPlayers);
        assert_eq!(
            Buf::new(2, 0).unwrap_err(),
            InputError::InvalidCapacity {
                capacity: 0,
                max: MAX_CAPACITY_TICKS
            }
        );
        assert_eq!(
            Buf::new(2, MAX_CAPACITY_TICKS + 1).unwrap_err(),
            InputError::InvalidCapacity {
                capacity: MAX_CAPACITY_TICKS + 1,
                max: MAX_CAPACITY_TICKS
            }
        );
        let b = buf(3, 8);
        assert_eq!(b.players(), 3);
        assert_eq!(b.capacity_ticks(), 8);
        assert_eq!(b.storable_ticks(), 1..=8);
        assert_eq!(b.max_verifiable_tick(), 0);
    }

    #[test]
    fn max_verifiable_needs_all_players_contiguously() {
        let mut b = buf(2, 16);
        assert_eq!(b.confirm(0, 1, 10), Ok(ConfirmOutcome::New));
        assert_eq!(b.max_verifiable_tick(), 0, "player 1 has nothing yet");
        b.confirm(1, 1, 20).unwrap();
        assert_eq!(b.max_verifiable_tick(), 1);
        // Gap at tick 2 for player 0.
        for t in 3..=5 {
            b.confirm(0, t, 10 + t as u32).unwrap();
        }
        for t in 2..=5 {
            b.confirm(1, t, 20 + t as u32).unwrap();
        }
        assert_eq!(b.confirmed_through(0), Some(1));
        assert_eq!(b.confirmed_through(1), Some(5));
        assert_eq!(b.max_verifiable_tick(), 1, "the gap holds it back");
        b.confirm(0, 2, 12).unwrap();
        assert_eq!(b.confirmed_through(0), Some(5));
        assert_eq!(b.max_verifiable_tick(), 5, "filling the gap jumps it");
        assert_eq!(b.confirmed_set(5), Some(vec![15, 25]));
        assert_eq!(b.confirmed_set(6), None);
        let mut out = Vec::with_capacity(2);
        assert!(b.confirmed_set_into(2, &mut out));
        assert_eq!(out, vec![12, 22]);
        assert!(!b.confirmed_set_into(6, &mut out));
        assert!(out.is_empty());
        assert_eq!(
            b.confirmed_set(0),
            Some(vec![0, 0]),
            "setup tick is Default"
        );
        assert_eq!(b.confirmed_through(2), None);
    }

    #[test]
    fn conflicting_confirm_is_rejected_and_first_value_kept() {
        let mut b = buf(1, 8);
        assert_eq!(b.confirm(0, 3, 7), Ok(ConfirmOutcome::New));
        assert_eq!(b.confirm(0, 3, 7), Ok(ConfirmOutcome::Duplicate));
        assert_eq!(
            b.confirm(0, 3, 8),
            Err(InputError::ConflictingConfirmation { player: 0, tick: 3 })
        );
        assert_eq!(b.confirmed(0, 3), Some(&7));
        assert_eq!(b.predicted(0, 3), (7, InputStatus::Confirmed));
    }

    #[test]
    fn unknown_player_is_an_error() {
        let mut b = buf(2, 8);
        let err = InputError::UnknownPlayer {
            player: 2,
            players: 2,
        };
        assert_eq!(b.confirm(2, 1, 1), Err(err.clone()));
        assert_eq!(b.set_local(2, 1, 1), Err(err.clone()));
        assert_eq!(b.record_prediction_used(2, 1, &1), Err(err));
        assert_eq!(b.confirmed(2, 1), None);
        assert_eq!(b.predicted(255, 1), (0, InputStatus::Missing));
        assert_eq!(b.max_verifiable_tick(), 0);
    }

    #[test]
    fn too_old_and_out_of_range_ticks_are_errors() {
        let mut b = buf(1, 4);
        assert_eq!(
            b.confirm(0, 0, 1),
            Err(InputError::TickOutOfRange {
                tick: 0,
                first: 1,
                last: 4
            })
        );
        assert_eq!(
            b.confirm(0, -3, 1),
            Err(InputError::TickOutOfRange {
                tick: -3,
                first: 1,
                last: 4
            })
        );
        assert_eq!(
            b.confirm(0, 5, 1),
            Err(InputError::TickOutOfRange {
                tick: 5,
                first: 1,
                last: 4
            })
        );
        assert_eq!(
            b.set_local(0, Tick::MAX, 1),
            Err(InputError::TickOutOfRange {
                tick: Tick::MAX,
                first: 1,
                last: 4
            })
        );
        assert_eq!(b.confirm(0, 4, 1), Ok(ConfirmOutcome::New));
        for t in 1..=3 {
            b.confirm(0, t, 1).unwrap();
        }
        assert_eq!(b.discard_through(3), 3);
        assert_eq!(b.storable_ticks(), 4..=7);
        assert_eq!(
            b.confirm(0, 3, 1),
            Err(InputError::TooOld {
                tick: 3,
                discarded_through: 3
            })
        );
        assert_eq!(
            b.record_prediction_used(0, 1, &1),
            Err(InputError::TooOld {
                tick: 1,
                discarded_through: 3
            })
        );
        assert_eq!(b.confirm(0, 7, 2), Ok(ConfirmOutcome::New));
        assert_eq!(
            b.confirm(0, 8, 2),
            Err(InputError::TickOutOfRange {
                tick: 8,
                first: 4,
                last: 7
            })
        );
    }

    #[test]
    fn prediction_repeats_last_confirmed_and_is_missing_before_any() {
        let mut b = buf(2, 16);
        assert_eq!(b.predicted(0, 0), (0, InputStatus::Confirmed));
        assert_eq!(b.predicted(0, 1), (0, InputStatus::Missing));
        assert_eq!(b.predicted(0, 100), (0, InputStatus::Missing));
        assert_eq!(b.predicted(0, -1), (0, InputStatus::Missing));
        b.confirm(0, 1, 5).unwrap();
        b.confirm(0, 2, 6).unwrap();
        assert_eq!(b.predicted(0, 2), (6, InputStatus::Confirmed));
        assert_eq!(b.predicted(0, 3), (6, InputStatus::Predicted));
        assert_eq!(b.predicted(0, 1000), (6, InputStatus::Predicted));
        assert_eq!(b.predicted(1, 3), (0, InputStatus::Missing));
        // Out of order: tick 6 confirmed, 3..=5 not.
        b.confirm(0, 6, 9).unwrap();
        assert_eq!(b.predicted(0, 4), (6, InputStatus::Predicted));
        assert_eq!(b.predicted(0, 6), (9, InputStatus::Confirmed));
        assert_eq!(b.predicted(0, 7), (9, InputStatus::Predicted));
        b.confirm(0, 4, 8).unwrap();
        assert_eq!(b.predicted(0, 5), (8, InputStatus::Predicted));
        assert_eq!(b.predicted(0, 4), (8, InputStatus::Confirmed));
        assert_eq!(b.predicted(0, 3), (6, InputStatus::Predicted));
        // Watermark is 2; the scan back from tick 7 passes unconfirmed 7 and finds 6 (not tick 2).
        b.confirm(0, 9, 11).unwrap();
        assert_eq!(b.predicted(0, 8), (9, InputStatus::Predicted));
        assert_eq!(b.predicted(0, 10), (11, InputStatus::Predicted));
        b.confirm(0, 8, 10).unwrap();
        assert_eq!(b.predicted(0, 8), (10, InputStatus::Confirmed));
        assert_eq!(b.predicted(0, 7), (9, InputStatus::Predicted));

        let mut inputs = Vec::new();
        let mut status = Vec::new();
        b.fill_predicted(5, &mut inputs, &mut status);
        assert_eq!(inputs, vec![8, 0]);
        assert_eq!(status, vec![InputStatus::Predicted, InputStatus::Missing]);
    }

    #[test]
    fn local_input_is_used_in_prediction_until_confirmed() {
        let mut b = buf(2, 16);
        b.confirm(1, 1, 3).unwrap();
        b.set_local(1, 2, 42).unwrap();
        assert_eq!(b.predicted(1, 2), (42, InputStatus::Predicted));
        assert_eq!(
            b.predicted(1, 3),
            (3, InputStatus::Predicted),
            "repeat last confirmed"
        );
        b.set_local(1, 2, 43).unwrap();
        assert_eq!(b.predicted(1, 2), (43, InputStatus::Predicted));
        b.confirm(1, 2, 44).unwrap();
        assert_eq!(b.predicted(1, 2), (44, InputStatus::Confirmed));
        assert_eq!(b.confirmed(1, 2), Some(&44));
        assert_eq!(b.confirmed(0, 2), None);
    }

    #[test]
    fn misprediction_counted_once_and_only_when_different() {
        let mut b = buf(2, 16);
        // Same value used and confirmed: no misprediction.
        b.record_prediction_used(0, 1, &5).unwrap();
        b.confirm(0, 1, 5).unwrap();
        assert_eq!(b.mispredicted_inputs(), 0);
        // Different value used (twice): counted once.
        b.record_prediction_used(0, 2, &5).unwrap();
        b.record_prediction_used(0, 2, &5).unwrap();
        b.confirm(0, 2, 6).unwrap();
        assert_eq!(b.mispredicted_inputs(), 1);
        b.confirm(0, 2, 6).unwrap(); // duplicate
        assert_eq!(b.mispredicted_inputs(), 1);
        b.record_prediction_used(0, 2, &1).unwrap(); // already confirmed: ignored
        assert_eq!(b.mispredicted_inputs(), 1);
        // No prediction used: never counted.
        b.confirm(0, 3, 99).unwrap();
        assert_eq!(b.mispredicted_inputs(), 1);
        // Two different values used, the last one right: the first was still a misprediction.
        b.record_prediction_used(1, 1, &1).unwrap();
        b.record_prediction_used(1, 1, &2).unwrap();
        b.confirm(1, 1, 2).unwrap();
        assert_eq!(b.mispredicted_inputs(), 2);
        // A rejected conflicting confirmation does not count.
        assert!(b.confirm(1, 1, 3).is_err());
        assert_eq!(b.mispredicted_inputs(), 2);
    }

    #[test]
    fn disconnected_marks_follow_confirmed_ticks_in_both_worlds() {
        let mut b = buf(2, 16);
        for tick in 1..=4 {
            b.confirm(0, tick, 1).unwrap();
        }
        for tick in 1..=3 {
            b.confirm(1, tick, 7).unwrap();
        }
        b.mark_disconnected(1, 3).unwrap();
        b.mark_disconnected(1, 3).unwrap(); // again: nothing changes
        assert_eq!(b.disconnected(2), 0);
        assert_eq!(b.disconnected(3), 0b10);
        // Not confirmed for player 1 yet: the verified mask does not know it.
        assert_eq!(b.disconnected(4), 0);
        // The predicted world uses the last confirmed state from tick 3 on.
        assert_eq!(b.predicted_disconnected(2), 0);
        assert_eq!(b.predicted_disconnected(3), 0b10);
        assert_eq!(b.predicted_disconnected(4), 0b10);
        assert_eq!(b.predicted_disconnected(40), 0b10);
        // A mark on a tick not confirmed is not read until the tick is confirmed.
        b.mark_disconnected(0, 6).unwrap();
        assert_eq!(b.predicted_disconnected(6), 0b10);
        // Player 1 confirmed connected again at tick 4: the predictions follow.
        b.confirm(1, 4, 7).unwrap();
        assert_eq!(b.disconnected(4), 0);
        assert_eq!(b.predicted_disconnected(5), 0);
        // Discarding keeps the state of the discarded tick for the predictions after it.
        let mut b = buf(2, 16);
        for tick in 1..=3 {
            b.confirm(0, tick, 1).unwrap();
            b.confirm(1, tick, 7).unwrap();
        }
        b.mark_disconnected(0, 3).unwrap();
        assert_eq!(b.discard_through(3), 3);
        assert_eq!(b.disconnected(3), 0b01);
        assert_eq!(b.predicted_disconnected(4), 0b01);
        assert_eq!(b.predicted_disconnected(0), 0);
        assert!(b.mark_disconnected(0, 3).is_err(), "discarded");
        assert!(b.mark_disconnected(2, 4).is_err(), "unknown player");
    }

    #[test]
    fn discard_keeps_repeat_last_prediction_and_memory_bounded() {
        let capacity = 8;
        let mut b = buf(2, capacity);
        for t in 1..=10_000 {
            b.confirm(0, t, t as u32).unwrap();
            b.set_local(1, t, 7).unwrap();
            b.confirm(1, t, 1_000_000 + t as u32).unwrap();
            assert_eq!(b.max_verifiable_tick(), t);
            if t % 3 == 0 {
                assert_eq!(b.discard_through(t - 1), t - 1);
            }
            for track in &b.tracks {
                assert!(track.slots.len() <= capacity as usize);
                assert!(track.slots.capacity() <= 2 * capacity as usize);
            }
        }
        assert_eq!(b.discard_through(10_000), 10_000);
        assert!(b.tracks.iter().all(|t| t.slots.is_empty()));
        assert_eq!(b.predicted(0, 10_001), (10_000, InputStatus::Predicted));
        assert_eq!(b.predicted(1, 10_005), (1_010_000, InputStatus::Predicted));
        assert_eq!(b.predicted(0, 10_000), (10_000, InputStatus::Confirmed));
        assert_eq!(b.confirmed(0, 10_000), Some(&10_000));
        assert_eq!(
            b.predicted(0, 9_999),
            (0, InputStatus::Missing),
            "discarded"
        );
        assert_eq!(b.confirmed(0, 9_999), None);
        assert_eq!(b.storable_ticks(), 10_001..=10_008);
    }

    #[test]
    fn discard_never_passes_max_verifiable_tick() {
        let mut b = buf(2, 8);
        for t in 1..=5 {
            b.confirm(0, t, 1).unwrap();
        }
        b.confirm(1, 1, 2).unwrap();
        b.confirm(1, 2, 2).unwrap();
        assert_eq!(b.discard_through(5), 2);
        assert_eq!(b.discarded_through(), 2);
        assert_eq!(b.discard_through(1), 2, "going back does nothing");
        assert_eq!(b.confirm(1, 3, 2), Ok(ConfirmOutcome::New));
        assert_eq!(b.max_verifiable_tick(), 3);
        assert_eq!(b.predicted(1, 7), (2, InputStatus::Predicted));
    }

    /// Reference: the greatest `T` with every `(p, 1..=T)` confirmed.
    fn reference_max(confirmed: &[Vec<bool>]) -> Tick {
        confirmed
            .iter()
            .map(|ticks| ticks.iter().skip(1).take_while(|c| **c).count() as Tick)
            .min()
            .unwrap_or(0)
    }

    fn scenario() -> impl Strategy<Value = (u8, Vec<(u8, Tick)>, Vec<bool>)> {
        (1u8..=4, 1i32..=20).prop_flat_map(|(players, ticks)| {
            let pairs: Vec<(u8, Tick)> = (0..players)
                .flat_map(|p| (1..=ticks).map(move |t| (p, t)))
                .collect();
            let len = pairs.len();
            let order = proptest::sample::subsequence(pairs, 0..=len).prop_shuffle();
            (
                Just(players),
                order,
                proptest::collection::vec(any::<bool>(), len),
            )
        })
    }

    proptest! {
        #[test]
        fn random_confirm_orders_match_reference((players, order, discard) in scenario()) {
            let mut b: Buf = InputBuffer::new(players, 32).unwrap();
            let mut reference = vec![vec![false; 25]; usize::from(players)];
            for (step, (p, t)) in order.iter().copied().enumerate() {
                let value = u32::from(p) * 1000 + t as u32;
                prop_assert_eq!(b.confirm(p, t, value), Ok(ConfirmOutcome::New));
                reference[usize::from(p)][t as usize] = true;
                prop_assert_eq!(b.max_verifiable_tick(), reference_max(&reference));
                // Duplicates are accepted (or too old after a discard) and change nothing.
                let again = b.confirm(p, t, value);
                let too_old = matches!(again, Err(InputError::TooOld { .. }));
                prop_assert!(
                    again == Ok(ConfirmOutcome::Duplicate) || (t <= b.discarded_through() && too_old),
                    "unexpected duplicate outcome {:?}",
                    again
                );
                prop_assert_eq!(b.max_verifiable_tick(), reference_max(&reference));
                // Prediction: confirmed, else repeat the latest confirmed before, else Missing.
                let base = b.discarded_through();
                for q in 0..players {
                    for tick in 1..=24 {
                        let known = &reference[usize::from(q)];
                        let expected = if tick < base {
                            (0, InputStatus::Missing)
                        } else if known.get(tick as usize) == Some(&true) {
                            (u32::from(q) * 1000 + tick as u32, InputStatus::Confirmed)
                        } else {
                            match (1..tick).rev().find(|&u| known[u as usize]) {
                                Some(u) => (u32::from(q) * 1000 + u as u32, InputStatus::Predicted),
                                None => (0, InputStatus::Missing),
                            }
                        };
                        prop_assert_eq!(b.predicted(q, tick), expected, "player {} tick {}", q, tick);
                    }
                }
                if discard[step] {
                    let target = b.max_verifiable_tick() - 1;
                    b.discard_through(target);
                    prop_assert!(b.discarded_through() <= b.max_verifiable_tick());
                }
            }
        }
    }
}
