//! What a session reports: [`SessionStats`] and the messages it writes.

use bevy::prelude::*;

use crate::checksum::TickChecksum;
use crate::source::{RelayClientStats, StallReason};
use crate::tick::Tick;

/// Counters of the session, updated every session update (main-app resource).
#[derive(Resource, Debug, Clone, Default, PartialEq, Reflect)]
#[reflect(Resource, Debug, Default, PartialEq, Clone)]
pub struct SessionStats {
    /// Last tick whose local inputs were polled.
    pub local_tick: Tick,
    /// Tick of the verified world.
    pub verified_tick: Tick,
    /// Tick of the predicted world.
    pub predicted_tick: Tick,
    /// Verified ticks simulated.
    pub ticks_verified: u64,
    /// Predicted ticks simulated (re-simulations included).
    pub ticks_predicted: u64,
    /// Rollbacks ([rollback counters](crate::rules#rollback-counters)): the predicted world's
    /// state was discarded, the verified state restored into it and the ticks after the
    /// verified tick predicted again. An update at zero latency whose predictions held counts
    /// none (that is a [`shared_advances`](Self::shared_advances)); nor does an update that
    /// skipped the rollback ([`skipped_rollbacks`](Self::skipped_rollbacks)).
    pub rollbacks: u64,
    /// Of the rollbacks, those performed although skipping had been requested: every
    /// prediction held, and an
    /// [`IsRollbackRequired` override](crate::rules#isrollbackrequired-overrides-the-skip-flags)
    /// forced the restore.
    pub forced_rollbacks: u64,
    /// Updates in which the predicted world took the verified timeline without a copy or a
    /// simulated tick: every prediction of the predicted timeline held, so the predicted world
    /// shares the verified world's state until it must predict again
    /// ([the shared timeline](crate::rules#the-predicted-world-shares-a-verified-timeline)).
    /// Not rollbacks: nothing predicted was discarded. At zero latency every update is one.
    pub shared_advances: u64,
    /// Of the rollbacks, those that replaced a predicted timeline the verified one contradicts:
    /// a tick of it had been simulated with inputs other than those now known (or it diverged
    /// earlier without a rollback). Only these can change what the predicted world shows; the
    /// others (forced rollbacks, or rollbacks with `skip_rollback_when_predictions_hold` off, of
    /// predictions that held) reproduce the same states, so
    /// [visual smoothing](crate::rules#visual-smoothing) takes only these as corrections.
    pub corrective_rollbacks: u64,
    /// Verified ticks the predicted world simulated on confirmed inputs to catch up with the
    /// verified world when it stopped sharing its state (at most one per catch-up).
    pub catch_up_ticks: u64,
    /// Copies of the verified world made when the predicted world stopped sharing its state
    /// and was too far behind to catch up by simulating.
    pub catch_up_copies: u64,
    /// Session updates that verified ticks but skipped the rollback because every prediction
    /// of the current timeline held.
    pub skipped_rollbacks: u64,
    /// Predicted ticks simulated again after a rollback (tick ≤ the highest tick predicted before).
    pub resimulated_ticks: u64,
    /// Inputs whose prediction differed from the confirmed value.
    pub mispredicted_inputs: u64,
    /// Session updates that stalled (see `SimulatorContext::is_stalling`).
    pub stalls: u64,
    /// Deepest prediction (predicted tick − verified tick) seen.
    pub max_prediction_depth: i32,
    /// Predicted ticks compared with verification (inputs turned out right); debug aid.
    pub resim_ticks_checked: u64,
    /// Of those, ticks whose predicted state equalled the verified state (and neither world
    /// held state a rollback does not restore).
    pub resim_ticks_matching: u64,
    /// Of the checked ticks, those that failed because a world held state a rollback does not
    /// restore ([`MismatchCause::UncoveredState`](crate::MismatchCause::UncoveredState)).
    pub resim_ticks_uncovered: u64,
    /// The latest verified checksum.
    pub last_checksum: Option<TickChecksum>,
    /// The newest verified checksums recorded, oldest first: at most
    /// [`SessionConfig::checksum_history`](crate::SessionConfig::checksum_history) (default
    /// 4,096); once full, the oldest eighth is dropped at a time
    /// ([bounded histories](crate::rules#every-per-tick-history-is-bounded)).
    pub checksum_history: Vec<TickChecksum>,
    /// Entities rollbacks spawned back into the predicted world.
    pub rollback_restored_entities: u64,
    /// Entities rollbacks parked (they existed only in a mispredicted timeline).
    pub rollback_parked_entities: u64,
    /// Component types on simulation entities that rollback does not restore.
    pub unregistered_components: Vec<String>,
    /// Entities without `SimEntity` (and not `NotSimulated`) in the simulation worlds at the
    /// last session update, both worlds together (0 in a correct game).
    pub unsimulated_entities: u64,
    /// [`UnsimulatedEntity`](crate::UnsimulatedEntity) messages written.
    pub unsimulated_entity_reports: u64,
    /// Registered types the full prediction check cannot compare (each once).
    pub unchecked_types: Vec<String>,
    /// Registration errors written as [`RollbackSetupFailed`](crate::RollbackSetupFailed).
    pub rollback_setup_errors: u64,
    /// [`DeterminismWarning`](crate::DeterminismWarning)s reported by the determinism guard
    /// (0 unless [`DebugConfig::determinism_guard`](crate::DebugConfig::determinism_guard) is on).
    pub determinism_warnings: u64,
    /// The client side of a networked session (`None` in a local session).
    pub network: Option<RelayClientStats>,
    /// Frames written by the [`ReplayRecorder`](crate::ReplayRecorder) (0 without one).
    pub replay_frames_recorded: u64,
    /// Snapshots written by the replay recorder.
    pub replay_snapshots_recorded: u64,
    /// Replay recordings stopped by an error (each also a
    /// [`ReplayWriteFailed`](crate::ReplayWriteFailed) message).
    pub replay_write_errors: u64,
}

