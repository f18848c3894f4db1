//! Simulation events: how something that happens in a simulation tick reaches the main app
//! once, although the tick runs several times (predicted, re-simulated after each rollback,
//! verified). The rules are in [simulation events](crate::rules#simulation-events).
//!
//! - A [`SimulationTick`](crate::SimulationTick) system emits with the [`SimEvents<E>`]
//!   parameter; `E` is any [`SimEvent`] (every `Clone + Eq + Hash` type is one).
//! - The main app registers `E` with [`add_sim_event`](SimEventAppExt::add_sim_event) and reads
//!   two message streams, written in each session update after prediction:
//!   - [`SimEventReceived<E>`]: each event identity (tick, key, occurrence) once as
//!     [`Predicted`](SimEventStatus::Predicted) or [`Late`](SimEventStatus::Late), then once as
//!     [`Confirmed`](SimEventStatus::Confirmed) or [`Cancelled`](SimEventStatus::Cancelled);
//!   - [`ConfirmedSimEvent<E>`]: each event the verified world produced, exactly once.
//! - [`SimEventLedger<E>`] is the bookkeeping behind it, [`SimEventStats`] its counters.
//!
//! # Side effects: two kinds, two streams
//!
//! A simulation system must never cause an effect outside its world itself: it runs again on
//! every re-simulation and once more in verification. It emits an event, and the main app
//! causes the effect from one of the two streams:
//!
//! - **At once, undone on a misprediction**: start the effect on an announcement
//!   (`Predicted`, or `Late` if it is still worth it), keep it under the event's
//!   [`id`](SimEventReceived::id), undo it on `Cancelled`, forget the id on `Confirmed`.
//! - **Exactly once, never undone**: act on [`ConfirmedSimEvent<E>`] only. It comes a few ticks
//!   later (the input latency), but it is what every peer's verified world did.
//!
//! The three usual uses:
//!
//! 1. **Sound**: play on `Predicted` (a `Late` one-shot only if its tick is recent, else skip
//!    it), stop on `Cancelled`. A sound stopped after a few milliseconds is better than one
//!    missing or played twice.
//! 2. **Visual effects** (sparks, decals, screen shake): spawn on `Predicted`/`Late`, despawn
//!    or fade out on `Cancelled`; a confirmed one lives its normal life.
//! 3. **Network sends, analytics, achievements, anything persisted**: only from
//!    `ConfirmedSimEvent`. These cannot be taken back, and a mispredicted event would be told
//!    to the world.
//!
//! ```no_run
//! use std::collections::HashMap;
//! use bevy::prelude::*;
//! use simsync_deterministic::prelude::*;
//! use simsync_deterministic::{
//!     ConfirmedSimEvent, SimEventAppExt, SimEventId, SimEventReceived, SimEventStatus, SimEvents,
//! };
//!
//! #[derive(Clone, PartialEq, Eq, Hash, Debug)]
//! struct Goal { player: u8 }
//!
//! // Simulation side, in the game plugin (both worlds): emit, never play.
//! fn score(inputs: Res<PlayerInputs<PackedInput>>, mut events: SimEvents<Goal>) {
//!     if inputs.get(0).is_some_and(|i| i.pressed(0)) {
//!         events.write(Goal { player: 0 });
//!     }
//! }
//!
//! // Main-app side: sounds start at once and stop on a misprediction.
//! #[derive(Resource, Default)]
//! struct Playing(HashMap<SimEventId<Goal>, u32>); // id → the audio backend's voice
//!
//! fn goal_sounds(
//!     mut arrivals: MessageReader<SimEventReceived<Goal>>,
//!     mut playing: ResMut<Playing>,
//!     stats: Res<SessionStats>,
//! ) {
//!     for arrival in arrivals.read() {
//!         match arrival.status {
//!             SimEventStatus::Predicted => {
//!                 playing.0.insert(arrival.id(), 1 /* play("goal") */);
//!             }
//!             // A late one-shot older than 6 ticks would be heard out of place: skip it.
//!             SimEventStatus::Late if stats.predicted_tick - arrival.tick <= 6 => {
//!                 playing.0.insert(arrival.id(), 1 /* play("goal") */);
//!             }
//!             SimEventStatus::Late => {}
//!             SimEventStatus::Cancelled => {
//!                 if let Some(_voice) = playing.0.remove(&arrival.id()) { /* stop(voice) */ }
//!             }
//!             SimEventStatus::Confirmed => {
//!                 playing.0.remove(&arrival.id()); // it happened: let it play out
//!             }
//!         }
//!     }
//! }
//!
//! // Main-app side: tell the lobby server exactly once.
//! fn report_goals(mut confirmed: MessageReader<ConfirmedSimEvent<Goal>>) {
//!     for goal in confirmed.read() {
//!         let _ = (goal.tick, goal.event.player); // send(...)
//!     }
//! }
//!
//! #[derive(Clone)]
//! struct MyGame;
//! impl Plugin for MyGame {
//!     fn build(&self, app: &mut App) {
//!         app.add_systems(SimulationTick, score.in_set(SimulationSet::Game));
//!     }
//! }
//!
//! App::new()
//!     .add_plugins(MinimalPlugins)
//!     .add_plugins(DeterministicPlugin::<PackedInput>::new(MyGame).players(2))
//!     .add_sim_event::<Goal>()
//!     .init_resource::<Playing>()
//!     .add_systems(Update, (goal_sounds, report_goals))
//!     .run();
//! ```

mod event;
mod ledger;
mod plugin;
mod stats;
mod writer;

pub use event::{ConfirmedSimEvent, SimEvent, SimEventId, SimEventReceived, SimEventStatus};
pub use ledger::SimEventLedger;
pub use plugin::{SimEventAppExt, SimEventError};
pub(crate) use plugin::{deliver, settle_through, start_session};
pub use stats::{SimEventStats, UnregisteredSimEvent};
pub use writer::SimEvents;
