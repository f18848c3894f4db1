//! Dispatch of registered [`VirtualEventQueue`]s: due events reach the game as Messages or
//! observer events, in `(ticks, priority, insertion)` order, exactly when the clock reaches
//! them ([time rule 17](crate::rules)).
//!
//! The functions here take a `&mut World` and are run by the plugin's exclusive systems
//! (`plugin`); they read the clock's position from [`CurrentInstant`] and move it only forward.

use core::any::TypeId;

use bevy::prelude::*;

use super::CurrentInstant;
use crate::clock::{FrameBudget, tick_end, tick_start};
use crate::{VirtualEventQueue, VirtualInstant};

/// How the due events of a registered queue reach the game
/// ([time rule 17](crate::rules)).
#[derive(Reflect, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[reflect(Debug, Default, Clone, PartialEq)]
pub enum Delivery {
    /// Each due event is written as a [`VirtualEvent<E>`] Message, in order; read them with a
    /// `MessageReader<VirtualEvent<E>>` in a system ordered after the dispatch
    /// ([`VirtualTimeSet`](crate::VirtualTimeSet)). The cheapest delivery. Nothing runs between
    /// two events, so an event a reader schedules is dispatched by the next dispatch — for an
    /// instant already passed, that is late; use [`Delivery::Observers`] when handlers
    /// schedule events for the current instant.
    #[default]
    Messages,
    /// Each due event triggers the observers of [`VirtualEvent<E>`] (`On<VirtualEvent<E>>`) at
    /// once, one event at a time, with [`CurrentInstant`] at the event's instant. An observer
    /// may schedule further events; those for the current instant are dispatched in the same
    /// instant, after every event that was already due at it.
    Observers,
}

/// A dispatched event of a [`VirtualEventQueue<E>`], with the instant it was scheduled for.
/// A Message under [`Delivery::Messages`], an observer event under [`Delivery::Observers`].
#[derive(Message, Event, Debug, Clone, PartialEq)]
pub struct VirtualEvent<E: Send + Sync + 'static> {
    /// The instant the event was scheduled for. The clock reads the same instant while it is
    /// dispatched, unless the event was scheduled for an instant already passed (then the
    /// clock stays where it is and the event is dispatched at once).
    pub at: VirtualInstant,
    /// The event.
    pub event: E,
}

/// The type-erased hooks of one registered queue.
#[derive(Clone, Copy)]
struct QueueHooks {
    type_id: TypeId,
    delivery: Delivery,
    peek: fn(&World) -> Option<VirtualInstant>,
    mark: fn(&World) -> u64,
    deliver: fn(&mut World, VirtualInstant, u64, u64) -> u64,
    bulk: BulkFn,
}

type BulkFn = fn(
    &mut World,
    VirtualInstant,
    Option<(VirtualInstant, FrameBudget)>,
    u64,
) -> (Dispatched, Option<VirtualInstant>);

/// The queues whose events the plugin dispatches, in registration order (crate-internal; the
/// public way in is [`VirtualEventAppExt`]).
#[derive(Resource, Default)]
pub(crate) struct DispatchRegistry {
    queues: Vec<QueueHooks>,
}

impl DispatchRegistry {
    fn hooks(world: &World) -> Vec<QueueHooks> {
        world
            .get_resource::<DispatchRegistry>()
            .map(|r| r.queues.clone())
            .unwrap_or_default()
    }
}

/// Registers the queue of `E` with the dispatch: inserts an empty [`VirtualEventQueue<E>`]
/// unless one exists and sets its delivery (the body of
/// [`VirtualEventAppExt::add_virtual_events`](crate::VirtualEventAppExt::add_virtual_events)).
pub(crate) fn register_queue<E: Send + Sync + 'static>(app: &mut App, delivery: Delivery) {
    app.init_resource::<VirtualEventQueue<E>>();
    if delivery == Delivery::Messages {
        app.add_message::<VirtualEvent<E>>();
    }
    let hooks = QueueHooks {
        type_id: TypeId::of::<E>(),
        delivery,
        peek: peek::<E>,
        mark: mark::<E>,
        deliver: match delivery {
            Delivery::Messages => deliver_messages::<E>,
            Delivery::Observers => deliver_observers::<E>,
        },
        bulk: match delivery {
            Delivery::Messages => bulk_messages::<E>,
            Delivery::Observers => no_bulk,
        },
    };
    let mut registry = app
        .world_mut()
        .get_resource_or_insert_with(DispatchRegistry::default);
    match registry
        .queues
        .iter_mut()
        .find(|q| q.type_id == hooks.type_id)
    {
        Some(existing) => *existing = hooks,
        None => registry.queues.push(hooks),
    }
}

