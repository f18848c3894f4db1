//! Snapshot serializers of the bevy_rapier components that have neither a serde form nor a
//! reflected component: `ColliderScale` and the kinematic character controller with its output
//! ([snapshots](crate::rules#snapshots): every built-in type has a serializer). Each is mirrored
//! field by field into a plain serde type.

use std::any::TypeId;

use bevy::prelude::*;
use bevy_rapier3d::control::{CharacterAutostep, CharacterCollision, CharacterLength};
use bevy_rapier3d::prelude::*;
use serde::{Deserialize, Serialize};

use super::registry::RollbackRegistry;
use super::serial::{ComponentSerial, Mirror, decode_value, mirror_component};

/// Registers the serializers of this module's types.
pub(crate) fn register(registry: &mut RollbackRegistry) {
    registry.set_component_serial(
        TypeId::of::<ColliderScale>(),
        mirror_component::<ColliderScale>(),
    );
    registry.set_component_serial(
        TypeId::of::<KinematicCharacterController>(),
        controller_serial(),
    );
    registry.set_component_serial(
        TypeId::of::<KinematicCharacterControllerOutput>(),
        mirror_component::<KinematicCharacterControllerOutput>(),
    );
}

/// `ColliderScale`: `(absolute, scale)`.
impl Mirror for ColliderScale {
    type Repr = (bool, Vec3);
    fn to_repr(&self) -> Self::Repr {
        match *self {
            ColliderScale::Relative(scale) => (false, scale),
            ColliderScale::Absolute(scale) => (true, scale),
        }
    }
    fn from_repr((absolute, scale): Self::Repr) -> Self {
        if absolute {
            ColliderScale::Absolute(scale)
        } else {
            ColliderScale::Relative(scale)
        }
    }
}

/// The controller's serializer: its [`Mirror`], and on load the `filter_predicate` the entity's
/// controller already has (a closure, which no snapshot carries: the game sets it when it adds
/// the controller, the same on every peer). A snapshot of a controller with a predicate loaded
/// onto an entity without one is an error naming the remedy, never a controller that quietly
/// stops filtering.
fn controller_serial() -> ComponentSerial {
    let mirror = mirror_component::<KinematicCharacterController>();
    ComponentSerial {
        save: mirror.save,
        load: |world, entity, bytes, _| {
            let repr: ControllerRepr = decode_value(bytes)?;
            let kept = world
                .get::<KinematicCharacterController>(entity)
                .and_then(|c| c.filter_predicate.clone());
            if repr.filter_predicate && kept.is_none() {
                return Err(format!(
                    "{entity}'s character controller had a filter_predicate, which a snapshot \
                     cannot carry, and the entity here has none to keep: exclude colliders with \
                     exclude_colliders, exclude_rigid_bodies or ControllerIgnored instead"
                ));
            }
            let mut controller = KinematicCharacterController::from_repr(repr);
            controller.filter_predicate = kept;
            world
                .get_entity_mut(entity)
                .map_err(|e| e.to_string())?
                .insert(controller);
            Ok(())
        },
    }
}

/// Every field of `KinematicCharacterController`, the query filter flags as their bits, the
/// excluded entities sorted, and whether it had a `filter_predicate` (the closure itself is not
/// data; see [`controller_serial`]).
#[derive(Serialize, Deserialize)]
pub(crate) struct ControllerRepr {
    translation: Option<Vec3>,
    custom_shape: Option<(Collider, Vec3, Quat)>,
    custom_mass: Option<f32>,
    up: Vec3,
    offset: CharacterLength,
    slide: bool,
    autostep: Option<CharacterAutostep>,
    max_slope_climb_angle: f32,
    min_slope_slide_angle: f32,
    apply_impulse_to_dynamic_bodies: bool,
    snap_to_ground: Option<CharacterLength>,
    filter_flags: u32,
    filter_groups: Option<CollisionGroups>,
    exclude_colliders: Vec<Entity>,
    exclude_rigid_bodies: Vec<Entity>,
    filter_predicate: bool,
    normal_nudge_factor: f32,
}

fn sorted(set: &bevy::ecs::entity::EntityHashSet) -> Vec<Entity> {
    let mut entities: Vec<Entity> = set.iter().copied().collect();
    entities.sort_unstable();
    entities
}

