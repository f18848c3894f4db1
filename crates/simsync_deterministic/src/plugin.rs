//! [`DeterministicPlugin`]: wires the session into an app.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use bevy::ecs::schedule::{InternedScheduleLabel, ScheduleLabel, SingleThreadedExecutor};
use bevy::prelude::*;
use bevy_state::app::{AppExtStates, StatesPlugin};
use bevy_state::state::StateTransition;
use simsync_time::{TickRate, VirtualTimePlugin};

use crate::config::{
    LocalSessionConfig, NetworkSessionConfig, PredictionCheck, SessionClock, SessionConfig,
    SessionMode,
};
use crate::context::SimulatorContext;
use crate::error::SessionError;
use crate::events::{SimEventStats, UnregisteredSimEvent};
use crate::headless::build_missing_worlds;
use crate::input::{FrameMergeFn, SimInput};
use crate::replay::systems::{replay_after_update, replay_before_update};
use crate::replay::{
    ReplayCheck, ReplayFeed, ReplayMismatch, ReplayPlayback, ReplayPlaybackFailed, ReplayRecorder,
    ReplayRecording, ReplayWriteFailed,
};
use crate::restart::{SessionBlueprint, assemble_worlds, initial_lifecycle};
use crate::schedule::{AfterPrediction, BeforePrediction, BeforeVerification, DeterministicSet};
use crate::session::{
    ChecksumRecorded, ChecksumReport, DesyncDumps, DeterministicSession, NeedsSnapshot,
    PredictionCheckHook, PredictionMismatch, RollbackSetupFailed, SessionEnd, SessionLifecycle,
    SessionResumed, SessionStalled, SessionState, SessionStateChanged, SessionStats,
    UncheckedState, UnregisteredComponent, UnsimulatedEntity, VerificationStopped,
    VerifiedTickHook, session_update, update_lifecycle,
};
use crate::source::{
    DesyncDetected, InputSubstituted, PlayerLeft, PlayerRejoined, SessionRejected,
};
use crate::source::{FrameMerge, LocalInputs, LocalPlayers};
use crate::tick::PlayerIndex;
use crate::worlds::{
    GameBuilder, PredictedApp, SimulationWorlds, VerifiedApp, WorldSpec, build_sub_apps,
};

/// The deterministic session: a verified and a predicted world (Bevy sub-apps running the same
/// [`SimulationTick`](crate::SimulationTick)), driven by one session-update system that verifies
/// confirmed ticks, rolls the predicted world back and predicts ahead
/// ([the session update](crate::rules#the-session-update)).
///
/// `I` is the game's compact per-player input. The game's simulation plugin is added to both
/// worlds; everything it registers with [`RollbackAppExt`](crate::RollbackAppExt) is rolled back.
///
/// ```no_run
/// # use bevy::prelude::*;
/// # use simsync_deterministic::prelude::*;
/// #[derive(Clone)]
/// struct MyGame;
/// impl Plugin for MyGame {
///     fn build(&self, app: &mut App) { /* systems in SimulationTick */ }
/// }
/// App::new()
///     .add_plugins(MinimalPlugins)
///     .add_plugins(DeterministicPlugin::<PackedInput>::new(MyGame).players(2).rollback_window(60))
///     .run();
/// ```
///
/// A headless App may be stepped with `app.update()` alone: without `app.finish()` /
/// `app.cleanup()` the first session update builds the simulation worlds
/// ([headless stepping](crate::rules#headless-stepping));
/// [`testing::run_until_verified`](crate::testing::run_until_verified) steps until a verified
/// tick.
///
/// A configuration that fails [`SessionConfig::validate`] is logged as an error and the session
/// is not installed (the [`SessionSetupError`] resource holds the error); nothing panics.
///
/// The session's lifecycle is also a Bevy state, `State<SessionState>`
/// ([session lifecycle](crate::rules#session-lifecycle)); the plugin adds Bevy's
/// `StatesPlugin` unless it is already added (`MinimalPlugins` lacks it), so add
/// `DefaultPlugins` (with bevy's `bevy_state` feature) before this plugin, not after.
///
/// The App's [`TickRate`] is the session's: the plugin adds a `VirtualTimePlugin` with it (the
/// only writer of `TickRate`), before or after `SimSyncPlugins` alike.
pub struct DeterministicPlugin<I: SimInput> {
    game: GameBuilder,
    config: SessionConfig,
    schedule: InternedScheduleLabel,
    frame_merge: Option<FrameMergeFn<I>>,
    guard: bool,
    /// Inserted at build (taken once: a plugin is built once).
    recorder: Mutex<Option<ReplayRecorder>>,
    playback: Mutex<Option<ReplayPlayback<I>>>,
    snapshots: Option<crate::snapshot::SnapshotLimits>,
    _input: PhantomData<fn() -> I>,
}