fn peek<E: Send + Sync + 'static>(world: &World) -> Option<VirtualInstant> {
    world
        .get_resource::<VirtualEventQueue<E>>()?
        .peek_next_instant()
}

fn mark<E: Send + Sync + 'static>(world: &World) -> u64 {
    world
        .get_resource::<VirtualEventQueue<E>>()
        .map_or(0, VirtualEventQueue::next_seq)
}

/// Pops up to `max` events due at `at` and scheduled before `mark` into Messages.
fn deliver_messages<E: Send + Sync + 'static>(
    world: &mut World,
    at: VirtualInstant,
    mark: u64,
    max: u64,
) -> u64 {
    let Some(mut queue) = world.get_resource_mut::<VirtualEventQueue<E>>() else {
        return 0;
    };
    let mut batch = Vec::new();
    while (batch.len() as u64) < max {
        match queue.pop_due_before(at, mark) {
            Some((at, event)) => batch.push(VirtualEvent { at, event }),
            None => break,
        }
    }
    let n = batch.len() as u64;
    if n > 0 {
        world
            .resource_mut::<Messages<VirtualEvent<E>>>()
            .write_batch(batch);
    }
    n
}

/// Pops and triggers, one at a time, up to `max` events due at `at` and scheduled before `mark`.
fn deliver_observers<E: Send + Sync + 'static>(
    world: &mut World,
    at: VirtualInstant,
    mark: u64,
    max: u64,
) -> u64 {
    let mut n = 0;
    while n < max {
        let Some(mut queue) = world.get_resource_mut::<VirtualEventQueue<E>>() else {
            break;
        };
        let Some((at, event)) = queue.pop_due_before(at, mark) else {
            break;
        };
        world.trigger(VirtualEvent { at, event });
        n += 1;
    }
    world.flush();
    n
}

/// What one dispatch call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Dispatched {
    /// Events delivered.
    pub(crate) events: u64,
    /// Distinct instants the clock stopped at.
    pub(crate) instants: u64,
}

/// The earliest waiting instant over every registered queue, or `INFINITY`.
pub(crate) fn next_event(world: &World) -> VirtualInstant {
    world
        .get_resource::<DispatchRegistry>()
        .and_then(|registry| earliest(world, &registry.queues))
        .unwrap_or(VirtualInstant::INFINITY)
}

fn earliest(world: &World, hooks: &[QueueHooks]) -> Option<VirtualInstant> {
    hooks.iter().filter_map(|h| (h.peek)(world)).min()
}

/// Moves [`CurrentInstant`] to `at` if that is later (the clock never goes backwards).
pub(crate) fn move_clock_to(world: &mut World, at: VirtualInstant) {
    let mut now = world.resource_mut::<CurrentInstant>();
    if at > now.0 {
        now.0 = at;
    }
}

/// Dispatches, instant by instant, every event at or before `limit`, within `budget` if one is
/// given (with the instant the frame started at). Returns what it did.
pub(crate) fn dispatch_through(
    world: &mut World,
    limit: VirtualInstant,
    budget: Option<(VirtualInstant, FrameBudget)>,
) -> Dispatched {
    let hooks = DispatchRegistry::hooks(world);
    let mut done = Dispatched::default();
    let max_events = budget.map_or(u64::MAX, |(_, b)| u64::from(b.events.get()));
    if let [single] = hooks.as_slice()
        && single.delivery == Delivery::Messages
    {
        return dispatch_single_messages(world, *single, limit, budget, max_events);
    }
    while done.events < max_events {
        let Some(at) = earliest(world, &hooks).filter(|at| *at <= limit) else {
            break;
        };
        if let Some((start, b)) = budget
            && !b.allows_instant(start, at)
        {
            break;
        }
        move_clock_to(world, at);
        done.events += dispatch_instant(world, &hooks, at, max_events - done.events);
        done.instants += 1;
    }
    done
}

