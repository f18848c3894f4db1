//! The end-of-run summary: printed, and optionally written as JSON.

use std::path::Path;

use serde::Serialize;
use simsync::prelude::SessionStats;

/// What a run reports. Serialized as the `--summary-json` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Session mode.
    pub mode: &'static str,
    /// Ticks requested (the verified world stopped at this tick).
    pub ticks: u32,
    /// Players.
    pub players: u8,
    /// Verified ticks simulated.
    pub ticks_verified: u64,
    /// Predicted ticks simulated (re-simulations included).
    pub ticks_predicted: u64,
    /// Rollbacks of the predicted world.
    pub rollbacks: u64,
    /// Predicted ticks simulated again after a rollback.
    pub resimulated_ticks: u64,
    /// Inputs whose prediction differed from the confirmed value.
    pub mispredicted_inputs: u64,
    /// Checksum of the verified world at the last tick, 16 hex digits.
    pub final_checksum: String,
    /// Predicted ticks compared with the verified state.
    pub resim_ticks_checked: u64,
    /// Of those, ticks whose predicted state matched.
    pub resim_ticks_matching: u64,
    /// Whether predicted ticks were compared at all (off with `--no-verify-predictions`).
    #[serde(skip)]
    pub predictions_verified: bool,
}

impl Summary {
    /// The summary of a finished run.
    pub fn new(
        mode: &'static str,
        ticks: u32,
        players: u8,
        predictions_verified: bool,
        stats: &SessionStats,
        checksum: u64,
    ) -> Self {
        Self {
            mode,
            ticks,
            players,
            ticks_verified: stats.ticks_verified,
            ticks_predicted: stats.ticks_predicted,
            rollbacks: stats.rollbacks,
            resimulated_ticks: stats.resimulated_ticks,
            mispredicted_inputs: stats.mispredicted_inputs,
            final_checksum: format!("{checksum:016x}"),
            resim_ticks_checked: stats.resim_ticks_checked,
            resim_ticks_matching: stats.resim_ticks_matching,
            predictions_verified,
        }
    }

    /// Whether every compared predicted tick matched verification.
    pub fn predictions_matched(&self) -> bool {
        self.resim_ticks_matching == self.resim_ticks_checked
    }

    /// The human-readable summary, one item per line; the last line is the prediction check's
    /// result, or says it was off.
    pub fn to_text(&self) -> String {
        let check = if self.predictions_verified {
            format!(
                "prediction matched verification on {} of {} predicted ticks",
                self.resim_ticks_matching, self.resim_ticks_checked
            )
        } else {
            "predictions not compared with verification (--no-verify-predictions)".to_string()
        };
        format!(
            "summary ({} mode, {} players, {} ticks)\n\
             \x20 ticks verified       {}\n\
             \x20 ticks predicted      {}\n\
             \x20 rollbacks            {}\n\
             \x20 re-simulated ticks   {}\n\
             \x20 mispredicted inputs  {}\n\
             \x20 final checksum       {} (verified world at tick {})\n\
             {check}",
            self.mode,
            self.players,
            self.ticks,
            self.ticks_verified,
            self.ticks_predicted,
            self.rollbacks,
            self.resimulated_ticks,
            self.mispredicted_inputs,
            self.final_checksum,
            self.ticks,
        )
    }

    /// Writes the summary as pretty JSON to `path`.
    ///
    /// # Errors
    /// A message naming the file if it cannot be written.
    pub fn write_json(&self, path: &Path) -> Result<(), String> {
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| format!("cannot encode the summary: {e}"))?;
        std::fs::write(path, json + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}
