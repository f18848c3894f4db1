//! [`DeterministicServerPlugin`]: runs a [`RelayServer`] in an app.

use bevy::ecs::system::SystemParam;
use bevy::prelude::*;
use simsync_net::bevy_renet::{RenetReceive, RenetServer};
use simsync_net::{DEFAULT_MAX_INPUT_BYTES, DesyncReport, NetClock, SimInput, TickAccumulator};

use crate::authority::{Authority, Resync};
use crate::limits::RelayLimits;
use crate::matches::{MatchChanged, RelayCommand, RelayCommandFailed};
use crate::server::{
    DEFAULT_CHECKSUM_TIMEOUT_MS, DEFAULT_SILENCE_TIMEOUT_MS, HeaderReader, RelayEvent, RelayServer,
    RelayServerConfig,
};
use crate::snapshots::{LyingSnapshot, SnapshotServed, SnapshotServing};
use crate::stats::RelayStats;

/// The relay server as a Bevy plugin: inserts [`RelayServer`] and [`RelayStats`] and runs the
/// relay after renet receives (`PreUpdate`). The app must also hold a `RenetServer` and a
/// transport (see `simsync_net::NetServerPlugin`); the clock advances one tick per update at
/// a fixed [`NetClock`], or by real time.
///
/// The app ends a match and opens the next by writing a [`RelayCommand`] Message; each is
/// applied at the relay's next update, before it receives, and answered with [`MatchChanged`]
/// Messages, or one [`RelayCommandFailed`] ([matches](crate::rules#matches-and-rematches)):
///
/// ```
/// # use bevy::prelude::*;
/// use simsync_relay::{MatchChanged, MatchEndReason, RelayCommand};
///
/// /// Plays the next match as soon as one ends (the server app's own rule decides when).
/// fn rematch(mut commands: MessageWriter<RelayCommand>) {
///     commands.write(RelayCommand::Rematch {
///         reason: MatchEndReason::Completed,
///     });
/// }
///
/// fn log_matches(mut changed: MessageReader<MatchChanged>) {
///     for change in changed.read() {
///         if let MatchChanged::Ended { match_id, stats, .. } = change {
///             info!("{match_id} ended at tick {}", stats.confirmed_tick);
///         }
///     }
/// }
/// ```
pub struct DeterministicServerPlugin {
    config: RelayServerConfig,
    /// Builds the relay for the game's input type.
    relay: fn(RelayServerConfig) -> RelayServer,
    /// How the relay reads a snapshot's header (`None`: it takes the buddy's word).
    read_header: Option<HeaderReader>,
    /// Makes the room's authority, if it has one.
    authority: Option<(AuthorityFactory, Resync)>,
}

/// Makes an authoritative room's [`Authority`] when the plugin is built (each relay app gets
/// its own world).
pub type AuthorityFactory = std::sync::Arc<dyn Fn() -> Box<dyn Authority> + Send + Sync>;

impl DeterministicServerPlugin {
    /// A relay for `players` players of input type `I`, at `tick_rate_hz`, with
    /// [Quantum's defaults](crate::rules#quantums-reference-defaults): hard tolerance 8 ticks,
    /// redundancy 3; inputs of at most [`DEFAULT_MAX_INPUT_BYTES`] that decode as `I`;
    /// checksums judged after at most [`DEFAULT_CHECKSUM_TIMEOUT_MS`].
    pub fn new<I: SimInput>(players: u8, tick_rate_hz: u16) -> Self {
        Self {
            config: RelayServerConfig {
                players,
                tick_rate_hz,
                input_hard_tolerance: 8,
                input_redundancy: 3,
                default_input: simsync_net::encode(&I::default()).unwrap_or_default(),
                ping_interval_ms: 250,
                max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
                checksum_timeout_ms: DEFAULT_CHECKSUM_TIMEOUT_MS,
                input_history_ticks: 10 * u32::from(tick_rate_hz),
                resend_bytes_per_update: 24_000,
                limits: RelayLimits::for_tick_rate(tick_rate_hz),
                silence_timeout_ms: DEFAULT_SILENCE_TIMEOUT_MS,
                reconnect_seed: None,
                start_players: players,
                snapshots: None,
            },
            relay: RelayServer::new::<I>,
            read_header: None,
            authority: None,
        }
    }

    /// The longest encoded input relayed, in bytes; longer ones are dropped. Part of the input
    /// fingerprint checked in the handshake: clients set the same `max_input_bytes` in their
    /// network config.
    pub fn max_input_bytes(mut self, bytes: usize) -> Self {
        self.config.max_input_bytes = bytes;
        self
    }

    /// Milliseconds to wait for every player's checksum of a tick before judging it.
    pub fn checksum_timeout_ms(mut self, ms: u32) -> Self {
        self.config.checksum_timeout_ms = ms;
        self
    }

    /// Ticks to wait for a missing input before replacing it.
    pub fn input_hard_tolerance(mut self, ticks: u32) -> Self {
        self.config.input_hard_tolerance = ticks;
        self
    }

    /// Confirmed sets repeated in every message.
    pub fn input_redundancy(mut self, sets: u32) -> Self {
        self.config.input_redundancy = sets;
        self
    }

    /// Per-connection rate limits (default [`RelayLimits::for_tick_rate`]).
    pub fn rate_limits(mut self, limits: RelayLimits) -> Self {
        self.config.limits = limits;
        self
    }

    /// Milliseconds without a message from a seated player after which it counts as
    /// disconnected (default [`DEFAULT_SILENCE_TIMEOUT_MS`]).
    pub fn silence_timeout_ms(mut self, ms: u32) -> Self {
        self.config.silence_timeout_ms = ms;
        self
    }