/// One queue delivered by Messages: nothing runs between its events, so the due ones are popped
/// in one pass (same order and same clock position as instant by instant, without the
/// per-instant cost).
fn dispatch_single_messages(
    world: &mut World,
    hooks: QueueHooks,
    limit: VirtualInstant,
    budget: Option<(VirtualInstant, FrameBudget)>,
    max_events: u64,
) -> Dispatched {
    let (done, last) = (hooks.bulk)(world, limit, budget, max_events);
    if let Some(last) = last {
        move_clock_to(world, last);
    }
    done
}

/// The Messages fast path of one queue: pops every event at or before `limit` that the budget
/// allows, up to `max`, and writes them in one batch. Returns what it did and the last instant.
fn bulk_messages<E: Send + Sync + 'static>(
    world: &mut World,
    limit: VirtualInstant,
    budget: Option<(VirtualInstant, FrameBudget)>,
    max: u64,
) -> (Dispatched, Option<VirtualInstant>) {
    let mut done = Dispatched::default();
    let Some(mut queue) = world.get_resource_mut::<VirtualEventQueue<E>>() else {
        return (done, None);
    };
    let mut batch = Vec::new();
    let mut last: Option<VirtualInstant> = None;
    while done.events < max {
        let Some(at) = queue.peek_next_instant().filter(|at| *at <= limit) else {
            break;
        };
        if let Some((start, b)) = budget
            && !b.allows_instant(start, at)
        {
            break;
        }
        let Some((at, event)) = queue.pop_next() else {
            break;
        };
        if last != Some(at) {
            done.instants += 1;
            last = Some(at);
        }
        batch.push(VirtualEvent { at, event });
        done.events += 1;
    }
    if !batch.is_empty() {
        world
            .resource_mut::<Messages<VirtualEvent<E>>>()
            .write_batch(batch);
    }
    (done, last)
}

fn no_bulk(
    _: &mut World,
    _: VirtualInstant,
    _: Option<(VirtualInstant, FrameBudget)>,
    _: u64,
) -> (Dispatched, Option<VirtualInstant>) {
    (Dispatched::default(), None)
}

/// Dispatches the events due at `at`, round by round: each round serves every queue in
/// registration order with the events scheduled before the round began; events scheduled during
/// a round come in a later one. Stops after `max` events.
fn dispatch_instant(world: &mut World, hooks: &[QueueHooks], at: VirtualInstant, max: u64) -> u64 {
    let mut delivered = 0;
    loop {
        let marks: Vec<u64> = hooks.iter().map(|h| (h.mark)(world)).collect();
        let mut round = 0;
        for (h, mark) in hooks.iter().zip(marks) {
            if delivered + round >= max {
                break;
            }
            round += (h.deliver)(world, at, mark, max - delivered - round);
        }
        delivered += round;
        if round == 0 || delivered >= max {
            return delivered;
        }
    }
}

/// Runs whole ticks up to and including `last_tick`, as that many fixed steps would: the clock
/// enters each tick that has events at its start `(t, 0)` and dispatches the tick's events.
/// Does not move the clock past the last event; the caller sets the final position.
pub(crate) fn dispatch_ticks_through(world: &mut World, last_tick: i64) -> Dispatched {
    let limit = tick_end(tick_start(last_tick));
    let mut done = Dispatched::default();
    let hooks = DispatchRegistry::hooks(world);
    loop {
        let Some(at) = earliest(world, &hooks).filter(|at| *at <= limit) else {
            return done;
        };
        move_clock_to(world, tick_start(at.ticks));
        let d = dispatch_through(world, tick_end(at), None);
        done.events += d.events;
        done.instants += d.instants;
    }
}
