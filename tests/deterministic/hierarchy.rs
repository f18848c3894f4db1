//! `ChildOf`/`Children` between simulation entities roll back exactly (parents, and children in
//! the verified world's order); other relationships roll back when registered, and the ones a
//! rollback cannot restore are refused with a typed error.

use std::collections::BTreeMap;

use bevy::ecs::entity::EntityHashSet;
use bevy::prelude::*;
use simsync::deterministic::{
    NotSimulated, Parked, RelationshipRefusal, RollbackSetupFailed, SessionError,
    TryRollbackAppExt, despawn_simulated_now, spawn_simulated_now,
};
use simsync::prelude::*;

use crate::common;

/// A hashed marker with the tick (or a negative constant) an entity was spawned with.
#[derive(Component, Clone, Copy, Debug, PartialEq)]
struct Link(i32);

impl SimHash for Link {
    fn sim_hash(&self, hasher: &mut simsync::deterministic::StateHasher) {
        self.0.sim_hash(hasher);
    }
}

/// The two parents: `a` lives all along, `b` is despawned (with its children) and respawned.
#[derive(Resource, Clone, Debug, PartialEq)]
struct Parents {
    a: Entity,
    b: Option<Entity>,
}

/// Each live simulation entity with its parent and its children, in id order.
type Snapshot = Vec<(Entity, Option<Entity>, Vec<Entity>)>;

/// Not rolled back on purpose: the hierarchy (and parent `b`) after every tick this world
/// simulated.
#[derive(Resource, Default)]
struct HierarchyLog(Vec<(Tick, (Snapshot, Option<Entity>))>);

/// A tree edited every few ticks: children despawned, new children inserted at the front
/// (so `Children` order is not spawn order), children moved to the other parent, and the other
/// parent despawned with its children. Edits depend on the tick and on player 0, whose inputs
/// every peer knows, so every predicted tick has the verified tick's hierarchy.
#[derive(Clone)]
struct HierarchyGame;

impl Plugin for HierarchyGame {
    fn build(&self, app: &mut App) {
        app.rollback_hashed_component::<Link>()
            .rollback_resource::<Parents>()
            .init_resource::<HierarchyLog>()
            .add_systems(SimulationStartup, plant)
            .add_systems(SimulationTick, edit.in_set(SimulationSet::Game))
            .add_systems(SimulationTick, record.in_set(SimulationSet::Cleanup));
    }
}

fn plant(mut sim: SimCommands) {
    let a = sim.spawn((Transform::default(), Link(-1))).expect("slot");
    let b = sim.spawn((Transform::default(), Link(-2))).expect("slot");
    for i in 0..5 {
        let parent = if i < 3 { a } else { b };
        sim.spawn((
            Transform::from_xyz(i as f32, 0.0, 0.0),
            Link(i),
            ChildOf(parent),
        ))
        .expect("slot");
    }
    sim.commands.insert_resource(Parents { a, b: Some(b) });
}

fn edit(
    inputs: Res<PlayerInputs<PackedInput>>,
    tick: Res<SimTick>,
    mut parents: ResMut<Parents>,
    children: Query<&Children>,
    mut sim: SimCommands,
) {
    let t = tick.0;
    let pressed = inputs.get(0).is_some_and(|i| i.pressed(1));
    let first_of_a = children
        .get(parents.a)
        .ok()
        .and_then(|c| c.first().copied());
    let last_of_a = children.get(parents.a).ok().and_then(|c| c.last().copied());
    if t % 11 == 0
        && let Some(first) = first_of_a
    {
        sim.despawn(first);
    }
    if t % 3 == 0 || pressed {
        let child = sim.spawn((Transform::default(), Link(t))).expect("slot");
        sim.commands.entity(parents.a).insert_child(0, child);
    }
    if t % 13 == 0 {
        match parents.b {
            Some(b) => {
                if let Some(last) = last_of_a.filter(|l| Some(*l) != first_of_a || t % 11 != 0) {
                    sim.commands.entity(last).insert(ChildOf(b));
                }
            }
            None => parents.b = Some(sim.spawn((Transform::default(), Link(-t))).expect("slot")),
        }
    }
    if t % 47 == 0
        && let Some(b) = parents.b.take()
    {
        sim.despawn(b);
    }
}

fn snapshot(world: &mut World) -> Snapshot {
    let mut query = world.query_filtered::<(Entity, Option<&ChildOf>, Option<&Children>), (
        With<SimEntity>,
        Without<Parked>,
    )>();
    let mut snap: Snapshot = query
        .iter(world)
        .map(|(e, parent, children)| {
            (
                e,
                parent.map(|p| p.0),
                children.map(|c| c.to_vec()).unwrap_or_default(),
            )
        })
        .collect();
    snap.sort_by_key(|(e, ..)| *e);
    snap
}

