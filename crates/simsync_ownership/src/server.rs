//! The entity server's systems and state ([`EntityServer`]): ownership arbitration ([rules 1–5
//! and 7](crate::rules), by the [`OwnershipArbiter`]) and the state relay to participants, over
//! a `RenetServer`.
//!
//! # Identity
//! A participant's [`ParticipantId`] is assigned when its connection sends a `Hello` with the
//! ownership protocol, by `simsync_net`'s one handshake ([`ServerHandshake`], answered by a
//! `Welcome` carrying the id or `Rejected`), and every later message on that connection is
//! attributed to that id. No message carries its sender's id, so a participant
//! cannot act for another: a release or state update about someone else's body is refused as
//! `NotOwner` (ownership rule 4). Messages from a connection that has not joined are dropped and
//! counted.
//!
//! # What the server sends
//! - to the bidder: `Grant` or `Refused` (the reason, and the body's owner and priority) for
//!   every bid; `Refused` for every refused release or state update;
//! - to every participant (control channel, reliable and ordered), at the end of each update:
//!   one `OwnerChanged` per body whose owner or priority changed during it, the latest
//!   ([coalescing](crate::rules#coalescing)); for a body that ended the update unowned after its
//!   owner released it at rest (ownership rule 12), also its final state with **zero
//!   velocities** in a `StateBatch` on the control channel. A body whose owner went silent or
//!   disconnected (ownership rule 5) is only announced unowned: it keeps moving on every
//!   participant until someone takes it over;
//! - to a participant whose control channel overflowed: the full owner table as `Snapshot`s,
//!   once it fits ([resync](crate::rules#resync));
//! - to a participant that joins: the owned bodies as a `Snapshot`, then the last state of
//!   every body that is owned or has moved since it was registered (control channel), so a late
//!   joiner starts from the truth;
//! - to a participant counted gone for silence, once it is heard from again: `CountedSilent`;
//! - to every participant but the owner: the accepted owner states, in one `StateBatch` per
//!   participant and update within its relay budget.
//!
//! Bids, releases and state updates over their connection's
//! [`EntityServerLimits`](crate::EntityServerLimits) are dropped unanswered and counted
//! ([rate limits](crate::rules#rate-limits)).
//!
//! # Silent participants
//! A joined participant the server hears nothing at all from for `participant_silence_timeout`
//! (2 s by default, as the relay's silence timeout) counts as gone: every body it owns is
//! cleared and announced unowned, exactly as when its connection closes (ownership rule 5:
//! orphans keep flying), [`EntityServerStats::participants_silent`] counts it and a
//! [`ParticipantGone`] is written. Its connection stays open (renet's netcode closes it after
//! its own 15 s timeout, over UDP) and the server keeps sending to it, so a participant whose
//! uplink alone failed stays up to date. Its next message makes it a participant again under
//! the same id (`participants_returned`, [`ParticipantReturned`]), which is sent a
//! `CountedSilent` first. Participants send a keepalive when they have sent nothing for an
//! eighth of the timeout, so only lost packets or a stalled participant are silent.
//!
//! Relayed batches are numbered per receiver, so a participant can drop any stale or duplicate
//! relay of a body by the batch it came in, across owner changes. Incoming states are filtered
//! per body and owner: a state from a batch not newer than the last one accepted from that
//! owner for that body is dropped.

use core::time::Duration;
use std::collections::BTreeSet;

use bevy::platform::collections::{HashMap, HashSet};
use bevy::prelude::*;
use bevy_rapier3d::prelude::{RigidBody, Sleeping, Velocity};
use simsync_net::bevy_renet::RenetServer;
use simsync_net::renet::ClientId;
use simsync_net::{
    BidRequest, ClientMessage, DecodeStats, MAX_BIDS_PER_MESSAGE, MAX_MESSAGE_BYTES, NetChannel,
    NetClock, NetError, OwnerRecord, OwnershipClientMessage, OwnershipServerMessage,
    PackedBodyState, Protocols, RefusalReason, RejectReason, ServerHandshake, ServerMessage,
    ServerNetExt, encode, millis_u32,
};

use crate::activity::ActivityConfig;
use crate::arbiter::{OwnershipArbiter, Refusal, RefusalCounts};
use crate::baseline::Received;
use crate::batch::{BatchError, StateBatch, is_newer_batch, varint_len};
use crate::body::{BodyKind, BodyState, one_way_latency};
use crate::body_map::BodyMap;
use crate::budget::StateBudgetConfig;
use crate::clock::OwnershipClock;
use crate::coalesce::PendingOwners;
use crate::components::{BodyNetId, OwnershipLock, SimulationOwner};
use crate::config::OwnershipConfig;
use crate::error::OwnershipError;
use crate::host::{
    HostAction, HostObservation, PhysicsHost, PhysicsHostConfig, Reach, StateLimits,
};
use crate::limits::{ConnectionLimits, Dropped, EntityServerLimits, Limited, RateLimitedCounts};
use crate::messages::{GoneCause, OwnershipChanged, ParticipantGone, ParticipantReturned};
use crate::priority::{BodyId, ParticipantId, Priority};
use crate::relay::{PreparedStates, RelayPass, RelayQueue};
use crate::send_policy::Sequence;
use crate::traffic::TrafficTotals;
use crate::wire;

/// What the entity server has done since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EntityServerStats {
    /// Connections that joined (a `Welcome` was sent).
    pub participants_joined: u64,
    /// Joined participants whose connection closed (or who said `Goodbye`).
    pub participants_left: u64,
    /// `Hello`s answered with `Rejected` (version, protocols, joined twice, ids used up).
    pub hellos_rejected: u64,
    /// Messages from connections that have not joined, and messages of other protocols:
    /// dropped.
    pub messages_ignored: u64,
    /// Bids received within the connection's rate limit (including an owner's priority
    /// changes, which travel as bids).
    pub bids_received: u64,
    /// Bids granted (ownership rules 2, 3; a VOLUNTEER granted as RECRUIT, rule 7) and
    /// priority changes accepted (rule 4).
    pub bids_granted: u64,
    /// Bids and priority changes refused, per reason (rules 1–4, priority range).
    pub bids_refused: RefusalCounts,
    /// `Bids` lists longer than [`MAX_BIDS_PER_MESSAGE`](simsync_net::MAX_BIDS_PER_MESSAGE):
    /// dropped whole, unanswered.
    pub bid_lists_invalid: u64,
    /// Bodies respawned under their id, by the server's own respawn or a participant's
    /// accepted `Respawn`; each was announced to every participant as a `Reset`
    /// ([respawns](crate::rules#respawns)).
    pub resets_sent: u64,
    /// Participants' `Respawn`s refused (another participant owns the body, it is locked,
    /// unknown or not dynamic), per reason; the sender gets a `Refused`.
    pub respawns_refused: RefusalCounts,
    /// Releases received within the connection's rate limit.
    pub releases_received: u64,
    /// Releases accepted (ownership rule 12).
    pub releases_granted: u64,
    /// Releases refused, per reason (`NotOwner`: rule 4; `UnknownBody`).
    pub releases_refused: RefusalCounts,
    /// State updates received within the connection's rate limit.
    pub state_updates_received: u64,
    /// State updates from the owner accepted for the relay (each counted once, however many
    /// it goes to). The relay batches carry each body's latest state when its turn comes
    /// ([rules 15, 18](crate::rules#rule-15--one-state-batch-per-frame)), so two updates of one
    /// body in one update reach receivers as one.
    pub state_updates_relayed: u64,
    /// State updates from the owner dropped because they were not newer than the last one
    /// accepted (duplicates, reordered or stale).
    pub state_updates_stale: u64,
    /// State updates refused, per reason (`NotOwner`: only the owner's state is relayed;
    /// `UnknownBody`).
    pub state_updates_refused: RefusalCounts,
    /// State updates with a sequence number or values out of range (see
    /// [`state_from_wire`](crate::state_from_wire)): dropped.
    pub state_updates_invalid: u64,
    /// Zero-velocity states broadcast when a body was released at rest (rule 12).
    pub zero_states_sent: u64,
    /// Bodies left unowned by a silent or disconnected owner (rule 5), announced without a
    /// state: they keep moving until someone takes them over. The sum of `expiries`,
    /// `disconnect_clears` and `silence_clears`.
    pub orphaned: u64,
    /// Owners cleared after `owner_silence_expiry` without an update about their body
    /// (ownership rule 5).
    pub expiries: u64,
    /// Owners cleared because their connection closed (ownership rule 5).
    pub disconnect_clears: u64,
    /// Joined participants counted as gone because nothing at all came from them for
    /// `participant_silence_timeout` (their connection still open).
    pub participants_silent: u64,
    /// Of those, participants heard from again (each told so with a `CountedSilent`).
    pub participants_returned: u64,
    /// Owners cleared because their participant went silent (ownership rule 5).
    pub silence_clears: u64,
    /// Messages that could not be sent (channel full, client gone). A full control channel
    /// also marks the participant for resync (`resyncs_marked`).
    pub send_errors: u64,
    /// Bids, releases and state updates dropped for going over their connection's
    /// [`EntityServerLimits`](crate::EntityServerLimits), per kind.
    pub rate_limited: RateLimitedCounts,
    /// Owner records broadcast: at most one per body per update, the body's latest
    /// (each counted once, however many it was sent to).
    pub owner_records_broadcast: u64,
    /// Ownership changes never broadcast because a later change of the same body in the same
    /// update superseded them.
    pub owner_changes_coalesced: u64,
    /// Times a participant was marked for resync because a reliable message to it did not fit
    /// its control channel.
    pub resyncs_marked: u64,
    /// Full owner tables sent to participants marked for resync.
    pub resyncs_sent: u64,
    /// State batches received within the connection's limits.
    pub state_batches_received: u64,
    /// Encoded bytes of the state received (`ClientMessage`s carrying states).
    pub state_bytes_received: u64,
    /// State batches that did not decode ([`WireBatch::decode`](crate::WireBatch::decode)):
    /// dropped whole, counted, the sender's other messages still handled.
    pub state_batches_invalid: u64,
    /// Delta entries in participants' batches that could not be applied: their baseline was
    /// missing or they left the range
    /// ([rule 20](crate::rules#rule-20--deltas-against-acknowledged-states)); the body waits
    /// for a later entry.
    pub deltas_rejected: u64,
    /// Acknowledgements in participants' batches that were refused (a relay batch never sent
    /// to that participant, or not yet).
    pub acks_rejected: u64,
    /// Of `relay_bodies_sent`, those sent as deltas against a state the receiver acknowledged.
    pub relay_delta_entries_sent: u64,
    /// Relay batches without bodies sent only to acknowledge a participant's batches.
    pub relay_ack_batches_sent: u64,
    /// Relay batches sent (one per participant per update at most, plus control-channel ones).
    pub relay_batches_sent: u64,
    /// Body states in those batches (each counted per receiver).
    pub relay_bodies_sent: u64,
    /// Encoded bytes of those batches, all receivers together.
    pub relay_bytes_sent: u64,
    /// Bodies a receiver's relay budget left waiting, summed over updates and receivers
    /// ([rule 17](crate::rules#rule-17--byte-budgets)).
    pub relay_bodies_deferred: u64,
    /// Bodies not relayed to a receiver because they were outside its interest radius
    /// ([rule 19](crate::rules#rule-19--interest-radius)).
    pub relay_out_of_interest: u64,
    /// Owners that lost a body because the server refused their state as impossible
    /// ([rule 22](crate::rules#rule-22--impossible-states)); the refusals themselves are in
    /// `state_updates_refused` as `TooFast` and `Teleported`.
    pub owners_revoked: u64,
    /// Bodies the physics host took ([rule 21](crate::rules#rule-21--the-physics-host)).
    pub host_takes: u64,
    /// Of those, taken from a far owner (the far-owner option).
    pub host_takes_from_far_owners: u64,
    /// Bodies the physics host released at rest, with their final state.
    pub host_releases: u64,
    /// States the physics host published (one per hosted, moving body and tick; the relay
    /// budget decides what reaches each participant).
    pub host_states_published: u64,
}

