//! Where a peer's own inputs come from: [`LocalInputs`] written by the game each frame and
//! latched into ticks by the [`FrameMerge`] rule, or a scripted [`TickInputSource`] asked per
//! tick.

use core::fmt;
use std::sync::Arc;

use bevy::prelude::*;

use crate::error::SessionError;
use crate::input::{FrameMergeFn, InputLatch, SimInput, default_frame_merge};
use crate::tick::{PlayerIndex, Tick};

/// Inputs of the local players as they are in this frame, written by the game (e.g. by the
/// [`LeafwingInputPlugin`](crate::LeafwingInputPlugin), or from leafwing's `ActionState`
/// through an `InputEncoder`) in [`DeterministicSet::ReadLocalInput`](crate::DeterministicSet),
/// before the session update.
///
/// The session samples it in every session update (every frame) and latches it into the next
/// polled tick ([local input is latched](crate::rules#local-input-is-latched)): a press and
/// release between two ticks reaches the next tick as pressed, a held input is seen in every
/// tick. Write the players of [`LocalPlayers`](crate::LocalPlayers).
#[derive(Resource, Debug, Clone, PartialEq)]
pub struct LocalInputs<I: SimInput> {
    inputs: Vec<I>,
}

impl<I: SimInput> LocalInputs<I> {
    /// Default inputs for `players` players.
    pub fn new(players: PlayerIndex) -> Self {
        Self {
            inputs: vec![I::default(); usize::from(players)],
        }
    }

    /// Sets the current input of `player`.
    ///
    /// # Errors
    /// [`SessionError::UnknownPlayer`] for an index outside `0..players`.
    pub fn set(&mut self, player: PlayerIndex, input: I) -> Result<(), SessionError> {
        let players = self.inputs.len() as PlayerIndex;
        let slot = self
            .inputs
            .get_mut(usize::from(player))
            .ok_or(SessionError::UnknownPlayer { player, players })?;
        *slot = input;
        Ok(())
    }

    /// The current input of `player`.
    pub fn get(&self, player: PlayerIndex) -> Option<&I> {
        self.inputs.get(usize::from(player))
    }
}

/// The rule combining the frames sampled between two polled ticks into one tick's input
/// (main-app resource, see [local input is latched](crate::rules#local-input-is-latched)).
///
/// The [`DeterministicPlugin`](crate::DeterministicPlugin) inserts
/// [`default_frame_merge`](crate::default_frame_merge) (buttons ORed and last non-neutral axes for
/// [`PackedInput`](crate::PackedInput), the latest non-default frame for other types); insert
/// your own to change it (read at every session update).
#[derive(Resource)]
pub struct FrameMerge<I: SimInput>(pub FrameMergeFn<I>);

impl<I: SimInput> Clone for FrameMerge<I> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I: SimInput> Copy for FrameMerge<I> {}

impl<I: SimInput> Default for FrameMerge<I> {
    fn default() -> Self {
        Self(default_frame_merge::<I>)
    }
}

impl<I: SimInput> fmt::Debug for FrameMerge<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FrameMerge")
    }
}

/// A per-tick source of local inputs (main-app resource), for replays and scripted players: when
/// present, the session asks it for the input of `(player, tick)` for every tick it polls,
/// instead of latching [`LocalInputs`].
#[derive(Resource, Clone)]
pub struct TickInputSource<I: SimInput>(pub Arc<dyn Fn(PlayerIndex, Tick) -> I + Send + Sync>);

impl<I: SimInput> TickInputSource<I> {
    /// A source calling `f(player, tick)`.
    pub fn new(f: impl Fn(PlayerIndex, Tick) -> I + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }
}

/// The local inputs of one session update: the [`TickInputSource`] if present, else the
/// session's latch, which has just sampled this frame's [`LocalInputs`].
pub(crate) enum LocalInputProvider<'a, I: SimInput> {
    /// Asked per player and tick.
    Scripted(TickInputSource<I>),
    /// Each polled tick takes the latched input (the merged frames for the first tick after
    /// them, the last frame for the others).
    Latched(&'a mut InputLatch<I>),
}

