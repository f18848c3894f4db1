//! The input latch: local input sampled every frame, handed to ticks so that no edge is lost
//! (see [local input is latched](crate::rules#local-input-is-latched)).

use core::any::Any;

use super::{PackedInput, SimInput};
use crate::tick::PlayerIndex;

/// How the frames sampled between two polled ticks combine into the first tick's input:
/// `merge(latched, frame)` folds a later `frame` into the value `latched` so far.
///
/// A rule must not depend on anything but its two arguments (the result is sent to every peer
/// as this player's input; only the local peer runs the rule).
pub type FrameMergeFn<I> = fn(&mut I, &I);

/// The merge rule a session uses unless the game sets its own
/// ([`FrameMerge`](crate::FrameMerge)): [`PackedInput::merge_frame`] for [`PackedInput`],
/// [`merge_latest_non_default`] for any other input type.
pub fn default_frame_merge<I: SimInput>(latched: &mut I, frame: &I) {
    let packed_frame = (frame as &dyn Any).downcast_ref::<PackedInput>();
    if let (Some(latched), Some(frame)) = (
        (latched as &mut dyn Any).downcast_mut::<PackedInput>(),
        packed_frame,
    ) {
        latched.merge_frame(frame);
        return;
    }
    merge_latest_non_default(latched, frame);
}

/// The generic merge rule: the latest frame that is not `Default` wins; the latched value is
/// `Default` only if every frame of the interval was. A one-frame input therefore always reaches
/// a tick, and a release (back to `Default`) shows in the tick after.
pub fn merge_latest_non_default<I: SimInput>(latched: &mut I, frame: &I) {
    if *frame != I::default() {
        latched.clone_from(frame);
    }
}

/// One player's slot of the latch.
#[derive(Debug, Clone, PartialEq)]
struct Slot<I> {
    /// The last frame sampled.
    current: I,
    /// The frames sampled since a tick last took this slot, merged; `None` when no frame was
    /// sampled since.
    latched: Option<I>,
}

/// Local input sampled once per frame and latched into the next polled tick.
///
/// [`sample`](Self::sample) records a frame's input; [`take`](Self::take) gives the input of the
/// next polled tick: the merge of every frame sampled since the last `take` (with the session's
/// [`FrameMergeFn`]), or, when no frame was sampled since (an update polling several ticks), the
/// last frame as it is. So at any ratio of frame rate to tick rate a frame's input reaches exactly
/// one tick's merge, an edge goes to the first tick polled after it and a held input is seen in
/// every tick. Pure: no Bevy, no clock.
#[derive(Debug, Clone)]
pub struct InputLatch<I: SimInput> {
    slots: Vec<Slot<I>>,
    merge: FrameMergeFn<I>,
}

impl<I: SimInput> InputLatch<I> {
    /// A latch for `players` players merging frames with `merge`; every player starts at
    /// `Default` with nothing latched.
    pub fn new(players: PlayerIndex, merge: FrameMergeFn<I>) -> Self {
        let slot = Slot {
            current: I::default(),
            latched: None,
        };
        Self {
            slots: vec![slot; usize::from(players)],
            merge,
        }
    }

    /// Replaces the merge rule (what is latched so far stays).
    pub fn set_merge(&mut self, merge: FrameMergeFn<I>) {
        self.merge = merge;
    }

    /// Records `frame` as `player`'s input of this frame. Returns `false` (and records nothing)
    /// for a player outside `0..players`.
    pub fn sample(&mut self, player: PlayerIndex, frame: &I) -> bool {
        let Some(slot) = self.slots.get_mut(usize::from(player)) else {
            return false;
        };
        slot.current.clone_from(frame);
        match &mut slot.latched {
            Some(latched) => (self.merge)(latched, frame),
            None => slot.latched = Some(frame.clone()),
        }
        true
    }

    /// The input of `player` for the next polled tick: the merged frames since the last `take`,
    /// else the last frame sampled; clears what was latched. `Default` for an unknown player.
    pub fn take(&mut self, player: PlayerIndex) -> I {
        match self.slots.get_mut(usize::from(player)) {
            Some(slot) => slot.latched.take().unwrap_or_else(|| slot.current.clone()),
            None => I::default(),
        }
    }

    /// What [`take`](Self::take) would return for `player` now, without clearing it (`None` for
    /// an unknown player).
    pub fn peek(&self, player: PlayerIndex) -> Option<&I> {
        let slot = self.slots.get(usize::from(player))?;
        Some(slot.latched.as_ref().unwrap_or(&slot.current))
    }
}

