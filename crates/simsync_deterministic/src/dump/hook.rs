//! The desync dump hook ([desync dumps](crate::rules#desync-dumps)), [`DesyncDumps`], installed
//! with a dump directory: the first failed prediction check dumps the predicted and the verified
//! world of the tick; the first desync the relay reports dumps the verified world of the
//! desynced tick and the tick before it, with the breakdowns of recent checksum ticks, and sends
//! the relay the breakdown of the desynced tick. What it keeps for that between ticks is its own
//! ([`DumpState`]).

use std::collections::{BTreeMap, VecDeque};

use super::capture::{self, DumpContext};
use super::{
    ComponentBreakdown, DesyncDump, DesyncDumpConfig, DumpReason, DumpedInput, DumpedWorld,
    dumped_inputs, write_and_report, writer_of,
};
use crate::hooks::{
    Cleanup, DesyncReported, HookFlow, PredictedTick, SessionView, VerifiedTick, VerifiedTickHook,
};
use crate::input::SimInput;
use crate::snapshot::WorldRole;
use crate::tick::Tick;

/// What the dump hook keeps between ticks.
#[derive(Default)]
struct DumpState {
    /// Dumps of the predicted world per predicted tick, waiting for the prediction check.
    predicted: BTreeMap<Tick, DesyncDump>,
    /// Breakdowns of recent checksum ticks, oldest first.
    breakdowns: VecDeque<ComponentBreakdown>,
    /// Dumps of the verified world at recent checksum ticks and the tick before each (without
    /// breakdowns), by tick: the world a desync the relay reports later was judged on.
    recent: BTreeMap<Tick, DesyncDump>,
    /// The prediction-mismatch dumps were written (only the first mismatch is dumped).
    prediction_written: bool,
    /// The server-desync dumps were written.
    desync_written: bool,
    /// The breakdown of the first desynced tick was sent to the relay.
    breakdown_sent: bool,
}

impl DumpState {
    /// Keeps `breakdown`, forgetting the oldest beyond `keep`.
    fn keep_breakdown(&mut self, breakdown: ComponentBreakdown, keep: usize) {
        self.breakdowns.push_back(breakdown);
        while self.breakdowns.len() > keep {
            self.breakdowns.pop_front();
        }
    }

    /// The breakdown of `tick`, if kept.
    fn breakdown_of(&self, tick: Tick) -> Option<&ComponentBreakdown> {
        self.breakdowns.iter().find(|b| b.tick == tick)
    }

    /// Keeps `dump` (of the verified world at its tick), replacing a dump of the same tick (a
    /// tick verified again after a snapshot load) and forgetting the oldest beyond `keep`.
    fn keep_recent(&mut self, dump: DesyncDump, keep: usize) {
        self.recent.insert(dump.header.tick, dump);
        while self.recent.len() > keep {
            self.recent.pop_first();
        }
    }

    /// The kept dumps of a desync judged at `tick`: the dumps of `tick − 1` (when kept) and of
    /// `tick`, oldest first, each with `reason` and the kept breakdowns of ticks up to its own;
    /// empty when `tick` itself was not kept.
    fn recent_for(&self, tick: Tick, reason: &DumpReason) -> Vec<DesyncDump> {
        if !self.recent.contains_key(&tick) {
            return Vec::new();
        }
        self.recent
            .range(tick.saturating_sub(1)..=tick)
            .map(|(t, dump)| {
                let mut dump = dump.clone();
                dump.header.reason = reason.clone();
                dump.breakdowns = self
                    .breakdowns
                    .iter()
                    .filter(|b| b.tick <= *t)
                    .cloned()
                    .collect();
                dump
            })
            .collect()
    }
}

/// The desync dump hook: keeps what a later dump needs (predicted-world dumps while the
/// prediction check waits, recent verified-world dumps and breakdowns while the relay judges)
/// and writes the first dump of each kind.
pub(crate) struct DesyncDumps {
    config: DesyncDumpConfig,
    state: DumpState,
}

impl DesyncDumps {
    /// Dumps written with `config`.
    pub(crate) fn new(config: DesyncDumpConfig) -> Self {
        Self {
            config,
            state: DumpState::default(),
        }
    }

    /// The breakdowns of recent checksum ticks, oldest first.
    pub(crate) fn breakdowns(&self) -> Vec<ComponentBreakdown> {
        self.state.breakdowns.iter().cloned().collect()
    }
}

impl<I: SimInput> VerifiedTickHook<I> for DesyncDumps {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, I>) -> HookFlow {
        if let Some(tick) = verified.prediction_mismatch().map(|m| m.tick) {
            self.on_prediction_mismatch(verified, tick);
        }
        if verified.is_checksum_tick() {
            let breakdown = verified.breakdown();
            self.state
                .keep_breakdown(breakdown, self.config.recent_breakdowns);
        }
        let interval = Tick::try_from(verified.config().checksum_interval).unwrap_or(1);
        let next_is_checksum = (verified.tick() + 1) % interval.max(1) == 0;
        if verified.is_checksum_tick() || next_is_checksum {
            self.keep_recent(verified);
        }
        HookFlow::Continue
    }

    fn on_predicted(&mut self, predicted: &mut PredictedTick<'_, I>) {
        if !predicted.config().verify_predictions || self.state.prediction_written {
            return;
        }
        let dump = capture_view(predicted, DumpReason::PredictionMismatch, Vec::new());
        self.state.predicted.insert(predicted.tick(), dump);
    }

    fn on_desync_reported(&mut self, report: &mut DesyncReported<'_, I>) {
        self.on_server_desync(report);
    }

    fn on_cleanup(&mut self, cleanup: Cleanup) {
        let kept = &mut self.state.predicted;
        while kept
            .first_key_value()
            .is_some_and(|(t, _)| *t <= cleanup.verified_tick)
        {
            kept.pop_first();
        }
    }

    fn on_restart(&mut self) {
        self.state = DumpState::default();
    }
}

