//! A participant of the ownership protocol, as a renet client: its state ([`OwnershipClient`])
//! and systems — [rules 6–14](crate::rules) (through [`ParticipantOwnership`]) applied to what
//! the local Rapier world shows, state updates for owned bodies, and relayed state applied to
//! the others.
//!
//! # One frame
//! 1. `PreUpdate` ([`OwnershipSet::Receive`](crate::OwnershipSet::Receive)): the handshake
//!    (`Hello` with the ownership protocol once connected; the `Welcome` gives this
//!    participant's id); the entity server's answers update the state machine,
//!    [`SimulationOwner`] and write [`OwnershipChanged`] / [`BidRefused`]; a relayed state newer
//!    than the last applied one (by the batch it came in) is written to the body's
//!    `Transform` and `Velocity` unless this participant owns the body. A body that becomes
//!    unowned keeps its velocities: a release at rest comes with the owner's stopped final
//!    state ([ownership rule 12](crate::rules)), and a body whose owner left keeps moving until
//!    it is taken over or stopped after `orphan_stop_delay` ([ownership rule 5](crate::rules)).
//! 2. `Update`: game code; the [user API](crate::OwnershipEntityCommandsExt) marks bodies.
//! 3. `PostUpdate`, after Rapier ([`OwnershipSet::Send`](crate::OwnershipSet::Send)), in
//!    steps: *observe* each [`Ownable`] dynamic body with a [`BodyNetId`] — active from its
//!    velocity, sleep state and displacement ([`ActivityConfig`]); *collisions* — touched by
//!    the [`ParticipantAvatar`] or hit by a moving owned body when such a Rapier contact becomes
//!    active (counted once, not every frame a resting contact lasts); *rules* — one
//!    [`BodyObservation`] per body (script edited from [`Poked`], held from [`Held`] and always
//!    for the own avatar, interested unless [`Uninterested`]) through
//!    [`ParticipantOwnership::tick`]; *send actions* — one `Bids` list per frame and `Release`
//!    messages (a release preceded by the body's final state with zero velocities, both on the
//!    reliable channel) and zeroed velocities; *mirror bids* into [`OwnershipBid`]; *send
//!    states* — one `StateBatch` with every owned body whose state drifted past the thresholds
//!    or whose heartbeat is due ([`should_send`]); and a keepalive (`Ping`) when nothing at all
//!    went out for [`OwnershipConfig::keepalive_interval`], so the entity server does not count
//!    an idle participant as gone ([ownership rule 5](crate::rules)).
//!
//! Static and kinematic bodies are never observed, so never bid for; relayed states for them
//! are ignored and counted.

use core::time::Duration;

use bevy::ecs::system::SystemParam;
use bevy::math::Vec3;
use bevy::platform::collections::{HashMap, HashSet};
use bevy::prelude::*;
use bevy_rapier3d::prelude::{RapierContext, ReadRapierContext, RigidBody, Sleeping, Velocity};
use simsync_net::bevy_renet::RenetClient;
use simsync_net::renet::DisconnectReason;
use simsync_net::{
    BidRequest, ClientHandshake, ClientMessage, ClientNetExt, DecodeStats, Hello, JoinStatus,
    MAX_BIDS_PER_MESSAGE, MatchEndReason, NetChannel, NetClock, NetError, OwnerRecord,
    OwnershipClientMessage, OwnershipServerMessage, PackedBodyState, Protocols, RefusalReason,
    RejectReason, ServerMessage, Welcome,
};

use crate::activity::{ActivityConfig, RestMemory, classify};
use crate::arbiter::RefusalCounts;
use crate::baseline::{ACK_INTERVAL, DeltaLink};
use crate::batch::{StateBatch, chosen_states, entry_room, is_newer_batch, quantize, varint_len};
use crate::body::{BodyKind, BodyState, one_way_latency};
use crate::budget::{
    Candidate, PriorityAccumulator, StateBudgetConfig, UploadBudget, nearest, send_weight,
};
use crate::clock::OwnershipClock;
use crate::components::{
    BodyNetId, Held, Ownable, OwnershipBid, ParticipantAvatar, Poked, SimulationOwner, Uninterested,
};
use crate::config::OwnershipConfig;
use crate::error::OwnershipError;
use crate::messages::{
    BidRefused, CountedSilent, OwnershipChanged, ParticipantEnd, ParticipantEnded, RefusedBy,
    RoomClosing,
};
use crate::participant::{Action, BodyObservation, ParticipantOwnership, PendingRequest};
use crate::priority::{BodyId, ParticipantId, Priority};
use crate::send_policy::{Sequence, predicted_error, should_send};
use crate::traffic::TrafficTotals;
use crate::wire::{self, state_from_wire};

/// What a participant has done since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParticipantStats {
    /// Bids sent, resends and priority changes (which travel as bids) included.
    pub bids_sent: u64,
    /// Of `bids_sent`, resends of a bid or priority change still unanswered after
    /// `bid_resend_interval` (ownership rule 6).
    pub bid_resends: u64,
    /// Of `bids_sent`, priority changes by the owner (ownership rules 10, 13).
    pub priority_changes_sent: u64,
    /// Releases sent, resends included (ownership rule 12).
    pub releases_sent: u64,
    /// `Bids` messages sent: every bid and priority change of a frame travels in one (or one
    /// per [`MAX_BIDS_PER_MESSAGE`](simsync_net::MAX_BIDS_PER_MESSAGE) bids).
    pub bid_messages_sent: u64,
    /// Bodies this participant respawned under an id it had, sent to the entity server as a
    /// `Respawn` ([respawns](crate::rules#respawns)).
    pub respawns_sent: u64,
    /// `Reset`s received for a body this participant has: a respawned body, started again
    /// unowned ([respawns](crate::rules#respawns)).
    pub resets_received: u64,
    /// `Grant`s received.
    pub grants_received: u64,
    /// `Refused` received, per reason.
    pub refusals_received: RefusalCounts,
    /// Bids not sent because they could not win against the known owner, refused on the spot
    /// (ownership rule 6), per reason.
    pub refusals_local: RefusalCounts,
    /// `OwnerChanged` received.
    pub owner_changes_received: u64,
    /// `Snapshot`s received: the owner table on joining, or part of a full one after the
    /// entity server could not deliver every change (resync).
    pub owner_tables_received: u64,
    /// Bodies whose velocities were zeroed locally: on release at rest (ownership rule 12), or
    /// left moving and unowned with nobody taking them over (ownership rule 5).
    pub velocities_zeroed: u64,
    /// State updates sent for owned bodies (final states before a release included).
    pub state_updates_sent: u64,
    /// Encoded bytes of those state updates (`ClientMessage` as sent, before renet's framing):
    /// the state batches ([rule 15](crate::rules#rule-15--one-state-batch-per-frame)).
    pub state_update_bytes: u64,
    /// State batches sent (at most one a frame on the state channel, plus one per release's
    /// final state on the control channel).
    pub state_batches_sent: u64,
    /// Owned bodies due for an update but left for a later frame by the upload budget
    /// ([rules 17, 18](crate::rules#rule-17--byte-budgets)), summed over frames.
    pub bodies_deferred: u64,
    /// State batches received from the entity server.
    pub state_batches_received: u64,
    /// Encoded bytes of the state received (`ServerMessage`s carrying states).
    pub state_bytes_received: u64,
    /// State batches that did not decode ([`WireBatch::decode`](crate::WireBatch::decode)):
    /// dropped whole.
    pub state_batches_invalid: u64,
    /// Of `state_updates_sent`, those sent as deltas against a state the entity server
    /// acknowledged ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)).
    pub delta_entries_sent: u64,
    /// Batches without bodies sent only to acknowledge the entity server's (rule 20).
    pub ack_batches_sent: u64,
    /// Delta entries in relay batches that could not be applied: their baseline was missing or
    /// they left the range (the body waited for a later entry).
    pub deltas_rejected: u64,
    /// Acknowledgements in relay batches that were refused (a batch never sent, or not yet).
    pub acks_rejected: u64,
    /// Relayed states received.
    pub relays_received: u64,
    /// Relayed states applied to a body.
    pub relays_applied: u64,
    /// Relayed states dropped as not newer than the last applied one (reordered, duplicated).
    pub relays_stale: u64,
    /// Relayed states ignored because this participant owns the body.
    pub relays_ignored_owned: u64,
    /// Relayed states or ownership messages about a body this participant does not have (or
    /// that is not dynamic here).
    pub unknown_bodies: u64,
    /// Relayed states with values out of range ([`state_from_wire`](crate::state_from_wire)):
    /// dropped.
    pub relays_invalid: u64,
    /// Messages ignored: before the `Welcome`, a second `Welcome`, a `Rejected` after joining,
    /// other protocols.
    pub messages_ignored: u64,
    /// Messages that could not be queued (channel full, disconnected).
    pub send_errors: u64,
    /// Keepalives (`Ping`s) sent because nothing else went out for
    /// [`keepalive_interval`](OwnershipConfig::keepalive_interval).
    pub keepalives_sent: u64,
    /// Times the entity server said it had counted this participant as gone for silence
    /// (`CountedSilent`, [`CountedSilent`](crate::CountedSilent)).
    pub counted_silent: u64,
}

