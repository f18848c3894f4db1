//! A hostile player's carried poses: whatever an input carries, every peer's verified world
//! resolves it alike, counts what it refuses, and the honest owner's poses still reach it.

use bevy::prelude::*;
use simsync::deterministic::{
    HookFlow, TickInputSource, VerifiedTick, VerifiedTickHook, VerifiedTickHookAppExt,
};
use simsync::hybrid::{
    HybridConfig, HybridError, HybridInput, HybridPlugin, PropPose, PropPoses, VerifiedProps,
    hybrid_session,
};
use simsync::prelude::*;
use simsync::testing::{HybridPeers, HybridPeersError, RelayPeers};
use simsync_net::LinkConditionerConfig;

use super::arena::{Arena, Input, Script, avatar_start, config, spawn_props};
use super::idle;

/// The honest prop, owned by client 0.
const PROP: u64 = 1;

/// Poses as a hostile peer's bytes carry them (around `PropPoses::new`'s checks).
fn forged(stamp: Tick, poses: Vec<PropPose>) -> PropPoses {
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec((stamp, poses), config).expect("encodes");
    bincode::serde::decode_from_slice(&bytes, config)
        .expect("decodes")
        .0
}

/// Player 1's input at `tick`: by turns the honest prop stamped in the future, stamped before
/// any tick, and a prop of an unknown kind given twice; each forged pose stands 30 m away.
fn hostile(tick: Tick) -> Input {
    let far = |id, kind| PropPose {
        id,
        kind,
        pos_mm: [30_000, 600, 30_000],
        rot: [0, 0, 0, 32767],
        vel_mm_s: [0; 3],
    };
    let props = match tick.rem_euclid(3) {
        0 => forged(Tick::MAX, vec![far(PROP, 0)]),
        1 => forged(Tick::MIN, vec![far(PROP, 0), far(9, 0)]),
        _ => forged(tick, vec![far(9, 200), far(9, 0)]),
    };
    HybridInput {
        input: PackedInput::default(),
        props,
    }
}

/// Each verified tick's [`VerifiedProps`] (after the hybrid hook).
#[derive(Default)]
struct Record(Vec<(Tick, VerifiedProps)>);

impl VerifiedTickHook<Input> for Record {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, Input>) -> HookFlow {
        let tick = verified.tick();
        let (_, world) = verified.inputs_and_app_world();
        let props = world.resource::<VerifiedProps>().clone();
        self.0.push((tick, props));
        HookFlow::Continue
    }
}

fn record(peers: &RelayPeers<Input>, client: usize) -> &Record {
    peers
        .client(client)
        .expect("client")
        .world()
        .resource::<DeterministicSession<Input>>()
        .hook::<Record>()
        .expect("record hook")
}

#[test]
fn a_hostile_players_poses_are_counted_alike_and_never_hide_the_owners() {
    let circle = Script::Circle {
        center: avatar_start(0) + Vec3::new(0.0, 0.0, 1.0),
        radius: 1.0,
        period: 80.0,
    };
    let link = LinkConditionerConfig::PERFECT
        .with_latency(30, 5)
        .with_loss(2.0);
    let mut peers = RelayPeers::builder(2, |_| {
        hybrid_session::<PackedInput, _>(Arena { players: 2 }, config())
    })
    .link(link)
    .seed(5)
    .customize(move |client, app| {
        app.add_plugins(HybridPlugin::<PackedInput>::new(config()).scripted(idle))
            .add_verified_tick_hook::<Input>(Record::default())
            .expect("session plugin added");
        spawn_props(app, &[(PROP, circle)], |_| client == 0);
        if client == 1 {
            app.insert_resource(TickInputSource::new(|_, tick| hostile(tick)));
        }
    })
    .build()
    .expect("harness");
    peers.run_until_verified(150).expect("run");
    let agreement = peers.assert_all_agree();
    assert!(agreement.ticks_compared >= 140, "{agreement:?}");
    let at = |client: usize, tick: Tick| {
        record(&peers, client)
            .0
            .iter()
            .find(|(t, _)| *t == tick)
            .map(|(_, p)| p.clone())
            .expect("tick verified")
    };
    // Every peer resolved and counted the forged poses alike.
    let (first, second) = (at(0, 150), at(1, 150));
    assert_eq!(first, second);
    assert!(
        first.stale >= 90 && first.duplicate >= 45 && first.unknown_kind >= 45,
        "{first:?}"
    );
    assert_eq!(
        first.contested, 0,
        "a stale pose never contests a fresh one"
    );
    // The owner's pose of its prop reached every verified tick once its inputs carried it:
    // never hidden by a pose stamped in the future, never replaced by a forged one.
    for tick in 30..=150 {
        let applied = at(0, tick).last;
        let pose = applied.iter().find(|(id, _)| *id == PROP);
        let Some((_, pos_mm)) = pose else {
            panic!("tick {tick}: prop {PROP} not applied: {applied:?}");
        };
        assert!(pos_mm[0] < 0, "tick {tick}: the forged pose {pos_mm:?}");
    }
    let relay = peers.relay_stats();
    eprintln!(
        "{first:?}; relay rejected {} messages",
        relay.rejected_messages
    );
}

