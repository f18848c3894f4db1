//! The sandbox's scene format: what bodies to spawn (see `assets/scenes/sandbox.ron` for a
//! documented example).
//!
//! Units are metres, kilograms per cubic metre (density) and degrees. Vectors are RON tuples
//! `(x, y, z)`, y up. Sizes are *full* extents (a `Box(size: (1.0, 1.0, 1.0))` is a 1 m cube).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::LoadError;

/// Largest number of dynamic bodies a scene may hold (piles and players together).
pub const MAX_DYNAMIC_BODIES: u32 = 10_000;

/// A whole scene.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scene {
    /// The fixed ground cuboid.
    pub ground: Ground,
    /// Fixed, rotated cuboids to walk or jump onto.
    #[serde(default)]
    pub ramps: Vec<Ramp>,
    /// Grids of dynamic bodies.
    #[serde(default)]
    pub piles: Vec<Pile>,
    /// Player bodies, one per player in player order; a run with N players spawns the first N.
    pub players: Vec<PlayerSpawn>,
}

/// The ground: a fixed cuboid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ground {
    /// Centre of the cuboid.
    pub center: [f32; 3],
    /// Full extents.
    pub size: [f32; 3],
    /// Friction coefficient (≥ 0).
    #[serde(default = "default_friction")]
    pub friction: f32,
}

/// A fixed cuboid rotated by Euler angles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ramp {
    /// Centre of the cuboid.
    pub center: [f32; 3],
    /// Full extents before rotation.
    pub size: [f32; 3],
    /// Rotation in degrees about X, then Y, then Z (Bevy's `EulerRot::XYZ`).
    #[serde(default)]
    pub rotation_deg: [f32; 3],
    /// Friction coefficient (≥ 0).
    #[serde(default = "default_friction")]
    pub friction: f32,
}

/// The shape of a dynamic body.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Shape {
    /// A cuboid of the given full extents.
    Box {
        /// Full extents.
        size: [f32; 3],
    },
    /// A sphere.
    Ball {
        /// Radius.
        radius: f32,
    },
}

impl Shape {
    /// Full extents of the shape's bounding box.
    pub fn extents(&self) -> [f32; 3] {
        match *self {
            Shape::Box { size } => size,
            Shape::Ball { radius } => [2.0 * radius; 3],
        }
    }

    /// Volume in cubic metres.
    pub fn volume(&self) -> f32 {
        match *self {
            Shape::Box { size } => size[0] * size[1] * size[2],
            Shape::Ball { radius } => 4.0 / 3.0 * std::f32::consts::PI * radius.powi(3),
        }
    }
}

/// A grid of `count.0 × count.1 × count.2` identical dynamic bodies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pile {
    /// Centre of the first body (the grid's minimum corner).
    pub origin: [f32; 3],
    /// Bodies along x, y and z (each ≥ 1).
    pub count: [u32; 3],
    /// Distance between neighbouring centres along x, y and z (each ≥ the shape's extent on
    /// that axis, so bodies never start overlapping).
    pub spacing: [f32; 3],
    /// Shape of every body.
    pub shape: Shape,
    /// Density (> 0).
    #[serde(default = "default_density")]
    pub density: f32,
    /// Friction coefficient (≥ 0).
    #[serde(default = "default_friction")]
    pub friction: f32,
}

impl Pile {
    /// Number of bodies in the pile.
    pub fn body_count(&self) -> u32 {
        self.count.iter().product()
    }

    /// Centre of every body, x fastest, then z, then y (bottom layer first).
    pub fn positions(&self) -> impl Iterator<Item = [f32; 3]> + '_ {
        let [nx, ny, nz] = self.count;
        (0..ny).flat_map(move |y| {
            (0..nz).flat_map(move |z| {
                (0..nx).map(move |x| {
                    [
                        self.origin[0] + x as f32 * self.spacing[0],
                        self.origin[1] + y as f32 * self.spacing[1],
                        self.origin[2] + z as f32 * self.spacing[2],
                    ]
                })
            })
        })
    }
}

/// A player's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlayerSpawn {
    /// Where the body's centre starts.
    pub spawn: [f32; 3],
    /// The body's shape.
    pub shape: Shape,
    /// Density (> 0).
    #[serde(default = "default_density")]
    pub density: f32,
    /// Friction coefficient (≥ 0).
    #[serde(default = "default_friction")]
    pub friction: f32,
}

impl PlayerSpawn {
    /// Mass of the body in kilograms (density × volume, as Rapier computes it).
    pub fn mass(&self) -> f32 {
        self.density * self.shape.volume()
    }
}

fn default_friction() -> f32 {
    0.5
}

fn default_density() -> f32 {
    1.0
}

