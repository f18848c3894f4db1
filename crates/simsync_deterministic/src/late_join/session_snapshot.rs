//! Snapshots of a session: [`capture_snapshot`] takes the verified world at its tick,
//! [`load_snapshot`] makes a session continue from one ([snapshots](crate::rules#snapshots)).

use bevy::prelude::*;

use crate::context::SimulatorContext;
use crate::input::{PlayerInputs, SimInput};
use crate::session::DeterministicSession;
use crate::snapshot::capture::{capture_world, load_world, registered_type_names};
use crate::snapshot::format::{
    SNAPSHOT_FORMAT_VERSION, SnapshotBody, SnapshotError, SnapshotHeader, WorldSnapshot,
    game_fingerprint,
};
use crate::snapshot::{self, ReservedSlots};
use crate::stats::SessionStats;
use crate::tick::Tick;
use crate::worlds::SimulationWorlds;

/// The header fields a session fixes: tick rate, players, registered types, fingerprint.
fn game_header<I: SimInput>(
    session: &DeterministicSession<I>,
    worlds: &SimulationWorlds,
) -> (u32, u8, Vec<String>, u64) {
    let tick_rate = session.config().tick_rate.hz();
    let players = session.config().players;
    let types = registered_type_names(&worlds.registry);
    let capacity = worlds.verified.world.resource::<ReservedSlots>().len();
    let fingerprint = game_fingerprint(&types, tick_rate, players, capacity);
    (tick_rate, players, types, fingerprint)
}

/// Builds the simulation worlds if the App has not been cleaned up yet (as the first session
/// update would).
fn ensure_worlds<I: SimInput>(world: &mut World) -> Result<(), SnapshotError> {
    if let Some(error) = crate::headless::build_missing_worlds::<I>(world) {
        crate::warning::setup_failed(world, error);
    }
    if world.contains_resource::<SimulationWorlds>()
        && world.contains_resource::<DeterministicSession<I>>()
    {
        Ok(())
    } else {
        Err(SnapshotError::NoSession)
    }
}

/// A snapshot of the verified world of the session in `world` (the main App's world) at its
/// current verified tick: every registered component and resource, entity ids and allocator,
/// Rapier's state, and where the session continues ([snapshots](crate::rules#snapshots)).
///
/// # Errors
/// [`SnapshotError::NoSession`] without a `DeterministicPlugin<I>`;
/// [`SnapshotError::NotSerializable`] for a registered type present in the world with no
/// serializer; [`SnapshotError::Value`] if a serializer fails.
pub fn capture_snapshot<I: SimInput>(world: &mut World) -> Result<WorldSnapshot, SnapshotError> {
    ensure_worlds::<I>(world)?;
    world.resource_scope(|world, mut worlds: Mut<SimulationWorlds>| {
        let session = world.resource::<DeterministicSession<I>>();
        let (tick_rate, players, registered_types, game_fingerprint) =
            game_header(session, &worlds);
        let worlds = &mut *worlds;
        let tick = worlds.verified.tick();
        let checksum = snapshot::checksum(&mut worlds.verified, &worlds.registry);
        let state = capture_world(&mut worlds.verified, &worlds.registry)?;
        Ok(WorldSnapshot {
            header: SnapshotHeader {
                format_version: SNAPSHOT_FORMAT_VERSION,
                tick_rate,
                tick,
                checksum,
                players,
                registered_types,
                game_fingerprint,
            },
            body: SnapshotBody {
                world: state,
                continue_from: tick + 1,
                events_settled_through: tick,
            },
        })
    })
}

/// Whether `header` is of this session's game.
///
/// # Errors
/// [`SnapshotError::WrongVersion`] or [`SnapshotError::ForeignGame`] naming the first
/// difference: a registered type, the type count, tick rate, players, or the fingerprint
/// (simulation entity capacity).
fn check_header<I: SimInput>(
    header: &SnapshotHeader,
    session: &DeterministicSession<I>,
    worlds: &SimulationWorlds,
) -> Result<(), SnapshotError> {
    let foreign = |what: String, expected: String, found: String| SnapshotError::ForeignGame {
        what,
        expected,
        found,
    };
    if header.format_version != SNAPSHOT_FORMAT_VERSION {
        return Err(SnapshotError::WrongVersion {
            found: header.format_version,
            expected: SNAPSHOT_FORMAT_VERSION,
        });
    }
    let (tick_rate, players, types, fingerprint) = game_header(session, worlds);
    if let Some((i, (ours, theirs))) = types
        .iter()
        .zip(&header.registered_types)
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        return Err(foreign(
            format!("registered type #{i}"),
            ours.clone(),
            theirs.clone(),
        ));
    }
    if types.len() != header.registered_types.len() {
        return Err(foreign(
            "the number of registered types".into(),
            types.len().to_string(),
            header.registered_types.len().to_string(),
        ));
    }
    if tick_rate != header.tick_rate {
        return Err(foreign(
            "the tick rate".into(),
            tick_rate.to_string(),
            header.tick_rate.to_string(),
        ));
    }
    if players != header.players {
        return Err(foreign(
            "the number of players".into(),
            players.to_string(),
            header.players.to_string(),
        ));
    }
    if fingerprint != header.game_fingerprint {
        return Err(foreign(
            "the game fingerprint (simulation entity capacity)".into(),
            format!("{fingerprint:#018x}"),
            format!("{:#018x}", header.game_fingerprint),
        ));
    }
    Ok(())
}

