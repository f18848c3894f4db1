//! The registry of simulation state: which component and resource types a rollback copies and a
//! checksum hashes.

use std::any::TypeId;
use std::collections::{HashMap, HashSet};

use bevy::ecs::component::Mutable;
use bevy::ecs::relationship::Relationship;
use bevy::prelude::*;

use super::relationship::{RelationshipCopier, RelationshipRollback, check_relationship};
use super::serial::{ComponentSerial, ResourceSerial, serde_component, serde_resource};
use super::strategy::{
    CloneComponent, CloneResource, ComponentCopier, DigestSource, ResourceCopier, RollbackStrategy,
    free_then_clone, sim_hash_fn,
};
use crate::checksum::SimHash;
use crate::error::SessionError;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The registered simulation state of one simulation world.
///
/// Both worlds build the same registry (the game plugin runs in both); the session keeps the
/// verified world's copy. Register through [`RollbackAppExt`] in your game plugin.
#[derive(Resource, Default)]
pub struct RollbackRegistry {
    pub(crate) components: Vec<Box<dyn ComponentCopier>>,
    pub(crate) resources: Vec<Box<dyn ResourceCopier>>,
    pub(crate) relationships: Vec<Box<dyn RelationshipCopier>>,
    component_types: HashSet<TypeId>,
    resource_types: HashSet<TypeId>,
    /// Both sides of every registered relationship.
    relationship_types: HashSet<TypeId>,
    ignored: HashSet<TypeId>,
    ignored_resources: HashSet<TypeId>,
    reported: HashSet<String>,
    setup_errors: Vec<SessionError>,
    locked: bool,
    /// Snapshot serializers by type ([snapshots](crate::rules#snapshots)); a registered type
    /// without one is serialized by reflection if the world's type registry allows it.
    pub(crate) component_serials: HashMap<TypeId, ComponentSerial>,
    pub(crate) resource_serials: HashMap<TypeId, ResourceSerial>,
    /// Snapshots are enabled: a type without a serializer is a setup error.
    snapshots: bool,
}

impl RollbackRegistry {
    /// Registers component `T` (copied by `strategy`; not hashed).
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the session has started.
    pub fn register_component<T: Component<Mutability = Mutable> + Clone>(
        &mut self,
        strategy: RollbackStrategy,
    ) -> Result<(), SessionError> {
        self.add_component::<T>(strategy, None, DigestSource::Reflect)
    }

    /// Registers one of the crate's own component types: compared by its `Debug` text in the
    /// full prediction check.
    pub(crate) fn register_builtin_component<
        T: Component<Mutability = Mutable> + Clone + std::fmt::Debug,
    >(
        &mut self,
        strategy: RollbackStrategy,
    ) -> Result<(), SessionError> {
        self.add_component::<T>(strategy, None, DigestSource::<T>::debug())
    }

    /// Registers component `T` (not hashed) with its serde form as its snapshot serializer
    /// ([snapshots](crate::rules#snapshots)).
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the session has started.
    pub(crate) fn register_serde_component<T>(
        &mut self,
        hashed: Option<fn(&T, &mut crate::checksum::StateHasher)>,
    ) -> Result<(), SessionError>
    where
        T: Component<Mutability = Mutable> + Clone + Serialize + DeserializeOwned,
    {
        self.add_component::<T>(RollbackStrategy::Clone, hashed, DigestSource::Reflect)?;
        self.set_component_serial(TypeId::of::<T>(), serde_component::<T>());
        Ok(())
    }

    /// Registers resource `R` (including its absence) with its serde form as its snapshot
    /// serializer ([snapshots](crate::rules#snapshots)).
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the session has started.
    pub(crate) fn register_serde_resource<R>(
        &mut self,
        hashed: Option<fn(&R, &mut crate::checksum::StateHasher)>,
    ) -> Result<(), SessionError>
    where
        R: Resource<Mutability = Mutable> + Clone + Serialize + DeserializeOwned,
    {
        self.add_resource::<R>(hashed, DigestSource::Reflect)?;
        self.set_resource_serial(TypeId::of::<R>(), serde_resource::<R>());
        Ok(())
    }

    /// Whether snapshots are enabled ([`DeterministicPlugin::snapshots`](crate::DeterministicPlugin::snapshots)).
    pub fn snapshots_enabled(&self) -> bool {
        self.snapshots
    }

