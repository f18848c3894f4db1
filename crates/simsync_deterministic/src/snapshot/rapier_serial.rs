//! Snapshot serializers of the built-in types: Bevy's transforms and time, every bevy_rapier
//! component, and Rapier's state on the context entity.
//!
//! bevy_rapier's `serde-serialize` feature derives serde for Rapier's sets and pipeline parts,
//! but skips the maps from entities to handles that the sets keep beside them (they are
//! `pub(crate)` with read-only getters), and a few components (the handles, joints) have no serde
//! form at all. This module supplies what is missing:
//! - the handles and joints are saved through a [`Mirror`] of their public fields;
//! - a set is saved with its entity-to-handle map (read through the getter, sorted by entity) and
//!   loaded into the context entity's existing component: the serde part is assigned, the map is
//!   written back in place by [`replace_field`];
//! - the last transform bevy_rapier wrote for each body (its private change-detection memory)
//!   has no getter; after a load, [`restore_last_written_transforms`] runs bevy_rapier's own
//!   writeback once, which writes exactly the values the last tick's writeback wrote for every
//!   body that is not a child of another entity.

use std::any::TypeId;

use bevy::ecs::component::Mutable;
use bevy::ecs::system::RunSystemOnce;
use bevy::prelude::*;
use bevy::reflect::TypeRegistry;
use bevy::transform::components::TransformTreeChanged;
use bevy_rapier3d::plugin::context::{
    RapierContextColliders, RapierContextJoints, RapierContextSimulation, RapierRigidBodySet,
    SimulationToRenderTime,
};
use bevy_rapier3d::prelude::*;
use bevy_rapier3d::rapier::dynamics::{
    CCDSolver, ImpulseJointHandle, ImpulseJointSet, IntegrationParameters, IslandManager,
    MultibodyJointHandle, MultibodyJointSet, RigidBodyHandle, RigidBodySet,
};
use bevy_rapier3d::rapier::geometry::{
    ColliderHandle, ColliderSet, DefaultBroadPhase, NarrowPhase,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::registry::RollbackRegistry;
use super::serial::{
    ComponentSerial, Mirror, decode_value, encode_value, mirror_component, mirror_resource,
    serde_component, serde_resource,
};

/// Registers the serializers of the built-in types in `registry`, and the built-in reflected
/// types in `types` (so the reflection fallback finds them).
pub(crate) fn register_builtin_serials(registry: &mut RollbackRegistry, types: &mut TypeRegistry) {
    macro_rules! serial {
        ($make:ident: $($t:ty),* $(,)?) => {$( registry.set_component_serial(TypeId::of::<$t>(), $make::<$t>()); )*};
    }
    serial!(serde_component:
        Transform,
        GlobalTransform,
        Velocity,
        RigidBody,
        CollisionGroups,
        SolverGroups,
        ActiveEvents,
        ActiveHooks,
        ActiveCollisionTypes,
        ContactForceEventThreshold,
        ContactSkin,
        Collider,
    );
    serial!(mirror_component:
        RapierRigidBodyHandle,
        RapierColliderHandle,
        RapierImpulseJointHandle,
        RapierMultibodyJointHandle,
        TransformInterpolation,
        ImpulseJoint,
        MultibodyJoint,
        RapierContextEntityLink,
        DefaultRapierContext,
        SimulationToRenderTime,
        RapierConfiguration,
        TransformTreeChanged,
    );
    serial!(context_part:
        RapierRigidBodySet,
        RapierContextColliders,
        RapierContextJoints,
        RapierContextSimulation,
    );
    registry.set_resource_serial(TypeId::of::<Time>(), mirror_resource::<Time>());
    registry.set_resource_serial(
        TypeId::of::<simsync_time::CurrentInstant>(),
        serde_resource::<simsync_time::CurrentInstant>(),
    );
    super::character_serial::register(registry);
    register_reflected_builtins(types);
}

/// Registers the built-in types that the reflection fallback serializes in `types`, in a fixed
/// order.
fn register_reflected_builtins(types: &mut TypeRegistry) {
    types.register::<Transform>();
    types.register::<GlobalTransform>();
    types.register::<AdditionalMassProperties>();
    types.register::<ReadMassProperties>();
    types.register::<Ccd>();
    types.register::<SoftCcd>();
    types.register::<Damping>();
    types.register::<Dominance>();
    types.register::<ExternalForce>();
    types.register::<ExternalImpulse>();
    types.register::<GravityScale>();
    types.register::<LockedAxes>();
    types.register::<Sleeping>();
    types.register::<RigidBodyDisabled>();
    types.register::<ColliderDisabled>();
    types.register::<ColliderMassProperties>();
    types.register::<Friction>();
    types.register::<Restitution>();
    types.register::<Sensor>();
    types.register::<AdditionalSolverIterations>();
    types.register::<ReadColliderMassProperties>();
    types.register::<ImpulseJointImpulses>();
    types.register::<MultibodyJointState>();
    types.register::<ReadWorldMassProperties>();
    types.register::<AdditionalPgsIterations>();
    types.register::<AllowFastRotation>();
    types.register::<GyroscopicForces>();
    types.register::<ImpulseJointDisabled>();
    types.register::<KinematicMultibodyJoint>();
    types.register::<MultibodySelfContactsDisabled>();
    types.register::<ControllerIgnored>();
    types.register::<MultibodyJointArmature>();
    types.register::<MultibodyJointDamping>();
    types.register::<MultibodyJointFriction>();
    types.register::<MultibodyJointSprings>();
    types.register::<MultibodyJointCouplings>();
}

/// `Mirror` for a newtype over a serializable value (its `.0`).
macro_rules! newtype_mirror {
    ($($t:ty => $repr:ty),* $(,)?) => {$(
        impl Mirror for $t {
            type Repr = $repr;
            fn to_repr(&self) -> Self::Repr {
                self.0
            }
            fn from_repr(repr: Self::Repr) -> Self {
                Self(repr)
            }
        }
    )*};
}

newtype_mirror!(
    RapierRigidBodyHandle => RigidBodyHandle,
    RapierContextEntityLink => Entity,
    RapierColliderHandle => ColliderHandle,
    RapierImpulseJointHandle => ImpulseJointHandle,
    RapierMultibodyJointHandle => MultibodyJointHandle,
);

impl Mirror for DefaultRapierContext {
    type Repr = ();
    fn to_repr(&self) -> Self::Repr {}
    fn from_repr((): Self::Repr) -> Self {
        Self
    }
}

impl Mirror for TransformTreeChanged {
    type Repr = ();
    fn to_repr(&self) -> Self::Repr {}
    fn from_repr((): Self::Repr) -> Self {
        Self
    }
}

impl Mirror for SimulationToRenderTime {
    type Repr = f32;
    fn to_repr(&self) -> Self::Repr {
        self.diff
    }
    fn from_repr(diff: Self::Repr) -> Self {
        Self { diff }
    }
}

impl Mirror for RapierConfiguration {
    type Repr = (Vec3, bool, u32, bool);
    fn to_repr(&self) -> Self::Repr {
        (
            self.gravity,
            self.physics_pipeline_active,
            self.scaled_shape_subdivision,
            self.force_update_from_transform_changes,
        )
    }
    fn from_repr((gravity, physics, subdivision, force): Self::Repr) -> Self {
        let mut config = RapierConfiguration::new(1.0);
        config.gravity = gravity;
        config.physics_pipeline_active = physics;
        config.scaled_shape_subdivision = subdivision;
        config.force_update_from_transform_changes = force;
        config
    }
}

impl Mirror for TransformInterpolation {
    type Repr = (
        Option<bevy_rapier3d::rapier::prelude::Pose>,
        Option<bevy_rapier3d::rapier::prelude::Pose>,
    );
    fn to_repr(&self) -> Self::Repr {
        (self.start, self.end)
    }
    fn from_repr((start, end): Self::Repr) -> Self {
        Self { start, end }
    }
}

/// [`TypedJoint`]'s variant and its joint data (every variant wraps Rapier's `GenericJoint`,
/// which has a serde form).
#[derive(Serialize, Deserialize)]
pub(crate) enum TypedJointRepr {
    Fixed(GenericJoint),
    Generic(GenericJoint),
    Prismatic(GenericJoint),
    Revolute(GenericJoint),
    Rope(GenericJoint),
    Spherical(GenericJoint),
    Spring(GenericJoint),
}

impl Mirror for TypedJoint {
    type Repr = TypedJointRepr;
    fn to_repr(&self) -> Self::Repr {
        match *self {
            TypedJoint::FixedJoint(j) => TypedJointRepr::Fixed(j.data),
            TypedJoint::GenericJoint(j) => TypedJointRepr::Generic(j),
            TypedJoint::PrismaticJoint(j) => TypedJointRepr::Prismatic(j.data),
            TypedJoint::RevoluteJoint(j) => TypedJointRepr::Revolute(j.data),
            TypedJoint::RopeJoint(j) => TypedJointRepr::Rope(j.data),
            TypedJoint::SphericalJoint(j) => TypedJointRepr::Spherical(j.data),
            TypedJoint::SpringJoint(j) => TypedJointRepr::Spring(j.data),
        }
    }
    fn from_repr(repr: Self::Repr) -> Self {
        match repr {
            TypedJointRepr::Fixed(data) => TypedJoint::FixedJoint(FixedJoint { data }),
            TypedJointRepr::Generic(data) => TypedJoint::GenericJoint(data),
            TypedJointRepr::Prismatic(data) => TypedJoint::PrismaticJoint(PrismaticJoint { data }),
            TypedJointRepr::Revolute(data) => TypedJoint::RevoluteJoint(RevoluteJoint { data }),
            TypedJointRepr::Rope(data) => TypedJoint::RopeJoint(RopeJoint { data }),
            TypedJointRepr::Spherical(data) => TypedJoint::SphericalJoint(SphericalJoint { data }),
            TypedJointRepr::Spring(data) => TypedJoint::SpringJoint(SpringJoint { data }),
        }
    }
}

/// `Mirror` of a joint component: its parent entity and its [`TypedJoint`].
macro_rules! joint_mirror {
    ($($t:ty),* $(,)?) => {$(
        impl Mirror for $t {
            type Repr = (Entity, TypedJointRepr);
            fn to_repr(&self) -> Self::Repr {
                (self.parent, self.data.to_repr())
            }
            fn from_repr((parent, data): Self::Repr) -> Self {
                Self {
                    parent,
                    data: TypedJoint::from_repr(data),
                }
            }
        }
    )*};
}

joint_mirror!(ImpulseJoint, MultibodyJoint);

/// `Time<()>` rebuilt exactly: wrap period, then elapsed time reached in one last step of
/// `delta` (every other field is computed from these by `Time` itself).
impl Mirror for Time {
    type Repr = (
        std::time::Duration,
        std::time::Duration,
        std::time::Duration,
    );
    fn to_repr(&self) -> Self::Repr {
        (self.wrap_period(), self.elapsed(), self.delta())
    }
    fn from_repr((wrap, elapsed, delta): Self::Repr) -> Self {
        let mut time = Time::<()>::default();
        time.set_wrap_period(wrap);
        time.advance_to(elapsed.saturating_sub(delta));
        time.advance_by(delta.min(elapsed));
        time
    }
}

/// A map from entities to handles as a list sorted by entity (hash-map order is not
/// reproducible).
fn sorted_map<'a, H: Copy + 'a>(
    map: impl IntoIterator<Item = (&'a Entity, &'a H)>,
) -> Vec<(Entity, H)> {
    let mut list: Vec<(Entity, H)> = map.into_iter().map(|(e, h)| (*e, *h)).collect();
    list.sort_by_key(|(e, _)| *e);
    list
}

/// Replaces, in place, the field of `owner` that `getter` returns a shared reference to.
///
/// bevy_rapier keeps its entity-to-handle maps in `pub(crate)` fields with read-only getters
/// and skips them in its serde form; this is how a loaded set gets them back.
///
/// # Errors
/// If the getter's reference does not lie inside `owner` (it is not a field of it).
fn replace_field<S, F>(owner: &mut S, getter: fn(&S) -> &F, value: F) -> Result<(), String> {
    let offset = {
        let shared: &S = owner;
        let start = shared as *const S as usize;
        let field = getter(shared) as *const F as usize;
        field
            .checked_sub(start)
            .filter(|offset| offset + size_of::<F>() <= size_of::<S>())
            .ok_or_else(|| "the getter does not return a field of its owner".to_string())?
    };
    let base = owner as *mut S as *mut u8;
    // SAFETY: `offset` is the distance from the start of `*owner` to an `F` that `getter`
    // returned a reference to and that lies entirely inside `*owner` (checked above), so it is
    // a properly aligned, initialised `F` field of `*owner`. The pointer is derived from the
    // exclusive borrow `owner`, which no other reference aliases while we write; the assignment
    // drops the old value and moves `value` in, as `owner.field = value` would.
    unsafe {
        *base.add(offset).cast::<F>() = value;
    }
    Ok(())
}

fn context_component<'w, T: Component<Mutability = Mutable>>(
    world: &'w mut World,
    entity: Entity,
) -> Result<Mut<'w, T>, String> {
    world.get_mut::<T>(entity).ok_or_else(|| {
        format!(
            "{entity} has no {} in this world (the snapshot is of another game build)",
            std::any::type_name::<T>()
        )
    })
}

