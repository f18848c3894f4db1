//! Where `sandbox hybrid` puts its props and which shapes they have: pure functions of the
//! scene and the prop count.

use bevy::prelude::*;
use bevy_rapier3d::prelude::Collider;

use crate::scene::{Scene, Shape};

/// Most props a run may have (`--props`).
pub const MAX_PROPS: u32 = 5_000;
/// Distance between the centres of the extra props laid out in rows, m (each pile shape of
/// the shipped scene is at most 0.8 m across, so they never start overlapping).
pub const ROW_SPACING: f32 = 1.0;
/// Depth of the band of ground the extra rows fill, m, along +z from 2 m inside the far edge.
pub const ROW_BAND: f32 = 14.0;

/// Why the props cannot be laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// The scene has no pile to take the props' shapes from.
    NoPiles,
    /// More piles than prop kinds (a kind is a `u8`).
    TooManyPiles(usize),
    /// More props than [`MAX_PROPS`].
    TooManyProps(u32),
    /// The ground is too small for a row of extra props.
    GroundTooSmall,
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoPiles => write!(f, "the scene has no piles to take the props' shapes from"),
            Self::TooManyPiles(n) => write!(f, "the scene has {n} piles; at most 256 prop kinds"),
            Self::TooManyProps(n) => write!(f, "--props {n}: at most {MAX_PROPS}"),
            Self::GroundTooSmall => write!(f, "the ground is too small for rows of props"),
        }
    }
}

/// The centre and pile (its index: the prop's kind) of each of `count` props: the scene's
/// pile bodies in scene order, then rows of the piles' shapes in turn, [`ROW_SPACING`] apart,
/// on a band [`ROW_BAND`] deep along the ground's far (+z) edge, layer above layer.
///
/// # Errors
/// [`LayoutError`] for a scene without piles, with more than 256, more than [`MAX_PROPS`]
/// props, or a ground narrower than 5 m when rows are needed.
pub fn prop_layout(scene: &Scene, count: u32) -> Result<Vec<(Vec3, usize)>, LayoutError> {
    if scene.piles.is_empty() {
        return Err(LayoutError::NoPiles);
    }
    if scene.piles.len() > 256 {
        return Err(LayoutError::TooManyPiles(scene.piles.len()));
    }
    if count > MAX_PROPS {
        return Err(LayoutError::TooManyProps(count));
    }
    let count = count as usize;
    let mut props: Vec<(Vec3, usize)> = scene
        .piles
        .iter()
        .enumerate()
        .flat_map(|(i, pile)| pile.positions().map(move |p| (Vec3::from_array(p), i)))
        .take(count)
        .collect();
    if props.len() == count {
        return Ok(props);
    }
    let g = &scene.ground;
    let width = g.size[0] - 4.0;
    let depth = ROW_BAND.min(g.size[2] - 4.0);
    if width < 1.0 || depth < 1.0 {
        return Err(LayoutError::GroundTooSmall);
    }
    let per_row = (width / ROW_SPACING) as usize + 1;
    let rows = (depth / ROW_SPACING) as usize + 1;
    let corner = Vec3::new(
        g.center[0] - g.size[0] / 2.0 + 2.0,
        g.center[1] + g.size[1] / 2.0 + ROW_SPACING / 2.0,
        g.center[2] + g.size[2] / 2.0 - 2.0 - depth,
    );
    let piles = scene.piles.len();
    for n in 0..count - props.len() {
        let (layer, in_layer) = (n / (per_row * rows), n % (per_row * rows));
        let offset = Vec3::new(
            (in_layer % per_row) as f32,
            layer as f32,
            (in_layer / per_row) as f32,
        ) * ROW_SPACING;
        props.push((corner + offset, n % piles));
    }
    Ok(props)
}

/// The proxy shape of each prop kind (pile index), for the players' worlds.
pub fn prop_shapes(scene: &Scene) -> Vec<Collider> {
    scene
        .piles
        .iter()
        .map(|pile| match pile.shape {
            Shape::Box { size } => Collider::cuboid(size[0] / 2.0, size[1] / 2.0, size[2] / 2.0),
            Shape::Ball { radius } => Collider::ball(radius),
        })
        .collect()
}

/// The players' scene: `scene` without its piles (ground, ramps and player spawns).
pub fn players_scene(scene: &Scene) -> Scene {
    Scene {
        piles: Vec::new(),
        ..scene.clone()
    }
}
