//! The coverage scans of the session update ([no silent
//! divergence](crate::rules#no-silent-divergence)): state a rollback would not restore is
//! reported as a message and in [`SessionStats`], once per finding.

use bevy::prelude::*;

use super::{RollbackSetupFailed, UnregisteredComponent, UnsimulatedEntity};
use crate::snapshot::{self, RollbackRegistry, SimulationWorld, WorldRole};
use crate::stats::SessionStats;

/// Scans one simulation world for state a rollback would not restore, writes a message for
/// every finding seen for the first time (and records it in `stats`). Returns whether the
/// world holds no such state now.
pub(crate) fn scan_world(
    main: &mut World,
    sw: &mut SimulationWorld,
    registry: &mut RollbackRegistry,
    role: WorldRole,
    stats: &mut SessionStats,
) -> bool {
    let found = snapshot::coverage::scan(&sw.world, registry, &mut sw.coverage);
    for type_name in found.new_unregistered.iter().cloned() {
        warn!(
            "component `{type_name}` on a simulation entity is not registered for rollback: \
             its value will not be restored (register it with rollback_component or \
             ignore_rollback_component)"
        );
        stats.unregistered_components.push(type_name.clone());
        main.write_message(UnregisteredComponent { type_name });
    }
    let tick = sw.tick();
    for finding in found.new_unsimulated.iter().cloned() {
        warn!(
            "{} entities without SimEntity in the {role:?} world at tick {tick} (e.g. {}: {}): \
             spawn simulation entities with SimCommands, or mark them NotSimulated",
            finding.entities,
            finding.entity,
            finding.components.join(", ")
        );
        stats.unsimulated_entity_reports += 1;
        main.write_message(UnsimulatedEntity {
            world: role,
            tick,
            entity: finding.entity,
            entities: finding.entities,
            components: finding.components,
        });
    }
    found.covered()
}

/// Writes the registration errors recorded while the worlds were built, once, when the session
/// starts.
pub(crate) fn report_setup_errors(main: &mut World, registry: &RollbackRegistry) {
    let errors = registry.setup_errors().to_vec();
    if let Some(mut stats) = main.get_resource_mut::<SessionStats>() {
        stats.rollback_setup_errors += errors.len() as u64;
    }
    for error in errors {
        main.write_message(RollbackSetupFailed { error });
    }
}

/// With snapshots enabled, writes a [`RollbackSetupFailed`] ([`SessionError::NotSerializable`])
/// for every registered type that has no snapshot serializer
/// ([snapshots](crate::rules#snapshots)).
pub(crate) fn report_unserializable(
    main: &mut World,
    verified: &World,
    registry: &RollbackRegistry,
) {
    let types = crate::snapshot::capture::unserializable_types(verified, registry);
    if let Some(mut stats) = main.get_resource_mut::<SessionStats>() {
        stats.rollback_setup_errors += types.len() as u64;
    }
    for type_name in types {
        main.write_message(RollbackSetupFailed {
            error: crate::error::SessionError::NotSerializable { type_name },
        });
    }
}
