//! The verified and the predicted world: two Bevy sub-apps built from the same plugins, then
//! owned by the session as [`SimulationWorlds`].
//!
//! Both are built as [`SubApp`]s so that plugins (the game's, Rapier's) go through Bevy's normal
//! build / finish / cleanup lifecycle. When the app is cleaned up, the session takes their
//! worlds and drives them itself: Bevy's own `App::update` would run sub-apps in hash-map order
//! after the main schedule, which gives no control over verification and prediction.

mod blueprint;

pub(crate) use blueprint::{SessionBlueprint, assemble_worlds, build_worlds};

use bevy::app::AppLabel;
use bevy::ecs::message::MessageRegistry;
use bevy::ecs::schedule::{MultiThreadedExecutor, ScheduleLabel, SingleThreadedExecutor};
use bevy::prelude::*;
use bevy::transform::TransformSystems;
use bevy::transform::systems::{
    mark_dirty_trees, propagate_parent_transforms, sync_simple_transforms,
};
use bevy_rapier3d::pipeline::{CollisionEvent, ContactForceEvent};
use bevy_rapier3d::plugin::context::RapierContextSimulation;
use bevy_rapier3d::prelude::*;
use simsync_time::TickRate;

use crate::error::SessionError;
use crate::input::{InputStatus, PlayerInputs, SimInput};
use crate::schedule::{SimulationSet, SimulationStartup, SimulationTick};
use crate::snapshot::{
    self, ReservedSlots, RollbackRegistry, RollbackReport, RollbackStrategy, SimulationEntities,
    SimulationWorld, Synced, WorldRole,
};
use crate::tick::{PlayerIndex, SimTick, Tick};

/// The verified and the predicted world, owned by the session (a main-app resource).
#[derive(Resource)]
pub struct SimulationWorlds {
    // Boxed: Bevy keeps room for 64 values of every resource type, and these are kilobytes.
    pub(crate) verified: Box<SimulationWorld>,
    pub(crate) predicted: Box<SimulationWorld>,
    pub(crate) registry: Box<RollbackRegistry>,
    /// The predicted world shares the verified world's state: the predicted timeline is the
    /// verified one up to the verified tick and nothing is predicted beyond it, so the predicted
    /// world is not simulated and reads as the verified world until it must predict again (see
    /// [the shared timeline](crate::rules#the-predicted-world-shares-a-verified-timeline)). The
    /// predicted sub-world itself then holds the verified state of an earlier tick.
    pub(crate) shared: bool,
}

impl SimulationWorlds {
    /// The verified world (read-only).
    pub fn verified(&self) -> &World {
        &self.verified.world
    }

    /// The predicted world (read-only): what a game presents. While the predicted world shares
    /// the verified world's state ([`SimulationWorlds::predicted_shares_verified`]), this is the
    /// verified world: its state is the predicted state.
    pub fn predicted(&self) -> &World {
        if self.shared {
            &self.verified.world
        } else {
            &self.predicted.world
        }
    }

    /// Whether the predicted world shares the verified world's state now: nothing is predicted
    /// beyond the verified tick and every earlier prediction held, so the session did not
    /// simulate or copy the predicted world and [`SimulationWorlds::predicted`] reads the
    /// verified world (see [the shared
    /// timeline](crate::rules#the-predicted-world-shares-a-verified-timeline)).
    pub fn predicted_shares_verified(&self) -> bool {
        self.shared
    }

    /// The tick of the predicted state: the verified tick while the predicted world shares the
    /// verified world's state.
    pub(crate) fn predicted_tick(&self) -> Tick {
        if self.shared {
            self.verified.tick()
        } else {
            self.predicted.tick()
        }
    }

    /// Copies the verified world into the predicted world (a rollback by copy); the predicted
    /// world stops sharing the verified world's state.
    pub(crate) fn copy_verified_into_predicted(&mut self) -> RollbackReport {
        self.shared = false;
        snapshot::rollback(&mut self.verified, &mut self.predicted, &mut self.registry)
    }

    /// The verified world, mutable (tests and tools; changing simulation state here breaks
    /// determinism unless every peer does the same).
    pub fn verified_mut(&mut self) -> &mut World {
        &mut self.verified.world
    }

    /// The predicted world, mutable (see [`SimulationWorlds::verified_mut`]). While the
    /// predicted world shares the verified world's state, the verified world is first copied
    /// into it (a rollback), so the caller gets a world of its own to change.
    pub fn predicted_mut(&mut self) -> &mut World {
        if self.shared {
            self.copy_verified_into_predicted();
        }
        &mut self.predicted.world
    }

