//! Where the predicted and the verified state of a failed prediction check first differ: the
//! check keeps, with every audited predicted tick, one hash per simulation entity and one per
//! registered type (the values [`PredictionCheck`] compares, cell by cell); on a mismatch the
//! verified world is broken down the same way and the two are compared ([no silent
//! divergence](crate::rules#no-silent-divergence)).

use std::hash::Hasher;

use bevy::prelude::*;

use crate::checksum::StateHasher;
use crate::config::PredictionCheck;
use crate::snapshot::{self, ReservedSlots, RollbackRegistry, SimulationWorld};

/// Where a failed prediction check's predicted and verified states first differ
/// ([`PredictionMismatch::first_difference`](crate::PredictionMismatch::first_difference)).
/// Simulation entities are named by their slot and generation, the same in both worlds and on
/// every peer ([`ReservedSlots`](crate::ReservedSlots)); types in simulation-entity order, then
/// registration order, as checksums walk them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateDifference {
    /// A simulation entity exists in one world only, or with another generation: the first
    /// such slot. `None`: absent from that world.
    Entity {
        /// The entity's slot.
        slot: u32,
        /// Its generation in the predicted world.
        predicted: Option<u32>,
        /// Its generation in the verified world.
        verified: Option<u32>,
    },
    /// A registered component (or relationship) differs on a simulation entity: the first type
    /// that differs anywhere, on the first entity that differs.
    Component {
        /// The component's type name.
        type_name: &'static str,
        /// The entity's slot.
        slot: u32,
        /// The entity's generation.
        generation: u32,
    },
    /// Several component types differ on several entities: the first type (registration order)
    /// and the first entity (slot order) that differ; whether that type differs on that entity
    /// is not known.
    Components {
        /// The first differing type's name.
        first_type: &'static str,
        /// How many types differ.
        types: u32,
        /// The first differing entity's slot.
        first_slot: u32,
        /// Its generation.
        generation: u32,
        /// How many entities differ.
        entities: u32,
    },
    /// Every simulation entity is equal; a registered resource differs (the first one).
    Resource {
        /// The resource's type name.
        type_name: &'static str,
    },
}

impl core::fmt::Display for StateDifference {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Entity {
                slot,
                predicted,
                verified,
            } => match (predicted, verified) {
                (Some(g), None) => write!(
                    f,
                    "simulation entity slot {slot} (generation {g}) exists only in the predicted world"
                ),
                (None, Some(g)) => write!(
                    f,
                    "simulation entity slot {slot} (generation {g}) exists only in the verified world"
                ),
                (p, v) => write!(
                    f,
                    "simulation entity slot {slot} has generation {} predicted, {} verified",
                    p.unwrap_or_default(),
                    v.unwrap_or_default()
                ),
            },
            Self::Component {
                type_name,
                slot,
                generation,
            } => write!(
                f,
                "component `{type_name}` differs on simulation entity slot {slot} (generation {generation})"
            ),
            Self::Components {
                first_type,
                types,
                first_slot,
                generation,
                entities,
            } => write!(
                f,
                "{types} component types differ on {entities} simulation entities, first \
                 `{first_type}` and slot {first_slot} (generation {generation})"
            ),
            Self::Resource { type_name } => write!(f, "resource `{type_name}` differs"),
        }
    }
}

/// One world's state as the prediction check compares it, hashed per simulation entity and per
/// registered type.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct StateBreakdown {
    /// (slot, generation) of every simulation entity, in slot order.
    entities: Vec<(u32, u32)>,
    /// Per entity: the hash of its compared components and relationships.
    entity_hashes: Vec<u64>,
    /// Per component type, then per relationship type (registration order): the hash of its
    /// values on every entity.
    types: Vec<u64>,
    /// Per resource type: the hash of its value.
    resources: Vec<u64>,
}

/// Breaks `sw`'s state down as `check` compares it: the hashed components, relationships and
/// resources for [`PredictionCheck::Checksum`], every registered value for
/// [`PredictionCheck::AllRegisteredState`].
pub(crate) fn breakdown(
    sw: &mut SimulationWorld,
    registry: &RollbackRegistry,
    check: PredictionCheck,
) -> StateBreakdown {
    let slots = sw.world.resource::<ReservedSlots>().clone();
    let list = sw.simulation_entities();
    let world = &sw.world;
    let all = check == PredictionCheck::AllRegisteredState;
    let kinds = registry.components.len() + registry.relationships.len();
    let mut types = vec![StateHasher::default(); kinds];
    let mut out = StateBreakdown::default();
    for entity in &list {
        let mut entity_hash = StateHasher::default();
        let cells = snapshot::tagged(&registry.components).map(|(tag, copier)| {
            let mut cell = StateHasher::default();
            if all {
                copier.digest(world, std::slice::from_ref(entity), &mut cell);
            } else {
                copier.hash(tag, world, *entity, &mut cell);
            }
            cell.finish()
        });
        let relations = snapshot::tagged(&registry.relationships).map(|(tag, copier)| {
            let mut cell = StateHasher::default();
            copier.hash(tag, world, *entity, &slots, &mut cell);
            cell.finish()
        });
        for (kind, cell) in cells.chain(relations).enumerate() {
            entity_hash.write_u64(cell);
            types[kind].write_u64(cell);
        }
        out.entities.push((
            slots.slot_of(*entity).unwrap_or(u32::MAX),
            entity.generation().to_bits(),
        ));
        out.entity_hashes.push(entity_hash.finish());
    }
    out.types = types.iter().map(Hasher::finish).collect();
    out.resources = snapshot::tagged(&registry.resources)
        .map(|(tag, copier)| {
            let mut hasher = StateHasher::default();
            if all {
                copier.digest(world, &mut hasher);
            } else {
                copier.hash(tag, world, &mut hasher);
            }
            hasher.finish()
        })
        .collect();
    out
}