    pub(crate) fn set_snapshots_enabled(&mut self, on: bool) {
        self.snapshots = on;
    }

    /// Whether component `type_id` has a snapshot serializer of its own or is reflected as a
    /// component by `types`.
    pub(crate) fn component_serializable(
        &self,
        type_id: TypeId,
        types: &bevy::reflect::TypeRegistry,
    ) -> bool {
        self.component_serials.contains_key(&type_id)
            || super::serial::reflects_component(types, type_id)
    }

    /// Sets the snapshot serializer of a component type (replacing an earlier one).
    pub(crate) fn set_component_serial(&mut self, type_id: TypeId, serial: ComponentSerial) {
        self.component_serials.insert(type_id, serial);
    }

    /// Sets the snapshot serializer of a resource type (replacing an earlier one).
    pub(crate) fn set_resource_serial(&mut self, type_id: TypeId, serial: ResourceSerial) {
        self.resource_serials.insert(type_id, serial);
    }

    /// Registers component `T`, copied by `strategy` and part of checksums.
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the session has started.
    pub fn register_hashed_component<T: Component<Mutability = Mutable> + Clone + SimHash>(
        &mut self,
        strategy: RollbackStrategy,
    ) -> Result<(), SessionError> {
        self.add_component::<T>(strategy, Some(sim_hash_fn::<T>()), DigestSource::Reflect)
    }

    fn add_component<T: Component<Mutability = Mutable> + Clone>(
        &mut self,
        _strategy: RollbackStrategy,
        hash: Option<fn(&T, &mut crate::checksum::StateHasher)>,
        digest: DigestSource<T>,
    ) -> Result<(), SessionError> {
        self.add_component_with::<T>(hash, digest, T::clone_from)
    }

    /// [`RollbackRegistry::add_component`] with the copier writing a held value by `assign`
    /// (`clone_from`, or [`free_then_clone`]).
    fn add_component_with<T: Component<Mutability = Mutable> + Clone>(
        &mut self,
        hash: Option<fn(&T, &mut crate::checksum::StateHasher)>,
        digest: DigestSource<T>,
        assign: fn(&mut T, &T),
    ) -> Result<(), SessionError> {
        if self.locked {
            return Err(SessionError::SessionStarted {
                type_name: std::any::type_name::<T>(),
            });
        }
        if T::relationship_accessor().is_some() {
            return Err(SessionError::RelationshipAsComponent {
                type_name: std::any::type_name::<T>(),
            });
        }
        if !self.component_types.insert(TypeId::of::<T>()) {
            // Registering twice keeps the first registration, but a hash may be added later.
            if let Some(hash) = hash
                && let Some(pos) = self
                    .components
                    .iter()
                    .position(|c| c.type_id() == TypeId::of::<T>())
                && !self.components[pos].hashed()
            {
                self.components[pos] =
                    Box::new(CloneComponent::<T>::new(Some(hash), digest).assigning(assign));
            }
            return Ok(());
        }
        self.components.push(Box::new(
            CloneComponent::<T>::new(hash, digest).assigning(assign),
        ));
        Ok(())
    }

    /// Registers resource `R` (including its absence), optionally hashed.
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the session has started.
    pub fn register_resource<R: Resource<Mutability = Mutable> + Clone>(
        &mut self,
    ) -> Result<(), SessionError> {
        self.add_resource::<R>(None, DigestSource::Reflect)
    }

    /// Registers one of the crate's own component types that has no `Debug`: left out of the
    /// full prediction check (Rapier's context state and contact tuning values).
    pub(crate) fn register_builtin_component_unchecked<
        T: Component<Mutability = Mutable> + Clone,
    >(
        &mut self,
        strategy: RollbackStrategy,
    ) -> Result<(), SessionError> {
        self.add_component::<T>(strategy, None, DigestSource::Skip)
    }

    /// Registers one of Rapier's context sets (not hashed): copied by freeing the destination's
    /// value before cloning the source's, so the two are never alive at once (see
    /// `docs/performance.md`).
    pub(crate) fn register_builtin_set<T: Component<Mutability = Mutable> + Clone + Default>(
        &mut self,
    ) -> Result<(), SessionError> {
        self.add_component_with::<T>(None, DigestSource::Skip, free_then_clone::<T>)
    }

