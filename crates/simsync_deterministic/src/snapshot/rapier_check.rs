//! The checks of a loaded snapshot's Rapier state ([snapshots are untrusted
//! input](crate::rules#snapshots-are-untrusted-input)).
//!
//! A snapshot's hashes are FNV, not a MAC: anyone can frame changed bytes under valid hashes,
//! and Rapier trusts the indices of its own state (it indexes slices with them, some in
//! unchecked SIMD gathers). After a load, every index and count of the loaded sets is checked
//! against the sets it points into, before any system runs; a failure refuses the snapshot
//! with [`SnapshotError::InconsistentPhysics`]. Nothing is rebuilt: a loaded world that passes
//! is bit for bit the captured one, so it re-simulates exactly like the peers that never
//! reloaded.
//!
//! Rapier keeps these indices in private fields but derives `Serialize` for them: each set is
//! read through its serde form ([`serde_tree`](super::serde_tree)), by field name.
//!
//! What is checked (each set's own invariants, then the references between sets):
//! - every arena (bodies, colliders, impulse joints, multibodies): its length, free list (in
//!   bounds, free slots only, no cycle) and the generations of its handles;
//! - bodies ↔ colliders: each body's collider list and each collider's parent name each other;
//! - bodies ↔ islands: every island's bodies exist and their island ids and positions point
//!   back, the awake island exists, free island ids are exactly the vacant slots; the same for
//!   the persistent islands, their contact and joint links and the links' location tables;
//! - the contact, intersection and joint graphs: node and edge indices in bounds, each node's
//!   edge lists well linked (no cycle, every edge once per direction), node weights existing
//!   handles whose graph index points back, edge endpoints equal to the pair's handles;
//! - the solver's contact graph: buckets, edge and manifold positions and their back
//!   references, solver body indices within the awake set, the solver hints and force-event
//!   lists the length of the contact graph;
//! - the broad phase's tree ([`check_bvh`]): child, parent and leaf indices, leaf counts, every
//!   leaf an existing collider reached once, no cycle;
//! - the multibodies: each one's links and buffers ([`check_multibody`]), each link's body
//!   existing and mapped back to that link, every mapped body a link and a node of the
//!   connectivity graph naming it back;
//! - the contact workspaces of composite shapes ([`check_contact_workspace`]);
//! - every float finite or infinite, never NaN; the entity bits of bodies and colliders.
//!
//! The shapes of the colliders, in the collider set and in the `Collider` components, are
//! checked by [`check_shape`]; a bad one is refused with [`SnapshotError::InvalidShape`].

use std::collections::{BTreeSet, HashMap};

use bevy::prelude::*;
use bevy_rapier3d::plugin::context::{
    RapierContextColliders, RapierContextJoints, RapierContextSimulation, RapierRigidBodySet,
};
use serde::Serialize;

use super::format::SnapshotError;
use super::multibody_check::check_multibody;
use super::serde_tree::{Node, to_tree};
use super::shape_check::{check_bvh, check_contact_workspace, check_shape};

/// Rapier's "none" index (`u32::MAX`).
const NONE: u64 = u32::MAX as u64;

/// Checks the Rapier state of every Rapier context entity of `world` (after a load).
///
/// # Errors
/// [`SnapshotError::InconsistentPhysics`] naming the structure and the first broken rule;
/// [`SnapshotError::InvalidShape`] naming the entity of a collider whose shape is broken.
pub(crate) fn check_physics(world: &mut World) -> Result<(), SnapshotError> {
    let mut query = world.query::<(
        Entity,
        &RapierContextSimulation,
        &RapierRigidBodySet,
        &RapierContextColliders,
        &RapierContextJoints,
    )>();
    for (_, sim, bodies, colliders, joints) in query.iter(world) {
        check_context(sim, bodies, colliders, joints)?;
    }
    check_handle_components(world)?;
    check_collider_components(world)
}

fn fail(structure: &str, reason: impl Into<String>) -> SnapshotError {
    SnapshotError::InconsistentPhysics {
        structure: structure.to_string(),
        reason: reason.into(),
    }
}

fn tree_of<T: Serialize>(structure: &str, value: &T) -> Result<Node, SnapshotError> {
    let tree = to_tree(value).map_err(|e| fail(structure, e))?;
    let mut nan = false;
    tree.floats(&mut |v| nan |= v.is_nan());
    if nan {
        return Err(fail(structure, "a NaN value"));
    }
    Ok(tree)
}

/// Checks one context's sets against each other.
fn check_context(
    sim: &RapierContextSimulation,
    bodies: &RapierRigidBodySet,
    colliders: &RapierContextColliders,
    joints: &RapierContextJoints,
) -> Result<(), SnapshotError> {
    let body_tree = tree_of("rigid-body set", &bodies.bodies)?;
    let collider_tree = tree_of("collider set", &colliders.colliders)?;
    let islands = tree_of("island manager", &sim.islands)?;
    let broad_phase = tree_of("broad phase", &sim.broad_phase)?;
    let narrow_phase = tree_of("narrow phase", &sim.narrow_phase)?;
    let impulse = tree_of("impulse joint set", &joints.impulse_joints)?;
    let multibody = tree_of("multibody joint set", &joints.multibody_joints)?;
    let at = |structure: &'static str| move |reason: String| fail(structure, reason);
    let mut set =
        Sets::read(&body_tree, &collider_tree).map_err(at("rigid-body and collider sets"))?;
    set.check_links()
        .map_err(at("rigid-body and collider sets"))?;
    check_collider_shapes(&set)?;
    set.awake = check_islands(&set, &islands).map_err(at("island manager"))?;
    let awake = set.awake.len() as u64;
    check_parameters(&tree_of(
        "integration parameters",
        &sim.integration_parameters,
    )?)
    .map_err(at("integration parameters"))?;
    let epochs = Epochs::read(&islands, &multibody).map_err(at("narrow phase"))?;
    let contacts =
        check_narrow_phase(&set, &narrow_phase, awake, epochs).map_err(at("narrow phase"))?;
    let persistent = islands.field("persistent").map_err(at("island manager"))?;
    check_persistent(&set, persistent, contacts).map_err(at("persistent islands"))?;
    check_broad_phase(&set, &broad_phase).map_err(at("broad phase"))?;
    check_joints(&set, &impulse, &multibody).map_err(at("joint sets"))?;
    check_entity_maps(&set, bodies, colliders).map_err(at("entity maps"))
}

// --- Reading ------------------------------------------------------------------------------------

/// An arena handle: index and generation.
type Handle = (u32, u32);

fn u32_of(node: &Node) -> Result<u32, String> {
    let v = node.uint()?;
    u32::try_from(v).map_err(|_| format!("{v} is not a 32-bit index"))
}

fn float(node: &Node) -> Result<f64, String> {
    match node {
        Node::Float(v) => Ok(*v),
        other => Err(format!("a float expected, found {other:?}")),
    }
}

/// `ActiveEvents::CONTACT_FORCE_EVENTS`.
const CONTACT_FORCE_EVENTS: u64 = 0b10;

/// An arena handle (`Index` or a newtype of it).
fn handle(node: &Node) -> Result<Handle, String> {
    let node = unwrap_newtype(node);
    Ok((
        u32_of(node.field("index")?)?,
        u32_of(node.field("generation")?)?,
    ))
}

fn unwrap_newtype(mut node: &Node) -> &Node {
    while let Node::Struct(_, fields) = node {
        match fields.as_slice() {
            [("0", inner)] => node = inner,
            _ => break,
        }
    }
    node
}

fn opt_handle(node: &Node) -> Result<Option<Handle>, String> {
    node.option()?.map(handle).transpose()
}

fn handles(node: &Node) -> Result<Vec<Handle>, String> {
    node.seq()?.iter().map(handle).collect()
}

/// A checked arena: the generation of each occupied slot, and its value.
#[derive(Debug)]
struct Arena<'a> {
    slots: Vec<Option<(u32, &'a Node)>>,
}

