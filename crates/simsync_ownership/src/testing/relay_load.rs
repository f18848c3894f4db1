//! [`RelayLoad`]: the entity server's state relay alone, under load — an entity-server App as
//! the stock server hosts it (no transport: its `RenetServer` is fed packets by hand) and fake
//! participants without physics, each owning every `participants`-th body and moving all of
//! them every tick, so every body is due every tick (the relay's worst case).
//!
//! What a [`step`](RelayLoad::step) times is the server's whole turn on that traffic: renet
//! taking the participants' packets, the update (receive, check, queue, and per receiver:
//! choose, quantize, delta, pack) and renet laying out the packets to send. The participants'
//! own work (their batches, decoding the relays, acknowledging) is not timed.

use core::time::Duration;
use std::collections::BTreeSet;
use std::time::Instant;

use bevy::app::App;
use bevy::math::{Quat, Vec3};
use bevy::prelude::Transform;
use bevy_rapier3d::prelude::RigidBody;
use simsync_net::bevy_renet::{RenetClient, RenetServer};
use simsync_net::renet::ClientId;
use simsync_net::{
    BidRequest, ClientMessage, ClientNetExt, DecodeStats, Hello, NetClock, OwnershipClientMessage,
    OwnershipServerMessage, Protocols, ServerMessage, connection_config,
};

use crate::baseline::DeltaLink;
use crate::batch::StateBatch;
use crate::body::BodyState;
use crate::budget::StateBudgetConfig;
use crate::components::BodyNetId;
use crate::error::OwnershipError;
use crate::plugin::OwnershipPlugin;
use crate::priority::{BodyId, ParticipantId};
use crate::server::EntityServer;

/// Most bodies in one state batch of a fake participant (a batch stays below renet's
/// unreliable message budget).
const BODIES_PER_BATCH: usize = 48;

/// Ticks between a fake participant's bids for the bodies not granted yet.
const BID_EVERY: u32 = 16;

/// The priority fake participants bid: GRAB (they hold their bodies).
const BID_PRIORITY: u8 = 128;

/// Where body `id` starts: a grid with 2 m between bodies, 16 to a row, 0.5 m up.
pub fn relay_load_start(id: u64) -> Vec3 {
    let index = id.saturating_sub(1);
    Vec3::new(
        (index % 16) as f32 * 2.0,
        0.5,
        (index / 16).min(100_000) as f32 * 2.0,
    )
}

/// Body `id`'s state at `t` seconds: going back and forth along x by up to 2 m from its start
/// at 1 to 2 m/s (by id), half a turn of yaw each way, with the matching velocities. Only
/// arithmetic and square roots (no platform trigonometry), so the states are the same on
/// every machine.
pub fn relay_load_state(id: u64, t: f32) -> BodyState {
    let speed = 1.0 + (id % 3) as f32 * 0.5;
    // A triangle wave of period 4 m / speed between 0 and 2 m.
    let travel = (t * speed + (id % 7) as f32 * 0.37) % 4.0;
    let (x, sign) = if travel < 2.0 {
        (travel, 1.0)
    } else {
        (4.0 - travel, -1.0)
    };
    let yaw = x - 1.0;
    BodyState {
        position: relay_load_start(id) + Vec3::new(x, 0.0, 0.0),
        rotation: Quat::from_xyzw(0.0, yaw, 0.0, 1.0).normalize(),
        linear_velocity: Vec3::new(sign * speed, 0.0, 0.0),
        angular_velocity: Vec3::new(0.0, sign * speed, 0.0),
    }
}

/// One fake participant: a renet client fed by hand, its [`DeltaLink`] with the server.
#[derive(Debug)]
struct FakeParticipant {
    id: ClientId,
    client: RenetClient,
    bodies: Vec<BodyId>,
    owned: BTreeSet<BodyId>,
    me: Option<ParticipantId>,
    hello_sent: bool,
    link: DeltaLink,
    seq: u32,
    decode: DecodeStats,
    /// Relay batch payloads received, in order, while recording.
    recorded: Vec<Vec<u8>>,
    /// Body states received in relay batches.
    states_received: u64,
}