    /// Registers one of the crate's own resource types: compared by its `Debug` text in the
    /// full prediction check.
    pub(crate) fn register_builtin_resource<
        R: Resource<Mutability = Mutable> + Clone + std::fmt::Debug,
    >(
        &mut self,
    ) -> Result<(), SessionError> {
        self.add_resource::<R>(None, DigestSource::<R>::debug())
    }

    /// Registers one of the crate's own resource types that the full prediction check leaves
    /// out because it compares it by other means (the inputs, through the audit's chain).
    pub(crate) fn register_resource_checked_elsewhere<R: Resource<Mutability = Mutable> + Clone>(
        &mut self,
    ) -> Result<(), SessionError> {
        self.add_resource::<R>(None, DigestSource::Skip)
    }

    /// Registers resource `R` (including its absence), part of checksums.
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the session has started.
    pub fn register_hashed_resource<R: Resource<Mutability = Mutable> + Clone + SimHash>(
        &mut self,
    ) -> Result<(), SessionError> {
        self.add_resource::<R>(Some(sim_hash_fn::<R>()), DigestSource::Reflect)
    }

    fn add_resource<R: Resource<Mutability = Mutable> + Clone>(
        &mut self,
        hash: Option<fn(&R, &mut crate::checksum::StateHasher)>,
        digest: DigestSource<R>,
    ) -> Result<(), SessionError> {
        if self.locked {
            return Err(SessionError::SessionStarted {
                type_name: std::any::type_name::<R>(),
            });
        }
        if R::relationship_accessor().is_some() {
            return Err(SessionError::RelationshipAsComponent {
                type_name: std::any::type_name::<R>(),
            });
        }
        if self.resource_types.insert(TypeId::of::<R>()) {
            self.resources
                .push(Box::new(CloneResource::<R>::new(hash, digest)));
        }
        Ok(())
    }

    /// Registers relationship `R` between simulation entities: both its component (such as
    /// `ChildOf`) and its target (such as `Children`, order included) roll back exactly and are
    /// part of checksums ([hierarchy and relationships](crate::rules#hierarchy-and-relationships)).
    /// `ChildOf`/`Children` are registered already; registering them again does nothing.
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the session has started;
    /// [`SessionError::UnsupportedRelationship`] for a `linked_spawn` target other than
    /// `Children`, or a target collection without a reproducible order.
    pub fn register_relationship<R: Relationship + Clone + PartialEq>(
        &mut self,
    ) -> Result<(), SessionError> {
        let hierarchy = TypeId::of::<R>() == TypeId::of::<ChildOf>();
        self.add_relationship::<R>(hierarchy)
    }

    fn add_relationship<R: Relationship + Clone + PartialEq>(
        &mut self,
        linked_spawn_handled: bool,
    ) -> Result<(), SessionError> {
        let type_name = std::any::type_name::<R>();
        if self.locked {
            return Err(SessionError::SessionStarted { type_name });
        }
        check_relationship::<R>(linked_spawn_handled)
            .map_err(|reason| SessionError::UnsupportedRelationship { type_name, reason })?;
        if self.relationship_types.insert(TypeId::of::<R>()) {
            self.relationship_types
                .insert(TypeId::of::<R::RelationshipTarget>());
            self.relationships
                .push(Box::new(RelationshipRollback::<R>::default()));
        }
        Ok(())
    }

    /// Whether relationship `R` is registered.
    pub fn has_relationship<R: Relationship>(&self) -> bool {
        self.relationship_types.contains(&TypeId::of::<R>())
    }

    /// Declares that component `T` may sit on simulation entities without being rolled back
    /// (no warning is reported for it).
    pub fn ignore_component<T: Component>(&mut self) {
        self.ignored.insert(TypeId::of::<T>());
    }

    /// Declares that resource `R` may be read by simulation systems without being rolled back
    /// (constant configuration, buffers emptied within a tick): the determinism guard does not
    /// flag it ([determinism guard](crate::rules#the-determinism-guard)).
    pub fn ignore_resource<R: Resource>(&mut self) {
        self.ignored_resources.insert(TypeId::of::<R>());
    }

    /// Whether the resource type is registered for rollback or declared ignored.
    pub(crate) fn knows_resource(&self, type_id: TypeId) -> bool {
        self.resource_types.contains(&type_id) || self.ignored_resources.contains(&type_id)
    }

