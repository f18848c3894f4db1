//! [`DeterministicSession`]: the session's own state between updates.

use std::collections::BTreeMap;

use bevy::prelude::*;

use super::audit::PredictionAudit;
use crate::config::SessionConfig;
use crate::error::SessionError;
use crate::input::{InputBuffer, InputStatus, SimInput};
use crate::source::{InputSource, RelayLink};
use crate::tick::Tick;

/// The session's own state (main-app resource).
#[derive(Resource)]
pub struct DeterministicSession<I: SimInput> {
    // Boxed: Bevy keeps room for 64 values of every resource type.
    pub(super) config: Box<SessionConfig>,
    pub(super) buffer: InputBuffer<I>,
    pub(super) source: InputSource<I>,
    /// The link to the relay server for everything but inputs (networked sessions only).
    pub(super) link: Option<RelayLink<I>>,
    /// The predicted world's tick as this update leaves it.
    pub(super) predicted_tick: Tick,
    /// The highest tick ever predicted (re-simulation counting).
    pub(super) highest_predicted: Tick,
    /// Hash of the input set each tick of the current predicted timeline was simulated with.
    pub(super) used_inputs: BTreeMap<Tick, u64>,
    /// A tick the predicted world simulated since its last rollback, and which has left
    /// `used_inputs`, ran on inputs other than the confirmed ones.
    pub(super) predicted_diverged: bool,
    pub(super) audit: PredictionAudit,
    /// Desync dump bookkeeping.
    pub(crate) dumps: crate::dump::DumpState,
    pub(super) started: bool,
    /// Scratch input set of the tick being simulated.
    pub(super) inputs: Vec<I>,
    pub(super) status: Vec<InputStatus>,
}

impl<I: SimInput> DeterministicSession<I> {
    pub(crate) fn new(config: SessionConfig) -> Result<Self, SessionError> {
        config.validate()?;
        let players = config.players;
        let mut buffer = InputBuffer::new(players, config.input_capacity)?;
        // Ticks 1..=input_delay have no sampled input: everyone starts with the default.
        for tick in 1..=config.input_delay as Tick {
            for p in 0..players {
                buffer.confirm(p, tick, I::default())?;
            }
        }
        let (source, link) = InputSource::new(&config)?;
        Ok(Self {
            buffer,
            source,
            link,
            predicted_tick: 0,
            highest_predicted: 0,
            used_inputs: BTreeMap::new(),
            predicted_diverged: false,
            audit: PredictionAudit::default(),
            dumps: crate::dump::DumpState::default(),
            started: false,
            inputs: Vec::with_capacity(usize::from(players)),
            status: Vec::with_capacity(usize::from(players)),
            config: Box::new(config),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// The next tick whose local inputs will be polled (the tick `LocalInputs` feeds next,
    /// before the input delay is added).
    pub fn next_poll_tick(&self) -> Tick {
        self.source.local_tick() + 1
    }

    /// The tick the inputs written to [`LocalInputs`](crate::LocalInputs) before the next
    /// session update apply to ([`next_poll_tick`](Self::next_poll_tick) plus the input delay).
    pub fn next_input_tick(&self) -> Tick {
        self.next_poll_tick() + self.config.input_delay as Tick
    }

    /// The input buffer.
    pub fn buffer(&self) -> &InputBuffer<I> {
        &self.buffer
    }
}