impl FakeParticipant {
    /// Handles what arrived and sends this tick's messages (Hello, bids, the owned states).
    fn frame(&mut self, dt: Duration, tick: u32, t: f32, record: bool) {
        self.client.update(dt);
        if !self.hello_sent {
            let hello = Hello::new(Protocols::OWNERSHIP, format!("load {}", self.id));
            let _ = self.client.send_msg(&ClientMessage::Hello(hello));
            self.hello_sent = true;
        }
        for received in self.client.receive_msgs(&mut self.decode) {
            let Ok(message) = received.message else {
                continue;
            };
            self.on_message(message, record);
        }
        if self.me.is_none() {
            return;
        }
        if tick.is_multiple_of(BID_EVERY) {
            self.bid();
        }
        self.send_states(t);
    }

    fn on_message(&mut self, message: ServerMessage, record: bool) {
        match message {
            ServerMessage::Welcome(welcome) => self.me = Some(welcome.participant),
            ServerMessage::Ownership(OwnershipServerMessage::Grant { body, .. }) => {
                self.owned.insert(body);
            }
            ServerMessage::Ownership(OwnershipServerMessage::OwnerChanged(record)) => {
                if record.owner != self.me {
                    self.owned.remove(&record.body);
                }
            }
            ServerMessage::Ownership(OwnershipServerMessage::StateBatch(bytes)) => {
                if let Ok(received) = self.link.receive(&bytes, |_| true) {
                    self.states_received += received.states.len() as u64;
                }
                if record {
                    self.recorded.push(bytes);
                }
            }
            _ => {}
        }
    }

    fn bid(&mut self) {
        let bids: Vec<BidRequest> = self
            .bodies
            .iter()
            .filter(|b| !self.owned.contains(b))
            .map(|b| BidRequest {
                body: *b,
                priority: BID_PRIORITY,
            })
            .collect();
        if !bids.is_empty() {
            let message = ClientMessage::Ownership(OwnershipClientMessage::Bids(bids));
            let _ = self.client.send_msg(&message);
        }
    }

    fn send_states(&mut self, t: f32) {
        let states: Vec<(BodyId, BodyState)> = self
            .owned
            .iter()
            .map(|b| (*b, relay_load_state(b.0, t)))
            .collect();
        for chunk in states.chunks(BODIES_PER_BATCH) {
            self.seq = self.seq.wrapping_add(1);
            let batch = StateBatch {
                seq: self.seq,
                focus: None,
                bodies: chunk.to_vec(),
            };
            let Ok(bytes) = self.link.send(&batch, true).and_then(|wire| wire.encode()) else {
                continue;
            };
            let message = ClientMessage::Ownership(OwnershipClientMessage::StateBatch(bytes));
            let _ = self.client.send_msg(&message);
        }
    }
}

/// The entity server's relay under load: an entity-server App as the stock server hosts it (no
/// transport: its `RenetServer` is fed packets by hand), `participants` fake participants
/// without physics, bodies `1..=bodies`, participant `i` owning the ids `≡ i + 1 (mod
/// participants)` (all of them once its bids are granted) and moving all of them every tick
/// ([`relay_load_state`]), so every body is due every tick — the relay's worst case.
///
/// [`step`](Self::step) times the server's whole turn on that traffic: renet taking the
/// participants' packets, the update (receive, check, queue, and per receiver: choose,
/// quantize, delta, pack) and renet laying out its packets. The participants' own work (their
/// batches, decoding the relays, acknowledging) is not timed.
#[derive(Debug)]
pub struct RelayLoad {
    server: App,
    participants: Vec<FakeParticipant>,
    dt: Duration,
    tick: u32,
    record: bool,
    /// Packets from each participant to the server, sent at the next step.
    up: Vec<Vec<Vec<u8>>>,
}

/// The entity server of a relay load: `bodies` bodies on the start grid, a fixed network clock
/// of `dt`, single-threaded schedules (the timing is the relay's, not the executor's).
fn load_server(budget: StateBudgetConfig, dt: Duration, bodies: u64) -> App {
    simsync_net::task_pools_without_local_tick();
    let mut server = App::new();
    server
        .add_plugins(OwnershipPlugin::entity_server().with_state_budget(budget))
        .insert_resource(RenetServer::new(connection_config()))
        .insert_resource(NetClock::Fixed(dt));
    for id in 1..=bodies {
        server.world_mut().spawn((
            BodyNetId(BodyId(id)),
            RigidBody::Dynamic,
            Transform::from_translation(relay_load_start(id)),
        ));
    }
    server.finish();
    server.cleanup();
    crate::single_threaded_schedules(&mut server);
    server
}

