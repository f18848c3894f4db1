//! Capturing one simulation world into a [`WorldState`] and loading one back
//! ([snapshots](crate::rules#snapshots)).
//!
//! A load makes a world built by the same game plugin hold exactly the captured state: the
//! simulation entities at their captured ids (index and generation), every registered
//! component and resource (absence included) with its change ticks relative to the world's
//! tick mark, the relationships in their order, and Rapier's state. Entity ids must be equal
//! because Rapier's sets store entity bits and order work by them.

use std::any::TypeId;
use std::collections::BTreeSet;

use bevy::ecs::change_detection::Tick as ChangeTick;
use bevy::ecs::component::ComponentId;
use bevy::ecs::entity::{EntityGeneration, EntityIndex};
use bevy::prelude::*;
use bevy::reflect::TypeRegistry;

use super::entities::{self, Parked, ReservedSlots, SimEntity, SimulationEntities, Synced};
use super::format::{ComponentBlock, SlotState, SnapshotError, StoredValue, WorldState};
use super::registry::RollbackRegistry;
use super::relationship::tick_offset;
use super::serial::{reflect_load, reflect_save, reflects_component};
use super::{SimulationWorld, rapier_serial};

/// The names of every registered type, in snapshot order: components, relationships,
/// resources.
pub(crate) fn registered_type_names(registry: &RollbackRegistry) -> Vec<String> {
    registry
        .components
        .iter()
        .map(|c| c.type_name().to_string())
        .chain(
            registry
                .relationships
                .iter()
                .map(|r| r.type_name().to_string()),
        )
        .chain(registry.resources.iter().map(|r| r.type_name().to_string()))
        .collect()
}

/// The world's type registry (reflection fallback of the serializers).
fn type_registry(world: &World) -> AppTypeRegistry {
    world
        .get_resource::<AppTypeRegistry>()
        .cloned()
        .unwrap_or_default()
}

/// The registered types that cannot be serialized: no serializer and no reflection.
pub(crate) fn unserializable_types(
    world: &World,
    registry: &RollbackRegistry,
) -> Vec<&'static str> {
    let types = type_registry(world);
    let types = types.read();
    let components = registry.components.iter().filter(|c| {
        !registry.component_serials.contains_key(&c.type_id())
            && !reflects_component(&types, c.type_id())
    });
    let resources = registry
        .resources
        .iter()
        .filter(|r| !registry.resource_serials.contains_key(&r.type_id()));
    components
        .map(|c| c.type_name())
        .chain(resources.map(|r| r.type_name()))
        .collect()
}

/// Every live simulation entity in slot order, then every other synchronized entity (Rapier
/// contexts) in id order.
fn synced_entities(sw: &mut SimulationWorld) -> (Vec<Entity>, Vec<Entity>) {
    let sims = sw.simulation_entities();
    let mut query = sw
        .world
        .query_filtered::<Entity, (With<Synced>, Without<SimEntity>, Without<Parked>)>();
    let mut others: Vec<Entity> = query.iter(&sw.world).collect();
    others.sort();
    (sims, others)
}

/// Captures `sw` (between two ticks).
///
/// # Errors
/// [`SnapshotError::NotSerializable`] for a registered type present in the world with no
/// serializer; [`SnapshotError::Value`] if a serializer fails.
pub(crate) fn capture_world(
    sw: &mut SimulationWorld,
    registry: &RollbackRegistry,
) -> Result<WorldState, SnapshotError> {
    let slot_states = slot_states(&sw.world);
    let (sims, contexts) = synced_entities(sw);
    let world = &sw.world;
    let mark = sw.mark;
    let all: Vec<Entity> = sims.iter().chain(&contexts).copied().collect();
    let types = type_registry(world);
    let types = types.read();
    let mut components = Vec::with_capacity(registry.components.len());
    for copier in &registry.components {
        components.push(capture_component(
            world,
            registry,
            &types,
            copier.type_id(),
            copier.type_name(),
            &all,
            mark,
        )?);
    }
    let relationships = registry
        .relationships
        .iter()
        .map(|r| r.save(world, &all, mark))
        .collect();
    let mut resources = Vec::with_capacity(registry.resources.len());
    for copier in &registry.resources {
        resources.push(capture_resource(
            world,
            registry,
            &types,
            copier.type_id(),
            copier.type_name(),
            mark,
        )?);
    }
    Ok(WorldState {
        slots: slot_states,
        contexts,
        components,
        relationships,
        resources,
    })
}

