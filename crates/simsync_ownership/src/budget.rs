//! Byte budgets for state traffic and the priority accumulation that decides which bodies go
//! first ([ownership rules 17–19](crate::rules#rule-17--byte-budgets)): [`StateBudgetConfig`],
//! [`UploadBudget`], [`PriorityAccumulator`], [`send_weight`].

use bevy::math::Vec3;
use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::OwnershipError;
use crate::priority::BodyId;

/// The byte budgets and the interest radius of state traffic
/// ([rules 17–19](crate::rules#rule-17--byte-budgets)). Set with
/// [`OwnershipPlugin::with_state_budget`](crate::OwnershipPlugin::with_state_budget) and the
/// shortcuts beside it; a reflected resource of both roles.
///
/// | field | default | rule |
/// |---|---|---|
/// | `upload_bytes_per_second` | 64,000 B/s | 17: a participant's state batches |
/// | `relay_bytes_per_second` | 128,000 B/s | 17: the entity server's relays, per receiver |
/// | `interest_radius` | `None` (everything) | 19 |
/// | `delta_encoding` | `true` | 20: deltas against acknowledged states, and acknowledgements |
#[derive(Resource, Debug, Clone, Copy, PartialEq, Reflect, Serialize, Deserialize)]
#[reflect(Resource, Debug, Default, PartialEq, Clone)]
pub struct StateBudgetConfig {
    /// Bytes per second a participant may spend on its state batches (the encoded
    /// `ClientMessage`s). At least [`MIN_BUDGET_BYTES_PER_SECOND`]. Default 64,000.
    pub upload_bytes_per_second: u32,
    /// Bytes per second the entity server may spend on relayed state batches to each
    /// participant. At least [`MIN_BUDGET_BYTES_PER_SECOND`]. Default 128,000.
    pub relay_bytes_per_second: u32,
    /// With `Some(r)`, the entity server relays to a participant only the states of bodies
    /// within `r` metres of its interest centre (its avatar, sent in its batches); `None`
    /// relays every body. Must be finite and positive. Default `None`.
    pub interest_radius: Option<f32>,
    /// Whether this App acknowledges the batches it receives and sends bodies as deltas against
    /// the states its receivers acknowledged, where that is smaller
    /// ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)). Off, it sends
    /// every body absolute and no acknowledgements, as protocol 5 did (it still understands
    /// deltas it receives). Default `true`.
    #[serde(default = "delta_on")]
    pub delta_encoding: bool,
}

fn delta_on() -> bool {
    true
}

/// The smallest budget accepted, B/s: a burst of 1/8 s must hold the largest entry.
pub const MIN_BUDGET_BYTES_PER_SECOND: u32 = 1_000;

impl Default for StateBudgetConfig {
    fn default() -> Self {
        Self {
            upload_bytes_per_second: 64_000,
            relay_bytes_per_second: 128_000,
            interest_radius: None,
            delta_encoding: true,
        }
    }
}

impl StateBudgetConfig {
    /// Checks every field.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] for a budget below [`MIN_BUDGET_BYTES_PER_SECOND`] or
    /// an interest radius that is not finite and positive.
    pub fn validate(&self) -> Result<(), OwnershipError> {
        for (field, value) in [
            ("upload_bytes_per_second", self.upload_bytes_per_second),
            ("relay_bytes_per_second", self.relay_bytes_per_second),
        ] {
            if value < MIN_BUDGET_BYTES_PER_SECOND {
                return Err(OwnershipError::InvalidConfig {
                    field,
                    value: value.to_string(),
                    reason: "at least 1000 bytes per second",
                });
            }
        }
        if let Some(r) = self.interest_radius
            && !(r.is_finite() && r > 0.0)
        {
            return Err(OwnershipError::InvalidConfig {
                field: "interest_radius",
                value: r.to_string(),
                reason: "finite and positive",
            });
        }
        Ok(())
    }
}

/// A token bucket of bytes ([rule 17](crate::rules#rule-17--byte-budgets)): refills at `rate`
/// bytes per second up to a burst of `rate / 8` (at least 256 bytes), starts full. Spending
/// within [`available`](Self::available) never goes negative; [`charge`](Self::charge) may (a
/// debt the next refills pay back). Over any window of `T` seconds without charges, at most
/// `burst + rate × T` bytes are spent.
#[derive(Debug, Clone, Copy, PartialEq, Reflect)]
pub struct UploadBudget {
    rate: f64,
    burst: f64,
    tokens: f64,
}

impl UploadBudget {
    /// A full bucket of `bytes_per_second`.
    pub fn new(bytes_per_second: u32) -> Self {
        let rate = f64::from(bytes_per_second);
        let burst = (rate / 8.0).max(256.0);
        Self {
            rate,
            burst,
            tokens: burst,
        }
    }

