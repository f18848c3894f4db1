//! What the event plumbing reports: [`SimEventStats`] and [`UnregisteredSimEvent`].

use bevy::prelude::*;

use super::event::SimEventStatus;

/// Counters of simulation events across all registered types (main-app resource).
#[derive(Resource, Debug, Clone, Default, PartialEq, Eq, Reflect)]
#[reflect(Resource)]
pub struct SimEventStats {
    /// Arrivals written with status `Predicted`.
    pub predicted: u64,
    /// Arrivals written with status `Late`.
    pub late: u64,
    /// Arrivals written with status `Confirmed` (also the number of [`ConfirmedSimEvent`](crate::ConfirmedSimEvent)s).
    pub confirmed: u64,
    /// Arrivals written with status `Cancelled`.
    pub cancelled: u64,
    /// Events dropped because their type is not registered ([`UnregisteredSimEvent`]).
    pub unregistered_dropped: u64,
    /// Events written outside a simulation world (or with a tick no run of the update had),
    /// dropped.
    pub outside_tick: u64,
    /// Names of the event types found unregistered.
    pub unregistered_types: Vec<String>,
}

impl SimEventStats {
    pub(crate) fn count(&mut self, status: SimEventStatus) {
        match status {
            SimEventStatus::Predicted => self.predicted += 1,
            SimEventStatus::Late => self.late += 1,
            SimEventStatus::Confirmed => self.confirmed += 1,
            SimEventStatus::Cancelled => self.cancelled += 1,
        }
    }
}

/// A simulation world emitted events of a type the main app did not register with
/// [`add_sim_event`](crate::SimEventAppExt::add_sim_event): they are dropped. Written once per type.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct UnregisteredSimEvent {
    /// The event type's name.
    pub type_name: String,
    /// Events dropped when it was found.
    pub dropped: u64,
}