    /// The registry of rolled-back state.
    pub fn registry(&self) -> &RollbackRegistry {
        &self.registry
    }

    /// The registered components and resources that cannot go into a snapshot, by type name
    /// in registration order (components first): no snapshot serializer (`_serde`
    /// registration) and, for a component, no reflection as one in the verified world's type
    /// registry ([snapshots](crate::rules#snapshots)). Empty when every one can. What the
    /// session reports as [`SessionError::NotSerializable`] at its start with snapshots
    /// enabled; a host that must serve snapshots (an authoritative room's world) checks it
    /// before it starts.
    pub fn unserializable_types(&self) -> Vec<&'static str> {
        crate::snapshot::capture::unserializable_types(&self.verified.world, &self.registry)
    }

    /// Registers component `T` for rollback.
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the first session update has run: register in
    /// your game plugin instead.
    pub fn try_register_component<T>(&mut self) -> Result<(), SessionError>
    where
        T: Component<Mutability = bevy::ecs::component::Mutable> + Clone,
    {
        self.registry
            .register_component::<T>(RollbackStrategy::Clone)
    }

    /// Rolls the predicted world back to the verified world now (what a session update does when
    /// it decides to roll back). For tools and tests; the session's own bookkeeping of the
    /// predicted tick is corrected at its next update.
    pub fn rollback_predicted(&mut self) -> RollbackReport {
        self.copy_verified_into_predicted()
    }

    /// The checksum of the verified world now.
    pub fn verified_checksum(&mut self) -> u64 {
        snapshot::checksum(&mut self.verified, &self.registry)
    }

    /// The checksum of the predicted world now (same function as verified checksums; the
    /// verified world's while the predicted world shares its state).
    pub fn predicted_checksum(&mut self) -> u64 {
        if self.shared {
            return self.verified_checksum();
        }
        snapshot::checksum(&mut self.predicted, &self.registry)
    }
}

/// Label of the verified world's sub-app (present only while the app is being built).
#[derive(AppLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct VerifiedApp;

/// Label of the predicted world's sub-app (present only while the app is being built).
#[derive(AppLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct PredictedApp;

/// What both simulation worlds are built from.
#[derive(Clone, Copy)]
pub(crate) struct WorldSpec {
    pub tick_rate: TickRate,
    pub max_simulation_entities: u32,
    pub reuse_delay: Tick,
    pub players: PlayerIndex,
    pub parallel: bool,
    /// Snapshots are enabled: missing serializers are setup errors.
    pub snapshots: bool,
}

/// Builds the verified and the predicted sub-app (see [`build_sub_app`]); the two share one
/// type registry, as they run the same game.
pub(crate) fn build_sub_apps<I: SimInput>(
    spec: &WorldSpec,
    game: &GameBuilder,
) -> Result<(SubApp, SubApp), SessionError> {
    let types = AppTypeRegistry::default();
    let verified = build_sub_app::<I>(WorldRole::Verified, spec, game.clone(), &types)?;
    let predicted = build_sub_app::<I>(WorldRole::Predicted, spec, game.clone(), &types)?;
    Ok((verified, predicted))
}

/// Builds one simulation sub-app: reserved entity range, core resources (`types` as its type
/// registry), schedules, Rapier in [`SimulationTick`], then the game plugin.
fn build_sub_app<I: SimInput>(
    role: WorldRole,
    spec: &WorldSpec,
    game: GameBuilder,
    types: &AppTypeRegistry,
) -> Result<SubApp, SessionError> {
    let mut sub = SubApp::new();
    let slots = ReservedSlots::reserve(sub.world_mut(), spec.max_simulation_entities)?;
    insert_core_resources::<I>(sub.world_mut(), role, spec, types, slots);
    add_simulation_schedules(&mut sub, spec.parallel);
    add_physics(&mut sub);
    add_virtual_time(&mut sub, spec.tick_rate);
    sub.add_plugins(GamePlugin(game));
    let rapier = std::any::type_name::<RapierPhysicsPlugin<NoUserData>>();
    if sub.is_plugin_added::<RapierPhysicsPlugin<NoUserData>>() {
        return Err(SessionError::PluginInGame { plugin: rapier });
    }
    sub.add_plugins(BuiltinAdded(rapier));
    set_transition_executor(&mut sub, spec.parallel);
    Ok(sub)
}