    /// Registers a resource type with a copier of its own (types that are not `Clone`, such as
    /// Bevy's `State<S>`). A second registration of the same type is ignored.
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the session has started.
    pub(crate) fn add_resource_copier(
        &mut self,
        type_id: TypeId,
        type_name: &'static str,
        copier: Box<dyn ResourceCopier>,
    ) -> Result<(), SessionError> {
        if self.locked {
            return Err(SessionError::SessionStarted { type_name });
        }
        if self.resource_types.insert(type_id) {
            self.resources.push(copier);
        }
        Ok(())
    }

    /// Whether component `T` is registered.
    pub fn has_component<T: Component>(&self) -> bool {
        self.component_types.contains(&TypeId::of::<T>())
    }

    /// Whether resource `R` is registered.
    pub fn has_resource<R: Resource>(&self) -> bool {
        self.resource_types.contains(&TypeId::of::<R>())
    }

    /// Number of registered component types.
    pub fn component_count(&self) -> usize {
        self.components.len()
    }

    /// Refuses further registrations (called when the session starts).
    pub(crate) fn lock(&mut self) {
        self.locked = true;
    }

    /// Whether the session has started and registrations are refused.
    pub fn is_locked(&self) -> bool {
        self.locked
    }

    /// Whether a component type is accounted for: registered (as a component or one side of a
    /// relationship) or declared ignored.
    pub(crate) fn is_known(&self, type_id: TypeId) -> bool {
        self.component_types.contains(&type_id)
            || self.relationship_types.contains(&type_id)
            || self.ignored.contains(&type_id)
    }

    /// Whether `type_name` is reported for the first time (each unregistered type is reported
    /// once per registry).
    pub(crate) fn first_report(&mut self, type_name: &str) -> bool {
        !self.reported.contains(type_name) && self.reported.insert(type_name.to_string())
    }

    /// Registration errors of the `RollbackAppExt` methods (which return no `Result`), in
    /// order; the session writes each as a
    /// [`RollbackSetupFailed`](crate::RollbackSetupFailed) message when it starts.
    pub fn setup_errors(&self) -> &[SessionError] {
        &self.setup_errors
    }

    /// Records a registration error of a method that cannot return it.
    pub(crate) fn record_setup_error(&mut self, error: SessionError) {
        self.setup_errors.push(error);
    }
}

/// A component's type name: Bevy's own when its `debug` feature is on, else the reflected type
/// path when the type is registered for reflection, else its `TypeId`.
pub(crate) fn type_name_of(world: &World, info: &bevy::ecs::component::ComponentInfo) -> String {
    let name = info.name().to_string();
    if !name.starts_with('<') {
        return name;
    }
    let Some(type_id) = info.type_id() else {
        return name;
    };
    world
        .get_resource::<AppTypeRegistry>()
        .and_then(|registry| {
            registry
                .read()
                .get(type_id)
                .map(|r| r.type_info().type_path().to_string())
        })
        .unwrap_or_else(|| format!("{type_id:?}"))
}

/// Registering simulation state from a plugin (your game plugin runs in both simulation worlds,
/// so this registers in both).
///
/// The methods chain, so they return no `Result`: an error is logged, kept in
/// [`RollbackRegistry::setup_errors`] and written as a
/// [`RollbackSetupFailed`](crate::RollbackSetupFailed) message when the session starts.
/// [`TryRollbackAppExt`](crate::TryRollbackAppExt) returns it instead. `ChildOf`/`Children`
/// need no registration.
pub trait RollbackAppExt {
    /// Rolls back component `T` by cloning (not part of checksums).
    fn rollback_component<T: Component<Mutability = Mutable> + Clone>(&mut self) -> &mut Self;
    /// Rolls back component `T` by cloning and includes it in checksums.
    fn rollback_hashed_component<T: Component<Mutability = Mutable> + Clone + SimHash>(
        &mut self,
    ) -> &mut Self;
    /// Rolls back resource `R` (including its absence; not part of checksums).
    fn rollback_resource<R: Resource<Mutability = Mutable> + Clone>(&mut self) -> &mut Self;
    /// Rolls back resource `R` (including its absence) and includes it in checksums.
    fn rollback_hashed_resource<R: Resource<Mutability = Mutable> + Clone + SimHash>(
        &mut self,
    ) -> &mut Self;
    /// Rolls back component `T` by cloning (not part of checksums) and saves it in snapshots
    /// with its serde form ([snapshots](crate::rules#snapshots)).
    fn rollback_component_serde<T>(&mut self) -> &mut Self
    where
        T: Component<Mutability = Mutable> + Clone + Serialize + DeserializeOwned;
    /// Rolls back component `T` by cloning, includes it in checksums, and saves it in
    /// snapshots with its serde form.
    fn rollback_hashed_component_serde<T>(&mut self) -> &mut Self
    where
        T: Component<Mutability = Mutable> + Clone + SimHash + Serialize + DeserializeOwned;
    /// Rolls back resource `R` (including its absence; not part of checksums) and saves it in
    /// snapshots with its serde form.
    fn rollback_resource_serde<R>(&mut self) -> &mut Self
    where
        R: Resource<Mutability = Mutable> + Clone + Serialize + DeserializeOwned;
    /// Rolls back resource `R` (including its absence), includes it in checksums, and saves
    /// it in snapshots with its serde form.
    fn rollback_hashed_resource_serde<R>(&mut self) -> &mut Self
    where
        R: Resource<Mutability = Mutable> + Clone + SimHash + Serialize + DeserializeOwned;
    /// Allows component `T` on simulation entities without rolling it back (no warning).
    fn ignore_rollback_component<T: Component>(&mut self) -> &mut Self;
    /// Allows simulation systems to read resource `R` without rolling it back (constant
    /// configuration): the determinism guard does not flag it.
    fn ignore_rollback_resource<R: Resource>(&mut self) -> &mut Self;
}

