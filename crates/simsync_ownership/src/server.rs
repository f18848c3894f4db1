//! The entity server's systems and state ([`EntityServer`]): ownership arbitration (rules 1–5
//! and 7, by the [`OwnershipArbiter`]) and the state relay, over a `RenetServer`.
//!
//! # Identity
//! A participant's [`ParticipantId`] is assigned when its connection sends a `Hello` with the
//! ownership protocol (answered by a `Welcome` carrying the id), and every later message on that
//! connection is attributed to that id. No message carries its sender's id, so a participant
//! cannot act for another: a release or state update about someone else's body is refused as
//! `NotOwner` (ownership rule 4). Messages from a connection that has not joined are dropped and
//! counted.
//!
//! # What the server sends
//! - to the bidder: `Grant` or `Refused { reason }` for every bid; `Refused` for every refused
//!   release or state update;
//! - to every participant (control channel, reliable and ordered): `OwnerChanged` whenever a
//!   body's owner or priority changes; when a body becomes unowned — released (ownership
//!   rule 12), silent for `owner_silence_expiry` or its owner disconnected (ownership rule 5) —
//!   also a `StateRelay` of the body's last known state with **zero velocities**;
//! - to every participant but the owner: each accepted owner state update, as a `StateRelay`
//!   on the channel it came on.
//!
//! Relayed states are renumbered with one server sequence per body (16 bits, wrapping), so
//! a participant can drop any stale or duplicate relay with one [`SequenceFilter`] per body,
//! across owner changes. Incoming updates are filtered per body and owner: an update not newer
//! than the last one accepted from that owner for that body is dropped.

use core::time::Duration;
use std::collections::BTreeMap;

use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use bevy_rapier3d::prelude::RigidBody;
use simsync_net::bevy_renet::RenetServer;
use simsync_net::renet::ClientId;
use simsync_net::{
    ClientMessage, DecodeStats, NetChannel, NetClock, NetError, OwnerRecord,
    OwnershipClientMessage, OwnershipServerMessage, PROTOCOL_VERSION, Protocols, RejectReason,
    ServerMessage, ServerNetExt, Welcome, check_hello, millis_u32,
};

use crate::arbiter::{BodyKind, OwnershipArbiter, RefusalCounts, RefusalReason};
use crate::components::{BodyNetId, OwnershipLock, SimulationOwner};
use crate::config::OwnershipConfig;
use crate::error::OwnershipError;
use crate::plugin::{OwnershipChanged, OwnershipClock};
use crate::priority::{BodyId, ParticipantId, Priority};
use crate::relay::{BodyState, Sequence, SequenceFilter};
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
    /// Bids received (including an owner's priority changes, which travel as bids).
    pub bids_received: u64,
    /// Bids granted (ownership rules 2, 3; a VOLUNTEER granted as RECRUIT, rule 7) and
    /// priority changes accepted (rule 4).
    pub bids_granted: u64,
    /// Bids and priority changes refused, per reason (rules 1–4, priority range).
    pub bids_refused: RefusalCounts,
    /// Releases received.
    pub releases_received: u64,
    /// Releases accepted (ownership rule 12).
    pub releases_granted: u64,
    /// Releases refused, per reason (`NotOwner`: rule 4; `UnknownBody`).
    pub releases_refused: RefusalCounts,
    /// State updates received.
    pub state_updates_received: u64,
    /// State updates from the owner relayed to the other participants (each counted once,
    /// however many it was sent to).
    pub state_updates_relayed: u64,
    /// State updates from the owner dropped because they were not newer than the last one
    /// accepted (duplicates, reordered or stale).
    pub state_updates_stale: u64,
    /// State updates refused, per reason (`NotOwner`: only the owner's state is relayed;
    /// `UnknownBody`).
    pub state_updates_refused: RefusalCounts,
    /// State updates with a sequence number or values out of range (see
    /// [`wire::state_from_wire`]): dropped.
    pub state_updates_invalid: u64,
    /// Zero-velocity states broadcast when a body became unowned (rules 5 and 12).
    pub zero_states_sent: u64,
    /// Owners cleared after `owner_silence_expiry` without an update (ownership rule 5).
    pub expiries: u64,
    /// Owners cleared because their connection closed (ownership rule 5).
    pub disconnect_clears: u64,
    /// Messages that could not be sent (channel full, client gone).
    pub send_errors: u64,
}

