//! Rapier's state in a rollback.
//!
//! A bit-exact restore of Rapier needs more than `Transform` and `Velocity`: the rigid-body,
//! collider and joint sets, and the island manager, broad phase, narrow phase (contact graph)
//! and CCD solver of [`RapierContextSimulation`], plus the per-body components bevy_rapier keeps
//! in sync with them (handles, sleeping state, mass properties...). This module registers all of
//! them. The sets hold entity bits (`user_data`) and private entity-to-handle maps, which is why
//! simulation entities have equal ids in both worlds.

use std::any::TypeId;

use bevy::prelude::*;
use bevy::transform::components::TransformTreeChanged;
use bevy_rapier3d::plugin::context::{
    RapierContextColliders, RapierContextJoints, RapierContextSimulation, RapierRigidBodySet,
    SimulationToRenderTime,
};
use bevy_rapier3d::prelude::*;

use super::entities::Synced;
use super::registry::RollbackRegistry;
use super::strategy::{
    CachedQuery, ComponentCopier, RollbackStrategy, TickMap, free_then_clone, state_for,
};
use crate::checksum::StateHasher;

/// Registers each listed component type with a strategy, as a built-in (`unchecked`: restored
/// but left out of the prediction check's comparison). Registration order is part of a
/// snapshot's game fingerprint.
macro_rules! reg {
    ($registry:ident, $s:expr; $($t:ty),* $(,)?) => {$(
        $registry
            .register_builtin_component::<$t>($s)
            .expect("registry is open while building");
    )*};
    ($registry:ident, unchecked $s:expr; $($t:ty),* $(,)?) => {$(
        $registry
            .register_builtin_component_unchecked::<$t>($s)
            .expect("registry is open while building");
    )*};
}

/// bevy_rapier 0.37's components: the three it adds itself (collider mass properties, joint
/// impulses, multibody joint state), then the per-body, per-joint and controller options (in
/// this order: it is part of a snapshot's game fingerprint).
fn register_rapier_options(registry: &mut RollbackRegistry) {
    reg!(registry, RollbackStrategy::Copy; ReadColliderMassProperties, ImpulseJointImpulses,
        MultibodyJointState, ReadWorldMassProperties, AdditionalPgsIterations, AllowFastRotation,
        GyroscopicForces, ImpulseJointDisabled, KinematicMultibodyJoint,
        MultibodySelfContactsDisabled, ControllerIgnored, MultibodyJointArmature,
        MultibodyJointDamping, MultibodyJointFriction, MultibodyJointSprings);
    reg!(registry, RollbackStrategy::Clone; MultibodyJointCouplings);
}

/// Registers Bevy's transform components and hierarchy (`ChildOf`/`Children`), and every
/// bevy_rapier component that can sit on a simulation entity or a Rapier context entity.
pub(crate) fn register_builtin(registry: &mut RollbackRegistry) {
    use RollbackStrategy::Copy as K;
    registry
        .register_relationship::<ChildOf>()
        .expect("the hierarchy is supported");
    registry
        .register_hashed_component::<Transform>(K)
        .expect("open");
    registry
        .register_hashed_component::<Velocity>(K)
        .expect("open");
    reg!(registry, K; GlobalTransform, TransformTreeChanged);
    register_rapier_components(registry);
    register_rapier_options(registry);
    register_context(registry);
    registry.ignore_component::<Name>();
    registry.ignore_component::<super::entities::SimEntity>();
    registry.ignore_component::<Synced>();
    registry.ignore_component::<super::entities::Parked>();
    registry.ignore_component::<CollidingEntities>();
}

/// bevy_rapier's body, collider, joint and controller components (in this order: it is part of
/// a snapshot's game fingerprint).
fn register_rapier_components(registry: &mut RollbackRegistry) {
    use RollbackStrategy::{Clone as C, Copy as K};
    reg!(registry, K; RigidBody, RapierRigidBodyHandle, RapierColliderHandle, RapierImpulseJointHandle,
        RapierMultibodyJointHandle, RapierContextEntityLink, AdditionalMassProperties, Ccd, SoftCcd, Damping, Dominance, ExternalForce, ExternalImpulse,
        GravityScale, LockedAxes, Sleeping, RigidBodyDisabled, ColliderDisabled,
        ColliderMassProperties, Friction, Restitution, CollisionGroups, SolverGroups, Sensor,
        ActiveEvents, ActiveHooks, ActiveCollisionTypes,
        ColliderScale, TransformInterpolation, AdditionalSolverIterations, ImpulseJoint,
        MultibodyJoint, RapierConfiguration, DefaultRapierContext);
    reg!(registry, unchecked K; ContactForceEventThreshold, ContactSkin);
    // A mirror of the body's mass in Rapier's body set (which is restored and checked): bevy_rapier
    // 0.37 puts it on every body and rewrites it only when a `MassModifiedEvent` message reaches
    // its writeback, so a re-simulated tick may see it a message late. Restored, not compared.
    reg!(registry, unchecked K; ReadMassProperties);
    reg!(registry, C; Collider, KinematicCharacterController, KinematicCharacterControllerOutput);
}

/// The Rapier context entity's sets and simulation state (not on simulation entities: not
/// digested). The order of registration is part of a snapshot's game fingerprint: keep it.
fn register_context(registry: &mut RollbackRegistry) {
    registry
        .register_builtin_set::<RapierRigidBodySet>()
        .expect("registry is open while building");
    registry
        .register_builtin_set::<RapierContextColliders>()
        .expect("registry is open while building");
    registry
        .register_builtin_set::<RapierContextJoints>()
        .expect("registry is open while building");
    reg!(registry, unchecked RollbackStrategy::Clone; SimulationToRenderTime);
    registry
        .components
        .push(Box::new(ContextSimulationCopier::default()));
}

/// Copies the stateful parts of [`RapierContextSimulation`] (it is not `Clone`): islands, broad
/// phase, narrow phase, CCD solver and integration parameters. The pipeline keeps only scratch
/// buffers and stays the predicted world's own. Each part's old value is freed before its
/// clone is made ([`free_then_clone`]): Rapier's `clone_from` is the derived clone-then-free,
/// and the narrow phase of a resting pile holds megabytes in per-pair buffers.
#[derive(Default)]
struct ContextSimulationCopier {
    src: CachedQuery<(Entity, &'static RapierContextSimulation), With<Synced>>,
    dst: CachedQuery<&'static mut RapierContextSimulation, With<Synced>>,
}

impl ComponentCopier for ContextSimulationCopier {
    fn type_id(&self) -> TypeId {
        TypeId::of::<RapierContextSimulation>()
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<RapierContextSimulation>()
    }

    fn copy(&mut self, src: &mut World, dst: &mut World, _map: TickMap) {
        let src_q = state_for(&mut self.src, src);
        let dst_q = state_for(&mut self.dst, dst);
        let src: &World = src;
        for (entity, from) in src_q.iter(src) {
            let Ok(mut to) = dst_q.get_mut(dst, entity) else {
                warn!("Rapier context {entity} exists only in the verified world; not restored");
                continue;
            };
            let to = to.bypass_change_detection();
            free_then_clone(&mut to.islands, &from.islands);
            free_then_clone(&mut to.broad_phase, &from.broad_phase);
            free_then_clone(&mut to.narrow_phase, &from.narrow_phase);
            free_then_clone(&mut to.ccd_solver, &from.ccd_solver);
            to.integration_parameters = from.integration_parameters;
        }
    }

    fn hash(&self, _tag: u32, _world: &World, _entity: Entity, _hasher: &mut StateHasher) {}

    fn hashed(&self) -> bool {
        false
    }
}