/// What a participant keeps per body besides the state machine.
#[derive(Debug, Clone)]
struct LocalBody {
    entity: Entity,
    kind: BodyKind,
    /// This participant's own update numbering for the body.
    out_seq: Sequence,
    /// While owned: the last state sent (as quantized on the wire) and when.
    sent: Option<(BodyState, Duration)>,
    /// The last relay batch applied to this body (the server's numbering for this
    /// participant).
    batch_last: Option<u32>,
    /// When the body last collided (avatar touch or knock-on hit), for its send weight.
    collided_at: Option<Duration>,
    /// Since when the body is still, and the last state the network agreed on.
    rest: RestMemory,
}

/// A participant's Bevy resource, its side of the renet connection to the entity server: the
/// handshake, the [`ParticipantOwnership`] state machine (once joined), per-body relay and
/// activity state, and [`ParticipantStats`]. Inserted by
/// [`OwnershipPlugin::participant`](crate::OwnershipPlugin::participant).
#[derive(Resource, Debug)]
pub struct OwnershipClient {
    config: OwnershipConfig,
    activity: ActivityConfig,
    /// `simsync_net`'s one handshake, client side.
    join: ClientHandshake,
    machine: Option<ParticipantOwnership>,
    bodies: HashMap<BodyId, LocalBody>,
    by_entity: HashMap<Entity, BodyId>,
    /// Contacts active last frame: (avatar or moving owned body, other body).
    contacts: HashSet<(Entity, Entity)>,
    stats: ParticipantStats,
    decode: DecodeStats,
    budget_config: StateBudgetConfig,
    /// The upload budget ([rule 17](crate::rules#rule-17--byte-budgets)).
    budget: UploadBudget,
    /// Waiting bodies' accumulated priority ([rule 18](crate::rules#rule-18--priority-accumulation-and-starvation-freedom)).
    accumulator: PriorityAccumulator,
    /// This participant's batch numbering.
    batch_seq: u32,
    /// When the last frame's states were sent (for the budget's refill).
    last_send: Option<Duration>,
    /// Bodies deferred by the budget in the last frame.
    deferred_now: usize,
    /// The interest centre last sent, and when ([rule 19](crate::rules#rule-19--interest-radius)).
    focus_sent: Option<(Vec3, Duration)>,
    /// Deltas both ways with the entity server ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)).
    link: DeltaLink,
    /// When the last state batch was sent.
    last_batch_at: Option<Duration>,
    /// Ids of bodies despawned here and not registered again: registering one is a respawn.
    retired: HashSet<BodyId>,
    /// Bodies respawned here, to send to the entity server as `Respawn`s.
    respawned: Vec<BodyId>,
    /// Whether a message went out since the last keepalive check.
    sent_since_check: bool,
    /// When a message last went out (checked once a frame).
    last_sent_at: Option<Duration>,
    /// Why the entity server's room ends, once it said so.
    closing: Option<MatchEndReason>,
    /// When anything was last received from the entity server, once joined.
    last_heard: Option<Duration>,
    /// When the last keepalive went out.
    last_ping_at: Option<Duration>,
    /// Why the session ended, once it did.
    ended: Option<ParticipantEnd>,
    /// The game said it leaves ([`leave`](OwnershipClient::leave)).
    leaving: bool,
}

impl OwnershipClient {
    /// A participant that has not connected yet, applying `config` and `activity`, sending
    /// `name` in its `Hello`.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if either config does not validate.
    pub fn new(
        config: OwnershipConfig,
        activity: ActivityConfig,
        name: String,
    ) -> Result<Self, OwnershipError> {
        config.validate()?;
        activity.validate()?;
        Ok(Self {
            config,
            activity,
            join: ClientHandshake::new(Hello::new(Protocols::OWNERSHIP, name)),
            machine: None,
            bodies: HashMap::default(),
            by_entity: HashMap::default(),
            contacts: HashSet::default(),
            stats: ParticipantStats::default(),
            decode: DecodeStats::default(),
            budget_config: StateBudgetConfig::default(),
            budget: UploadBudget::new(StateBudgetConfig::default().upload_bytes_per_second),
            accumulator: PriorityAccumulator::default(),
            batch_seq: 0,
            last_send: None,
            deferred_now: 0,
            focus_sent: None,
            link: DeltaLink::default(),
            last_batch_at: None,
            retired: HashSet::default(),
            respawned: Vec::new(),
            sent_since_check: false,
            last_sent_at: None,
            closing: None,
            last_heard: None,
            last_ping_at: None,
            ended: None,
            leaving: false,
        })
    }

    /// This participant with `budget`'s upload budget ([rule 17](crate::rules#rule-17--byte-budgets)).
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if `budget` does not validate.
    pub fn with_state_budget(mut self, budget: StateBudgetConfig) -> Result<Self, OwnershipError> {
        budget.validate()?;
        self.budget_config = budget;
        self.budget = UploadBudget::new(budget.upload_bytes_per_second);
        Ok(self)
    }

    /// The state budgets in use.
    pub fn state_budget(&self) -> &StateBudgetConfig {
        &self.budget_config
    }

    /// Running totals of the state traffic, for [`StateTraffic`](crate::StateTraffic).
    pub fn traffic(&self) -> TrafficTotals {
        TrafficTotals {
            bytes_up: self.stats.state_update_bytes,
            bytes_down: self.stats.state_bytes_received,
            bodies_up: self.stats.state_updates_sent,
            deferred_total: self.stats.bodies_deferred,
            deferred_now: self.deferred_now as u64,
            budget_bytes_per_second: f64::from(self.budget_config.upload_bytes_per_second),
            deltas_up: self.stats.delta_entries_sent,
            deltas_rejected: self.stats.deltas_rejected,
            acks_rejected: self.stats.acks_rejected,
        }
    }

    /// Where the handshake is.
    pub fn status(&self) -> &JoinStatus {
        self.join.status()
    }

    /// Why the entity server's room ends, once the server said so (`Closing`, also written
    /// as a [`RoomClosing`] Message): it drains or its operator ended the room, and closes the
    /// connection shortly after.
    pub fn closing(&self) -> Option<&MatchEndReason> {
        self.closing.as_ref()
    }

    /// Why this participant's session with the entity server ended, once it did (also written
    /// as a [`ParticipantEnded`] Message): the server went silent for
    /// [`server_silence_timeout`](OwnershipConfig::server_silence_timeout) or the connection
    /// closed (`ServerGone`, or `RoomEnded` after the server said why), or the game closed the
    /// connection itself (`Left`). `None` while the session runs (or before it joined).
    pub fn ended(&self) -> Option<&ParticipantEnd> {
        self.ended.as_ref()
    }

