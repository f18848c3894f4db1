//! Recorded player actions in a run-length format (see `assets/traces/two_players.ron`).
//!
//! A trace is a list of segments; each holds one player's actions constant for a range of
//! session ticks. Ticks not covered by a segment (gaps, or past the trace's end) mean the default
//! input: no movement, no button pressed.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::LoadError;

/// Largest tick a segment may reach (session ticks are `i32`).
pub const MAX_TRACE_TICK: u32 = i32::MAX as u32;

/// A whole trace file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    /// Players the trace was recorded for (segments name players `0..players`).
    pub players: u8,
    /// The segments, in any order; two segments of the same player must not overlap.
    pub segments: Vec<Segment>,
}

/// One player's actions, constant over `ticks` ticks starting at session tick `start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    /// The player.
    pub player: u8,
    /// First session tick (the first simulated tick is 1; tick 0 is the setup tick).
    pub start: u32,
    /// Number of ticks (≥ 1).
    pub ticks: u32,
    /// Movement axes in `[-1, 1]`: x along world +X, y along world +Z.
    #[serde(default, rename = "move")]
    pub movement: [f32; 2],
    /// Jump held (a jump fires on the tick it becomes held).
    #[serde(default)]
    pub jump: bool,
    /// Push held (a push fires on the tick it becomes held).
    #[serde(default)]
    pub push: bool,
}

impl Segment {
    /// The tick after the segment's last tick.
    pub fn end(&self) -> u32 {
        self.start + self.ticks
    }
}

/// One player's actions on one tick.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TraceInput {
    /// Movement axes in `[-1, 1]` (x → world +X, y → world +Z).
    pub movement: [f32; 2],
    /// Jump held.
    pub jump: bool,
    /// Push held.
    pub push: bool,
}

/// A validated trace, its segments sorted per player for lookup by tick.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CompiledTrace {
    players: u8,
    end_tick: u32,
    /// Per player: `(start, end, input)`, sorted by start, not overlapping.
    runs: Vec<Vec<(u32, u32, TraceInput)>>,
    segments: usize,
}

impl CompiledTrace {
    /// The input of `player` on session tick `tick`; default for a player the trace does not
    /// know, a negative tick, or a tick past the end.
    pub fn input(&self, player: u8, tick: i32) -> TraceInput {
        let (Ok(tick), Some(runs)) = (u32::try_from(tick), self.runs.get(usize::from(player)))
        else {
            return TraceInput::default();
        };
        // The last run starting at or before `tick`, if it still covers it.
        let i = runs.partition_point(|&(start, _, _)| start <= tick);
        match i.checked_sub(1).map(|i| runs[i]) {
            Some((_, end, input)) if tick < end => input,
            _ => TraceInput::default(),
        }
    }

    /// Players the trace was recorded for.
    pub fn players(&self) -> u8 {
        self.players
    }

    /// The tick after the last tick any segment covers (inputs from it on are default).
    pub fn end_tick(&self) -> u32 {
        self.end_tick
    }

    /// Number of segments in the file.
    pub fn segments(&self) -> usize {
        self.segments
    }
}

impl Trace {
    /// Checks every segment; `Err((field, reason))` names the first bad one.
    fn validate(&self) -> Result<(), (String, String)> {
        if self.players == 0 {
            return Err((
                "players".into(),
                "is 0: a trace has at least one player".into(),
            ));
        }
        for (i, s) in self.segments.iter().enumerate() {
            if s.player >= self.players {
                return Err((
                    format!("segments[{i}].player"),
                    format!(
                        "is {}: unknown player, the trace has {} (0..={})",
                        s.player,
                        self.players,
                        self.players - 1
                    ),
                ));
            }
            if s.ticks == 0 {
                return Err((format!("segments[{i}].ticks"), "is 0: must be ≥ 1".into()));
            }
            if s.start
                .checked_add(s.ticks)
                .is_none_or(|end| end > MAX_TRACE_TICK)
            {
                return Err((
                    format!("segments[{i}]"),
                    format!("ends after tick {MAX_TRACE_TICK}"),
                ));
            }
            if !s
                .movement
                .iter()
                .all(|a| a.is_finite() && (-1.0..=1.0).contains(a))
            {
                return Err((
                    format!("segments[{i}].move"),
                    format!("is {:?}: each axis must be in [-1, 1]", s.movement),
                ));
            }
        }
        let mut order: Vec<usize> = (0..self.segments.len()).collect();
        order.sort_by_key(|&i| (self.segments[i].player, self.segments[i].start));
        for pair in order.windows(2) {
            let (a, b) = (&self.segments[pair[0]], &self.segments[pair[1]]);
            if a.player == b.player && b.start < a.end() {
                return Err((
                    format!("segments[{}]", pair[1]),
                    format!(
                        "overlaps segments[{}]: player {} has ticks {}..{} and {}..{}",
                        pair[0],
                        a.player,
                        a.start,
                        a.end(),
                        b.start,
                        b.end()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Sorts the (validated) trace's segments per player.
    fn compile(&self) -> CompiledTrace {
        let end_tick = self.segments.iter().map(Segment::end).max().unwrap_or(0);
        let mut runs = vec![Vec::new(); usize::from(self.players)];
        for s in &self.segments {
            let input = TraceInput {
                movement: s.movement,
                jump: s.jump,
                push: s.push,
            };
            runs[usize::from(s.player)].push((s.start, s.end(), input));
        }
        for list in &mut runs {
            list.sort_by_key(|&(start, _, _)| start);
        }
        CompiledTrace {
            players: self.players,
            end_tick,
            runs,
            segments: self.segments.len(),
        }
    }
}

/// Parses, validates and expands a trace from RON text; `path` only names the source in errors.
///
/// # Errors
/// [`LoadError::Parse`] with line and column for malformed RON, [`LoadError::Invalid`] naming
/// the segment for a segment of an unknown player, of zero ticks, with an axis outside
/// `[-1, 1]`, or overlapping another of the same player.
pub fn parse_trace(text: &str, path: &Path) -> Result<CompiledTrace, LoadError> {
    let trace: Trace = ron::from_str(text).map_err(|e| LoadError::parse(path, e))?;
    trace
        .validate()
        .map_err(|(field, reason)| LoadError::Invalid {
            path: path.to_path_buf(),
            kind: "trace",
            field,
            reason,
        })?;
    Ok(trace.compile())
}

/// Reads, parses, validates and expands the trace file at `path`.
///
/// # Errors
/// [`LoadError::Io`] if the file cannot be read; otherwise as [`parse_trace`].
pub fn load_trace(path: &Path) -> Result<CompiledTrace, LoadError> {
    parse_trace(&LoadError::read(path)?, path)
}
