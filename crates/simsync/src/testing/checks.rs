//! What [`RelayPeers`](super::RelayPeers) checks on every client besides cross-peer agreement
//! ([`HarnessChecks`], all on by default), and the forced rollback ([`ForcedRollbackPlugin`]):
//! every session update rolls the predicted world back a fixed number of ticks and simulates
//! them again, so the prediction check compares re-simulated ticks with verified ones whatever
//! the link does.

use bevy::prelude::*;
use simsync_deterministic::{
    BeforePrediction, BeforeVerification, SessionConfig, SessionMode, SimulatorContext, Tick,
};

/// Ticks the predicted world is rolled back and simulated again every update by default
/// ([`HarnessChecks::forced_rollback`]): two, as GGRS's `SyncTestSession` (one would not see
/// state the rollback misses, see [`ForcedRollbackPlugin`]).
pub const DEFAULT_FORCED_ROLLBACK: u32 = 2;

/// Session updates from one forced rollback to the next by default
/// ([`HarnessChecks::forced_rollback_every`]): 8, an eighth of a second at 64 ticks/s. A forced
/// rollback re-simulates every predicted tick (the whole prediction depth, 8–10 ticks over a
/// 40 ms link), each compared by the prediction check: doing it every update made the
/// project's network tests five times as slow.
pub const DEFAULT_FORCED_ROLLBACK_EVERY: u32 = 8;

/// The checks the harness turns on in every client's session, on top of what the game's plugin
/// configures: a game whose simulation reads state that is not rolled back (an unregistered
/// resource, a `Local`, the wall clock) fails [`run_until_verified`](super::RelayPeers::run_until_verified)
/// with a prediction mismatch naming the first difference, even when its clients agree with
/// each other. Given to [`RelayPeersBuilder::checks`](super::RelayPeersBuilder::checks).
///
/// Each check only turns a setting on: [`HarnessChecks::OFF`] leaves the game's configuration
/// as its plugin made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect)]
pub struct HarnessChecks {
    /// Turns on `SessionConfig::verify_predictions`: every predicted tick whose inputs turned
    /// out right is compared with the verified state of the same tick (default on; costs a
    /// state hash per predicted tick).
    pub verify_predictions: bool,
    /// Sets `SessionConfig::checksum_interval` to 1: every verified tick is checksummed, sent to
    /// the relay and compared across clients, so a desync is caught at its tick (default on;
    /// off, the game's interval stays, 60 ticks by default).
    pub checksum_every_tick: bool,
    /// Ticks verification is held behind the last predictable tick, so that a forced rollback
    /// goes back at least this far ([`ForcedRollbackPlugin`]; default
    /// [`DEFAULT_FORCED_ROLLBACK`], 0 = no forced rollback). Used only by a predicted session
    /// with a rollback window; capped at the window.
    pub forced_rollback: u32,
    /// Session updates from one forced rollback to the next (default
    /// [`DEFAULT_FORCED_ROLLBACK_EVERY`]; 1 = every update, as GGRS's `SyncTestSession`). Each
    /// costs a copy of the verified world and a re-simulation of every predicted tick.
    pub forced_rollback_every: u32,
}

impl HarnessChecks {
    /// Every check on (the default): prediction checks, a checksum every tick, a forced
    /// rollback of [`DEFAULT_FORCED_ROLLBACK`] ticks.
    pub const ON: Self = Self {
        verify_predictions: true,
        checksum_every_tick: true,
        forced_rollback: DEFAULT_FORCED_ROLLBACK,
        forced_rollback_every: DEFAULT_FORCED_ROLLBACK_EVERY,
    };

    /// No check: every client runs its session as the game's plugin configured it (checksums
    /// every `checksum_interval` ticks, prediction checks only if the game turned them on).
    pub const OFF: Self = Self {
        verify_predictions: false,
        checksum_every_tick: false,
        forced_rollback: 0,
        forced_rollback_every: DEFAULT_FORCED_ROLLBACK_EVERY,
    };

