//! The steps of one session update, in order: [`poll`], [`begin`], [`verify`], [`decide`],
//! [`rollback`], [`predict`], [`finish`] (see
//! [the session update](crate::rules#the-session-update)). Each takes the state it works on
//! explicitly; the [`SimulatorContext`] stays in the main world, where hooks read it.

use bevy::prelude::*;

use super::checksums;
use super::state::DeterministicSession;
use crate::checksum::TickChecksum;
use crate::config::SessionMode;
use crate::context::{ContextError, SimulatorContext, UpdateParams};
use crate::divergence::coverage::scan_world;
use crate::hooks::{
    Cleanup, DesyncReported, PredictedTick, SessionView, VerificationStopped, VerifiedTick,
};
use crate::hooks::{SessionParts, TickParts};
use crate::input::{InputStatus, SimInput, input_set_hash};
use crate::schedule::{AfterPrediction, BeforePrediction, BeforeVerification};
use crate::snapshot::{self, WorldRole};
use crate::source::{LocalPlayers, NetReport, Polled, RelayLink};
use crate::stats::{NeedsSnapshot, SessionResumed, SessionStalled, SessionStats};
use crate::tick::{PlayerIndex, Tick};
use crate::worlds::{SimulationWorlds, run_tick};

/// Step 1, poll: local inputs for `now + input_delay`, and confirmed inputs from the relay.
pub(super) fn poll<I: SimInput>(
    world: &mut World,
    session: &mut DeterministicSession<I>,
) -> Polled {
    let polled = session
        .source
        .poll(world, &mut session.buffer, session.link.as_mut());
    if let Some(local_players) = world.get_resource_mut::<LocalPlayers>() {
        session
            .source
            .sync_local_players(local_players, session.link.as_ref());
    }
    let reports = session
        .link
        .as_mut()
        .map(RelayLink::take_reports)
        .unwrap_or_default();
    for report in reports {
        write_report(world, &mut session.pending_desyncs, report);
    }
    polled
}

/// Writes one of the link's reports as its Message; a desync of this client or of another
/// player is also kept for the hooks (desync dumps: the honest side of a comparison is dumped
/// too).
fn write_report(world: &mut World, desyncs: &mut Vec<(Tick, Vec<PlayerIndex>)>, report: NetReport) {
    match report {
        NetReport::Stalled(stall) => {
            world.write_message(SessionStalled {
                since_tick: stall.since_tick,
                reason: stall.reason,
            });
        }
        NetReport::Resumed { tick, stalled_for } => {
            world.write_message(SessionResumed {
                tick,
                stalled_ms: stalled_for.as_millis() as u64,
            });
        }
        NetReport::NeedsSnapshot { oldest_available } => {
            world.write_message(NeedsSnapshot { oldest_available });
        }
        NetReport::Desync(desync) => {
            desyncs.push((desync.tick, desync.players.clone()));
            world.write_message(desync);
        }
        NetReport::PlayerDesynced(desynced) => {
            desyncs.push((desynced.tick, desynced.players.clone()));
            world.write_message(desynced);
        }
        NetReport::DesyncReport(report) => {
            world.write_message(report);
        }
        NetReport::Substituted(substituted) => {
            world.write_message(substituted);
        }
        NetReport::Rejected(rejected) => {
            world.write_message(rejected);
        }
        NetReport::PlayerLeft(left) => {
            world.write_message(left);
        }
        NetReport::PlayerRejoined(back) => {
            world.write_message(back);
        }
    }
}

/// How many times `max_verified_ticks_per_update` a session far behind may verify in one
/// update ([catching up](crate::rules#catching-up)).
const CATCH_UP_FACTOR: Tick = 4;

/// The verified-ticks clamp of this update: the configured `limit`, raised while the `backlog`
/// of verifiable ticks exceeds it (after a pause or an outage) to at most
/// [`CATCH_UP_FACTOR`] × `limit`, so a client far behind reaches the live tick in a few updates
/// without one update simulating an unbounded number of ticks.
fn catch_up_limit(limit: Tick, backlog: Tick) -> Tick {
    if backlog > limit {
        backlog.min(limit.saturating_mul(CATCH_UP_FACTOR))
    } else {
        limit
    }
}

