//! [`SessionDiagnosticsPlugin`]: the session's numbers as Bevy [`Diagnostic`]s under
//! `simsync/session/*`, where `LogDiagnosticsPlugin`, HUDs and inspectors look for them.
//!
//! The values are derived from [`SessionStats`] (and, in a networked session, from the renet
//! client's byte rates) once per frame, after the session update, by a pure function,
//! [`SessionSample::measure`]. Counters are reported as running totals; depths and rates as
//! the value of the frame. Which diagnostic means what is listed on
//! [`SessionDiagnosticsPlugin`] ([diagnostics](crate::rules#diagnostics)).

use bevy::diagnostic::{Diagnostic, DiagnosticPath, Diagnostics, RegisterDiagnostic};
use bevy::ecs::schedule::{InternedScheduleLabel, ScheduleLabel};
use bevy::prelude::*;
use simsync_net::bevy_renet::RenetClient;

use crate::schedule::DeterministicSet;
use crate::stats::SessionStats;

/// `simsync/session/rollbacks`: rollbacks performed so far (total).
const ROLLBACKS: DiagnosticPath = DiagnosticPath::const_new("simsync/session/rollbacks");
/// `simsync/session/rollback_depth`: ticks re-simulated per rollback in this frame's update
/// (0 in a frame without rollback).
const ROLLBACK_DEPTH: DiagnosticPath = DiagnosticPath::const_new("simsync/session/rollback_depth");
/// `simsync/session/resimulated_ticks`: predicted ticks simulated again after rollbacks (total).
const RESIMULATED_TICKS: DiagnosticPath =
    DiagnosticPath::const_new("simsync/session/resimulated_ticks");
/// `simsync/session/prediction_depth`: predicted tick − verified tick after the update, ticks.
const PREDICTION_DEPTH: DiagnosticPath =
    DiagnosticPath::const_new("simsync/session/prediction_depth");
/// `simsync/session/rtt_ms`: round-trip time to the relay, ms (networked sessions).
const RTT_MS: DiagnosticPath = DiagnosticPath::const_new("simsync/session/rtt_ms");
/// `simsync/session/input_delay_ticks`: the input delay in use, ticks (networked sessions).
const INPUT_DELAY_TICKS: DiagnosticPath =
    DiagnosticPath::const_new("simsync/session/input_delay_ticks");
/// `simsync/session/bytes_in_per_second`: bytes received from the relay per second, as renet
/// counts them (networked sessions).
const BYTES_IN_PER_SECOND: DiagnosticPath =
    DiagnosticPath::const_new("simsync/session/bytes_in_per_second");
/// `simsync/session/bytes_out_per_second`: bytes sent to the relay per second (networked
/// sessions).
const BYTES_OUT_PER_SECOND: DiagnosticPath =
    DiagnosticPath::const_new("simsync/session/bytes_out_per_second");
/// `simsync/session/late_inputs`: this client's inputs the relay replaced because they arrived
/// late (total, networked sessions).
const LATE_INPUTS: DiagnosticPath = DiagnosticPath::const_new("simsync/session/late_inputs");
/// `simsync/session/replaced_inputs`: inputs of any player the relay replaced (total, networked
/// sessions).
const REPLACED_INPUTS: DiagnosticPath =
    DiagnosticPath::const_new("simsync/session/replaced_inputs");

/// Every path [`SessionDiagnosticsPlugin`] registers, in the order the plugin measures them.
const SESSION_DIAGNOSTICS: [DiagnosticPath; 10] = [
    ROLLBACKS,
    ROLLBACK_DEPTH,
    RESIMULATED_TICKS,
    PREDICTION_DEPTH,
    RTT_MS,
    INPUT_DELAY_TICKS,
    BYTES_IN_PER_SECOND,
    BYTES_OUT_PER_SECOND,
    LATE_INPUTS,
    REPLACED_INPUTS,
];

/// One frame's measurements of a session (plain data; see [`SessionSample::measure`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SessionSample {
    /// Rollbacks so far.
    pub rollbacks: f64,
    /// Re-simulated ticks per rollback in this frame (0 without rollback).
    pub rollback_depth: f64,
    /// Re-simulated ticks so far.
    pub resimulated_ticks: f64,
    /// Predicted tick − verified tick.
    pub prediction_depth: f64,
    /// Round-trip time, ms; `None` in a local session.
    pub rtt_ms: Option<f64>,
    /// Input delay, ticks; `None` in a local session.
    pub input_delay_ticks: Option<f64>,
    /// Bytes received per second; `None` without a renet client.
    pub bytes_in_per_second: Option<f64>,
    /// Bytes sent per second; `None` without a renet client.
    pub bytes_out_per_second: Option<f64>,
    /// Own late inputs so far; `None` in a local session.
    pub late_inputs: Option<f64>,
    /// Replaced inputs so far; `None` in a local session.
    pub replaced_inputs: Option<f64>,
}