/// A bevy_rapier context component saved as its serde parts (with the entity-to-handle maps
/// its serde form skips) and loaded into the component the context entity already has.
trait ContextPart: Component<Mutability = Mutable> {
    /// The saved form, as decoded.
    type Repr: DeserializeOwned;
    /// The error when the entity lacks the component.
    const MISSING: &'static str;
    /// The component's bytes: [`Self::Repr`] encoded by [`encode_value`].
    fn save_part(&self) -> Result<Vec<u8>, String>;
    /// Writes the saved parts back into the component.
    fn load_part(&mut self, repr: Self::Repr) -> Result<(), String>;
}

/// The serializer of a [`ContextPart`]: on load the bytes are decoded first, then written
/// into the entity's component without marking it changed.
fn context_part<T: ContextPart>() -> ComponentSerial {
    ComponentSerial {
        save: |world, entity, _| world.get::<T>(entity).ok_or(T::MISSING)?.save_part(),
        load: |world, entity, bytes, _| {
            let repr: T::Repr = decode_value(bytes)?;
            let mut part = context_component::<T>(world, entity)?;
            part.bypass_change_detection().load_part(repr)
        },
    }
}

/// [`ContextPart`] of a context component holding one serde set (`$set`) and one
/// entity-to-handle map (read through its getter `$map`).
macro_rules! set_and_map_part {
    ($($t:ty { $set:ident: $set_ty:ty, $map:ident: $handle:ty, $missing:literal }),* $(,)?) => {$(
        impl ContextPart for $t {
            type Repr = ($set_ty, Vec<(Entity, $handle)>);
            const MISSING: &'static str = $missing;
            fn save_part(&self) -> Result<Vec<u8>, String> {
                encode_value(&(&self.$set, sorted_map(self.$map())))
            }
            fn load_part(&mut self, (set, map): Self::Repr) -> Result<(), String> {
                self.$set = set;
                replace_field(self, Self::$map, map.into_iter().collect())
            }
        }
    )*};
}

