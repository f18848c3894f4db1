//! Where a session's inputs come from: the one owner of the input path.
//!
//! [`InputSource`] is polled once per session update. It advances the session's local clock,
//! takes this peer's own inputs ([`LocalInputs`] or a scripted [`TickInputSource`]), hands them to
//! the relay — a [`LocalRelay`] in a single-process session, the relay server over renet in a
//! networked one ([`relay_client`]) — and delivers the confirmed inputs into the session's
//! [`InputBuffer`]; a replay playback's source feeds the recorded frames instead. It returns a
//! [`Polled`]: what the session update needs to begin.
//!
//! A networked session also has a [`RelayLink`], the one owner of its relay client: the poll
//! is handed it, and the rest of what goes between the session and the relay (checksums,
//! breakdowns, snapshots, the relay's reports) goes through it.

mod link;
mod local;
mod local_inputs;
mod local_players;
mod local_relay;
mod presence;
mod reconnect;
mod recorded;
mod relay_client;
mod stall;

use std::time::Duration;

use bevy::prelude::*;
use simsync_net::bevy_renet::RenetClient;
use simsync_net::{ClientTransport, NetClock, TickAccumulator};

use crate::config::{SessionClock, SessionConfig};
use crate::error::SessionError;
use crate::input::{InputBuffer, InputLatch, SimInput, default_frame_merge};
use crate::tick::Tick;
use crate::warning::SessionWarning;
use local::LocalSource;
use local_inputs::LocalInputProvider;
use relay_client::RelayClient;

pub(crate) use link::RelayLink;
pub(crate) use recorded::RecordedInputs;

pub(crate) use relay_client::{NetReport, NextMatch};
pub use stall::{STALL_AFTER, SessionStall, StallReason};

pub use local_inputs::{FrameMerge, LocalInputs, TickInputSource};
pub use local_players::LocalPlayers;
pub use local_relay::{LocalRelay, LocalRelayConfig, RelayDelivery, RelayRejection};
pub use presence::{PlayerLeft, PlayerRejoined};
pub use reconnect::ReconnectPhase;
pub use relay_client::{
    DesyncDetected, InputSubstituted, PlayerDesynced, RelayClientStats, SessionRejected,
};

/// Most ticks a real-time clock polls in one update; the accumulator keeps at most this much
/// time owed, so a long hitch does not turn into a burst of polls.
const MAX_REAL_TIME_POLLS: u32 = 8;

/// What one poll gives the session update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Polled {
    /// The last tick local input has been polled for (the context's `max_predictable_tick`).
    pub local_tick: Tick,
    /// The last tick whose input sets, and those of every earlier tick, are confirmed (the
    /// context's `max_verifiable_tick`).
    pub max_verifiable_tick: Tick,
    /// Whether the session stalls this update ([stalling](crate::rules#stalling)).
    pub stalling: bool,
}

/// Where the confirmed inputs come from, chosen when the session is set up.
enum Origin<I: SimInput> {
    /// A single-process session: a local relay with latency and jitter.
    Local(Box<LocalSource<I>>),
    /// A networked session: the relay server over renet (the relay client is owned by the
    /// session's [`RelayLink`], handed to each poll).
    Remote,
    /// A replay playback: the recorded frames are the confirmed inputs.
    Replay(Box<dyn RecordedInputs<I>>),
}

/// The session's input path: local clock, own inputs, relay (or replay), confirmed inputs.
/// What is not about inputs — checksums, breakdowns, snapshots, the relay's reports — goes
/// through the [`RelayLink`] of a networked session.
pub(crate) struct InputSource<I: SimInput> {
    clock: SessionClock,
    tick_rate_hz: u32,
    /// Ticks owed by a real-time clock.
    accumulator: TickAccumulator,
    /// The last tick local input has been polled for.
    local_tick: Tick,
    /// This peer's local input, sampled every update and latched into the next polled tick.
    latch: InputLatch<I>,
    origin: Origin<I>,
}

impl<I: SimInput> InputSource<I> {
    /// The input path of a session configured by `config`: the frames of `replay` when given,
    /// else a relay client when `config.network` is set (with its [`RelayLink`]), else a
    /// local relay.
    ///
    /// # Errors
    /// [`SessionError::Input`] when the local relay rejects the configuration.
    pub(crate) fn new(
        config: &SessionConfig,
        replay: Option<Box<dyn RecordedInputs<I>>>,
    ) -> Result<(Self, Option<RelayLink<I>>), SessionError> {
        let (origin, link) = match (replay, &config.network) {
            (Some(feed), _) => (Origin::Replay(feed), None),
            (None, Some(network)) => {
                let client = RelayClient::new(network.clone(), config);
                (Origin::Remote, Some(RelayLink::new(client)))
            }
            (None, None) => (Origin::Local(Box::new(LocalSource::new(config)?)), None),
        };
        let source = Self {
            clock: config.clock,
            tick_rate_hz: config.tick_rate.hz(),
            accumulator: TickAccumulator::new()
                .with_max_ticks_per_advance(MAX_REAL_TIME_POLLS)
                .with_max_leftover_ticks(f64::from(MAX_REAL_TIME_POLLS)),
            local_tick: 0,
            latch: InputLatch::new(config.players, default_frame_merge::<I>),
            origin,
        };
        Ok((source, link))
    }

