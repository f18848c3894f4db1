//! How one registered type's values become snapshot bytes and back: the per-type serializers
//! that sit beside the rollback copiers ([snapshots](crate::rules#snapshots)).
//!
//! A registered type is serialized, in order of preference:
//! 1. by the serializer registered with it: serde through bincode for the types registered with
//!    the `_serde` methods of [`RollbackAppExt`](crate::RollbackAppExt) (and most built-in
//!    types), or a hand-written one for built-in types whose serde form is incomplete (Rapier's
//!    handles and sets, `Time`);
//! 2. else through Bevy reflection, when the simulation world's `AppTypeRegistry` reflects the
//!    component (`#[derive(Reflect)] #[reflect(Component)]` and `app.register_type::<T>()`):
//!    `TypedReflectSerializer` / `TypedReflectDeserializer` over the same bincode encoding;
//! 3. else not at all: capturing a snapshot of a world holding the type fails with
//!    [`SnapshotError::NotSerializable`](crate::SnapshotError::NotSerializable).
//!
//! Values are bincode 2 (`standard()`: little endian, varints) of the value alone; change ticks
//! and entity ids are kept beside them by the snapshot body.

use std::any::TypeId;

use bevy::ecs::component::Mutable;
use bevy::prelude::*;
use bevy::reflect::TypeRegistry;
use bevy::reflect::serde::{TypedReflectDeserializer, TypedReflectSerializer};
use serde::Serialize;
use serde::de::{DeserializeOwned, DeserializeSeed};

/// Saves the component of an entity (called only when the entity has it).
pub(crate) type SaveComponentFn = fn(&World, Entity, &TypeRegistry) -> Result<Vec<u8>, String>;
/// Inserts (or overwrites) the component of an entity from its bytes.
pub(crate) type LoadComponentFn =
    fn(&mut World, Entity, &[u8], &TypeRegistry) -> Result<(), String>;
/// Saves a resource (called only when the world has it).
pub(crate) type SaveResourceFn = fn(&World, &TypeRegistry) -> Result<Vec<u8>, String>;
/// Inserts (or overwrites) a resource from its bytes.
pub(crate) type LoadResourceFn = fn(&mut World, &[u8], &TypeRegistry) -> Result<(), String>;

/// The serializer of one registered component type.
#[derive(Clone, Copy)]
pub(crate) struct ComponentSerial {
    pub save: SaveComponentFn,
    pub load: LoadComponentFn,
}

/// The serializer of one registered resource type.
#[derive(Clone, Copy)]
pub(crate) struct ResourceSerial {
    pub save: SaveResourceFn,
    pub load: LoadResourceFn,
}

/// The bincode configuration of snapshot values: the crate's codec style (`standard()`: little
/// endian, variable-length integers).
pub(crate) fn value_config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes one value with [`value_config`].
pub(crate) fn encode_value<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, String> {
    bincode::serde::encode_to_vec(value, value_config()).map_err(|e| e.to_string())
}

/// Decodes one whole value from `bytes`. bincode claims the decoded size of everything it reads
/// (strings and byte buffers before allocating them) against a limit of 8 × `bytes.len()` + 64,
/// rounded up to a power of two (a one-byte varint decodes to at most 8 bytes), so a corrupt
/// length cannot make it allocate much more than the value's own bytes allow.
pub(crate) fn decode_value<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    decode_seed(std::marker::PhantomData::<T>, bytes)
}

/// [`decode_value`] for a `DeserializeSeed` (reflection).
pub(crate) fn decode_seed<'de, S: DeserializeSeed<'de>>(
    seed: S,
    bytes: &'de [u8],
) -> Result<S::Value, String> {
    fn run<'de, S: DeserializeSeed<'de>, const N: usize>(
        seed: S,
        bytes: &'de [u8],
    ) -> Result<S::Value, String> {
        let config = value_config().with_limit::<N>();
        match bincode::serde::seed_decode_from_slice(seed, bytes, config) {
            Ok((value, used)) if used == bytes.len() => Ok(value),
            Ok((_, used)) => Err(format!(
                "{} bytes left over after the value",
                bytes.len() - used
            )),
            Err(error) => Err(error.to_string()),
        }
    }
    macro_rules! by_limit {
        ($($bits:literal)*) => {
            match bytes.len().saturating_mul(8).saturating_add(64).next_power_of_two().trailing_zeros() {
                $($bits => run::<S, { 1usize << $bits }>(seed, bytes),)*
                _ => run::<S, { 1usize << 31 }>(seed, bytes),
            }
        };
    }
    by_limit!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30)
}

/// The serde serializer of component `T`.
pub(crate) fn serde_component<T>() -> ComponentSerial
where
    T: Component<Mutability = Mutable> + Serialize + DeserializeOwned,
{
    ComponentSerial {
        save: |world, entity, _| {
            let value = world
                .get::<T>(entity)
                .ok_or_else(|| format!("{entity} has no such component"))?;
            encode_value(value)
        },
        load: |world, entity, bytes, _| {
            let value: T = decode_value(bytes)?;
            world
                .get_entity_mut(entity)
                .map_err(|e| e.to_string())?
                .insert(value);
            Ok(())
        },
    }
}