impl FakeParticipant {
    /// Fake participant `index` of `of`, connected to `server` (client id `index + 1`), moving
    /// every `of`-th of the `bodies` bodies from body `index + 1` on.
    fn connect(server: &mut App, index: usize, of: usize, bodies: u64) -> Self {
        let n = of.max(1) as u64;
        let id = index as ClientId + 1;
        server
            .world_mut()
            .resource_mut::<RenetServer>()
            .add_connection(id);
        let mut client = RenetClient::new(connection_config());
        client.set_connected();
        FakeParticipant {
            id,
            client,
            bodies: (1..=bodies)
                .filter(|b| (b - 1) % n == index as u64)
                .map(BodyId)
                .collect(),
            owned: BTreeSet::new(),
            me: None,
            hello_sent: false,
            link: DeltaLink::default(),
            seq: 0,
            decode: DecodeStats::default(),
            recorded: Vec::new(),
            states_received: 0,
        }
    }
}

impl RelayLoad {
    /// An entity server with `budget` (relay budget per participant, interest radius, deltas)
    /// at `tick_rate_hz`, and `participants` fake participants connected to it. Nothing has
    /// run yet: [`step`](Self::step) until [`all_owned`](Self::all_owned).
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if `budget` does not validate.
    pub fn new(
        participants: usize,
        bodies: u64,
        budget: StateBudgetConfig,
        tick_rate_hz: u16,
    ) -> Result<Self, OwnershipError> {
        budget.validate()?;
        let dt = Duration::from_secs_f64(1.0 / f64::from(tick_rate_hz.max(1)));
        let mut server = load_server(budget, dt, bodies);
        let participants: Vec<FakeParticipant> = (0..participants)
            .map(|i| FakeParticipant::connect(&mut server, i, participants, bodies))
            .collect();
        let up = vec![Vec::new(); participants.len()];
        Ok(Self {
            server,
            participants,
            dt,
            tick: 0,
            record: false,
            up,
        })
    }

    /// One tick: the participants take what the server sent last and send their messages (not
    /// timed), then the server takes their packets, updates and lays out its packets (timed).
    /// Returns how long the server's part took.
    pub fn step(&mut self) -> Duration {
        let t = (self.tick as f64 * self.dt.as_secs_f64()) as f32;
        for (p, up) in self.participants.iter_mut().zip(&mut self.up) {
            p.frame(self.dt, self.tick, t, self.record);
            up.extend(p.client.get_packets_to_send());
        }
        let started = Instant::now();
        let mut down = Vec::with_capacity(self.participants.len());
        {
            let mut server = self.server.world_mut().resource_mut::<RenetServer>();
            server.update(self.dt);
            for (p, up) in self.participants.iter().zip(&mut self.up) {
                for packet in up.drain(..) {
                    let _ = server.process_packet_from(&packet, p.id);
                }
            }
        }
        self.server.update();
        {
            let mut server = self.server.world_mut().resource_mut::<RenetServer>();
            for p in &self.participants {
                down.push(server.get_packets_to_send(p.id).unwrap_or_default());
            }
        }
        let took = started.elapsed();
        for (p, packets) in self.participants.iter_mut().zip(down) {
            for packet in packets {
                p.client.process_packet(&packet);
            }
        }
        self.tick += 1;
        took
    }

    /// Whether every participant has joined and owns all of its bodies.
    pub fn all_owned(&self) -> bool {
        self.participants
            .iter()
            .all(|p| p.me.is_some() && p.owned.len() == p.bodies.len())
    }

    /// Keeps (`true`) or stops keeping the relay batch payloads each participant receives from
    /// the next step on ([`recorded`](Self::recorded)).
    pub fn set_recording(&mut self, record: bool) {
        self.record = record;
    }

    /// The relay batch payloads (`StateBatch` bytes, budgeted and control-channel ones) that
    /// participant `index` received while recording, in order; empty for an unknown index.
    pub fn recorded(&self, index: usize) -> &[Vec<u8>] {
        self.participants
            .get(index)
            .map_or(&[], |p| p.recorded.as_slice())
    }

    /// Body states all participants received in relay batches so far.
    pub fn states_received(&self) -> u64 {
        self.participants.iter().map(|p| p.states_received).sum()
    }

    /// The entity server's state (its [`stats`](EntityServer::stats) count the relay).
    pub fn server(&self) -> &EntityServer {
        self.server.world().resource::<EntityServer>()
    }
}
