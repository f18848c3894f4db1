//! The replay file format ([replays](crate::rules#replays)): a file header, then records.
//!
//! ```text
//! file    := magic "SSREPLAY" (8 bytes) · format version (u16 LE, 2) · record*
//! record  := kind (u8) · payload length (u32 LE) · CRC-32 of kind and length (u32 LE)
//!            · CRC-32 of kind, length and payload (u32 LE) · payload
//! kinds   := 1 header (first record, exactly once) · 2 frame · 3 snapshot · 4 end (last)
//! ```
//!
//! Header, frame and end payloads are encoded with the wire codec (`simsync_net::encode`:
//! bincode 2, bounded decoding, at most 64 KiB); a snapshot payload is its tick (i32 LE)
//! followed by the snapshot's own encoding. Every record carries a CRC-32, so a flipped byte is
//! reported as corruption at that record's offset instead of being played; the framing carries
//! its own CRC-32 too, so a damaged kind or length is corruption at the record's offset, and
//! only a record with intact framing that runs past the end of the bytes is a cut file
//! (version 1 had no framing CRC: a damaged length read as a cut file).

use serde::{Deserialize, Serialize};

use super::error::{ForeignPart, ReplayError};
use crate::tick::{PlayerIndex, Tick};

/// The first 8 bytes of every replay file.
pub const REPLAY_MAGIC: [u8; 8] = *b"SSREPLAY";

/// The replay format version this build writes and reads. Version 3: recorded with Bevy 0.20 and
/// Rapier 0.36 (their snapshots and their checksums differ from version 2's Bevy 0.19 and Rapier
/// 0.35, so an older replay is refused rather than reported as a desync at its first tick).
pub const REPLAY_FORMAT_VERSION: u16 = 3;

/// Bytes of the file header (magic and version).
pub(crate) const FILE_HEADER_BYTES: usize = 10;

/// Bytes of a record's framing (kind, length, framing CRC, record CRC).
pub(crate) const RECORD_HEADER_BYTES: usize = 13;

/// Largest header, frame or end payload: the wire codec's message limit (64 KiB).
pub const MAX_RECORD_BYTES: usize = simsync_net::MAX_MESSAGE_BYTES;

/// What a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordKind {
    Header = 1,
    Frame = 2,
    Snapshot = 3,
    End = 4,
}

impl RecordKind {
    pub(crate) fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::Header),
            2 => Some(Self::Frame),
            3 => Some(Self::Snapshot),
            4 => Some(Self::End),
            _ => None,
        }
    }
}

/// The replay header: what session recorded it and the game's fingerprint. Playback refuses a
/// replay whose input type, tick rate or registered rollback types differ from the game playing
/// it ([`ReplayError::ForeignGame`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayHeader {
    /// Ticks per second of the recorded session.
    pub tick_rate_hz: u32,
    /// Players of the recorded session (every frame holds this many inputs).
    pub players: PlayerIndex,
    /// The input type's Rust type name (`std::any::type_name`).
    pub input_type: String,
    /// Every type registered for rollback (components, relationships, resources, each in
    /// registration order, as in snapshot headers): the game fingerprint.
    pub registered_types: Vec<String>,
    /// The session's checksum interval, in ticks (frames of other ticks carry no checksum).
    pub checksum_interval: u32,
    /// The session's simulation entity range (entity ids depend on it).
    pub max_simulation_entities: u32,
    /// The session's rollback window, in ticks (the simulation entity reuse delay depends on
    /// it).
    pub rollback_window: u32,
    /// The verified tick when recording began: the first frame is `start_tick + 1`.
    pub start_tick: Tick,
    /// The writer, e.g. `simsync_deterministic 0.1.0`.
    pub created_by: String,
}