impl<'a> Arena<'a> {
    /// Reads an `Arena`, checking its length and free list.
    fn read(node: &'a Node) -> Result<Self, String> {
        let items = node.field("items")?.seq()?;
        let mut slots = Vec::with_capacity(items.len());
        let mut next_free = Vec::with_capacity(items.len());
        for item in items {
            match item.variant()? {
                ("Occupied", v) => {
                    slots.push(Some((u32_of(v.field("generation")?)?, v.field("value")?)));
                    next_free.push(None);
                }
                ("Free", v) => {
                    slots.push(None);
                    next_free.push(
                        v.field("next_free")?
                            .option()?
                            .map(Node::uint)
                            .transpose()?,
                    );
                }
                (other, _) => return Err(format!("unknown arena entry {other}")),
            }
        }
        let occupied = slots.iter().flatten().count() as u64;
        let len = node.field("len")?.uint()?;
        if len != occupied {
            return Err(format!("arena length {len}, {occupied} occupied slots"));
        }
        let mut seen = vec![false; slots.len()];
        let mut next = node
            .field("free_list_head")?
            .option()?
            .map(Node::uint)
            .transpose()?;
        while let Some(i) = next {
            let i = i as usize;
            if !matches!(slots.get(i), Some(None)) {
                return Err(format!("free list names slot {i}, not a free slot"));
            }
            if std::mem::replace(&mut seen[i], true) {
                return Err(format!("free list cycles through slot {i}"));
            }
            next = next_free[i];
        }
        Ok(Self { slots })
    }

    fn get(&self, (index, generation): Handle) -> Option<&'a Node> {
        match self.slots.get(index as usize) {
            Some(Some((g, value))) if *g == generation => Some(value),
            _ => None,
        }
    }

    fn contains(&self, h: Handle) -> bool {
        self.get(h).is_some()
    }

    fn iter(&self) -> impl Iterator<Item = (Handle, &'a Node)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.map(|(g, v)| ((i as u32, g), v)))
    }
}

/// What the checks need of one rigid body.
struct Body {
    active_island: u64,
    active_set: u64,
    island: u64,
    island_index: u64,
    colliders: Vec<Handle>,
    fixed: bool,
    enabled: bool,
    sleeping: bool,
    dynamic: bool,
}

impl Body {
    fn read(node: &Node) -> Result<Self, String> {
        let ids = node.field("ids")?;
        let body_type = node.field("body_type")?.variant()?.0;
        entity_bits(node.field("user_data")?)?;
        Ok(Self {
            active_island: ids.field("active_island_id")?.uint()?,
            active_set: ids.field("active_set_id")?.uint()?,
            island: ids.field("island_id")?.uint()?,
            island_index: ids.field("island_index")?.uint()?,
            colliders: handles(node.field("colliders")?)?,
            fixed: body_type == "Fixed",
            dynamic: body_type == "Dynamic",
            enabled: node.field("enabled")?.boolean()?,
            sleeping: node.field("activation")?.field("sleeping")?.boolean()?,
        })
    }
}

/// The entity bits bevy_rapier keeps in `user_data` must make an entity.
fn entity_bits(node: &Node) -> Result<(), String> {
    match node {
        Node::Wide(v) => u64::try_from(*v)
            .ok()
            .and_then(Entity::try_from_bits)
            .map(|_| ())
            .ok_or_else(|| format!("user data {v:#x} is not an entity")),
        _ => Err("user data is not a 128-bit integer".into()),
    }
}

/// The rigid-body and collider sets, read.
struct Sets<'a> {
    body_arena: Arena<'a>,
    bodies: HashMap<Handle, Body>,
    colliders: Arena<'a>,
    parents: HashMap<Handle, Option<Handle>>,
    /// The contact force event threshold of each collider that asks for force events.
    force_thresholds: HashMap<Handle, f64>,
    /// The awake island's bodies, in order.
    awake: Vec<Handle>,
}

impl<'a> Sets<'a> {
    fn read(bodies: &'a Node, colliders: &'a Node) -> Result<Self, String> {
        let body_arena = Arena::read(bodies.field("bodies")?)?;
        let mut read = HashMap::new();
        for (h, node) in body_arena.iter() {
            read.insert(h, Body::read(node).map_err(|e| format!("body {h:?}: {e}"))?);
        }
        for h in handles(first_of(bodies.field("modified_bodies")?)?)? {
            if !body_arena.contains(h) {
                return Err(format!("modified body {h:?} does not exist"));
            }
        }
        let collider_arena = Arena::read(colliders.field("colliders")?)?;
        let mut parents = HashMap::new();
        let mut force_thresholds = HashMap::new();
        for (h, node) in collider_arena.iter() {
            entity_bits(node.field("user_data")?)?;
            let skin = float(node.field("contact_skin")?)?;
            if !(skin >= 0.0 && skin.is_finite()) {
                return Err(format!("collider {h:?} has contact skin {skin}"));
            }
            let events = node.field("flags")?.field("active_events")?.uint()?;
            if events & CONTACT_FORCE_EVENTS != 0 {
                let threshold = float(node.field("contact_force_event_threshold")?)?;
                force_thresholds.insert(h, threshold);
            }
            let parent = match node.field("parent")?.option()? {
                Some(p) => Some(handle(p.field("handle")?)?),
                None => None,
            };
            parents.insert(h, parent);
        }
        for h in handles(first_of(colliders.field("modified_colliders")?)?)? {
            if !collider_arena.contains(h) {
                return Err(format!("modified collider {h:?} does not exist"));
            }
        }
        Ok(Self {
            body_arena,
            bodies: read,
            colliders: collider_arena,
            parents,
            force_thresholds,
            awake: Vec::new(),
        })
    }

    /// Each body's colliders have it as parent, each collider's parent lists it.
    fn check_links(&self) -> Result<(), String> {
        for (h, body) in &self.bodies {
            for c in &body.colliders {
                if self.parents.get(c) != Some(&Some(*h)) {
                    return Err(format!(
                        "body {h:?} lists collider {c:?}, whose parent is not it"
                    ));
                }
            }
        }
        for (c, parent) in &self.parents {
            if let Some(p) = parent {
                let listed = self.bodies.get(p).is_some_and(|b| b.colliders.contains(c));
                if !listed {
                    return Err(format!(
                        "collider {c:?} names parent {p:?}, which does not list it"
                    ));
                }
            }
        }
        Ok(())
    }

    fn body(&self, h: Handle) -> Result<&Body, String> {
        self.bodies
            .get(&h)
            .ok_or_else(|| format!("body {h:?} does not exist"))
    }
}

/// Every collider's shape holds together ([`check_shape`]).
fn check_collider_shapes(set: &Sets) -> Result<(), SnapshotError> {
    for (h, node) in set.colliders.iter() {
        let shape = node.field("shape").map_err(|e| fail("collider set", e))?;
        check_shape(shape).map_err(|reason| SnapshotError::InvalidShape {
            entity: entity_of(node),
            reason: format!("its Rapier collider {h:?}: {reason}"),
        })?;
    }
    Ok(())
}

/// The entity a collider's or body's user data names (checked by [`entity_bits`] before).
fn entity_of(node: &Node) -> Entity {
    match node.field("user_data") {
        Ok(Node::Wide(v)) => u64::try_from(*v).ok().and_then(Entity::try_from_bits),
        _ => None,
    }
    .unwrap_or(Entity::PLACEHOLDER)
}

/// The first element of a tuple struct (`ModifiedObjects(Vec, PhantomData)`).
fn first_of(node: &Node) -> Result<&Node, String> {
    node.seq()?
        .first()
        .ok_or_else(|| "an empty tuple".to_string())
}

/// A checked `VecMap`: its slots; `free` must be exactly its vacant slots.
fn vec_map<'a>(node: &'a Node, free: &Node) -> Result<Vec<Option<&'a Node>>, String> {
    let slots: Vec<Option<&Node>> = node
        .field("v")?
        .seq()?
        .iter()
        .map(|s| s.option())
        .collect::<Result<_, _>>()?;
    let occupied = slots.iter().flatten().count() as u64;
    let n = node.field("n")?.uint()?;
    if n != occupied {
        return Err(format!("map length {n}, {occupied} occupied slots"));
    }
    let mut listed = BTreeSet::new();
    for id in free.seq()? {
        let id = id.uint()?;
        if slots.get(id as usize).is_none_or(|s| s.is_some()) || !listed.insert(id) {
            return Err(format!(
                "free id {id} is not a vacant slot (or listed twice)"
            ));
        }
    }
    let vacant = slots.iter().filter(|s| s.is_none()).count();
    if vacant != listed.len() {
        return Err(format!("{vacant} vacant slots, {} free ids", listed.len()));
    }
    Ok(slots)
}

// --- Islands --------------------------------------------------------------------------------------

