//! Keyboard control of player 0 through leafwing-input-manager: the trace drives it until a key
//! is pressed, then WASD / arrows move it, Space jumps and E pushes.

use bevy::prelude::*;
use leafwing_input_manager::prelude::*;
use simsync::deterministic::{InputEncoder, LeafwingInputPlugin, LocalPlayer};

use super::driver::KeyboardPlayer;
use super::game::{JUMP, PUSH};

/// What a player does.
#[derive(Actionlike, Clone, Copy, Debug, PartialEq, Eq, Hash, Reflect)]
pub enum Action {
    /// Movement on the ground plane.
    #[actionlike(DualAxis)]
    Move,
    /// Jump.
    Jump,
    /// Push nearby bodies.
    Push,
}

/// leafwing's plugin, the session's leafwing encoder and the take-over on the first key press.
pub struct KeyboardPlugin;

impl Plugin for KeyboardPlugin {
    fn build(&self, app: &mut App) {
        let encoder = InputEncoder::new()
            .dual_axis(Action::Move, 0, 1)
            .and_then(|e| e.button(Action::Jump, JUMP))
            .and_then(|e| e.button(Action::Push, PUSH))
            .expect("valid input mapping");
        app.add_plugins((
            InputManagerPlugin::<Action>::default(),
            LeafwingInputPlugin::new(encoder),
        ))
        .add_systems(Startup, spawn_local_player)
        .add_systems(Update, take_over_on_key_press);
    }
}

fn spawn_local_player(mut commands: Commands) {
    let map = InputMap::default()
        .with_dual_axis(Action::Move, VirtualDPad::wasd())
        .with_dual_axis(Action::Move, VirtualDPad::arrow_keys())
        .with(Action::Jump, KeyCode::Space)
        .with(Action::Push, KeyCode::KeyE);
    commands.spawn((LocalPlayer(0), map, ActionState::<Action>::default()));
}

/// Player 0 leaves the trace for the keyboard at the first key press.
fn take_over_on_key_press(
    mut commands: Commands,
    keys: Res<ButtonInput<KeyCode>>,
    taken: Option<Res<KeyboardPlayer>>,
) {
    if taken.is_some() {
        return;
    }
    if let Some(key) = keys.get_just_pressed().next() {
        println!("sandbox_view: {key:?} pressed: player 0 follows the keyboard from now on");
        commands.insert_resource(KeyboardPlayer(0));
    }
}