impl<'a, I: SimInput> LocalInputProvider<'a, I> {
    /// Reads the two resources: a scripted source (an `Arc` clone), or this frame's
    /// [`LocalInputs`] sampled into `latch` with the [`FrameMerge`] rule (the default rule
    /// without the resource; nothing sampled without [`LocalInputs`]).
    pub(crate) fn from_world(world: &World, latch: &'a mut InputLatch<I>) -> Self {
        if let Some(source) = world.get_resource::<TickInputSource<I>>() {
            return Self::Scripted(source.clone());
        }
        let merge = world.get_resource::<FrameMerge<I>>().map(|rule| rule.0);
        latch.set_merge(merge.unwrap_or(default_frame_merge::<I>));
        if let Some(local) = world.get_resource::<LocalInputs<I>>() {
            for (player, input) in local.inputs.iter().enumerate() {
                let Ok(player) = PlayerIndex::try_from(player) else {
                    break;
                };
                latch.sample(player, input);
            }
        }
        Self::Latched(latch)
    }

    /// The local input of `player` for `tick` (ask once per player and polled tick, in tick
    /// order: a latched input is handed out once).
    pub(crate) fn input(&mut self, player: PlayerIndex, tick: Tick) -> I {
        match self {
            Self::Scripted(source) => (source.0)(player, tick),
            Self::Latched(latch) => latch.take(player),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latch(players: PlayerIndex) -> InputLatch<u8> {
        InputLatch::new(players, default_frame_merge::<u8>)
    }

    #[test]
    fn scripted_source_wins_over_current_inputs() {
        let mut world = World::new();
        let mut current = LocalInputs::<u8>::new(2);
        current.set(1, 7).unwrap();
        world.insert_resource(current);
        let mut l = latch(2);
        assert_eq!(
            LocalInputProvider::from_world(&world, &mut l).input(1, 5),
            7
        );
        world.insert_resource(TickInputSource::<u8>::new(|p, t| p + t as u8));
        assert_eq!(
            LocalInputProvider::from_world(&world, &mut l).input(1, 5),
            6
        );
    }

    #[test]
    fn no_resource_and_unknown_player_give_default() {
        let world = World::new();
        let mut l = latch(1);
        assert_eq!(
            LocalInputProvider::from_world(&world, &mut l).input(0, 1),
            0
        );
        let mut world = World::new();
        world.insert_resource(LocalInputs::<u8>::new(1));
        assert_eq!(
            LocalInputProvider::from_world(&world, &mut l).input(3, 1),
            0
        );
        assert!(LocalInputs::<u8>::new(1).set(3, 1).is_err());
    }

    #[test]
    fn frames_are_latched_with_the_merge_rule_of_the_world() {
        let mut world = World::new();
        let mut l = latch(1);
        let set = |world: &mut World, v: u8| {
            let mut local = LocalInputs::<u8>::new(1);
            local.set(0, v).unwrap();
            world.insert_resource(local);
        };
        // Two frames without a polled tick, then a frame polling two ticks.
        set(&mut world, 5);
        let _ = LocalInputProvider::from_world(&world, &mut l);
        set(&mut world, 0);
        let _ = LocalInputProvider::from_world(&world, &mut l);
        let mut provider = LocalInputProvider::from_world(&world, &mut l);
        assert_eq!(provider.input(0, 1), 5, "the one-frame input is latched");
        assert_eq!(provider.input(0, 2), 0, "and handed out once");
        // A custom rule from the world.
        world.insert_resource(FrameMerge::<u8>(|a, b| *a = a.wrapping_add(*b)));
        set(&mut world, 2);
        let _ = LocalInputProvider::from_world(&world, &mut l);
        set(&mut world, 3);
        let mut provider = LocalInputProvider::from_world(&world, &mut l);
        assert_eq!(provider.input(0, 3), 5);
    }
}