/// Inserted instead of the session when the plugin's configuration is invalid.
#[derive(Resource, Debug, Clone, PartialEq)]
pub struct SessionSetupError(pub SessionError);

impl<I: SimInput> DeterministicPlugin<I> {
    /// A session simulating `game` (added to both simulation worlds) with default settings.
    pub fn new(game: impl Plugin + Clone) -> Self {
        Self::from_fn(move |app: &mut App| {
            app.add_plugins(game.clone());
        })
    }

    /// A session whose simulation worlds are set up by `build`.
    pub fn from_fn(build: impl Fn(&mut App) + Send + Sync + 'static) -> Self {
        Self {
            game: Arc::new(build),
            config: SessionConfig::default(),
            schedule: PreUpdate.intern(),
            frame_merge: None,
            guard: false,
            recorder: Mutex::new(None),
            playback: Mutex::new(None),
            snapshots: None,
            _input: PhantomData,
        }
    }

    /// Replaces the whole configuration.
    pub fn config(mut self, config: SessionConfig) -> Self {
        self.config = config;
        self
    }

    /// Number of players (≥ 1).
    pub fn players(mut self, players: PlayerIndex) -> Self {
        self.config.players = players;
        self
    }

    /// Ticks per second.
    pub fn tick_rate(mut self, rate: TickRate) -> Self {
        self.config.tick_rate = rate;
        self
    }

    /// Ticks per second from an integer.
    ///
    /// # Errors
    /// [`SessionError::TickRate`] for a rate of 0.
    pub fn try_tick_rate(self, ticks_per_second: u32) -> Result<Self, SessionError> {
        Ok(self.tick_rate(TickRate::new(ticks_per_second)?))
    }

    /// Ticks the predicted world may run ahead of the verified one.
    pub fn rollback_window(mut self, ticks: u32) -> Self {
        self.config.rollback_window = ticks;
        self
    }

    /// A checksum every `ticks` verified ticks.
    pub fn checksum_interval(mut self, ticks: u32) -> Self {
        self.config.checksum_interval = ticks;
        self
    }

    /// Verified checksums kept in [`SessionStats::checksum_history`](crate::SessionStats)
    /// (default 4,096; see [`SessionConfig::checksum_history`]).
    pub fn checksum_history(mut self, checksums: u32) -> Self {
        self.config.checksum_history = checksums;
        self
    }

    /// Ticks between sampling a local input and the tick it applies to.
    pub fn input_delay(mut self, ticks: u32) -> Self {
        self.config.input_delay = ticks;
        self
    }

    /// Predicted or lockstep.
    pub fn mode(mut self, mode: SessionMode) -> Self {
        self.config.mode = mode;
        self
    }

    /// The local clock.
    pub fn clock(mut self, clock: SessionClock) -> Self {
        self.config.clock = clock;
        self
    }

    /// The local (single-process) session's latency, jitter and known players.
    pub fn local_session(mut self, local: LocalSessionConfig) -> Self {
        self.config.local = local;
        self
    }

    /// Compare predictions with verification (debug aid).
    pub fn verify_predictions(mut self, on: bool) -> Self {
        self.config.verify_predictions = on;
        self
    }

    /// What the prediction check compares (see [`PredictionCheck`]); it runs only with
    /// [`verify_predictions`](Self::verify_predictions).
    pub fn prediction_check(mut self, check: PredictionCheck) -> Self {
        self.config.prediction_check = check;
        self
    }

    /// Compare predictions with verification on every registered value, hashed or not (debug
    /// aid): `verify_predictions(on)` with [`PredictionCheck::AllRegisteredState`] (or
    /// [`PredictionCheck::Checksum`] when off).
    pub fn verify_predictions_full(self, on: bool) -> Self {
        let check = if on {
            PredictionCheck::AllRegisteredState
        } else {
            PredictionCheck::Checksum
        };
        self.verify_predictions(on).prediction_check(check)
    }

    /// Skip rollbacks when every prediction of the current timeline held (default on).
    pub fn skip_rollback_when_predictions_hold(mut self, on: bool) -> Self {
        self.config.skip_rollback_when_predictions_hold = on;
        self
    }