/// Step 2, begin: resets the context for this update with what the poll found, then runs the
/// [`BeforeVerification`] hooks.
pub(super) fn begin<I: SimInput>(
    world: &mut World,
    worlds: &SimulationWorlds,
    session: &mut DeterministicSession<I>,
    polled: Polled,
) {
    session.predicted_tick = worlds.predicted_tick();
    // Once a hook stopped verification, nothing more is verifiable.
    let max_verifiable_tick = match session.stopped {
        Some(_) => worlds.verified.tick(),
        None => polled.max_verifiable_tick,
    };
    let params = UpdateParams {
        verified_tick: worlds.verified.tick(),
        predicted_tick: session.predicted_tick,
        max_verifiable_tick,
        max_predictable_tick: polled.local_tick,
        rollback_window: session.config.rollback_window as Tick,
        max_verified_ticks_per_update: catch_up_limit(
            session.config.max_verified_ticks_per_update as Tick,
            max_verifiable_tick - worlds.verified.tick(),
        ),
        is_stalling: polled.stalling,
    };
    let mut ctx = world.resource_mut::<SimulatorContext>();
    if let Err(error) = ctx.begin_update(params) {
        // A previous update was interrupted (a hook panicked?): start over cleanly.
        warn!("session update: {error}; resetting the context");
        ctx.abort_update();
        check(ctx.begin_update(params));
    }
    let _ = world.try_run_schedule(BeforeVerification);
}

/// Step 3, verify: simulates every tick the context says to verify on confirmed inputs,
/// computes the checksum of a checksum tick (every `checksum_interval` ticks, or a tick a hook
/// asks for) and hands each tick to the session's [verified-tick
/// hooks](crate::rules#verified-tick-hooks) in order (checksum reporting, the prediction check,
/// dumps, replays and the game's own); a hook may stop verification. Then reports components
/// rollback would not restore.
pub(super) fn verify<I: SimInput>(
    world: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    stats: &mut SessionStats,
) {
    check(context(world).enter_verification());
    let mut hooks = std::mem::take(&mut session.hooks);
    while let Some(tick) = world.resource::<SimulatorContext>().next_tick_to_verify() {
        let disconnected = verify_tick(worlds, session, tick);
        check(context(world).record_verified_tick());
        stats.ticks_verified += 1;
        let checksum = (tick % session.config.checksum_interval as Tick == 0
            || hooks.want_checksum(tick))
        .then(|| snapshot::checksum(&mut worlds.verified, &worlds.registry));
        if let Some(checksum) = checksum {
            let history = session.config.checksum_history as usize;
            let checksum = TickChecksum { tick, checksum };
            checksums::report(world, session.link.as_mut(), stats, checksum, history);
        }
        let tick_parts = TickParts {
            tick,
            role: WorldRole::Verified,
            inputs: &session.inputs,
            status: &session.status,
            disconnected,
        };
        let view = SessionView::new(tick_parts, world, worlds, parts(session, stats));
        let stop = hooks.verified(&mut VerifiedTick::new(view, checksum));
        if let Some(reason) = stop {
            stop_verification(world, session, VerificationStopped { tick, reason });
            break;
        }
    }
    session.hooks = hooks;
    scan_world(
        world,
        &mut worlds.verified,
        &mut worlds.registry,
        WorldRole::Verified,
        stats,
    );
}

/// A hook stopped verification at `stopped.tick`: the rest of this update's ticks are not
/// verified, nor any later one ([`HookFlow::Stop`](super::HookFlow)).
fn stop_verification<I: SimInput>(
    world: &mut World,
    session: &mut DeterministicSession<I>,
    stopped: VerificationStopped,
) {
    warn!(
        "verification stopped at tick {}: {}",
        stopped.tick, stopped.reason
    );
    let verified = world.resource::<SimulatorContext>().ticks_verified();
    check(context(world).set_ticks_to_verify(verified));
    world.write_message(stopped.clone());
    session.stopped = Some(stopped);
}

