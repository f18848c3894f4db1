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
use crate::snapshot::digest::DigestOutcome;
use crate::snapshot::registry::with_registry;
use crate::snapshot::strategy::{ResourceCopier, TickMap};

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
                Box::new(StateCopier::<S> { hash: None }),
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
                Box::new(StateCopier::<S> {
                    hash: Some(hash_state::<S>),
                }),
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

/// Copier of `State<S>` (which is not `Clone`): the value and its change ticks, like a cloned
/// resource.
struct StateCopier<S: States> {
    hash: Option<fn(&State<S>, &mut StateHasher)>,
}

impl<S: States> ResourceCopier for StateCopier<S> {
    fn type_id(&self) -> std::any::TypeId {
        std::any::TypeId::of::<State<S>>()
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<State<S>>()
    }

    fn copy(&self, src: &World, dst: &mut World, map: TickMap) {
        let Some(value) = src.get_resource_ref::<State<S>>() else {
            if dst.contains_resource::<State<S>>() {
                dst.remove_resource::<State<S>>();
            }
            return;
        };
        let changed = map.map(value.last_changed());
        let added = map.map(value.added());
        let state = value.get().clone();
        if let Some(mut target) = dst.get_resource_mut::<State<S>>() {
            if *target.get() != state {
                *target.bypass_change_detection() = State::new(state);
            }
            target.set_last_changed(changed);
            target.set_last_added(added);
        } else {
            dst.insert_resource(State::new(state));
            let mut target = dst.resource_mut::<State<S>>();
            target.set_last_changed(changed);
            target.set_last_added(added);
        }
    }

    fn hash(&self, tag: u32, world: &World, hasher: &mut StateHasher) {
        use std::hash::Hasher;
        if let Some(hash) = self.hash {
            hasher.write_u32(tag);
            match world.get_resource::<State<S>>() {
                Some(value) => {
                    hasher.write_u8(1);
                    hash(value, hasher);
                }
                None => hasher.write_u8(0),
            }
        }
    }

    fn hashed(&self) -> bool {
        self.hash.is_some()
    }

    fn digest(&self, world: &World, hasher: &mut StateHasher) -> DigestOutcome {
        use std::hash::Hasher;
        let Some(value) = world.get_resource::<State<S>>() else {
            return DigestOutcome::Absent;
        };
        hasher.write_str(self.type_name());
        match self.hash {
            Some(hash) => hash(value, hasher),
            // `States` are `Debug`: the full prediction check compares the value's text.
            None => hasher.write(format!("{:?}", value.get()).as_bytes()),
        }
        DigestOutcome::Compared
    }
}

#[cfg(test)]
mod tests {
    use std::hash::Hasher;

    use super::*;

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
        let copier = StateCopier::<Phase> {
            hash: Some(hash_state::<Phase>),
        };
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
