//! The checks of a loaded snapshot's collider shapes ([snapshots are untrusted
//! input](crate::rules#snapshots-are-untrusted-input)), and of parry's bounding-volume trees.
//!
//! A shape comes out of a snapshot through serde (parry's `SharedShape`), which trusts every
//! field: a triangle mesh whose indices pass its vertex count, whose tree names triangles it
//! does not have, a compound holding a compound, a heightfield whose heights are not its
//! dimensions, a negative or infinite radius. Parry and Rapier index with these values later,
//! inside a step. Each shape is checked here, through its serde form ([`Node`]), against its
//! primary data:
//! - sizes (ball and capsule radii, cuboid half extents, cylinder and cone dimensions, round
//!   borders) finite and not negative; points, vertices, heights, poses and scales finite;
//! - a triangle mesh or polyline: at least one element, every index below the vertex count, its
//!   tree's leaves its elements; a mesh's pseudo-normals, half-edge topology and connected
//!   components sized by and pointing into its vertices and triangles;
//! - a heightfield: at least 2 × 2 heights, its data its dimensions, its cell status one less
//!   in each, its triangle count twice its cells;
//! - a compound: at least one part, no composite part (parry forbids nesting), each part
//!   checked, one bounding box per part, its tree's leaves its parts;
//! - a convex polyhedron: one vertex per point, every adjacency range and index in bounds;
//! - voxels: a positive voxel size, chunk keys, headers, free chunks and tree pointing into
//!   its chunks, every voxel state a known one.
//!
//! A tree ([`check_bvh`]) is parry's `Bvh`, shared by shapes and the broad phase.
//! Nothing is rebuilt: a shape that passes is the captured one, bit for bit.

use super::serde_tree::Node;

/// `u32::MAX`: parry's "none" index.
const NONE: u64 = u32::MAX as u64;

/// The voxel states parry knows in 3D (`FACES_TO_VOXEL_TYPES` has 65 entries).
const VOXEL_STATES: u64 = 65;

/// Voxels in one chunk (a chunk's header counts at most these).
const VOXELS_PER_CHUNK: u64 = 512;

/// Checks one shape: `shape` is the serde form of a `SharedShape` (a `TypedShape` variant).
///
/// # Errors
/// The first broken rule, naming the shape kind.
pub(crate) fn check_shape(shape: &Node) -> Result<(), String> {
    check_shape_in(shape, true)
}

/// Checks `shape`; a composite shape is refused unless `composite` (a compound's parts).
fn check_shape_in(shape: &Node, composite: bool) -> Result<(), String> {
    let (kind, s) = shape.variant()?;
    let at = |e: String| format!("{kind}: {e}");
    if !composite
        && matches!(
            kind,
            "TriMesh" | "Polyline" | "HeightField" | "Compound" | "Voxels"
        )
    {
        return Err(at("a composite shape inside a compound".into()));
    }
    match kind {
        "Ball" => sizes("radius", s.field("radius")?),
        "Cuboid" => sizes("half extents", s.field("half_extents")?),
        "Capsule" => {
            finite("segment", s.field("segment")?).and_then(|_| sizes("radius", s.field("radius")?))
        }
        "Segment" | "Triangle" | "HalfSpace" => finite("points", s),
        "Cylinder" | "Cone" => sizes("dimensions", s),
        "RoundCuboid"
        | "RoundTriangle"
        | "RoundCylinder"
        | "RoundCone"
        | "RoundConvexPolyhedron" => check_round(kind, s),
        "TriMesh" => check_trimesh(s),
        "Polyline" => check_polyline(s),
        "HeightField" => check_heightfield(s),
        "Compound" => check_compound(s),
        "ConvexPolyhedron" => check_convex_polyhedron(s),
        "Voxels" => check_voxels(s),
        other => Err(format!("an unknown shape {other}")),
    }
    .map_err(at)
}

/// A round shape: its border a size, its inner shape checked like the plain one.
fn check_round(kind: &str, s: &Node) -> Result<(), String> {
    sizes("border radius", s.field("border_radius")?)?;
    let inner = s.field("inner_shape")?;
    match kind {
        "RoundTriangle" => finite("points", inner),
        "RoundConvexPolyhedron" => check_convex_polyhedron(inner),
        _ => sizes("dimensions", inner),
    }
}

// --- Values ---------------------------------------------------------------------------------------

/// Every float of `node` is finite.
fn finite(what: &str, node: &Node) -> Result<(), String> {
    let mut bad = None;
    node.floats(&mut |v| {
        if !v.is_finite() {
            bad.get_or_insert(v);
        }
    });
    match bad {
        Some(v) => Err(format!("{what}: a value of {v}")),
        None => Ok(()),
    }
}

