//! [`VirtualTimePlugin`] and what it drives: [`CurrentInstant`] (defined here, below both), the
//! dispatch of registered event queues (`dispatch`) and the plugin's wiring (`time_plugin`).
//!
//! `CurrentInstant`'s type name (`simsync_time::plugin::CurrentInstant`) is part of the game
//! fingerprint of snapshots, replays and desync dumps, which name every registered rollback
//! type: it stays in this module so that files recorded earlier keep matching.

use bevy::prelude::*;
use serde::{Deserialize, Serialize};

use crate::VirtualInstant;

mod dispatch;
mod time_plugin;

pub use dispatch::{Delivery, VirtualEvent};
pub use time_plugin::{VirtualEventAppExt, VirtualTimePlugin, VirtualTimeSet};

/// The simulation's current instant in discrete-event virtual time: the [`VirtualInstant`]
/// whose events are being processed now.
///
/// Not to be confused with Bevy's `Time<Virtual>::elapsed()`, a pausable game clock in seconds:
/// this value changes only when the simulation advances it. Inserted at
/// [`VirtualInstant::ZERO`] by [`VirtualTimePlugin`](crate::VirtualTimePlugin). Converts to seconds with the App's
/// [`TickRate`](crate::TickRate): `current.to_seconds(*rate)`.
#[derive(
    Resource,
    Reflect,
    Debug,
    Default,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    Deref,
    DerefMut,
)]
#[reflect(
    Resource,
    Debug,
    Default,
    Clone,
    PartialEq,
    Hash,
    Serialize,
    Deserialize
)]
pub struct CurrentInstant(pub VirtualInstant);

#[cfg(test)]
mod tests {
    use super::CurrentInstant;

    #[test]
    fn the_current_instant_keeps_the_type_name_recorded_files_name() {
        // Snapshots, replays and desync dumps recorded before CurrentInstant's module moved
        // name it by this path in their game fingerprint.
        assert_eq!(
            std::any::type_name::<CurrentInstant>(),
            "simsync_time::plugin::CurrentInstant"
        );
    }
}
