//! [`Replay`]: a replay file read and checked, ready to play.

use std::path::Path;

use super::error::ReplayError;
use super::format::{
    EndRecord, FILE_HEADER_BYTES, MAX_RECORD_BYTES, RECORD_HEADER_BYTES, REPLAY_FORMAT_VERSION,
    REPLAY_MAGIC, RecordKind, ReplayFrame, ReplayHeader, crc32,
};
use crate::input::SimInput;
use crate::tick::Tick;

/// Size limits a replay is read with; every length is checked against them before anything
/// of that size is allocated ([`ReplayError::TooLarge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayLimits {
    /// Largest replay file, in bytes (default 1 GiB).
    pub max_file_bytes: u64,
    /// Largest snapshot record, in bytes (default 256 MiB).
    pub max_snapshot_bytes: u64,
    /// Most frames (default 16,777,216: three days at 64 Hz).
    pub max_frames: u64,
}

impl Default for ReplayLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: 1 << 30,
            max_snapshot_bytes: 256 << 20,
            max_frames: 1 << 24,
        }
    }
}

/// How a replay file ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayEnd {
    /// With the end record its recorder wrote when it finished.
    Complete,
    /// Without one: the recording stopped (a crash, a killed process, a full disk) and the file
    /// ends at byte `offset`, after the frame of `last_tick` (the last complete frame; the
    /// header's `start_tick` when none). The complete frames are played.
    Cut {
        /// Where the complete records end (a partial record after it is ignored).
        offset: u64,
        /// The last complete frame's tick.
        last_tick: Tick,
    },
}

/// A snapshot stored in a replay: the verified world at `tick`, in the snapshot encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplaySnapshot {
    /// The snapshot's tick (the frame of this tick precedes it).
    pub tick: Tick,
    /// Byte offset of its record.
    pub offset: u64,
    /// The encoded snapshot.
    pub bytes: Vec<u8>,
}

/// A replay read from a file: its header, every frame (consecutive ticks from
/// `header.start_tick + 1`), its snapshots and how it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay<I: SimInput> {
    header: ReplayHeader,
    frames: Vec<ReplayFrame<I>>,
    snapshots: Vec<ReplaySnapshot>,
    end: ReplayEnd,
}

impl<I: SimInput> Replay<I> {
    /// Reads the replay file at `path` (its size is checked before it is read).
    ///
    /// # Errors
    /// [`ReplayError::Io`], [`ReplayError::TooLarge`] for a file above
    /// `limits.max_file_bytes`, and everything [`from_bytes`](Self::from_bytes) returns.
    pub fn read_file(path: &Path, limits: &ReplayLimits) -> Result<Self, ReplayError> {
        let name = path.display().to_string();
        let size = std::fs::metadata(path)
            .map_err(|e| ReplayError::io(name.clone(), &e))?
            .len();
        if size > limits.max_file_bytes {
            return Err(ReplayError::TooLarge {
                offset: 0,
                what: "file",
                size,
                limit: limits.max_file_bytes,
            });
        }
        let bytes = std::fs::read(path).map_err(|e| ReplayError::io(name, &e))?;
        Self::from_bytes(&bytes, limits)
    }

