//! The prop poses an owner carries with its input: [`PropPose`] (one prop, quantized),
//! [`PropPoses`] (the props of one input, stamped with its tick, bounded) and
//! [`HybridInput`] (the game's input with them). Plain data and pure functions.

use bevy::prelude::*;
use serde::{Deserialize, Serialize};
use simsync_deterministic::{PlayerIndex, Tick};

/// Props one input may carry at most, whatever a configuration says: a bound on the work the
/// simulation does per input ([`PropPoses::new`] refuses more; the simulation ignores, and
/// counts, poses past it in an input built by other means).
pub const MAX_PROPS_PER_INPUT: usize = 32;

/// Millimetres per metre: positions travel in whole millimetres, velocities in mm/s.
const MM_PER_M: f32 = 1000.0;
/// Rotation components travel as `i16`, scaled by this.
const ROT_SCALE: f32 = 32767.0;

/// Errors of building the props an input carries. Each leaves nothing changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HybridError {
    /// More props than one input may carry.
    #[error("{count} props do not fit one input (at most {max})")]
    TooManyProps {
        /// The props offered.
        count: usize,
        /// The bound: the configured count, at most [`MAX_PROPS_PER_INPUT`].
        max: usize,
    },
    /// A position or velocity component outside what its quantized form holds (±2,147 km,
    /// ±2,147 km/s) or not finite.
    #[error("prop {prop}: {what} {value} cannot be quantized")]
    OutOfRange {
        /// The prop.
        prop: u64,
        /// `"position"` or `"velocity"`.
        what: &'static str,
        /// The offending component, in metres or m/s.
        value: f32,
    },
    /// The same prop twice in one input.
    #[error("prop {prop} appears twice in one input")]
    DuplicateProp {
        /// The prop.
        prop: u64,
    },
}

/// One prop's state as its owner carries it: its id (the ownership world's `BodyId`), its shape
/// kind (an index into the proxy shapes of [`HybridConfig`](super::HybridConfig)), position in
/// whole millimetres, rotation as a unit quaternion scaled to `i16`, and linear velocity in
/// mm/s. Integers only: every peer reads the same value out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, Reflect)]
pub struct PropPose {
    /// The prop: its `BodyId` in the ownership world.
    pub id: u64,
    /// Its shape kind (index into the proxy shapes).
    pub kind: u8,
    /// Position, millimetres.
    pub pos_mm: [i32; 3],
    /// Rotation `[x, y, z, w]`, each × 32,767.
    pub rot: [i16; 4],
    /// Linear velocity, mm/s.
    pub vel_mm_s: [i32; 3],
}

impl PropPose {
    /// Quantizes a prop's pose: position to 1 mm, velocity to 1 mm/s, rotation to 1/32,767
    /// (normalized first; a zero or non-finite rotation becomes the identity).
    ///
    /// # Errors
    /// [`HybridError::OutOfRange`] for a position or velocity component that is not finite or
    /// beyond ±2,147 km (km/s).
    pub fn quantize(
        id: u64,
        kind: u8,
        translation: Vec3,
        rotation: Quat,
        velocity: Vec3,
    ) -> Result<Self, HybridError> {
        let pos_mm = to_mm(id, "position", translation)?;
        let vel_mm_s = to_mm(id, "velocity", velocity)?;
        let rotation = if rotation.is_finite() && rotation.length_squared() > 0.0 {
            rotation.normalize()
        } else {
            Quat::IDENTITY
        };
        let rot = rotation
            .to_array()
            .map(|c| (c * ROT_SCALE).round().clamp(-ROT_SCALE, ROT_SCALE) as i16);
        Ok(Self {
            id,
            kind,
            pos_mm,
            rot,
            vel_mm_s,
        })
    }

    /// The position, metres.
    pub fn translation(&self) -> Vec3 {
        Vec3::from_array(self.pos_mm.map(|c| c as f32 / MM_PER_M))
    }

    /// The rotation (normalized; the identity for an all-zero one).
    pub fn rotation(&self) -> Quat {
        rotation_of(self.rot)
    }

    /// The linear velocity, m/s.
    pub fn velocity(&self) -> Vec3 {
        Vec3::from_array(self.vel_mm_s.map(|c| c as f32 / MM_PER_M))
    }
}

/// The rotation a quantized `[x, y, z, w]` stands for (the identity for all zeros).
pub(crate) fn rotation_of(rot: [i16; 4]) -> Quat {
    let q = Quat::from_array(rot.map(|c| f32::from(c) / ROT_SCALE));
    if q.length_squared() > 0.0 {
        q.normalize()
    } else {
        Quat::IDENTITY
    }
}

fn to_mm(prop: u64, what: &'static str, v: Vec3) -> Result<[i32; 3], HybridError> {
    let mut out = [0; 3];
    for (slot, value) in out.iter_mut().zip(v.to_array()) {
        let mm = (value * MM_PER_M).round();
        if !mm.is_finite() || mm.abs() > i32::MAX as f32 {
            return Err(HybridError::OutOfRange { prop, what, value });
        }
        *slot = mm as i32;
    }
    Ok(out)
}

