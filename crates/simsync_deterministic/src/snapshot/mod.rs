//! Snapshots and rollback: making the predicted world's simulation state equal the verified
//! world's.
//!
//! Instead of storing snapshots per tick, a rollback copies the verified world (which is always
//! at the target tick when a rollback happens) straight into the predicted world: the entity set
//! ([`entities`]), every registered component and resource ([`registry`], [`strategy`]) and
//! Rapier's state ([`rapier`]).
//!
//! The same state, serialized, is a [`WorldSnapshot`] ([`format`], [`capture`]); [`transfer`]
//! is a networked client's part of moving one through the relay. Capturing and loading a
//! session's snapshot, and the exchange with the relay around the session update (late join,
//! rejoin, resync), sit above the session, in `late_join/`.

pub mod capture;
pub(crate) mod character_serial;
pub mod coverage;
pub mod digest;
pub mod entities;
pub mod format;
pub(crate) mod multibody_check;
pub mod rapier;
pub(crate) mod rapier_check;
pub mod rapier_serial;
pub mod registry;
pub mod relationship;
pub(crate) mod serde_tree;
pub mod serial;
pub mod setup;
pub(crate) mod shape_check;
pub mod strategy;
pub(crate) mod transfer;

use bevy::ecs::change_detection::Tick;
use bevy::prelude::*;

pub use coverage::NotSimulated;
pub use entities::{
    Parked, ReservedSlots, SimCommands, SimEntity, SimulationEntities, Synced, WORLD_OWN_INDICES,
    WorldRole, despawn_simulated_now, spawn_simulated_now,
};
pub use format::{
    DECODE_MEMORY_PER_BYTE, DEFAULT_MAX_SNAPSHOT_BYTES, FRAME_BYTES, LZ4_MAX_EXPANSION,
    LZ4_SLACK_BYTES, MAX_SNAPSHOT_HEADER_BYTES, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_MAGIC,
    SnapshotError, SnapshotHeader, SnapshotLimits, WorldSnapshot,
};
pub use registry::{RollbackAppExt, RollbackRegistry};
pub use setup::{RollbackMutability, TryRollbackAppExt};
pub use strategy::{RollbackStrategy, TickMap};
pub use transfer::ClientSnapshotStats;

use crate::checksum::StateHasher;
use std::hash::Hasher;

/// One simulation world (verified or predicted) owned by the session.
pub struct SimulationWorld {
    /// The world.
    pub world: World,
    /// The world's change tick at the end of its last [`SimulationTick`](crate::SimulationTick);
    /// change ticks are copied relative to it.
    pub(crate) mark: Tick,
    /// The ticks this world ran since the session last collected its simulation events, in
    /// order (a re-simulated tick once per run).
    pub(crate) ticks_run: Vec<crate::tick::Tick>,
    /// What the coverage scan knows of this world's archetypes.
    pub(crate) coverage: coverage::CoverageCache,
    /// This world's change tick when its registered state last equalled its partner's (the
    /// end of the last rollback); `None` when unknown.
    pub(crate) sync: Option<Tick>,
    /// Ticks this world ran since `sync`.
    pub(crate) runs_since_sync: u32,
    /// The world's change tick when its messages were last aged (once a tick, before its
    /// [`SimulationTick`](crate::SimulationTick)).
    pub(crate) messages_aged: Tick,
}

impl SimulationWorld {
    pub(crate) fn new(world: World) -> Self {
        Self {
            world,
            mark: Tick::new(0),
            ticks_run: Vec::new(),
            coverage: coverage::CoverageCache::default(),
            sync: None,
            runs_since_sync: 0,
            messages_aged: Tick::new(0),
        }
    }

    /// The last tick this world simulated.
    pub fn tick(&self) -> crate::tick::Tick {
        self.world.resource::<crate::tick::SimTick>().0
    }

    /// Live simulation entities in slot order.
    pub fn simulation_entities(&mut self) -> Vec<Entity> {
        let slots = self.world.resource::<ReservedSlots>().clone();
        let mut query = self
            .world
            .query_filtered::<Entity, (With<SimEntity>, Without<Parked>)>();
        let mut list: Vec<Entity> = query.iter(&self.world).collect();
        list.sort_by_key(|e| slots.slot_of(*e));
        list
    }
}

/// What a rollback did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RollbackReport {
    /// Entities spawned in the predicted world to match the verified world.
    pub restored_entities: u32,
    /// Entities parked because they existed only in the mispredicted timeline.
    pub parked_entities: u32,
    /// Slots whose id could not be restored (generation ahead: a bug, reported as an error).
    pub failed_slots: u32,
    /// Relationship components (such as `ChildOf`) inserted again to restore relationships.
    pub restored_relationships: u32,
}

