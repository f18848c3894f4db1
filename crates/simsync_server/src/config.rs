//! The server's configuration ([configuration](crate::rules#configuration)): a TOML file,
//! environment variables and flags, in that order of precedence from lowest to highest
//! (a flag beats its variable, which beats the file, which beats the default).
//! [`ServeArgs`] is the flags and variables (clap); [`FileConfig`] the file;
//! [`ServerConfig::resolve`] merges them and checks the result.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Deserialize;
use simsync_net::NETCODE_MAX_CLIENTS;
use simsync_net::renet_netcode::NETCODE_KEY_BYTES;

use crate::http::OpsLimits;
use crate::room_config::RoomConfig;
use crate::token::{RoomId, parse_key};

/// Default UDP address.
pub const DEFAULT_BIND: &str = "0.0.0.0:7777";
/// Default HTTP address (operations and admin API).
pub const DEFAULT_OPS_BIND: &str = "0.0.0.0:8080";
/// Default drain timeout, in seconds.
pub const DEFAULT_DRAIN_TIMEOUT_SECS: f64 = 30.0;
/// Default time an empty room lives, in seconds.
pub const DEFAULT_EMPTY_ROOM_TIMEOUT_SECS: f64 = 30.0;
/// Default main-loop rate, in turns per second.
pub const DEFAULT_LOOP_HZ: u32 = 250;
/// Most worker threads (`workers`).
pub const MAX_WORKERS: usize = 256;

/// The default number of worker threads: one per core the process may use
/// (`std::thread::available_parallelism`), 1 when that cannot be told.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// The Agones SDK sidecar's default HTTP address.
pub const DEFAULT_AGONES_URL: &str = "http://127.0.0.1:9358";

/// How logs are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// `simsync-server serve`'s flags; each also reads an environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Config file (TOML): every setting below by its snake_case name, plus `[[rooms]]` to
    /// make at start.
    #[arg(long, env = "SIMSYNC_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// UDP address of the rooms (one port for every room) [default: 0.0.0.0:7777].
    #[arg(long, env = "SIMSYNC_BIND", value_name = "ADDR")]
    pub bind: Option<SocketAddr>,
    /// Address clients reach the UDP port at (what tokens name) [default: the bound address;
    /// with --agones, the GameServer's].
    #[arg(long, env = "SIMSYNC_PUBLIC_ADDR", value_name = "ADDR")]
    pub public_addr: Option<SocketAddr>,
    /// HTTP address of /healthz, /readyz, /metrics and the admin API [default: 0.0.0.0:8080].
    /// Keep it off the public network.
    #[arg(long, env = "SIMSYNC_OPS_BIND", value_name = "ADDR")]
    pub ops_bind: Option<SocketAddr>,
    /// The private key connect tokens are sealed with: 64 hexadecimal digits
    /// (`simsync-server keygen`). Prefer --private-key-file.
    #[arg(
        long,
        env = "SIMSYNC_PRIVATE_KEY",
        value_name = "HEX",
        hide_env_values = true
    )]
    pub private_key: Option<String>,
    /// File holding the private key (64 hexadecimal digits).
    #[arg(long, env = "SIMSYNC_PRIVATE_KEY_FILE", value_name = "FILE")]
    pub private_key_file: Option<PathBuf>,
    /// The admin API's bearer token. Prefer --admin-token-file.
    #[arg(
        long,
        env = "SIMSYNC_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// File holding the admin token.
    #[arg(long, env = "SIMSYNC_ADMIN_TOKEN_FILE", value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Most connections at once, over all rooms (at most 1024) [default: 1024].
    #[arg(long, env = "SIMSYNC_MAX_CLIENTS", value_name = "N")]
    pub max_clients: Option<usize>,
    /// Seconds running rooms may go on after SIGTERM/SIGINT before they are ended
    /// [default: 30].
    #[arg(long, env = "SIMSYNC_DRAIN_TIMEOUT", value_name = "SECS")]
    pub drain_timeout: Option<f64>,
    /// Seconds a room with no connection lives before it ends [default: 30].
    #[arg(long, env = "SIMSYNC_EMPTY_ROOM_TIMEOUT", value_name = "SECS")]
    pub empty_room_timeout: Option<f64>,
    /// Main-loop turns per second (each turn reads the socket and runs the rooms)
    /// [default: 250].
    #[arg(long, env = "SIMSYNC_LOOP_HZ", value_name = "HZ")]
    pub loop_hz: Option<u32>,
    /// Worker threads the rooms run on (1 to 256; each room on one, the least loaded when it
    /// is made) [default: one per core].
    #[arg(long, env = "SIMSYNC_WORKERS", value_name = "N")]
    pub workers: Option<usize>,
    /// Log format [default: text].
    #[arg(long, env = "SIMSYNC_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Speak to the Agones SDK sidecar: Ready once bound, Health from the main loop, room and
    /// player counts, Shutdown after the drain.
    #[arg(long, env = "SIMSYNC_AGONES")]
    pub agones: bool,
    /// The Agones SDK sidecar's HTTP address [default: http://127.0.0.1:$AGONES_SDK_HTTP_PORT,
    /// else http://127.0.0.1:9358].
    #[arg(long, env = "SIMSYNC_AGONES_URL", value_name = "URL")]
    pub agones_url: Option<String>,
    /// Ownership rooms host physics (the server flies orphans and refuses impossible owner
    /// states) when every dynamic body of the room has a shape; a room's own `physics_host`
    /// overrides this switch.
    #[arg(long, env = "SIMSYNC_PHYSICS_HOST")]
    pub physics_host: bool,
}

