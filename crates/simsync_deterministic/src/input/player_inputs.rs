//! The input set of the tick being simulated, as simulation systems read it.

use bevy::prelude::*;

use super::{InputStatus, SimInput};
use crate::tick::{PlayerIndex, Tick};

/// The inputs of every player for the tick being simulated (a resource of both simulation
/// worlds, written by the session before each [`SimulationTick`](crate::SimulationTick)).
///
/// `previous` holds each player's input of the tick before, from the same source (confirmed in
/// the verified world, the same predicted or confirmed values in the predicted world), so
/// "just pressed" derived from the pair fires exactly once per press, also across re-simulation.
#[derive(Resource, Debug, Clone, PartialEq)]
pub struct PlayerInputs<I: SimInput> {
    tick: Tick,
    inputs: Vec<I>,
    previous: Vec<I>,
    status: Vec<InputStatus>,
}

impl<I: SimInput> PlayerInputs<I> {
    /// Inputs of `players` players, all default, at tick 0.
    pub fn new(players: PlayerIndex) -> Self {
        let n = usize::from(players);
        Self {
            tick: 0,
            inputs: vec![I::default(); n],
            previous: vec![I::default(); n],
            status: vec![InputStatus::Confirmed; n],
        }
    }

    /// The tick these inputs belong to.
    pub fn tick(&self) -> Tick {
        self.tick
    }

    /// Number of players.
    pub fn len(&self) -> usize {
        self.inputs.len()
    }

    /// Whether there are no players.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// The input of `player` for this tick, or `None` for an unknown player.
    pub fn get(&self, player: PlayerIndex) -> Option<&I> {
        self.inputs.get(usize::from(player))
    }

    /// The input of `player` for the tick before.
    pub fn previous(&self, player: PlayerIndex) -> Option<&I> {
        self.previous.get(usize::from(player))
    }

    /// Whether `player`'s input is confirmed, predicted or missing (default).
    pub fn status(&self, player: PlayerIndex) -> Option<InputStatus> {
        self.status.get(usize::from(player)).copied()
    }

    /// `(player, input)` for every player, in player order.
    pub fn iter(&self) -> impl Iterator<Item = (PlayerIndex, &I)> {
        self.inputs
            .iter()
            .enumerate()
            .map(|(i, input)| (i as PlayerIndex, input))
    }

    /// Moves this tick's inputs to `previous` and takes the new set.
    pub(crate) fn advance(&mut self, tick: Tick, inputs: &[I], status: &[InputStatus]) {
        std::mem::swap(&mut self.previous, &mut self.inputs);
        self.inputs.clone_from_slice(inputs);
        self.status.copy_from_slice(status);
        self.tick = tick;
    }
}
