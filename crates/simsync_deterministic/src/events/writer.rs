//! The simulation side of events: [`SimEvents`], the writer a [`SimulationTick`] system takes,
//! and what each simulation world keeps until the session update collects it: the ticks it ran
//! ([`TickRuns`]) and the events each run emitted (one outbox per event type).
//!
//! [`SimulationTick`]: crate::SimulationTick

use std::any::TypeId;

use bevy::ecs::system::{Deferred, SystemBuffer, SystemMeta, SystemParam};
use bevy::ecs::world::DeferredWorld;
use bevy::prelude::*;

use super::event::SimEvent;
use crate::tick::Tick;

/// The ticks a simulation world ran since the session last collected its events, in order
/// (a resource of both simulation worlds, never rolled back). Every run of
/// [`SimulationTick`](crate::SimulationTick) appends its tick before the schedule runs, so a
/// re-simulated tick appears once per run.
#[derive(Resource, Debug, Default)]
pub struct TickRuns {
    ticks: Vec<Tick>,
    /// The world was built since the last collection (a new session).
    fresh: bool,
}

impl TickRuns {
    /// A log for a world just built.
    pub(crate) fn new_world() -> Self {
        Self {
            ticks: Vec::new(),
            fresh: true,
        }
    }

    /// Records that the world starts running `tick`.
    pub(crate) fn push(&mut self, tick: Tick) {
        self.ticks.push(tick);
    }

    /// The runs recorded, oldest first.
    pub fn ticks(&self) -> &[Tick] {
        &self.ticks
    }

    /// The index of the run in progress (the last one recorded), `None` before any.
    fn current_run(&self) -> Option<u32> {
        self.ticks.len().checked_sub(1).map(|i| i as u32)
    }

    /// Takes the runs recorded and whether the world is new since the last take.
    pub(crate) fn take(&mut self) -> (Vec<Tick>, bool) {
        (
            std::mem::take(&mut self.ticks),
            std::mem::replace(&mut self.fresh, false),
        )
    }
}

/// Writes simulation events of type `E` from a [`SimulationTick`](crate::SimulationTick) system
/// (a system parameter). Each event is tagged with the run of the tick that wrote it; the
/// session update delivers it to the main app as [`SimEventReceived<E>`](crate::SimEventReceived)
/// and [`ConfirmedSimEvent<E>`](crate::ConfirmedSimEvent), once per identity, whatever the number
/// of runs of its tick ([simulation events](crate::rules#simulation-events)).
///
/// Register `E` in the main app with
/// [`add_sim_event`](crate::SimEventAppExt::add_sim_event); events of an unregistered type are
/// dropped and reported ([`UnregisteredSimEvent`](crate::UnregisteredSimEvent)). Events written
/// outside `SimulationTick` (in `SimulationStartup`, or in the main app) belong to no tick: they
/// are dropped and counted in [`SimEventStats::outside_tick`](crate::SimEventStats).
///
/// ```
/// # use bevy::prelude::*;
/// # use simsync_deterministic::prelude::*;
/// # use simsync_deterministic::SimEvents;
/// #[derive(Clone, PartialEq, Eq, Hash, Debug)]
/// struct Jumped { player: u8 }
///
/// fn jump(inputs: Res<PlayerInputs<PackedInput>>, mut events: SimEvents<Jumped>) {
///     for player in 0..inputs.len() as u8 {
///         if let (Some(now), Some(before)) = (inputs.get(player), inputs.previous(player))
///             && now.just_pressed(before, 0)
///         {
///             events.write(Jumped { player });
///         }
///     }
/// }
/// ```
#[derive(SystemParam)]
pub struct SimEvents<'w, 's, E: SimEvent> {
    runs: Option<Res<'w, TickRuns>>,
    buffer: Deferred<'s, SimEventBuffer<E>>,
}

impl<E: SimEvent> SimEvents<'_, '_, E> {
    /// Emits `event` at the tick being simulated.
    pub fn write(&mut self, event: E) {
        let run = self.runs.as_ref().and_then(|r| r.current_run());
        self.buffer.events.push((run, event));
    }

    /// Emits every event of `events`, in order.
    pub fn write_batch(&mut self, events: impl IntoIterator<Item = E>) {
        for event in events {
            self.write(event);
        }
    }
}