    /// The forced rollback distance a session configured as `config` gets: `forced_rollback`
    /// capped at the rollback window; 0 for a lockstep session or a window of 0 (nothing is
    /// predicted, so nothing can be rolled back).
    pub fn forced_rollback_for(&self, config: &SessionConfig) -> u32 {
        if config.mode == SessionMode::Lockstep {
            return 0;
        }
        self.forced_rollback.min(config.rollback_window)
    }

    /// Turns on, in `config`, what these checks need: `verify_predictions` and a checksum every
    /// tick. Settings a check does not need are left as they are (the forced rollback is a
    /// plugin, [`ForcedRollbackPlugin`]).
    pub fn apply(&self, config: &mut SessionConfig) {
        if self.verify_predictions {
            config.verify_predictions = true;
        }
        if self.checksum_every_tick {
            config.checksum_interval = 1;
        }
    }
}

impl Default for HarnessChecks {
    fn default() -> Self {
        Self::ON
    }
}

/// How many ticks a session update may verify when verification must stay `distance` ticks
/// behind the last predictable tick: `ticks_to_verify` cut to `max_predictable_tick − distance
/// − verified_from_tick` (never below 0). Unchanged when `distance` is 0 or the local clock
/// stands still (`clock_moved` false: a stall, a session end), so a session whose clock stopped
/// still verifies up to its last tick.
pub fn held_back_ticks_to_verify(
    ticks_to_verify: i32,
    max_predictable_tick: Tick,
    verified_from_tick: Tick,
    distance: u32,
    clock_moved: bool,
) -> i32 {
    if distance == 0 || !clock_moved {
        return ticks_to_verify;
    }
    let distance = Tick::try_from(distance).unwrap_or(Tick::MAX);
    let allowed = max_predictable_tick
        .saturating_sub(distance)
        .saturating_sub(verified_from_tick)
        .max(0);
    ticks_to_verify.min(allowed)
}

/// Whether session update number `update` (counted from 0) forces a rollback when one is forced
/// every `every` updates (0 and 1: every update).
pub fn is_forced_rollback_update(update: u64, every: u32) -> bool {
    every <= 1 || update.is_multiple_of(u64::from(every))
}

/// A forced rollback in the spirit of GGRS's `SyncTestSession`, for a predicted session: every
/// session update verifies only up to `distance` ticks behind the last predictable tick (a
/// [`BeforeVerification`] system cuts `ticks_to_verify`), and every `every` updates it rolls
/// back even when every prediction held (a [`BeforePrediction`] system withdraws the request to
/// skip the rollback), so the predicted world is set back to the verified state and simulates
/// at least the last `distance` ticks again. With `verify_predictions` on, each re-simulated tick
/// is then compared with the verified state of the same tick: state the rollback does not
/// restore (an unregistered resource that changed in the ticks simulated since) makes them
/// differ. A distance of 1 would re-simulate only the tick the predicted world was at, so such
/// state would already be up to date: give 2 or more.
///
/// While the local clock stands still (a stall, a session end) verification is not held back.
/// Added by [`RelayPeers`](super::RelayPeers) to every client ([`HarnessChecks`]); a test of one
/// App adds it after its `DeterministicPlugin`, with `verify_predictions` on
/// ([`HarnessChecks::apply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForcedRollbackPlugin {
    /// Ticks verification is held behind the last predictable tick: the least a forced
    /// rollback goes back.
    pub distance: u32,
    /// Updates from one forced rollback to the next (0 and 1: every update).
    pub every: u32,
}

impl Plugin for ForcedRollbackPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(ForcedRollback {
            distance: self.distance,
            every: self.every,
            updates: 0,
            last_predictable: None,
        })
        .add_systems(BeforeVerification, hold_back_verification)
        .add_systems(BeforePrediction, always_roll_back);
    }
}

/// The forced rollback's distance and the last predictable tick it saw.
#[derive(Resource, Debug, Clone, Copy)]
struct ForcedRollback {
    distance: u32,
    every: u32,
    /// Session updates seen.
    updates: u64,
    last_predictable: Option<Tick>,
}

