//! The poll of a single-process session: every player's input goes through a [`LocalRelay`]
//! that confirms it after the configured latency and jitter.

use bevy::log::warn;

use super::local_inputs::LocalInputProvider;
use super::local_relay::{LocalRelay, LocalRelayConfig};
use crate::config::{SessionConfig, SessionMode};
use crate::context::would_stall;
use crate::input::{InputBuffer, InputError, SimInput};
use crate::tick::{PlayerIndex, Tick};

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
            self.submit_all(next + self.input_delay, local, buffer);
            // Inputs with no latency arrive at once.
            self.relay.deliver(self.relay_now, buffer);
        }
        if polls == 0 {
            self.relay.deliver(self.relay_now, buffer);
        }
        stalling
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
            if self.known_players.contains(&p)
                && let Err(error) = buffer.set_local(p, for_tick, input.clone())
            {
                warn!("local input of player {p} for tick {for_tick} rejected: {error}");
            }
            if let Err(error) = self.relay.submit(p, self.relay_now, for_tick, input) {
                warn!("input of player {p} for tick {for_tick} not sent: {error}");
            }
        }
    }
}