/// Runs verified tick `tick` with every player's confirmed input; returns the players
/// disconnected at it.
fn verify_tick<I: SimInput>(
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    tick: Tick,
) -> u64 {
    let disconnected = fill_confirmed(session, tick);
    run_tick(
        &mut worlds.verified,
        tick,
        &session.inputs,
        &session.status,
        disconnected,
    );
    disconnected
}

/// Fills the session's scratch input set with every player's confirmed input of `tick` (the
/// default where none is known); returns the players disconnected at it.
fn fill_confirmed<I: SimInput>(session: &mut DeterministicSession<I>, tick: Tick) -> u64 {
    session.inputs.clear();
    session.status.clear();
    for p in 0..session.config.players {
        let input = session
            .buffer
            .confirmed(p, tick)
            .cloned()
            .unwrap_or_default();
        session.inputs.push(input);
        session.status.push(InputStatus::Confirmed);
    }
    session.buffer.disconnected(tick)
}

/// Step 4, decide: enters BeforePrediction, requests skipping the rollback when every
/// prediction of the current timeline held, then runs the [`BeforePrediction`] hooks (which may
/// set or clear the skip flags).
pub(super) fn decide<I: SimInput>(world: &mut World, session: &mut DeterministicSession<I>) {
    check(context(world).enter_before_prediction());
    if session.config.mode == SessionMode::Predicted
        && session.config.skip_rollback_when_predictions_hold
        && predictions_hold(session)
    {
        // Every tick of the current predicted timeline was simulated with the inputs known now:
        // a rollback and re-simulation would reproduce it bit for bit, so ask to skip it (a
        // request: IsRollbackRequired still forces one). Hooks may undo the request.
        check(context(world).set_skip_prediction_rollback_if_possible(true));
    }
    let _ = world.try_run_schedule(BeforePrediction);
}

/// Whether every tick of the current predicted timeline was simulated with exactly the inputs
/// the session would use for it now (confirmed where known, else the current prediction).
fn predictions_hold<I: SimInput>(session: &mut DeterministicSession<I>) -> bool {
    !session.used_inputs.is_empty() && used_inputs_hold(session)
}

/// Whether every entry of `used_inputs` matches the inputs the session would use for its tick
/// now (vacuously true when there is none).
fn used_inputs_hold<I: SimInput>(session: &mut DeterministicSession<I>) -> bool {
    let mut inputs = std::mem::take(&mut session.inputs);
    let mut status = std::mem::take(&mut session.status);
    let hold = session.used_inputs.iter().all(|(tick, used)| {
        session
            .buffer
            .fill_predicted(*tick, &mut inputs, &mut status);
        let disconnected = session.buffer.predicted_disconnected(*tick);
        input_set_hash(&inputs, disconnected) == *used
    });
    session.inputs = inputs;
    session.status = status;
    hold
}

/// Step 5, rollback (predicted sessions only): enters Prediction, which fixes the decision, and
/// copies the verified world into the predicted one if a rollback was decided.
pub(super) fn rollback<I: SimInput>(
    world: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    stats: &mut SessionStats,
) {
    check(context(world).enter_prediction());
    if world
        .resource::<SimulatorContext>()
        .will_rollback_prediction()
    {
        let target = world
            .resource::<SimulatorContext>()
            .target_verification_tick();
        let held = timeline_held(session);
        if held && can_share(session, session.predicted_tick, target) {
            worlds.shared = true;
            stats.shared_advances += 1;
        } else {
            let report = worlds.copy_verified_into_predicted();
            stats.rollback_restored_entities += u64::from(report.restored_entities);
            stats.rollback_parked_entities += u64::from(report.parked_entities);
            let skip_requested = world
                .resource::<SimulatorContext>()
                .skip_prediction_rollback_if_possible();
            count_rollback(stats, held, skip_requested);
        }
        session.predicted_diverged = false;
        check(context(world).record_rollback());
        session.predicted_tick = worlds.verified.tick();
        session.hooks.rolled_back(session.predicted_tick);
        session.used_inputs.clear();
    }
    let ctx = world.resource::<SimulatorContext>();
    if !ctx.has_rolled_back_prediction() && ctx.ticks_verified() > 0 {
        stats.skipped_rollbacks += 1;
    }
}

