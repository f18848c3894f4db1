//! Relationships in a rollback: `ChildOf`/`Children` (built in) and any other Bevy relationship
//! registered with [`TryRollbackAppExt::try_rollback_relationship`](crate::TryRollbackAppExt).
//!
//! A relationship component is immutable and its target collection is kept by Bevy's hooks, so
//! neither can be copied in place like other components. A rollback restores them the way a
//! game would have built them: for every target whose source list differs from the verified
//! world's (or whose sources changed), it removes the relationship from that target's sources
//! in the predicted world and inserts it again on the verified world's sources, in the verified
//! world's order. Bevy appends each inserted source to the target's collection, so the
//! collection ends in the verified world's order. Ids are equal in both worlds, so the inserted
//! value is the verified value itself.
//! ([Hierarchy and relationships](crate::rules#hierarchy-and-relationships).)

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hasher;

use bevy::ecs::query::QueryState;
use bevy::ecs::relationship::{Relationship, RelationshipSourceCollection, RelationshipTarget};
use bevy::prelude::*;

use super::entities::{ReservedSlots, Synced};
use super::format::{RelationshipBlock, RelationshipTarget as SavedTarget};
use super::strategy::{CachedQuery, TickMap, state_for};
use crate::checksum::StateHasher;
use crate::error::RelationshipRefusal;
use bevy::ecs::change_detection::Tick as ChangeTick;

/// One registered relationship type: restore and hash.
pub(crate) trait RelationshipCopier: Send + Sync {
    /// The relationship's type name.
    fn type_name(&self) -> &'static str;
    /// Makes the relationship between [`Synced`] entities of `dst` equal `src`'s, target order
    /// included. Entities must already be aligned. Returns the number of sources re-inserted.
    fn copy(&mut self, src: &mut World, dst: &mut World, map: TickMap) -> u32;
    /// Hashes `entity`'s side of the relationship: its target and its sources, in order, as
    /// slots and generations, tagged with `tag` (the relationship's registration position).
    fn hash(
        &self,
        tag: u32,
        world: &World,
        entity: Entity,
        slots: &ReservedSlots,
        hasher: &mut StateHasher,
    );
    /// The relationship among `entities` (a snapshot's synchronized entities): each target
    /// with its sources in order (only sources among `entities`), change ticks as offsets from
    /// `mark`.
    fn save(&self, world: &World, entities: &[Entity], mark: ChangeTick) -> RelationshipBlock;
    /// Rebuilds the relationship from `block` in a world whose sources have none (just
    /// loaded): inserts it on every source in each target's order, then gives the targets
    /// their ticks (offsets from `mark`, at most `now`).
    ///
    /// # Errors
    /// A source or target that is not an entity of `world`.
    fn load(
        &self,
        world: &mut World,
        block: &RelationshipBlock,
        ticks: &dyn Fn(i32) -> ChangeTick,
    ) -> Result<(), String>;
}

/// The checks a relationship must pass before it is registered: a target that is not
/// `linked_spawn` (unless `linked_spawn_handled`) and a collection with a reproducible order.
///
/// # Errors
/// The refusal.
pub(crate) fn check_relationship<R: Relationship>(
    linked_spawn_handled: bool,
) -> Result<(), RelationshipRefusal> {
    if <R::RelationshipTarget as RelationshipTarget>::LINKED_SPAWN && !linked_spawn_handled {
        return Err(RelationshipRefusal::LinkedSpawn);
    }
    if !collection_has_order::<<R::RelationshipTarget as RelationshipTarget>::Collection>() {
        return Err(RelationshipRefusal::UnorderedTarget);
    }
    Ok(())
}

/// Whether a source collection iterates in an order both worlds reproduce: insertion order, a
/// canonical order (the same for any insertion order), or a single source. Probed by filling
/// two collections with the same 32 entities in opposite orders.
pub(crate) fn collection_has_order<C: RelationshipSourceCollection>() -> bool {
    // 32 distinct entities in a scrambled (neither sorted nor reverse-sorted) order.
    let entities: Vec<Entity> = (0..32u32)
        .filter_map(|i| Entity::from_raw_u32(((i * 17 + 5) % 32) * 1_000 + 7))
        .collect();
    fn fill<C: RelationshipSourceCollection>(order: &[Entity]) -> Vec<Entity> {
        let mut collection = C::with_capacity(0);
        for entity in order {
            collection.add(*entity);
        }
        collection.iter().collect()
    }
    let mut reversed = entities.clone();
    reversed.reverse();
    let forward = fill::<C>(&entities);
    let backward = fill::<C>(&reversed);
    if forward.len() <= 1 {
        return true;
    }
    (forward == entities && backward == reversed) || (forward == backward && is_sorted(&forward))
}

fn is_sorted(list: &[Entity]) -> bool {
    list.windows(2).all(|w| w[0] <= w[1])
}