/// Checks the island manager's active sets; returns the awake island's bodies in order.
fn check_islands(set: &Sets, islands: &Node) -> Result<Vec<Handle>, String> {
    let slots = vec_map(islands.field("islands")?, islands.field("free_islands")?)?;
    let awake = match islands.field("awake_island")?.option()? {
        Some(id) => {
            let id = id.uint()?;
            if slots.get(id as usize).is_none_or(|s| s.is_none()) {
                return Err(format!("awake island {id} does not exist"));
            }
            Some(id)
        }
        None => None,
    };
    let mut members = 0usize;
    let mut awake_list = Vec::new();
    for (id, island) in slots.iter().enumerate() {
        let Some(island) = island else { continue };
        let list = handles(island.field("bodies")?)?;
        if list.is_empty() {
            return Err(format!("island {id} is empty"));
        }
        if awake == Some(id as u64) {
            awake_list = list.clone();
        }
        for (at, h) in list.iter().enumerate() {
            let body = set.body(*h)?;
            if body.active_island != id as u64 || body.active_set != at as u64 {
                return Err(format!(
                    "body {h:?} in island {id} at {at} has other island ids"
                ));
            }
            members += 1;
        }
    }
    let claimed = set
        .bodies
        .values()
        .filter(|b| b.active_island != NONE)
        .count();
    if claimed != members {
        return Err(format!(
            "{claimed} bodies name an island, islands hold {members}"
        ));
    }
    Ok(awake_list)
}

/// Checks the persistent islands (when bootstrapped; else Rapier rebuilds them at the next
/// step from the graphs).
fn check_persistent(
    set: &Sets,
    persistent: &Node,
    (contact_edges, touching): (usize, Vec<Touching>),
) -> Result<(), String> {
    if !persistent.field("bootstrapped")?.boolean()? {
        return Ok(());
    }
    let slots = vec_map(
        persistent.field("islands")?,
        persistent.field("free_islands")?,
    )?;
    let locs: Vec<(u64, u64)> = persistent
        .field("contact_link_locs")?
        .seq()?
        .iter()
        .map(pair_of)
        .collect::<Result<_, _>>()?;
    let mut joint_locs = Vec::new();
    for entry in persistent.field("joint_link_locs")?.seq()? {
        let kv = entry.seq()?;
        let [key, loc] = kv else {
            return Err("a joint link location is not a pair".into());
        };
        joint_locs.push((key, pair_of(loc)?));
    }
    let mut seen = 0usize;
    for (id, island) in slots.iter().enumerate() {
        let Some(island) = island else { continue };
        seen += check_persistent_island(set, id as u64, island, &locs, &joint_locs)?;
    }
    check_island_membership(set, seen)?;
    if locs.len() > contact_edges {
        return Err("more contact link locations than contact pairs".into());
    }
    check_link_locations(&slots, &locs, &joint_locs)?;
    check_touching_linked(set, &locs, touching)?;
    if let Some(id) = persistent.field("split_island")?.option()?
        && slots.get(id.uint()? as usize).is_none_or(|s| s.is_none())
    {
        return Err("the split island does not exist".into());
    }
    for removal in persistent.field("removal_journal")?.seq()? {
        handle(removal.field("body1")?)?;
        handle(removal.field("body2")?)?;
    }
    Ok(())
}

fn pair_of(node: &Node) -> Result<(u64, u64), String> {
    match node.seq()? {
        [a, b] => Ok((a.uint()?, b.uint()?)),
        _ => Err("not a pair".into()),
    }
}

fn link_list<'a>(slots: &[Option<&'a Node>], id: u64, field: &str) -> Result<&'a [Node], String> {
    slots
        .get(id as usize)
        .copied()
        .flatten()
        .ok_or_else(|| format!("a link location names island {id}, which does not exist"))?
        .field(field)?
        .seq()
}

/// Every enabled dynamic or kinematic body, and no other, is in an island, and the islands
/// hold `seen` bodies: exactly those.
fn check_island_membership(set: &Sets, seen: usize) -> Result<(), String> {
    let expected = set
        .bodies
        .values()
        .filter(|b| !b.fixed && b.enabled)
        .count();
    for (h, b) in &set.bodies {
        if (!b.fixed && b.enabled) != (b.island != NONE) {
            return Err(format!(
                "body {h:?}: island membership does not match its type"
            ));
        }
    }
    if seen != expected {
        return Err(format!(
            "{expected} bodies need an island, islands hold {seen}"
        ));
    }
    Ok(())
}

/// Every contact and joint link location points at a link of an existing island that names
/// the same edge or joint back.
fn check_link_locations(
    slots: &[Option<&Node>],
    locs: &[(u64, u64)],
    joint_locs: &[(&Node, (u64, u64))],
) -> Result<(), String> {
    for (edge, loc) in locs.iter().enumerate() {
        if *loc != (NONE, NONE) {
            let links = link_list(slots, loc.0, "contact_links")?;
            let link = links
                .get(loc.1 as usize)
                .ok_or("a dangling contact link location")?;
            if link.field("edge_id")?.uint()? != edge as u64 {
                return Err(format!(
                    "contact link location of edge {edge} points elsewhere"
                ));
            }
        }
    }
    for (key, loc) in joint_locs {
        let links = link_list(slots, loc.0, "joint_links")?;
        let link = links
            .get(loc.1 as usize)
            .ok_or("a dangling joint link location")?;
        if link.field("key")? != *key {
            return Err("a joint link location points at another link".into());
        }
    }
    Ok(())
}

/// Every touching contact pair is linked into the island of each of its bodies that has one.
fn check_touching_linked(
    set: &Sets,
    locs: &[(u64, u64)],
    touching: Vec<Touching>,
) -> Result<(), String> {
    for (edge, b1, b2) in touching {
        let member = |h: Option<Handle>| {
            h.and_then(|h| set.bodies.get(&h))
                .filter(|b| !b.fixed && b.enabled)
                .map(|b| b.island)
        };
        for island in [member(b1), member(b2)].into_iter().flatten() {
            if locs.get(edge).map(|l| l.0) != Some(island) {
                return Err(format!(
                    "touching pair {edge} is not linked into its body's island"
                ));
            }
        }
    }
    Ok(())
}

/// One persistent island: its bodies point back, its links' locations point at them.
fn check_persistent_island(
    set: &Sets,
    id: u64,
    island: &Node,
    locs: &[(u64, u64)],
    joint_locs: &[(&Node, (u64, u64))],
) -> Result<usize, String> {
    let list = handles(island.field("bodies")?)?;
    if list.is_empty() {
        return Err(format!("persistent island {id} is empty"));
    }
    let sleeping = island.field("sleeping")?.boolean()?;
    for (at, h) in list.iter().enumerate() {
        let b = set.body(*h)?;
        if b.island != id || b.island_index != at as u64 || b.fixed || (sleeping && !b.sleeping) {
            return Err(format!(
                "body {h:?} at {at} of persistent island {id} does not match"
            ));
        }
    }
    let member = |h: Handle| set.bodies.get(&h).is_some_and(|b| b.island == id);
    for (at, link) in island.field("contact_links")?.seq()?.iter().enumerate() {
        let edge = link.field("edge_id")?.uint()?;
        if locs.get(edge as usize) != Some(&(id, at as u64)) {
            return Err(format!(
                "contact link {at} of island {id}: its location differs"
            ));
        }
        let (b1, b2) = (handle(link.field("body1")?)?, handle(link.field("body2")?)?);
        if !member(b1) && !member(b2) {
            return Err(format!(
                "contact link {at} of island {id} has no member body"
            ));
        }
    }
    for (at, link) in island.field("joint_links")?.seq()?.iter().enumerate() {
        let key = link.field("key")?;
        let found = joint_locs.iter().find(|(k, _)| *k == key).map(|(_, l)| *l);
        if found != Some((id, at as u64)) {
            return Err(format!(
                "joint link {at} of island {id}: its location differs"
            ));
        }
        let (b1, b2) = (handle(link.field("body1")?)?, handle(link.field("body2")?)?);
        if !member(b1) && !member(b2) {
            return Err(format!("joint link {at} of island {id} has no member body"));
        }
    }
    Ok(list.len())
}

// --- Graphs ---------------------------------------------------------------------------------------

/// A checked interaction graph: node weights and edges (weight and endpoints).
struct Graph<'a> {
    nodes: Vec<&'a Node>,
    edges: Vec<(&'a Node, [usize; 2])>,
}

