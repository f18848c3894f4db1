//! [`OwnershipLoadClient`]: a fake participant of an ownership room — it owns its share of the
//! room's bodies and sends their states every frame, without physics.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use bevy::math::{Quat, Vec3};
use renetcode::ConnectToken;
use serde::Serialize;
use simsync_net::{
    BidRequest, BodyId, ClientMessage, ClientNetExt, DecodeStats, Hello, OwnershipClientMessage,
    OwnershipServerMessage, ParticipantId, Protocols, ServerMessage, millis_u32,
};
use simsync_ownership::{BodyState, DeltaLink, StateBatch};
use simsync_server::{BodySpec, OwnershipRoomConfig, RoomConfig};

use crate::client::{ClientLink, ClientPhase, LoadClient, is_due};
use crate::link::{LoadLinkError, Traffic};

/// The priority load participants bid: GRAB (they hold their bodies until they leave).
pub const LOAD_BID_PRIORITY: u8 = 128;

/// Most bodies in one state batch a load participant sends (about 20 bytes each: a batch stays
/// below renet's 1,200-byte unreliable budget).
pub const BODIES_PER_BATCH: usize = 48;

/// Time between bids for the bodies not granted yet.
const BID_INTERVAL: Duration = Duration::from_millis(250);

/// Radius of the circles load bodies move on, metres.
const CIRCLE_RADIUS: f32 = 1.0;

/// Angular speed of load bodies on their circles, rad/s.
const CIRCLE_SPEED: f32 = 1.0;

/// Where body `id` of a load room starts: the relay-path bench's grid
/// ([`relay_load_start`](simsync_ownership::testing::relay_load_start): 2 m between bodies,
/// 16 to a row, 0.5 m up), so the load test and the bench lay out the same scene.
pub fn body_start(id: u64) -> Vec3 {
    simsync_ownership::testing::relay_load_start(id)
}

/// An ownership room for load participants: `participants` seats at `tick_rate_hz` and
/// `bodies` dynamic bodies, ids 1 to `bodies`, starting at `body_start`.
pub fn ownership_room_config(participants: u8, bodies: u64, tick_rate_hz: u16) -> RoomConfig {
    RoomConfig::Ownership(OwnershipRoomConfig {
        tick_rate_hz,
        ..OwnershipRoomConfig::new(
            participants,
            (1..=bodies)
                .map(|id| BodySpec::new(id, false, body_start(id).to_array()))
                .collect(),
        )
    })
}

/// The dynamic bodies of `room` seat `seat` of `participants` owns: every
/// `participants`-th one, from the seat's index on.
pub fn owned_bodies(room: &OwnershipRoomConfig, seat: u8) -> Vec<(BodyId, Vec3)> {
    let participants = usize::from(room.participants.max(1));
    room.bodies
        .iter()
        .filter(|b| !b.fixed)
        .enumerate()
        .filter(|(i, _)| i % participants == usize::from(seat))
        .map(|(_, b)| (BodyId(b.id), Vec3::from_array(b.position)))
        .collect()
}

/// The state of a body circling around `start` at time `t` (seconds), from angle `phase`:
/// position, rotation about +Y with the circle, and the matching velocities.
pub fn circle_state(start: Vec3, phase: f32, t: f32) -> BodyState {
    let angle = phase + CIRCLE_SPEED * t;
    let (sin, cos) = angle.sin_cos();
    BodyState {
        position: start + CIRCLE_RADIUS * Vec3::new(cos, 0.0, sin),
        rotation: Quat::from_rotation_y(angle),
        linear_velocity: CIRCLE_RADIUS * CIRCLE_SPEED * Vec3::new(-sin, 0.0, cos),
        angular_velocity: Vec3::new(0.0, CIRCLE_SPEED, 0.0),
    }
}

