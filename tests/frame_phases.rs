//! Frame phases and virtual-time events inside the deterministic simulation worlds.
//!
//! A tiny game (no physics of its own) whose `SimulationTick` runs the four frame phases
//! (`FramePhasesPlugin::in_schedule(SimulationTick).within(SimulationSet::Game)`):
//! - `FrameSetup` pops the events due at `CurrentInstant` from a rolled-back
//!   `VirtualEventQueue<u32>` and records them in a hashed log;
//! - `ObjectTick` updates one double-buffered object per player from its owner's input and the
//!   other objects' frame-start values;
//! - `NetworkTick` schedules events derived from each player's input (plus two at an equal
//!   instant every tick, which must pop first-in-first-out).
//!
//! Player 1's inputs arrive 6 ticks late, so the predicted world schedules events from
//! mispredicted inputs; those must vanish on rollback and never pop in the verified timeline.

use crate::common;

use std::collections::BTreeSet;

use bevy::prelude::*;
use simsync::deterministic::{SessionMode, StateHasher};
use simsync::prelude::*;

/// Verified ticks each scenario runs.
const TICKS: i32 = 240;

/// Payload layout: `tick << 8 | low byte`. Player events have low byte `player << 7 | code`
/// (`code < 64`, so `0..64` and `128..192`); the two equal-instant events use 126 and 127.
const FIFO_FIRST: u32 = 126;
const FIFO_SECOND: u32 = 127;

/// Which player owns a double-buffered object.
#[derive(Component, Clone, Copy, Debug, PartialEq)]
struct Owner(u8);

/// Everything the game observed, rolled back and part of checksums.
#[derive(Resource, Clone, Debug, Default, PartialEq)]
struct EventLog {
    /// `(tick, event)` in pop order.
    popped: Vec<(i32, u32)>,
    /// `(tick, event)` in scheduling order.
    scheduled: Vec<(i32, u32)>,
    /// The objects' `Current<i64>` at the start of the last frame, by owner.
    objects: Vec<i64>,
}

impl SimHash for EventLog {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        for list in [&self.popped, &self.scheduled] {
            (list.len() as u64).sim_hash(hasher);
            for (tick, event) in list {
                tick.sim_hash(hasher);
                event.sim_hash(hasher);
            }
        }
        for value in &self.objects {
            value.sim_hash(hasher);
        }
    }
}

/// The game; `dispatch` pops the queue through `VirtualTimePlugin`'s dispatch (observers, time
/// rule 17) instead of the game's own `drain_due` in `FrameSetup`.
#[derive(Clone)]
struct EventGame {
    dispatch: bool,
}

impl Plugin for EventGame {
    fn build(&self, app: &mut App) {
        if self.dispatch {
            app.add_virtual_events::<u32>(Delivery::Observers)
                .add_observer(log_dispatched_event);
        }
        let pop = pop_due_events.run_if(no_dispatch(self.dispatch));
        app.add_plugins(FramePhasesPlugin::in_schedule(SimulationTick).within(SimulationSet::Game))
            .register_double_buffered::<i64>()
            .init_resource::<VirtualEventQueue<u32>>()
            .init_resource::<EventLog>()
            .rollback_resource::<VirtualEventQueue<u32>>()
            .rollback_hashed_resource::<EventLog>()
            .rollback_component::<Current<i64>>()
            .rollback_component::<Next<i64>>()
            .rollback_component::<Owner>()
            .add_systems(SimulationStartup, spawn_objects)
            .add_systems(
                SimulationTick,
                (
                    (pop, record_objects).chain().in_set(FramePhase::FrameSetup),
                    tick_objects.in_set(FramePhase::ObjectTick),
                    schedule_events.in_set(FramePhase::NetworkTick),
                ),
            );
    }
}

fn spawn_objects(mut sim: SimCommands, inputs: Res<PlayerInputs<PackedInput>>) {
    for p in 0..inputs.len() as u8 {
        sim.spawn((DoubleBuffered::new(i64::from(p) + 1), Owner(p)))
            .expect("slot");
    }
}

fn no_dispatch(dispatch: bool) -> impl Fn() -> bool + Clone {
    move || !dispatch
}

fn pop_due_events(
    now: Res<CurrentInstant>,
    tick: Res<SimTick>,
    mut queue: ResMut<VirtualEventQueue<u32>>,
    mut log: ResMut<EventLog>,
) {
    for (_, event) in queue.drain_due(now.0) {
        log.popped.push((tick.0, event));
    }
}

