//! The prediction check (`verify_predictions`, [no silent
//! divergence](crate::rules#no-silent-divergence)), a session hook: every predicted tick's state
//! is recorded ([`audit`]), and when the tick is verified with the inputs it was predicted with,
//! the two states are compared; a difference, or state a rollback would not restore in either
//! world, is a [`PredictionMismatch`].
//!
//! - [`audit`]: which predictions are comparable (chain hashes of the input sets) and what is
//!   kept of them.
//! - This module: the hook ([`PredictionCheckHook`]), which owns the audit.

pub(crate) mod audit;

use bevy::prelude::*;

use crate::config::PredictionCheck;
use crate::divergence::difference;
use crate::divergence::{MismatchCause, PredictionMismatch, UncheckedState};
use crate::hooks::{Cleanup, HookFlow, PredictedTick, SessionView, VerifiedTick, VerifiedTickHook};
use crate::input::{SimInput, input_set_hash};
use crate::snapshot;
use crate::tick::Tick;
use audit::{AuditedState, PredictionAudit};

/// The state the prediction check records for the world `view` shows now: its coverage, and
/// its checksum or full digest. Registered types the full digest cannot compare are reported
/// once.
fn audited_state<I: SimInput>(
    view: &mut SessionView<'_, I>,
    audit: &mut PredictionAudit,
) -> AuditedState {
    let covered = view.scan_coverage();
    let check = view.config().prediction_check;
    let mut unchecked = Vec::new();
    let (sw, registry) = view.simulation();
    let digest = match check {
        PredictionCheck::Checksum => snapshot::checksum(sw, registry),
        PredictionCheck::AllRegisteredState => snapshot::state_digest(sw, registry, &mut unchecked),
    };
    for type_name in unchecked {
        if audit.unchecked_reported.insert(type_name) {
            warn!("the full prediction check cannot compare `{type_name}`");
            view.stats_mut().unchecked_types.push(type_name.to_string());
            view.app_world().write_message(UncheckedState {
                type_name: type_name.to_string(),
            });
        }
    }
    AuditedState {
        digest,
        covered,
        breakdown: None,
    }
}

/// The per-component breakdown of the world `view` shows, as the configured check sees it.
fn state_breakdown<I: SimInput>(view: &mut SessionView<'_, I>) -> difference::StateBreakdown {
    let check = view.config().prediction_check;
    let (sw, registry) = view.simulation();
    difference::breakdown(sw, registry, check)
}

/// The prediction check (`verify_predictions`) as a session hook: it records every predicted
/// tick's state and compares it when the tick is verified ([`audit_verified_tick`]). It owns
/// the audit: rollbacks restart its input chain, snapshot loads and restarts reset it, the
/// update's cleanup drops what no comparison can need.
#[derive(Default)]
pub(crate) struct PredictionCheckHook {
    pub(crate) audit: PredictionAudit,
}

impl<I: SimInput> VerifiedTickHook<I> for PredictionCheckHook {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow {
        let inputs_hash = input_set_hash(verified.inputs(), verified.disconnected());
        self.audit.record_confirmed(verified.tick(), inputs_hash);
        audit_verified_tick(verified, &mut self.audit);
        HookFlow::Continue
    }

    fn on_predicted(&mut self, predicted: &mut PredictedTick<'_, I>) {
        let inputs_hash = input_set_hash(predicted.inputs(), predicted.disconnected());
        let mut state = audited_state(predicted, &mut self.audit);
        state.breakdown = Some(Box::new(state_breakdown(predicted)));
        self.audit
            .record_predicted(predicted.tick(), inputs_hash, Some(state));
    }

    fn on_rollback(&mut self, tick: Tick) {
        self.audit.restart(tick);
    }

    fn on_snapshot_loaded(&mut self, tick: Tick) {
        // The verified world was replaced: predictions recorded before are not comparable.
        self.audit.reset(tick);
    }

    fn on_cleanup(&mut self, cleanup: Cleanup) {
        self.audit.discard_before(cleanup.keep_from);
    }

    fn on_restart(&mut self) {
        self.audit = PredictionAudit::default();
    }
}

/// Compares the prediction of the verified tick (if its inputs turned out right) with the
/// verified state: it matches only when both states are equal and neither world held state a
/// rollback would not restore. A mismatch is logged, written as [`PredictionMismatch`] and
/// handed to the later hooks ([`VerifiedTick::report_prediction_mismatch`]).
fn audit_verified_tick<I: SimInput>(
    verified: &mut VerifiedTick<'_, I>,
    audit: &mut PredictionAudit,
) {
    let tick = verified.tick();
    let Some(predicted) = audit.take_comparable(tick) else {
        return;
    };
    verified.stats_mut().resim_ticks_checked += 1;
    let state = audited_state(verified, audit);
    let cause = if !(predicted.covered && state.covered) {
        MismatchCause::UncoveredState
    } else if predicted.digest != state.digest {
        MismatchCause::StateDiffers
    } else {
        verified.stats_mut().resim_ticks_matching += 1;
        return;
    };
    let first_difference = (predicted.digest != state.digest)
        .then_some(predicted.breakdown.as_deref())
        .flatten()
        .and_then(|p| {
            let v = state_breakdown(verified);
            let (_, registry) = verified.simulation();
            difference::first_difference(p, &v, registry)
        });
    let mismatch = PredictionMismatch {
        tick,
        predicted: predicted.digest,
        verified: state.digest,
        cause,
        first_difference,
    };
    log_mismatch(verified, audit, &mismatch);
    verified.app_world().write_message(mismatch);
    verified.report_prediction_mismatch(mismatch);
}

/// Logs a mismatch: every differing state, and the first uncovered one (counted).
fn log_mismatch<I: SimInput>(
    verified: &mut VerifiedTick<'_, I>,
    audit: &mut PredictionAudit,
    mismatch: &PredictionMismatch,
) {
    let tick = mismatch.tick;
    match mismatch.cause {
        MismatchCause::StateDiffers => error!(
            "desync: predicted tick {tick} ({:016x}) differs from verified ({:016x}) with the same inputs{}",
            mismatch.predicted,
            mismatch.verified,
            mismatch
                .first_difference
                .map_or(String::new(), |d| format!(": {d}"))
        ),
        MismatchCause::UncoveredState => {
            verified.stats_mut().resim_ticks_uncovered += 1;
            if !std::mem::replace(&mut audit.uncovered_logged, true) {
                error!(
                    "prediction check failed at tick {tick}: a simulation world holds state a \
                     rollback does not restore (see UnsimulatedEntity / UnregisteredComponent)"
                );
            }
        }
    }
}