/// Counts a rollback that restored the verified state into the predicted world
/// ([rollback counters](crate::rules#rollback-counters)): always in `rollbacks`; in
/// `corrective_rollbacks` when the predicted timeline had not `held` (a confirmed input differed
/// from its prediction); in `forced_rollbacks` when skipping had been requested
/// (`skip_requested`) and the rollback happened anyway. A shared advance is none of these.
fn count_rollback(stats: &mut SessionStats, held: bool, skip_requested: bool) {
    stats.rollbacks += 1;
    if !held {
        stats.corrective_rollbacks += 1;
    }
    if skip_requested {
        stats.forced_rollbacks += 1;
    }
}

/// The most verified ticks the predicted world simulates to catch up when it stops sharing the
/// verified world's state (see [the shared
/// timeline](crate::rules#the-predicted-world-shares-a-verified-timeline)); further behind, the
/// verified world is copied. One: a tick costs one tick, a copy of a resting scene many.
const MAX_CATCH_UP_TICKS: Tick = 1;

/// Whether the current predicted timeline is the one the session would simulate now: it did
/// not diverge earlier and every tick it simulated since its last rollback used exactly the
/// inputs the session would use for it now. A rollback of such a timeline changes no state it
/// showed (`SessionStats::corrective_rollbacks` counts the others).
fn timeline_held<I: SimInput>(session: &mut DeterministicSession<I>) -> bool {
    !session.predicted_diverged && used_inputs_hold(session)
}

/// Whether a rollback to `target` of a timeline that [held](timeline_held) may let the
/// predicted world, now at `predicted`, share the verified world's state instead of copying
/// it: the session asks to skip rollbacks when predictions hold, verification passed the
/// predicted tick, and every tick the predicted world simulated since its last rollback is
/// verified (so it holds the verified state of tick `predicted`, and the verified world holds
/// the predicted timeline's state of `target`).
fn can_share<I: SimInput>(
    session: &DeterministicSession<I>,
    predicted: Tick,
    target: Tick,
) -> bool {
    session.config.skip_rollback_when_predictions_hold
        && target > predicted
        && session.used_inputs.keys().all(|tick| *tick <= predicted)
}

/// Ends the sharing before the predicted world predicts again: the predicted sub-world, which
/// holds the verified state of its own (earlier) tick, simulates the verified ticks it missed
/// on their confirmed inputs when they are at most [`MAX_CATCH_UP_TICKS`], else the verified
/// world is copied into it.
fn stop_sharing<I: SimInput>(
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    stats: &mut SessionStats,
) {
    worlds.shared = false;
    let target = worlds.verified.tick();
    let behind = target - worlds.predicted.tick();
    if (0..=MAX_CATCH_UP_TICKS).contains(&behind) {
        advance_predicted(worlds, session, target);
        stats.catch_up_ticks += behind as u64;
    } else {
        let report = worlds.copy_verified_into_predicted();
        stats.rollback_restored_entities += u64::from(report.restored_entities);
        stats.rollback_parked_entities += u64::from(report.parked_entities);
        stats.catch_up_copies += 1;
    }
}

/// Brings the predicted world from its tick to `target` by simulating each tick between on
/// the confirmed inputs, as the verified world did.
fn advance_predicted<I: SimInput>(
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    target: Tick,
) {
    for tick in worlds.predicted.tick() + 1..=target {
        let disconnected = fill_confirmed(session, tick);
        run_tick(
            &mut worlds.predicted,
            tick,
            &session.inputs,
            &session.status,
            disconnected,
        );
        session.highest_predicted = session.highest_predicted.max(tick);
    }
    snapshot::mark_synced(&mut worlds.verified, &mut worlds.predicted);
}