set_and_map_part!(
    RapierRigidBodySet { bodies: RigidBodySet, entity2body: RigidBodyHandle, "no rigid-body set" },
    RapierContextColliders {
        colliders: ColliderSet,
        entity2collider: ColliderHandle,
        "no collider set"
    },
);

impl ContextPart for RapierContextJoints {
    type Repr = (
        ImpulseJointSet,
        MultibodyJointSet,
        Vec<(Entity, ImpulseJointHandle)>,
        Vec<(Entity, MultibodyJointHandle)>,
    );
    const MISSING: &'static str = "no joint sets";
    fn save_part(&self) -> Result<Vec<u8>, String> {
        encode_value(&(
            &self.impulse_joints,
            &self.multibody_joints,
            sorted_map(self.entity2impulse_joint()),
            sorted_map(self.entity2multibody_joint()),
        ))
    }
    fn load_part(&mut self, repr: Self::Repr) -> Result<(), String> {
        let (impulse, multibody, impulse_map, multibody_map) = repr;
        self.impulse_joints = impulse;
        self.multibody_joints = multibody;
        let impulse_map = impulse_map.into_iter().collect();
        replace_field(self, Self::entity2impulse_joint, impulse_map)?;
        let multibody_map = multibody_map.into_iter().collect();
        replace_field(self, Self::entity2multibody_joint, multibody_map)
    }
}

