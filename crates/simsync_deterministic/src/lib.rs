//! `simsync_deterministic`: the [`DeterministicPlugin`]. A verified and a predicted world run
//! the game's [`SimulationTick`]; each session update verifies confirmed ticks, decides whether
//! to roll the predicted world back and predicts ahead, by the rules in [`rules`].
//!
//! The parts:
//! - [`SimulatorContext`]: the per-update decisions, pure data.
//! - [`DeterministicSession`] and its update steps (poll, begin, verify, decide, rollback,
//!   predict, finish), [`SessionStats`]; [`SimulationWorlds`]: the two worlds and one tick.
//! - Session hooks, the seam every feature plugs into: after every verified tick, and at its
//!   other moments (predicted tick, rollback, snapshot load, reported desync, cleanup,
//!   restart), the session calls its [`VerifiedTickHook`]s with views of what it holds
//!   ([`VerifiedTick`], [`PredictedTick`], [`DesyncReported`], [`SessionView`]). The
//!   prediction check, desync dumps and replays are hooks, each a folder with its own state;
//!   a game adds its own with [`VerifiedTickHookAppExt`].
//! - The session lifecycle: [`SessionLifecycle`] ([`SessionState`]), [`SessionStateChanged`],
//!   [`SessionEnd`]; [`restart_session`] starts a new session in the same App, and a networked
//!   session follows the relay's rematch by itself ([what survives a rematch](rules#what-survives-a-rematch)).
//! - The input path: [`LocalInputs`] (latched every frame by [`InputLatch`]) /
//!   [`TickInputSource`] → [`LocalRelay`] or the relay server ([`NetworkSessionConfig`]) →
//!   [`InputBuffer`] → [`PlayerInputs`]; [`LeafwingInputPlugin`] and [`InputEncoder`] for
//!   leafwing; [`LocalPlayers`]: which players this app controls.
//! - The relay server is the `simsync_relay` crate; this crate holds the client side.
//! - Rollback: [`SimEntity`], [`SimCommands`], [`RollbackAppExt`] and [`TryRollbackAppExt`]
//!   (registration, the latter returning its errors), [`RollbackStrategy`]; Bevy states in the
//!   simulation: [`RollbackStateAppExt`]; checksums: [`SimHash`] (and `#[derive(SimHash)]`),
//!   [`StateHasher`].
//! - Configuration, grouped as the plugin's builder groups it: [`SessionConfig`] (the session),
//!   [`NetworkSessionConfig`], [`SnapshotLimits`], [`DebugConfig`] (desync dumps, the
//!   determinism guard), [`ReplayMode`]; errors: [`SessionError`].
//! - Snapshots and late join: [`WorldSnapshot`], [`capture_snapshot`], [`load_snapshot`]
//!   ([snapshots](rules#snapshots)).
//! - Simulation events: [`SimEvents`] in the simulation, [`SimEventReceived`] and
//!   [`ConfirmedSimEvent`] in the main app, registered with [`SimEventAppExt::add_sim_event`];
//!   the two side-effect patterns (sound, visual effects, network sends) are in
//!   [the rules](rules#side-effects-two-kinds-two-streams).
//! - Hierarchy: `ChildOf`/`Children` between simulation entities roll back exactly (parents and
//!   children order) with no registration; other Bevy relationships roll back when registered
//!   with [`TryRollbackAppExt::try_rollback_relationship`], provided their target is not
//!   `linked_spawn` and keeps an order; anything else is refused with a typed error
//!   ([hierarchy and relationships](rules#hierarchy-and-relationships)).
//! - No silent divergence: entities without [`SimEntity`] ([`UnsimulatedEntity`]) and
//!   unregistered components ([`UnregisteredComponent`]) are reported and fail the prediction
//!   check; [`PredictionCheck::AllRegisteredState`] compares every registered value; a failed
//!   check ([`PredictionMismatch`]) names the first differing entity and component
//!   ([`StateDifference`]) ([no silent divergence](rules#no-silent-divergence)).
//! - Warnings a game must react to are also messages ([`SessionWarning`]), seen without a
//!   `LogPlugin`; setup errors are kept as [`SessionSetupError`].
//! - Replays: [`ReplayRecorder`] records any session's confirmed inputs and verified
//!   checksums; [`Replay`] reads a file ([`ReplayError`]); [`ReplayPlayback`] plays it in
//!   lockstep and stops at the first [`ReplayMismatch`] ([replays](rules#replays)).
//! - Debug aids: the determinism guard ([`DeterminismWarning`]); desync dumps ([`DesyncDump`],
//!   [`diff_dumps`]); [`testing::run_until_verified`] for a game's own tests.
//!
//! Read `docs/pitfalls.md` at the repository root before writing a simulation.
#![warn(missing_docs)]