impl<'a> Graph<'a> {
    /// Reads an `InteractionGraph`, checking indices and the edge lists of every node.
    fn read(node: &'a Node) -> Result<Self, String> {
        let graph = node.field("graph")?;
        let node_list = graph.field("nodes")?.seq()?;
        let edge_list = graph.field("edges")?.seq()?;
        let mut edges = Vec::with_capacity(edge_list.len());
        let mut links = Vec::with_capacity(edge_list.len());
        for e in edge_list {
            let ends = e.field("node")?.seq()?;
            let [Some(a), Some(b)] = [
                graph_index(&ends[0], node_list.len())?,
                graph_index(&ends[1], node_list.len())?,
            ] else {
                return Err("an edge without both endpoints".into());
            };
            let next = e.field("next")?.seq()?;
            let prev = e.field("prev")?.seq()?;
            links.push([
                (
                    graph_index(&next[0], edge_list.len())?,
                    graph_index(&prev[0], edge_list.len())?,
                ),
                (
                    graph_index(&next[1], edge_list.len())?,
                    graph_index(&prev[1], edge_list.len())?,
                ),
            ]);
            edges.push((e.field("weight")?, [a, b]));
        }
        check_edge_lists(node_list, &edges, &links)?;
        let nodes = node_list
            .iter()
            .map(|n| n.field("weight"))
            .collect::<Result<_, _>>()?;
        Ok(Self { nodes, edges })
    }

    /// Node weights are handles into `arena`, their graph index (by `index_of`) this node.
    fn check_nodes(
        &self,
        exists: impl Fn(Handle) -> bool,
        index_of: impl Fn(Handle) -> Option<u64>,
    ) -> Result<(), String> {
        for (n, weight) in self.nodes.iter().enumerate() {
            let h = handle(weight)?;
            if !exists(h) || index_of(h) != Some(n as u64) {
                return Err(format!("node {n} names {h:?}, which does not point back"));
            }
        }
        Ok(())
    }

    /// The handles of an edge's endpoints.
    fn ends(&self, e: usize) -> Result<[Handle; 2], String> {
        let [a, b] = self.edges[e].1;
        Ok([handle(self.nodes[a])?, handle(self.nodes[b])?])
    }
}

/// A graph index read from `n`: `None` for Rapier's "none", else an index below `len`.
fn graph_index(n: &Node, len: usize) -> Result<Option<usize>, String> {
    let v = unwrap_newtype(n).uint()?;
    match v {
        NONE => Ok(None),
        v if (v as usize) < len => Ok(Some(v as usize)),
        v => Err(format!("index {v} out of {len}")),
    }
}

/// Each node's two edge lists (outgoing and incoming, linked through the edges' `(next, prev)`
/// in `links`) hold exactly the edges whose endpoint in that direction is the node, each once,
/// and every edge is in both of its lists.
fn check_edge_lists(
    node_list: &[Node],
    edges: &[(&Node, [usize; 2])],
    links: &[[(Option<usize>, Option<usize>); 2]],
) -> Result<(), String> {
    let mut listed = [vec![false; edges.len()], vec![false; edges.len()]];
    for (n, weight_node) in node_list.iter().enumerate() {
        let heads = weight_node.field("next")?.seq()?;
        for dir in 0..2 {
            let mut prev = None;
            let mut at = graph_index(&heads[dir], edges.len())?;
            while let Some(e) = at {
                if edges[e].1[dir] != n || links[e][dir].1 != prev {
                    return Err(format!("edge {e} in the wrong list of node {n}"));
                }
                if std::mem::replace(&mut listed[dir][e], true) {
                    return Err(format!("edge {e} listed twice"));
                }
                prev = Some(e);
                at = links[e][dir].0;
            }
        }
    }
    if listed.iter().any(|l| l.iter().any(|x| !x)) {
        return Err("an edge missing from its nodes' lists".into());
    }
    Ok(())
}

/// A `Coarena`'s entries: generation and value, by index.
fn coarena(node: &Node) -> Result<Vec<(u32, &Node)>, String> {
    node.field("data")?
        .seq()?
        .iter()
        .map(|e| match e.seq()? {
            [g, v] => Ok((u32_of(g)?, v)),
            _ => Err("a coarena entry is not a pair".to_string()),
        })
        .collect()
}

fn coarena_get<'a>(entries: &[(u32, &'a Node)], (index, generation): Handle) -> Option<&'a Node> {
    entries
        .get(index as usize)
        .filter(|(g, _)| *g == generation)
        .map(|(_, v)| *v)
}

// --- Narrow phase ---------------------------------------------------------------------------------

/// A contact pair with active contacts: its edge and its colliders' parent bodies.
type Touching = (usize, Option<Handle>, Option<Handle>);

/// Checks the narrow phase; returns the number of contact pairs and the touching ones.
fn check_narrow_phase(
    set: &Sets,
    np: &Node,
    awake: u64,
    epochs: Epochs,
) -> Result<(usize, Vec<Touching>), String> {
    let contacts = Graph::read(np.field("contact_graph")?)?;
    let intersections = Graph::read(np.field("intersection_graph")?)?;
    check_graph_indices(set, np, &contacts, &intersections)?;
    for graph in [&contacts, &intersections] {
        check_pair_ends(graph)?;
    }
    check_contact_workspaces(&contacts)?;
    check_solver_graph(set, np, &contacts, awake)?;
    check_solver_selection(set, np, &contacts, epochs)?;
    Ok((contacts.edges.len(), touching_pairs(set, &contacts)?))
}

/// Each graph's nodes are colliders whose graph index names the node, and every collider's
/// graph indices name the node holding it (or none).
fn check_graph_indices(
    set: &Sets,
    np: &Node,
    contacts: &Graph,
    intersections: &Graph,
) -> Result<(), String> {
    let indices = coarena(np.field("graph_indices")?)?;
    let index_in = |h: Handle, field: &str| {
        coarena_get(&indices, h)
            .and_then(|gi| gi.field(field).ok())
            .and_then(|i| unwrap_newtype(i).uint().ok())
    };
    let exists = |h: Handle| set.colliders.contains(h);
    contacts.check_nodes(exists, |h| index_in(h, "contact_graph_index"))?;
    intersections.check_nodes(exists, |h| index_in(h, "intersection_graph_index"))?;
    for (h, _) in set.colliders.iter() {
        for (field, graph) in [
            ("contact_graph_index", contacts),
            ("intersection_graph_index", intersections),
        ] {
            let Some(i) = index_in(h, field) else {
                continue;
            };
            if i != NONE
                && (i as usize >= graph.nodes.len() || handle(graph.nodes[i as usize])? != h)
            {
                return Err(format!("collider {h:?}: its {field} names another node"));
            }
        }
    }
    Ok(())
}

/// Every pair of a graph names the colliders at its edge's endpoints.
fn check_pair_ends(graph: &Graph) -> Result<(), String> {
    for (e, (pair, _)) in graph.edges.iter().enumerate() {
        let mut found = [
            handle(pair.field("collider1")?)?,
            handle(pair.field("collider2")?)?,
        ];
        let mut ends = graph.ends(e)?;
        found.sort();
        ends.sort();
        if found != ends {
            return Err(format!("pair {e} names other colliders than its endpoints"));
        }
    }
    Ok(())
}

/// The contact workspace of every rigid contact pair that keeps one.
fn check_contact_workspaces(contacts: &Graph) -> Result<(), String> {
    for (e, (pair, _)) in contacts.edges.iter().enumerate() {
        if let Some(rigid) = rigid_contacts(pair)?
            && let Some(workspace) = rigid.field("workspace")?.option()?
        {
            let manifolds = rigid.field("manifolds")?.seq()?.len();
            check_contact_workspace(workspace, manifolds).map_err(|r| format!("pair {e}: {r}"))?;
        }
    }
    Ok(())
}

/// The contact pairs with at least one solver contact, with their colliders' parent bodies.
fn touching_pairs(set: &Sets, contacts: &Graph) -> Result<Vec<Touching>, String> {
    let mut touching = Vec::new();
    for (e, (pair, _)) in contacts.edges.iter().enumerate() {
        let mut active = false;
        for m in solver_manifolds(pair)? {
            active |= !m.field("data")?.field("solver_contacts")?.seq()?.is_empty();
        }
        if active {
            let parent = |field: &str| -> Result<Option<Handle>, String> {
                Ok(set
                    .parents
                    .get(&handle(pair.field(field)?)?)
                    .copied()
                    .flatten())
            };
            touching.push((e, parent("collider1")?, parent("collider2")?));
        }
    }
    Ok(touching)
}

