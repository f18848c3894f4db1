//! The participant's systems and state ([`OwnershipParticipant`]): rules 6–14 (through
//! [`ParticipantOwnership`]) applied to what the local Rapier world shows, state updates for
//! owned bodies, and relayed state applied to the others, over a `RenetClient`.
//!
//! # One frame
//! 1. `PreUpdate` ([`OwnershipSet::Receive`](crate::OwnershipSet::Receive)): the handshake
//!    (`Hello` with the ownership protocol once connected; the `Welcome` gives this
//!    participant's id); the server's answers update the state machine, [`SimulationOwner`] and
//!    write [`OwnershipChanged`] / [`BidRefused`]; a relayed state newer than the last applied
//!    one (one [`SequenceFilter`] per body) is written to the body's `Transform` and `Velocity`
//!    unless this participant owns the body. When a body becomes unowned its local velocities
//!    are zeroed (ownership rules 5 and 12).
//! 2. `Update`: game code; the [user API](crate::OwnershipEntityCommandsExt) marks bodies.
//! 3. `PostUpdate`, after Rapier
//!    ([`OwnershipSet::Send`](crate::OwnershipSet::Send)): one [`BodyObservation`] per
//!    [`Ownable`] dynamic body with a [`BodyNetId`] —
//!    *active* from its velocity, sleep state and displacement ([`ActivityConfig`]);
//!    *touched by the avatar* when a Rapier contact with the [`ParticipantAvatar`] becomes
//!    active (the body in contact and moving — a collision, counted once, not every frame a
//!    resting contact lasts); *script edited* from [`Poked`]; *held* from [`Held`] (and always
//!    for the own avatar); *hit by an owned body* when a moving body this participant owns
//!    comes into contact with it while it moves (the same event rule);
//!    *interested* unless [`Uninterested`] — then [`ParticipantOwnership::tick`], whose actions
//!    become `Bid` / `Release` messages (a release preceded by the body's final state with zero
//!    velocities, both on the reliable channel) and zeroed velocities; then a `StateUpdate` for
//!    every owned body whose state drifted past the thresholds or whose heartbeat is due
//!    ([`should_send`]).
//!
//! Static and kinematic bodies are never observed, so never bid for; relayed states for them
//! are ignored and counted.

use core::time::Duration;

use bevy::math::{Quat, Vec3};
use bevy::platform::collections::{HashMap, HashSet};
use bevy::prelude::*;
use bevy_rapier3d::prelude::{ReadRapierContext, RigidBody, Sleeping, Velocity};
use simsync_net::bevy_renet::RenetClient;
use simsync_net::{
    ClientMessage, ClientNetExt, DecodeStats, Hello, NetChannel, OwnerRecord,
    OwnershipClientMessage, OwnershipServerMessage, Protocols, RejectReason, ServerMessage,
};

use crate::arbiter::{BodyKind, Grant, Refusal, RefusalCounts};
use crate::components::{BodyNetId, Ownable, OwnershipBid, SimulationOwner};
use crate::config::OwnershipConfig;
use crate::error::OwnershipError;
use crate::participant::{Action, BodyObservation, ParticipantOwnership, PendingRequest};
use crate::plugin::{
    ActivityConfig, BidRefused, Held, OwnershipChanged, OwnershipClock, ParticipantAvatar, Poked,
    Uninterested,
};
use crate::priority::{BodyId, ParticipantId, Priority};
use crate::relay::{BodyState, Sequence, SequenceFilter, should_send};
use crate::wire;

