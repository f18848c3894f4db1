//! What a hook sees at each moment: [`SessionView`] (one tick of one simulation world, its
//! inputs, the session's configuration and counters, the main App's world) and the moment's own
//! view over it ([`VerifiedTick`], [`PredictedTick`], [`DesyncReported`]), plus [`Cleanup`]. The
//! session builds them; a hook — the session's own or a game's — reads through their methods
//! only.

use std::ops::{Deref, DerefMut};

use bevy::prelude::*;

use crate::checksum::ComponentBreakdown;
use crate::config::SessionConfig;
use crate::divergence::PredictionMismatch;
use crate::divergence::coverage::scan_world;
use crate::input::{InputBuffer, InputStatus, SimInput};
use crate::snapshot::{self, RollbackRegistry, SimulationWorld, WorldRole};
use crate::stats::SessionStats;
use crate::tick::{PlayerIndex, Tick};
use crate::worlds::SimulationWorlds;

/// One tick of one simulation world as a hook sees it: the tick, the world (verified or
/// predicted, [`role`](Self::role)), every player's input of the tick, the session's
/// configuration, input buffer and counters, and the main App's world.
pub struct SessionView<'a, I: SimInput> {
    tick: Tick,
    role: WorldRole,
    inputs: &'a [I],
    status: &'a [InputStatus],
    disconnected: u64,
    main: &'a mut World,
    worlds: &'a mut SimulationWorlds,
    config: &'a SessionConfig,
    buffer: &'a InputBuffer<I>,
    stats: &'a mut SessionStats,
    networked: bool,
}

/// What the session lends a [`SessionView`]: its configuration, input buffer and counters, and
/// whether it is networked.
pub(crate) struct SessionParts<'a, I: SimInput> {
    pub config: &'a SessionConfig,
    pub buffer: &'a InputBuffer<I>,
    pub stats: &'a mut SessionStats,
    pub networked: bool,
}

/// The tick a [`SessionView`] is about: its number, world and input set.
pub(crate) struct TickParts<'a, I: SimInput> {
    pub tick: Tick,
    pub role: WorldRole,
    pub inputs: &'a [I],
    pub status: &'a [InputStatus],
    pub disconnected: u64,
}

impl<'a, I: SimInput> SessionView<'a, I> {
    /// A view of `tick` in `worlds` (built by the session update only).
    pub(crate) fn new(
        tick: TickParts<'a, I>,
        main: &'a mut World,
        worlds: &'a mut SimulationWorlds,
        session: SessionParts<'a, I>,
    ) -> Self {
        Self {
            tick: tick.tick,
            role: tick.role,
            inputs: tick.inputs,
            status: tick.status,
            disconnected: tick.disconnected,
            main,
            worlds,
            config: session.config,
            buffer: session.buffer,
            stats: session.stats,
            networked: session.networked,
        }
    }

    /// The tick.
    pub fn tick(&self) -> Tick {
        self.tick
    }

    /// Which world the view shows: the verified one for a verified tick and a reported desync,
    /// the predicted one for a predicted tick.
    pub fn role(&self) -> WorldRole {
        self.role
    }

    /// Every player's input of the tick, by player index, as the simulation saw it (confirmed
    /// on a verified tick; on a predicted tick, confirmed or guessed per
    /// [`input_status`](Self::input_status); the default where none is known).
    pub fn inputs(&self) -> &[I] {
        self.inputs
    }

    /// The status of every player's input of the tick.
    pub fn input_status(&self) -> &[InputStatus] {
        self.status
    }

    /// Whether `player` was disconnected at this tick (its input replaced by the relay).
    pub fn is_disconnected(&self, player: PlayerIndex) -> bool {
        player < 64 && self.disconnected & (1u64 << player) != 0
    }

    /// The players disconnected at this tick, one bit per player index.
    pub fn disconnected(&self) -> u64 {
        self.disconnected
    }

    /// The world the view shows ([`role`](Self::role)), at this tick.
    pub fn world(&self) -> &World {
        &self.sim().world
    }

