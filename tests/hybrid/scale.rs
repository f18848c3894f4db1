//! A hybrid game at scale on `simsync::testing::HybridPeers`: 4 players walking through 2,000
//! props (Rapier balls under the real `OwnershipPlugin` in every client's world), 80 ms round
//! trip, 10 ms jitter, 2 % loss. Every verified checksum of the players' worlds is compared
//! across the clients, and once the players stop and the props rest, every prop's copies are
//! compared within 1 cm. The full run (5,000 ticks) is `#[ignore]`d for its time; run it with
//! `scripts/hybrid_scale.sh` (release). The suite runs the same scene with 500 props for 240
//! ticks (2,000 props take about 20 s to set up in a debug build).

use std::time::Instant;

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync::hybrid::{OwnedProp, VerifiedProps, hybrid_session};
use simsync::ownership::{BodyId, BodyNetId, Ownable, StateTraffic};
use simsync::prelude::*;
use simsync::testing::HybridPeers;
use simsync_net::LinkConditionerConfig;

use super::arena::{Arena, avatar_start, config, wander};

const PLAYERS: u8 = 4;
/// Props per grid row, and the grid's spacing (m): 2,000 props are 50 × 40 over 75 × 60 m,
/// centred on the avatars' walk.
const ROW: u64 = 50;
const SPACING: f32 = 1.5;
/// The session's tick rate (the default).
const TICK_HZ: f64 = 64.0;

/// Where prop `n` of `props` starts: on the grid, resting on the ground; a cell within 1.2 m
/// of an avatar's start is left free (its prop starts beyond the grid's last row instead).
fn prop_start(n: u64, props: u64) -> Vec3 {
    let rows = props.div_ceil(ROW);
    let cell = |n: u64| {
        Vec3::new(
            ((n % ROW) as f32 - (ROW - 1) as f32 / 2.0) * SPACING,
            0.3,
            ((n / ROW) as f32 - (rows - 1) as f32 / 2.0) * SPACING,
        )
    };
    let at = cell(n);
    let clear = (0..PLAYERS).all(|p| {
        let a = avatar_start(p);
        Vec2::new(at.x - a.x, at.z - a.z).length() > 1.2
    });
    if clear { at } else { cell(n + props) }
}

/// Each client's world: a ground and `props` props (0.3 m balls, damped so they come to rest
/// soon after a push).
fn scene(app: &mut App, props: u64) {
    app.world_mut().spawn((
        RigidBody::Fixed,
        Collider::cuboid(40.0, 0.5, 40.0),
        Transform::from_xyz(0.0, -0.5, 0.0),
    ));
    for n in 0..props {
        app.world_mut().spawn((
            BodyNetId(BodyId(n + 1)),
            Ownable,
            OwnedProp { kind: 0 },
            RigidBody::Dynamic,
            Collider::ball(0.3),
            Damping {
                linear_damping: 3.0,
                angular_damping: 3.0,
            },
            Transform::from_translation(prop_start(n, props)),
            Velocity::zero(),
        ));
    }
}

/// The players walk their squares until `stop`, then stand still.
fn walk_until(stop: i32) -> impl Fn(u8, i32) -> PackedInput + Send + Sync + 'static {
    move |player, tick| {
        if tick < stop {
            wander(player, tick)
        } else {
            PackedInput::default()
        }
    }
}

fn scale_peers(props: u64, stop: i32, history: u32) -> HybridPeers<PackedInput> {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(40, 10)
        .with_loss(2.0);
    HybridPeers::builder(PLAYERS, config(), move |_| {
        hybrid_session::<PackedInput, _>(Arena { players: PLAYERS }, config()).config(
            SessionConfig {
                checksum_history: history,
                ..default()
            },
        )
    })
    .link(link)
    .seed(40)
    .scripted(walk_until(stop))
    .scene(move |app| scene(app, props))
    .build()
    .expect("harness")
}

/// What one scale run measured.
#[derive(Debug)]
struct ScaleRun {
    ticks_compared: usize,
    widest: Option<(BodyId, f32)>,
    carried: Vec<u64>,
    /// Per participant: (prop states sent, bytes sent, the highest share of the upload budget
    /// a second used).
    traffic: Vec<(u64, u64, f64)>,
}