/// Loads `snapshot` into the session in `world` (the main App's world), which must run the
/// same game (same registered types, tick rate, players and entity capacity) and must not have
/// verified past the snapshot's tick: a fresh App, or one whose session is behind. Afterwards
/// the verified and the predicted world both hold the snapshot's state at its tick `T`, their
/// checksum is the snapshot's, and the session continues from `T + 1` with the confirmed inputs
/// after `T` (from the relay; a local session polls its inputs for `T + 1` next). Returns `T`.
///
/// # Errors
/// [`SnapshotError::NoSession`], [`SnapshotError::WrongVersion`],
/// [`SnapshotError::ForeignGame`], [`SnapshotError::SessionAhead`] (nothing changed);
/// [`SnapshotError::Corrupt`], [`SnapshotError::Value`], [`SnapshotError::NotSerializable`],
/// [`SnapshotError::InconsistentPhysics`] (Rapier's loaded state does not hold together: a
/// snapshot is untrusted input), [`SnapshotError::InvalidShape`] (a collider's shape does not),
/// [`SnapshotError::ChecksumMismatch`] (the worlds may be partly
/// loaded: build a new App).
pub fn load_snapshot<I: SimInput>(
    world: &mut World,
    snapshot: &WorldSnapshot,
) -> Result<Tick, SnapshotError> {
    ensure_worlds::<I>(world)?;
    let mut worlds = world
        .remove_resource::<SimulationWorlds>()
        .ok_or(SnapshotError::NoSession)?;
    let Some(mut session) = world.remove_resource::<DeterministicSession<I>>() else {
        world.insert_resource(worlds);
        return Err(SnapshotError::NoSession);
    };
    let result = load_into(world, &mut worlds, &mut session, snapshot);
    world.insert_resource(session);
    world.insert_resource(worlds);
    result
}

fn load_into<I: SimInput>(
    world: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    snapshot: &WorldSnapshot,
) -> Result<Tick, SnapshotError> {
    let header = &snapshot.header;
    check_header(header, session, worlds)?;
    let tick = header.tick;
    let verified = worlds.verified.tick();
    // A resync (an authoritative relay's snapshot for a desynced client) may take the session
    // back: the ticks after it are verified again from the confirmed sets the relay resends.
    let rewind = world.remove_resource::<SnapshotRewind>().is_some();
    if verified > tick && !rewind {
        return Err(SnapshotError::SessionAhead { tick, verified });
    }
    if snapshot.body.continue_from != tick + 1 || snapshot.body.events_settled_through != tick {
        return Err(SnapshotError::Corrupt {
            offset: 0,
            what: format!(
                "the session position (continue from {}, events through {}) does not follow tick {tick}",
                snapshot.body.continue_from, snapshot.body.events_settled_through
            ),
        });
    }
    load_world(&mut worlds.verified, &worlds.registry, &snapshot.body.world)?;
    let loaded_tick = worlds.verified.tick();
    if loaded_tick != tick {
        return Err(SnapshotError::Corrupt {
            offset: 0,
            what: format!("the world's SimTick is {loaded_tick}, the header says {tick}"),
        });
    }
    let found = snapshot::checksum(&mut worlds.verified, &worlds.registry);
    if found != header.checksum {
        return Err(SnapshotError::ChecksumMismatch {
            tick,
            expected: header.checksum,
            found,
        });
    }
    snapshot::forget_sync(&mut worlds.verified, &mut worlds.predicted);
    worlds.copy_verified_into_predicted();
    worlds.verified.ticks_run.clear();
    worlds.predicted.ticks_run.clear();
    resume_session(world, worlds, session, tick);
    Ok(tick)
}

/// Marks the next [`load_snapshot`] as a resync: it may take a session that verified past the
/// snapshot's tick back to it (the relay resends the confirmed sets after it).
#[derive(Resource, Debug, Clone, Copy, Default)]
pub(crate) struct SnapshotRewind;

/// Moves the session's own state to continue from `tick + 1`.
fn resume_session<I: SimInput>(
    world: &mut World,
    worlds: &SimulationWorlds,
    session: &mut DeterministicSession<I>,
    tick: Tick,
) {
    let inputs: Vec<I> = worlds
        .verified
        .world
        .get_resource::<PlayerInputs<I>>()
        .map(|p| p.iter().map(|(_, input)| input.clone()).collect())
        .unwrap_or_default();
    session.resume_after_snapshot(tick, &inputs);
    world.insert_resource(SimulatorContext::new(tick));
    let mut stats = world.get_resource_or_init::<SessionStats>();
    stats.verified_tick = tick;
    stats.predicted_tick = tick;
    stats.local_tick = session.local_tick();
    if session.has_started() {
        crate::events::settle_through(world, tick);
    }
}

/// Snapshots from an [`App`]: [`capture_snapshot`] and [`load_snapshot`] on its main world.
pub trait SnapshotAppExt {
    /// [`capture_snapshot`] on the App's world.
    ///
    /// # Errors
    /// As [`capture_snapshot`].
    fn capture_snapshot<I: SimInput>(&mut self) -> Result<WorldSnapshot, SnapshotError>;
    /// [`load_snapshot`] on the App's world.
    ///
    /// # Errors
    /// As [`load_snapshot`].
    fn load_snapshot<I: SimInput>(
        &mut self,
        snapshot: &WorldSnapshot,
    ) -> Result<Tick, SnapshotError>;
}

impl SnapshotAppExt for App {
    fn capture_snapshot<I: SimInput>(&mut self) -> Result<WorldSnapshot, SnapshotError> {
        capture_snapshot::<I>(self.world_mut())
    }

    fn load_snapshot<I: SimInput>(
        &mut self,
        snapshot: &WorldSnapshot,
    ) -> Result<Tick, SnapshotError> {
        load_snapshot::<I>(self.world_mut(), snapshot)
    }
}