/// Every used slot's generation and whether a live simulation entity holds it.
fn slot_states(world: &World) -> Vec<SlotState> {
    let slots = world.resource::<ReservedSlots>();
    let used = world.resource::<SimulationEntities>().slots_used();
    (0..used)
        .map(|slot| {
            let index = EntityIndex::from_raw_u32(slots.index_of(slot)).expect("reserved index");
            let entity = world.entities().resolve_from_index(index);
            let live = world.entities().is_index_spawned(index)
                && world.get::<SimEntity>(entity).is_some()
                && world.get::<Parked>(entity).is_none();
            SlotState {
                generation: entity.generation().to_bits(),
                live,
            }
        })
        .collect()
}

fn capture_component(
    world: &World,
    registry: &RollbackRegistry,
    types: &TypeRegistry,
    type_id: TypeId,
    type_name: &str,
    entities: &[Entity],
    mark: ChangeTick,
) -> Result<ComponentBlock, SnapshotError> {
    let Some(id) = world.components().get_id(type_id) else {
        return Ok(ComponentBlock { values: Vec::new() });
    };
    let serial = registry.component_serials.get(&type_id);
    let mut values = Vec::new();
    for entity in entities {
        let entity_ref = world.entity(*entity);
        let Some(ticks) = entity_ref.get_change_ticks_by_id(id) else {
            continue;
        };
        let bytes = match serial {
            Some(serial) => (serial.save)(world, *entity, types),
            None if reflects_component(types, type_id) => {
                reflect_save(world, *entity, type_id, types)
            }
            None => {
                return Err(SnapshotError::NotSerializable {
                    type_name: type_name.to_string(),
                });
            }
        }
        .map_err(|reason| SnapshotError::Value {
            type_name: type_name.to_string(),
            entity: Some(*entity),
            reason,
        })?;
        values.push((
            *entity,
            StoredValue {
                changed: tick_offset(ticks.changed, mark),
                added: tick_offset(ticks.added, mark),
                bytes,
            },
        ));
    }
    Ok(ComponentBlock { values })
}

fn capture_resource(
    world: &World,
    registry: &RollbackRegistry,
    types: &TypeRegistry,
    type_id: TypeId,
    type_name: &str,
    mark: ChangeTick,
) -> Result<Option<StoredValue>, SnapshotError> {
    let Some(id) = world.components().get_id(type_id) else {
        return Ok(None);
    };
    let Some(ticks) = world.get_resource_change_ticks_by_id(id) else {
        return Ok(None);
    };
    let Some(serial) = registry.resource_serials.get(&type_id) else {
        return Err(SnapshotError::NotSerializable {
            type_name: type_name.to_string(),
        });
    };
    let bytes = (serial.save)(world, types).map_err(|reason| SnapshotError::Value {
        type_name: type_name.to_string(),
        entity: None,
        reason,
    })?;
    Ok(Some(StoredValue {
        changed: tick_offset(ticks.changed, mark),
        added: tick_offset(ticks.added, mark),
        bytes,
    }))
}

/// The change tick at `offset` from the world's mark, never later than the world's current
/// tick (as a rollback maps them).
fn tick_at(mark: ChangeTick, now: ChangeTick, offset: i32) -> ChangeTick {
    let room = now.get().wrapping_sub(mark.get()) as i32;
    ChangeTick::new(mark.get().wrapping_add(offset.min(room) as u32))
}

fn foreign(what: &str, expected: impl ToString, found: impl ToString) -> SnapshotError {
    SnapshotError::ForeignGame {
        what: what.to_string(),
        expected: expected.to_string(),
        found: found.to_string(),
    }
}

fn corrupt(what: String) -> SnapshotError {
    // Structural errors inside a payload that decoded and passed its hash: the snapshot was
    // written wrong (or forged); the body has no byte offsets, so name the item.
    SnapshotError::Corrupt { offset: 0, what }
}

