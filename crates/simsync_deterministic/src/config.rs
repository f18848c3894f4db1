//! Configuration of a deterministic session.

use std::path::PathBuf;

use bevy::prelude::*;
use simsync_time::TickRate;

use crate::error::SessionError;
use crate::tick::PlayerIndex;

/// Whether the session predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Reflect)]
pub enum SessionMode {
    /// Verified ticks plus prediction and rollback (the default).
    #[default]
    Predicted,
    /// Lockstep: only verified ticks; the predicted world is never touched (replays, tests).
    Lockstep,
}

/// What the prediction check (`verify_predictions`) compares between a predicted tick whose
/// inputs turned out right and the verified tick
/// ([no silent divergence](crate::rules#no-silent-divergence)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Reflect)]
pub enum PredictionCheck {
    /// The checksum: hashed components and resources, relationships and the entity set (the
    /// default; one state hash per predicted tick).
    #[default]
    Checksum,
    /// Every registered component of every simulation entity and every registered resource,
    /// hashed or not (see [`UncheckedState`](crate::UncheckedState) for types it cannot
    /// compare). A debug option: it digests the whole registered state once per predicted and
    /// per verified tick.
    AllRegisteredState,
}

/// How the session's local clock advances.
#[derive(Debug, Clone, Copy, PartialEq, Default, Reflect)]
pub enum SessionClock {
    /// A fixed number of ticks per session update (headless runs and tests: as fast as
    /// possible, reproducible).
    Stepped {
        /// Ticks polled per session update (≥ 1).
        ticks_per_update: u32,
    },
    /// Real time: as many ticks as `Time<Real>` says have elapsed at the tick rate.
    #[default]
    RealTime,
}

/// A single-process session: every player is local; inputs reach a local relay after a delay.
#[derive(Debug, Clone, PartialEq, Eq, Reflect)]
pub struct LocalSessionConfig {
    /// Ticks from sampling an input to its confirmation, per player (a shorter list repeats its
    /// last value; empty means 0).
    pub latency_ticks: Vec<u32>,
    /// Extra random delay in `0..=jitter_ticks` ticks per input (seeded, deterministic).
    pub jitter_ticks: u32,
    /// Seed of the jitter.
    pub seed: u64,
    /// Players whose inputs this peer knows before confirmation (used directly by prediction);
    /// the others are predicted by repeating their last confirmed input.
    pub known_players: Vec<PlayerIndex>,
}

impl Default for LocalSessionConfig {
    fn default() -> Self {
        Self {
            latency_ticks: vec![0],
            jitter_ticks: 0,
            seed: 0,
            known_players: vec![0],
        }
    }
}

/// Configuration of the client side of a networked session (see
/// [the networked session](crate::rules#the-networked-session)).
#[derive(Debug, Clone, PartialEq, Reflect)]
pub struct NetworkSessionConfig {
    /// Name sent in `Hello`.
    pub name: String,
    /// Unconfirmed local inputs are resent in every message; at least this many (default 3).
    pub input_redundancy: u32,
    /// Fixed input delay in ticks; `None` picks it from the RTT (default).
    pub fixed_input_delay: Option<u32>,
    /// Smallest input delay when picked from the RTT (ticks, default 0).
    pub min_input_delay: u32,
    /// Largest input delay when picked from the RTT (ticks, default 10).
    pub max_input_delay: u32,
    /// RTT above which the input delay grows (ms, default 100).
    pub input_delay_start_ms: f64,
    /// Milliseconds between pings (default 250).
    pub ping_interval_ms: u32,
    /// Send a checksum of verified state to the server every this many checksums recorded
    /// (default 1: every one).
    pub checksum_every: u32,
    /// The relay's input size cap this client expects, in bytes (default
    /// [`DEFAULT_MAX_INPUT_BYTES`](simsync_net::DEFAULT_MAX_INPUT_BYTES)): part of the input
    /// fingerprint in the `Hello`, so it must equal the relay's `max_input_bytes`.
    pub max_input_bytes: usize,
    /// Take this slot again with its reconnect token (from an earlier `Welcome`, see
    /// [`RelayClientStats::reconnect_token`](crate::RelayClientStats::reconnect_token)) instead
    /// of a free one; `None` (default) joins a session that has not started
    /// ([rejoining](crate::rules#rejoining-a-running-session)).
    pub rejoin: Option<simsync_net::ReconnectToken>,
    /// Serve snapshots of the verified world when the relay asks (as a buddy) and load the ones
    /// it forwards (a late joiner, or a player whose missing confirmed sets are gone) — see
    /// [late join](crate::rules#late-join-and-rejoin-from-a-snapshot). Default `false`: a
    /// request is answered unavailable.
    pub snapshots: bool,
    /// The largest snapshot this client decodes, in bytes (default
    /// [`simsync_net::DEFAULT_MAX_SNAPSHOT_BYTES`]); a transfer announcing more is refused at
    /// its first chunk.
    pub max_snapshot_bytes: usize,
    /// How this client comes back by itself after its connection was lost: attempts and
    /// backoff ([reconnecting](crate::rules#reconnecting-after-a-lost-connection)). Default
    /// [`ReconnectPolicy::default`](simsync_net::ReconnectPolicy): on, 5 attempts, 1 s doubling
    /// to at most 8 s; [`ReconnectPolicy::OFF`](simsync_net::ReconnectPolicy::OFF) never.
    pub reconnect: simsync_net::ReconnectPolicy,
    /// How long the client hears nothing at all from the relay (on the network clock,
    /// `NetClock`) before it gives the server up: the session ends `Disconnected` with
    /// `ServerGone`, whatever reconnect attempts are left (default
    /// [`DEFAULT_SERVER_TIMEOUT`], 20 s; [a dead
    /// server](crate::rules#a-dead-server-and-a-long-pause)). A live relay answers pings four
    /// times a second, in its lobby too.
    pub server_timeout: std::time::Duration,
    /// A pause of the client's own process at least this long (a gap in wall-clock time
    /// between two session updates: a stopped process, a debugger, a suspended laptop) makes
    /// it rejoin at once with its reconnect token, instead of waiting for its transport's
    /// timeout to notice that the relay dropped it (default [`DEFAULT_REJOIN_AFTER_PAUSE`],
    /// 15 s: netcode's connection timeout, after which the relay's server has dropped the
    /// connection; [a long pause](crate::rules#a-dead-server-and-a-long-pause)).
    pub rejoin_after_pause: std::time::Duration,
}