/// The props one input carries: the poses its sender owned, as they were for tick `stamp` (the
/// tick of the input they travel with), at most [`MAX_PROPS_PER_INPUT`], each prop once.
/// Empty (the default) when the sender carries none: then an idle player's input repeats
/// exactly and prediction by repetition holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, Reflect)]
pub struct PropPoses {
    stamp: Tick,
    poses: Vec<PropPose>,
}

impl PropPoses {
    /// The poses for tick `stamp`, at most `max` of them (capped at [`MAX_PROPS_PER_INPUT`]).
    /// No poses make the empty value (stamp 0), whatever `stamp` is.
    ///
    /// # Errors
    /// [`HybridError::TooManyProps`] beyond the bound, [`HybridError::DuplicateProp`] for a prop
    /// given twice.
    pub fn new(stamp: Tick, poses: Vec<PropPose>, max: usize) -> Result<Self, HybridError> {
        let max = max.min(MAX_PROPS_PER_INPUT);
        if poses.len() > max {
            return Err(HybridError::TooManyProps {
                count: poses.len(),
                max,
            });
        }
        for (n, pose) in poses.iter().enumerate() {
            if poses[..n].iter().any(|p| p.id == pose.id) {
                return Err(HybridError::DuplicateProp { prop: pose.id });
            }
        }
        if poses.is_empty() {
            return Ok(Self::default());
        }
        Ok(Self { stamp, poses })
    }

    /// The tick these poses are for (0 when empty).
    pub fn stamp(&self) -> Tick {
        self.stamp
    }

    /// The poses, in the order the sender gave them.
    pub fn poses(&self) -> &[PropPose] {
        &self.poses
    }

    /// Whether no prop is carried.
    pub fn is_empty(&self) -> bool {
        self.poses.is_empty()
    }
}

/// A hybrid session's input: the game's own input `I` and the props its sender owns
/// ([`PropPoses`]). The deterministic session runs on `HybridInput<I>`; game systems read
/// `PlayerInputs<HybridInput<I>>` and take `.input`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct HybridInput<I> {
    /// The game's input.
    pub input: I,
    /// The prop poses its sender owned for this input's tick.
    pub props: PropPoses,
}

/// One carried pose as the simulation applies it at a tick: the pose, the player whose input
/// carried it and the stamp it was carried with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarriedPose {
    /// The player whose input carried it.
    pub player: PlayerIndex,
    /// The tick the pose is for.
    pub stamp: Tick,
    /// The pose.
    pub pose: PropPose,
}