/// The rigid contacts of a contact pair (`PairContacts::Rigid`), or `None` for a pair of two
/// soft surfaces, which has no manifolds, no solver color and no stored contacts.
fn rigid_contacts(pair: &Node) -> Result<Option<&Node>, String> {
    match pair.field("contacts")?.variant()? {
        ("Rigid", rigid) => Ok(Some(rigid)),
        ("Soft", _) => Ok(None),
        (other, _) => Err(format!("pair contacts of kind {other}")),
    }
}

/// A field of a pair's rigid contacts: a sequence (empty for a soft pair).
fn rigid_seq<'a>(pair: &'a Node, field: &str) -> Result<&'a [Node], String> {
    match rigid_contacts(pair)? {
        Some(rigid) => rigid.field(field)?.seq(),
        None => Ok(&[]),
    }
}

/// The solver manifolds of a contact pair (its clusters, when it has any).
fn solver_manifolds(pair: &Node) -> Result<&[Node], String> {
    let clusters = rigid_seq(pair, "solver_clusters")?;
    if clusters.is_empty() {
        rigid_seq(pair, "manifolds")
    } else {
        Ok(clusters)
    }
}

/// A pair's solver color (`SOLVER_COLOR_UNCOLORED` for a soft pair).
fn pair_color(pair: &Node) -> Result<u64, String> {
    match rigid_contacts(pair)? {
        Some(rigid) => rigid.field("solver_color")?.uint(),
        None => Ok(SOLVER_COLOR_UNCOLORED),
    }
}

/// Bit layout of Rapier's solver graph positions: bucket above bit 22, local index below.
const GRAPH_POS_BUCKET_SHIFT: u32 = 22;
/// Color buckets plus the generic bucket.
const SOLVER_BUCKETS: usize = 130;

/// The solver's contact graph and per-pair caches.
fn check_solver_graph(set: &Sets, np: &Node, contacts: &Graph, awake: u64) -> Result<(), String> {
    let in_graph = check_solver_buckets(np, contacts)?;
    let masks = np.field("body_solver_color_masks")?.seq()?.len();
    if masks > set.body_arena.slots.len() {
        return Err(format!(
            "{masks} color masks for {} body slots",
            set.body_arena.slots.len()
        ));
    }
    let mut positioned = 0usize;
    for (pair, _) in &contacts.edges {
        check_pair_color(pair, masks)?;
        for list in [
            rigid_seq(pair, "manifolds")?,
            rigid_seq(pair, "solver_clusters")?,
        ] {
            for manifold in list {
                positioned += check_manifold(set, manifold, awake)? as usize;
            }
        }
    }
    if positioned < in_graph {
        return Err("solver buckets hold manifolds that have no position".into());
    }
    check_pair_caches(np, contacts.edges.len())
}

/// The solver's buckets (none, or one per color plus the generic one) name existing manifolds
/// whose stored solver position is where they sit; returns how many they hold.
fn check_solver_buckets(np: &Node, contacts: &Graph) -> Result<usize, String> {
    let edges = contacts.edges.len();
    let buckets = np.field("solver_contact_graph")?.field("buckets")?.seq()?;
    if !buckets.is_empty() && buckets.len() != SOLVER_BUCKETS {
        return Err(format!("{} solver buckets", buckets.len()));
    }
    let mut in_graph = 0usize;
    for (b, bucket) in buckets.iter().enumerate() {
        for (local, r) in bucket.seq()?.iter().enumerate() {
            let (edge, m) = (r.field("edge")?.uint()?, r.field("manifold")?.uint()?);
            let manifold = (edge < edges as u64)
                .then(|| solver_manifolds(contacts.edges[edge as usize].0))
                .transpose()?
                .and_then(|list| list.get(m as usize))
                .ok_or_else(|| format!("solver bucket {b} names manifold {m} of pair {edge}"))?;
            let pos = manifold.field("data")?.field("graph_pos")?.uint()?;
            if pos != ((b as u64) << GRAPH_POS_BUCKET_SHIFT) | local as u64 {
                return Err(format!(
                    "manifold {m} of pair {edge}: its solver position differs"
                ));
            }
            in_graph += 1;
        }
    }
    Ok(in_graph)
}

/// The per-pair caches of the narrow phase, for `edges` contact pairs: at most one solver
/// hint and one force-event position per pair, and the force-event pairs and positions point
/// at each other.
fn check_pair_caches(np: &Node, edges: usize) -> Result<(), String> {
    let hints = np.field("pair_solver_hints")?.seq()?.len();
    if hints > edges {
        return Err(format!("{hints} solver hints for {edges} pairs"));
    }
    let pairs = np.field("force_event_pairs")?.seq()?;
    let pos = np.field("force_event_pos")?.seq()?;
    if pos.len() > edges {
        return Err(format!(
            "{} force-event positions for {edges} pairs",
            pos.len()
        ));
    }
    for (i, e) in pairs.iter().enumerate() {
        let e = e.uint()? as usize;
        if pos.get(e).map(Node::uint).transpose()? != Some(i as u64) {
            return Err(format!("force-event pair {i}: its position differs"));
        }
    }
    for p in pos {
        let p = p.uint()?;
        if p != NONE && p as usize >= pairs.len() {
            return Err(format!("force-event position {p} out of {}", pairs.len()));
        }
    }
    Ok(())
}

/// One contact manifold: its bodies exist; if it has a solver graph position, its solver body
/// indices lie in the awake set. Returns whether it has a position.
fn check_manifold(set: &Sets, manifold: &Node, awake: u64) -> Result<bool, String> {
    let data = manifold.field("data")?;
    for field in ["rigid_body1", "rigid_body2"] {
        if let Some(h) = opt_handle(data.field(field)?)? {
            set.body(h)?;
        }
    }
    let pos = data.field("graph_pos")?.uint()?;
    if pos == NONE {
        return Ok(false);
    }
    if (pos >> GRAPH_POS_BUCKET_SHIFT) as usize >= SOLVER_BUCKETS {
        return Err(format!("solver position {pos:#x} outside the buckets"));
    }
    for id in data.field("solver_body_ids")?.seq()? {
        let id = id.uint()?;
        if id != NONE && id >= awake {
            return Err(format!("solver body {id} outside the {awake} awake bodies"));
        }
    }
    Ok(true)
}

/// Rapier's solver colors: 0..128 parallel colors, 128 overflow, 255 uncolored.
const SOLVER_COLOR_OVERFLOW: u64 = 128;
const SOLVER_COLOR_UNCOLORED: u64 = 255;

/// A pair's solver color and the bodies holding it index the per-body color masks.
fn check_pair_color(pair: &Node, masks: usize) -> Result<(), String> {
    let color = pair_color(pair)?;
    if color > SOLVER_COLOR_OVERFLOW && color != SOLVER_COLOR_UNCOLORED {
        return Err(format!("solver color {color}"));
    }
    for id in rigid_seq(pair, "solver_color_bodies")? {
        let id = id.uint()?;
        if id != NONE && (color >= SOLVER_COLOR_OVERFLOW || id as usize >= masks) {
            return Err(format!("colored body {id} outside the {masks} color masks"));
        }
    }
    Ok(())
}

/// What decides whether the next step trusts the solver's stored contact graph.
#[derive(Clone, Copy)]
struct Epochs {
    /// The island manager's active-set epoch.
    active_set: u64,
    /// The multibody set's topology epoch.
    topology: u64,
    /// Whether any multibody exists (its manifolds go to the generic bucket).
    multibodies: bool,
}

impl Epochs {
    fn read(islands: &Node, multibody: &Node) -> Result<Self, String> {
        Ok(Self {
            active_set: islands.field("active_set_epoch")?.uint()?,
            topology: multibody.field("topology_epoch")?.uint()?,
            multibodies: multibody
                .field("multibodies")?
                .field("items")?
                .seq()?
                .iter()
                .any(|e| e.variant().is_ok_and(|(v, _)| v == "Occupied")),
        })
    }
}

/// The solver hint bits: bit 15 a dynamic body, the low bits the solver manifold count.
const PAIR_HINT_DYN_BIT: u64 = 1 << 15;
const PAIR_HINT_COUNT_MASK: u64 = PAIR_HINT_DYN_BIT - 1;

/// Whether a pair's hint makes it selectable by the solver.
fn selectable(hints: &[u64], edge: usize) -> bool {
    let hint = hints.get(edge).copied().unwrap_or(0);
    hint & PAIR_HINT_DYN_BIT != 0 && hint & PAIR_HINT_COUNT_MASK != 0
}

