//! What a simulation event is and what the main app receives: [`SimEvent`], its identity
//! [`SimEventId`], the [`SimEventStatus`] of an arrival, and the two message streams
//! [`SimEventReceived`] and [`ConfirmedSimEvent`].

use std::hash::Hash;

use bevy::prelude::*;

use crate::tick::Tick;

/// A value a simulation system emits with [`SimEvents`](crate::SimEvents) and the main app
/// receives once per identity ([simulation events](crate::rules#simulation-events)).
///
/// An event's identity at a tick is its [`key`](SimEvent::key) plus its occurrence (how many
/// events with an equal key the same tick emitted before it). Every `Clone + Eq + Hash` type is a
/// `SimEvent` whose key is the event itself. A type that is not `Eq + Hash` (it carries an `f32`,
/// say) implements the trait and names its identity:
///
/// ```
/// # use simsync_deterministic::SimEvent;
/// #[derive(Clone)]
/// struct Hit { target: u32, damage: f32 }
/// impl SimEvent for Hit {
///     type Key = u32;
///     fn key(&self) -> u32 { self.target }
/// }
/// ```
///
/// Two runs of a tick that emit the same key are the same event even when the other fields
/// differ; the main app then receives the fields of the latest run (of the verified world when
/// confirmed).
pub trait SimEvent: Clone + Send + Sync + 'static {
    /// What identifies the event within its tick.
    type Key: Clone + Eq + Hash + Send + Sync + 'static;
    /// The event's key.
    fn key(&self) -> Self::Key;
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> SimEvent for T {
    type Key = T;
    fn key(&self) -> T {
        self.clone()
    }
}

/// Where an event stands, as written in [`SimEventReceived::status`].
///
/// Every identity arrives first as `Predicted` or `Late`, then once as `Confirmed` or
/// `Cancelled`. A cancelled identity that a later re-simulation produces again arrives again
/// as `Late` (and is then confirmed or cancelled again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect)]
pub enum SimEventStatus {
    /// The predicted world produced it while simulating its tick for the first time.
    Predicted,
    /// First produced after its tick had been simulated once: by a re-simulation after a
    /// rollback, or only by the verified world (in which case `Confirmed` follows in the same
    /// update; in lockstep mode every event arrives so).
    Late,
    /// The verified world produced it: it happened and cannot be undone.
    Confirmed,
    /// Announced (`Predicted` or `Late`) but a re-simulation or verification of its tick no
    /// longer produced it: it did not happen.
    Cancelled,
}

impl SimEventStatus {
    /// `Predicted` or `Late`: the first arrival of an identity, where an immediate effect starts.
    pub fn is_announcement(self) -> bool {
        matches!(self, Self::Predicted | Self::Late)
    }
}

/// The identity of one event: its tick, key and occurrence. Equal ids name the same event in
/// every message about it (key a map of running effects by it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SimEventId<K> {
    /// The tick that emitted it.
    pub tick: Tick,
    /// The event's [`SimEvent::key`].
    pub key: K,
    /// How many events with an equal key the tick emitted before it (0 for the first).
    pub occurrence: u32,
}

/// An arrival of a simulation event in the main app (a Bevy message, written during the
/// session update after prediction, before the `AfterPrediction` hooks). See
/// [`SimEventStatus`] for the order in which one identity's arrivals come.
#[derive(Message, Debug, Clone, PartialEq)]
pub struct SimEventReceived<E: SimEvent> {
    /// The tick that emitted it.
    pub tick: Tick,
    /// The event, as the latest run of its tick produced it (for `Cancelled`, as last
    /// announced).
    pub event: E,
    /// How many events with an equal key the tick emitted before it.
    pub occurrence: u32,
    /// Where it stands.
    pub status: SimEventStatus,
}

impl<E: SimEvent> SimEventReceived<E> {
    /// The event's identity.
    pub fn id(&self) -> SimEventId<E::Key> {
        SimEventId {
            tick: self.tick,
            key: self.event.key(),
            occurrence: self.occurrence,
        }
    }
}

/// A simulation event the verified world produced (a Bevy message): exactly once per identity,
/// never undone. Drive effects that must happen exactly once from it (network sends, scores
/// kept outside the simulation, achievements).
#[derive(Message, Debug, Clone, PartialEq)]
pub struct ConfirmedSimEvent<E: SimEvent> {
    /// The tick that emitted it.
    pub tick: Tick,
    /// The event as the verified world produced it.
    pub event: E,
    /// How many events with an equal key the tick emitted before it.
    pub occurrence: u32,
}

impl<E: SimEvent> ConfirmedSimEvent<E> {
    /// The event's identity (equal to the id of its [`SimEventReceived`] arrivals).
    pub fn id(&self) -> SimEventId<E::Key> {
        SimEventId {
            tick: self.tick,
            key: self.event.key(),
            occurrence: self.occurrence,
        }
    }
}