/// The events one system wrote during one run, moved to the world's outbox when the system's
/// deferred buffers are applied (at the latest when the schedule run ends).
#[doc(hidden)]
pub struct SimEventBuffer<E: SimEvent> {
    events: Vec<(Option<u32>, E)>,
}

impl<E: SimEvent> Default for SimEventBuffer<E> {
    fn default() -> Self {
        Self { events: Vec::new() }
    }
}

impl<E: SimEvent> SystemBuffer for SimEventBuffer<E> {
    fn apply(&mut self, _meta: &SystemMeta, world: &mut World) {
        if !self.events.is_empty() {
            push_to_outbox(world, std::mem::take(&mut self.events));
        }
    }

    fn queue(&mut self, _meta: &SystemMeta, mut world: DeferredWorld) {
        if !self.events.is_empty() {
            let events = std::mem::take(&mut self.events);
            world
                .commands()
                .queue(move |world: &mut World| push_to_outbox(world, events));
        }
    }
}

/// The events of type `E` a simulation world emitted since the session last collected them,
/// each tagged with the index of its run in [`TickRuns`] (`None`: written outside a tick).
#[derive(Resource)]
pub(crate) struct SimEventOutbox<E: SimEvent> {
    pub events: Vec<(Option<u32>, E)>,
}

/// Every event type with an outbox in this world, so the session can find outboxes of types
/// the main app never registered.
#[derive(Resource, Default)]
pub(crate) struct SimEventOutboxes {
    pub types: Vec<OutboxType>,
}

/// One event type with an outbox.
#[derive(Clone, Copy)]
pub(crate) struct OutboxType {
    pub type_id: TypeId,
    pub type_name: &'static str,
    /// Empties the outbox, returning how many events it held.
    pub clear: fn(&mut World) -> usize,
}

/// Appends `events` to the world's outbox of `E`, creating it (and listing its type) on first
/// use. In a world that is not a simulation world the events are dropped and counted.
fn push_to_outbox<E: SimEvent>(world: &mut World, events: Vec<(Option<u32>, E)>) {
    if !world.contains_resource::<TickRuns>() {
        warn_once!(
            "SimEvents<{}> written outside a simulation world: dropped",
            std::any::type_name::<E>()
        );
        if let Some(mut stats) = world.get_resource_mut::<super::stats::SimEventStats>() {
            stats.outside_tick += events.len() as u64;
        }
        return;
    }
    if let Some(mut outbox) = world.get_resource_mut::<SimEventOutbox<E>>() {
        outbox.events.extend(events);
        return;
    }
    world.insert_resource(SimEventOutbox { events });
    world
        .get_resource_or_init::<SimEventOutboxes>()
        .types
        .push(OutboxType {
            type_id: TypeId::of::<E>(),
            type_name: std::any::type_name::<E>(),
            clear: clear_outbox::<E>,
        });
}

fn clear_outbox<E: SimEvent>(world: &mut World) -> usize {
    world
        .get_resource_mut::<SimEventOutbox<E>>()
        .map_or(0, |mut o| std::mem::take(&mut o.events).len())
}

/// The outboxes of a simulation world whose type is not in `registered`.
pub(crate) fn unregistered_outboxes(world: &World, registered: &[TypeId]) -> Vec<OutboxType> {
    world
        .get_resource::<SimEventOutboxes>()
        .map(|o| {
            o.types
                .iter()
                .filter(|t| !registered.contains(&t.type_id))
                .copied()
                .collect()
        })
        .unwrap_or_default()
}

/// The events of `E` a world emitted, grouped by run: one list per entry of `runs` (in order),
/// plus how many were written outside any run. Empties the outbox.
pub(crate) fn take_events_by_run<E: SimEvent>(
    world: &mut World,
    runs: usize,
) -> (Vec<Vec<E>>, usize) {
    let mut by_run: Vec<Vec<E>> = (0..runs).map(|_| Vec::new()).collect();
    let mut outside = 0;
    let Some(mut outbox) = world.get_resource_mut::<SimEventOutbox<E>>() else {
        return (by_run, outside);
    };
    for (run, event) in outbox.events.drain(..) {
        match run.and_then(|r| by_run.get_mut(r as usize)) {
            Some(list) => list.push(event),
            None => outside += 1,
        }
    }
    (by_run, outside)
}