    /// A networked session: confirmed inputs come from a relay server
    /// ([`DeterministicServerPlugin`](crate::DeterministicServerPlugin)) over renet. The app
    /// needs a `RenetClient` and a transport (`simsync_net::NetClientPlugin`).
    pub fn networked(mut self, network: NetworkSessionConfig) -> Self {
        self.config.network = Some(network);
        self
    }

    /// Write desync dumps into `dir` ([desync dumps](crate::rules#desync-dumps)): on the first
    /// failed prediction check (`verify_predictions`; the predicted and the verified world of
    /// the tick — this captures the predicted world after every predicted tick, a debug cost)
    /// and on the first desync the relay reports (the verified world, with per-component hash
    /// breakdowns of the recent checksum ticks). Each file is reported as a
    /// [`DesyncDumpWritten`](crate::DesyncDumpWritten) message, a failure as
    /// [`DesyncDumpFailed`](crate::DesyncDumpFailed).
    pub fn desync_dumps(self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.desync_dump_config(crate::dump::DesyncDumpConfig::new(dir))
    }

    /// [`desync_dumps`](Self::desync_dumps) with every setting.
    pub fn desync_dump_config(mut self, config: crate::dump::DesyncDumpConfig) -> Self {
        self.config.desync_dumps = Some(config);
        self
    }

    /// Input ticks kept in the buffer (must exceed rollback window + latency + jitter + delay).
    pub fn input_capacity(mut self, ticks: u32) -> Self {
        self.config.input_capacity = ticks;
        self
    }

    /// Size of the reserved range of simulation entity ids.
    pub fn max_simulation_entities(mut self, n: u32) -> Self {
        self.config.max_simulation_entities = n;
        self
    }

    /// How the local input frames sampled between two ticks combine into one tick's input
    /// ([local input is latched](crate::rules#local-input-is-latched)); default
    /// [`default_frame_merge`](crate::default_frame_merge). Inserted as the [`FrameMerge`]
    /// resource.
    pub fn frame_merge(mut self, merge: FrameMergeFn<I>) -> Self {
        self.frame_merge = Some(merge);
        self
    }

    /// The main-app schedule the session update runs in (default `PreUpdate`).
    pub fn in_schedule(mut self, schedule: impl ScheduleLabel) -> Self {
        self.schedule = schedule.intern();
        self
    }

    /// The determinism guard (debug aid, default off): flags the game's
    /// [`SimulationTick`](crate::SimulationTick) systems whose declared access reads state
    /// outside the rollback — a clock of the main app (`Time<Real>`, `Time<Virtual>`,
    /// `Time<Fixed>`), or a resource neither registered for rollback nor ignored
    /// (`ignore_rollback_resource`) — with a [`DeterminismWarning`](crate::DeterminismWarning)
    /// message naming the system, a `warn!` and
    /// [`SessionStats::determinism_warnings`](crate::SessionStats::determinism_warnings). It cannot
    /// see unseeded random numbers, hash-map iteration order, `Local` state or exclusive systems:
    /// see [the determinism guard](crate::rules#the-determinism-guard).
    pub fn determinism_guard(mut self, on: bool) -> Self {
        self.guard = on;
        self
    }

    /// Records the session's verified ticks to a replay with `recorder` (inserted as the
    /// [`ReplayRecorder`] resource; see there). Works with every session: local, networked,
    /// predicted or lockstep ([replays](crate::rules#replays)).
    pub fn record_replay(self, recorder: ReplayRecorder) -> Self {
        *self.recorder.lock().unwrap_or_else(PoisonError::into_inner) = Some(recorder);
        self
    }

    /// Plays `playback`'s replay instead of running a live session: the session becomes a
    /// local lockstep session configured as the recorded one (players, checksum interval,
    /// simulation entity range, rollback window; no input delay, no latency), its confirmed
    /// inputs come from the frames, and every recorded checksum is checked
    /// ([`ReplayPlayback`]). The game and the tick rate stay this plugin's: a replay of
    /// another game fails the playback with [`ReplayError::ForeignGame`](crate::ReplayError)
    /// at the first session update. Keep a [`SessionClock::Stepped`] clock to play as fast as
    /// possible (ticks per update), or the real-time clock to watch at the tick rate.
    pub fn play_replay(mut self, playback: ReplayPlayback<I>) -> Self {
        let header = playback.replay().header();
        self.config.players = header.players;
        self.config.mode = SessionMode::Lockstep;
        self.config.network = None;
        self.config.input_delay = 0;
        self.config.verify_predictions = false;
        self.config.checksum_interval = header.checksum_interval;
        self.config.max_simulation_entities = header.max_simulation_entities;
        self.config.rollback_window = header.rollback_window;
        self.config.local = LocalSessionConfig {
            latency_ticks: vec![0],
            jitter_ticks: 0,
            seed: 0,
            known_players: Vec::new(),
        };
        if let SessionClock::Stepped { ticks_per_update } = self.config.clock {
            self.config.max_verified_ticks_per_update = self
                .config
                .max_verified_ticks_per_update
                .max(ticks_per_update);
        }
        *self.playback.lock().unwrap_or_else(PoisonError::into_inner) = Some(playback);
        self
    }