impl SessionSample {
    /// The sample of a frame: `now` are the stats after this frame's session update, `before`
    /// the stats after the previous frame's, `bytes_per_second` the renet client's (received,
    /// sent) rates if there is a client. Never panics; a counter that went down (a restarted
    /// session) gives a depth of 0.
    pub fn measure(
        before: &SessionStats,
        now: &SessionStats,
        bytes_per_second: Option<(f64, f64)>,
    ) -> Self {
        let rollbacks = now.rollbacks.saturating_sub(before.rollbacks);
        let resimulated = now
            .resimulated_ticks
            .saturating_sub(before.resimulated_ticks);
        let rollback_depth = if rollbacks == 0 {
            0.0
        } else {
            resimulated as f64 / rollbacks as f64
        };
        let net = now.network.as_ref();
        Self {
            rollbacks: now.rollbacks as f64,
            rollback_depth,
            resimulated_ticks: now.resimulated_ticks as f64,
            prediction_depth: f64::from(now.predicted_tick) - f64::from(now.verified_tick),
            rtt_ms: net.map(|n| n.rtt_ms),
            input_delay_ticks: net.map(|n| f64::from(n.input_delay_ticks)),
            bytes_in_per_second: bytes_per_second.map(|(received, _)| received),
            bytes_out_per_second: bytes_per_second.map(|(_, sent)| sent),
            late_inputs: net.map(|n| n.late_inputs as f64),
            replaced_inputs: net.map(|n| n.replaced_inputs as f64),
        }
    }

    /// The values in the order of [`SESSION_DIAGNOSTICS`] (`None`: nothing to record).
    pub fn values(&self) -> [Option<f64>; 10] {
        [
            Some(self.rollbacks),
            Some(self.rollback_depth),
            Some(self.resimulated_ticks),
            Some(self.prediction_depth),
            self.rtt_ms,
            self.input_delay_ticks,
            self.bytes_in_per_second,
            self.bytes_out_per_second,
            self.late_inputs,
            self.replaced_inputs,
        ]
    }
}

/// Registers the `simsync/session/*` [`Diagnostic`]s and records them every frame after the
/// session update (in `schedule`, `PreUpdate` by default: the schedule of the
/// [`DeterministicPlugin`](crate::DeterministicPlugin)). Add it next to the session plugin;
/// read the values with `Res<DiagnosticsStore>` or log them with `LogDiagnosticsPlugin`.
///
/// | path | unit | kind |
/// |---|---|---|
/// | `simsync/session/rollbacks` | rollbacks | total |
/// | `simsync/session/rollback_depth` | ticks per rollback | this frame |
/// | `simsync/session/resimulated_ticks` | ticks | total |
/// | `simsync/session/prediction_depth` | ticks | this frame |
/// | `simsync/session/rtt_ms` | ms | this frame (networked) |
/// | `simsync/session/input_delay_ticks` | ticks | this frame (networked) |
/// | `simsync/session/bytes_in_per_second` | bytes/s | renet's rate (networked) |
/// | `simsync/session/bytes_out_per_second` | bytes/s | renet's rate (networked) |
/// | `simsync/session/late_inputs` | inputs | total (networked) |
/// | `simsync/session/replaced_inputs` | inputs | total (networked) |
#[derive(Debug, Clone)]
pub struct SessionDiagnosticsPlugin {
    schedule: InternedScheduleLabel,
    max_history: usize,
}

impl Default for SessionDiagnosticsPlugin {
    fn default() -> Self {
        Self {
            schedule: PreUpdate.intern(),
            max_history: 120,
        }
    }
}

impl SessionDiagnosticsPlugin {
    /// Records in `schedule` (the one the session runs in) instead of `PreUpdate`.
    pub fn schedule(mut self, schedule: impl ScheduleLabel) -> Self {
        self.schedule = schedule.intern();
        self
    }

    /// How many measurements each diagnostic keeps (default 120, at least 1).
    pub fn max_history(mut self, measurements: usize) -> Self {
        self.max_history = measurements.max(1);
        self
    }
}

/// The stats seen at the previous recording.
#[derive(Resource, Default)]
struct PreviousStats(SessionStats);