impl EntityServerStats {
    /// Every refusal sent back, per reason: bids, releases and state updates together.
    pub fn refusals(&self) -> RefusalCounts {
        self.bids_refused + self.releases_refused + self.state_updates_refused
    }
}

/// The relay state of one body.
#[derive(Debug, Clone, Copy)]
struct RelayBody {
    /// The last state accepted from an owner (or the registered transform, at rest).
    last_state: Option<BodyState>,
    /// The server's relay sequence for this body.
    seq: Sequence,
    /// Whether `last_state` came from an owner, a release or a respawn rather than the
    /// registration: a joining participant is sent it.
    moved: bool,
    /// When the owner took `last_state`, as the server estimates it on its clock: when it
    /// arrived, less the owner's one-way latency (now, for the physics host's states). A relay
    /// moves the state on by its age since then.
    taken_at: Duration,
}

/// When the server last heard from a joined connection, and whether it counts as gone for
/// silence.
#[derive(Debug, Clone, Copy)]
struct Heard {
    /// The last message received.
    last: Duration,
    /// Counted as gone for silence since then, with the bodies cleared.
    silent: Option<u32>,
}

/// The entity server's state: the [`OwnershipArbiter`], the connection → participant table, the
/// relay state per body and [`EntityServerStats`]. Inserted by
/// [`OwnershipPlugin::entity_server`](crate::OwnershipPlugin::entity_server).
#[derive(Resource, Debug)]
pub struct EntityServer {
    arbiter: OwnershipArbiter,
    /// Which connection is which participant, and the answers to `Hello`s.
    handshake: ServerHandshake,
    relay: BodyMap<RelayBody>,
    entity_of: HashMap<BodyId, Entity>,
    body_of: HashMap<Entity, BodyId>,
    stats: EntityServerStats,
    decode: DecodeStats,
    limits: EntityServerLimits,
    /// Rate-limit buckets per joined connection.
    buckets: HashMap<ClientId, ConnectionLimits>,
    /// Ownership changes of this update, broadcast at its end.
    pending: PendingOwners,
    /// Participants whose control channel overflowed: they get the full owner table once it
    /// fits.
    resync: BTreeSet<ClientId>,
    /// Budgets and interest radius of the relay.
    budget: StateBudgetConfig,
    /// The relay to each joined participant.
    queues: HashMap<ClientId, RelayQueue>,
    /// Last batch number accepted per body and owner (each owner it has had that is still
    /// joined; a body's list, emptied when they leave, is kept until it is unregistered).
    batch_filters: BodyMap<Vec<(ParticipantId, u32)>>,
    /// Bodies the budgets left waiting in the last update, all receivers.
    deferred_now: u64,
    /// Ids of bodies despawned and not registered again: registering one is a respawn.
    retired: HashSet<BodyId>,
    /// Bodies respawned since the last update, to announce as `Reset`s.
    respawned: Vec<BodyId>,
    /// When each joined connection was last heard from.
    heard: HashMap<ClientId, Heard>,
    /// The physics host ([rule 21](crate::rules#rule-21--the-physics-host)), when on.
    host: Option<PhysicsHost>,
    /// Limits on owners' states ([rule 22](crate::rules#rule-22--impossible-states)), when on.
    state_limits: Option<StateLimits>,
    /// The server's own state of each body and when it was taken: the last accepted state,
    /// or — with the physics host — its world's state of this tick.
    view: BodyMap<(BodyState, Duration)>,
    /// States accepted from participants since the host's world last took them.
    to_world: Vec<(BodyId, BodyState)>,
    /// Each body's reach left under the [`StateLimits`] ([rule 22](crate::rules#rule-22--impossible-states)).
    reach: HashMap<BodyId, Reach>,
    /// Participants already warned of an impossible state (later ones are logged at debug).
    warned_impossible: HashSet<ParticipantId>,
    /// Until when a participant may not bid for a body whose impossible state it sent.
    penalties: HashMap<(BodyId, ParticipantId), Duration>,
    /// The relayed states of the update, prepared once for every receiver.
    prepared: PreparedStates,
}

/// Owner records per `Snapshot` message of a resync table (a few KiB each).
const TABLE_CHUNK: usize = 512;

impl EntityServer {
    /// An empty server applying `config`.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if the config does not validate.
    pub fn new(config: OwnershipConfig) -> Result<Self, OwnershipError> {
        Ok(Self {
            arbiter: OwnershipArbiter::new(config)?,
            handshake: ServerHandshake::new(Protocols::OWNERSHIP),
            relay: BodyMap::default(),
            entity_of: HashMap::default(),
            body_of: HashMap::default(),
            stats: EntityServerStats::default(),
            decode: DecodeStats::default(),
            limits: EntityServerLimits::default(),
            buckets: HashMap::default(),
            pending: PendingOwners::default(),
            resync: BTreeSet::new(),
            budget: StateBudgetConfig::default(),
            queues: HashMap::default(),
            batch_filters: BodyMap::default(),
            deferred_now: 0,
            retired: HashSet::default(),
            respawned: Vec::new(),
            heard: HashMap::default(),
            host: None,
            state_limits: None,
            view: BodyMap::default(),
            to_world: Vec::new(),
            reach: HashMap::default(),
            warned_impossible: HashSet::default(),
            penalties: HashMap::default(),
            prepared: PreparedStates::default(),
        })
    }

    /// The server with the physics host ([rule 21](crate::rules#rule-21--the-physics-host)),
    /// judging rest by `activity`, and `host.limits` as its [`StateLimits`] when set. The App
    /// needs Rapier and the bodies' colliders
    /// ([`OwnershipPlugin::with_physics_host`](crate::OwnershipPlugin::with_physics_host)
    /// wires it).
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if `host` or `activity` does not validate.
    pub fn with_physics_host(
        mut self,
        host: PhysicsHostConfig,
        activity: ActivityConfig,
    ) -> Result<Self, OwnershipError> {
        let recruit = self.arbiter.config().granted_priority(Priority::VOLUNTEER);
        self.host = Some(PhysicsHost::new(host, activity, recruit)?);
        if host.limits.is_some() {
            self.state_limits = host.limits;
        }
        Ok(self)
    }

    /// The server refusing owners' impossible states ([rule 22](crate::rules#rule-22--impossible-states)),
    /// with or without the physics host.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if `limits` does not validate.
    pub fn with_state_limits(mut self, limits: StateLimits) -> Result<Self, OwnershipError> {
        limits.validate()?;
        self.state_limits = Some(limits);
        Ok(self)
    }

    /// The physics host's config, when the host is on.
    pub fn physics_host(&self) -> Option<&PhysicsHostConfig> {
        self.host.as_ref().map(PhysicsHost::config)
    }

