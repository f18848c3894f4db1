//! The smallest deterministic game: two players, a leafwing-input-manager action enum read by
//! `LeafwingInputPlugin`, both players in this process (`LocalPlayers`) with a local relay that
//! confirms inputs 4 ticks late (so the predicted world mispredicts player 1 and rolls back).
//! A jump is a simulation event: the main app "plays a sound" when a jump is predicted, stops
//! it when the jump is cancelled by a rollback, and counts confirmed jumps. Headless; prints
//! the sound log's totals and the verified checksum.
//!
//! ```text
//! cargo run --ignore-rust-version --example minimal_deterministic
//! ```

use bevy::prelude::*;
use leafwing_input_manager::prelude::*;
use simsync::deterministic::SimEventStatus;
use simsync::deterministic::testing::run_until_verified;
use simsync::prelude::*;

const PLAYERS: u8 = 2;
/// The verified tick whose checksum is printed.
const TICKS: i32 = 600;
/// Button bit of `Action::Jump` in `PackedInput`.
const JUMP: u8 = 0;

/// What a player can do. A game adds `InputManagerPlugin::<Action>` and an `InputMap` to fill
/// `ActionState<Action>` from devices; this headless example scripts it (`script_actions`).
#[derive(Actionlike, Clone, Copy, Debug, PartialEq, Eq, Hash, Reflect)]
enum Action {
    #[actionlike(DualAxis)]
    Move,
    Jump,
}

/// One player in the simulation worlds: rolled back and part of checksums.
#[derive(Component, Clone, Debug, SimHash)]
struct Player {
    index: u8,
    /// On the ground plane (y = 0), m.
    position: Vec3,
    jumps: u32,
}

/// A simulation event: player `0` jumped (at the tick it is reported with).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Jumped(u8);

/// The game: added to both simulation worlds (verified and predicted).
#[derive(Clone)]
struct Game;

impl Plugin for Game {
    fn build(&self, app: &mut App) {
        app.rollback_hashed_component::<Player>()
            .add_systems(SimulationStartup, spawn_players)
            .add_systems(SimulationTick, move_players.in_set(SimulationSet::Game));
    }
}

fn spawn_players(mut sim: SimCommands) -> Result {
    for index in 0..PLAYERS {
        let position = Vec3::X * f32::from(index) * 2.0;
        sim.spawn(Player {
            index,
            position,
            jumps: 0,
        })?;
    }
    Ok(())
}

/// Every tick: move by the stick (5 m/s at full tilt), count presses of jump.
fn move_players(
    inputs: Res<PlayerInputs<PackedInput>>,
    mut players: Query<&mut Player>,
    mut events: SimEvents<Jumped>,
) {
    for mut player in &mut players {
        let (Some(input), Some(previous)) =
            (inputs.get(player.index), inputs.previous(player.index))
        else {
            continue;
        };
        player.position += Vec3::new(input.axis(0), 0.0, input.axis(1)) * 5.0 / 64.0;
        if input.just_pressed(previous, JUMP) {
            player.jumps += 1;
            events.write(Jumped(player.index));
        }
    }
}

/// Stands in for a keyboard: player 0 walks right and jumps every 40 updates, player 1 turns
/// by a radian every 50 updates and jumps every 25.
fn script_actions(
    mut frame: Local<u32>,
    mut players: Query<(&LocalPlayer, &mut ActionState<Action>)>,
) {
    *frame += 1;
    for (player, mut actions) in &mut players {
        let (stick, period) = match player.0 {
            0 => (Vec2::X, 40),
            _ => (Vec2::from_angle((*frame / 50) as f32), 25),
        };
        actions.set_axis_pair(&Action::Move, stick);
        if *frame % period < 5 {
            actions.press(&Action::Jump);
        } else {
            actions.release(&Action::Jump);
        }
    }
}

/// The sound-style effect: start on an announcement, stop on a cancellation, keep on a
/// confirmation. Only the confirmed stream would be safe for a network send.
#[derive(Resource, Default, Debug)]
struct SoundLog {
    played: u32,
    /// Of `played`, the jumps first seen after a rollback (a remote press predicted as not pressed).
    late: u32,
    stopped: u32,
    confirmed: u32,
}

fn play_jump_sounds(
    mut arrivals: MessageReader<SimEventReceived<Jumped>>,
    mut log: ResMut<SoundLog>,
) {
    for arrival in arrivals.read() {
        match arrival.status {
            SimEventStatus::Predicted => log.played += 1,
            SimEventStatus::Late => {
                log.played += 1;
                log.late += 1;
            }
            SimEventStatus::Cancelled => log.stopped += 1,
            SimEventStatus::Confirmed => log.confirmed += 1,
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let encoder = InputEncoder::new()
        .dual_axis(Action::Move, 0, 1)?
        .button(Action::Jump, JUMP)?;
    let session = DeterministicPlugin::<PackedInput>::new(Game).config(SessionConfig {
        players: PLAYERS,
        // One tick per update, so this loop runs as fast as the machine allows.
        clock: SessionClock::Stepped {
            ticks_per_update: 1,
        },
        // Inputs confirmed 4 ticks late; player 1's input is predicted (as if remote).
        local: LocalSessionConfig {
            latency_ticks: vec![4],
            known_players: vec![0],
            ..default()
        },
        checksum_interval: 1,
        verify_predictions: true,
        ..default()
    });
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, session, LeafwingInputPlugin::new(encoder)))
        .add_sim_event::<Jumped>()
        .init_resource::<SoundLog>()
        .add_systems(
            PreUpdate,
            script_actions.before(DeterministicSet::ReadLocalInput),
        )
        .add_systems(AfterPrediction, play_jump_sounds);
    // One entity per player this app controls: `LocalPlayer(n)` feeds `LocalPlayers[n]`.
    let local = app.world().resource::<LocalPlayers>().clone();
    for n in 0..local.len() {
        app.world_mut()
            .spawn((LocalPlayer(n as u8), ActionState::<Action>::default()));
    }
    if let Some(SessionSetupError(error)) = app.world().get_resource::<SessionSetupError>() {
        return Err(error.to_string().into());
    }
    run_until_verified(&mut app, TICKS, 10 * TICKS as u32)?;
    let sounds = app.world().resource::<SoundLog>();
    println!(
        "local players {:?}; jump sounds: {} played ({} late), {} stopped (mispredicted), {} confirmed",
        local.as_slice(),
        sounds.played,
        sounds.late,
        sounds.stopped,
        sounds.confirmed
    );
    let stats = app.world().resource::<SessionStats>();
    let checksum = stats.checksum_history.iter().find(|c| c.tick == TICKS);
    let checksum = checksum.ok_or("no checksum at that tick")?.checksum;
    println!(
        "{} rollbacks; prediction matched verification on {} of {} predicted ticks\n\
         verified tick {TICKS}: checksum {checksum:016x}",
        stats.rollbacks, stats.resim_ticks_matching, stats.resim_ticks_checked
    );
    Ok(())
}