/// Where a participant is in the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinStatus {
    /// Waiting for the connection.
    Connecting,
    /// `Hello` sent, waiting for the `Welcome`.
    HelloSent,
    /// Joined with this id; ownership runs.
    Joined(ParticipantId),
    /// The server refused the `Hello`; nothing more happens.
    Rejected(RejectReason),
    /// The connection closed after joining; nothing more happens.
    Disconnected,
}

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
    /// `Grant`s received.
    pub grants_received: u64,
    /// `Refused` received, per (refined) reason.
    pub refusals_received: RefusalCounts,
    /// `OwnerChanged` received.
    pub owner_changes_received: u64,
    /// Bodies whose velocities were zeroed locally: on release at rest (ownership rule 12) or
    /// because the server cleared the owner (ownership rules 5, 12).
    pub velocities_zeroed: u64,
    /// State updates sent for owned bodies (final states before a release included).
    pub state_updates_sent: u64,
    /// Encoded bytes of those state updates (`ClientMessage` as sent, before renet's framing).
    pub state_update_bytes: u64,
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
    /// Relayed states with values out of range ([`wire::state_from_wire`]): dropped.
    pub relays_invalid: u64,
    /// Messages ignored: before the `Welcome`, a second `Welcome`, other protocols.
    pub messages_ignored: u64,
    /// Messages that could not be queued (channel full, disconnected).
    pub send_errors: u64,
}

/// What a participant keeps per body besides the state machine.
#[derive(Debug, Clone)]
struct LocalBody {
    entity: Entity,
    kind: BodyKind,
    /// Relayed states applied so far (server sequence).
    filter: SequenceFilter,
    /// This participant's own update numbering for the body.
    out_seq: Sequence,
    /// While owned: the last state sent and when.
    sent: Option<(BodyState, Duration)>,
    /// Since when the body has been below the rest speeds.
    still_since: Option<Duration>,
    /// The last state the network agreed on (position, rotation).
    anchor: Option<(Vec3, Quat)>,
}

/// A participant's state: the handshake, the [`ParticipantOwnership`] state machine (once
/// joined), per-body relay and activity state, and [`ParticipantStats`]. Inserted by
/// [`OwnershipPlugin::participant`](crate::OwnershipPlugin::participant).
#[derive(Resource, Debug)]
pub struct OwnershipParticipant {
    name: String,
    config: OwnershipConfig,
    activity: ActivityConfig,
    status: JoinStatus,
    machine: Option<ParticipantOwnership>,
    bodies: HashMap<BodyId, LocalBody>,
    by_entity: HashMap<Entity, BodyId>,
    /// Contacts active last frame: (avatar or moving owned body, other body).
    contacts: HashSet<(Entity, Entity)>,
    stats: ParticipantStats,
    decode: DecodeStats,
}

impl OwnershipParticipant {
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
            name,
            config,
            activity,
            status: JoinStatus::Connecting,
            machine: None,
            bodies: HashMap::default(),
            by_entity: HashMap::default(),
            contacts: HashSet::default(),
            stats: ParticipantStats::default(),
            decode: DecodeStats::default(),
        })
    }

    /// Where the handshake is.
    pub fn status(&self) -> &JoinStatus {
        &self.status
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

    /// The body id of a registered entity.
    pub fn body_of(&self, entity: Entity) -> Option<BodyId> {
        self.by_entity.get(&entity).copied()
    }

    fn forget_entity(&mut self, entity: Entity) {
        if let Some(body) = self.by_entity.remove(&entity) {
            self.bodies.remove(&body);
            if let Some(machine) = &mut self.machine {
                machine.forget(body);
            }
        }
    }

    fn send(&mut self, client: &mut RenetClient, channel: NetChannel, msg: &ClientMessage) -> bool {
        match client.send_msg_on(channel, msg) {
            Ok(()) => true,
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
    mut state: ResMut<OwnershipParticipant>,
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
                filter: SequenceFilter::default(),
                out_seq: Sequence::default(),
                sent: None,
                still_since: None,
                anchor: None,
            },
        );
        state.by_entity.insert(entity, body);
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
    bodies: &'a mut Query<'qw, 'qs, BodyWrite<'static>>,
    changed: Vec<OwnershipChanged>,
    refused: Vec<BidRefused>,
    commands: &'a mut Commands<'cw, 'cs>,
}

