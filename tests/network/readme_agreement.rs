//! The README's agreement test ("Testing your game's netcode"), verbatim between the markers,
//! with the test game standing in for `MyGame` and its scripted inputs for `my_bot`; a second
//! test keeps the README's copy the same as this one.

use simsync::net::LinkConditionerConfig;
use simsync::prelude::*;
use simsync::testing::RelayPeers;

use crate::common::{TestGame as MyGame, scripted_input as my_bot};

// README begin
#[test]
fn two_players_agree() {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(40, 5)
        .with_loss(2.0);
    let mut peers = RelayPeers::builder(2, |_| DeterministicPlugin::new(MyGame::default()))
        .inputs(my_bot)
        .link(link)
        .build()
        .unwrap();
    peers.run_until_verified(300).unwrap();
    peers.assert_all_agree();
}
// README end

#[test]
fn the_readme_shows_this_test() {
    let this = include_str!("readme_agreement.rs");
    let start = this.find("// README begin\n").expect("begin marker") + 16;
    let end = this.find("// README end").expect("end marker");
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(&this[start..end]),
        "README.md's agreement test differs from tests/network/readme_agreement.rs"
    );
}
