//! API misuse and bad configuration give typed errors or logged rejections, never panics.

use bevy::prelude::*;
use simsync_deterministic::prelude::*;
use simsync_deterministic::{
    ReservedSlots, RollbackRegistry, RollbackStrategy, SessionError, SessionSetupError,
    SimulationEntities, UnregisteredComponent,
};
use simsync_time::TickRate;

#[derive(Clone)]
struct Empty;
impl Plugin for Empty {
    fn build(&self, _app: &mut App) {}
}

#[derive(Component, Clone)]
struct NotRegistered(#[allow(dead_code)] u32);

#[derive(Clone)]
struct Leaky;
impl Plugin for Leaky {
    fn build(&self, app: &mut App) {
        app.add_systems(SimulationStartup, |mut sim: SimCommands| {
            sim.spawn((Transform::default(), NotRegistered(3)))
                .expect("slot");
        });
    }
}

fn stepped(plugin: DeterministicPlugin<PackedInput>) -> DeterministicPlugin<PackedInput> {
    let config = SessionConfig {
        clock: SessionClock::Stepped {
            ticks_per_update: 1,
        },
        ..plugin.session_config()
    };
    plugin.config(config)
}

#[test]
fn a_tick_rate_of_zero_is_a_typed_error() {
    let err = SessionError::from(TickRate::new(0).expect_err("rate 0 rejected"));
    assert!(matches!(err, SessionError::TickRate(_)), "{err:?}");
    assert!(TickRate::new(0).is_err());
}

#[test]
fn invalid_configuration_installs_no_session_and_does_not_panic() {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    app.add_plugins(stepped(
        DeterministicPlugin::<PackedInput>::new(Empty).players(0),
    ));
    app.finish();
    app.cleanup();
    app.update();
    let error = app.world().resource::<SessionSetupError>().0.clone();
    assert_eq!(
        error,
        SessionError::InvalidConfig {
            field: "players",
            value: "0".into(),
            reason: "at least one player"
        }
    );
    assert!(app.world().get_resource::<SimulationWorlds>().is_none());
}

#[test]
fn config_validation_names_the_field() {
    let base = SessionConfig::default();
    let cases: Vec<(SessionConfig, &str)> = vec![
        (
            SessionConfig {
                checksum_interval: 0,
                ..base.clone()
            },
            "checksum_interval",
        ),
        (
            SessionConfig {
                rollback_window: 5_000,
                ..base.clone()
            },
            "rollback_window",
        ),
        (
            SessionConfig {
                max_simulation_entities: 0,
                ..base.clone()
            },
            "max_simulation_entities",
        ),
        (
            SessionConfig {
                input_capacity: 10,
                ..base.clone()
            },
            "input_capacity",
        ),
        (
            SessionConfig {
                clock: SessionClock::Stepped {
                    ticks_per_update: 0,
                },
                ..base.clone()
            },
            "clock.ticks_per_update",
        ),
    ];
    for (config, field) in cases {
        match config.validate() {
            Err(SessionError::InvalidConfig { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: expected InvalidConfig, got {other:?}"),
        }
    }
    let unknown = SessionConfig {
        local: LocalSessionConfig {
            known_players: vec![5],
            ..LocalSessionConfig::default()
        },
        ..base.clone()
    };
    assert_eq!(
        unknown.validate(),
        Err(SessionError::UnknownPlayer {
            player: 5,
            players: 2
        })
    );
    assert_eq!(base.validate(), Ok(()));
}

#[test]
fn an_unknown_player_index_is_a_typed_error() {
    let mut inputs = LocalInputs::<PackedInput>::new(2);
    assert_eq!(inputs.set(1, PackedInput::default()), Ok(()));
    assert_eq!(
        inputs.set(2, PackedInput::default()),
        Err(SessionError::UnknownPlayer {
            player: 2,
            players: 2
        })
    );
}

#[test]
fn registering_a_type_after_the_session_started_is_a_typed_error() {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    app.add_plugins(stepped(DeterministicPlugin::<PackedInput>::new(Empty)));
    app.finish();
    app.cleanup();
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    assert_eq!(worlds.try_register_component::<NotRegistered>(), Ok(()));
    app.update();
    let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
    let err = worlds.try_register_component::<Transform>();
    assert!(
        matches!(err, Err(SessionError::SessionStarted { type_name }) if type_name.ends_with("Transform")),
        "{err:?}"
    );
    let mut registry = RollbackRegistry::default();
    assert!(
        registry
            .register_component::<NotRegistered>(RollbackStrategy::Clone)
            .is_ok()
    );
}

#[test]
fn updating_before_finish_and_cleanup_builds_the_worlds_in_the_first_session_update() {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    app.add_plugins(stepped(DeterministicPlugin::<PackedInput>::new(Empty)));
    assert!(app.world().get_resource::<SimulationWorlds>().is_none());
    // No finish()/cleanup(): the first session update builds the worlds and verifies.
    app.world_mut().run_schedule(PreUpdate);
    assert!(app.world().get_resource::<SimulationWorlds>().is_some());
    assert!(app.world().get_resource::<SessionSetupError>().is_none());
    assert_eq!(app.world().resource::<SessionStats>().ticks_verified, 1);
}

#[test]
fn an_unregistered_component_on_a_simulation_entity_is_reported_once() {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    app.add_plugins(stepped(
        DeterministicPlugin::<PackedInput>::new(Leaky).config(SessionConfig {
            local: LocalSessionConfig {
                latency_ticks: vec![2],
                ..LocalSessionConfig::default()
            },
            ..Default::default()
        }),
    ));
    app.finish();
    app.cleanup();
    let mut seen = Vec::new();
    for _ in 0..10 {
        app.update();
        let messages = app.world().resource::<Messages<UnregisteredComponent>>();
        let mut cursor = messages.get_cursor();
        for m in cursor.read(messages) {
            seen.push(m.type_name.clone());
        }
    }
    let stats = app.world().resource::<SessionStats>();
    assert_eq!(stats.unregistered_components.len(), 1, "{stats:?}");
    assert!(stats.unregistered_components[0].contains("NotRegistered"));
    seen.dedup();
    assert_eq!(seen.len(), 1, "{seen:?}");
}

#[test]
fn the_allocator_reuses_a_slot_only_after_the_delay_and_reports_exhaustion() {
    let mut world = World::new();
    let slots = ReservedSlots::reserve(&mut world, 2).expect("fresh world");
    let mut alloc = SimulationEntities::new(2, 5);
    let a = alloc.allocate(0, &slots).expect("first");
    let b = alloc.allocate(0, &slots).expect("second");
    assert_ne!(a, b);
    assert_eq!(
        alloc.allocate(0, &slots),
        Err(SessionError::SimulationEntitiesExhausted { capacity: 2 })
    );
    alloc.free(a, 10, &slots);
    assert!(
        alloc.allocate(14, &slots).is_err(),
        "reused before the delay"
    );
    let again = alloc.allocate(15, &slots).expect("reused after 5 ticks");
    assert_eq!(again.index(), a.index());
    assert_eq!(again.generation(), a.generation().after_versions(1));
}

#[test]
fn the_session_rate_reaches_the_app_through_virtual_time_in_either_plugin_order() {
    let rate = TickRate::new(30).expect("rate");
    for time_first in [true, false] {
        let mut app = App::new();
        app.add_plugins(MinimalPlugins);
        if time_first {
            app.add_plugins(simsync_time::VirtualTimePlugin::default());
        }
        app.add_plugins(stepped(
            DeterministicPlugin::<PackedInput>::new(Empty).config(SessionConfig {
                tick_rate: rate,
                ..Default::default()
            }),
        ));
        if !time_first {
            app.add_plugins(simsync_time::VirtualTimePlugin::default());
        }
        assert_eq!(
            *app.world().resource::<TickRate>(),
            rate,
            "time first: {time_first}"
        );
    }
}