/// A room listed in the config file, made at start.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FileRoom {
    /// Its id (default: the next free one).
    #[serde(default)]
    pub id: Option<u64>,
    /// The room.
    #[serde(flatten)]
    pub config: RoomConfig,
}

/// The config file: every [`ServeArgs`] setting by its snake_case name, and rooms.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// See [`ServeArgs::bind`].
    pub bind: Option<SocketAddr>,
    /// See [`ServeArgs::public_addr`].
    pub public_addr: Option<SocketAddr>,
    /// See [`ServeArgs::ops_bind`].
    pub ops_bind: Option<SocketAddr>,
    /// See [`ServeArgs::private_key`].
    pub private_key: Option<String>,
    /// See [`ServeArgs::private_key_file`].
    pub private_key_file: Option<PathBuf>,
    /// See [`ServeArgs::admin_token`].
    pub admin_token: Option<String>,
    /// See [`ServeArgs::admin_token_file`].
    pub admin_token_file: Option<PathBuf>,
    /// See [`ServeArgs::max_clients`].
    pub max_clients: Option<usize>,
    /// See [`ServeArgs::drain_timeout`].
    pub drain_timeout: Option<f64>,
    /// See [`ServeArgs::empty_room_timeout`].
    pub empty_room_timeout: Option<f64>,
    /// See [`ServeArgs::loop_hz`].
    pub loop_hz: Option<u32>,
    /// See [`ServeArgs::workers`].
    pub workers: Option<usize>,
    /// See [`ServeArgs::log_format`].
    pub log_format: Option<LogFormat>,
    /// See [`ServeArgs::agones`].
    pub agones: Option<bool>,
    /// See [`ServeArgs::agones_url`].
    pub agones_url: Option<String>,
    /// See [`ServeArgs::physics_host`].
    pub physics_host: Option<bool>,
    /// Rooms to make at start.
    #[serde(default)]
    pub rooms: Vec<FileRoom>,
}

/// Why the configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("config file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// No private key: the server admits clients by connect token only.
    #[error(
        "no private key: give --private-key-file (or SIMSYNC_PRIVATE_KEY_FILE, or private_key_file in the config); `simsync-server keygen` makes one"
    )]
    NoPrivateKey,
    /// The private key is not 64 hexadecimal digits.
    #[error("the private key must be 64 hexadecimal digits")]
    BadPrivateKey,
    /// No admin token (the admin API would be open).
    #[error(
        "no admin token: give --admin-token-file (or SIMSYNC_ADMIN_TOKEN_FILE, or admin_token_file in the config)"
    )]
    NoAdminToken,
    /// A value out of its range.
    #[error("{name} must be {range}, not {value}")]
    OutOfRange {
        /// The setting.
        name: &'static str,
        /// Its range.
        range: &'static str,
        /// The value given.
        value: String,
    },
    /// The UDP port is bound to an unspecified address (`0.0.0.0`, `::`) and no public
    /// address is given: tokens must name an address clients reach, which the server cannot
    /// guess (behind a load balancer or NAT it is not even its own).
    #[error(
        "no public address: the UDP port is bound to {bind}, which clients cannot reach; give the address clients reach it at with --public-addr (or SIMSYNC_PUBLIC_ADDR, or public_addr in the config; with --agones the GameServer's address is used): connect tokens must name it"
    )]
    NoPublicAddress {
        /// The bind address.
        bind: SocketAddr,
    },
    /// The public address given is unspecified (`0.0.0.0`, `::`) or has port 0.
    #[error(
        "public address {addr} is not an address clients can reach (unspecified address or port 0)"
    )]
    UnreachablePublicAddress {
        /// The address given.
        addr: SocketAddr,
    },
    /// A room of the config file does not validate.
    #[error("room {index} of the config file: {message}")]
    Room {
        /// Its position in the file.
        index: usize,
        /// Why.
        message: String,
    },
}

