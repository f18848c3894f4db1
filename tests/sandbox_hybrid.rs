//! The sandbox's hybrid mode (`sandbox hybrid`) run in this process: players under rollback
//! and props under ownership, two peers over the seeded in-memory network with the default
//! link (80 ms RTT, 10 ms jitter, 2 % loss).
//!
//! The mode is included by path from `examples/sandbox/hybrid/`; the modules it names as
//! `crate::cli`, `crate::ownership`, ... come from `sandbox_assets` and `sandbox_ownership`
//! (see `suite.rs`).

#[allow(dead_code)]
#[path = "../examples/sandbox/hybrid/mod.rs"]
pub(crate) mod hybrid;

use std::path::{Path, PathBuf};

use crate::cli::{Command, HybridArgs};
use crate::scene::load_scene;
use hybrid::Setup;
use hybrid::props::{LayoutError, MAX_PROPS, prop_layout};
use hybrid::run::HybridRun;
use hybrid::summary::{AT_REST_TOLERANCE_M, Spread, at_rest_spread, check, summarize};

use crate::sandbox_ownership::ownership::in_process::Phase;

fn asset(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets")
        .join(relative)
}

fn args(extra: &[&str]) -> HybridArgs {
    let mut line = vec![
        "sandbox".to_string(),
        "hybrid".to_string(),
        "--quiet".to_string(),
        "--scene".to_string(),
        asset("scenes/sandbox.ron").display().to_string(),
        "--trace".to_string(),
        asset("traces/two_players.ron").display().to_string(),
    ];
    line.extend(extra.iter().map(|s| s.to_string()));
    match Command::try_parse_from(line) {
        Ok(Command::Hybrid(args)) => args,
        other => panic!("expected the hybrid mode, got {other:?}"),
    }
}

/// A short hybrid run (2 players, 100 props, 170 ticks of the trace: player 0 walks into the
/// box pile, grabs a box at tick 134 and throws it at tick 159): every verified players'
/// checksum equal on both peers, no desync, the props bid for, carried and moved, and every
/// prop's copies within 1 cm at rest.
#[test]
fn hybrid_sandbox_players_agree_and_props_converge() {
    let args = args(&[
        "--players",
        "2",
        "--props",
        "100",
        "--ticks",
        "170",
        "--settle-seconds",
        "0.5",
    ]);
    let setup = Setup::load(&args).unwrap_or_else(|f| panic!("setup: {}", f.message));
    let mut run = HybridRun::new(&args, &setup, None).unwrap_or_else(|f| panic!("{}", f.message));
    let settled = loop {
        match run.advance() {
            Ok(Phase::Done(settled)) => break settled,
            Ok(_) => {}
            Err(f) => panic!("run: {}", f.message),
        }
    };
    let summary = summarize(&args, &mut run, &setup, settled)
        .unwrap_or_else(|f| panic!("summary: {}", f.message));
    let text = summary.to_text();
    assert!(summary.checksums_equal, "{text}");
    assert!(summary.checksum_ticks_compared >= 170, "{text}");
    assert_eq!(summary.props, 100);
    assert!(
        summary.ownership_changes > 0,
        "no prop changed owner: {text}"
    );
    assert!(summary.prop_updates_sent > 0, "{text}");
    for peer in &summary.peers {
        assert!(
            peer.poses_carried > 0,
            "a verified tick carried props: {text}"
        );
        assert!(peer.bids_sent > 0, "{text}");
    }
    assert!(
        summary.max_prop_distance_m < AT_REST_TOLERANCE_M,
        "props' copies apart: {text}"
    );
    assert!(
        summary.props_at_rest >= 90,
        "most props compared at rest: {text}"
    );
    assert_eq!(summary.props_at_rest + summary.props_moving, 100, "{text}");
    check(&summary).unwrap_or_else(|f| panic!("{}: {text}", f.message));
}

/// The props are the scene's pile bodies in scene order, then rows of the piles' shapes in
/// turn; a run asks for exactly `--props` of them.
#[test]
fn hybrid_props_take_the_piles_then_rows_of_their_shapes() {
    let scene = load_scene(&asset("scenes/sandbox.ron")).expect("scene");
    let piles = scene.pile_bodies() as usize;
    let first_pile: Vec<_> = scene.piles[0].positions().collect();
    let few = prop_layout(&scene, 10).expect("layout");
    assert_eq!(few.len(), 10);
    for ((position, kind), expected) in few.iter().zip(&first_pile) {
        assert_eq!(position.to_array(), *expected);
        assert_eq!(*kind, 0);
    }
    let many = prop_layout(&scene, piles as u32 + 7).expect("layout");
    assert_eq!(many.len(), piles + 7);
    let extra: Vec<_> = many[piles..].iter().map(|(_, kind)| *kind).collect();
    assert_eq!(extra, vec![0, 1, 2, 0, 1, 2, 0], "shapes in turn");
    // The rows stand on the ground, apart from each other.
    let ground_top = scene.ground.center[1] + scene.ground.size[1] / 2.0;
    for (i, (a, _)) in many[piles..].iter().enumerate() {
        assert!(a.y > ground_top);
        for (b, _) in &many[piles + i + 1..] {
            assert!(a.distance(*b) >= 0.99, "{a} and {b} overlap");
        }
    }
    assert_eq!(
        prop_layout(&scene, MAX_PROPS + 1),
        Err(LayoutError::TooManyProps(MAX_PROPS + 1))
    );
    let bare = crate::sandbox_hybrid::hybrid::props::players_scene(&scene);
    assert!(bare.piles.is_empty());
    assert_eq!(prop_layout(&bare, 1), Err(LayoutError::NoPiles));
}

/// The props' copies are compared at rest only: a prop moving on some App is counted, not
/// compared; a prop an App lacks is named.
#[test]
fn hybrid_props_are_compared_at_rest_only() {
    use bevy::math::Vec3;
    let at = |x: f32, speed: f32| (Vec3::new(x, 0.5, 0.0), speed);
    let mut copies = std::collections::BTreeMap::new();
    copies.insert(1, vec![at(0.0, 0.0), at(0.004, 0.001)]);
    copies.insert(2, vec![at(1.0, 0.0), at(1.5, 2.0)]);
    copies.insert(3, vec![at(2.0, 0.0), at(2.007, 0.0)]);
    let spread = at_rest_spread(&copies, 2, 0.01).expect("every prop on both");
    assert_eq!(spread.compared, 2);
    assert_eq!(spread.moving, 1, "prop 2 moves on the second App");
    assert_eq!(spread.widest.1, 3);
    assert!((spread.widest.0 - 0.007).abs() < 1e-4, "{spread:?}");
    copies.insert(4, vec![at(3.0, 0.0)]);
    assert_eq!(at_rest_spread(&copies, 2, 0.01), Err(4));
    let empty = at_rest_spread(&Default::default(), 2, 0.01).expect("nothing to compare");
    assert_eq!(
        empty,
        Spread {
            widest: (0.0, 0),
            compared: 0,
            moving: 0
        }
    );
}