fn record(world: &mut World) {
    let tick = world.resource::<SimTick>().0;
    let snap = snapshot(world);
    let b = world.resource::<Parents>().b;
    world
        .resource_mut::<HierarchyLog>()
        .0
        .push((tick, (snap, b)));
}

#[test]
fn every_resimulated_tick_has_the_verified_parents_and_children_order() {
    let mut app = common::app_with_game(HierarchyGame, 2, 8, |p| {
        p.edit_config(|c| {
            c.verify_predictions = true;
        })
    });
    common::run_until_verified(&mut app, 300);
    let stats = common::stats(&app);
    let worlds = app.world().resource::<SimulationWorlds>();
    let verified: BTreeMap<Tick, (Snapshot, Option<Entity>)> = worlds
        .verified()
        .resource::<HierarchyLog>()
        .0
        .iter()
        .cloned()
        .collect();
    let mut times_simulated: BTreeMap<Tick, u32> = BTreeMap::new();
    for (tick, snap) in &worlds.predicted().resource::<HierarchyLog>().0 {
        if let Some(expected) = verified.get(tick) {
            assert_eq!(snap, expected, "predicted hierarchy (and b) of tick {tick}");
            *times_simulated.entry(*tick).or_default() += 1;
        }
    }
    let compared: u32 = times_simulated.values().sum();
    let resimulated = times_simulated.values().filter(|n| **n > 1).count();
    // Every update rolls back 8 ticks, through despawns, front insertions and moves.
    assert!(compared > 2_000, "{compared}");
    assert!(resimulated > 280, "{resimulated}");
    assert!(stats.rollbacks > 280, "{stats:?}");
    assert!(stats.rollback_restored_entities > 50, "{stats:?}");
    assert!(stats.rollback_parked_entities > 50, "{stats:?}");
    // The tree really changes, and children are not in spawn order (front insertions).
    let distinct: std::collections::BTreeSet<&Snapshot> = verified.values().map(|v| &v.0).collect();
    assert!(distinct.len() > 100, "{}", distinct.len());
    let newest_first = |c: &Vec<Entity>| c.windows(2).any(|w| w[0].index() > w[1].index());
    let oldest_first = |c: &Vec<Entity>| c.windows(2).any(|w| w[0].index() < w[1].index());
    assert!(
        verified
            .values()
            .any(|v| v.0.iter().any(|(_, _, c)| newest_first(c)))
    );
    assert!(
        verified
            .values()
            .any(|v| v.0.iter().any(|(_, _, c)| oldest_first(c)))
    );
    // Despawning b removed its children with it (at ticks 47, 94, ...).
    let mut parents_despawned = 0;
    for (tick, (after, b_now)) in verified.range(1..) {
        let (before, b_before) = &verified[&(tick - 1)];
        let (Some(b), None) = (b_before, b_now) else {
            continue;
        };
        let b_children = &before.iter().find(|(e, ..)| e == b).expect("b was live").2;
        assert!(!b_children.is_empty(), "tick {tick}");
        assert!(
            after
                .iter()
                .all(|(e, p, _)| e != b && *p != Some(*b) && !b_children.contains(e)),
            "tick {tick}"
        );
        parents_despawned += 1;
    }
    assert_eq!(parents_despawned, 6);
    // The session's own prediction check (checksums include the hierarchy) agrees.
    assert!(stats.resim_ticks_checked > 280, "{stats:?}");
    assert_eq!(stats.resim_ticks_matching, stats.resim_ticks_checked);
    assert!(stats.unregistered_components.is_empty(), "{stats:?}");
    assert_eq!(stats.unsimulated_entities, 0);
}

#[test]
fn a_parent_despawned_in_the_predicted_world_comes_back_with_its_children_in_order() {
    let mut app = common::app_with_game(HierarchyGame, 2, 8, |p| p);
    common::run_until_verified(&mut app, 40);
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let worlds = &mut *worlds;
    let a = worlds.verified().resource::<Parents>().a;
    let children_before = worlds
        .verified()
        .get::<Children>(a)
        .expect("a has children")
        .to_vec();
    assert!(children_before.len() >= 3, "{children_before:?}");
    worlds.rollback_predicted();
    despawn_simulated_now(worlds.predicted_mut(), a).expect("despawn a");
    for child in children_before.iter().chain([&a]) {
        assert!(
            worlds.predicted().get::<Parked>(*child).is_some(),
            "{child} parked"
        );
    }
    let report = worlds.rollback_predicted();
    assert_eq!(report.restored_entities as usize, children_before.len() + 1);
    assert_eq!(
        report.restored_relationships as usize,
        children_before.len()
    );
    assert_eq!(
        worlds.predicted().get::<Children>(a).map(|c| c.to_vec()),
        Some(children_before)
    );
    let (p, v) = (
        snapshot(worlds.predicted_mut()),
        snapshot(worlds.verified_mut()),
    );
    assert_eq!(p, v);
    assert_eq!(worlds.predicted_checksum(), worlds.verified_checksum());
}

