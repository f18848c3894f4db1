//! The prediction check (`verify_predictions`) and the coverage scans of the session update
//! ([no silent divergence](crate::rules#no-silent-divergence)): state a rollback would not
//! restore is reported as a message and in [`SessionStats`], and makes the check fail.

use bevy::prelude::*;

use super::audit::{AuditedState, PredictionAudit};
use super::difference;
use super::divergence::{MismatchCause, RollbackSetupFailed, UncheckedState, UnsimulatedEntity};
use super::hooks::HookFlow;
use super::state::{DeterministicSession, VerifiedTick, VerifiedTickHook};
use super::stats::{PredictionMismatch, SessionStats, UnregisteredComponent};
use crate::config::PredictionCheck;
use crate::input::SimInput;
use crate::snapshot::{self, RollbackRegistry, SimulationWorld, WorldRole};
use crate::tick::Tick;
use crate::worlds::SimulationWorlds;

/// Scans one simulation world for state a rollback would not restore, writes a message for
/// every finding seen for the first time (and records it in `stats`). Returns whether the
/// world holds no such state now.
pub(super) fn scan_world(
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

/// The state the prediction check records for `sw` now: its coverage, and its checksum or full
/// digest. Registered types the full digest cannot compare are reported once.
fn audited_state(
    main: &mut World,
    sw: &mut SimulationWorld,
    registry: &mut RollbackRegistry,
    role: WorldRole,
    (check, audit): (PredictionCheck, &mut PredictionAudit),
    stats: &mut SessionStats,
) -> AuditedState {
    let covered = scan_world(main, sw, registry, role, stats);
    let digest = match check {
        PredictionCheck::Checksum => snapshot::checksum(sw, registry),
        PredictionCheck::AllRegisteredState => {
            let mut unchecked = Vec::new();
            let digest = snapshot::state_digest(sw, registry, &mut unchecked);
            for type_name in unchecked {
                if audit.unchecked_reported.insert(type_name) {
                    warn!("the full prediction check cannot compare `{type_name}`");
                    stats.unchecked_types.push(type_name.to_string());
                    main.write_message(UncheckedState {
                        type_name: type_name.to_string(),
                    });
                }
            }
            digest
        }
    };
    AuditedState {
        digest,
        covered,
        breakdown: None,
    }
}

/// The predicted world's state after the tick just predicted, for a later check.
pub(super) fn predicted_state<I: SimInput>(
    main: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    stats: &mut SessionStats,
) -> AuditedState {
    let check = session.config.prediction_check;
    let mut state = audited_state(
        main,
        &mut worlds.predicted,
        &mut worlds.registry,
        WorldRole::Predicted,
        (check, &mut session.audit),
        stats,
    );
    state.breakdown = Some(Box::new(difference::breakdown(
        &mut worlds.predicted,
        &worlds.registry,
        check,
    )));
    state
}

/// The prediction check (`verify_predictions`) as a verified-tick hook: see
/// [`audit_verified_tick`].
pub(crate) struct PredictionCheckHook;

impl<I: SimInput> VerifiedTickHook<I> for PredictionCheckHook {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow {
        audit_verified_tick(
            verified.main,
            verified.worlds,
            verified.session,
            verified.stats,
            verified.tick,
        );
        HookFlow::Continue
    }
}

/// Compares the prediction of `tick` (if its inputs turned out right) with the verified state:
/// it matches only when both states are equal and neither world held state a rollback would not
/// restore.
fn audit_verified_tick<I: SimInput>(
    main: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    stats: &mut SessionStats,
    tick: Tick,
) {
    let Some(predicted) = session.audit.take_comparable(tick) else {
        return;
    };
    stats.resim_ticks_checked += 1;
    let check = session.config.prediction_check;
    let verified = audited_state(
        main,
        &mut worlds.verified,
        &mut worlds.registry,
        WorldRole::Verified,
        (check, &mut session.audit),
        stats,
    );
    let cause = if !(predicted.covered && verified.covered) {
        MismatchCause::UncoveredState
    } else if predicted.digest != verified.digest {
        MismatchCause::StateDiffers
    } else {
        stats.resim_ticks_matching += 1;
        return;
    };
    let first_difference = (predicted.digest != verified.digest)
        .then_some(predicted.breakdown.as_deref())
        .flatten()
        .and_then(|p| {
            let v = difference::breakdown(&mut worlds.verified, &worlds.registry, check);
            difference::first_difference(p, &v, &worlds.registry)
        });
    match cause {
        MismatchCause::StateDiffers => error!(
            "desync: predicted tick {tick} ({:016x}) differs from verified ({:016x}) with the same inputs{}",
            predicted.digest,
            verified.digest,
            first_difference.map_or(String::new(), |d| format!(": {d}"))
        ),
        MismatchCause::UncoveredState => {
            stats.resim_ticks_uncovered += 1;
            if !std::mem::replace(&mut session.audit.uncovered_logged, true) {
                error!(
                    "prediction check failed at tick {tick}: a simulation world holds state a \
                     rollback does not restore (see UnsimulatedEntity / UnregisteredComponent)"
                );
            }
        }
    }
    main.write_message(PredictionMismatch {
        tick,
        predicted: predicted.digest,
        verified: verified.digest,
        cause,
        first_difference,
    });
    super::dumps::on_prediction_mismatch(main, worlds, session, tick);
}

/// Writes the registration errors recorded while the worlds were built, once, when the session
/// starts.
pub(super) fn report_setup_errors(main: &mut World, registry: &RollbackRegistry) {
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
pub(super) fn report_unserializable(
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
