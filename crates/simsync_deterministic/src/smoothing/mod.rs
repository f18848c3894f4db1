//! Visual smoothing: how a main-app entity presents a simulation entity of the predicted world
//! without popping after rollbacks ([visual smoothing](crate::rules#visual-smoothing)).
//!
//! [`VisualSmoothing`] is the plain-data state of one presented entity and its pure update,
//! [`VisualSmoothing::present`]; [`VisualSmoothingPlugin`] wires it into Bevy: every frame it
//! reads the predicted world (never writes it) and sets the `Transform` of each main-app entity
//! carrying [`PresentedSimEntity`].

mod plugin;

use std::time::Duration;

use bevy::math::ops;
use bevy::prelude::*;

use crate::tick::Tick;

pub use plugin::{PresentationSet, PresentedSimEntity, VisualSmoothingPlugin};

/// Most ticks a correction is extrapolated over (a longer gap is treated as this many).
const MAX_EXTRAPOLATED_TICKS: i32 = 8;

/// Settings of visual smoothing (a main-app resource inserted by [`VisualSmoothingPlugin`];
/// change it at run time to switch smoothing off or retune it).
#[derive(Resource, Reflect, Debug, Clone, Copy, PartialEq)]
#[reflect(Resource, Debug, Default, PartialEq, Clone)]
pub struct VisualSmoothingConfig {
    /// Off: the presented transform is the simulated one, every frame (no correction, no
    /// interpolation).
    pub enabled: bool,
    /// Time in which a rollback correction halves (exponential decay). Default 80 ms.
    pub half_life: Duration,
    /// A correction longer than this (metres) is not smoothed: the entity snaps. Default 2 m.
    pub snap_distance: f32,
    /// Interpolate between the last two ticks when frames are shorter than ticks (the presented
    /// pose then trails the simulation by up to one tick). Default on.
    pub interpolate: bool,
}

impl Default for VisualSmoothingConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            half_life: Duration::from_millis(80),
            snap_distance: 2.0,
            interpolate: true,
        }
    }
}

impl VisualSmoothingConfig {
    /// The factor a correction keeps after `dt`: `0.5^(dt / half_life)` (0 for a zero
    /// half-life, 1 for a zero `dt`).
    pub fn decay_factor(&self, dt: Duration) -> f32 {
        if self.half_life.is_zero() {
            return 0.0;
        }
        ops::powf(0.5, dt.as_secs_f32() / self.half_life.as_secs_f32())
    }

    /// How long a correction of `from` metres takes to fall below `to` metres (`ZERO` if it
    /// already is or the half-life is zero; `to` is clamped to at least 1 µm).
    pub fn time_to_decay(&self, from: f32, to: f32) -> Duration {
        let to = to.max(1e-6);
        if from <= to || self.half_life.is_zero() {
            return Duration::ZERO;
        }
        self.half_life.mul_f32(ops::log2(from / to))
    }
}

/// Whether a correction of `offset` metres and `rotation` is dropped rather than decayed: it
/// is longer than `config.snap_distance` (compared as added, before any decay) or not finite.
fn snaps(config: &VisualSmoothingConfig, offset: Vec3, rotation: Quat) -> bool {
    !offset.is_finite() || !rotation.is_finite() || offset.length() > config.snap_distance
}

/// A simulated pose at a tick.
#[derive(Reflect, Debug, Clone, Copy, PartialEq)]
pub struct TickPose {
    /// The tick.
    pub tick: Tick,
    /// Translation and rotation of the simulation entity at that tick (scale is copied as is).
    pub transform: Transform,
}

/// The smoothing state of one presented entity (plain data; see [`VisualSmoothing::present`]).
///
/// It keeps the last two simulated poses it saw and a *correction*: the offset between what was
/// presented and what the simulation now says, added to the presented pose and decaying
/// exponentially.
#[derive(Reflect, Debug, Clone, Copy, Default, PartialEq)]
pub struct VisualSmoothing {
    previous: Option<TickPose>,
    current: Option<TickPose>,
    /// Translation correction, metres.
    correction: Vec3,
    /// Rotation correction (presented = correction × simulated).
    correction_rotation: Quat,
    /// Time since `current` became current.
    since_tick: Duration,
}

impl VisualSmoothing {
    /// The translation correction still applied, metres.
    pub fn correction(&self) -> Vec3 {
        self.correction
    }

    /// The rotation correction still applied.
    pub fn correction_rotation(&self) -> Quat {
        self.correction_rotation
    }

    /// Adds `offset` metres to the correction (what a rollback does; for tools and tests). The
    /// next [`present`](Self::present) snaps it away, before decaying it, if the correction is
    /// then longer than the snap distance.
    pub fn add_correction(&mut self, offset: Vec3) {
        self.correction += offset;
    }

