//! Capturing a [`DesyncDump`] or a [`ComponentBreakdown`] of one simulation world: per
//! simulation entity, per registered type, its digest and its fields through Bevy reflection.

use std::any::TypeId;
use std::hash::Hasher;

use bevy::prelude::*;
use bevy::reflect::enums::Enum;
use bevy::reflect::{PartialReflect, ReflectRef};

use super::format::{
    DesyncDump, DumpHeader, DumpReason, DumpedEntity, DumpedField, DumpedInput, DumpedValue,
    DumpedWorld, GameFingerprint,
};
use crate::checksum::{ComponentBreakdown, StateHasher};
use crate::snapshot::digest::DigestOutcome;
use crate::snapshot::{self, ReservedSlots, RollbackRegistry, SimulationWorld};
use crate::tick::PlayerIndex;

/// Fields one value is flattened into at most; the rest is one `…` field with its `Debug` text.
pub const MAX_FIELDS_PER_VALUE: usize = 256;

/// Nesting depth flattened; deeper values are one field with their `Debug` text.
const MAX_DEPTH: usize = 8;

/// The fingerprint of `registry`: its component and resource type names in registration order.
pub(crate) fn fingerprint(registry: &RollbackRegistry) -> GameFingerprint {
    GameFingerprint {
        components: registry
            .components
            .iter()
            .map(|c| c.type_name().to_string())
            .collect(),
        resources: registry
            .resources
            .iter()
            .map(|r| r.type_name().to_string())
            .collect(),
    }
}

/// What the dump says about the world besides its state.
pub(crate) struct DumpContext {
    pub world: DumpedWorld,
    pub reason: DumpReason,
    pub inputs: Vec<DumpedInput>,
    pub breakdowns: Vec<ComponentBreakdown>,
    pub writer: Option<PlayerIndex>,
}

/// Dumps `sw`'s simulation state now.
pub(crate) fn capture(
    sw: &mut SimulationWorld,
    registry: &RollbackRegistry,
    context: DumpContext,
) -> DesyncDump {
    let checksum = snapshot::checksum(sw, registry);
    let tick = sw.tick();
    let slots = sw.world.resource::<ReservedSlots>().clone();
    let entities = sw.simulation_entities();
    let world = &sw.world;
    let type_registry = world.get_resource::<AppTypeRegistry>().cloned();
    let type_registry = type_registry.as_ref().map(|r| r.read());
    let type_registry = type_registry.as_deref();
    let dumped = entities
        .iter()
        .map(|entity| DumpedEntity {
            slot: slots.slot_of(*entity).unwrap_or(u32::MAX),
            generation: entity.generation().to_bits(),
            components: entity_values(world, *entity, registry, &slots, type_registry),
        })
        .collect();
    DesyncDump {
        header: DumpHeader {
            tick,
            world: context.world,
            reason: context.reason,
            fingerprint: fingerprint(registry),
            checksum,
            writer: context.writer,
        },
        entities: dumped,
        resources: resource_values(world, registry, type_registry),
        inputs: context.inputs,
        breakdowns: context.breakdowns,
    }
}

/// Every registered component of `entity` (type, digest and reflected fields; absent ones
/// left out) and its registered relationships (type and hash).
fn entity_values(
    world: &World,
    entity: Entity,
    registry: &RollbackRegistry,
    slots: &ReservedSlots,
    type_registry: Option<&bevy::reflect::TypeRegistry>,
) -> Vec<DumpedValue> {
    let mut components = Vec::new();
    for copier in registry.components.iter() {
        let mut hasher = StateHasher::default();
        let outcome = copier.digest(world, std::slice::from_ref(&entity), &mut hasher);
        if outcome == DigestOutcome::Absent {
            continue;
        }
        let fields = type_registry.and_then(|tr| {
            let reflect = tr.get_type_data::<ReflectComponent>(copier.type_id())?;
            let value = reflect.reflect(world.get_entity(entity).ok()?)?;
            Some(flatten(value.as_partial_reflect()))
        });
        components.push(DumpedValue {
            type_name: copier.type_name().to_string(),
            hash: (outcome == DigestOutcome::Compared).then(|| hasher.finish()),
            fields,
        });
    }
    for (tag, copier) in crate::snapshot::tagged(&registry.relationships) {
        let mut hasher = StateHasher::default();
        copier.hash(tag, world, entity, slots, &mut hasher);
        components.push(DumpedValue {
            type_name: copier.type_name().to_string(),
            hash: Some(hasher.finish()),
            fields: None,
        });
    }
    components
}

/// Every registered resource present in `world` (type, digest and reflected fields).
fn resource_values(
    world: &World,
    registry: &RollbackRegistry,
    type_registry: Option<&bevy::reflect::TypeRegistry>,
) -> Vec<DumpedValue> {
    let mut resources = Vec::new();
    for copier in registry.resources.iter() {
        let mut hasher = StateHasher::default();
        let outcome = copier.digest(world, &mut hasher);
        if outcome == DigestOutcome::Absent {
            continue;
        }
        let fields =
            type_registry.and_then(|tr| reflect_resource(world, tr, copier.type_id()).map(flatten));
        resources.push(DumpedValue {
            type_name: copier.type_name().to_string(),
            hash: (outcome == DigestOutcome::Compared).then(|| hasher.finish()),
            fields,
        });
    }
    resources
}

fn reflect_resource<'w>(
    world: &'w World,
    registry: &bevy::reflect::TypeRegistry,
    type_id: TypeId,
) -> Option<&'w dyn PartialReflect> {
    let reflect = registry.get_type_data::<ReflectComponent>(type_id)?;
    let id = world.components().get_id(type_id)?;
    let entity = world.resource_entities().get(id)?;
    let value = reflect.reflect(world.get_entity(entity).ok()?)?;
    Some(value.as_partial_reflect())
}

