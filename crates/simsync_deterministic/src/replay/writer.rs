//! [`ReplayWriter`]: writes a replay file record by record, in order, to any `Write`.

use std::io::Write;

use super::error::ReplayError;
use super::format::{
    EndRecord, RecordKind, ReplayFrame, ReplayHeader, encode_payload, file_header, record_header,
};
use crate::input::SimInput;
use crate::tick::Tick;

/// A frame with borrowed inputs: serializes to the same bytes as a [`ReplayFrame`] (fields in
/// the same order; a slice and a `Vec` encode alike).
#[derive(serde::Serialize)]
pub(crate) struct FrameRef<'a, I> {
    pub tick: Tick,
    pub inputs: &'a [I],
    pub disconnected: u64,
    pub checksum: Option<u64>,
}

/// Writes one replay ([the format](crate::rules#replays)): [`header`](Self::header) first, then
/// [`frame`](Self::frame)s of consecutive ticks and [`snapshot`](Self::snapshot)s, then
/// [`finish`](Self::finish). Records go straight to the writer (wrap a file in a `BufWriter`
/// and call [`flush`](Self::flush) regularly: a crash then loses at most the records since the
/// last flush, and the file reads as [cut](crate::ReplayEnd::Cut) after its last complete
/// frame).
///
/// Every method checks the order; a refused call writes nothing. After an I/O error the writer
/// refuses everything (the file may end inside a record).
pub struct ReplayWriter<W: Write> {
    out: W,
    /// `name` of errors: the file's path, or empty.
    name: String,
    state: WriterState,
    players: usize,
    /// The last frame's tick (the header's `start_tick` before any frame).
    last_tick: Tick,
    /// The last snapshot's tick.
    last_snapshot: Option<Tick>,
    frames: u64,
    bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriterState {
    NoHeader,
    Writing,
    Finished,
    Failed,
}

impl<W: Write> ReplayWriter<W> {
    /// A writer to `out`; `name` names it in errors (a path, or empty).
    pub fn new(out: W, name: impl Into<String>) -> Self {
        Self {
            out,
            name: name.into(),
            state: WriterState::NoHeader,
            players: 0,
            last_tick: 0,
            last_snapshot: None,
            frames: 0,
            bytes: 0,
        }
    }

    /// Writes the file header and the header record.
    ///
    /// # Errors
    /// [`ReplayError::Recording`] if a header was written already or it does not encode in
    /// 64 KiB; [`ReplayError::Io`].
    pub fn header(&mut self, header: &ReplayHeader) -> Result<(), ReplayError> {
        if self.state != WriterState::NoHeader {
            return Err(ReplayError::Recording(
                "the header was written already".into(),
            ));
        }
        let payload = encode_payload(header, "header")?;
        let file = file_header();
        self.write_parts(&[
            &file,
            &record_header(RecordKind::Header, &[&payload])?,
            &payload,
        ])?;
        self.state = WriterState::Writing;
        self.players = usize::from(header.players);
        self.last_tick = header.start_tick;
        Ok(())
    }

    /// Writes the frame of the tick after the previous frame's.
    ///
    /// # Errors
    /// [`ReplayError::Recording`] before the header, after `finish` or a failure, for a tick
    /// that does not follow the previous one, or a frame without one input per player;
    /// [`ReplayError::Io`].
    pub fn frame<I: SimInput>(&mut self, frame: &ReplayFrame<I>) -> Result<(), ReplayError> {
        self.frame_of(FrameRef {
            tick: frame.tick,
            inputs: &frame.inputs,
            disconnected: frame.disconnected,
            checksum: frame.checksum,
        })
    }

