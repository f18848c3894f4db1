//! The session-update driver: one exclusive system that polls inputs, verifies, rolls back and
//! predicts, in the order of DESIGN §3 (steps 1–7).

use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};

use bevy::prelude::*;

use crate::checksum::{StateHasher, TickChecksum};
use crate::config::{SessionClock, SessionConfig, SessionMode};
use crate::context::{SimulatorContext, UpdateParams, would_stall};
use crate::error::SessionError;
use crate::input::{
    InputBuffer, InputStatus, LocalRelay, LocalRelayConfig, PlayerIndex, SimInput, Tick,
};
use crate::schedule::{AfterPrediction, BeforePrediction, BeforeVerification};
use crate::snapshot::{self, RollbackRegistry, SimulationWorld};
use crate::worlds::run_tick;

/// The verified and the predicted world, owned by the session (a main-app resource).
#[derive(Resource)]
pub struct SimulationWorlds {
    pub(crate) verified: SimulationWorld,
    pub(crate) predicted: SimulationWorld,
    pub(crate) registry: RollbackRegistry,
}

impl SimulationWorlds {
    /// The verified world (read-only).
    pub fn verified(&self) -> &World {
        &self.verified.world
    }

    /// The predicted world (read-only): what a game presents.
    pub fn predicted(&self) -> &World {
        &self.predicted.world
    }

    /// The verified world, mutable (tests and tools; changing simulation state here breaks
    /// determinism unless every peer does the same).
    pub fn verified_mut(&mut self) -> &mut SimulationWorld {
        &mut self.verified
    }

    /// The predicted world, mutable (see [`SimulationWorlds::verified_mut`]).
    pub fn predicted_mut(&mut self) -> &mut SimulationWorld {
        &mut self.predicted
    }

    /// The registry of rolled-back state.
    pub fn registry(&self) -> &RollbackRegistry {
        &self.registry
    }

    /// Registers component `T` for rollback.
    ///
    /// # Errors
    /// [`SessionError::SessionStarted`] once the first session update has run: register in
    /// your game plugin instead.
    pub fn try_register_component<T>(&mut self) -> Result<(), SessionError>
    where
        T: Component<Mutability = bevy::ecs::component::Mutable> + Clone,
    {
        self.registry
            .register_component::<T>(crate::snapshot::RollbackStrategy::Clone)
    }

    /// Rolls the predicted world back to the verified world now (what a session update does when
    /// it decides to roll back). For tools and tests; the session's own bookkeeping of the
    /// predicted tick is corrected at its next update.
    pub fn rollback_predicted(&mut self) -> snapshot::RollbackReport {
        snapshot::rollback(&mut self.verified, &mut self.predicted, &mut self.registry)
    }

    /// The checksum of the verified world now.
    pub fn verified_checksum(&mut self) -> u64 {
        snapshot::checksum(&mut self.verified, &self.registry)
    }

    /// The checksum of the predicted world now (same function as verified checksums).
    pub fn predicted_checksum(&mut self) -> u64 {
        snapshot::checksum(&mut self.predicted, &self.registry)
    }
}

/// Inputs of the local players, written by the game (e.g. from leafwing's `ActionState`
/// through an `InputEncoder`) before [`DeterministicSet::SessionUpdate`](crate::DeterministicSet);
/// sampled once per polled tick.
#[derive(Resource, Debug, Clone, PartialEq)]
pub struct LocalInputs<I: SimInput> {
    inputs: Vec<I>,
}

impl<I: SimInput> LocalInputs<I> {
    /// Default inputs for `players` players.
    pub fn new(players: PlayerIndex) -> Self {
        Self {
            inputs: vec![I::default(); usize::from(players)],
        }
    }

    /// Sets the current input of `player`.
    ///
    /// # Errors
    /// [`SessionError::UnknownPlayer`] for an index outside `0..players`.
    pub fn set(&mut self, player: PlayerIndex, input: I) -> Result<(), SessionError> {
        let players = self.inputs.len() as PlayerIndex;
        let slot = self
            .inputs
            .get_mut(usize::from(player))
            .ok_or(SessionError::UnknownPlayer { player, players })?;
        *slot = input;
        Ok(())
    }