impl Mirror for KinematicCharacterController {
    type Repr = ControllerRepr;
    fn to_repr(&self) -> Self::Repr {
        ControllerRepr {
            translation: self.translation,
            custom_shape: self.custom_shape.clone(),
            custom_mass: self.custom_mass,
            up: self.up,
            offset: self.offset,
            slide: self.slide,
            autostep: self.autostep,
            max_slope_climb_angle: self.max_slope_climb_angle,
            min_slope_slide_angle: self.min_slope_slide_angle,
            apply_impulse_to_dynamic_bodies: self.apply_impulse_to_dynamic_bodies,
            snap_to_ground: self.snap_to_ground,
            filter_flags: self.filter_flags.bits(),
            filter_groups: self.filter_groups,
            exclude_colliders: sorted(&self.exclude_colliders),
            exclude_rigid_bodies: sorted(&self.exclude_rigid_bodies),
            filter_predicate: self.filter_predicate.is_some(),
            normal_nudge_factor: self.normal_nudge_factor,
        }
    }
    fn from_repr(r: Self::Repr) -> Self {
        Self {
            translation: r.translation,
            custom_shape: r.custom_shape,
            custom_mass: r.custom_mass,
            up: r.up,
            offset: r.offset,
            slide: r.slide,
            autostep: r.autostep,
            max_slope_climb_angle: r.max_slope_climb_angle,
            min_slope_slide_angle: r.min_slope_slide_angle,
            apply_impulse_to_dynamic_bodies: r.apply_impulse_to_dynamic_bodies,
            snap_to_ground: r.snap_to_ground,
            filter_flags: QueryFilterFlags::from_bits_retain(r.filter_flags),
            filter_groups: r.filter_groups,
            exclude_colliders: r.exclude_colliders.into_iter().collect(),
            exclude_rigid_bodies: r.exclude_rigid_bodies.into_iter().collect(),
            filter_predicate: None,
            normal_nudge_factor: r.normal_nudge_factor,
        }
    }
}

/// One `CharacterCollision`: entity, character translation and rotation, translation applied
/// and remaining, then the hit (time of impact, details as `[witness1, witness2, normal1,
/// normal2]`, status as its index, the sub-shapes hit `[subshape1, subshape2]`).
type CollisionRepr = (
    Entity,
    Vec3,
    Quat,
    Vec3,
    Vec3,
    f32,
    Option<[Vec3; 4]>,
    u8,
    [u32; 2],
);

fn status_index(status: ShapeCastStatus) -> u8 {
    match status {
        ShapeCastStatus::OutOfIterations => 0,
        ShapeCastStatus::Converged => 1,
        ShapeCastStatus::Failed => 2,
        ShapeCastStatus::PenetratingOrWithinTargetDist => 3,
    }
}

/// The status of index `i`; an unknown index (a corrupt snapshot) reads as `Failed`.
fn status_of(i: u8) -> ShapeCastStatus {
    match i {
        0 => ShapeCastStatus::OutOfIterations,
        1 => ShapeCastStatus::Converged,
        3 => ShapeCastStatus::PenetratingOrWithinTargetDist,
        _ => ShapeCastStatus::Failed,
    }
}

fn collision_repr(c: &CharacterCollision) -> CollisionRepr {
    (
        c.entity,
        c.character_translation,
        c.character_rotation,
        c.translation_applied,
        c.translation_remaining,
        c.hit.time_of_impact,
        c.hit
            .details
            .map(|d| [d.witness1, d.witness2, d.normal1, d.normal2]),
        status_index(c.hit.status),
        [c.hit.subshape1, c.hit.subshape2],
    )
}

fn collision_of(r: CollisionRepr) -> CharacterCollision {
    let (entity, translation, rotation, applied, remaining, toi, details, status, subshapes) = r;
    CharacterCollision {
        entity,
        character_translation: translation,
        character_rotation: rotation,
        translation_applied: applied,
        translation_remaining: remaining,
        hit: ShapeCastHit {
            time_of_impact: toi,
            details: details.map(
                |[witness1, witness2, normal1, normal2]| ShapeCastHitDetails {
                    witness1,
                    witness2,
                    normal1,
                    normal2,
                },
            ),
            status: status_of(status),
            subshape1: subshapes[0],
            subshape2: subshapes[1],
        },
    }
}