    /// Reads a replay from its bytes. A file cut after its header record is not an error: its
    /// complete frames are kept and [`end`](Self::end) says where it was cut.
    ///
    /// # Errors
    /// [`ReplayError::NotAReplay`], [`ReplayError::WrongVersion`], [`ReplayError::Truncated`]
    /// (inside the file header or header record), [`ReplayError::TooLarge`] (a record or the
    /// frame count above its limit), [`ReplayError::Corrupt`] (a record checksum, kind,
    /// payload or order that is wrong, naming its byte offset). Never panics.
    pub fn from_bytes(bytes: &[u8], limits: &ReplayLimits) -> Result<Self, ReplayError> {
        if bytes.len() as u64 > limits.max_file_bytes {
            return Err(ReplayError::TooLarge {
                offset: 0,
                what: "file",
                size: bytes.len() as u64,
                limit: limits.max_file_bytes,
            });
        }
        if bytes.len() < REPLAY_MAGIC.len() || bytes[..REPLAY_MAGIC.len()] != REPLAY_MAGIC {
            if REPLAY_MAGIC.starts_with(bytes) {
                return Err(truncated(bytes, "file header"));
            }
            return Err(ReplayError::NotAReplay);
        }
        let Some(version) = bytes.get(8..FILE_HEADER_BYTES) else {
            return Err(truncated(bytes, "file header"));
        };
        let version = u16::from_le_bytes([version[0], version[1]]);
        if version != REPLAY_FORMAT_VERSION {
            return Err(ReplayError::WrongVersion {
                found: version,
                expected: REPLAY_FORMAT_VERSION,
            });
        }
        let mut reader = Records {
            bytes,
            offset: FILE_HEADER_BYTES,
            limits,
        };
        let header = match reader.next()? {
            Next::Record(RecordKind::Header, offset, payload) => decode_header(offset, payload)?,
            Next::Record(_, offset, _) => {
                return Err(corrupt(offset, "the first record is not the header"));
            }
            Next::Cut | Next::Eof => return Err(truncated(bytes, "header record")),
        };
        let mut replay = Self {
            frames: Vec::new(),
            snapshots: Vec::new(),
            end: ReplayEnd::Complete,
            header,
        };
        replay.read_records(&mut reader)?;
        Ok(replay)
    }

    /// Reads the records after the header until the end record or the end of the bytes.
    fn read_records(&mut self, reader: &mut Records<'_>) -> Result<(), ReplayError> {
        loop {
            let record_offset = reader.offset;
            match reader.next()? {
                Next::Record(RecordKind::Frame, offset, payload) => {
                    self.add_frame(offset, payload, reader.limits)?;
                }
                Next::Record(RecordKind::Snapshot, offset, payload) => {
                    self.add_snapshot(offset, payload)?;
                }
                Next::Record(RecordKind::Header, offset, _) => {
                    return Err(corrupt(offset, "a second header record"));
                }
                Next::Record(RecordKind::End, offset, payload) => {
                    return self.end_at(offset, payload, reader);
                }
                Next::Cut | Next::Eof => {
                    self.end = ReplayEnd::Cut {
                        offset: record_offset as u64,
                        last_tick: self.last_tick(),
                    };
                    return Ok(());
                }
            }
        }
    }

    fn add_frame(
        &mut self,
        offset: usize,
        payload: &[u8],
        limits: &ReplayLimits,
    ) -> Result<(), ReplayError> {
        if self.frames.len() as u64 >= limits.max_frames {
            return Err(ReplayError::TooLarge {
                offset: offset as u64,
                what: "frame count",
                size: self.frames.len() as u64 + 1,
                limit: limits.max_frames,
            });
        }
        let frame: ReplayFrame<I> = simsync_net::decode(payload)
            .map_err(|e| corrupt(offset, format!("undecodable frame: {e}")))?;
        let Some(expected) = self.last_tick().checked_add(1) else {
            return Err(corrupt(offset, "a frame after the last representable tick"));
        };
        if frame.tick != expected {
            return Err(corrupt(
                offset,
                format!("frame of tick {} where tick {expected} was due", frame.tick),
            ));
        }
        if frame.inputs.len() != usize::from(self.header.players) {
            return Err(corrupt(
                offset,
                format!(
                    "frame of tick {} has {} inputs for {} players",
                    frame.tick,
                    frame.inputs.len(),
                    self.header.players
                ),
            ));
        }
        self.frames.push(frame);
        Ok(())
    }

    fn add_snapshot(&mut self, offset: usize, payload: &[u8]) -> Result<(), ReplayError> {
        let Some((tick, body)) = payload.split_first_chunk::<4>() else {
            return Err(corrupt(offset, "snapshot record shorter than its tick"));
        };
        let tick = Tick::from_le_bytes(*tick);
        let last = self.last_tick();
        if tick != last || self.snapshots.last().is_some_and(|s| s.tick == tick) {
            return Err(corrupt(
                offset,
                format!("snapshot of tick {tick} after the frame of tick {last}"),
            ));
        }
        self.snapshots.push(ReplaySnapshot {
            tick,
            offset: offset as u64,
            bytes: body.to_vec(),
        });
        Ok(())
    }

