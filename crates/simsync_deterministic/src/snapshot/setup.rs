//! Registration that returns its errors: [`TryRollbackAppExt`].
//!
//! [`RollbackAppExt`](super::RollbackAppExt)'s methods chain and return no `Result`; their
//! errors are logged and written as [`RollbackSetupFailed`](crate::RollbackSetupFailed) messages
//! when the session starts. The `try_` methods here return the error at once, and take any
//! component type: an immutable one is refused with [`SessionError::ImmutableComponent`] instead
//! of failing to compile.

use bevy::ecs::component::{ComponentMutability, Immutable, Mutable};
use bevy::ecs::relationship::Relationship;
use bevy::prelude::*;

use super::registry::RollbackRegistry;
use super::strategy::RollbackStrategy;
use crate::checksum::SimHash;
use crate::error::SessionError;

/// Dispatches a registration on a type's mutability: mutable types register, immutable ones are
/// refused. Implemented for Bevy's two mutabilities, [`Mutable`] and [`Immutable`].
pub trait RollbackMutability: ComponentMutability {
    /// Registers component `T` (hashed or not) when it is mutable.
    ///
    /// # Errors
    /// [`SessionError::ImmutableComponent`] (or
    /// [`SessionError::RelationshipAsComponent`]) for an immutable `T`; the registry's own
    /// errors.
    fn register_component<T: Component<Mutability = Self> + Clone>(
        registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError>;

    /// [`register_component`](Self::register_component), part of checksums.
    ///
    /// # Errors
    /// As [`register_component`](Self::register_component).
    fn register_hashed_component<T: Component<Mutability = Self> + Clone + SimHash>(
        registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError>;

    /// Registers resource `R` (hashed or not) when it is mutable.
    ///
    /// # Errors
    /// As [`register_component`](Self::register_component).
    fn register_resource<R: Resource<Mutability = Self> + Clone>(
        registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError>;

    /// [`register_resource`](Self::register_resource), part of checksums.
    ///
    /// # Errors
    /// As [`register_component`](Self::register_component).
    fn register_hashed_resource<R: Resource<Mutability = Self> + Clone + SimHash>(
        registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError>;
}

impl RollbackMutability for Mutable {
    fn register_component<T: Component<Mutability = Self> + Clone>(
        registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError> {
        registry.register_component::<T>(RollbackStrategy::Clone)
    }

    fn register_hashed_component<T: Component<Mutability = Self> + Clone + SimHash>(
        registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError> {
        registry.register_hashed_component::<T>(RollbackStrategy::Clone)
    }

    fn register_resource<R: Resource<Mutability = Self> + Clone>(
        registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError> {
        registry.register_resource::<R>()
    }

    fn register_hashed_resource<R: Resource<Mutability = Self> + Clone + SimHash>(
        registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError> {
        registry.register_hashed_resource::<R>()
    }
}

impl RollbackMutability for Immutable {
    fn register_component<T: Component<Mutability = Self> + Clone>(
        _registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError> {
        Err(refusal::<T>())
    }

    fn register_hashed_component<T: Component<Mutability = Self> + Clone + SimHash>(
        _registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError> {
        Err(refusal::<T>())
    }

    fn register_resource<R: Resource<Mutability = Self> + Clone>(
        _registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError> {
        Err(refusal::<R>())
    }

    fn register_hashed_resource<R: Resource<Mutability = Self> + Clone + SimHash>(
        _registry: &mut RollbackRegistry,
    ) -> Result<(), SessionError> {
        Err(refusal::<R>())
    }
}

/// The error for an immutable `T`: a relationship is named as such (it has its own
/// registration), any other type as immutable.
fn refusal<T: Component>() -> SessionError {
    let type_name = std::any::type_name::<T>();
    if T::relationship_accessor().is_some() {
        SessionError::RelationshipAsComponent { type_name }
    } else {
        SessionError::ImmutableComponent { type_name }
    }
}

/// Registering simulation state from a plugin with the errors returned
/// ([hierarchy and relationships](crate::rules#hierarchy-and-relationships)).
///
/// ```
/// # use bevy::prelude::*;
/// # use simsync_deterministic::{SessionError, TryRollbackAppExt};
/// #[derive(Component, Clone)]
/// #[component(immutable)]
/// struct Frozen(u32);
///
/// let mut app = App::new();
/// assert!(matches!(
///     app.try_rollback_component::<Frozen>(),
///     Err(SessionError::ImmutableComponent { .. })
/// ));
/// ```
pub trait TryRollbackAppExt {
    /// Rolls back component `T` by cloning (not part of checksums).
    ///
    /// # Errors
    /// [`SessionError::ImmutableComponent`] for an immutable component;
    /// [`SessionError::RelationshipAsComponent`] for either side of a relationship;
    /// [`SessionError::SessionStarted`] once the session has started.
    fn try_rollback_component<T: Component + Clone>(&mut self) -> Result<&mut Self, SessionError>
    where
        T::Mutability: RollbackMutability;

    /// Rolls back component `T` by cloning and includes it in checksums.
    ///
    /// # Errors
    /// As [`try_rollback_component`](Self::try_rollback_component).
    fn try_rollback_hashed_component<T: Component + Clone + SimHash>(
        &mut self,
    ) -> Result<&mut Self, SessionError>
    where
        T::Mutability: RollbackMutability;

    /// Rolls back resource `R` (including its absence; not part of checksums).
    ///
    /// # Errors
    /// As [`try_rollback_component`](Self::try_rollback_component).
    fn try_rollback_resource<R: Resource + Clone>(&mut self) -> Result<&mut Self, SessionError>
    where
        R::Mutability: RollbackMutability;

    /// Rolls back resource `R` (including its absence) and includes it in checksums.
    ///
    /// # Errors
    /// As [`try_rollback_component`](Self::try_rollback_component).
    fn try_rollback_hashed_resource<R: Resource + Clone + SimHash>(
        &mut self,
    ) -> Result<&mut Self, SessionError>
    where
        R::Mutability: RollbackMutability;

    /// Rolls back relationship `R` between simulation entities, its target's order included,
    /// and includes it in checksums. `ChildOf`/`Children` are rolled back without registering.
    ///
    /// # Errors
    /// [`SessionError::UnsupportedRelationship`] for a `linked_spawn` target other than
    /// `Children` or a target collection without a reproducible order (a hash set);
    /// [`SessionError::SessionStarted`] once the session has started.
    fn try_rollback_relationship<R: Relationship + Clone + PartialEq>(
        &mut self,
    ) -> Result<&mut Self, SessionError>;
}

fn registry(app: &mut App) -> Mut<'_, RollbackRegistry> {
    app.world_mut()
        .get_resource_or_insert_with(RollbackRegistry::default)
}

/// With snapshots enabled, refuses a just registered component `T` that has no snapshot
/// serializer and is not reflected as a component by the world's type registry.
fn check_serializable<T: 'static>(app: &mut App) -> Result<(), SessionError> {
    let world = app.world();
    let Some(registry) = world.get_resource::<RollbackRegistry>() else {
        return Ok(());
    };
    if !registry.snapshots_enabled() {
        return Ok(());
    }
    let types = world
        .get_resource::<AppTypeRegistry>()
        .cloned()
        .unwrap_or_default();
    if registry.component_serializable(std::any::TypeId::of::<T>(), &types.read()) {
        Ok(())
    } else {
        Err(SessionError::NotSerializable {
            type_name: std::any::type_name::<T>(),
        })
    }
}

/// With snapshots enabled, refuses a just registered resource `R` without a serializer.
fn check_serializable_resource<R: 'static>(app: &mut App) -> Result<(), SessionError> {
    let Some(registry) = app.world().get_resource::<RollbackRegistry>() else {
        return Ok(());
    };
    if registry.snapshots_enabled()
        && !registry
            .resource_serials
            .contains_key(&std::any::TypeId::of::<R>())
    {
        return Err(SessionError::NotSerializable {
            type_name: std::any::type_name::<R>(),
        });
    }
    Ok(())
}

impl TryRollbackAppExt for App {
    fn try_rollback_component<T: Component + Clone>(&mut self) -> Result<&mut Self, SessionError>
    where
        T::Mutability: RollbackMutability,
    {
        <T::Mutability as RollbackMutability>::register_component::<T>(&mut registry(self))?;
        check_serializable::<T>(self)?;
        Ok(self)
    }

    fn try_rollback_hashed_component<T: Component + Clone + SimHash>(
        &mut self,
    ) -> Result<&mut Self, SessionError>
    where
        T::Mutability: RollbackMutability,
    {
        <T::Mutability as RollbackMutability>::register_hashed_component::<T>(&mut registry(self))?;
        check_serializable::<T>(self)?;
        Ok(self)
    }

    fn try_rollback_resource<R: Resource + Clone>(&mut self) -> Result<&mut Self, SessionError>
    where
        R::Mutability: RollbackMutability,
    {
        <R::Mutability as RollbackMutability>::register_resource::<R>(&mut registry(self))?;
        check_serializable_resource::<R>(self)?;
        Ok(self)
    }

    fn try_rollback_hashed_resource<R: Resource + Clone + SimHash>(
        &mut self,
    ) -> Result<&mut Self, SessionError>
    where
        R::Mutability: RollbackMutability,
    {
        <R::Mutability as RollbackMutability>::register_hashed_resource::<R>(&mut registry(self))?;
        check_serializable_resource::<R>(self)?;
        Ok(self)
    }

    fn try_rollback_relationship<R: Relationship + Clone + PartialEq>(
        &mut self,
    ) -> Result<&mut Self, SessionError> {
        registry(self).register_relationship::<R>()?;
        Ok(self)
    }
}
