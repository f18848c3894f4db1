//! [`VirtualTimePlugin`]: wires the tick rate and the current virtual instant into an App.

use bevy::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{TickRate, TimeError, VirtualInstant};

/// Adds discrete-event virtual time to an App: a [`TickRate`] resource and a [`CurrentInstant`]
/// resource, with their types registered for reflection ([time rules 6 and 8](crate::rules)).
///
/// # How this relates to Bevy's `Time<Virtual>`
///
/// Bevy's `Time<Virtual>` is a game clock: it follows wall-clock time in seconds, and can be
/// paused and sped up or slowed down. The virtual time of this plugin is the *discrete-event*
/// notion instead: an instant is a whole number of ticks plus a priority that orders events
/// falling on the same tick ([`VirtualInstant`]), and it moves only when the simulation
/// advances it, never by itself. The two are independent; the plugin neither reads nor changes
/// `Time<Virtual>`, and works without Bevy's `TimePlugin`. The only shared number is the
/// default rate: 64 ticks per second, the same as Bevy's default `Time<Fixed>` step.
///
/// # Resources
///
/// - [`TickRate`]: if a rate was given to the plugin ([`tick_rate`](Self::tick_rate) or
///   [`with_tick_rate`](Self::with_tick_rate)), it is inserted, replacing any `TickRate`
///   already in the App, because an explicit setting should not be ignored silently. If no rate
///   was given, an existing `TickRate` is kept (so one loaded from a config file earlier wins),
///   and otherwise the default of 64 ticks per second is inserted.
/// - [`CurrentInstant`]: inserted at [`VirtualInstant::ZERO`] unless one is already present
///   (for example restored from a snapshot). This plugin never advances it.
///
/// The simulation-frame structure (setup, object tick, network tick, advance) and
/// double-buffered state are a separate plugin, [`FramePhasesPlugin`](crate::FramePhasesPlugin),
/// added to whichever schedule runs one frame.
///
/// # Example
///
/// ```
/// use bevy::prelude::*;
/// use simsync_time::prelude::*;
///
/// let plugin = VirtualTimePlugin::default().with_tick_rate(128)?;
/// let mut app = App::new();
/// app.add_plugins(plugin);
/// assert_eq!(app.world().resource::<TickRate>().hz(), 128);
/// # Ok::<(), simsync_time::TimeError>(())
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct VirtualTimePlugin {
    tick_rate: Option<TickRate>,
}

impl VirtualTimePlugin {
    /// Sets the number of discrete virtual-time ticks per second. This is the resolution of
    /// [`VirtualInstant`]s, unrelated to the speed of Bevy's `Time<Virtual>` clock.
    #[must_use]
    pub const fn tick_rate(mut self, rate: TickRate) -> Self {
        self.tick_rate = Some(rate);
        self
    }

    /// Sets the number of discrete virtual-time ticks per second from a plain number, `hz`.
    /// This is the resolution of [`VirtualInstant`]s, unrelated to the speed of Bevy's
    /// `Time<Virtual>` clock.
    ///
    /// # Errors
    ///
    /// [`TimeError::TickRateNotPositive`] if `hz` is 0, so a bad rate is caught where the plugin
    /// is built, not later inside the App.
    pub const fn with_tick_rate(self, hz: u32) -> Result<Self, TimeError> {
        match TickRate::new(hz) {
            Ok(rate) => Ok(self.tick_rate(rate)),
            Err(error) => Err(error),
        }
    }

    /// The rate this plugin will insert, or `None` if it keeps an existing [`TickRate`] or
    /// inserts the default (see the [type docs](VirtualTimePlugin)). Discrete ticks per second,
    /// not a property of Bevy's `Time<Virtual>`.
    pub const fn configured_tick_rate(&self) -> Option<TickRate> {
        self.tick_rate
    }
}