    /// The last tick local input has been polled for.
    pub(crate) fn local_tick(&self) -> Tick {
        self.local_tick
    }

    /// Continues the input path after a snapshot of tick `tick` was loaded: the next local
    /// input polled is for `tick + 1` (the local tick becomes `tick - input_delay` unless it is
    /// already later).
    pub(crate) fn resume_after(&mut self, tick: Tick, input_delay: Tick) {
        self.local_tick = self.local_tick.max(tick - input_delay).max(0);
    }

    /// Brings `local` up to date: every player in a local session or a replay, the welcomed
    /// slot of `link`'s client (or none yet) in a networked one ([local
    /// players](crate::rules#local-players)). Writes only on a change, so
    /// `Changed<LocalPlayers>`-style checks see real changes.
    pub(crate) fn sync_local_players(
        &self,
        mut local: Mut<'_, LocalPlayers>,
        link: Option<&RelayLink<I>>,
    ) {
        let players = match &self.origin {
            Origin::Local(source) => source.players(),
            Origin::Replay(feed) => feed.players(),
            Origin::Remote => {
                let slot = link.and_then(|link| link.stats().slot);
                if !local.is(slot) {
                    *local = LocalPlayers::new(slot);
                }
                return;
            }
        };
        if !local.is(0..players) {
            *local = LocalPlayers::new(0..players);
        }
    }

    /// A local session's `player` is connected (or not) from `from_tick` on (see
    /// [`DeterministicSession::set_player_connected`](crate::DeterministicSession::set_player_connected),
    /// which checks the player and the tick).
    ///
    /// # Errors
    /// [`SessionError::NotALocalSession`] in a networked session or a replay playback.
    pub(crate) fn set_player_connected(
        &mut self,
        player: crate::tick::PlayerIndex,
        connected: bool,
        from_tick: Tick,
        buffer: &mut InputBuffer<I>,
    ) -> Result<(), SessionError> {
        self.ensure_local()?;
        if let Origin::Local(source) = &mut self.origin {
            source.set_connected(player, connected, from_tick, buffer);
        }
        Ok(())
    }

    /// `Ok` in a local session.
    ///
    /// # Errors
    /// [`SessionError::NotALocalSession`] in a networked session or a replay playback.
    pub(crate) fn ensure_local(&self) -> Result<(), SessionError> {
        match &self.origin {
            Origin::Local(_) => Ok(()),
            Origin::Remote => Err(SessionError::NotALocalSession { replay: false }),
            Origin::Replay(_) => Err(SessionError::NotALocalSession { replay: true }),
        }
    }

    /// One poll per session update: reads the clocks, the local inputs (sampled into the latch,
    /// [local input is latched](crate::rules#local-input-is-latched)) and the renet client
    /// from `world`, polls the relay through `link` (a networked session's; without it the
    /// remote origin polls nothing) or feeds the replay's frames, and delivers confirmed
    /// inputs into `buffer`.
    pub(crate) fn poll(
        &mut self,
        world: &mut World,
        buffer: &mut InputBuffer<I>,
        link: Option<&mut RelayLink<I>>,
    ) -> Polled {
        let polls = self.ticks_to_poll(world.get_resource::<Time<Real>>());
        let stalling = match &mut self.origin {
            Origin::Replay(feed) => {
                // The recorded frames are the confirmed inputs; the local inputs are not used.
                feed.feed(polls, &mut self.local_tick, buffer);
                false
            }
            Origin::Local(source) => {
                let mut local = LocalInputProvider::<I>::from_world(world, &mut self.latch);
                let stalling = source.poll(polls, &mut self.local_tick, &mut local, buffer);
                for warning in source.take_warnings() {
                    crate::warning::report(world, warning);
                }
                stalling
            }
            Origin::Remote => {
                let Some(link) = link else {
                    return Polled {
                        local_tick: self.local_tick,
                        max_verifiable_tick: buffer.max_verifiable_tick(),
                        stalling: false,
                    };
                };
                let mut local = LocalInputProvider::<I>::from_world(world, &mut self.latch);
                poll_remote(
                    link.client(),
                    world,
                    polls,
                    &mut local,
                    (&mut self.local_tick, buffer),
                )
            }
        };
        Polled {
            local_tick: self.local_tick,
            max_verifiable_tick: buffer.max_verifiable_tick(),
            stalling,
        }
    }

