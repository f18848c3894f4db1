//! [`LeafwingInputPlugin`]: leafwing-input-manager `ActionState`s of the local players into
//! [`LocalInputs`], every frame.

use std::marker::PhantomData;

use bevy::ecs::schedule::{InternedScheduleLabel, ScheduleLabel};
use bevy::prelude::*;
use leafwing_input_manager::Actionlike;
use leafwing_input_manager::action_state::ActionState;
use leafwing_input_manager::plugin::InputManagerSystem;

use crate::input::{InputEncoder, PackedInput};
use crate::schedule::DeterministicSet;
use crate::source::{LocalInputs, LocalPlayers};
use crate::tick::PlayerIndex;

/// Marks an entity whose `ActionState<A>` is the input of this app's `n`-th local player
/// ([`LocalPlayers::get`]`(n)`): in a local session `LocalPlayer(n)` drives player `n`; in a
/// networked client `LocalPlayer(0)` drives the slot the relay server assigned, whatever it is.
///
/// Put it next to leafwing's `InputMap<A>` and `ActionState<A>`, one entity per local player.
#[derive(Component, Reflect, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[reflect(Component, Debug, PartialEq, Clone)]
pub struct LocalPlayer(pub u8);

/// The encoder of a [`LeafwingInputPlugin`] (main-app resource; replace it to change the
/// mapping at run time).
#[derive(Resource, Debug, Clone)]
pub struct LocalActionEncoder<A: Actionlike>(pub InputEncoder<A>);

/// Reads the `ActionState<A>` of every [`LocalPlayer`] entity each frame, encodes it with an
/// [`InputEncoder`] and writes it to [`LocalInputs<PackedInput>`], in
/// [`DeterministicSet::ReadLocalInput`] (after leafwing's `InputManagerSystem::ManualControl`,
/// before the session update). The session then latches it into ticks
/// ([local input is latched](crate::rules#local-input-is-latched)), so a one-frame press is
/// never lost.
///
/// Every player of [`LocalPlayers`] is written every frame: a local player with no
/// `LocalPlayer` entity (or whose entity has no `ActionState<A>`) gets the neutral input
/// (`PackedInput::default()`); with several entities for one local player, the one with the
/// lowest `Entity` is used. `LocalPlayer(n)` with `n` past the local players (e.g. a client not
/// welcomed yet) is ignored. Add leafwing's own `InputManagerPlugin::<A>` yourself, to fill the
/// `ActionState`s from devices.
///
/// ```no_run
/// # use bevy::prelude::*;
/// # use leafwing_input_manager::prelude::*;
/// # use simsync_deterministic::prelude::*;
/// # use simsync_deterministic::{LeafwingInputPlugin, LocalPlayer};
/// #[derive(Actionlike, Clone, Copy, Debug, PartialEq, Eq, Hash, Reflect)]
/// enum Action { Jump }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let encoder = InputEncoder::new().button(Action::Jump, 0)?;
/// let mut app = App::new();
/// app.add_plugins(LeafwingInputPlugin::new(encoder));
/// app.world_mut().spawn((LocalPlayer(0), ActionState::<Action>::default()));
/// # Ok(()) }
/// ```
pub struct LeafwingInputPlugin<A: Actionlike> {
    encoder: InputEncoder<A>,
    schedule: InternedScheduleLabel,
    _action: PhantomData<fn() -> A>,
}

impl<A: Actionlike> LeafwingInputPlugin<A> {
    /// A plugin encoding with `encoder`, in `PreUpdate` (the session's default schedule).
    pub fn new(encoder: InputEncoder<A>) -> Self {
        Self {
            encoder,
            schedule: PreUpdate.intern(),
            _action: PhantomData,
        }
    }

    /// The main-app schedule to read in: the one the session update runs in
    /// ([`DeterministicPlugin::in_schedule`](crate::DeterministicPlugin::in_schedule)).
    pub fn in_schedule(mut self, schedule: impl ScheduleLabel) -> Self {
        self.schedule = schedule.intern();
        self
    }
}

impl<A: Actionlike> Plugin for LeafwingInputPlugin<A> {
    fn build(&self, app: &mut App) {
        app.insert_resource(LocalActionEncoder(self.encoder.clone()))
            .register_type::<LocalPlayer>()
            .configure_sets(
                self.schedule,
                DeterministicSet::ReadLocalInput
                    .after(InputManagerSystem::ManualControl)
                    .before(DeterministicSet::SessionUpdate),
            )
            .add_systems(
                self.schedule,
                read_local_actions::<A>.in_set(DeterministicSet::ReadLocalInput),
            );
    }
}

/// The system of [`LeafwingInputPlugin`].
fn read_local_actions<A: Actionlike>(
    encoder: Res<LocalActionEncoder<A>>,
    local_players: Option<Res<LocalPlayers>>,
    actions: Query<(Entity, &LocalPlayer, &ActionState<A>)>,
    inputs: Option<ResMut<LocalInputs<PackedInput>>>,
) {
    let (Some(local_players), Some(mut inputs)) = (local_players, inputs) else {
        return;
    };
    let mut chosen: Vec<Option<(Entity, PackedInput)>> = vec![None; local_players.len()];
    for (entity, local, state) in &actions {
        let Some(slot) = chosen.get_mut(usize::from(local.0)) else {
            continue;
        };
        if slot.is_none_or(|(current, _)| entity < current) {
            *slot = Some((entity, encoder.0.encode(state)));
        }
    }
    for (player, input) in local_players.iter().zip(chosen) {
        let input = input.map(|(_, input)| input).unwrap_or_default();
        write_if_changed(&mut inputs, player, input);
    }
}

/// Sets `player`'s input unless it already has that value (so `LocalInputs` is marked changed
/// only by real changes). A player outside the session is skipped: [`LocalPlayers`] comes from
/// the session, so that would be a session mismatch, not a game error.
fn write_if_changed(
    inputs: &mut ResMut<LocalInputs<PackedInput>>,
    player: PlayerIndex,
    input: PackedInput,
) {
    if inputs.get(player).is_some_and(|current| *current != input) {
        let _ = inputs.set(player, input);
    }
}