/// The serde serializer of resource `R`.
pub(crate) fn serde_resource<R>() -> ResourceSerial
where
    R: Resource<Mutability = Mutable> + Serialize + DeserializeOwned,
{
    ResourceSerial {
        save: |world, _| {
            let value = world
                .get_resource::<R>()
                .ok_or_else(|| "no such resource".to_string())?;
            encode_value(value)
        },
        load: |world, bytes, _| {
            let value: R = decode_value(bytes)?;
            world.insert_resource(value);
            Ok(())
        },
    }
}

/// A type's value as another, serializable value: for built-in types whose own serde form is
/// missing or incomplete (the value is rebuilt from its mirror on load).
pub(crate) trait Mirror: Sized {
    /// The serializable form.
    type Repr: Serialize + DeserializeOwned;
    /// The value's serializable form.
    fn to_repr(&self) -> Self::Repr;
    /// The value back from its form.
    fn from_repr(repr: Self::Repr) -> Self;
}

/// The serializer of component `T` through its [`Mirror`].
pub(crate) fn mirror_component<T>() -> ComponentSerial
where
    T: Component<Mutability = Mutable> + Mirror,
{
    ComponentSerial {
        save: |world, entity, _| {
            let value = world
                .get::<T>(entity)
                .ok_or_else(|| format!("{entity} has no such component"))?;
            encode_value(&value.to_repr())
        },
        load: |world, entity, bytes, _| {
            let repr: T::Repr = decode_value(bytes)?;
            world
                .get_entity_mut(entity)
                .map_err(|e| e.to_string())?
                .insert(T::from_repr(repr));
            Ok(())
        },
    }
}

/// The serializer of resource `R` through its [`Mirror`].
pub(crate) fn mirror_resource<R>() -> ResourceSerial
where
    R: Resource<Mutability = Mutable> + Mirror,
{
    ResourceSerial {
        save: |world, _| {
            let value = world
                .get_resource::<R>()
                .ok_or_else(|| "no such resource".to_string())?;
            encode_value(&value.to_repr())
        },
        load: |world, bytes, _| {
            let repr: R::Repr = decode_value(bytes)?;
            world.insert_resource(R::from_repr(repr));
            Ok(())
        },
    }
}

/// Whether `registry` can serialize component `type_id` by reflection (it reflects the type as
/// a component).
pub(crate) fn reflects_component(registry: &TypeRegistry, type_id: TypeId) -> bool {
    registry
        .get(type_id)
        .is_some_and(|r| r.data::<ReflectComponent>().is_some())
}

/// Saves component `type_id` of `entity` by reflection.
pub(crate) fn reflect_save(
    world: &World,
    entity: Entity,
    type_id: TypeId,
    registry: &TypeRegistry,
) -> Result<Vec<u8>, String> {
    let reflect = registry
        .get(type_id)
        .and_then(|r| r.data::<ReflectComponent>())
        .ok_or_else(|| "not reflected as a component".to_string())?;
    let entity_ref = world.get_entity(entity).map_err(|e| e.to_string())?;
    let value = reflect
        .reflect(entity_ref)
        .ok_or_else(|| format!("{entity} has no such component"))?;
    encode_value(&TypedReflectSerializer::new(
        value.as_partial_reflect(),
        registry,
    ))
}

/// Inserts component `type_id` on `entity` from its reflected bytes.
pub(crate) fn reflect_load(
    world: &mut World,
    entity: Entity,
    type_id: TypeId,
    bytes: &[u8],
    registry: &TypeRegistry,
) -> Result<(), String> {
    let registration = registry
        .get(type_id)
        .ok_or_else(|| "not in the type registry".to_string())?;
    let reflect = registration
        .data::<ReflectComponent>()
        .ok_or_else(|| "not reflected as a component".to_string())?;
    let value = decode_seed(TypedReflectDeserializer::new(registration, registry), bytes)?;
    let mut entity_mut = world.get_entity_mut(entity).map_err(|e| e.to_string())?;
    reflect.insert(&mut entity_mut, value.as_ref(), registry);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_round_trips_and_left_over_bytes_are_refused() {
        let bytes = encode_value(&(7u32, String::from("seven"))).unwrap();
        let back: (u32, String) = decode_value(&bytes).unwrap();
        assert_eq!(back, (7, "seven".to_string()));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(
            decode_value::<(u32, String)>(&longer)
                .unwrap_err()
                .contains("left over")
        );
    }

    #[test]
    fn a_string_longer_than_the_value_is_refused_before_allocating() {
        // A varint length of 2^32 announcing a huge string in 9 bytes: the limit is 256 bytes.
        let bytes = [253u8, 0, 0, 0, 0, 1, 0, 0, 0];
        let error = decode_value::<String>(&bytes).unwrap_err();
        assert!(error.to_lowercase().contains("limit"), "{error}");
    }
}
