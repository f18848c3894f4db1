//! How one registered type is copied from the verified world to the predicted world.
//!
//! A rollback makes the predicted world's simulation state equal the verified world's. Each
//! registered component or resource type has a copier; all of them share one rule for change
//! ticks: a restored value carries the verified world's change state *relative to the end of the
//! last tick* ([`TickMap`]), so a system in the next tick sees `Changed<T>` in the predicted world
//! exactly when it would in the verified world, and restoring an unchanged value never looks
//! like a change.

use std::any::TypeId;

use bevy::ecs::change_detection::{MAX_CHANGE_AGE, Tick};
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
    /// `Clone` types: `clone_from`, which reuses the destination's allocations where the type's
    /// `clone_from` does (`Vec`'s and `String`'s do; a derived one clones, then frees the old
    /// value).
    Clone,
}

/// The most change ticks after a world's mark a change of it is taken to be (2²⁸); older
/// values are up to 3.8 × 10⁹ before it ([`TickMap::map`]).
pub const MAX_AHEAD_OF_MARK: u32 = 1 << 28;

/// Maps change ticks of the verified world onto the predicted world, relative to the tick mark
/// each world recorded at the end of its last [`SimulationTick`](crate::SimulationTick).
///
/// It also carries what the copy may skip: when both worlds were equal at a known change tick
/// of each (their *sync* ticks), a value neither world changed
/// since is equal in both and is not copied.
#[derive(Debug, Clone, Copy)]
pub struct TickMap {
    src_mark: Tick,
    dst_mark: Tick,
    dst_now: Tick,
    since: Option<SyncTicks>,
}

/// The change ticks of the source and the destination world at which both held equal
/// registered state, and the current change tick of each.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncTicks {
    pub src: Tick,
    pub dst: Tick,
    pub src_now: Tick,
    pub dst_now: Tick,
}

impl SyncTicks {
    /// Whether a value with these change ticks in the source world changed since the sync.
    pub(crate) fn src_changed(&self, changed: Tick, added: Tick) -> bool {
        changed.is_newer_than(self.src, self.src_now) || added.is_newer_than(self.src, self.src_now)
    }

    /// Whether a value with these change ticks in the destination world changed since the sync.
    pub(crate) fn dst_changed(&self, changed: Tick, added: Tick) -> bool {
        changed.is_newer_than(self.dst, self.dst_now) || added.is_newer_than(self.dst, self.dst_now)
    }
}

impl TickMap {
    /// A map from a world marked `src_mark` to one marked `dst_mark` whose current change tick is
    /// `dst_now`.
    pub fn new(src_mark: Tick, dst_mark: Tick, dst_now: Tick) -> Self {
        Self {
            src_mark,
            dst_mark,
            dst_now,
            since: None,
        }
    }

    /// The same map, allowed to skip values neither world changed since `since`.
    pub(crate) fn with_sync(mut self, since: Option<SyncTicks>) -> Self {
        self.since = since;
        self
    }

    /// The sync ticks, when a copy may skip unchanged values.
    pub(crate) fn since_sync(&self) -> Option<SyncTicks> {
        self.since
    }

    /// The destination tick with the same offset from its mark as `tick` has from the source
    /// mark; never later than the destination's current tick, and never older than Bevy's
    /// [`MAX_CHANGE_AGE`] before it.
    ///
    /// Offsets are serial-number arithmetic on `u32` change ticks, which wrap: a tick at most
    /// 2²⁸ (`MAX_AHEAD_OF_MARK`) after the source mark is a change made since the mark; every other
    /// one is that much older than the mark (Bevy's `check_change_ticks`, which the session
    /// calls after every tick of both worlds, keeps every stored tick within `MAX_CHANGE_AGE`
    /// plus one check interval of its world's current tick, 3.8 × 10⁹ of the 4.3 × 10⁹ values).
    /// An unchanged value more than 2³¹ change ticks old (after a few days of a long session)
    /// therefore stays old, never becomes "changed now" ([long
    /// sessions](crate::rules#long-sessions)).
    pub fn map(&self, tick: Tick) -> Tick {
        let room = self.dst_now.get().wrapping_sub(self.dst_mark.get());
        let ahead = tick.get().wrapping_sub(self.src_mark.get());
        if ahead <= MAX_AHEAD_OF_MARK {
            return Tick::new(self.dst_mark.get().wrapping_add(ahead.min(room)));
        }
        let age = self.src_mark.get().wrapping_sub(tick.get());
        let age = age.min(MAX_CHANGE_AGE.saturating_sub(room));
        Tick::new(self.dst_mark.get().wrapping_sub(age))
    }
}