    /// The per-component hash breakdown of the shown world at this tick (what a client sends
    /// the relay on a desync): one hash per registered component type, per live simulation
    /// entity and per registered resource. It hashes the whole state once more, so a hook that
    /// keeps breakdowns costs about one checksum per call.
    pub fn breakdown(&mut self) -> ComponentBreakdown {
        let (sw, registry) = self.simulation();
        snapshot::breakdown(sw, registry)
    }

    /// The shown simulation world and the rollback registry that says what its state is, to
    /// capture or hash it (e.g. a desync dump). Do not simulate it or change its registered
    /// state: every later tick of this peer would differ from the others'.
    pub fn simulation(&mut self) -> (&mut SimulationWorld, &RollbackRegistry) {
        let (sw, registry) = parts(self.worlds, self.role);
        (sw, registry)
    }

    /// Scans the shown world for state a rollback would not restore, reporting each finding
    /// seen for the first time as the session does ([`UnsimulatedEntity`](crate::UnsimulatedEntity),
    /// [`UnregisteredComponent`](crate::UnregisteredComponent)); whether it holds none now.
    pub fn scan_coverage(&mut self) -> bool {
        let (sw, registry) = parts(self.worlds, self.role);
        scan_world(self.main, sw, registry, self.role, self.stats)
    }

    /// The session's configuration.
    pub fn config(&self) -> &SessionConfig {
        self.config
    }

    /// The session's input buffer (confirmed inputs, predictions, disconnections).
    pub fn buffer(&self) -> &InputBuffer<I> {
        self.buffer
    }

    /// The session's counters of this update, published as the [`SessionStats`] resource when
    /// the update ends.
    pub fn stats(&self) -> &SessionStats {
        self.stats
    }

    /// The session's counters of this update, to count what the hook checks.
    pub fn stats_mut(&mut self) -> &mut SessionStats {
        self.stats
    }

    /// Whether the session is networked (its confirmed inputs come from a relay server).
    pub fn is_networked(&self) -> bool {
        self.networked
    }

    /// The tick's inputs ([`inputs`](Self::inputs)) beside the main App's world, to write both
    /// into an App resource without copying the inputs (a recorder).
    pub fn inputs_and_app_world(&mut self) -> (&[I], &mut World) {
        (self.inputs, self.main)
    }

    /// The main App's world, e.g. to write a message or keep a result in a resource. The
    /// session's own resources (the session, the simulation worlds, [`SessionStats`]) are out
    /// of it while the session update runs.
    pub fn app_world(&mut self) -> &mut World {
        self.main
    }

    fn sim(&self) -> &SimulationWorld {
        match self.role {
            WorldRole::Verified => &self.worlds.verified,
            WorldRole::Predicted => &self.worlds.predicted,
        }
    }
}

/// The simulation world of `role` and the registry, split out of `worlds`.
fn parts(
    worlds: &mut SimulationWorlds,
    role: WorldRole,
) -> (&mut SimulationWorld, &mut RollbackRegistry) {
    match role {
        WorldRole::Verified => (&mut worlds.verified, &mut worlds.registry),
        WorldRole::Predicted => (&mut worlds.predicted, &mut worlds.registry),
    }
}

/// One verified tick as the hooks see it ([`VerifiedTickHook::on_verified`](super::VerifiedTickHook::on_verified)):
/// the [`SessionView`] of the verified world at the tick, with the tick's checksum on a
/// checksum tick and the prediction check's finding.
pub struct VerifiedTick<'a, I: SimInput> {
    view: SessionView<'a, I>,
    checksum: Option<u64>,
    mismatch: Option<PredictionMismatch>,
}

impl<'a, I: SimInput> VerifiedTick<'a, I> {
    /// The verified tick in `view`, with its checksum (built by the session update only).
    pub(crate) fn new(view: SessionView<'a, I>, checksum: Option<u64>) -> Self {
        Self {
            view,
            checksum,
            mismatch: None,
        }
    }

    /// The verified world's checksum at this tick on a checksum tick (every
    /// `checksum_interval` ticks, or a tick a hook asked for), else `None`.
    pub fn checksum(&self) -> Option<u64> {
        self.checksum
    }