    /// The game ends its session on purpose: the next closed connection — the game's own
    /// `ClientTransport::disconnect` or `RenetClient::disconnect` — ends it as
    /// [`ParticipantEnd::Left`], a normal end, whatever the transport reports.
    pub fn leave(&mut self) {
        self.leaving = true;
    }

    /// This participant's id, once joined.
    pub fn me(&self) -> Option<ParticipantId> {
        self.machine.as_ref().map(ParticipantOwnership::me)
    }

    /// The state machine of rules 6–14, once joined.
    pub fn machine(&self) -> Option<&ParticipantOwnership> {
        self.machine.as_ref()
    }

    /// The owner of `body` as last told by the server.
    pub fn owner(&self, body: BodyId) -> Option<(ParticipantId, Priority)> {
        self.machine.as_ref().and_then(|m| m.owner(body))
    }

    /// The counters.
    pub fn stats(&self) -> &ParticipantStats {
        &self.stats
    }

    /// Decode counters of everything received.
    pub fn decode_stats(&self) -> &DecodeStats {
        &self.decode
    }

    /// The entity of a registered body.
    pub fn entity_of(&self, body: BodyId) -> Option<Entity> {
        self.bodies.get(&body).map(|b| b.entity)
    }

    /// When this participant last sent `body`'s state (while it owns it), on the
    /// [`OwnershipClock`].
    pub fn last_sent(&self, body: BodyId) -> Option<Duration> {
        self.bodies
            .get(&body)
            .and_then(|b| b.sent)
            .map(|(_, at)| at)
    }

    /// The body id of a registered entity.
    pub fn body_of(&self, entity: Entity) -> Option<BodyId> {
        self.by_entity.get(&entity).copied()
    }

    fn forget_entity(&mut self, entity: Entity) {
        if let Some(body) = self.by_entity.remove(&entity) {
            self.bodies.remove(&body);
            self.retired.insert(body);
            self.link.forget(body);
            if let Some(machine) = &mut self.machine {
                machine.forget(body);
            }
        }
    }

    fn send(&mut self, client: &mut RenetClient, channel: NetChannel, msg: &ClientMessage) -> bool {
        match client.send_msg_on(channel, msg) {
            Ok(()) => {
                self.sent_since_check = true;
                true
            }
            Err(error) => {
                self.stats.send_errors += 1;
                debug!("participant: not sent: {error}");
                false
            }
        }
    }
}

/// `PreUpdate`: registers [`Ownable`] entities with a [`BodyNetId`] (adding `Velocity` and
/// [`SimulationOwner`] where missing) and forgets removed ones.
#[allow(clippy::type_complexity)]
pub(crate) fn register_bodies(
    mut state: ResMut<OwnershipClient>,
    added: Query<
        (Entity, &BodyNetId, Option<&RigidBody>),
        (With<Ownable>, Or<(Added<BodyNetId>, Added<Ownable>)>),
    >,
    mut removed_ids: RemovedComponents<BodyNetId>,
    mut removed_ownable: RemovedComponents<Ownable>,
    mut commands: Commands,
) {
    for entity in removed_ids.read().chain(removed_ownable.read()) {
        state.forget_entity(entity);
    }
    for (entity, id, rigid_body) in &added {
        let body = id.0;
        match state.bodies.get(&body) {
            Some(existing) if existing.entity != entity => {
                warn!(
                    "participant: {body} is already entity {}; entity {entity} ignored",
                    existing.entity
                );
                continue;
            }
            Some(_) => continue,
            None => {}
        }
        state.bodies.insert(
            body,
            LocalBody {
                entity,
                kind: rigid_body.map_or(BodyKind::Dynamic, |rb| BodyKind::from(*rb)),
                out_seq: Sequence::default(),
                sent: None,
                batch_last: None,
                collided_at: None,
                rest: RestMemory::default(),
            },
        );
        state.by_entity.insert(entity, body);
        if state.retired.remove(&body) {
            state.respawned.push(body);
        }
        commands
            .entity(entity)
            .insert_if_new((Velocity::zero(), SimulationOwner::UNOWNED));
    }
}

/// The body components the receive system writes.
type BodyWrite<'a> = (
    &'a mut Transform,
    Option<&'a mut Velocity>,
    Option<&'a mut SimulationOwner>,
);

/// Everything one receive pass needs besides the state.
struct Rx<'a, 'qw, 'qs, 'cw, 'cs> {
    now: Duration,
    /// How far relayed states are moved when applied, in seconds: the server's downlink
    /// latency less the physics step still to come this update (negative when the link is
    /// faster than a step: moved back).
    relay_shift: f32,
    bodies: &'a mut Query<'qw, 'qs, BodyWrite<'static>>,
    changed: Vec<OwnershipChanged>,
    refused: Vec<BidRefused>,
    silent: Vec<CountedSilent>,
    closing: Vec<RoomClosing>,
    commands: &'a mut Commands<'cw, 'cs>,
}

/// `PreUpdate`: the handshake and every message from the server.
#[allow(clippy::too_many_arguments)]
pub(crate) fn receive(
    clock: Res<OwnershipClock>,
    net: Option<Res<NetClock>>,
    mut client: ResMut<RenetClient>,
    mut state: ResMut<OwnershipClient>,
    mut bodies: Query<BodyWrite<'static>>,
    mut changed: MessageWriter<OwnershipChanged>,
    mut refused: MessageWriter<BidRefused>,
    mut silent: MessageWriter<CountedSilent>,
    mut closing: MessageWriter<RoomClosing>,
    mut ended: MessageWriter<ParticipantEnded>,
    mut commands: Commands,
) {
    let state = &mut *state;
    state.step_connection(&mut client, &mut ended);
    let mut decode = state.decode;
    let received = client.receive_msgs(&mut decode);
    state.decode = decode;
    if !received.is_empty() && state.machine.is_some() {
        state.last_heard = Some(clock.now());
    }
    state.end_if_server_silent(&mut client, clock.now(), &mut ended);
    let mut rx = Rx {
        now: clock.now(),
        relay_shift: relay_shift(client.rtt(), net.as_deref()),
        bodies: &mut bodies,
        changed: Vec::new(),
        refused: Vec::new(),
        silent: Vec::new(),
        closing: Vec::new(),
        commands: &mut commands,
    };
    for message in received {
        match message.message {
            Ok(message) => state.on_server_message(&mut client, &mut rx, message),
            Err(error) => state.on_undecodable(&error),
        }
    }
    changed.write_batch(rx.changed);
    refused.write_batch(rx.refused);
    silent.write_batch(rx.silent);
    closing.write_batch(rx.closing);
}

/// How far relayed states are moved when applied, in seconds (`Rx::relay_shift`): the
/// one-way latency of a link with round trip `rtt` (seconds) less the fixed physics step of
/// `net`, if the clock is fixed (none otherwise).
fn relay_shift(rtt: f64, net: Option<&NetClock>) -> f32 {
    let tick = match net {
        Some(NetClock::Fixed(step)) => *step,
        _ => Duration::ZERO,
    };
    one_way_latency(rtt).as_secs_f32() - tick.as_secs_f32()
}

impl OwnershipClient {
    /// The handshake's step this update: sends the `Hello` when it is due on a connected
    /// client, or, once the connection is closed, ends the session
    /// ([`on_disconnected`](Self::on_disconnected)).
    fn step_connection(
        &mut self,
        client: &mut RenetClient,
        ended: &mut MessageWriter<ParticipantEnded>,
    ) {
        if let Some(hello) = self.join.hello_to_send(client.is_connected()) {
            let hello = ClientMessage::Hello(hello.clone());
            if self.send(client, NetChannel::Control, &hello) {
                self.join.on_hello_sent();
            }
        } else if client.is_disconnected() && self.join.on_disconnected() {
            self.on_disconnected(client.disconnect_reason(), ended);
        }
    }