// `#[derive(SimHash)]` names this crate `::simsync_deterministic`, also inside it.
extern crate self as simsync_deterministic;

#[cfg(test)]
mod alloc_bound;
mod checksum;
#[cfg(test)]
mod churn_bound;
mod config;
mod context;
mod diagnostics;
mod divergence;
mod dump;
mod error;
mod events;
mod guard;
mod hash_impls;
mod headless;
mod hooks;
mod input;
mod late_join;
mod leafwing_input;
mod physics_order;
mod plugin;
#[cfg(all(feature = "enhanced-determinism", target_os = "linux"))]
mod portable_libm;
mod prediction_check;
mod replay;
mod restart;
mod schedule;
mod session;
mod smoothing;
mod snapshot;
mod source;
mod states;
mod stats;
pub mod testing;
mod tick;
mod warning;
mod worlds;

#[doc = include_str!("rules.md")]
pub mod rules {}

pub use checksum::{SimHash, StateHasher, TickChecksum};
pub use config::{
    DEFAULT_CHECKSUM_HISTORY, DEFAULT_REJOIN_AFTER_PAUSE, DEFAULT_SERVER_TIMEOUT, DebugConfig,
    LocalSessionConfig, NetworkSessionConfig, PredictionCheck, SessionClock, SessionConfig,
    SessionMode,
};
pub use context::{
    ContextError, PredictionPlan, SimulatorContext, SimulatorStage, UpdateParams, would_stall,
};
pub use diagnostics::SessionDiagnosticsPlugin;
pub use divergence::{
    MismatchCause, PredictionMismatch, RollbackSetupFailed, StateDifference, UncheckedState,
    UnregisteredComponent, UnsimulatedEntity,
};
pub use dump::{
    ComponentBreakdown, DEFAULT_MAX_DUMP_BYTES, DUMP_FORMAT_VERSION, DesyncDump, DesyncDumpConfig,
    DesyncDumpFailed, DesyncDumpWritten, Difference, DumpDiff, DumpError, DumpHeader, DumpReason,
    DumpSide, DumpedEntity, DumpedField, DumpedInput, DumpedValue, DumpedWorld, FieldDifference,
    GameFingerprint, RootDifference, diff_dumps, flatten, read_dump_file,
};
pub use dump::{capture_desync_dump, write_desync_dump};
pub use error::{RelationshipRefusal, SessionError};
pub use events::{
    ConfirmedSimEvent, SimEvent, SimEventAppExt, SimEventError, SimEventId, SimEventLedger,
    SimEventReceived, SimEventStats, SimEventStatus, SimEvents, UnregisteredSimEvent,
};
pub use guard::{DeterminismRisk, DeterminismWarning};
pub use hooks::{
    Cleanup, DesyncReported, HookFlow, PredictedTick, SessionView, VerificationStopped,
    VerifiedTick, VerifiedTickHook,
};
pub use input::{
    ConfirmOutcome, InputBuffer, InputEncoder, InputError, InputStatus, MAX_CAPACITY_TICKS,
    PackedInput, PlayerInputs, SimInput,
};
pub use input::{FrameMergeFn, InputLatch, default_frame_merge, merge_latest_non_default};
pub use late_join::{
    CapturedSnapshot, Resynced, SnapshotAppExt, SnapshotHooks, SnapshotLoad, SnapshotReceived,
    SnapshotRejected, capture_snapshot, load_snapshot,
};
pub use leafwing_input::{LeafwingInputPlugin, LocalActionEncoder, LocalPlayer};
pub use plugin::{DeterministicPlugin, ReplayMode, VerifiedTickHookAppExt};
pub use replay::{
    ForeignPart, MAX_RECORD_BYTES, REPLAY_FORMAT_VERSION, REPLAY_MAGIC, Replay, ReplayEnd,
    ReplayError, ReplayFrame, ReplayHeader, ReplayLimits, ReplayMismatch, ReplayPlayback,
    ReplayPlaybackFailed, ReplayRecorder, ReplaySnapshot, ReplayStatus, ReplayWriteFailed,
    ReplayWriter,
};
pub use restart::restart_session;
pub use schedule::{
    AfterPrediction, BeforePrediction, BeforeVerification, DeterministicSet, SimulationSet,
    SimulationStartup, SimulationTick,
};
pub use session::{
    Connection, DeterministicSession, LeaveSession, LifecycleView, NetworkView, SessionEnd,
    SessionLifecycle, SessionState, SessionStateChanged, SessionStateReason, session_transitions,
};
/// `#[derive(SimHash)]`: hashes every field in declaration order (enum variants by position
/// first); `#[sim_hash(skip)]` leaves a field out. See the `simsync_derive` crate.
pub use simsync_derive::SimHash;
pub use simsync_net::{DesyncJudge, DesyncReport};
pub use smoothing::{
    PresentationSet, PresentedSimEntity, TickPose, VisualSmoothing, VisualSmoothingConfig,
    VisualSmoothingPlugin,
};
pub use snapshot::{
    ClientSnapshotStats, NotSimulated, Parked, ReservedSlots, RollbackAppExt, RollbackMutability,
    RollbackRegistry, RollbackReport, RollbackStrategy, SimCommands, SimEntity, SimulationEntities,
    Synced, TickMap, TryRollbackAppExt, WORLD_OWN_INDICES, WorldRole, despawn_simulated_now,
    spawn_simulated_now,
};
pub use snapshot::{
    DECODE_MEMORY_PER_BYTE, DEFAULT_MAX_SNAPSHOT_BYTES, FRAME_BYTES, LZ4_MAX_EXPANSION,
    LZ4_SLACK_BYTES, MAX_SNAPSHOT_HEADER_BYTES, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_MAGIC,
    SnapshotError, SnapshotHeader, SnapshotLimits, WorldSnapshot,
};
pub use source::{
    DesyncDetected, InputSubstituted, LocalInputs, LocalRelay, LocalRelayConfig, PlayerDesynced,
    PlayerLeft, PlayerRejoined, ReconnectPhase, RelayClientStats, RelayDelivery, RelayRejection,
    STALL_AFTER, SessionRejected, SessionStall, StallReason, TickInputSource,
};
pub use source::{FrameMerge, LocalPlayers};
pub use states::RollbackStateAppExt;
pub use stats::{ChecksumRecorded, NeedsSnapshot, SessionResumed, SessionStalled, SessionStats};
pub use tick::{PlayerIndex, SimTick, Tick};
pub use warning::{SessionSetupError, SessionWarning};
pub use worlds::SimulationWorlds;

/// Everything a game needs.
pub mod prelude {
    pub use crate::{
        AfterPrediction, BeforePrediction, BeforeVerification, DeterminismWarning,
        DeterministicPlugin, DeterministicSession, DeterministicSet, InputEncoder, InputStatus,
        LocalInputs, LocalSessionConfig, NotSimulated, PackedInput, PlayerIndex, PlayerInputs,
        PredictionCheck, PredictionMismatch, RollbackAppExt, RollbackStateAppExt, SessionClock,
        SessionConfig, SessionMode, SessionSetupError, SessionStats, SessionWarning, SimCommands,
        SimEntity, SimHash, SimInput, SimTick, SimulationSet, SimulationStartup, SimulationTick,
        SimulationWorlds, SimulatorContext, SnapshotAppExt, StateHasher, Tick, TickInputSource,
        TryRollbackAppExt, UnsimulatedEntity, WorldSnapshot,
    };
    pub use crate::{
        ConfirmedSimEvent, SimEvent, SimEventAppExt, SimEventReceived, SimEventStatus, SimEvents,
    };
    pub use crate::{LeafwingInputPlugin, LocalPlayer, LocalPlayers};
}