    /// Whether this is a checksum tick ([`checksum`](Self::checksum) is known).
    pub fn is_checksum_tick(&self) -> bool {
        self.checksum.is_some()
    }

    /// What the prediction check found at this tick, when it found the prediction of the tick
    /// differing from the verified state (set by the check, which runs before later hooks).
    pub fn prediction_mismatch(&self) -> Option<&PredictionMismatch> {
        self.mismatch.as_ref()
    }

    /// Records that the prediction of this tick did not reproduce its verified state, for the
    /// hooks after this one (desync dumps write the two worlds). It writes no message: the
    /// caller writes [`PredictionMismatch`] if it should be seen by the App.
    pub fn report_prediction_mismatch(&mut self, mismatch: PredictionMismatch) {
        self.mismatch = Some(mismatch);
    }
}

/// One predicted tick as the hooks see it ([`VerifiedTickHook::on_predicted`](super::VerifiedTickHook::on_predicted)):
/// the [`SessionView`] of the predicted world at the tick.
pub struct PredictedTick<'a, I: SimInput> {
    view: SessionView<'a, I>,
    resimulation: bool,
}

impl<'a, I: SimInput> PredictedTick<'a, I> {
    /// The predicted tick in `view` (built by the session update only).
    pub(crate) fn new(view: SessionView<'a, I>, resimulation: bool) -> Self {
        Self { view, resimulation }
    }

    /// Whether this tick was predicted before (this is a re-simulation after a rollback).
    pub fn is_resimulation(&self) -> bool {
        self.resimulation
    }
}

/// A desync the relay server reported, as the hooks see it
/// ([`VerifiedTickHook::on_desync_reported`](super::VerifiedTickHook::on_desync_reported)):
/// the desynced tick and players, and the [`SessionView`] of the verified world as it is now
/// (at [`tick`](SessionView::tick), with the confirmed inputs of that tick).
pub struct DesyncReported<'a, I: SimInput> {
    view: SessionView<'a, I>,
    desynced_tick: Tick,
    players: &'a [PlayerIndex],
    breakdown: Option<ComponentBreakdown>,
}

impl<'a, I: SimInput> DesyncReported<'a, I> {
    /// The report of a desync at `desynced_tick` of `players` (built by the session update only).
    pub(crate) fn new(
        view: SessionView<'a, I>,
        desynced_tick: Tick,
        players: &'a [PlayerIndex],
    ) -> Self {
        Self {
            view,
            desynced_tick,
            players,
            breakdown: None,
        }
    }

    /// The tick whose checksums disagreed.
    pub fn desynced_tick(&self) -> Tick {
        self.desynced_tick
    }

    /// The players judged desynced.
    pub fn players(&self) -> &[PlayerIndex] {
        self.players
    }

    /// Sends `breakdown` (this client's per-component hashes of the desynced tick) to the relay
    /// server after the hooks ran, so its desync report can name the differing component; the
    /// first one given is sent, once per report. Ignored in a session that is not networked.
    pub fn send_breakdown(&mut self, breakdown: ComponentBreakdown) {
        self.breakdown.get_or_insert(breakdown);
    }

    /// The breakdown a hook asked to send (for the session).
    pub(crate) fn take_breakdown(&mut self) -> Option<ComponentBreakdown> {
        self.breakdown.take()
    }
}

/// The end of one session update's cleanup ([`VerifiedTickHook::on_cleanup`](super::VerifiedTickHook::on_cleanup)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cleanup {
    /// The verified tick the update ended at: nothing at or before it is predicted again.
    pub verified_tick: Tick,
    /// The first tick whose inputs the session keeps; history before it is dropped (no
    /// rollback from `verified_tick` on can need it).
    pub keep_from: Tick,
}

macro_rules! deref_to_view {
    ($($view:ident),*) => {$(
        impl<'a, I: SimInput> Deref for $view<'a, I> {
            type Target = SessionView<'a, I>;
            fn deref(&self) -> &Self::Target {
                &self.view
            }
        }
        impl<I: SimInput> DerefMut for $view<'_, I> {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.view
            }
        }
    )*};
}

deref_to_view!(VerifiedTick, PredictedTick, DesyncReported);