/// The prop ids each verified tick applied, from the tick the hook was added.
#[derive(Default)]
struct Applied(Vec<Vec<u64>>);

impl VerifiedTickHook<Input> for Applied {
    fn on_verified(&mut self, verified: &mut VerifiedTick<'_, Input>) -> HookFlow {
        let (_, world) = verified.inputs_and_app_world();
        let last = &world.resource::<VerifiedProps>().last;
        self.0.push(last.iter().map(|(id, _)| *id).collect());
        HookFlow::Continue
    }
}

#[test]
fn an_app_owning_thousands_of_moving_props_carries_them_in_turn_within_the_bound() {
    let props: Vec<_> = (0..2_000u64)
        .map(|n| {
            let center = Vec3::new((n % 40) as f32 - 20.0, 0.6, (n / 40) as f32 - 25.0);
            let script = Script::Circle {
                center,
                radius: 0.4,
                period: 64.0,
            };
            (n + 1, script, 0)
        })
        .collect();
    let mut peers = super::peers(1, LinkConditionerConfig::PERFECT, props, idle);
    peers.run_until_verified(10).expect("run");
    let app = peers.client_mut(0).expect("client");
    app.add_verified_tick_hook::<Input>(Applied::default())
        .expect("session");
    let start = app.world().resource::<VerifiedProps>().clone();
    peers.run_until_verified(60).expect("run");
    let app = peers.client(0).expect("client");
    let end = app.world().resource::<VerifiedProps>().clone();
    let stats = app
        .world()
        .resource::<simsync::hybrid::HybridStats>()
        .clone();
    let max = config().max_props_per_input as u64;
    let ticks = end.ticks_with_props - start.ticks_with_props;
    assert!(ticks >= 45, "{ticks} ticks carried props");
    assert_eq!(
        end.carried - start.carried,
        max * ticks,
        "each input carried the bound"
    );
    assert_eq!(end.ignored, 0);
    // The props left out were counted, and each carried prop waited its turn (2,000 props, 6
    // an input): a prop is carried again only in a tick carrying the very same props (a frame
    // that polled two ticks carries its choice in both inputs).
    assert!(stats.frames_over_budget >= 50, "{stats:?}");
    assert!(stats.props_left_out >= 50 * (2_000 - max), "{stats:?}");
    let applied = &app
        .world()
        .resource::<DeterministicSession<Input>>()
        .hook::<Applied>()
        .expect("hook")
        .0;
    let mut distinct: Vec<&Vec<u64>> = applied.iter().collect();
    distinct.dedup();
    let carried: Vec<u64> = distinct
        .iter()
        .flat_map(|ids| ids.iter().copied())
        .collect();
    let mut unique = carried.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        carried.len(),
        "a prop carried twice: {distinct:?}"
    );
    assert!(unique.len() >= 240, "{} props carried", unique.len());
}

#[test]
fn the_hybrid_harness_refuses_a_config_out_of_range_before_building() {
    let bad = HybridConfig {
        max_props_per_input: 0,
        ..config()
    };
    let built = HybridPeers::<PackedInput>::builder(2, bad.clone(), move |_| {
        hybrid_session::<PackedInput, _>(Arena { players: 2 }, bad.clone())
    })
    .build();
    assert!(matches!(
        built,
        Err(HybridPeersError::Config(HybridError::BadConfig {
            field: "max_props_per_input",
            ..
        }))
    ));
}