/// A plugin every simulation world has (Rapier), added under a name of its own: a game plugin
/// that adds it again is then found after its build and refused with
/// [`SessionError::PluginInGame`], instead of Bevy's generic "plugin already added" panic.
/// The world is built exactly as with the plugin itself. (Transform propagation cannot be
/// wrapped so: `TransformPlugin` adds a plugin of its own, whose second addition is Bevy's
/// panic whatever this crate does.)
struct Builtin<P: Plugin>(P);

impl<P: Plugin> Plugin for Builtin<P> {
    fn build(&self, app: &mut App) {
        self.0.build(app);
    }

    fn ready(&self, app: &App) -> bool {
        self.0.ready(app)
    }

    fn finish(&self, app: &mut App) {
        self.0.finish(app);
    }

    fn cleanup(&self, app: &mut App) {
        self.0.cleanup(app);
    }
}

/// Once the game plugin is built: makes `is_plugin_added` true in the simulation world for
/// the [`Builtin`] plugin of this type name, as it is there. Does nothing else.
struct BuiltinAdded(&'static str);

impl Plugin for BuiltinAdded {
    fn build(&self, _app: &mut App) {}

    fn name(&self) -> &str {
        self.0
    }
}

/// The resources every simulation world starts with: `types` as its type registry, its
/// reserved `slots`, `role`, tick, clocks, simulation entities, player inputs, Rapier's fixed
/// timestep and the rollback registry.
fn insert_core_resources<I: SimInput>(
    world: &mut World,
    role: WorldRole,
    spec: &WorldSpec,
    types: &AppTypeRegistry,
    slots: ReservedSlots,
) {
    let dt = spec.tick_rate.tick_duration();
    world.insert_resource(types.clone());
    world.insert_resource(slots);
    world.insert_resource(role);
    world.insert_resource(SimTick(0));
    world.insert_resource(spec.tick_rate);
    world.insert_resource(Time::<()>::default());
    world.insert_resource(SimulationEntities::new(
        spec.max_simulation_entities,
        spec.reuse_delay,
    ));
    world.insert_resource(PlayerInputs::<I>::new(spec.players));
    world.insert_resource(TimestepMode::Fixed {
        dt: dt.as_secs_f32(),
        substeps: 1,
    });
    let registry = core_registry::<I>(world, spec.snapshots);
    world.insert_resource(registry);
    world.insert_resource(simsync_time::CurrentInstant::default());
}

/// The rollback registry of a new simulation world: Rapier's built-in state and the core
/// resources, with their serializers (`world`'s type registry gets Rapier's types); snapshots
/// on or off as `snapshots` says.
fn core_registry<I: SimInput>(world: &World, snapshots: bool) -> RollbackRegistry {
    use crate::snapshot::serial::serde_resource;
    use std::any::TypeId;
    let mut registry = RollbackRegistry::default();
    crate::snapshot::rapier::register_builtin(&mut registry);
    registry
        .register_hashed_resource::<SimTick>()
        .expect("registry open while building");
    registry
        .register_builtin_resource::<Time>()
        .expect("registry open while building");
    registry
        .register_resource_checked_elsewhere::<PlayerInputs<I>>()
        .expect("registry open while building");
    registry
        .register_builtin_resource::<SimulationEntities>()
        .expect("registry open while building");
    registry
        .register_builtin_resource::<simsync_time::CurrentInstant>()
        .expect("registry open while building");
    registry.set_resource_serial(TypeId::of::<SimTick>(), serde_resource::<SimTick>());
    registry.set_resource_serial(
        TypeId::of::<PlayerInputs<I>>(),
        serde_resource::<PlayerInputs<I>>(),
    );
    registry.set_resource_serial(
        TypeId::of::<SimulationEntities>(),
        serde_resource::<SimulationEntities>(),
    );
    let types = world.resource::<AppTypeRegistry>().clone();
    crate::snapshot::rapier_serial::register_builtin_serials(&mut registry, &mut types.write());
    registry.set_snapshots_enabled(snapshots);
    registry
}

/// [`SimulationTick`] (multi-threaded when `parallel`), [`SimulationStartup`] and Bevy's
/// startup schedules.
fn add_simulation_schedules(sub: &mut SubApp, parallel: bool) {
    let mut tick = Schedule::new(SimulationTick);
    if parallel {
        tick.set_executor(MultiThreadedExecutor::new());
    } else {
        tick.set_executor(SingleThreadedExecutor::new());
    }
    sub.add_schedule(tick);
    sub.add_schedule(Schedule::new(SimulationStartup));
    sub.add_schedule(Schedule::new(PreStartup));
    sub.add_schedule(Schedule::new(Startup));
    sub.add_schedule(Schedule::new(PostStartup));
}

/// Transforms and Rapier in [`SimulationTick`]: the simulation sets around Rapier's, transform
/// propagation, and Rapier's removals synced in [`SimulationSet::Cleanup`].
fn add_physics(sub: &mut SubApp) {
    // bevy_rapier inserts its mass-change messages as a bare resource, which no message update
    // ages: registered here first (bevy_rapier's insertion keeps the registration), they are
    // aged once a tick with every other message of the world (see `age_messages`).
    sub.add_message::<MassModifiedEvent>();
    sub.add_plugins((
        bevy::transform::TransformPlugin,
        Builtin(RapierPhysicsPlugin::<NoUserData>::default().in_schedule(SimulationTick)),
    ));
    sub.configure_sets(
        SimulationTick,
        (SimulationSet::Prepare, SimulationSet::Game)
            .chain()
            .before(PhysicsSet::SyncBackend),
    );
    sub.configure_sets(
        SimulationTick,
        SimulationSet::Cleanup
            .after(PhysicsSet::Writeback)
            .after(TransformSystems::Propagate),
    );
    sub.add_systems(
        SimulationTick,
        (
            mark_dirty_trees,
            propagate_parent_transforms,
            sync_simple_transforms,
        )
            .chain()
            .in_set(TransformSystems::Propagate),
    );
    // Removals made during a tick reach Rapier within the same tick in both worlds, so no
    // removal is pending across a tick boundary (where a rollback could not copy it).
    sub.add_systems(
        SimulationTick,
        crate::physics_order::sync_removals_at_cleanup.in_set(SimulationSet::Cleanup),
    );
    // New Rapier bodies, colliders and joints are created in entity order, whatever the
    // order of the tables they sit in (rule: Rapier objects are created in entity order).
    {
        use bevy_rapier3d::plugin::systems::{init_rigid_bodies, sync_removals};
        sub.add_systems(
            SimulationTick,
            crate::physics_order::init_in_entity_order
                .in_set(PhysicsSet::SyncBackend)
                .after(sync_removals)
                .before(init_rigid_bodies),
        );
    }
}

/// Virtual time inside the world, driven by [`SimulationTick`] at `tick_rate`, its dispatch in
/// [`SimulationSet::Prepare`].
fn add_virtual_time(sub: &mut SubApp, tick_rate: TickRate) {
    // Virtual time inside the world: the session sets `CurrentInstant` to `(tick, 0)` in
    // `run_tick`; the plugin dispatches the registered event queues' due events of that tick
    // before the game's systems (time rule 16).
    sub.add_plugins(
        simsync_time::VirtualTimePlugin::default()
            .tick_rate(tick_rate)
            .driven_by(SimulationTick),
    );
    sub.configure_sets(
        SimulationTick,
        simsync_time::VirtualTimeSet::Dispatch.in_set(SimulationSet::Prepare),
    );
}

/// Runs the rollback states' transitions on the tick's executor (multi-threaded when
/// `parallel`), if the game added states.
fn set_transition_executor(sub: &mut SubApp, parallel: bool) {
    // Rollback states run their transitions inside the tick (`StateTransition`): on the tick's
    // own executor, not Bevy's default multi-threaded one, which would wake the thread pool
    // for a few systems at every tick of both worlds.
    if let Some(mut schedules) = sub.world_mut().get_resource_mut::<Schedules>()
        && let Some(transitions) = schedules.get_mut(bevy_state::state::StateTransition)
    {
        if parallel {
            transitions.set_executor(MultiThreadedExecutor::new());
        } else {
            transitions.set_executor(SingleThreadedExecutor::new());
        }
    }
}

/// The user's simulation plugins, as a closure run in each simulation sub-app.
pub(crate) type GameBuilder = std::sync::Arc<dyn Fn(&mut App) + Send + Sync>;

/// Adapter running the user's game closure inside a sub-app.
struct GamePlugin(GameBuilder);

impl Plugin for GamePlugin {
    fn build(&self, app: &mut App) {
        (self.0)(app);
    }
}

/// Takes a built sub-app's world, runs its startup schedules and the setup tick (tick 0) with
/// default inputs, so both worlds have run an identical first [`SimulationTick`].
pub(crate) fn into_simulation_world<I: SimInput>(mut sub: SubApp) -> SimulationWorld {
    let world = std::mem::take(sub.world_mut());
    drop(sub);
    let mut sw = SimulationWorld::new(world);
    for label in [
        PreStartup.intern(),
        Startup.intern(),
        PostStartup.intern(),
        SimulationStartup.intern(),
    ] {
        let _ = sw.world.try_run_schedule(label);
    }
    mark_contexts(&mut sw.world);
    let players = sw.world.resource::<PlayerInputs<I>>().len();
    let inputs = vec![I::default(); players];
    let status = vec![InputStatus::Confirmed; players];
    run_tick(&mut sw, 0, &inputs, &status, 0);
    sw
}

/// Adds [`Synced`] to every Rapier context entity so rollback copies it.
fn mark_contexts(world: &mut World) {
    let mut query =
        world.query_filtered::<Entity, (With<RapierContextSimulation>, Without<Synced>)>();
    let contexts: Vec<Entity> = query.iter(world).collect();
    for entity in contexts {
        world.entity_mut(entity).insert(Synced);
    }
}

/// The Rapier context entities of a world, in id order.
pub(crate) fn context_entities(world: &mut World) -> Vec<Entity> {
    let mut query = world.query_filtered::<Entity, With<RapierContextSimulation>>();
    let mut list: Vec<Entity> = query.iter(world).collect();
    list.sort();
    list
}

/// Ages the world's registered messages once, as Bevy's `First` schedule does once a frame
/// (a simulation world runs no `First`): each message lives through the tick that writes it
/// and the next one, then is dropped ([messages live two
/// ticks](crate::rules#messages-in-a-simulation-world-live-two-ticks)). `last` is the world's
/// change tick at the previous aging (a buffer unchanged since then and already aged once is
/// empty and skipped, as in Bevy); it is set to the change tick now.
fn age_messages(world: &mut World, last: &mut bevy::ecs::change_detection::Tick) {
    world.try_resource_scope(|world, mut registry: Mut<MessageRegistry>| {
        registry.run_updates(world, *last);
    });
    *last = world.change_tick();
}

/// Runs one [`SimulationTick`] on `sw` as tick `tick` with the given input set: sets `SimTick`,
/// `PlayerInputs`, advances `Time` by exactly one tick, ages the world's messages and clears
/// Rapier's per-tick collision messages, runs the schedule, records the change-tick mark and
/// clears the change trackers.
pub(crate) fn run_tick<I: SimInput>(
    sw: &mut SimulationWorld,
    tick: Tick,
    inputs: &[I],
    status: &[InputStatus],
    disconnected: u64,
) {
    // One span per simulated tick (no cost unless a tracing subscriber enables it).
    let _span = info_span!("simsync_tick", ?tick).entered();
    sw.ticks_run.push(tick);
    sw.runs_since_sync = sw.runs_since_sync.saturating_add(1);
    let world = &mut sw.world;
    world.resource_mut::<SimTick>().0 = tick;
    world
        .resource_mut::<PlayerInputs<I>>()
        .advance(tick, inputs, status, disconnected);
    let dt = world.resource::<TickRate>().tick_duration();
    world.resource_mut::<Time>().advance_by(dt);
    world.resource_mut::<simsync_time::CurrentInstant>().0 =
        simsync_time::VirtualInstant::from_ticks(i64::from(tick));
    age_messages(world, &mut sw.messages_aged);
    if let Some(mut messages) = world.get_resource_mut::<Messages<CollisionEvent>>() {
        messages.clear();
    }
    if let Some(mut messages) = world.get_resource_mut::<Messages<ContactForceEvent>>() {
        messages.clear();
    }
    world.run_schedule(SimulationTick);
    sw.mark = world.read_change_tick();
    world.clear_trackers();
    world.check_change_ticks();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_holding_both_worlds_stays_small() {
        // Bevy 0.19 keeps room for 64 values of every resource type it stores: unboxed, the
        // two worlds and the registry made this resource 3.5 kB, a 227 kB reservation.
        assert!(
            std::mem::size_of::<SimulationWorlds>() <= 64,
            "{} bytes",
            std::mem::size_of::<SimulationWorlds>()
        );
    }
}
