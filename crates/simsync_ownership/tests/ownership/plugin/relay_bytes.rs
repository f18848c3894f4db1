//! The relay's bytes pinned: what each receiver of a fixed scenario gets from the entity server
//! (every relay batch payload, in order) is compared byte for byte with a recording
//! (`fixtures/relay_bytes.hex`) made by the relay before its per-state work was shared across
//! receivers. A change of the relay's speed must not change a byte; a deliberate change of the
//! wire re-records it with `SIMSYNC_RECORD_RELAY_BYTES=1` and says so in its commit.
//!
//! The relay's arithmetic is glam's, whose SIMD and scalar builds round differently (its
//! `scalar-math` feature, which Rapier's `enhanced-determinism` turns on for a whole build,
//! as in the workspace's `cargo test --workspace`; `cargo test -p simsync_ownership` builds
//! SIMD glam): budget choices near a tie then differ, so each build has its recording, both
//! made by that same relay (`relay_bytes.hex` SIMD, `relay_bytes_scalar.hex` scalar).

use std::fmt::Write as _;

use simsync_ownership::StateBudgetConfig;
use simsync_ownership::testing::RelayLoad;

/// The recording of this build's glam: scalar glam stores a `Quat` at its fields' alignment
/// (4), SIMD glam at 16.
fn fixture() -> &'static str {
    if std::mem::align_of::<bevy::math::Quat>() == 16 {
        "tests/ownership/plugin/fixtures/relay_bytes.hex"
    } else {
        "tests/ownership/plugin/fixtures/relay_bytes_scalar.hex"
    }
}

/// Three participants each moving 8 of 24 bodies every tick, a relay budget that defers some
/// of them (so the priority order matters), deltas on: from the first tick (joins, bids,
/// absolute entries, the first acknowledgements) for 96 ticks. One line per relay batch:
/// the receiver's index, then the payload in hex.
fn scenario() -> String {
    let budget = StateBudgetConfig {
        relay_bytes_per_second: 6_000,
        ..StateBudgetConfig::default()
    };
    let mut load = RelayLoad::new(3, 24, budget, 64).expect("valid budget");
    load.set_recording(true);
    for _ in 0..96 {
        load.step();
    }
    assert!(load.all_owned(), "every participant owns its bodies");
    // The scenario covers what the relay chooses: deltas, and bodies the budget deferred.
    let stats = load.server().stats();
    assert!(stats.relay_delta_entries_sent > 0);
    assert!(stats.relay_bodies_deferred > 0);
    assert!(stats.relay_bodies_sent > stats.relay_delta_entries_sent);
    let mut out = String::new();
    for receiver in 0..3 {
        for batch in load.recorded(receiver) {
            let _ = write!(out, "{receiver} ");
            for byte in batch {
                let _ = write!(out, "{byte:02x}");
            }
            out.push('\n');
        }
    }
    out
}

#[test]
fn every_receiver_gets_the_recorded_relay_bytes() {
    let got = scenario();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(fixture());
    if std::env::var_os("SIMSYNC_RECORD_RELAY_BYTES").is_some() {
        std::fs::write(&path, &got).expect("fixture written");
    }
    let want = std::fs::read_to_string(&path).expect("fixture read");
    assert!(want.lines().count() > 200, "the recording has the batches");
    for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
        assert_eq!(g, w, "relay batch {i} (receiver, payload) differs");
    }
    assert_eq!(got.lines().count(), want.lines().count(), "batch count");
}