#[test]
fn a_reordered_children_list_is_restored_in_the_verified_order() {
    let mut app = common::app_with_game(HierarchyGame, 2, 8, |p| p);
    common::run_until_verified(&mut app, 40);
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let worlds = &mut *worlds;
    worlds.rollback_predicted();
    let a = worlds.verified().resource::<Parents>().a;
    let order = worlds
        .verified()
        .get::<Children>(a)
        .expect("children")
        .to_vec();
    // Same parents, another order: only `Children` differs.
    let mut reversed = order.clone();
    reversed.reverse();
    worlds
        .predicted_mut()
        .entity_mut(a)
        .remove::<Children>()
        .add_children(&reversed);
    assert_eq!(
        worlds.predicted().get::<Children>(a).map(|c| c.to_vec()),
        Some(reversed)
    );
    assert_ne!(worlds.predicted_checksum(), worlds.verified_checksum());
    let report = worlds.rollback_predicted();
    assert_eq!(report.restored_relationships as usize, order.len());
    assert_eq!(
        worlds.predicted().get::<Children>(a).map(|c| c.to_vec()),
        Some(order)
    );
    assert_eq!(worlds.predicted_checksum(), worlds.verified_checksum());
}

#[test]
fn a_child_that_is_not_simulation_state_is_left_out_of_checksums_and_restores() {
    let mut app = common::app_with_game(HierarchyGame, 2, 8, |p| p);
    common::run_until_verified(&mut app, 40);
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let worlds = &mut *worlds;
    worlds.rollback_predicted();
    let a = worlds.verified().resource::<Parents>().a;
    let order = worlds
        .verified()
        .get::<Children>(a)
        .expect("children")
        .to_vec();
    let helper = worlds
        .predicted_mut()
        .spawn((NotSimulated, ChildOf(a)))
        .id();
    assert_eq!(worlds.predicted_checksum(), worlds.verified_checksum());
    let mut reversed = order.clone();
    reversed.reverse();
    worlds.predicted_mut().entity_mut(a).remove::<Children>();
    worlds.predicted_mut().entity_mut(a).add_children(&reversed);
    worlds.predicted_mut().entity_mut(helper).insert(ChildOf(a));
    let report = worlds.rollback_predicted();
    assert_eq!(report.restored_relationships as usize, order.len());
    let restored = worlds
        .predicted()
        .get::<Children>(a)
        .expect("children")
        .to_vec();
    assert_eq!(
        restored
            .iter()
            .filter(|c| **c != helper)
            .copied()
            .collect::<Vec<_>>(),
        order
    );
    assert_eq!(
        restored.len(),
        order.len() + 1,
        "the helper keeps its parent"
    );
    assert_eq!(worlds.predicted_checksum(), worlds.verified_checksum());
}

/// A user relationship with an ordered target: supported once registered.
#[derive(Component, Clone, PartialEq, Debug)]
#[relationship(relationship_target = Followers)]
struct Follows(Entity);

#[derive(Component, Debug)]
#[relationship_target(relationship = Follows)]
struct Followers(Vec<Entity>);

/// A relationship whose target is a hash set: its order could differ between the worlds.
#[derive(Component, Clone, PartialEq, Debug)]
#[relationship(relationship_target = Likers)]
struct Likes(Entity);

#[derive(Component, Debug)]
#[relationship_target(relationship = Likes)]
struct Likers(EntityHashSet);

/// A relationship whose target despawns its sources through Bevy.
#[derive(Component, Clone, PartialEq, Debug)]
#[relationship(relationship_target = Crew)]
struct CrewOf(Entity);

#[derive(Component, Debug)]
#[relationship_target(relationship = CrewOf, linked_spawn)]
struct Crew(Vec<Entity>);

/// A relationship target that is `Clone` and mutable, so `rollback_component` compiles for it.
#[derive(Component, Clone, PartialEq, Debug)]
#[relationship(relationship_target = Watchers)]
struct Watches(Entity);

#[derive(Component, Clone, Debug)]
#[relationship_target(relationship = Watches)]
struct Watchers(Vec<Entity>);