impl Scene {
    /// Number of dynamic bodies in the piles.
    pub fn pile_bodies(&self) -> u32 {
        self.piles.iter().map(Pile::body_count).sum()
    }

    /// Checks every value; `Err((field, reason))` names the first bad one.
    fn validate(&self) -> Result<(), (String, String)> {
        let g = &self.ground;
        finite("ground.center", &g.center)?;
        positive("ground.size", &g.size)?;
        non_negative("ground.friction", g.friction)?;
        for (i, r) in self.ramps.iter().enumerate() {
            finite(&format!("ramps[{i}].center"), &r.center)?;
            positive(&format!("ramps[{i}].size"), &r.size)?;
            finite(&format!("ramps[{i}].rotation_deg"), &r.rotation_deg)?;
            non_negative(&format!("ramps[{i}].friction"), r.friction)?;
        }
        let mut total: u64 = 0;
        for (i, p) in self.piles.iter().enumerate() {
            finite(&format!("piles[{i}].origin"), &p.origin)?;
            if p.count.contains(&0) {
                return Err((
                    format!("piles[{i}].count"),
                    format!(
                        "is {:?}: a pile needs at least one body along each axis",
                        p.count
                    ),
                ));
            }
            shape(&format!("piles[{i}].shape"), &p.shape)?;
            let extents = p.shape.extents();
            for axis in 0..3 {
                let s = p.spacing[axis];
                if !s.is_finite() || s < extents[axis] {
                    return Err((
                        format!("piles[{i}].spacing"),
                        format!(
                            "is {:?}: each spacing must be at least the shape's extent {:?} \
                             (bodies would overlap)",
                            p.spacing, extents
                        ),
                    ));
                }
            }
            positive_scalar(&format!("piles[{i}].density"), p.density)?;
            non_negative(&format!("piles[{i}].friction"), p.friction)?;
            total += p.count.iter().map(|&c| u64::from(c)).product::<u64>();
        }
        if self.players.is_empty() {
            return Err((
                "players".into(),
                "is empty: at least one player body".into(),
            ));
        }
        for (i, p) in self.players.iter().enumerate() {
            finite(&format!("players[{i}].spawn"), &p.spawn)?;
            shape(&format!("players[{i}].shape"), &p.shape)?;
            positive_scalar(&format!("players[{i}].density"), p.density)?;
            non_negative(&format!("players[{i}].friction"), p.friction)?;
        }
        total += self.players.len() as u64;
        if total > u64::from(MAX_DYNAMIC_BODIES) {
            return Err((
                "piles".into(),
                format!(
                    "hold {total} dynamic bodies with the players; at most {MAX_DYNAMIC_BODIES}"
                ),
            ));
        }
        Ok(())
    }
}

fn finite(field: &str, v: &[f32]) -> Result<(), (String, String)> {
    if v.iter().all(|x| x.is_finite()) {
        Ok(())
    } else {
        Err((field.into(), format!("is {v:?}: must be finite")))
    }
}

fn positive(field: &str, v: &[f32]) -> Result<(), (String, String)> {
    if v.iter().all(|x| x.is_finite() && *x > 0.0) {
        Ok(())
    } else {
        Err((field.into(), format!("is {v:?}: every size must be > 0")))
    }
}

fn positive_scalar(field: &str, v: f32) -> Result<(), (String, String)> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err((field.into(), format!("is {v}: must be > 0")))
    }
}

fn non_negative(field: &str, v: f32) -> Result<(), (String, String)> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err((field.into(), format!("is {v}: must be ≥ 0")))
    }
}

fn shape(field: &str, s: &Shape) -> Result<(), (String, String)> {
    match s {
        Shape::Box { size } => positive(&format!("{field}.size"), size),
        Shape::Ball { radius } => positive_scalar(&format!("{field}.radius"), *radius),
    }
}

/// Parses and validates a scene from RON text; `path` only names the source in errors.
///
/// # Errors
/// [`LoadError::Parse`] with line and column for malformed RON, [`LoadError::Invalid`] naming
/// the field for a value out of range.
pub fn parse_scene(text: &str, path: &Path) -> Result<Scene, LoadError> {
    let scene: Scene = ron::from_str(text).map_err(|e| LoadError::parse(path, e))?;
    scene
        .validate()
        .map_err(|(field, reason)| LoadError::Invalid {
            path: path.to_path_buf(),
            kind: "scene",
            field,
            reason,
        })?;
    Ok(scene)
}

/// Reads, parses and validates the scene file at `path`.
///
/// # Errors
/// [`LoadError::Io`] if the file cannot be read; otherwise as [`parse_scene`].
pub fn load_scene(path: &Path) -> Result<Scene, LoadError> {
    parse_scene(&LoadError::read(path)?, path)
}