/// Loads `state` into `sw`, a world built by the same game (its registry is `registry`).
///
/// # Errors
/// [`SnapshotError::ForeignGame`] if the state does not fit this world (more slots than
/// reserved, other Rapier context entities, other block counts); [`SnapshotError::Corrupt`]
/// for a value on an entity the state does not hold; [`SnapshotError::NotSerializable`] /
/// [`SnapshotError::Value`] if a value cannot be loaded;
/// [`SnapshotError::InconsistentPhysics`] if the loaded Rapier state's indices do not hold
/// together ([`rapier_check`](super::rapier_check)); [`SnapshotError::InvalidShape`] if a
/// collider's shape does not ([`shape_check`](super::shape_check)). The world may be partly
/// loaded after
/// an error: build a new App to try again.
pub(crate) fn load_world(
    sw: &mut SimulationWorld,
    registry: &RollbackRegistry,
    state: &WorldState,
) -> Result<(), SnapshotError> {
    check_shape(sw, registry, state)?;
    let live = load_entities(&mut sw.world, state)?;
    let (_, contexts) = synced_entities(sw);
    if contexts != state.contexts {
        return Err(foreign(
            "Rapier context entities",
            format!("{contexts:?}"),
            format!("{:?}", state.contexts),
        ));
    }
    let allowed: BTreeSet<Entity> = live.iter().chain(&contexts).copied().collect();
    let mark = sw.mark;
    let types = type_registry(&sw.world);
    let types = types.read();
    for (copier, block) in registry.components.iter().zip(&state.components) {
        load_component(
            &mut sw.world,
            registry,
            &types,
            (copier.type_id(), copier.type_name()),
            block,
            &allowed,
            &contexts,
            mark,
        )?;
    }
    load_relationships(sw, registry, state, &allowed)?;
    for (copier, stored) in registry.resources.iter().zip(&state.resources) {
        load_resource(
            &mut sw.world,
            registry,
            &types,
            (copier.type_id(), copier.type_name()),
            stored.as_ref(),
            mark,
        )?;
    }
    drop(types);
    // Before any system (bevy_rapier's writeback below is one) reads the loaded sets.
    super::rapier_check::check_physics(&mut sw.world)?;
    rapier_serial::restore_last_written_transforms(&mut sw.world).map_err(|reason| {
        SnapshotError::Value {
            type_name: "bevy_rapier3d writeback".into(),
            entity: None,
            reason,
        }
    })?;
    // The removals made by the load itself must not reach Rapier's removal detection in the
    // next tick: the loaded sets are already right.
    sw.world.clear_trackers();
    sw.world.clear_trackers();
    Ok(())
}

/// Loads every registered relationship's saved targets and sources into `sw`, refusing one that
/// names an entity outside `allowed` (the snapshot's live entities and Rapier contexts).
fn load_relationships(
    sw: &mut SimulationWorld,
    registry: &RollbackRegistry,
    state: &WorldState,
    allowed: &BTreeSet<Entity>,
) -> Result<(), SnapshotError> {
    let mark = sw.mark;
    for (copier, block) in registry.relationships.iter().zip(&state.relationships) {
        for saved in &block.targets {
            let outside = std::iter::once(&saved.target)
                .chain(saved.sources.iter().map(|(s, _)| s))
                .find(|e| !allowed.contains(e));
            if let Some(entity) = outside {
                return Err(corrupt(format!(
                    "`{}` names {entity}, not an entity of the snapshot",
                    copier.type_name()
                )));
            }
        }
        let now = sw.world.read_change_tick();
        copier
            .load(&mut sw.world, block, &|offset| tick_at(mark, now, offset))
            .map_err(|reason| SnapshotError::Value {
                type_name: copier.type_name().to_string(),
                entity: None,
                reason,
            })?;
    }
    Ok(())
}

/// The state must have one block per registered type and fit the reserved slots.
fn check_shape(
    sw: &SimulationWorld,
    registry: &RollbackRegistry,
    state: &WorldState,
) -> Result<(), SnapshotError> {
    let capacity = sw.world.resource::<ReservedSlots>().len();
    if state.slots.len() > capacity as usize {
        return Err(foreign(
            "simulation entity capacity",
            capacity,
            format!("at least {}", state.slots.len()),
        ));
    }
    let counts = [
        (
            "component blocks",
            registry.components.len(),
            state.components.len(),
        ),
        (
            "relationship blocks",
            registry.relationships.len(),
            state.relationships.len(),
        ),
        (
            "resource values",
            registry.resources.len(),
            state.resources.len(),
        ),
    ];
    for (what, expected, found) in counts {
        if expected != found {
            return Err(foreign(what, expected, found));
        }
    }
    Ok(())
}