    /// Adds `dt` seconds of refill, up to the burst.
    pub fn refill(&mut self, dt: f64) {
        self.tokens = (self.tokens + self.rate * dt.max(0.0)).min(self.burst);
    }

    /// Whole bytes that may be spent now (0 in debt).
    pub fn available(&self) -> usize {
        self.tokens.max(0.0) as usize
    }

    /// Spends `bytes`, which must be within [`available`](Self::available); returns whether it
    /// was (nothing is spent otherwise).
    pub fn spend(&mut self, bytes: usize) -> bool {
        if bytes > self.available() {
            return false;
        }
        self.tokens -= bytes as f64;
        true
    }

    /// Spends `bytes` whatever the balance (a message that must go, e.g. a release's final
    /// state, rule 12); the balance may go negative.
    pub fn charge(&mut self, bytes: usize) {
        self.tokens -= bytes as f64;
    }
}

/// Lowest weight of a waiting body, per second ([rule 18](crate::rules#rule-18--priority-accumulation-and-starvation-freedom)).
pub const MIN_WEIGHT: f32 = 1.0;
/// Highest weight of a waiting body, per second.
pub const MAX_WEIGHT: f32 = 16.0;

/// The weight of a body waiting to be sent ([rule 18](crate::rules#rule-18--priority-accumulation-and-starvation-freedom)):
/// `1 + min(error, 8) + 4 × recent_collision + 3 × closeness`, clamped to
/// [[`MIN_WEIGHT`], [`MAX_WEIGHT`]]. `error` is the predicted error of the receivers' copy in
/// units of the send thresholds (1 = just past them), `closeness` is 1 at another
/// participant's avatar falling linearly to 0 at [`NEAR_METERS`].
pub fn send_weight(error: f32, recent_collision: bool, nearest_avatar: Option<f32>) -> f32 {
    let error = if error.is_finite() {
        error.clamp(0.0, 8.0)
    } else {
        8.0
    };
    let closeness = nearest_avatar.map_or(0.0, |d| (1.0 - d / NEAR_METERS).clamp(0.0, 1.0));
    (1.0 + error + 4.0 * f32::from(u8::from(recent_collision)) + 3.0 * closeness)
        .clamp(MIN_WEIGHT, MAX_WEIGHT)
}

/// Distance from another participant's avatar within which a body gains weight, m.
pub const NEAR_METERS: f32 = 8.0;

/// The distance from `point` to the nearest of `avatars`, if any.
pub fn nearest(point: Vec3, avatars: &[Vec3]) -> Option<f32> {
    avatars
        .iter()
        .map(|a| a.distance(point))
        .min_by(f32::total_cmp)
}

/// One body that wants to be sent this frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// The body.
    pub body: BodyId,
    /// Its [`send_weight`].
    pub weight: f32,
    /// Bytes its entry takes at most.
    pub size: usize,
    /// Goes before every candidate that is not urgent (an owner's overdue heartbeat, which
    /// keeps the server from expiring the owner, rule 5).
    pub urgent: bool,
}

/// Per-body accumulated priority ([rule 18](crate::rules#rule-18--priority-accumulation-and-starvation-freedom)):
/// every frame a waiting body gains `weight × dt`; the bodies with the most go first, in strict
/// order, while their entries fit; a sent body starts again from 0. Since every waiting body
/// gains at least [`MIN_WEIGHT`] per second and nothing is skipped for a smaller one, no body
/// waits forever ([rule 18](crate::rules#rule-18--priority-accumulation-and-starvation-freedom)'s bound).
#[derive(Debug, Clone, Default)]
pub struct PriorityAccumulator {
    acc: HashMap<BodyId, f32>,
}

/// What [`PriorityAccumulator::select`] chose.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// The bodies to send, most urgent first.
    pub chosen: Vec<BodyId>,
    /// Bytes they take at most.
    pub bytes: usize,
    /// Candidates left waiting.
    pub deferred: usize,
}