    /// Enables snapshots ([snapshots](crate::rules#snapshots)) with these limits (inserted as
    /// the [`SnapshotLimits`](crate::SnapshotLimits) resource): a registered type that cannot
    /// be serialized becomes a setup error — returned by the `try_` registration when it can
    /// tell at once, and written as a [`RollbackSetupFailed`](crate::RollbackSetupFailed)
    /// message ([`SessionError::NotSerializable`]) when the session starts. Snapshots can be
    /// captured and loaded without this; it only makes missing serializers an early error.
    pub fn snapshots(mut self, limits: crate::snapshot::SnapshotLimits) -> Self {
        self.snapshots = Some(limits);
        self
    }

    /// The configuration as set so far.
    pub fn session_config(&self) -> &SessionConfig {
        &self.config
    }

    fn spec(&self) -> WorldSpec {
        WorldSpec {
            tick_rate: self.config.tick_rate,
            max_simulation_entities: self.config.max_simulation_entities,
            reuse_delay: self.config.rollback_window as i32 + 2,
            players: self.config.players,
            parallel: self.config.parallel_simulation,
            snapshots: self.snapshots.is_some(),
        }
    }

    /// The game builder the worlds are built with: the game, inside the determinism guard when
    /// it is on.
    fn game_builder(&self) -> GameBuilder {
        if self.guard {
            crate::guard::wrap_game(self.game.clone())
        } else {
            self.game.clone()
        }
    }

    /// Installs the session in `app`: its worlds, clock, lifecycle state, snapshot limits,
    /// resources, messages, schedules and systems, the guard's reporting and the replays.
    fn install(&self, app: &mut App) -> Result<(), SessionError> {
        let playback = self
            .playback
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let feed = playback.as_ref().map(ReplayFeed::new);
        let mut session = DeterministicSession::<I>::new(self.config.clone(), feed.clone())?;
        add_builtin_hooks(&mut session, &self.config, playback.as_ref());
        let spec = self.spec();
        let game = self.game_builder();
        let (verified, predicted) = build_sub_apps::<I>(&spec, &game)?;
        app.insert_sub_app(VerifiedApp, verified);
        app.insert_sub_app(PredictedApp, predicted);
        // The App's `TickRate` has one writer, `VirtualTimePlugin`; it is not unique, so adding
        // it here with the session's rate works whether or not `SimSyncPlugins` added it.
        app.add_plugins(VirtualTimePlugin::default().tick_rate(self.config.tick_rate));
        let lifecycle = initial_lifecycle(&self.config);
        install_states(app, lifecycle.state);
        self.install_snapshot_limits(app);
        self.install_session_resources(app, session, lifecycle, (game, spec, feed));
        add_session_messages(app);
        self.install_session_schedules(app);
        crate::guard::install_reporting(app);
        self.install_replays(app, playback);
        Ok(())
    }

    /// The snapshot limits given to the builder, with the core's snapshot hooks unless the app
    /// brought its own; registers the limits' type either way.
    fn install_snapshot_limits(&self, app: &mut App) {
        if let Some(limits) = self.snapshots {
            app.insert_resource(limits);
            // The snapshot core's capture and load for a networked client's exchange, unless
            // the app brought its own hooks.
            if !app.world().contains_resource::<crate::SnapshotHooks>() {
                app.insert_resource(crate::SnapshotHooks::core::<I>(limits.max_bytes));
            }
        }
        app.register_type::<crate::snapshot::SnapshotLimits>();
    }

