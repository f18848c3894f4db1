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
///
/// [`is_connected`](Self::is_connected) tells whether the relay counted a player as connected at
/// this tick (see [disconnected players](crate::rules#disconnected-players)): the same value in
/// the verified and the predicted world and across re-simulation, so a game may run a bot for a
/// disconnected player's slot deterministically.
#[derive(Resource, Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(bound = "")]
pub struct PlayerInputs<I: SimInput> {
    tick: Tick,
    inputs: Vec<I>,
    previous: Vec<I>,
    status: Vec<InputStatus>,
    /// Bit `i` set: player `i` is disconnected at this tick.
    disconnected: u64,
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
            disconnected: 0,
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

    /// Whether `player` is connected at this tick: `false` from the first confirmed tick the
    /// relay marked it disconnected (in the predicted world: from its last confirmed state on),
    /// and for an unknown player. A local session has no relay: every player is connected there
    /// unless the game marks it otherwise
    /// ([`DeterministicSession::set_player_connected`](crate::DeterministicSession::set_player_connected)).
    pub fn is_connected(&self, player: PlayerIndex) -> bool {
        usize::from(player) < self.inputs.len()
            && (player >= 64 || self.disconnected & (1u64 << player) == 0)
    }

    /// `(player, input)` for every player, in player order.
    pub fn iter(&self) -> impl Iterator<Item = (PlayerIndex, &I)> {
        self.inputs
            .iter()
            .enumerate()
            .map(|(i, input)| (i as PlayerIndex, input))
    }

    /// Moves this tick's inputs to `previous` and takes the new set; `disconnected` has bit `i`
    /// set for each disconnected player `i`.
    pub(crate) fn advance(
        &mut self,
        tick: Tick,
        inputs: &[I],
        status: &[InputStatus],
        disconnected: u64,
    ) {
        std::mem::swap(&mut self.previous, &mut self.inputs);
        self.inputs.clone_from_slice(inputs);
        self.status.copy_from_slice(status);
        self.disconnected = disconnected;
        self.tick = tick;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_player_is_connected_unless_its_bit_is_set() {
        let mut inputs = PlayerInputs::<u8>::new(3);
        assert!((0..3).all(|p| inputs.is_connected(p)));
        assert!(!inputs.is_connected(3), "unknown player");
        let status = [InputStatus::Confirmed; 3];
        inputs.advance(5, &[1, 2, 3], &status, 0b010);
        assert!(inputs.is_connected(0));
        assert!(!inputs.is_connected(1));
        assert!(inputs.is_connected(2));
        assert_eq!(inputs.get(1), Some(&2), "the replaced input stays readable");
        inputs.advance(6, &[1, 2, 3], &status, 0);
        assert!(inputs.is_connected(1));
    }
}
