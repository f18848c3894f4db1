//! Bevy `States` inside the simulation worlds, rolled back with the rest of the simulation:
//! [`RollbackStateAppExt`] ([states in the simulation](crate::rules#states-in-the-simulation)).

use std::any::TypeId;

use bevy::app::MainScheduleOrder;
use bevy::prelude::*;
use bevy_state::app::{AppExtStates, StatesPlugin};
use bevy_state::state::{
    FreelyMutableState, NextState, PreviousState, State, StateTransition, StateTransitionEvent,
    States,
};

use crate::checksum::{SimHash, StateHasher};
use crate::schedule::{SimulationSet, SimulationTick};
use crate::snapshot::registry::with_registry;
use crate::snapshot::strategy::{CopyResource, DigestSource, ResourceCopier, ValueCopy};

/// Registering a Bevy state of the simulation from your game plugin (it runs in both simulation
/// worlds, so this registers in both).
///
/// The state lives in the simulation worlds, not in the main app: simulation systems set
/// `NextState<S>` and read `State<S>`, `in_state` run conditions and `OnEnter` / `OnExit` /
/// `OnTransition` schedules work as in a Bevy app. Transitions are applied at the start of each
/// [`SimulationTick`] (before [`SimulationSet::Prepare`]): a `NextState` set during tick `T`
/// takes effect at the start of tick `T + 1`; the initial state is entered at the start of the
/// setup tick (tick 0). `State<S>`, `NextState<S>` and `PreviousState<S>` are rolled back, so
/// a state changed by a mispredicted input is restored by the rollback like a component.
///
/// Do not add Bevy's `StatesPlugin` in the game plugin (this adds what the simulation worlds
/// need); do not put `DespawnOnExit` / `DespawnOnEnter` on simulation entities (Bevy despawns
/// them with plain commands, which a rollback cannot undo: despawn with `SimCommands` in
/// `OnExit` instead). Computed states and sub-states are not rolled back.
pub trait RollbackStateAppExt {
    /// Initializes state `S` (its `FromWorld` value, unless already inserted) in the simulation
    /// world and rolls back `State<S>`, `NextState<S>` and `PreviousState<S>` (not part of
    /// checksums).
    fn rollback_state<S: FreelyMutableState + FromWorld>(&mut self) -> &mut Self;

    /// As [`rollback_state`](Self::rollback_state), and includes the state (current, pending
    /// and previous) in checksums.
    fn rollback_hashed_state<S: FreelyMutableState + FromWorld + SimHash>(&mut self) -> &mut Self;
}

impl RollbackStateAppExt for App {
    fn rollback_state<S: FreelyMutableState + FromWorld>(&mut self) -> &mut Self {
        install_state::<S>(self);
        with_registry(self, |registry| {
            registry.add_resource_copier(
                TypeId::of::<State<S>>(),
                std::any::type_name::<State<S>>(),
                state_copier::<S>(None),
            )?;
            registry.register_resource::<NextState<S>>()?;
            registry.register_resource::<PreviousState<S>>()
        });
        self
    }

    fn rollback_hashed_state<S: FreelyMutableState + FromWorld + SimHash>(&mut self) -> &mut Self {
        install_state::<S>(self);
        with_registry(self, |registry| {
            registry.add_resource_copier(
                TypeId::of::<State<S>>(),
                std::any::type_name::<State<S>>(),
                state_copier::<S>(Some(hash_state::<S>)),
            )?;
            registry.register_hashed_resource::<NextState<S>>()?;
            registry.register_hashed_resource::<PreviousState<S>>()
        });
        self
    }
}

/// Marks a simulation world whose [`SimulationTick`] already runs state transitions.
#[derive(Resource)]
struct SimulationStateTransitions;

/// State transitions in this world (once), state `S` initialized, its transition messages
/// not rolled back.
fn install_state<S: FreelyMutableState + FromWorld>(app: &mut App) {
    if !app
        .world()
        .contains_resource::<SimulationStateTransitions>()
    {
        app.insert_resource(SimulationStateTransitions);
        if !app.is_plugin_added::<StatesPlugin>() {
            // `StatesPlugin` files `StateTransition` into the main schedule order, which a
            // simulation world never runs; it only needs the resource to exist.
            app.init_resource::<MainScheduleOrder>();
            app.add_plugins(StatesPlugin);
        }
        app.add_systems(
            SimulationTick,
            run_state_transitions.before(SimulationSet::Prepare),
        );
    }
    if !app.world().contains_resource::<State<S>>() {
        app.init_state::<S>();
    }
    // The transition messages are read within the transition that writes them: a buffer of
    // the tick, not state. They are aged with the world's other messages, once a tick before
    // the transitions ([messages live two
    // ticks](crate::rules#messages-in-a-simulation-world-live-two-ticks)).
    with_registry(app, |registry| {
        registry.ignore_resource::<Messages<StateTransitionEvent<S>>>();
        Ok(())
    });
}