/// The `DiagnosticsStore` paths this plugin publishes (Bevy's convention: constants on the
/// plugin that publishes them).
impl SessionDiagnosticsPlugin {
    /// `simsync/session/rollbacks`: rollbacks performed so far (total).
    pub const ROLLBACKS: DiagnosticPath = ROLLBACKS;
    /// `simsync/session/rollback_depth`: ticks re-simulated per rollback in this frame's update
    /// (0 in a frame without rollback).
    pub const ROLLBACK_DEPTH: DiagnosticPath = ROLLBACK_DEPTH;
    /// `simsync/session/resimulated_ticks`: predicted ticks simulated again after rollbacks (total).
    pub const RESIMULATED_TICKS: DiagnosticPath = RESIMULATED_TICKS;
    /// `simsync/session/prediction_depth`: predicted tick − verified tick after the update, ticks.
    pub const PREDICTION_DEPTH: DiagnosticPath = PREDICTION_DEPTH;
    /// `simsync/session/rtt_ms`: round-trip time to the relay, ms (networked sessions).
    pub const RTT_MS: DiagnosticPath = RTT_MS;
    /// `simsync/session/input_delay_ticks`: the input delay in use, ticks (networked sessions).
    pub const INPUT_DELAY_TICKS: DiagnosticPath = INPUT_DELAY_TICKS;
    /// `simsync/session/bytes_in_per_second`: bytes received from the relay per second, as renet
    /// counts them (networked sessions).
    pub const BYTES_IN_PER_SECOND: DiagnosticPath = BYTES_IN_PER_SECOND;
    /// `simsync/session/bytes_out_per_second`: bytes sent to the relay per second (networked
    /// sessions).
    pub const BYTES_OUT_PER_SECOND: DiagnosticPath = BYTES_OUT_PER_SECOND;
    /// `simsync/session/late_inputs`: this client's inputs the relay replaced because they arrived
    /// late (total, networked sessions).
    pub const LATE_INPUTS: DiagnosticPath = LATE_INPUTS;
    /// `simsync/session/replaced_inputs`: inputs of any player the relay replaced (total, networked
    /// sessions).
    pub const REPLACED_INPUTS: DiagnosticPath = REPLACED_INPUTS;
    /// Every path [`SessionDiagnosticsPlugin`] registers, in the order the plugin measures them.
    pub const ALL: [DiagnosticPath; 10] = SESSION_DIAGNOSTICS;
}

impl Plugin for SessionDiagnosticsPlugin {
    fn build(&self, app: &mut App) {
        for path in SESSION_DIAGNOSTICS {
            app.register_diagnostic(
                Diagnostic::new(path)
                    .with_max_history_length(self.max_history)
                    .with_smoothing_factor(0.0),
            );
        }
        app.init_resource::<PreviousStats>().add_systems(
            self.schedule,
            record_session_diagnostics.after(DeterministicSet::SessionUpdate),
        );
    }
}

fn record_session_diagnostics(
    stats: Option<Res<SessionStats>>,
    client: Option<Res<RenetClient>>,
    mut previous: ResMut<PreviousStats>,
    mut diagnostics: Diagnostics,
) {
    let Some(stats) = stats else {
        return;
    };
    let bytes = client.map(|c| {
        let info = c.network_info();
        (info.bytes_received_per_second, info.bytes_sent_per_second)
    });
    let sample = SessionSample::measure(&previous.0, &stats, bytes);
    for (path, value) in SESSION_DIAGNOSTICS.iter().zip(sample.values()) {
        if let Some(value) = value {
            diagnostics.add_measurement(path, || value);
        }
    }
    previous.0.clone_from(&stats);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::RelayClientStats;

    #[test]
    fn rollback_depth_is_resimulated_ticks_per_rollback_of_the_frame() {
        let before = SessionStats {
            rollbacks: 3,
            resimulated_ticks: 10,
            ..default()
        };
        let now = SessionStats {
            rollbacks: 5,
            resimulated_ticks: 17,
            verified_tick: 40,
            predicted_tick: 46,
            ..default()
        };
        let sample = SessionSample::measure(&before, &now, None);
        assert_eq!(sample.rollbacks, 5.0);
        assert_eq!(sample.rollback_depth, 3.5);
        assert_eq!(sample.resimulated_ticks, 17.0);
        assert_eq!(sample.prediction_depth, 6.0);
        assert_eq!(sample.rtt_ms, None);
        assert_eq!(sample.bytes_in_per_second, None);
    }

    #[test]
    fn a_frame_without_rollback_or_with_a_restarted_session_has_depth_zero() {
        let before = SessionStats {
            rollbacks: 9,
            resimulated_ticks: 30,
            ..default()
        };
        let same = SessionSample::measure(&before, &before, None);
        assert_eq!(same.rollback_depth, 0.0);
        let restarted = SessionStats::default();
        assert_eq!(
            SessionSample::measure(&before, &restarted, None).rollback_depth,
            0.0
        );
    }

    #[test]
    fn networked_values_come_from_the_relay_client_stats_and_renet() {
        let now = SessionStats {
            network: Some(RelayClientStats {
                rtt_ms: 42.5,
                input_delay_ticks: 4,
                late_inputs: 2,
                replaced_inputs: 7,
                ..default()
            }),
            ..default()
        };
        let sample = SessionSample::measure(&SessionStats::default(), &now, Some((1200.0, 800.0)));
        assert_eq!(
            sample.values(),
            [
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(0.0),
                Some(42.5),
                Some(4.0),
                Some(1200.0),
                Some(800.0),
                Some(2.0),
                Some(7.0)
            ]
        );
    }
}