    /// One decoded message from the server, handed to its handler: the handshake's
    /// (`Welcome`, `Rejected`), a `Pong` for a `Ping`, ownership messages once joined; the
    /// rest (ownership messages before joining, session messages) is counted as ignored.
    fn on_server_message(&mut self, client: &mut RenetClient, rx: &mut Rx, message: ServerMessage) {
        match message {
            ServerMessage::Welcome(welcome) => self.on_welcome(welcome),
            ServerMessage::Rejected { reason } => self.on_rejected(reason),
            ServerMessage::Ping { t } => {
                self.send(client, NetChannel::Inputs, &ClientMessage::Pong { t });
            }
            ServerMessage::Ownership(msg) if self.machine.is_some() => {
                self.on_ownership(rx, msg);
            }
            // The answer to a keepalive.
            ServerMessage::Pong { .. } if self.machine.is_some() => {}
            ServerMessage::Ownership(_)
            | ServerMessage::Pong { .. }
            | ServerMessage::Session(_) => {
                self.stats.messages_ignored += 1;
            }
        }
    }

    /// The connection closed: the session ends — `Left` if this participant closed it, else
    /// `RoomEnded` (the server said why before) or `ServerGone` — unless it ended already.
    fn on_disconnected(
        &mut self,
        reason: Option<DisconnectReason>,
        ended: &mut MessageWriter<ParticipantEnded>,
    ) {
        if self.ended.is_some() {
            // Closed by `end_if_server_silent`: the end is told already.
            return;
        }
        let by_us = self.leaving || reason == Some(DisconnectReason::DisconnectedByClient);
        match (self.me(), by_us) {
            (_, true) => info!("participant: left"),
            // The end, with its reason, is logged by `end`.
            (Some(me), false) if self.closing.is_some() => {
                info!("participant: the entity server closed the connection ({me})");
            }
            (Some(me), false) => warn!("participant: connection lost ({me})"),
            (None, false) => warn!("participant: lost its connection before joining"),
        }
        if self.me().is_none() {
            return;
        }
        let end = if by_us {
            ParticipantEnd::Left
        } else {
            self.early_end()
        };
        self.end(end, ended);
    }

    /// Joined and nothing heard from the entity server for `server_silence_timeout`: the
    /// session ends (`ServerGone`, or `RoomEnded` if the server said the room ends) and the
    /// connection is closed.
    fn end_if_server_silent(
        &mut self,
        client: &mut RenetClient,
        now: Duration,
        ended: &mut MessageWriter<ParticipantEnded>,
    ) {
        if self.ended.is_some() || self.machine.is_none() {
            return;
        }
        let heard = *self.last_heard.get_or_insert(now);
        let silent_for = now.saturating_sub(heard);
        if silent_for < self.config.server_silence_timeout {
            return;
        }
        warn!(
            "participant: nothing heard from the entity server for {:.1} s: it is gone",
            silent_for.as_secs_f64()
        );
        let end = self.early_end();
        self.end(end, ended);
        client.disconnect();
    }

    /// Why the session ends when the server did not end it cleanly.
    fn early_end(&self) -> ParticipantEnd {
        match &self.closing {
            Some(reason) => ParticipantEnd::RoomEnded(reason.clone()),
            None => ParticipantEnd::ServerGone,
        }
    }

    /// Ends the session (once): kept, written as a Message; the state machine stops, so
    /// nothing more is sent.
    fn end(&mut self, end: ParticipantEnd, ended: &mut MessageWriter<ParticipantEnded>) {
        if self.ended.is_some() {
            return;
        }
        if end.is_early() {
            warn!("participant: session ended: {end}");
        }
        self.ended = Some(end.clone());
        self.machine = None;
        ended.write(ParticipantEnded { reason: end });
    }

    /// The server's `Welcome`: taken by the handshake once; the state machine starts with the
    /// id it gives.
    fn on_welcome(&mut self, welcome: Welcome) {
        if !self.join.on_welcome(welcome) {
            self.stats.messages_ignored += 1;
            return;
        }
        match self.join.status().clone() {
            JoinStatus::Joined(me) => match ParticipantOwnership::new(me, self.config.clone()) {
                Ok(machine) => {
                    info!("participant: joined as {me}");
                    self.machine = Some(machine);
                    // A new connection: the entity server remembers nothing of the last one.
                    self.link = DeltaLink::default();
                }
                Err(error) => error!("participant: {error}"),
            },
            status => error!("participant: not joined: {status:?}"),
        }
    }

    /// The server's `Rejected`: final before joining, ignored after.
    fn on_rejected(&mut self, reason: RejectReason) {
        if self.join.on_rejected(reason.clone()) {
            error!("participant: the entity server refused us: {reason:?}");
        } else {
            self.stats.messages_ignored += 1;
        }
    }

    /// A message that did not decode (counted in the decode stats); a `Welcome` of another
    /// version ends the handshake as rejected.
    fn on_undecodable(&mut self, error: &NetError) {
        if self.join.on_decode_error(error) {
            error!("participant: the entity server refused us: {error}");
        } else {
            debug!("participant: undecodable message: {error}");
        }
    }

    /// An ownership message from the server (once joined), handed to its handler.
    fn on_ownership(&mut self, rx: &mut Rx, msg: OwnershipServerMessage) {
        match msg {
            OwnershipServerMessage::Grant { body, priority } => self.on_grant(rx, body, priority),
            OwnershipServerMessage::Refused {
                body,
                reason,
                owner,
                priority,
            } => {
                let owner_now = OwnerRecord {
                    body,
                    owner,
                    priority,
                };
                self.on_refused(rx, reason, owner_now);
            }
            OwnershipServerMessage::OwnerChanged(record) => {
                self.stats.owner_changes_received += 1;
                self.on_owner_record(rx, record);
            }
            OwnershipServerMessage::Snapshot(records) => {
                self.stats.owner_tables_received += 1;
                for record in records {
                    self.on_owner_record(rx, record);
                }
            }
            OwnershipServerMessage::StateBatch(bytes) => self.on_relay_batch(rx, &bytes),
            OwnershipServerMessage::Reset { body, state } => self.on_reset(rx, body, state),
            OwnershipServerMessage::CountedSilent {
                silent_ms,
                bodies_cleared,
            } => self.on_counted_silent(rx, silent_ms, bodies_cleared),
            OwnershipServerMessage::Closing { reason } => {
                warn!("participant: the entity server's room ends ({reason})");
                self.closing = Some(reason.clone());
                rx.closing.push(RoomClosing { reason });
            }
        }
    }

    /// The server granted `body` to this participant at `priority`: the state machine and the
    /// [`SimulationOwner`] component take it and the body's next state goes out in full. A
    /// body this participant does not have is counted as unknown.
    fn on_grant(&mut self, rx: &mut Rx, body: BodyId, priority: u8) {
        self.stats.grants_received += 1;
        if !self.bodies.contains_key(&body) {
            self.stats.unknown_bodies += 1;
            return;
        }
        let Some(machine) = self.machine.as_mut() else {
            return;
        };
        let me = machine.me();
        let priority = Priority(priority);
        machine.on_grant(body, priority);
        if let Some(local) = self.bodies.get_mut(&body) {
            local.sent = None;
        }
        self.set_owner_component(rx, body, Some(me), priority);
    }

    /// The server heard nothing from this participant for `silent_ms` and counted it gone,
    /// clearing `bodies_cleared` bodies it owned: counted, logged and written as
    /// [`CountedSilent`].
    fn on_counted_silent(&mut self, rx: &mut Rx, silent_ms: u32, bodies_cleared: u32) {
        self.stats.counted_silent += 1;
        warn!(
            "participant: the entity server heard nothing from us for {silent_ms} ms and \
             counted us gone; {bodies_cleared} bodies we owned were cleared"
        );
        rx.silent.push(CountedSilent {
            silent_for: Duration::from_millis(u64::from(silent_ms)),
            bodies_cleared,
        });
    }