/// The observer of the plugin's dispatch: the same log as `pop_due_events`.
fn log_dispatched_event(
    event: On<VirtualEvent<u32>>,
    tick: Res<SimTick>,
    now: Res<CurrentInstant>,
    mut log: ResMut<EventLog>,
) {
    // The clock reads the event's own instant while it is dispatched (time rule 17).
    assert_eq!(
        now.0,
        event.at.max(VirtualInstant::from_ticks(i64::from(tick.0)))
    );
    log.popped.push((tick.0, event.event));
}

fn record_objects(mut log: ResMut<EventLog>, objects: Query<(&Owner, &Current<i64>)>) {
    let mut values: Vec<(u8, i64)> = objects.iter().map(|(o, c)| (o.0, c.0)).collect();
    values.sort_unstable();
    log.objects = values.into_iter().map(|(_, v)| v).collect();
}

/// A 6-bit code of a player's input.
fn code(input: &PackedInput) -> u32 {
    ((i32::from(input.axes[0]) + 128) >> 2) as u32
}

fn tick_objects(
    inputs: Res<PlayerInputs<PackedInput>>,
    all: Query<(&Owner, &Current<i64>)>,
    mut mine: Query<(&Owner, &Current<i64>, &mut Next<i64>)>,
) {
    let total: i64 = all.iter().map(|(_, c)| c.0).fold(0, i64::wrapping_add);
    mine.par_iter_mut().for_each(|(owner, current, mut next)| {
        let input = inputs.get(owner.0).map_or(0, code);
        // Reads everyone's frame-start value (through `total`) and writes only its own Next.
        next.0 = (current.0.wrapping_mul(31) ^ total).wrapping_add(i64::from(input)) % 1_000_003;
    });
}

fn schedule_events(
    inputs: Res<PlayerInputs<PackedInput>>,
    tick: Res<SimTick>,
    now: Res<CurrentInstant>,
    mut queue: ResMut<VirtualEventQueue<u32>>,
    mut log: ResMut<EventLog>,
) {
    let base = (tick.0 as u32) << 8;
    for p in 0..inputs.len() as u8 {
        let Some(input) = inputs.get(p) else { continue };
        let c = code(input);
        let event = base | u32::from(p) << 7 | c;
        // 2–4 ticks ahead, priority from the code: mispredicted inputs schedule other events.
        let at = VirtualInstant::new(now.ticks + 2 + i64::from(c % 3), i64::from(c % 2));
        queue.schedule(at, event);
        log.scheduled.push((tick.0, event));
    }
    let at = VirtualInstant::new(now.ticks + 3, 0);
    for low in [FIFO_FIRST, FIFO_SECOND] {
        queue.schedule(at, base | low);
        log.scheduled.push((tick.0, base | low));
    }
}

fn app(mode: SessionMode, dispatch: bool) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins);
    app.add_plugins(
        DeterministicPlugin::<PackedInput>::new(EventGame { dispatch })
            .config(SessionConfig {
                mode,
                clock: SessionClock::Stepped {
                    ticks_per_update: 1,
                },
                local: LocalSessionConfig {
                    latency_ticks: vec![6],
                    jitter_ticks: 0,
                    seed: 1,
                    known_players: vec![0],
                },
                checksum_interval: 1,
                verify_predictions: mode == SessionMode::Predicted,
                ..Default::default()
            })
            .players(2),
    );
    app.add_systems(
        PreUpdate,
        common::feed_scripted_inputs.before(DeterministicSet::SessionUpdate),
    );
    app.finish();
    app.cleanup();
    app
}

fn worlds(app: &App) -> &SimulationWorlds {
    app.world().resource::<SimulationWorlds>()
}

fn log(world: &World) -> EventLog {
    world.resource::<EventLog>().clone()
}

/// Everything still waiting in a world's queue, in pop order.
fn pending(world: &World) -> Vec<(VirtualInstant, u32)> {
    world
        .resource::<VirtualEventQueue<u32>>()
        .clone()
        .drain_due(VirtualInstant::INFINITY)
        .collect()
}

fn up_to(list: &[(i32, u32)], tick: i32) -> Vec<(i32, u32)> {
    list.iter().copied().filter(|(t, _)| *t <= tick).collect()
}

#[test]
fn verified_pops_equal_lockstep_and_equal_instants_are_fifo() {
    verified_pops_equal_lockstep(false);
}

#[test]
fn dispatched_events_in_the_verified_world_equal_lockstep_and_are_fifo() {
    verified_pops_equal_lockstep(true);
}

#[test]
fn events_of_a_mispredicted_timeline_vanish_on_rollback_and_never_pop() {
    mispredicted_events_never_pop(false);
}

#[test]
fn dispatched_events_of_a_mispredicted_timeline_vanish_on_rollback() {
    mispredicted_events_never_pop(true);
}