/// One registered component type: copy and hash.
pub(crate) trait ComponentCopier: Send + Sync {
    fn type_id(&self) -> TypeId;
    fn type_name(&self) -> &'static str;
    /// Makes every [`Synced`] entity of `dst` hold the same value (or absence) of the component
    /// as in `src`. Entities must already be aligned.
    fn copy(&mut self, src: &mut World, dst: &mut World, map: TickMap);
    /// Hashes the component of `entity` in `world`, if registered for checksums and present,
    /// tagged with `tag` (the type's registration position, never its name: see
    /// [checksums are build-independent](crate::rules#checksums-are-build-independent)).
    fn hash(&self, tag: u32, world: &World, entity: Entity, hasher: &mut StateHasher);
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
    /// Hashes the resource (or its absence) tagged with `tag`, its registration position.
    fn hash(&self, tag: u32, world: &World, hasher: &mut StateHasher);
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
    dst_ref: CachedQuery<(Entity, Ref<'static, T>), With<Synced>>,
    hash: Option<HashFn<T>>,
    digest: DigestSource<T>,
    writes: Writes<T>,
    /// Entities whose value changed in the destination since the sync (kept between copies).
    dirty: Dirty,
}

/// How [`copy_one`] writes a value: in place by `assign`, or queued in `inserts` for an entity
/// that lacks the component.
struct Writes<T> {
    /// Makes a held value equal the source's: `clone_from`, or [`free_then_clone`].
    assign: fn(&mut T, &T),
    inserts: Vec<(Entity, T, Tick, Tick)>,
}

impl<T: Component<Mutability = Mutable> + Clone> CloneComponent<T> {
    pub(crate) fn new(hash: Option<HashFn<T>>, digest: DigestSource<T>) -> Self {
        Self {
            src: None,
            dst: None,
            dst_all: None,
            dst_ref: None,
            hash,
            digest,
            writes: Writes {
                assign: T::clone_from,
                inserts: Vec::new(),
            },
            dirty: Dirty::default(),
        }
    }