/// The resolved configuration.
#[derive(Clone, PartialEq)]
pub struct ServerConfig {
    /// UDP address.
    pub bind: SocketAddr,
    /// Address clients reach (`None`: the bound address).
    pub public_addr: Option<SocketAddr>,
    /// HTTP address.
    pub ops_bind: SocketAddr,
    /// The key tokens are sealed with.
    pub private_key: [u8; NETCODE_KEY_BYTES],
    /// The admin API's token.
    pub admin_token: String,
    /// Most connections at once.
    pub max_clients: usize,
    /// Drain timeout.
    pub drain_timeout: Duration,
    /// How long an empty room lives.
    pub empty_room_timeout: Duration,
    /// Main-loop turns per second.
    pub loop_hz: u32,
    /// Worker threads the rooms run on (at least 1).
    pub workers: usize,
    /// Log format.
    pub log_format: LogFormat,
    /// Agones mode.
    pub agones: bool,
    /// The Agones sidecar's URL, if given.
    pub agones_url: Option<String>,
    /// Ownership rooms without their own `physics_host` host physics when their dynamic
    /// bodies have shapes ([`Rooms::with_physics_host`](crate::Rooms::with_physics_host)).
    pub physics_host: bool,
    /// Rooms made at start.
    pub rooms: Vec<(Option<RoomId>, RoomConfig)>,
    /// The operations port's bounds (connections, timeouts; not a flag: the defaults suit
    /// every deployment, tests shorten them).
    pub ops_limits: OpsLimits,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("bind", &self.bind)
            .field("public_addr", &self.public_addr)
            .field("ops_bind", &self.ops_bind)
            .field("max_clients", &self.max_clients)
            .field("drain_timeout", &self.drain_timeout)
            .field("empty_room_timeout", &self.empty_room_timeout)
            .field("loop_hz", &self.loop_hz)
            .field("workers", &self.workers)
            .field("agones", &self.agones)
            .field("physics_host", &self.physics_host)
            .field("rooms", &self.rooms.len())
            .finish_non_exhaustive()
    }
}

/// Reads a secret from a file (trimmed).
fn read_secret(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// Seconds as a duration, in `range` (0 to a day).
fn seconds(name: &'static str, value: f64) -> Result<Duration, ConfigError> {
    if value.is_finite() && (0.0..=86_400.0).contains(&value) {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(ConfigError::OutOfRange {
            name,
            range: "0 to 86400 seconds",
            value: value.to_string(),
        })
    }
}

/// A secret given directly or as a file, by flag or environment (`given`) before the config
/// file (`in_file`); `None` when neither says.
fn secret(
    given: (&Option<String>, &Option<PathBuf>),
    in_file: (&Option<String>, &Option<PathBuf>),
) -> Result<Option<String>, ConfigError> {
    for (value, path) in [given, in_file] {
        if let Some(value) = value {
            return Ok(Some(value.clone()));
        }
        if let Some(path) = path {
            return read_secret(path).map(Some);
        }
    }
    Ok(None)
}

/// `value` when in `range`, else [`ConfigError::OutOfRange`].
fn in_range<T: PartialOrd + ToString>(
    name: &'static str,
    text: &'static str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            name,
            range: text,
            value: value.to_string(),
        })
    }
}

/// The config file's rooms, each validated.
fn file_rooms(rooms: Vec<FileRoom>) -> Result<Vec<(Option<RoomId>, RoomConfig)>, ConfigError> {
    rooms
        .into_iter()
        .enumerate()
        .map(|(index, room)| {
            room.config
                .validate()
                .map(|()| (room.id.map(RoomId), room.config))
                .map_err(|e| ConfigError::Room {
                    index,
                    message: e.to_string(),
                })
        })
        .collect()
}