impl DesyncDumps {
    /// The prediction check failed at `tick`: the first time, writes the kept predicted-world
    /// dump of `tick` and a dump of the verified world now.
    fn on_prediction_mismatch<I: SimInput>(
        &mut self,
        verified: &mut VerifiedTick<'_, I>,
        tick: Tick,
    ) {
        if std::mem::replace(&mut self.state.prediction_written, true) {
            return;
        }
        let predicted = self.state.predicted.remove(&tick);
        self.state.predicted.clear();
        let dump = capture_view(verified, DumpReason::PredictionMismatch, Vec::new());
        if let Some(predicted) = predicted {
            write_and_report(verified.app_world(), &self.config, &predicted);
        }
        write_and_report(verified.app_world(), &self.config, &dump);
    }

    /// Keeps a dump of the verified world at this tick (networked sessions, until the first
    /// desync dump is written), for a desync the relay may report later.
    fn keep_recent<I: SimInput>(&mut self, verified: &mut VerifiedTick<'_, I>) {
        let keep = self.config.recent_dumps;
        if keep == 0 || !verified.is_networked() || self.state.desync_written {
            return;
        }
        let dump = capture_view(verified, DumpReason::Requested, Vec::new());
        self.state.keep_recent(dump, keep);
    }

    /// The relay reported a desync at `report.desynced_tick()`: the first time, sends the relay
    /// the kept breakdown of that tick, and writes the kept dumps of that tick and the tick
    /// before it (or, when they were not kept, a dump of the verified world now with the recent
    /// breakdowns).
    fn on_server_desync<I: SimInput>(&mut self, report: &mut DesyncReported<'_, I>) {
        let tick = report.desynced_tick();
        if !self.state.breakdown_sent
            && let Some(breakdown) = self.state.breakdown_of(tick).cloned()
        {
            self.state.breakdown_sent = true;
            report.send_breakdown(breakdown);
        }
        if std::mem::replace(&mut self.state.desync_written, true) {
            return;
        }
        let reason = DumpReason::ServerDesync {
            tick,
            players: report.players().to_vec(),
        };
        let mut kept = self.state.recent_for(tick, &reason);
        self.state.recent.clear();
        if kept.is_empty() {
            kept.push(capture_view(report, reason, self.breakdowns()));
        }
        for dump in &kept {
            write_and_report(report.app_world(), &self.config, dump);
        }
    }
}

/// A dump of the world `view` shows at its tick, with its inputs.
pub(crate) fn capture_view<I: SimInput>(
    view: &mut SessionView<'_, I>,
    reason: DumpReason,
    breakdowns: Vec<ComponentBreakdown>,
) -> DesyncDump {
    let inputs: Vec<DumpedInput> = dumped_inputs(view.inputs(), view.input_status());
    let writer = writer_of(view.app_world());
    let world = match view.role() {
        WorldRole::Verified => DumpedWorld::Verified,
        WorldRole::Predicted => DumpedWorld::Predicted,
    };
    let (sw, registry) = view.simulation();
    capture::capture(
        sw,
        registry,
        DumpContext {
            world,
            reason,
            inputs,
            breakdowns,
            writer,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::DumpState;
    use crate::dump::{ComponentBreakdown, GameFingerprint};
    use crate::dump::{DesyncDump, DumpHeader, DumpReason, DumpedWorld};

    fn dump(tick: crate::Tick) -> DesyncDump {
        DesyncDump {
            header: DumpHeader {
                tick,
                world: DumpedWorld::Verified,
                reason: DumpReason::Requested,
                fingerprint: GameFingerprint::default(),
                checksum: tick as u64,
                writer: None,
            },
            entities: Vec::new(),
            resources: Vec::new(),
            inputs: Vec::new(),
            breakdowns: Vec::new(),
        }
    }

    fn breakdown(tick: crate::Tick) -> ComponentBreakdown {
        ComponentBreakdown {
            tick,
            ..Default::default()
        }
    }

    #[test]
    fn a_desync_is_dumped_at_its_tick_and_the_tick_before_from_the_kept_dumps() {
        let mut state = DumpState::default();
        for tick in 1..=300 {
            state.keep_recent(dump(tick), 128);
            state.keep_breakdown(breakdown(tick), 256);
        }
        assert_eq!(state.recent.len(), 128, "bounded");
        let reason = DumpReason::ServerDesync {
            tick: 250,
            players: vec![0],
        };
        let dumps = state.recent_for(250, &reason);
        let ticks: Vec<_> = dumps.iter().map(|d| d.header.tick).collect();
        assert_eq!(ticks, vec![249, 250]);
        assert!(dumps.iter().all(|d| d.header.reason == reason));
        // Each dump carries the breakdowns of its tick and before, not later ones.
        assert_eq!(dumps[1].breakdowns.last().map(|b| b.tick), Some(250));
        assert_eq!(dumps[0].breakdowns.last().map(|b| b.tick), Some(249));
        // A tick no longer kept (or never kept) gives nothing: the caller dumps its current tick.
        assert!(state.recent_for(100, &reason).is_empty());
        // The first kept tick has no kept tick before it.
        assert_eq!(state.recent_for(173, &reason).len(), 1);
    }

    #[test]
    fn a_tick_verified_again_replaces_its_kept_dump() {
        let mut state = DumpState::default();
        state.keep_recent(dump(5), 4);
        let mut again = dump(5);
        again.header.checksum = 99;
        state.keep_recent(again, 4);
        assert_eq!(state.recent.len(), 1);
        assert_eq!(state.recent[&5].header.checksum, 99);
    }
}
