//! How one registered type is copied from the verified world to the predicted world.
//!
//! A rollback makes the predicted world's simulation state equal the verified world's. Each
//! registered component or resource type has a copier; all of them share one rule for change
//! ticks: a restored value carries the verified world's change state *relative to the end of the
//! last tick* ([`TickMap`]), so a system in the next tick sees `Changed<T>` in the predicted world
//! exactly when it would in the verified world, and restoring an unchanged value never looks
//! like a change.

use std::any::TypeId;

use bevy::ecs::change_detection::Tick;
use bevy::ecs::component::Mutable;
use bevy::ecs::query::QueryState;
use bevy::ecs::world::WorldId;
use bevy::prelude::*;
use std::hash::Hasher;

use super::digest::{
    DigestOutcome, debug_digest, reflect_component_digest, reflect_resource_digest,
};
use super::entities::Synced;
use crate::checksum::{SimHash, StateHasher};

/// How a registered type is duplicated during a rollback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect)]
pub enum RollbackStrategy {
    /// `Copy` types: a bitwise copy.
    Copy,
    /// `Clone` types: `clone_from`, which reuses the destination's allocations.
    Clone,
}

/// Maps change ticks of the verified world onto the predicted world, relative to the tick mark
/// each world recorded at the end of its last [`SimulationTick`](crate::SimulationTick).
#[derive(Debug, Clone, Copy)]
pub struct TickMap {
    src_mark: Tick,
    dst_mark: Tick,
    dst_now: Tick,
}

impl TickMap {
    /// A map from a world marked `src_mark` to one marked `dst_mark` whose current change tick is
    /// `dst_now`.
    pub fn new(src_mark: Tick, dst_mark: Tick, dst_now: Tick) -> Self {
        Self {
            src_mark,
            dst_mark,
            dst_now,
        }
    }

    /// The destination tick with the same offset from its mark as `tick` has from the source
    /// mark; never later than the destination's current tick.
    pub fn map(&self, tick: Tick) -> Tick {
        let offset = tick.get().wrapping_sub(self.src_mark.get()) as i32;
        let room = self.dst_now.get().wrapping_sub(self.dst_mark.get()) as i32;
        let offset = offset.min(room);
        Tick::new(self.dst_mark.get().wrapping_add(offset as u32))
    }
}

/// One registered component type: copy and hash.
pub(crate) trait ComponentCopier: Send + Sync {
    fn type_id(&self) -> TypeId;
    fn type_name(&self) -> &'static str;
    /// Makes every [`Synced`] entity of `dst` hold the same value (or absence) of the component
    /// as in `src`. Entities must already be aligned.
    fn copy(&mut self, src: &mut World, dst: &mut World, map: TickMap);
    /// Hashes the component of `entity` in `world`, if registered for checksums and present.
    fn hash(&self, world: &World, entity: Entity, hasher: &mut StateHasher);
    fn hashed(&self) -> bool;
    /// Feeds the component of every entity of `entities` (absence included) into `hasher`, for
    /// the full prediction check (see [`super::digest`]).
    fn digest(
        &self,
        _world: &World,
        _entities: &[Entity],
        _hasher: &mut StateHasher,
    ) -> DigestOutcome {
        DigestOutcome::Skipped
    }
}

/// One registered resource type.
pub(crate) trait ResourceCopier: Send + Sync {
    fn type_id(&self) -> TypeId;
    fn type_name(&self) -> &'static str;
    fn copy(&self, src: &World, dst: &mut World, map: TickMap);
    fn hash(&self, world: &World, hasher: &mut StateHasher);
    fn hashed(&self) -> bool;
    /// Feeds the resource (or its absence) into `hasher`, for the full prediction check.
    fn digest(&self, world: &World, hasher: &mut StateHasher) -> DigestOutcome;
}

type HashFn<T> = fn(&T, &mut StateHasher);

/// How the full prediction check compares a registered type that has no `SimHash`.
pub(crate) enum DigestSource<T> {
    /// By the value's `Debug` text (the crate's own registrations).
    Debug(HashFn<T>),
    /// Through reflection, if the simulation world's type registry reflects the type.
    Reflect,
    /// Not at all: compared by other means.
    Skip,
}

