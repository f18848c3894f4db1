//! New Rapier bodies, colliders and joints are created in entity order, not in Bevy's table
//! order ([rule](crate::rules#rapier-objects-are-created-in-entity-order)).
//!
//! bevy_rapier creates the Rapier object of each new `RigidBody`, `Collider` and joint in the
//! order its query visits them: table by table, in the order the tables were first matched,
//! which is the order their archetypes were created. That order is the world's history, not
//! simulation state: one unrelated entity spawned earlier with a body's component set creates
//! that archetype first and moves the whole group ahead of bodies spawned before it, a world
//! loaded from a snapshot creates its archetypes in another order than the world that saved
//! it, and the predicted world may have met an archetype in a mispredicted timeline. Rapier's
//! handles, and with them its solver order, would then follow that history.
//!
//! [`init_in_entity_order`] runs just before bevy_rapier's own creation systems. When the
//! waiting entities of a kind are not already visited in entity order, it has bevy_rapier's
//! own systems create them round by round: every waiting entity is hidden (Bevy's
//! [`Disabled`]), then each round shows a run of them in entity order whose tables are visited
//! in that order, and runs the creation system on them. Nothing is left for the schedule's own
//! pass. [`plan_rounds`] is the pure part.

use bevy::ecs::entity::EntityHashSet;
use bevy::ecs::entity_disabling::Disabled;
use bevy::ecs::query::QueryFilter;
use bevy::ecs::system::BoxedSystem;
use bevy::prelude::*;
use bevy_rapier3d::plugin::systems::{
    init_colliders, init_joints, init_rigid_bodies, sync_removals,
};
use bevy_rapier3d::prelude::*;

/// Where an entity goes in the canonical creation order: the entity index of its topmost
/// waiting ancestor (itself when none), its depth below that ancestor, its own index. An
/// ancestor waiting for the same kind of Rapier object is created first, so bevy_rapier finds
/// it when it walks up a child's hierarchy (collider offsets, joint targets); otherwise this is
/// the order of entity indices, which is the order of simulation slots.
pub(crate) type OrderKey = (u32, u32, u32);

/// One entity waiting for a Rapier object: its place in the canonical order and where it
/// sits (table and row).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Pending {
    /// The entity.
    pub entity: Entity,
    /// Its place in the canonical order.
    pub key: OrderKey,
    /// Its table (Bevy's table id).
    pub table: u32,
    /// Its row in that table.
    pub row: u32,
}

/// The rounds that create `pending` in canonical order, or `None` when one pass of
/// bevy_rapier's system already does: every entity sits in one table, in canonical order.
///
/// The order in which a query visits tables is not something to predict (Bevy matches new
/// archetypes in the iteration order of a hash map of archetype ids), so a round holds entities
/// of one table only: a run of them in canonical order, shown in that order, so the table's
/// rows are in canonical order.
pub(crate) fn plan_rounds(pending: &[Pending]) -> Option<Vec<Vec<Entity>>> {
    let mut sorted: Vec<Pending> = pending.to_vec();
    sorted.sort_by_key(|p| p.key);
    let one_table_in_order = sorted
        .windows(2)
        .all(|w| w[0].table == w[1].table && w[0].row < w[1].row);
    if one_table_in_order {
        return None;
    }
    let mut rounds: Vec<Vec<Entity>> = Vec::new();
    let mut table = None;
    for p in &sorted {
        if table != Some(p.table) {
            rounds.push(Vec::new());
            table = Some(p.table);
        }
        rounds.last_mut().expect("pushed above").push(p.entity);
    }
    Some(rounds)
}

/// Canonical keys for `entities` (those waiting in one phase): see [`OrderKey`].
fn order_keys(world: &World, entities: &[Entity]) -> Vec<OrderKey> {
    let waiting: EntityHashSet = entities.iter().copied().collect();
    entities
        .iter()
        .map(|&entity| {
            let (mut root, mut depth, mut steps) = (entity, 0, 0);
            let mut at = entity;
            // Bounded: a hierarchy is acyclic, the bound only guards against a broken one.
            while let Some(parent) = world.get::<ChildOf>(at).map(ChildOf::parent) {
                steps += 1;
                if steps > 4_096 || parent == entity {
                    break;
                }
                if waiting.contains(&parent) {
                    root = parent;
                    depth = steps;
                }
                at = parent;
            }
            (root.index_u32(), depth, entity.index_u32())
        })
        .collect()
}