/// `PreUpdate`: the handshake and every message from the server.
pub(crate) fn receive(
    clock: Res<OwnershipClock>,
    mut client: ResMut<RenetClient>,
    mut state: ResMut<OwnershipParticipant>,
    mut bodies: Query<BodyWrite<'static>>,
    mut changed: MessageWriter<OwnershipChanged>,
    mut refused: MessageWriter<BidRefused>,
    mut commands: Commands,
) {
    let state = &mut *state;
    match state.status {
        JoinStatus::Connecting if client.is_connected() => {
            let hello = ClientMessage::Hello(Hello::new(Protocols::OWNERSHIP, state.name.clone()));
            if state.send(&mut client, NetChannel::Control, &hello) {
                state.status = JoinStatus::HelloSent;
            }
        }
        JoinStatus::Joined(me) if client.is_disconnected() => {
            warn!("participant: {me} lost its connection");
            state.status = JoinStatus::Disconnected;
        }
        _ => {}
    }
    let mut decode = state.decode;
    let received = client.receive_msgs(&mut decode);
    state.decode = decode;
    let mut rx = Rx {
        now: clock.now(),
        bodies: &mut bodies,
        changed: Vec::new(),
        refused: Vec::new(),
        commands: &mut commands,
    };
    for message in received {
        let message = match message.message {
            Ok(message) => message,
            Err(error) => {
                // Counted in the decode stats.
                debug!("participant: undecodable message: {error}");
                continue;
            }
        };
        match message {
            ServerMessage::Welcome(welcome) => {
                if state.machine.is_some() {
                    state.stats.messages_ignored += 1;
                    continue;
                }
                let me = welcome.participant;
                match ParticipantOwnership::new(me, state.config.clone()) {
                    Ok(machine) => {
                        info!("participant: joined as {me}");
                        state.machine = Some(machine);
                        state.status = JoinStatus::Joined(me);
                    }
                    Err(error) => error!("participant: {error}"),
                }
            }
            ServerMessage::Rejected { reason } => {
                error!("participant: the entity server refused us: {reason:?}");
                state.status = JoinStatus::Rejected(reason);
            }
            ServerMessage::Ping { t } => {
                state.send(&mut client, NetChannel::Inputs, &ClientMessage::Pong { t });
            }
            ServerMessage::Ownership(msg) if state.machine.is_some() => {
                state.on_ownership(&mut rx, msg);
            }
            ServerMessage::Ownership(_)
            | ServerMessage::Pong { .. }
            | ServerMessage::Session(_) => {
                state.stats.messages_ignored += 1;
            }
        }
    }
    changed.write_batch(rx.changed);
    refused.write_batch(rx.refused);
}

impl OwnershipParticipant {
    fn on_ownership(&mut self, rx: &mut Rx, msg: OwnershipServerMessage) {
        match msg {
            OwnershipServerMessage::Grant { body, priority } => {
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
                machine.on_grant(&Grant {
                    body,
                    owner: me,
                    priority,
                    previous_owner: None,
                });
                if let Some(local) = self.bodies.get_mut(&body) {
                    local.sent = None;
                }
                self.set_owner_component(rx, body, Some(me), priority);
            }
            OwnershipServerMessage::Refused { body, reason } => {
                let Some(machine) = self.machine.as_mut() else {
                    return;
                };
                let Some(local) = self.bodies.get(&body) else {
                    // Counted, but kept out of the state machine (a server could otherwise grow
                    // it without bound).
                    let reason = wire::refuse_reason_from_wire(reason, None, None, &self.config);
                    self.stats.refusals_received.add(reason);
                    self.stats.unknown_bodies += 1;
                    return;
                };
                let entity = local.entity;
                let kind = local.kind;
                let pending = machine.pending(body);
                let asked = match pending {
                    Some(PendingRequest::Bid(p) | PendingRequest::PriorityChange(p)) => Some(p),
                    _ => None,
                };
                let reason = wire::refuse_reason_from_wire(reason, asked, Some(kind), &self.config);
                self.stats.refusals_received.add(reason);
                // `NotOwner` never answers a bid: it refuses a state update (or a release)
                // sent before this participant heard it lost the body.
                let answers = pending.is_some()
                    && !(reason == crate::RefusalReason::NotOwner
                        && matches!(pending, Some(PendingRequest::Bid(_))));
                if answers {
                    let (owner, priority) = machine
                        .owner(body)
                        .map_or((None, Priority::NONE), |(o, p)| (Some(o), p));
                    machine.on_refused(
                        &Refusal {
                            body,
                            reason,
                            owner,
                            priority,
                        },
                        rx.now,
                    );
                }
                rx.refused.push(BidRefused {
                    entity,
                    body,
                    reason,
                });
            }
            OwnershipServerMessage::OwnerChanged(record) => {
                self.stats.owner_changes_received += 1;
                self.on_owner_record(rx, record, true);
            }
            OwnershipServerMessage::Snapshot(records) => {
                for record in records {
                    self.on_owner_record(rx, record, false);
                }
            }
            OwnershipServerMessage::StateRelay { owner: _, state } => {
                self.stats.relays_received += 1;
                self.on_relay(rx, &state);
            }
        }
    }