impl<T> Clone for DigestSource<T> {
    fn clone(&self) -> Self {
        match self {
            Self::Debug(f) => Self::Debug(*f),
            Self::Reflect => Self::Reflect,
            Self::Skip => Self::Skip,
        }
    }
}

impl<T: std::fmt::Debug> DigestSource<T> {
    /// Compared by `Debug` text.
    pub(crate) fn debug() -> Self {
        Self::Debug(|value, hasher| debug_digest(value, hasher))
    }
}

/// A query state cached for the world it was built for.
pub(crate) type CachedQuery<D, F = ()> = Option<(WorldId, QueryState<D, F>)>;

/// Copier of a `Clone` component (also used for `Copy` components).
pub(crate) struct CloneComponent<T: Component<Mutability = Mutable> + Clone> {
    src: CachedQuery<(Entity, Ref<'static, T>), With<Synced>>,
    dst: CachedQuery<&'static mut T, With<Synced>>,
    dst_all: CachedQuery<Entity, (With<T>, With<Synced>)>,
    hash: Option<HashFn<T>>,
    digest: DigestSource<T>,
    inserts: Vec<(Entity, T, Tick, Tick)>,
}

impl<T: Component<Mutability = Mutable> + Clone> CloneComponent<T> {
    pub(crate) fn new(hash: Option<HashFn<T>>, digest: DigestSource<T>) -> Self {
        Self {
            src: None,
            dst: None,
            dst_all: None,
            hash,
            digest,
            inserts: Vec::new(),
        }
    }
}

/// Returns a query state for `world`, rebuilding it when the cached one belongs to another world.
pub(crate) fn state_for<
    'a,
    D: bevy::ecs::query::QueryData + 'static,
    F: bevy::ecs::query::QueryFilter + 'static,
>(
    slot: &'a mut CachedQuery<D, F>,
    world: &mut World,
) -> &'a mut QueryState<D, F> {
    if slot.as_ref().is_none_or(|(id, _)| *id != world.id()) {
        *slot = Some((world.id(), QueryState::new(world)));
    }
    let (_, state) = slot.as_mut().expect("set above");
    state.update_archetypes(world);
    state
}

impl<T: Component<Mutability = Mutable> + Clone> ComponentCopier for CloneComponent<T> {
    fn type_id(&self) -> TypeId {
        TypeId::of::<T>()
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }

    fn copy(&mut self, src: &mut World, dst: &mut World, map: TickMap) {
        let src_q = state_for(&mut self.src, src);
        let src: &World = src;
        let dst_q = state_for(&mut self.dst, dst);
        let mut matched = 0usize;
        for (entity, value) in src_q.iter(src) {
            let changed = map.map(value.last_changed());
            let added = map.map(value.added());
            match dst_q.get_mut(dst, entity) {
                Ok(mut target) => {
                    target.bypass_change_detection().clone_from(&*value);
                    target.set_last_changed(changed);
                    target.set_last_added(added);
                    matched += 1;
                }
                Err(_) => self
                    .inserts
                    .push((entity, (*value).clone(), changed, added)),
            }
        }
        let dst_all = state_for(&mut self.dst_all, dst);
        if dst_all.iter(dst).count() > matched {
            let extra: Vec<Entity> = dst_all
                .iter(dst)
                .filter(|e| src.get::<T>(*e).is_none())
                .collect();
            for entity in extra {
                dst.entity_mut(entity).remove::<T>();
            }
        }
        for (entity, value, changed, added) in self.inserts.drain(..) {
            let Ok(mut target) = dst.get_entity_mut(entity) else {
                continue;
            };
            target.insert(value);
            if let Some(mut inserted) = target.get_mut::<T>() {
                inserted.set_last_changed(changed);
                inserted.set_last_added(added);
            }
        }
    }

    fn hash(&self, world: &World, entity: Entity, hasher: &mut StateHasher) {
        if let Some(hash) = self.hash
            && let Some(value) = world.get::<T>(entity)
        {
            hasher.write_str(self.type_name());
            hash(value, hasher);
        }
    }