/// What an [`OwnershipLoadClient`] owns and states.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnershipLoadSpec {
    /// Its bodies and where they start ([`owned_bodies`]).
    pub bodies: Vec<(BodyId, Vec3)>,
    /// Time between pings.
    pub ping_interval: Duration,
    /// The display name in the `Hello`.
    pub name: String,
}

impl OwnershipLoadSpec {
    /// The spec of seat `seat` of `room`.
    pub fn for_seat(room: &OwnershipRoomConfig, seat: u8) -> Self {
        Self {
            bodies: owned_bodies(room, seat),
            ping_interval: Duration::from_secs(1),
            name: "load".into(),
        }
    }
}

/// What an [`OwnershipLoadClient`] counted since it was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OwnershipCounters {
    /// The connection's datagrams and bytes.
    pub traffic: Traffic,
    /// Bodies it owns now.
    pub owned: usize,
    /// `Grant`s received.
    pub grants: u64,
    /// `Refused` received (bids, or states of bodies it does not own).
    pub refusals: u64,
    /// `OwnerChanged` received.
    pub owner_changes: u64,
    /// `Snapshot`s of the owner table received.
    pub snapshots: u64,
    /// `Reset`s received.
    pub resets: u64,
    /// `CountedSilent` received (the server counted it gone for silence).
    pub counted_silent: u64,
    /// Bid lists sent.
    pub bid_lists: u64,
    /// State batches sent.
    pub batches_sent: u64,
    /// Body states sent in them.
    pub bodies_sent: u64,
    /// Relay batches received and decoded.
    pub batches_received: u64,
    /// Body states received in them (other participants' bodies).
    pub bodies_received: u64,
    /// Relay batches that did not decode.
    pub batch_errors: u64,
    /// Delta entries that could not be resolved.
    pub deltas_rejected: u64,
    /// Relay batches whose acknowledgement was refused.
    pub acks_rejected: u64,
    /// Pongs received.
    pub pongs: u64,
    /// The sum of the round trips measured, ms.
    pub rtt_ms_sum: u64,
    /// The longest round trip measured, ms.
    pub rtt_ms_max: u32,
    /// Messages that did not decode.
    pub decode_errors: u64,
    /// Messages renet refused to queue (a full channel).
    pub send_refused: u64,
}

/// A fake participant of an ownership room ([crate docs](crate)).
#[derive(Debug)]
pub struct OwnershipLoadClient {
    link: ClientLink,
    spec: OwnershipLoadSpec,
    hello_sent: bool,
    participant: Option<ParticipantId>,
    owned: BTreeSet<BodyId>,
    last_bids: Option<Duration>,
    last_ping: Option<Duration>,
    seq: u32,
    delta: DeltaLink,
    decode: DecodeStats,
    counters: OwnershipCounters,
}

impl OwnershipLoadClient {
    /// Starts connecting with `token` from a socket bound to `bind`.
    ///
    /// # Errors
    ///
    /// [`LoadLinkError`] as [`LoadLink::connect`](crate::LoadLink::connect).
    pub fn connect(
        token: ConnectToken,
        bind: SocketAddr,
        spec: OwnershipLoadSpec,
    ) -> Result<Self, LoadLinkError> {
        Ok(Self {
            link: ClientLink::connect(token, bind)?,
            spec,
            hello_sent: false,
            participant: None,
            owned: BTreeSet::new(),
            last_bids: None,
            last_ping: None,
            seq: 0,
            delta: DeltaLink::default(),
            decode: DecodeStats::default(),
            counters: OwnershipCounters::default(),
        })
    }

    /// Its participant id, once welcomed.
    pub fn participant(&self) -> Option<ParticipantId> {
        self.participant
    }

    /// What it counted so far.
    pub fn counters(&self) -> OwnershipCounters {
        OwnershipCounters {
            traffic: self.link.traffic(),
            owned: self.owned.len(),
            ..self.counters.clone()
        }
    }

    fn send(&mut self, message: &ClientMessage) -> bool {
        let sent = self.link.renet().send_msg(message).is_ok();
        if !sent {
            self.counters.send_refused += 1;
        }
        sent
    }