    /// The session, its lifecycle and blueprint (`game`, `spec` and the replay `feed` of a
    /// playback), and the resources the session's systems and the game read (end, context,
    /// stats, local inputs and players).
    fn install_session_resources(
        &self,
        app: &mut App,
        session: DeterministicSession<I>,
        lifecycle: SessionLifecycle,
        (game, spec, feed): (GameBuilder, WorldSpec, Option<ReplayFeed<I>>),
    ) {
        app.insert_resource(session)
            .insert_resource(lifecycle)
            .insert_resource(SessionBlueprint::<I> {
                game,
                config: Box::new(self.config.clone()),
                spec,
                replay: feed,
                _input: PhantomData,
            })
            .init_resource::<SessionEnd>()
            .add_message::<SessionStateChanged>()
            .init_resource::<SimulatorContext>()
            .init_resource::<SessionStats>()
            .insert_resource(LocalInputs::<I>::new(self.config.players))
            .insert_resource(initial_local_players(&self.config))
            .register_type::<LocalPlayers>()
            .register_type::<SessionStats>()
            .register_type::<SimulatorContext>()
            .register_type::<SimEventStats>();
    }

    /// The session's schedules around verification and prediction, its frame system in
    /// [`DeterministicSet::SessionUpdate`] (after renet's receive, after reading local input),
    /// and the frame merge given to the builder (or the default).
    fn install_session_schedules(&self, app: &mut App) {
        app.init_schedule(BeforeVerification)
            .init_schedule(BeforePrediction)
            .init_schedule(AfterPrediction)
            .add_systems(
                self.schedule,
                session_frame::<I>.in_set(DeterministicSet::SessionUpdate),
            )
            .configure_sets(
                self.schedule,
                DeterministicSet::SessionUpdate.after(simsync_net::bevy_renet::RenetReceive),
            )
            .configure_sets(
                self.schedule,
                DeterministicSet::ReadLocalInput.before(DeterministicSet::SessionUpdate),
            );
        match self.frame_merge {
            Some(merge) => app.insert_resource(FrameMerge(merge)),
            None => app.init_resource::<FrameMerge<I>>(),
        };
    }

    /// The replay messages, and the recorder or playback given to the builder.
    fn install_replays(&self, app: &mut App, playback: Option<ReplayPlayback<I>>) {
        app.add_message::<ReplayWriteFailed>()
            .add_message::<ReplayMismatch>()
            .add_message::<ReplayPlaybackFailed>();
        if let Some(recorder) = self
            .recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            app.insert_resource(recorder);
        }
        if let Some(playback) = playback {
            app.insert_resource(playback);
        }
    }
}

/// The session's own [verified-tick hooks](crate::rules#verified-tick-hooks), in call order:
/// checksum reporting, the prediction check (`verify_predictions`), desync dumps (with a dump
/// directory), replay recording (into a [`ReplayRecorder`] resource, if any) and the check of
/// `playback`.
fn add_builtin_hooks<I: SimInput>(
    session: &mut DeterministicSession<I>,
    config: &SessionConfig,
    playback: Option<&ReplayPlayback<I>>,
) {
    session.add_hook(ChecksumReport);
    if config.verify_predictions {
        session.add_hook(PredictionCheckHook);
    }
    if config.desync_dumps.is_some() {
        session.add_hook(DesyncDumps);
    }
    session.add_hook(ReplayRecording);
    if let Some(playback) = playback {
        session.add_hook(ReplayCheck::new(playback));
    }
}

/// Bevy's `StatesPlugin` (with single-threaded transitions) unless the app brought its own,
/// and the session's lifecycle `state`.
fn install_states(app: &mut App, state: SessionState) {
    if !app.is_plugin_added::<StatesPlugin>() {
        app.add_plugins(StatesPlugin);
        // The transitions run in order (exit, transition, enter, with command flushes
        // between): Bevy's multi-threaded executor only adds a task dispatch and thread
        // wake-up per system to every frame (docs/performance.md). An App that brought
        // its own `StatesPlugin` keeps its choice.
        app.edit_schedule(StateTransition, |transitions| {
            transitions.set_executor(SingleThreadedExecutor::new());
        });
    }
    app.insert_state(state);
}

/// Every message the session writes or reads (checks, desyncs, stalls, presence, dumps,
/// snapshots), and the sim-event stats.
fn add_session_messages(app: &mut App) {
    app.add_message::<ChecksumRecorded>()
        .add_message::<VerificationStopped>()
        .add_message::<UnregisteredComponent>()
        .add_message::<PredictionMismatch>()
        .add_message::<UnsimulatedEntity>()
        .add_message::<UncheckedState>()
        .add_message::<RollbackSetupFailed>()
        .add_message::<DesyncDetected>()
        .add_message::<InputSubstituted>()
        .add_message::<SessionStalled>()
        .add_message::<SessionResumed>()
        .add_message::<NeedsSnapshot>()
        .add_message::<SessionRejected>()
        .add_message::<UnregisteredSimEvent>()
        .init_resource::<SimEventStats>()
        .add_message::<PlayerLeft>()
        .add_message::<PlayerRejoined>()
        .add_message::<crate::dump::DesyncDumpWritten>()
        .add_message::<crate::dump::DesyncDumpFailed>()
        .add_message::<crate::dump::DesyncReport>()
        .add_message::<crate::source::SnapshotReceived>()
        .add_message::<crate::source::SnapshotRejected>();
}

