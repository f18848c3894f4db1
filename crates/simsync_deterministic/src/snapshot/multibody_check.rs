//! The checks of one loaded multibody ([snapshots are untrusted
//! input](crate::rules#snapshots-are-untrusted-input)): its links and the sizes of its buffers,
//! read through its serde form ([`Node`]).
//!
//! Rapier walks a multibody's links by index (each link's parent before it), places each link's
//! degrees of freedom at its assembly id in the multibody's generalized vectors and matrices,
//! and reuses its mass matrices, their factorizations and the Coriolis buffers while their size
//! matches the degrees of freedom. What is checked:
//! - at least one link; link `i` has internal id `i`, a parent before it (the root's is not
//!   read) and the assembly id that is the sum of the degrees of freedom before it; each joint's
//!   axis masks name only the 6 axes (a joint's degrees of freedom are the unlocked ones);
//! - the multibody's degree-of-freedom count is their sum, and its velocity, damping, armature,
//!   friction and acceleration vectors have that length; a Jacobian and a workspace
//!   acceleration for each link;
//! - the mass matrices: when sized for the degrees of freedom, square (both of them); each
//!   factorization square with its permutation inside it; the kinematic index map inside the
//!   degrees of freedom;
//! - the Coriolis buffers: when sized for the links and degrees of freedom, all of them;
//! - every coupling between two links' degrees of freedom names existing links, degrees of
//!   freedom and axes.
//!
//! The references between a multibody and the other sets (its bodies, the body-to-link map, the
//! connectivity graph) are checked by [`rapier_check`](super::rapier_check).

use super::serde_tree::Node;

/// Rapier's "none" index (`u32::MAX`).
const NONE: u64 = u32::MAX as u64;

/// Degrees of freedom of a free 3D joint (3 linear, 3 angular).
const SPATIAL_DIM: u64 = 6;

/// Checks one `Multibody`; returns its links' rigid-body handles (serde forms), in link order.
///
/// # Errors
/// The first broken rule.
pub(crate) fn check_multibody(mb: &Node) -> Result<Vec<&Node>, String> {
    let links = mb.field("links")?.seq()?;
    if links.is_empty() {
        return Err("a multibody without links".into());
    }
    let dofs = check_links(links)?;
    let ndofs: u64 = dofs.iter().sum();
    let stored = mb.field("ndofs")?.uint()?;
    if stored != ndofs {
        return Err(format!(
            "{stored} degrees of freedom, its joints have {ndofs}"
        ));
    }
    check_vectors(mb, links.len() as u64, ndofs)?;
    check_mass_matrices(mb, ndofs)?;
    check_coriolis(mb, links.len() as u64, ndofs)?;
    check_couplings(mb, &dofs)?;
    links.iter().map(|l| l.field("rigid_body")).collect()
}

/// A joint's degrees of freedom: 6 less its locked axes; its axis masks name only 6 axes.
fn joint_dofs(link: &Node) -> Result<u64, String> {
    let data = link.field("joint")?.field("data")?;
    for mask in ["locked_axes", "motor_axes", "coupled_axes"] {
        let bits = data.field(mask)?.uint()?;
        if bits >> SPATIAL_DIM != 0 {
            return Err(format!("{mask} {bits:#x} names axes past the 6"));
        }
    }
    Ok(SPATIAL_DIM - u64::from(data.field("locked_axes")?.uint()?.count_ones()))
}

/// Each link's internal id, parent and assembly id; returns each link's degrees of freedom.
fn check_links(links: &[Node]) -> Result<Vec<u64>, String> {
    let mut dofs = Vec::with_capacity(links.len());
    let mut assembly = 0;
    for (i, link) in links.iter().enumerate() {
        let at = |e: String| format!("link {i}: {e}");
        let internal = link.field("internal_id")?.uint()?;
        let parent = link.field("parent_internal_id")?.uint()?;
        let assembly_id = link.field("assembly_id")?.uint()?;
        if internal != i as u64 {
            return Err(at(format!("internal id {internal}")));
        }
        if i > 0 && parent >= i as u64 {
            return Err(at(format!("parent {parent} is not a link before it")));
        }
        if assembly_id != assembly {
            return Err(at(format!(
                "assembly id {assembly_id}, {assembly} expected"
            )));
        }
        let n = joint_dofs(link).map_err(at)?;
        assembly += n;
        dofs.push(n);
    }
    Ok(dofs)
}