    /// The limits on owners' states, when on.
    pub fn state_limits(&self) -> Option<&StateLimits> {
        self.state_limits.as_ref()
    }

    /// Turns the physics host off (its App has no Rapier); bodies it holds stay held until a
    /// participant bids or the owner expires.
    pub(crate) fn stop_host(&mut self) {
        self.host = None;
    }

    /// Bodies the physics host holds now.
    pub fn bodies_hosted(&self) -> usize {
        self.arbiter
            .records()
            .iter()
            .filter(|r| r.owner == Some(ParticipantId::ENTITY_SERVER))
            .count()
    }

    /// The server's own state of `body` and when it was taken: the last accepted state, or,
    /// with the physics host, its world's state of the last tick.
    pub fn server_state(&self, body: BodyId) -> Option<(BodyState, Duration)> {
        self.view.get(body).copied()
    }

    /// The server with `budget`'s relay budget per participant and interest radius
    /// ([rules 17, 19](crate::rules#rule-17--byte-budgets)).
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if `budget` does not validate.
    pub fn with_state_budget(mut self, budget: StateBudgetConfig) -> Result<Self, OwnershipError> {
        budget.validate()?;
        self.budget = budget;
        Ok(self)
    }

    /// Running totals of the relay traffic, for [`StateTraffic`](crate::StateTraffic).
    pub fn traffic(&self) -> TrafficTotals {
        TrafficTotals {
            bytes_up: self.stats.relay_bytes_sent,
            bytes_down: self.stats.state_bytes_received,
            bodies_up: self.stats.relay_bodies_sent,
            deferred_total: self.stats.relay_bodies_deferred,
            deferred_now: self.deferred_now,
            budget_bytes_per_second: f64::from(self.budget.relay_bytes_per_second)
                * self.queues.len() as f64,
            deltas_up: self.stats.relay_delta_entries_sent,
            deltas_rejected: self.stats.deltas_rejected,
            acks_rejected: self.stats.acks_rejected,
        }
    }

    /// Whether the server has work waiting that its next update does whatever arrives and
    /// whatever time passes: bodies the relay budgets left for later
    /// ([rule 17](crate::rules#rule-17--byte-budgets)), owner changes or respawns still to
    /// announce, participants waiting for a resync. A host that updates the server only when
    /// something arrives or a timer may be due (the stock server's rooms) updates it at once
    /// while this is `true`. Timers (silence, owner expiry, acknowledgements without bodies)
    /// are not work waiting: they need an update by their time.
    pub fn work_waiting(&self) -> bool {
        self.deferred_now > 0
            || !self.resync.is_empty()
            || !self.respawned.is_empty()
            || !self.pending.is_empty()
            || !self.to_world.is_empty()
    }

    /// A participant's interest centre, as its last batch gave it.
    pub fn focus(&self, client: ClientId) -> Option<Vec3> {
        self.queues.get(&client).and_then(|q| q.focus)
    }

    /// The server with per-connection rate limits `limits` instead of the defaults.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if `limits` does not validate.
    pub fn with_limits(mut self, limits: EntityServerLimits) -> Result<Self, OwnershipError> {
        limits.validate()?;
        self.limits = limits;
        Ok(self)
    }

    /// The per-connection rate limits.
    pub fn limits(&self) -> &EntityServerLimits {
        &self.limits
    }

    /// Participants waiting for a full owner table (their control channel overflowed).
    pub fn awaiting_resync(&self) -> impl Iterator<Item = ClientId> + '_ {
        self.resync.iter().copied()
    }

    /// The arbiter (ownership table, [`ArbiterStats`](crate::ArbiterStats) with
    /// `ownership_changes`).
    pub fn arbiter(&self) -> &OwnershipArbiter {
        &self.arbiter
    }

    /// The counters.
    pub fn stats(&self) -> &EntityServerStats {
        &self.stats
    }

    /// Decode counters of everything received (malformed messages are counted here).
    pub fn decode_stats(&self) -> &DecodeStats {
        &self.decode
    }

    /// The participant id of a joined connection.
    pub fn participant_of(&self, client: ClientId) -> Option<ParticipantId> {
        self.handshake.participant(client)
    }

    /// Joined connections and their ids, by connection id.
    pub fn participants(&self) -> impl Iterator<Item = (ClientId, ParticipantId)> + '_ {
        self.handshake.participants()
    }

    /// The entity of a registered body.
    pub fn entity_of(&self, body: BodyId) -> Option<Entity> {
        self.entity_of.get(&body).copied()
    }

    /// The last state the server accepted for `body` from an owner (or its registered
    /// transform, at rest).
    pub fn last_state(&self, body: BodyId) -> Option<BodyState> {
        self.relay.get(body).and_then(|r| r.last_state)
    }

    fn register(
        &mut self,
        entity: Entity,
        body: BodyId,
        kind: BodyKind,
        state: Option<BodyState>,
        now: Duration,
    ) {
        if let Err(error) = self.arbiter.register_body(body, kind) {
            warn!("entity server: {error}; entity {entity} ignored");
            return;
        }
        self.entity_of.insert(body, entity);
        self.body_of.insert(entity, body);
        if self.retired.remove(&body) && self.handshake.participants().next().is_some() {
            self.respawned.push(body);
        }
        self.relay.insert(
            body,
            RelayBody {
                last_state: state,
                seq: Sequence::default(),
                moved: false,
                taken_at: now,
            },
        );
        if let Some(state) = state {
            self.view.insert(body, (state, now));
        }
    }

    fn unregister(&mut self, entity: Entity) {
        let Some(body) = self.body_of.remove(&entity) else {
            return;
        };
        self.entity_of.remove(&body);
        self.relay.remove(body);
        self.view.remove(body);
        self.reach.remove(&body);
        self.penalties.retain(|(b, _), _| *b != body);
        if let Some(host) = self.host.as_mut() {
            host.forget(body);
        }
        self.batch_filters.remove(body);
        for queue in self.queues.values_mut() {
            queue.unregister(body);
        }
        for limits in self.buckets.values_mut() {
            limits.forget(body);
        }
        let _ = self.arbiter.unregister_body(body);
        self.retired.insert(body);
    }
}

/// `PreUpdate`: registers bodies (entities with a [`BodyNetId`]; the kind from their
/// `RigidBody`, dynamic if none; the last state from their `Transform`), unregisters removed
/// ones and applies [`OwnershipLock`] (ownership rule 1).
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
pub(crate) fn register_bodies(
    clock: Res<OwnershipClock>,
    mut state: ResMut<EntityServer>,
    added: Query<
        (
            Entity,
            &BodyNetId,
            Option<&RigidBody>,
            Option<&Transform>,
            Has<OwnershipLock>,
        ),
        Added<BodyNetId>,
    >,
    locked: Query<&BodyNetId, Added<OwnershipLock>>,
    mut removed: RemovedComponents<BodyNetId>,
    mut unlocked: RemovedComponents<OwnershipLock>,
    ids: Query<&BodyNetId>,
    mut commands: Commands,
) {
    for entity in removed.read() {
        state.unregister(entity);
    }
    for (entity, id, rigid_body, transform, lock) in &added {
        let kind = rigid_body.map_or(BodyKind::Dynamic, |rb| BodyKind::from(*rb));
        let at_rest = transform.map(|t| BodyState::resting(t.translation, t.rotation));
        state.register(entity, id.0, kind, at_rest, clock.now());
        if lock {
            let _ = state.arbiter.set_locked(id.0, true);
        }
        commands
            .entity(entity)
            .insert_if_new(SimulationOwner::UNOWNED);
        if state.host.is_some() && kind.is_ownable() {
            // The host reads and writes the body's velocities in its world.
            commands.entity(entity).insert_if_new(Velocity::zero());
        }
    }
    for id in &locked {
        let _ = state.arbiter.set_locked(id.0, true);
    }
    for entity in unlocked.read() {
        if let Ok(id) = ids.get(entity) {
            let _ = state.arbiter.set_locked(id.0, false);
        }
    }
}

/// Who sent a state batch and how: what each of its states is checked and accepted with.
#[derive(Clone, Copy)]
struct BatchSender {
    client: ClientId,
    from: ParticipantId,
    /// The batch's number, for the per-body stale filter.
    seq: u32,
    /// How long its states travelled (half the connection's round trip).
    latency: Duration,
}

/// Everything one server update needs besides the state.
struct Io<'a, 'w, 's> {
    server: &'a mut RenetServer,
    now: Duration,
    owners: &'a mut Query<'w, 's, &'static mut SimulationOwner>,
    changed: Vec<OwnershipChanged>,
    gone: Vec<ParticipantGone>,
    returned: Vec<ParticipantReturned>,
}

impl<'a, 'w, 's> Io<'a, 'w, 's> {
    fn new(
        server: &'a mut RenetServer,
        now: Duration,
        owners: &'a mut Query<'w, 's, &'static mut SimulationOwner>,
    ) -> Self {
        Self {
            server,
            now,
            owners,
            changed: Vec::new(),
            gone: Vec::new(),
            returned: Vec::new(),
        }
    }
}