/// `KinematicCharacterControllerOutput`: grounded, desired and effective translation, the
/// collisions, sliding down a slope.
impl Mirror for KinematicCharacterControllerOutput {
    type Repr = (bool, Vec3, Vec3, Vec<CollisionRepr>, bool);
    fn to_repr(&self) -> Self::Repr {
        (
            self.grounded,
            self.desired_translation,
            self.effective_translation,
            self.collisions.iter().map(collision_repr).collect(),
            self.is_sliding_down_slope,
        )
    }
    fn from_repr((grounded, desired, effective, collisions, sliding): Self::Repr) -> Self {
        Self {
            grounded,
            desired_translation: desired,
            effective_translation: effective,
            collisions: collisions.into_iter().map(collision_of).collect(),
            is_sliding_down_slope: sliding,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Mirror>(value: &T) -> T {
        let bytes = super::super::serial::encode_value(&value.to_repr()).expect("encodes");
        T::from_repr(super::super::serial::decode_value(&bytes).expect("decodes"))
    }

    #[test]
    fn collider_scale_round_trips_both_variants() {
        for scale in [
            ColliderScale::Relative(Vec3::new(1.0, 2.0, 3.0)),
            ColliderScale::Absolute(Vec3::splat(0.5)),
        ] {
            assert_eq!(round_trip(&scale), scale);
        }
    }

    #[test]
    fn a_character_controller_round_trips_every_field() {
        let controller = KinematicCharacterController {
            translation: Some(Vec3::new(0.1, -0.2, 0.3)),
            custom_mass: Some(80.0),
            up: Vec3::Z,
            offset: CharacterLength::Absolute(0.05),
            slide: false,
            autostep: Some(CharacterAutostep {
                max_height: CharacterLength::Relative(0.3),
                min_width: CharacterLength::Absolute(0.2),
                include_dynamic_bodies: true,
            }),
            max_slope_climb_angle: 0.7,
            min_slope_slide_angle: 0.4,
            apply_impulse_to_dynamic_bodies: false,
            snap_to_ground: Some(CharacterLength::Absolute(0.1)),
            filter_flags: QueryFilterFlags::EXCLUDE_SENSORS | QueryFilterFlags::ONLY_DYNAMIC,
            filter_groups: Some(CollisionGroups::new(Group::GROUP_2, Group::GROUP_3)),
            exclude_colliders: [Entity::from_raw_u32(9), Entity::from_raw_u32(4)]
                .into_iter()
                .flatten()
                .collect(),
            exclude_rigid_bodies: [Entity::from_raw_u32(12)].into_iter().flatten().collect(),
            filter_predicate: None,
            normal_nudge_factor: 1.0e-3,
            custom_shape: None,
        };
        let back = round_trip(&controller);
        assert_eq!(format!("{back:?}"), format!("{controller:?}"));
    }

    #[test]
    fn a_loaded_controller_keeps_the_entitys_filter_predicate_or_is_refused_without_one() {
        use bevy::reflect::TypeRegistry;
        use bevy_rapier3d::control::ControllerFilterPredicate;
        let serial = controller_serial();
        let types = TypeRegistry::default();
        let mut world = World::new();
        let with = KinematicCharacterController {
            filter_predicate: Some(ControllerFilterPredicate::new(|_, _| false)),
            offset: CharacterLength::Absolute(0.25),
            ..Default::default()
        };
        let source = world.spawn(with.clone()).id();
        let bytes = (serial.save)(&world, source, &types).expect("saves");
        // Onto an entity whose controller has a predicate: the fields load, the predicate stays.
        let target = world
            .spawn(KinematicCharacterController {
                filter_predicate: with.filter_predicate.clone(),
                ..Default::default()
            })
            .id();
        (serial.load)(&mut world, target, &bytes, &types).expect("loads");
        let loaded = world
            .get::<KinematicCharacterController>(target)
            .expect("present");
        assert!(loaded.filter_predicate.is_some());
        assert_eq!(format!("{:?}", loaded.offset), "Absolute(0.25)");
        // Onto an entity with none: a typed error, and the entity is left as it was.
        let bare = world.spawn_empty().id();
        let error = (serial.load)(&mut world, bare, &bytes, &types).expect_err("refused");
        assert!(error.contains("filter_predicate"), "{error}");
        assert!(world.get::<KinematicCharacterController>(bare).is_none());
        // A controller without a predicate loads anywhere.
        let plain = world.spawn(KinematicCharacterController::default()).id();
        let bytes = (serial.save)(&world, plain, &types).expect("saves");
        (serial.load)(&mut world, bare, &bytes, &types).expect("loads");
        assert!(world.get::<KinematicCharacterController>(bare).is_some());
    }

    #[test]
    fn a_character_controller_output_round_trips_its_collisions() {
        let output = KinematicCharacterControllerOutput {
            grounded: true,
            desired_translation: Vec3::new(1.0, 0.0, 0.0),
            effective_translation: Vec3::new(0.5, 0.0, 0.0),
            collisions: vec![CharacterCollision {
                entity: Entity::from_raw_u32(7).expect("valid index"),
                character_translation: Vec3::new(2.0, 1.0, 0.0),
                character_rotation: Quat::from_rotation_y(0.3),
                translation_applied: Vec3::new(0.5, 0.0, 0.0),
                translation_remaining: Vec3::new(0.5, 0.0, 0.0),
                hit: ShapeCastHit {
                    time_of_impact: 0.25,
                    details: Some(ShapeCastHitDetails {
                        witness1: Vec3::X,
                        witness2: Vec3::Y,
                        normal1: Vec3::NEG_X,
                        normal2: Vec3::Z,
                    }),
                    status: ShapeCastStatus::PenetratingOrWithinTargetDist,
                    subshape1: 3,
                    subshape2: 0,
                },
            }],
            is_sliding_down_slope: true,
        };
        assert_eq!(round_trip(&output), output);
    }
}
