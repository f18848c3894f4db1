//! Session hooks ([session hooks](crate::rules#verified-tick-hooks)): the seam every feature of
//! the session plugs into. The session calls its [`VerifiedTickHook`]s, in order, at each moment
//! a feature may need — a verified tick, a predicted tick, a rollback, a snapshot load, a desync
//! the relay reported, the cleanup of history no rollback can need, a restart — and shows each
//! the same views ([`VerifiedTick`], [`PredictedTick`], [`DesyncReported`], all reading through a
//! [`SessionView`]). The session's own features (the prediction check, desync dumps, replay
//! recording and checking) are hooks like a game's: each keeps its state in its hook object and
//! sees only what these views show.
//!
//! - This module: the trait, what a verified-tick call returns ([`HookFlow`]), the message a stop
//!   is reported with ([`VerificationStopped`]) and the session's ordered hook list.
//! - [`view`](mod@view): the views.

mod view;

use std::any::Any;

use bevy::prelude::*;

use crate::input::SimInput;
use crate::tick::Tick;

pub use view::{Cleanup, DesyncReported, PredictedTick, SessionView, VerifiedTick};
pub(crate) use view::{SessionParts, TickParts};

/// Whether verification goes on after a [`VerifiedTickHook`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookFlow {
    /// Go on verifying.
    Continue,
    /// Stop verifying at this tick, for good: the tick stays verified (every other hook still
    /// sees it), no later tick is verified, and the session writes a [`VerificationStopped`]
    /// message with this reason. A replay playback stops like this at a checksum mismatch.
    Stop(String),
}

/// Verification was stopped by a [`VerifiedTickHook`] that returned [`HookFlow::Stop`]: the
/// verified world stays at `tick` (written once; see
/// [`DeterministicSession::verification_stopped`](crate::DeterministicSession::verification_stopped)).
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct VerificationStopped {
    /// The last verified tick.
    pub tick: Tick,
    /// The reason the hook gave.
    pub reason: String,
}

/// A session hook: called by the session after every verified tick, in tick order, each tick
/// exactly once ([verified-tick hooks](crate::rules#verified-tick-hooks)), and at the session's
/// other moments through the provided methods, which do nothing unless a hook overrides them.
/// The verified world is the one every peer agrees on, so [`on_verified`](Self::on_verified)
/// sees the same ticks, inputs and states on every peer and in a replay of the session: the
/// place for analytics, anti-cheat checks or a custom recorder. The other moments are local to
/// this peer (how far it predicted, when it rolled back).
///
/// The session owns its hooks and calls them in the order they were added, after its own (the
/// prediction check, desync dumps, replay recording, the replay check). Add one with
/// [`add_verified_tick_hook`](crate::VerifiedTickHookAppExt::add_verified_tick_hook) after the
/// [`DeterministicPlugin`](crate::DeterministicPlugin); it stays with the App's session across
/// [`restart_session`](crate::restart_session) (told by [`on_restart`](Self::on_restart)), and
/// [`DeterministicSession::hook`](crate::DeterministicSession::hook) reads it back.
///
/// A hook runs inside the session update, between simulated ticks: keep it cheap (it runs for
/// every verified tick, up to `max_verified_ticks_per_update` of them per frame while catching
/// up) and do not simulate in it.
///
/// ```
/// # use bevy::prelude::*;
/// # use simsync_deterministic::prelude::*;
/// use simsync_deterministic::{HookFlow, VerifiedTick, VerifiedTickHook, VerifiedTickHookAppExt};
///
/// /// Counts every player's fire presses on the ticks every peer agreed on, and stops
/// /// verification if one fires more often than the game allows (an anti-cheat recorder).
/// #[derive(Default)]
/// struct FireCounter {
///     presses: Vec<u32>,
///     checksums: Vec<(Tick, u64)>,
///     rollbacks: u32,
/// }
///
/// impl VerifiedTickHook<PackedInput> for FireCounter {
///     fn on_verified(&mut self, verified: &mut VerifiedTick<'_, PackedInput>) -> HookFlow {
///         let tick = verified.tick();
///         self.presses.resize(verified.inputs().len(), 0);
///         for (player, input) in verified.inputs().iter().enumerate() {
///             if input.pressed(0) {
///                 self.presses[player] += 1;
///             }
///         }
///         if let Some(checksum) = verified.checksum() {
///             self.checksums.push((tick, checksum));
///         }
///         // The verified world at `tick` may be read, e.g. `verified.world().get_resource::<R>()`.
///         if self.presses.iter().any(|&n| n > 64 * 60 * 20) {
///             return HookFlow::Stop(format!("fire rate exceeded at tick {tick}"));
///         }
///         HookFlow::Continue
///     }
///
///     // Another moment: this peer rolled its predicted world back.
///     fn on_rollback(&mut self, _tick: Tick) {
///         self.rollbacks += 1;
///     }
/// }
///
/// #[derive(Clone)]
/// struct MyGame;
/// impl Plugin for MyGame {
///     fn build(&self, _app: &mut App) {}
/// }
///
/// let mut app = App::new();
/// app.add_plugins(MinimalPlugins)
///     .add_plugins(DeterministicPlugin::<PackedInput>::new(MyGame))
///     .add_verified_tick_hook(FireCounter::default())
///     .expect("the plugin was added first");
/// ```
pub trait VerifiedTickHook<I: SimInput>: Any + Send + Sync {
    /// Called after `verified.tick()` was simulated on the verified world (and its checksum
    /// computed, on a checksum tick). [`HookFlow::Stop`] stops verification at this tick.
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow;