    /// The entity server respawned `body` ([respawns](crate::rules#respawns)): everything known
    /// of the old body goes — its owner, this participant's requests and timers, the relayed
    /// states applied and the delta baselines — and the body is put at rest at `state`, if the
    /// message has one. A body this participant does not have is ignored.
    fn on_reset(&mut self, rx: &mut Rx, body: BodyId, state: Option<PackedBodyState>) {
        let Some(local) = self.bodies.get_mut(&body) else {
            return;
        };
        self.stats.resets_received += 1;
        local.batch_last = None;
        local.sent = None;
        local.collided_at = None;
        local.rest = RestMemory::default();
        self.link.forget(body);
        if let Some(machine) = self.machine.as_mut() {
            machine.forget(body);
        }
        match state.as_ref().map(state_from_wire) {
            Some(Ok((_, _, state))) => self.apply_relayed(rx, body, &state.stopped()),
            Some(Err(error)) => {
                self.stats.relays_invalid += 1;
                debug!("participant: reset of {body} without its state: {error}");
            }
            None => {}
        }
        self.set_owner_component(rx, body, None, Priority::NONE);
    }

    /// A refusal from the server, naming the body's owner as it stands (`owner_now`): answers
    /// the outstanding request, corrects this participant's view of the owner, and is written
    /// as a [`BidRefused`].
    fn on_refused(&mut self, rx: &mut Rx, reason: RefusalReason, owner_now: OwnerRecord) {
        let body = owner_now.body;
        self.stats.refusals_received.add(reason);
        let Some(machine) = self.machine.as_mut() else {
            return;
        };
        let Some(entity) = self.bodies.get(&body).map(|local| local.entity) else {
            // Counted, but kept out of the state machine (a server could otherwise grow it
            // without bound).
            self.stats.unknown_bodies += 1;
            return;
        };
        let pending = machine.pending(body);
        // `NotOwner` never answers a bid: it refuses a state update (or a release) sent before
        // this participant heard it lost the body.
        let answers = pending.is_some()
            && !(reason == RefusalReason::NotOwner
                && matches!(pending, Some(PendingRequest::Bid(_))));
        if answers {
            let (owner, priority) = machine
                .owner(body)
                .map_or((None, Priority::NONE), |(o, p)| (Some(o), p));
            machine.on_refused(body, owner, priority, rx.now);
        }
        // The control channel is ordered, so the owner the refusal names is the newest this
        // participant has heard of.
        self.on_owner_record(rx, owner_now);
        let priority = if owner_now.owner.is_some() {
            Priority(owner_now.priority)
        } else {
            Priority::NONE
        };
        rx.refused.push(BidRefused {
            entity,
            body,
            reason,
            owner: owner_now.owner,
            priority,
            by: RefusedBy::EntityServer,
        });
    }

    /// The server's record of a body's owner: the state machine, [`SimulationOwner`] and
    /// [`OwnershipChanged`] follow it. A cleared body keeps its velocities: a release at rest
    /// comes with the owner's final, stopped state (ownership rule 12), and a body whose owner
    /// left keeps moving until someone takes it over (ownership rule 5).
    fn on_owner_record(&mut self, rx: &mut Rx, record: OwnerRecord) {
        let body = record.body;
        let owner = record.owner;
        let priority = if owner.is_some() {
            Priority(record.priority)
        } else {
            Priority::NONE
        };
        let Some(machine) = self.machine.as_mut() else {
            return;
        };
        let Some(local) = self.bodies.get_mut(&body) else {
            self.stats.unknown_bodies += 1;
            return;
        };
        machine.on_owner_changed(body, owner, priority);
        let is_mine = machine.owned_priority(body).is_some();
        if !is_mine {
            local.sent = None;
        }
        self.set_owner_component(rx, body, owner, priority);
    }

    /// A batch of relayed states ([rule 15](crate::rules#rule-15--one-state-batch-per-frame)):
    /// its acknowledgement and deltas are resolved by the [`DeltaLink`] (rule 20), then each
    /// body's state is applied if the batch is newer than the last one applied to that body; a
    /// batch that does not decode is dropped whole and counted, a delta that cannot be applied
    /// is counted and its body left as it is.
    fn on_relay_batch(&mut self, rx: &mut Rx, bytes: &[u8]) {
        self.stats.state_batches_received += 1;
        // The `ServerMessage` tags and the length prefix around the batch.
        self.stats.state_bytes_received += bytes.len() as u64 + 2 + varint_len(bytes.len());
        let bodies = &self.bodies;
        let received = match self.link.receive(bytes, |b| bodies.contains_key(&b)) {
            Ok(received) => received,
            Err(error) => {
                self.stats.state_batches_invalid += 1;
                debug!("participant: state batch dropped: {error}");
                return;
            }
        };
        self.stats.deltas_rejected += received.deltas_rejected as u64;
        self.stats.relays_received += received.deltas_rejected as u64;
        if let Some(rejection) = received.ack_rejected {
            self.stats.acks_rejected += 1;
            debug!("participant: {rejection}");
        }
        for (body, state) in received.states {
            self.stats.relays_received += 1;
            let Some(local) = self.bodies.get_mut(&body).filter(|b| b.kind.is_ownable()) else {
                self.stats.unknown_bodies += 1;
                continue;
            };
            if self
                .machine
                .as_ref()
                .is_some_and(|m| m.owned_priority(body).is_some())
            {
                self.stats.relays_ignored_owned += 1;
                continue;
            }
            if local
                .batch_last
                .is_some_and(|last| !is_newer_batch(received.seq, last))
            {
                self.stats.relays_stale += 1;
                continue;
            }
            local.batch_last = Some(received.seq);
            self.apply_relayed(rx, body, &state);
        }
    }

    /// Writes a relayed state, moved on by its age ([relayed states](crate::rules#relayed-states-move-on-by-their-age)),
    /// to the body's `Transform` and `Velocity`.
    fn apply_relayed(&mut self, rx: &mut Rx, body: BodyId, state: &BodyState) {
        let Some(local) = self.bodies.get_mut(&body) else {
            return;
        };
        let Ok((mut transform, mut velocity, _)) = rx.bodies.get_mut(local.entity) else {
            self.stats.unknown_bodies += 1;
            return;
        };
        // Moved on by its age since the server sent it (the server moved it on to then).
        let state = state.moved_by(rx.relay_shift);
        state.write_to(&mut transform, velocity.as_deref_mut());
        local.rest.anchor = Some((state.position, state.rotation));
        self.stats.relays_applied += 1;
    }

    /// Sets the body's [`SimulationOwner`] and writes [`OwnershipChanged`] if it changed.
    fn set_owner_component(
        &mut self,
        rx: &mut Rx,
        body: BodyId,
        owner: Option<ParticipantId>,
        priority: Priority,
    ) {
        let Some(entity) = self.bodies.get(&body).map(|b| b.entity) else {
            return;
        };
        let new = SimulationOwner { owner, priority };
        let changed = match rx.bodies.get_mut(entity) {
            Ok((_, _, Some(mut current))) => {
                let changed = *current != new;
                if changed {
                    *current = new;
                }
                changed
            }
            _ => {
                rx.commands.entity(entity).insert(new);
                true
            }
        };
        if changed {
            rx.changed.push(OwnershipChanged {
                entity,
                body,
                owner,
                priority,
            });
        }
    }
}

/// The body components the observe system reads (and the velocity it may zero).
type BodyRead<'a> = (
    Entity,
    &'a BodyNetId,
    &'a RigidBody,
    &'a Transform,
    Option<&'a mut Velocity>,
    Option<&'a Sleeping>,
    (
        Has<Poked>,
        Has<Held>,
        Has<Uninterested>,
        Has<ParticipantAvatar>,
    ),
    Option<&'a OwnershipBid>,
);

