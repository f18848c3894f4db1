//! Double-buffered object state: [`Current<T>`] (this frame, read by everyone) and [`Next<T>`]
//! (next frame, written by the object's own systems), copied by [`FramePhase::AdvanceFrame`].
//!
//! This is the VR-Forces "current frame state / next frame state" scheme (see
//! [time rules: double buffering](crate::rules)). Because [`FramePhase::ObjectTick`] systems
//! read one component and write another, Bevy's scheduler runs them (and `par_iter_mut` inside
//! them) in parallel without locks, and every object sees the others exactly as they were at the
//! start of the frame, whatever the order in which objects or systems run.

use core::any::TypeId;

use bevy::ecs::component::{ComponentId, Mutable, StorageType};
use bevy::ecs::lifecycle::{ComponentHook, HookContext};
use bevy::ecs::schedule::InternedScheduleLabel;
use bevy::ecs::world::DeferredWorld;
use bevy::prelude::*;
use bevy::tasks::{ComputeTaskPool, TaskPool};

use super::{FramePhase, FramePhaseSchedules};

/// The state of an object as of the start of the current frame: what every system reads.
///
/// Written only by [`FramePhase::AdvanceFrame`] (the copy from [`Next<T>`]) for types registered
/// with [`DoubleBufferAppExt::register_double_buffered`]. Object-tick systems must not write it.
///
/// # Spawning
///
/// Spawn [`DoubleBuffered::new(value)`](DoubleBuffered::new) to get both halves at once. Adding
/// a `Current<T>` alone also works: its `on_add` hook inserts `Next<T>` with a clone of the same
/// value (when the hook's commands are applied, i.e. at the next sync point), unless the entity
/// already has a `Next<T>`.
///
/// # Rollback
///
/// Inside a deterministic simulation world, register **both** `Current<T>` and `Next<T>` for
/// rollback (`rollback_component`), or the predicted world keeps mispredicted values of the
/// half that is not restored.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deref, Reflect)]
pub struct Current<T>(pub T);

impl<T: Clone + Send + Sync + 'static> Component for Current<T> {
    const STORAGE_TYPE: StorageType = StorageType::Table;
    type Mutability = Mutable;

    /// Inserts `Next<T>` (a clone of this value) if the entity has none.
    fn on_add() -> Option<ComponentHook> {
        Some(init_next::<T>)
    }
}

/// The state an object will have in the next frame: written by the object's own systems during
/// [`FramePhase::ObjectTick`] (or by [`FramePhase::NetworkTick`] for remote objects), copied
/// into [`Current<T>`] by [`FramePhase::AdvanceFrame`].
///
/// Start each object tick from `Current` (e.g. `next.0 = f(&current.0)`); a `Next` left alone
/// keeps its last value and is not copied again.
#[derive(
    Component,
    Debug,
    Default,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Deref,
    DerefMut,
    Reflect,
)]
pub struct Next<T: Send + Sync + 'static>(pub T);

/// Both halves of a double-buffered value, as one bundle: `Current(value.clone())` and
/// `Next(value)`.
#[derive(Bundle, Debug, Clone, PartialEq)]
pub struct DoubleBuffered<T: Clone + Send + Sync + 'static> {
    /// This frame's value.
    pub current: Current<T>,
    /// Next frame's value, initially equal to `current`.
    pub next: Next<T>,
}

impl<T: Clone + Send + Sync + 'static> DoubleBuffered<T> {
    /// Both halves set to `value`.
    pub fn new(value: T) -> Self {
        DoubleBuffered {
            current: Current(value.clone()),
            next: Next(value),
        }
    }
}

fn init_next<T: Clone + Send + Sync + 'static>(mut world: DeferredWorld, ctx: HookContext) {
    let entity = ctx.entity;
    if world.get::<Next<T>>(entity).is_some() {
        return;
    }
    let Some(current) = world.get::<Current<T>>(entity) else {
        return;
    };
    let next = Next(current.0.clone());
    world.commands().entity(entity).try_insert_if_new(next);
}

/// One registered double-buffered type.
#[derive(Debug, Clone)]
struct BufferedType {
    type_id: TypeId,
    type_name: &'static str,
    current: ComponentId,
    add_copy_system: fn(&mut App, InternedScheduleLabel),
}

/// The types registered with [`DoubleBufferAppExt::register_double_buffered`], in registration
/// order (a resource, created by the first registration).
#[derive(Resource, Debug, Default)]
pub struct DoubleBufferRegistry {
    types: Vec<BufferedType>,
}

