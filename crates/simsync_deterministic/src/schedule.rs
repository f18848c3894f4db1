//! Schedule labels and system sets of the deterministic session.
//!
//! Two kinds of schedules exist:
//! - **Simulation schedules** run inside the verified and the predicted world (the two sub-apps):
//!   [`SimulationStartup`] once when the worlds are built, [`SimulationTick`] once per simulated tick.
//! - **Stage hooks** run in the main app during a session update, at the boundaries the
//!   [`SimulatorContext`](crate::context::SimulatorContext) names: [`BeforeVerification`],
//!   [`BeforePrediction`], [`AfterPrediction`].

use bevy::ecs::schedule::{ScheduleLabel, SystemSet};

/// Advances a simulation world by exactly one tick.
///
/// Runs in both the verified and the predicted world, never in the main app. Inside it, Bevy's
/// `Res<Time>` reports a delta of exactly one tick (1 / [`TickRate`](simsync_time::TickRate)
/// seconds), `Res<PlayerInputs<I>>` holds the input set of the tick being simulated and
/// `Res<SimTick>` its number. Rapier runs in it (`PhysicsSet` between [`SimulationSet::Game`] and
/// [`SimulationSet::Cleanup`]). Systems here run again on re-simulation after a rollback and once
/// more in verification, so they must cause no effect outside the simulation world: they emit a
/// simulation event with [`SimEvents`](crate::SimEvents) and the main app acts on it
/// ([simulation events](crate::rules#simulation-events)).
#[derive(ScheduleLabel, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SimulationTick;

/// Runs once in each simulation world when the worlds are built, before the setup tick (tick 0).
///
/// Spawn the initial scene here, through
/// [`SimCommands::spawn`](crate::SimCommands::spawn),
/// so both worlds hold it under the same entity ids.
#[derive(ScheduleLabel, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SimulationStartup;

/// Main-app hook run after the context is reset and before verified ticks run
/// (stage `BeforeVerification`). Systems may change `ticks_to_verify` (clamped).
#[derive(ScheduleLabel, Clone, Debug, PartialEq, Eq, Hash)]
pub struct BeforeVerification;

/// Main-app hook run after verification and before the rollback decision
/// (stage `BeforePrediction`). Systems may set the skip flags.
#[derive(ScheduleLabel, Clone, Debug, PartialEq, Eq, Hash)]
pub struct BeforePrediction;

/// Main-app hook run after prediction (stage `AfterPrediction`); stats are up to date and this
/// update's simulation events have been written.
#[derive(ScheduleLabel, Clone, Debug, PartialEq, Eq, Hash)]
pub struct AfterPrediction;

/// System sets of the main app, in the session's schedule (`PreUpdate` by default), in this
/// order.
#[derive(SystemSet, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeterministicSet {
    /// Writes this frame's inputs of the [`LocalPlayers`](crate::LocalPlayers) into
    /// [`LocalInputs`](crate::LocalInputs) (the [`LeafwingInputPlugin`](crate::LeafwingInputPlugin)
    /// runs here, after leafwing-input-manager updated the `ActionState`s). Runs every frame,
    /// before [`SessionUpdate`](Self::SessionUpdate); put your own input writers here.
    ReadLocalInput,
    /// The one exclusive system that runs a whole session update (poll, verify, rollback,
    /// predict). Order your input-writing systems before it.
    SessionUpdate,
}

/// System sets of [`SimulationTick`], chained in this order.
#[derive(SystemSet, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SimulationSet {
    /// Reading inputs, preparing the tick.
    Prepare,
    /// Game logic: apply inputs, forces, spawns and despawns. Runs before physics.
    Game,
    /// After Rapier's writeback and transform propagation: bookkeeping that must see the
    /// stepped state.
    Cleanup,
}
