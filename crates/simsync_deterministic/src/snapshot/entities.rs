//! Simulation entities: ids that are equal in the verified and the predicted world.
//!
//! Rapier's sets store entity bits, so a rollback can only copy them if every simulation entity
//! has the same [`Entity`] id (index *and* generation) in both worlds. The scheme:
//! - When a simulation world is built, a contiguous range of entity indices is reserved from
//!   Bevy's allocator ([`ReservedSlots`]), so Bevy never hands them to other entities. The
//!   world's own entities (resources, Rapier contexts) take the [`WORLD_OWN_INDICES`] below it.
//! - [`SimulationEntities`] is a deterministic allocator over that range. It is simulation
//!   state (copied by rollback), so both worlds hand out the same ids for the same history.
//! - A freed slot is reused only after [`SimulationEntities::reuse_delay`] ticks, longer than the
//!   predicted world can run ahead of the verified one, so the predicted world's generations can
//!   never run ahead of the verified world's.
//! - The verified world despawns with `despawn_no_free`; the predicted world never really
//!   despawns but *parks* the entity (removes its components, adds [`Parked`]), so a rollback
//!   can bring it back with the same id.

use std::collections::VecDeque;

use bevy::ecs::entity::{Entity, EntityGeneration};
use bevy::ecs::system::SystemParam;
use bevy::prelude::*;

use crate::error::SessionError;
use crate::tick::{SimTick, Tick};

/// Which simulation world a [`World`] is.
#[derive(Resource, Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect)]
pub enum WorldRole {
    /// Runs only on confirmed input sets; only moves forward.
    Verified,
    /// Runs ahead on predicted inputs; rolled back to the verified world.
    Predicted,
}

/// Marker on every live simulation entity (spawned through [`SimCommands`]). An entity in a
/// simulation world without it is reported as an
/// [`UnsimulatedEntity`](crate::UnsimulatedEntity) and fails the prediction check, unless marked
/// [`NotSimulated`](crate::NotSimulated). `ChildOf`/`Children` between simulation entities are
/// rolled back ([hierarchy and relationships](crate::rules#hierarchy-and-relationships)).
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
pub struct SimEntity;

/// Marker on entities whose state a rollback copies: every [`SimEntity`] and each Rapier
/// context entity.
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
pub struct Synced;

/// Marker on a despawned simulation entity in the predicted world, kept so that its id can be
/// restored by a rollback. Parked entities have no other component.
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
pub struct Parked;

/// Entity indices kept below the reserved range for a simulation world's own entities
/// (resources, Rapier contexts, observers); more of them take indices above the range.
pub const WORLD_OWN_INDICES: u32 = 1_024;

/// The entity indices reserved for simulation entities in one world (identical in both worlds).
#[derive(Resource, Debug, Clone)]
pub struct ReservedSlots {
    first_index: u32,
    len: u32,
}

impl ReservedSlots {
    /// Reserves `len` entity indices from `world`'s allocator. They are never spawned by Bevy.
    ///
    /// # Errors
    /// [`SessionError::ReservedRangeNotContiguous`] if the allocator did not hand out a
    /// contiguous range (a world that already freed entities).
    ///
    /// The first [`WORLD_OWN_INDICES`] indices the allocator hands out before the range are
    /// given back to it, so the world's own entities (resources, Rapier contexts, observers)
    /// spawned later take indices below the range. Bevy sizes per-type sparse storage and its
    /// entity table by the highest index in use; with the world's own entities above a range
    /// of 16,384 every resource type would cost an array of that length (4.4 MB for the
    /// two worlds of a zero-body session, measured).
    pub fn reserve(world: &mut World, len: u32) -> Result<Self, SessionError> {
        let mut own: Vec<Entity> = world
            .entity_allocator()
            .alloc_many(WORLD_OWN_INDICES)
            .collect();
        let entities: Vec<Entity> = world.entity_allocator().alloc_many(len).collect();
        // Given back lowest last: the allocator reuses them lowest first.
        own.reverse();
        world.entity_allocator_mut().free_many(&own);
        let first_index = entities.first().map(|e| e.index_u32()).unwrap_or(0);
        for (i, e) in entities.iter().enumerate() {
            if e.index_u32() != first_index + i as u32 || e.generation() != EntityGeneration::FIRST
            {
                return Err(SessionError::ReservedRangeNotContiguous);
            }
        }
        Ok(Self { first_index, len })
    }

