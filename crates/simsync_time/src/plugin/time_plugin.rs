//! [`VirtualTimePlugin`]: wires the tick rate, the current virtual instant, the clock that
//! advances it and the event dispatch into an App.

use bevy::ecs::schedule::{InternedScheduleLabel, ScheduleLabel};
use bevy::prelude::*;

use super::dispatch::{
    DispatchRegistry, Dispatched, dispatch_through, dispatch_ticks_through, move_clock_to,
    next_event, register_queue,
};
use crate::clock::{last_tick_of, next_tick, planned_after, tick_end};
use crate::{
    AdvancePolicy, ClockRequest, ClockStats, CurrentInstant, Delivery, FrameBudget, TickRate,
    TimeError, VirtualClock, VirtualInstant,
};

/// Adds discrete-event virtual time to an App: a [`TickRate`], a [`CurrentInstant`] the plugin
/// advances by its [`AdvancePolicy`], a [`VirtualClock`] with the policy and counters, and the
/// dispatch of registered [`VirtualEventQueue`](crate::VirtualEventQueue)s
/// ([time rules 6, 8 and 16–18](crate::rules)).
///
/// # How this relates to Bevy's `Time<Virtual>`
///
/// Bevy's `Time<Virtual>` is a game clock: it follows wall-clock time in seconds, and can be
/// paused and sped up or slowed down. The virtual time of this plugin is the *discrete-event*
/// notion instead: an instant is a whole number of ticks plus a priority that orders events
/// falling on the same tick ([`VirtualInstant`]), and it moves only when the simulation
/// advances it. The two are independent; the plugin neither reads nor changes `Time<Virtual>`.
/// The only shared number is the default rate: 64 ticks per second, the same as Bevy's default
/// `Time<Fixed>` step, so under [`AdvancePolicy::FixedStep`] one fixed step is one tick.
///
/// # Advancing and dispatching
///
/// | policy | where | what |
/// |---|---|---|
/// | [`FixedStep`](AdvancePolicy::FixedStep) (default) | `FixedFirst` / `FixedLast` | dispatch tick `t`'s events, then move to `t + 1` |
/// | [`NextEvent`](AdvancePolicy::NextEvent) | `PreUpdate` | jump to the next event's instant, dispatch it, repeat within the [`FrameBudget`] |
/// | [`Paused`](AdvancePolicy::Paused) | `PreUpdate` | only [`ClockRequest`](crate::ClockRequest)s move it |
/// | [`Driven`](AdvancePolicy::Driven) ([`driven_by`](Self::driven_by)) | the given schedule | someone else moves it; dispatch tick `t`'s events |
///
/// The systems sit in [`VirtualTimeSet::Dispatch`] and [`VirtualTimeSet::Advance`]. Queues join
/// the dispatch with [`add_virtual_events`](crate::VirtualEventAppExt::add_virtual_events).
/// `FixedStep` needs Bevy's fixed main loop (`TimePlugin`, part of `MinimalPlugins`).
///
/// # Resources
///
/// - [`TickRate`]: if a rate was given to the plugin ([`tick_rate`](Self::tick_rate) or
///   [`with_tick_rate`](Self::with_tick_rate)), it is inserted, replacing any `TickRate`
///   already in the App, because an explicit setting should not be ignored silently. If no rate
///   was given, an existing `TickRate` is kept (so one loaded from a config file earlier wins),
///   and otherwise the default of 64 ticks per second is inserted.
/// - [`CurrentInstant`]: inserted at [`VirtualInstant::ZERO`] unless one is already present
///   (for example restored from a snapshot).
/// - [`VirtualClock`]: the same rule as the rate, for the policy ([`advance`](Self::advance)).
///
/// The simulation-frame structure (setup, object tick, network tick, advance) and
/// double-buffered state are a separate plugin, [`FramePhasesPlugin`](crate::FramePhasesPlugin);
/// with both in `FixedUpdate`, one frame is one tick of this clock.
///
/// # Example
///
/// ```
/// use bevy::prelude::*;
/// use simsync_time::prelude::*;
///
/// let plugin = VirtualTimePlugin::default()
///     .with_tick_rate(128)?
///     .advance(AdvancePolicy::NextEvent(FrameBudget::events(1_000)?));
/// let mut app = App::new();
/// app.add_plugins(plugin).add_virtual_events::<&'static str>(Delivery::Messages);
/// app.world_mut()
///     .resource_mut::<VirtualEventQueue<&'static str>>()
///     .schedule(VirtualInstant::new(640, 0), "five seconds");
/// app.update();
/// assert_eq!(app.world().resource::<CurrentInstant>().0, VirtualInstant::new(640, 0));
/// assert_eq!(app.world().resource::<VirtualClock>().next_event(), VirtualInstant::INFINITY);
/// # Ok::<(), simsync_time::TimeError>(())
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct VirtualTimePlugin {
    tick_rate: Option<TickRate>,
    policy: Option<AdvancePolicy>,
    driven_by: Option<InternedScheduleLabel>,
}