/// `PreUpdate`: handles every message received, then disconnects, silent participants and
/// silence expiry.
#[allow(clippy::too_many_arguments)]
pub(crate) fn update(
    clock: Res<OwnershipClock>,
    net_clock: Option<Res<NetClock>>,
    mut server: ResMut<RenetServer>,
    mut state: ResMut<EntityServer>,
    mut owners: Query<&'static mut SimulationOwner>,
    mut changed: MessageWriter<OwnershipChanged>,
    mut gone: MessageWriter<ParticipantGone>,
    mut returned: MessageWriter<ParticipantReturned>,
) {
    let tick_rate_hz = match net_clock.as_deref() {
        Some(NetClock::Fixed(step)) if !step.is_zero() => {
            (1.0 / step.as_secs_f64()).round().min(f64::from(u16::MAX)) as u16
        }
        _ => 0,
    };
    let state = &mut *state;
    state.handshake.set_tick_rate_hz(tick_rate_hz);
    let mut decode = state.decode;
    let received = server.receive_msgs(&mut decode);
    state.decode = decode;
    let mut io = Io::new(&mut server, clock.now(), &mut owners);
    state.announce_respawns(&mut io);
    for message in received {
        let client = message.client_id;
        state.heard_from(&mut io, client);
        match message.message {
            Ok(ClientMessage::Hello(hello)) => state.on_hello(&mut io, client, &hello),
            Err(error) => state.on_undecodable(&mut io, client, &error),
            Ok(other) => state.on_message(&mut io, client, other),
        }
    }
    state.drop_disconnected(&mut io);
    state.mark_silent(&mut io);
    state.expire_silent(&mut io);
    state.broadcast_owners(&mut io);
    state.relay_states(&mut io);
    state.send_resyncs(&mut io);
    changed.write_batch(io.changed);
    gone.write_batch(io.gone);
    returned.write_batch(io.returned);
}

impl EntityServer {
    /// A message from `client` other than a `Hello`: handled if the connection joined, else
    /// dropped and counted.
    fn on_message(&mut self, io: &mut Io, client: ClientId, message: ClientMessage) {
        let Some(from) = self.handshake.participant(client) else {
            self.stats.messages_ignored += 1;
            debug!("entity server: message from {client} before it joined, dropped");
            return;
        };
        match message {
            ClientMessage::Ownership(msg) => self.on_ownership(io, client, from, msg),
            ClientMessage::Ping { t } => {
                let pong = ServerMessage::Pong {
                    t,
                    server_time_ms: millis_u32(io.now),
                };
                self.send(io.server, client, NetChannel::Inputs, &pong);
            }
            ClientMessage::Goodbye => self.on_left(io, client),
            ClientMessage::Pong { .. } | ClientMessage::Session(_) => {
                self.stats.messages_ignored += 1;
            }
            // Answered by `on_hello`; the match needs the arm.
            ClientMessage::Hello(_) => {}
        }
    }

    /// Bodies registered again under an id the server had ([respawns](crate::rules#respawns)):
    /// each is reset for everyone, at its registered state.
    fn announce_respawns(&mut self, io: &mut Io) {
        for body in std::mem::take(&mut self.respawned) {
            self.reset_body(io, body, None);
        }
    }

    /// A participant's `Respawn` ([respawns](crate::rules#respawns)): accepted from the body's
    /// owner, or from anyone while the body is unowned and unlocked — the body starts again,
    /// unowned, at rest where the sender has it, for everyone; otherwise refused with the reason
    /// and the owner as it stands.
    fn on_respawn(
        &mut self,
        io: &mut Io,
        client: ClientId,
        from: ParticipantId,
        state: &PackedBodyState,
    ) {
        let (body, state) = match wire::state_from_wire(state) {
            Ok((body, _, state)) => (body, state),
            Err(error) => {
                self.stats.state_updates_invalid += 1;
                debug!("entity server: respawn from {from}: {error}");
                return;
            }
        };
        match self.arbiter.respawn(from, body, io.now) {
            Ok(_) => self.reset_body(io, body, Some(state.stopped())),
            Err(refusal) => {
                self.stats.respawns_refused.add(refusal.reason);
                self.refuse(io, client, &refusal);
                // The sender's new copy has none of the old one's states: it gets the body's
                // latest state whole, with the next relay.
                if let Some(queue) = self.queues.get_mut(&client)
                    && self.relay.contains_key(body)
                {
                    queue.unregister(body);
                    queue.mark(body);
                }
            }
        }
    }

    /// Starts `body` again, unowned, at rest at `state` (or its last state): forgets this
    /// update's owner record, the owners' update numbering and the relay baselines of the
    /// old body, and sends every participant a `Reset`.
    fn reset_body(&mut self, io: &mut Io, body: BodyId, state: Option<BodyState>) {
        self.pending.forget(body);
        self.batch_filters.remove(body);
        for queue in self.queues.values_mut() {
            queue.unregister(body);
        }
        for limits in self.buckets.values_mut() {
            limits.forget(body);
        }
        let Some(relay) = self.relay.get_mut(body) else {
            return;
        };
        if state.is_some() {
            relay.last_state = state;
            relay.moved = true;
        }
        relay.seq = relay.seq.next();
        let packed = relay
            .last_state
            .map(|s| wire::state_to_wire(body, relay.seq, &s));
        if let Some(last) = relay.last_state {
            self.view.insert(body, (last, io.now));
            if let Some(host) = self.host.as_mut() {
                host.forget(body);
                self.to_world.push((body, last));
            }
        }
        if let Some(entity) = self.entity_of.get(&body).copied() {
            if let Ok(mut component) = io.owners.get_mut(entity) {
                *component = SimulationOwner::UNOWNED;
            }
            io.changed.push(OwnershipChanged {
                entity,
                body,
                owner: None,
                priority: Priority::NONE,
            });
        }
        self.stats.resets_sent += 1;
        let msg = ServerMessage::Ownership(OwnershipServerMessage::Reset {
            body,
            state: packed,
        });
        let clients: Vec<ClientId> = self.handshake.participants().map(|(c, _)| c).collect();
        for client in clients {
            self.send(io.server, client, NetChannel::Control, &msg);
        }
    }

    /// Joined connections the server no longer has leave ([ownership rule 5](crate::rules)).
    fn drop_disconnected(&mut self, io: &mut Io) {
        let gone: Vec<ClientId> = self
            .handshake
            .participants()
            .map(|(c, _)| c)
            .filter(|c| !io.server.is_connected(*c))
            .collect();
        for client in gone {
            self.on_left(io, client);
        }
    }

    /// Any message from `client`: a joined participant is heard from now; one counted gone for
    /// silence is a participant again, told so with a `CountedSilent`.
    fn heard_from(&mut self, io: &mut Io, client: ClientId) {
        let Some(heard) = self.heard.get_mut(&client) else {
            return;
        };
        let silent_for = io.now.saturating_sub(heard.last);
        heard.last = io.now;
        let Some(bodies_cleared) = heard.silent.take() else {
            return;
        };
        let Some(participant) = self.handshake.participant(client) else {
            return;
        };
        self.stats.participants_returned += 1;
        info!(
            "entity server: {participant} ({client}) is heard from again after {silent_for:?}; \
             it was counted gone"
        );
        io.returned.push(ParticipantReturned {
            client,
            participant,
            silent_for,
        });
        let notice = ServerMessage::Ownership(OwnershipServerMessage::CountedSilent {
            silent_ms: millis_u32(silent_for),
            bodies_cleared,
        });
        self.send(io.server, client, NetChannel::Control, &notice);
    }

    /// Joined participants not heard from for `participant_silence_timeout` count as gone:
    /// their bodies are cleared as on a disconnect ([ownership rule 5](crate::rules)), their
    /// connection stays.
    fn mark_silent(&mut self, io: &mut Io) {
        let timeout = self.arbiter.config().participant_silence_timeout;
        let mut silent: Vec<(ClientId, Duration)> = self
            .heard
            .iter()
            .filter(|(_, h)| h.silent.is_none() && io.now.saturating_sub(h.last) >= timeout)
            .map(|(c, h)| (*c, io.now.saturating_sub(h.last)))
            .collect();
        silent.sort_unstable_by_key(|(c, _)| *c);
        for (client, heard_last) in silent {
            let Some(participant) = self.handshake.participant(client) else {
                self.heard.remove(&client);
                continue;
            };
            let cleared = self.arbiter.participant_silent(participant, io.now);
            let n = cleared.len() as u32;
            self.stats.participants_silent += 1;
            self.stats.silence_clears += u64::from(n);
            warn!(
                "entity server: nothing heard from {participant} ({client}) for {heard_last:?}; \
                 it counts as gone and its {n} bodies are cleared"
            );
            for e in cleared {
                self.orphaned(io, e.body);
            }
            if let Some(heard) = self.heard.get_mut(&client) {
                heard.silent = Some(n);
            }
            io.gone.push(ParticipantGone {
                client,
                participant,
                cause: GoneCause::Silent { heard_last },
                bodies_cleared: n,
            });
        }
    }

    /// Silent owners are cleared ([ownership rule 5](crate::rules)).
    fn expire_silent(&mut self, io: &mut Io) {
        let expired = self.arbiter.expire(io.now);
        self.stats.expiries += expired.len() as u64;
        for e in expired {
            info!(
                "entity server: {} silent for {:?}, cleared",
                e.previous_owner,
                self.arbiter.config().owner_silence_expiry
            );
            self.orphaned(io, e.body);
        }
    }