/// When the next step trusts them (no rebuild due), the solver's stored contact graph holds
/// exactly the manifolds its selection rule picks (by the pairs' hints, the manifolds' flags
/// and contacts, the awake dynamic bodies), in the buckets of their colors; and the force-event
/// list holds exactly the selectable pairs of colliders asking for force events.
fn check_solver_selection(
    set: &Sets,
    np: &Node,
    contacts: &Graph,
    epochs: Epochs,
) -> Result<(), String> {
    let hints: Vec<u64> = np
        .field("pair_solver_hints")?
        .seq()?
        .iter()
        .map(Node::uint)
        .collect::<Result<_, _>>()?;
    if np.field("force_list_valid")?.boolean()? {
        check_force_events(set, np, contacts, &hints)?;
    }
    let trusted = np.field("solver_graph_valid")?.boolean()?
        && np.field("solver_graph_epoch")?.uint()? == epochs.active_set
        && np.field("solver_graph_mb_epoch")?.uint()? == epochs.topology;
    if !trusted || epochs.multibodies {
        return Ok(());
    }
    let mut expected = selected_manifolds(set, contacts, &hints)?;
    let mut actual = stored_manifolds(np)?;
    expected.sort_unstable();
    actual.sort_unstable();
    if expected != actual {
        return Err("the solver's contact graph differs from its selection rule".into());
    }
    Ok(())
}

/// A manifold in the solver's contact graph: (contact pair, manifold of the pair, color).
type SolverEntry = (u64, u64, u64);

/// The manifolds the solver's selection rule picks: of each selectable pair (by `hints`), the
/// manifolds asking for impulses, with contacts and an awake dynamic body; the pair's first
/// one in the pair's color (when it has one), the others in the overflow color.
fn selected_manifolds(
    set: &Sets,
    contacts: &Graph,
    hints: &[u64],
) -> Result<Vec<SolverEntry>, String> {
    let awake_dynamic: BTreeSet<Handle> = set
        .awake
        .iter()
        .filter(|h| set.bodies.get(h).is_some_and(|b| b.dynamic))
        .copied()
        .collect();
    let mut expected = Vec::new();
    for (e, (pair, _)) in contacts.edges.iter().enumerate() {
        if !selectable(hints, e) {
            continue;
        }
        let pair_color = pair_color(pair)?;
        let mut first = true;
        for (ordinal, m) in solver_manifolds(pair)?.iter().enumerate() {
            let data = m.field("data")?;
            let impulses = data.field("solver_flags")?.uint()? & 1 != 0;
            let active = !data.field("solver_contacts")?.seq()?.is_empty();
            let mut qualifies = false;
            for field in ["rigid_body1", "rigid_body2"] {
                qualifies |=
                    opt_handle(data.field(field)?)?.is_some_and(|h| awake_dynamic.contains(&h));
            }
            if !impulses || !active || !qualifies {
                continue;
            }
            let color = if first && pair_color != SOLVER_COLOR_UNCOLORED {
                pair_color
            } else {
                SOLVER_COLOR_OVERFLOW
            };
            first = false;
            expected.push((e as u64, ordinal as u64, color));
        }
    }
    Ok(expected)
}

/// The manifolds the solver's stored contact graph holds, by color bucket; the generic bucket
/// must be empty (it is for multibodies, and there are none).
fn stored_manifolds(np: &Node) -> Result<Vec<SolverEntry>, String> {
    let mut actual = Vec::new();
    let buckets = np.field("solver_contact_graph")?.field("buckets")?.seq()?;
    for (color, bucket) in buckets.iter().enumerate().take(SOLVER_BUCKETS - 1) {
        for r in bucket.seq()? {
            actual.push((
                r.field("edge")?.uint()?,
                r.field("manifold")?.uint()?,
                color as u64,
            ));
        }
    }
    if buckets
        .get(SOLVER_BUCKETS - 1)
        .is_some_and(|g| g.seq().is_ok_and(|g| !g.is_empty()))
    {
        return Err("generic solver manifolds without multibodies".into());
    }
    Ok(actual)
}

/// The force-event list (when Rapier marks it intact): exactly the selectable pairs with a
/// collider asking for force events, one position per contact pair.
fn check_force_events(
    set: &Sets,
    np: &Node,
    contacts: &Graph,
    hints: &[u64],
) -> Result<(), String> {
    let edges = contacts.edges.len();
    if np.field("force_event_pos")?.seq()?.len() != edges {
        return Err(format!(
            "force-event positions for other than the {edges} pairs"
        ));
    }
    let mut expected = Vec::new();
    for (e, (pair, _)) in contacts.edges.iter().enumerate() {
        if !selectable(hints, e) {
            continue;
        }
        let threshold = |field: &str| -> Result<f64, String> {
            let h = handle(pair.field(field)?)?;
            Ok(set
                .force_thresholds
                .get(&h)
                .copied()
                .unwrap_or(f64::from(f32::MAX)))
        };
        if threshold("collider1")?.min(threshold("collider2")?) < f64::from(f32::MAX) {
            expected.push(e as u64);
        }
    }
    let mut actual: Vec<u64> = np
        .field("force_event_pairs")?
        .seq()?
        .iter()
        .map(Node::uint)
        .collect::<Result<_, _>>()?;
    expected.sort_unstable();
    actual.sort_unstable();
    if expected != actual {
        return Err("the force-event list differs from the pairs asking for force events".into());
    }
    Ok(())
}

/// Integration parameters: no negative value, iteration counts bounded.
fn check_parameters(params: &Node) -> Result<(), String> {
    let Node::Struct(_, fields) = params else {
        return Err("integration parameters are not a struct".into());
    };
    let mut negative = false;
    params.floats(&mut |v| negative |= v < 0.0);
    if negative {
        return Err("a negative value".into());
    }
    for (name, value) in fields {
        if let Node::Uint(v) = unwrap_newtype(value)
            && *v > MAX_ITERATIONS
        {
            return Err(format!("`{name}` is {v}, above {MAX_ITERATIONS}"));
        }
    }
    Ok(())
}

/// The largest iteration count or island size of loaded integration parameters (Rapier's
/// defaults are 4 solver iterations and islands of 128 bodies): a forged count must not make
/// a step run for hours.
const MAX_ITERATIONS: u64 = 4096;

// --- Broad phase ----------------------------------------------------------------------------------

/// The broad phase's tree (its leaves existing colliders) and pair tables.
fn check_broad_phase(set: &Sets, bp: &Node) -> Result<(), String> {
    let leaf_slots = check_bvh(bp.field("tree")?, |leaf| {
        set.colliders
            .slots
            .get(leaf as usize)
            .is_some_and(|s| s.is_some())
    })?;
    for leaf in bp.field("prev_updated_leaves")?.seq()? {
        let leaf = leaf.uint()?;
        if leaf_slots.get(leaf as usize).copied().flatten().is_none() {
            return Err(format!("updated leaf {leaf} is not in the tree"));
        }
    }
    check_broad_phase_pairs(set, bp)
}

/// The broad phase's pairs and pair adjacency name existing colliders.
fn check_broad_phase_pairs(set: &Sets, bp: &Node) -> Result<(), String> {
    for entry in bp.field("pairs")?.seq()? {
        let [key, _] = entry.seq()? else {
            return Err("a broad-phase pair entry is not a pair".into());
        };
        let [a, b] = key.seq()? else {
            return Err("a broad-phase pair key is not a pair".into());
        };
        for h in [handle(a)?, handle(b)?] {
            if !set.colliders.contains(h) {
                return Err(format!("a pair names collider {h:?}, which does not exist"));
            }
        }
    }
    for (_, list) in coarena(bp.field("pair_adjacency")?)? {
        for h in handles(list)? {
            if !set.colliders.contains(h) {
                return Err(format!(
                    "pair adjacency names collider {h:?}, which does not exist"
                ));
            }
        }
    }
    Ok(())
}

// --- Joints ---------------------------------------------------------------------------------------