    fn on_owner_record(&mut self, rx: &mut Rx, record: OwnerRecord, zero_if_cleared: bool) {
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
        let was_mine = machine.owned_priority(body).is_some();
        machine.on_owner_changed(body, owner, priority);
        let is_mine = machine.owned_priority(body).is_some();
        if was_mine && !is_mine {
            // Relays about the body matter again; the gap while we owned it may be long.
            local.filter.reset();
        }
        if !is_mine {
            local.sent = None;
        }
        let entity = local.entity;
        if owner.is_none()
            && zero_if_cleared
            && let Ok((_, Some(mut velocity), _)) = rx.bodies.get_mut(entity)
        {
            *velocity = Velocity::zero();
            self.stats.velocities_zeroed += 1;
        }
        self.set_owner_component(rx, body, owner, priority);
    }

    fn on_relay(&mut self, rx: &mut Rx, state: &simsync_net::BodyState) {
        let (body, seq, state) = match wire::state_from_wire(state) {
            Ok(parts) => parts,
            Err(error) => {
                self.stats.relays_invalid += 1;
                debug!("participant: relayed state dropped: {error}");
                return;
            }
        };
        let Some(local) = self.bodies.get_mut(&body).filter(|b| b.kind.is_ownable()) else {
            self.stats.unknown_bodies += 1;
            return;
        };
        if self
            .machine
            .as_ref()
            .is_some_and(|m| m.owned_priority(body).is_some())
        {
            self.stats.relays_ignored_owned += 1;
            return;
        }
        if !local.filter.accept(seq) {
            self.stats.relays_stale += 1;
            return;
        }
        let Ok((mut transform, velocity, _)) = rx.bodies.get_mut(local.entity) else {
            self.stats.unknown_bodies += 1;
            return;
        };
        transform.translation = state.position;
        transform.rotation = state.rotation;
        if let Some(mut velocity) = velocity {
            velocity.linear = state.linear_velocity;
            velocity.angular = state.angular_velocity;
        }
        local.anchor = Some((state.position, state.rotation));
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

/// `PostUpdate`, after Rapier: observations → rules 6–14 → messages; state updates.
#[allow(clippy::too_many_arguments)] // A Bevy system: one parameter per resource and query.
pub(crate) fn observe_and_send(
    clock: Res<OwnershipClock>,
    mut client: ResMut<RenetClient>,
    mut state: ResMut<OwnershipParticipant>,
    rapier: ReadRapierContext,
    mut bodies: Query<BodyRead<'static>, With<Ownable>>,
    avatars: Query<Entity, With<ParticipantAvatar>>,
    poked: Query<Entity, With<Poked>>,
    mut commands: Commands,
) {
    for entity in &poked {
        commands.entity(entity).remove::<Poked>();
    }
    let state = &mut *state;
    let Some(machine) = state.machine.as_mut() else {
        return;
    };
    if !client.is_connected() {
        return;
    }
    let now = clock.now();
    let activity = state.activity;

    // 1. What each body is doing.
    let mut seen = Vec::with_capacity(state.bodies.len());
    for (entity, id, rigid_body, transform, velocity, sleeping, flags, bid) in &mut bodies {
        let (poked, held, uninterested, avatar) = flags;
        let body = id.0;
        let Some(local) = state.bodies.get_mut(&body).filter(|b| b.entity == entity) else {
            continue;
        };
        local.kind = BodyKind::from(*rigid_body);
        if !local.kind.is_ownable() {
            continue;
        }
        let (linear, angular) =
            velocity.map_or((Vec3::ZERO, Vec3::ZERO), |v| (v.linear, v.angular));
        let asleep = sleeping.is_some_and(|s| s.sleeping);
        let moving = !asleep
            && (linear.length() > activity.rest_linear_speed
                || angular.length() > activity.rest_angular_speed);
        if moving {
            local.still_since = None;
        } else {
            local.still_since.get_or_insert(now);
        }
        let at_rest = asleep
            || local
                .still_since
                .is_some_and(|since| now.saturating_sub(since) >= activity.rest_delay);
        if at_rest && local.anchor.is_none() {
            local.anchor = Some((transform.translation, transform.rotation));
        }
        let displaced = local.anchor.is_some_and(|(position, rotation)| {
            transform.translation.distance(position) > activity.displacement_meters
                || transform.rotation.angle_between(rotation)
                    > activity.displacement_degrees.to_radians()
        });
        seen.push(Seen {
            entity,
            body,
            state: BodyState {
                position: transform.translation,
                rotation: transform.rotation,
                linear_velocity: linear,
                angular_velocity: angular,
            },
            moving,
            at_rest,
            displaced,
            poked,
            held: held || avatar,
            interested: !uninterested,
            avatar,
            bid: bid.map(|b| b.priority),
        });
    }

    // 2. Contacts: bodies the avatar sets moving (rule 9), bodies a moving owned body sets
    //    moving (rule 11). Both are collisions — events — so a pair counts on the frame it
    //    becomes *active* (in contact, and the touched body moving), not on every frame it
    //    stays so, and never for a body that stays at rest: otherwise a body resting against an
    //    avatar or an owned body would be bid for, granted, found at rest and released (rule 12)
    //    over and over.
    let moving: HashMap<Entity, bool> = seen.iter().map(|s| (s.entity, s.moving)).collect();
    let is_moving = |e: Entity| moving.get(&e).copied().unwrap_or(false);
    let mut touched: HashSet<Entity> = HashSet::default();
    let mut hits: HashMap<Entity, Priority> = HashMap::default();
    let mut active_contacts: HashSet<(Entity, Entity)> = HashSet::default();
    if let Ok(ctx) = rapier.single() {
        let contacts_of = |body: Entity, mut on_contact: Box<dyn FnMut(Entity) + '_>| {
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
        };
        for avatar in &avatars {
            contacts_of(
                avatar,
                Box::new(|other| {
                    if is_moving(other) {
                        active_contacts.insert((avatar, other));
                        if !state.contacts.contains(&(avatar, other)) {
                            touched.insert(other);
                        }
                    }
                }),
            );
        }
        for s in seen.iter().filter(|s| s.moving) {
            if let Some(priority) = machine.owned_priority(s.body) {
                let hitter = s.entity;
                contacts_of(
                    hitter,
                    Box::new(|other| {
                        if !is_moving(other) {
                            return;
                        }
                        active_contacts.insert((hitter, other));
                        if !state.contacts.contains(&(hitter, other)) {
                            let best = hits.entry(other).or_insert(priority);
                            *best = (*best).max(priority);
                        }
                    }),
                );
            }
        }
    }
    state.contacts = active_contacts;

    // 3. Rules 6–14.
    let mut pending_before: HashMap<BodyId, PendingRequest> = HashMap::default();
    let observations: Vec<BodyObservation> = seen
        .iter()
        .map(|s| {
            if let Some(p) = machine.pending(s.body) {
                pending_before.insert(s.body, p);
            }
            let owned = machine.owned_priority(s.body).is_some();
            BodyObservation {
                body: s.body,
                active: !s.at_rest || (!owned && s.displaced),
                touched_by_avatar: !s.avatar && touched.contains(&s.entity),
                script_edited: s.poked,
                held: s.held,
                hit_by_owned: hits.get(&s.entity).copied(),
                interested: s.interested,
            }
        })
        .collect();
    let actions = machine.tick(now, observations);
    let index: HashMap<BodyId, usize> = seen.iter().enumerate().map(|(i, s)| (s.body, i)).collect();
    for action in actions {
        match action {
            Action::SendBid { body, priority } | Action::SendPriorityChange { body, priority } => {
                let change = matches!(action, Action::SendPriorityChange { .. });
                let request = if change {
                    PendingRequest::PriorityChange(priority)
                } else {
                    PendingRequest::Bid(priority)
                };
                let msg = ClientMessage::Ownership(OwnershipClientMessage::Bid {
                    body,
                    priority: priority.0,
                });
                if state.send(&mut client, NetChannel::Control, &msg) {
                    state.stats.bids_sent += 1;
                    state.stats.priority_changes_sent += u64::from(change);
                    state.stats.bid_resends +=
                        u64::from(pending_before.get(&body) == Some(&request));
                }
            }
            Action::SendRelease { body } => {
                let Some(s) = index.get(&body).map(|&i| &seen[i]) else {
                    continue;
                };
                // The final state (zero velocities, rule 12) first, on the same reliable
                // channel, so it reaches the server before the release.
                let last = wire::at_rest(&s.state);
                if let Some(local) = state.bodies.get_mut(&body) {
                    local.anchor = Some((last.position, last.rotation));
                }
                send_state(state, &mut client, body, &last, now, NetChannel::Control);
                let msg = ClientMessage::Ownership(OwnershipClientMessage::Release { body });
                if state.send(&mut client, NetChannel::Control, &msg) {
                    state.stats.releases_sent += 1;
                }
            }
            Action::ZeroVelocity { body } => {
                if let Some(&i) = index.get(&body)
                    && let Ok((.., Some(mut velocity), _, _, _)) = bodies.get_mut(seen[i].entity)
                {
                    *velocity = Velocity::zero();
                    state.stats.velocities_zeroed += 1;
                }
            }
        }
    }

    // 4. Pending-bid components, then state updates for owned bodies.
    let Some(machine) = state.machine.as_ref() else {
        return;
    };
    let mut updates = Vec::new();
    for s in &seen {
        let pending = machine.pending(s.body);
        let wanted = match pending {
            Some(PendingRequest::Bid(p)) => Some(p),
            _ => None,
        };
        if wanted != s.bid {
            match wanted {
                Some(priority) => {
                    commands.entity(s.entity).insert(OwnershipBid { priority });
                }
                None => {
                    commands.entity(s.entity).remove::<OwnershipBid>();
                }
            }
        }
        if machine.owned_priority(s.body).is_none() || pending == Some(PendingRequest::Release) {
            continue;
        }
        let due = state
            .bodies
            .get(&s.body)
            .is_some_and(|local| match local.sent {
                None => true,
                Some((last, at)) => should_send(&last, &s.state, now, at, &state.config),
            });
        if due {
            updates.push((s.body, s.state));
        }
    }
    for (body, current) in updates {
        send_state(state, &mut client, body, &current, now, NetChannel::State);
    }
}

/// Sends `current` as the owner's next state update for `body` on `channel`.
fn send_state(
    state: &mut OwnershipParticipant,
    client: &mut RenetClient,
    body: BodyId,
    current: &BodyState,
    now: Duration,
    channel: NetChannel,
) {
    let Some(local) = state.bodies.get_mut(&body) else {
        return;
    };
    local.out_seq = local.out_seq.next();
    local.sent = Some((*current, now));
    let msg = ClientMessage::Ownership(OwnershipClientMessage::StateUpdate(wire::state_to_wire(
        body,
        local.out_seq,
        current,
    )));
    let bytes = simsync_net::encode(&msg).map_or(0, |b| b.len() as u64);
    if state.send(client, channel, &msg) {
        state.stats.state_updates_sent += 1;
        state.stats.state_update_bytes += bytes;
    }
}