impl Plugin for VirtualTimePlugin {
    /// Inserts [`TickRate`] and [`CurrentInstant`] as described on [`VirtualTimePlugin`] and
    /// registers `VirtualInstant`, `TickRate` and `CurrentInstant` for reflection. Adds no
    /// systems, and leaves Bevy's `Time<Virtual>` alone.
    fn build(&self, app: &mut App) {
        app.register_type::<VirtualInstant>()
            .register_type::<TickRate>()
            .register_type::<CurrentInstant>();
        match self.tick_rate {
            Some(rate) => app.insert_resource(rate),
            None => app.init_resource::<TickRate>(),
        };
        app.init_resource::<CurrentInstant>();
    }

    /// Not unique: `DeterministicPlugin` adds one with its session's rate (the last rate given wins).
    fn is_unique(&self) -> bool {
        false
    }
}

/// The simulation's current instant in discrete-event virtual time: the [`VirtualInstant`]
/// whose events are being processed now.
///
/// Not to be confused with Bevy's `Time<Virtual>::elapsed()`, a pausable game clock in seconds:
/// this value changes only when the simulation advances it. Inserted at
/// [`VirtualInstant::ZERO`] by [`VirtualTimePlugin`]. Converts to seconds with the App's
/// [`TickRate`]: `current.to_seconds(*rate)`.
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
    use super::*;

    fn rate(hz: u32) -> TickRate {
        TickRate::new(hz).unwrap()
    }

    #[test]
    fn inserts_resources_with_the_configured_rate() {
        let mut app = App::new();
        app.add_plugins(VirtualTimePlugin::default().with_tick_rate(128).unwrap());
        app.update();
        assert_eq!(*app.world().resource::<TickRate>(), rate(128));
        assert_eq!(
            *app.world().resource::<CurrentInstant>(),
            CurrentInstant(VirtualInstant::ZERO)
        );
    }

    #[test]
    fn default_plugin_inserts_64_ticks_per_second() {
        let mut app = App::new();
        app.add_plugins(VirtualTimePlugin::default());
        app.update();
        assert_eq!(app.world().resource::<TickRate>().hz(), 64);
    }

    #[test]
    fn zero_rate_is_a_typed_error_at_construction() {
        assert_eq!(
            VirtualTimePlugin::default().with_tick_rate(0),
            Err(TimeError::TickRateNotPositive { hz: 0.0 })
        );
    }

    #[test]
    fn explicit_rate_replaces_an_existing_one_default_keeps_it() {
        let mut app = App::new();
        app.insert_resource(rate(30))
            .add_plugins(VirtualTimePlugin::default().tick_rate(rate(256)));
        assert_eq!(app.world().resource::<TickRate>().hz(), 256);

        let mut app = App::new();
        app.insert_resource(rate(30))
            .insert_resource(CurrentInstant(VirtualInstant::new(9, 1)))
            .add_plugins(VirtualTimePlugin::default());
        assert_eq!(app.world().resource::<TickRate>().hz(), 30);
        assert_eq!(
            app.world().resource::<CurrentInstant>().0,
            VirtualInstant::new(9, 1)
        );
    }

    #[test]
    fn types_are_registered_for_reflection() {
        let mut app = App::new();
        app.add_plugins(VirtualTimePlugin::default());
        let registry = app.world().resource::<AppTypeRegistry>().read();
        assert!(registry.contains(core::any::TypeId::of::<VirtualInstant>()));
        assert!(registry.contains(core::any::TypeId::of::<TickRate>()));
        assert!(registry.contains(core::any::TypeId::of::<CurrentInstant>()));
    }

    #[test]
    fn systems_can_advance_the_current_instant() {
        let mut app = App::new();
        app.add_plugins(VirtualTimePlugin::default()).add_systems(
            Update,
            |mut now: ResMut<CurrentInstant>| {
                **now += 1;
            },
        );
        app.update();
        app.update();
        assert_eq!(app.world().resource::<CurrentInstant>().ticks, 2);
        assert_eq!(
            app.world()
                .resource::<CurrentInstant>()
                .to_seconds(*app.world().resource::<TickRate>()),
            2.0 / 64.0
        );
    }
}