    /// This copier writing a held value by `assign` in place of `clone_from` (the registry
    /// passes [`free_then_clone`] for Rapier's sets).
    pub(crate) fn assigning(mut self, assign: fn(&mut T, &T)) -> Self {
        self.writes.assign = assign;
        self
    }
}

/// Frees `to`'s value, then makes it a clone of `from`. A derived `clone_from` clones first and
/// frees after, so the old and the new value are both alive for a moment: for Rapier's
/// rigid-body set of a thousand bodies a megabyte more at the rollback's peak, for the narrow
/// phase of a resting pile of a thousand boxes seven (see `docs/performance.md`). If the clone
/// panics, `to` holds `T::default()`.
pub(crate) fn free_then_clone<T: Default + Clone>(to: &mut T, from: &T) {
    *to = T::default();
    *to = from.clone();
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

impl<T: Component<Mutability = Mutable> + Clone> CloneComponent<T> {
    /// Copies every value (and absence) from `src` to `dst`.
    fn copy_all(&mut self, src: &mut World, dst: &mut World, map: TickMap) {
        let src_q = state_for(&mut self.src, src);
        let src: &World = src;
        let dst_q = state_for(&mut self.dst, dst);
        let mut matched = 0usize;
        for (entity, value) in src_q.iter(src) {
            if copy_one(dst_q, dst, entity, &value, map, &mut self.writes) {
                matched += 1;
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
        self.flush_inserts(dst);
    }

    /// Inserts the values queued for entities that lacked the component.
    fn flush_inserts(&mut self, dst: &mut World) {
        for (entity, value, changed, added) in self.writes.inserts.drain(..) {
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

    /// Copies only the values either world changed since the sync (see [`SyncTicks`]); returns
    /// `false`, having copied those, when the two worlds' sets of entities holding the
    /// component may differ in a way the change ticks do not show (the caller then copies
    /// everything).
    ///
    /// Two passes in table order: the destination's holders (which changed since the sync, and
    /// the set's fingerprint), then the source's (each copied when it changed in either world,
    /// once). A destination holder the source lacks loses the component.
    fn copy_changed(
        &mut self,
        src: &mut World,
        dst: &mut World,
        map: TickMap,
        since: SyncTicks,
    ) -> bool {
        // Entities holding the component in each world, as a count and an order-free
        // fingerprint of their ids: equal sets unless the fingerprints collide. `for_each`
        // lets Bevy fold over each table's columns.
        let mut dst_set = EntitySet::default();
        let dirty = &mut self.dirty;
        dirty.clear();
        let dst_ref = state_for(&mut self.dst_ref, dst);
        dst_ref.iter(dst).for_each(|(entity, value)| {
            dst_set.add(entity);
            if since.dst_changed(value.last_changed(), value.added()) {
                dirty.insert(entity);
            }
        });
        let mut src_set = EntitySet::default();
        let src_q = state_for(&mut self.src, src);
        let src: &World = src;
        let dst_q = state_for(&mut self.dst, dst);
        let writes = &mut self.writes;
        src_q.iter(src).for_each(|(entity, value)| {
            src_set.add(entity);
            if dirty.take(entity) || since.src_changed(value.last_changed(), value.added()) {
                copy_one(dst_q, dst, entity, &value, map, writes);
            }
        });
        // Changed in the destination and held by no source entity of the same index.
        dirty.keep_untaken();
        for entity in dirty.list.drain(..) {
            match src_q.get(src, entity) {
                Ok((_, value)) => {
                    copy_one(dst_q, dst, entity, &value, map, writes);
                }
                Err(_) => {
                    if let Ok(mut target) = dst.get_entity_mut(entity) {
                        target.remove::<T>();
                        // Its removal is structural: the set fingerprint below must not
                        // count it.
                        dst_set.remove(entity);
                    }
                }
            }
        }
        for (entity, ..) in &self.writes.inserts {
            dst_set.add(*entity);
        }
        self.flush_inserts(dst);
        src_set == dst_set
    }
}

/// The destination's holders that changed since the sync, kept between copies: a list and a
/// bit per entity index, so the source's pass finds them without a lookup per holder.
#[derive(Default)]
struct Dirty {
    list: Vec<Entity>,
    bits: Vec<u64>,
}

impl Dirty {
    /// The word and the bit of `entity`'s index.
    fn slot(entity: Entity) -> (usize, u64) {
        let i = entity.index_u32() as usize;
        (i / 64, 1 << (i % 64))
    }

    fn clear(&mut self) {
        for entity in self.list.drain(..) {
            let (word, bit) = Self::slot(entity);
            self.bits[word] &= !bit;
        }
    }

    fn insert(&mut self, entity: Entity) {
        let (word, bit) = Self::slot(entity);
        if self.bits.len() <= word {
            self.bits.resize(word + 1, 0);
        }
        self.bits[word] |= bit;
        self.list.push(entity);
    }

    /// Whether an entity of `entity`'s index is marked, unmarking it. An entity of the same
    /// index and another generation counts: it is copied to, and the marked one, left in
    /// place, makes the two worlds' holder sets differ (the caller then copies everything).
    fn take(&mut self, entity: Entity) -> bool {
        if self.list.is_empty() {
            return false;
        }
        let (word, bit) = Self::slot(entity);
        let Some(word) = self.bits.get_mut(word) else {
            return false;
        };
        let marked = *word & bit != 0;
        *word &= !bit;
        marked
    }

    /// Keeps in the list only the entities whose index no [`Dirty::take`] unmarked, unmarking
    /// them too: the list, drained by the caller, then holds the changed holders the source's
    /// pass did not reach.
    fn keep_untaken(&mut self) {
        let bits = &mut self.bits;
        self.list.retain(|entity| {
            let (word, bit) = Self::slot(*entity);
            let marked = bits[word] & bit != 0;
            bits[word] &= !bit;
            marked
        });
    }
}

/// The count and an order-free fingerprint of a set of entities (the wrapping sum of a 64-bit
/// mix of each id).
#[derive(Default, PartialEq, Eq)]
struct EntitySet {
    count: u64,
    sum: u64,
}

impl EntitySet {
    fn mix(entity: Entity) -> u64 {
        // splitmix64's finalizer.
        let mut z = entity.to_bits().wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn add(&mut self, entity: Entity) {
        self.count += 1;
        self.sum = self.sum.wrapping_add(Self::mix(entity));
    }

    fn remove(&mut self, entity: Entity) {
        self.count -= 1;
        self.sum = self.sum.wrapping_sub(Self::mix(entity));
    }
}

/// Makes `entity`'s component in `dst` equal `value` with mapped change ticks, or queues an
/// insert when it lacks the component; returns whether it held one.
fn copy_one<T: Component<Mutability = Mutable> + Clone>(
    dst_q: &mut QueryState<&'static mut T, With<Synced>>,
    dst: &mut World,
    entity: Entity,
    value: &Ref<T>,
    map: TickMap,
    writes: &mut Writes<T>,
) -> bool {
    let changed = map.map(value.last_changed());
    let added = map.map(value.added());
    match dst_q.get_mut(dst, entity) {
        Ok(mut target) => {
            (writes.assign)(target.bypass_change_detection(), &**value);
            target.set_last_changed(changed);
            target.set_last_added(added);
            true
        }
        Err(_) => {
            writes
                .inserts
                .push((entity, (**value).clone(), changed, added));
            false
        }
    }
}

impl<T: Component<Mutability = Mutable> + Clone> ComponentCopier for CloneComponent<T> {
    fn type_id(&self) -> TypeId {
        TypeId::of::<T>()
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }

    fn copy(&mut self, src: &mut World, dst: &mut World, map: TickMap) {
        if let Some(since) = map.since_sync()
            && self.copy_changed(src, dst, map, since)
        {
            return;
        }
        self.copy_all(src, dst, map);
    }
    fn hash(&self, tag: u32, world: &World, entity: Entity, hasher: &mut StateHasher) {
        if let Some(hash) = self.hash
            && let Some(value) = world.get::<T>(entity)
        {
            hasher.write_u32(tag);
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

/// How a resource copier duplicates a value: [`ByClone`] for a `Clone` resource; a resource
/// that is not `Clone` (Bevy's `State<S>`) rebuilds it.
pub(crate) trait ValueCopy<R>: Send + Sync + 'static {
    /// A copy of `value`, inserted where the destination lacks the resource.
    fn duplicate(value: &R) -> R;
    /// Makes `target` equal `value` (the copier bypasses change detection and sets the ticks).
    fn overwrite(value: &R, target: &mut R);
}

/// Duplicates a `Clone` value: `clone`, and `clone_from` onto an existing one.
pub(crate) struct ByClone;

impl<R: Clone> ValueCopy<R> for ByClone {
    fn duplicate(value: &R) -> R {
        value.clone()
    }

    fn overwrite(value: &R, target: &mut R) {
        target.clone_from(value);
    }
}

/// Copier of a resource, including its absence, duplicated by `C`: the value and its change
/// ticks; skipped when neither world changed it since they were last equal.
pub(crate) struct CopyResource<R: Resource<Mutability = Mutable>, C: ValueCopy<R> = ByClone> {
    hash: Option<HashFn<R>>,
    digest: DigestSource<R>,
    copy: std::marker::PhantomData<fn() -> C>,
}

/// Copier of a `Clone` resource.
pub(crate) type CloneResource<R> = CopyResource<R, ByClone>;

impl<R: Resource<Mutability = Mutable>, C: ValueCopy<R>> CopyResource<R, C> {
    /// A copier hashing with `hash` (none: not part of checksums) and compared by the full
    /// prediction check through `hash`, or else `digest`.
    pub(crate) fn new(hash: Option<HashFn<R>>, digest: DigestSource<R>) -> Self {
        Self {
            hash,
            digest,
            copy: std::marker::PhantomData,
        }
    }
}

impl<R: Resource<Mutability = Mutable>, C: ValueCopy<R>> ResourceCopier for CopyResource<R, C> {
    fn type_id(&self) -> TypeId {
        TypeId::of::<R>()
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<R>()
    }

    fn copy(&self, src: &World, dst: &mut World, map: TickMap) {
        if let Some(since) = map.since_sync()
            && let (Some(from), Some(to)) =
                (src.get_resource_ref::<R>(), dst.get_resource_ref::<R>())
            && !since.src_changed(from.last_changed(), from.added())
            && !since.dst_changed(to.last_changed(), to.added())
        {
            return;
        }
        let Some(value) = src.get_resource_ref::<R>() else {
            if dst.contains_resource::<R>() {
                dst.remove_resource::<R>();
            }
            return;
        };
        let changed = map.map(value.last_changed());
        let added = map.map(value.added());
        if let Some(mut target) = dst.get_resource_mut::<R>() {
            C::overwrite(&value, target.bypass_change_detection());
            target.set_last_changed(changed);
            target.set_last_added(added);
        } else {
            dst.insert_resource(C::duplicate(&value));
            let mut target = dst.resource_mut::<R>();
            target.set_last_changed(changed);
            target.set_last_added(added);
        }
    }

    fn hash(&self, tag: u32, world: &World, hasher: &mut StateHasher) {
        if let Some(hash) = self.hash {
            hasher.write_u32(tag);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Component, Clone, Debug, PartialEq)]
    struct P(u32);

    #[test]
    fn ticks_map_by_offset_from_the_marks_across_the_u32_wrap() {
        let t = Tick::new;
        // Source mark just below the wrap, destination mark just above it.
        let map = TickMap::new(t(u32::MAX - 5), t(10), t(14));
        assert_eq!(map.map(t(u32::MAX - 5)), t(10), "at the mark");
        assert_eq!(map.map(t(u32::MAX - 7)), t(8), "two before");
        assert_eq!(map.map(t(u32::MAX - 2)), t(13), "three after");
        assert_eq!(map.map(t(5)), t(14), "after: at most the destination's now");
        assert_eq!(map.map(t(100)), t(14));
    }

    #[test]
    fn a_value_older_than_two_to_the_31_change_ticks_stays_old() {
        let t = Tick::new;
        let (mark, now) = (3_000_000_000u32, 3_000_000_040u32);
        let map = TickMap::new(t(mark), t(mark), t(now));
        // Added at change tick 100, then left alone for 3 × 10⁹ ticks (not yet clamped by Bevy,
        // which clamps beyond MAX_CHANGE_AGE ≈ 3.26 × 10⁹).
        let old = t(100);
        let mapped = map.map(old);
        assert_eq!(mapped, old);
        let (last_run, this_run) = (t(now - 1), t(now + 1));
        assert!(!mapped.is_newer_than(last_run, this_run), "no Changed");
        // An age the destination cannot represent is clamped to MAX_CHANGE_AGE before its now.
        let far = TickMap::new(t(mark), t(7), t(7 + 1_000_000_000));
        let mapped = far.map(t(100));
        assert_eq!(
            t(7 + 1_000_000_000).get().wrapping_sub(mapped.get()),
            MAX_CHANGE_AGE
        );
        assert!(!mapped.is_newer_than(t(6 + 1_000_000_000), t(8 + 1_000_000_000)));
    }

    /// Two worlds holding `P(i)` on the same three synchronized entities, and their sync ticks.
    fn synced_pair() -> (World, World, Vec<Entity>, Tick, Tick) {
        let (mut src, mut dst) = (World::new(), World::new());
        let mut entities = Vec::new();
        for i in 0..3 {
            entities.push(src.spawn((P(i), Synced)).id());
            assert_eq!(dst.spawn((P(i), Synced)).id(), entities[i as usize]);
        }
        let (s, d) = (src.increment_change_tick(), dst.increment_change_tick());
        (src, dst, entities, s, d)
    }

    fn map_since(src: &World, dst: &World, s: Tick, d: Tick) -> TickMap {
        let since = SyncTicks {
            src: s,
            dst: d,
            src_now: src.read_change_tick(),
            dst_now: dst.read_change_tick(),
        };
        TickMap::new(
            src.read_change_tick(),
            dst.read_change_tick(),
            dst.read_change_tick(),
        )
        .with_sync(Some(since))
    }

    fn values(world: &World, entities: &[Entity]) -> Vec<Option<u32>> {
        entities
            .iter()
            .map(|e| world.get::<P>(*e).map(|p| p.0))
            .collect()
    }

    #[test]
    fn a_copy_since_the_sync_copies_values_either_world_changed_and_skips_the_rest() {
        let (mut src, mut dst, es, s, d) = synced_pair();
        src.get_mut::<P>(es[0]).expect("spawned").0 = 10;
        dst.get_mut::<P>(es[1]).expect("spawned").0 = 20;
        // A write hidden from change detection shows which values were skipped.
        dst.get_mut::<P>(es[2])
            .expect("spawned")
            .bypass_change_detection()
            .0 = 99;
        let map = map_since(&src, &dst, s, d);
        CloneComponent::<P>::new(None, DigestSource::Skip).copy(&mut src, &mut dst, map);
        assert_eq!(values(&dst, &es), vec![Some(10), Some(1), Some(99)]);
    }

    #[test]
    fn without_sync_ticks_a_copy_copies_every_value() {
        let (mut src, mut dst, es, _, _) = synced_pair();
        dst.get_mut::<P>(es[2])
            .expect("spawned")
            .bypass_change_detection()
            .0 = 99;
        let map = TickMap::new(
            src.read_change_tick(),
            dst.read_change_tick(),
            dst.read_change_tick(),
        );
        CloneComponent::<P>::new(None, DigestSource::Skip).copy(&mut src, &mut dst, map);
        assert_eq!(values(&dst, &es), vec![Some(0), Some(1), Some(2)]);
    }

    #[test]
    fn removals_since_the_sync_in_either_world_are_restored() {
        let (mut src, mut dst, es, s, d) = synced_pair();
        src.entity_mut(es[0]).remove::<P>();
        dst.entity_mut(es[1]).remove::<P>();
        let map = map_since(&src, &dst, s, d);
        CloneComponent::<P>::new(None, DigestSource::Skip).copy(&mut src, &mut dst, map);
        assert_eq!(values(&dst, &es), vec![None, Some(1), Some(2)]);
    }

    #[test]
    fn a_value_inserted_in_either_world_since_the_sync_is_copied_or_removed() {
        let (mut src, mut dst, es, s, d) = synced_pair();
        let only_src = src.spawn(Synced).id();
        assert_eq!(dst.spawn(Synced).id(), only_src);
        src.entity_mut(only_src).insert(P(7));
        let only_dst = src.spawn(Synced).id();
        assert_eq!(dst.spawn(Synced).id(), only_dst);
        dst.entity_mut(only_dst).insert(P(8));
        let map = map_since(&src, &dst, s, d);
        CloneComponent::<P>::new(None, DigestSource::Skip).copy(&mut src, &mut dst, map);
        assert_eq!(
            values(&dst, &[es[0], only_src, only_dst]),
            vec![Some(0), Some(7), None]
        );
    }

    #[test]
    fn a_value_changed_in_both_worlds_is_copied_once() {
        use std::sync::atomic::{AtomicU32, Ordering};
        static ASSIGNS: AtomicU32 = AtomicU32::new(0);
        fn counting(to: &mut P, from: &P) {
            ASSIGNS.fetch_add(1, Ordering::Relaxed);
            to.clone_from(from);
        }
        let (mut src, mut dst, es, s, d) = synced_pair();
        for (i, e) in es.iter().enumerate() {
            src.get_mut::<P>(*e).expect("spawned").0 = 10 + i as u32;
            dst.get_mut::<P>(*e).expect("spawned").0 = 20 + i as u32;
        }
        let map = map_since(&src, &dst, s, d);
        CloneComponent::<P>::new(None, DigestSource::Skip)
            .assigning(counting)
            .copy(&mut src, &mut dst, map);
        assert_eq!(values(&dst, &es), vec![Some(10), Some(11), Some(12)]);
        assert_eq!(ASSIGNS.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_changed_value_on_an_entity_of_another_generation_is_copied_exactly() {
        let (mut src, mut dst, es, s, d) = synced_pair();
        // The same index, another generation in each world: the destination's changed holder
        // is not the source's.
        let next = |world: &mut World, entity: Entity| {
            world.despawn_no_free(entity);
            world.entities().resolve_from_index(entity.index())
        };
        let in_src = next(&mut src, es[1]);
        src.spawn_empty_at(in_src)
            .expect("free")
            .insert((P(5), Synced));
        let skipped = next(&mut dst, es[1]);
        dst.spawn_empty_at(skipped).expect("free");
        let in_dst = next(&mut dst, skipped);
        dst.spawn_empty_at(in_dst)
            .expect("free")
            .insert((P(6), Synced));
        assert_eq!(in_src.index(), in_dst.index());
        assert_ne!(in_src, in_dst);
        let map = map_since(&src, &dst, s, d);
        CloneComponent::<P>::new(None, DigestSource::Skip).copy(&mut src, &mut dst, map);
        assert_eq!(
            values(&dst, &[es[0], es[2], in_dst]),
            vec![Some(0), Some(2), None]
        );
    }

    #[test]
    fn an_unchanged_resource_is_skipped_and_a_changed_one_copied() {
        #[derive(Resource, Clone)]
        struct R(u32);
        let (mut src, mut dst) = (World::new(), World::new());
        src.insert_resource(R(1));
        dst.insert_resource(R(1));
        let (s, d) = (src.increment_change_tick(), dst.increment_change_tick());
        dst.resource_mut::<R>().bypass_change_detection().0 = 99;
        let copier = CloneResource::<R>::new(None, DigestSource::Skip);
        let map = map_since(&src, &dst, s, d);
        copier.copy(&src, &mut dst, map);
        assert_eq!(dst.resource::<R>().0, 99, "skipped");
        src.resource_mut::<R>().0 = 5;
        let map = map_since(&src, &dst, s, d);
        copier.copy(&src, &mut dst, map);
        assert_eq!(dst.resource::<R>().0, 5);
    }

    /// A value holding one heap buffer, counting the buffers alive (on this test's thread).
    #[derive(Component, Default, Debug, PartialEq)]
    struct Counted(Option<Box<u64>>);

    std::thread_local! {
        static ALIVE: std::cell::Cell<(u32, u32)> = const { std::cell::Cell::new((0, 0)) };
    }

    impl Counted {
        fn new(v: u64) -> Self {
            Self::count(1);
            Counted(Some(Box::new(v)))
        }
        /// Changes the live count by `delta` and keeps its peak.
        fn count(delta: i32) {
            ALIVE.with(|a| {
                let (now, peak) = a.get();
                let now = now.checked_add_signed(delta).expect("counted");
                a.set((now, peak.max(now)));
            });
        }
        fn peak_since_reset() -> u32 {
            ALIVE.with(|a| a.replace((a.get().0, a.get().0)).1)
        }
    }

    impl Clone for Counted {
        fn clone(&self) -> Self {
            match &self.0 {
                Some(v) => Counted::new(**v),
                None => Counted(None),
            }
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            if self.0.is_some() {
                Counted::count(-1);
            }
        }
    }

    #[test]
    fn freeing_first_frees_the_old_value_before_the_clone_is_made() {
        let from = Counted::new(1);
        let mut to = Counted::new(2);
        Counted::peak_since_reset();
        to.clone_from(&from);
        assert_eq!(
            Counted::peak_since_reset(),
            3,
            "derived clone_from: old and new alive"
        );
        assert_eq!(to, from);
        to = Counted::new(2);
        Counted::peak_since_reset();
        free_then_clone(&mut to, &from);
        assert_eq!(
            Counted::peak_since_reset(),
            2,
            "only the source and one copy alive"
        );
        assert_eq!(to, from);
    }

    #[test]
    fn a_copier_assigning_free_then_clone_copies_like_clone_from() {
        let (mut src, mut dst) = (World::new(), World::new());
        let e = src.spawn((Counted::new(5), Synced)).id();
        assert_eq!(dst.spawn((Counted::new(6), Synced)).id(), e);
        let map = TickMap::new(
            src.read_change_tick(),
            dst.read_change_tick(),
            dst.read_change_tick(),
        );
        Counted::peak_since_reset();
        CloneComponent::<Counted>::new(None, DigestSource::Skip)
            .assigning(free_then_clone::<Counted>)
            .copy(&mut src, &mut dst, map);
        assert_eq!(dst.get::<Counted>(e).and_then(|c| c.0.as_deref()), Some(&5));
        assert_eq!(
            Counted::peak_since_reset(),
            2,
            "the old value freed before the copy"
        );
    }
}