/// Default of [`NetworkSessionConfig::server_timeout`]: 20 s without a message from the relay.
pub const DEFAULT_SERVER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Default of [`NetworkSessionConfig::rejoin_after_pause`]: netcode's default connection
/// timeout ([`simsync_net::DEFAULT_TOKEN_TIMEOUT_SECONDS`], 15 s), the time after which a
/// server drops a silent connection.
pub const DEFAULT_REJOIN_AFTER_PAUSE: std::time::Duration =
    std::time::Duration::from_secs(simsync_net::DEFAULT_TOKEN_TIMEOUT_SECONDS as u64);

impl NetworkSessionConfig {
    /// This config with reconnect policy `policy` (see [`Self::reconnect`]).
    pub fn with_reconnect(mut self, policy: simsync_net::ReconnectPolicy) -> Self {
        self.reconnect = policy;
        self
    }

    /// The default config of a client that takes player slot `slot` again with its reconnect
    /// `token`.
    pub fn rejoin(slot: PlayerIndex, token: u64) -> Self {
        Self {
            rejoin: Some(simsync_net::ReconnectToken { slot, token }),
            ..Self::default()
        }
    }
}

impl Default for NetworkSessionConfig {
    fn default() -> Self {
        Self {
            name: "player".into(),
            input_redundancy: 3,
            fixed_input_delay: None,
            min_input_delay: 0,
            max_input_delay: 10,
            input_delay_start_ms: simsync_net::DEFAULT_INPUT_DELAY_START_MS,
            ping_interval_ms: 250,
            checksum_every: 1,
            max_input_bytes: simsync_net::DEFAULT_MAX_INPUT_BYTES,
            rejoin: None,
            snapshots: false,
            max_snapshot_bytes: simsync_net::DEFAULT_MAX_SNAPSHOT_BYTES,
            reconnect: simsync_net::ReconnectPolicy::default(),
            server_timeout: DEFAULT_SERVER_TIMEOUT,
            rejoin_after_pause: DEFAULT_REJOIN_AFTER_PAUSE,
        }
    }
}

/// Default of [`SessionConfig::checksum_history`]: 4,096 checksums (16 bytes each), about 64 s
/// of one checksum a tick at 64 ticks/s, 68 minutes at the default interval of 60 ticks.
pub const DEFAULT_CHECKSUM_HISTORY: u32 = 4_096;