    fn end_at(
        &mut self,
        offset: usize,
        payload: &[u8],
        reader: &Records<'_>,
    ) -> Result<(), ReplayError> {
        let end: EndRecord = simsync_net::decode(payload)
            .map_err(|e| corrupt(offset, format!("undecodable end record: {e}")))?;
        if end.last_tick != self.last_tick() || end.frames != self.frames.len() as u64 {
            return Err(corrupt(
                offset,
                format!(
                    "the end record counts {} frames to tick {}, the file holds {} to tick {}",
                    end.frames,
                    end.last_tick,
                    self.frames.len(),
                    self.last_tick()
                ),
            ));
        }
        if reader.offset != reader.bytes.len() {
            return Err(corrupt(
                reader.offset,
                format!(
                    "{} bytes after the end record",
                    reader.bytes.len() - reader.offset
                ),
            ));
        }
        self.end = ReplayEnd::Complete;
        Ok(())
    }

    /// The header.
    pub fn header(&self) -> &ReplayHeader {
        &self.header
    }

    /// Every frame, consecutive ticks from `header().start_tick + 1`.
    pub fn frames(&self) -> &[ReplayFrame<I>] {
        &self.frames
    }

    /// Mutable frames (tools and tests, e.g. to plant a changed input).
    pub fn frames_mut(&mut self) -> &mut [ReplayFrame<I>] {
        &mut self.frames
    }

    /// The frame of `tick`, if recorded.
    pub fn frame(&self, tick: Tick) -> Option<&ReplayFrame<I>> {
        let index = tick.checked_sub(self.header.start_tick.checked_add(1)?)?;
        self.frames.get(usize::try_from(index).ok()?)
    }

    /// The snapshots, in tick order.
    pub fn snapshots(&self) -> &[ReplaySnapshot] {
        &self.snapshots
    }

    /// The snapshot at or before `tick` closest to it.
    pub fn snapshot_at_or_before(&self, tick: Tick) -> Option<&ReplaySnapshot> {
        self.snapshots.iter().rev().find(|s| s.tick <= tick)
    }

    /// How the file ends.
    pub fn end(&self) -> ReplayEnd {
        self.end
    }

    /// The last frame's tick (`header().start_tick` without frames).
    pub fn last_tick(&self) -> Tick {
        self.frames
            .last()
            .map_or(self.header.start_tick, |f| f.tick)
    }

    /// The tick playback starts from without a seek: 0 for a recording from the session's
    /// start, else the first snapshot's tick.
    ///
    /// # Errors
    /// [`ReplayError::NoStartingPoint`] for a recording that began after tick 0 without a
    /// snapshot.
    pub fn start_tick(&self) -> Result<Tick, ReplayError> {
        if self.header.start_tick == 0 {
            return Ok(0);
        }
        self.snapshots
            .first()
            .map(|s| s.tick)
            .ok_or(ReplayError::NoStartingPoint {
                first_tick: self.header.start_tick.saturating_add(1),
            })
    }
}

/// The next thing in the record stream.
enum Next<'a> {
    /// A complete record: kind, byte offset of its framing, payload.
    Record(RecordKind, usize, &'a [u8]),
    /// The bytes end inside a record.
    Cut,
    /// The bytes end at a record boundary.
    Eof,
}

/// Walks the records of a replay's bytes.
struct Records<'a> {
    bytes: &'a [u8],
    offset: usize,
    limits: &'a ReplayLimits,
}

