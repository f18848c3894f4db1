//! [`OwnershipClock`]: the time every rule timing of
//! [`OwnershipConfig`](crate::OwnershipConfig) is measured on, and the system that advances it.

use core::time::Duration;

use bevy::prelude::*;
use simsync_net::NetClock;

/// The plugin's clock: time since the App started, advanced once per `App::update` by the
/// [`NetClock`] step (`NetClock::Fixed(dt)` for reproducible tests), or by `Time`'s delta
/// without a `NetClock`. The rule timings of [`OwnershipConfig`](crate::OwnershipConfig) are
/// measured on it.
#[derive(Resource, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnershipClock {
    now: Duration,
}

impl OwnershipClock {
    /// Time since the first update.
    pub fn now(&self) -> Duration {
        self.now
    }
}

/// `PreUpdate`, first in [`OwnershipSet::Receive`](crate::OwnershipSet::Receive): advances
/// [`OwnershipClock`] by this update's step.
pub(crate) fn advance_clock(
    mut clock: ResMut<OwnershipClock>,
    net: Option<Res<NetClock>>,
    real: Option<Res<Time<bevy::time::Real>>>,
    time: Option<Res<Time>>,
) {
    let dt = match net.as_deref() {
        Some(net) => net.delta(real.as_deref()),
        None => time.map(|t| t.delta()).unwrap_or_default(),
    };
    clock.now += dt;
}