/// Step 6, predict (predicted sessions only): simulates every tick the context says to predict
/// on predicted inputs, recording which inputs each tick used.
pub(super) fn predict<I: SimInput>(
    world: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    stats: &mut SessionStats,
) {
    let mut hooks = std::mem::take(&mut session.hooks);
    while let Some(tick) = world.resource::<SimulatorContext>().next_tick_to_predict() {
        if worlds.shared {
            stop_sharing(worlds, session, stats);
        }
        let (inputs_hash, disconnected) = fill_predicted(session, tick);
        let resimulation = tick <= session.highest_predicted;
        if resimulation {
            stats.resimulated_ticks += 1;
        }
        run_tick(
            &mut worlds.predicted,
            tick,
            &session.inputs,
            &session.status,
            disconnected,
        );
        check(context(world).record_predicted_tick());
        stats.ticks_predicted += 1;
        session.predicted_tick = tick;
        session.highest_predicted = session.highest_predicted.max(tick);
        session.used_inputs.insert(tick, inputs_hash);
        let tick_parts = TickParts {
            tick,
            role: WorldRole::Predicted,
            inputs: &session.inputs,
            status: &session.status,
            disconnected,
        };
        let view = SessionView::new(tick_parts, world, worlds, parts(session, stats));
        hooks.predicted(&mut PredictedTick::new(view, resimulation));
    }
    session.hooks = hooks;
    if !worlds.shared {
        scan_world(
            world,
            &mut worlds.predicted,
            &mut worlds.registry,
            WorldRole::Predicted,
            stats,
        );
    }
}

/// Fills the session's scratch input set with the predicted inputs of `tick`, records the
/// predictions used (misprediction counting) and returns the set's hash (disconnected players
/// included) and the disconnected players.
fn fill_predicted<I: SimInput>(session: &mut DeterministicSession<I>, tick: Tick) -> (u64, u64) {
    session
        .buffer
        .fill_predicted(tick, &mut session.inputs, &mut session.status);
    for p in 0..session.config.players {
        if session.status[usize::from(p)] != InputStatus::Confirmed {
            let input = session.inputs[usize::from(p)].clone();
            if let Err(error) = session.buffer.record_prediction_used(p, tick, &input) {
                warn!("prediction of player {p} at tick {tick} not recorded: {error}");
            }
        }
    }
    let disconnected = session.buffer.predicted_disconnected(tick);
    (input_set_hash(&session.inputs, disconnected), disconnected)
}

/// What the session lends the hooks' views of this update.
fn parts<'a, I: SimInput>(
    session: &'a DeterministicSession<I>,
    stats: &'a mut SessionStats,
) -> SessionParts<'a, I> {
    SessionParts {
        config: &session.config,
        buffer: &session.buffer,
        stats,
        networked: session.link.is_some(),
    }
}

/// Hands the desyncs the relay reported in this update's poll to the hooks, each with the
/// verified world as it is now (and the confirmed inputs of its tick), and sends the relay the
/// breakdown a hook gave.
pub(super) fn report_desyncs<I: SimInput>(
    world: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    stats: &mut SessionStats,
) {
    let desyncs = std::mem::take(&mut session.pending_desyncs);
    if desyncs.is_empty() {
        return;
    }
    let mut hooks = std::mem::take(&mut session.hooks);
    let now = worlds.verified.tick();
    session
        .buffer
        .fill_known(now, &mut session.inputs, &mut session.status);
    for (tick, players) in &desyncs {
        let tick_parts = TickParts {
            tick: now,
            role: WorldRole::Verified,
            inputs: &session.inputs,
            status: &session.status,
            disconnected: session.buffer.disconnected(now),
        };
        let view = SessionView::new(tick_parts, world, worlds, parts(session, stats));
        let mut report = DesyncReported::new(view, *tick, players);
        hooks.desync_reported(&mut report);
        let breakdown = report.take_breakdown();
        if let (Some(breakdown), Some(link)) = (breakdown, session.link.as_mut()) {
            link.send_breakdown(world, &breakdown);
        }
    }
    session.hooks = hooks;
}