    /// The current input of `player`.
    pub fn get(&self, player: PlayerIndex) -> Option<&I> {
        self.inputs.get(usize::from(player))
    }
}

/// A per-tick source of local inputs (main-app resource), for replays and scripted players: when
/// present, the session asks it for the input of `(player, tick)` for every tick it polls,
/// instead of sampling [`LocalInputs`] once per update (which repeats one value when an update
/// polls several ticks, e.g. while the clock catches up).
#[derive(Resource, Clone)]
pub struct TickInputSource<I: SimInput>(
    pub std::sync::Arc<dyn Fn(PlayerIndex, Tick) -> I + Send + Sync>,
);

impl<I: SimInput> TickInputSource<I> {
    /// A source calling `f(player, tick)`.
    pub fn new(f: impl Fn(PlayerIndex, Tick) -> I + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(f))
    }
}

/// The local input of `player` for `tick`: from [`TickInputSource`] if present, else the current
/// [`LocalInputs`], else the default.
fn local_input<I: SimInput>(world: &World, player: PlayerIndex, tick: Tick) -> I {
    if let Some(source) = world.get_resource::<TickInputSource<I>>() {
        return (source.0)(player, tick);
    }
    world
        .get_resource::<LocalInputs<I>>()
        .and_then(|l| l.get(player).cloned())
        .unwrap_or_default()
}

/// Counters of the session, updated every session update (main-app resource).
#[derive(Resource, Debug, Clone, Default, PartialEq, Reflect)]
pub struct SessionStats {
    /// Last tick whose local inputs were polled.
    pub local_tick: Tick,
    /// Tick of the verified world.
    pub verified_tick: Tick,
    /// Tick of the predicted world.
    pub predicted_tick: Tick,
    /// Verified ticks simulated.
    pub ticks_verified: u64,
    /// Predicted ticks simulated (re-simulations included).
    pub ticks_predicted: u64,
    /// Rollbacks performed.
    pub rollbacks: u64,
    /// Rollbacks performed although skipping had been requested (IsRollbackRequired).
    pub forced_rollbacks: u64,
    /// Session updates that verified ticks but skipped the rollback because every prediction
    /// of the current timeline held.
    pub skipped_rollbacks: u64,
    /// Predicted ticks simulated again after a rollback (tick ≤ the highest tick predicted before).
    pub resimulated_ticks: u64,
    /// Inputs whose prediction differed from the confirmed value.
    pub mispredicted_inputs: u64,
    /// Session updates that stalled (see `SimulatorContext::is_stalling`).
    pub stalls: u64,
    /// Deepest prediction (predicted tick − verified tick) seen.
    pub max_prediction_depth: i32,
    /// Predicted ticks compared with verification (inputs turned out right); debug aid.
    pub resim_ticks_checked: u64,
    /// Of those, ticks whose predicted state equalled the verified state.
    pub resim_ticks_matching: u64,
    /// The latest verified checksum.
    pub last_checksum: Option<TickChecksum>,
    /// Every verified checksum recorded, oldest first (at most 100,000).
    pub checksum_history: Vec<TickChecksum>,
    /// Entities rollbacks spawned back into the predicted world.
    pub rollback_restored_entities: u64,
    /// Entities rollbacks parked (they existed only in a mispredicted timeline).
    pub rollback_parked_entities: u64,
    /// Component types on simulation entities that rollback does not restore.
    pub unregistered_components: Vec<String>,
    /// The client side of a networked session (`None` in a local session).
    pub network: Option<crate::net::NetworkClientStats>,
}

/// A checksum was recorded on a verified tick.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChecksumRecorded(pub TickChecksum);

/// A simulation entity carries a component type that rollback does not restore: register it
/// (`rollback_component`) or declare it ignored (`ignore_rollback_component`). Sent once per type.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct UnregisteredComponent {
    /// The component's type name.
    pub type_name: String,
}

/// A predicted tick whose inputs turned out right did not produce the verified state (debug aid:
/// `verify_predictions`). This means the simulation is not deterministic or some state is not
/// registered.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PredictionMismatch {
    /// The tick.
    pub tick: Tick,
    /// Hash of the predicted state.
    pub predicted: u64,
    /// Hash of the verified state.
    pub verified: u64,
}

