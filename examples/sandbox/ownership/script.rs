//! The ownership script: a RON trace of each participant's actions per tick
//! (`assets/traces/ownership_three.ron`), its loader and its lookup.

use std::path::Path;

use serde::Deserialize;

use crate::error::LoadError;

/// A whole ownership trace file (see `assets/traces/ownership_three.ron`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceFile {
    participants: u8,
    segments: Vec<Segment>,
}

/// One participant's actions, held for `ticks` ticks from `start`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Segment {
    participant: u8,
    start: u32,
    ticks: u32,
    #[serde(default, rename = "move")]
    movement: [f32; 2],
    #[serde(default)]
    jump: bool,
    #[serde(default)]
    push: bool,
    #[serde(default)]
    poke: bool,
    #[serde(default)]
    grab: bool,
}

/// One participant's actions on one tick.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Actions {
    /// Horizontal movement, each axis in [-1, 1].
    pub movement: [f32; 2],
    /// Jump (on press).
    pub jump: bool,
    /// Push every body in reach (on press).
    pub push: bool,
    /// Poke the nearest body (on press).
    pub poke: bool,
    /// Grab the nearest body (on press), carry it while held.
    pub grab: bool,
}

/// A validated trace, per participant, runs sorted by start.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// Participants the trace scripts.
    pub participants: u8,
    /// Per participant: `(start, end, actions)`, end exclusive.
    runs: Vec<Vec<(u32, u32, Actions)>>,
    /// The tick after the last scripted one.
    pub end_tick: u32,
    /// Segments in the file.
    pub segments: usize,
}

impl Script {
    /// What `participant` does on `tick` (nothing outside its segments).
    pub fn actions(&self, participant: u8, tick: u32) -> Actions {
        let Some(runs) = self.runs.get(usize::from(participant)) else {
            return Actions::default();
        };
        let i = runs.partition_point(|&(start, _, _)| start <= tick);
        match i.checked_sub(1).map(|i| runs[i]) {
            Some((_, end, actions)) if tick < end => actions,
            _ => Actions::default(),
        }
    }
}

fn invalid(path: &Path, field: String, reason: String) -> LoadError {
    LoadError::Invalid {
        path: path.to_path_buf(),
        kind: "ownership trace",
        field,
        reason,
    }
}

/// Reads, parses and validates an ownership trace.
pub fn load_script(path: &Path) -> Result<Script, LoadError> {
    let text = LoadError::read(path)?;
    let file: TraceFile = ron::from_str(&text).map_err(|e| LoadError::parse(path, e))?;
    if file.participants == 0 {
        return Err(invalid(
            path,
            "participants".into(),
            "is 0: a trace has at least one participant".into(),
        ));
    }
    let mut runs = vec![Vec::new(); usize::from(file.participants)];
    for (i, s) in file.segments.iter().enumerate() {
        if s.participant >= file.participants {
            return Err(invalid(
                path,
                format!("segments[{i}].participant"),
                format!("is {}: the trace has {}", s.participant, file.participants),
            ));
        }
        if s.ticks == 0 {
            return Err(invalid(
                path,
                format!("segments[{i}].ticks"),
                "is 0: must be ≥ 1".into(),
            ));
        }
        let Some(end) = s.start.checked_add(s.ticks) else {
            return Err(invalid(
                path,
                format!("segments[{i}]"),
                "ends past the last tick".into(),
            ));
        };
        if !s
            .movement
            .iter()
            .all(|a| a.is_finite() && (-1.0..=1.0).contains(a))
        {
            return Err(invalid(
                path,
                format!("segments[{i}].move"),
                format!("is {:?}: each axis must be in [-1, 1]", s.movement),
            ));
        }
        runs[usize::from(s.participant)].push((
            s.start,
            end,
            Actions {
                movement: s.movement,
                jump: s.jump,
                push: s.push,
                poke: s.poke,
                grab: s.grab,
            },
        ));
    }
    for (participant, list) in runs.iter_mut().enumerate() {
        list.sort_by_key(|&(start, _, _)| start);
        if let Some(pair) = list.windows(2).find(|w| w[1].0 < w[0].1) {
            return Err(invalid(
                path,
                "segments".into(),
                format!(
                    "participant {participant} has overlapping segments {}..{} and {}..{}",
                    pair[0].0, pair[0].1, pair[1].0, pair[1].1
                ),
            ));
        }
    }
    let end_tick = runs.iter().flatten().map(|r| r.1).max().unwrap_or(0);
    Ok(Script {
        participants: file.participants,
        runs,
        end_tick,
        segments: file.segments.len(),
    })
}