fn check_joints(set: &Sets, impulse: &Node, multibody: &Node) -> Result<(), String> {
    let graph = Graph::read(impulse.field("joint_graph")?)?;
    let ids = coarena(impulse.field("rb_graph_ids")?)?;
    graph.check_nodes(
        |h| set.body_arena.contains(h),
        |h| coarena_get(&ids, h).and_then(|i| unwrap_newtype(i).uint().ok()),
    )?;
    for (e, (joint, _)) in graph.edges.iter().enumerate() {
        let mut found = [
            handle(joint.field("body1")?)?,
            handle(joint.field("body2")?)?,
        ];
        let mut ends = graph.ends(e)?;
        found.sort();
        ends.sort();
        if found != ends {
            return Err(format!("joint {e} names other bodies than its endpoints"));
        }
    }
    let joint_ids = Arena::read(impulse.field("joint_ids")?)?;
    let mut used = BTreeSet::new();
    for (h, edge) in joint_ids.iter() {
        let edge = unwrap_newtype(edge).uint()?;
        if edge as usize >= graph.edges.len() || !used.insert(edge) {
            return Err(format!(
                "joint {h:?} names edge {edge}: out of bounds or shared"
            ));
        }
    }
    if used.len() != graph.edges.len() {
        return Err("joint edges without a joint handle".into());
    }
    for list in [impulse.field("to_wake_up")?, multibody.field("to_wake_up")?] {
        handles(list)?;
    }
    check_multibodies(set, multibody)
}

/// Each multibody's own rules ([`check_multibody`]), its links existing bodies that the
/// body-to-link map sends back to that link, every mapped body a link and a node of the
/// connectivity graph that names it back.
fn check_multibodies(set: &Sets, multibody: &Node) -> Result<(), String> {
    let arena = Arena::read(multibody.field("multibodies")?)?;
    let rb2mb = coarena(multibody.field("rb2mb")?)?;
    let mut links = HashMap::new();
    for (h, mb) in arena.iter() {
        let bodies: Vec<Handle> = check_multibody(mb)
            .map_err(|e| format!("multibody {h:?}: {e}"))?
            .into_iter()
            .map(handle)
            .collect::<Result<_, _>>()?;
        for (i, body) in bodies.iter().enumerate() {
            set.body(*body)?;
            let back = coarena_get(&rb2mb, *body)
                .map(|id| {
                    Ok::<_, String>((handle(id.field("multibody")?)?, id.field("id")?.uint()?))
                })
                .transpose()?;
            if back != Some((h, i as u64)) {
                return Err(format!(
                    "link {i} of multibody {h:?}: its body {body:?} maps to {back:?}"
                ));
            }
        }
        links.insert(h, bodies);
    }
    let graph = Graph::read(multibody.field("connectivity_graph")?)?;
    check_link_map(&rb2mb, &links, &graph)?;
    let graph_id = |h: Handle| coarena_get(&rb2mb, h)?.field("graph_id").ok()?.uint().ok();
    graph.check_nodes(|h| set.body_arena.contains(h), graph_id)
}

/// Every occupied entry of the body-to-link map (`rb2mb`) is the body of the link it names, and
/// its graph node names it.
fn check_link_map(
    rb2mb: &[(u32, &Node)],
    links: &HashMap<Handle, Vec<Handle>>,
    graph: &Graph,
) -> Result<(), String> {
    for (index, (generation, id)) in rb2mb.iter().enumerate() {
        if *generation == u32::MAX {
            continue; // A vacant entry.
        }
        let body = (index as u32, *generation);
        let mb = handle(id.field("multibody")?)?;
        let at = id.field("id")?.uint()?;
        if links.get(&mb).and_then(|l| l.get(at as usize)) != Some(&body) {
            return Err(format!(
                "body {body:?} names link {at} of multibody {mb:?}, which is not it"
            ));
        }
        let node = unwrap_newtype(id.field("graph_id")?).uint()?;
        let named = graph
            .nodes
            .get(node as usize)
            .map(|n| handle(n))
            .transpose()?;
        if named != Some(body) {
            return Err(format!(
                "body {body:?} names graph node {node}, which is not it"
            ));
        }
    }
    Ok(())
}

// --- Entities -------------------------------------------------------------------------------------

/// bevy_rapier's entity-to-handle maps name existing bodies and colliders of that entity.
fn check_entity_maps(
    set: &Sets,
    bodies: &RapierRigidBodySet,
    colliders: &RapierContextColliders,
) -> Result<(), String> {
    for (entity, h) in bodies.entity2body() {
        let ok = bodies
            .bodies
            .get(*h)
            .is_some_and(|b| b.user_data == u128::from(entity.to_bits()));
        if !ok || !set.body_arena.contains(h.0.into_raw_parts()) {
            return Err(format!("{entity} maps to body {h:?}, not its body"));
        }
    }
    for (entity, h) in colliders.entity2collider() {
        let ok = colliders
            .colliders
            .get(*h)
            .is_some_and(|c| c.user_data == u128::from(entity.to_bits()));
        if !ok {
            return Err(format!("{entity} maps to collider {h:?}, not its collider"));
        }
    }
    Ok(())
}

/// The handle components of simulation entities name existing bodies and colliders, and their
/// context links existing contexts.
fn check_handle_components(world: &mut World) -> Result<(), SnapshotError> {
    use bevy_rapier3d::prelude::{
        RapierColliderHandle, RapierContextEntityLink, RapierRigidBodyHandle,
    };
    let mut query = world.query::<(
        Entity,
        &RapierContextEntityLink,
        Option<&RapierRigidBodyHandle>,
        Option<&RapierColliderHandle>,
    )>();
    let mut contexts = world.query::<(&RapierRigidBodySet, &RapierContextColliders)>();
    for (entity, link, body, collider) in query.iter(world) {
        let Ok((bodies, colliders)) = contexts.get(world, link.0) else {
            return Err(fail(
                "entity links",
                format!("{entity} links to {}, not a Rapier context", link.0),
            ));
        };
        if body.is_some_and(|b| bodies.bodies.get(b.0).is_none()) {
            return Err(fail(
                "entity links",
                format!("{entity}: its body handle names no body"),
            ));
        }
        if collider.is_some_and(|c| colliders.colliders.get(c.0).is_none()) {
            return Err(fail(
                "entity links",
                format!("{entity}: its collider handle names no collider"),
            ));
        }
    }
    Ok(())
}

/// The shapes of the `Collider` components: bevy_rapier hands a changed one to Rapier.
fn check_collider_components(world: &mut World) -> Result<(), SnapshotError> {
    let mut query = world.query::<(Entity, &bevy_rapier3d::prelude::Collider)>();
    for (entity, collider) in query.iter(world) {
        let refuse = |reason: String| SnapshotError::InvalidShape {
            entity,
            reason: format!("its Collider component: {reason}"),
        };
        let tree = to_tree(collider).map_err(refuse)?;
        check_collider_component(&tree).map_err(refuse)?;
    }
    Ok(())
}

