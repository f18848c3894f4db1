//! Ticks and player indices: the two numbers every other module counts in.

use bevy::prelude::*;

/// A simulation tick (frame number). Tick `n + 1` is simulated after tick `n`; one tick is one
/// fixed step of the session's [`TickRate`](simsync_time::TickRate). Tick `0` is the setup tick,
/// where every input is `Default`; the first tick that carries inputs is tick `1`.
pub type Tick = i32;

/// Index of a player in a session, `0..players`.
pub type PlayerIndex = u8;

/// The tick a simulation world last simulated (or is simulating, inside
/// [`SimulationTick`](crate::SimulationTick)). A resource of both simulation worlds, rolled back
/// and hashed.
#[derive(
    Resource,
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    Reflect,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct SimTick(pub Tick);
