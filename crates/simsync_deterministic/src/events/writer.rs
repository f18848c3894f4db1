//! The simulation side of events: [`SimEvents`], the writer a [`SimulationTick`] system takes,
//! and the outbox (one per event type) where each simulation world keeps the events its runs
//! emitted, tagged with their tick, until the session update collects them.
//!
//! [`SimulationTick`]: crate::SimulationTick

use std::any::TypeId;

use bevy::ecs::system::{Deferred, SystemBuffer, SystemMeta, SystemParam};
use bevy::ecs::world::DeferredWorld;
use bevy::prelude::*;

use super::event::SimEvent;
use super::stats::SimEventStats;
use crate::tick::{SimTick, Tick};

/// Writes simulation events of type `E` from a [`SimulationTick`](crate::SimulationTick) system
/// (a system parameter). Each event is tagged with the tick being simulated
/// ([`SimTick`]); the session update delivers it to the main app as [`SimEventReceived<E>`](crate::SimEventReceived)
/// and [`ConfirmedSimEvent<E>`](crate::ConfirmedSimEvent), once per identity, whatever the number
/// of runs of its tick ([simulation events](crate::rules#simulation-events)).
///
/// Register `E` in the main app with
/// [`add_sim_event`](crate::SimEventAppExt::add_sim_event); events of an unregistered type are
/// dropped and reported ([`UnregisteredSimEvent`](crate::UnregisteredSimEvent)). Events written in
/// `SimulationStartup` count as tick 0's; written outside a simulation world (in the main app)
/// they belong to no tick and are dropped and counted in
/// [`SimEventStats::outside_tick`](crate::SimEventStats).
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
    tick: Option<Res<'w, SimTick>>,
    buffer: Deferred<'s, SimEventBuffer<E>>,
}

impl<E: SimEvent> SimEvents<'_, '_, E> {
    /// Emits `event` at the tick being simulated.
    pub fn write(&mut self, event: E) {
        let tick = self.tick.as_ref().map(|t| t.0);
        self.buffer.events.push((tick, event));
    }

    /// Emits every event of `events`, in order.
    pub fn write_batch(&mut self, events: impl IntoIterator<Item = E>) {
        for event in events {
            self.write(event);
        }
    }
}

/// The events one system wrote during one run (each with its tick, `None` outside a simulation
/// world), moved to the world's outbox when the system's
/// deferred buffers are applied (at the latest when the schedule run ends).
#[doc(hidden)]
pub struct SimEventBuffer<E: SimEvent> {
    events: Vec<(Option<Tick>, E)>,
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
/// each with its tick, in the order the runs emitted them.
#[derive(Resource)]
pub(crate) struct SimEventOutbox<E: SimEvent> {
    pub events: Vec<(Tick, E)>,
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

/// Appends `events` to the world's outbox of `E`, creating it on first use. Events without a
/// tick (written outside a simulation world) are dropped and counted.
fn push_to_outbox<E: SimEvent>(world: &mut World, events: Vec<(Option<Tick>, E)>) {
    let written = events.len();
    let tagged: Vec<(Tick, E)> = events
        .into_iter()
        .filter_map(|(tick, event)| tick.map(|t| (t, event)))
        .collect();
    let dropped = written - tagged.len();
    if dropped > 0 {
        let warning = crate::warning::SessionWarning::SimEventsOutsideSimulation {
            type_name: std::any::type_name::<E>(),
            dropped: dropped as u64,
        };
        match world.get_resource_mut::<SimEventStats>() {
            Some(mut stats) => {
                let first = stats.outside_tick == 0;
                stats.outside_tick += dropped as u64;
                if first {
                    crate::warning::report(world, warning);
                }
            }
            None => warn_once!("{warning}"),
        }
    }
    if tagged.is_empty() {
        return;
    }
    prepare_outbox::<E>(world);
    if let Some(mut outbox) = world.get_resource_mut::<SimEventOutbox<E>>() {
        outbox.events.extend(tagged);
    }
}

/// Gives `world` an (empty) outbox of `E` if it has none, and lists its type. The session
/// prepares the outboxes of registered types in both worlds when it starts, so they are
/// created at the same point in both.
pub(crate) fn prepare_outbox<E: SimEvent>(world: &mut World) {
    if world.contains_resource::<SimEventOutbox<E>>() {
        return;
    }
    world.insert_resource(SimEventOutbox::<E> { events: Vec::new() });
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

/// The events of `E` a world emitted, grouped by run: one list per entry of `ticks_run` (the
/// ticks the world ran, in order), plus how many matched no run. Empties the outbox.
///
/// Events are in run order, so each run takes the events of its tick from the front. A world
/// runs a tick at most once between two collections (one rollback per session update), so a
/// tick names its run.
pub(crate) fn take_events_by_run<E: SimEvent>(
    world: &mut World,
    ticks_run: &[Tick],
) -> (Vec<Vec<E>>, usize) {
    let mut by_run: Vec<Vec<E>> = ticks_run.iter().map(|_| Vec::new()).collect();
    let Some(mut outbox) = world.get_resource_mut::<SimEventOutbox<E>>() else {
        return (by_run, 0);
    };
    let mut events = std::mem::take(&mut outbox.events).into_iter().peekable();
    let mut unmatched = 0;
    for (run, tick) in by_run.iter_mut().zip(ticks_run) {
        while let Some((t, _)) = events.peek() {
            if t == tick {
                run.extend(events.next().map(|(_, e)| e));
            } else if ticks_run.contains(t) {
                break;
            } else {
                unmatched += 1;
                events.next();
            }
        }
    }
    unmatched += events.count();
    (by_run, unmatched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_grouped_by_the_run_of_their_tick() {
        let mut world = World::new();
        prepare_outbox::<char>(&mut world);
        world.resource_mut::<SimEventOutbox<char>>().events =
            vec![(3, 'a'), (3, 'b'), (5, 'c'), (9, 'x'), (6, 'd')];
        let (by_run, unmatched) = take_events_by_run::<char>(&mut world, &[3, 4, 5, 6]);
        assert_eq!(by_run, vec![vec!['a', 'b'], vec![], vec!['c'], vec!['d']]);
        assert_eq!(unmatched, 1);
        assert!(world.resource::<SimEventOutbox<char>>().events.is_empty());
        let (by_run, unmatched) = take_events_by_run::<char>(&mut World::new(), &[1]);
        assert_eq!((by_run, unmatched), (vec![vec![]], 0));
    }

    #[test]
    fn outboxes_of_unregistered_types_are_found_and_cleared() {
        let mut world = World::new();
        world.insert_resource(SimTick(2));
        push_to_outbox::<u8>(&mut world, vec![(Some(2), 1), (Some(2), 1)]);
        prepare_outbox::<char>(&mut world);
        let found = unregistered_outboxes(&world, &[TypeId::of::<char>()]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].type_name, "u8");
        assert_eq!((found[0].clear)(&mut world), 2);
        assert_eq!((found[0].clear)(&mut world), 0);
    }

    #[test]
    fn events_without_a_tick_are_dropped_and_counted() {
        let mut world = World::new();
        world.init_resource::<SimEventStats>();
        push_to_outbox::<u8>(&mut world, vec![(None, 1), (None, 2)]);
        assert_eq!(world.resource::<SimEventStats>().outside_tick, 2);
        assert!(!world.contains_resource::<SimEventOutbox<u8>>());
    }
}