    /// Confirmed sets kept for clients that fell behind, in ticks (default 10 s of ticks). A
    /// player who rejoins catches up from tick 1 only while the history still holds it.
    pub fn input_history_ticks(mut self, ticks: u32) -> Self {
        self.config.input_history_ticks = ticks;
        self
    }

    /// Makes the relay read the tick and checksum of every forwarded snapshot's header with
    /// `read` and refuse one that contradicts its buddy's word
    /// ([`RelayServer::with_header_reader`]); [`read_snapshot_header`](crate::read_snapshot_header)
    /// is the snapshot format's reader.
    pub fn header_reader(mut self, read: HeaderReader) -> Self {
        self.read_header = Some(read);
        self
    }

    /// Serves snapshots ([late join](crate::rules#late-join-and-rejoin-from-a-snapshot)): a new
    /// player may take a free slot of the running session, and a player whose missing confirmed
    /// sets are gone gets a snapshot instead of `Behind`. The clients must enable snapshots too
    /// (a buddy answers the relay's requests with its verified world).
    pub fn snapshots(mut self, serving: SnapshotServing) -> Self {
        self.config.snapshots = Some(serving);
        self
    }

    /// Starts the session once `players` slots are taken (default: all), leaving the others to
    /// late joiners. Takes effect only with [`Self::snapshots`].
    pub fn start_players(mut self, players: u8) -> Self {
        self.config.start_players = players;
        self
    }

    /// Makes the room authoritative ([`RelayServer::with_authority`]): the relay runs the
    /// verified world `make` builds from the confirmed sets, judges every checksum against it,
    /// serves its snapshots, and with [`Resync::On`] resyncs a desynced client
    /// ([authoritative rooms](crate::rules#authoritative-rooms)).
    pub fn authority(mut self, make: AuthorityFactory, resync: Resync) -> Self {
        // The authority serves snapshots: late joiners may take free slots.
        if self.config.snapshots.is_none() {
            self.config.snapshots = Some(SnapshotServing::default());
        }
        self.authority = Some((make, resync));
        self
    }

    /// Seeds the reconnect tokens with `seed` instead of the entropy of the moment (tests that
    /// want the same tokens on every run).
    pub fn reconnect_seed(mut self, seed: u64) -> Self {
        self.config.reconnect_seed = Some(seed);
        self
    }
}

/// The relay's real-time clock: at most 8 ticks per update; time owed beyond that is kept.
#[derive(Resource)]
struct ServerClock(TickAccumulator);

impl Default for ServerClock {
    fn default() -> Self {
        Self(TickAccumulator::new().with_max_ticks_per_advance(8))
    }
}

impl Plugin for DeterministicServerPlugin {
    fn build(&self, app: &mut App) {
        let mut relay = (self.relay)(self.config.clone());
        if let Some(read) = self.read_header {
            relay = relay.with_header_reader(read);
        }
        if let Some((make, resync)) = &self.authority {
            relay = relay.with_authority(make(), *resync);
        }
        app.insert_resource(relay)
            .init_resource::<RelayStats>()
            .register_type::<RelayStats>()
            .add_message::<DesyncReport>()
            .init_resource::<ServerClock>()
            .add_message::<SnapshotServed>()
            .add_message::<LyingSnapshot>()
            .add_message::<RelayCommand>()
            .add_message::<MatchChanged>()
            .add_message::<RelayCommandFailed>()
            .add_systems(PreUpdate, relay_update.after(RenetReceive));
    }
}

/// The Messages the relay reads (the app's commands) and writes.
#[derive(SystemParam)]
struct RelayMessages<'w, 's> {
    commands: MessageReader<'w, 's, RelayCommand>,
    reports: MessageWriter<'w, DesyncReport>,
    served: MessageWriter<'w, SnapshotServed>,
    lying: MessageWriter<'w, LyingSnapshot>,
    matches: MessageWriter<'w, MatchChanged>,
    failed: MessageWriter<'w, RelayCommandFailed>,
}

fn relay_update(
    mut relay: ResMut<RelayServer>,
    server: Option<ResMut<RenetServer>>,
    clock: Option<Res<NetClock>>,
    real: Option<Res<Time<bevy::time::Real>>>,
    mut real_clock: ResMut<ServerClock>,
    mut stats: ResMut<RelayStats>,
    mut messages: RelayMessages,
) {
    let Some(mut server) = server else {
        return;
    };
    for command in messages.commands.read() {
        if let Err(error) = relay.command(&mut server, command) {
            warn!("relay: {command:?} refused: {error}");
            messages.failed.write(RelayCommandFailed {
                command: command.clone(),
                error,
            });
        }
    }
    let clock = clock.map(|c| *c).unwrap_or_default();
    let dt = clock.delta(real.as_deref());
    let hz = f64::from(relay.config().tick_rate_hz.max(1));
    let ticks = match clock {
        NetClock::Fixed(_) => 1,
        NetClock::Real => real_clock.0.advance_secs(dt.as_secs_f64(), hz),
    };
    relay.update(&mut server, dt, ticks);
    stats.clone_from(relay.stats());
    messages.reports.write_batch(relay.take_desync_reports());
    for event in relay.take_events() {
        match event {
            RelayEvent::Served(event) => {
                messages.served.write(event);
            }
            RelayEvent::Lying(event) => {
                messages.lying.write(event);
            }
            RelayEvent::Match(event) => {
                messages.matches.write(event);
            }
        }
    }
}