impl ReplayHeader {
    /// Checks that `game` (the header this game would write) is the game that recorded this
    /// replay: the same input type, tick rate, players and registered rollback types.
    ///
    /// # Errors
    /// [`ReplayError::ForeignGame`] naming the first part that differs (for the registered
    /// types, the first entry that differs; `-` for a missing one).
    pub fn check_same_game(&self, game: &ReplayHeader) -> Result<(), ReplayError> {
        let foreign = |part, recorded: String, expected: String| {
            Err(ReplayError::ForeignGame {
                part,
                recorded,
                expected,
            })
        };
        if self.input_type != game.input_type {
            return foreign(
                ForeignPart::InputType,
                self.input_type.clone(),
                game.input_type.clone(),
            );
        }
        if self.tick_rate_hz != game.tick_rate_hz {
            return foreign(
                ForeignPart::TickRate,
                self.tick_rate_hz.to_string(),
                game.tick_rate_hz.to_string(),
            );
        }
        if self.players != game.players {
            return foreign(
                ForeignPart::Players,
                self.players.to_string(),
                game.players.to_string(),
            );
        }
        let count = self.registered_types.len().max(game.registered_types.len());
        for i in 0..count {
            let (recorded, expected) = (self.registered_types.get(i), game.registered_types.get(i));
            if recorded != expected {
                let name = |s: Option<&String>| s.cloned().unwrap_or_else(|| "-".into());
                return foreign(
                    ForeignPart::RegisteredTypes,
                    format!("#{i} {}", name(recorded)),
                    format!("#{i} {}", name(expected)),
                );
            }
        }
        Ok(())
    }
}

/// One verified tick: every player's confirmed input, the players the relay counted
/// disconnected, and the verified checksum when the session recorded one at this tick.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReplayFrame<I> {
    /// The tick.
    pub tick: Tick,
    /// Each player's confirmed input, in player order.
    pub inputs: Vec<I>,
    /// Bit `i`: player `i` was disconnected at this tick.
    pub disconnected: u64,
    /// The verified checksum of this tick (`None` between checksum ticks).
    pub checksum: Option<u64>,
}

/// The end record: written by a recorder that finished, so a file without one was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct EndRecord {
    /// The last frame's tick (`start_tick` when no frame was recorded).
    pub last_tick: Tick,
    /// Frames recorded.
    pub frames: u64,
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) of `parts` in order.
pub(crate) fn crc32(parts: &[&[u8]]) -> u32 {
    const TABLE: [u32; 256] = crc_table();
    let mut crc = !0u32;
    for part in parts {
        for byte in *part {
            crc = TABLE[((crc ^ u32::from(*byte)) & 0xff) as usize] ^ (crc >> 8);
        }
    }
    !crc
}

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