impl EntityServerStats {
    /// Every refusal sent back, per reason: bids, releases and state updates together.
    pub fn refusals(&self) -> RefusalCounts {
        let mut all = self.bids_refused;
        for counts in [self.releases_refused, self.state_updates_refused] {
            for (reason, n) in counts.iter() {
                for _ in 0..n {
                    all.add(reason);
                }
            }
        }
        all
    }
}

/// The relay state of one body.
#[derive(Debug, Clone, Copy)]
struct RelayBody {
    /// The last state accepted from an owner (or the registered transform, at rest).
    last_state: Option<BodyState>,
    /// The server's relay sequence for this body.
    seq: Sequence,
}

/// The entity server's state: the [`OwnershipArbiter`], the connection → participant table, the
/// relay state per body and [`EntityServerStats`]. Inserted by
/// [`OwnershipPlugin::entity_server`](crate::OwnershipPlugin::entity_server).
#[derive(Resource, Debug)]
pub struct EntityServer {
    arbiter: OwnershipArbiter,
    participants: BTreeMap<ClientId, ParticipantId>,
    next_participant: u16,
    relay: HashMap<BodyId, RelayBody>,
    entity_of: HashMap<BodyId, Entity>,
    body_of: HashMap<Entity, BodyId>,
    /// Last accepted update number per (body, owner).
    filters: HashMap<(BodyId, ParticipantId), SequenceFilter>,
    stats: EntityServerStats,
    decode: DecodeStats,
}

impl EntityServer {
    /// An empty server applying `config`.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if the config does not validate.
    pub fn new(config: OwnershipConfig) -> Result<Self, OwnershipError> {
        Ok(Self {
            arbiter: OwnershipArbiter::new(config)?,
            participants: BTreeMap::new(),
            next_participant: 1,
            relay: HashMap::default(),
            entity_of: HashMap::default(),
            body_of: HashMap::default(),
            filters: HashMap::default(),
            stats: EntityServerStats::default(),
            decode: DecodeStats::default(),
        })
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
        self.participants.get(&client).copied()
    }

    /// Joined connections and their ids, by connection id.
    pub fn participants(&self) -> impl Iterator<Item = (ClientId, ParticipantId)> + '_ {
        self.participants.iter().map(|(c, p)| (*c, *p))
    }

    /// The entity of a registered body.
    pub fn entity_of(&self, body: BodyId) -> Option<Entity> {
        self.entity_of.get(&body).copied()
    }

    /// The last state the server accepted for `body` from an owner (or its registered
    /// transform, at rest).
    pub fn last_state(&self, body: BodyId) -> Option<BodyState> {
        self.relay.get(&body).and_then(|r| r.last_state)
    }

    fn register(&mut self, entity: Entity, body: BodyId, kind: BodyKind, state: Option<BodyState>) {
        if let Err(error) = self.arbiter.register_body(body, kind) {
            warn!("entity server: {error}; entity {entity} ignored");
            return;
        }
        self.entity_of.insert(body, entity);
        self.body_of.insert(entity, body);
        self.relay.insert(
            body,
            RelayBody {
                last_state: state,
                seq: Sequence::default(),
            },
        );
    }

    fn unregister(&mut self, entity: Entity) {
        let Some(body) = self.body_of.remove(&entity) else {
            return;
        };
        self.entity_of.remove(&body);
        self.relay.remove(&body);
        self.filters.retain(|(b, _), _| *b != body);
        let _ = self.arbiter.unregister_body(body);
    }
}

