//! Players leaving and coming back, as the relay announces them to every client
//! ([rejoining](crate::rules#rejoining-a-running-session)).
//!
//! These Messages are for the game's interface (a "player 2 left" banner, a bot taking over):
//! the simulation learns the same from the confirmed inputs, tick by tick, through
//! `PlayerInputs::is_connected`, which every peer sees at the same tick.

use bevy::ecs::message::Message;
use bevy::reflect::Reflect;

use crate::tick::{PlayerIndex, Tick};

/// The relay counts `player` as gone since its server tick `tick`: its connection closed, or
/// the relay heard nothing from it for its silence timeout. Its inputs are replaced with its
/// last one from then on. Written once per announcement.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub struct PlayerLeft {
    /// The player's slot.
    pub player: PlayerIndex,
    /// The relay's server tick when it noticed.
    pub tick: Tick,
}

/// `player` is back in its slot since the relay's server tick `tick`: it rejoined with its
/// reconnect token, or its silent connection was heard from again. Its own inputs are used
/// again from the next confirmed set. Written once per announcement.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub struct PlayerRejoined {
    /// The player's slot.
    pub player: PlayerIndex,
    /// The relay's server tick when it came back.
    pub tick: Tick,
}
