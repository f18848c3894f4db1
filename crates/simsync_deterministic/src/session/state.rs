//! [`DeterministicSession`]: the session's own state between updates, with the
//! [session hooks](crate::rules#verified-tick-hooks) it owns and calls
//! ([`VerifiedTickHook`](crate::VerifiedTickHook)). The prediction check, desync dumps, replay
//! recording and replay checking are hooks the plugin installs, each keeping its own state; a
//! game adds its own with [`VerifiedTickHookAppExt`](crate::VerifiedTickHookAppExt).

use std::collections::BTreeMap;

use bevy::prelude::*;

use crate::config::SessionConfig;
use crate::error::SessionError;
use crate::hooks::{VerificationStopped, VerifiedTickHook, VerifiedTickHooks};
use crate::input::{InputBuffer, InputStatus, SimInput};
use crate::source::{InputSource, NextMatch, RecordedInputs, RelayLink};
use crate::tick::{PlayerIndex, Tick};

/// The session's own state (main-app resource).
#[derive(Resource)]
pub struct DeterministicSession<I: SimInput> {
    // Boxed: Bevy keeps room for 64 values of every resource type.
    pub(super) config: Box<SessionConfig>,
    pub(super) buffer: InputBuffer<I>,
    pub(super) source: InputSource<I>,
    /// The link to the relay server for everything but inputs (networked sessions only).
    pub(super) link: Option<RelayLink<I>>,
    /// The session's hooks, called in order at each of the session's moments.
    pub(crate) hooks: VerifiedTickHooks<I>,
    /// Desyncs the relay reported in this update's poll (`(tick, players named)`), handed to
    /// the hooks before verification.
    pub(super) pending_desyncs: Vec<(Tick, Vec<PlayerIndex>)>,
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
        replay: Option<Box<dyn RecordedInputs<I>>>,
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
            pending_desyncs: Vec::new(),
            stopped: None,
            verified_tick: 0,
            predicted_tick: 0,
            highest_predicted: 0,
            used_inputs: BTreeMap::new(),
            predicted_diverged: false,
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

    /// Why and where verification stopped, if a [`VerifiedTickHook`](crate::VerifiedTickHook)
    /// stopped it.
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

    /// The last tick local input has been polled for.
    pub(crate) fn local_tick(&self) -> Tick {
        self.source.local_tick()
    }

    /// The verified world's tick as the last update (or snapshot load) left it.
    pub(crate) fn verified_tick(&self) -> Tick {
        self.verified_tick
    }

    /// Whether the first session update ran (the session started).
    pub(crate) fn has_started(&self) -> bool {
        self.started
    }

    /// The link to the relay server (networked sessions only).
    pub(crate) fn link(&self) -> Option<&RelayLink<I>> {
        self.link.as_ref()
    }

    /// The link to the relay server, mutably (networked sessions only).
    pub(crate) fn link_mut(&mut self) -> Option<&mut RelayLink<I>> {
        self.link.as_mut()
    }

    /// Goes on from `tick` after the worlds were replaced by a snapshot of that tick
    /// ([snapshots](crate::rules#snapshots)): the input buffer (given `inputs`, the loaded
    /// world's last input set) and the input path continue from `tick + 1`, the verified and
    /// predicted ticks are `tick`, the predicted timeline's record is cleared and the hooks are
    /// told ([`VerifiedTickHook::on_snapshot_loaded`]).
    pub(crate) fn resume_after_snapshot(&mut self, tick: Tick, inputs: &[I]) {
        self.buffer.resume_after(tick, inputs);
        self.source
            .resume_after(tick, self.config.input_delay as Tick);
        self.verified_tick = tick;
        self.predicted_tick = tick;
        self.highest_predicted = self.highest_predicted.max(tick);
        self.used_inputs.clear();
        self.predicted_diverged = false;
        // The verified world was replaced: predictions recorded before are not comparable.
        self.hooks.snapshot_loaded(tick);
    }

    /// A snapshot of `tick` from the relay was loaded: the input path goes on from `tick + 1`
    /// and the link applies the confirmed sets it held meanwhile
    /// ([late join](crate::rules#late-join-and-rejoin-from-a-snapshot)).
    pub(crate) fn relay_snapshot_loaded(&mut self, tick: Tick) {
        self.source.resume_after(tick, 0);
        if let Some(link) = self.link.as_mut() {
            link.snapshot_loaded(tick, &mut self.buffer);
        }
    }

    /// Adds `hook` after the session's other hooks.
    pub(crate) fn add_hook(&mut self, hook: impl VerifiedTickHook<I>) {
        self.hooks.push(Box::new(hook));
    }

    /// The session's first hook of type `H`, if one was added (e.g. to read what a game's hook
    /// gathered).
    pub fn hook<H: VerifiedTickHook<I>>(&self) -> Option<&H> {
        self.hooks.find::<H>()
    }

    /// The session's first hook of type `H`, mutably, if one was added.
    pub fn hook_mut<H: VerifiedTickHook<I>>(&mut self) -> Option<&mut H> {
        self.hooks.find_mut::<H>()
    }
}