type TargetOf<R> = <R as Relationship>::RelationshipTarget;

/// Restores relationship `R` by re-insertion.
pub(crate) struct RelationshipRollback<R: Relationship + Clone + PartialEq> {
    src_sources: CachedQuery<(Entity, &'static R), With<Synced>>,
    dst_sources: CachedQuery<(Entity, &'static R), With<Synced>>,
    src_targets: CachedQuery<(Entity, Ref<'static, TargetOf<R>>), With<Synced>>,
    dst_targets: CachedQuery<(Entity, Ref<'static, TargetOf<R>>), With<Synced>>,
}

impl<R: Relationship + Clone + PartialEq> Default for RelationshipRollback<R> {
    fn default() -> Self {
        Self {
            src_sources: None,
            dst_sources: None,
            src_targets: None,
            dst_targets: None,
        }
    }
}

/// The relationship state of one world: each source's value, each target's sources in order.
struct Side<R> {
    sources: BTreeMap<Entity, R>,
    targets: BTreeMap<Entity, Vec<Entity>>,
}

impl<R: Relationship + Clone + PartialEq> RelationshipRollback<R> {
    /// Targets whose sources must be rebuilt: their source lists differ, or one of their
    /// sources carries a different value (or none) in the other world.
    fn dirty_targets(src: &Side<R>, dst: &Side<R>) -> BTreeSet<Entity> {
        let mut dirty = BTreeSet::new();
        for (target, list) in &src.targets {
            if dst.targets.get(target) != Some(list) {
                dirty.insert(*target);
            }
        }
        dirty.extend(
            dst.targets
                .keys()
                .filter(|t| !src.targets.contains_key(t))
                .copied(),
        );
        for (source, value) in &src.sources {
            match dst.sources.get(source) {
                Some(other) if other == value => {}
                other => {
                    dirty.insert(value.get());
                    dirty.extend(other.map(Relationship::get));
                }
            }
        }
        for (source, value) in &dst.sources {
            if !src.sources.contains_key(source) {
                dirty.insert(value.get());
            }
        }
        dirty
    }
}

impl<R: Relationship + Clone + PartialEq> RelationshipCopier for RelationshipRollback<R> {
    fn type_name(&self) -> &'static str {
        std::any::type_name::<R>()
    }

    fn copy(&mut self, src: &mut World, dst: &mut World, map: TickMap) -> u32 {
        let src_side = side(
            state_for(&mut self.src_sources, src),
            state_for(&mut self.src_targets, src),
            src,
        );
        let dst_side = side(
            state_for(&mut self.dst_sources, dst),
            state_for(&mut self.dst_targets, dst),
            dst,
        );
        let dirty = Self::dirty_targets(&src_side, &dst_side);
        if dirty.is_empty() {
            return 0;
        }
        for (source, value) in &dst_side.sources {
            if dirty.contains(&value.get()) {
                dst.entity_mut(*source).remove::<R>();
            }
        }
        dst.flush();
        let mut inserted = 0;
        for target in &dirty {
            for source in src_side.targets.get(target).into_iter().flatten() {
                if let (Some(value), Ok(mut entity)) =
                    (src_side.sources.get(source), dst.get_entity_mut(*source))
                {
                    entity.insert(value.clone());
                    inserted += 1;
                }
            }
        }
        dst.flush();
        restore_target_ticks::<R>(state_for(&mut self.src_targets, src), src, dst, &dirty, map);
        inserted
    }

    fn hash(
        &self,
        tag: u32,
        world: &World,
        entity: Entity,
        slots: &ReservedSlots,
        hasher: &mut StateHasher,
    ) {
        // Entities outside the simulation have no equal id in the other world: a parent is
        // hashed as "not a simulation entity", a source is left out.
        if let Some(value) = world.get::<R>(entity) {
            hasher.write_u32(tag);
            hasher.write_u8(0);
            let target = value.get();
            match slots.slot_of(target) {
                Some(slot) => {
                    hasher.write_u32(slot);
                    hasher.write_u32(target.generation().to_bits());
                }
                None => hasher.write_u32(u32::MAX),
            }
        }
        if let Some(target) = world.get::<TargetOf<R>>(entity) {
            hasher.write_u32(tag);
            hasher.write_u8(1);
            for source in target.iter() {
                if let Some(slot) = slots.slot_of(source) {
                    hasher.write_u32(slot);
                    hasher.write_u32(source.generation().to_bits());
                }
            }
            hasher.write_u32(u32::MAX);
        }
    }

    fn save(&self, world: &World, entities: &[Entity], mark: ChangeTick) -> RelationshipBlock {
        let included: BTreeSet<Entity> = entities.iter().copied().collect();
        let mut targets = Vec::new();
        for entity in entities {
            let Some(target) = world.entity(*entity).get_ref::<TargetOf<R>>() else {
                continue;
            };
            let sources = target
                .iter()
                .filter(|s| included.contains(s))
                .map(|source| {
                    let ticks = world
                        .entity(source)
                        .get_ref::<R>()
                        .map(|r| {
                            (
                                tick_offset(r.last_changed(), mark),
                                tick_offset(r.added(), mark),
                            )
                        })
                        .unwrap_or_default();
                    (source, ticks)
                })
                .collect();
            targets.push(SavedTarget {
                target: *entity,
                ticks: (
                    tick_offset(target.last_changed(), mark),
                    tick_offset(target.added(), mark),
                ),
                sources,
            });
        }
        RelationshipBlock { targets }
    }

    fn load(
        &self,
        world: &mut World,
        block: &RelationshipBlock,
        ticks: &dyn Fn(i32) -> ChangeTick,
    ) -> Result<(), String> {
        for saved in &block.targets {
            if world.get_entity(saved.target).is_err() {
                return Err(format!("target {} is not an entity", saved.target));
            }
            for (source, _) in &saved.sources {
                world
                    .get_entity_mut(*source)
                    .map_err(|e| e.to_string())?
                    .insert(R::from(saved.target));
            }
        }
        world.flush();
        for saved in &block.targets {
            if let Some(mut restored) = world.get_mut::<TargetOf<R>>(saved.target) {
                restored.set_last_changed(ticks(saved.ticks.0));
                restored.set_last_added(ticks(saved.ticks.1));
            }
        }
        Ok(())
    }
}

/// The offset of `tick` from `mark`, as snapshots store change ticks.
pub(crate) fn tick_offset(tick: ChangeTick, mark: ChangeTick) -> i32 {
    tick.get().wrapping_sub(mark.get()) as i32
}

/// One world's relationship state between [`Synced`] entities: target lists keep only synced
/// sources (a source that is not simulation state has no equal id in the other world).
fn side<R: Relationship + Clone>(
    sources: &mut QueryState<(Entity, &'static R), With<Synced>>,
    targets: &mut QueryState<(Entity, Ref<'static, TargetOf<R>>), With<Synced>>,
    world: &World,
) -> Side<R> {
    let sources: BTreeMap<Entity, R> = sources
        .iter(world)
        .map(|(e, value)| (e, value.clone()))
        .collect();
    let targets = targets
        .iter(world)
        .map(|(e, t)| {
            let list = t.iter().filter(|s| sources.contains_key(s)).collect();
            (e, list)
        })
        .collect();
    Side { sources, targets }
}

/// Gives every rebuilt target collection the verified world's change ticks (mapped), so a
/// `Changed<Children>` in the next tick matches the verified world.
fn restore_target_ticks<R: Relationship>(
    src_targets: &mut QueryState<(Entity, Ref<'static, TargetOf<R>>), With<Synced>>,
    src: &World,
    dst: &mut World,
    dirty: &BTreeSet<Entity>,
    map: TickMap,
) {
    for target in dirty {
        let Ok((_, value)) = src_targets.get(src, *target) else {
            continue;
        };
        if let Some(mut restored) = dst.get_mut::<TargetOf<R>>(*target) {
            restored.set_last_changed(map.map(value.last_changed()));
            restored.set_last_added(map.map(value.added()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bevy::ecs::entity::EntityHashSet;

    #[derive(Component, Clone, PartialEq, Debug)]
    #[relationship(relationship_target = Likers)]
    struct Likes(Entity);

    #[derive(Component, Debug)]
    #[relationship_target(relationship = Likes)]
    struct Likers(EntityHashSet);

    #[derive(Component, Clone, PartialEq, Debug)]
    #[relationship(relationship_target = Crew)]
    struct CrewOf(Entity);

    #[derive(Component, Debug)]
    #[relationship_target(relationship = CrewOf, linked_spawn)]
    struct Crew(Vec<Entity>);

    #[test]
    fn ordered_and_single_collections_pass_the_probe_and_hash_sets_do_not() {
        assert!(collection_has_order::<Vec<Entity>>());
        assert!(collection_has_order::<Entity>());
        assert!(collection_has_order::<std::collections::BTreeSet<Entity>>());
        assert!(!collection_has_order::<EntityHashSet>());
    }

    #[test]
    fn relationships_are_checked_for_linked_spawn_and_order() {
        assert_eq!(check_relationship::<ChildOf>(true), Ok(()));
        assert_eq!(
            check_relationship::<ChildOf>(false),
            Err(RelationshipRefusal::LinkedSpawn)
        );
        assert_eq!(
            check_relationship::<CrewOf>(false),
            Err(RelationshipRefusal::LinkedSpawn)
        );
        assert_eq!(
            check_relationship::<Likes>(false),
            Err(RelationshipRefusal::UnorderedTarget)
        );
    }
}
