//! The determinism guard: a debug option of
//! [`DebugConfig::determinism_guard`](crate::DebugConfig::determinism_guard) that
//! reads the declared access of the game's [`SimulationTick`] systems and reports those that
//! read state outside the rollback ([the determinism guard](crate::rules#the-determinism-guard)).
//!
//! The check runs when Bevy builds the `SimulationTick` schedule of a simulation world (a
//! schedule build pass), so it sees every system the game added, with its run conditions. What
//! it finds is kept in the verified world and reported by the main app after the next session
//! update, as [`DeterminismWarning`] messages and in
//! [`SessionStats::determinism_warnings`](crate::SessionStats::determinism_warnings).

use std::any::TypeId;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use bevy::ecs::query::FilteredAccessSet;
use bevy::ecs::resource::IS_RESOURCE;
use bevy::ecs::schedule::graph::DiGraph;
use bevy::ecs::schedule::{
    FlattenedDependencies, NodeId, ScheduleBuildError, ScheduleBuildPass, ScheduleGraph, SystemKey,
    SystemSetKey,
};
use bevy::ecs::system::SystemAccess;
use bevy::platform::hash::FixedHasher;
use bevy::prelude::*;
use bevy::time::{Fixed, Real, Virtual};
use indexmap::IndexSet;

use crate::schedule::SimulationTick;
use crate::snapshot::RollbackRegistry;
use crate::stats::SessionStats;
use crate::worlds::{GameBuilder, SimulationWorlds};

/// A simulation system reads state outside the rollback: its result may differ between the
/// predicted and the verified run of a tick, or between peers. Written once per system and
/// reason, after the session update that follows the schedule's build.
#[derive(Message, Debug, Clone, PartialEq, Eq, Reflect)]
pub struct DeterminismWarning {
    /// The system's name (Bevy's type name of the function; with a run condition, `condition
    /// <name> of <system>`).
    pub system: String,
    /// What it reads.
    pub reason: DeterminismRisk,
}

/// Why the determinism guard flagged a system.
#[derive(Debug, Clone, PartialEq, Eq, Reflect)]
pub enum DeterminismRisk {
    /// The system reads a clock of the main app (`Time<Real>`, `Time<Virtual>` or
    /// `Time<Fixed>`): wall-clock or frame time, different on every run. Read `Res<Time>` (one
    /// tick per tick) or `Res<SimTick>` instead.
    OutsideClock {
        /// The clock's type name.
        clock: String,
    },
    /// The system reads or writes a resource that is neither registered for rollback
    /// (`rollback_resource`) nor declared constant (`ignore_rollback_resource`).
    UnregisteredResource {
        /// The resource's type name.
        resource: String,
        /// Whether the system writes it (a write is state a rollback does not restore).
        writes: bool,
    },
}

impl fmt::Display for DeterminismWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            DeterminismRisk::OutsideClock { clock } => write!(
                f,
                "simulation system `{}` reads `{clock}`, a clock outside the simulation: read \
                 `Res<Time>` or `Res<SimTick>`",
                self.system
            ),
            DeterminismRisk::UnregisteredResource { resource, writes } => write!(
                f,
                "simulation system `{}` {} `{resource}`, which is not rolled back: register it \
                 (`rollback_resource`) or, if it is constant, `ignore_rollback_resource`",
                self.system,
                if *writes { "writes" } else { "reads" }
            ),
        }
    }
}

/// The clocks a simulation system must not read, by type.
fn outside_clocks() -> [TypeId; 3] {
    [
        TypeId::of::<Time<Real>>(),
        TypeId::of::<Time<Virtual>>(),
        TypeId::of::<Time<Fixed>>(),
    ]
}

/// Decides whether access to one resource is a risk: a clock outside the simulation always is;
/// any other resource is unless `known` (registered, ignored, or the session's own). Pure.
pub(crate) fn classify(
    type_id: TypeId,
    name: &str,
    writes: bool,
    known: impl Fn(TypeId) -> bool,
) -> Option<DeterminismRisk> {
    if outside_clocks().contains(&type_id) {
        return Some(DeterminismRisk::OutsideClock {
            clock: name.to_string(),
        });
    }
    (!known(type_id)).then(|| DeterminismRisk::UnregisteredResource {
        resource: name.to_string(),
        writes,
    })
}

