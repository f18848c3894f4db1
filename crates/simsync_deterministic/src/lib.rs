//! `simsync_deterministic`: the [`DeterministicPlugin`].
//!
//! A verified world and a predicted world, each a Bevy sub-app running the same
//! [`SimulationTick`] schedule (the game's systems and Rapier). Verified ticks run only on
//! complete, confirmed input sets; predicted ticks run ahead on predicted inputs. Each session
//! update decides by the [`SimulatorContext`] rules how many ticks to verify, whether to roll the
//! predicted world back to the verified one, and how far to predict.
//!
//! The parts:
//! - [`context`]: `SimulatorContext`, the per-update decisions (Quantum's rules), pure data.
//! - [`session`]: the session-update driver and its resources (stats, local inputs).
//! - [`worlds`]: building the two sub-apps and running one tick.
//! - [`snapshot`]: simulation entity ids, the rollback registry, copy strategies, Rapier state.
//! - [`input`]: the input buffer, the local relay and the leafwing adapter.
//! - [`net`]: the networked session: relay server and client over `simsync_net`.
//! - [`checksum`]: the fixed hasher and what a checksum covers.
//! - [`plugin`], [`config`], [`schedule`], [`error`].
//!
//! Read `docs/pitfalls.md` at the repository root before writing a simulation.
#![warn(missing_docs)]

pub mod checksum;
pub mod config;
pub mod context;
pub mod error;
pub mod input;
pub mod net;
pub mod player_inputs;
pub mod plugin;
pub mod schedule;
pub mod session;
pub mod snapshot;
pub mod worlds;

use bevy::prelude::*;

pub use checksum::{SimHash, StateHasher, TickChecksum};
pub use config::{LocalSessionConfig, SessionClock, SessionConfig, SessionMode};
pub use context::{SimulatorContext, SimulatorStage};
pub use error::SessionError;
pub use input::{InputStatus, PlayerIndex, SimInput, Tick};
pub use player_inputs::PlayerInputs;
pub use plugin::{DeterministicPlugin, SessionSetupError};
pub use schedule::{
    AfterPrediction, BeforePrediction, BeforeVerification, DeterministicSet, SimulationSet,
    SimulationStartup, SimulationTick,
};
pub use session::{
    ChecksumRecorded, DeterministicSession, LocalInputs, PredictionMismatch, SessionStats,
    SimulationWorlds, TickInputSource, UnregisteredComponent,
};
pub use snapshot::{RollbackAppExt, RollbackStrategy, SimCommands, SimEntity};

/// The tick a simulation world last simulated (or is simulating, inside
/// [`SimulationTick`]). A resource of both simulation worlds, rolled back and hashed.
#[derive(Resource, Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Reflect)]
pub struct SimTick(pub Tick);

/// Everything a game needs.
pub mod prelude {
    pub use crate::input::{InputEncoder, PackedInput};
    pub use crate::{
        AfterPrediction, BeforePrediction, BeforeVerification, DeterministicPlugin,
        DeterministicSession, DeterministicSet, InputStatus, LocalInputs, LocalSessionConfig,
        PlayerIndex, PlayerInputs, PredictionMismatch, RollbackAppExt, SessionClock, SessionConfig,
        SessionMode, SessionSetupError, SessionStats, SimCommands, SimEntity, SimHash, SimInput,
        SimTick, SimulationSet, SimulationStartup, SimulationTick, SimulationWorlds,
        SimulatorContext, Tick, TickInputSource,
    };
}