/// The [`LocalPlayers`] before the first session update: every player in a local session, none
/// in a networked one (until welcomed).
fn initial_local_players(config: &SessionConfig) -> LocalPlayers {
    match config.network {
        Some(_) => LocalPlayers::default(),
        None => LocalPlayers::new(0..config.players),
    }
}

/// The session's part of a main-app frame, the one system of [`DeterministicSet::SessionUpdate`],
/// in order: builds the worlds if the App was not cleaned up, starts or feeds a replay, runs the
/// session update (poll, verify, roll back, predict), records the replay frame, moves the
/// [`SessionState`](crate::SessionState) on, exchanges join snapshots and reports determinism
/// findings. One exclusive system rather than seven: Bevy's multi-threaded executor pays a
/// task dispatch, and often a thread wake-up, per system, which cost more than these steps do
/// when there is nothing to do (`docs/performance.md`).
fn session_frame<I: SimInput>(world: &mut World) {
    build_worlds_on_first_update::<I>(world);
    replay_before_update::<I>(world);
    session_update::<I>(world);
    replay_after_update::<I>(world);
    if let Err(error) = world.run_system_cached(update_lifecycle) {
        warn_once!("session lifecycle not updated: {error}");
    }
    crate::session::net_snapshots::exchange_snapshots::<I>(world);
    crate::guard::report_findings(world);
}

/// Builds the simulation worlds in the first session update of an App that was not cleaned up
/// ([headless stepping](crate::rules#headless-stepping)). A failure is kept as
/// [`SessionSetupError`] and logged, and not tried again.
fn build_worlds_on_first_update<I: SimInput>(world: &mut World) {
    if world.contains_resource::<SessionSetupError>() {
        return;
    }
    if let Some(error) = build_missing_worlds::<I>(world) {
        error!("DeterministicPlugin: {error}");
        world.insert_resource(SessionSetupError(error));
    }
}

impl<I: SimInput> Plugin for DeterministicPlugin<I> {
    fn build(&self, app: &mut App) {
        if let Err(error) = self.install(app) {
            error!("DeterministicPlugin not installed: {error}");
            app.insert_resource(SessionSetupError(error));
        }
    }

    fn cleanup(&self, app: &mut App) {
        let (Some(mut verified), Some(mut predicted)) = (
            app.remove_sub_app(VerifiedApp),
            app.remove_sub_app(PredictedApp),
        ) else {
            return;
        };
        if app.world().contains_resource::<SimulationWorlds>() {
            // Built by a session update already (the App was stepped before `cleanup`).
            return;
        }
        verified.cleanup();
        predicted.cleanup();
        let (worlds, error) = assemble_worlds::<I>(verified, predicted);
        if let Some(error) = error {
            error!("{error}");
            app.insert_resource(SessionSetupError(error));
        }
        app.insert_resource(worlds);
    }
}

/// Adds a [`VerifiedTickHook`] to the App's session.
pub trait VerifiedTickHookAppExt {
    /// Adds `hook` to the session of the App's
    /// [`DeterministicPlugin<I>`](crate::DeterministicPlugin) (add the plugin first), after the
    /// hooks added before it. Without the plugin's session (not added, or its configuration
    /// failed) the hook is dropped with an error logged.
    fn add_verified_tick_hook<I: SimInput>(&mut self, hook: impl VerifiedTickHook<I>) -> &mut Self;
}

impl VerifiedTickHookAppExt for App {
    fn add_verified_tick_hook<I: SimInput>(&mut self, hook: impl VerifiedTickHook<I>) -> &mut Self {
        match self
            .world_mut()
            .get_resource_mut::<DeterministicSession<I>>()
        {
            Some(mut session) => session.hooks.push(Box::new(hook)),
            None => error!(
                "add_verified_tick_hook: no DeterministicPlugin session for this input type \
                 (add the plugin first); the hook is not installed"
            ),
        }
        self
    }
}