impl<'a> Records<'a> {
    fn next(&mut self) -> Result<Next<'a>, ReplayError> {
        let start = self.offset;
        let bytes: &'a [u8] = self.bytes;
        let rest = &bytes[start.min(bytes.len())..];
        if rest.is_empty() {
            return Ok(Next::Eof);
        }
        let Some(framing) = rest.first_chunk::<RECORD_HEADER_BYTES>() else {
            return Ok(Next::Cut);
        };
        let len_bytes = [framing[1], framing[2], framing[3], framing[4]];
        // The framing's own CRC first: a damaged kind or length is corruption here, not a cut
        // file (a length past the end of the bytes is a cut only when the framing is intact).
        let framing_crc = u32::from_le_bytes([framing[5], framing[6], framing[7], framing[8]]);
        if crc32(&[&[framing[0]], &len_bytes]) != framing_crc {
            return Err(corrupt(
                start,
                "record framing fails its checksum (a damaged kind or length)",
            ));
        }
        let Some(kind) = RecordKind::from_byte(framing[0]) else {
            return Err(corrupt(
                start,
                format!("unknown record kind {}", framing[0]),
            ));
        };
        let len = u64::from(u32::from_le_bytes(len_bytes));
        let (what, limit) = match kind {
            RecordKind::Snapshot => ("snapshot record", self.limits.max_snapshot_bytes),
            RecordKind::Header => ("header record", MAX_RECORD_BYTES as u64),
            RecordKind::Frame => ("frame record", MAX_RECORD_BYTES as u64),
            RecordKind::End => ("end record", MAX_RECORD_BYTES as u64),
        };
        if len > limit {
            return Err(ReplayError::TooLarge {
                offset: start as u64,
                what,
                size: len,
                limit,
            });
        }
        let body = &rest[RECORD_HEADER_BYTES..];
        let Some(payload) = body.get(..len as usize) else {
            return Ok(Next::Cut);
        };
        let crc = u32::from_le_bytes([framing[9], framing[10], framing[11], framing[12]]);
        if crc32(&[&[framing[0]], &len_bytes, payload]) != crc {
            return Err(corrupt(start, format!("{what} fails its checksum")));
        }
        self.offset = start + RECORD_HEADER_BYTES + payload.len();
        Ok(Next::Record(kind, start, payload))
    }
}

fn decode_header(offset: usize, payload: &[u8]) -> Result<ReplayHeader, ReplayError> {
    let header: ReplayHeader = simsync_net::decode(payload)
        .map_err(|e| corrupt(offset, format!("undecodable header: {e}")))?;
    if header.players == 0 || header.tick_rate_hz == 0 || header.checksum_interval == 0 {
        return Err(corrupt(
            offset,
            "header with 0 players, a tick rate of 0 or a checksum interval of 0",
        ));
    }
    if header.start_tick < 0 {
        return Err(corrupt(
            offset,
            format!("header start tick {}", header.start_tick),
        ));
    }
    Ok(header)
}

fn corrupt(offset: usize, reason: impl Into<String>) -> ReplayError {
    ReplayError::Corrupt {
        offset: offset as u64,
        reason: reason.into(),
    }
}

fn truncated(bytes: &[u8], what: &'static str) -> ReplayError {
    ReplayError::Truncated {
        offset: bytes.len() as u64,
        what,
    }
}

#[cfg(test)]
mod tests {
    use super::super::format::REPLAY_MAGIC;
    use super::super::writer::ReplayWriter;
    use super::*;

    fn header(start_tick: Tick) -> ReplayHeader {
        ReplayHeader {
            tick_rate_hz: 64,
            players: 2,
            input_type: "u16".into(),
            registered_types: vec!["component:A".into(), "resource:B".into()],
            checksum_interval: 1,
            max_simulation_entities: 1024,
            rollback_window: 8,
            start_tick,
            created_by: "test".into(),
        }
    }

    fn frame(tick: Tick) -> ReplayFrame<u16> {
        ReplayFrame {
            tick,
            inputs: vec![tick as u16 * 3, 1000 + tick as u16],
            disconnected: u64::from(tick == 4) << 1,
            checksum: (tick % 2 == 0).then_some(0xABCD_0000 + tick as u64),
        }
    }

    /// Header, frames 1..=6, a snapshot after frame 3, the end record; and the byte offset
    /// where each record ends.
    fn small_replay() -> (Vec<u8>, Vec<usize>) {
        let mut writer = ReplayWriter::new(Vec::new(), "");
        let mut ends = Vec::new();
        writer.header(&header(0)).unwrap();
        ends.push(writer.bytes() as usize);
        for tick in 1..=6 {
            writer.frame(&frame(tick)).unwrap();
            ends.push(writer.bytes() as usize);
            if tick == 3 {
                writer.snapshot(3, b"snapshot-3").unwrap();
                ends.push(writer.bytes() as usize);
            }
        }
        writer.finish().unwrap();
        ends.push(writer.bytes() as usize);
        (writer.into_inner(), ends)
    }

    fn read(bytes: &[u8]) -> Result<Replay<u16>, ReplayError> {
        Replay::from_bytes(bytes, &ReplayLimits::default())
    }