    fn hashed(&self) -> bool {
        self.hash.is_some()
    }

    fn digest(
        &self,
        world: &World,
        entities: &[Entity],
        hasher: &mut StateHasher,
    ) -> DigestOutcome {
        if !entities.iter().any(|e| world.get::<T>(*e).is_some()) {
            return DigestOutcome::Absent;
        }
        hasher.write_str(self.type_name());
        let by_value = match (&self.hash, &self.digest) {
            (Some(f), _) | (None, DigestSource::Debug(f)) => f,
            (None, DigestSource::Skip) => return DigestOutcome::Skipped,
            (None, DigestSource::Reflect) => {
                return match reflect_component_digest(world, TypeId::of::<T>(), entities, hasher) {
                    Some(()) => DigestOutcome::Compared,
                    None => DigestOutcome::Unchecked,
                };
            }
        };
        for entity in entities {
            match world.get::<T>(*entity) {
                Some(value) => {
                    hasher.write_u8(1);
                    by_value(value, hasher);
                }
                None => hasher.write_u8(0),
            }
        }
        DigestOutcome::Compared
    }
}

/// Copier of a `Clone` resource, including its absence.
pub(crate) struct CloneResource<R: Resource<Mutability = Mutable> + Clone> {
    hash: Option<HashFn<R>>,
    digest: DigestSource<R>,
}

impl<R: Resource<Mutability = Mutable> + Clone> CloneResource<R> {
    pub(crate) fn new(hash: Option<HashFn<R>>, digest: DigestSource<R>) -> Self {
        Self { hash, digest }
    }
}

impl<R: Resource<Mutability = Mutable> + Clone> ResourceCopier for CloneResource<R> {
    fn type_id(&self) -> TypeId {
        TypeId::of::<R>()
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<R>()
    }

    fn copy(&self, src: &World, dst: &mut World, map: TickMap) {
        let Some(value) = src.get_resource_ref::<R>() else {
            if dst.contains_resource::<R>() {
                dst.remove_resource::<R>();
            }
            return;
        };
        let changed = map.map(value.last_changed());
        let added = map.map(value.added());
        if let Some(mut target) = dst.get_resource_mut::<R>() {
            target.bypass_change_detection().clone_from(&*value);
            target.set_last_changed(changed);
            target.set_last_added(added);
        } else {
            dst.insert_resource((*value).clone());
            let mut target = dst.resource_mut::<R>();
            target.set_last_changed(changed);
            target.set_last_added(added);
        }
    }

    fn hash(&self, world: &World, hasher: &mut StateHasher) {
        if let Some(hash) = self.hash {
            hasher.write_str(self.type_name());
            match world.get_resource::<R>() {
                Some(value) => {
                    hasher.write_u8(1);
                    hash(value, hasher);
                }
                None => hasher.write_u8(0),
            }
        }
    }

    fn hashed(&self) -> bool {
        self.hash.is_some()
    }

    fn digest(&self, world: &World, hasher: &mut StateHasher) -> DigestOutcome {
        let Some(value) = world.get_resource::<R>() else {
            return DigestOutcome::Absent;
        };
        hasher.write_str(self.type_name());
        match (&self.hash, &self.digest) {
            (Some(f), _) | (None, DigestSource::Debug(f)) => {
                f(value, hasher);
                DigestOutcome::Compared
            }
            (None, DigestSource::Skip) => DigestOutcome::Skipped,
            (None, DigestSource::Reflect) => {
                let id = world.component_id::<R>();
                match id
                    .and_then(|id| reflect_resource_digest(world, TypeId::of::<R>(), id, hasher))
                {
                    Some(()) => DigestOutcome::Compared,
                    None => DigestOutcome::Unchecked,
                }
            }
        }
    }
}

/// The `SimHash` function of a type, as a plain function pointer.
pub(crate) fn sim_hash_fn<T: SimHash>() -> HashFn<T> {
    |value, hasher| value.sim_hash(hasher)
}