    /// The presented transform of a frame lasting `dt` whose simulation shows `simulated`.
    /// `rolled_back` says whether a rollback since the previous frame replaced the timeline
    /// with a different one (`SessionStats::corrective_rollbacks` grew; a rollback that
    /// reproduces the same states is no correction); `tick_duration` is the length of one tick.
    ///
    /// With smoothing disabled it returns `simulated.transform` and forgets any correction.
    /// A pose of an earlier tick than the last one seen starts a new timeline (a restarted
    /// session, or a rematch: the simulation starts over from tick 0): nothing of the old one
    /// is kept — no interpolation from its last pose, no correction. Otherwise: after a
    /// rollback, the difference between the old timeline (its last pose,
    /// extrapolated at its last velocity to `simulated.tick`, at most 8 ticks) and `simulated`
    /// is added to the correction; a correction longer than `snap_distance` as it stands then
    /// (before this frame's decay) is dropped; what remains decays by
    /// [`decay_factor`](VisualSmoothingConfig::decay_factor)`(dt)`; the result is the pose
    /// interpolated between the last two ticks (if `interpolate`) plus the correction
    /// ([rule](crate::rules#visual-smoothing)). Never panics; non-finite corrections are
    /// dropped.
    pub fn present(
        &mut self,
        config: &VisualSmoothingConfig,
        simulated: TickPose,
        rolled_back: bool,
        dt: Duration,
        tick_duration: Duration,
    ) -> Transform {
        if !config.enabled {
            *self = Self {
                current: Some(simulated),
                ..Self::default()
            };
            return simulated.transform;
        }
        if self
            .current
            .is_some_and(|current| simulated.tick < current.tick)
        {
            *self = Self::default();
        }
        if self.correction_rotation.length_squared() == 0.0 {
            self.correction_rotation = Quat::IDENTITY;
        }
        if rolled_back && let Some(expected) = self.expected_at(simulated.tick) {
            self.correction += expected.translation - simulated.transform.translation;
            self.correction_rotation = (self.correction_rotation
                * expected.rotation
                * simulated.transform.rotation.inverse())
            .normalize();
        }
        // The snap distance applies to the correction as added, before this frame's decay.
        if snaps(config, self.correction, self.correction_rotation) {
            self.correction = Vec3::ZERO;
            self.correction_rotation = Quat::IDENTITY;
        }
        self.advance(simulated, dt);
        let keep = config.decay_factor(dt);
        self.correction *= keep;
        if self.correction_rotation != Quat::IDENTITY {
            self.correction_rotation = Quat::IDENTITY.slerp(self.correction_rotation, keep);
        }
        let base = if config.interpolate {
            self.interpolated(tick_duration)
        } else {
            simulated.transform
        };
        if self.correction == Vec3::ZERO && self.correction_rotation == Quat::IDENTITY {
            // Bit for bit the simulated pose: no arithmetic on it.
            return base;
        }
        Transform {
            translation: base.translation + self.correction,
            rotation: (self.correction_rotation * base.rotation).normalize(),
            scale: base.scale,
        }
    }

    /// Records `simulated` as the current pose (shifting the old one to `previous` on a new
    /// tick) and advances the time since the current tick by `dt`.
    fn advance(&mut self, simulated: TickPose, dt: Duration) {
        match self.current {
            Some(current) if current.tick == simulated.tick => {
                self.current = Some(simulated);
                self.since_tick += dt;
            }
            Some(current) => {
                self.previous = Some(current);
                self.current = Some(simulated);
                self.since_tick = Duration::ZERO;
            }
            None => {
                self.current = Some(simulated);
                self.since_tick = Duration::ZERO;
            }
        }
    }

    /// Where the old timeline would have put the entity at `tick`: its last pose moved on at
    /// the velocity of its last two poses (`None` before any pose).
    fn expected_at(&self, tick: Tick) -> Option<Transform> {
        let current = self.current?;
        let Some(previous) = self.previous.filter(|p| p.tick < current.tick) else {
            return Some(current.transform);
        };
        let span = (current.tick - previous.tick) as f32;
        let ahead = (tick - current.tick).clamp(0, MAX_EXTRAPOLATED_TICKS) as f32;
        let velocity =
            (current.transform.translation - previous.transform.translation) / span.max(1.0);
        let spin = current.transform.rotation * previous.transform.rotation.inverse();
        let mut rotation = current.transform.rotation;
        for _ in 0..ahead as i32 {
            rotation = (spin * rotation).normalize();
        }
        Some(Transform {
            translation: current.transform.translation + velocity * ahead,
            rotation,
            scale: current.transform.scale,
        })
    }