/// Step 7, finish: ends the context's update, publishes [`SessionStats`], forgets what no
/// rollback can need any more, runs the [`AfterPrediction`] hooks.
pub(super) fn finish<I: SimInput>(
    world: &mut World,
    worlds: &SimulationWorlds,
    session: &mut DeterministicSession<I>,
    mut stats: SessionStats,
) {
    let predicted_mode = session.config.mode == SessionMode::Predicted;
    if predicted_mode {
        check(context(world).enter_after_prediction());
    } else {
        // Lockstep never predicts nor touches the predicted world: the context's prediction
        // stages do not apply, so the update ends here for it.
        context(world).abort_update();
    }
    let verified_tick = worlds.verified.tick();
    stats.local_tick = session.source.local_tick();
    stats.verified_tick = verified_tick;
    stats.predicted_tick = session.predicted_tick;
    stats.max_prediction_depth = stats
        .max_prediction_depth
        .max(session.predicted_tick - verified_tick);
    stats.mispredicted_inputs = session.buffer.mispredicted_inputs();
    stats.unsimulated_entities = worlds.verified.coverage.last_unsimulated
        + if predicted_mode && !worlds.shared {
            worlds.predicted.coverage.last_unsimulated
        } else {
            0
        };
    if let Some(link) = &session.link {
        stats.network = Some(link.stats().clone());
    }
    session.verified_tick = verified_tick;
    forget_before(session, verified_tick);
    world.insert_resource(stats);
    let _ = world.try_run_schedule(AfterPrediction);
    if predicted_mode {
        check(context(world).end_update());
    }
}

/// Discards inputs and hashes that no rollback from `verified_tick` on can need.
fn forget_before<I: SimInput>(session: &mut DeterministicSession<I>, verified_tick: Tick) {
    let keep_from = verified_tick - session.config.rollback_window as Tick - 2;
    if keep_from > 0 {
        session.buffer.discard_through(keep_from);
    }
    let mut inputs = std::mem::take(&mut session.inputs);
    let mut status = std::mem::take(&mut session.status);
    while let Some((tick, used)) = session
        .used_inputs
        .first_key_value()
        .filter(|(t, _)| **t <= verified_tick)
        .map(|(t, u)| (*t, *u))
    {
        // A verified tick leaves the record: remember whether the predicted world ran it on
        // the inputs that were confirmed (see `can_advance`).
        session
            .buffer
            .fill_predicted(tick, &mut inputs, &mut status);
        let disconnected = session.buffer.predicted_disconnected(tick);
        if input_set_hash(&inputs, disconnected) != used {
            session.predicted_diverged = true;
        }
        session.used_inputs.pop_first();
    }
    session.inputs = inputs;
    session.status = status;
    session.hooks.cleaned_up(Cleanup {
        verified_tick,
        keep_from,
    });
}

fn context(world: &mut World) -> Mut<'_, SimulatorContext> {
    world.resource_mut::<SimulatorContext>()
}

/// Logs a context error: the driver calls the lifecycle in order, so one means a bug.
fn check<T>(result: Result<T, ContextError>) {
    if let Err(error) = result {
        error!("simulator context: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inputs_a_rollback_may_need_stay_bounded_when_every_prediction_holds() {
        let config = crate::SessionConfig::default();
        let window = config.rollback_window as usize;
        let mut session = DeterministicSession::<u32>::new(config, None).expect("session");
        // 20,000 ticks (5 minutes at 64 ticks/s) of a session whose predictions always hold:
        // the predicted world runs 6 ticks ahead, every tick is confirmed as predicted and
        // `finish` forgets after every update.
        for tick in 1..=20_000 {
            for p in 0..2 {
                session.buffer.confirm(p, tick, 0).expect("confirmed");
            }
            session.used_inputs.insert(tick + 6, 0);
            forget_before(&mut session, tick);
            assert!(session.used_inputs.len() <= window, "tick {tick}");
            assert!(
                session.buffer.discarded_through() >= tick - window as Tick - 2,
                "tick {tick}: inputs discarded through {}",
                session.buffer.discarded_through()
            );
        }
    }

    #[test]
    fn the_verify_clamp_rises_while_far_behind_and_is_bounded() {
        assert_eq!(catch_up_limit(10, 0), 10);
        assert_eq!(catch_up_limit(10, 10), 10);
        assert_eq!(catch_up_limit(10, 25), 25);
        assert_eq!(catch_up_limit(10, 300), 40);
        assert_eq!(catch_up_limit(60, 384), 240);
    }
}
