//! The [`SimulatorContext`]: what the deterministic session simulates in the current session update.
//!
//! This module implements the rules of Photon Quantum 3.1's `SimulatorContext`, stated in our
//! words in [the context rules](crate::rules#the-simulator-context), re-expressed as plain Rust
//! data:
//!
//! * the **stored fields** are private and read through getters;
//! * every **derived property** of Quantum's context (for example `TargetVerificationTick`) is a pure `&self`
//!   function of the stored fields, with a Rust name (`target_verification_tick`); Quantum's nullable
//!   properties return [`Option<Tick>`];
//! * the session driver moves the context through one session update with **lifecycle methods**, in the
//!   order listed on [`SimulatorContext`].
//!
//! Every lifecycle method checks the stage it is called in and the counters it advances, and returns a
//! [`ContextError`] instead of panicking when called out of order. The setters that hooks use
//! ([`SimulatorContext::set_ticks_to_verify`], the skip flags and the two legacy setters) are stage-gated:
//! Quantum says a write after a given stage "has no effect", and ours returns
//! [`ContextError::WriteIgnored`] in that case, leaving the context unchanged, so a caller can tell.
//!
//! All quantities are **ticks** (`i32` frame numbers, see [`Tick`]) or counts of ticks (`i32`). Arithmetic
//! saturates instead of overflowing, so no input can make these functions panic.

use bevy::ecs::reflect::ReflectResource;
use bevy::prelude::{Reflect, Resource};
use bevy::reflect::prelude::ReflectDefault;

use crate::tick::Tick;

/// The stage of the session update the simulator is in (Quantum names the stages; this enum is ours).
///
/// Stages follow each other in declaration order within one session update; [`SimulatorStage::Idle`] is
/// the stage between two updates (and before the first one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Reflect)]
#[reflect(Debug, PartialEq, Hash, Default, Clone)]
pub enum SimulatorStage {
    /// No session update is running.
    #[default]
    Idle,
    /// The update has been reset and its limits set; hooks may change `ticks_to_verify` and the skip flags.
    BeforeVerification,
    /// The verified world is being advanced, one `SimulationTick` per verified tick.
    Verification,
    /// Verification is done; hooks may still set the skip flags. Nothing has been rolled back yet.
    BeforePrediction,
    /// The rollback (if decided) and then the predicted ticks are being simulated.
    Prediction,
    /// Prediction is done; presentation state and stats are published.
    AfterPrediction,
}

/// Errors of [`SimulatorContext`] operations.
///
/// No operation of the context panics; misuse and ignored writes are reported with these values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// A lifecycle method was called in a stage other than the one it must be called in.
    #[error(
        "`{operation}` must be called in stage {expected:?}, but the simulator is in stage {actual:?}"
    )]
    WrongStage {
        /// The method that was called.
        operation: &'static str,
        /// The stage the method requires.
        expected: SimulatorStage,
        /// The stage the context was in.
        actual: SimulatorStage,
    },
    /// A write arrived after the stage in which the field accepts writes; it had no effect (Quantum's rule:
    /// "attempting to modify this value after stage X has ended will have no effect").
    #[error(
        "write to `{field}` ignored: it only accepts writes up to stage {last_writable:?}, now {stage:?}"
    )]
    WriteIgnored {
        /// The field that was written.
        field: &'static str,
        /// The last stage in which the field accepts writes.
        last_writable: SimulatorStage,
        /// The stage the context was in.
        stage: SimulatorStage,
    },
    /// `max_predicted_ticks` was set to a value other than `0` or `i32::MAX` (partial prediction budgets
    /// are not supported, as in Quantum).
    #[error("max_predicted_ticks accepts only 0 or i32::MAX, got {value}")]
    InvalidMaxPredictedTicks {
        /// The rejected value.
        value: i32,
    },
    /// `target_predicted_tick` was set to a tick other than `max_predictable_tick` or
    /// `predicted_from_tick` (partial prediction budgets are not supported, as in Quantum).
    #[error(
        "target_predicted_tick accepts only max_predictable_tick ({max_predictable_tick}) or \
         predicted_from_tick ({predicted_from_tick}), got {value}"
    )]
    InvalidTargetPredictedTick {
        /// The rejected tick.
        value: Tick,
        /// The `predicted_from_tick` at the time of the write.
        predicted_from_tick: Tick,
        /// The `max_predictable_tick` at the time of the write.
        max_predictable_tick: Tick,
    },
    /// [`SimulatorContext::record_verified_tick`] was called although `ticks_to_verify` ticks were
    /// already verified.
    #[error("all {ticks_to_verify} ticks to verify have already been verified")]
    VerificationExhausted {
        /// The `ticks_to_verify` of this update.
        ticks_to_verify: i32,
    },
    /// [`SimulatorContext::record_predicted_tick`] was called although `ticks_to_predict` ticks were
    /// already predicted.
    #[error("all {ticks_to_predict} ticks to predict have already been predicted")]
    PredictionExhausted {
        /// The `ticks_to_predict` of this update.
        ticks_to_predict: i32,
    },
    /// Verification was left with ticks still pending (lower `ticks_to_verify` first to stop early).
    #[error("verification is incomplete: {ticks_verified} of {ticks_to_verify} ticks verified")]
    VerificationIncomplete {
        /// Ticks verified so far.
        ticks_verified: i32,
        /// Ticks this update intends to verify.
        ticks_to_verify: i32,
    },
    /// Prediction was left with ticks still pending.
    #[error("prediction is incomplete: {ticks_predicted} of {ticks_to_predict} ticks predicted")]
    PredictionIncomplete {
        /// Ticks predicted so far.
        ticks_predicted: i32,
        /// Ticks this update intends to predict.
        ticks_to_predict: i32,
    },
    /// A rollback was decided for this update but not yet recorded; it must precede any predicted tick
    /// and the end of the Prediction stage.
    #[error("a rollback to tick {target_verification_tick} is pending and must be performed first")]
    RollbackPending {
        /// The tick the predicted state must be rolled back to.
        target_verification_tick: Tick,
    },
    /// [`SimulatorContext::record_rollback`] was called although no rollback is pending.
    #[error("no rollback is pending in this update")]
    NoRollbackPending,
    /// A field of [`UpdateParams`] that must not be negative was negative.
    #[error("update parameter `{field}` must not be negative, got {value}")]
    NegativeParam {
        /// The parameter's name.
        field: &'static str,
        /// The rejected value.
        value: i32,
    },
}

/// What the session driver knows at the start of a session update (step 2, begin, of [the session update](crate::rules#the-session-update)),
/// passed to [`SimulatorContext::begin_update`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UpdateParams {
    /// The verified world's current tick; becomes `verified_from_tick`.
    pub verified_tick: Tick,
    /// The predicted world's current tick, where the previous update left it; becomes
    /// `previous_update_predicted_tick`.
    pub predicted_tick: Tick,
    /// The last tick whose input sets, and those of every earlier tick, are confirmed.
    pub max_verifiable_tick: Tick,
    /// The last tick local input has been polled for.
    pub max_predictable_tick: Tick,
    /// How many ticks the predicted state may run ahead of `target_verification_tick` (must be ≥ 0).
    pub rollback_window: i32,
    /// The most verified ticks one update simulates by default (must be ≥ 0).
    pub max_verified_ticks_per_update: i32,
    /// Whether the session is stalling (see [`would_stall`]), decided after this update's
    /// confirmations were delivered. Informational: a stalling session's local tick stands still,
    /// so there is nothing new to predict, but a rollback still re-predicts up to it.
    pub is_stalling: bool,
}

/// What [`SimulatorContext::enter_prediction`] decided for the Prediction stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PredictionPlan {
    /// Whether the predicted state must first be rolled back to `target_verification_tick`
    /// (then call [`SimulatorContext::record_rollback`]).
    pub will_rollback_prediction: bool,
    /// The tick predictions start from: `target_verification_tick` after a rollback, otherwise
    /// `previous_update_predicted_tick`.
    pub predicted_from_tick: Tick,
    /// How many predicted ticks to simulate (≥ 0).
    pub ticks_to_predict: i32,
}

/// The position of a stage within one update, Idle first (private: stages are not otherwise ordered).
fn stage_position(stage: SimulatorStage) -> u8 {
    match stage {
        SimulatorStage::Idle => 0,
        SimulatorStage::BeforeVerification => 1,
        SimulatorStage::Verification => 2,
        SimulatorStage::BeforePrediction => 3,
        SimulatorStage::Prediction => 4,
        SimulatorStage::AfterPrediction => 5,
    }
}

/// Whether a session stalls: the next tick to poll local input for would pass
/// `max_verifiable_tick + rollback_window`.
///
/// Ours (Quantum leaves `IsStalling` undocumented; see [stalling](crate::rules#stalling)): predicting that far would need state the
/// rollback window cannot hold, so the session polls no new local input (its local tick, and so the
/// predicted world, stands still) until verification catches up. Saturating: never overflows.
pub fn would_stall(next_poll_tick: Tick, max_verifiable_tick: Tick, rollback_window: i32) -> bool {
    next_poll_tick > max_verifiable_tick.saturating_add(rollback_window)
}

/// Metadata about the deterministic simulator in the current session update: how far it verifies and
/// predicts, whether the predicted state is rolled back, and how far it has got (Quantum's
/// `SimulatorContext`; the rules are in [the simulator context](crate::rules#the-simulator-context)).
///
/// Held as a resource in the main world. Read it from hooks; write only through the stage-gated setters.
/// The session driver advances it with these lifecycle methods, in this order:
///
/// ```text
/// begin_update            Idle               -> BeforeVerification   (per-update reset)
/// enter_verification      BeforeVerification -> Verification
///   record_verified_tick  (once per verified tick, ticks_to_verify times)
/// enter_before_prediction Verification       -> BeforePrediction
/// enter_prediction        BeforePrediction   -> Prediction           (decision point)
///   record_rollback       (first, only if will_rollback_prediction)
///   record_predicted_tick (once per predicted tick, ticks_to_predict times)
/// enter_after_prediction  Prediction         -> AfterPrediction
/// end_update              AfterPrediction    -> Idle
/// ```
///
/// Between updates (stage [`SimulatorStage::Idle`]) it keeps the values of the last update, so stats can
/// read them; only `latest_verified_rolled_back_to` carries over into the next update's rules.
#[derive(Resource, Reflect, Debug, Clone, PartialEq)]
#[reflect(Resource, Debug, PartialEq, Default, Clone)]
pub struct SimulatorContext {
    stage: SimulatorStage,
    max_verifiable_tick: Tick,
    max_predictable_tick: Tick,
    verified_from_tick: Tick,
    previous_update_predicted_tick: Tick,
    latest_verified_rolled_back_to: Tick,
    ticks_to_verify: i32,
    ticks_verified: i32,
    ticks_predicted: i32,
    ticks_to_predict: i32,
    will_rollback_prediction: bool,
    has_rolled_back_prediction: bool,
    skip_prediction: bool,
    skip_prediction_rollback_if_possible: bool,
    is_stalling: bool,
    rollback_window: i32,
    max_verified_ticks_per_update: i32,
}