/// Flattens a reflected value into its leaf fields (struct fields by name, tuple fields and
/// list items by position, enum variants by name), at most 256 (`MAX_FIELDS_PER_VALUE`).
pub fn flatten(value: &dyn PartialReflect) -> Vec<DumpedField> {
    let mut out = Vec::new();
    flatten_into(value, String::new(), 0, &mut out);
    out
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else if name.starts_with('[') {
        format!("{prefix}{name}")
    } else {
        format!("{prefix}.{name}")
    }
}

/// Flattens `value`, found at `path` and `depth` levels down, into `out`: its leaves, or one
/// "left out" marker once `out` holds [`MAX_FIELDS_PER_VALUE`] fields, or its debug text at
/// [`MAX_DEPTH`].
fn flatten_into(
    value: &dyn PartialReflect,
    path: String,
    depth: usize,
    out: &mut Vec<DumpedField>,
) {
    if out.len() >= MAX_FIELDS_PER_VALUE {
        if out.len() == MAX_FIELDS_PER_VALUE {
            out.push(DumpedField {
                path: "…".into(),
                value: "more fields left out".into(),
            });
        }
        return;
    }
    if depth >= MAX_DEPTH {
        push_leaf(value, path, out);
        return;
    }
    let next = depth + 1;
    match value.reflect_ref() {
        ReflectRef::Struct(s) if s.field_len() > 0 => {
            let fields = (0..s.field_len())
                .filter_map(|i| Some((s.name_at(i)?.to_string(), s.field_at(i)?)));
            flatten_children(fields, &path, next, out);
        }
        ReflectRef::TupleStruct(s) if s.field_len() > 0 => {
            let fields = (0..s.field_len()).filter_map(|i| Some((i.to_string(), s.field(i)?)));
            flatten_children(fields, &path, next, out);
        }
        ReflectRef::Tuple(t) if t.field_len() > 0 => {
            let fields = (0..t.field_len()).filter_map(|i| Some((i.to_string(), t.field(i)?)));
            flatten_children(fields, &path, next, out);
        }
        ReflectRef::List(list) => {
            out.push(DumpedField {
                path: join(&path, "len"),
                value: list.len().to_string(),
            });
            let items = list
                .iter()
                .enumerate()
                .map(|(i, item)| (format!("[{i}]"), item));
            flatten_children(items, &path, next, out);
        }
        ReflectRef::Array(array) => {
            let items = array
                .iter()
                .enumerate()
                .map(|(i, item)| (format!("[{i}]"), item));
            flatten_children(items, &path, next, out);
        }
        ReflectRef::Enum(e) => flatten_enum(e, &path, next, out),
        _ => push_leaf(value, path, out),
    }
}

/// `value` as one leaf field at `path`, in its debug text.
fn push_leaf(value: &dyn PartialReflect, path: String, out: &mut Vec<DumpedField>) {
    out.push(DumpedField {
        path,
        value: format!("{value:?}"),
    });
}

/// Flattens each `(name, child)` of the value at `path` into `out`, in order, at `depth`.
fn flatten_children<'a>(
    children: impl Iterator<Item = (String, &'a dyn PartialReflect)>,
    path: &str,
    depth: usize,
    out: &mut Vec<DumpedField>,
) {
    for (name, child) in children {
        flatten_into(child, join(path, &name), depth, out);
    }
}

/// An enum value at `path`: its variant's name, then its fields (by name, or by position in a
/// tuple variant) under `Variant::field`, at `depth`.
fn flatten_enum(e: &dyn Enum, path: &str, depth: usize, out: &mut Vec<DumpedField>) {
    let variant = join(path, "variant");
    out.push(DumpedField {
        path: variant,
        value: e.variant_name().to_string(),
    });
    for i in 0..e.field_len() {
        let name = e
            .name_at(i)
            .map(str::to_string)
            .unwrap_or_else(|| i.to_string());
        if let Some(field) = e.field_at(i) {
            flatten_into(
                field,
                join(path, &format!("{}::{name}", e.variant_name())),
                depth,
                out,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Reflect)]
    struct Body {
        position: Vec3,
        tags: Vec<u8>,
        mode: Mode,
    }

    #[derive(Reflect)]
    enum Mode {
        Moving { speed: f32 },
    }

    #[test]
    fn nested_fields_are_flattened_by_path() {
        let body = Body {
            position: Vec3::new(1.0, -0.5, 0.1),
            tags: vec![7],
            mode: Mode::Moving { speed: 2.5 },
        };
        let fields = flatten(&body);
        let find = |p: &str| {
            fields
                .iter()
                .find(|f| f.path == p)
                .map(|f| f.value.clone())
                .unwrap_or_else(|| panic!("no field {p} in {fields:?}"))
        };
        assert_eq!(find("position.x"), "1.0");
        assert_eq!(find("position.y"), "-0.5");
        assert_eq!(find("position.z"), "0.1");
        assert_eq!(find("tags.len"), "1");
        assert_eq!(find("tags[0]"), "7");
        assert_eq!(find("mode.variant"), "Moving");
        assert_eq!(find("mode.Moving::speed"), "2.5");
    }

    #[test]
    fn a_huge_value_is_cut_at_the_field_limit() {
        let list: Vec<u32> = (0..1_000).collect();
        let fields = flatten(&list);
        assert_eq!(fields.len(), MAX_FIELDS_PER_VALUE + 1);
        assert_eq!(fields.last().map(|f| f.path.as_str()), Some("…"));
    }
}
