//! Independent apps fed the same inputs agree on every checksum.

use simsync::deterministic::SessionMode;

use crate::common::{self, TestGame};

#[test]
fn two_apps_and_a_lockstep_app_agree_on_every_checksum() {
    let game = TestGame {
        boxes: 100,
        projectiles: true,
        ..TestGame::default()
    };
    let mut a = common::app(game.clone(), 6, SessionMode::Predicted, false);
    let mut b = common::app(game.clone(), 3, SessionMode::Predicted, false);
    let mut lockstep = common::app(game, 0, SessionMode::Lockstep, false);
    for app in [&mut a, &mut b, &mut lockstep] {
        common::run_until_verified(app, 400);
    }
    let (ha, hb, hl) = (
        common::stats(&a).checksum_history,
        common::stats(&b).checksum_history,
        common::stats(&lockstep).checksum_history,
    );
    assert!(ha.len() >= 400);
    let n = ha.len().min(hb.len()).min(hl.len());
    assert_eq!(ha[..n], hb[..n]);
    assert_eq!(ha[..n], hl[..n]);
    // The lockstep app never touched its predicted world.
    let l = common::stats(&lockstep);
    assert_eq!((l.ticks_predicted, l.rollbacks), (0, 0));
    // The state really changes over time (checksums are not constant).
    assert_ne!(ha[10].checksum, ha[300].checksum);
}

#[test]
fn unrelated_non_simulation_entities_do_not_change_checksums() {
    let plain = TestGame {
        boxes: 50,
        ..TestGame::default()
    };
    let noisy = TestGame {
        unrelated_entities: 37,
        ..plain.clone()
    };
    let mut a = common::app(plain, 2, SessionMode::Predicted, false);
    let mut b = common::app(noisy, 2, SessionMode::Predicted, false);
    common::run_until_verified(&mut a, 120);
    common::run_until_verified(&mut b, 120);
    let (ha, hb) = (
        common::stats(&a).checksum_history,
        common::stats(&b).checksum_history,
    );
    let n = ha.len().min(hb.len());
    assert!(n >= 120);
    assert_eq!(ha[..n], hb[..n]);
}