/// Every float of `node` is finite and not negative.
fn sizes(what: &str, node: &Node) -> Result<(), String> {
    let mut bad = None;
    node.floats(&mut |v| {
        if !(v.is_finite() && v >= 0.0) {
            bad.get_or_insert(v);
        }
    });
    match bad {
        Some(v) => Err(format!("{what}: a size of {v}")),
        None => Ok(()),
    }
}

/// The length of a sequence field.
fn len_of(s: &Node, field: &str) -> Result<usize, String> {
    Ok(s.field(field)?.seq()?.len())
}

/// Every index in `list` (each an integer or a sequence of integers) is below `bound`, or is
/// [`NONE`] where `none_ok`.
fn indices_below(what: &str, list: &Node, bound: usize, none_ok: bool) -> Result<(), String> {
    for (i, item) in list.seq()?.iter().enumerate() {
        let values = match item {
            Node::Seq(values) => values.as_slice(),
            single => std::slice::from_ref(single),
        };
        for v in values {
            let v = v.uint()?;
            if v >= bound as u64 && !(none_ok && v == NONE) {
                return Err(format!("{what} {i} names {v}, out of {bound}"));
            }
        }
    }
    Ok(())
}

/// `field`'s sequence has `expected` elements.
fn sized(s: &Node, field: &str, expected: usize) -> Result<(), String> {
    let n = len_of(s, field)?;
    if n != expected {
        return Err(format!("{field}: {n} entries for {expected}"));
    }
    Ok(())
}

// --- Meshes ---------------------------------------------------------------------------------------

/// A triangle mesh: its vertices, triangles, tree and optional derived data.
fn check_trimesh(s: &Node) -> Result<(), String> {
    let vertices = len_of(s, "vertices")?;
    let triangles = len_of(s, "indices")?;
    finite("vertices", s.field("vertices")?)?;
    if triangles == 0 {
        return Err("no triangles".into());
    }
    indices_below("triangle", s.field("indices")?, vertices, false)?;
    check_bvh(s.field("bvh")?, |leaf| leaf < triangles as u64).map_err(|e| format!("tree: {e}"))?;
    if let Some(normals) = s.field("pseudo_normals")?.option()? {
        sized(normals, "vertices_pseudo_normal", vertices)?;
        sized(normals, "edges_pseudo_normal", triangles)?;
    }
    if let Some(topology) = s.field("topology")?.option()? {
        check_topology(topology, vertices, triangles)?;
    }
    if let Some(components) = s.field("connected_components")?.option()? {
        check_components(components, triangles)?;
    }
    Ok(())
}

/// A triangle mesh's half-edge topology: one entry per vertex and triangle, every link in bounds
/// (a vertex without an edge and an edge without a twin are `NONE`).
fn check_topology(t: &Node, vertices: usize, triangles: usize) -> Result<(), String> {
    sized(t, "vertices", vertices)?;
    sized(t, "faces", triangles)?;
    let half_edges = len_of(t, "half_edges")?;
    let heads = |field: &str, none_ok: bool| -> Result<(), String> {
        for (i, v) in t.field(field)?.seq()?.iter().enumerate() {
            let e = v.field("half_edge")?.uint()?;
            if e >= half_edges as u64 && !(none_ok && e == NONE) {
                return Err(format!(
                    "topology {field} {i}: half-edge {e} out of {half_edges}"
                ));
            }
        }
        Ok(())
    };
    heads("vertices", true)?;
    heads("faces", false)?;
    for (i, e) in t.field("half_edges")?.seq()?.iter().enumerate() {
        for (field, bound, none_ok) in [
            ("next", half_edges, false),
            ("twin", half_edges, true),
            ("vertex", vertices, false),
            ("face", triangles, false),
        ] {
            let v = e.field(field)?.uint()?;
            if v >= bound as u64 && !(none_ok && v == NONE) {
                return Err(format!("half-edge {i}: {field} {v} out of {bound}"));
            }
        }
    }
    Ok(())
}

/// A triangle mesh's connected components: a color per triangle, each a component; the
/// triangles grouped by ranges that start at 0, never decrease and end at the triangle count.
fn check_components(c: &Node, triangles: usize) -> Result<(), String> {
    let ranges: Vec<u64> = c
        .field("ranges")?
        .seq()?
        .iter()
        .map(Node::uint)
        .collect::<Result<_, _>>()?;
    let sorted = ranges.windows(2).all(|w| w[0] <= w[1]);
    if ranges.first() != Some(&0) || !sorted || ranges.last() != Some(&(triangles as u64)) {
        return Err("component ranges do not cover the triangles in order".into());
    }
    sized(c, "face_colors", triangles)?;
    sized(c, "grouped_faces", triangles)?;
    indices_below(
        "face color",
        c.field("face_colors")?,
        ranges.len() - 1,
        false,
    )?;
    indices_below("grouped face", c.field("grouped_faces")?, triangles, false)
}