/// `PreUpdate`: registers bodies (entities with a [`BodyNetId`]; the kind from their
/// `RigidBody`, dynamic if none; the last state from their `Transform`), unregisters removed
/// ones and applies [`OwnershipLock`] (ownership rule 1).
#[allow(clippy::type_complexity)]
pub(crate) fn register_bodies(
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
        let at_rest = transform.map(|t| wire::resting_state(t.translation, t.rotation));
        state.register(entity, id.0, kind, at_rest);
        if lock {
            let _ = state.arbiter.set_locked(id.0, true);
        }
        commands
            .entity(entity)
            .insert_if_new(SimulationOwner::UNOWNED);
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

/// Everything one server update needs besides the state.
struct Io<'a, 'w, 's> {
    server: &'a mut RenetServer,
    now: Duration,
    owners: &'a mut Query<'w, 's, &'static mut SimulationOwner>,
    changed: Vec<OwnershipChanged>,
}

/// `PreUpdate`: handles every message received, then disconnects and silence expiry.
pub(crate) fn update(
    clock: Res<OwnershipClock>,
    net_clock: Option<Res<NetClock>>,
    mut server: ResMut<RenetServer>,
    mut state: ResMut<EntityServer>,
    mut owners: Query<&'static mut SimulationOwner>,
    mut changed: MessageWriter<OwnershipChanged>,
) {
    let tick_rate_hz = match net_clock.as_deref() {
        Some(NetClock::Fixed(step)) if !step.is_zero() => {
            (1.0 / step.as_secs_f64()).round().min(f64::from(u16::MAX)) as u16
        }
        _ => 0,
    };
    let state = &mut *state;
    let mut decode = state.decode;
    let received = server.receive_msgs(&mut decode);
    state.decode = decode;
    let mut io = Io {
        server: &mut server,
        now: clock.now(),
        owners: &mut owners,
        changed: Vec::new(),
    };
    for message in received {
        let client = message.client_id;
        match message.message {
            Ok(ClientMessage::Hello(hello)) => {
                state.on_hello(&mut io, client, &hello, tick_rate_hz)
            }
            Err(NetError::VersionMismatch { theirs, .. }) => {
                state.stats.hellos_rejected += 1;
                let reply = ServerMessage::Rejected {
                    reason: RejectReason::VersionMismatch {
                        server: PROTOCOL_VERSION,
                        client: theirs,
                    },
                };
                state.send(io.server, client, NetChannel::Control, &reply);
            }
            Err(error) => {
                // Counted in the decode stats.
                debug!("entity server: undecodable message from {client}: {error}");
            }
            Ok(other) => {
                let Some(from) = state.participants.get(&client).copied() else {
                    state.stats.messages_ignored += 1;
                    debug!("entity server: message from {client} before it joined, dropped");
                    continue;
                };
                match other {
                    ClientMessage::Ownership(msg) => {
                        state.on_ownership(&mut io, client, from, message.channel, msg);
                    }
                    ClientMessage::Ping { t } => {
                        let pong = ServerMessage::Pong {
                            t,
                            server_time_ms: millis_u32(io.now),
                        };
                        state.send(io.server, client, NetChannel::Inputs, &pong);
                    }
                    ClientMessage::Goodbye => state.on_left(&mut io, client),
                    ClientMessage::Pong { .. } | ClientMessage::Session(_) => {
                        state.stats.messages_ignored += 1;
                    }
                    // Answered above; the match needs the arm.
                    ClientMessage::Hello(_) => {}
                }
            }
        }
    }
    // Disconnects: joined connections the server no longer has.
    let gone: Vec<ClientId> = state
        .participants
        .keys()
        .copied()
        .filter(|c| !io.server.is_connected(*c))
        .collect();
    for client in gone {
        state.on_left(&mut io, client);
    }
    // Ownership rule 5: silent owners.
    let expired = state.arbiter.expire(io.now);
    state.stats.expiries += expired.len() as u64;
    for e in expired {
        info!(
            "entity server: {} silent for {:?}, cleared",
            e.previous_owner,
            state.arbiter.config().owner_silence_expiry
        );
        state.cleared(&mut io, e.body, e.previous_owner);
    }
    changed.write_batch(io.changed);
}