    #[test]
    fn a_written_replay_reads_back_frame_for_frame() {
        let (bytes, _) = small_replay();
        let replay = read(&bytes).unwrap();
        assert_eq!(replay.header(), &header(0));
        assert_eq!(replay.frames(), (1..=6).map(frame).collect::<Vec<_>>());
        assert_eq!(replay.frame(4), Some(&frame(4)));
        assert_eq!(replay.frame(7), None);
        assert_eq!(replay.snapshots().len(), 1);
        assert_eq!(replay.snapshots()[0].tick, 3);
        assert_eq!(replay.snapshots()[0].bytes, b"snapshot-3");
        assert_eq!(replay.snapshot_at_or_before(5).map(|s| s.tick), Some(3));
        assert_eq!(replay.snapshot_at_or_before(2), None);
        assert_eq!(replay.end(), ReplayEnd::Complete);
        assert_eq!(replay.last_tick(), 6);
        assert_eq!(replay.start_tick(), Ok(0));
    }

    #[test]
    fn a_replay_cut_at_any_offset_keeps_its_complete_frames_or_is_refused() {
        let (bytes, ends) = small_replay();
        let header_end = ends[0];
        for cut in 0..bytes.len() {
            match read(&bytes[..cut]) {
                Err(ReplayError::Truncated { offset, .. }) => {
                    assert!(cut < header_end, "cut at {cut} after the header refused");
                    assert_eq!(offset, cut as u64);
                }
                Err(other) => panic!("cut at {cut}: {other}"),
                Ok(replay) => {
                    assert!(cut >= header_end, "cut at {cut} inside the header accepted");
                    // The complete records before the cut: frames and the snapshot.
                    let complete = ends.iter().filter(|end| **end <= cut).count() - 1;
                    let frames = if complete > 3 { complete - 1 } else { complete };
                    assert_eq!(replay.frames().len(), frames.min(6), "cut at {cut}");
                    let last_end = ends.iter().rev().find(|end| **end <= cut).copied();
                    assert_eq!(
                        replay.end(),
                        ReplayEnd::Cut {
                            offset: last_end.unwrap() as u64,
                            last_tick: frames.min(6) as Tick,
                        },
                        "cut at {cut}"
                    );
                }
            }
        }
        assert_eq!(read(&bytes).unwrap().end(), ReplayEnd::Complete);
    }