/// A polyline: its vertices, segments and tree (its pseudo-normals exist in 2D only).
fn check_polyline(s: &Node) -> Result<(), String> {
    let vertices = len_of(s, "vertices")?;
    let segments = len_of(s, "indices")?;
    finite("vertices", s.field("vertices")?)?;
    if segments == 0 {
        return Err("no segments".into());
    }
    indices_below("segment", s.field("indices")?, vertices, false)?;
    check_bvh(s.field("bvh")?, |leaf| leaf < segments as u64).map_err(|e| format!("tree: {e}"))?;
    Ok(())
}

/// An `Array2`'s rows and columns, checked against its data's length.
fn array2(a: &Node) -> Result<(u64, u64), String> {
    let (rows, cols) = (a.field("nrows")?.uint()?, a.field("ncols")?.uint()?);
    let len = len_of(a, "data")? as u64;
    if rows.checked_mul(cols) != Some(len) {
        return Err(format!("a {rows} × {cols} array holding {len} values"));
    }
    Ok((rows, cols))
}

/// A heightfield: at least 2 × 2 finite heights, a status per cell, two triangles per cell.
fn check_heightfield(s: &Node) -> Result<(), String> {
    let (rows, cols) = array2(s.field("heights")?).map_err(|e| format!("heights: {e}"))?;
    if rows < 2 || cols < 2 {
        return Err(format!("{rows} × {cols} heights, fewer than 2 × 2"));
    }
    let status = array2(s.field("status")?).map_err(|e| format!("cell status: {e}"))?;
    if status != (rows - 1, cols - 1) {
        return Err(format!(
            "{status:?} cell statuses for {rows} × {cols} heights"
        ));
    }
    let triangles = s.field("num_triangles")?.uint()?;
    if triangles != (rows - 1) * (cols - 1) * 2 {
        return Err(format!("{triangles} triangles for {rows} × {cols} heights"));
    }
    finite("heights", s.field("heights")?)?;
    finite("scale", s.field("scale")?)?;
    finite("bounding box", s.field("aabb")?)
}

/// A compound: its parts (none composite, each checked), their boxes and tree.
fn check_compound(s: &Node) -> Result<(), String> {
    let parts = s.field("shapes")?.seq()?;
    if parts.is_empty() {
        return Err("no parts".into());
    }
    for (i, part) in parts.iter().enumerate() {
        let [pose, shape] = part.seq()? else {
            return Err(format!("part {i} is not a pose and a shape"));
        };
        finite("pose", pose)
            .and_then(|_| check_shape_in(shape, false))
            .map_err(|e| format!("part {i}: {e}"))?;
    }
    sized(s, "aabbs", parts.len())?;
    let n = parts.len() as u64;
    check_bvh(s.field("bvh")?, |leaf| leaf < n).map_err(|e| format!("tree: {e}"))?;
    if let Some(normals) = s.field("pseudo_normals")?.option()?
        && normals.seq()?.len() != parts.len()
    {
        return Err("pseudo-normals are not one per part".into());
    }
    Ok(())
}

/// A convex polyhedron: a vertex per point, every adjacency range and index in bounds.
fn check_convex_polyhedron(s: &Node) -> Result<(), String> {
    let points = len_of(s, "points")?;
    finite("points", s.field("points")?)?;
    if points == 0 {
        return Err("no points".into());
    }
    sized(s, "vertices", points)?;
    let faces = len_of(s, "faces")?;
    let edges = len_of(s, "edges")?;
    check_adjacency_ranges(
        s,
        "vertices",
        ["first_adj_face_or_edge", "num_adj_faces_or_edge"],
        ["faces_adj_to_vertex", "edges_adj_to_vertex"],
    )?;
    check_adjacency_ranges(
        s,
        "faces",
        ["first_vertex_or_edge", "num_vertices_or_edges"],
        ["vertices_adj_to_face", "edges_adj_to_face"],
    )?;
    check_adjacency_indices(s, points, faces, edges)
}