/// Runs `ticks` verified ticks of the scale scene (players walking for `walk` of them, then
/// standing still), then 64 more frames and until every prop's copies are within 1 cm;
/// compares the players' checksums and the props' copies.
fn run_scale(props: u64, ticks: i32, walk: i32) -> ScaleRun {
    let started = Instant::now();
    let mut peers = scale_peers(props, walk, ticks as u32 + 512);
    let mut budget_use = [0.0f64; PLAYERS as usize];
    let mut verified = 0;
    while verified < ticks {
        peers.run_frames(16).expect("frames");
        verified = peers
            .players()
            .verified_ticks()
            .iter()
            .flatten()
            .copied()
            .min()
            .unwrap_or(0);
        for (c, most) in budget_use.iter_mut().enumerate() {
            let app = peers.client(c).expect("client");
            let use_now = app.world().resource::<StateTraffic>().budget_use;
            *most = most.max(use_now);
        }
    }
    let agreement = peers.assert_all_agree();
    peers.run_frames(64).expect("frames");
    let steps = peers
        .run_until_props_converged(0.01, 1_200)
        .expect("every prop's copies within 1 cm at rest");
    let converged = peers.prop_convergence(0.01).expect("converged");
    assert_eq!(converged.bodies, props as usize);
    let carried = (0..usize::from(PLAYERS))
        .map(|c| {
            let app = peers.client(c).expect("client");
            app.world().resource::<VerifiedProps>().carried
        })
        .collect();
    let traffic = (0..usize::from(PLAYERS))
        .map(|c| {
            let stats = *peers.ownership_client(c).expect("participant").stats();
            (
                stats.state_updates_sent,
                stats.state_update_bytes,
                budget_use[c],
            )
        })
        .collect();
    let run = ScaleRun {
        ticks_compared: agreement.ticks_compared,
        widest: converged.widest,
        carried,
        traffic,
    };
    report(&run, (props, ticks), steps, started);
    run
}

fn report(run: &ScaleRun, (props, ticks): (u64, i32), rest_steps: u32, started: Instant) {
    let seconds = f64::from(ticks) / TICK_HZ;
    let per_participant: Vec<String> = run
        .traffic
        .iter()
        .map(|&(states, bytes, most)| {
            format!(
                "{states} states, {:.1} B each, {:.0} B/s, budget peak {:.1} %",
                bytes as f64 / states.max(1) as f64,
                bytes as f64 / seconds,
                most * 100.0
            )
        })
        .collect();
    let poses_per_second = run.carried.iter().max().copied().unwrap_or(0) as f64 / seconds;
    eprintln!(
        "scale: {poses_per_second:.0} carried poses per second in the players' inputs, all \
         players together"
    );
    eprintln!(
        "scale: {} players, {props} props, {ticks} ticks ({:.1} s wall): {} verified ticks \
         compared; props within 1 cm {rest_steps} frames after 64 more, widest copy spread {:?}; poses \
         applied by verified ticks per client {:?}; traffic per participant: {per_participant:?}",
        PLAYERS,
        started.elapsed().as_secs_f64(),
        run.ticks_compared,
        run.widest,
        run.carried,
    );
}

fn assert_scale(run: &ScaleRun, ticks: i32) {
    // Every tick from the first the clients share on is held by all of them.
    assert!(
        run.ticks_compared as i32 >= ticks - 64,
        "{} of {ticks} ticks compared",
        run.ticks_compared
    );
    assert!(
        run.widest.is_some_and(|(_, d)| d <= 0.01),
        "{:?}",
        run.widest
    );
    assert!(
        run.carried.iter().all(|&c| c > 0),
        "the players moved props, carried to every client: {:?}",
        run.carried
    );
    for &(_, _, most) in &run.traffic {
        assert!(most <= 1.0, "a participant's upload over budget: {most}");
    }
}

#[test]
fn four_players_and_500_props_agree_for_240_ticks() {
    let run = run_scale(500, 240, 160);
    assert_scale(&run, 240);
}

#[test]
#[ignore = "minutes in a debug build: scripts/hybrid_scale.sh runs it in release"]
fn four_players_and_2000_props_agree_for_5000_ticks() {
    let run = run_scale(2_000, 5_000, 4_600);
    assert_scale(&run, 5_000);
}
