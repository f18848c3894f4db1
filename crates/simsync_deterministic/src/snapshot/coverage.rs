//! Coverage: whether a rollback restores everything in a simulation world
//! ([no silent divergence](crate::rules#no-silent-divergence)).
//!
//! Two mistakes leave state a rollback does not restore and a checksum does not see: an entity
//! spawned in a simulation world without [`SimEntity`] (a plain `commands.spawn`), and a
//! component on a simulation entity that is neither registered nor ignored. A scan over the
//! world's archetypes finds both. Each archetype is classified once (its component set never
//! changes, and the registry is locked while the session runs); a scan then only counts the
//! entities of the archetypes that hold any.

use std::any::TypeId;

use bevy::ecs::archetype::Archetype;
use bevy::ecs::component::ComponentId;
use bevy::ecs::observer::Observer;
use bevy::ecs::resource::IsResource;
use bevy::ecs::system::SystemIdMarker;
use bevy::prelude::*;

use super::entities::{Parked, SimEntity, Synced};
use super::registry::{RollbackRegistry, type_name_of};

/// Marks an entity that lives in a simulation world on purpose without being simulation state
/// (a debug helper, a cache the simulation never reads): the coverage check accepts it. It is
/// neither rolled back nor part of checksums, so a simulation system that reads or writes it
/// breaks determinism.
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component)]
pub struct NotSimulated;

/// What an archetype holds, for coverage.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ArchetypeClass {
    /// Not simulation state and not expected to be: Bevy's own entities (resources, observers,
    /// registered systems), Rapier's context, parked entities, [`NotSimulated`] ones.
    Exempt,
    /// Simulation entities whose every component is registered or ignored.
    Covered,
    /// Simulation entities carrying components neither registered nor ignored (their names).
    Unregistered(Vec<String>),
    /// Entities without [`SimEntity`] (the names of their components).
    Unsimulated(Vec<String>),
}

/// The archetype classes of one simulation world, and which were reported.
#[derive(Debug, Default)]
pub struct CoverageCache {
    classes: Vec<Option<ArchetypeClass>>,
    reported: Vec<bool>,
    /// Unsimulated entities found by the last scan.
    pub(crate) last_unsimulated: u64,
}

/// Entities without [`SimEntity`] found in a newly seen archetype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnsimulatedFinding {
    /// One of them.
    pub entity: Entity,
    /// How many the archetype held when found.
    pub entities: u32,
    /// Their components' type names.
    pub components: Vec<String>,
}

/// What one scan of a simulation world found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CoverageScan {
    /// Entities without [`SimEntity`] (and not exempt) in the world now.
    pub unsimulated_entities: u64,
    /// Simulation entities carrying a component neither registered nor ignored, now.
    pub unregistered_entities: u64,
    /// Archetypes of unsimulated entities seen for the first time.
    pub new_unsimulated: Vec<UnsimulatedFinding>,
    /// Unregistered component types seen for the first time (once per registry).
    pub new_unregistered: Vec<String>,
}

impl CoverageScan {
    /// Whether everything in the world is restored by a rollback or exempt.
    pub fn covered(&self) -> bool {
        self.unsimulated_entities == 0 && self.unregistered_entities == 0
    }
}

/// The component ids that make an archetype a simulation entity's or exempt.
struct Markers {
    sim: Option<ComponentId>,
    exempt: Vec<ComponentId>,
}

impl Markers {
    fn of(world: &World) -> Self {
        let id = |t: TypeId| world.components().get_id(t);
        Self {
            sim: id(TypeId::of::<SimEntity>()),
            exempt: [
                TypeId::of::<Parked>(),
                TypeId::of::<Synced>(),
                TypeId::of::<NotSimulated>(),
                TypeId::of::<IsResource>(),
                TypeId::of::<Observer>(),
                TypeId::of::<SystemIdMarker>(),
            ]
            .into_iter()
            .filter_map(id)
            .collect(),
        }
    }
}