/// Applies pending state transitions at the start of a tick.
fn run_state_transitions(world: &mut World) {
    let _ = world.try_run_schedule(StateTransition);
}

fn hash_state<S: States + SimHash>(state: &State<S>, hasher: &mut StateHasher) {
    state.get().sim_hash(hasher);
}

/// `Unchanged` as 0; `Pending(s)` as 1 then `s`; `PendingIfDifferent(s)` as 2 then `s`.
impl<S: FreelyMutableState + SimHash> SimHash for NextState<S> {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        use std::hash::Hasher;
        match self {
            NextState::Unchanged => hasher.write_u8(0),
            NextState::Pending(state) => {
                hasher.write_u8(1);
                state.sim_hash(hasher);
            }
            NextState::PendingIfDifferent(state) => {
                hasher.write_u8(2);
                state.sim_hash(hasher);
            }
        }
    }
}

impl<S: States + SimHash> SimHash for State<S> {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.get().sim_hash(hasher);
    }
}

impl<S: States + SimHash> SimHash for PreviousState<S> {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.get().sim_hash(hasher);
    }
}

/// Duplicates `State<S>` (which is not `Clone`) by its value: a copied state is replaced
/// only when it differs.
struct StateValue;

impl<S: States> ValueCopy<State<S>> for StateValue {
    fn duplicate(value: &State<S>) -> State<S> {
        State::new(value.get().clone())
    }

    fn overwrite(value: &State<S>, target: &mut State<S>) {
        if target.get() != value.get() {
            *target = State::new(value.get().clone());
        }
    }
}

/// The copier of `State<S>`: hashed by `hash` (none: not part of checksums); the full
/// prediction check compares the hash, or else the state's `Debug` text.
fn state_copier<S: States>(
    hash: Option<fn(&State<S>, &mut StateHasher)>,
) -> Box<dyn ResourceCopier> {
    Box::new(CopyResource::<State<S>, StateValue>::new(
        hash,
        DigestSource::Debug(debug_state::<S>),
    ))
}

/// Feeds the `Debug` text of the state into `hasher` (`States` are `Debug`).
fn debug_state<S: States>(state: &State<S>, hasher: &mut StateHasher) {
    use std::hash::Hasher;
    hasher.write(format!("{:?}", state.get()).as_bytes());
}

#[cfg(test)]
mod tests {
    use std::hash::Hasher;

    use super::*;
    use crate::snapshot::strategy::TickMap;

    #[derive(Default, Debug, Clone, Copy, PartialEq, Eq, Hash, crate::SimHash)]
    enum Phase {
        #[default]
        Calm,
        Alarm,
    }

    impl States for Phase {}
    impl FreelyMutableState for Phase {}

    fn hash<T: SimHash>(value: &T) -> u64 {
        let mut hasher = StateHasher::default();
        value.sim_hash(&mut hasher);
        hasher.finish()
    }

    #[test]
    fn a_pending_transition_is_part_of_the_hash() {
        let unchanged = hash(&NextState::<Phase>::Unchanged);
        let pending = hash(&NextState::Pending(Phase::Alarm));
        let if_neq = hash(&NextState::PendingIfDifferent(Phase::Alarm));
        let other = hash(&NextState::Pending(Phase::Calm));
        let all = [unchanged, pending, if_neq, other];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn copying_a_state_restores_value_and_absence() {
        let mut src = World::new();
        let mut dst = World::new();
        src.insert_resource(State::new(Phase::Calm));
        dst.insert_resource(State::new(Phase::Alarm));
        let copier = state_copier::<Phase>(Some(hash_state::<Phase>));
        let map = TickMap::new(src.read_change_tick(), dst.read_change_tick(), {
            dst.read_change_tick()
        });
        copier.copy(&src, &mut dst, map);
        assert_eq!(*dst.resource::<State<Phase>>().get(), Phase::Calm);
        let (mut a, mut b) = (StateHasher::default(), StateHasher::default());
        copier.hash(0, &src, &mut a);
        copier.hash(0, &dst, &mut b);
        assert_eq!(a.finish(), b.finish());
        src.remove_resource::<State<Phase>>();
        copier.copy(&src, &mut dst, map);
        assert!(!dst.contains_resource::<State<Phase>>());
    }
}