    /// Number of reserved slots.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether no slot is reserved.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entity index of `slot`.
    pub fn index_of(&self, slot: u32) -> u32 {
        self.first_index + slot
    }

    /// The slot of `entity`, if its index is in the reserved range.
    pub fn slot_of(&self, entity: Entity) -> Option<u32> {
        let index = entity.index_u32();
        (index >= self.first_index && index < self.first_index + self.len)
            .then(|| index - self.first_index)
    }

    /// The entity at `slot` with generation `generation`.
    pub fn entity(&self, slot: u32, generation: EntityGeneration) -> Entity {
        let index = bevy::ecs::entity::EntityIndex::from_raw_u32(self.index_of(slot))
            .expect("reserved indices are valid entity indices");
        Entity::from_index_and_generation(index, generation)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct FreeSlot {
    slot: u32,
    #[serde(with = "generation_bits")]
    next_generation: EntityGeneration,
    freed_at: Tick,
}

/// An [`EntityGeneration`] in serde form: its bits.
mod generation_bits {
    use bevy::ecs::entity::EntityGeneration;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(g: &EntityGeneration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(g.to_bits())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EntityGeneration, D::Error> {
        u32::deserialize(d).map(EntityGeneration::from_bits)
    }
}

/// The deterministic allocator of simulation entity ids (simulation state, copied by rollback,
/// saved in snapshots).
#[derive(Resource, Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SimulationEntities {
    next_unused: u32,
    capacity: u32,
    free: VecDeque<FreeSlot>,
    reuse_delay: Tick,
    live: u32,
}

impl SimulationEntities {
    /// An allocator over `capacity` slots whose freed slots are reused after `reuse_delay` ticks.
    pub fn new(capacity: u32, reuse_delay: Tick) -> Self {
        Self {
            next_unused: 0,
            capacity,
            free: VecDeque::new(),
            reuse_delay: reuse_delay.max(1),
            live: 0,
        }
    }

    /// Slots handed out at least once (every slot below this may hold an entity).
    pub fn slots_used(&self) -> u32 {
        self.next_unused
    }

    /// Live simulation entities.
    pub fn live(&self) -> u32 {
        self.live
    }

    /// Ticks a freed slot waits before it is handed out again.
    pub fn reuse_delay(&self) -> Tick {
        self.reuse_delay
    }

    /// Allocates the id of a new simulation entity at tick `now`.
    ///
    /// # Errors
    /// [`SessionError::SimulationEntitiesExhausted`] when every slot is live or waiting out
    /// its reuse delay.
    pub fn allocate(&mut self, now: Tick, slots: &ReservedSlots) -> Result<Entity, SessionError> {
        let delay = self.reuse_delay;
        if let Some(front) = self
            .free
            .pop_front_if(|front| now.saturating_sub(front.freed_at) >= delay)
        {
            self.live += 1;
            return Ok(slots.entity(front.slot, front.next_generation));
        }
        if self.next_unused < self.capacity.min(slots.len()) {
            let slot = self.next_unused;
            self.next_unused += 1;
            self.live += 1;
            return Ok(slots.entity(slot, EntityGeneration::FIRST));
        }
        Err(SessionError::SimulationEntitiesExhausted {
            capacity: self.capacity.min(slots.len()),
        })
    }

    /// Records that `entity` was despawned at tick `now`; its slot comes back with the next
    /// generation after the reuse delay.
    pub fn free(&mut self, entity: Entity, now: Tick, slots: &ReservedSlots) {
        if let Some(slot) = slots.slot_of(entity) {
            self.live = self.live.saturating_sub(1);
            self.free.push_back(FreeSlot {
                slot,
                next_generation: entity.generation().after_versions(1),
                freed_at: now,
            });
        }
    }
}

/// Makes the index of `entity` hold exactly `entity`, spawned, with no component but
/// [`SimEntity`] and [`Synced`]. Returns `false` if the index's generation is already past
/// `entity`'s (which the reuse delay prevents).
pub(crate) fn materialize(world: &mut World, entity: Entity) -> bool {
    if !align_generation(world, entity) {
        return false;
    }
    let index = entity.index();
    if world.entities().is_index_spawned(index) {
        let mut e = world.entity_mut(entity);
        e.remove::<Parked>();
        e.insert((SimEntity, Synced));
        true
    } else {
        world.spawn_empty_at(entity).is_ok_and(|mut e| {
            e.insert((SimEntity, Synced));
            true
        })
    }
}

/// Bumps the generation of `target`'s index until it equals `target`'s (despawning a parked or
/// live older entity on the way). Returns `false` if the index is already ahead.
pub(crate) fn align_generation(world: &mut World, target: Entity) -> bool {
    let index = target.index();
    loop {
        let current = world.entities().resolve_from_index(index);
        if current.generation() == target.generation() {
            return true;
        }
        let behind = target
            .generation()
            .to_bits()
            .wrapping_sub(current.generation().to_bits());
        if behind == 0 || behind > u32::MAX / 2 {
            return false;
        }
        if world.entities().is_index_spawned(index) {
            world.despawn_no_free(current);
        } else if let Ok(e) = world.spawn_empty_at(current) {
            e.despawn_no_free();
        } else {
            return false;
        }
    }
}

/// Parks `entity` in the predicted world: removes every component and adds [`Parked`].
pub(crate) fn park(world: &mut World, entity: Entity) {
    if let Ok(mut e) = world.get_entity_mut(entity) {
        e.retain::<()>();
        e.insert(Parked);
    }
}

/// Spawning and despawning simulation entities from a system.
///
/// Simulation entities must be spawned and despawned through this parameter (or
/// [`spawn_simulated_now`] / [`despawn_simulated_now`] with `&mut World`): a plain
/// `commands.spawn` in [`SimulationTick`](crate::SimulationTick) gives ids that differ
/// between the worlds and is never rolled back (it is reported as an
/// [`UnsimulatedEntity`](crate::UnsimulatedEntity)), and a plain `despawn` cannot be rolled
/// back. A despawn takes the entity's children with it.
///
/// Two systems that both use `SimCommands` must be ordered against each other (they are when
/// [`SimulationTick`](crate::SimulationTick) runs single-threaded, the default).
#[derive(SystemParam)]
pub struct SimCommands<'w, 's> {
    /// The ordinary command queue, for everything else.
    pub commands: Commands<'w, 's>,
    entities: ResMut<'w, SimulationEntities>,
    slots: Res<'w, ReservedSlots>,
    tick: Res<'w, SimTick>,
}

impl SimCommands<'_, '_> {
    /// Allocates a deterministic id now and queues the spawn of `bundle` on it.
    ///
    /// # Errors
    /// [`SessionError::SimulationEntitiesExhausted`] when no slot is free.
    pub fn spawn<B: Bundle>(&mut self, bundle: B) -> Result<Entity, SessionError> {
        let entity = self.entities.allocate(self.tick.0, &self.slots)?;
        self.commands.queue(move |world: &mut World| {
            if materialize(world, entity) {
                world.entity_mut(entity).insert(bundle);
            } else {
                error!(
                    "simulation entity {entity}: its slot's generation ran ahead; spawn dropped"
                );
            }
        });
        Ok(entity)
    }

    /// Queues the despawn of a simulation entity and its descendants so that a rollback can undo
    /// it (verified world: `despawn_no_free`; predicted world: park; see
    /// [`despawn_simulated_now`]). An entity that is not a live simulation entity when the
    /// command applies is logged and ignored.
    pub fn despawn(&mut self, entity: Entity) {
        self.commands.queue(move |world: &mut World| {
            if let Err(error) = despawn_simulated_now(world, entity) {
                report_ignored_despawn(world, entity, error);
            }
        });
    }
}

/// A despawn of `entity` was ignored: reported from the verified world (logged, and moved to
/// the main app as a [`SessionWarning::DespawnIgnored`](crate::SessionWarning) after the
/// update); the predicted world's repeats of it are only traced.
fn report_ignored_despawn(world: &mut World, entity: Entity, error: SessionError) {
    if world.get_resource::<WorldRole>() != Some(&WorldRole::Verified) {
        debug!("despawn of {entity} ignored in the predicted world: {error}");
        return;
    }
    let tick = world
        .get_resource::<crate::tick::SimTick>()
        .map_or(0, |t| t.0);
    let warning = crate::warning::SessionWarning::DespawnIgnored {
        entity,
        tick,
        error,
    };
    warn!("{warning}");
    world
        .get_resource_or_init::<crate::warning::PendingWarnings>()
        .0
        .push(warning);
}

/// Spawns `bundle` as a simulation entity now, returning its id.
///
/// # Errors
/// [`SessionError::NotASimulationWorld`] outside a simulation world;
/// [`SessionError::SimulationEntitiesExhausted`] when no slot is free;
/// [`SessionError::GenerationAhead`] if the slot's generation ran ahead (a bug).
pub fn spawn_simulated_now<B: Bundle>(
    world: &mut World,
    bundle: B,
) -> Result<Entity, SessionError> {
    let now = world
        .get_resource::<SimTick>()
        .ok_or(SessionError::NotASimulationWorld)?
        .0;
    let slots = world
        .get_resource::<ReservedSlots>()
        .ok_or(SessionError::NotASimulationWorld)?
        .clone();
    let entity = world
        .get_resource_mut::<SimulationEntities>()
        .ok_or(SessionError::NotASimulationWorld)?
        .allocate(now, &slots)?;
    if !materialize(world, entity) {
        return Err(SessionError::GenerationAhead { entity });
    }
    world.entity_mut(entity).insert(bundle);
    Ok(entity)
}

/// Despawns a simulation entity now (see [`SimCommands::despawn`]), with its descendants
/// (`Children`, recursively) as Bevy's `despawn` would: each child's subtree before the child,
/// children in `Children` order, the entity last. Simulation descendants go the simulated way
/// (freed slots, parked in the predicted world); a descendant that is not a simulation entity is
/// despawned plainly, in both worlds alike.
///
/// # Errors
/// [`SessionError::NotASimulationWorld`] outside a simulation world;
/// [`SessionError::NotASimulationEntity`] if `entity` is not a live simulation entity.
pub fn despawn_simulated_now(world: &mut World, entity: Entity) -> Result<(), SessionError> {
    let role = *world
        .get_resource::<WorldRole>()
        .ok_or(SessionError::NotASimulationWorld)?;
    let now = world.resource::<SimTick>().0;
    let slots = world.resource::<ReservedSlots>().clone();
    let live = world
        .get_entity(entity)
        .is_ok_and(|e| e.contains::<SimEntity>());
    if !live || slots.slot_of(entity).is_none() {
        return Err(SessionError::NotASimulationEntity { entity });
    }
    let mut order = Vec::new();
    descendants_post_order(world, entity, &mut order);
    order.push(entity);
    for e in order {
        despawn_one(world, e, role, now, &slots);
    }
    Ok(())
}

/// Despawns one entity without touching its descendants (they are gone already).
fn despawn_one(
    world: &mut World,
    entity: Entity,
    role: WorldRole,
    now: Tick,
    slots: &ReservedSlots,
) {
    let simulated = slots.slot_of(entity).is_some()
        && world
            .get_entity(entity)
            .is_ok_and(|e| e.contains::<SimEntity>());
    if !simulated {
        world.despawn(entity);
        return;
    }
    match role {
        WorldRole::Verified => {
            world.despawn_no_free(entity);
        }
        WorldRole::Predicted => park(world, entity),
    }
    world
        .resource_mut::<SimulationEntities>()
        .free(entity, now, slots);
}

/// Appends `root`'s descendants to `out`: each child after its own descendants, children in
/// `Children` order.
fn descendants_post_order(world: &World, root: Entity, out: &mut Vec<Entity>) {
    let Some(children) = world.get::<Children>(root) else {
        return;
    };
    for child in children.iter() {
        if child != root && !out.contains(&child) {
            descendants_post_order(world, child, out);
            out.push(child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worlds_own_entities_take_indices_below_the_reserved_range() {
        let mut world = World::new();
        let slots = ReservedSlots::reserve(&mut world, 64).expect("fresh world");
        let first = slots.index_of(0);
        assert!(first >= WORLD_OWN_INDICES, "range starts at {first}");
        let own = world.spawn_empty().id();
        assert!(
            own.index_u32() < first,
            "{own} spawned inside or above the range"
        );
        assert_eq!(slots.slot_of(own), None);
        world.insert_resource(SimTick(3));
        // A resource is an entity: it too lands below the range, never in it.
        for index in 0..64 {
            let entity = slots.entity(index, EntityGeneration::FIRST);
            assert!(
                world.get_entity(entity).is_err(),
                "slot {index} was spawned by Bevy"
            );
        }
    }

    #[test]
    fn two_worlds_built_alike_reserve_the_same_range() {
        let a = ReservedSlots::reserve(&mut World::new(), 100).expect("fresh");
        let b = ReservedSlots::reserve(&mut World::new(), 100).expect("fresh");
        assert_eq!(a.index_of(0), b.index_of(0));
        assert_eq!(a.len(), 100);
    }
}
