//! Keyboard control through leafwing-input-manager: WASD / arrows move, Space jumps, E pushes.
//!
//! - [`KeyboardPlugin`] (local mode): the trace drives player 0 until a key is pressed; from
//!   then on the keyboard does.
//! - [`JoinKeyboardPlugin`] (join): the keyboard drives this client's player while one of its
//!   keys is held, else the `--trace` script does, tick by tick (`game::keyboard_over_trace`).

use std::sync::{Arc, Mutex};

use bevy::prelude::*;
use leafwing_input_manager::plugin::InputManagerSystem;
use leafwing_input_manager::prelude::*;
use simsync::deterministic::{
    DeterministicSet, InputEncoder, LeafwingInputPlugin, LocalPlayer, TickInputSource,
};
use simsync::prelude::PackedInput;

use super::driver::KeyboardPlayer;
use super::game::{self, JUMP, PUSH};
use super::trace::CompiledTrace;

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

/// Every key of the player's map ([`input_map`]): W A S D, the arrows, Space, E.
const PLAYER_KEYS: [KeyCode; 10] = [
    KeyCode::KeyW,
    KeyCode::KeyA,
    KeyCode::KeyS,
    KeyCode::KeyD,
    KeyCode::ArrowUp,
    KeyCode::ArrowLeft,
    KeyCode::ArrowDown,
    KeyCode::ArrowRight,
    KeyCode::Space,
    KeyCode::KeyE,
];

/// The player's keys: WASD and the arrows move, Space jumps, E pushes.
fn input_map() -> InputMap<Action> {
    InputMap::default()
        .with_dual_axis(Action::Move, VirtualDPad::wasd())
        .with_dual_axis(Action::Move, VirtualDPad::arrow_keys())
        .with(Action::Jump, KeyCode::Space)
        .with(Action::Push, KeyCode::KeyE)
}

/// The actions as the sandbox's input: the move axes in slots 0 and 1, jump and push buttons.
fn encoder() -> InputEncoder<Action> {
    InputEncoder::new()
        .dual_axis(Action::Move, 0, 1)
        .and_then(|e| e.button(Action::Jump, JUMP))
        .and_then(|e| e.button(Action::Push, PUSH))
        .expect("valid input mapping")
}

/// leafwing's plugin, the session's leafwing encoder and the take-over on the first key press.
pub struct KeyboardPlugin;

impl Plugin for KeyboardPlugin {
    fn build(&self, app: &mut App) {
        app.add_plugins((
            InputManagerPlugin::<Action>::default(),
            LeafwingInputPlugin::new(encoder()),
        ))
        .add_systems(Startup, spawn_local_player)
        .add_systems(Update, take_over_on_key_press);
    }
}

fn spawn_local_player(mut commands: Commands) {
    commands.spawn((
        LocalPlayer(0),
        input_map(),
        ActionState::<Action>::default(),
    ));
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

/// The keyboard's input while one of the player's keys is held, `None` while none is, as of
/// this frame (shared with the session's input source, which runs inside the session update).
#[derive(Resource, Clone, Default)]
struct HeldKeys(Arc<Mutex<Option<PackedInput>>>);

impl HeldKeys {
    fn get(&self) -> Option<PackedInput> {
        self.0.lock().map_or(None, |held| *held)
    }

    fn set(&self, input: Option<PackedInput>) {
        if let Ok(mut held) = self.0.lock() {
            *held = input;
        }
    }
}

/// The input of a networked client's own player (`join`): the keyboard while one of its keys is
/// held, else `script` (`--trace`; the player's slot is the script's player), else standing
/// still, decided per tick the session polls ([`game::keyboard_over_trace`]). Installs the
/// session's `TickInputSource`.
pub struct JoinKeyboardPlugin {
    /// The scripted input, if any.
    pub script: Option<CompiledTrace>,
}

impl Plugin for JoinKeyboardPlugin {
    fn build(&self, app: &mut App) {
        let held = HeldKeys::default();
        let keyboard = held.clone();
        let script = self.script.clone();
        let source = TickInputSource::new(move |player, tick| {
            let scripted = script
                .as_ref()
                .map(|trace| game::encode(&trace.input(player, tick)));
            game::keyboard_over_trace(keyboard.get(), scripted)
        });
        app.add_plugins(InputManagerPlugin::<Action>::default())
            .insert_resource(held)
            .insert_resource(source)
            .add_systems(Startup, spawn_local_player)
            .add_systems(
                PreUpdate,
                sample_held_keys
                    .after(InputManagerSystem::ManualControl)
                    .before(DeterministicSet::SessionUpdate),
            );
    }
}

/// Keeps this frame's keyboard input in [`HeldKeys`]: the encoded actions while a key of
/// [`PLAYER_KEYS`] is held, else `None`.
fn sample_held_keys(
    keys: Res<ButtonInput<KeyCode>>,
    actions: Query<&ActionState<Action>, With<LocalPlayer>>,
    held: Res<HeldKeys>,
    mut cached: Local<Option<InputEncoder<Action>>>,
) {
    let encoder = cached.get_or_insert_with(encoder);
    let pressed = keys.any_pressed(PLAYER_KEYS);
    let input = actions
        .iter()
        .next()
        .filter(|_| pressed)
        .map(|state| encoder.encode(state));
    held.set(input);
}