/// Every entry of a polyhedron's `list` (its vertices or faces) names a range (`[first,
/// count]` fields) that ends within both of its adjacency `tables`.
fn check_adjacency_ranges(
    s: &Node,
    list: &str,
    [first, count]: [&str; 2],
    tables: [&str; 2],
) -> Result<(), String> {
    let bound = len_of(s, tables[0])?.min(len_of(s, tables[1])?) as u64;
    for (i, v) in s.field(list)?.seq()?.iter().enumerate() {
        let end = v.field(first)?.uint()? + v.field(count)?.uint()?;
        if end > bound {
            return Err(format!(
                "{list} {i}: adjacency range ends at {end}, out of {bound}"
            ));
        }
    }
    Ok(())
}

/// A polyhedron's edges name existing vertices and faces, and its adjacency tables existing
/// faces, edges and vertices (`points`, `faces`, `edges`: how many there are).
fn check_adjacency_indices(
    s: &Node,
    points: usize,
    faces: usize,
    edges: usize,
) -> Result<(), String> {
    for (i, e) in s.field("edges")?.seq()?.iter().enumerate() {
        indices_below("vertex", e.field("vertices")?, points, false)
            .and_then(|_| indices_below("face", e.field("faces")?, faces, false))
            .map_err(|err| format!("edge {i}: {err}"))?;
    }
    for (table, bound) in [
        ("faces_adj_to_vertex", faces),
        ("edges_adj_to_vertex", edges),
        ("edges_adj_to_face", edges),
        ("vertices_adj_to_face", points),
    ] {
        indices_below(table, s.field(table)?, bound, false)?;
    }
    Ok(())
}

/// Voxels: a positive voxel size; chunk keys, headers, free chunks and tree pointing into the
/// chunks; every voxel state one parry knows.
fn check_voxels(s: &Node) -> Result<(), String> {
    let size = s.field("voxel_size")?;
    let mut positive = true;
    size.floats(&mut |v| positive &= v.is_finite() && v > 0.0);
    if !positive {
        return Err("a voxel size not finite and positive".into());
    }
    let chunks = s.field("chunks")?.seq()?;
    let keys = s.field("chunk_keys")?.seq()?;
    if keys.len() != chunks.len() {
        return Err(format!(
            "{} chunk keys for {} chunks",
            keys.len(),
            chunks.len()
        ));
    }
    let Node::Map(headers) = s.field("chunk_headers")? else {
        return Err("chunk headers are not a map".into());
    };
    for (key, header) in headers {
        let id = header.field("id")?.uint()?;
        if keys.get(id as usize) != Some(key) || header.field("len")?.uint()? > VOXELS_PER_CHUNK {
            return Err(format!(
                "chunk header {id}: not its chunk's key, or too many voxels"
            ));
        }
    }
    indices_below("free chunk", s.field("free_chunks")?, chunks.len(), false)?;
    let n = chunks.len() as u64;
    check_bvh(s.field("chunk_bvh")?, |leaf| leaf < n).map_err(|e| format!("chunk tree: {e}"))?;
    for (i, chunk) in chunks.iter().enumerate() {
        for state in chunk.field("states")?.seq()? {
            if state.uint()? >= VOXEL_STATES {
                return Err(format!("chunk {i}: an unknown voxel state"));
            }
        }
    }
    Ok(())
}

// --- Contact workspaces ---------------------------------------------------------------------------

/// Checks the contact workspace of a contact pair holding `manifolds` manifolds: parry keeps
/// one per pair of a composite shape (its triangles or parts that touch), and indexes the
/// pair's manifolds with it. A triangle mesh's workspace has at most one interference per
/// manifold; every other kind's sub-detectors name existing manifolds. (A workspace of another
/// kind than the pair's shapes ask for is replaced by parry, not read.)
///
/// # Errors
/// The first broken rule.
pub(crate) fn check_contact_workspace(workspace: &Node, manifolds: usize) -> Result<(), String> {
    let (kind, w) = workspace.variant()?;
    if kind == "TriMeshShapeContactManifoldsWorkspace" {
        let n = len_of(w, "interferences")?;
        if n > manifolds {
            return Err(format!("{n} mesh interferences for {manifolds} manifolds"));
        }
        return Ok(());
    }
    let Node::Map(detectors) = w.field("sub_detectors")? else {
        return Err(format!("{kind}: sub-detectors are not a map"));
    };
    for (_, detector) in detectors {
        let id = detector.field("manifold_id")?.uint()?;
        if id >= manifolds as u64 {
            return Err(format!("{kind}: manifold {id} of {manifolds}"));
        }
    }
    Ok(())
}

// --- Trees ----------------------------------------------------------------------------------------