/// Makes `dst`'s simulation state equal `src`'s.
pub(crate) fn rollback(
    src: &mut SimulationWorld,
    dst: &mut SimulationWorld,
    registry: &mut RollbackRegistry,
) -> RollbackReport {
    let profile = profile_enabled();
    let mut timer = std::time::Instant::now();
    let mut lap = |name: &str| {
        if profile {
            eprintln!("rollback {name}: {:?}", timer.elapsed());
            timer = std::time::Instant::now();
        }
    };
    let mut report = RollbackReport::default();
    align_entities(&mut src.world, &mut dst.world, &mut report);
    lap("align");
    let map = TickMap::new(src.mark, dst.mark, dst.world.read_change_tick())
        .with_sync(sync_ticks(src, dst));
    for copier in registry.components.iter_mut() {
        copier.copy(&mut src.world, &mut dst.world, map);
        lap(copier.type_name());
    }
    for copier in registry.relationships.iter_mut() {
        report.restored_relationships += copier.copy(&mut src.world, &mut dst.world, map);
        lap(copier.type_name());
    }
    for copier in registry.resources.iter() {
        copier.copy(&src.world, &mut dst.world, map);
    }
    lap("resources");
    lap("done");
    // Removals made by the rollback itself must not reach Rapier's removal detection in the
    // next tick: the copied sets are already right.
    dst.world.clear_trackers();
    dst.world.clear_trackers();
    mark_synced(src, dst);
    report
}

/// The sync ticks a rollback from `src` to `dst` may skip unchanged values with: both worlds
/// were equal at their `sync` ticks and each has run at least one tick since, so a value
/// neither changed since is equal in both and, being older than each world's last tick, looks
/// unchanged to every system of the next tick in both (the
/// [rule of change ticks](strategy)). `None` (copy everything) otherwise, or when
/// `SIMSYNC_ROLLBACK_FULL_COPY` is set (a debugging and measuring aid).
fn sync_ticks(src: &SimulationWorld, dst: &SimulationWorld) -> Option<strategy::SyncTicks> {
    static FULL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *FULL.get_or_init(|| std::env::var_os("SIMSYNC_ROLLBACK_FULL_COPY").is_some()) {
        return None;
    }
    // Far older sync ticks than this could be confused with ticks Bevy clamps.
    const MAX_SYNC_AGE: u32 = 1 << 30;
    let recent = |w: &SimulationWorld, sync: Tick| {
        w.runs_since_sync > 0
            && w.world.read_change_tick().get().wrapping_sub(sync.get()) < MAX_SYNC_AGE
    };
    match (src.sync, dst.sync) {
        (Some(s), Some(d)) if recent(src, s) && recent(dst, d) => Some(strategy::SyncTicks {
            src: s,
            dst: d,
            src_now: src.world.read_change_tick(),
            dst_now: dst.world.read_change_tick(),
        }),
        _ => None,
    }
}

/// Records that `a` and `b` hold equal registered state now (after a rollback, or after the
/// predicted world advanced to the verified tick on confirmed inputs). Each world's change
/// tick moves on by one, so every later change is newer than the recorded tick.
pub(crate) fn mark_synced(a: &mut SimulationWorld, b: &mut SimulationWorld) {
    for w in [a, b] {
        w.sync = Some(w.world.increment_change_tick());
        w.runs_since_sync = 0;
    }
}

/// Forgets when `a` and `b` were last equal (a world was replaced or loaded): the next
/// rollback copies everything.
pub(crate) fn forget_sync(a: &mut SimulationWorld, b: &mut SimulationWorld) {
    a.sync = None;
    b.sync = None;
}

/// `SIMSYNC_ROLLBACK_PROFILE=1` prints the time of each rollback step to stderr.
fn profile_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SIMSYNC_ROLLBACK_PROFILE").is_some())
}

fn align_entities(src: &mut World, dst: &mut World, report: &mut RollbackReport) {
    let slots = src.resource::<ReservedSlots>().clone();
    let used = src
        .resource::<SimulationEntities>()
        .slots_used()
        .max(dst.resource::<SimulationEntities>().slots_used());
    for slot in 0..used {
        let index = bevy::ecs::entity::EntityIndex::from_raw_u32(slots.index_of(slot))
            .expect("reserved index");
        let src_entity = src.entities().resolve_from_index(index);
        let src_live =
            src.entities().is_index_spawned(index) && src.get::<SimEntity>(src_entity).is_some();
        let dst_entity = dst.entities().resolve_from_index(index);
        let dst_spawned = dst.entities().is_index_spawned(index);
        let dst_live = dst_spawned
            && dst.get::<SimEntity>(dst_entity).is_some()
            && dst.get::<Parked>(dst_entity).is_none();
        if src_live {
            if dst_live && dst_entity == src_entity {
                continue;
            }
            if dst_live {
                // A different generation lives here in the mispredicted timeline.
                entities::park(dst, dst_entity);
            }
            if entities::materialize(dst, src_entity) {
                report.restored_entities += 1;
            } else {
                report.failed_slots += 1;
                error!(
                    "rollback: cannot restore {src_entity}: its slot ran ahead in the predicted world"
                );
            }
        } else if dst_live {
            entities::park(dst, dst_entity);
            report.parked_entities += 1;
        }
    }
}