impl Default for SimulatorContext {
    /// Same as [`SimulatorContext::new`]`(0)`.
    fn default() -> Self {
        Self::new(0)
    }
}

impl SimulatorContext {
    /// A context for a session whose verified and predicted worlds both start at `start_tick`.
    ///
    /// Stage [`SimulatorStage::Idle`], every tick field equal to `start_tick` (so the predicted state counts
    /// as rolled back to `start_tick`), every count 0 and every flag false.
    pub fn new(start_tick: Tick) -> Self {
        Self {
            stage: SimulatorStage::Idle,
            max_verifiable_tick: start_tick,
            max_predictable_tick: start_tick,
            verified_from_tick: start_tick,
            previous_update_predicted_tick: start_tick,
            latest_verified_rolled_back_to: start_tick,
            ticks_to_verify: 0,
            ticks_verified: 0,
            ticks_predicted: 0,
            ticks_to_predict: 0,
            will_rollback_prediction: false,
            has_rolled_back_prediction: false,
            skip_prediction: false,
            skip_prediction_rollback_if_possible: false,
            is_stalling: false,
            rollback_window: 0,
            max_verified_ticks_per_update: 0,
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Stored fields (getters)
    // ---------------------------------------------------------------------------------------------

    /// The current stage of the simulator.
    pub fn stage(&self) -> SimulatorStage {
        self.stage
    }

    /// The last tick the simulator is able to verify with the complete, confirmed input sets it has.
    pub fn max_verifiable_tick(&self) -> Tick {
        self.max_verifiable_tick
    }

    /// The last tick the simulator has polled local input for.
    pub fn max_predictable_tick(&self) -> Tick {
        self.max_predictable_tick
    }

    /// The verified world's tick when this update started.
    pub fn verified_from_tick(&self) -> Tick {
        self.verified_from_tick
    }

    /// The predicted world's tick when this update started, i.e. where the previous update left it.
    pub fn previous_update_predicted_tick(&self) -> Tick {
        self.previous_update_predicted_tick
    }

    /// The latest verified tick the predicted state was rolled back to (kept across updates).
    ///
    /// Becomes `target_verification_tick` at every rollback. While rollbacks are skipped it falls behind
    /// `target_verification_tick`; the gap tells how stale the verified state under the predictions is.
    pub fn latest_verified_rolled_back_to(&self) -> Tick {
        self.latest_verified_rolled_back_to
    }

    /// The number of verified ticks this update simulates.
    ///
    /// Reset by [`begin_update`](Self::begin_update) to the verifiable count capped by
    /// `max_verified_ticks_per_update`; hooks may change it with
    /// [`set_ticks_to_verify`](Self::set_ticks_to_verify) until Verification ends.
    pub fn ticks_to_verify(&self) -> i32 {
        self.ticks_to_verify
    }

    /// The number of verified ticks already simulated in this update.
    pub fn ticks_verified(&self) -> i32 {
        self.ticks_verified
    }

    /// The number of predicted ticks already simulated in this update.
    pub fn ticks_predicted(&self) -> i32 {
        self.ticks_predicted
    }

    /// The number of predicted ticks this update simulates, from `predicted_from_tick` towards
    /// `max_predictable_tick`, capped at `target_verification_tick + rollback_window` (Quantum's `TicksToPredict`):
    ///
    /// `0` if `skip_prediction`, otherwise
    /// `max(min(max_predictable_tick, target_verification_tick + rollback_window) - predicted_from_tick, 0)`.
    /// Stalling does not enter ([stalling](crate::rules#stalling)): a rollback in a stalling update
    /// re-predicts up to the local tick, so the predicted world never moves back in time.
    ///
    /// Up to and including BeforePrediction this is a projection that follows writes to the skip flags and
    /// `ticks_to_verify`; it is fixed when [`enter_prediction`](Self::enter_prediction) runs.
    pub fn ticks_to_predict(&self) -> i32 {
        self.ticks_to_predict
    }

    /// Whether the predicted state will still be rolled back to the verified state in this update (Quantum's
    /// `WillRollbackPrediction`).
    ///
    /// Rule: `is_rollback_required()`, or else a newer verified state exists
    /// (`target_verification_tick > latest_verified_rolled_back_to`) and neither `skip_prediction` nor
    /// `skip_prediction_rollback_if_possible` is set. Up to and including BeforePrediction this is a
    /// projection that follows the skip flags; it is fixed by [`enter_prediction`](Self::enter_prediction)
    /// and becomes `false` once [`record_rollback`](Self::record_rollback) has run.
    pub fn will_rollback_prediction(&self) -> bool {
        self.will_rollback_prediction
    }

    /// Whether the predicted state has been rolled back in this update. Always `false` up to and including
    /// BeforePrediction (Quantum's `HasRolledBackPrediction`).
    pub fn has_rolled_back_prediction(&self) -> bool {
        self.has_rolled_back_prediction
    }

    /// Whether the Prediction stage simulates no ticks in this update (Quantum's `SkipPrediction`).
    ///
    /// Skipping predictions also skips the rollback before them unless `is_rollback_required()`; when a
    /// rollback is required it still happens and the predicted state ends the update at
    /// `target_verification_tick`. Reset to `false` by [`begin_update`](Self::begin_update).
    pub fn skip_prediction(&self) -> bool {
        self.skip_prediction
    }

    /// Whether the rollback before prediction should be skipped if possible (Quantum's
    /// `SkipPredictionRollbackIfPossible`). A request: `is_rollback_required()` overrides it. Only the
    /// rollback is skipped; prediction still runs. Reset to `false` by [`begin_update`](Self::begin_update).
    pub fn skip_prediction_rollback_if_possible(&self) -> bool {
        self.skip_prediction_rollback_if_possible
    }

    /// Whether the session is stalling in this update (computed by the driver after this update's
    /// confirmations, see [`would_stall`]): its local tick does not advance, so no new tick is
    /// predicted; a rollback still re-predicts up to the local tick.
    pub fn is_stalling(&self) -> bool {
        self.is_stalling
    }

    /// How many ticks the predicted state may run ahead of `target_verification_tick`.
    pub fn rollback_window(&self) -> i32 {
        self.rollback_window
    }

    /// The most verified ticks one update simulates by default (the cap on the reset `ticks_to_verify`).
    pub fn max_verified_ticks_per_update(&self) -> i32 {
        self.max_verified_ticks_per_update
    }

    // ---------------------------------------------------------------------------------------------
    // Derived properties (pure)
    // ---------------------------------------------------------------------------------------------

    /// The number of verified ticks this update could simulate at most:
    /// `max(max_verifiable_tick - verified_from_tick, 0)`. Upper bound of `ticks_to_verify`.
    pub fn max_ticks_to_verify(&self) -> i32 {
        self.max_verifiable_tick
            .saturating_sub(self.verified_from_tick)
            .max(0)
    }

    /// The last verified tick this update intends to simulate: `verified_from_tick + ticks_to_verify`
    /// (Quantum's `TargetVerificationTick`).
    pub fn target_verification_tick(&self) -> Tick {
        self.verified_from_tick.saturating_add(self.ticks_to_verify)
    }

    /// `true` when verification reaches past where the previous update's prediction ended
    /// (`target_verification_tick > previous_update_predicted_tick`); the rollback is then forced regardless
    /// of both skip flags (Quantum's `IsRollbackRequired`), since predicting from behind the verified state would
    /// need input sets already consumed.
    pub fn is_rollback_required(&self) -> bool {
        self.target_verification_tick() > self.previous_update_predicted_tick
    }

    /// The tick predictions start (or started) from in this update: `target_verification_tick` if the
    /// predicted state will be or has been rolled back, otherwise `previous_update_predicted_tick` (Quantum's
    /// `PredictedFromTick`).
    pub fn predicted_from_tick(&self) -> Tick {
        if self.will_rollback_prediction || self.has_rolled_back_prediction {
            self.target_verification_tick()
        } else {
            self.previous_update_predicted_tick
        }
    }

    /// Verified ticks still to simulate: `ticks_to_verify - ticks_verified` (Quantum's `TicksPendingVerification`).
    pub fn ticks_pending_verification(&self) -> i32 {
        self.ticks_to_verify.saturating_sub(self.ticks_verified)
    }

    /// Predicted ticks still to simulate: `ticks_to_predict - ticks_predicted` (Quantum's `TicksPendingPrediction`).
    pub fn ticks_pending_prediction(&self) -> i32 {
        self.ticks_to_predict.saturating_sub(self.ticks_predicted)
    }

    /// All ticks still to simulate: `ticks_pending_verification + ticks_pending_prediction` (Quantum's
    /// `TicksPendingSimulation`).
    pub fn ticks_pending_simulation(&self) -> i32 {
        self.ticks_pending_verification()
            .saturating_add(self.ticks_pending_prediction())
    }

    /// Ticks already simulated in this update: `ticks_verified + ticks_predicted` (Quantum's `TicksSimulated`).
    pub fn ticks_simulated(&self) -> i32 {
        self.ticks_verified.saturating_add(self.ticks_predicted)
    }

    /// The latest verified tick simulated in this update, `verified_from_tick + ticks_verified`; `None` if
    /// none yet (Quantum's `LatestTickVerified`).
    pub fn latest_tick_verified(&self) -> Option<Tick> {
        (self.ticks_verified > 0)
            .then(|| self.verified_from_tick.saturating_add(self.ticks_verified))
    }

    /// The latest predicted tick simulated in this update, `predicted_from_tick + ticks_predicted`; `None` if
    /// none yet (Quantum's `LatestTickPredicted`).
    pub fn latest_tick_predicted(&self) -> Option<Tick> {
        (self.ticks_predicted > 0).then(|| {
            self.predicted_from_tick()
                .saturating_add(self.ticks_predicted)
        })
    }

    /// The latest tick simulated in this update: the latest predicted one, else the latest verified one;
    /// `None` if none yet (Quantum's `LatestTickSimulated`).
    pub fn latest_tick_simulated(&self) -> Option<Tick> {
        self.latest_tick_predicted()
            .or_else(|| self.latest_tick_verified())
    }

    /// The next verified tick to simulate, `verified_from_tick + ticks_verified + 1`; `None` if no verified
    /// ticks are pending (Quantum's `NextTickToVerify`).
    pub fn next_tick_to_verify(&self) -> Option<Tick> {
        (self.ticks_pending_verification() > 0).then(|| {
            self.verified_from_tick
                .saturating_add(self.ticks_verified)
                .saturating_add(1)
        })
    }

    /// The next predicted tick to simulate, `predicted_from_tick + ticks_predicted + 1`; `None` if no
    /// predicted ticks are pending (Quantum's `NextTickToPredict`).
    pub fn next_tick_to_predict(&self) -> Option<Tick> {
        (self.ticks_pending_prediction() > 0).then(|| {
            self.predicted_from_tick()
                .saturating_add(self.ticks_predicted)
                .saturating_add(1)
        })
    }

    /// The next tick to simulate: the next verified one, else the next predicted one; `None` if nothing is
    /// pending (Quantum's `NextTickToSimulate`).
    pub fn next_tick_to_simulate(&self) -> Option<Tick> {
        self.next_tick_to_verify()
            .or_else(|| self.next_tick_to_predict())
    }

    // ---------------------------------------------------------------------------------------------
    // Hook-facing setters (stage-gated)
    // ---------------------------------------------------------------------------------------------

    /// Sets `ticks_to_verify`, clamped between `ticks_verified` and
    /// [`max_ticks_to_verify`](Self::max_ticks_to_verify); returns the value applied (Quantum's `TicksToVerify`
    /// setter).
    ///
    /// The lower bound counts every tick already verified; verified ticks are recorded between ticks and
    /// hooks run between ticks, so no tick is in flight at a write.
    ///
    /// # Errors
    /// [`ContextError::WriteIgnored`] outside BeforeVerification and Verification: a write after the
    /// Verification stage has ended (or between updates) has no effect.
    pub fn set_ticks_to_verify(&mut self, ticks: i32) -> Result<i32, ContextError> {
        self.check_writable("ticks_to_verify", SimulatorStage::Verification)?;
        let applied = ticks
            .min(self.max_ticks_to_verify())
            .max(self.ticks_verified);
        self.ticks_to_verify = applied;
        self.refresh_projection();
        Ok(applied)
    }

    /// Sets [`skip_prediction`](Self::skip_prediction).
    ///
    /// # Errors
    /// [`ContextError::WriteIgnored`] outside BeforeVerification..=BeforePrediction: a write after the
    /// BeforePrediction stage has ended (or between updates) has no effect.
    pub fn set_skip_prediction(&mut self, skip: bool) -> Result<(), ContextError> {
        self.check_writable("skip_prediction", SimulatorStage::BeforePrediction)?;
        self.skip_prediction = skip;
        self.refresh_projection();
        Ok(())
    }

    /// Sets [`skip_prediction_rollback_if_possible`](Self::skip_prediction_rollback_if_possible).
    ///
    /// # Errors
    /// [`ContextError::WriteIgnored`] outside BeforeVerification..=BeforePrediction: a write once the
    /// prediction loop has started (or between updates) has no effect.
    pub fn set_skip_prediction_rollback_if_possible(
        &mut self,
        skip: bool,
    ) -> Result<(), ContextError> {
        self.check_writable(
            "skip_prediction_rollback_if_possible",
            SimulatorStage::BeforePrediction,
        )?;
        self.skip_prediction_rollback_if_possible = skip;
        self.refresh_projection();
        Ok(())
    }

    /// Legacy view of `skip_prediction` (Quantum's `MaxPredictedTicks`): `Some(0)` while predictions are skipped,
    /// `Some(i32::MAX)` otherwise. Never `None`; the `Option` keeps Quantum's nullable shape.
    pub fn max_predicted_ticks(&self) -> Option<i32> {
        Some(if self.skip_prediction { 0 } else { i32::MAX })
    }

    /// Legacy setter (Quantum's `MaxPredictedTicks`): `0` sets `skip_prediction`, `i32::MAX` clears it. Partial
    /// prediction budgets are not supported.
    ///
    /// # Errors
    /// [`ContextError::InvalidMaxPredictedTicks`] for any other value (checked first, in every stage);
    /// [`ContextError::WriteIgnored`] after BeforePrediction has ended (or between updates).
    pub fn set_max_predicted_ticks(&mut self, value: i32) -> Result<(), ContextError> {
        let skip = match value {
            0 => true,
            i32::MAX => false,
            _ => return Err(ContextError::InvalidMaxPredictedTicks { value }),
        };
        self.check_writable("max_predicted_ticks", SimulatorStage::BeforePrediction)?;
        self.skip_prediction = skip;
        self.refresh_projection();
        Ok(())
    }

    /// Legacy view of `skip_prediction` (Quantum's `TargetPredictedTick`): `Some(predicted_from_tick)` while
    /// predictions are skipped, `Some(max_predictable_tick)` otherwise. Never `None`.
    pub fn target_predicted_tick(&self) -> Option<Tick> {
        Some(if self.skip_prediction {
            self.predicted_from_tick()
        } else {
            self.max_predictable_tick
        })
    }

    /// Legacy setter (Quantum's `TargetPredictedTick`): `max_predictable_tick` clears `skip_prediction`, the
    /// current `predicted_from_tick` sets it. When both ticks are equal the write is taken as
    /// `max_predictable_tick` (clears the flag), so it does not also suppress the rollback.
    ///
    /// Setting the flag can move `predicted_from_tick` to `previous_update_predicted_tick` (skipping
    /// predictions also skips the rollback unless required), so reading back may give that tick.
    ///
    /// # Errors
    /// [`ContextError::InvalidTargetPredictedTick`] for any other tick (checked first, in every stage);
    /// [`ContextError::WriteIgnored`] after BeforePrediction has ended (or between updates).
    pub fn set_target_predicted_tick(&mut self, tick: Tick) -> Result<(), ContextError> {
        let predicted_from_tick = self.predicted_from_tick();
        let skip = if tick == self.max_predictable_tick {
            false
        } else if tick == predicted_from_tick {
            true
        } else {
            return Err(ContextError::InvalidTargetPredictedTick {
                value: tick,
                predicted_from_tick,
                max_predictable_tick: self.max_predictable_tick,
            });
        };
        self.check_writable("target_predicted_tick", SimulatorStage::BeforePrediction)?;
        self.skip_prediction = skip;
        self.refresh_projection();
        Ok(())
    }

    // ---------------------------------------------------------------------------------------------
    // Lifecycle (session driver)
    // ---------------------------------------------------------------------------------------------

    /// Starts a session update (stage Idle → BeforeVerification) and resets the per-update state:
    /// both skip flags `false`, `ticks_verified`/`ticks_predicted` 0, `has_rolled_back_prediction` `false`,
    /// and `ticks_to_verify = max(min(max_verifiable_tick - verified_tick, max_verified_ticks_per_update), 0)`.
    /// `latest_verified_rolled_back_to` carries over from the previous update.
    ///
    /// # Errors
    /// [`ContextError::WrongStage`] unless Idle; [`ContextError::NegativeParam`] if `rollback_window` or
    /// `max_verified_ticks_per_update` is negative. On error the context is unchanged.
    pub fn begin_update(&mut self, params: UpdateParams) -> Result<(), ContextError> {
        self.check_stage("begin_update", SimulatorStage::Idle)?;
        if params.rollback_window < 0 {
            return Err(ContextError::NegativeParam {
                field: "rollback_window",
                value: params.rollback_window,
            });
        }
        if params.max_verified_ticks_per_update < 0 {
            return Err(ContextError::NegativeParam {
                field: "max_verified_ticks_per_update",
                value: params.max_verified_ticks_per_update,
            });
        }
        self.stage = SimulatorStage::BeforeVerification;
        self.verified_from_tick = params.verified_tick;
        self.previous_update_predicted_tick = params.predicted_tick;
        self.max_verifiable_tick = params.max_verifiable_tick;
        self.max_predictable_tick = params.max_predictable_tick;
        self.rollback_window = params.rollback_window;
        self.max_verified_ticks_per_update = params.max_verified_ticks_per_update;
        self.is_stalling = params.is_stalling;
        self.skip_prediction = false;
        self.skip_prediction_rollback_if_possible = false;
        self.ticks_verified = 0;
        self.ticks_predicted = 0;
        self.has_rolled_back_prediction = false;
        self.ticks_to_verify = self
            .max_ticks_to_verify()
            .min(params.max_verified_ticks_per_update);
        self.refresh_projection();
        Ok(())
    }

    /// BeforeVerification → Verification. `ticks_to_verify` stays writable during Verification.
    ///
    /// # Errors
    /// [`ContextError::WrongStage`] unless BeforeVerification.
    pub fn enter_verification(&mut self) -> Result<(), ContextError> {
        self.transition(
            "enter_verification",
            SimulatorStage::BeforeVerification,
            SimulatorStage::Verification,
        )
    }

    /// Records one verified tick as simulated; returns that tick (`verified_from_tick + ticks_verified`).
    ///
    /// # Errors
    /// [`ContextError::WrongStage`] unless Verification; [`ContextError::VerificationExhausted`] if
    /// `ticks_to_verify` ticks were already verified.
    pub fn record_verified_tick(&mut self) -> Result<Tick, ContextError> {
        self.check_stage("record_verified_tick", SimulatorStage::Verification)?;
        if self.ticks_pending_verification() <= 0 {
            return Err(ContextError::VerificationExhausted {
                ticks_to_verify: self.ticks_to_verify,
            });
        }
        self.ticks_verified += 1;
        Ok(self.verified_from_tick.saturating_add(self.ticks_verified))
    }

    /// Verification → BeforePrediction. From here on `ticks_to_verify` is fixed.
    ///
    /// # Errors
    /// [`ContextError::WrongStage`] unless Verification; [`ContextError::VerificationIncomplete`] if
    /// verified ticks are still pending (to stop verifying early, lower `ticks_to_verify` first).
    pub fn enter_before_prediction(&mut self) -> Result<(), ContextError> {
        self.check_stage("enter_before_prediction", SimulatorStage::Verification)?;
        if self.ticks_pending_verification() > 0 {
            return Err(ContextError::VerificationIncomplete {
                ticks_verified: self.ticks_verified,
                ticks_to_verify: self.ticks_to_verify,
            });
        }
        self.stage = SimulatorStage::BeforePrediction;
        Ok(())
    }

    /// BeforePrediction → Prediction: the decision point. Fixes `will_rollback_prediction` and
    /// `ticks_to_predict` by the context rules (see their getters) and returns them with
    /// `predicted_from_tick`. From here on the skip flags are fixed.
    ///
    /// # Errors
    /// [`ContextError::WrongStage`] unless BeforePrediction.
    pub fn enter_prediction(&mut self) -> Result<PredictionPlan, ContextError> {
        self.check_stage("enter_prediction", SimulatorStage::BeforePrediction)?;
        self.refresh_projection();
        self.stage = SimulatorStage::Prediction;
        Ok(PredictionPlan {
            will_rollback_prediction: self.will_rollback_prediction,
            predicted_from_tick: self.predicted_from_tick(),
            ticks_to_predict: self.ticks_to_predict,
        })
    }

    /// Records that the predicted state was rolled back to `target_verification_tick`, which it returns:
    /// `will_rollback_prediction` becomes `false`, `has_rolled_back_prediction` `true` and
    /// `latest_verified_rolled_back_to` the target tick.
    ///
    /// # Errors
    /// [`ContextError::WrongStage`] unless Prediction; [`ContextError::NoRollbackPending`] if no rollback
    /// was decided or it was already recorded.
    pub fn record_rollback(&mut self) -> Result<Tick, ContextError> {
        self.check_stage("record_rollback", SimulatorStage::Prediction)?;
        if !self.will_rollback_prediction {
            return Err(ContextError::NoRollbackPending);
        }
        let target = self.target_verification_tick();
        self.will_rollback_prediction = false;
        self.has_rolled_back_prediction = true;
        self.latest_verified_rolled_back_to = target;
        Ok(target)
    }

    /// Records one predicted tick as simulated; returns that tick (`predicted_from_tick + ticks_predicted`).
    ///
    /// # Errors
    /// [`ContextError::WrongStage`] unless Prediction; [`ContextError::RollbackPending`] if the decided
    /// rollback was not recorded yet; [`ContextError::PredictionExhausted`] if `ticks_to_predict` ticks
    /// were already predicted.
    pub fn record_predicted_tick(&mut self) -> Result<Tick, ContextError> {
        self.check_stage("record_predicted_tick", SimulatorStage::Prediction)?;
        self.check_no_pending_rollback()?;
        if self.ticks_pending_prediction() <= 0 {
            return Err(ContextError::PredictionExhausted {
                ticks_to_predict: self.ticks_to_predict,
            });
        }
        self.ticks_predicted += 1;
        Ok(self
            .predicted_from_tick()
            .saturating_add(self.ticks_predicted))
    }

    /// Prediction → AfterPrediction.
    ///
    /// # Errors
    /// [`ContextError::WrongStage`] unless Prediction; [`ContextError::RollbackPending`] if the decided
    /// rollback was not recorded; [`ContextError::PredictionIncomplete`] if predicted ticks are pending.
    pub fn enter_after_prediction(&mut self) -> Result<(), ContextError> {
        self.check_stage("enter_after_prediction", SimulatorStage::Prediction)?;
        self.check_no_pending_rollback()?;
        if self.ticks_pending_prediction() > 0 {
            return Err(ContextError::PredictionIncomplete {
                ticks_predicted: self.ticks_predicted,
                ticks_to_predict: self.ticks_to_predict,
            });
        }
        self.stage = SimulatorStage::AfterPrediction;
        Ok(())
    }

    /// AfterPrediction → Idle. The update's values stay readable until the next
    /// [`begin_update`](Self::begin_update).
    ///
    /// # Errors
    /// [`ContextError::WrongStage`] unless AfterPrediction.
    pub fn end_update(&mut self) -> Result<(), ContextError> {
        self.transition(
            "end_update",
            SimulatorStage::AfterPrediction,
            SimulatorStage::Idle,
        )
    }

    /// Abandons the running update (any stage → Idle) so the next [`begin_update`](Self::begin_update) is
    /// accepted, e.g. after a desync aborted the session update. Counters and flags keep their values;
    /// `latest_verified_rolled_back_to` is only changed by rollbacks actually recorded.
    pub fn abort_update(&mut self) {
        self.stage = SimulatorStage::Idle;
    }

    // ---------------------------------------------------------------------------------------------
    // Private helpers
    // ---------------------------------------------------------------------------------------------

    /// Whether the decision point is still ahead in the running update.
    fn before_decision(&self) -> bool {
        matches!(
            self.stage,
            SimulatorStage::BeforeVerification
                | SimulatorStage::Verification
                | SimulatorStage::BeforePrediction
        )
    }

    /// Recomputes the projected `will_rollback_prediction` and `ticks_to_predict` before the decision point.
    fn refresh_projection(&mut self) {
        if !self.before_decision() {
            return;
        }
        let newer_verified_state =
            self.target_verification_tick() > self.latest_verified_rolled_back_to;
        let skipped = self.skip_prediction || self.skip_prediction_rollback_if_possible;
        self.will_rollback_prediction =
            self.is_rollback_required() || (newer_verified_state && !skipped);
        self.ticks_to_predict = if self.skip_prediction {
            0
        } else {
            let end = self.max_predictable_tick.min(
                self.target_verification_tick()
                    .saturating_add(self.rollback_window),
            );
            end.saturating_sub(self.predicted_from_tick()).max(0)
        };
    }

    fn check_stage(
        &self,
        operation: &'static str,
        expected: SimulatorStage,
    ) -> Result<(), ContextError> {
        if self.stage == expected {
            Ok(())
        } else {
            Err(ContextError::WrongStage {
                operation,
                expected,
                actual: self.stage,
            })
        }
    }

    fn transition(
        &mut self,
        operation: &'static str,
        from: SimulatorStage,
        to: SimulatorStage,
    ) -> Result<(), ContextError> {
        self.check_stage(operation, from)?;
        self.stage = to;
        Ok(())
    }

    /// Writes are accepted from BeforeVerification up to and including `last_writable`.
    fn check_writable(
        &self,
        field: &'static str,
        last_writable: SimulatorStage,
    ) -> Result<(), ContextError> {
        let writable = self.stage != SimulatorStage::Idle
            && stage_position(self.stage) <= stage_position(last_writable);
        if writable {
            Ok(())
        } else {
            Err(ContextError::WriteIgnored {
                field,
                last_writable,
                stage: self.stage,
            })
        }
    }

    fn check_no_pending_rollback(&self) -> Result<(), ContextError> {
        if self.will_rollback_prediction {
            Err(ContextError::RollbackPending {
                target_verification_tick: self.target_verification_tick(),
            })
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bevy::prelude::World;
    use bevy::reflect::GetPath;
    use proptest::prelude::*;

    /// Update parameters with a large per-update limit, a 60-tick window and no stall.
    fn params(
        verified: Tick,
        predicted: Tick,
        max_verifiable: Tick,
        max_predictable: Tick,
    ) -> UpdateParams {
        UpdateParams {
            verified_tick: verified,
            predicted_tick: predicted,
            max_verifiable_tick: max_verifiable,
            max_predictable_tick: max_predictable,
            rollback_window: 60,
            max_verified_ticks_per_update: 100,
            is_stalling: false,
        }
    }

    /// A context rolled back to `latest_rb`, started with `p`, in BeforeVerification.
    fn begun(latest_rb: Tick, p: UpdateParams) -> SimulatorContext {
        let mut ctx = SimulatorContext::new(latest_rb);
        ctx.begin_update(p).unwrap();
        ctx
    }

    /// Runs Verification completely and enters BeforePrediction.
    fn verify_all(ctx: &mut SimulatorContext) {
        ctx.enter_verification().unwrap();
        while ctx.ticks_pending_verification() > 0 {
            ctx.record_verified_tick().unwrap();
        }
        ctx.enter_before_prediction().unwrap();
    }

    /// From Prediction: performs the decided rollback, predicts every tick, ends the update.
    fn finish_prediction(ctx: &mut SimulatorContext) {
        if ctx.will_rollback_prediction() {
            ctx.record_rollback().unwrap();
        }
        while ctx.ticks_pending_prediction() > 0 {
            ctx.record_predicted_tick().unwrap();
        }
        ctx.enter_after_prediction().unwrap();
        ctx.end_update().unwrap();
    }

    /// The tick the predicted world ends the update at.
    fn final_predicted_tick(ctx: &SimulatorContext) -> Tick {
        ctx.latest_tick_predicted()
            .unwrap_or_else(|| ctx.predicted_from_tick())
    }

    #[test]
    fn new_context_is_idle_at_start_tick() {
        let ctx = SimulatorContext::new(7);
        assert_eq!(ctx.stage(), SimulatorStage::Idle);
        assert_eq!(ctx.verified_from_tick(), 7);
        assert_eq!(ctx.previous_update_predicted_tick(), 7);
        assert_eq!(ctx.latest_verified_rolled_back_to(), 7);
        assert_eq!(ctx.target_verification_tick(), 7);
        assert_eq!(ctx.ticks_to_verify(), 0);
        assert_eq!(ctx.ticks_to_predict(), 0);
        assert!(!ctx.will_rollback_prediction());
        assert_eq!(ctx.next_tick_to_simulate(), None);
        assert_eq!(ctx.latest_tick_simulated(), None);
        assert_eq!(SimulatorContext::default(), SimulatorContext::new(0));
        assert_eq!(SimulatorStage::default(), SimulatorStage::Idle);
    }

    #[test]
    fn begin_update_copies_params_and_enters_before_verification() {
        let p = UpdateParams {
            verified_tick: 3,
            predicted_tick: 9,
            max_verifiable_tick: 6,
            max_predictable_tick: 11,
            rollback_window: 8,
            max_verified_ticks_per_update: 2,
            is_stalling: true,
        };
        let ctx = begun(3, p);
        assert_eq!(ctx.stage(), SimulatorStage::BeforeVerification);
        assert_eq!(ctx.verified_from_tick(), 3);
        assert_eq!(ctx.previous_update_predicted_tick(), 9);
        assert_eq!(ctx.max_verifiable_tick(), 6);
        assert_eq!(ctx.max_predictable_tick(), 11);
        assert_eq!(ctx.rollback_window(), 8);
        assert_eq!(ctx.max_verified_ticks_per_update(), 2);
        assert!(ctx.is_stalling());
        assert_eq!(ctx.ticks_to_verify(), 2);
    }

    #[test]
    fn default_ticks_to_verify_is_capped_by_per_update_limit() {
        let mut p = params(0, 0, 10, 10);
        p.max_verified_ticks_per_update = 4;
        let ctx = begun(0, p);
        assert_eq!(ctx.max_ticks_to_verify(), 10);
        assert_eq!(ctx.ticks_to_verify(), 4);
        assert_eq!(ctx.target_verification_tick(), 4);
    }

    #[test]
    fn default_ticks_to_verify_is_the_verifiable_count_below_the_limit() {
        let ctx = begun(0, params(5, 5, 8, 8));
        assert_eq!(ctx.ticks_to_verify(), 3);
    }

    #[test]
    fn default_ticks_to_verify_is_never_negative() {
        let ctx = begun(10, params(10, 10, 7, 12));
        assert_eq!(ctx.max_ticks_to_verify(), 0);
        assert_eq!(ctx.ticks_to_verify(), 0);
        assert_eq!(ctx.target_verification_tick(), 10);
    }

    #[test]
    fn begin_update_resets_flags_and_counters() {
        let mut ctx = begun(0, params(0, 0, 3, 6));
        ctx.set_skip_prediction(true).unwrap();
        ctx.set_skip_prediction_rollback_if_possible(true).unwrap();
        ctx.set_ticks_to_verify(1).unwrap();
        verify_all(&mut ctx);
        ctx.enter_prediction().unwrap();
        finish_prediction(&mut ctx);
        assert_eq!(ctx.ticks_verified(), 1);
        assert!(ctx.has_rolled_back_prediction());

        ctx.begin_update(params(1, 1, 4, 9)).unwrap();
        assert!(!ctx.skip_prediction());
        assert!(!ctx.skip_prediction_rollback_if_possible());
        assert!(!ctx.has_rolled_back_prediction());
        assert_eq!(ctx.ticks_verified(), 0);
        assert_eq!(ctx.ticks_predicted(), 0);
        assert_eq!(ctx.ticks_to_verify(), 3);
        assert_eq!(ctx.latest_verified_rolled_back_to(), 1);
    }

    #[test]
    fn target_verification_tick_is_verified_from_plus_ticks_to_verify() {
        let mut ctx = begun(4, params(4, 4, 9, 9));
        assert_eq!(ctx.target_verification_tick(), 9);
        ctx.set_ticks_to_verify(2).unwrap();
        assert_eq!(ctx.target_verification_tick(), 6);
    }

    #[test]
    fn rollback_is_required_only_when_target_passes_previous_prediction() {
        // target 14 > previous predicted 13
        assert!(begun(10, params(10, 13, 14, 20)).is_rollback_required());
        // target 14 == previous predicted 14
        assert!(!begun(10, params(10, 14, 14, 20)).is_rollback_required());
        // target 14 < previous predicted 15
        assert!(!begun(10, params(10, 15, 14, 20)).is_rollback_required());
    }

    #[test]
    fn required_rollback_overrides_both_skip_flags() {
        let mut ctx = begun(10, params(10, 11, 14, 16));
        assert!(ctx.is_rollback_required());
        ctx.set_skip_prediction(true).unwrap();
        ctx.set_skip_prediction_rollback_if_possible(true).unwrap();
        verify_all(&mut ctx);
        let plan = ctx.enter_prediction().unwrap();
        assert_eq!(
            plan,
            PredictionPlan {
                will_rollback_prediction: true,
                predicted_from_tick: 14,
                ticks_to_predict: 0,
            }
        );
        assert_eq!(ctx.record_rollback(), Ok(14));
        assert_eq!(ctx.latest_verified_rolled_back_to(), 14);
    }

    #[test]
    fn required_rollback_overrides_skip_rollback_flag_and_still_predicts() {
        let mut ctx = begun(10, params(10, 11, 14, 16));
        ctx.set_skip_prediction_rollback_if_possible(true).unwrap();
        verify_all(&mut ctx);
        let plan = ctx.enter_prediction().unwrap();
        assert!(plan.will_rollback_prediction);
        assert_eq!(plan.predicted_from_tick, 14);
        assert_eq!(plan.ticks_to_predict, 2);
    }

    #[test]
    fn skip_prediction_skips_the_rollback_when_not_required() {
        // latest rolled back to 10, target 12 is newer, previous prediction 20 is ahead of it.
        let mut ctx = begun(10, params(10, 20, 12, 25));
        assert!(!ctx.is_rollback_required());
        assert!(ctx.will_rollback_prediction());
        ctx.set_skip_prediction(true).unwrap();
        verify_all(&mut ctx);
        let plan = ctx.enter_prediction().unwrap();
        assert_eq!(
            plan,
            PredictionPlan {
                will_rollback_prediction: false,
                predicted_from_tick: 20,
                ticks_to_predict: 0,
            }
        );
        assert_eq!(ctx.record_rollback(), Err(ContextError::NoRollbackPending));
        finish_prediction(&mut ctx);
        assert!(!ctx.has_rolled_back_prediction());
        assert_eq!(ctx.latest_verified_rolled_back_to(), 10);
        assert_eq!(final_predicted_tick(&ctx), 20);
    }

    #[test]
    fn skip_prediction_with_required_rollback_ends_at_target_verification_tick() {
        let mut ctx = begun(10, params(10, 11, 14, 16));
        ctx.set_skip_prediction(true).unwrap();
        verify_all(&mut ctx);
        ctx.enter_prediction().unwrap();
        assert!(ctx.will_rollback_prediction());
        assert_eq!(ctx.ticks_to_predict(), 0);
        assert_eq!(ctx.predicted_from_tick(), 14);
        assert_eq!(ctx.record_rollback(), Ok(14));
        assert_eq!(ctx.predicted_from_tick(), 14);
        ctx.enter_after_prediction().unwrap();
        assert_eq!(ctx.latest_tick_predicted(), None);
        assert_eq!(final_predicted_tick(&ctx), ctx.target_verification_tick());
        assert_eq!(final_predicted_tick(&ctx), 14);
    }

    #[test]
    fn skip_rollback_if_possible_predicts_from_previous_prediction() {
        let mut ctx = begun(10, params(10, 20, 12, 25));
        ctx.set_skip_prediction_rollback_if_possible(true).unwrap();
        verify_all(&mut ctx);
        let plan = ctx.enter_prediction().unwrap();
        assert_eq!(
            plan,
            PredictionPlan {
                will_rollback_prediction: false,
                predicted_from_tick: 20,
                ticks_to_predict: 5,
            }
        );
        finish_prediction(&mut ctx);
        assert_eq!(ctx.latest_tick_predicted(), Some(25));
        assert_eq!(ctx.latest_verified_rolled_back_to(), 10);
    }

    #[test]
    fn rollback_happens_by_default_when_a_newer_verified_state_exists() {
        let mut ctx = begun(10, params(10, 20, 12, 25));
        verify_all(&mut ctx);
        let plan = ctx.enter_prediction().unwrap();
        assert_eq!(
            plan,
            PredictionPlan {
                will_rollback_prediction: true,
                predicted_from_tick: 12,
                ticks_to_predict: 13,
            }
        );
    }

    #[test]
    fn no_rollback_when_target_equals_latest_rolled_back_to() {
        let mut ctx = begun(10, params(10, 15, 10, 18));
        assert_eq!(ctx.target_verification_tick(), 10);
        verify_all(&mut ctx);
        let plan = ctx.enter_prediction().unwrap();
        assert_eq!(
            plan,
            PredictionPlan {
                will_rollback_prediction: false,
                predicted_from_tick: 15,
                ticks_to_predict: 3,
            }
        );
    }

    #[test]
    fn no_rollback_when_target_is_behind_latest_rolled_back_to() {
        let mut ctx = begun(20, params(10, 25, 15, 30));
        assert_eq!(ctx.target_verification_tick(), 15);
        verify_all(&mut ctx);
        let plan = ctx.enter_prediction().unwrap();
        assert!(!plan.will_rollback_prediction);
        assert_eq!(plan.predicted_from_tick, 25);
        assert_eq!(plan.ticks_to_predict, 5);
    }

    #[test]
    fn record_rollback_updates_flags_and_latest_rolled_back_to() {
        let mut ctx = begun(10, params(10, 20, 12, 25));
        verify_all(&mut ctx);
        ctx.enter_prediction().unwrap();
        assert!(ctx.will_rollback_prediction());
        assert!(!ctx.has_rolled_back_prediction());
        assert_eq!(ctx.latest_verified_rolled_back_to(), 10);
        assert_eq!(ctx.record_rollback(), Ok(12));
        assert!(!ctx.will_rollback_prediction());
        assert!(ctx.has_rolled_back_prediction());
        assert_eq!(ctx.latest_verified_rolled_back_to(), 12);
        assert_eq!(ctx.predicted_from_tick(), 12);
        assert_eq!(ctx.record_rollback(), Err(ContextError::NoRollbackPending));
    }

    #[test]
    fn has_rolled_back_is_false_through_before_prediction() {
        let mut ctx = SimulatorContext::new(0);
        // A first update that rolls back, so the flag was true before the second one.
        ctx.begin_update(params(0, 0, 2, 4)).unwrap();
        verify_all(&mut ctx);
        ctx.enter_prediction().unwrap();
        finish_prediction(&mut ctx);
        assert!(ctx.has_rolled_back_prediction());

        ctx.begin_update(params(2, 4, 5, 7)).unwrap();
        assert!(!ctx.has_rolled_back_prediction());
        ctx.enter_verification().unwrap();
        assert!(!ctx.has_rolled_back_prediction());
        while ctx.ticks_pending_verification() > 0 {
            ctx.record_verified_tick().unwrap();
            assert!(!ctx.has_rolled_back_prediction());
        }
        ctx.enter_before_prediction().unwrap();
        assert!(!ctx.has_rolled_back_prediction());
        ctx.enter_prediction().unwrap();
        assert!(!ctx.has_rolled_back_prediction());
        ctx.record_rollback().unwrap();
        assert!(ctx.has_rolled_back_prediction());
    }

    #[test]
    fn ticks_to_verify_write_is_clamped_to_max_verifiable_count() {
        let mut p = params(0, 0, 10, 10);
        p.max_verified_ticks_per_update = 4;
        let mut ctx = begun(0, p);
        assert_eq!(ctx.set_ticks_to_verify(100), Ok(10));
        assert_eq!(ctx.ticks_to_verify(), 10);
        assert_eq!(ctx.set_ticks_to_verify(-5), Ok(0));
        assert_eq!(ctx.ticks_to_verify(), 0);
    }

    #[test]
    fn ticks_to_verify_write_is_clamped_to_ticks_verified() {
        let mut ctx = begun(0, params(0, 0, 10, 10));
        ctx.set_ticks_to_verify(3).unwrap();
        ctx.enter_verification().unwrap();
        ctx.record_verified_tick().unwrap();
        ctx.record_verified_tick().unwrap();
        assert_eq!(ctx.set_ticks_to_verify(1), Ok(2));
        assert_eq!(ctx.ticks_to_verify(), 2);
        assert_eq!(ctx.set_ticks_to_verify(7), Ok(7));
        assert_eq!(ctx.ticks_to_verify(), 7);
        assert_eq!(ctx.set_ticks_to_verify(2), Ok(2));
        assert_eq!(ctx.ticks_pending_verification(), 0);
        assert_eq!(ctx.enter_before_prediction(), Ok(()));
    }

    #[test]
    fn ticks_to_verify_write_has_no_effect_after_verification() {
        let mut ctx = begun(0, params(0, 0, 10, 10));
        ctx.set_ticks_to_verify(2).unwrap();
        verify_all(&mut ctx);
        let ignored = |stage| ContextError::WriteIgnored {
            field: "ticks_to_verify",
            last_writable: SimulatorStage::Verification,
            stage,
        };
        assert_eq!(
            ctx.set_ticks_to_verify(5),
            Err(ignored(SimulatorStage::BeforePrediction))
        );
        ctx.enter_prediction().unwrap();
        assert_eq!(
            ctx.set_ticks_to_verify(5),
            Err(ignored(SimulatorStage::Prediction))
        );
        ctx.record_rollback().unwrap();
        while ctx.ticks_pending_prediction() > 0 {
            ctx.record_predicted_tick().unwrap();
        }
        ctx.enter_after_prediction().unwrap();
        assert_eq!(
            ctx.set_ticks_to_verify(5),
            Err(ignored(SimulatorStage::AfterPrediction))
        );
        ctx.end_update().unwrap();
        assert_eq!(
            ctx.set_ticks_to_verify(5),
            Err(ignored(SimulatorStage::Idle))
        );
        assert_eq!(ctx.ticks_to_verify(), 2);
        assert_eq!(ctx.target_verification_tick(), 2);
    }

    #[test]
    fn ticks_to_verify_write_before_first_update_has_no_effect() {
        let mut ctx = SimulatorContext::new(0);
        assert_eq!(
            ctx.set_ticks_to_verify(1),
            Err(ContextError::WriteIgnored {
                field: "ticks_to_verify",
                last_writable: SimulatorStage::Verification,
                stage: SimulatorStage::Idle,
            })
        );
        assert_eq!(ctx, SimulatorContext::new(0));
    }

    #[test]
    fn skip_flags_are_writable_up_to_before_prediction() {
        let mut ctx = begun(10, params(10, 20, 12, 25));
        ctx.set_skip_prediction(true).unwrap();
        ctx.enter_verification().unwrap();
        ctx.set_skip_prediction(false).unwrap();
        ctx.set_skip_prediction_rollback_if_possible(true).unwrap();
        while ctx.ticks_pending_verification() > 0 {
            ctx.record_verified_tick().unwrap();
        }
        ctx.enter_before_prediction().unwrap();
        assert_eq!(ctx.set_skip_prediction(true), Ok(()));
        assert_eq!(ctx.set_skip_prediction_rollback_if_possible(false), Ok(()));
        assert!(ctx.skip_prediction());
        assert!(!ctx.skip_prediction_rollback_if_possible());
    }

    #[test]
    fn skip_flag_writes_have_no_effect_after_before_prediction() {
        let mut ctx = begun(10, params(10, 20, 12, 25));
        verify_all(&mut ctx);
        ctx.enter_prediction().unwrap();
        assert_eq!(
            ctx.set_skip_prediction(true),
            Err(ContextError::WriteIgnored {
                field: "skip_prediction",
                last_writable: SimulatorStage::BeforePrediction,
                stage: SimulatorStage::Prediction,
            })
        );
        assert_eq!(
            ctx.set_skip_prediction_rollback_if_possible(true),
            Err(ContextError::WriteIgnored {
                field: "skip_prediction_rollback_if_possible",
                last_writable: SimulatorStage::BeforePrediction,
                stage: SimulatorStage::Prediction,
            })
        );
        assert!(!ctx.skip_prediction());
        assert!(!ctx.skip_prediction_rollback_if_possible());
        assert!(ctx.will_rollback_prediction());
        assert_eq!(ctx.ticks_to_predict(), 13);

        ctx.record_rollback().unwrap();
        while ctx.ticks_pending_prediction() > 0 {
            ctx.record_predicted_tick().unwrap();
        }
        ctx.enter_after_prediction().unwrap();
        assert!(matches!(
            ctx.set_skip_prediction(true),
            Err(ContextError::WriteIgnored {
                stage: SimulatorStage::AfterPrediction,
                ..
            })
        ));
        ctx.end_update().unwrap();
        assert!(matches!(
            ctx.set_skip_prediction_rollback_if_possible(true),
            Err(ContextError::WriteIgnored {
                stage: SimulatorStage::Idle,
                ..
            })
        ));
        assert!(!ctx.skip_prediction());
        assert!(!ctx.skip_prediction_rollback_if_possible());
    }

    #[test]
    fn will_rollback_projection_follows_skip_flags_before_decision() {
        let mut ctx = begun(10, params(10, 20, 12, 25));
        assert!(ctx.will_rollback_prediction());
        assert_eq!(ctx.predicted_from_tick(), 12);
        assert_eq!(ctx.ticks_to_predict(), 13);
        ctx.set_skip_prediction_rollback_if_possible(true).unwrap();
        assert!(!ctx.will_rollback_prediction());
        assert_eq!(ctx.predicted_from_tick(), 20);
        assert_eq!(ctx.ticks_to_predict(), 5);
        ctx.set_skip_prediction_rollback_if_possible(false).unwrap();
        assert!(ctx.will_rollback_prediction());
        assert_eq!(ctx.ticks_to_predict(), 13);
        // Lowering ticks_to_verify to 0 removes the newer verified state.
        ctx.set_ticks_to_verify(0).unwrap();
        assert!(!ctx.will_rollback_prediction());
        assert_eq!(ctx.predicted_from_tick(), 20);
    }

    #[test]
    fn stalling_predicts_nothing_new() {
        // The local tick stands where the last update's prediction ended: nothing to predict.
        let mut p = params(5, 10, 5, 10);
        p.is_stalling = true;
        let mut ctx = begun(5, p);
        verify_all(&mut ctx);
        let plan = ctx.enter_prediction().unwrap();
        assert_eq!(
            plan,
            PredictionPlan {
                will_rollback_prediction: false,
                predicted_from_tick: 10,
                ticks_to_predict: 0,
            }
        );
    }

    #[test]
    fn a_rollback_while_stalling_re_predicts_up_to_the_local_tick() {
        // Issue 10 item 6: a stalling update that verifies and rolls back must not leave the
        // predicted world at the verified tick (it was at 70, the local tick).
        let mut p = params(0, 70, 5, 70);
        p.is_stalling = true;
        let mut ctx = begun(0, p);
        verify_all(&mut ctx);
        let plan = ctx.enter_prediction().unwrap();
        assert_eq!(
            plan,
            PredictionPlan {
                will_rollback_prediction: true,
                predicted_from_tick: 5,
                ticks_to_predict: 60,
            }
        );
        finish_prediction(&mut ctx);
        assert_eq!(final_predicted_tick(&ctx), 65, "capped by the window only");
        let mut p = params(0, 64, 5, 64);
        p.is_stalling = true;
        let mut ctx = begun(0, p);
        verify_all(&mut ctx);
        ctx.enter_prediction().unwrap();
        finish_prediction(&mut ctx);
        assert_eq!(final_predicted_tick(&ctx), 64, "back at the local tick");
    }

    #[test]
    fn rollback_window_caps_prediction() {
        let mut p = params(0, 0, 2, 100);
        p.rollback_window = 5;
        let mut ctx = begun(0, p);
        verify_all(&mut ctx);
        let plan = ctx.enter_prediction().unwrap();
        assert_eq!(plan.predicted_from_tick, 2);
        assert_eq!(plan.ticks_to_predict, 5);
        finish_prediction(&mut ctx);
        assert_eq!(ctx.latest_tick_predicted(), Some(7));
        assert_eq!(
            ctx.latest_tick_predicted(),
            Some(ctx.target_verification_tick() + ctx.rollback_window())
        );
    }

    #[test]
    fn max_predictable_tick_caps_prediction_inside_window() {
        let mut ctx = begun(0, params(0, 0, 2, 9));
        verify_all(&mut ctx);
        assert_eq!(ctx.enter_prediction().unwrap().ticks_to_predict, 7);
    }

    #[test]
    fn ticks_to_predict_is_never_negative() {
        // Without a rollback, predictions start at 30, past the reachable end min(20, 0 + 60).
        let mut ctx = begun(0, params(0, 30, 0, 20));
        verify_all(&mut ctx);
        let plan = ctx.enter_prediction().unwrap();
        assert!(!plan.will_rollback_prediction);
        assert_eq!(plan.predicted_from_tick, 30);
        assert_eq!(plan.ticks_to_predict, 0);
        assert_eq!(ctx.ticks_pending_prediction(), 0);
    }

    #[test]
    fn legacy_max_predicted_ticks_reads_from_skip_prediction() {
        let mut ctx = begun(10, params(10, 20, 12, 25));
        assert_eq!(ctx.max_predicted_ticks(), Some(i32::MAX));
        ctx.set_skip_prediction(true).unwrap();
        assert_eq!(ctx.max_predicted_ticks(), Some(0));
    }

    #[test]
    fn legacy_max_predicted_ticks_accepts_only_zero_and_max() {
        let mut ctx = begun(10, params(10, 20, 12, 25));
        assert_eq!(ctx.set_max_predicted_ticks(0), Ok(()));
        assert!(ctx.skip_prediction());
        assert_eq!(ctx.ticks_to_predict(), 0);
        assert_eq!(ctx.set_max_predicted_ticks(i32::MAX), Ok(()));
        assert!(!ctx.skip_prediction());
        assert_eq!(ctx.ticks_to_predict(), 13);
        for value in [1, -1, 13, i32::MAX - 1, i32::MIN] {
            assert_eq!(
                ctx.set_max_predicted_ticks(value),
                Err(ContextError::InvalidMaxPredictedTicks { value })
            );
            assert!(!ctx.skip_prediction());
        }
    }

    #[test]
    fn legacy_max_predicted_ticks_write_has_no_effect_after_before_prediction() {
        let mut ctx = begun(10, params(10, 20, 12, 25));
        verify_all(&mut ctx);
        ctx.enter_prediction().unwrap();
        assert_eq!(
            ctx.set_max_predicted_ticks(0),
            Err(ContextError::WriteIgnored {
                field: "max_predicted_ticks",
                last_writable: SimulatorStage::BeforePrediction,
                stage: SimulatorStage::Prediction,
            })
        );
        assert!(!ctx.skip_prediction());
        // An illegal value is reported as such in every stage.
        assert_eq!(
            ctx.set_max_predicted_ticks(5),
            Err(ContextError::InvalidMaxPredictedTicks { value: 5 })
        );
    }

    #[test]
    fn legacy_target_predicted_tick_accepts_only_its_two_ticks() {
        let mut ctx = begun(10, params(10, 20, 12, 25));
        assert_eq!(ctx.target_predicted_tick(), Some(25));
        assert_eq!(ctx.predicted_from_tick(), 12);
        assert_eq!(ctx.set_target_predicted_tick(12), Ok(()));
        assert!(ctx.skip_prediction());
        // Skipping also skipped the (not required) rollback: predictions now start at 20.
        assert_eq!(ctx.predicted_from_tick(), 20);
        assert_eq!(ctx.target_predicted_tick(), Some(20));
        assert_eq!(ctx.set_target_predicted_tick(25), Ok(()));
        assert!(!ctx.skip_prediction());
        assert_eq!(ctx.target_predicted_tick(), Some(25));
        for value in [13, 11, 24, 26, i32::MIN, i32::MAX] {
            assert_eq!(
                ctx.set_target_predicted_tick(value),
                Err(ContextError::InvalidTargetPredictedTick {
                    value,
                    predicted_from_tick: 12,
                    max_predictable_tick: 25,
                })
            );
            assert!(!ctx.skip_prediction());
        }
    }

    #[test]
    fn legacy_target_predicted_tick_equal_ticks_is_taken_as_max_predictable() {
        // Rollback pending (target 5 newer than 0, not required as 5 <= 8) and predicted_from == 5 ==
        // max_predictable.
        let mut ctx = begun(0, params(0, 8, 5, 5));
        assert!(ctx.will_rollback_prediction());
        assert_eq!(ctx.predicted_from_tick(), 5);
        assert_eq!(ctx.max_predictable_tick(), 5);
        assert_eq!(ctx.set_target_predicted_tick(5), Ok(()));
        assert!(!ctx.skip_prediction());
        assert!(ctx.will_rollback_prediction());

        // Also clears a flag set before.
        ctx.set_skip_prediction(true).unwrap();
        assert!(!ctx.will_rollback_prediction());
        // predicted_from is now 8; max_predictable 5 still clears the flag.
        assert_eq!(ctx.set_target_predicted_tick(5), Ok(()));
        assert!(!ctx.skip_prediction());
        assert!(ctx.will_rollback_prediction());
    }

    #[test]
    fn legacy_target_predicted_tick_write_has_no_effect_after_before_prediction() {
        let mut ctx = begun(10, params(10, 20, 12, 25));
        verify_all(&mut ctx);
        ctx.enter_prediction().unwrap();
        assert_eq!(
            ctx.set_target_predicted_tick(12),
            Err(ContextError::WriteIgnored {
                field: "target_predicted_tick",
                last_writable: SimulatorStage::BeforePrediction,
                stage: SimulatorStage::Prediction,
            })
        );
        assert!(!ctx.skip_prediction());
        assert!(ctx.will_rollback_prediction());
    }

    /// The next and latest ticks of an update begun with `params(0, 1, 2, 4)`, before any
    /// stage: two ticks to verify from 1, two to predict from 3, nothing simulated yet.
    fn assert_ticks_of_a_fresh_update(ctx: &SimulatorContext) {
        assert_eq!(ctx.ticks_to_verify(), 2);
        assert_eq!(ctx.ticks_to_predict(), 2);
        assert_eq!(ctx.next_tick_to_verify(), Some(1));
        assert_eq!(ctx.next_tick_to_predict(), Some(3));
        assert_eq!(ctx.next_tick_to_simulate(), Some(1));
        assert_eq!(ctx.latest_tick_verified(), None);
        assert_eq!(ctx.latest_tick_predicted(), None);
        assert_eq!(ctx.latest_tick_simulated(), None);
        assert_eq!(ctx.ticks_pending_verification(), 2);
        assert_eq!(ctx.ticks_pending_prediction(), 2);
        assert_eq!(ctx.ticks_pending_simulation(), 4);
        assert_eq!(ctx.ticks_simulated(), 0);
    }

    /// Verifies both ticks of that update, checking the next and latest ticks after each, and
    /// that a third is refused.
    fn verify_two_ticks(ctx: &mut SimulatorContext) {
        ctx.enter_verification().unwrap();
        assert_eq!(ctx.record_verified_tick(), Ok(1));
        assert_eq!(ctx.latest_tick_verified(), Some(1));
        assert_eq!(ctx.latest_tick_simulated(), Some(1));
        assert_eq!(ctx.next_tick_to_verify(), Some(2));
        assert_eq!(ctx.next_tick_to_simulate(), Some(2));
        assert_eq!(ctx.ticks_pending_simulation(), 3);
        assert_eq!(ctx.ticks_simulated(), 1);
        assert_eq!(ctx.record_verified_tick(), Ok(2));
        assert_eq!(ctx.next_tick_to_verify(), None);
        assert_eq!(ctx.next_tick_to_simulate(), Some(3));
        assert_eq!(ctx.ticks_pending_verification(), 0);
        assert_eq!(
            ctx.record_verified_tick(),
            Err(ContextError::VerificationExhausted { ticks_to_verify: 2 })
        );
    }

    /// Enters prediction of that update (a rollback to 2 first) and predicts ticks 3 and 4,
    /// checking the next and latest ticks after each, and that a third is refused.
    fn roll_back_and_predict_two_ticks(ctx: &mut SimulatorContext) {
        ctx.enter_before_prediction().unwrap();
        let plan = ctx.enter_prediction().unwrap();
        assert_eq!(
            plan,
            PredictionPlan {
                will_rollback_prediction: true,
                predicted_from_tick: 2,
                ticks_to_predict: 2,
            }
        );
        assert_eq!(
            ctx.record_predicted_tick(),
            Err(ContextError::RollbackPending {
                target_verification_tick: 2
            })
        );
        assert_eq!(ctx.record_rollback(), Ok(2));
        assert_eq!(ctx.next_tick_to_predict(), Some(3));
        assert_eq!(ctx.record_predicted_tick(), Ok(3));
        assert_eq!(ctx.latest_tick_predicted(), Some(3));
        assert_eq!(ctx.latest_tick_simulated(), Some(3));
        assert_eq!(ctx.latest_tick_verified(), Some(2));
        assert_eq!(ctx.next_tick_to_predict(), Some(4));
        assert_eq!(ctx.record_predicted_tick(), Ok(4));
        assert_eq!(ctx.next_tick_to_predict(), None);
        assert_eq!(ctx.next_tick_to_simulate(), None);
        assert_eq!(ctx.ticks_pending_simulation(), 0);
        assert_eq!(ctx.ticks_simulated(), 4);
        assert_eq!(
            ctx.record_predicted_tick(),
            Err(ContextError::PredictionExhausted {
                ticks_to_predict: 2
            })
        );
    }

    #[test]
    fn next_and_latest_ticks_across_an_update() {
        let mut ctx = SimulatorContext::new(0);
        ctx.begin_update(params(0, 1, 2, 4)).unwrap();
        assert_ticks_of_a_fresh_update(&ctx);
        verify_two_ticks(&mut ctx);
        roll_back_and_predict_two_ticks(&mut ctx);

        ctx.enter_after_prediction().unwrap();
        ctx.end_update().unwrap();
        assert_eq!(ctx.stage(), SimulatorStage::Idle);
        assert_eq!(ctx.latest_tick_simulated(), Some(4));

        ctx.begin_update(params(2, 4, 3, 6)).unwrap();
        assert_eq!(ctx.latest_tick_verified(), None);
        assert_eq!(ctx.latest_tick_predicted(), None);
        assert_eq!(ctx.latest_tick_simulated(), None);
        assert_eq!(ctx.next_tick_to_verify(), Some(3));
        // Target 3 is newer than 2 (not required: 3 <= 4): rollback to 3, predict 4..=6.
        assert_eq!(ctx.next_tick_to_predict(), Some(4));
    }

    #[test]
    fn next_tick_to_simulate_falls_back_to_prediction_without_verification() {
        let ctx = begun(10, params(10, 15, 10, 18));
        assert_eq!(ctx.next_tick_to_verify(), None);
        assert_eq!(ctx.next_tick_to_predict(), Some(16));
        assert_eq!(ctx.next_tick_to_simulate(), Some(16));
    }

    #[test]
    fn lifecycle_calls_out_of_order_are_wrong_stage_errors() {
        let mut ctx = SimulatorContext::new(0);
        let wrong = |operation, expected, actual| ContextError::WrongStage {
            operation,
            expected,
            actual,
        };
        use SimulatorStage::*;
        assert_eq!(
            ctx.enter_verification(),
            Err(wrong("enter_verification", BeforeVerification, Idle))
        );
        assert_eq!(
            ctx.record_verified_tick(),
            Err(wrong("record_verified_tick", Verification, Idle))
        );
        assert_eq!(
            ctx.enter_before_prediction(),
            Err(wrong("enter_before_prediction", Verification, Idle))
        );
        assert_eq!(
            ctx.enter_prediction(),
            Err(wrong("enter_prediction", BeforePrediction, Idle))
        );
        assert_eq!(
            ctx.record_rollback(),
            Err(wrong("record_rollback", Prediction, Idle))
        );
        assert_eq!(
            ctx.record_predicted_tick(),
            Err(wrong("record_predicted_tick", Prediction, Idle))
        );
        assert_eq!(
            ctx.enter_after_prediction(),
            Err(wrong("enter_after_prediction", Prediction, Idle))
        );
        assert_eq!(
            ctx.end_update(),
            Err(wrong("end_update", AfterPrediction, Idle))
        );
        assert_eq!(ctx, SimulatorContext::new(0));

        ctx.begin_update(params(0, 0, 1, 1)).unwrap();
        assert_eq!(
            ctx.begin_update(params(0, 0, 1, 1)),
            Err(wrong("begin_update", Idle, BeforeVerification))
        );
        assert_eq!(
            ctx.enter_prediction(),
            Err(wrong(
                "enter_prediction",
                BeforePrediction,
                BeforeVerification
            ))
        );
    }

    #[test]
    fn leaving_a_stage_with_pending_ticks_is_an_error() {
        let mut ctx = begun(0, params(0, 0, 3, 5));
        ctx.enter_verification().unwrap();
        ctx.record_verified_tick().unwrap();
        assert_eq!(
            ctx.enter_before_prediction(),
            Err(ContextError::VerificationIncomplete {
                ticks_verified: 1,
                ticks_to_verify: 3,
            })
        );
        assert_eq!(ctx.stage(), SimulatorStage::Verification);
        ctx.set_ticks_to_verify(1).unwrap();
        ctx.enter_before_prediction().unwrap();
        ctx.enter_prediction().unwrap();
        assert_eq!(
            ctx.enter_after_prediction(),
            Err(ContextError::RollbackPending {
                target_verification_tick: 1
            })
        );
        ctx.record_rollback().unwrap();
        assert_eq!(ctx.ticks_to_predict(), 4);
        ctx.record_predicted_tick().unwrap();
        assert_eq!(
            ctx.enter_after_prediction(),
            Err(ContextError::PredictionIncomplete {
                ticks_predicted: 1,
                ticks_to_predict: 4,
            })
        );
        assert_eq!(ctx.stage(), SimulatorStage::Prediction);
    }

    #[test]
    fn begin_update_rejects_negative_limits_and_leaves_context_unchanged() {
        let mut ctx = SimulatorContext::new(0);
        let mut p = params(0, 0, 1, 1);
        p.rollback_window = -1;
        assert_eq!(
            ctx.begin_update(p),
            Err(ContextError::NegativeParam {
                field: "rollback_window",
                value: -1,
            })
        );
        let mut p = params(0, 0, 1, 1);
        p.max_verified_ticks_per_update = -3;
        assert_eq!(
            ctx.begin_update(p),
            Err(ContextError::NegativeParam {
                field: "max_verified_ticks_per_update",
                value: -3,
            })
        );
        assert_eq!(ctx, SimulatorContext::new(0));
    }

    #[test]
    fn abort_update_returns_to_idle_and_allows_the_next_update() {
        let mut ctx = begun(0, params(0, 0, 3, 5));
        ctx.enter_verification().unwrap();
        ctx.record_verified_tick().unwrap();
        ctx.abort_update();
        assert_eq!(ctx.stage(), SimulatorStage::Idle);
        assert_eq!(ctx.latest_verified_rolled_back_to(), 0);
        assert_eq!(ctx.begin_update(params(1, 1, 3, 5)), Ok(()));
        assert_eq!(ctx.ticks_to_verify(), 2);
    }

    #[test]
    fn would_stall_only_past_max_verifiable_plus_window() {
        assert!(!would_stall(60, 0, 60));
        assert!(would_stall(61, 0, 60));
        assert!(!would_stall(5, 5, 0));
        assert!(would_stall(6, 5, 0));
        // Saturating: no overflow near i32::MAX.
        assert!(!would_stall(i32::MAX, i32::MAX, 60));
        assert!(would_stall(i32::MAX, i32::MAX - 1, 0));
    }

    #[test]
    fn extreme_ticks_do_not_overflow() {
        let mut ctx = begun(
            i32::MIN,
            UpdateParams {
                verified_tick: i32::MIN,
                predicted_tick: i32::MIN,
                max_verifiable_tick: i32::MAX,
                max_predictable_tick: i32::MAX,
                rollback_window: i32::MAX,
                max_verified_ticks_per_update: i32::MAX,
                is_stalling: false,
            },
        );
        assert_eq!(ctx.max_ticks_to_verify(), i32::MAX);
        assert_eq!(ctx.ticks_to_verify(), i32::MAX);
        assert_eq!(ctx.target_verification_tick(), -1);
        assert_eq!(ctx.ticks_to_predict(), i32::MAX);
        assert_eq!(ctx.ticks_pending_simulation(), i32::MAX);
        assert_eq!(ctx.set_ticks_to_verify(i32::MIN), Ok(0));
    }

    #[test]
    fn context_is_a_reflectable_resource() {
        let mut world = World::new();
        let mut ctx = SimulatorContext::new(0);
        ctx.begin_update(params(0, 0, 3, 5)).unwrap();
        world.insert_resource(ctx.clone());
        assert_eq!(world.resource::<SimulatorContext>(), &ctx);
        assert_eq!(ctx.path::<i32>("ticks_to_verify"), Ok(&3));
        assert_eq!(
            ctx.path::<SimulatorStage>("stage"),
            Ok(&SimulatorStage::BeforeVerification)
        );
    }

    #[test]
    fn errors_display_their_values() {
        assert_eq!(
            ContextError::InvalidMaxPredictedTicks { value: 7 }.to_string(),
            "max_predicted_ticks accepts only 0 or i32::MAX, got 7"
        );
        assert_eq!(
            ContextError::InvalidTargetPredictedTick {
                value: 3,
                predicted_from_tick: 1,
                max_predictable_tick: 9,
            }
            .to_string(),
            "target_predicted_tick accepts only max_predictable_tick (9) or predicted_from_tick (1), got 3"
        );
    }

    /// One hook action a test applies during an update.
    #[derive(Debug, Clone, Copy)]
    enum Write {
        TicksToVerify(i32),
        SkipPrediction(bool),
        SkipRollback(bool),
        MaxPredictedTicks(i32),
        TargetPredictedTick(i32),
    }

    fn apply(ctx: &mut SimulatorContext, write: Write) {
        // Errors (ignored writes, illegal legacy values) are part of the contract; the context must stay
        // consistent whatever they are.
        let _ = match write {
            Write::TicksToVerify(n) => ctx.set_ticks_to_verify(n).map(|_| ()),
            Write::SkipPrediction(b) => ctx.set_skip_prediction(b),
            Write::SkipRollback(b) => ctx.set_skip_prediction_rollback_if_possible(b),
            Write::MaxPredictedTicks(v) => ctx.set_max_predicted_ticks(v),
            Write::TargetPredictedTick(t) => ctx.set_target_predicted_tick(t),
        };
    }

    fn write_strategy() -> impl Strategy<Value = Write> {
        prop_oneof![
            (-5..40i32).prop_map(Write::TicksToVerify),
            any::<bool>().prop_map(Write::SkipPrediction),
            any::<bool>().prop_map(Write::SkipRollback),
            prop_oneof![Just(0), Just(i32::MAX), -3..3i32].prop_map(Write::MaxPredictedTicks),
            (-5..120i32).prop_map(Write::TargetPredictedTick),
        ]
    }

    fn check_counters(ctx: &SimulatorContext) -> Result<(), TestCaseError> {
        prop_assert!(0 <= ctx.ticks_verified());
        prop_assert!(ctx.ticks_verified() <= ctx.ticks_to_verify());
        prop_assert!(ctx.ticks_to_verify() <= ctx.max_ticks_to_verify());
        prop_assert!(0 <= ctx.ticks_predicted());
        prop_assert!(ctx.ticks_predicted() <= ctx.ticks_to_predict());
        Ok(())
    }

    /// Applies the writes of `writes` scheduled at hook point `at` (0: before verification,
    /// 1: verification, 2: before prediction, 3: prediction).
    fn run_hooks(ctx: &mut SimulatorContext, writes: &[(usize, Write)], at: usize) {
        for &(when, write) in writes {
            if when == at {
                apply(ctx, write);
            }
        }
    }

    /// Takes a begun update to before prediction, applying the writes of hook points 0 to 2 and
    /// verifying every pending tick; checks the counters after verification.
    fn verify_with_hooks(
        ctx: &mut SimulatorContext,
        writes: &[(usize, Write)],
    ) -> Result<(), TestCaseError> {
        run_hooks(ctx, writes, 0);
        ctx.enter_verification().unwrap();
        run_hooks(ctx, writes, 1);
        while ctx.ticks_pending_verification() > 0 {
            ctx.record_verified_tick().unwrap();
        }
        check_counters(ctx)?;
        ctx.enter_before_prediction().unwrap();
        run_hooks(ctx, writes, 2);
        Ok(())
    }

    /// Enters prediction (the writes of hook point 3 after it) and checks the plan against the
    /// WillRollbackPrediction, PredictedFromTick and TicksToPredict rules for an update begun
    /// with `p` on a context last rolled back to `latest_rb`; then finishes prediction and
    /// checks where it ended.
    fn predict_and_check(
        ctx: &mut SimulatorContext,
        p: &UpdateParams,
        latest_rb: Tick,
        writes: &[(usize, Write)],
    ) -> Result<(), TestCaseError> {
        let skip = ctx.skip_prediction();
        let skip_rb = ctx.skip_prediction_rollback_if_possible();
        let target = ctx.target_verification_tick();
        let required = ctx.is_rollback_required();
        let plan = ctx.enter_prediction().unwrap();
        run_hooks(ctx, writes, 3);
        prop_assert_eq!(ctx.skip_prediction(), skip);
        prop_assert_eq!(ctx.skip_prediction_rollback_if_possible(), skip_rb);

        // WillRollbackPrediction rule.
        let expected_rollback = required || (target > latest_rb && !skip && !skip_rb);
        prop_assert_eq!(plan.will_rollback_prediction, expected_rollback);
        // PredictedFromTick rule.
        let from = if expected_rollback {
            target
        } else {
            p.predicted_tick
        };
        prop_assert_eq!(plan.predicted_from_tick, from);
        // TicksToPredict rule.
        let expected_ticks = if skip {
            0
        } else {
            (p.max_predictable_tick.min(target + p.rollback_window) - from).max(0)
        };
        prop_assert_eq!(plan.ticks_to_predict, expected_ticks);

        finish_prediction(ctx);
        check_counters(ctx)?;
        let end = final_predicted_tick(ctx);
        // The predicted state never trails the verified state.
        prop_assert!(end >= target);
        prop_assert_eq!(ctx.has_rolled_back_prediction(), expected_rollback);
        prop_assert_eq!(
            ctx.latest_verified_rolled_back_to(),
            if expected_rollback { target } else { latest_rb }
        );
        if skip {
            prop_assert_eq!(end, from);
        }
        Ok(())
    }

    proptest! {
        /// Full updates with random limits and random hook writes in every stage keep the context rules.
        #[test]
        fn random_updates_keep_the_rules(
            latest_rb in 0..20i32,
            verified_ahead in 0..10i32,
            predicted_offset in -10..40i32,
            verifiable_ahead in -5..30i32,
            predictable_ahead in -5..90i32,
            window in 0..40i32,
            per_update in 0..25i32,
            stalling in any::<bool>(),
            writes in proptest::collection::vec((0..4usize, write_strategy()), 0..12),
        ) {
            let verified = latest_rb + verified_ahead;
            let predicted = (verified + predicted_offset).max(latest_rb);
            let p = UpdateParams {
                verified_tick: verified,
                predicted_tick: predicted,
                max_verifiable_tick: verified + verifiable_ahead,
                max_predictable_tick: verified + predictable_ahead,
                rollback_window: window,
                max_verified_ticks_per_update: per_update,
                is_stalling: stalling,
            };
            let mut ctx = SimulatorContext::new(latest_rb);
            ctx.begin_update(p).unwrap();
            prop_assert_eq!(
                ctx.ticks_to_verify(),
                (p.max_verifiable_tick - verified).min(per_update).max(0)
            );
            verify_with_hooks(&mut ctx, &writes)?;
            prop_assert!(!ctx.has_rolled_back_prediction());
            predict_and_check(&mut ctx, &p, latest_rb, &writes)?;
        }

        /// Random lifecycle calls and writes in any order never panic and never break the counters.
        #[test]
        fn random_call_orders_never_break_invariants(
            ops in proptest::collection::vec((0..10usize, write_strategy()), 0..60),
            stalling in any::<bool>(),
        ) {
            let mut ctx = SimulatorContext::new(0);
            let mut verified = 0;
            let mut predicted = 0;
            for (op, write) in ops {
                let _ = match op {
                    0 => ctx.begin_update(UpdateParams {
                        verified_tick: verified,
                        predicted_tick: predicted,
                        max_verifiable_tick: verified + 4,
                        max_predictable_tick: verified + 9,
                        rollback_window: 6,
                        max_verified_ticks_per_update: 3,
                        is_stalling: stalling,
                    }),
                    1 => ctx.enter_verification(),
                    2 => ctx.record_verified_tick().map(|t| verified = t),
                    3 => ctx.enter_before_prediction(),
                    4 => ctx.enter_prediction().map(|plan| predicted = plan.predicted_from_tick),
                    5 => ctx.record_rollback().map(|t| predicted = t),
                    6 => ctx.record_predicted_tick().map(|t| predicted = t),
                    7 => ctx.enter_after_prediction(),
                    8 => ctx.end_update(),
                    _ => {
                        apply(&mut ctx, write);
                        Ok(())
                    }
                };
                check_counters(&ctx)?;
                prop_assert!(ctx.ticks_to_predict() >= 0);
                if matches!(
                    ctx.stage(),
                    SimulatorStage::BeforeVerification
                        | SimulatorStage::Verification
                        | SimulatorStage::BeforePrediction
                ) {
                    prop_assert!(!ctx.has_rolled_back_prediction());
                }
                if ctx.is_rollback_required() && ctx.stage() == SimulatorStage::BeforePrediction {
                    prop_assert!(ctx.will_rollback_prediction());
                }
            }
        }
    }
}