fn hold_back_verification(
    mut forced: ResMut<ForcedRollback>,
    mut context: ResMut<SimulatorContext>,
) {
    let predictable = context.max_predictable_tick();
    let clock_moved =
        forced.last_predictable.is_some_and(|t| predictable > t) && !context.is_stalling();
    forced.last_predictable = Some(predictable);
    forced.updates += 1;
    let ticks = held_back_ticks_to_verify(
        context.ticks_to_verify(),
        predictable,
        context.verified_from_tick(),
        forced.distance,
        clock_moved,
    );
    if ticks < context.ticks_to_verify() {
        // Cannot fail in BeforeVerification; the value is clamped to what is verifiable.
        let _ = context.set_ticks_to_verify(ticks);
    }
}

fn always_roll_back(forced: Res<ForcedRollback>, mut context: ResMut<SimulatorContext>) {
    if is_forced_rollback_update(forced.updates, forced.every)
        && context.skip_prediction_rollback_if_possible()
    {
        // A request the session made because every prediction held; cannot fail here.
        let _ = context.set_skip_prediction_rollback_if_possible(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verification_stays_distance_ticks_behind_the_predictable_tick() {
        // Predictable 100, verified 90, 10 verifiable: only up to tick 98 with distance 2.
        assert_eq!(held_back_ticks_to_verify(10, 100, 90, 2, true), 8);
        // Already far enough behind: unchanged.
        assert_eq!(held_back_ticks_to_verify(3, 100, 90, 2, true), 3);
    }

    #[test]
    fn verification_is_never_cut_below_zero() {
        assert_eq!(held_back_ticks_to_verify(1, 1, 0, 2, true), 0);
        assert_eq!(held_back_ticks_to_verify(5, 0, 10, u32::MAX, true), 0);
    }

    #[test]
    fn nothing_is_held_back_while_the_clock_stands_still_or_when_off() {
        assert_eq!(held_back_ticks_to_verify(10, 100, 90, 2, false), 10);
        assert_eq!(held_back_ticks_to_verify(10, 100, 90, 0, true), 10);
    }

    #[test]
    fn a_rollback_is_forced_every_so_many_updates() {
        let forced: Vec<u64> = (0..20)
            .filter(|u| is_forced_rollback_update(*u, 8))
            .collect();
        assert_eq!(forced, [0, 8, 16]);
        assert!((0..5).all(|u| is_forced_rollback_update(u, 1)));
        assert!((0..5).all(|u| is_forced_rollback_update(u, 0)));
    }

    #[test]
    fn the_default_checks_turn_everything_on() {
        let mut config = SessionConfig::default();
        HarnessChecks::default().apply(&mut config);
        assert!(config.verify_predictions);
        assert_eq!(config.checksum_interval, 1);
        assert_eq!(
            HarnessChecks::default().forced_rollback_for(&config),
            DEFAULT_FORCED_ROLLBACK
        );
    }

    #[test]
    fn checks_off_leave_the_game_config_as_it_is() {
        let game = SessionConfig {
            verify_predictions: true,
            checksum_interval: 30,
            ..SessionConfig::default()
        };
        let mut config = game.clone();
        HarnessChecks::OFF.apply(&mut config);
        assert_eq!(config, game);
    }

    #[test]
    fn no_forced_rollback_without_prediction() {
        let checks = HarnessChecks::default();
        let lockstep = SessionConfig {
            mode: SessionMode::Lockstep,
            ..SessionConfig::default()
        };
        assert_eq!(checks.forced_rollback_for(&lockstep), 0);
        let no_window = SessionConfig {
            rollback_window: 0,
            ..SessionConfig::default()
        };
        assert_eq!(checks.forced_rollback_for(&no_window), 0);
        let short = SessionConfig {
            rollback_window: 1,
            ..SessionConfig::default()
        };
        assert_eq!(checks.forced_rollback_for(&short), 1);
    }
}