/// What the observe system reads and writes in the world: the bodies, the avatars, the pokes
/// to clear and Rapier's contacts.
#[derive(SystemParam)]
pub(crate) struct Scene<'w, 's> {
    bodies: Query<'w, 's, BodyRead<'static>, With<Ownable>>,
    avatars: Query<'w, 's, Entity, With<ParticipantAvatar>>,
    poked: Query<'w, 's, Entity, With<Poked>>,
    rapier: ReadRapierContext<'w, 's>,
    commands: Commands<'w, 's>,
    refused: MessageWriter<'w, BidRefused>,
}

/// One body as seen this frame.
struct Seen {
    entity: Entity,
    body: BodyId,
    state: BodyState,
    moving: bool,
    at_rest: bool,
    displaced: bool,
    poked: bool,
    held: bool,
    interested: bool,
    avatar: bool,
    bid: Option<Priority>,
}

/// Contacts that became active this frame (a collision: in contact, and the touched body
/// moving), as the rules need them.
#[derive(Default)]
struct Collisions {
    /// Bodies the avatar set moving ([ownership rule 9](crate::rules)).
    touched: HashSet<Entity>,
    /// Bodies a moving owned body set moving, with the highest owned priority among the hitters
    /// ([ownership rule 11](crate::rules)).
    hits: HashMap<Entity, Priority>,
}

/// `PostUpdate`, after Rapier: observations → [rules 6–14](crate::rules) → messages; then state
/// updates for owned bodies.
pub(crate) fn observe_and_send(
    clock: Res<OwnershipClock>,
    mut client: ResMut<RenetClient>,
    mut state: ResMut<OwnershipClient>,
    mut scene: Scene,
) {
    for entity in &scene.poked {
        scene.commands.entity(entity).remove::<Poked>();
    }
    let state = &mut *state;
    if state.machine.is_none() {
        // Not joined: the owner table of the `Welcome` is the truth, nothing to tell.
        state.respawned.clear();
    }
    if state.machine.is_none() || !client.is_connected() {
        return;
    }
    let now = clock.now();
    let seen = state.observe(&mut scene.bodies, now);
    state.send_respawns(&mut client, &seen);
    let collisions = state.collisions(&scene.rapier, &scene.avatars, &seen);
    state.remember_collisions(&seen, &collisions, now);
    let pending_before = state.pending_requests(&seen);
    let actions = state.run_rules(&seen, &collisions, now);
    let refused = state.send_actions(
        &mut client,
        &mut scene.bodies,
        &seen,
        actions,
        &pending_before,
        now,
    );
    scene.refused.write_batch(refused);
    state.mirror_bids(&mut scene.commands, &seen);
    state.send_states(&mut client, &seen, now);
    state.keep_alive(&mut client, now);
}

impl OwnershipClient {
    /// Last step: a `Ping` when nothing went out for
    /// [`keepalive_interval`](OwnershipConfig::keepalive_interval), so the entity server keeps
    /// hearing from an idle participant ([ownership rule 5](crate::rules)).
    fn keep_alive(&mut self, client: &mut RenetClient, now: Duration) {
        let interval = self.config.keepalive_interval();
        let due = self
            .last_sent_at
            .is_none_or(|at| now.saturating_sub(at) >= interval);
        // A participant that only sends states may hear nothing back (no other participant,
        // no deltas to acknowledge): it asks, so a live server is heard from.
        let unheard = self
            .last_heard
            .is_some_and(|at| now.saturating_sub(at) >= interval)
            && self
                .last_ping_at
                .is_none_or(|at| now.saturating_sub(at) >= interval);
        if (!self.sent_since_check && due) || unheard {
            let ping = ClientMessage::Ping {
                t: simsync_net::millis_u32(now),
            };
            if self.send(client, NetChannel::Inputs, &ping) {
                self.stats.keepalives_sent += 1;
                self.last_ping_at = Some(now);
            }
        }
        if std::mem::take(&mut self.sent_since_check) {
            self.last_sent_at = Some(now);
        }
    }

    /// Step 1: what each registered, dynamic body is doing ([`classify`]).
    fn observe(
        &mut self,
        bodies: &mut Query<BodyRead<'static>, With<Ownable>>,
        now: Duration,
    ) -> Vec<Seen> {
        let mut seen = Vec::with_capacity(self.bodies.len());
        for (entity, id, rigid_body, transform, velocity, sleeping, flags, bid) in bodies.iter() {
            let (poked, held, uninterested, avatar) = flags;
            let body = id.0;
            let Some(local) = self.bodies.get_mut(&body).filter(|b| b.entity == entity) else {
                continue;
            };
            local.kind = BodyKind::from(*rigid_body);
            if !local.kind.is_ownable() {
                continue;
            }
            let (linear, angular) =
                velocity.map_or((Vec3::ZERO, Vec3::ZERO), |v| (v.linear, v.angular));
            let state = BodyState {
                position: transform.translation,
                rotation: transform.rotation,
                linear_velocity: linear,
                angular_velocity: angular,
            };
            let asleep = sleeping.is_some_and(|s| s.sleeping);
            let activity = classify(&self.activity, &state, asleep, local.rest, now);
            local.rest = activity.memory;
            seen.push(Seen {
                entity,
                body,
                state,
                moving: activity.moving,
                at_rest: activity.at_rest,
                displaced: activity.displaced,
                poked,
                held: held || avatar,
                interested: !uninterested,
                avatar,
                bid: bid.map(|b| b.priority),
            });
        }
        seen
    }

    /// Step 2: bodies the avatar sets moving ([rule 9](crate::rules)), bodies a moving owned
    /// body sets moving ([rule 11](crate::rules)). Both are collisions — events — so a pair
    /// counts on the frame it becomes *active* (in contact, and the touched body moving), not
    /// on every frame it stays so, and never for a body that stays at rest: otherwise a body
    /// resting against an avatar or an owned body would be bid for, granted, found at rest and
    /// released ([rule 12](crate::rules)) over and over. Remembers this frame's active pairs.
    fn collisions(
        &mut self,
        rapier: &ReadRapierContext,
        avatars: &Query<Entity, With<ParticipantAvatar>>,
        seen: &[Seen],
    ) -> Collisions {
        let mut found = Collisions::default();
        let mut active: HashSet<(Entity, Entity)> = HashSet::default();
        if let (Ok(ctx), Some(machine)) = (rapier.single(), self.machine.as_ref()) {
            let moving: HashMap<Entity, bool> = seen.iter().map(|s| (s.entity, s.moving)).collect();
            let is_moving = |e: Entity| moving.get(&e).copied().unwrap_or(false);
            let last_frame = &self.contacts;
            for avatar in avatars {
                for_each_contact(&ctx, avatar, |other| {
                    if is_moving(other) {
                        active.insert((avatar, other));
                        if !last_frame.contains(&(avatar, other)) {
                            found.touched.insert(other);
                        }
                    }
                });
            }
            for s in seen.iter().filter(|s| s.moving) {
                let Some(priority) = machine.owned_priority(s.body) else {
                    continue;
                };
                let hitter = s.entity;
                for_each_contact(&ctx, hitter, |other| {
                    if !is_moving(other) {
                        return;
                    }
                    active.insert((hitter, other));
                    if !last_frame.contains(&(hitter, other)) {
                        let best = found.hits.entry(other).or_insert(priority);
                        *best = (*best).max(priority);
                    }
                });
            }
        }
        self.contacts = active;
        found
    }

    /// The requests outstanding before the rules run, to tell resends from new requests.
    fn pending_requests(&self, seen: &[Seen]) -> HashMap<BodyId, PendingRequest> {
        let Some(machine) = self.machine.as_ref() else {
            return HashMap::default();
        };
        seen.iter()
            .filter_map(|s| machine.pending(s.body).map(|p| (s.body, p)))
            .collect()
    }