/// Each registered type of `types` with its tag in checksums: its registration position
/// ([checksums are build-independent](crate::rules#checksums-are-build-independent)).
pub(crate) fn tagged<T>(types: &[T]) -> impl Iterator<Item = (u32, &T)> {
    (0u32..).zip(types)
}

/// The per-component hash breakdown of `sw` now (see [`ComponentBreakdown`](crate::checksum::ComponentBreakdown)).
pub(crate) fn breakdown(
    sw: &mut SimulationWorld,
    registry: &RollbackRegistry,
) -> crate::checksum::ComponentBreakdown {
    let tick = sw.tick();
    let slots = sw.world.resource::<ReservedSlots>().clone();
    let entities = sw.simulation_entities();
    let world = &sw.world;
    let components = registry
        .components
        .iter()
        .map(|copier| {
            let mut hasher = StateHasher::default();
            copier.digest(world, &entities, &mut hasher);
            (copier.type_name().to_string(), hasher.finish())
        })
        .collect();
    let slot_hashes = entities
        .iter()
        .map(|entity| {
            let mut hasher = StateHasher::default();
            hasher.write_u32(entity.generation().to_bits());
            for copier in registry.components.iter() {
                copier.digest(world, std::slice::from_ref(entity), &mut hasher);
            }
            for (tag, copier) in tagged(&registry.relationships) {
                copier.hash(tag, world, *entity, &slots, &mut hasher);
            }
            (slots.slot_of(*entity).unwrap_or(u32::MAX), hasher.finish())
        })
        .collect();
    let resources = registry
        .resources
        .iter()
        .map(|copier| {
            let mut hasher = StateHasher::default();
            let outcome = copier.digest(world, &mut hasher);
            hasher.write_u8(u8::from(outcome == digest::DigestOutcome::Absent));
            (copier.type_name().to_string(), hasher.finish())
        })
        .collect();
    crate::checksum::ComponentBreakdown {
        tick,
        components,
        slots: slot_hashes,
        resources,
    }
}

/// The checksum of a simulation world: see [`crate::checksum`].
pub(crate) fn checksum(world: &mut SimulationWorld, registry: &RollbackRegistry) -> u64 {
    let slots = world.world.resource::<ReservedSlots>().clone();
    let entities = world.simulation_entities();
    let world = &world.world;
    let mut hasher = StateHasher::default();
    hasher.write_u64(entities.len() as u64);
    for entity in entities {
        hasher.write_u32(slots.slot_of(entity).unwrap_or(u32::MAX));
        hasher.write_u32(entity.generation().to_bits());
        for (tag, copier) in tagged(&registry.components).filter(|(_, c)| c.hashed()) {
            copier.hash(tag, world, entity, &mut hasher);
        }
        for (tag, copier) in tagged(&registry.relationships) {
            copier.hash(tag, world, entity, &slots, &mut hasher);
        }
    }
    for (tag, copier) in tagged(&registry.resources).filter(|(_, c)| c.hashed()) {
        copier.hash(tag, world, &mut hasher);
    }
    hasher.finish()
}

/// The digest of every registered value of a simulation world, for the full prediction check
/// ([`PredictionCheck::AllRegisteredState`](crate::PredictionCheck)): the entity set, every
/// registered component of every simulation entity (type by type, in registration order), the
/// relationships, then every registered resource (see [`digest`]). The names of registered
/// types present in the world that cannot be compared are added to `unchecked`.
pub(crate) fn state_digest(
    world: &mut SimulationWorld,
    registry: &RollbackRegistry,
    unchecked: &mut Vec<&'static str>,
) -> u64 {
    let slots = world.world.resource::<ReservedSlots>().clone();
    let entities = world.simulation_entities();
    let world = &world.world;
    let mut hasher = StateHasher::default();
    hasher.write_u64(entities.len() as u64);
    for entity in &entities {
        hasher.write_u32(slots.slot_of(*entity).unwrap_or(u32::MAX));
        hasher.write_u32(entity.generation().to_bits());
    }
    for copier in registry.components.iter() {
        if copier.digest(world, &entities, &mut hasher) == digest::DigestOutcome::Unchecked {
            unchecked.push(copier.type_name());
        }
    }
    for entity in &entities {
        for (tag, copier) in tagged(&registry.relationships) {
            copier.hash(tag, world, *entity, &slots, &mut hasher);
        }
    }
    for copier in registry.resources.iter() {
        if copier.digest(world, &mut hasher) == digest::DigestOutcome::Unchecked {
            unchecked.push(copier.type_name());
        }
    }
    hasher.finish()
}