    /// A `Hello`: answered by the [`ServerHandshake`] (`Welcome` or `Rejected`); a participant
    /// that joins also gets the owned bodies and their last states.
    fn on_hello(&mut self, io: &mut Io, client: ClientId, hello: &simsync_net::Hello) {
        let welcome = match self.handshake.on_hello(client, hello, 0, || Ok(None)) {
            Ok(welcome) => welcome,
            Err(reason) => {
                info!("entity server: {client} rejected: {reason:?}");
                self.reject(io, client, reason);
                return;
            }
        };
        let participant = welcome.participant;
        self.stats.participants_joined += 1;
        self.heard.insert(
            client,
            Heard {
                last: io.now,
                silent: None,
            },
        );
        self.queues.insert(
            client,
            RelayQueue::new(
                self.budget.relay_bytes_per_second,
                self.budget.delta_encoding,
            ),
        );
        info!(
            "entity server: {client} ({:?}) joined as {participant}",
            hello.name
        );
        self.send(
            io.server,
            client,
            NetChannel::Control,
            &ServerMessage::Welcome(welcome),
        );
        // The owned bodies and their last states, so a late joiner starts from the truth.
        let owned: Vec<OwnerRecord> = self
            .arbiter
            .records()
            .iter()
            .filter(|r| r.owner.is_some())
            .map(|r| record(r.body, r.owner, r.priority))
            .collect();
        if !owned.is_empty() {
            let snapshot = ServerMessage::Ownership(OwnershipServerMessage::Snapshot(owned));
            self.send(io.server, client, NetChannel::Control, &snapshot);
        }
        self.send_known_states(io, client);
    }

    /// To a participant that just joined: the last state of every body that is owned or has
    /// moved since it was registered (ids increasing, unbudgeted, on the control channel), so
    /// it does not start from its own scene where others moved bodies.
    fn send_known_states(&mut self, io: &mut Io, client: ClientId) {
        let mut states: Vec<(BodyId, BodyState)> = self
            .arbiter
            .records()
            .iter()
            .filter_map(|r| {
                let relay = self.relay.get(r.body)?;
                let known = relay.moved || r.owner.is_some();
                Some((r.body, relay.last_state.filter(|_| known)?))
            })
            .collect();
        states.sort_unstable_by_key(|(body, _)| *body);
        for chunk in states.chunks(TABLE_CHUNK) {
            self.send_unbudgeted(io, client, chunk.to_vec());
        }
    }

    /// A message that did not decode: a `Hello` of another version is answered `Rejected`
    /// (by the [`ServerHandshake`]); anything else is only counted (in the decode stats).
    fn on_undecodable(&mut self, io: &mut Io, client: ClientId, error: &NetError) {
        match self.handshake.on_decode_error(error) {
            Some(reason) => self.reject(io, client, reason),
            None => debug!("entity server: undecodable message from {client}: {error}"),
        }
    }

    fn reject(&mut self, io: &mut Io, client: ClientId, reason: RejectReason) {
        self.stats.hellos_rejected += 1;
        let reply = ServerMessage::Rejected { reason };
        self.send(io.server, client, NetChannel::Control, &reply);
    }

    fn on_left(&mut self, io: &mut Io, client: ClientId) {
        let Some(participant) = self.handshake.on_left(client) else {
            return;
        };
        self.stats.participants_left += 1;
        let counted_gone = self
            .heard
            .remove(&client)
            .is_some_and(|h| h.silent.is_some());
        self.buckets.remove(&client);
        self.resync.remove(&client);
        self.queues.remove(&client);
        for filters in self.batch_filters.values_mut() {
            filters.retain(|(p, _)| *p != participant);
        }
        self.penalties.retain(|(_, p), _| *p != participant);
        let cleared = self.arbiter.disconnect(participant, io.now);
        info!(
            "entity server: {participant} left; {} bodies cleared",
            cleared.len()
        );
        self.stats.disconnect_clears += cleared.len() as u64;
        let bodies_cleared = cleared.len() as u32;
        for e in cleared {
            self.orphaned(io, e.body);
        }
        if !counted_gone {
            io.gone.push(ParticipantGone {
                client,
                participant,
                cause: GoneCause::Left,
                bodies_cleared,
            });
        }
    }

    fn on_ownership(
        &mut self,
        io: &mut Io,
        client: ClientId,
        from: ParticipantId,
        msg: OwnershipClientMessage,
    ) {
        let kind = match &msg {
            OwnershipClientMessage::Respawn(state) => Limited::Bid(self.registered(state.body)),
            OwnershipClientMessage::Release { body } => Limited::Release(self.registered(*body)),
            OwnershipClientMessage::StateBatch(bytes) => {
                // Each entry is limited on its own.
                self.on_batch(io, client, from, bytes);
                return;
            }
            OwnershipClientMessage::Bids(bids) => {
                // Each bid is limited on its own.
                self.on_bids(io, client, from, bids);
                return;
            }
        };
        if !self.admit(client, from, kind, io.now) {
            return;
        }
        match msg {
            OwnershipClientMessage::Release { body } => {
                self.stats.releases_received += 1;
                match self.arbiter.release(from, body, io.now) {
                    Ok(released) => {
                        self.stats.releases_granted += 1;
                        if let Some(limits) = self.buckets.get_mut(&client) {
                            limits.on_released(body, io.now);
                        }
                        self.released(io, body, released.previous_owner);
                    }
                    Err(refusal) => {
                        self.stats.releases_refused.add(refusal.reason);
                        self.refuse(io, client, &refusal);
                    }
                }
            }
            OwnershipClientMessage::Respawn(state) => self.on_respawn(io, client, from, &state),
            OwnershipClientMessage::StateBatch(_) | OwnershipClientMessage::Bids(_) => {}
        }
    }

    /// `Some(body)` if the server has it: requests about it have their own buckets.
    fn registered(&self, body: BodyId) -> Option<BodyId> {
        self.relay.contains_key(body).then_some(body)
    }

    /// Whether a request of `kind` from `client` (participant `from`) is within its limits
    /// ([rate limits](crate::rules#rate-limits)); counted if not, and the first drop over its
    /// participant limit logged as a warning.
    fn admit(
        &mut self,
        client: ClientId,
        from: ParticipantId,
        kind: Limited,
        now: Duration,
    ) -> bool {
        let limits = &self.limits;
        let connection = self.buckets.entry(client).or_default();
        let verdict = match kind {
            Limited::Bid(Some(body))
                if connection.rebid_too_soon(body, limits.rebid_cooldown, now) =>
            {
                Err(Dropped::TooSoon)
            }
            _ => limits.admit(connection, kind, now),
        };
        let Err(why) = verdict else {
            return true;
        };
        self.stats.rate_limited.add(kind, why);
        if why == Dropped::ParticipantLimit && !std::mem::replace(&mut connection.warned, true) {
            warn!(
                "entity server: {from} is over its ownership request limit ({}/s, burst {}); \
                 its requests over it are dropped and counted",
                limits.ownership_requests.per_second, limits.ownership_requests.burst
            );
        } else {
            trace!("entity server: {from} over its {kind:?} limit ({why:?}), dropped");
        }
        false
    }

    /// A participant's bids of one frame ([rate limits](crate::rules#rate-limits)): a list
    /// longer than [`MAX_BIDS_PER_MESSAGE`](simsync_net::MAX_BIDS_PER_MESSAGE) is dropped whole
    /// and counted; otherwise each bid is limited by its body's bucket and handled as a `Bid`.
    fn on_bids(&mut self, io: &mut Io, client: ClientId, from: ParticipantId, bids: &[BidRequest]) {
        if bids.len() > MAX_BIDS_PER_MESSAGE {
            self.stats.bid_lists_invalid += 1;
            debug!(
                "entity server: {} bids in one list from {from}, dropped",
                bids.len()
            );
            return;
        }
        for bid in bids {
            if self.admit(
                client,
                from,
                Limited::Bid(self.registered(bid.body)),
                io.now,
            ) {
                self.on_bid(io, client, from, bid.body, Priority(bid.priority));
            }
        }
    }

    /// The owner's new state of `body`: kept as the body's last state (and the server's
    /// state of it, taken `now`) and queued for every participant's next relay batch but the
    /// owner's (`from`, with its one-way latency; `None`: the physics host, every participant
    /// gets it). A participant's state also goes to the host's world.
    fn accept_state(
        &mut self,
        from: Option<(ClientId, Duration)>,
        body: BodyId,
        state: BodyState,
        now: Duration,
    ) {
        let Some(relay) = self.relay.get_mut(body) else {
            return;
        };
        let (from, latency) = (
            from.map(|(c, _)| c),
            from.map_or(Duration::ZERO, |(_, l)| l),
        );
        relay.taken_at = now.saturating_sub(latency);
        relay.last_state = Some(state);
        relay.moved = true;
        relay.seq = relay.seq.next();
        self.view.insert(body, (state, now));
        if from.is_some() {
            self.stats.state_updates_relayed += 1;
            if self.host.is_some() {
                self.to_world.push((body, state));
            }
        }
        for (c, queue) in &mut self.queues {
            if Some(*c) != from {
                queue.mark(body);
            }
        }
    }