    fn ping(&mut self) {
        let now = self.link.now();
        if !is_due(self.last_ping, now, self.spec.ping_interval) {
            return;
        }
        self.last_ping = Some(now);
        let t = millis_u32(now);
        self.send(&ClientMessage::Ping { t });
    }

    fn on_message(&mut self, message: ServerMessage) {
        match message {
            ServerMessage::Welcome(welcome) => {
                self.participant = Some(welcome.participant);
                self.link.set_phase(ClientPhase::Running);
            }
            ServerMessage::Rejected { reason } => {
                self.link
                    .set_phase(ClientPhase::Refused(format!("{reason:?}")));
            }
            ServerMessage::Ping { t } => {
                self.send(&ClientMessage::Pong { t });
            }
            ServerMessage::Pong { t, .. } => {
                let rtt = millis_u32(self.link.now()).wrapping_sub(t);
                if rtt < 60_000 {
                    self.counters.pongs += 1;
                    self.counters.rtt_ms_sum += u64::from(rtt);
                    self.counters.rtt_ms_max = self.counters.rtt_ms_max.max(rtt);
                }
            }
            ServerMessage::Ownership(message) => self.on_ownership(message),
            ServerMessage::Session(_) => {}
        }
    }

    fn on_ownership(&mut self, message: OwnershipServerMessage) {
        let c = &mut self.counters;
        match message {
            OwnershipServerMessage::Grant { body, .. } => {
                c.grants += 1;
                self.owned.insert(body);
            }
            OwnershipServerMessage::Refused { .. } => c.refusals += 1,
            OwnershipServerMessage::OwnerChanged(record) => {
                c.owner_changes += 1;
                if record.owner.is_none() || record.owner != self.participant {
                    self.owned.remove(&record.body);
                }
            }
            OwnershipServerMessage::Snapshot(_) => c.snapshots += 1,
            OwnershipServerMessage::StateBatch(bytes) => match self.delta.receive(&bytes, |_| true)
            {
                Ok(received) => {
                    c.batches_received += 1;
                    c.bodies_received += received.states.len() as u64;
                    c.deltas_rejected += received.deltas_rejected as u64;
                    c.acks_rejected += u64::from(received.ack_rejected.is_some());
                }
                Err(_) => c.batch_errors += 1,
            },
            OwnershipServerMessage::Reset { .. } => c.resets += 1,
            OwnershipServerMessage::CountedSilent { .. } => c.counted_silent += 1,
            OwnershipServerMessage::Closing { reason } => {
                self.link.set_phase(ClientPhase::Ended(reason.to_string()));
            }
        }
    }

    /// Bids GRAB for every body of its share not granted yet, every [`BID_INTERVAL`].
    fn bid(&mut self) {
        let now = self.link.now();
        if !is_due(self.last_bids, now, BID_INTERVAL) {
            return;
        }
        let bids: Vec<BidRequest> = self
            .spec
            .bodies
            .iter()
            .filter(|(body, _)| !self.owned.contains(body))
            .map(|(body, _)| BidRequest {
                body: *body,
                priority: LOAD_BID_PRIORITY,
            })
            .collect();
        if bids.is_empty() {
            return;
        }
        self.last_bids = Some(now);
        if self.send(&ClientMessage::Ownership(OwnershipClientMessage::Bids(
            bids,
        ))) {
            self.counters.bid_lists += 1;
        }
    }