    #[test]
    fn no_flipped_byte_reads_as_a_complete_replay() {
        let (bytes, _) = small_replay();
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xFF] {
                let mut bad = bytes.clone();
                bad[i] ^= flip;
                match read(&bad) {
                    Ok(replay) => assert_ne!(
                        replay.end(),
                        ReplayEnd::Complete,
                        "byte {i} ^ {flip:#x} read as complete"
                    ),
                    Err(
                        ReplayError::NotAReplay
                        | ReplayError::WrongVersion { .. }
                        | ReplayError::Corrupt { .. }
                        | ReplayError::TooLarge { .. }
                        | ReplayError::Truncated { .. },
                    ) => {}
                    Err(other) => panic!("byte {i}: unexpected {other}"),
                }
            }
        }
    }

    #[test]
    fn a_flipped_payload_byte_is_corrupt_at_its_record() {
        let (mut bytes, ends) = small_replay();
        // The payload of the frame of tick 2 (the third record).
        let record = ends[1];
        bytes[record + RECORD_HEADER_BYTES + 1] ^= 0x10;
        assert_eq!(
            read(&bytes),
            Err(ReplayError::Corrupt {
                offset: record as u64,
                reason: "frame record fails its checksum".into()
            })
        );
    }

    #[test]
    fn wrong_magic_and_version_are_named() {
        let (bytes, _) = small_replay();
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert_eq!(read(&bad), Err(ReplayError::NotAReplay));
        let mut bad = bytes.clone();
        bad[8..10].copy_from_slice(&7u16.to_le_bytes());
        assert_eq!(
            read(&bad),
            Err(ReplayError::WrongVersion {
                found: 7,
                expected: REPLAY_FORMAT_VERSION
            })
        );
        assert_eq!(read(b"hello world"), Err(ReplayError::NotAReplay));
        assert_eq!(
            read(&REPLAY_MAGIC[..5]),
            Err(ReplayError::Truncated {
                offset: 5,
                what: "file header"
            })
        );
    }

    #[test]
    fn absurd_lengths_are_refused_before_allocating() {
        let (bytes, ends) = small_replay();
        // The frame record of tick 1 announcing 4 GiB, its framing CRC rewritten to match (a
        // writer's lie, not damage).
        let mut bad = bytes[..ends[1]].to_vec();
        bad[ends[0] + 1..ends[0] + 5].copy_from_slice(&u32::MAX.to_le_bytes());
        let framing_crc = crc32(&[&bad[ends[0]..ends[0] + 5]]);
        bad[ends[0] + 5..ends[0] + 9].copy_from_slice(&framing_crc.to_le_bytes());
        assert_eq!(
            read(&bad),
            Err(ReplayError::TooLarge {
                offset: ends[0] as u64,
                what: "frame record",
                size: u64::from(u32::MAX),
                limit: MAX_RECORD_BYTES as u64,
            })
        );
        let small = ReplayLimits {
            max_snapshot_bytes: 8,
            ..ReplayLimits::default()
        };
        assert!(matches!(
            Replay::<u16>::from_bytes(&bytes, &small),
            Err(ReplayError::TooLarge {
                what: "snapshot record",
                size: 14,
                limit: 8,
                ..
            })
        ));
        let few = ReplayLimits {
            max_frames: 2,
            ..ReplayLimits::default()
        };
        assert!(matches!(
            Replay::<u16>::from_bytes(&bytes, &few),
            Err(ReplayError::TooLarge {
                what: "frame count",
                size: 3,
                limit: 2,
                ..
            })
        ));
        let tiny = ReplayLimits {
            max_file_bytes: 16,
            ..ReplayLimits::default()
        };
        assert!(matches!(
            Replay::<u16>::from_bytes(&bytes, &tiny),
            Err(ReplayError::TooLarge { what: "file", .. })
        ));
    }

    /// Header, frames 1..=100, a snapshot after frame 100, frames 101..=1000, the end record;
    /// and the snapshot record's offset.
    fn replay_with_a_snapshot_then_900_frames() -> (Vec<u8>, usize) {
        let mut writer = ReplayWriter::new(Vec::new(), "");
        writer.header(&header(0)).unwrap();
        for tick in 1..=100 {
            writer.frame(&frame(tick)).unwrap();
        }
        let snapshot_at = writer.bytes() as usize;
        writer.snapshot(100, &[7u8; 3000]).unwrap();
        for tick in 101..=1000 {
            writer.frame(&frame(tick)).unwrap();
        }
        writer.finish().unwrap();
        (writer.into_inner(), snapshot_at)
    }

    #[test]
    fn a_damaged_record_length_is_corrupt_at_its_record_not_a_cut_file() {
        let (bytes, at) = replay_with_a_snapshot_then_900_frames();
        let replay = read(&bytes).unwrap();
        assert_eq!(
            (replay.frames().len(), replay.end()),
            (1000, ReplayEnd::Complete)
        );
        // Every bit of the snapshot record's length: longer than the rest of the file (once a
        // "cut"), shorter, or a few bytes off.
        for bit in 0..32 {
            let mut bad = bytes.clone();
            bad[at + 1 + bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                read(&bad),
                Err(ReplayError::Corrupt {
                    offset: at as u64,
                    reason: "record framing fails its checksum (a damaged kind or length)".into(),
                }),
                "length bit {bit}"
            );
        }
        // The same damage to the framing CRC itself, and to the kind byte.
        for byte in [at, at + 5, at + 8] {
            let mut bad = bytes.clone();
            bad[byte] ^= 0x04;
            assert!(
                matches!(read(&bad), Err(ReplayError::Corrupt { offset, .. }) if offset == at as u64),
                "byte {byte}"
            );
        }
        // A real cut inside the snapshot record is still a cut after frame 100.
        let cut = read(&bytes[..at + RECORD_HEADER_BYTES + 100]).unwrap();
        assert_eq!(
            cut.end(),
            ReplayEnd::Cut {
                offset: at as u64,
                last_tick: 100
            }
        );
    }

    #[test]
    fn a_replay_of_format_version_1_is_refused_with_its_version() {
        let (mut bytes, _) = small_replay();
        bytes[8..10].copy_from_slice(&1u16.to_le_bytes());
        assert_eq!(
            read(&bytes),
            Err(ReplayError::WrongVersion {
                found: 1,
                expected: REPLAY_FORMAT_VERSION
            })
        );
    }

    #[test]
    fn frames_out_of_order_or_of_the_wrong_size_are_corrupt() {
        // Hand-framed records: the writer refuses to write them.
        let mut bytes = super::super::format::file_header().to_vec();
        let push = |bytes: &mut Vec<u8>, kind, payload: Vec<u8>| {
            bytes.extend(super::super::format::record_header(kind, &[&payload]).unwrap());
            bytes.extend(payload);
        };
        push(
            &mut bytes,
            RecordKind::Header,
            simsync_net::encode(&header(0)).unwrap(),
        );
        let frame_offset = bytes.len() as u64;
        push(
            &mut bytes,
            RecordKind::Frame,
            simsync_net::encode(&frame(2)).unwrap(),
        );
        assert_eq!(
            read(&bytes),
            Err(ReplayError::Corrupt {
                offset: frame_offset,
                reason: "frame of tick 2 where tick 1 was due".into()
            })
        );
        bytes.truncate(frame_offset as usize);
        let mut short = frame(1);
        short.inputs.pop();
        push(
            &mut bytes,
            RecordKind::Frame,
            simsync_net::encode(&short).unwrap(),
        );
        assert!(
            matches!(read(&bytes), Err(ReplayError::Corrupt { offset, .. }) if offset == frame_offset)
        );
        bytes.truncate(frame_offset as usize);
        push(
            &mut bytes,
            RecordKind::Header,
            simsync_net::encode(&header(0)).unwrap(),
        );
        assert!(
            matches!(read(&bytes), Err(ReplayError::Corrupt { reason, .. }) if reason.contains("second header"))
        );
    }

    #[test]
    fn bytes_after_the_end_record_are_corrupt() {
        let (mut bytes, ends) = small_replay();
        bytes.push(0);
        assert_eq!(
            read(&bytes),
            Err(ReplayError::Corrupt {
                offset: *ends.last().unwrap() as u64,
                reason: "1 bytes after the end record".into()
            })
        );
    }

    #[test]
    fn a_recording_started_late_needs_a_snapshot() {
        let mut writer = ReplayWriter::new(Vec::new(), "");
        writer.header(&header(10)).unwrap();
        writer.frame(&frame(11)).unwrap();
        writer.finish().unwrap();
        let replay = read(&writer.into_inner()).unwrap();
        assert_eq!(
            replay.start_tick(),
            Err(ReplayError::NoStartingPoint { first_tick: 11 })
        );
        let mut writer = ReplayWriter::new(Vec::new(), "");
        writer.header(&header(10)).unwrap();
        writer.snapshot(10, b"s").unwrap();
        writer.frame(&frame(11)).unwrap();
        let replay = read(&writer.into_inner()).unwrap();
        assert_eq!(replay.start_tick(), Ok(10));
        assert_eq!(replay.frame(11), Some(&frame(11)));
    }

    #[test]
    fn the_writer_refuses_out_of_order_records() {
        let mut writer = ReplayWriter::new(Vec::new(), "");
        assert!(matches!(
            writer.frame(&frame(1)),
            Err(ReplayError::Recording(_))
        ));
        writer.header(&header(0)).unwrap();
        assert!(writer.header(&header(0)).is_err(), "a second header");
        assert!(writer.frame(&frame(2)).is_err(), "tick 2 before tick 1");
        assert!(
            writer.snapshot(5, b"x").is_err(),
            "a snapshot of a tick not reached"
        );
        writer.frame(&frame(1)).unwrap();
        let mut wide = frame(2);
        wide.inputs.push(9);
        assert!(writer.frame(&wide).is_err(), "three inputs for two players");
        writer.snapshot(1, b"x").unwrap();
        assert!(writer.snapshot(1, b"x").is_err(), "twice at one tick");
        writer.finish().unwrap();
        assert!(writer.frame(&frame(2)).is_err(), "after finish");
        assert_eq!(read(&writer.into_inner()).unwrap().frames().len(), 1);
    }
}
