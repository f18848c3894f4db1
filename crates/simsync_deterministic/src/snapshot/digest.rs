//! State digests for the full prediction check
//! ([`PredictionCheck::AllRegisteredState`](crate::PredictionCheck)): a hash of every registered
//! value, not only the hashed ones.
//!
//! A registered type is digested, in order of preference, by its [`SimHash`](crate::SimHash)
//! (hashed registrations), by its `Debug` text (the crate's own registrations: transforms,
//! Rapier's components, the entity allocator), or through reflection: a type deriving `Reflect`
//! with `#[reflect(Component)]` (or `#[reflect(Resource)]`) and registered in the simulation
//! world (`app.register_type::<T>()` in the game plugin) is walked field by field, floats by
//! their bits. A type with none of these cannot be compared; the check names it once in an
//! [`UncheckedState`](crate::UncheckedState) message instead of pretending it matched.

use std::hash::Hasher;

use bevy::ecs::component::ComponentId;
use bevy::prelude::*;
use bevy::reflect::{PartialReflect, ReflectRef};

use crate::checksum::StateHasher;

/// What digesting one registered type found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DigestOutcome {
    /// Every value (and absence) was fed into the digest.
    Compared,
    /// No entity carries the type (or the resource is absent): nothing to compare.
    Absent,
    /// Values exist but the type has no way to be compared.
    Unchecked,
    /// The type is compared by other means (the inputs, by the audit's chain).
    Skipped,
}

/// Hashes `value`'s `Debug` text.
pub(crate) fn debug_digest<T: std::fmt::Debug>(value: &T, hasher: &mut StateHasher) {
    use std::fmt::Write;
    let mut text = String::new();
    let _ = write!(text, "{value:?}");
    hasher.write_str(&text);
}

/// Feeds the reflected component `id` of each entity (absence included) into `hasher`.
/// Returns `None` when the type is not reflected as a component in `world`'s type registry.
pub(crate) fn reflect_component_digest(
    world: &World,
    type_id: std::any::TypeId,
    entities: &[Entity],
    hasher: &mut StateHasher,
) -> Option<()> {
    let registry = world.get_resource::<AppTypeRegistry>()?.read();
    let reflect = registry.get_type_data::<ReflectComponent>(type_id)?;
    for entity in entities {
        match world
            .get_entity(*entity)
            .ok()
            .and_then(|e| reflect.reflect(e))
        {
            Some(value) => {
                hasher.write_u8(1);
                hash_reflect(value.as_partial_reflect(), hasher);
            }
            None => hasher.write_u8(0),
        }
    }
    Some(())
}

/// Feeds the reflected resource `id` (present) into `hasher`. Returns `None` when the type is
/// not reflected in `world`'s type registry.
pub(crate) fn reflect_resource_digest(
    world: &World,
    type_id: std::any::TypeId,
    id: ComponentId,
    hasher: &mut StateHasher,
) -> Option<()> {
    let registry = world.get_resource::<AppTypeRegistry>()?.read();
    let reflect = registry.get_type_data::<ReflectComponent>(type_id)?;
    let entity = world.resource_entities().get(id)?;
    let value = reflect.reflect(world.get_entity(entity).ok()?)?;
    hash_reflect(value.as_partial_reflect(), hasher);
    Some(())
}