    /// One state batch (or a few, [`BODIES_PER_BATCH`] bodies each) of every owned body, each
    /// a delta against what the server acknowledged where that pays.
    fn send_states(&mut self) {
        let t = self.link.now().as_secs_f32();
        let states: Vec<(BodyId, BodyState)> = self
            .spec
            .bodies
            .iter()
            .filter(|(body, _)| self.owned.contains(body))
            .map(|(body, start)| (*body, circle_state(*start, body.0 as f32, t)))
            .collect();
        for chunk in states.chunks(BODIES_PER_BATCH) {
            self.seq = self.seq.wrapping_add(1);
            let batch = StateBatch {
                seq: self.seq,
                focus: None,
                bodies: chunk.to_vec(),
            };
            let Ok(bytes) = self.delta.send(&batch, true).and_then(|wire| wire.encode()) else {
                continue;
            };
            let message = ClientMessage::Ownership(OwnershipClientMessage::StateBatch(bytes));
            if self.send(&message) {
                self.counters.batches_sent += 1;
                self.counters.bodies_sent += chunk.len() as u64;
            }
        }
    }
}

impl LoadClient for OwnershipLoadClient {
    fn link(&self) -> &ClientLink {
        &self.link
    }

    fn link_mut(&mut self) -> &mut ClientLink {
        &mut self.link
    }

    /// One step of `dt`: receive, bid for what is not granted, send the owned bodies' states,
    /// flush.
    fn frame(&mut self, dt: Duration) {
        if !self.link.begin_frame(dt) {
            return;
        }
        if self.link.is_connected() && !self.hello_sent {
            let hello = Hello::new(Protocols::OWNERSHIP, self.spec.name.clone());
            self.send(&ClientMessage::Hello(hello));
            self.hello_sent = true;
        }
        for received in self.link.renet().receive_msgs(&mut self.decode) {
            match received.message {
                Ok(message) => self.on_message(message),
                Err(_) => self.counters.decode_errors += 1,
            }
        }
        if self.link.is_running() {
            self.bid();
            self.send_states();
            self.ping();
        }
        self.link.end_frame();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_room_validates_and_its_bodies_are_shared_out_by_seat() {
        let RoomConfig::Ownership(room) = ownership_room_config(4, 200, 64) else {
            unreachable!()
        };
        assert_eq!(RoomConfig::Ownership(room.clone()).validate(), Ok(()));
        let shares: Vec<Vec<(BodyId, Vec3)>> = (0..4).map(|s| owned_bodies(&room, s)).collect();
        assert!(shares.iter().all(|s| s.len() == 50));
        let mut all: Vec<u64> = shares.iter().flatten().map(|(b, _)| b.0).collect();
        all.sort_unstable();
        assert_eq!(all, (1..=200).collect::<Vec<u64>>(), "each body once");
        assert_eq!(shares[1][0], (BodyId(2), body_start(2)));
        assert_eq!(body_start(17), Vec3::new(0.0, 0.5, 2.0));
    }

    #[test]
    fn circle_states_stay_on_the_circle_with_tangent_velocity() {
        let start = Vec3::new(4.0, 0.5, 2.0);
        for t in [0.0, 0.7, 3.0] {
            let state = circle_state(start, 1.5, t);
            let offset = state.position - start;
            assert!((offset.length() - CIRCLE_RADIUS).abs() < 1e-5);
            assert!(offset.dot(state.linear_velocity).abs() < 1e-5);
            assert!((state.linear_velocity.length() - CIRCLE_SPEED).abs() < 1e-5);
        }
        assert_ne!(
            circle_state(start, 0.0, 1.0).position,
            circle_state(start, 0.0, 1.1).position
        );
    }

    #[test]
    fn a_batch_of_a_full_share_fits_the_unreliable_budget() {
        let bodies: Vec<(BodyId, BodyState)> = (1..=BODIES_PER_BATCH as u64)
            .map(|id| (BodyId(id * 4), circle_state(body_start(id * 4), 0.3, 9.0)))
            .collect();
        let batch = StateBatch {
            seq: 1,
            focus: None,
            bodies,
        };
        let bytes = batch.encode().unwrap();
        assert!(
            bytes.len() + 8 < simsync_net::UNRELIABLE_MESSAGE_BUDGET,
            "{}",
            bytes.len()
        );
    }
}