    /// An owner's state the [`StateLimits`] refuse ([rule 22](crate::rules#rule-22--impossible-states)):
    /// counted, the owner loses the body (the physics host takes it if it moves) and gets the
    /// refusal, then the server's state of the body. Nobody else is sent anything beyond the
    /// owner change: the refused state never reached them, so they already have the server's.
    fn on_impossible(
        &mut self,
        io: &mut Io,
        client: ClientId,
        from: ParticipantId,
        body: BodyId,
        reason: RefusalReason,
    ) {
        self.stats.state_updates_refused.add(reason);
        if self.warned_impossible.insert(from) {
            warn!(
                "entity server: {from}'s state of {body} refused ({reason}); it loses the body \
                 (later refusals of {from} are logged at debug level and counted)"
            );
        } else {
            debug!("entity server: {from}'s state of {body} refused ({reason})");
        }
        if self.arbiter.revoke(body, io.now).is_some() {
            self.stats.owners_revoked += 1;
            self.orphaned(io, body);
        }
        if let Some(limits) = self.state_limits {
            self.penalties.insert((body, from), io.now + limits.penalty);
        }
        // The refusal first (the control channel is ordered): the sender then knows it lost the
        // body and applies the server's state that follows.
        let refusal = Refusal {
            body,
            reason,
            owner: None,
            priority: Priority::NONE,
        };
        self.refuse(io, client, &refusal);
        if let Some((server_state, _)) = self.view.get(body).copied() {
            self.send_unbudgeted(io, client, vec![(body, server_state)]);
        }
    }

    /// A state batch ([rule 15](crate::rules#rule-15--one-state-batch-per-frame)): one that
    /// does not decode is dropped whole and counted; otherwise its acknowledgement and deltas
    /// are resolved by the sender's [`DeltaLink`](crate::DeltaLink) (rule 20: refused
    /// acknowledgements and deltas that cannot be applied are counted), its focus becomes the
    /// sender's interest centre and each state is handled as a state update of its own —
    /// rate-limited, owner-checked (rule 4), dropped unless newer than the last batch accepted
    /// for that body from that owner.
    fn on_batch(&mut self, io: &mut Io, client: ClientId, from: ParticipantId, bytes: &[u8]) {
        let Some(batch) = self.decode_batch(client, from, bytes) else {
            return;
        };
        // How long its states travelled: half the connection's round trip.
        let latency = io
            .server
            .network_info(client)
            .map_or(Duration::ZERO, |info| one_way_latency(info.rtt));
        let sender = BatchSender {
            client,
            from,
            seq: batch.seq,
            latency,
        };
        for (body, state) in batch.states {
            self.on_batch_state(io, &sender, body, state);
        }
    }

    /// Counts the bytes of a state batch from `from` (on `client`) and resolves it with the
    /// sender's [`DeltaLink`](crate::DeltaLink): `None` (counted) for a batch from a client
    /// without a queue or one that does not decode; otherwise its focus becomes the sender's
    /// interest centre and its rejected deltas and acknowledgement are counted.
    fn decode_batch(
        &mut self,
        client: ClientId,
        from: ParticipantId,
        bytes: &[u8],
    ) -> Option<Received> {
        self.stats.state_bytes_received += bytes.len() as u64 + 2 + varint_len(bytes.len());
        let relay = &self.relay;
        let Some(queue) = self.queues.get_mut(&client) else {
            self.stats.messages_ignored += 1;
            return None;
        };
        let batch = match queue.link.receive(bytes, |b| relay.contains_key(b)) {
            Ok(batch) => batch,
            Err(error) => {
                self.stats.state_batches_invalid += 1;
                debug!("entity server: state batch from {from} dropped: {error}");
                return None;
            }
        };
        if batch.focus.is_some() {
            queue.focus = batch.focus;
        }
        self.stats.state_batches_received += 1;
        self.stats.deltas_rejected += batch.deltas_rejected as u64;
        if let Some(rejection) = batch.ack_rejected {
            self.stats.acks_rejected += 1;
            debug!("entity server: from {from}: {rejection}");
        }
        Some(batch)
    }

    /// One state of a batch from `sender`, as a state update of its own: rate-limited,
    /// refused unless the sender owns `body` (rule 4), dropped as stale unless its batch is
    /// newer than the last accepted for the body from that owner, checked against the state
    /// limits when they are on ([`check_limits`](Self::check_limits)), then accepted.
    fn on_batch_state(
        &mut self,
        io: &mut Io,
        sender: &BatchSender,
        body: BodyId,
        state: BodyState,
    ) {
        let BatchSender {
            client,
            from,
            seq,
            latency,
        } = *sender;
        let owned = self.arbiter.owner(body).is_some_and(|(o, _)| o == from);
        let kind = Limited::StateUpdate(owned.then_some(body));
        if !self.admit(client, from, kind, io.now) {
            return;
        }
        self.stats.state_updates_received += 1;
        if let Err(refusal) = self.arbiter.owner_update(from, body, io.now) {
            self.stats.state_updates_refused.add(refusal.reason);
            self.refuse(io, client, &refusal);
            return;
        }
        let filters = self.batch_filters.get_or_insert_with(body, Vec::new);
        let i = filters
            .iter()
            .position(|(p, _)| *p == from)
            .unwrap_or_else(|| {
                filters.push((from, seq.wrapping_sub(1)));
                filters.len() - 1
            });
        let last = &mut filters[i].1;
        if !is_newer_batch(seq, *last) {
            self.stats.state_updates_stale += 1;
            return;
        }
        *last = seq;
        if !self.check_limits(io, sender, body, &state) {
            return;
        }
        self.accept_state(Some((client, latency)), body, state, io.now);
    }

    /// [Rule 22](crate::rules#rule-22--impossible-states), when state limits are on: whether
    /// `state` of `body` from `sender` is possible against the server's view of the body (its
    /// remaining reach is then kept); an impossible one is handled by
    /// [`on_impossible`](Self::on_impossible) and `false` returned. Always `true` when off.
    fn check_limits(
        &mut self,
        io: &mut Io,
        sender: &BatchSender,
        body: BodyId,
        state: &BodyState,
    ) -> bool {
        let Some(limits) = self.state_limits else {
            return true;
        };
        let reference = self.view.get(body).copied();
        let reach = self.reach.get(&body).copied();
        match limits.check(reference, reach, state, io.now) {
            Ok(left) => {
                self.reach.insert(body, left);
                true
            }
            Err(reason) => {
                self.on_impossible(io, sender.client, sender.from, body, reason);
                false
            }
        }
    }

    /// End of update: one relay batch per participant, within its budget, most urgent bodies
    /// first, only bodies within its interest radius ([rules 17–19](crate::rules#rule-17--byte-budgets)).
    fn relay_states(&mut self, io: &mut Io) {
        let mut clients: Vec<(ClientId, ParticipantId)> = self.handshake.participants().collect();
        clients.sort_unstable_by_key(|(c, _)| *c);
        self.deferred_now = 0;
        let mut prepared = std::mem::take(&mut self.prepared);
        prepared.clear();
        for (client, participant) in clients {
            let Some(mut queue) = self.queues.remove(&client) else {
                continue;
            };
            let relay = &self.relay;
            let arbiter = &self.arbiter;
            let pass = queue.pass_prepared(
                io.now,
                self.budget.interest_radius,
                arbiter.config(),
                Some(participant),
                &mut prepared,
                |body| {
                    let relay = relay.get(body)?;
                    let age = io.now.saturating_sub(relay.taken_at);
                    let owner = arbiter.owner(body).map(|(o, _)| o);
                    Some((owner, relay.last_state?.moved_on(age)))
                },
            );
            self.stats.relay_bodies_deferred += pass.deferred as u64;
            self.stats.relay_out_of_interest += pass.out_of_interest as u64;
            self.deferred_now += pass.deferred as u64;
            self.send_pass(io, client, &mut queue, pass, &prepared);
            self.queues.insert(client, queue);
        }
        self.prepared = prepared;
    }

    /// Sends a relay pass's batch within the receiver's budget (its entries laid out in
    /// `prepared`), or — with nothing to relay — a batch without bodies when the receiver's
    /// batches wait for an acknowledgement (rule 20).
    fn send_pass(
        &mut self,
        io: &mut Io,
        client: ClientId,
        queue: &mut RelayQueue,
        pass: RelayPass,
        prepared: &PreparedStates,
    ) {
        if let Some(seq) = pass.seq {
            let encoded = queue.wire_chosen(seq, &pass.chosen, prepared, io.now);
            let size = self.send_wire(io, client, encoded, pass.chosen.len(), NetChannel::State);
            queue.spend(size);
        } else if queue.ack_due(io.now) {
            let batch = StateBatch {
                seq: queue.next_seq(),
                ..StateBatch::default()
            };
            let size = self.send_batch(io, client, queue, &batch, NetChannel::State);
            queue.spend(size);
            self.stats.relay_ack_batches_sent += 1;
        }
    }

    /// Sends `bodies` (ids increasing) to `client` outside its budget, on the control channel,
    /// as its next relay batch (charged to the budget).
    fn send_unbudgeted(&mut self, io: &mut Io, client: ClientId, bodies: Vec<(BodyId, BodyState)>) {
        let Some(mut queue) = self.queues.remove(&client) else {
            return;
        };
        let ids: Vec<BodyId> = bodies.iter().map(|(body, _)| *body).collect();
        queue.forget_all(&ids);
        let batch = StateBatch {
            seq: queue.next_seq(),
            focus: None,
            bodies,
        };
        let size = self.send_batch(io, client, &mut queue, &batch, NetChannel::Control);
        queue.charge(size);
        self.queues.insert(client, queue);
    }