    /// Whether the checksum of verified tick `tick` is wanted although it is not a multiple of
    /// the checksum interval (a replay check wants every tick its recording checked). Default:
    /// no.
    fn wants_checksum(&self, tick: Tick) -> bool {
        let _ = tick;
        false
    }

    /// Called after `predicted.tick()` was simulated on the predicted world, on predicted
    /// inputs (again after every rollback: [`PredictedTick::is_resimulation`]). Predicted
    /// sessions only. Default: nothing.
    fn on_predicted(&mut self, predicted: &mut PredictedTick<'_, I>) {
        let _ = predicted;
    }

    /// Called after a rollback put the predicted world back at verified tick `tick` (by a copy
    /// of the verified world, or by sharing its timeline when every prediction held); the next
    /// predicted tick is `tick + 1`. Default: nothing.
    fn on_rollback(&mut self, tick: Tick) {
        let _ = tick;
    }

    /// Called after a snapshot was loaded into both worlds at `tick` (a late join, a rejoin, a
    /// resync or a replay's seek): ticks before it were never simulated here. Default: nothing.
    fn on_snapshot_loaded(&mut self, tick: Tick) {
        let _ = tick;
    }

    /// Called once per desync the relay server reported (this client's or another player's),
    /// at the start of the next session update, before that update verifies. Default: nothing.
    fn on_desync_reported(&mut self, report: &mut DesyncReported<'_, I>) {
        let _ = report;
    }

    /// Called at the end of every session update, after the session dropped the input history
    /// no rollback can need any more ([`Cleanup`]). Default: nothing.
    fn on_cleanup(&mut self, cleanup: Cleanup) {
        let _ = cleanup;
    }

    /// Called when the App's session was rebuilt from tick 0 for a new match
    /// ([`restart_session`](crate::restart_session), or the relay's rematch); the hook moved to
    /// the new session. Default: nothing (the hook keeps what it gathered).
    fn on_restart(&mut self) {}
}

/// The session's hooks, in call order: one list, each moment dispatched to every hook.
pub(crate) struct VerifiedTickHooks<I: SimInput> {
    hooks: Vec<Box<dyn VerifiedTickHook<I>>>,
}

impl<I: SimInput> Default for VerifiedTickHooks<I> {
    fn default() -> Self {
        Self { hooks: Vec::new() }
    }
}

impl<I: SimInput> VerifiedTickHooks<I> {
    /// Adds `hook` after the others.
    pub(crate) fn push(&mut self, hook: Box<dyn VerifiedTickHook<I>>) {
        self.hooks.push(hook);
    }

    /// The first hook of type `H`, if one was added.
    pub(crate) fn find<H: VerifiedTickHook<I>>(&self) -> Option<&H> {
        self.hooks
            .iter()
            .find_map(|hook| (hook.as_ref() as &dyn Any).downcast_ref::<H>())
    }

    /// The first hook of type `H`, mutably, if one was added.
    pub(crate) fn find_mut<H: VerifiedTickHook<I>>(&mut self) -> Option<&mut H> {
        self.hooks
            .iter_mut()
            .find_map(|hook| (hook.as_mut() as &mut dyn Any).downcast_mut::<H>())
    }

    /// Whether some hook wants the checksum of `tick`.
    pub(crate) fn want_checksum(&self, tick: Tick) -> bool {
        self.hooks.iter().any(|hook| hook.wants_checksum(tick))
    }

    /// Runs every hook on `verified`; the first stop reason, if any hook stopped.
    pub(crate) fn verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> Option<String> {
        let mut stop = None;
        for hook in &mut self.hooks {
            if let HookFlow::Stop(reason) = hook.on_verified(verified) {
                stop.get_or_insert(reason);
            }
        }
        stop
    }

    /// Tells every hook of a predicted tick.
    pub(crate) fn predicted(&mut self, predicted: &mut PredictedTick<'_, I>) {
        self.hooks
            .iter_mut()
            .for_each(|h| h.on_predicted(predicted));
    }

    /// Tells every hook of a rollback to `tick`.
    pub(crate) fn rolled_back(&mut self, tick: Tick) {
        self.hooks.iter_mut().for_each(|h| h.on_rollback(tick));
    }

    /// Tells every hook of a snapshot loaded at `tick`.
    pub(crate) fn snapshot_loaded(&mut self, tick: Tick) {
        self.hooks
            .iter_mut()
            .for_each(|h| h.on_snapshot_loaded(tick));
    }

    /// Tells every hook of a desync the relay reported.
    pub(crate) fn desync_reported(&mut self, report: &mut DesyncReported<'_, I>) {
        self.hooks
            .iter_mut()
            .for_each(|h| h.on_desync_reported(report));
    }

    /// Tells every hook of the end-of-update cleanup.
    pub(crate) fn cleaned_up(&mut self, cleanup: Cleanup) {
        self.hooks.iter_mut().for_each(|h| h.on_cleanup(cleanup));
    }

    /// Tells every hook the session was rebuilt for a new match.
    pub(crate) fn restarted(&mut self) {
        self.hooks.iter_mut().for_each(|h| h.on_restart());
    }
}