    /// The pose between the previous and the current tick, `since_tick / tick_duration` of the
    /// way (the current pose without a previous one or with a zero tick duration).
    fn interpolated(&self, tick_duration: Duration) -> Transform {
        let Some(current) = self.current else {
            return Transform::IDENTITY;
        };
        let Some(previous) = self.previous else {
            return current.transform;
        };
        if tick_duration.is_zero() {
            return current.transform;
        }
        let alpha = (self.since_tick.as_secs_f32() / tick_duration.as_secs_f32()).clamp(0.0, 1.0);
        Transform {
            translation: previous
                .transform
                .translation
                .lerp(current.transform.translation, alpha),
            rotation: previous
                .transform
                .rotation
                .slerp(current.transform.rotation, alpha),
            scale: current.transform.scale,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: Duration = Duration::from_millis(16);
    const TICK: Duration = Duration::from_micros(15_625);

    fn pose(tick: Tick, x: f32) -> TickPose {
        TickPose {
            tick,
            transform: Transform::from_xyz(x, 0.0, 0.0),
        }
    }

    fn no_interpolation() -> VisualSmoothingConfig {
        VisualSmoothingConfig {
            interpolate: false,
            ..default()
        }
    }

    #[test]
    fn without_rollbacks_the_presented_pose_is_the_simulated_one() {
        let config = no_interpolation();
        let mut smoothing = VisualSmoothing::default();
        for tick in 0..50 {
            let simulated = pose(tick, tick as f32 * 0.1);
            let shown = smoothing.present(&config, simulated, false, FRAME, TICK);
            assert_eq!(shown, simulated.transform, "tick {tick}");
        }
    }

    #[test]
    fn a_rollback_correction_is_presented_then_decays_by_the_half_life() {
        let config = no_interpolation();
        let mut smoothing = VisualSmoothing::default();
        smoothing.present(&config, pose(1, 0.0), false, FRAME, TICK);
        smoothing.present(&config, pose(2, 0.0), false, FRAME, TICK);
        // The rollback moved the body 1 m to the right: presented where it was, then decays.
        let shown = smoothing.present(&config, pose(3, 1.0), true, Duration::ZERO, TICK);
        assert_eq!(shown.translation.x, 0.0);
        let shown = smoothing.present(&config, pose(3, 1.0), false, config.half_life, TICK);
        assert!((shown.translation.x - 0.5).abs() < 1e-5, "{shown:?}");
    }

    #[test]
    fn a_correction_falls_below_a_centimetre_within_time_to_decay() {
        let config = no_interpolation();
        let deadline = config.time_to_decay(1.0, 0.01);
        // log2(100) half-lives.
        assert!((deadline.as_secs_f32() - 0.08 * 100f32.log2()).abs() < 1e-4);
        let mut smoothing = VisualSmoothing::default();
        smoothing.add_correction(Vec3::X);
        let mut elapsed = Duration::ZERO;
        let mut tick = 0;
        while elapsed < deadline + FRAME {
            smoothing.present(&config, pose(tick, 0.0), false, FRAME, TICK);
            elapsed += FRAME;
            tick += 1;
        }
        assert!(smoothing.correction().length() < 0.01);
        assert!(smoothing.correction().length() > 0.0);
    }

    #[test]
    fn a_correction_beyond_the_snap_distance_snaps() {
        let config = no_interpolation();
        let mut smoothing = VisualSmoothing::default();
        smoothing.add_correction(Vec3::new(0.0, 3.0, 0.0));
        let shown = smoothing.present(&config, pose(0, 5.0), false, FRAME, TICK);
        assert_eq!(shown.translation, Vec3::new(5.0, 0.0, 0.0));
        assert_eq!(smoothing.correction(), Vec3::ZERO);
    }

    /// A body at rest at x = 0 for two ticks, then a rollback that puts it `d` metres to the
    /// right at the next tick, presented in a 16 ms frame: the presented offset from the
    /// simulated pose right after.
    fn offset_after_a_rollback_of(d: f32) -> f32 {
        let config = no_interpolation();
        let mut smoothing = VisualSmoothing::default();
        smoothing.present(&config, pose(1, 0.0), false, FRAME, TICK);
        smoothing.present(&config, pose(2, 0.0), false, FRAME, TICK);
        let shown = smoothing.present(&config, pose(3, d), true, FRAME, TICK);
        (shown.translation.x - d).abs()
    }

    #[test]
    fn corrections_just_above_the_snap_distance_snap_although_one_frame_decays_them_below() {
        // One 16 ms frame keeps 0.5^(16/80) = 87.1 %: 2.05 m and 2.29 m decay to 1.78 m and
        // 1.99 m, under the 2 m snap distance; the distance applies to them as added.
        let keep = VisualSmoothingConfig::default().decay_factor(FRAME);
        assert!(2.29 * keep < 2.0, "{keep}");
        for d in [2.05, 2.29] {
            assert_eq!(offset_after_a_rollback_of(d), 0.0, "{d} m");
        }
        let config = no_interpolation();
        let mut smoothing = VisualSmoothing::default();
        smoothing.add_correction(Vec3::new(0.0, 2.05, 0.0));
        let shown = smoothing.present(&config, pose(0, 5.0), false, FRAME, TICK);
        assert_eq!(shown.translation, Vec3::new(5.0, 0.0, 0.0));
        assert_eq!(smoothing.correction(), Vec3::ZERO);
    }

    #[test]
    fn a_correction_below_the_snap_distance_glides() {
        let keep = VisualSmoothingConfig::default().decay_factor(FRAME);
        let offset = offset_after_a_rollback_of(1.9);
        assert!((offset - 1.9 * keep).abs() < 1e-5, "{offset}");
        assert!(offset > 1.6, "{offset}");
    }

    #[test]
    fn smoothing_off_presents_the_simulation_and_forgets_corrections() {
        let config = VisualSmoothingConfig {
            enabled: false,
            ..default()
        };
        let mut smoothing = VisualSmoothing::default();
        smoothing.add_correction(Vec3::X);
        let shown = smoothing.present(&config, pose(4, 2.0), true, FRAME, TICK);
        assert_eq!(shown.translation.x, 2.0);
        assert_eq!(smoothing.correction(), Vec3::ZERO);
    }

    #[test]
    fn frames_between_ticks_interpolate_the_last_two_ticks() {
        let config = VisualSmoothingConfig::default();
        let mut smoothing = VisualSmoothing::default();
        smoothing.present(&config, pose(1, 0.0), false, TICK, TICK);
        let tick = Duration::from_millis(100);
        let start = smoothing.present(&config, pose(2, 1.0), false, Duration::ZERO, tick);
        assert_eq!(start.translation.x, 0.0);
        let half = smoothing.present(&config, pose(2, 1.0), false, tick / 2, tick);
        assert!((half.translation.x - 0.5).abs() < 1e-5);
        let full = smoothing.present(&config, pose(2, 1.0), false, tick, tick);
        assert_eq!(full.translation.x, 1.0);
    }

    #[test]
    fn a_rollback_on_a_moving_body_with_the_same_path_adds_no_correction() {
        let config = no_interpolation();
        let mut smoothing = VisualSmoothing::default();
        for tick in 0..10 {
            smoothing.present(&config, pose(tick, tick as f32 * 0.25), false, FRAME, TICK);
        }
        // Rolled back and re-simulated two ticks further on the same straight path.
        let shown = smoothing.present(&config, pose(11, 11.0 * 0.25), true, FRAME, TICK);
        assert!((shown.translation.x - 11.0 * 0.25).abs() < 1e-5);
        assert!(smoothing.correction().length() < 1e-5);
    }

    #[test]
    fn without_a_correction_a_rotated_pose_is_presented_bit_for_bit() {
        let config = no_interpolation();
        let mut smoothing = VisualSmoothing::default();
        let rotated = TickPose {
            tick: 3,
            transform: Transform::from_rotation(Quat::from_xyzw(1e-8, 5e-8, -0.0741, 0.9972)),
        };
        let shown = smoothing.present(&config, rotated, false, FRAME, TICK);
        assert_eq!(shown, rotated.transform);
    }

    #[test]
    fn an_earlier_tick_starts_a_new_timeline_without_sliding_from_the_old_one() {
        let config = VisualSmoothingConfig::default();
        let mut smoothing = VisualSmoothing::default();
        smoothing.present(&config, pose(599, 10.0), false, TICK, TICK);
        smoothing.present(&config, pose(600, 10.1), false, TICK, TICK);
        smoothing.add_correction(Vec3::new(0.5, 0.0, 0.0));
        // A rematch: the simulation starts over at tick 0, far from where it ended, and the
        // session's rollback count starting over reads as a rollback.
        let shown = smoothing.present(&config, pose(0, -3.0), true, TICK / 2, TICK);
        assert_eq!(shown, pose(0, -3.0).transform);
        assert_eq!(smoothing.correction(), Vec3::ZERO);
        // The next tick interpolates from tick 0, never from the old timeline's 10.1 m.
        let shown = smoothing.present(&config, pose(1, -2.0), false, TICK / 2, TICK);
        assert_eq!(shown.translation.x, -3.0);
        let shown = smoothing.present(&config, pose(1, -2.0), false, TICK / 2, TICK);
        assert_eq!(shown.translation.x, -2.5);
    }

    #[test]
    fn non_finite_corrections_are_dropped() {
        let config = no_interpolation();
        let mut smoothing = VisualSmoothing::default();
        smoothing.add_correction(Vec3::new(f32::NAN, 0.0, 0.0));
        let shown = smoothing.present(&config, pose(0, 1.0), false, FRAME, TICK);
        assert_eq!(shown.translation.x, 1.0);
    }
}