impl EntityServer {
    fn on_hello(
        &mut self,
        io: &mut Io,
        client: ClientId,
        hello: &simsync_net::Hello,
        tick_rate_hz: u16,
    ) {
        let rejected = match check_hello(hello) {
            Err(reason) => Some(reason),
            Ok(()) if !hello.protocols.contains(Protocols::OWNERSHIP) => {
                Some(RejectReason::UnsupportedProtocols(hello.protocols))
            }
            Ok(()) if self.participants.contains_key(&client) => Some(RejectReason::AlreadyJoined),
            Ok(()) if self.next_participant == u16::MAX => Some(RejectReason::ServerFull),
            Ok(()) => None,
        };
        if let Some(reason) = rejected {
            self.stats.hellos_rejected += 1;
            info!("entity server: {client} rejected: {reason:?}");
            self.send(
                io.server,
                client,
                NetChannel::Control,
                &ServerMessage::Rejected { reason },
            );
            return;
        }
        let participant = ParticipantId(self.next_participant);
        self.next_participant += 1;
        self.participants.insert(client, participant);
        self.stats.participants_joined += 1;
        info!(
            "entity server: {client} ({:?}) joined as {participant}",
            hello.name
        );
        let welcome = ServerMessage::Welcome(Welcome {
            protocol_version: PROTOCOL_VERSION,
            participant,
            player_slot: None,
            protocols: Protocols::OWNERSHIP,
            tick_rate_hz,
            server_tick: 0,
            players: 0,
        });
        self.send(io.server, client, NetChannel::Control, &welcome);
        // The owned bodies and their last states, so a late joiner starts from the truth.
        let owned: Vec<OwnerRecord> = self
            .arbiter
            .records()
            .iter()
            .filter(|r| r.owner.is_some())
            .map(|r| record(r.body, r.owner, r.priority))
            .collect();
        if !owned.is_empty() {
            let snapshot =
                ServerMessage::Ownership(OwnershipServerMessage::Snapshot(owned.clone()));
            self.send(io.server, client, NetChannel::Control, &snapshot);
            for r in owned {
                let body = r.body;
                if let (Some(owner), Some(relay)) = (r.owner, self.relay.get(&body))
                    && let Some(last) = relay.last_state
                {
                    let msg = relay_message(owner, body, relay.seq, &last);
                    self.send(io.server, client, NetChannel::Control, &msg);
                }
            }
        }
    }

    fn on_left(&mut self, io: &mut Io, client: ClientId) {
        let Some(participant) = self.participants.remove(&client) else {
            return;
        };
        self.stats.participants_left += 1;
        self.filters.retain(|(_, p), _| *p != participant);
        let cleared = self.arbiter.disconnect(participant, io.now);
        info!(
            "entity server: {participant} left; {} bodies cleared",
            cleared.len()
        );
        self.stats.disconnect_clears += cleared.len() as u64;
        for e in cleared {
            self.cleared(io, e.body, e.previous_owner);
        }
    }