pub(crate) fn with_registry(
    app: &mut App,
    f: impl FnOnce(&mut RollbackRegistry) -> Result<(), SessionError>,
) {
    let mut registry = app
        .world_mut()
        .get_resource_or_insert_with(RollbackRegistry::default);
    if let Err(error) = f(&mut registry) {
        error!("{error}");
        registry.record_setup_error(error);
    }
}

impl RollbackAppExt for App {
    fn rollback_component<T: Component<Mutability = Mutable> + Clone>(&mut self) -> &mut Self {
        with_registry(self, |r| r.register_component::<T>(RollbackStrategy::Clone));
        self
    }

    fn rollback_hashed_component<T: Component<Mutability = Mutable> + Clone + SimHash>(
        &mut self,
    ) -> &mut Self {
        with_registry(self, |r| {
            r.register_hashed_component::<T>(RollbackStrategy::Clone)
        });
        self
    }

    fn rollback_resource<R: Resource<Mutability = Mutable> + Clone>(&mut self) -> &mut Self {
        with_registry(self, |r| r.register_resource::<R>());
        self
    }

    fn rollback_hashed_resource<R: Resource<Mutability = Mutable> + Clone + SimHash>(
        &mut self,
    ) -> &mut Self {
        with_registry(self, |r| r.register_hashed_resource::<R>());
        self
    }

    fn rollback_component_serde<T>(&mut self) -> &mut Self
    where
        T: Component<Mutability = Mutable> + Clone + Serialize + DeserializeOwned,
    {
        with_registry(self, |r| r.register_serde_component::<T>(None));
        self
    }

    fn rollback_hashed_component_serde<T>(&mut self) -> &mut Self
    where
        T: Component<Mutability = Mutable> + Clone + SimHash + Serialize + DeserializeOwned,
    {
        with_registry(self, |r| {
            r.register_serde_component::<T>(Some(sim_hash_fn::<T>()))
        });
        self
    }

    fn rollback_resource_serde<R>(&mut self) -> &mut Self
    where
        R: Resource<Mutability = Mutable> + Clone + Serialize + DeserializeOwned,
    {
        with_registry(self, |r| r.register_serde_resource::<R>(None));
        self
    }

    fn rollback_hashed_resource_serde<R>(&mut self) -> &mut Self
    where
        R: Resource<Mutability = Mutable> + Clone + SimHash + Serialize + DeserializeOwned,
    {
        with_registry(self, |r| {
            r.register_serde_resource::<R>(Some(sim_hash_fn::<R>()))
        });
        self
    }

    fn ignore_rollback_component<T: Component>(&mut self) -> &mut Self {
        with_registry(self, |r| {
            r.ignore_component::<T>();
            Ok(())
        });
        self
    }

    fn ignore_rollback_resource<R: Resource>(&mut self) -> &mut Self {
        with_registry(self, |r| {
            r.ignore_resource::<R>();
            Ok(())
        });
        self
    }
}
