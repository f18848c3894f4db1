//! [`DeterministicSession`]: the session's own state between updates, with the
//! [verified-tick hooks](crate::rules#verified-tick-hooks) it owns ([`VerifiedTickHook`], and
//! [`VerifiedTick`]: what a hook sees of one verified tick). The verify step simulates a tick,
//! computes its checksum when due and hands it to the hooks in order; checksum reporting, the
//! prediction check, desync dumps, replay recording and replay checking are hooks the plugin
//! installs, and a game adds its own with
//! [`VerifiedTickHookAppExt`](crate::VerifiedTickHookAppExt).

use std::collections::BTreeMap;

use bevy::prelude::*;

use super::audit::PredictionAudit;
use super::hooks::{HookFlow, VerificationStopped};
use super::stats::SessionStats;
use crate::checksum::ComponentBreakdown;
use crate::config::SessionConfig;
use crate::error::SessionError;
use crate::input::{InputBuffer, InputStatus, SimInput};
use crate::replay::ReplayFeed;
use crate::source::{InputSource, NextMatch, RelayLink};
use crate::tick::{PlayerIndex, Tick};
use crate::worlds::SimulationWorlds;

/// The session's own state (main-app resource).
#[derive(Resource)]
pub struct DeterministicSession<I: SimInput> {
    // Boxed: Bevy keeps room for 64 values of every resource type.
    pub(super) config: Box<SessionConfig>,
    pub(super) buffer: InputBuffer<I>,
    pub(super) source: InputSource<I>,
    /// The link to the relay server for everything but inputs (networked sessions only).
    pub(super) link: Option<RelayLink<I>>,
    /// Called after every verified tick, in order.
    pub(crate) hooks: VerifiedTickHooks<I>,
    /// Set when a hook stopped verification: no later tick is verified.
    pub(super) stopped: Option<VerificationStopped>,
    /// The verified world's tick as the last update (or snapshot load) left it.
    pub(super) verified_tick: Tick,
    /// The predicted world's tick as this update leaves it.
    pub(super) predicted_tick: Tick,
    /// The highest tick ever predicted (re-simulation counting).
    pub(super) highest_predicted: Tick,
    /// Hash of the input set each tick of the current predicted timeline was simulated with.
    pub(super) used_inputs: BTreeMap<Tick, u64>,
    /// A tick the predicted world simulated since its last rollback, and which has left
    /// `used_inputs`, ran on inputs other than the confirmed ones.
    pub(super) predicted_diverged: bool,
    pub(super) audit: PredictionAudit,
    /// Desync dump bookkeeping.
    pub(crate) dumps: crate::dump::DumpState,
    pub(super) started: bool,
    /// Scratch input set of the tick being simulated.
    pub(crate) inputs: Vec<I>,
    pub(super) status: Vec<InputStatus>,
}