impl FileConfig {
    /// Reads a TOML config file.
    ///
    /// # Errors
    ///
    /// [`ConfigError::File`] when it cannot be read or parsed.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Self::parse(&text).map_err(|message| ConfigError::File {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parses TOML text.
    ///
    /// # Errors
    ///
    /// The parser's message.
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

impl ServerConfig {
    /// Merges `args` (flags and environment) over `file` over the defaults, reads the secret
    /// files, and checks every value.
    ///
    /// # Errors
    ///
    /// The first [`ConfigError`].
    pub fn resolve(args: &ServeArgs, file: FileConfig) -> Result<Self, ConfigError> {
        let (private_key, admin_token) = resolve_secrets(args, &file)?;
        let max_clients = args
            .max_clients
            .or(file.max_clients)
            .unwrap_or(NETCODE_MAX_CLIENTS);
        in_range(
            "max_clients",
            "1 to 1024",
            max_clients,
            1..=NETCODE_MAX_CLIENTS,
        )?;
        let loop_hz = args.loop_hz.or(file.loop_hz).unwrap_or(DEFAULT_LOOP_HZ);
        in_range("loop_hz", "10 to 2000", loop_hz, 10..=2_000)?;
        let workers = args
            .workers
            .or(file.workers)
            .unwrap_or_else(default_workers);
        in_range("workers", "1 to 256", workers, 1..=MAX_WORKERS)?;
        let drain_timeout = args.drain_timeout.or(file.drain_timeout);
        let empty_room_timeout = args.empty_room_timeout.or(file.empty_room_timeout);
        let default_addr = |s: &str| s.parse().expect("the default addresses parse");
        Self {
            bind: args
                .bind
                .or(file.bind)
                .unwrap_or_else(|| default_addr(DEFAULT_BIND)),
            public_addr: args.public_addr.or(file.public_addr),
            ops_bind: args
                .ops_bind
                .or(file.ops_bind)
                .unwrap_or_else(|| default_addr(DEFAULT_OPS_BIND)),
            private_key,
            admin_token,
            max_clients,
            drain_timeout: seconds(
                "drain_timeout",
                drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT_SECS),
            )?,
            empty_room_timeout: seconds(
                "empty_room_timeout",
                empty_room_timeout.unwrap_or(DEFAULT_EMPTY_ROOM_TIMEOUT_SECS),
            )?,
            loop_hz,
            workers,
            log_format: args.log_format.or(file.log_format).unwrap_or_default(),
            agones: args.agones || file.agones.unwrap_or(false),
            agones_url: args.agones_url.clone().or(file.agones_url),
            physics_host: args.physics_host || file.physics_host.unwrap_or(false),
            rooms: file_rooms(file.rooms)?,
            ops_limits: OpsLimits::default(),
        }
        .checked_public_address()
    }

    /// `self` when it has an address for tokens to name ([`Self::check_public_addr`]); in
    /// Agones mode an unset one waits for the GameServer's.
    fn checked_public_address(self) -> Result<Self, ConfigError> {
        match (self.agones, self.public_addr) {
            (true, None) => Ok(self),
            _ => self.check_public_addr().map(|()| self),
        }
    }

    /// Checks that connect tokens have an address to name: the public address when given
    /// (neither unspecified nor port 0), else the bind address, which must then not be
    /// unspecified. `0.0.0.0:7777` is a fine bind address but no address a client can reach,
    /// and a token naming another address than the server's is refused.
    ///
    /// # Errors
    ///
    /// [`ConfigError::UnreachablePublicAddress`] or [`ConfigError::NoPublicAddress`].
    pub fn check_public_addr(&self) -> Result<(), ConfigError> {
        match self.public_addr {
            Some(addr) if addr.ip().is_unspecified() || addr.port() == 0 => {
                Err(ConfigError::UnreachablePublicAddress { addr })
            }
            Some(_) => Ok(()),
            None if self.bind.ip().is_unspecified() => {
                Err(ConfigError::NoPublicAddress { bind: self.bind })
            }
            None => Ok(()),
        }
    }

    /// A config for tests and embedding: `bind` and `ops_bind` (port 0 picks free ports),
    /// `private_key`, `admin_token`, every other setting at its default.
    pub fn local(
        bind: SocketAddr,
        ops_bind: SocketAddr,
        private_key: [u8; NETCODE_KEY_BYTES],
        admin_token: &str,
    ) -> Self {
        Self {
            bind,
            public_addr: None,
            ops_bind,
            private_key,
            admin_token: admin_token.to_string(),
            max_clients: NETCODE_MAX_CLIENTS,
            drain_timeout: Duration::from_secs_f64(DEFAULT_DRAIN_TIMEOUT_SECS),
            empty_room_timeout: Duration::from_secs_f64(DEFAULT_EMPTY_ROOM_TIMEOUT_SECS),
            loop_hz: DEFAULT_LOOP_HZ,
            workers: default_workers(),
            log_format: LogFormat::Text,
            agones: false,
            agones_url: None,
            physics_host: false,
            rooms: Vec::new(),
            ops_limits: OpsLimits::default(),
        }
    }
}