    fn on_ownership(
        &mut self,
        io: &mut Io,
        client: ClientId,
        from: ParticipantId,
        channel: NetChannel,
        msg: OwnershipClientMessage,
    ) {
        match msg {
            OwnershipClientMessage::Bid { body, priority } => {
                self.on_bid(io, client, from, body, Priority(priority));
            }
            OwnershipClientMessage::Release { body } => {
                self.stats.releases_received += 1;
                match self.arbiter.release(from, body, io.now) {
                    Ok(released) => {
                        self.stats.releases_granted += 1;
                        self.cleared(io, body, released.previous_owner);
                    }
                    Err(refusal) => {
                        self.stats.releases_refused.add(refusal.reason);
                        self.refuse(io, client, body, refusal.reason);
                    }
                }
            }
            OwnershipClientMessage::StateUpdate(state) => {
                self.stats.state_updates_received += 1;
                let (body, seq, state) = match wire::state_from_wire(&state) {
                    Ok(parts) => parts,
                    Err(error) => {
                        self.stats.state_updates_invalid += 1;
                        debug!("entity server: from {from}: {error}");
                        return;
                    }
                };
                if let Err(refusal) = self.arbiter.owner_update(from, body, io.now) {
                    self.stats.state_updates_refused.add(refusal.reason);
                    self.refuse(io, client, body, refusal.reason);
                    return;
                }
                if !self.filters.entry((body, from)).or_default().accept(seq) {
                    self.stats.state_updates_stale += 1;
                    return;
                }
                let Some(relay) = self.relay.get_mut(&body) else {
                    return;
                };
                relay.last_state = Some(state);
                relay.seq = relay.seq.next();
                let msg = relay_message(from, body, relay.seq, &state);
                self.stats.state_updates_relayed += 1;
                self.broadcast(io.server, Some(client), channel, &msg);
            }
        }
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
                    self.announce(io, body, Some(grant.owner), grant.priority);
                }
            }
            Err(refusal) => {
                self.stats.bids_refused.add(refusal.reason);
                self.refuse(io, client, body, refusal.reason);
            }
        }
    }

    /// A body became unowned (released, silent or disconnected): announce it, then send its
    /// last state with zero velocities to everyone (ownership rules 5 and 12).
    fn cleared(&mut self, io: &mut Io, body: BodyId, previous_owner: ParticipantId) {
        self.announce(io, body, None, Priority::NONE);
        let Some(relay) = self.relay.get_mut(&body) else {
            return;
        };
        let Some(last) = relay.last_state else {
            return;
        };
        let zero = wire::at_rest(&last);
        relay.last_state = Some(zero);
        relay.seq = relay.seq.next();
        let msg = relay_message(previous_owner, body, relay.seq, &zero);
        self.stats.zero_states_sent += 1;
        self.broadcast(io.server, None, NetChannel::Control, &msg);
    }

    /// Broadcasts the body's new owner, updates its [`SimulationOwner`] and writes
    /// [`OwnershipChanged`].
    fn announce(
        &mut self,
        io: &mut Io,
        body: BodyId,
        owner: Option<ParticipantId>,
        priority: Priority,
    ) {
        let msg = ServerMessage::Ownership(OwnershipServerMessage::OwnerChanged(record(
            body, owner, priority,
        )));
        self.broadcast(io.server, None, NetChannel::Control, &msg);
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

    fn refuse(&mut self, io: &mut Io, client: ClientId, body: BodyId, reason: RefusalReason) {
        debug!("entity server: {client} refused on {body}: {reason}");
        let msg = ServerMessage::Ownership(OwnershipServerMessage::Refused {
            body,
            reason: wire::refuse_reason_to_wire(reason),
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
            self.stats.send_errors += 1;
            debug!("entity server: to {client}: {error}");
        }
    }

    /// Sends `msg` on `channel` to every joined participant except `except`, in connection-id
    /// order.
    fn broadcast(
        &mut self,
        server: &mut RenetServer,
        except: Option<ClientId>,
        channel: NetChannel,
        msg: &ServerMessage,
    ) {
        let clients: Vec<ClientId> = self.participants.keys().copied().collect();
        for client in clients {
            if Some(client) != except {
                self.send(server, client, channel, msg);
            }
        }
    }
}

fn record(body: BodyId, owner: Option<ParticipantId>, priority: Priority) -> OwnerRecord {
    OwnerRecord {
        body,
        owner,
        priority: priority.0,
    }
}

fn relay_message(
    owner: ParticipantId,
    body: BodyId,
    seq: Sequence,
    state: &BodyState,
) -> ServerMessage {
    ServerMessage::Ownership(OwnershipServerMessage::StateRelay {
        owner,
        state: wire::state_to_wire(body, seq, state),
    })
}