/// In a simulation world: the systems and types that existed before the game plugin was built
/// (the session's own, Rapier's, transform propagation). They are not checked / always known.
#[derive(Resource, Default)]
struct GuardBaseline {
    systems: HashSet<SystemKey>,
    types: HashSet<TypeId>,
}

/// In a simulation world: findings not yet reported, and every finding ever made (a schedule
/// rebuilt later does not report the same system twice).
#[derive(Resource, Default)]
pub(crate) struct GuardFindings {
    pending: Vec<DeterminismWarning>,
    seen: HashSet<(String, String)>,
}

impl GuardFindings {
    fn push(&mut self, warning: DeterminismWarning) {
        if self
            .seen
            .insert((warning.system.clone(), format!("{:?}", warning.reason)))
        {
            self.pending.push(warning);
        }
    }
}

/// The game builder with the guard around it: the baseline is recorded before the game plugin
/// runs, the build pass added after.
pub(crate) fn wrap_game(game: GameBuilder) -> GameBuilder {
    Arc::new(move |app: &mut App| {
        record_baseline(app);
        game(app);
        app.init_resource::<GuardFindings>();
        app.edit_schedule(SimulationTick, |schedule| {
            schedule.add_build_pass(GuardPass);
        });
    })
}

fn record_baseline(app: &mut App) {
    let systems = app
        .get_schedule(SimulationTick)
        .map(|schedule| {
            schedule
                .graph()
                .systems
                .iter()
                .map(|(key, ..)| key)
                .collect()
        })
        .unwrap_or_default();
    let types = app
        .world()
        .components()
        .iter_registered()
        .filter_map(|(_, info)| info.type_id())
        .collect();
    app.insert_resource(GuardBaseline { systems, types });
}

/// The schedule build pass that inspects the systems' access.
#[derive(Debug, Default)]
struct GuardPass;

impl ScheduleBuildPass for GuardPass {
    type EdgeOptions = ();

    fn add_dependency(&mut self, _from: NodeId, _to: NodeId, _options: Option<&Self::EdgeOptions>) {
    }

    fn collapse_set(
        &mut self,
        _set: SystemSetKey,
        _systems: &IndexSet<SystemKey, FixedHasher>,
        _dependency_flattening: &DiGraph<NodeId>,
    ) -> impl Iterator<Item = (NodeId, NodeId)> {
        std::iter::empty()
    }

    fn build(
        &mut self,
        world: &mut World,
        graph: &mut ScheduleGraph,
        _dependency_flattened: FlattenedDependencies<'_>,
    ) -> Result<(), ScheduleBuildError> {
        inspect_schedule(world, graph);
        Ok(())
    }
}

/// Checks every game system of `graph` (not exclusive, not in the baseline) and its run
/// conditions; findings go to [`GuardFindings`].
fn inspect_schedule(world: &mut World, graph: &mut ScheduleGraph) {
    let Some(baseline) = world.remove_resource::<GuardBaseline>() else {
        return;
    };
    let mut found = Vec::new();
    for (key, system, conditions) in graph.systems.iter() {
        if baseline.systems.contains(&key) {
            continue;
        }
        // The schedule initialized every system (and stored its access) before the build
        // passes run. An exclusive system sees the whole world and is not checked.
        let Some(entry) = graph.systems.get(key) else {
            continue;
        };
        let name = system.name().to_string();
        match entry.access() {
            SystemAccess::Exclusive => continue,
            SystemAccess::Shared(access) => {
                found.extend(check_access(world, &baseline, &name, access));
            }
            SystemAccess::None => {}
        }
        for condition in conditions {
            if let SystemAccess::Shared(access) = &condition.access {
                let label = format!("condition {} of {name}", condition.condition.name());
                found.extend(check_access(world, &baseline, &label, access));
            }
        }
    }
    let mut findings = world.get_resource_or_init::<GuardFindings>();
    for warning in found {
        findings.push(warning);
    }
    world.insert_resource(baseline);
}