/// The entities waiting in one phase (matched by either query), with their keys and places.
fn pending_of<F: QueryFilter, G: QueryFilter>(
    world: &mut World,
    first: &mut QueryState<Entity, F>,
    second: Option<&mut QueryState<Entity, G>>,
) -> Vec<Pending> {
    let mut entities: Vec<Entity> = first.iter(world).collect();
    if let Some(second) = second {
        let seen: EntityHashSet = entities.iter().copied().collect();
        let more: Vec<Entity> = second.iter(world).filter(|e| !seen.contains(e)).collect();
        entities.extend(more);
    }
    let keys = order_keys(world, &entities);
    entities
        .into_iter()
        .zip(keys)
        .map(|(entity, key)| {
            let location = world.entity(entity).location();
            Pending {
                entity,
                key,
                table: location.table_id.as_u32(),
                row: location.table_row.index_u32(),
            }
        })
        .collect()
}

/// Runs `system` once when `rounds` is `None` (one pass creates everything in canonical
/// order), else hides every entity of `rounds`, then shows each round in order and runs
/// `system` on it.
fn run_rounds(world: &mut World, rounds: Option<Vec<Vec<Entity>>>, system: &mut BoxedSystem) {
    let Some(rounds) = rounds else {
        run_system(world, system);
        return;
    };
    for entity in rounds.iter().flatten() {
        world.entity_mut(*entity).insert(Disabled);
    }
    for round in &rounds {
        for entity in round {
            world.entity_mut(*entity).remove::<Disabled>();
        }
        run_system(world, system);
    }
}

fn run_system(world: &mut World, system: &mut BoxedSystem) {
    if let Err(error) = system.run((), world) {
        error!("creating Rapier objects in entity order: {error}");
    }
}

/// The queries and bevy_rapier's creation systems, built on first use in each world.
pub(crate) struct EntityOrder {
    bodies: QueryState<Entity, (With<RigidBody>, Without<RapierRigidBodyHandle>)>,
    colliders: QueryState<Entity, (With<Collider>, Without<RapierColliderHandle>)>,
    impulse: QueryState<Entity, (With<ImpulseJoint>, Without<RapierImpulseJointHandle>)>,
    multibody: QueryState<Entity, (With<MultibodyJoint>, Without<RapierMultibodyJointHandle>)>,
    systems: [BoxedSystem; 3],
}

impl EntityOrder {
    fn new(world: &mut World) -> Self {
        let mut systems: [BoxedSystem; 3] = [
            Box::new(IntoSystem::into_system(init_rigid_bodies)),
            Box::new(IntoSystem::into_system(init_colliders)),
            Box::new(IntoSystem::into_system(init_joints)),
        ];
        for system in &mut systems {
            system.initialize(world);
        }
        Self {
            bodies: world.query_filtered(),
            colliders: world.query_filtered(),
            impulse: world.query_filtered(),
            multibody: world.query_filtered(),
            systems,
        }
    }
}

/// Creates waiting Rapier bodies, then colliders, then joints in canonical order when
/// bevy_rapier's own pass would not (see the module docs). Runs in
/// [`PhysicsSet::SyncBackend`] after bevy_rapier's removals and before its creation systems.
pub(crate) fn init_in_entity_order(world: &mut World, mut state: Local<Option<EntityOrder>>) {
    let order = state.get_or_insert_with(|| EntityOrder::new(world));
    // Each phase sees the world the previous one left: colliders find their bodies' handles,
    // and tables as the bodies' new components moved them.
    let pending = pending_of(
        world,
        &mut order.bodies,
        None::<&mut QueryState<Entity, ()>>,
    );
    run_rounds(world, plan_rounds(&pending), &mut order.systems[0]);
    let pending = pending_of(
        world,
        &mut order.colliders,
        None::<&mut QueryState<Entity, ()>>,
    );
    run_rounds(world, plan_rounds(&pending), &mut order.systems[1]);
    let pending = pending_of(world, &mut order.impulse, Some(&mut order.multibody));
    run_rounds(world, plan_rounds(&pending), &mut order.systems[2]);
}