    /// Lays out one relay batch for `client` (acknowledgement and deltas by its `queue`, rule
    /// 20), encodes and sends it; returns its size in bytes (0 if not sent).
    fn send_batch(
        &mut self,
        io: &mut Io,
        client: ClientId,
        queue: &mut RelayQueue,
        batch: &StateBatch,
        channel: NetChannel,
    ) -> usize {
        let encoded = queue
            .wire(batch, io.now)
            .and_then(|wire| Ok((wire.encode()?, wire.deltas())));
        self.send_wire(io, client, encoded, batch.bodies.len(), channel)
    }

    /// Frames an encoded relay batch of `bodies` bodies (with its count of delta entries),
    /// counts it and sends it to `client` on `channel`; returns its size in bytes (0 if not
    /// sent).
    fn send_wire(
        &mut self,
        io: &mut Io,
        client: ClientId,
        encoded: Result<(Vec<u8>, usize), BatchError>,
        bodies: usize,
        channel: NetChannel,
    ) -> usize {
        let (bytes, deltas) = match encoded {
            Ok(encoded) => encoded,
            Err(error) => {
                warn!("entity server: relay batch not sent: {error}");
                return 0;
            }
        };
        let encoded = encode_state_batch(&bytes);
        let size = encoded.as_ref().map_or(0, Vec::len);
        self.stats.relay_batches_sent += 1;
        self.stats.relay_bodies_sent += bodies as u64;
        self.stats.relay_delta_entries_sent += deltas as u64;
        self.stats.relay_bytes_sent += size as u64;
        match encoded {
            Ok(bytes) => self.send_encoded(io.server, client, channel, bytes),
            Err(error) => self.send_failed(client, channel, error),
        }
        size
    }

    fn on_bid(
        &mut self,
        io: &mut Io,
        client: ClientId,
        from: ParticipantId,
        body: BodyId,
        priority: Priority,
    ) {
        self.stats.bids_received += 1;
        let before = self.arbiter.owner(body);
        if self.penalized(body, from, io.now) {
            let (owner, held) = before.map_or((None, Priority::NONE), |(o, p)| (Some(o), p));
            let refusal = Refusal {
                body,
                reason: RefusalReason::Penalized,
                owner,
                priority: held,
            };
            self.stats.bids_refused.add(refusal.reason);
            self.refuse(io, client, &refusal);
            return;
        }
        // An owner asking for less than it holds is a priority change (ownership rules 4, 13);
        // everything else is a bid (an owner raising its priority included).
        let result = match before {
            Some((owner, held)) if owner == from && priority < held => {
                self.arbiter.change_priority(from, body, priority, io.now)
            }
            _ => self.arbiter.bid(from, body, priority, io.now),
        };
        match result {
            Ok(grant) => {
                self.stats.bids_granted += 1;
                let reply = ServerMessage::Ownership(OwnershipServerMessage::Grant {
                    body,
                    priority: grant.priority.0,
                });
                self.send(io.server, client, NetChannel::Control, &reply);
                if before != Some((grant.owner, grant.priority)) {
                    self.announce(io, body, Some(grant.owner), grant.priority, None);
                }
            }
            Err(refusal) => {
                self.stats.bids_refused.add(refusal.reason);
                self.refuse(io, client, &refusal);
            }
        }
    }

    /// Whether `from` may not bid for `body` now (rule 22's penalty); an expired penalty is
    /// forgotten.
    fn penalized(&mut self, body: BodyId, from: ParticipantId, now: Duration) -> bool {
        match self.penalties.get(&(body, from)) {
            Some(until) if now < *until => true,
            Some(_) => {
                self.penalties.remove(&(body, from));
                false
            }
            None => false,
        }
    }

    /// The owner released a body at rest (ownership rule 12): announce it; its last state with
    /// zero velocities goes to everyone with the update's owner records.
    fn released(&mut self, io: &mut Io, body: BodyId, previous_owner: ParticipantId) {
        if let Some(relay) = self.relay.get_mut(body)
            && let Some(last) = relay.last_state
        {
            relay.last_state = Some(last.stopped());
        }
        self.announce(io, body, None, Priority::NONE, Some(previous_owner));
    }

    /// A body's owner went silent or disconnected (ownership rule 5): announce the body
    /// unowned, and nothing else. Every participant keeps simulating it from where it has it
    /// (the server's last state may be seconds old), an interested one takes it over (rules 7
    /// and 14), and a body nobody takes is stopped where each participant has it after
    /// `orphan_stop_delay`.
    fn orphaned(&mut self, io: &mut Io, body: BodyId) {
        self.stats.orphaned += 1;
        if let Some(host) = self.host.as_mut() {
            host.orphaned(body);
        }
        self.announce(io, body, None, Priority::NONE, None);
    }

    /// Records the body's new owner for this update's broadcast, updates its
    /// [`SimulationOwner`] and writes [`OwnershipChanged`].
    fn announce(
        &mut self,
        io: &mut Io,
        body: BodyId,
        owner: Option<ParticipantId>,
        priority: Priority,
        cleared_from: Option<ParticipantId>,
    ) {
        if self.pending.record(body, owner, priority, cleared_from) {
            self.stats.owner_changes_coalesced += 1;
        }
        if let Some(entity) = self.entity_of.get(&body).copied() {
            if let Ok(mut component) = io.owners.get_mut(entity) {
                *component = SimulationOwner { owner, priority };
            }
            io.changed.push(OwnershipChanged {
                entity,
                body,
                owner,
                priority,
            });
        }
    }

    /// End of update: one `OwnerChanged` per changed body, its latest record, to every
    /// participant not awaiting a resync; a body that ends the update unowned after being
    /// cleared also gets its zero-velocity state ([coalescing](crate::rules#coalescing)).
    fn broadcast_owners(&mut self, io: &mut Io) {
        for pending in self.pending.drain() {
            let body = pending.body;
            self.stats.owner_records_broadcast += 1;
            let msg = ServerMessage::Ownership(OwnershipServerMessage::OwnerChanged(record(
                body,
                pending.owner,
                pending.priority,
            )));
            let clients: Vec<ClientId> = self
                .handshake
                .participants()
                .map(|(c, _)| c)
                .filter(|c| !self.resync.contains(c))
                .collect();
            for client in clients {
                self.send(io.server, client, NetChannel::Control, &msg);
            }
            let (None, Some(_)) = (pending.owner, pending.cleared_from) else {
                continue;
            };
            let Some(relay) = self.relay.get_mut(body) else {
                continue;
            };
            let Some(zero) = relay.last_state else {
                continue;
            };
            relay.seq = relay.seq.next();
            self.stats.zero_states_sent += 1;
            let clients: Vec<ClientId> = self.handshake.participants().map(|(c, _)| c).collect();
            for client in clients {
                self.send_unbudgeted(io, client, vec![(body, zero)]);
            }
        }
    }

    /// End of update: the full owner table (every body's owner and priority, in `Snapshot`s)
    /// to each participant marked for resync whose control channel has room for all of it;
    /// the others stay marked ([resync](crate::rules#resync)).
    fn send_resyncs(&mut self, io: &mut Io) {
        if self.resync.is_empty() {
            return;
        }
        let table: Vec<OwnerRecord> = self
            .arbiter
            .records()
            .iter()
            .map(|r| record(r.body, r.owner, r.priority))
            .collect();
        let chunks: Vec<Vec<u8>> = table
            .chunks(TABLE_CHUNK)
            .filter_map(|chunk| {
                let msg =
                    ServerMessage::Ownership(OwnershipServerMessage::Snapshot(chunk.to_vec()));
                encode(&msg).ok()
            })
            .collect();
        let total: usize = chunks.iter().map(Vec::len).sum();
        let marked: Vec<ClientId> = self.resync.iter().copied().collect();
        for client in marked {
            if self.handshake.participant(client).is_none() {
                self.resync.remove(&client);
                continue;
            }
            if !io
                .server
                .can_send_message(client, NetChannel::Control, total)
            {
                continue;
            }
            for bytes in &chunks {
                io.server
                    .send_message(client, NetChannel::Control, bytes.clone());
            }
            self.resync.remove(&client);
            self.stats.resyncs_sent += 1;
            info!(
                "entity server: {client} resynced with the full owner table ({} bodies)",
                table.len()
            );
        }
    }

    /// Answers `client` with `refusal`: its reason, and the body's owner and priority as they
    /// stand.
    fn refuse(&mut self, io: &mut Io, client: ClientId, refusal: &Refusal) {
        debug!(
            "entity server: {client} refused on {}: {}",
            refusal.body, refusal.reason
        );
        let msg = ServerMessage::Ownership(OwnershipServerMessage::Refused {
            body: refusal.body,
            reason: refusal.reason,
            owner: refusal.owner,
            priority: refusal.priority.0,
        });
        self.send(io.server, client, NetChannel::Control, &msg);
    }

    fn send(
        &mut self,
        server: &mut RenetServer,
        client: ClientId,
        channel: NetChannel,
        msg: &ServerMessage,
    ) {
        if let Err(error) = server.send_msg_on(client, channel, msg) {
            self.send_failed(client, channel, error);
        }
    }

    /// Sends an encoded message, as [`send`](Self::send) would.
    fn send_encoded(
        &mut self,
        server: &mut RenetServer,
        client: ClientId,
        channel: NetChannel,
        bytes: Vec<u8>,
    ) {
        if !server.is_connected(client) {
            self.send_failed(client, channel, NetError::UnknownClient(client));
        } else if !server.can_send_message(client, channel, bytes.len()) {
            let error = NetError::ChannelFull {
                channel: channel.id(),
                bytes: bytes.len(),
            };
            self.send_failed(client, channel, error);
        } else {
            server.send_message(client, channel, bytes);
        }
    }