/// The risks in one access set: every resource read or written, classified.
fn check_access(
    world: &World,
    baseline: &GuardBaseline,
    system: &str,
    access: &FilteredAccessSet,
) -> Vec<DeterminismWarning> {
    // The verified world hands its registry to the session when the session starts; a
    // schedule rebuilt after that is checked for clocks only.
    let registry = world.get_resource::<RollbackRegistry>();
    let known = |type_id: TypeId| {
        baseline.types.contains(&type_id) || registry.is_none_or(|r| r.knows_resource(type_id))
    };
    let mut found = Vec::new();
    for filtered in access.filtered_accesses() {
        if !filtered.with_filters().any(|id| id == IS_RESOURCE) {
            continue;
        }
        // Unbounded access (`&World`, all resources) cannot be checked.
        let Some(ids) = filtered.access().reads().as_finite_set() else {
            continue;
        };
        for id in ids.iter() {
            let Some(info) = world.components().get_info(id) else {
                continue;
            };
            let Some(type_id) = info.type_id() else {
                continue;
            };
            let writes = filtered.access().has_write(id);
            let name = info.name().to_string();
            if let Some(reason) = classify(type_id, &name, writes, known) {
                found.push(DeterminismWarning {
                    system: system.to_string(),
                    reason,
                });
            }
        }
    }
    found
}

/// Main app: the warning message ([`report_findings`] runs at the end of each session frame).
pub(crate) fn install_reporting(app: &mut App) {
    app.add_message::<DeterminismWarning>();
}

/// Moves the verified world's findings into [`DeterminismWarning`] messages, a `warn!` each and
/// [`SessionStats::determinism_warnings`]; the predicted world found the same and is emptied.
pub(crate) fn report_findings(world: &mut World) {
    let Some(mut worlds) = world.get_resource_mut::<SimulationWorlds>() else {
        return;
    };
    let found = worlds
        .verified_mut()
        .get_resource_mut::<GuardFindings>()
        .map(|mut f| std::mem::take(&mut f.pending))
        .unwrap_or_default();
    // The predicted sub-world itself, also while it shares the verified world's state.
    if let Some(mut predicted) = worlds.predicted.world.get_resource_mut::<GuardFindings>() {
        predicted.pending.clear();
    }
    if found.is_empty() {
        return;
    }
    for warning in &found {
        warn!("determinism guard: {warning}");
    }
    if let Some(mut stats) = world.get_resource_mut::<SessionStats>() {
        stats.determinism_warnings += found.len() as u64;
    }
    world.write_message_batch(found);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Resource)]
    struct Config;

    #[test]
    fn outside_clocks_are_flagged_even_when_known() {
        for clock in outside_clocks() {
            let risk = classify(clock, "clock", false, |_| true);
            assert_eq!(
                risk,
                Some(DeterminismRisk::OutsideClock {
                    clock: "clock".into()
                })
            );
        }
    }

    #[test]
    fn unknown_resources_are_flagged_with_their_access() {
        let id = TypeId::of::<Config>();
        assert_eq!(
            classify(id, "Config", true, |_| false),
            Some(DeterminismRisk::UnregisteredResource {
                resource: "Config".into(),
                writes: true
            })
        );
        assert_eq!(classify(id, "Config", false, |t| t == id), None);
        assert_eq!(
            classify(TypeId::of::<Time>(), "Time", false, |_| true),
            None
        );
    }

    #[test]
    fn a_finding_is_reported_once() {
        let mut findings = GuardFindings::default();
        let warning = DeterminismWarning {
            system: "game::tick".into(),
            reason: DeterminismRisk::OutsideClock {
                clock: "Time<Real>".into(),
            },
        };
        findings.push(warning.clone());
        findings.push(warning);
        assert_eq!(findings.pending.len(), 1);
    }
}