/// Appends `checksum` to `history`, keeping at most `bound` entries: when the history is full,
/// the oldest eighth (at least one) is dropped first, so a push moves the kept entries only once
/// every `bound / 8` pushes. `bound == 0` keeps nothing.
pub(crate) fn push_bounded(history: &mut Vec<TickChecksum>, checksum: TickChecksum, bound: usize) {
    if bound == 0 {
        history.clear();
        return;
    }
    if history.len() >= bound {
        let drop = (history.len() + 1 - bound).max(bound / 8);
        history.drain(..drop.min(history.len()));
    }
    history.push(checksum);
}

/// A checksum was recorded on a verified tick.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChecksumRecorded(pub TickChecksum);

/// A networked session stopped verifying: no new verifiable tick for more than
/// [`STALL_AFTER`](crate::STALL_AFTER) while running ([stalls are
/// reported](crate::rules#stalls-are-reported)). [`SessionResumed`] follows when it recovers.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionStalled {
    /// The last verifiable tick before the stall.
    pub since_tick: Tick,
    /// Why.
    pub reason: StallReason,
}

/// A stalled networked session verifies again.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionResumed {
    /// The verifiable tick at recovery.
    pub tick: Tick,
    /// How long the stall lasted, in ms.
    pub stalled_ms: u64,
}

/// The relay no longer holds the confirmed inputs this client misses: it cannot verify on
/// without a snapshot.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeedsSnapshot {
    /// The oldest tick whose confirmed inputs the relay still holds.
    pub oldest_available: Tick,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(tick: Tick) -> TickChecksum {
        TickChecksum {
            tick,
            checksum: tick as u64,
        }
    }

    #[test]
    fn the_checksum_history_stays_within_its_bound_over_a_long_session() {
        let bound = 4_096;
        let mut history = Vec::new();
        let mut longest = 0;
        // 100 times the bound: 409,600 checksums, 1.8 hours at one a tick at 64 ticks/s.
        for tick in 1..=100 * bound as Tick {
            push_bounded(&mut history, at(tick), bound);
            longest = longest.max(history.len());
        }
        assert_eq!(longest, bound);
        assert!(history.len() > bound - bound / 8, "{}", history.len());
        assert_eq!(history.last(), Some(&at(100 * bound as Tick)));
        assert!(
            history.windows(2).all(|w| w[1].tick == w[0].tick + 1),
            "the newest, in order, without gaps"
        );
        assert!(history.capacity() <= 2 * bound, "{}", history.capacity());
    }

    #[test]
    fn a_small_or_zero_bound_is_honoured() {
        let mut history = Vec::new();
        for tick in 1..=10 {
            push_bounded(&mut history, at(tick), 3);
            assert!(history.len() <= 3);
        }
        assert_eq!(history, vec![at(8), at(9), at(10)]);
        push_bounded(&mut history, at(11), 0);
        assert!(history.is_empty());
    }
}