impl<I: SimInput> DeterministicSession<I> {
    /// A session configured by `config` whose confirmed inputs are `replay`'s frames when given
    /// (a replay playback), else the relay's.
    pub(crate) fn new(
        config: SessionConfig,
        replay: Option<ReplayFeed<I>>,
    ) -> Result<Self, SessionError> {
        config.validate()?;
        let players = config.players;
        let mut buffer = InputBuffer::new(players, config.input_capacity)?;
        // Ticks 1..=input_delay have no sampled input: everyone starts with the default.
        for tick in 1..=config.input_delay as Tick {
            for p in 0..players {
                buffer.confirm(p, tick, I::default())?;
            }
        }
        let (source, link) = InputSource::new(&config, replay)?;
        Ok(Self {
            buffer,
            source,
            link,
            hooks: VerifiedTickHooks::default(),
            stopped: None,
            verified_tick: 0,
            predicted_tick: 0,
            highest_predicted: 0,
            used_inputs: BTreeMap::new(),
            predicted_diverged: false,
            audit: PredictionAudit::default(),
            dumps: crate::dump::DumpState::default(),
            started: false,
            inputs: Vec::with_capacity(usize::from(players)),
            status: Vec::with_capacity(usize::from(players)),
            config: Box::new(config),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// The next tick whose local inputs will be polled (the tick `LocalInputs` feeds next,
    /// before the input delay is added).
    pub fn next_poll_tick(&self) -> Tick {
        self.source.local_tick() + 1
    }

    /// The tick the inputs written to [`LocalInputs`](crate::LocalInputs) before the next
    /// session update apply to ([`next_poll_tick`](Self::next_poll_tick) plus the input delay).
    pub fn next_input_tick(&self) -> Tick {
        self.next_poll_tick() + self.config.input_delay as Tick
    }

    /// The input buffer.
    pub fn buffer(&self) -> &InputBuffer<I> {
        &self.buffer
    }

    /// Marks local `player` connected (`true`) or disconnected (`false`) from `from_tick` on,
    /// replacing any change set for a later tick: the simulation sees it in
    /// [`PlayerInputs::is_connected`](crate::PlayerInputs::is_connected) from exactly that
    /// tick, in both worlds and across rollbacks, as a networked session shows a player the
    /// relay counts as gone ([disconnecting a local
    /// player](crate::rules#disconnecting-a-local-player)). The player's input stays what
    /// [`LocalInputs`](crate::LocalInputs) gives. A change of a tick already confirmed but not
    /// verified rolls the predicted world back like a misprediction; replays record the marks.
    ///
    /// # Errors
    /// [`SessionError::NotALocalSession`] in a networked session or a replay playback;
    /// [`SessionError::UnknownPlayer`] for a player outside `0..players`;
    /// [`SessionError::TickAlreadyVerified`] when `from_tick` is not after the verified tick.
    /// Nothing changes on an error.
    pub fn set_player_connected(
        &mut self,
        player: PlayerIndex,
        connected: bool,
        from_tick: Tick,
    ) -> Result<(), SessionError> {
        self.source.ensure_local()?;
        let players = self.config.players;
        if player >= players {
            return Err(SessionError::UnknownPlayer { player, players });
        }
        let verified_tick = self.verified_tick.max(self.buffer.discarded_through());
        if from_tick <= verified_tick {
            return Err(SessionError::TickAlreadyVerified {
                tick: from_tick,
                verified_tick,
            });
        }
        self.source
            .set_player_connected(player, connected, from_tick, &mut self.buffer)
    }

    /// Why and where verification stopped, if a [`VerifiedTickHook`] stopped it.
    pub fn verification_stopped(&self) -> Option<&VerificationStopped> {
        self.stopped.as_ref()
    }

    /// The relay's later match this networked session is to be rebuilt for, if the relay
    /// moved on (a rematch; [what survives a rematch](crate::rules#what-survives-a-rematch)).
    pub(crate) fn next_match(&self) -> Option<NextMatch> {
        self.link.as_ref().and_then(RelayLink::next_match)
    }

    /// This session, new for the relay's `next` match, takes over `old`'s connection to the
    /// relay (networked sessions; nothing otherwise).
    pub(crate) fn take_connection(&mut self, old: &mut DeterministicSession<I>, next: NextMatch) {
        if let (Some(new), Some(old)) = (self.link.as_mut(), old.link.as_mut()) {
            new.take_connection(old, next);
        }
    }

    /// Adds `hook` after the session's other verified-tick hooks.
    pub(crate) fn add_hook(&mut self, hook: impl VerifiedTickHook<I>) {
        self.hooks.push(Box::new(hook));
    }
}

/// Called by the session after every verified tick, in tick order, each tick exactly once
/// ([verified-tick hooks](crate::rules#verified-tick-hooks)). The verified world is the one
/// every peer agrees on, so a hook sees the same ticks, inputs and states on every peer and in
/// a replay of the session: the place for analytics, anti-cheat checks or a custom recorder.
///
/// The session owns its hooks and calls them in the order they were added, after its own
/// (checksum reporting, the prediction check, desync dumps, replay recording, the replay
/// check). Add one with
/// [`add_verified_tick_hook`](crate::VerifiedTickHookAppExt::add_verified_tick_hook) after the
/// [`DeterministicPlugin`](crate::DeterministicPlugin); it stays with the App's session across
/// [`restart_session`](crate::restart_session).
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
pub trait VerifiedTickHook<I: SimInput>: Send + Sync + 'static {
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
}

/// One verified tick as the hooks see it: its number, its confirmed inputs, its checksum on a
/// checksum tick, and the verified world at it.
pub struct VerifiedTick<'a, I: SimInput> {
    pub(crate) tick: Tick,
    pub(crate) disconnected: u64,
    pub(crate) checksum: Option<u64>,
    /// The main App's world (without the session's resources, which the update holds).
    pub(crate) main: &'a mut World,
    pub(crate) worlds: &'a mut SimulationWorlds,
    /// The session (its hooks are out of it while they run).
    pub(crate) session: &'a mut DeterministicSession<I>,
    pub(crate) stats: &'a mut SessionStats,
}

impl<I: SimInput> VerifiedTick<'_, I> {
    /// The verified tick.
    pub fn tick(&self) -> Tick {
        self.tick
    }