    /// Step 3: [rules 6–14](crate::rules) on this frame's observations.
    fn run_rules(&mut self, seen: &[Seen], collisions: &Collisions, now: Duration) -> Vec<Action> {
        let Some(machine) = self.machine.as_mut() else {
            return Vec::new();
        };
        let observations: Vec<BodyObservation> = seen
            .iter()
            .map(|s| {
                let owned = machine.owned_priority(s.body).is_some();
                BodyObservation {
                    body: s.body,
                    active: !s.at_rest || (!owned && s.displaced),
                    touched_by_avatar: !s.avatar && collisions.touched.contains(&s.entity),
                    script_edited: s.poked,
                    held: s.held,
                    hit_by_owned: collisions.hits.get(&s.entity).copied(),
                    interested: s.interested,
                }
            })
            .collect();
        machine.tick(now, observations)
    }

    /// Step 4: the rules' actions as messages (bids, priority changes, releases preceded by
    /// the final state) and zeroed velocities; returns the bids refused on the spot, as
    /// [`BidRefused`].
    fn send_actions(
        &mut self,
        client: &mut RenetClient,
        bodies: &mut Query<BodyRead<'static>, With<Ownable>>,
        seen: &[Seen],
        actions: Vec<Action>,
        pending_before: &HashMap<BodyId, PendingRequest>,
        now: Duration,
    ) -> Vec<BidRefused> {
        let index: HashMap<BodyId, usize> =
            seen.iter().enumerate().map(|(i, s)| (s.body, i)).collect();
        let mut refused = Vec::new();
        let mut bids = Vec::new();
        for action in actions {
            match action {
                Action::RefuseLocally { body, reason, .. } => {
                    let Some(&i) = index.get(&body) else { continue };
                    refused.push(self.refuse_locally(seen[i].entity, body, reason));
                }
                Action::SendBid { body, priority } => {
                    bids.push((body, PendingRequest::Bid(priority)));
                }
                Action::SendPriorityChange { body, priority } => {
                    bids.push((body, PendingRequest::PriorityChange(priority)));
                }
                Action::SendRelease { body } => {
                    if let Some(s) = index.get(&body).map(|&i| &seen[i]) {
                        self.send_release(client, s, now);
                    }
                }
                Action::ZeroVelocity { body } => {
                    if let Some(&i) = index.get(&body)
                        && let Ok((.., Some(mut velocity), _, _, _)) =
                            bodies.get_mut(seen[i].entity)
                    {
                        *velocity = Velocity::zero();
                        self.stats.velocities_zeroed += 1;
                    }
                }
            }
        }
        self.send_bids(client, &bids, pending_before);
        refused
    }

    /// A bid for `body` (of `entity`) the state machine refused on the spot for `reason`:
    /// counted, and the [`BidRefused`] to write, with the body's owner as known here.
    fn refuse_locally(
        &mut self,
        entity: Entity,
        body: BodyId,
        reason: RefusalReason,
    ) -> BidRefused {
        self.stats.refusals_local.add(reason);
        let (owner, priority) = self
            .owner(body)
            .map_or((None, Priority::NONE), |(o, p)| (Some(o), p));
        BidRefused {
            entity,
            body,
            reason,
            owner,
            priority,
            by: RefusedBy::Participant,
        }
    }

    /// Releases the body seen as `s` ([rule 12](crate::rules#rule-12--release-at-rest)): its
    /// final state (zero velocities) first, on the same reliable channel so it reaches the
    /// server before the `Release`, and the body's rest anchor set there.
    fn send_release(&mut self, client: &mut RenetClient, s: &Seen, now: Duration) {
        let body = s.body;
        let last = s.state.stopped();
        if let Some(local) = self.bodies.get_mut(&body) {
            local.rest.anchor = Some((last.position, last.rotation));
        }
        self.send_state(client, body, &last, now, NetChannel::Control);
        let msg = ClientMessage::Ownership(OwnershipClientMessage::Release { body });
        if self.send(client, NetChannel::Control, &msg) {
            self.stats.releases_sent += 1;
        }
    }

    /// Sends this frame's bids and priority changes (both travel as bids) as one `Bids`
    /// message, or one per [`MAX_BIDS_PER_MESSAGE`], and counts them, a request outstanding
    /// before the rules ran as a resend ([rate limits](crate::rules#rate-limits)).
    fn send_bids(
        &mut self,
        client: &mut RenetClient,
        bids: &[(BodyId, PendingRequest)],
        pending_before: &HashMap<BodyId, PendingRequest>,
    ) {
        for chunk in bids.chunks(MAX_BIDS_PER_MESSAGE) {
            let list: Vec<BidRequest> = chunk
                .iter()
                .filter_map(|(body, request)| match request {
                    PendingRequest::Bid(p) | PendingRequest::PriorityChange(p) => {
                        Some(BidRequest {
                            body: *body,
                            priority: p.0,
                        })
                    }
                    PendingRequest::Release => None,
                })
                .collect();
            if list.is_empty() {
                continue;
            }
            let msg = ClientMessage::Ownership(OwnershipClientMessage::Bids(list));
            if !self.send(client, NetChannel::Control, &msg) {
                continue;
            }
            self.stats.bid_messages_sent += 1;
            for (body, request) in chunk {
                let change = matches!(request, PendingRequest::PriorityChange(_));
                self.stats.bids_sent += 1;
                self.stats.priority_changes_sent += u64::from(change);
                self.stats.bid_resends += u64::from(pending_before.get(body) == Some(request));
            }
        }
    }

    /// Tells the entity server of the bodies respawned here under an id they had, at rest
    /// where they are now ([respawns](crate::rules#respawns)).
    fn send_respawns(&mut self, client: &mut RenetClient, seen: &[Seen]) {
        for body in std::mem::take(&mut self.respawned) {
            let Some(s) = seen.iter().find(|s| s.body == body) else {
                continue;
            };
            let state = wire::state_to_wire(body, Sequence::default(), &s.state.stopped());
            let msg = ClientMessage::Ownership(OwnershipClientMessage::Respawn(state));
            if self.send(client, NetChannel::Control, &msg) {
                self.stats.respawns_sent += 1;
            }
        }
    }

    /// Step 5: the [`OwnershipBid`] component mirrors the outstanding bid.
    fn mirror_bids(&self, commands: &mut Commands, seen: &[Seen]) {
        let Some(machine) = self.machine.as_ref() else {
            return;
        };
        for s in seen {
            let wanted = match machine.pending(s.body) {
                Some(PendingRequest::Bid(p)) => Some(p),
                _ => None,
            };
            if wanted == s.bid {
                continue;
            }
            match wanted {
                Some(priority) => {
                    commands.entity(s.entity).insert(OwnershipBid { priority });
                }
                None => {
                    commands.entity(s.entity).remove::<OwnershipBid>();
                }
            }
        }
    }

    /// Remembers when bodies collided, for their send weight.
    fn remember_collisions(&mut self, seen: &[Seen], collisions: &Collisions, now: Duration) {
        for s in seen {
            if (collisions.touched.contains(&s.entity) || collisions.hits.contains_key(&s.entity))
                && let Some(local) = self.bodies.get_mut(&s.body)
            {
                local.collided_at = Some(now);
            }
        }
    }

    /// The avatar's position if the next batch should carry it as the interest centre: it
    /// moved more than [`FOCUS_STEP`] since it was last sent, or a heartbeat interval passed
    /// ([rule 19](crate::rules#rule-19--interest-radius)).
    fn focus_due(&self, seen: &[Seen], now: Duration) -> Option<Vec3> {
        let at = seen.iter().find(|s| s.avatar)?.state.position;
        let due = self.focus_sent.is_none_or(|(sent, when)| {
            sent.distance(at) > FOCUS_STEP
                || now.saturating_sub(when) >= self.config.heartbeat_interval
        });
        due.then_some(at)
    }