/// Scans `world`'s archetypes: counts unsimulated entities and simulation entities with
/// unregistered components, and lists what is seen for the first time.
pub(crate) fn scan(
    world: &World,
    registry: &mut RollbackRegistry,
    cache: &mut CoverageCache,
) -> CoverageScan {
    let mut found = CoverageScan::default();
    let mut markers = None;
    for archetype in world.archetypes().iter() {
        if archetype.is_empty() {
            continue;
        }
        let index = archetype.id().index();
        if cache.classes.len() <= index {
            cache.classes.resize(index + 1, None);
            cache.reported.resize(index + 1, false);
        }
        let class = cache.classes[index].get_or_insert_with(|| {
            let markers = markers.get_or_insert_with(|| Markers::of(world));
            classify(world, archetype, markers, registry)
        });
        let first = !std::mem::replace(&mut cache.reported[index], true);
        match class {
            ArchetypeClass::Exempt | ArchetypeClass::Covered => {}
            ArchetypeClass::Unregistered(names) => {
                found.unregistered_entities += u64::from(archetype.len());
                if first {
                    for name in names {
                        if registry.first_report(name) {
                            found.new_unregistered.push(name.clone());
                        }
                    }
                }
            }
            ArchetypeClass::Unsimulated(names) => {
                found.unsimulated_entities += u64::from(archetype.len());
                if first {
                    found.new_unsimulated.push(UnsimulatedFinding {
                        entity: archetype.entities()[0].id(),
                        entities: archetype.len(),
                        components: names.clone(),
                    });
                }
            }
        }
    }
    cache.last_unsimulated = found.unsimulated_entities;
    found
}

fn classify(
    world: &World,
    archetype: &Archetype,
    markers: &Markers,
    registry: &RollbackRegistry,
) -> ArchetypeClass {
    let names = |filter: &dyn Fn(ComponentId) -> bool| -> Vec<String> {
        archetype
            .iter_components()
            .filter(|id| filter(*id))
            .filter_map(|id| world.components().get_info(id))
            .map(|info| type_name_of(world, info))
            .collect()
    };
    if markers.sim.is_some_and(|id| archetype.contains(id)) {
        let unknown = names(&|id| {
            world
                .components()
                .get_info(id)
                .and_then(|info| info.type_id())
                .is_none_or(|t| !registry.is_known(t))
        });
        return if unknown.is_empty() {
            ArchetypeClass::Covered
        } else {
            ArchetypeClass::Unregistered(unknown)
        };
    }
    if markers.exempt.iter().any(|id| archetype.contains(*id)) {
        return ArchetypeClass::Exempt;
    }
    ArchetypeClass::Unsimulated(names(&|_| true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Component)]
    struct Known;

    #[derive(Component)]
    struct Forgotten;

    #[derive(Resource)]
    struct SomeResource;

    fn registry() -> RollbackRegistry {
        let mut registry = RollbackRegistry::default();
        registry.ignore_component::<Known>();
        registry.ignore_component::<SimEntity>();
        registry
    }

    #[test]
    fn plain_entities_and_forgotten_components_are_counted_and_listed_once() {
        let mut world = World::new();
        world.insert_resource(SomeResource);
        world.add_observer(|_: On<Add<Known>>| {});
        world.spawn((SimEntity, Known));
        world.spawn((Synced, Known));
        world.spawn(Parked);
        world.spawn((Known, NotSimulated));
        let plain = world.spawn(Known).id();
        world.spawn(Known);
        world.spawn((SimEntity, Known, Forgotten));
        let (mut registry, mut cache) = (registry(), CoverageCache::default());
        let first = scan(&world, &mut registry, &mut cache);
        assert_eq!(first.unsimulated_entities, 2);
        assert_eq!(first.unregistered_entities, 1);
        assert!(!first.covered());
        assert_eq!(first.new_unsimulated.len(), 1);
        assert_eq!(first.new_unsimulated[0].entity, plain);
        assert_eq!(first.new_unsimulated[0].entities, 2);
        assert_eq!(first.new_unregistered.len(), 1);
        assert!(first.new_unregistered[0].ends_with("Forgotten"));
        // Seen already: counted again, not listed again.
        world.spawn(Known);
        let second = scan(&world, &mut registry, &mut cache);
        assert_eq!(second.unsimulated_entities, 3);
        assert!(second.new_unsimulated.is_empty() && second.new_unregistered.is_empty());
        assert_eq!(cache.last_unsimulated, 3);
    }

    #[test]
    fn a_world_of_simulation_entities_and_bevy_internals_is_covered() {
        let mut world = World::new();
        world.insert_resource(SomeResource);
        world.add_observer(|_: On<Add<Known>>| {});
        world.spawn((SimEntity, Known));
        let found = scan(&world, &mut registry(), &mut CoverageCache::default());
        assert!(found.covered(), "{found:?}");
    }
}