/// Everything a [`DeterministicPlugin`](crate::DeterministicPlugin) session is configured with.
/// Defaults follow [Quantum's reference values](crate::rules#quantums-reference-defaults).
#[derive(Debug, Clone, PartialEq, Reflect)]
pub struct SessionConfig {
    /// Number of players (1..=255).
    pub players: PlayerIndex,
    /// Ticks per second (default 64).
    #[reflect(ignore)]
    pub tick_rate: TickRate,
    /// Ticks the predicted world may run ahead of the verified one (default 60). 0 = no
    /// prediction.
    pub rollback_window: u32,
    /// Verified ticks at most per session update (default 60).
    pub max_verified_ticks_per_update: u32,
    /// A checksum every this many verified ticks (default 60, ≥ 1).
    pub checksum_interval: u32,
    /// Verified checksums kept in [`SessionStats::checksum_history`](crate::SessionStats),
    /// newest last (default [`DEFAULT_CHECKSUM_HISTORY`], 4,096 = 64 KiB; 0 keeps none). The
    /// session itself needs none of them ([bounded
    /// histories](crate::rules#every-per-tick-history-is-bounded)): they are for the game and
    /// tests.
    pub checksum_history: u32,
    /// Ticks between sampling a local input and the tick it applies to (default 0).
    pub input_delay: u32,
    /// Predicted or lockstep.
    pub mode: SessionMode,
    /// Debug aid: compare each predicted tick's state with the verified state of the same tick
    /// once verified, when its inputs turned out right (default off; costs a state hash per
    /// predicted tick).
    pub verify_predictions: bool,
    /// What `verify_predictions` compares (default [`PredictionCheck::Checksum`]).
    pub prediction_check: PredictionCheck,
    /// Size of the reserved range of simulation entity ids (default 16,384).
    pub max_simulation_entities: u32,
    /// How the local clock advances.
    pub clock: SessionClock,
    /// Run [`SimulationTick`](crate::SimulationTick) with Bevy's multi-threaded executor
    /// (default off: ambiguous system order would break determinism).
    pub parallel_simulation: bool,
    /// The local session.
    pub local: LocalSessionConfig,
    /// Skip the rollback when every tick of the current predicted timeline was simulated with
    /// the inputs known now (then rollback plus re-simulation would reproduce it exactly).
    /// Default on; `IsRollbackRequired` still forces a rollback.
    pub skip_rollback_when_predictions_hold: bool,
    /// A networked session: inputs are confirmed by a relay server over renet (`None`: a
    /// local session, see `local`).
    pub network: Option<NetworkSessionConfig>,
    /// Input ticks kept in the buffer (default 1,024; must exceed the rollback window plus the
    /// largest latency).
    pub input_capacity: u32,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            players: 2,
            tick_rate: TickRate::default(),
            rollback_window: 60,
            max_verified_ticks_per_update: 60,
            checksum_interval: 60,
            checksum_history: DEFAULT_CHECKSUM_HISTORY,
            input_delay: 0,
            mode: SessionMode::Predicted,
            verify_predictions: false,
            prediction_check: PredictionCheck::Checksum,
            max_simulation_entities: 16_384,
            clock: SessionClock::RealTime,
            parallel_simulation: false,
            local: LocalSessionConfig::default(),
            input_capacity: 1_024,
            skip_rollback_when_predictions_hold: true,
            network: None,
        }
    }
}

impl SessionConfig {
    /// Checks every field.
    ///
    /// # Errors
    /// [`SessionError::InvalidConfig`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), SessionError> {
        let bad = |field: &'static str, value: String, reason: &'static str| {
            Err(SessionError::InvalidConfig {
                field,
                value,
                reason,
            })
        };
        if self.players == 0 {
            return bad("players", "0".into(), "at least one player");
        }
        if self.checksum_interval == 0 {
            return bad("checksum_interval", "0".into(), "at least 1 tick");
        }
        if self.max_verified_ticks_per_update == 0 {
            return bad(
                "max_verified_ticks_per_update",
                "0".into(),
                "at least 1 tick",
            );
        }
        if self.rollback_window > 1_000 {
            return bad(
                "rollback_window",
                self.rollback_window.to_string(),
                "at most 1000 ticks",
            );
        }
        if self.max_simulation_entities == 0 || self.max_simulation_entities > 1 << 24 {
            return bad(
                "max_simulation_entities",
                self.max_simulation_entities.to_string(),
                "between 1 and 16,777,216",
            );
        }
        if let SessionClock::Stepped { ticks_per_update } = self.clock
            && ticks_per_update == 0
        {
            return bad("clock.ticks_per_update", "0".into(), "at least 1 tick");
        }
        self.validate_inputs()
    }

    /// The input buffer holds every tick a rollback and the links need; every known player is
    /// one of the session's.
    fn validate_inputs(&self) -> Result<(), SessionError> {
        let max_latency = self.local.latency_ticks.iter().copied().max().unwrap_or(0);
        let needed = u64::from(self.rollback_window)
            + u64::from(max_latency)
            + u64::from(self.local.jitter_ticks)
            + u64::from(self.input_delay)
            + 2;
        if u64::from(self.input_capacity) < needed {
            return Err(SessionError::InvalidConfig {
                field: "input_capacity",
                value: self.input_capacity.to_string(),
                reason: "must exceed rollback_window + latency + jitter + input_delay",
            });
        }
        if let Some(p) = self
            .local
            .known_players
            .iter()
            .find(|p| **p >= self.players)
        {
            return Err(SessionError::UnknownPlayer {
                player: *p,
                players: self.players,
            });
        }
        Ok(())
    }

    /// The latency of `player` in ticks.
    pub fn latency_of(&self, player: PlayerIndex) -> u32 {
        let list = &self.local.latency_ticks;
        list.get(usize::from(player))
            .or(list.last())
            .copied()
            .unwrap_or(0)
    }
}
/// Default largest dump file read or written (64 MiB).
pub const DEFAULT_MAX_DUMP_BYTES: usize = 64 * 1024 * 1024;