/// The name of component-or-relationship `kind` (see [`StateBreakdown::types`]).
fn kind_name(registry: &RollbackRegistry, kind: usize) -> &'static str {
    match registry.components.get(kind) {
        Some(copier) => copier.type_name(),
        None => registry
            .relationships
            .get(kind - registry.components.len())
            .map_or("?", |copier| copier.type_name()),
    }
}

/// Where `predicted` and `verified` first differ (see [`StateDifference`]); `None` when their
/// breakdowns are equal.
pub(crate) fn first_difference(
    predicted: &StateBreakdown,
    verified: &StateBreakdown,
    registry: &RollbackRegistry,
) -> Option<StateDifference> {
    if predicted.entities != verified.entities {
        return entity_set_difference(&predicted.entities, &verified.entities);
    }
    let differing = |a: &[u64], b: &[u64]| -> Vec<usize> {
        (0..a.len().max(b.len()))
            .filter(|i| a.get(*i) != b.get(*i))
            .collect()
    };
    let kinds = differing(&predicted.types, &verified.types);
    let entities = differing(&predicted.entity_hashes, &verified.entity_hashes);
    if let (Some(&kind), Some(&index)) = (kinds.first(), entities.first()) {
        let (slot, generation) = verified.entities[index];
        let type_name = kind_name(registry, kind);
        return Some(if kinds.len() == 1 || entities.len() == 1 {
            StateDifference::Component {
                type_name,
                slot,
                generation,
            }
        } else {
            StateDifference::Components {
                first_type: type_name,
                types: kinds.len() as u32,
                first_slot: slot,
                generation,
                entities: entities.len() as u32,
            }
        });
    }
    let resource = *differing(&predicted.resources, &verified.resources).first()?;
    let type_name = registry.resources.get(resource)?.type_name();
    Some(StateDifference::Resource { type_name })
}

/// The first slot present in one list only or with another generation (both in slot order).
fn entity_set_difference(
    predicted: &[(u32, u32)],
    verified: &[(u32, u32)],
) -> Option<StateDifference> {
    let (mut p, mut v) = (predicted.iter().peekable(), verified.iter().peekable());
    loop {
        let found = match (p.peek().copied(), v.peek().copied()) {
            (None, None) => return None,
            (Some(&(slot, g)), None) => (slot, Some(g), None),
            (None, Some(&(slot, g))) => (slot, None, Some(g)),
            (Some(&(ps, pg)), Some(&(vs, vg))) => {
                if ps < vs {
                    (ps, Some(pg), None)
                } else if vs < ps {
                    (vs, None, Some(vg))
                } else if pg != vg {
                    (ps, Some(pg), Some(vg))
                } else {
                    p.next();
                    v.next();
                    continue;
                }
            }
        };
        let (slot, predicted, verified) = found;
        return Some(StateDifference::Entity {
            slot,
            predicted,
            verified,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(entities: &[(u32, u32)], hashes: &[u64], types: &[u64]) -> StateBreakdown {
        StateBreakdown {
            entities: entities.to_vec(),
            entity_hashes: hashes.to_vec(),
            types: types.to_vec(),
            resources: vec![1, 2],
        }
    }

    #[test]
    fn the_entity_set_is_compared_first_in_slot_order() {
        let registry = RollbackRegistry::default();
        let p = state(&[(1, 0), (4, 2), (9, 0)], &[1, 2, 3], &[7]);
        let v = state(&[(1, 0), (5, 1), (9, 0)], &[1, 2, 3], &[8]);
        assert_eq!(
            first_difference(&p, &v, &registry),
            Some(StateDifference::Entity {
                slot: 4,
                predicted: Some(2),
                verified: None
            })
        );
        let v = state(&[(1, 0), (4, 3)], &[1, 2], &[7]);
        let diff = first_difference(&p, &v, &registry).expect("differs");
        assert_eq!(
            diff,
            StateDifference::Entity {
                slot: 4,
                predicted: Some(2),
                verified: Some(3)
            }
        );
        assert_eq!(
            diff.to_string(),
            "simulation entity slot 4 has generation 2 predicted, 3 verified"
        );
        let v = state(&[(0, 0), (1, 0), (4, 2), (9, 0)], &[0, 1, 2, 3], &[7]);
        assert_eq!(
            first_difference(&p, &v, &registry)
                .expect("differs")
                .to_string(),
            "simulation entity slot 0 (generation 0) exists only in the verified world"
        );
    }

    #[test]
    fn equal_breakdowns_have_no_difference_and_a_resource_is_named_last() {
        let registry = RollbackRegistry::default();
        let p = state(&[(1, 0)], &[5], &[6]);
        assert_eq!(first_difference(&p, &p.clone(), &registry), None);
        let mut v = p.clone();
        v.resources[1] = 3;
        // The empty registry has no resource to name.
        assert_eq!(first_difference(&p, &v, &registry), None);
    }
}