// --- Matrices -------------------------------------------------------------------------------------

/// A matrix read from its serde form: its elements, its dynamic row and column counts.
type Matrix<'a> = (&'a [Node], Option<u64>, Option<u64>);

/// A nalgebra matrix's serde form (its `VecStorage`: data, rows, columns): its elements, and its
/// row and column counts where they are dynamic (a static dimension is a unit in the tree).
fn matrix(m: &Node) -> Result<Matrix<'_>, String> {
    let [data, rows, cols] = m.seq()? else {
        return Err("a matrix that is not its data and dimensions".into());
    };
    Ok((data.seq()?, rows.uint().ok(), cols.uint().ok()))
}

/// A dynamic matrix's rows and columns.
fn dyn_matrix(m: &Node) -> Result<(u64, u64), String> {
    match matrix(m)? {
        (data, Some(r), Some(c)) if r.checked_mul(c) == Some(data.len() as u64) => Ok((r, c)),
        _ => Err("a matrix whose dimensions are not its data".into()),
    }
}

/// A matrix's column count (its dynamic one).
fn columns(m: &Node) -> Result<u64, String> {
    matrix(m)?
        .2
        .ok_or_else(|| "a matrix without a dynamic column count".to_string())
}

/// The generalized vectors have one entry per degree of freedom; there is a Jacobian and a
/// workspace acceleration for each link (the workspace's own vector is not read by Rapier).
fn check_vectors(mb: &Node, links: u64, ndofs: u64) -> Result<(), String> {
    let workspace = mb.field("workspace")?;
    let vectors = [
        ("velocities", mb.field("velocities")?),
        ("damping", mb.field("damping")?),
        ("armature", mb.field("armature")?),
        ("frictions", mb.field("frictions")?),
        ("accelerations", mb.field("accelerations")?),
    ];
    for (name, v) in vectors {
        let len = matrix(v)?.0.len() as u64;
        if len != ndofs {
            return Err(format!(
                "{name}: {len} entries for {ndofs} degrees of freedom"
            ));
        }
    }
    for (name, list) in [
        ("body Jacobians", mb.field("body_jacobians")?),
        ("workspace accelerations", workspace.field("accs")?),
    ] {
        let len = list.seq()?.len() as u64;
        if len < links {
            return Err(format!("{name}: {len} for {links} links"));
        }
    }
    Ok(())
}

/// The mass matrices, their factorizations and the kinematic index map.
fn check_mass_matrices(mb: &Node, ndofs: u64) -> Result<(), String> {
    let mass = dyn_matrix(mb.field("augmented_mass")?)?;
    let acc = dyn_matrix(mb.field("acc_augmented_mass")?)?;
    if mass.1 == ndofs && (mass != (ndofs, ndofs) || acc != mass) {
        return Err(format!(
            "mass matrices {mass:?} and {acc:?} for {ndofs} degrees of freedom"
        ));
    }
    for name in ["inv_augmented_mass", "acc_inv_augmented_mass"] {
        check_lu(mb.field(name)?).map_err(|e| format!("{name}: {e}"))?;
    }
    let indices = mb.field("augmented_mass_indices")?;
    let first = indices.field("first_to_remove")?.uint()?;
    if first != NONE && first > ndofs {
        return Err(format!(
            "kinematic index map starts at {first}, past {ndofs}"
        ));
    }
    for i in indices.field("index_map")?.seq()? {
        if i.uint()? >= ndofs {
            return Err("kinematic index map names a degree of freedom past the last".into());
        }
    }
    Ok(())
}