/// The framing of one record whose payload is `parts` in order: kind, length, framing CRC,
/// record CRC (computed without concatenating the parts).
pub(crate) fn record_header(
    kind: RecordKind,
    parts: &[&[u8]],
) -> Result<[u8; RECORD_HEADER_BYTES], ReplayError> {
    let size: usize = parts.iter().map(|part| part.len()).sum();
    let len = u32::try_from(size)
        .map_err(|_| ReplayError::Recording(format!("a {size}-byte record does not fit")))?;
    let kind = kind as u8;
    let len_bytes = len.to_le_bytes();
    let kind_bytes = [kind];
    let mut crc_parts: Vec<&[u8]> = vec![&kind_bytes, &len_bytes];
    let framing_crc = crc32(&crc_parts);
    crc_parts.extend_from_slice(parts);
    let crc = crc32(&crc_parts);
    let mut out = [0u8; RECORD_HEADER_BYTES];
    out[0] = kind;
    out[1..5].copy_from_slice(&len_bytes);
    out[5..9].copy_from_slice(&framing_crc.to_le_bytes());
    out[9..13].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// The file header bytes.
pub(crate) fn file_header() -> [u8; FILE_HEADER_BYTES] {
    let mut out = [0u8; FILE_HEADER_BYTES];
    out[..8].copy_from_slice(&REPLAY_MAGIC);
    out[8..].copy_from_slice(&REPLAY_FORMAT_VERSION.to_le_bytes());
    out
}

/// Encodes a header, frame or end payload with the wire codec.
pub(crate) fn encode_payload<T: Serialize>(value: &T, what: &str) -> Result<Vec<u8>, ReplayError> {
    simsync_net::encode(value).map_err(|error| ReplayError::Recording(format!("{what}: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(&[b"123456789"]), 0xCBF4_3926);
        assert_eq!(crc32(&[b"1234", b"56789"]), 0xCBF4_3926, "parts chain");
        assert_eq!(crc32(&[]), 0);
    }

    #[test]
    fn a_record_header_holds_kind_length_and_both_crcs() {
        let header = record_header(RecordKind::Frame, &[b"abc"]).unwrap();
        assert_eq!(header[0], 2);
        assert_eq!(u32::from_le_bytes(header[1..5].try_into().unwrap()), 3);
        let framing = crc32(&[&[2], &3u32.to_le_bytes()]);
        assert_eq!(
            u32::from_le_bytes(header[5..9].try_into().unwrap()),
            framing
        );
        let crc = crc32(&[&[2], &3u32.to_le_bytes(), b"abc"]);
        assert_eq!(u32::from_le_bytes(header[9..13].try_into().unwrap()), crc);
        assert_eq!(
            record_header(RecordKind::Frame, &[b"a", b"", b"bc"]).unwrap(),
            header,
            "parts chain"
        );
    }

    #[test]
    fn the_file_header_is_magic_then_version() {
        let header = file_header();
        assert_eq!(&header[..8], b"SSREPLAY");
        assert_eq!(
            u16::from_le_bytes([header[8], header[9]]),
            REPLAY_FORMAT_VERSION
        );
    }

    #[test]
    fn unknown_record_kinds_are_none() {
        assert_eq!(RecordKind::from_byte(3), Some(RecordKind::Snapshot));
        assert_eq!(RecordKind::from_byte(0), None);
        assert_eq!(RecordKind::from_byte(5), None);
    }

    fn game() -> ReplayHeader {
        ReplayHeader {
            tick_rate_hz: 64,
            players: 2,
            input_type: "PackedInput".into(),
            registered_types: vec!["component:A".into(), "resource:B".into()],
            checksum_interval: 60,
            max_simulation_entities: 1024,
            rollback_window: 60,
            start_tick: 0,
            created_by: "a".into(),
        }
    }

    #[test]
    fn the_same_game_passes_whatever_its_session_settings() {
        let mut other = game();
        other.checksum_interval = 1;
        other.start_tick = 40;
        other.created_by = "b".into();
        assert_eq!(game().check_same_game(&other), Ok(()));
    }

    #[test]
    fn a_foreign_game_names_the_part_that_differs() {
        let part = |change: fn(&mut ReplayHeader)| {
            let mut other = game();
            change(&mut other);
            match game().check_same_game(&other) {
                Err(ReplayError::ForeignGame {
                    part,
                    recorded,
                    expected,
                }) => (part, recorded, expected),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            part(|h| h.input_type = "u32".into()),
            (ForeignPart::InputType, "PackedInput".into(), "u32".into())
        );
        assert_eq!(
            part(|h| h.tick_rate_hz = 30),
            (ForeignPart::TickRate, "64".into(), "30".into())
        );
        assert_eq!(
            part(|h| h.players = 3),
            (ForeignPart::Players, "2".into(), "3".into())
        );
        assert_eq!(
            part(|h| h.registered_types[1] = "resource:C".into()),
            (
                ForeignPart::RegisteredTypes,
                "#1 resource:B".into(),
                "#1 resource:C".into()
            )
        );
        assert_eq!(
            part(|h| h.registered_types.push("component:D".into())),
            (
                ForeignPart::RegisteredTypes,
                "#2 -".into(),
                "#2 component:D".into()
            )
        );
    }
}