/// bevy_rapier's `sync_removals` run once more at the end of a tick (see `worlds`), wrapped
/// in a system of its own type so that [`init_in_entity_order`] can be ordered after
/// bevy_rapier's own instance of it without also being ordered after this one.
pub(crate) fn sync_removals_at_cleanup(world: &mut World, mut state: Local<Option<BoxedSystem>>) {
    let system = state.get_or_insert_with(|| {
        let mut system: BoxedSystem = Box::new(IntoSystem::into_system(sync_removals));
        system.initialize(world);
        system
    });
    if let Err(error) = system.run((), world) {
        error!("Rapier removals at the end of a tick: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(index: u32) -> Entity {
        Entity::from_raw_u32(index).expect("valid index")
    }

    /// Pending entities given as (index, table, row).
    fn pending(list: &[(u32, u32, u32)]) -> Vec<Pending> {
        list.iter()
            .map(|&(index, table, row)| Pending {
                entity: entity(index),
                key: (index, 0, index),
                table,
                row,
            })
            .collect()
    }

    fn indices(rounds: Vec<Vec<Entity>>) -> Vec<Vec<u32>> {
        rounds
            .into_iter()
            .map(|r| r.into_iter().map(Entity::index_u32).collect())
            .collect()
    }

    #[test]
    fn entities_of_one_table_in_index_order_need_no_round() {
        assert_eq!(plan_rounds(&[]), None);
        assert_eq!(plan_rounds(&pending(&[(3, 7, 0)])), None);
        assert_eq!(
            plan_rounds(&pending(&[(9, 7, 2), (3, 7, 0), (5, 7, 1)])),
            None
        );
    }

    #[test]
    fn rows_out_of_index_order_within_one_table_are_one_round() {
        // Showing them in index order rewrites the rows: one round is enough.
        let rounds = plan_rounds(&pending(&[(7, 2, 0), (4, 2, 1)])).expect("out of order");
        assert_eq!(indices(rounds), vec![vec![4, 7]]);
    }

    #[test]
    fn each_change_of_table_in_index_order_starts_a_round() {
        // Entity 10 was spawned first with the pile's components (table 0); the ground (11,
        // table 1) precedes the rest of the pile; a player (14) has a table of its own.
        let list = [(10, 0, 0), (12, 0, 1), (13, 0, 2), (11, 1, 0), (14, 2, 0)];
        let rounds = plan_rounds(&pending(&list)).expect("several tables");
        assert_eq!(
            indices(rounds),
            vec![vec![10], vec![11], vec![12, 13], vec![14]]
        );
    }

    #[test]
    fn a_waiting_ancestor_groups_its_descendants_before_later_entities() {
        let list = [(2, 0, 0), (5, 1, 0)];
        let mut waiting = pending(&list);
        // 5 is a child of 1, which waits too: it sorts right after its parent.
        waiting.push(Pending {
            entity: entity(1),
            key: (1, 0, 1),
            table: 1,
            row: 1,
        });
        waiting[1].key = (1, 1, 5);
        let rounds = plan_rounds(&waiting).expect("two tables");
        assert_eq!(indices(rounds), vec![vec![1, 5], vec![2]]);
    }

    #[test]
    fn a_waiting_ancestor_comes_before_its_descendants() {
        let mut world = World::new();
        let parent = world.spawn_empty().id();
        let child = world.spawn(ChildOf(parent)).id();
        let other = world.spawn_empty().id();
        let grandchild = world.spawn(ChildOf(child)).id();
        // The child is listed first, and its index is below nothing here; the key groups it
        // under its waiting parent either way.
        let keys = order_keys(&world, &[grandchild, child, parent, other]);
        let p = parent.index_u32();
        assert_eq!(keys[0], (p, 2, grandchild.index_u32()));
        assert_eq!(keys[1], (p, 1, child.index_u32()));
        assert_eq!(keys[2], (p, 0, p));
        assert_eq!(keys[3], (other.index_u32(), 0, other.index_u32()));
        // Not waiting: the parent does not group the child.
        let keys = order_keys(&world, &[child]);
        assert_eq!(keys[0], (child.index_u32(), 0, child.index_u32()));
    }
}