impl PriorityAccumulator {
    /// Accumulates `dt` seconds for every candidate (bodies not among them are forgotten) and
    /// chooses, urgent ones first, then in order of accumulated priority (ties by body id), the
    /// ones whose sizes fit in
    /// `bytes`, stopping at the first that does not. Chosen bodies start again from 0.
    pub fn select(&mut self, candidates: &[Candidate], dt: f32, bytes: usize) -> Selection {
        let mut ranked: Vec<(bool, f32, BodyId, usize)> = Vec::with_capacity(candidates.len());
        let mut keep: HashMap<BodyId, f32> = HashMap::default();
        for c in candidates {
            let weight = c.weight.clamp(MIN_WEIGHT, MAX_WEIGHT);
            let acc = self.acc.get(&c.body).copied().unwrap_or(0.0) + weight * dt.max(0.0);
            keep.insert(c.body, acc);
            ranked.push((c.urgent, acc, c.body, c.size));
        }
        ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(&b.2)));
        let mut selection = Selection::default();
        for (i, (_, _, body, size)) in ranked.iter().enumerate() {
            if selection.bytes + size > bytes {
                selection.deferred = ranked.len() - i;
                break;
            }
            selection.bytes += size;
            selection.chosen.push(*body);
            keep.insert(*body, 0.0);
        }
        self.acc = keep;
        selection
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_never_spends_more_than_burst_plus_rate() {
        let mut b = UploadBudget::new(8_000);
        assert_eq!(b.available(), 1_000);
        assert!(b.spend(900));
        assert!(!b.spend(101));
        let mut spent = 900usize;
        for _ in 0..64 {
            b.refill(1.0 / 64.0);
            let n = b.available().min(97);
            assert!(b.spend(n));
            spent += n;
        }
        assert!(spent as f64 <= 1_000.0 + 8_000.0 + 1.0, "{spent}");
        b.charge(5_000);
        assert_eq!(b.available(), 0);
        b.refill(10.0);
        assert_eq!(b.available(), 1_000);
    }

    #[test]
    fn weights_rank_error_collisions_and_closeness() {
        let base = send_weight(0.0, false, None);
        assert_eq!(base, 1.0);
        assert!(send_weight(3.0, false, None) > base);
        assert!(send_weight(0.0, true, None) > base);
        assert!(send_weight(0.0, false, Some(1.0)) > send_weight(0.0, false, Some(7.0)));
        assert_eq!(send_weight(0.0, false, Some(100.0)), base);
        assert_eq!(send_weight(f32::NAN, true, Some(0.0)), MAX_WEIGHT);
        assert_eq!(nearest(Vec3::ZERO, &[Vec3::X * 3.0, Vec3::Y]), Some(1.0));
    }

    #[test]
    fn the_most_urgent_go_first_and_nobody_starves() {
        let mut acc = PriorityAccumulator::default();
        // 20 bodies of 20 bytes, 60 bytes a frame: 3 a frame. Body 0 weighs 1, the others 16.
        let candidates: Vec<Candidate> = (0..20)
            .map(|i| Candidate {
                body: BodyId(i),
                weight: if i == 0 { 1.0 } else { 16.0 },
                size: 20,
                urgent: false,
            })
            .collect();
        let first = acc.select(&candidates, 1.0 / 64.0, 60);
        assert_eq!(first.chosen, vec![BodyId(1), BodyId(2), BodyId(3)]);
        assert_eq!(first.deferred, 17);
        let mut waited = 1;
        loop {
            let s = acc.select(&candidates, 1.0 / 64.0, 60);
            waited += 1;
            if s.chosen.contains(&BodyId(0)) {
                break;
            }
            assert!(waited < 200, "body 0 starved");
        }
        // Rule 18's bound: 16 × N × E / B = 16 × 20 × 20 / 60 ≈ 107 frames. The heavy bodies
        // go round every 19 / 3 frames, so the light one needs about 16 × 19 / 3 ≈ 101.
        assert!(waited <= 16 * 20 * 20 / 60, "{waited} frames");
        assert!(waited >= 19 / 3, "{waited} frames");
    }

    #[test]
    fn a_big_entry_is_not_overtaken_by_small_ones_forever() {
        let mut acc = PriorityAccumulator::default();
        let candidates = [
            Candidate {
                body: BodyId(1),
                weight: 1.0,
                size: 50,
                urgent: false,
            },
            Candidate {
                body: BodyId(2),
                weight: 16.0,
                size: 10,
                urgent: false,
            },
        ];
        let mut sent_big = false;
        for _ in 0..10 {
            let s = acc.select(&candidates, 0.1, 30);
            sent_big |= s.chosen.contains(&BodyId(1));
        }
        assert!(!sent_big, "30 bytes never fit 50");
        for _ in 0..10 {
            let s = acc.select(&candidates, 0.1, 60);
            sent_big |= s.chosen.contains(&BodyId(1));
        }
        assert!(sent_big);
    }

    #[test]
    fn urgent_candidates_go_first() {
        let mut acc = PriorityAccumulator::default();
        let c = |body, weight, urgent| Candidate {
            body: BodyId(body),
            weight,
            size: 10,
            urgent,
        };
        let all = [c(1, 16.0, false), c(2, 16.0, false), c(3, 1.0, true)];
        let s = acc.select(&all, 1.0, 20);
        assert_eq!(s.chosen, vec![BodyId(3), BodyId(1)]);
        assert_eq!(s.deferred, 1);
    }

    #[test]
    fn config_validation() {
        assert!(StateBudgetConfig::default().validate().is_ok());
        let low = StateBudgetConfig {
            upload_bytes_per_second: 10,
            ..Default::default()
        };
        assert!(low.validate().is_err());
        let radius = StateBudgetConfig {
            interest_radius: Some(-1.0),
            ..Default::default()
        };
        assert!(radius.validate().is_err());
    }
}