/// The rule of which carried pose a tick applies ([hybrid sessions](super#the-rule)): the
/// players' inputs in player order, each input's poses in its order, at most
/// [`MAX_PROPS_PER_INPUT`] of each (the rest counted in the second value); a prop carried by
/// several inputs keeps the pose with the latest stamp, and of equal stamps the first (lowest
/// player index). So an ownership change in flight (old and new owner both carrying the prop
/// for one tick) resolves to one pose, and the repeated input of a player who left (the relay
/// repeats its last input) never hides the fresh pose of the prop's new owner. A pure function
/// of the inputs, so every world given the same inputs applies the same poses.
pub fn carried_poses<'a>(
    inputs: impl IntoIterator<Item = (PlayerIndex, &'a PropPoses)>,
) -> (Vec<CarriedPose>, u32) {
    let mut out: Vec<CarriedPose> = Vec::new();
    let mut ignored = 0u32;
    for (player, props) in inputs {
        let poses = props.poses();
        ignored += poses.len().saturating_sub(MAX_PROPS_PER_INPUT) as u32;
        for pose in poses.iter().take(MAX_PROPS_PER_INPUT) {
            let carried = CarriedPose {
                player,
                stamp: props.stamp(),
                pose: *pose,
            };
            match out.iter_mut().find(|c| c.pose.id == pose.id) {
                Some(kept) if kept.stamp < carried.stamp => *kept = carried,
                Some(_) => {}
                None => out.push(carried),
            }
        }
    }
    (out, ignored)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pose(id: u64, x: f32) -> PropPose {
        PropPose::quantize(
            id,
            0,
            Vec3::new(x, 1.25, -3.5),
            Quat::from_rotation_y(0.7),
            Vec3::new(4.0, -2.0, 0.5),
        )
        .unwrap()
    }

    #[test]
    fn quantize_round_trips_within_a_millimetre() {
        let t = Vec3::new(12.3456, -0.0004, 99.9996);
        let r = Quat::from_euler(EulerRot::XYZ, 0.3, -1.2, 2.0);
        let v = Vec3::new(-7.25, 0.0, 3.1234);
        let p = PropPose::quantize(9, 2, t, r, v).unwrap();
        assert!((p.translation() - t).abs().max_element() <= 0.0005);
        assert!((p.velocity() - v).abs().max_element() <= 0.0005);
        assert!(p.rotation().angle_between(r) < 1e-3);
        assert_eq!((p.id, p.kind), (9, 2));
    }

    #[test]
    fn out_of_range_and_nan_are_typed_errors() {
        let far = PropPose::quantize(3, 0, Vec3::new(3.0e6, 0.0, 0.0), Quat::IDENTITY, Vec3::ZERO);
        assert!(matches!(
            far,
            Err(HybridError::OutOfRange {
                prop: 3,
                what: "position",
                ..
            })
        ));
        let nan = PropPose::quantize(4, 0, Vec3::ZERO, Quat::IDENTITY, Vec3::NAN);
        assert!(matches!(
            nan,
            Err(HybridError::OutOfRange {
                what: "velocity",
                ..
            })
        ));
        let zero_rot = PropPose::quantize(
            5,
            0,
            Vec3::ZERO,
            Quat::from_xyzw(0.0, 0.0, 0.0, 0.0),
            Vec3::ZERO,
        )
        .unwrap();
        assert_eq!(zero_rot.rotation(), Quat::IDENTITY);
    }

    #[test]
    fn poses_are_bounded_and_unique() {
        let many: Vec<_> = (0..5).map(|n| pose(n, 0.0)).collect();
        assert_eq!(
            PropPoses::new(7, many.clone(), 4),
            Err(HybridError::TooManyProps { count: 5, max: 4 })
        );
        let huge: Vec<_> = (0..40).map(|n| pose(n, 0.0)).collect();
        assert_eq!(
            PropPoses::new(7, huge, 1000),
            Err(HybridError::TooManyProps {
                count: 40,
                max: MAX_PROPS_PER_INPUT
            })
        );
        assert_eq!(
            PropPoses::new(7, vec![pose(1, 0.0), pose(1, 2.0)], 4),
            Err(HybridError::DuplicateProp { prop: 1 })
        );
        let ok = PropPoses::new(7, many, 5).unwrap();
        assert_eq!((ok.stamp(), ok.poses().len()), (7, 5));
        assert_eq!(
            PropPoses::new(7, Vec::new(), 5).unwrap(),
            PropPoses::default()
        );
    }

    #[test]
    fn the_lowest_player_wins_a_prop_carried_twice() {
        let a = PropPoses::new(10, vec![pose(1, 1.0), pose(2, 2.0)], 8).unwrap();
        let b = PropPoses::new(10, vec![pose(2, 5.0), pose(3, 3.0)], 8).unwrap();
        let (carried, ignored) = carried_poses([(0, &a), (1, &b)]);
        assert_eq!(ignored, 0);
        let ids: Vec<_> = carried.iter().map(|c| (c.player, c.pose.id)).collect();
        assert_eq!(ids, vec![(0, 1), (0, 2), (1, 3)]);
        assert_eq!(carried[1].pose.pos_mm[0], 2000);
    }

    #[test]
    fn the_latest_stamp_wins_a_prop_carried_twice() {
        // Player 0 left: the relay repeats its last input, stamped 10; player 1 owns the prop
        // now and carries it stamped 40.
        let left = PropPoses::new(10, vec![pose(1, 1.0)], 8).unwrap();
        let owner = PropPoses::new(40, vec![pose(1, 7.0)], 8).unwrap();
        let (carried, _) = carried_poses([(0, &left), (1, &owner)]);
        assert_eq!(carried.len(), 1);
        assert_eq!((carried[0].player, carried[0].stamp), (1, 40));
        assert_eq!(carried[0].pose.pos_mm[0], 7000);
    }

    #[test]
    fn poses_past_the_bound_are_counted_not_applied() {
        // Built around `new` (as a peer's bytes could be): the simulation applies the first 32.
        let poses: Vec<_> = (0..40).map(|n| pose(n, 0.0)).collect();
        let bytes =
            bincode::serde::encode_to_vec((5i32, poses), bincode::config::standard()).unwrap();
        let (props, _): (PropPoses, usize) =
            bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
        let (carried, ignored) = carried_poses([(0, &props)]);
        assert_eq!((carried.len(), ignored), (MAX_PROPS_PER_INPUT, 8));
    }

    #[test]
    fn bytes_per_prop_on_the_wire() {
        // What one more carried prop adds to an input, in the wire's encoding (bincode 2,
        // standard): a prop 20 m out moving at 8 m/s, rotated.
        let encode = |n: u32| {
            let poses = (0..n)
                .map(|i| {
                    PropPose::quantize(
                        1000 + u64::from(i),
                        1,
                        Vec3::new(20.0, 3.0, -15.0),
                        Quat::from_rotation_y(1.0),
                        Vec3::new(8.0, -1.0, 0.5),
                    )
                    .unwrap()
                })
                .collect();
            let input = HybridInput {
                input: 0u16,
                props: PropPoses::new(123, poses, 8).unwrap(),
            };
            bincode::serde::encode_to_vec(&input, bincode::config::standard())
                .unwrap()
                .len()
        };
        let per_prop = (encode(8) - encode(1)) / 7;
        println!(
            "{per_prop} bytes per carried prop; empty input {} bytes",
            encode(0)
        );
        assert!((20..=32).contains(&per_prop), "{per_prop} bytes per prop");
    }
}