fn verified_pops_equal_lockstep(dispatch: bool) {
    let mut predicted = app(SessionMode::Predicted, dispatch);
    let mut lockstep = app(SessionMode::Lockstep, dispatch);
    common::run_until_verified(&mut predicted, TICKS);
    common::run_until_verified(&mut lockstep, TICKS);

    let a = log(worlds(&predicted).verified());
    let b = log(worlds(&lockstep).verified());
    let popped = up_to(&a.popped, TICKS);
    assert_eq!(popped, up_to(&b.popped, TICKS));
    assert_eq!(up_to(&a.scheduled, TICKS), up_to(&b.scheduled, TICKS));
    // Every event scheduled by tick TICKS - 4 has popped by TICKS (the furthest is 4 ahead).
    assert!(popped.len() >= 4 * (TICKS as usize - 4), "{}", popped.len());
    // Both players' events are there.
    assert!(popped.iter().any(|(_, e)| e & 0x80 == 0 && e & 0xff < 64));
    assert!(popped.iter().any(|(_, e)| e & 0x80 != 0 && e & 0x7f < 64));
    // Equal instants: FIFO_FIRST of tick t always pops right before FIFO_SECOND of tick t.
    for (i, (_, e)) in popped.iter().enumerate() {
        if e & 0xff == FIFO_FIRST {
            assert_eq!(popped.get(i + 1).map(|p| p.1), Some(e + 1), "at {i}");
        }
    }
    // The double-buffered objects agree too, and the frame phases ran in the simulation world.
    assert_eq!(a.objects, b.objects);
    assert_eq!(a.objects.len(), 2);
    let timings = worlds(&predicted).verified().resource::<FrameTimings>();
    assert_eq!(timings.objects, 2);
    assert!(timings.frames >= TICKS as u64);
}

fn mispredicted_events_never_pop(dispatch: bool) {
    let mut app = app(SessionMode::Predicted, dispatch);
    let mut seen_in_prediction: BTreeSet<u32> = BTreeSet::new();
    let mut manual_rollbacks_removing_events = 0;
    for update in 0..(4 * TICKS + 100) {
        app.update();
        let verified_tick = app.world().resource::<SessionStats>().verified_tick;
        if verified_tick >= TICKS {
            break;
        }
        {
            let worlds = worlds(&app);
            let predicted = log(worlds.predicted());
            seen_in_prediction.extend(
                predicted
                    .scheduled
                    .iter()
                    .filter(|(t, _)| *t > verified_tick)
                    .map(|(_, e)| *e),
            );
        }
        if update % 10 == 9 {
            let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
            let before = pending(worlds.predicted());
            worlds.rollback_predicted();
            let (after, verified) = (pending(worlds.predicted()), pending(worlds.verified()));
            assert_eq!(after, verified, "queue after rollback (update {update})");
            assert_eq!(log(worlds.predicted()), log(worlds.verified()));
            if before.iter().any(|e| !verified.contains(e)) {
                manual_rollbacks_removing_events += 1;
            }
        }
    }
    assert!(
        manual_rollbacks_removing_events > 0,
        "no rollback removed predicted-only events"
    );

    let stats = app.world().resource::<SessionStats>().clone();
    let end = stats.verified_tick;
    let worlds = worlds(&app);
    let verified = log(worlds.verified());
    let verified_events: BTreeSet<u32> = verified.scheduled.iter().map(|(_, e)| *e).collect();
    // Events scheduled in prediction, for ticks now verified, that the verified timeline never
    // scheduled: they came from mispredicted inputs.
    let mispredicted: Vec<u32> = seen_in_prediction
        .iter()
        .copied()
        .filter(|e| (*e >> 8) as i32 <= end && !verified_events.contains(e))
        .collect();
    assert!(
        !mispredicted.is_empty(),
        "no event came from a misprediction"
    );
    assert!(
        verified
            .popped
            .iter()
            .all(|(_, e)| !mispredicted.contains(e)),
        "a mispredicted event popped in the verified timeline"
    );
    // The predicted world re-simulated the same pops in the same order.
    let predicted = log(worlds.predicted());
    assert_eq!(up_to(&predicted.popped, end), verified.popped);
    assert!(
        pending(worlds.predicted())
            .iter()
            .all(|(_, e)| !mispredicted.contains(e))
    );

    assert!(
        stats.rollbacks > 0 && stats.mispredicted_inputs > 0,
        "{stats:?}"
    );
    assert!(stats.resim_ticks_checked > 0, "{stats:?}");
    assert_eq!(stats.resim_ticks_matching, stats.resim_ticks_checked);
}