/// The plugin's systems, to order against ([time rule 16](crate::rules)).
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect)]
#[reflect(Debug, Clone, PartialEq, Hash)]
pub enum VirtualTimeSet {
    /// Dispatches the current tick's due events: in `FixedFirst` under
    /// [`AdvancePolicy::FixedStep`], in the driving schedule under [`AdvancePolicy::Driven`].
    /// Readers of [`VirtualEvent`](crate::VirtualEvent) Messages go after it.
    Dispatch,
    /// Moves the clock: to the next tick in `FixedLast` under `FixedStep`; jumps and dispatches
    /// (or runs requests) in `PreUpdate` under `NextEvent` and `Paused`.
    Advance,
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

    /// Sets how the clock advances (see the [type docs](VirtualTimePlugin)). An explicit policy
    /// replaces the one of a [`VirtualClock`] already in the App; without one, an existing
    /// clock keeps its policy and a new one gets [`AdvancePolicy::FixedStep`].
    /// [`AdvancePolicy::Driven`] given here dispatches nowhere; use
    /// [`driven_by`](Self::driven_by).
    #[must_use]
    pub const fn advance(mut self, policy: AdvancePolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// [`AdvancePolicy::Driven`]: the owner of `schedule` sets [`CurrentInstant`] before each
    /// run (a deterministic simulation world does, at each simulation tick) and the plugin
    /// dispatches the due events of that tick in `schedule`, in [`VirtualTimeSet::Dispatch`].
    #[must_use]
    pub fn driven_by(mut self, schedule: impl ScheduleLabel) -> Self {
        self.policy = Some(AdvancePolicy::Driven);
        self.driven_by = Some(schedule.intern());
        self
    }

    /// The rate this plugin will insert, or `None` if it keeps an existing [`TickRate`] or
    /// inserts the default (see the [type docs](VirtualTimePlugin)). Discrete ticks per second,
    /// not a property of Bevy's `Time<Virtual>`.
    pub const fn configured_tick_rate(&self) -> Option<TickRate> {
        self.tick_rate
    }

    /// The policy this plugin will set, or `None` to keep an existing clock's (or the default).
    pub const fn configured_policy(&self) -> Option<AdvancePolicy> {
        self.policy
    }
}

/// Which clock systems are installed (crate-internal), so adding the plugin again adds none twice.
#[derive(Resource, Default)]
struct InstalledClockSystems {
    standard: bool,
    driven: Vec<InternedScheduleLabel>,
}

impl Plugin for VirtualTimePlugin {
    /// Inserts the resources described on [`VirtualTimePlugin`], registers the crate's types for
    /// reflection and installs the clock systems once (per driving schedule). Leaves Bevy's
    /// `Time<Virtual>` alone.
    fn build(&self, app: &mut App) {
        app.register_type::<VirtualInstant>()
            .register_type::<TickRate>()
            .register_type::<CurrentInstant>()
            .register_type::<VirtualClock>()
            .register_type::<AdvancePolicy>()
            .register_type::<FrameBudget>()
            .register_type::<ClockRequest>()
            .register_type::<ClockStats>()
            .register_type::<Delivery>()
            .register_type::<VirtualTimeSet>();
        match self.tick_rate {
            Some(rate) => app.insert_resource(rate),
            None => app.init_resource::<TickRate>(),
        };
        app.init_resource::<CurrentInstant>();
        match (self.policy, app.world().contains_resource::<VirtualClock>()) {
            (Some(policy), true) => app
                .world_mut()
                .resource_mut::<VirtualClock>()
                .set_policy(policy),
            (Some(policy), false) => {
                app.insert_resource(VirtualClock::new(policy));
            }
            (None, _) => {
                app.init_resource::<VirtualClock>();
            }
        }
        app.init_resource::<DispatchRegistry>();
        self.install_systems(app);
    }