    /// Every player's confirmed input of the tick, by player index (the default input where
    /// none was confirmed, as the simulation saw it).
    pub fn inputs(&self) -> &[I] {
        &self.session.inputs
    }

    /// The status of every player's input (confirmed, for a verified tick).
    pub fn input_status(&self) -> &[InputStatus] {
        &self.session.status
    }

    /// Whether `player` was disconnected at this tick (its input replaced by the relay).
    pub fn is_disconnected(&self, player: PlayerIndex) -> bool {
        player < 64 && self.disconnected & (1u64 << player) != 0
    }

    /// The players disconnected at this tick, one bit per player index.
    pub fn disconnected(&self) -> u64 {
        self.disconnected
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

    /// The verified world, at this tick.
    pub fn world(&self) -> &World {
        &self.worlds.verified.world
    }

    /// The per-component hash breakdown of the verified world at this tick (what a client sends
    /// the relay on a desync): one hash per registered component type, per live simulation
    /// entity and per registered resource. It hashes the whole state once more, so a hook that
    /// keeps breakdowns costs about one checksum per call.
    pub fn breakdown(&mut self) -> ComponentBreakdown {
        crate::dump::capture::breakdown(&mut self.worlds.verified, &self.worlds.registry)
    }

    /// The main App's world, e.g. to write a message or keep a result in a resource. The
    /// session's own resources (the session, the simulation worlds, [`SessionStats`]) are out
    /// of it while the session update runs.
    pub fn app_world(&mut self) -> &mut World {
        self.main
    }
}

/// The session's hooks, in call order.
#[derive(Default)]
pub(crate) struct VerifiedTickHooks<I: SimInput> {
    hooks: Vec<Box<dyn VerifiedTickHook<I>>>,
}

impl<I: SimInput> VerifiedTickHooks<I> {
    /// Adds `hook` after the others.
    pub(crate) fn push(&mut self, hook: Box<dyn VerifiedTickHook<I>>) {
        self.hooks.push(hook);
    }

    /// Whether some hook wants the checksum of `tick`.
    pub(crate) fn want_checksum(&self, tick: Tick) -> bool {
        self.hooks.iter().any(|hook| hook.wants_checksum(tick))
    }

    /// Runs every hook on `verified`; the first stop reason, if any hook stopped.
    pub(crate) fn run(&mut self, verified: &mut VerifiedTick<'_, I>) -> Option<String> {
        let mut stop = None;
        for hook in &mut self.hooks {
            if let HookFlow::Stop(reason) = hook.on_verified(verified) {
                stop.get_or_insert(reason);
            }
        }
        stop
    }
}