/// Checks a parry `Bvh` (the serde form `tree`): its leaf map and parents the size of its nodes,
/// every child in bounds and reached once from the root, each parent index pointing back, leaf
/// counts adding up, every leaf accepted by `leaf_ok` and placed where the leaf map says, every
/// free node unused. Returns the leaf map (a leaf's node index, by leaf).
///
/// # Errors
/// The first broken rule.
pub(crate) fn check_bvh(
    tree: &Node,
    leaf_ok: impl Fn(u64) -> bool,
) -> Result<Vec<Option<u64>>, String> {
    let nodes = tree.field("nodes")?.seq()?;
    let parents: Vec<u64> = tree
        .field("parents")?
        .seq()?
        .iter()
        .map(|p| p.uint())
        .collect::<Result<_, _>>()?;
    let leaves = tree.field("leaf_node_indices")?;
    let leaf_slots: Vec<Option<u64>> = leaves
        .field("v")?
        .seq()?
        .iter()
        .map(|s| s.option()?.map(Node::uint).transpose())
        .collect::<Result<_, _>>()?;
    let mapped = leaf_slots.iter().flatten().count();
    if leaves.field("n")?.uint()? != mapped as u64 {
        return Err("leaf map length differs from its leaves".into());
    }
    if parents.len() != nodes.len() {
        return Err(format!(
            "{} parents for {} nodes",
            parents.len(),
            nodes.len()
        ));
    }
    let (reached, leaves_found) = walk_bvh(nodes, &parents, &leaf_slots, &leaf_ok)?;
    if leaves_found != mapped {
        return Err("the leaf map names leaves the tree does not hold".into());
    }
    for free in tree.field("free_wide_nodes")?.seq()? {
        let f = free.uint()? as usize;
        if f >= nodes.len() || reached[f] {
            return Err(format!("free node {f} is out of bounds or in use"));
        }
    }
    Ok(leaf_slots)
}

/// A node's leaf count (the low 30 bits of its data).
fn leaf_count(node: &Node) -> Result<u64, String> {
    Ok(node.field("data")?.uint()? & 0x3fff_ffff)
}

/// Walks a tree from its root (see [`check_bvh`]). Returns the reached wide nodes and the
/// number of leaves.
fn walk_bvh(
    nodes: &[Node],
    parents: &[u64],
    leaf_slots: &[Option<u64>],
    leaf_ok: &impl Fn(u64) -> bool,
) -> Result<(Vec<bool>, usize), String> {
    let mut reached = vec![false; nodes.len()];
    let mut leaves_found = 0usize;
    let mut stack = Vec::new();
    if !nodes.is_empty() {
        stack.push(0usize);
        reached[0] = true;
    }
    while let Some(wide) = stack.pop() {
        for (side, child) in [("left", 0usize), ("right", 1)] {
            let node = nodes[wide].field(side)?;
            let count = leaf_count(node)?;
            let children = node.field("children")?.uint()?;
            let here = (wide * 2 + child) as u64;
            match count {
                0 if wide == 0 && child == 1 => {}
                0 => return Err(format!("empty node {here} below the root")),
                1 => {
                    if leaf_slots.get(children as usize).copied().flatten() != Some(here) {
                        return Err(format!(
                            "leaf {children} at node {here}: not in the leaf map"
                        ));
                    }
                    if !leaf_ok(children) {
                        return Err(format!("leaf {children} names nothing the tree indexes"));
                    }
                    leaves_found += 1;
                }
                _ => {
                    let c = children as usize;
                    if c >= nodes.len() || std::mem::replace(&mut reached[c], true) {
                        return Err(format!(
                            "node {here} has child {c}: out of bounds or reached twice"
                        ));
                    }
                    if parents[c] != here {
                        return Err(format!("node {c}: its parent is not {here}"));
                    }
                    let sum = leaf_count(nodes[c].field("left")?)?
                        + leaf_count(nodes[c].field("right")?)?;
                    if sum != count {
                        return Err(format!(
                            "node {here} counts {count} leaves, its children {sum}"
                        ));
                    }
                    stack.push(c);
                }
            }
        }
    }
    Ok((reached, leaves_found))
}

#[cfg(test)]
mod tests {
    use bevy::math::{IVec3, Quat, Vec3};
    use bevy_rapier3d::prelude::Collider;
    use bevy_rapier3d::rapier::prelude::TriMeshFlags;

    use super::*;
    use crate::snapshot::serde_tree::to_tree;

    fn tree(collider: &Collider) -> Node {
        to_tree(&collider.raw).expect("a shape serializes")
    }

