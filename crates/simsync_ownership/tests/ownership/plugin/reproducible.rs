//! Reproducible participants: the participant plugin puts Rapier on the ownership tick (or
//! refuses the setup, saying how to fix it), so two runs of the same script give the same
//! ownership history and the same final positions.

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync_net::prelude::*;
use simsync_ownership::prelude::*;
use simsync_ownership::{OwnershipSetupError, ParticipantId};

use super::harness::{Body, DT, Session, participant_app, steps};

#[test]
fn the_participant_plugin_puts_rapier_on_the_network_tick() {
    let network = MemoryNetwork::perfect(1);
    // The harness inserts no `TimestepMode`: Rapier's default would be `Variable`.
    let mut app = participant_app(&network, 1, &[Body::floating(1, Vec3::ZERO)]);
    app.update();
    assert_eq!(
        app.world().resource::<TimestepMode>(),
        &TimestepMode::Fixed {
            dt: DT.as_secs_f32(),
            substeps: 1
        }
    );
    assert!(!app.world().contains_resource::<OwnershipSetupError>());
}

fn participant_with(clock: NetClock, mode: Option<TimestepMode>) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins((
            TransformPlugin,
            RapierPhysicsPlugin::<NoUserData>::default(),
        ))
        .add_plugins(NetClientPlugin::default().with_clock(clock))
        .add_plugins(OwnershipPlugin::participant());
    if let Some(mode) = mode {
        app.insert_resource(mode);
    }
    app.update();
    app
}

fn setup_error(app: &App) -> Option<OwnershipError> {
    app.world()
        .get_resource::<OwnershipSetupError>()
        .map(|e| e.0.clone())
}

#[test]
fn a_physics_step_other_than_the_tick_is_a_setup_error_saying_how() {
    // `TimestepMode` inserted before the plugins finish, as a user would.
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins((
            TransformPlugin,
            RapierPhysicsPlugin::<NoUserData>::default(),
        ))
        .insert_resource(TimestepMode::Fixed {
            dt: 1.0 / 60.0,
            substeps: 1,
        })
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::fixed_hz(64)))
        .add_plugins(OwnershipPlugin::participant());
    app.update();
    let error = setup_error(&app).expect("refused");
    assert!(matches!(error, OwnershipError::PhysicsTimestep { .. }));
    assert!(error.to_string().contains("TimestepMode"), "{error}");
    assert!(!app.world().contains_resource::<OwnershipClient>());
    // The same dt is kept, substeps included.
    let same = participant_with(
        NetClock::fixed_hz(64),
        Some(TimestepMode::Fixed {
            dt: 1.0 / 64.0,
            substeps: 4,
        }),
    );
    assert_eq!(setup_error(&same), None);
}

#[test]
fn a_wall_clock_network_tick_is_a_setup_error_saying_how() {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins((
            TransformPlugin,
            RapierPhysicsPlugin::<NoUserData>::default(),
        ))
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::Real))
        .add_plugins(OwnershipPlugin::participant());
    app.update();
    let error = setup_error(&app).expect("refused");
    assert!(error.to_string().contains("fixed_hz"), "{error}");
    // The systems are inert, not panicking.
    app.update();
    let zero = participant_with(NetClock::Fixed(std::time::Duration::ZERO), None);
    assert!(setup_error(&zero).is_some());
}

/// Everything one run leaves behind: the server's owner of every body after every step, and
/// every participant's final positions and velocities, bit for bit.
#[derive(Debug, PartialEq)]
struct Run {
    history: Vec<(u32, u64, Option<ParticipantId>, Priority)>,
    finals: Vec<[u32; 6]>,
}

fn run_script() -> Run {
    let mut bodies = vec![Body::ground(99, Vec3::new(0.0, -0.5, 0.0))];
    bodies.extend(
        (1..=4).map(|i| Body::falling(i, Vec3::new(i as f32 * 0.6, 0.3 + 0.6 * i as f32, 0.0))),
    );
    let mut s = Session::conditioned(
        11,
        simsync_net::LinkConditionerConfig::PERFECT
            .with_latency(20, 5)
            .with_loss(5.0),
        3,
        &bodies,
    );
    let mut history = Vec::new();
    let mut seen: Vec<Option<(ParticipantId, Priority)>> = vec![None; 5];
    for step in 0..steps(4_000) {
        match step {
            10 => {
                s.command(0, 2, |e| {
                    e.poke();
                });
                s.set_velocity(0, 2, Vec3::new(2.0, 1.0, 0.0));
            }
            60 => s.command(1, 3, |e| {
                e.grab();
            }),
            90 => s.command(2, 3, |e| {
                e.poke();
            }),
            150 => s.command(1, 3, |e| {
                e.release_grab();
            }),
            _ => {}
        }
        s.step();
        for id in 1..=4u64 {
            let now = s.server_owner(id);
            if now != seen[id as usize] {
                seen[id as usize] = now;
                let (o, p) = now.map_or((None, Priority::NONE), |(o, p)| (Some(o), p));
                history.push((step, id, o, p));
            }
        }
    }
    let mut finals = Vec::new();
    for i in 0..3 {
        for id in 1..=4 {
            let (at, v) = s.body_on(i, id);
            finals.push([
                at.x.to_bits(),
                at.y.to_bits(),
                at.z.to_bits(),
                v.linear.x.to_bits(),
                v.linear.y.to_bits(),
                v.linear.z.to_bits(),
            ]);
        }
    }
    Run { history, finals }
}

#[test]
fn two_runs_of_the_same_script_give_the_same_ownership_history_and_positions() {
    let first = run_script();
    assert!(first.history.len() >= 4, "{:?}", first.history);
    let second = run_script();
    assert_eq!(first.history, second.history);
    assert_eq!(first.finals, second.finals);
}
