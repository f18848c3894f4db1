//! The session lifecycle: a networked client goes Connecting → WaitingForPlayers → Running, a
//! refused one ends in Rejected with the reason, a lost connection is Disconnected, and a local
//! session runs at once, ends at its end tick, and starts again in the same App.

use bevy::prelude::*;
use bevy_state::state::State;
use simsync::deterministic::{
    SessionEnd, SessionLifecycle, SessionState, SessionStateChanged, SessionStateReason,
    restart_session,
};
use simsync::prelude::*;
use simsync::relay::DeterministicServerPlugin;
use simsync::time::TickRate;
use simsync_net::bevy_renet::RenetClient;
use simsync_net::{LinkConditionerConfig, RejectReason};

use super::harness::{PeersExt, peers, peers_of, plugin};
use crate::common::{TestGame, app, run_until_verified};

/// The `SessionStateChanged` messages an App wrote.
#[derive(Resource, Default)]
struct Changes(Vec<SessionStateChanged>);

fn keep_changes(mut read: MessageReader<SessionStateChanged>, mut changes: ResMut<Changes>) {
    changes.0.extend(read.read().cloned());
}

fn record_changes(app: &mut App) {
    app.init_resource::<Changes>()
        .add_systems(Last, keep_changes);
}

fn changes(app: &App) -> Vec<(SessionState, SessionState)> {
    app.world()
        .resource::<Changes>()
        .0
        .iter()
        .map(|c| (c.from, c.to))
        .collect()
}

/// The lifecycle resource, after checking the Bevy state agrees with it.
fn lifecycle(app: &App) -> SessionLifecycle {
    let lifecycle = app.world().resource::<SessionLifecycle>().clone();
    assert_eq!(
        *app.world().resource::<State<SessionState>>().get(),
        lifecycle.state,
        "State<SessionState> follows the lifecycle"
    );
    lifecycle
}

#[test]
fn a_networked_client_connects_waits_for_players_and_runs() {
    let mut h = peers(TestGame::default(), LinkConditionerConfig::PERFECT)
        .customize(|_, client| record_changes(client))
        .build()
        .expect("peers");
    for c in 0..2 {
        let client = h.client(c).expect("running");
        assert_eq!(lifecycle(client).state, SessionState::Connecting);
    }
    h.verify(30, 400);
    for c in 0..2 {
        let client = h.client(c).expect("running");
        assert_eq!(
            changes(client),
            vec![
                (SessionState::Connecting, SessionState::WaitingForPlayers),
                (SessionState::WaitingForPlayers, SessionState::Running),
            ]
        );
        let recorded = &client.world().resource::<Changes>().0;
        assert_eq!(
            recorded[0].reason,
            SessionStateReason::Joined { slot: c as u8 }
        );
        assert_eq!(recorded[1].reason, SessionStateReason::Started);
        assert_eq!(lifecycle(client).state, SessionState::Running);
    }
}

#[test]
fn a_client_whose_connection_is_lost_is_disconnected() {
    let mut h = peers(TestGame::default(), LinkConditionerConfig::PERFECT)
        .build()
        .expect("peers");
    h.verify(10, 400);
    let client = h.client_mut(0).expect("running");
    record_changes(client);
    client
        .world_mut()
        .resource_mut::<RenetClient>()
        .disconnect();
    // A disconnected client stops a run: one step by hand.
    h.step();
    let client = h.client(0).expect("running");
    assert_eq!(
        changes(client),
        vec![(SessionState::Running, SessionState::Disconnected)]
    );
    assert_eq!(
        lifecycle(client).reason,
        Some(SessionStateReason::ConnectionLost)
    );
}

#[test]
fn a_60_hz_client_ends_rejected_with_the_reason() {
    let sixty = TickRate::new(60).expect("valid tick rate");
    let mut h = peers_of(2, move |_| {
        plugin(TestGame::default()).edit_config(|c| c.tick_rate = sixty)
    })
    .relay(DeterministicServerPlugin::new::<PackedInput>(2, 64))
    .clients(1)
    .seed(7)
    .customize(|_, client| record_changes(client))
    .build()
    .expect("peers");
    // A refused client stops a run: step by hand.
    for _ in 0..60 {
        h.step();
    }
    let client = h.client(0).expect("running");
    assert_eq!(
        changes(client),
        vec![(SessionState::Connecting, SessionState::Rejected)]
    );
    assert_eq!(
        lifecycle(client).reason,
        Some(SessionStateReason::Rejected(
            RejectReason::TickRateMismatch {
                server: 64,
                client: 60,
            }
        ))
    );
}

#[test]
fn a_local_session_runs_at_once_and_ends_at_its_end_tick() {
    let mut local = app(TestGame::default(), 2, SessionMode::Predicted, false);
    record_changes(&mut local);
    assert_eq!(lifecycle(&local).state, SessionState::Running);
    local.world_mut().resource_mut::<SessionEnd>().at_tick = Some(20);
    run_until_verified(&mut local, 19);
    assert_eq!(lifecycle(&local).state, SessionState::Running);
    run_until_verified(&mut local, 21);
    assert_eq!(
        changes(&local),
        vec![(SessionState::Running, SessionState::Ended)]
    );
    assert!(matches!(
        lifecycle(&local).reason,
        Some(SessionStateReason::EndTickReached { tick }) if tick >= 20
    ));
}

/// The verified world's tick and checksum.
fn verified_state(app: &mut App) -> (i32, u64) {
    let tick = app.world().resource::<SessionStats>().verified_tick;
    let checksum = app
        .world_mut()
        .resource_mut::<SimulationWorlds>()
        .verified_checksum();
    (tick, checksum)
}

#[test]
fn a_session_ended_and_restarted_in_one_app_verifies_again_from_tick_1() {
    let mut local = app(TestGame::default(), 2, SessionMode::Predicted, false);
    record_changes(&mut local);
    local.world_mut().resource_mut::<SessionEnd>().now = true;
    run_until_verified(&mut local, 30);
    let first = verified_state(&mut local);
    assert_eq!(lifecycle(&local).state, SessionState::Ended);

    restart_session::<PackedInput>(local.world_mut()).expect("restarts");
    let stats = local.world().resource::<SessionStats>().clone();
    assert_eq!(
        (stats.verified_tick, stats.ticks_verified, stats.rollbacks),
        (0, 0, 0)
    );
    assert_eq!(
        local.world().resource::<SessionLifecycle>().clone(),
        SessionLifecycle {
            state: SessionState::Running,
            reason: Some(SessionStateReason::Restarted),
        }
    );
    local.update();
    assert_eq!(lifecycle(&local).state, SessionState::Running);
    assert!(local.world().resource::<SessionStats>().verified_tick <= 1);
    run_until_verified(&mut local, first.0);
    let again = verified_state(&mut local);
    assert_eq!(again, first, "the same inputs give the same verified state");
    let stats = local.world().resource::<SessionStats>().clone();
    assert_eq!(stats.ticks_verified, stats.verified_tick as u64);
    assert_eq!(
        changes(&local),
        vec![
            (SessionState::Running, SessionState::Ended),
            (SessionState::Ended, SessionState::Running),
        ]
    );
}