/// Puts every simulation entity at its captured id: live ones spawned with nothing but
/// [`SimEntity`] and [`Synced`], others despawned. Returns the live entities in slot order.
fn load_entities(world: &mut World, state: &WorldState) -> Result<Vec<Entity>, SnapshotError> {
    let slots = world.resource::<ReservedSlots>().clone();
    let used = world
        .resource::<SimulationEntities>()
        .slots_used()
        .max(state.slots.len() as u32);
    let mut live = Vec::new();
    for slot in 0..used {
        let index = EntityIndex::from_raw_u32(slots.index_of(slot)).expect("reserved index");
        let current = world.entities().resolve_from_index(index);
        let spawned = world.entities().is_index_spawned(index);
        match state.slots.get(slot as usize) {
            Some(saved) if saved.live => {
                let entity = slots.entity(slot, EntityGeneration::from_bits(saved.generation));
                if spawned && current == entity {
                    world.entity_mut(entity).retain::<(SimEntity, Synced)>();
                } else if !entities::materialize(world, entity) {
                    return Err(corrupt(format!(
                        "slot {slot}: generation {} is behind this world's {}",
                        saved.generation,
                        current.generation().to_bits()
                    )));
                }
                live.push(entity);
            }
            _ => {
                if spawned {
                    world.despawn_no_free(current);
                }
            }
        }
    }
    world.flush();
    Ok(live)
}

#[allow(clippy::too_many_arguments)]
fn load_component(
    world: &mut World,
    registry: &RollbackRegistry,
    types: &TypeRegistry,
    (type_id, type_name): (TypeId, &str),
    block: &ComponentBlock,
    allowed: &BTreeSet<Entity>,
    contexts: &[Entity],
    mark: ChangeTick,
) -> Result<(), SnapshotError> {
    let error = |entity: Entity, reason: String| SnapshotError::Value {
        type_name: type_name.to_string(),
        entity: Some(entity),
        reason,
    };
    let serial = registry.component_serials.get(&type_id);
    if !block.values.is_empty() && serial.is_none() && !reflects_component(types, type_id) {
        return Err(SnapshotError::NotSerializable {
            type_name: type_name.to_string(),
        });
    }
    // Context entities keep their components: drop those the snapshot does not have.
    if let Some(id) = world.components().get_id(type_id) {
        for context in contexts {
            if !block.values.iter().any(|(e, _)| e == context)
                && world.entity(*context).contains_id(id)
            {
                world.entity_mut(*context).remove_by_id(id);
            }
        }
    }
    for (entity, stored) in &block.values {
        if !allowed.contains(entity) {
            return Err(corrupt(format!(
                "`{type_name}` on {entity}, not an entity of the snapshot"
            )));
        }
        match serial {
            Some(serial) => (serial.load)(world, *entity, &stored.bytes, types),
            None => reflect_load(world, *entity, type_id, &stored.bytes, types),
        }
        .map_err(|reason| error(*entity, reason))?;
        let id = world
            .components()
            .get_id(type_id)
            .ok_or_else(|| error(*entity, "not inserted".into()))?;
        set_component_ticks(world, *entity, id, mark, stored);
    }
    Ok(())
}

fn set_component_ticks(
    world: &mut World,
    entity: Entity,
    id: ComponentId,
    mark: ChangeTick,
    stored: &StoredValue,
) {
    let now = world.read_change_tick();
    let mut entity_mut = world.entity_mut(entity);
    if let Ok(mut value) = entity_mut.get_mut_by_id(id) {
        value.set_last_changed(tick_at(mark, now, stored.changed));
        value.set_last_added(tick_at(mark, now, stored.added));
    }
}

fn load_resource(
    world: &mut World,
    registry: &RollbackRegistry,
    types: &TypeRegistry,
    (type_id, type_name): (TypeId, &str),
    stored: Option<&StoredValue>,
    mark: ChangeTick,
) -> Result<(), SnapshotError> {
    let Some(stored) = stored else {
        if let Some(id) = world.components().get_id(type_id) {
            world.remove_resource_by_id(id);
        }
        return Ok(());
    };
    let Some(serial) = registry.resource_serials.get(&type_id) else {
        return Err(SnapshotError::NotSerializable {
            type_name: type_name.to_string(),
        });
    };
    let error = |reason: String| SnapshotError::Value {
        type_name: type_name.to_string(),
        entity: None,
        reason,
    };
    (serial.load)(world, &stored.bytes, types).map_err(error)?;
    let id = world
        .components()
        .get_id(type_id)
        .ok_or_else(|| error("not inserted".into()))?;
    let now = world.read_change_tick();
    if let Some(mut value) = world.get_resource_mut_by_id(id) {
        value.set_last_changed(tick_at(mark, now, stored.changed));
        value.set_last_added(tick_at(mark, now, stored.added));
    }
    Ok(())
}