    /// Step 6: one state batch for the owned bodies (not being released) whose state drifted
    /// past the thresholds or whose heartbeat is due ([`should_send`]), as many as the upload
    /// budget allows, most urgent first ([rules 15–18](crate::rules#rule-15--one-state-batch-per-frame)).
    fn send_states(&mut self, client: &mut RenetClient, seen: &[Seen], now: Duration) {
        let dt = self
            .last_send
            .map_or(0.0, |t| now.saturating_sub(t).as_secs_f64());
        self.last_send = Some(now);
        self.budget.refill(dt);
        let focus = self.focus_due(seen, now);
        let (candidates, states) = self.candidates(seen, now);
        if candidates.is_empty() {
            self.deferred_now = 0;
            self.send_ack_if_due(client, focus, now);
            return;
        }
        let room = entry_room(self.budget.available(), focus, candidates.len());
        let selection = self.accumulator.select(&candidates, dt as f32, room);
        self.deferred_now = selection.deferred;
        self.stats.bodies_deferred += selection.deferred as u64;
        if selection.chosen.is_empty() {
            self.send_ack_if_due(client, focus, now);
            return;
        }
        let bodies = chosen_states(&selection.chosen, &states);
        self.send_batch(client, focus, bodies, now, NetChannel::State);
    }

    /// A batch without bodies (with the interest centre if due) when relay batches arrived
    /// since this participant last acknowledged and none of its batches went out for
    /// [`ACK_INTERVAL`]: a participant that owns nothing still acknowledges
    /// ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)). Only with delta
    /// encoding on.
    fn send_ack_if_due(&mut self, client: &mut RenetClient, focus: Option<Vec3>, now: Duration) {
        let due = self.budget_config.delta_encoding
            && self.link.acks.fresh()
            && self
                .last_batch_at
                .is_none_or(|at| now.saturating_sub(at) >= ACK_INTERVAL);
        if due && self.send_batch(client, focus, Vec::new(), now, NetChannel::State) {
            self.stats.ack_batches_sent += 1;
        }
    }

    /// The owned bodies (not being released) due for an update ([`should_send`]), weighed
    /// ([`send_weight`]; an overdue heartbeat is urgent), with their states.
    fn candidates(
        &self,
        seen: &[Seen],
        now: Duration,
    ) -> (Vec<Candidate>, HashMap<BodyId, BodyState>) {
        let mut candidates = Vec::new();
        let mut states: HashMap<BodyId, BodyState> = HashMap::default();
        let Some(machine) = self.machine.as_ref() else {
            return (candidates, states);
        };
        let me = machine.me();
        let others: Vec<Vec3> = seen
            .iter()
            .filter(|s| {
                machine
                    .owner(s.body)
                    .is_some_and(|(o, p)| o != me && p >= self.config.grab_priority)
            })
            .map(|s| s.state.position)
            .collect();
        for s in seen {
            if machine.owned_priority(s.body).is_none()
                || machine.pending(s.body) == Some(PendingRequest::Release)
            {
                continue;
            }
            let Some(local) = self.bodies.get(&s.body) else {
                continue;
            };
            if let Some(candidate) = self.candidate(s, local, &others, now) {
                candidates.push(candidate);
                states.insert(s.body, s.state);
            }
        }
        (candidates, states)
    }

    /// The owned body seen as `s` (its local record `local`) as a candidate for this frame's
    /// batch, if it is due ([`should_send`]; never sent yet: due, at the largest error),
    /// weighed by its predicted error, a recent collision and the distance to the nearest of
    /// the bodies others hold (`others`), urgent when its heartbeat is overdue.
    fn candidate(
        &self,
        s: &Seen,
        local: &LocalBody,
        others: &[Vec3],
        now: Duration,
    ) -> Option<Candidate> {
        let error = match local.sent {
            None => 8.0,
            Some((last, at)) => {
                if !should_send(&last, &s.state, now, at, &self.config) {
                    return None;
                }
                predicted_error(&last, &s.state, now.saturating_sub(at), &self.config)
            }
        };
        let recent = local
            .collided_at
            .is_some_and(|t| now.saturating_sub(t) < RECENT_COLLISION);
        // An overdue heartbeat goes first, so the budget never lets the server expire
        // this owner (rule 5).
        let overdue = local.sent.is_some_and(|(_, at)| {
            now.saturating_sub(at) >= self.config.heartbeat_interval + HEARTBEAT_GRACE
        });
        Some(Candidate {
            body: s.body,
            weight: send_weight(error, recent, nearest(s.state.position, others)),
            urgent: overdue,
            size: self.link.entry_size(
                s.body,
                &s.state,
                self.batch_seq.wrapping_add(1),
                self.budget_config.delta_encoding,
            ),
        })
    }

    /// Sends `current` as the owner's final state for `body` (before a release, rule 12): a
    /// one-body batch on `channel`, charged to the budget whatever its balance.
    fn send_state(
        &mut self,
        client: &mut RenetClient,
        body: BodyId,
        current: &BodyState,
        now: Duration,
        channel: NetChannel,
    ) {
        if self.bodies.contains_key(&body) {
            self.send_batch(client, None, vec![(body, *current)], now, channel);
        }
    }

    /// Encodes `bodies` (ids increasing) as this participant's next state batch — with its
    /// acknowledgement and deltas where they pay, when delta encoding is on (rule 20) — and
    /// sends it on `channel`; records what receivers get as each body's last sent state.
    /// Returns whether it went out.
    fn send_batch(
        &mut self,
        client: &mut RenetClient,
        focus: Option<Vec3>,
        bodies: Vec<(BodyId, BodyState)>,
        now: Duration,
        channel: NetChannel,
    ) -> bool {
        self.batch_seq = self.batch_seq.wrapping_add(1);
        let batch = StateBatch {
            seq: self.batch_seq,
            focus,
            bodies,
        };
        let encoded = self
            .link
            .send(&batch, self.budget_config.delta_encoding)
            .and_then(|wire| Ok((wire.encode()?, wire.deltas())));
        let (bytes, deltas) = match encoded {
            Ok(encoded) => encoded,
            Err(error) => {
                warn!("participant: state batch not sent: {error}");
                return false;
            }
        };
        let msg = ClientMessage::Ownership(OwnershipClientMessage::StateBatch(bytes));
        let size = simsync_net::encode(&msg).map_or(0, |b| b.len());
        if !self.budget.spend(size) {
            self.budget.charge(size);
        }
        for (body, state) in &batch.bodies {
            if let Some(local) = self.bodies.get_mut(body) {
                local.out_seq = local.out_seq.next();
                local.sent = Some((quantize(state), now));
            }
        }
        if !self.send(client, channel, &msg) {
            return false;
        }
        if let Some(focus) = batch.focus {
            self.focus_sent = Some((focus, now));
        }
        self.last_batch_at = Some(now);
        self.stats.state_batches_sent += 1;
        self.stats.state_updates_sent += batch.bodies.len() as u64;
        self.stats.delta_entries_sent += deltas as u64;
        self.stats.state_update_bytes += size as u64;
        true
    }
}
/// How far the avatar moves before its batches carry the interest centre again, m.
const FOCUS_STEP: f32 = 0.5;
/// How late a heartbeat may be before it is urgent.
const HEARTBEAT_GRACE: Duration = Duration::from_millis(250);
/// How long a collision adds to a body's send weight.
const RECENT_COLLISION: Duration = Duration::from_millis(250);
/// Calls `on_contact` with every other body (the rigid body of the other collider, or the
/// collider itself without one) in active contact with a collider of `body` in Rapier's world.
fn for_each_contact(ctx: &RapierContext, body: Entity, mut on_contact: impl FnMut(Entity)) {
    for collider in ctx.colliders.rigid_body_colliders(body, ctx.rigidbody_set) {
        for pair in ctx.contact_pairs_with(collider) {
            if !pair.has_any_active_contact() {
                continue;
            }
            let other = if pair.collider1() == Some(collider) {
                pair.collider2()
            } else {
                pair.collider1()
            };
            let Some(other) = other else { continue };
            let other_body = ctx
                .colliders
                .collider_parent(ctx.rigidbody_set, other)
                .unwrap_or(other);
            if other_body != body {
                on_contact(other_body);
            }
        }
    }
}