/// The stateful parts of [`RapierContextSimulation`], as the rollback copies them: islands,
/// broad phase, narrow phase (with contact impulses), CCD solver, integration parameters.
impl ContextPart for RapierContextSimulation {
    type Repr = (
        IslandManager,
        DefaultBroadPhase,
        NarrowPhase,
        CCDSolver,
        IntegrationParameters,
    );
    const MISSING: &'static str = "no Rapier context";
    fn save_part(&self) -> Result<Vec<u8>, String> {
        encode_value(&(
            &self.islands,
            &self.broad_phase,
            &self.narrow_phase,
            &self.ccd_solver,
            &self.integration_parameters,
        ))
    }
    fn load_part(&mut self, repr: Self::Repr) -> Result<(), String> {
        (
            self.islands,
            self.broad_phase,
            self.narrow_phase,
            self.ccd_solver,
            self.integration_parameters,
        ) = repr;
        Ok(())
    }
}

/// Restores bevy_rapier's memory of the last transform it wrote to each body (used to tell a
/// user's transform change from its own) by running its writeback once on the loaded state.
/// Changes nothing else: components whose values the writeback would set are already equal.
pub(crate) fn restore_last_written_transforms(world: &mut World) -> Result<(), String> {
    world
        .run_system_once(bevy_rapier3d::plugin::systems::writeback_rigid_bodies)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Owner {
        _a: u64,
        b: Vec<u32>,
        _c: u8,
    }

    impl Owner {
        fn b(&self) -> &Vec<u32> {
            &self.b
        }
    }

    static OUTSIDE: Vec<u32> = Vec::new();

    #[test]
    fn replace_field_writes_the_field_the_getter_names() {
        let mut owner = Owner {
            _a: 1,
            b: vec![1, 2],
            _c: 3,
        };
        replace_field(&mut owner, Owner::b, vec![9]).unwrap();
        assert_eq!(owner.b, vec![9]);
        assert_eq!(owner._a, 1);
        assert_eq!(owner._c, 3);
    }

    #[test]
    fn replace_field_refuses_a_reference_outside_its_owner() {
        let mut owner = Owner {
            _a: 1,
            b: vec![],
            _c: 3,
        };
        assert!(replace_field(&mut owner, |_| &OUTSIDE, vec![1]).is_err());
    }

    #[test]
    fn time_is_rebuilt_exactly() {
        let mut time = Time::<()>::default();
        for _ in 0..1000 {
            time.advance_by(std::time::Duration::from_nanos(16_666_667));
        }
        let back = Time::from_repr(time.to_repr());
        assert_eq!(back.elapsed(), time.elapsed());
        assert_eq!(back.delta(), time.delta());
        assert_eq!(back.delta_secs().to_bits(), time.delta_secs().to_bits());
        assert_eq!(back.elapsed_secs().to_bits(), time.elapsed_secs().to_bits());
        assert_eq!(back.elapsed_wrapped(), time.elapsed_wrapped());
    }
}