/// The private key and the admin token, each from the flags (a value or a file holding it),
/// else from the config file's (the same two ways).
///
/// # Errors
/// [`ConfigError::NoPrivateKey`], [`ConfigError::BadPrivateKey`], [`ConfigError::NoAdminToken`]
/// (also for an empty token), or a secret file that cannot be read.
fn resolve_secrets(
    args: &ServeArgs,
    file: &FileConfig,
) -> Result<([u8; NETCODE_KEY_BYTES], String), ConfigError> {
    let key_hex = secret(
        (&args.private_key, &args.private_key_file),
        (&file.private_key, &file.private_key_file),
    )?
    .ok_or(ConfigError::NoPrivateKey)?;
    let private_key = parse_key(&key_hex).map_err(|_| ConfigError::BadPrivateKey)?;
    let admin_token = secret(
        (&args.admin_token, &args.admin_token_file),
        (&file.admin_token, &file.admin_token_file),
    )?
    .filter(|token| !token.is_empty())
    .ok_or(ConfigError::NoAdminToken)?;
    Ok((private_key, admin_token))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0101010101010101010101010101010101010101010101010101010101010101";

    fn args() -> ServeArgs {
        ServeArgs {
            private_key: Some(KEY.into()),
            admin_token: Some("t".into()),
            public_addr: Some("203.0.113.10:7777".parse().expect("address")),
            ..ServeArgs::default()
        }
    }

    #[test]
    fn an_unspecified_bind_needs_a_public_address_except_under_agones() {
        let unset = ServerConfig::resolve(
            &ServeArgs {
                public_addr: None,
                ..args()
            },
            FileConfig::default(),
        );
        let bind: SocketAddr = DEFAULT_BIND.parse().unwrap();
        assert_eq!(unset.unwrap_err(), ConfigError::NoPublicAddress { bind });
        let mut v6 = args();
        v6.public_addr = None;
        v6.bind = Some("[::]:7777".parse().unwrap());
        assert!(matches!(
            ServerConfig::resolve(&v6, FileConfig::default()),
            Err(ConfigError::NoPublicAddress { .. })
        ));
        for bad in ["0.0.0.0:7777", "203.0.113.10:0"] {
            let mut flags = args();
            flags.public_addr = Some(bad.parse().unwrap());
            assert_eq!(
                ServerConfig::resolve(&flags, FileConfig::default()).unwrap_err(),
                ConfigError::UnreachablePublicAddress {
                    addr: bad.parse().unwrap()
                }
            );
        }
        // A specific bind address is its own public address; Agones gives one later.
        let mut local = args();
        local.public_addr = None;
        local.bind = Some("127.0.0.1:7777".parse().unwrap());
        assert!(ServerConfig::resolve(&local, FileConfig::default()).is_ok());
        let mut agones = args();
        agones.public_addr = None;
        agones.agones = true;
        assert!(ServerConfig::resolve(&agones, FileConfig::default()).is_ok());
        // The file's public address counts too.
        let file = FileConfig::parse("public_addr = \"203.0.113.10:7777\"").unwrap();
        let no_flag = ServeArgs {
            public_addr: None,
            ..args()
        };
        assert!(ServerConfig::resolve(&no_flag, file).is_ok());
    }

    #[test]
    fn defaults_fill_what_nothing_sets() {
        let config = ServerConfig::resolve(&args(), FileConfig::default()).unwrap();
        assert_eq!(config.bind, DEFAULT_BIND.parse().unwrap());
        assert_eq!(config.ops_bind, DEFAULT_OPS_BIND.parse().unwrap());
        assert_eq!(config.drain_timeout, Duration::from_secs(30));
        assert_eq!(config.loop_hz, 250);
        assert_eq!(config.max_clients, 1024);
        assert_eq!(config.workers, default_workers());
        assert!(config.workers >= 1);
        assert_eq!(config.private_key, [1; 32]);
    }

    #[test]
    fn flags_beat_the_file_which_beats_the_defaults() {
        let file = FileConfig::parse(
            "bind = \"127.0.0.1:9000\"\nloop_hz = 100\ndrain_timeout = 5.0\nworkers = 3\n",
        )
        .unwrap();
        let mut flags = args();
        flags.loop_hz = Some(500);
        let config = ServerConfig::resolve(&flags, file.clone()).unwrap();
        assert_eq!(config.bind, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(config.loop_hz, 500);
        assert_eq!(config.workers, 3);
        flags.workers = Some(2);
        assert_eq!(ServerConfig::resolve(&flags, file).unwrap().workers, 2);
        assert_eq!(config.drain_timeout, Duration::from_secs(5));
    }

    #[test]
    fn secrets_are_required_and_checked() {
        let mut no_key = args();
        no_key.private_key = None;
        assert_eq!(
            ServerConfig::resolve(&no_key, FileConfig::default()).unwrap_err(),
            ConfigError::NoPrivateKey
        );
        let mut bad_key = args();
        bad_key.private_key = Some("12".into());
        assert_eq!(
            ServerConfig::resolve(&bad_key, FileConfig::default()).unwrap_err(),
            ConfigError::BadPrivateKey
        );
        let mut no_token = args();
        no_token.admin_token = Some(String::new());
        assert_eq!(
            ServerConfig::resolve(&no_token, FileConfig::default()).unwrap_err(),
            ConfigError::NoAdminToken
        );
    }

    #[test]
    fn out_of_range_values_and_unknown_keys_are_refused() {
        let mut flags = args();
        flags.max_clients = Some(5_000);
        assert!(matches!(
            ServerConfig::resolve(&flags, FileConfig::default()),
            Err(ConfigError::OutOfRange {
                name: "max_clients",
                ..
            })
        ));
        let mut flags = args();
        flags.drain_timeout = Some(-1.0);
        assert!(matches!(
            ServerConfig::resolve(&flags, FileConfig::default()),
            Err(ConfigError::OutOfRange {
                name: "drain_timeout",
                ..
            })
        ));
        for workers in [0, 257] {
            let mut flags = args();
            flags.workers = Some(workers);
            assert!(matches!(
                ServerConfig::resolve(&flags, FileConfig::default()),
                Err(ConfigError::OutOfRange {
                    name: "workers",
                    ..
                })
            ));
        }
        assert!(FileConfig::parse("bnid = \"127.0.0.1:1\"").is_err());
    }

    #[test]
    fn a_hosted_room_with_shapes_reads_from_the_file() {
        let text = r#"
[[rooms]]
kind = "ownership"
participants = 4
physics_host = true
host = { max_speed = 30.0, max_teleport = 5.0 }
bodies = [
  { id = 0, fixed = true, position = [0.0, -0.5, 0.0], shape = { kind = "cuboid", half_extents = [20.0, 0.5, 20.0] } },
  { id = 1, position = [0.0, 1.0, 0.0], shape = { kind = "ball", radius = 0.3 }, properties = { mass = 2.0, friction = 0.8 } },
]
"#;
        let config = ServerConfig::resolve(&args(), FileConfig::parse(text).unwrap()).unwrap();
        let RoomConfig::Ownership(room) = &config.rooms[0].1 else {
            panic!("an ownership room")
        };
        assert!(room.hosts_physics());
        assert_eq!(room.host.max_teleport, 5.0);
        assert_eq!(room.bodies[1].properties.mass, Some(2.0));
    }

    #[test]
    fn the_physics_host_switch_is_a_flag_or_a_file_key() {
        assert!(
            !ServerConfig::resolve(&args(), FileConfig::default())
                .unwrap()
                .physics_host
        );
        let file = FileConfig::parse("physics_host = true").unwrap();
        assert!(ServerConfig::resolve(&args(), file).unwrap().physics_host);
        let mut flags = args();
        flags.physics_host = true;
        assert!(
            ServerConfig::resolve(&flags, FileConfig::default())
                .unwrap()
                .physics_host
        );
    }

    #[test]
    fn rooms_of_the_file_are_read_and_checked() {
        let text = r#"
[[rooms]]
id = 4
kind = "relay"
players = 2
input = { name = "game::Input", max_bytes = 8, default = [0] }

[[rooms]]
kind = "ownership"
participants = 0
bodies = []
"#;
        let file = FileConfig::parse(text).unwrap();
        assert_eq!(file.rooms.len(), 2);
        assert_eq!(file.rooms[0].id, Some(4));
        let error = ServerConfig::resolve(&args(), file).unwrap_err();
        assert!(
            matches!(error, ConfigError::Room { index: 1, .. }),
            "{error}"
        );
    }
}
