//! The README's agreement test ("Testing your game's netcode"), verbatim between the markers,
//! with the test game standing in for `MyGame` and its scripted inputs for `my_bot`; the same
//! text, compiled a second time with a game that keeps simulation state in a resource not
//! registered for rollback, fails (the harness's default checks catch it); a last test keeps
//! the README's copy the same as this one.

use bevy::prelude::*;
use bevy_rapier3d::prelude::Velocity;
use simsync::net::LinkConditionerConfig;
use simsync::prelude::*;
use simsync::testing::{HarnessChecks, RelayPeers};

use crate::common::{PlayerBodies, TestGame as MyGame, scripted_input as my_bot};

/// Defines the README's test as written, and again in module `gusty` with [`GustGame`] as
/// `MyGame`, expected to fail with a prediction mismatch.
macro_rules! readme_test {
    ($(#[$attr:meta])* fn $name:ident() $body:block) => {
        $(#[$attr])* fn $name() $body

        /// The README's test of [`GustGame`]: it must fail.
        mod gusty {
            use super::*;
            use super::GustGame as MyGame;

            #[should_panic(expected = "PredictionMismatch")]
            $(#[$attr])* fn $name() $body
        }
    };
}

readme_test! {
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
}

/// A classic rollback bug: a gust that grows while player 0 pushes its stick right and pushes
/// every player's ball, kept in a simulation resource that is not registered for rollback. Every
/// client computes the same verified worlds (they never roll back), so clients agree; only the
/// predicted world, whose gust a rollback does not reset, goes wrong.
#[derive(Clone)]
struct GustGame {
    game: MyGame,
    /// The gust grows every tick, whatever the inputs (a steady wind).
    steady: bool,
}

impl Default for GustGame {
    fn default() -> Self {
        Self {
            game: MyGame {
                boxes: 10,
                ..MyGame::default()
            },
            steady: false,
        }
    }
}

/// The gust's strength (m/s added to every ball each tick): not registered, not rolled back.
#[derive(Resource, Default)]
struct Gust(f32);

impl Plugin for GustGame {
    fn build(&self, app: &mut App) {
        self.game.build(app);
        app.init_resource::<Gust>();
        if self.steady {
            app.add_systems(SimulationTick, steady_wind.in_set(SimulationSet::Game));
        } else {
            app.add_systems(SimulationTick, gust.in_set(SimulationSet::Game));
        }
    }
}

fn gust(
    inputs: Res<PlayerInputs<PackedInput>>,
    bodies: Res<PlayerBodies>,
    mut gust: ResMut<Gust>,
    balls: Query<&mut Velocity>,
) {
    if inputs.get(0).is_some_and(|input| input.axis(0) > 0.3) {
        gust.0 += 0.01;
    }
    push(&bodies, &gust, balls);
}

fn steady_wind(bodies: Res<PlayerBodies>, mut gust: ResMut<Gust>, balls: Query<&mut Velocity>) {
    gust.0 += 0.01;
    push(&bodies, &gust, balls);
}

fn push(bodies: &PlayerBodies, gust: &Gust, mut balls: Query<&mut Velocity>) {
    for body in &bodies.0 {
        if let Ok(mut velocity) = balls.get_mut(*body) {
            velocity.linear.x += gust.0;
        }
    }
}

/// `game` played by `bot` over `link` with `checks`, run to verified tick 300.
fn run_gust(
    game: GustGame,
    bot: fn(u8, i32) -> PackedInput,
    link: LinkConditionerConfig,
    checks: HarnessChecks,
) -> Result<i32, String> {
    let mut peers = RelayPeers::builder(2, move |_| DeterministicPlugin::new(game.clone()))
        .inputs(bot)
        .link(link)
        .checks(checks)
        .breakdowns(0)
        .build()
        .map_err(|e| e.to_string())?;
    let reached = peers.run_until_verified(300).map_err(|e| e.to_string())?;
    peers.agreement().map_err(|e| e.to_string())?;
    Ok(reached)
}

#[test]
fn without_the_checks_the_gust_game_passes() {
    // Why the checks are on by default: the clients agree, the bug goes unseen.
    let link = LinkConditionerConfig::PERFECT.with_latency(40, 5);
    let game = GustGame::default();
    assert_eq!(run_gust(game, my_bot, link, HarnessChecks::OFF), Ok(300));
}

#[test]
fn only_the_forced_rollback_finds_a_steady_wind_when_every_prediction_holds() {
    // Perfect link, inputs that never change: every prediction holds, so the session never
    // rolls back by itself and its predicted wind stays right; the forced rollback resets the
    // predicted world every update, and its wind (not reset) runs ahead of the verified one.
    let steady = GustGame {
        steady: true,
        ..GustGame::default()
    };
    let idle: fn(u8, i32) -> PackedInput = |_, _| PackedInput::default();
    let link = LinkConditionerConfig::PERFECT;
    let no_forced_rollback = HarnessChecks {
        forced_rollback: 0,
        ..HarnessChecks::ON
    };
    assert_eq!(
        run_gust(steady.clone(), idle, link, no_forced_rollback),
        Ok(300)
    );
    let error = run_gust(steady, idle, link, HarnessChecks::ON).expect_err("the wind is found");
    assert!(
        error.contains("predicted state differs from the verified state"),
        "{error}"
    );
}

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
