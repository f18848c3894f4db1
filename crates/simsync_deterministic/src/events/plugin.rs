//! Wiring of simulation events into the main app: [`SimEventAppExt`] registers an event type,
//! and the session update hands what both simulation worlds emitted to each type's
//! [`SimEventLedger`] and writes the arrivals as messages.

use std::any::TypeId;

use bevy::prelude::*;
use thiserror::Error;

use super::event::{ConfirmedSimEvent, SimEvent, SimEventReceived, SimEventStatus};
use super::ledger::SimEventLedger;
use super::stats::{SimEventStats, UnregisteredSimEvent};
use super::writer::{prepare_outbox, take_events_by_run, unregistered_outboxes};
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
                prepare: prepare_outbox::<E>,
                reset: reset_type::<E>,
                settle: settle_type::<E>,
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

/// One simulation world's runs since the last collection: the ticks it ran, in order, and the
/// world.
pub(crate) type WorldRuns<'a> = (&'a [Tick], &'a mut World);

/// What the session does for one registered type.
#[derive(Clone, Copy)]
struct SimEventHook {
    type_id: TypeId,
    /// Gives a simulation world the type's outbox.
    prepare: fn(&mut World),
    /// Resets the type's ledger (main world), writing the cancellations.
    reset: fn(&mut World),
    /// Settles the type's ledger through a loaded snapshot's tick (main world).
    settle: fn(&mut World, Tick),
    /// Collects both worlds and writes the arrivals (main world, predicted, verified).
    deliver: fn(&mut World, WorldRuns, WorldRuns),
}

fn hooks(world: &World) -> Vec<SimEventHook> {
    world
        .get_resource::<SimEventHooks>()
        .map(|h| h.hooks.clone())
        .unwrap_or_default()
}

/// A session starts (its first update): refuses registrations from now on, gives both
/// simulation worlds the outbox of every registered type (at the same point in both, before
/// any tick after the setup tick) and resets every ledger, cancelling what a previous session
/// left unsettled ([simulation events](crate::rules#simulation-events), rule 9).
pub(crate) fn start_session(world: &mut World, predicted: &mut World, verified: &mut World) {
    world.get_resource_or_init::<SimEventHooks>().sealed = true;
    for hook in hooks(world) {
        (hook.prepare)(predicted);
        (hook.prepare)(verified);
        (hook.reset)(world);
    }
}

/// Collects what both simulation worlds emitted since the last update and delivers it for
/// every registered type: the predicted world's runs first, then the verified world's
/// ([simulation events](crate::rules#simulation-events)). Events of unregistered types are
/// dropped and reported. Called by the session update after prediction.
pub(crate) fn deliver(world: &mut World, predicted: WorldRuns, verified: WorldRuns) {
    let hooks = hooks(world);
    for hook in &hooks {
        (hook.deliver)(world, (predicted.0, predicted.1), (verified.0, verified.1));
    }
    let registered: Vec<TypeId> = hooks.iter().map(|h| h.type_id).collect();
    for sim in [predicted.1, verified.1] {
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

/// A snapshot of tick `tick` was loaded: every ledger is reset (what the session had announced
/// is cancelled) and settled through `tick`, so the first predicted run after it is the first
/// run of its tick ([snapshots](crate::rules#snapshots)).
pub(crate) fn settle_through(world: &mut World, tick: Tick) {
    for hook in hooks(world) {
        (hook.reset)(world);
        (hook.settle)(world, tick);
    }
}

fn settle_type<E: SimEvent>(world: &mut World, tick: Tick) {
    if let Some(mut ledger) = world.get_resource_mut::<SimEventLedger<E>>() {
        ledger.settle_through(tick);
    }
}

/// Resets the ledger of `E` and writes the cancellations.
fn reset_type<E: SimEvent>(world: &mut World) {
    let mut out = Vec::new();
    if let Some(mut ledger) = world.get_resource_mut::<SimEventLedger<E>>() {
        ledger.reset(&mut out);
    }
    write_arrivals(world, out);
}

/// Delivers the events of `E`: feeds every run of both worlds to the ledger and writes the
/// arrivals.
fn deliver_type<E: SimEvent>(world: &mut World, predicted: WorldRuns, verified: WorldRuns) {
    let Some(mut ledger) = world.remove_resource::<SimEventLedger<E>>() else {
        return;
    };
    let mut out = Vec::new();
    let (by_run, unmatched_p) = take_events_by_run::<E>(predicted.1, predicted.0);
    for (tick, events) in predicted.0.iter().zip(by_run) {
        ledger.record_predicted(*tick, events, &mut out);
    }
    let (by_run, unmatched_v) = take_events_by_run::<E>(verified.1, verified.0);
    for (tick, events) in verified.0.iter().zip(by_run) {
        ledger.record_verified(*tick, events, &mut out);
    }
    world.insert_resource(ledger);
    world.get_resource_or_init::<SimEventStats>().outside_tick +=
        (unmatched_p + unmatched_v) as u64;
    write_arrivals(world, out);
}

/// Writes `out` as [`SimEventReceived`] messages, the confirmed ones also as
/// [`ConfirmedSimEvent`], and counts them.
fn write_arrivals<E: SimEvent>(world: &mut World, out: Vec<SimEventReceived<E>>) {
    if out.is_empty() {
        return;
    }
    let mut stats = world.get_resource_or_init::<SimEventStats>();
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
    if !confirmed.is_empty() {
        world.write_message_batch(confirmed);
    }
}