    /// Not unique: `DeterministicPlugin` adds one with its session's rate (the last rate given wins).
    fn is_unique(&self) -> bool {
        false
    }
}

impl VirtualTimePlugin {
    fn install_systems(&self, app: &mut App) {
        let mut installed = app
            .world_mut()
            .get_resource_or_init::<InstalledClockSystems>();
        if let Some(schedule) = self.driven_by {
            if installed.driven.contains(&schedule) {
                return;
            }
            installed.driven.push(schedule);
            app.add_systems(schedule, dispatch_tick.in_set(VirtualTimeSet::Dispatch));
            return;
        }
        if std::mem::replace(&mut installed.standard, true) {
            return;
        }
        app.add_systems(
            FixedFirst,
            dispatch_fixed_step.in_set(VirtualTimeSet::Dispatch),
        )
        .add_systems(
            FixedLast,
            advance_fixed_step.in_set(VirtualTimeSet::Advance),
        )
        .add_systems(PreUpdate, advance_frame.in_set(VirtualTimeSet::Advance));
    }
}

fn policy(world: &World) -> AdvancePolicy {
    world.resource::<VirtualClock>().policy()
}

fn now(world: &World) -> VirtualInstant {
    world.resource::<CurrentInstant>().0
}

/// Records what a clock system did in [`VirtualClock`], with the next waiting instant.
fn finish(world: &mut World, done: Dispatched, advances: u64) {
    let next = next_event(world);
    world
        .resource_mut::<VirtualClock>()
        .record(done.events, advances, next);
}

/// Dispatches every event of the current tick (`ticks ≤ now.ticks`).
fn dispatch_tick(world: &mut World) {
    let done = dispatch_through(world, tick_end(now(world)), None);
    finish(world, done, 0);
}

fn dispatch_fixed_step(world: &mut World) {
    if policy(world) == AdvancePolicy::FixedStep {
        dispatch_tick(world);
    }
}

fn advance_fixed_step(world: &mut World) {
    if policy(world) == AdvancePolicy::FixedStep {
        let next = next_tick(now(world));
        world.resource_mut::<CurrentInstant>().0 = next;
        finish(world, Dispatched::default(), 1);
    }
}

fn advance_frame(world: &mut World) {
    match policy(world) {
        AdvancePolicy::NextEvent(budget) => {
            let start = now(world);
            let done = dispatch_through(world, VirtualInstant::INFINITY, Some((start, budget)));
            let mut advances = done.instants;
            // A tick budget caps how far one frame moves: with the next event beyond it, the
            // clock still moves to the start of the last tick the budget allows.
            if let Some(cap) = tick_budget_stop(start, budget, next_event(world)) {
                move_clock_to(world, cap);
                advances += 1;
            }
            finish(world, done, advances);
        }
        AdvancePolicy::Paused => {
            while let Some(request) = world.resource_mut::<VirtualClock>().take_request() {
                let done = run_request(world, request);
                finish(world, done, 1);
            }
        }
        AdvancePolicy::FixedStep | AdvancePolicy::Driven => {}
    }
}

/// Where a [`AdvancePolicy::NextEvent`] frame that started at `start` ends when the next waiting
/// event is beyond its tick budget: the start of tick `start.ticks + budget.ticks`. `None` without
/// a tick budget, with nothing waiting, or with the next event within the budget.
fn tick_budget_stop(
    start: VirtualInstant,
    budget: FrameBudget,
    next: VirtualInstant,
) -> Option<VirtualInstant> {
    let ticks = i64::try_from(budget.ticks?).unwrap_or(i64::MAX);
    if next.is_infinity() || budget.allows_instant(start, next) {
        return None;
    }
    Some(VirtualInstant::from_ticks(
        start.ticks.saturating_add(ticks),
    ))
}

/// Carries out one [`ClockRequest`] from the current instant.
fn run_request(world: &mut World, request: ClockRequest) -> Dispatched {
    let from = now(world);
    let done = match request {
        ClockRequest::Ticks(0) => Dispatched::default(),
        ClockRequest::Ticks(n) => dispatch_ticks_through(world, last_tick_of(from, n)),
        ClockRequest::Until(target) => dispatch_through(world, target, None),
    };
    move_clock_to(world, planned_after(from, request));
    done
}

/// Registers event queues with the plugin's dispatch.
pub trait VirtualEventAppExt {
    /// Inserts an empty [`VirtualEventQueue<E>`](crate::VirtualEventQueue) (unless one exists) and dispatches its due
    /// events by `delivery` ([time rule 17](crate::rules)); adds
    /// [`VirtualTimePlugin`] with its defaults if it is not there
    /// yet. Calling it again for the same `E` changes only the delivery.
    ///
    /// At an equal instant, queues are served in the order they were registered, each in its
    /// own `(priority, insertion)` order. Inside a deterministic simulation world register the
    /// queue for rollback as well (`rollback_resource::<VirtualEventQueue<E>>()`) and prefer
    /// [`Delivery::Observers`].
    fn add_virtual_events<E: Send + Sync + 'static>(&mut self, delivery: Delivery) -> &mut Self;
}

impl VirtualEventAppExt for App {
    fn add_virtual_events<E: Send + Sync + 'static>(&mut self, delivery: Delivery) -> &mut Self {
        if !self.world().contains_resource::<VirtualClock>() {
            self.add_plugins(VirtualTimePlugin::default());
        }
        register_queue::<E>(self, delivery);
        self
    }
}

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