    /// A tetrahedron's 4 vertices and 4 triangles (closed, consistently oriented).
    fn tetrahedron() -> (Vec<Vec3>, Vec<[u32; 3]>) {
        let v = vec![Vec3::ZERO, Vec3::X, Vec3::Y, Vec3::Z];
        (v, vec![[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    }

    fn trimesh(flags: TriMeshFlags) -> Node {
        let (v, i) = tetrahedron();
        tree(&Collider::trimesh_with_flags(v, i, flags).expect("a valid mesh"))
    }

    fn all_mesh_data() -> Node {
        trimesh(
            TriMeshFlags::HALF_EDGE_TOPOLOGY
                | TriMeshFlags::CONNECTED_COMPONENTS
                | TriMeshFlags::ORIENTED,
        )
    }

    fn compound() -> Node {
        tree(&Collider::compound(vec![
            (Vec3::ZERO, Quat::IDENTITY, Collider::ball(0.5)),
            (Vec3::X, Quat::IDENTITY, Collider::cuboid(0.5, 0.5, 0.5)),
            (Vec3::Y, Quat::IDENTITY, Collider::capsule_y(0.5, 0.2)),
        ]))
    }

    fn heightfield() -> Node {
        tree(&Collider::heightfield(vec![0.0; 9], 3, 3, Vec3::ONE))
    }

    fn hull() -> Node {
        let (points, _) = tetrahedron();
        tree(&Collider::convex_hull(&points).expect("a hull"))
    }

    fn voxels() -> Node {
        tree(&Collider::voxels(
            Vec3::ONE,
            &[IVec3::ZERO, IVec3::X, IVec3::new(9, 0, 0)],
        ))
    }

    fn polyline() -> Node {
        tree(&Collider::polyline(
            vec![Vec3::ZERO, Vec3::X, Vec3::Y],
            None,
        ))
    }

    fn refused(node: &Node) -> String {
        check_shape(node).expect_err("refused")
    }

    #[test]
    fn every_shape_kind_built_by_parry_passes() {
        let (points, _) = tetrahedron();
        let shapes = [
            tree(&Collider::ball(0.5)),
            tree(&Collider::cuboid(1.0, 2.0, 3.0)),
            tree(&Collider::capsule_y(1.0, 0.5)),
            tree(&Collider::cylinder(1.0, 0.5)),
            tree(&Collider::cone(1.0, 0.5)),
            tree(&Collider::round_cuboid(1.0, 1.0, 1.0, 0.1)),
            tree(&Collider::round_cylinder(1.0, 0.5, 0.1)),
            tree(&Collider::round_cone(1.0, 0.5, 0.1)),
            tree(&Collider::round_convex_hull(&points, 0.1).expect("a hull")),
            tree(&Collider::segment(Vec3::ZERO, Vec3::X)),
            tree(&Collider::triangle(Vec3::ZERO, Vec3::X, Vec3::Y)),
            tree(&Collider::round_triangle(Vec3::ZERO, Vec3::X, Vec3::Y, 0.1)),
            tree(&Collider::halfspace(Vec3::Y).expect("a normal")),
            trimesh(TriMeshFlags::empty()),
            all_mesh_data(),
            trimesh(TriMeshFlags::FIX_INTERNAL_EDGES),
            polyline(),
            heightfield(),
            compound(),
            hull(),
            voxels(),
        ];
        for shape in &shapes {
            assert_eq!(check_shape(shape), Ok(()), "{shape:?}");
        }
    }

    #[test]
    fn a_negative_or_non_finite_size_is_refused() {
        let mut ball = tree(&Collider::ball(0.5));
        *ball.at_mut("radius") = Node::Float(-1.0);
        assert!(refused(&ball).contains("radius"));
        let mut cuboid = tree(&Collider::cuboid(1.0, 1.0, 1.0));
        *cuboid.at_mut("half_extents.1") = Node::Float(f64::INFINITY);
        assert!(refused(&cuboid).contains("half extents"));
        let mut capsule = tree(&Collider::capsule_y(1.0, 0.5));
        *capsule.at_mut("radius") = Node::Float(f64::NAN);
        assert!(refused(&capsule).contains("radius"));
        let mut round = tree(&Collider::round_cuboid(1.0, 1.0, 1.0, 0.1));
        *round.at_mut("border_radius") = Node::Float(-0.1);
        assert!(refused(&round).contains("border radius"));
    }

    #[test]
    fn a_non_finite_vertex_or_point_is_refused() {
        let mut mesh = trimesh(TriMeshFlags::empty());
        *mesh.at_mut("vertices.2.0") = Node::Float(f64::INFINITY);
        assert!(refused(&mesh).contains("vertices"));
        let mut segment = tree(&Collider::segment(Vec3::ZERO, Vec3::X));
        *segment.at_mut("b.1") = Node::Float(f64::NEG_INFINITY);
        assert!(refused(&segment).contains("points"));
    }

    #[test]
    fn a_triangle_index_past_the_vertices_is_refused() {
        let mut mesh = trimesh(TriMeshFlags::empty());
        *mesh.at_mut("indices.3.2") = Node::Uint(4);
        assert!(refused(&mesh).contains("triangle 3 names 4, out of 4"));
    }

    #[test]
    fn a_mesh_without_triangles_is_refused() {
        let mut mesh = trimesh(TriMeshFlags::empty());
        *mesh.at_mut("indices") = Node::Seq(vec![]);
        assert!(refused(&mesh).contains("no triangles"));
    }

    #[test]
    fn a_tree_leaf_past_the_triangles_is_refused() {
        let mut mesh = trimesh(TriMeshFlags::empty());
        // Give the leaf map a slot 7 and point the tree's first leaf at it: only the leaf's
        // target is wrong.
        let bvh = mesh.at_mut("bvh").clone();
        let nodes = bvh.field("nodes").unwrap().seq().unwrap();
        let (wide, side) = (0..nodes.len())
            .flat_map(|w| [(w, "left"), (w, "right")])
            .find(|(w, s)| leaf_count(nodes[*w].field(s).unwrap()).unwrap() == 1)
            .expect("a leaf");
        let leaf = nodes[wide]
            .field(side)
            .unwrap()
            .field("children")
            .unwrap()
            .uint()
            .unwrap();
        let here = (wide * 2 + usize::from(side == "right")) as u64;
        let slots = mesh.at_mut("bvh.leaf_node_indices.v");
        let Node::Seq(slots) = slots else { panic!() };
        slots[leaf as usize] = Node::None;
        slots.resize(8, Node::None);
        slots[7] = Node::Some(Box::new(Node::Uint(here)));
        *mesh.at_mut(&format!("bvh.nodes.{wide}.{side}.children")) = Node::Uint(7);
        assert!(refused(&mesh).contains("leaf 7 names nothing"));
    }

    #[test]
    fn a_tree_child_out_of_bounds_or_its_leaf_map_wrong_is_refused() {
        let mut compound = compound();
        *compound.at_mut("bvh.nodes.0.left.children") = Node::Uint(99);
        assert!(refused(&compound).contains("tree"));
        let mut compound = self::compound();
        *compound.at_mut("bvh.leaf_node_indices.n") = Node::Uint(9);
        assert!(refused(&compound).contains("leaf map length"));
    }

    #[test]
    fn pseudo_normals_not_one_per_vertex_are_refused() {
        let mut mesh = all_mesh_data();
        let Node::Seq(normals) = mesh.at_mut("pseudo_normals.vertices_pseudo_normal") else {
            panic!()
        };
        normals.pop();
        assert!(refused(&mesh).contains("vertices_pseudo_normal: 3 entries for 4"));
    }

    #[test]
    fn a_half_edge_link_out_of_bounds_is_refused() {
        let mut mesh = all_mesh_data();
        *mesh.at_mut("topology.half_edges.5.next") = Node::Uint(1000);
        assert!(refused(&mesh).contains("half-edge 5: next 1000"));
        let mut mesh = all_mesh_data();
        *mesh.at_mut("topology.faces.0.half_edge") = Node::Uint(NONE);
        assert!(refused(&mesh).contains("topology faces 0"));
    }

    #[test]
    fn connected_components_out_of_order_or_bounds_are_refused() {
        let mut mesh = all_mesh_data();
        *mesh.at_mut("connected_components.ranges.1") = Node::Uint(5);
        assert!(refused(&mesh).contains("component ranges"));
        let mut mesh = all_mesh_data();
        *mesh.at_mut("connected_components.grouped_faces.2") = Node::Uint(4);
        assert!(refused(&mesh).contains("grouped face 2"));
    }

    #[test]
    fn a_polyline_segment_past_its_vertices_is_refused() {
        let mut line = polyline();
        *line.at_mut("indices.0.1") = Node::Uint(3);
        assert!(refused(&line).contains("segment 0 names 3"));
    }

    #[test]
    fn heightfield_heights_not_their_dimensions_are_refused() {
        let mut field = heightfield();
        *field.at_mut("heights.nrows") = Node::Uint(4);
        assert!(refused(&field).contains("heights: a 4 × 3 array holding 9"));
        let mut field = heightfield();
        *field.at_mut("status.ncols") = Node::Uint(1);
        *field.at_mut("status.nrows") = Node::Uint(4);
        assert!(refused(&field).contains("cell statuses"));
        let mut field = heightfield();
        *field.at_mut("num_triangles") = Node::Uint(9);
        assert!(refused(&field).contains("9 triangles"));
    }

    #[test]
    fn a_heightfield_smaller_than_two_by_two_is_refused() {
        let mut field = heightfield();
        *field.at_mut("heights.nrows") = Node::Uint(1);
        *field.at_mut("heights.ncols") = Node::Uint(9);
        assert!(refused(&field).contains("fewer than 2 × 2"));
    }

    #[test]
    fn a_compound_nesting_a_composite_shape_is_refused() {
        let mut compound = compound();
        *compound.at_mut("shapes.1.1") = trimesh(TriMeshFlags::empty());
        assert!(refused(&compound).contains("a composite shape inside a compound"));
    }

    #[test]
    fn a_compound_part_is_checked_like_a_shape() {
        let mut compound = compound();
        *compound.at_mut("shapes.0.1.radius") = Node::Float(-2.0);
        assert!(refused(&compound).contains("part 0: Ball: radius"));
    }

    #[test]
    fn a_compound_without_a_box_per_part_or_without_parts_is_refused() {
        let mut compound = compound();
        let Node::Seq(boxes) = compound.at_mut("aabbs") else {
            panic!()
        };
        boxes.pop();
        assert!(refused(&compound).contains("aabbs: 2 entries for 3"));
        let mut compound = self::compound();
        *compound.at_mut("shapes") = Node::Seq(vec![]);
        assert!(refused(&compound).contains("no parts"));
    }

    #[test]
    fn a_convex_polyhedron_adjacency_out_of_bounds_is_refused() {
        let mut hull = hull();
        *hull.at_mut("vertices.0.num_adj_faces_or_edge") = Node::Uint(1000);
        assert!(refused(&hull).contains("vertices 0: adjacency range"));
        let mut hull = self::hull();
        *hull.at_mut("edges.1.vertices.0") = Node::Uint(1000);
        assert!(refused(&hull).contains("edge 1: vertex"));
        let mut hull = self::hull();
        *hull.at_mut("vertices_adj_to_face.0") = Node::Uint(4);
        assert!(refused(&hull).contains("vertices_adj_to_face 0 names 4"));
    }

    #[test]
    fn voxels_with_an_unknown_state_or_a_stray_chunk_header_are_refused() {
        let mut grid = voxels();
        *grid.at_mut("chunks.0.states.0.0") = Node::Uint(200);
        assert!(refused(&grid).contains("unknown voxel state"));
        let mut grid = self::voxels();
        let Node::Map(headers) = grid.at_mut("chunk_headers") else {
            panic!()
        };
        *headers[0].1.at_mut("id") = Node::Uint(50);
        assert!(refused(&grid).contains("chunk header 50"));
        let mut grid = self::voxels();
        *grid.at_mut("voxel_size.0") = Node::Float(0.0);
        assert!(refused(&grid).contains("voxel size"));
    }

    fn workspace(kind: &'static str, payload: Vec<(&'static str, Node)>) -> Node {
        Node::Variant(
            "TypedWorkspaceData",
            kind,
            Box::new(Node::Struct(kind, payload)),
        )
    }

    fn detectors(manifold_ids: &[u64]) -> Node {
        let detector = |id: u64| {
            Node::Struct(
                "SubDetector",
                vec![
                    ("manifold_id", Node::Uint(id)),
                    ("timestamp", Node::Bool(true)),
                ],
            )
        };
        let entries = manifold_ids.iter().enumerate();
        Node::Map(
            entries
                .map(|(k, id)| (Node::Uint(k as u64), detector(*id)))
                .collect(),
        )
    }

    #[test]
    fn sub_detectors_naming_a_manifold_past_the_pairs_are_refused() {
        let kind = "CompositeShapeShapeContactManifoldsWorkspace";
        let sound = workspace(kind, vec![("sub_detectors", detectors(&[0, 1]))]);
        assert_eq!(check_contact_workspace(&sound, 2), Ok(()));
        let forged = workspace(kind, vec![("sub_detectors", detectors(&[0, 2]))]);
        let e = check_contact_workspace(&forged, 2).expect_err("refused");
        assert!(e.contains("manifold 2 of 2"), "{e}");
    }

    #[test]
    fn mesh_interferences_past_the_pairs_manifolds_are_refused() {
        let kind = "TriMeshShapeContactManifoldsWorkspace";
        let ids = |n: u64| Node::Seq((0..n).map(Node::Uint).collect());
        let sound = workspace(kind, vec![("interferences", ids(3))]);
        assert_eq!(check_contact_workspace(&sound, 3), Ok(()));
        let e = check_contact_workspace(&sound, 2).expect_err("refused");
        assert!(e.contains("3 mesh interferences for 2 manifolds"), "{e}");
    }
}
