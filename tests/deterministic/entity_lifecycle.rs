//! Spawns and despawns are undone by a rollback; ids are equal in both worlds.

use std::any::TypeId;

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync::deterministic::SessionMode;
use simsync::deterministic::{Parked, despawn_simulated_now, spawn_simulated_now};
use simsync::prelude::*;

use crate::common::{self, Crate, TestGame};

fn worlds(app: &mut App) -> Mut<'_, SimulationWorlds> {
    app.world_mut().resource_mut::<SimulationWorlds>()
}

fn live_ids(world: &mut World) -> Vec<Entity> {
    let mut q = world.query_filtered::<Entity, (With<SimEntity>, Without<Parked>)>();
    let mut v: Vec<Entity> = q.iter(world).collect();
    v.sort();
    v
}

fn component_types(world: &World, e: Entity) -> Vec<TypeId> {
    let mut types: Vec<TypeId> = world
        .inspect_entity(e)
        .expect("entity exists")
        .filter_map(|(_, info)| info.type_id())
        .collect();
    types.sort();
    types
}

#[test]
fn despawn_then_rollback_brings_the_entity_back_with_every_component() {
    let mut app = common::app(
        TestGame {
            boxes: 50,
            ..TestGame::default()
        },
        8,
        SessionMode::Predicted,
        false,
    );
    common::run_until_verified(&mut app, 40);
    let mut w = worlds(&mut app);
    let w = &mut *w;
    let mut q = w.verified_mut().query::<(Entity, &Crate)>();
    let victim = q
        .iter(w.verified_mut())
        .find(|(_, c)| c.0 == 7)
        .map(|(e, _)| e)
        .expect("crate 7");
    let before = component_types(w.verified(), victim);
    assert!(before.contains(&TypeId::of::<RapierRigidBodyHandle>()));
    assert!(before.contains(&TypeId::of::<Crate>()));
    assert!(before.len() > 10, "{}", before.len());

    despawn_simulated_now(w.predicted_mut(), victim).expect("despawn");
    assert!(w.predicted().get::<Transform>(victim).is_none());
    assert!(w.predicted().get::<Parked>(victim).is_some());

    let report = w.rollback_predicted();
    assert_eq!(report.restored_entities, 1);
    assert_eq!(component_types(w.predicted(), victim), before);
    assert_eq!(
        w.predicted().get::<Transform>(victim),
        w.verified().get::<Transform>(victim)
    );
    assert_eq!(w.predicted_checksum(), w.verified_checksum());
    assert_eq!(live_ids(w.predicted_mut()), live_ids(w.verified_mut()));
}

#[test]
fn a_spawn_only_in_the_mispredicted_timeline_is_gone_after_rollback() {
    let mut app = common::app(
        TestGame {
            boxes: 25,
            ..TestGame::default()
        },
        8,
        SessionMode::Predicted,
        false,
    );
    common::run_until_verified(&mut app, 30);
    let mut w = worlds(&mut app);
    let w = &mut *w;
    let ghost = spawn_simulated_now(
        w.predicted_mut(),
        (
            RigidBody::Dynamic,
            Collider::ball(0.3),
            Transform::from_xyz(0.0, 5.0, 0.0),
            Velocity::zero(),
        ),
    )
    .expect("spawn");
    assert!(w.predicted().get::<Transform>(ghost).is_some());
    assert!(w.verified().get_entity(ghost).is_err());

    let report = w.rollback_predicted();
    assert_eq!(report.parked_entities, 1);
    assert!(w.predicted().get::<Transform>(ghost).is_none());
    assert_eq!(w.predicted_checksum(), w.verified_checksum());
    assert_eq!(live_ids(w.predicted_mut()), live_ids(w.verified_mut()));
}

#[test]
fn projectile_spawns_and_despawns_in_mispredicted_timelines_keep_ids_equal() {
    let mut app = common::app(
        TestGame {
            boxes: 50,
            projectiles: true,
            ..TestGame::default()
        },
        6,
        SessionMode::Predicted,
        true,
    );
    let mut checked_after_rollback = 0;
    for _ in 0..30 {
        for _ in 0..10 {
            app.update();
        }
        let mut w = worlds(&mut app);
        let w = &mut *w;
        w.rollback_predicted();
        assert_eq!(live_ids(w.predicted_mut()), live_ids(w.verified_mut()));
        assert_eq!(w.predicted_checksum(), w.verified_checksum());
        checked_after_rollback += 1;
    }
    let stats = common::stats(&app);
    assert_eq!(checked_after_rollback, 30);
    assert!(stats.rollback_parked_entities > 0, "{stats:?}");
    assert!(stats.rollback_restored_entities > 0, "{stats:?}");
    assert_eq!(
        stats.resim_ticks_matching, stats.resim_ticks_checked,
        "{stats:?}"
    );
}