/// Hashes a reflected value structurally: field names and values in declaration order, list
/// items in order, map and set entries independently of their iteration order, floats by their
/// bits, other leaves by their reflected hash or else their `Debug` text.
pub(crate) fn hash_reflect(value: &dyn PartialReflect, hasher: &mut StateHasher) {
    match value.reflect_ref() {
        ReflectRef::Struct(s) => {
            for i in 0..s.field_len() {
                hasher.write_str(s.name_at(i).unwrap_or_default());
                hash_field(s.field_at(i), hasher);
            }
        }
        ReflectRef::TupleStruct(s) => {
            for i in 0..s.field_len() {
                hash_field(s.field(i), hasher);
            }
        }
        ReflectRef::Tuple(t) => {
            for i in 0..t.field_len() {
                hash_field(t.field(i), hasher);
            }
        }
        ReflectRef::List(list) => {
            hasher.write_u64(list.len() as u64);
            list.iter().for_each(|item| hash_reflect(item, hasher));
        }
        ReflectRef::Array(array) => {
            hasher.write_u64(array.len() as u64);
            array.iter().for_each(|item| hash_reflect(item, hasher));
        }
        ReflectRef::Map(map) => {
            let sum = map.iter().fold(0u64, |sum, (k, v)| {
                let mut entry = StateHasher::default();
                hash_reflect(k, &mut entry);
                hash_reflect(v, &mut entry);
                sum.wrapping_add(entry.finish())
            });
            hasher.write_u64(map.len() as u64);
            hasher.write_u64(sum);
        }
        ReflectRef::Set(set) => {
            let sum = set.iter().fold(0u64, |sum, item| {
                let mut entry = StateHasher::default();
                hash_reflect(item, &mut entry);
                sum.wrapping_add(entry.finish())
            });
            hasher.write_u64(set.len() as u64);
            hasher.write_u64(sum);
        }
        ReflectRef::Enum(e) => {
            hasher.write_str(e.variant_name());
            for i in 0..e.field_len() {
                hash_field(e.field_at(i), hasher);
            }
        }
        _ => hash_leaf(value, hasher),
    }
}

fn hash_field(field: Option<&dyn PartialReflect>, hasher: &mut StateHasher) {
    match field {
        Some(field) => hash_reflect(field, hasher),
        None => hasher.write_u8(0),
    }
}

/// A leaf (opaque) value: floats by bits, else its reflected hash, else its `Debug` text.
fn hash_leaf(value: &dyn PartialReflect, hasher: &mut StateHasher) {
    if let Some(v) = value.try_downcast_ref::<f32>() {
        hasher.write_f32(*v);
    } else if let Some(v) = value.try_downcast_ref::<f64>() {
        hasher.write_u64(v.to_bits());
    } else if let Some(hash) = value.reflect_hash() {
        hasher.write_u64(hash);
    } else {
        hasher.write_str(&format!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Reflect, Clone)]
    struct Sample {
        score: u32,
        speed: f32,
        tags: Vec<u8>,
        mode: Mode,
    }

    #[derive(Reflect, Clone)]
    enum Mode {
        Idle,
        Running(i32),
    }

    fn digest(value: &Sample) -> u64 {
        let mut hasher = StateHasher::default();
        hash_reflect(value, &mut hasher);
        hasher.finish()
    }

    #[test]
    fn every_field_and_every_float_bit_changes_the_reflected_digest() {
        let base = Sample {
            score: 301,
            speed: 0.0,
            tags: vec![1, 2],
            mode: Mode::Running(3),
        };
        let same = base.clone();
        assert_eq!(digest(&base), digest(&same));
        let mut other = base.clone();
        other.score = 391;
        assert_ne!(digest(&base), digest(&other));
        let mut other = base.clone();
        other.speed = -0.0;
        assert_ne!(digest(&base), digest(&other), "floats are compared by bits");
        let mut other = base.clone();
        other.tags = vec![2, 1];
        assert_ne!(digest(&base), digest(&other));
        let mut other = base.clone();
        other.mode = Mode::Idle;
        assert_ne!(digest(&base), digest(&other));
        let mut other = base;
        other.mode = Mode::Running(4);
        assert_ne!(digest(&same), digest(&other));
    }

    #[test]
    fn map_entries_are_hashed_independently_of_iteration_order() {
        let mut a = std::collections::HashMap::new();
        let mut b = std::collections::HashMap::new();
        for i in 0..50u32 {
            a.insert(i, i * 3);
        }
        for i in (0..50u32).rev() {
            b.insert(i, i * 3);
        }
        let (mut ha, mut hb) = (StateHasher::default(), StateHasher::default());
        hash_reflect(&a, &mut ha);
        hash_reflect(&b, &mut hb);
        assert_eq!(ha.finish(), hb.finish());
        b.insert(7, 0);
        let mut hc = StateHasher::default();
        hash_reflect(&b, &mut hc);
        assert_ne!(ha.finish(), hc.finish());
    }
}