    /// [`frame`](Self::frame) from borrowed inputs (the same bytes).
    pub(crate) fn frame_of<I: SimInput>(
        &mut self,
        frame: FrameRef<'_, I>,
    ) -> Result<(), ReplayError> {
        self.check_writing()?;
        if Some(frame.tick) != self.last_tick.checked_add(1) {
            return Err(ReplayError::Recording(format!(
                "frame of tick {} after tick {}: frames must be consecutive",
                frame.tick, self.last_tick
            )));
        }
        if frame.inputs.len() != self.players {
            return Err(ReplayError::Recording(format!(
                "frame of tick {} has {} inputs for {} players",
                frame.tick,
                frame.inputs.len(),
                self.players
            )));
        }
        let payload = encode_payload(&frame, "frame")?;
        self.write_parts(&[&record_header(RecordKind::Frame, &[&payload])?, &payload])?;
        self.last_tick = frame.tick;
        self.frames += 1;
        Ok(())
    }

    /// Writes a snapshot of the verified world at `tick`, which must be the last frame's tick
    /// (or the header's `start_tick` before any frame), once per tick.
    ///
    /// # Errors
    /// [`ReplayError::Recording`] out of order (see above); [`ReplayError::Io`].
    pub fn snapshot(&mut self, tick: Tick, snapshot: &[u8]) -> Result<(), ReplayError> {
        self.check_writing()?;
        if tick != self.last_tick || self.last_snapshot == Some(tick) {
            return Err(ReplayError::Recording(format!(
                "snapshot of tick {tick} after the frame of tick {}: a snapshot follows the \
                 frame of its tick, once",
                self.last_tick
            )));
        }
        let tick_bytes = tick.to_le_bytes();
        let header = record_header(RecordKind::Snapshot, &[&tick_bytes, snapshot])?;
        self.write_parts(&[&header, &tick_bytes, snapshot])?;
        self.last_snapshot = Some(tick);
        Ok(())
    }

    /// Writes the end record and flushes: the replay is complete.
    ///
    /// # Errors
    /// [`ReplayError::Recording`] before the header, twice or after a failure;
    /// [`ReplayError::Io`].
    pub fn finish(&mut self) -> Result<(), ReplayError> {
        self.check_writing()?;
        let payload = encode_payload(
            &EndRecord {
                last_tick: self.last_tick,
                frames: self.frames,
            },
            "end record",
        )?;
        self.write_parts(&[&record_header(RecordKind::End, &[&payload])?, &payload])?;
        self.flush()?;
        self.state = WriterState::Finished;
        Ok(())
    }

    /// Flushes the writer.
    ///
    /// # Errors
    /// [`ReplayError::Io`].
    pub fn flush(&mut self) -> Result<(), ReplayError> {
        if self.state == WriterState::Failed {
            return Ok(());
        }
        self.out.flush().map_err(|e| {
            self.state = WriterState::Failed;
            ReplayError::io(self.name.clone(), &e)
        })
    }

    /// Frames written.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Bytes written.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The last frame's tick (the header's `start_tick` before any frame).
    pub fn last_tick(&self) -> Tick {
        self.last_tick
    }

    /// Whether the header was written and the replay is neither finished nor failed.
    pub fn is_writing(&self) -> bool {
        self.state == WriterState::Writing
    }

    /// The inner writer.
    pub fn into_inner(self) -> W {
        self.out
    }

    fn check_writing(&self) -> Result<(), ReplayError> {
        match self.state {
            WriterState::Writing => Ok(()),
            WriterState::NoHeader => Err(ReplayError::Recording("no header written yet".into())),
            WriterState::Finished => Err(ReplayError::Recording("the replay is finished".into())),
            WriterState::Failed => Err(ReplayError::Recording(
                "an earlier write failed; the recording stopped".into(),
            )),
        }
    }

    fn write_parts(&mut self, parts: &[&[u8]]) -> Result<(), ReplayError> {
        for part in parts {
            if let Err(e) = self.out.write_all(part) {
                self.state = WriterState::Failed;
                return Err(ReplayError::io(self.name.clone(), &e));
            }
            self.bytes += part.len() as u64;
        }
        Ok(())
    }
}