#[derive(Debug, Clone, Copy)]
struct AuditEntry {
    base: Tick,
    chain: u64,
    state: u64,
}

/// Where confirmed inputs come from.
enum InputTransport<I: SimInput> {
    /// A single-process session: a local relay with latency and jitter.
    Local(LocalRelay<I>),
    /// A networked session: a relay server over renet.
    Network(Box<crate::net::client::NetworkClient<I>>),
}

/// The session's own state (main-app resource).
#[derive(Resource)]
pub struct DeterministicSession<I: SimInput> {
    pub(crate) config: SessionConfig,
    pub(crate) buffer: InputBuffer<I>,
    transport: Option<InputTransport<I>>,
    local_tick: Tick,
    relay_now: Tick,
    predicted_tick: Tick,
    highest_predicted: Tick,
    prediction_base: Tick,
    prediction_chain: u64,
    audit: BTreeMap<Tick, AuditEntry>,
    /// Hash of the input set each tick of the current predicted timeline was simulated with.
    used_inputs: BTreeMap<Tick, u64>,
    confirmed_hashes: VecDeque<(Tick, u64)>,
    accumulator: f64,
    started: bool,
    inputs: Vec<I>,
    status: Vec<InputStatus>,
}

impl<I: SimInput> DeterministicSession<I> {
    pub(crate) fn new(config: SessionConfig) -> Result<Self, SessionError> {
        config.validate()?;
        let players = config.players;
        let mut buffer = InputBuffer::new(players, config.input_capacity)?;
        // Ticks 1..=input_delay have no sampled input: everyone starts with the default.
        for tick in 1..=config.input_delay as Tick {
            for p in 0..players {
                buffer.confirm(p, tick, I::default())?;
            }
        }
        let transport = match &config.network {
            Some(network) => InputTransport::Network(Box::new(
                crate::net::client::NetworkClient::new(network.clone()),
            )),
            None => InputTransport::Local(LocalRelay::new(LocalRelayConfig {
                players,
                latency_ticks: (0..players).map(|p| config.latency_of(p)).collect(),
                jitter_ticks: config.local.jitter_ticks,
                seed: config.local.seed,
            })?),
        };
        Ok(Self {
            buffer,
            transport: Some(transport),
            local_tick: 0,
            relay_now: 0,
            predicted_tick: 0,
            highest_predicted: 0,
            prediction_base: 0,
            prediction_chain: chain_seed(0),
            audit: BTreeMap::new(),
            used_inputs: BTreeMap::new(),
            confirmed_hashes: VecDeque::new(),
            accumulator: 0.0,
            started: false,
            inputs: Vec::with_capacity(usize::from(players)),
            status: Vec::with_capacity(usize::from(players)),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// The next tick whose local inputs will be polled (the tick `LocalInputs` feeds next,
    /// before the input delay is added).
    pub fn next_poll_tick(&self) -> Tick {
        self.local_tick + 1
    }

    /// The tick the inputs written to [`LocalInputs`] before the next session update apply to
    /// ([`next_poll_tick`](Self::next_poll_tick) plus the input delay).
    pub fn next_input_tick(&self) -> Tick {
        self.next_poll_tick() + self.config.input_delay as Tick
    }

    /// The input buffer.
    pub fn buffer(&self) -> &InputBuffer<I> {
        &self.buffer
    }
}

fn chain_seed(base: Tick) -> u64 {
    let mut h = StateHasher::default();
    h.write_i32(base);
    h.finish()
}

fn chain_step(chain: u64, inputs_hash: u64) -> u64 {
    let mut h = StateHasher::default();
    h.write_u64(chain);
    h.write_u64(inputs_hash);
    h.finish()
}

fn hash_inputs<I: SimInput>(inputs: &[I]) -> u64 {
    let mut h = StateHasher::default();
    inputs.hash(&mut h);
    h.finish()
}

/// The session update: DESIGN §3 steps 1–7. Runs in [`DeterministicSet::SessionUpdate`](crate::DeterministicSet).
pub fn session_update<I: SimInput>(world: &mut World) {
    let Some(mut worlds) = world.remove_resource::<SimulationWorlds>() else {
        warn_once!("{}", SessionError::WorldsNotBuilt);
        return;
    };
    let Some(mut session) = world.remove_resource::<DeterministicSession<I>>() else {
        world.insert_resource(worlds);
        return;
    };
    if !session.started {
        session.started = true;
        worlds.registry.lock();
    }
    update(world, &mut worlds, &mut session);
    world.insert_resource(session);
    world.insert_resource(worlds);
}

fn ticks_to_poll<I: SimInput>(world: &World, session: &mut DeterministicSession<I>) -> u32 {
    match session.config.clock {
        SessionClock::Stepped { ticks_per_update } => ticks_per_update,
        SessionClock::RealTime => {
            let delta = world
                .get_resource::<Time<Real>>()
                .map(|t| t.delta_secs_f64())
                .unwrap_or(0.0);
            let rate = f64::from(session.config.tick_rate.hz());
            session.accumulator += delta * rate;
            let n = session.accumulator.floor().clamp(0.0, 8.0);
            session.accumulator = (session.accumulator - n).min(8.0);
            n as u32
        }
    }
}

/// Polls `polls` ticks of local input into the local relay and delivers what arrived.
fn poll_local<I: SimInput>(
    world: &World,
    session: &mut DeterministicSession<I>,
    relay: &mut LocalRelay<I>,
    polls: u32,
) -> bool {
    let config = &session.config;
    let window = config.rollback_window as Tick;
    let predicted_mode = config.mode == SessionMode::Predicted;
    let mut stalling = false;
    for _ in 0..polls {
        session.relay_now += 1;
        let next = session.local_tick + 1;
        if predicted_mode && would_stall(next, session.buffer.max_verifiable_tick(), window) {
            stalling = true;
            relay.deliver(session.relay_now, &mut session.buffer);
            continue;
        }
        session.local_tick = next;
        let for_tick = next + config.input_delay as Tick;
        for p in 0..config.players {
            let input: I = local_input(world, p, for_tick);
            if config.local.known_players.contains(&p)
                && let Err(error) = session.buffer.set_local(p, for_tick, input.clone())
            {
                warn!("local input of player {p} for tick {for_tick} rejected: {error}");
            }
            if let Err(error) = relay.submit(p, session.relay_now, for_tick, input) {
                warn!("input of player {p} for tick {for_tick} not sent: {error}");
            }
        }
        relay.deliver(session.relay_now, &mut session.buffer);
    }
    if polls == 0 {
        relay.deliver(session.relay_now, &mut session.buffer);
    }
    stalling
}

/// Receives from the relay server, polls local input at the synchronised clock and sends it.
///
/// The local tick is the client's clock, synchronised to the server's (plus the lead its inputs
/// need to arrive in time): it advances with [`NetworkClient::ticks_to_poll`](
/// crate::net::client::NetworkClient::ticks_to_poll) whatever the simulation can do, so inputs are
/// sampled and sent on time even when confirmations lag. Prediction is capped at
/// `max_verifiable + window` by the context. Stopping the clock at that cap (as a local session
/// does) would make a client whose round trip exceeds its input delay plus the window (lockstep:
/// window 0) send every input late: the server then waits for its hard tolerance, confirmations
/// come later still, and the session settles with every input of that client replaced.
///
/// Stalling: the clock is past what can be predicted and the prediction horizon did not move in
/// this update (no new confirmations), or the clock hit its run-ahead bound.
fn poll_network<I: SimInput>(
    world: &mut World,
    session: &mut DeterministicSession<I>,
    net: &mut crate::net::client::NetworkClient<I>,
    polls: u32,
) -> bool {
    let dt = crate::net::client::NetworkClient::<I>::delta(world);
    net.receive(world, &mut session.buffer, dt);
    let hz = session.config.tick_rate.hz();
    let window = session.config.rollback_window as Tick;
    let predicted_mode = session.config.mode == SessionMode::Predicted;
    let ticks = net.ticks_to_poll(polls, hz);
    let delay = net.input_delay(hz) as Tick;
    // How far the clock may run past the prediction cap when confirmations stop (server gone or
    // frozen): one second, and never past the input buffer.
    let max_verifiable = session.buffer.max_verifiable_tick();
    let clock_limit = max_verifiable
        .saturating_add(window)
        .saturating_add(hz as Tick)
        .min(session.buffer.storable_ticks().end().saturating_sub(delay));
    let horizon_before = session.local_tick.min(net.prediction_cap);
    let mut blocked = false;
    for _ in 0..ticks {
        let next = session.local_tick + 1;
        if next > clock_limit {
            blocked = true;
            break;
        }
        session.local_tick = next;
        if let Some(slot) = net.stats.slot {
            net.sample_through(
                next + delay,
                |tick| local_input(world, slot, tick),
                &mut session.buffer,
            );
        }
    }
    net.send(world, &session.buffer);
    let cap = if predicted_mode {
        max_verifiable.saturating_add(window)
    } else {
        Tick::MAX
    };
    net.prediction_cap = cap;
    let horizon = session.local_tick.min(cap);
    blocked || (session.local_tick > cap && horizon <= horizon_before)
}

fn update<I: SimInput>(
    world: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
) {
    let config = session.config.clone();
    let window = config.rollback_window as Tick;
    let players = config.players;
    let predicted_mode = config.mode == SessionMode::Predicted;

    // 1. Poll: local inputs for `now + input_delay`, and confirmed inputs from the relay.
    let polls = ticks_to_poll(world, session);
    let mut transport = session.transport.take();
    let stalling = match transport.as_mut() {
        Some(InputTransport::Local(relay)) => poll_local(world, session, relay, polls),
        Some(InputTransport::Network(net)) => poll_network(world, session, net, polls),
        None => false,
    };
    session.transport = transport;

    // 2. Reset the context.
    let verified_from = worlds.verified.tick();
    session.predicted_tick = worlds.predicted.tick();
    {
        let mut ctx = world.resource_mut::<SimulatorContext>();
        let begun = ctx.begin_update(UpdateParams {
            verified_tick: verified_from,
            predicted_tick: session.predicted_tick,
            max_verifiable_tick: session.buffer.max_verifiable_tick(),
            max_predictable_tick: session.local_tick,
            rollback_window: window,
            max_verified_ticks_per_update: config.max_verified_ticks_per_update as Tick,
            is_stalling: stalling,
        });
        if let Err(error) = begun {
            // A previous update was interrupted (a hook panicked?): start over cleanly.
            warn!("session update: {error}; resetting the context");
            ctx.abort_update();
            check(ctx.begin_update(UpdateParams {
                verified_tick: verified_from,
                predicted_tick: session.predicted_tick,
                max_verifiable_tick: session.buffer.max_verifiable_tick(),
                max_predictable_tick: session.local_tick,
                rollback_window: window,
                max_verified_ticks_per_update: config.max_verified_ticks_per_update as Tick,
                is_stalling: stalling,
            }));
        }
    }
    let _ = world.try_run_schedule(BeforeVerification);

    // 3. Verification.
    check(
        world
            .resource_mut::<SimulatorContext>()
            .enter_verification(),
    );
    let mut stats = world.remove_resource::<SessionStats>().unwrap_or_default();
    if stalling {
        stats.stalls += 1;
    }
    loop {
        let next = {
            let ctx = world.resource::<SimulatorContext>();
            match ctx.next_tick_to_verify() {
                Some(t) => t,
                None => break,
            }
        };
        session.inputs.clear();
        session.status.clear();
        for p in 0..players {
            let input = session
                .buffer
                .confirmed(p, next)
                .cloned()
                .unwrap_or_default();
            session.inputs.push(input);
            session.status.push(InputStatus::Confirmed);
        }
        let inputs_hash = hash_inputs(&session.inputs);
        run_tick(&mut worlds.verified, next, &session.inputs, &session.status);
        check(
            world
                .resource_mut::<SimulatorContext>()
                .record_verified_tick(),
        );
        stats.ticks_verified += 1;
        session.confirmed_hashes.push_back((next, inputs_hash));
        if next % config.checksum_interval as Tick == 0 {
            let checksum = TickChecksum {
                tick: next,
                checksum: snapshot::checksum(&mut worlds.verified, &worlds.registry),
            };
            stats.last_checksum = Some(checksum);
            if let Some(InputTransport::Network(net)) = session.transport.as_mut() {
                net.send_checksum(world, checksum.tick, checksum.checksum);
            }
            if stats.checksum_history.len() < 100_000 {
                stats.checksum_history.push(checksum);
            }
            world.write_message(ChecksumRecorded(checksum));
        }
        if config.verify_predictions {
            audit_verified_tick(world, worlds, session, &mut stats, next);
        }
    }

    // Components a rollback would not restore: checked on every new archetype of the verified
    // world (cheap: archetypes already seen are skipped), reported once per type.
    for type_name in worlds
        .registry
        .unregistered_components(&worlds.verified.world)
    {
        warn!(
            "component `{type_name}` on a simulation entity is not registered for rollback: \
             its value will not be restored (register it with rollback_component or \
             ignore_rollback_component)"
        );
        stats.unregistered_components.push(type_name.clone());
        world.write_message(UnregisteredComponent { type_name });
    }

    // 4. BeforePrediction: hooks may set the skip flags; then the decision.
    check(
        world
            .resource_mut::<SimulatorContext>()
            .enter_before_prediction(),
    );
    if predicted_mode && config.skip_rollback_when_predictions_hold && predictions_hold(session) {
        // Every tick of the current predicted timeline was simulated with the inputs known now:
        // a rollback and re-simulation would reproduce it bit for bit, so ask to skip it (a
        // request: IsRollbackRequired still forces one). Hooks may undo the request.
        check(
            world
                .resource_mut::<SimulatorContext>()
                .set_skip_prediction_rollback_if_possible(true),
        );
    }
    let _ = world.try_run_schedule(BeforePrediction);
    if predicted_mode {
        check(world.resource_mut::<SimulatorContext>().enter_prediction());

        // 5. Rollback.
        if world
            .resource::<SimulatorContext>()
            .will_rollback_prediction()
        {
            let report = snapshot::rollback(
                &mut worlds.verified,
                &mut worlds.predicted,
                &mut worlds.registry,
            );
            check(world.resource_mut::<SimulatorContext>().record_rollback());
            stats.rollbacks += 1;
            if world
                .resource::<SimulatorContext>()
                .skip_prediction_rollback_if_possible()
            {
                stats.forced_rollbacks += 1;
            }
            stats.rollback_restored_entities += u64::from(report.restored_entities);
            stats.rollback_parked_entities += u64::from(report.parked_entities);
            session.predicted_tick = worlds.verified.tick();
            session.prediction_base = session.predicted_tick;
            session.prediction_chain = chain_seed(session.prediction_base);
            session.used_inputs.clear();
        }

        {
            let ctx = world.resource::<SimulatorContext>();
            if !ctx.has_rolled_back_prediction() && ctx.ticks_verified() > 0 {
                stats.skipped_rollbacks += 1;
            }
        }

        // 6. Prediction.
        loop {
            let next = {
                let ctx = world.resource::<SimulatorContext>();
                match ctx.next_tick_to_predict() {
                    Some(t) => t,
                    None => break,
                }
            };
            session
                .buffer
                .fill_predicted(next, &mut session.inputs, &mut session.status);
            for p in 0..players {
                if session.status[usize::from(p)] != InputStatus::Confirmed {
                    let input = session.inputs[usize::from(p)].clone();
                    if let Err(error) = session.buffer.record_prediction_used(p, next, &input) {
                        warn!("prediction of player {p} at tick {next} not recorded: {error}");
                    }
                }
            }
            if next <= session.highest_predicted {
                stats.resimulated_ticks += 1;
            }
            run_tick(
                &mut worlds.predicted,
                next,
                &session.inputs,
                &session.status,
            );
            check(
                world
                    .resource_mut::<SimulatorContext>()
                    .record_predicted_tick(),
            );
            stats.ticks_predicted += 1;
            session.predicted_tick = next;
            session.highest_predicted = session.highest_predicted.max(next);
            let inputs_hash = hash_inputs(&session.inputs);
            session.prediction_chain = chain_step(session.prediction_chain, inputs_hash);
            session.used_inputs.insert(next, inputs_hash);
            if config.verify_predictions {
                let state = snapshot::checksum(&mut worlds.predicted, &worlds.registry);
                session.audit.insert(
                    next,
                    AuditEntry {
                        base: session.prediction_base,
                        chain: session.prediction_chain,
                        state,
                    },
                );
            }
        }
    }

    // 7. AfterPrediction: stats, housekeeping, hooks.
    if predicted_mode {
        check(
            world
                .resource_mut::<SimulatorContext>()
                .enter_after_prediction(),
        );
    } else {
        // Lockstep never predicts nor touches the predicted world: the context's prediction
        // stages do not apply, so the update ends here for it.
        world.resource_mut::<SimulatorContext>().abort_update();
    }
    let verified_tick = worlds.verified.tick();
    stats.local_tick = session.local_tick;
    stats.verified_tick = verified_tick;
    stats.predicted_tick = session.predicted_tick;
    stats.max_prediction_depth = stats
        .max_prediction_depth
        .max(session.predicted_tick - verified_tick);
    stats.mispredicted_inputs = session.buffer.mispredicted_inputs();
    if let Some(InputTransport::Network(net)) = session.transport.as_ref() {
        stats.network = Some(net.stats.clone());
    }
    let keep_from = verified_tick - window - 2;
    if keep_from > 0 {
        session.buffer.discard_through(keep_from);
    }
    while session
        .used_inputs
        .first_key_value()
        .is_some_and(|(t, _)| *t <= verified_tick)
    {
        session.used_inputs.pop_first();
    }
    while session
        .confirmed_hashes
        .front()
        .is_some_and(|(t, _)| *t < keep_from)
    {
        session.confirmed_hashes.pop_front();
    }
    world.insert_resource(stats);
    let _ = world.try_run_schedule(AfterPrediction);
    if predicted_mode {
        check(world.resource_mut::<SimulatorContext>().end_update());
    }
}

/// Logs a context error: the driver calls the lifecycle in order, so one means a bug.
fn check<T>(result: Result<T, crate::context::ContextError>) {
    if let Err(error) = result {
        error!("simulator context: {error}");
    }
}

/// Whether every tick of the current predicted timeline was simulated with exactly the inputs
/// the session would use for it now (confirmed where known, else the current prediction).
fn predictions_hold<I: SimInput>(session: &mut DeterministicSession<I>) -> bool {
    if session.used_inputs.is_empty() {
        return false;
    }
    let players = session.config.players;
    let mut inputs = std::mem::take(&mut session.inputs);
    let mut status = std::mem::take(&mut session.status);
    let mut hold = true;
    for (tick, used) in session.used_inputs.iter() {
        session
            .buffer
            .fill_predicted(*tick, &mut inputs, &mut status);
        debug_assert_eq!(inputs.len(), usize::from(players));
        if hash_inputs(&inputs) != *used {
            hold = false;
            break;
        }
    }
    session.inputs = inputs;
    session.status = status;
    hold
}

/// Compares the prediction of `tick` (if its inputs turned out right) with the verified state.
fn audit_verified_tick<I: SimInput>(
    world: &mut World,
    worlds: &mut SimulationWorlds,
    session: &mut DeterministicSession<I>,
    stats: &mut SessionStats,
    tick: Tick,
) {
    let Some(entry) = session.audit.remove(&tick) else {
        return;
    };
    while session
        .audit
        .first_key_value()
        .is_some_and(|(t, _)| *t < tick)
    {
        session.audit.pop_first();
    }
    let mut chain = chain_seed(entry.base);
    for (t, hash) in session.confirmed_hashes.iter() {
        if *t > entry.base && *t <= tick {
            chain = chain_step(chain, *hash);
        }
    }
    if chain != entry.chain {
        return;
    }
    stats.resim_ticks_checked += 1;
    let verified = snapshot::checksum(&mut worlds.verified, &worlds.registry);
    if verified == entry.state {
        stats.resim_ticks_matching += 1;
    } else {
        error!(
            "desync: predicted tick {tick} ({:016x}) differs from verified ({verified:016x}) with the same inputs",
            entry.state
        );
        world.write_message(PredictionMismatch {
            tick,
            predicted: entry.state,
            verified,
        });
    }
}
