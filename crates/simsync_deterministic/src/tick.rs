//! Ticks and player indices: the two numbers every other module counts in.

use bevy::prelude::*;

// A simulation tick (`i32`) and a player index (`u8`) are the wire's numbers: the relay counts
// in them too.
pub use simsync_net::{PlayerIndex, Tick};

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
