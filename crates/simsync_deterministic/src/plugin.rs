//! [`DeterministicPlugin`]: wires the session into an app.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use bevy::ecs::schedule::{InternedScheduleLabel, ScheduleLabel, SingleThreadedExecutor};
use bevy::prelude::*;
use bevy_state::app::{AppExtStates, StatesPlugin};
use bevy_state::state::StateTransition;
use simsync_time::VirtualTimePlugin;

use crate::config::{
    DebugConfig, LocalSessionConfig, NetworkSessionConfig, SessionClock, SessionConfig, SessionMode,
};
use crate::context::SimulatorContext;
use crate::divergence::{
    PredictionMismatch, RollbackSetupFailed, UncheckedState, UnregisteredComponent,
    UnsimulatedEntity,
};
use crate::dump::{DesyncDumpConfig, DesyncDumps};
use crate::error::SessionError;
use crate::events::{SimEventStats, UnregisteredSimEvent};
use crate::headless::build_missing_worlds;
use crate::hooks::{VerificationStopped, VerifiedTickHook};
use crate::input::{FrameMergeFn, SimInput};
use crate::prediction_check::PredictionCheckHook;
use crate::replay::systems::{replay_after_update, replay_before_update};
use crate::replay::{
    ReplayCheck, ReplayFeed, ReplayMismatch, ReplayPlayback, ReplayPlaybackFailed, ReplayRecorder,
    ReplayRecording, ReplayWriteFailed,
};
use crate::restart::initial_lifecycle;
use crate::schedule::{AfterPrediction, BeforePrediction, BeforeVerification, DeterministicSet};
use crate::session::{
    DeterministicSession, SessionEnd, SessionLifecycle, SessionState, SessionStateChanged,
    session_update, update_lifecycle,
};
use crate::source::{
    DesyncDetected, InputSubstituted, PlayerDesynced, PlayerLeft, PlayerRejoined, SessionRejected,
};
use crate::source::{FrameMerge, LocalInputs, LocalPlayers, RecordedInputs};
use crate::stats::{ChecksumRecorded, NeedsSnapshot, SessionResumed, SessionStalled, SessionStats};
use crate::tick::PlayerIndex;
use crate::warning::{SessionSetupError, SessionWarning, setup_failed};
use crate::worlds::{
    GameBuilder, PredictedApp, SessionBlueprint, SimulationWorlds, VerifiedApp, WorldSpec,
    assemble_worlds, build_sub_apps,
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
///     .add_plugins(DeterministicPlugin::<PackedInput>::new(MyGame).config(SessionConfig {
///         players: 2,
///         rollback_window: 60,
///         ..default()
///     }))
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
/// is not installed (the [`SessionSetupError`] resource holds the error, also written as a
/// [`SessionWarning::Setup`] message); nothing panics. So is a second `DeterministicPlugin` in
/// the same App ([`SessionError::PluginAddedTwice`]: the first one's session stays) and a game
/// plugin that adds Rapier's `RapierPhysicsPlugin` ([`SessionError::PluginInGame`]: the
/// simulation worlds have Rapier already).
///
/// The session's lifecycle is also a Bevy state, `State<SessionState>`
/// ([session lifecycle](crate::rules#session-lifecycle)); the plugin adds Bevy's
/// `StatesPlugin` unless it is already added (`MinimalPlugins` lacks it), so add
/// `DefaultPlugins` (with bevy's `bevy_state` feature) before this plugin, not after.
///
/// The App's [`TickRate`](simsync_time::TickRate) is the session's: the plugin adds a `VirtualTimePlugin` with it (the
/// only writer of `TickRate`), before or after `SimSyncPlugins` alike.
pub struct DeterministicPlugin<I: SimInput> {
    game: GameBuilder,
    config: SessionConfig,
    schedule: InternedScheduleLabel,
    frame_merge: Option<FrameMergeFn<I>>,
    debug: DebugConfig,
    /// Inserted at build (taken once: a plugin is built once).
    replay: Mutex<Option<ReplayMode<I>>>,
    snapshots: Option<crate::snapshot::SnapshotLimits>,
    _input: PhantomData<fn() -> I>,
}

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
            debug: DebugConfig::default(),
            replay: Mutex::new(None),
            snapshots: None,
            _input: PhantomData,
        }
    }

    /// Replaces the whole configuration.
    pub fn config(mut self, config: SessionConfig) -> Self {
        self.config = config;
        self
    }

    /// Changes the configuration given so far in place:
    /// `plugin.edit_config(|c| c.verify_predictions = true)`.
    pub fn edit_config(mut self, edit: impl FnOnce(&mut SessionConfig)) -> Self {
        edit(&mut self.config);
        self
    }

    /// Number of players (≥ 1): the one setting every game makes; the rest of the session's
    /// settings are in [`config`](Self::config).
    pub fn players(mut self, players: PlayerIndex) -> Self {
        self.config.players = players;
        self
    }

    /// A networked session: confirmed inputs come from a relay server (the `simsync_relay`
    /// crate's `DeterministicServerPlugin`) over renet. The app
    /// needs a `RenetClient` and a transport (`simsync_net::NetClientPlugin`).
    pub fn networked(mut self, network: NetworkSessionConfig) -> Self {
        self.config.network = Some(network);
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

    /// The debug aids ([`DebugConfig`]): desync dumps and the determinism guard (both off by
    /// default).
    pub fn debugging(mut self, debug: DebugConfig) -> Self {
        self.debug = debug;
        self
    }

    /// Records the session's verified ticks, or plays a recorded replay instead of a live
    /// session ([`ReplayMode`]; [replays](crate::rules#replays)).
    pub fn replay(self, mode: ReplayMode<I>) -> Self {
        *self.replay.lock().unwrap_or_else(PoisonError::into_inner) = Some(mode);
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

    /// The session's configuration as it will be built: the one given, with a replay's
    /// recorded settings when one is played
    /// ([`ReplayMode::Play`]).
    pub fn session_config(&self) -> SessionConfig {
        let mut config = self.config.clone();
        let replay = self.replay.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ReplayMode::Play(playback)) = replay.as_ref() {
            configure_for_replay(&mut config, playback.replay().header());
        }
        config
    }

    fn spec(&self, config: &SessionConfig) -> WorldSpec {
        WorldSpec {
            tick_rate: config.tick_rate,
            max_simulation_entities: config.max_simulation_entities,
            reuse_delay: config.rollback_window as i32 + 2,
            players: config.players,
            parallel: config.parallel_simulation,
            snapshots: self.snapshots.is_some(),
        }
    }

    /// The game builder the worlds are built with: the game, inside the determinism guard when
    /// it is on.
    fn game_builder(&self) -> GameBuilder {
        if self.debug.determinism_guard {
            crate::guard::wrap_game(self.game.clone())
        } else {
            self.game.clone()
        }
    }

    /// Installs the session in `app`: its worlds, clock, lifecycle state, snapshot limits,
    /// resources, messages, schedules and systems, the guard's reporting and the replays.
    fn install(&self, app: &mut App) -> Result<(), SessionError> {
        let config = self.session_config();
        let replay = self
            .replay
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let (recorder, playback) = match replay {
            Some(ReplayMode::Record(recorder)) => (Some(recorder), None),
            Some(ReplayMode::Play(playback)) => (None, Some(playback)),
            None => (None, None),
        };
        let feed = playback
            .as_ref()
            .map(|p| Box::new(ReplayFeed::new(p)) as Box<dyn RecordedInputs<I>>);
        let mut session = DeterministicSession::<I>::new(config.clone(), feed.clone())?;
        let dumps = self.debug.desync_dumps.clone();
        add_builtin_hooks(&mut session, &config, playback.as_ref(), dumps);
        let spec = self.spec(&config);
        let game = self.game_builder();
        let (verified, predicted) = build_sub_apps::<I>(&spec, &game)?;
        app.insert_sub_app(VerifiedApp, verified);
        app.insert_sub_app(PredictedApp, predicted);
        // The App's `TickRate` has one writer, `VirtualTimePlugin`; it is not unique, so adding
        // it here with the session's rate works whether or not `SimSyncPlugins` added it.
        app.add_plugins(VirtualTimePlugin::default().tick_rate(config.tick_rate));
        let lifecycle = initial_lifecycle(&config);
        install_states(app, lifecycle.state);
        crate::late_join::install::<I>(app, self.snapshots);
        self.install_session_resources(app, session, lifecycle, (game, spec, feed), config);
        add_session_messages(app);
        self.install_session_schedules(app);
        crate::guard::install_reporting(app);
        Self::install_replays(app, recorder, playback);
        Ok(())
    }

    /// The session, its lifecycle and blueprint (`game`, `spec` and the replay `feed` of a
    /// playback), and the resources the session's systems and the game read (end, context,
    /// stats, local inputs and players).
    fn install_session_resources(
        &self,
        app: &mut App,
        session: DeterministicSession<I>,
        lifecycle: SessionLifecycle,
        (game, spec, feed): (GameBuilder, WorldSpec, Option<Box<dyn RecordedInputs<I>>>),
        config: SessionConfig,
    ) {
        app.insert_resource(session)
            .insert_resource(lifecycle)
            .insert_resource(SessionBlueprint::<I> {
                game,
                config: Box::new(config.clone()),
                spec,
                replay: feed,
                _input: PhantomData,
            })
            .init_resource::<SessionEnd>()
            .add_message::<SessionStateChanged>()
            .init_resource::<SimulatorContext>()
            .init_resource::<SessionStats>()
            .insert_resource(LocalInputs::<I>::new(config.players))
            .insert_resource(initial_local_players(&config))
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
    fn install_replays(
        app: &mut App,
        recorder: Option<ReplayRecorder>,
        playback: Option<ReplayPlayback<I>>,
    ) {
        app.add_message::<ReplayWriteFailed>()
            .add_message::<ReplayMismatch>()
            .add_message::<ReplayPlaybackFailed>();
        if let Some(recorder) = recorder {
            app.insert_resource(recorder);
        }
        if let Some(playback) = playback {
            app.insert_resource(playback);
        }
    }
}

/// What playing a replay makes of the session's configuration: a local lockstep session
/// configured as the recorded one (players, checksum interval, simulation entity range,
/// rollback window; no input delay, no latency, no prediction check), with enough verified
/// ticks per update for a stepped clock's ticks.
fn configure_for_replay(config: &mut SessionConfig, header: &crate::ReplayHeader) {
    config.players = header.players;
    config.mode = SessionMode::Lockstep;
    config.network = None;
    config.input_delay = 0;
    config.verify_predictions = false;
    config.checksum_interval = header.checksum_interval;
    config.max_simulation_entities = header.max_simulation_entities;
    config.rollback_window = header.rollback_window;
    config.local = LocalSessionConfig {
        latency_ticks: vec![0],
        jitter_ticks: 0,
        seed: 0,
        known_players: Vec::new(),
    };
    if let SessionClock::Stepped { ticks_per_update } = config.clock {
        config.max_verified_ticks_per_update =
            config.max_verified_ticks_per_update.max(ticks_per_update);
    }
}

/// What a session does with replays ([`DeterministicPlugin::replay`]; [replays](crate::rules#replays)).
pub enum ReplayMode<I: SimInput> {
    /// Records the session's verified ticks with this recorder (inserted as the
    /// [`ReplayRecorder`] resource; see there). Works with every session: local, networked,
    /// predicted or lockstep.
    Record(ReplayRecorder),
    /// Plays this replay instead of running a live session: the session becomes a local
    /// lockstep session configured as the recorded one (players, checksum interval, simulation
    /// entity range, rollback window; no input delay, no latency), whatever the plugin's
    /// configuration says; its confirmed inputs come from the frames, and every recorded
    /// checksum is checked ([`ReplayPlayback`]). The game and the tick rate stay the plugin's:
    /// a replay of another game fails the playback with
    /// [`ReplayError::ForeignGame`](crate::ReplayError) at the first session update. Keep a
    /// [`SessionClock::Stepped`] clock to play as fast as possible (ticks per update), or the
    /// real-time clock to watch at the tick rate.
    Play(ReplayPlayback<I>),
}

/// The session's own [hooks](crate::rules#verified-tick-hooks), in call order: the prediction
/// check (`verify_predictions`), desync dumps (with a dump directory, `dumps`), replay
/// recording (into a [`ReplayRecorder`] resource, if any) and the check of `playback`.
fn add_builtin_hooks<I: SimInput>(
    session: &mut DeterministicSession<I>,
    config: &SessionConfig,
    playback: Option<&ReplayPlayback<I>>,
    dumps: Option<DesyncDumpConfig>,
) {
    if config.verify_predictions {
        session.add_hook(PredictionCheckHook::default());
    }
    if let Some(dumps) = dumps.clone() {
        session.add_hook(DesyncDumps::new(dumps));
    }
    session.add_hook(ReplayRecording);
    if let Some(playback) = playback {
        session.add_hook(ReplayCheck::new(playback, dumps));
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
        .add_message::<PlayerDesynced>()
        .add_message::<InputSubstituted>()
        .add_message::<SessionStalled>()
        .add_message::<SessionResumed>()
        .add_message::<NeedsSnapshot>()
        .add_message::<SessionRejected>()
        .add_message::<UnregisteredSimEvent>()
        .init_resource::<SimEventStats>()
        .add_message::<PlayerLeft>()
        .add_message::<PlayerRejoined>()
        .add_message::<crate::LeaveSession>()
        .add_message::<crate::dump::DesyncDumpWritten>()
        .add_message::<crate::dump::DesyncDumpFailed>()
        .add_message::<simsync_net::DesyncReport>();
    crate::late_join::add_messages(app);
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
/// [`SessionState`](crate::SessionState) on, rebuilds the session for the relay's next match
/// (a rematch), exchanges join snapshots and reports determinism findings. One exclusive system rather than seven: Bevy's multi-threaded executor pays a
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
    crate::restart::follow_next_match::<I>(world);
    crate::late_join::exchange_snapshots::<I>(world);
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
        setup_failed(world, error);
    }
}

/// Which [`DeterministicPlugin`] holds the App's session (main-app resource): an App holds one.
#[derive(Resource)]
struct InstalledPlugin(&'static str);

impl<I: SimInput> Plugin for DeterministicPlugin<I> {
    fn build(&self, app: &mut App) {
        // Rapier's and the game's math through `libm` in this program (rules: "Determinism
        // across builds and platforms").
        #[cfg(all(feature = "enhanced-determinism", target_os = "linux"))]
        crate::portable_libm::link();
        app.add_message::<SessionWarning>();
        let this = std::any::type_name::<Self>();
        if let Some(first) = app.world().get_resource::<InstalledPlugin>() {
            let error = SessionError::PluginAddedTwice {
                first: first.0,
                second: this,
            };
            setup_failed(app.world_mut(), error);
            return;
        }
        app.insert_resource(InstalledPlugin(this));
        if let Err(error) = self.install(app) {
            setup_failed(app.world_mut(), error);
        }
    }

    /// Not unique for Bevy, so a second plugin is not Bevy's generic "plugin already added"
    /// panic: its `build` refuses it with [`SessionError::PluginAddedTwice`] instead.
    fn is_unique(&self) -> bool {
        false
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
            setup_failed(app.world_mut(), error);
        }
        app.insert_resource(worlds);
    }
}

/// Adds a [`VerifiedTickHook`] to the App's session.
pub trait VerifiedTickHookAppExt {
    /// Adds `hook` to the session of the App's
    /// [`DeterministicPlugin<I>`](crate::DeterministicPlugin) (add the plugin first), after the
    /// hooks added before it.
    ///
    /// # Errors
    /// [`SessionError::WorldsNotBuilt`] when the App has no session of input type `I` (the
    /// plugin was not added, or its configuration failed); the hook is not installed.
    fn add_verified_tick_hook<I: SimInput>(
        &mut self,
        hook: impl VerifiedTickHook<I>,
    ) -> Result<&mut Self, SessionError>;
}

impl VerifiedTickHookAppExt for App {
    fn add_verified_tick_hook<I: SimInput>(
        &mut self,
        hook: impl VerifiedTickHook<I>,
    ) -> Result<&mut Self, SessionError> {
        let Some(mut session) = self
            .world_mut()
            .get_resource_mut::<DeterministicSession<I>>()
        else {
            return Err(SessionError::WorldsNotBuilt);
        };
        session.hooks.push(Box::new(hook));
        Ok(self)
    }
}
