//! The clock of `VirtualTimePlugin` in running Apps: each advance policy, the dispatch order and
//! the two deliveries (time rules 16–18).

use bevy::app::FixedMain;
use bevy::prelude::*;
use simsync_time::prelude::*;

/// What a reader saw: the clock when it ran, and the event with its instant.
#[derive(Resource, Default, Debug)]
struct Seen(Vec<(VirtualInstant, VirtualInstant, &'static str)>);

const fn at(ticks: i64, priority: i64) -> VirtualInstant {
    VirtualInstant::new(ticks, priority)
}

fn schedule(app: &mut App, events: &[(VirtualInstant, &'static str)]) {
    let mut queue = app
        .world_mut()
        .resource_mut::<VirtualEventQueue<&'static str>>();
    for (when, name) in events {
        queue.schedule(*when, *name);
    }
}

fn read_messages(
    now: Res<CurrentInstant>,
    mut reader: MessageReader<VirtualEvent<&'static str>>,
    mut seen: ResMut<Seen>,
) {
    for e in reader.read() {
        seen.0.push((now.0, e.at, e.event));
    }
}

fn now(app: &App) -> VirtualInstant {
    app.world().resource::<CurrentInstant>().0
}

fn seen(app: &App) -> Vec<(VirtualInstant, VirtualInstant, &'static str)> {
    app.world().resource::<Seen>().0.clone()
}

fn app_with(policy: AdvancePolicy, delivery: Delivery) -> App {
    let mut app = App::new();
    app.add_plugins(VirtualTimePlugin::default().advance(policy))
        .add_virtual_events::<&'static str>(delivery)
        .init_resource::<Seen>();
    app
}

fn fixed_step_app() -> App {
    let mut app = app_with(AdvancePolicy::FixedStep, Delivery::Messages);
    app.add_systems(FixedUpdate, read_messages);
    app
}

#[test]
fn fixed_step_moves_one_tick_per_fixed_main_run_and_dispatches_that_tick() {
    let mut app = fixed_step_app();
    schedule(
        &mut app,
        &[
            (at(1, 5), "one-late"),
            (at(0, 0), "zero"),
            (at(1, -2), "one-early"),
            (at(3, 0), "three"),
        ],
    );
    let mut clocks = Vec::new();
    for _ in 0..4 {
        app.world_mut().run_schedule(FixedMain);
        clocks.push(now(&app));
    }
    assert_eq!(clocks, [at(1, 0), at(2, 0), at(3, 0), at(4, 0)]);
    // Readers in FixedUpdate see the tick being run; each event comes in its own tick's run,
    // by priority within the tick (a negative priority reads the clock at (t, 0)).
    assert_eq!(
        seen(&app),
        [
            (at(0, 0), at(0, 0), "zero"),
            (at(1, 5), at(1, -2), "one-early"),
            (at(1, 5), at(1, 5), "one-late"),
            (at(3, 0), at(3, 0), "three"),
        ]
    );
    let clock = app.world().resource::<VirtualClock>();
    assert_eq!(clock.stats().advances, 4);
    assert_eq!(clock.stats().events_dispatched, 4);
    assert_eq!(clock.next_event(), VirtualInstant::INFINITY);
}

#[test]
fn fixed_step_is_the_default_and_does_not_move_on_update() {
    let mut app = App::new();
    app.add_plugins(VirtualTimePlugin::default());
    assert_eq!(
        app.world().resource::<VirtualClock>().policy(),
        AdvancePolicy::FixedStep
    );
    app.update();
    app.update();
    assert_eq!(now(&app), VirtualInstant::ZERO);
    app.world_mut().run_schedule(FixedMain);
    assert_eq!(now(&app), at(1, 0));
}

#[test]
fn next_event_jumps_to_each_instant_within_the_event_budget() {
    let budget = FrameBudget::events(1).unwrap();
    let mut app = app_with(AdvancePolicy::NextEvent(budget), Delivery::Messages);
    app.add_systems(Update, read_messages);
    schedule(
        &mut app,
        &[(at(25, -1), "c"), (at(10, 2), "a"), (at(10, 2), "b")],
    );
    let mut trace = Vec::new();
    for _ in 0..4 {
        app.update();
        trace.push((
            now(&app),
            app.world().resource::<VirtualClock>().next_event(),
        ));
    }
    assert_eq!(
        trace,
        [
            (at(10, 2), at(10, 2)),
            (at(10, 2), at(25, -1)),
            (at(25, -1), VirtualInstant::INFINITY),
            (at(25, -1), VirtualInstant::INFINITY),
        ]
    );
    let names: Vec<_> = seen(&app).iter().map(|s| s.2).collect();
    assert_eq!(names, ["a", "b", "c"]);
}

#[test]
fn next_event_stops_at_the_tick_budget() {
    let budget = FrameBudget::events(100).unwrap().with_ticks(5).unwrap();
    let mut app = app_with(AdvancePolicy::NextEvent(budget), Delivery::Messages);
    app.add_systems(Update, read_messages);
    schedule(
        &mut app,
        &[
            (at(1, 0), "1"),
            (at(4, 0), "4"),
            (at(7, 0), "7"),
            (at(20, 0), "20"),
        ],
    );
    let mut clocks = Vec::new();
    for _ in 0..5 {
        app.update();
        clocks.push(now(&app));
    }
    // Each frame moves the clock 5 ticks (dispatching what lies within them) while events wait
    // beyond; it lands on 20 once that is within the budget, and then nothing is left.
    assert_eq!(
        clocks,
        [at(5, 0), at(10, 0), at(15, 0), at(20, 0), at(20, 0)]
    );
    let names: Vec<_> = seen(&app).iter().map(|s| s.2).collect();
    assert_eq!(names, ["1", "4", "7", "20"]);
    assert_eq!(
        app.world().resource::<VirtualClock>().next_event(),
        VirtualInstant::INFINITY
    );
}

#[test]
fn paused_clock_moves_only_on_requests() {
    let mut app = app_with(AdvancePolicy::Paused, Delivery::Messages);
    app.add_systems(Update, read_messages);
    schedule(
        &mut app,
        &[
            (at(0, 0), "t0"),
            (at(2, 9), "t2"),
            (at(3, 0), "t3"),
            (at(10, 5), "u"),
            (at(10, 6), "after"),
        ],
    );
    app.update();
    app.world_mut().run_schedule(FixedMain);
    assert_eq!(now(&app), VirtualInstant::ZERO);
    assert!(seen(&app).is_empty());

    app.world_mut()
        .resource_mut::<VirtualClock>()
        .request(VirtualInstant::ZERO, ClockRequest::Ticks(3))
        .unwrap();
    app.update();
    assert_eq!(now(&app), at(3, 0));
    let names: Vec<_> = seen(&app).iter().map(|s| s.2).collect();
    assert_eq!(names, ["t0", "t2"]);

    let current = now(&app);
    app.world_mut()
        .resource_mut::<VirtualClock>()
        .request(current, ClockRequest::Until(at(10, 5)))
        .unwrap();
    app.update();
    assert_eq!(now(&app), at(10, 5));
    let names: Vec<_> = seen(&app).iter().map(|s| s.2).collect();
    assert_eq!(names, ["t0", "t2", "t3", "u"]);
    assert_eq!(
        app.world_mut()
            .resource_mut::<VirtualClock>()
            .request(at(10, 5), ClockRequest::Until(at(10, 4))),
        Err(TimeError::ClockRequestInPast {
            target: at(10, 4),
            clock: at(10, 5)
        })
    );
}

#[test]
fn switching_policy_at_run_time_pauses_a_fixed_step_clock() {
    let mut app = fixed_step_app();
    app.world_mut().run_schedule(FixedMain);
    app.world_mut()
        .resource_mut::<VirtualClock>()
        .set_policy(AdvancePolicy::Paused);
    app.world_mut().run_schedule(FixedMain);
    app.update();
    assert_eq!(now(&app), at(1, 0));
}

#[test]
fn equal_instants_are_fifo_within_a_priority_and_ordered_by_priority_across() {
    let mut app = app_with(
        AdvancePolicy::NextEvent(FrameBudget::default()),
        Delivery::Messages,
    );
    app.add_systems(Update, read_messages);
    schedule(
        &mut app,
        &[
            (at(4, 1), "p1-first"),
            (at(4, 0), "p0-first"),
            (at(4, 1), "p1-second"),
            (at(4, 0), "p0-second"),
            (at(4, -1), "pm1"),
        ],
    );
    app.update();
    let names: Vec<_> = seen(&app).iter().map(|s| s.2).collect();
    assert_eq!(
        names,
        ["pm1", "p0-first", "p0-second", "p1-first", "p1-second"]
    );
}

/// Observer delivery: the log of (clock, instant, name), and what to schedule on each name.
#[derive(Resource, Default)]
struct Log(Vec<(VirtualInstant, VirtualInstant, &'static str)>);

fn observer_app() -> App {
    let mut app = App::new();
    app.add_plugins(
        VirtualTimePlugin::default().advance(AdvancePolicy::NextEvent(FrameBudget::default())),
    )
    .add_virtual_events::<&'static str>(Delivery::Observers)
    .init_resource::<Log>()
    .add_observer(
        |e: On<VirtualEvent<&'static str>>,
         now: Res<CurrentInstant>,
         mut queue: ResMut<VirtualEventQueue<&'static str>>,
         mut log: ResMut<Log>| {
            log.0.push((now.0, e.at, e.event));
            match e.event {
                // Same instant as now: after everything already due at it.
                "a" => queue.schedule(now.0, "a-now"),
                // Later in the same tick, and one tick on.
                "b" => {
                    queue.schedule(VirtualInstant::new(now.ticks, now.priority + 1), "b-later");
                    queue.schedule(now.0 + 1, "b-next-tick");
                }
                _ => {}
            }
        },
    );
    app
}

#[test]
fn an_event_scheduled_for_the_current_instant_during_dispatch_fires_in_that_instant() {
    let mut app = observer_app();
    schedule(
        &mut app,
        &[
            (at(5, 0), "a"),
            (at(5, 0), "b"),
            (at(5, 2), "c"),
            (at(6, 0), "d"),
        ],
    );
    app.update();
    let log = app.world().resource::<Log>().0.clone();
    assert_eq!(
        log,
        [
            (at(5, 0), at(5, 0), "a"),
            (at(5, 0), at(5, 0), "b"),
            (at(5, 0), at(5, 0), "a-now"),
            (at(5, 1), at(5, 1), "b-later"),
            (at(5, 2), at(5, 2), "c"),
            (at(6, 0), at(6, 0), "d"),
            (at(6, 0), at(6, 0), "b-next-tick"),
        ]
    );
    assert_eq!(now(&app), at(6, 0));
}

#[derive(Resource, Default)]
struct Order(Vec<String>);

#[test]
fn queues_at_an_equal_instant_are_served_in_registration_order() {
    let mut app = App::new();
    app.add_plugins(
        VirtualTimePlugin::default().advance(AdvancePolicy::NextEvent(FrameBudget::default())),
    )
    .add_virtual_events::<u8>(Delivery::Observers)
    .add_virtual_events::<i16>(Delivery::Observers)
    .init_resource::<Order>()
    .add_observer(|e: On<VirtualEvent<u8>>, mut o: ResMut<Order>| {
        o.0.push(format!("u8:{}", e.event));
    })
    .add_observer(|e: On<VirtualEvent<i16>>, mut o: ResMut<Order>| {
        o.0.push(format!("i16:{}", e.event));
    });
    {
        let world = app.world_mut();
        world
            .resource_mut::<VirtualEventQueue<i16>>()
            .schedule(at(1, 0), -1);
        world
            .resource_mut::<VirtualEventQueue<i16>>()
            .schedule(at(2, 0), -2);
        world
            .resource_mut::<VirtualEventQueue<u8>>()
            .schedule(at(2, 0), 2);
        world
            .resource_mut::<VirtualEventQueue<u8>>()
            .schedule(at(3, 0), 3);
    }
    app.update();
    assert_eq!(
        app.world().resource::<Order>().0,
        ["i16:-1", "u8:2", "i16:-2", "u8:3"]
    );
}

#[test]
fn with_frame_phases_one_frame_is_one_tick() {
    #[derive(Resource, Default)]
    struct Frames(Vec<(i64, Vec<&'static str>)>);
    let mut app = App::new();
    app.add_plugins((VirtualTimePlugin::default(), FramePhasesPlugin::default()))
        .add_virtual_events::<&'static str>(Delivery::Messages)
        .init_resource::<Frames>()
        .add_systems(
            FixedUpdate,
            (|now: Res<CurrentInstant>,
              mut reader: MessageReader<VirtualEvent<&'static str>>,
              mut frames: ResMut<Frames>| {
                let names = reader.read().map(|e| e.event).collect();
                frames.0.push((now.ticks, names));
            })
            .in_set(FramePhase::FrameSetup),
        );
    schedule(&mut app, &[(at(1, 0), "x"), (at(1, 3), "y")]);
    for _ in 0..3 {
        app.world_mut().run_schedule(FixedMain);
    }
    assert_eq!(
        app.world().resource::<Frames>().0,
        [(0, vec![]), (1, vec!["x", "y"]), (2, vec![])]
    );
}