#[derive(Component, Clone, Debug)]
#[component(immutable)]
struct Frozen(#[allow(dead_code)] u32);

#[test]
fn unsupported_relationships_and_immutable_components_are_refused_with_typed_errors() {
    let mut app = App::new();
    let err = app.try_rollback_component::<ChildOf>().err();
    assert!(
        matches!(err, Some(SessionError::RelationshipAsComponent { type_name }) if type_name.ends_with("ChildOf")),
        "{err:?}"
    );
    let err = app.try_rollback_component::<Frozen>().err();
    assert!(
        matches!(err, Some(SessionError::ImmutableComponent { type_name }) if type_name.ends_with("Frozen")),
        "{err:?}"
    );
    let err = app.try_rollback_component::<Watchers>().err();
    assert!(
        matches!(err, Some(SessionError::RelationshipAsComponent { .. })),
        "{err:?}"
    );
    let err = app.try_rollback_relationship::<Likes>().err();
    assert_eq!(
        err,
        Some(SessionError::UnsupportedRelationship {
            type_name: std::any::type_name::<Likes>(),
            reason: RelationshipRefusal::UnorderedTarget,
        })
    );
    let err = app.try_rollback_relationship::<CrewOf>().err();
    assert_eq!(
        err,
        Some(SessionError::UnsupportedRelationship {
            type_name: std::any::type_name::<CrewOf>(),
            reason: RelationshipRefusal::LinkedSpawn,
        })
    );
    assert!(app.try_rollback_relationship::<Follows>().is_ok());
    assert!(app.try_rollback_relationship::<ChildOf>().is_ok());
    let registry = app
        .world()
        .resource::<simsync::deterministic::RollbackRegistry>();
    assert!(registry.has_relationship::<Follows>());
    assert!(!registry.has_relationship::<Likes>());
    assert!(!registry.has_relationship::<CrewOf>());
    assert!(
        registry.setup_errors().is_empty(),
        "try_ errors are returned, not recorded"
    );
}

/// Registers a relationship target as a plain component (refused) and `Follows`.
#[derive(Clone)]
struct MisregisteringGame;

impl Plugin for MisregisteringGame {
    fn build(&self, app: &mut App) {
        app.rollback_component::<Watchers>()
            .try_rollback_relationship::<Follows>()
            .expect("an ordered relationship is supported");
        app.add_systems(SimulationStartup, |world: &mut World| {
            let leader = spawn_simulated_now(world, Link(0)).expect("slot");
            for i in 1..4 {
                spawn_simulated_now(world, (Link(i), Follows(leader))).expect("slot");
            }
        })
        .rollback_hashed_component::<Link>();
    }
}

#[test]
fn a_refused_registration_in_a_game_plugin_is_a_message_and_a_registered_relationship_rolls_back() {
    let mut app = common::app_with_game(MisregisteringGame, 1, 2, |p| p);
    let mut setup_errors = Vec::new();
    for _ in 0..5 {
        app.update();
        let messages = app.world().resource::<Messages<RollbackSetupFailed>>();
        setup_errors.extend(
            messages
                .get_cursor()
                .read(messages)
                .map(|m| m.error.clone()),
        );
    }
    setup_errors.dedup();
    assert_eq!(setup_errors.len(), 1, "{setup_errors:?}");
    assert!(matches!(
        setup_errors[0],
        SessionError::RelationshipAsComponent { type_name } if type_name.ends_with("Watchers")
    ));
    assert_eq!(common::stats(&app).rollback_setup_errors, 1);

    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let worlds = &mut *worlds;
    worlds.rollback_predicted();
    let mut query = worlds.verified_mut().query::<(Entity, &Followers)>();
    let (leader, followers) = query
        .iter(worlds.verified())
        .map(|(e, f)| (e, f.0.clone()))
        .next()
        .expect("a leader");
    assert_eq!(followers.len(), 3);
    // The predicted world loses one follower and gains another order; a rollback restores both.
    worlds
        .predicted_mut()
        .entity_mut(followers[0])
        .remove::<Follows>();
    worlds
        .predicted_mut()
        .entity_mut(followers[0])
        .insert(Follows(leader));
    assert_ne!(worlds.predicted_checksum(), worlds.verified_checksum());
    let report = worlds.rollback_predicted();
    assert_eq!(report.restored_relationships, 3);
    assert_eq!(
        worlds
            .predicted()
            .get::<Followers>(leader)
            .map(|f| f.0.clone()),
        Some(followers)
    );
    assert_eq!(worlds.predicted_checksum(), worlds.verified_checksum());
}