    /// Ticks the session clock polls this update: fixed per update when stepped, else the real
    /// time elapsed at the tick rate (at most [`MAX_REAL_TIME_POLLS`]).
    fn ticks_to_poll(&mut self, real: Option<&Time<Real>>) -> u32 {
        match self.clock {
            SessionClock::Stepped { ticks_per_update } => ticks_per_update,
            SessionClock::RealTime => {
                let delta = real.map(|t| t.delta_secs_f64()).unwrap_or(0.0);
                self.accumulator
                    .advance_secs(delta, f64::from(self.tick_rate_hz))
            }
        }
    }
}

/// The poll of a networked session: a [`LeaveSession`](crate::LeaveSession) of the game, the
/// relay client's poll with the renet client, the network clock and the wall clock of `world`,
/// the connection closed when the client says so (after a goodbye, before a rejoin, once the
/// server is gone), and a new connection when the client's reconnect is due.
fn poll_remote<I: SimInput>(
    client: &mut RelayClient<I>,
    world: &mut World,
    polls: u32,
    local: &mut LocalInputProvider<'_, I>,
    (local_tick, buffer): (&mut Tick, &mut InputBuffer<I>),
) -> bool {
    let dt = net_delta(world);
    // A pause of the process shows on the wall clock even when the network clock is fixed.
    let wall_dt = world
        .get_resource::<Time<Real>>()
        .map_or(dt, |real| real.delta().max(dt));
    let leave = leave_requested(world);
    let mut renet = world.get_resource_mut::<RenetClient>();
    if leave {
        client.leave(renet.as_deref_mut());
    }
    let stalling = client.poll(
        polls,
        (dt, wall_dt),
        renet.as_deref_mut(),
        local,
        local_tick,
        buffer,
    );
    if leave && let Some(mut transport) = world.get_resource_mut::<ClientTransport>() {
        // After the goodbye the relay closes the connection: expected, not an error.
        transport.expect_close();
    }
    if client.take_close_due()
        && let Some(mut transport) = world.get_resource_mut::<ClientTransport>()
    {
        transport.disconnect();
    }
    if client.take_reconnect_due() {
        client.reconnect_started(reconnect_transport(world));
    }
    stalling
}

/// Whether the game wrote [`LeaveSession`](crate::LeaveSession) since the last poll.
fn leave_requested(world: &mut World) -> bool {
    fn read(mut leave: MessageReader<crate::LeaveSession>) -> bool {
        leave.read().count() > 0
    }
    world.run_system_cached(read).unwrap_or(false)
}

/// Starts a new connection on the client transport and gives it a new renet client
/// ([reconnecting](crate::rules#reconnecting-after-a-lost-connection)). Returns whether it
/// started (a transport error is logged; the attempt counts as failed).
fn reconnect_transport(world: &mut World) -> bool {
    let Some(mut transport) = world.get_resource_mut::<ClientTransport>() else {
        let reason = "the app has no client transport to reconnect with".to_string();
        crate::warning::report(world, SessionWarning::ReconnectNotStarted { reason });
        return false;
    };
    match transport.reconnect() {
        Ok(()) => {
            world.insert_resource(RenetClient::new(simsync_net::connection_config()));
            true
        }
        Err(error) => {
            let reason = error.to_string();
            crate::warning::report(world, SessionWarning::ReconnectNotStarted { reason });
            false
        }
    }
}

/// The network clock's step ([`NetClock`]), or the real delta.
fn net_delta(world: &World) -> Duration {
    let clock = world
        .get_resource::<NetClock>()
        .copied()
        .unwrap_or_default();
    clock.delta(world.get_resource::<Time<Real>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NetworkSessionConfig;

    #[test]
    fn only_a_networked_session_has_a_relay_link() {
        let local = SessionConfig::default();
        let (source, link) = InputSource::<u32>::new(&local, None).expect("local source");
        assert!(link.is_none());
        assert!(source.ensure_local().is_ok());
        let networked = SessionConfig {
            network: Some(NetworkSessionConfig::default()),
            ..SessionConfig::default()
        };
        let (source, link) = InputSource::<u32>::new(&networked, None).expect("remote source");
        assert_eq!(link.map(|link| link.stats().slot), Some(None));
        assert!(source.ensure_local().is_err());
    }
}
