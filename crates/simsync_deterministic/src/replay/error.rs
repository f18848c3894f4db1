//! [`ReplayError`]: everything that can be wrong with a replay file or its use.

use thiserror::Error;

use crate::tick::Tick;

/// Which part of a replay's game fingerprint differs from the game playing it
/// ([`ReplayError::ForeignGame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForeignPart {
    /// The input type's Rust type name.
    InputType,
    /// The session's tick rate (Hz).
    TickRate,
    /// The list of types registered for rollback (names, in registration order).
    RegisteredTypes,
    /// The number of players.
    Players,
}

impl std::fmt::Display for ForeignPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::InputType => "input type",
            Self::TickRate => "tick rate",
            Self::RegisteredTypes => "registered rollback types",
            Self::Players => "number of players",
        })
    }
}

/// What is wrong with a replay: its bytes (named by byte offset), its game, or a request made
/// of it (named by tick). Nothing in this crate panics on a bad replay; every case is one of
/// these ([replays](crate::rules#replays)).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ReplayError {
    /// The file does not start with the replay magic bytes.
    #[error("not a simsync replay: the first 8 bytes are not the replay magic")]
    NotAReplay,
    /// The file was written in another format version.
    #[error("replay format version {found}, this build reads version {expected}")]
    WrongVersion {
        /// The version in the file.
        found: u16,
        /// [`REPLAY_FORMAT_VERSION`](crate::REPLAY_FORMAT_VERSION).
        expected: u16,
    },
    /// The bytes end inside the file header or the replay header record: nothing is playable.
    /// (A file cut after its header is still played up to its last complete frame, see
    /// [`ReplayEnd::Cut`](crate::ReplayEnd::Cut).)
    #[error("replay truncated at byte {offset}: it ends inside the {what}")]
    Truncated {
        /// Length of the file (where the bytes end).
        offset: u64,
        /// What was being read.
        what: &'static str,
    },
    /// A record whose bytes are not what was written: a bad record checksum, an unknown record
    /// kind, an undecodable payload, a frame out of order, a second header, bytes after the
    /// end record...
    #[error("replay corrupt at byte {offset}: {reason}")]
    Corrupt {
        /// Byte offset of the record at fault.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A length or count above its limit ([`ReplayLimits`](crate::ReplayLimits)), refused
    /// before anything of that size was allocated.
    #[error("replay {what} at byte {offset} is {size} bytes, above the limit of {limit}")]
    TooLarge {
        /// Byte offset of the record (0 for the whole file).
        offset: u64,
        /// What is too large ("file", "frame record", "snapshot record", ...).
        what: &'static str,
        /// The size announced, in bytes.
        size: u64,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The replay was recorded by another game: `part` of its fingerprint differs.
    #[error("replay of another game: its {part} is `{recorded}`, this game's is `{expected}`")]
    ForeignGame {
        /// Which part differs.
        part: ForeignPart,
        /// The recorded value, as text.
        recorded: String,
        /// This game's value, as text.
        expected: String,
    },
    /// The recording starts after tick 1 and holds no snapshot to start from.
    #[error(
        "replay starts at tick {first_tick} and holds no snapshot at or before it to start from"
    )]
    NoStartingPoint {
        /// The first recorded frame's tick.
        first_tick: Tick,
    },
    /// A seek to a tick the replay does not contain.
    #[error("cannot seek to tick {tick}: the replay holds ticks {first}..={last}")]
    SeekOutOfRange {
        /// The tick asked for.
        tick: Tick,
        /// The first tick playback can reach.
        first: Tick,
        /// The last recorded tick.
        last: Tick,
    },
    /// A snapshot in the replay could not be used.
    #[error("replay snapshot at tick {tick}: {reason}")]
    Snapshot {
        /// The snapshot's tick.
        tick: Tick,
        /// Why.
        reason: String,
    },
    /// Reading or writing the file failed.
    #[error("replay file {path}: {message}")]
    Io {
        /// The file (empty for a writer that is not a file).
        path: String,
        /// What the OS said.
        message: String,
    },
    /// Recording: a value could not be encoded, or the recorder was used out of order (a frame
    /// before the header, a tick that does not follow the previous one, a recorder already
    /// failed or finished).
    #[error("replay recording: {0}")]
    Recording(String),
}

impl ReplayError {
    /// An I/O error on `path`.
    pub(crate) fn io(path: impl Into<String>, error: &std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            message: error.to_string(),
        }
    }
}