    /// A message to `client` on `channel` was not sent: counted; a full reliable channel marks
    /// the participant for resync.
    fn send_failed(&mut self, client: ClientId, channel: NetChannel, error: NetError) {
        self.stats.send_errors += 1;
        debug!("entity server: to {client}: {error}");
        let overflowed = matches!(error, NetError::ChannelFull { .. }) && channel.is_reliable();
        if overflowed && self.handshake.participant(client).is_some() && self.resync.insert(client)
        {
            self.stats.resyncs_marked += 1;
            warn!(
                "entity server: {client}'s control channel is full; it will get the full owner table"
            );
        }
    }
}

/// `ServerMessage::Ownership(OwnershipServerMessage::StateBatch(payload))` byte for byte as
/// [`encode`] lays it out, without serializing the payload a byte at a time: the message's
/// head (its enum tags, as `encode` gives them for an empty payload), the payload's length as
/// bincode's varint (one byte below 251, else 251 and two bytes, 252 and four, 253 and eight,
/// little-endian), then the payload.
///
/// # Errors
/// [`NetError::MessageTooLarge`] above [`MAX_MESSAGE_BYTES`] (as `encode`).
fn encode_state_batch(payload: &[u8]) -> Result<Vec<u8>, NetError> {
    let empty = ServerMessage::Ownership(OwnershipServerMessage::StateBatch(Vec::new()));
    let mut out = encode(&empty)?;
    // The empty payload's length, 0, is the last byte.
    out.pop();
    let n = payload.len();
    out.reserve(9 + n);
    if n < 251 {
        out.push(n as u8);
    } else if let Ok(n) = u16::try_from(n) {
        out.push(251);
        out.extend_from_slice(&n.to_le_bytes());
    } else if let Ok(n) = u32::try_from(n) {
        out.push(252);
        out.extend_from_slice(&n.to_le_bytes());
    } else {
        out.push(253);
        out.extend_from_slice(&(n as u64).to_le_bytes());
    }
    out.extend_from_slice(payload);
    if out.len() > MAX_MESSAGE_BYTES {
        return Err(NetError::MessageTooLarge {
            size: out.len(),
            limit: MAX_MESSAGE_BYTES,
        });
    }
    Ok(out)
}

fn record(body: BodyId, owner: Option<ParticipantId>, priority: Priority) -> OwnerRecord {
    OwnerRecord {
        body,
        owner,
        priority: priority.0,
    }
}

/// The server's world bodies, as the physics host reads and writes them.
type HostBodies<'w, 's> = Query<
    'w,
    's,
    (
        &'static BodyNetId,
        &'static mut Transform,
        Option<&'static mut Velocity>,
        Option<&'static Sleeping>,
    ),
>;

/// `PreUpdate`, after [`update`], with the physics host: the states accepted from participants
/// this update go to the bodies of the server's Rapier world (position, rotation, velocities),
/// which coasts them until the next.
pub(crate) fn sync_host_world(mut state: ResMut<EntityServer>, mut bodies: HostBodies) {
    let state = &mut *state;
    for (body, accepted) in std::mem::take(&mut state.to_world) {
        let Some(entity) = state.entity_of.get(&body).copied() else {
            continue;
        };
        let Ok((_, mut transform, mut velocity, _)) = bodies.get_mut(entity) else {
            continue;
        };
        accepted.write_to(&mut transform, velocity.as_deref_mut());
    }
}

/// `PostUpdate`, after Rapier's writeback, with the physics host ([rule
/// 21](crate::rules#rule-21--the-physics-host)): the server's state of every body becomes its
/// world's, and the host takes, publishes or releases bodies as [`PhysicsHost::step`] decides.
pub(crate) fn host_tick(
    clock: Res<OwnershipClock>,
    mut server: ResMut<RenetServer>,
    mut state: ResMut<EntityServer>,
    mut owners: Query<&'static mut SimulationOwner>,
    mut bodies: HostBodies,
    mut changed: MessageWriter<OwnershipChanged>,
) {
    let state = &mut *state;
    if state.host.is_none() {
        return;
    }
    let mut io = Io::new(&mut server, clock.now(), &mut owners);
    let focus = state.owner_focus();
    // Only bodies with a velocity move: every ownable one has one (registration inserts it),
    // static ones are left out of the host's per-tick work.
    for (id, transform, velocity, sleeping) in &mut bodies {
        let Some(mut velocity) = velocity else {
            continue;
        };
        let body = id.0;
        if !state.relay.contains_key(body) {
            continue;
        }
        let world = BodyState {
            position: transform.translation,
            rotation: transform.rotation,
            linear_velocity: velocity.linear,
            angular_velocity: velocity.angular,
        };
        let asleep = sleeping.is_some_and(|s| s.sleeping);
        if state.host_step(&mut io, body, world, asleep, &focus) {
            *velocity = Velocity::zero();
        }
    }
    changed.write_batch(io.changed);
}

impl EntityServer {
    /// Each joined participant's interest centre, by participant, for the far-owner option
    /// (empty when the option is off: nothing reads it).
    fn owner_focus(&self) -> HashMap<ParticipantId, Vec3> {
        let far_owners = self
            .host
            .as_ref()
            .is_some_and(|h| h.config().interest_radius.is_some());
        if !far_owners {
            return HashMap::default();
        }
        self.handshake
            .participants()
            .filter_map(|(client, participant)| Some((participant, self.focus(client)?)))
            .collect()
    }

    /// One body's host tick: the server's state of it becomes `world`, and the host acts.
    /// Returns whether the host released it (its world velocities must be zeroed).
    fn host_step(
        &mut self,
        io: &mut Io,
        body: BodyId,
        world: BodyState,
        sleeping: bool,
        focus: &HashMap<ParticipantId, Vec3>,
    ) -> bool {
        self.view.insert(body, (world, io.now));
        let owner = self.arbiter.owner(body);
        let observation = HostObservation {
            body,
            owner,
            linear_speed: world.linear_velocity.length(),
            angular_speed: world.angular_velocity.length(),
            sleeping,
            owner_distance: owner
                .and_then(|(o, _)| focus.get(&o))
                .map(|f| f.distance(world.position)),
        };
        let Some(action) = self
            .host
            .as_mut()
            .and_then(|h| h.step(&observation, io.now))
        else {
            return false;
        };
        match action {
            HostAction::Take { from_at_most, .. } => {
                self.host_take(io, body, world, from_at_most);
                false
            }
            HostAction::Publish(_) => {
                self.host_publish(body, world, io.now);
                false
            }
            HostAction::Release(_) => self.host_release(io, body, world),
        }
    }

    /// The host takes `body` (from an owner of priority `from_at_most` at most) if the arbiter
    /// grants it: counted (a take from a far owner too), announced, and its state `world`
    /// published.
    fn host_take(&mut self, io: &mut Io, body: BodyId, world: BodyState, from_at_most: Priority) {
        let Some(grant) = self.arbiter.host_take(body, from_at_most, io.now) else {
            return;
        };
        self.stats.host_takes += 1;
        debug!(
            "entity server: the physics host takes {body} at {:?} ({:.2} m/s)",
            io.now,
            world.linear_velocity.length()
        );
        if let Some(previous) = grant.previous_owner {
            self.stats.host_takes_from_far_owners += 1;
            info!("entity server: the physics host takes {body} from far {previous}");
        }
        self.announce(io, body, Some(grant.owner), grant.priority, None);
        self.host_publish(body, world, io.now);
    }

    /// The host releases `body` at rest: its state `world` with zero velocities is accepted
    /// first, then the release announced. Returns whether it was released (the host held it).
    fn host_release(&mut self, io: &mut Io, body: BodyId, world: BodyState) -> bool {
        self.accept_state(None, body, world.stopped(), io.now);
        let host = ParticipantId::ENTITY_SERVER;
        let Ok(released) = self.arbiter.release(host, body, io.now) else {
            return false;
        };
        self.stats.host_releases += 1;
        self.released(io, body, released.previous_owner);
        true
    }

    /// The host's state of a body it holds, to every participant.
    fn host_publish(&mut self, body: BodyId, world: BodyState, now: Duration) {
        let _ = self
            .arbiter
            .owner_update(ParticipantId::ENTITY_SERVER, body, now);
        self.stats.host_states_published += 1;
        self.accept_state(None, body, world, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_batch_message_is_framed_byte_for_byte_as_encode_lays_it_out() {
        for n in [0, 1, 127, 128, 250, 251, 252, 1_000, 60 * 1024] {
            let payload: Vec<u8> = (0..n).map(|i| (i * 7 % 256) as u8).collect();
            let msg = ServerMessage::Ownership(OwnershipServerMessage::StateBatch(payload.clone()));
            assert_eq!(
                encode_state_batch(&payload).expect("fits"),
                encode(&msg).expect("fits"),
                "{n}-byte payload"
            );
        }
        // Over the message limit: refused, as by `encode`.
        let payload = vec![0; MAX_MESSAGE_BYTES];
        let msg = ServerMessage::Ownership(OwnershipServerMessage::StateBatch(payload.clone()));
        assert!(encode(&msg).is_err());
        assert!(matches!(
            encode_state_batch(&payload),
            Err(NetError::MessageTooLarge { .. })
        ));
    }
}