impl PackedInput {
    /// The frame-merge rule of [`PackedInput`] (the default for sessions using it, see
    /// [local input is latched](crate::rules#local-input-is-latched)): a button is pressed if
    /// it was pressed in any frame of the interval (OR of the bits); each axis keeps the last
    /// non-neutral (non-zero) value of the interval, and is neutral only if it was neutral in
    /// every frame. Since the latch restarts at every tick, a released button or stick reads
    /// released or neutral from the next tick on.
    pub fn merge_frame(&mut self, frame: &PackedInput) {
        self.buttons |= frame.buttons;
        for (latched, &axis) in self.axes.iter_mut().zip(frame.axes.iter()) {
            if axis != 0 {
                *latched = axis;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(buttons: u16, axes: [i8; 2]) -> PackedInput {
        PackedInput { buttons, axes }
    }

    fn packed_latch() -> InputLatch<PackedInput> {
        InputLatch::new(2, default_frame_merge::<PackedInput>)
    }

    #[test]
    fn a_press_and_release_between_two_ticks_reaches_the_next_tick_once() {
        let mut latch = packed_latch();
        for frame in [0, 1, 0, 0] {
            latch.sample(0, &packed(frame, [0, 0]));
        }
        assert_eq!(latch.take(0), packed(1, [0, 0]), "the tap is latched");
        latch.sample(0, &packed(0, [0, 0]));
        assert_eq!(latch.take(0), packed(0, [0, 0]), "and seen only once");
    }

    #[test]
    fn the_latched_edge_goes_to_the_first_tick_of_a_multi_tick_frame() {
        let mut latch = packed_latch();
        latch.sample(0, &packed(0b10, [0, 0]));
        latch.sample(0, &packed(0, [0, 0]));
        // One frame, three ticks: the first gets the merge, the others the last frame.
        assert_eq!(latch.take(0), packed(0b10, [0, 0]));
        assert_eq!(latch.take(0), packed(0, [0, 0]));
        assert_eq!(latch.take(0), packed(0, [0, 0]));
    }

    #[test]
    fn a_held_button_is_held_in_every_tick_and_frames_without_ticks_accumulate() {
        let mut latch = packed_latch();
        let held = packed(0b100, [0, 0]);
        latch.sample(0, &held);
        assert_eq!(latch.take(0), held);
        assert_eq!(latch.take(0), held, "a tick without a new frame repeats it");
        for _ in 0..5 {
            latch.sample(0, &held);
        }
        assert_eq!(latch.take(0), held, "five frames, one tick");
    }

    #[test]
    fn an_axis_keeps_its_last_non_neutral_value_and_returns_to_neutral_when_released() {
        let mut latch = packed_latch();
        latch.sample(0, &packed(0, [40, 0]));
        latch.sample(0, &packed(0, [90, -3]));
        latch.sample(0, &packed(0, [0, 0]));
        assert_eq!(
            latch.take(0),
            packed(0, [90, -3]),
            "a flick within the interval is seen"
        );
        latch.sample(0, &packed(0, [0, 0]));
        assert_eq!(latch.take(0), packed(0, [0, 0]), "released: neutral");
        assert_eq!(latch.take(0), packed(0, [0, 0]));
    }

    #[test]
    fn players_are_latched_separately_and_unknown_players_are_refused() {
        let mut latch = packed_latch();
        latch.sample(1, &packed(1, [5, 0]));
        assert_eq!(latch.peek(0), Some(&packed(0, [0, 0])));
        assert_eq!(latch.peek(1), Some(&packed(1, [5, 0])));
        assert!(!latch.sample(2, &packed(1, [0, 0])));
        assert_eq!(latch.peek(2), None);
        assert_eq!(latch.take(2), PackedInput::default());
        assert_eq!(latch.take(0), PackedInput::default());
        assert_eq!(latch.take(1), packed(1, [5, 0]));
    }

    #[test]
    fn the_generic_rule_keeps_the_latest_non_default_frame() {
        let mut latch = InputLatch::<u8>::new(1, default_frame_merge::<u8>);
        for frame in [0, 7, 3, 0] {
            latch.sample(0, &frame);
        }
        assert_eq!(latch.take(0), 3);
        assert_eq!(latch.take(0), 0, "the last frame was a release");
        latch.sample(0, &0);
        assert_eq!(latch.take(0), 0);
        let mut u = 0u8;
        merge_latest_non_default(&mut u, &9);
        assert_eq!(u, 9);
    }

    #[test]
    fn a_custom_rule_replaces_the_default() {
        let mut latch = InputLatch::<u8>::new(1, default_frame_merge::<u8>);
        latch.set_merge(|latched, frame| *latched = (*latched).max(*frame));
        for frame in [2, 9, 4] {
            latch.sample(0, &frame);
        }
        assert_eq!(latch.take(0), 9);
    }

    #[test]
    fn packed_merge_ors_buttons() {
        let mut a = packed(0b0011, [0, 10]);
        a.merge_frame(&packed(0b0100, [-20, 0]));
        assert_eq!(a, packed(0b0111, [-20, 10]));
    }
}