impl DoubleBufferRegistry {
    /// Whether `T` is registered.
    pub fn contains<T: 'static>(&self) -> bool {
        self.types.iter().any(|t| t.type_id == TypeId::of::<T>())
    }

    /// Number of registered types.
    pub fn len(&self) -> usize {
        self.types.len()
    }

    /// Whether no type is registered.
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// The registered `T`s' type names, in registration order.
    pub fn type_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.types.iter().map(|t| t.type_name)
    }

    /// The component ids of the registered `Current<T>`s, in registration order. An entity with
    /// any of them is an *object* in [`FrameTimings::objects`](crate::FrameTimings::objects).
    pub fn current_components(&self) -> impl Iterator<Item = ComponentId> + '_ {
        self.types.iter().map(|t| t.current)
    }
}

/// Registers double-buffered state types on an App.
pub trait DoubleBufferAppExt {
    /// Makes [`FramePhase::AdvanceFrame`] copy [`Next<T>`] into [`Current<T>`] on every entity
    /// whose `Next<T>` changed since the copy last ran (`Changed<Next<T>>`), in every schedule a
    /// [`FramePhasesPlugin`](crate::FramePhasesPlugin) configures, whether that plugin is added
    /// before or after this call.
    ///
    /// The copy compares first (`T: PartialEq`) and writes only a different value, so a `Next`
    /// that was rewritten with the same value does not mark `Current` changed; `Changed<Current<T>>`
    /// then means "the value really changed" (a float NaN never equals itself, so it is copied
    /// every time its `Next` is touched). Entities are copied in parallel (`par_iter_mut`).
    ///
    /// Registering the same `T` again does nothing. Types not registered are never copied.
    fn register_double_buffered<T>(&mut self) -> &mut Self
    where
        T: Clone + PartialEq + Send + Sync + 'static;
}

impl DoubleBufferAppExt for App {
    fn register_double_buffered<T>(&mut self) -> &mut Self
    where
        T: Clone + PartialEq + Send + Sync + 'static,
    {
        let current = self.world_mut().register_component::<Current<T>>();
        self.world_mut().register_component::<Next<T>>();
        let mut registry = self
            .world_mut()
            .get_resource_or_init::<DoubleBufferRegistry>();
        if registry.contains::<T>() {
            return self;
        }
        let entry = BufferedType {
            type_id: TypeId::of::<T>(),
            type_name: core::any::type_name::<T>(),
            current,
            add_copy_system: add_copy_system::<T>,
        };
        registry.types.push(entry);
        let schedules = self
            .world()
            .get_resource::<FramePhaseSchedules>()
            .map(|s| s.0.clone())
            .unwrap_or_default();
        for schedule in schedules {
            add_copy_system::<T>(self, schedule);
        }
        self
    }
}

/// Adds the copy systems of every type registered so far to `schedule` (called by
/// [`FramePhasesPlugin`](crate::FramePhasesPlugin) when it configures a schedule).
pub(crate) fn add_copy_systems(app: &mut App, schedule: InternedScheduleLabel) {
    let adders: Vec<fn(&mut App, InternedScheduleLabel)> = app
        .world()
        .get_resource::<DoubleBufferRegistry>()
        .map(|r| r.types.iter().map(|t| t.add_copy_system).collect())
        .unwrap_or_default();
    for add in adders {
        add(app, schedule);
    }
}

fn add_copy_system<T: Clone + PartialEq + Send + Sync + 'static>(
    app: &mut App,
    schedule: InternedScheduleLabel,
) {
    app.add_systems(
        schedule,
        advance_double_buffer::<T>.in_set(FramePhase::AdvanceFrame),
    );
}

/// Objects whose `Next<T>` changed since the copy system last ran.
type ChangedNext<'w, 's, T> =
    Query<'w, 's, (&'static mut Current<T>, &'static Next<T>), Changed<Next<T>>>;

/// `Next<T>` → `Current<T>` where `Next<T>` changed and the values differ.
fn advance_double_buffer<T: Clone + PartialEq + Send + Sync + 'static>(
    mut objects: ChangedNext<T>,
) {
    // `par_iter_mut` needs Bevy's compute pool; an App without `TaskPoolPlugin` (a bare
    // `App::new()` with a single-threaded schedule) has none yet. Created here, at the first
    // frame, rather than when the plugin is built, so a `TaskPoolPlugin` added later still
    // configures it.
    ComputeTaskPool::get_or_init(TaskPool::default);
    objects.par_iter_mut().for_each(|(mut current, next)| {
        // Reading through `Mut`'s `Deref` does not mark the component changed; only the write
        // below (through `DerefMut`) does.
        if current.0 != next.0 {
            current.0.clone_from(&next.0);
        }
    });
}
