//! The poll of a single-process session: every player's input goes through a [`LocalRelay`]
//! that confirms it after the configured latency and jitter.

use std::collections::BTreeMap;

use super::local_inputs::LocalInputProvider;
use super::local_relay::{LocalRelay, LocalRelayConfig};
use crate::config::{SessionConfig, SessionMode};
use crate::context::would_stall;
use crate::input::{InputBuffer, InputError, SimInput};
use crate::tick::{PlayerIndex, Tick};
use crate::warning::SessionWarning;

/// The local side of a single-process session: the relay stand-in and its clock.
pub(crate) struct LocalSource<I: SimInput> {
    relay: LocalRelay<I>,
    /// The relay's clock: one tick per polled tick, stalled or not.
    relay_now: Tick,
    players: PlayerIndex,
    input_delay: Tick,
    /// Players whose inputs this peer knows before confirmation.
    known_players: Vec<PlayerIndex>,
    /// `Some(rollback window)` in a predicted session: polling stops at the stall bound
    /// ([stalling](crate::rules#stalling)); `None` in lockstep.
    stall_window: Option<Tick>,
    /// Per player, the ticks from which the game set it connected (`true`) or disconnected
    /// (`false`); empty for a player always connected.
    connection: Vec<BTreeMap<Tick, bool>>,
    /// The buffer holds the disconnected marks of every tick through this one (the last tick
    /// an input was submitted for).
    marked_through: Tick,
    /// Local inputs refused since the last poll ([`SessionWarning::LocalInputRejected`]).
    warnings: Vec<SessionWarning>,
}

impl<I: SimInput> LocalSource<I> {
    /// A local relay with the latencies, jitter and seed of `config.local`.
    ///
    /// # Errors
    /// As [`LocalRelay::new`].
    pub(crate) fn new(config: &SessionConfig) -> Result<Self, InputError> {
        let players = config.players;
        let relay = LocalRelay::new(LocalRelayConfig {
            players,
            latency_ticks: (0..players).map(|p| config.latency_of(p)).collect(),
            jitter_ticks: config.local.jitter_ticks,
            seed: config.local.seed,
        })?;
        Ok(Self {
            relay,
            relay_now: 0,
            players,
            input_delay: config.input_delay as Tick,
            known_players: config.local.known_players.clone(),
            stall_window: (config.mode == SessionMode::Predicted)
                .then_some(config.rollback_window as Tick),
            connection: vec![BTreeMap::new(); usize::from(players)],
            marked_through: 0,
            warnings: Vec::new(),
        })
    }

    /// The session's players (all local in a single-process session).
    pub(crate) fn players(&self) -> PlayerIndex {
        self.players
    }

    /// Polls `polls` ticks of local input for `local_tick + 1 ..` (each for `tick + input_delay`)
    /// into the relay and delivers what arrived into `buffer`. Each polled tick first delivers
    /// the confirmations due at it, then decides whether it stalls
    /// ([stalling](crate::rules#stalling)): a tick that would stall is not polled (the relay's
    /// clock still advances). Returns whether the update ends stalled (its last poll was
    /// refused), so a confirmation that ends a stall ends it in the update it arrives in.
    pub(crate) fn poll(
        &mut self,
        polls: u32,
        local_tick: &mut Tick,
        local: &mut LocalInputProvider<'_, I>,
        buffer: &mut InputBuffer<I>,
    ) -> bool {
        let mut stalling = false;
        for _ in 0..polls {
            self.relay_now += 1;
            self.relay.deliver(self.relay_now, buffer);
            let next = *local_tick + 1;
            stalling = self
                .stall_window
                .is_some_and(|window| would_stall(next, buffer.max_verifiable_tick(), window));
            if stalling {
                continue;
            }
            *local_tick = next;
            self.mark_through(next + self.input_delay, buffer);
            self.submit_all(next + self.input_delay, local, buffer);
            // Inputs with no latency arrive at once.
            self.relay.deliver(self.relay_now, buffer);
        }
        if polls == 0 {
            self.relay.deliver(self.relay_now, buffer);
        }
        stalling
    }

    /// The local inputs refused since the last call.
    pub(crate) fn take_warnings(&mut self) -> Vec<SessionWarning> {
        std::mem::take(&mut self.warnings)
    }

    /// `player` is connected (or not) from `from_tick` on, replacing any later change: the
    /// marks of the ticks whose inputs were already submitted (from `from_tick` on) change
    /// now, later ticks are marked as their inputs are submitted. `player` is a session player
    /// and `from_tick` is after the verified tick (the session checks both).
    pub(crate) fn set_connected(
        &mut self,
        player: PlayerIndex,
        connected: bool,
        from_tick: Tick,
        buffer: &mut InputBuffer<I>,
    ) {
        let Some(changes) = self.connection.get_mut(usize::from(player)) else {
            return;
        };
        changes.retain(|tick, _| *tick < from_tick);
        let before = changes.values().next_back().copied().unwrap_or(true);
        if before != connected {
            changes.insert(from_tick, connected);
        }
        let first = from_tick.max(buffer.discarded_through() + 1);
        for tick in first..=self.marked_through {
            let _ = buffer.set_disconnected(player, tick, !connected);
        }
    }

    /// Whether the game set `player` connected at `tick` (connected unless set otherwise).
    fn connected_at(&self, player: usize, tick: Tick) -> bool {
        self.connection[player]
            .range(..=tick)
            .next_back()
            .is_none_or(|(_, connected)| *connected)
    }

    /// Writes the disconnected marks of the ticks after `marked_through` through `tick` into
    /// `buffer` (nothing to write while every player is always connected).
    fn mark_through(&mut self, tick: Tick, buffer: &mut InputBuffer<I>) {
        if self.connection.iter().any(|changes| !changes.is_empty()) {
            for t in (self.marked_through + 1).max(1)..=tick {
                for p in 0..self.connection.len() {
                    if !self.connection[p].is_empty() {
                        let disconnected = !self.connected_at(p, t);
                        let _ = buffer.set_disconnected(p as PlayerIndex, t, disconnected);
                    }
                }
            }
        }
        self.marked_through = self.marked_through.max(tick);
    }

    /// Submits every player's input for `for_tick`; known players' inputs also go straight into
    /// the buffer for prediction.
    fn submit_all(
        &mut self,
        for_tick: Tick,
        local: &mut LocalInputProvider<'_, I>,
        buffer: &mut InputBuffer<I>,
    ) {
        for p in 0..self.players {
            let input = local.input(p, for_tick);
            let rejected = |error| SessionWarning::LocalInputRejected {
                player: p,
                tick: for_tick,
                error,
            };
            if self.known_players.contains(&p)
                && let Err(error) = buffer.set_local(p, for_tick, input.clone())
            {
                self.warnings.push(rejected(error));
            }
            if let Err(error) = self.relay.submit(p, self.relay_now, for_tick, input) {
                self.warnings.push(rejected(error));
            }
        }
    }
}