/// Where and how the session writes desync dumps ([`DebugConfig::desync_dumps`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesyncDumpConfig {
    /// The directory dumps are written to (created when missing).
    pub dir: PathBuf,
    /// Largest dump file written (default [`DEFAULT_MAX_DUMP_BYTES`]); a larger dump is not
    /// written and reported as [`DesyncDumpFailed`](crate::DesyncDumpFailed) with [`DumpError::TooLarge`](crate::DumpError::TooLarge).
    pub max_bytes: usize,
    /// Per-component hash breakdowns of this many recent checksum ticks are kept (default 256:
    /// 4 s at 64 Hz with a checksum every tick), so a desync the relay reports after the tick
    /// is past can still be named.
    pub recent_breakdowns: usize,
    /// In a networked session, dumps of the verified world at this many recent ticks are kept
    /// in memory (default 128: 2 s at 64 Hz with a checksum every tick): every checksum tick
    /// and the tick before it, so a desync the relay reports after the tick is past is dumped
    /// as the world was at the desynced tick ([desync dumps](crate::rules#desync-dumps)). A
    /// debug cost: one capture per kept tick, until the first desync is dumped. 0 keeps none
    /// (a desync is then dumped at the tick the report arrives).
    pub recent_dumps: usize,
}

impl DesyncDumpConfig {
    /// Dumps into `dir`, default limits.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            max_bytes: DEFAULT_MAX_DUMP_BYTES,
            recent_breakdowns: 256,
            recent_dumps: 128,
        }
    }
}
/// The session's debug aids, given to [`DeterministicPlugin::debugging`](crate::DeterministicPlugin::debugging);
/// all off by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DebugConfig {
    /// Write desync dumps ([desync dumps](crate::rules#desync-dumps)): on the first failed
    /// prediction check (`verify_predictions`; the predicted and the verified world of the
    /// tick — this captures the predicted world after every predicted tick, a debug cost) and
    /// on the first desync the relay reports (the verified world at the desynced tick and the
    /// tick before it, with per-component hash breakdowns of the recent checksum ticks; this
    /// keeps a capture of every recent checksum tick until then, a debug cost). Each file is reported as a
    /// [`DesyncDumpWritten`](crate::DesyncDumpWritten) message, a failure as
    /// [`DesyncDumpFailed`](crate::DesyncDumpFailed).
    pub desync_dumps: Option<DesyncDumpConfig>,
    /// The determinism guard: flags the game's [`SimulationTick`](crate::SimulationTick)
    /// systems whose declared access reads state outside the rollback — a clock of the main
    /// app (`Time<Real>`, `Time<Virtual>`, `Time<Fixed>`), or a resource neither registered
    /// for rollback nor ignored (`ignore_rollback_resource`) — with a
    /// [`DeterminismWarning`](crate::DeterminismWarning) message naming the system, a `warn!`
    /// and [`SessionStats::determinism_warnings`](crate::SessionStats::determinism_warnings).
    /// It cannot see unseeded random numbers, hash-map iteration order, `Local` state or
    /// exclusive systems: see [the determinism guard](crate::rules#the-determinism-guard).
    pub determinism_guard: bool,
}

impl DebugConfig {
    /// Desync dumps into `dir` with the default limits ([`DesyncDumpConfig::new`]).
    pub fn with_desync_dumps(dir: impl Into<PathBuf>) -> Self {
        Self {
            desync_dumps: Some(DesyncDumpConfig::new(dir)),
            ..Self::default()
        }
    }

    /// The determinism guard on.
    pub fn with_determinism_guard() -> Self {
        Self {
            determinism_guard: true,
            ..Self::default()
        }
    }
}
