//! Wiring of simulation events into the main app: [`SimEventAppExt`] registers an event type,
//! and the session update hands what both simulation worlds emitted to each type's
//! [`SimEventLedger`] and writes the arrivals as messages.

use std::any::TypeId;

use bevy::prelude::*;
use thiserror::Error;

use super::event::{ConfirmedSimEvent, SimEvent, SimEventReceived, SimEventStatus};
use super::ledger::SimEventLedger;
use super::stats::{SimEventStats, UnregisteredSimEvent};
use super::writer::{TickRuns, take_events_by_run, unregistered_outboxes};
use crate::tick::Tick;

/// Why an event type could not be registered.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SimEventError {
    /// The session has run its first update: register event types while building the app.
    #[error("cannot register simulation event `{type_name}`: the session has already started")]
    SessionStarted {
        /// The event type's name.
        type_name: &'static str,
    },
}

/// Registers simulation event types in the main app (extension trait of `App`).
pub trait SimEventAppExt {
    /// Registers `E`: the messages [`SimEventReceived<E>`] and [`ConfirmedSimEvent<E>`], and a
    /// [`SimEventLedger<E>`] resource the session update feeds. Registering a type twice is
    /// harmless. Call it on the main app (not in the game plugin), before the first session
    /// update, with or without the `DeterministicPlugin` added yet.
    ///
    /// # Errors
    /// [`SimEventError::SessionStarted`] once a session update has run; nothing is registered
    /// and the type's events are dropped and reported as [`UnregisteredSimEvent`].
    fn try_add_sim_event<E: SimEvent>(&mut self) -> Result<&mut Self, SimEventError>;

    /// [`try_add_sim_event`](Self::try_add_sim_event), logging the error instead of returning
    /// it (the type's events are then reported as [`UnregisteredSimEvent`]).
    fn add_sim_event<E: SimEvent>(&mut self) -> &mut Self;
}

impl SimEventAppExt for App {
    fn try_add_sim_event<E: SimEvent>(&mut self) -> Result<&mut Self, SimEventError> {
        let hooks = self.world_mut().get_resource_or_init::<SimEventHooks>();
        if hooks.sealed {
            return Err(SimEventError::SessionStarted {
                type_name: std::any::type_name::<E>(),
            });
        }
        if hooks.hooks.iter().any(|h| h.type_id == TypeId::of::<E>()) {
            return Ok(self);
        }
        self.world_mut()
            .resource_mut::<SimEventHooks>()
            .hooks
            .push(SimEventHook {
                type_id: TypeId::of::<E>(),
                deliver: deliver_type::<E>,
            });
        self.add_message::<SimEventReceived<E>>()
            .add_message::<ConfirmedSimEvent<E>>()
            .add_message::<UnregisteredSimEvent>()
            .init_resource::<SimEventStats>()
            .insert_resource(SimEventLedger::<E>::new());
        Ok(self)
    }

    fn add_sim_event<E: SimEvent>(&mut self) -> &mut Self {
        if let Err(error) = self.try_add_sim_event::<E>() {
            error!("{error}");
        }
        self
    }
}

/// The registered event types (main-app resource).
#[derive(Resource, Default)]
pub(crate) struct SimEventHooks {
    hooks: Vec<SimEventHook>,
    /// A session update has run: no more registrations.
    sealed: bool,
}

#[derive(Clone, Copy)]
struct SimEventHook {
    type_id: TypeId,
    deliver: fn(&mut World, &WorldRuns, &mut World, &WorldRuns, &mut World),
}

/// The runs a simulation world made since the last collection.
struct WorldRuns {
    ticks: Vec<Tick>,
    fresh: bool,
}

fn take_runs(world: &mut World) -> WorldRuns {
    let (ticks, fresh) = world
        .get_resource_mut::<TickRuns>()
        .map(|mut r| r.take())
        .unwrap_or_default();
    WorldRuns { ticks, fresh }
}

/// Refuses registrations from now on (the session starts).
pub(crate) fn seal(world: &mut World) {
    world.get_resource_or_init::<SimEventHooks>().sealed = true;
}

/// Collects what both simulation worlds emitted since the last update and delivers it for
/// every registered type: the predicted world's runs first, then the verified world's
/// ([simulation events](crate::rules#simulation-events)). Events of unregistered types are
/// dropped and reported. Called by the session update after prediction.
pub(crate) fn deliver(world: &mut World, predicted: &mut World, verified: &mut World) {
    let predicted_runs = take_runs(predicted);
    let verified_runs = take_runs(verified);
    let hooks: Vec<SimEventHook> = world
        .get_resource::<SimEventHooks>()
        .map(|h| h.hooks.clone())
        .unwrap_or_default();
    for hook in &hooks {
        (hook.deliver)(world, &predicted_runs, predicted, &verified_runs, verified);
    }
    let registered: Vec<TypeId> = hooks.iter().map(|h| h.type_id).collect();
    for sim in [predicted, verified] {
        drop_unregistered(world, sim, &registered);
    }
}

/// Empties the outboxes of unregistered types in `sim`, reporting each type once.
fn drop_unregistered(world: &mut World, sim: &mut World, registered: &[TypeId]) {
    for outbox in unregistered_outboxes(sim, registered) {
        let dropped = (outbox.clear)(sim) as u64;
        if dropped == 0 {
            continue;
        }
        let mut stats = world.get_resource_or_init::<SimEventStats>();
        stats.unregistered_dropped += dropped;
        if stats
            .unregistered_types
            .iter()
            .any(|t| t == outbox.type_name)
        {
            continue;
        }
        stats.unregistered_types.push(outbox.type_name.to_string());
        warn!(
            "simulation event `{}` is not registered (app.add_sim_event): {dropped} events dropped",
            outbox.type_name
        );
        if world.contains_resource::<Messages<UnregisteredSimEvent>>() {
            world.write_message(UnregisteredSimEvent {
                type_name: outbox.type_name.to_string(),
                dropped,
            });
        }
    }
}

/// Delivers the events of `E`: feeds every run to the ledger (a new session resets it first)
/// and writes the arrivals.
fn deliver_type<E: SimEvent>(
    world: &mut World,
    predicted_runs: &WorldRuns,
    predicted: &mut World,
    verified_runs: &WorldRuns,
    verified: &mut World,
) {
    let Some(mut ledger) = world.remove_resource::<SimEventLedger<E>>() else {
        return;
    };
    let mut out = Vec::new();
    if predicted_runs.fresh || verified_runs.fresh {
        ledger.reset(&mut out);
    }
    let (by_run, outside_p) = take_events_by_run::<E>(predicted, predicted_runs.ticks.len());
    for (tick, events) in predicted_runs.ticks.iter().zip(by_run) {
        ledger.record_predicted(*tick, events, &mut out);
    }
    let (by_run, outside_v) = take_events_by_run::<E>(verified, verified_runs.ticks.len());
    for (tick, events) in verified_runs.ticks.iter().zip(by_run) {
        ledger.record_verified(*tick, events, &mut out);
    }
    world.insert_resource(ledger);
    let mut stats = world.get_resource_or_init::<SimEventStats>();
    stats.outside_tick += (outside_p + outside_v) as u64;
    for arrival in &out {
        stats.count(arrival.status);
    }
    let confirmed: Vec<ConfirmedSimEvent<E>> = out
        .iter()
        .filter(|a| a.status == SimEventStatus::Confirmed)
        .map(|a| ConfirmedSimEvent {
            tick: a.tick,
            event: a.event.clone(),
            occurrence: a.occurrence,
        })
        .collect();
    world.write_message_batch(out);
    world.write_message_batch(confirmed);
}
