//! The registry of simulation state: which component and resource types a rollback copies and a
//! checksum hashes.

use std::any::TypeId;
use std::collections::HashSet;

use bevy::ecs::archetype::ArchetypeId;
use bevy::ecs::component::Mutable;
use bevy::prelude::*;

use super::entities::SimEntity;
use super::strategy::{
    CloneComponent, CloneResource, ComponentCopier, ResourceCopier, RollbackStrategy, sim_hash_fn,
};
use crate::checksum::SimHash;
use crate::error::SessionError;

/// The registered simulation state of one simulation world.
///
/// Both worlds build the same registry (the game plugin runs in both); the session keeps the
/// verified world's copy. Register through [`RollbackAppExt`] in your game plugin.
#[derive(Resource, Default)]
pub struct RollbackRegistry {
    pub(crate) components: Vec<Box<dyn ComponentCopier>>,
    pub(crate) resources: Vec<Box<dyn ResourceCopier>>,
    component_types: HashSet<TypeId>,
    resource_types: HashSet<TypeId>,
    ignored: HashSet<TypeId>,
    ignored_resources: HashSet<TypeId>,
    seen_archetypes: HashSet<ArchetypeId>,
    reported: HashSet<String>,
    locked: bool,
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
        self.add_component::<T>(strategy, None)
    }

    /// Registers component `T`, copied by `strategy` and part of checksums.
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the session has started.
    pub fn register_hashed_component<T: Component<Mutability = Mutable> + Clone + SimHash>(
        &mut self,
        strategy: RollbackStrategy,
    ) -> Result<(), SessionError> {
        self.add_component::<T>(strategy, Some(sim_hash_fn::<T>()))
    }

    fn add_component<T: Component<Mutability = Mutable> + Clone>(
        &mut self,
        _strategy: RollbackStrategy,
        hash: Option<fn(&T, &mut crate::checksum::StateHasher)>,
    ) -> Result<(), SessionError> {
        if self.locked {
            return Err(SessionError::SessionStarted {
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
                self.components[pos] = Box::new(CloneComponent::<T>::new(Some(hash)));
            }
            return Ok(());
        }
        self.components
            .push(Box::new(CloneComponent::<T>::new(hash)));
        Ok(())
    }

    /// Registers resource `R` (including its absence), optionally hashed.
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the session has started.
    pub fn register_resource<R: Resource<Mutability = Mutable> + Clone>(
        &mut self,
    ) -> Result<(), SessionError> {
        self.add_resource::<R>(None)
    }

    /// Registers resource `R` (including its absence), part of checksums.
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the session has started.
    pub fn register_hashed_resource<R: Resource<Mutability = Mutable> + Clone + SimHash>(
        &mut self,
    ) -> Result<(), SessionError> {
        self.add_resource::<R>(Some(sim_hash_fn::<R>()))
    }

    fn add_resource<R: Resource<Mutability = Mutable> + Clone>(
        &mut self,
        hash: Option<fn(&R, &mut crate::checksum::StateHasher)>,
    ) -> Result<(), SessionError> {
        if self.locked {
            return Err(SessionError::SessionStarted {
                type_name: std::any::type_name::<R>(),
            });
        }
        if self.resource_types.insert(TypeId::of::<R>()) {
            self.resources.push(Box::new(CloneResource::<R>::new(hash)));
        }
        Ok(())
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

    /// Names of component types present on simulation entities of `world` that a rollback would
    /// not restore, each reported once per registry.
    pub(crate) fn unregistered_components(&mut self, world: &World) -> Vec<String> {
        let Some(sim_id) = world.components().component_id::<SimEntity>() else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for archetype in world.archetypes().iter() {
            if !archetype.contains(sim_id) || !self.seen_archetypes.insert(archetype.id()) {
                continue;
            }
            for id in archetype.iter_components() {
                let Some(info) = world.components().get_info(id) else {
                    continue;
                };
                let known = info.type_id().is_some_and(|t| {
                    self.component_types.contains(&t) || self.ignored.contains(&t)
                });
                let name = type_name_of(world, info);
                if !known && self.reported.insert(name.clone()) {
                    found.push(name);
                }
            }
        }
        found
    }
}

/// A component's type name: Bevy's own when its `debug` feature is on, else the reflected type
/// path when the type is registered for reflection, else its `TypeId`.
fn type_name_of(world: &World, info: &bevy::ecs::component::ComponentInfo) -> String {
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