/// An LU factorization: a square matrix and a permutation of its rows.
fn check_lu(lu: &Node) -> Result<(), String> {
    let (rows, cols) = dyn_matrix(lu.field("lu")?)?;
    if rows != cols {
        return Err(format!("a {rows} × {cols} factorization"));
    }
    let p = lu.field("p")?;
    let swaps = matrix(p.field("ipiv")?)?.0;
    if swaps.len() as u64 != rows || p.field("len")?.uint()? > rows {
        return Err("a permutation not sized by its matrix".into());
    }
    for swap in swaps {
        for i in swap.seq()? {
            if i.uint()? >= rows {
                return Err("a permutation naming a row past the last".into());
            }
        }
    }
    Ok(())
}

/// The Coriolis buffers: once sized for these links and degrees of freedom, all of them are.
fn check_coriolis(mb: &Node, links: u64, ndofs: u64) -> Result<(), String> {
    let v = mb.field("coriolis_v")?.seq()?;
    let w = mb.field("coriolis_w")?.seq()?;
    let sized = v.len() as u64 == links && v.first().map(columns).transpose()? == Some(ndofs);
    if !sized {
        return Ok(()); // Rapier rebuilds them all at the next step.
    }
    let all = v.iter().chain(w).chain([mb.field("i_coriolis_dt")?]);
    for m in all {
        if columns(m)? != ndofs {
            return Err("Coriolis buffers of different sizes".into());
        }
    }
    if w.len() != v.len() {
        return Err(format!("{} and {} Coriolis buffers", v.len(), w.len()));
    }
    Ok(())
}