/// A `Collider` component's serde form: its scaled and unscaled shapes hold together, no value
/// is NaN and its scale is finite.
fn check_collider_component(tree: &Node) -> Result<(), String> {
    let mut nan = false;
    tree.floats(&mut |v| nan |= v.is_nan());
    if nan {
        return Err("a NaN value".into());
    }
    check_shape(tree.field("raw")?).map_err(|e| format!("its shape: {e}"))?;
    check_shape(tree.field("unscaled")?).map_err(|e| format!("its unscaled shape: {e}"))?;
    let mut finite = true;
    tree.field("scale")?
        .floats(&mut |v| finite &= v.is_finite());
    if !finite {
        return Err("a scale not finite".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(fields: Vec<(&'static str, Node)>) -> Node {
        Node::Struct("S", fields)
    }

    fn u(v: u64) -> Node {
        Node::Uint(v)
    }

    fn opt(v: Option<u64>) -> Node {
        match v {
            Some(v) => Node::Some(Box::new(u(v))),
            None => Node::None,
        }
    }

    /// An arena of `items` (`Ok(generation)` occupied, `Err(next_free)` free).
    fn arena(items: &[Result<u64, Option<u64>>], head: Option<u64>) -> Node {
        let entries = items
            .iter()
            .map(|item| match item {
                Ok(g) => Node::Variant(
                    "Entry",
                    "Occupied",
                    Box::new(st(vec![("generation", u(*g)), ("value", Node::Unit)])),
                ),
                Err(next) => Node::Variant(
                    "Entry",
                    "Free",
                    Box::new(st(vec![("next_free", opt(*next))])),
                ),
            })
            .collect();
        let len = items.iter().filter(|i| i.is_ok()).count() as u64;
        st(vec![
            ("items", Node::Seq(entries)),
            ("generation", u(0)),
            ("free_list_head", opt(head)),
            ("len", u(len)),
        ])
    }

    #[test]
    fn an_arena_with_a_sound_free_list_is_read() {
        let node = arena(&[Ok(0), Err(Some(3)), Ok(2), Err(None)], Some(1));
        let read = Arena::read(&node).expect("sound");
        assert!(read.contains((2, 2)));
        assert!(!read.contains((2, 1)), "another generation");
        assert!(!read.contains((1, 0)), "a free slot");
        assert!(!read.contains((9, 0)), "out of bounds");
    }

    #[test]
    fn an_arena_free_list_through_an_occupied_slot_or_a_cycle_is_refused() {
        let into_occupied = arena(&[Ok(0), Err(Some(0))], Some(1));
        assert!(Arena::read(&into_occupied).is_err());
        let cycle = arena(&[Err(Some(1)), Err(Some(0))], Some(0));
        assert!(Arena::read(&cycle).unwrap_err().contains("cycles"));
        let out_of_bounds = arena(&[Err(None)], Some(7));
        assert!(Arena::read(&out_of_bounds).is_err());
    }

    #[test]
    fn an_arena_whose_length_differs_from_its_occupied_slots_is_refused() {
        let mut node = arena(&[Ok(0), Ok(0)], None);
        if let Node::Struct(_, fields) = &mut node {
            fields[3].1 = u(3);
        }
        assert!(Arena::read(&node).unwrap_err().contains("length"));
    }

    fn map(slots: &[bool]) -> Node {
        let v = slots
            .iter()
            .map(|s| {
                if *s {
                    Node::Some(Box::new(Node::Unit))
                } else {
                    Node::None
                }
            })
            .collect();
        let n = slots.iter().filter(|s| **s).count() as u64;
        st(vec![("n", u(n)), ("v", Node::Seq(v))])
    }

    #[test]
    fn free_island_ids_must_be_exactly_the_vacant_slots() {
        let slots = map(&[true, false, true, false]);
        let ids = |ids: &[u64]| Node::Seq(ids.iter().map(|i| u(*i)).collect());
        assert!(vec_map(&slots, &ids(&[3, 1])).is_ok());
        assert!(
            vec_map(&slots, &ids(&[1])).is_err(),
            "a vacant slot not listed"
        );
        assert!(
            vec_map(&slots, &ids(&[1, 3, 0])).is_err(),
            "an occupied slot listed"
        );
        assert!(vec_map(&slots, &ids(&[1, 1, 3])).is_err(), "listed twice");
        assert!(vec_map(&slots, &ids(&[1, 3, 9])).is_err(), "out of bounds");
    }

    fn index(i: u64) -> Node {
        Node::Struct("EdgeIndex", vec![("0", u(i))])
    }

    fn pair(a: u64, b: u64) -> Node {
        Node::Seq(vec![index(a), index(b)])
    }

    /// A graph of two nodes and one edge 0 → 1, with the node heads and the edge's links given.
    fn graph(heads: [[u64; 2]; 2], next: [u64; 2], prev: [u64; 2]) -> Node {
        let node = |h: [u64; 2]| st(vec![("weight", Node::Unit), ("next", pair(h[0], h[1]))]);
        let edge = st(vec![
            ("weight", Node::Unit),
            ("next", pair(next[0], next[1])),
            ("prev", pair(prev[0], prev[1])),
            ("node", pair(0, 1)),
        ]);
        st(vec![(
            "graph",
            st(vec![
                ("nodes", Node::Seq(vec![node(heads[0]), node(heads[1])])),
                ("edges", Node::Seq(vec![edge])),
            ]),
        )])
    }

    #[test]
    fn a_graph_with_well_linked_edge_lists_is_read() {
        let m = NONE;
        let node = graph([[0, m], [m, 0]], [m, m], [m, m]);
        let read = Graph::read(&node).expect("sound");
        assert_eq!(read.edges[0].1, [0, 1]);
    }

    #[test]
    fn a_graph_edge_list_with_a_cycle_a_wrong_head_or_a_missing_edge_is_refused() {
        let m = NONE;
        assert!(
            Graph::read(&graph([[0, m], [m, 0]], [0, m], [m, m])).is_err(),
            "cycle"
        );
        assert!(
            Graph::read(&graph([[m, 0], [m, 0]], [m, m], [m, m])).is_err(),
            "wrong list"
        );
        assert!(
            Graph::read(&graph([[0, m], [m, m]], [m, m], [m, m])).is_err(),
            "missing"
        );
        assert!(
            Graph::read(&graph([[0, m], [m, 5]], [m, m], [m, m])).is_err(),
            "out of bounds"
        );
    }

    // --- Multibodies and collider components (real sets) ----------------------------------------

    /// A fixed root with a revolute arm and a spherical tip as one multibody, stepped once; the
    /// serde forms of its body, collider and multibody joint sets.
    fn multibody_world() -> (Node, Node, Node) {
        use bevy_rapier3d::rapier::prelude::*;
        let mut w = PhysicsWorld::new();
        let mut world = World::new();
        let mut entity = || u128::from(world.spawn_empty().id().to_bits());
        let root = w
            .bodies
            .insert(RigidBodyBuilder::fixed().user_data(entity()));
        let arm = w
            .bodies
            .insert(RigidBodyBuilder::dynamic().user_data(entity()));
        let tip = w
            .bodies
            .insert(RigidBodyBuilder::dynamic().user_data(entity()));
        let anchor = Vector::new(0.0, 1.0, 0.0);
        let revolute = RevoluteJointBuilder::new(Vector::Z).local_anchor2(anchor);
        let spherical = SphericalJointBuilder::new().local_anchor2(anchor);
        w.multibody_joints.insert(root, arm, revolute, true);
        w.multibody_joints.insert(arm, tip, spherical, true);
        w.step();
        (
            to_tree(&w.bodies).expect("serializes"),
            to_tree(&w.colliders).expect("serializes"),
            to_tree(&w.multibody_joints).expect("serializes"),
        )
    }

    fn check_multibody_world(bodies: &Node, colliders: &Node, mb: &Node) -> Result<(), String> {
        check_multibodies(&Sets::read(bodies, colliders)?, mb)
    }

    #[test]
    fn a_stepped_multibody_joint_set_passes() {
        let (bodies, colliders, mb) = multibody_world();
        assert_eq!(check_multibody_world(&bodies, &colliders, &mb), Ok(()));
    }

    #[test]
    fn a_link_whose_body_maps_to_another_link_is_refused() {
        let (bodies, colliders, mut mb) = multibody_world();
        *mb.at_mut("rb2mb.data.1.1.id") = Node::Uint(2);
        let e = check_multibody_world(&bodies, &colliders, &mb).expect_err("refused");
        assert!(e.contains("maps to"), "{e}");
    }

    #[test]
    fn a_link_naming_a_missing_body_is_refused() {
        let (bodies, colliders, mut mb) = multibody_world();
        *mb.at_mut("multibodies.items.0.value.links.2.rigid_body.0.index") = Node::Uint(40);
        let e = check_multibody_world(&bodies, &colliders, &mb).expect_err("refused");
        assert!(e.contains("does not exist"), "{e}");
    }

    #[test]
    fn a_mapped_body_whose_graph_node_is_not_it_is_refused() {
        let (bodies, colliders, mut mb) = multibody_world();
        *mb.at_mut("rb2mb.data.2.1.graph_id") = Node::Uint(0);
        let e = check_multibody_world(&bodies, &colliders, &mb).expect_err("refused");
        assert!(e.contains("graph node 0"), "{e}");
    }

    #[test]
    fn a_collider_component_with_a_sound_shape_and_scale_passes() {
        let c = bevy_rapier3d::prelude::Collider::cuboid(1.0, 2.0, 3.0);
        assert_eq!(check_collider_component(&to_tree(&c).unwrap()), Ok(()));
    }

    #[test]
    fn a_collider_component_with_a_bad_shape_or_scale_is_refused() {
        let c = bevy_rapier3d::prelude::Collider::ball(1.0);
        let mut tree = to_tree(&c).unwrap();
        *tree.at_mut("unscaled.radius") = Node::Float(-1.0);
        let e = check_collider_component(&tree).expect_err("refused");
        assert!(e.contains("its unscaled shape"), "{e}");
        let mut tree = to_tree(&c).unwrap();
        *tree.at_mut("scale.0") = Node::Float(f64::INFINITY);
        let e = check_collider_component(&tree).expect_err("refused");
        assert!(e.contains("scale"), "{e}");
    }
}
