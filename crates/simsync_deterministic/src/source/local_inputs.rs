//! Where a peer's own inputs come from: [`LocalInputs`] written by the game each frame, or a
//! scripted [`TickInputSource`] asked per tick.

use std::sync::Arc;

use bevy::prelude::*;

use crate::error::SessionError;
use crate::input::SimInput;
use crate::tick::{PlayerIndex, Tick};

/// Inputs of the local players, written by the game (e.g. from leafwing's `ActionState`
/// through an `InputEncoder`) before [`DeterministicSet::SessionUpdate`](crate::DeterministicSet);
/// sampled once per polled tick.
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

/// A per-tick source of local inputs (main-app resource), for replays and scripted players: when
/// present, the session asks it for the input of `(player, tick)` for every tick it polls,
/// instead of sampling [`LocalInputs`] once per update (which repeats one value when an update
/// polls several ticks, e.g. while the clock catches up).
#[derive(Resource, Clone)]
pub struct TickInputSource<I: SimInput>(pub Arc<dyn Fn(PlayerIndex, Tick) -> I + Send + Sync>);

impl<I: SimInput> TickInputSource<I> {
    /// A source calling `f(player, tick)`.
    pub fn new(f: impl Fn(PlayerIndex, Tick) -> I + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }
}

/// The local inputs of one session update, taken from the main world once at the start of the
/// poll: the [`TickInputSource`] if present, else the current [`LocalInputs`], else defaults.
pub(crate) enum LocalInputProvider<I: SimInput> {
    /// Asked per player and tick.
    Scripted(TickInputSource<I>),
    /// One value per player for every tick of this update.
    Current(Option<LocalInputs<I>>),
}

impl<I: SimInput> LocalInputProvider<I> {
    /// Reads the two resources (clones: an `Arc` or one input per player).
    pub(crate) fn from_world(world: &World) -> Self {
        match world.get_resource::<TickInputSource<I>>() {
            Some(source) => Self::Scripted(source.clone()),
            None => Self::Current(world.get_resource::<LocalInputs<I>>().cloned()),
        }
    }

    /// The local input of `player` for `tick`.
    pub(crate) fn input(&self, player: PlayerIndex, tick: Tick) -> I {
        match self {
            Self::Scripted(source) => (source.0)(player, tick),
            Self::Current(inputs) => inputs
                .as_ref()
                .and_then(|l| l.get(player).cloned())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_source_wins_over_current_inputs() {
        let mut world = World::new();
        let mut current = LocalInputs::<u8>::new(2);
        current.set(1, 7).unwrap();
        world.insert_resource(current);
        assert_eq!(LocalInputProvider::<u8>::from_world(&world).input(1, 5), 7);
        world.insert_resource(TickInputSource::<u8>::new(|p, t| p + t as u8));
        assert_eq!(LocalInputProvider::<u8>::from_world(&world).input(1, 5), 6);
    }

    #[test]
    fn no_resource_and_unknown_player_give_default() {
        let world = World::new();
        assert_eq!(LocalInputProvider::<u8>::from_world(&world).input(0, 1), 0);
        let mut world = World::new();
        world.insert_resource(LocalInputs::<u8>::new(1));
        assert_eq!(LocalInputProvider::<u8>::from_world(&world).input(3, 1), 0);
        assert!(LocalInputs::<u8>::new(1).set(3, 1).is_err());
    }
}