/// Each coupling names existing links, degrees of freedom of their joints and spatial axes.
fn check_couplings(mb: &Node, dofs: &[u64]) -> Result<(), String> {
    for (i, c) in mb.field("couplings")?.seq()?.iter().enumerate() {
        for (link, dof, axis) in [("link1", "dof1", "axis1"), ("link2", "dof2", "axis2")] {
            let l = c.field(link)?.uint()?;
            let d = c.field(dof)?.uint()?;
            let a = c.field(axis)?.uint()?;
            let ok = dofs.get(l as usize).is_some_and(|n| d < *n) && a < SPATIAL_DIM;
            if !ok {
                return Err(format!(
                    "coupling {i}: link {l}, dof {d}, axis {a} out of bounds"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bevy_rapier3d::rapier::dynamics::MultibodyDofCoupling;
    use bevy_rapier3d::rapier::prelude::*;

    use super::*;
    use crate::snapshot::serde_tree::to_tree;

    /// A fixed root, a revolute arm (1 degree of freedom) and a spherical tip (3), the tip's
    /// first degree of freedom coupled to the arm's, stepped once (every buffer sized).
    fn multibody() -> Node {
        let mut w = PhysicsWorld::new();
        let root = w.bodies.insert(RigidBodyBuilder::fixed());
        let arm = w
            .bodies
            .insert(RigidBodyBuilder::dynamic().translation(Vector::new(0.0, -1.0, 0.0)));
        let tip = w
            .bodies
            .insert(RigidBodyBuilder::dynamic().translation(Vector::new(0.0, -2.0, 0.0)));
        for body in [arm, tip] {
            w.colliders
                .insert_with_parent(ColliderBuilder::ball(0.2), body, &mut w.bodies);
        }
        let anchor = Vector::new(0.0, 1.0, 0.0);
        let revolute = RevoluteJointBuilder::new(Vector::Z).local_anchor2(anchor);
        let spherical = SphericalJointBuilder::new().local_anchor2(anchor);
        w.multibody_joints
            .insert(root, arm, revolute, true)
            .expect("a link");
        let joint = w
            .multibody_joints
            .insert(arm, tip, spherical, true)
            .expect("a link");
        let (mb, _) = w.multibody_joints.get_mut(joint).expect("the multibody");
        mb.add_dof_coupling(MultibodyDofCoupling {
            link1: 1,
            dof1: 0,
            axis1: 5,
            link2: 2,
            dof2: 0,
            axis2: 3,
            coeff: 1.0,
            offset: 0.0,
        });
        w.step();
        let mb = w
            .multibody_joints
            .multibodies()
            .next()
            .expect("one multibody");
        to_tree(mb).expect("a multibody serializes")
    }

    fn refused(mb: &Node) -> String {
        check_multibody(mb).expect_err("refused")
    }

    #[test]
    fn a_stepped_multibody_passes_and_names_its_link_bodies() {
        let mb = multibody();
        assert_eq!(mb.field("ndofs").and_then(Node::uint), Ok(4));
        assert_eq!(check_multibody(&mb).map(|links| links.len()), Ok(3));
    }

    #[test]
    fn a_multibody_without_links_is_refused() {
        let mut mb = multibody();
        *mb.at_mut("links") = Node::Seq(vec![]);
        assert!(refused(&mb).contains("without links"));
    }

    #[test]
    fn a_link_whose_internal_id_is_not_its_place_is_refused() {
        let mut mb = multibody();
        *mb.at_mut("links.1.internal_id") = Node::Uint(5);
        assert!(refused(&mb).contains("link 1: internal id 5"));
    }

    #[test]
    fn a_link_whose_parent_is_not_before_it_is_refused() {
        let mut mb = multibody();
        *mb.at_mut("links.2.parent_internal_id") = Node::Uint(2);
        assert!(refused(&mb).contains("link 2: parent 2"));
    }

    #[test]
    fn a_link_whose_assembly_id_is_not_the_dofs_before_it_is_refused() {
        let mut mb = multibody();
        *mb.at_mut("links.2.assembly_id") = Node::Uint(0);
        assert!(refused(&mb).contains("link 2: assembly id 0, 1 expected"));
    }

    #[test]
    fn a_joint_mask_naming_axes_past_the_sixth_is_refused() {
        let mut mb = multibody();
        *mb.at_mut("links.1.joint.data.locked_axes") = Node::Uint(0xff);
        assert!(refused(&mb).contains("locked_axes 0xff"));
    }

    #[test]
    fn a_dof_count_other_than_the_joints_is_refused() {
        let mut mb = multibody();
        *mb.at_mut("ndofs") = Node::Uint(9);
        assert!(refused(&mb).contains("9 degrees of freedom, its joints have 4"));
    }

    #[test]
    fn a_generalized_vector_not_sized_by_the_dofs_is_refused() {
        let mut mb = multibody();
        let Node::Seq(data) = mb.at_mut("damping.0") else {
            panic!("a sequence")
        };
        data.pop();
        assert!(refused(&mb).contains("damping: 3 entries for 4"));
    }

    #[test]
    fn jacobians_not_one_per_link_are_refused() {
        let mut mb = multibody();
        let Node::Seq(list) = mb.at_mut("body_jacobians") else {
            panic!("a sequence")
        };
        list.pop();
        assert!(refused(&mb).contains("body Jacobians: 2 for 3 links"));
    }

    #[test]
    fn mass_matrices_of_different_sizes_are_refused() {
        let mut mb = multibody();
        *mb.at_mut("acc_augmented_mass.1") = Node::Uint(2);
        *mb.at_mut("acc_augmented_mass.2") = Node::Uint(8);
        assert!(refused(&mb).contains("mass matrices"));
    }

    #[test]
    fn a_factorization_permutation_past_its_rows_is_refused() {
        let mut mb = multibody();
        *mb.at_mut("inv_augmented_mass.p.ipiv.0.0.1") = Node::Uint(99);
        assert!(refused(&mb).contains("inv_augmented_mass: a permutation naming a row"));
    }

    #[test]
    fn coriolis_buffers_of_different_sizes_are_refused() {
        let mut mb = multibody();
        *mb.at_mut("coriolis_w.1.2") = Node::Uint(2);
        assert!(refused(&mb).contains("Coriolis"));
    }

    #[test]
    fn a_coupling_past_its_links_dofs_or_axes_is_refused() {
        for (field, value) in [("link2", 3), ("dof2", 3), ("axis1", 6)] {
            let mut mb = multibody();
            *mb.at_mut(&format!("couplings.0.{field}")) = Node::Uint(value);
            assert!(refused(&mb).contains("coupling 0"), "{field}");
        }
    }
}
