//! What a room is made of ([rooms](crate::rules#rooms)): [`RoomConfig`], given to the admin
//! API as JSON or listed in the server's config file, and checked by
//! [`RoomConfig::validate`] before a room is made.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use simsync_net::{InputFingerprint, SimInput};
use simsync_ownership::{PhysicsHostConfig, StateLimits};

/// Most player slots of a relay room.
pub const MAX_PLAYERS: u8 = 64;
/// Most participants of an ownership room.
pub const MAX_PARTICIPANTS: u8 = 64;
/// Most bodies of an ownership room.
pub const MAX_BODIES: usize = 20_000;
/// Longest encoded input a relay room relays, in bytes.
pub const MAX_INPUT_BYTES: u32 = 1_024;
/// Longest input type name, in bytes.
pub const MAX_INPUT_NAME_BYTES: usize = 256;
/// Tick rates a room may run at, in Hz.
pub const TICK_RATES_HZ: std::ops::RangeInclusive<u16> = 1..=1_000;

/// A room: a deterministic relay room or an ownership entity-server room. In JSON, the `kind`
/// field says which: `{"kind": "relay", ...}` or `{"kind": "ownership", ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RoomConfig {
    /// A relay room ([`RelayRoomConfig`]).
    Relay(RelayRoomConfig),
    /// An ownership room ([`OwnershipRoomConfig`]).
    Ownership(OwnershipRoomConfig),
}

/// The game's input as the stock server knows it without the game's code: the fingerprint
/// clients state in their hello (type name and size bound) and the encoded default input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// The input type's name, as clients state it (`std::any::type_name` of the game's input
    /// type unless the game names it itself).
    pub name: String,
    /// The longest encoded input, in bytes (the clients' `max_input_bytes`, raised to the
    /// default input's length).
    pub max_bytes: u32,
    /// The encoded default input (what a player that never sent one plays), bytes.
    pub default: Vec<u8>,
}

impl InputSpec {
    /// The spec of input type `I` with a size bound of `max_input_bytes` (raised to the
    /// encoded default's length, as the clients do).
    ///
    /// # Errors
    ///
    /// [`RoomConfigError::InputDefault`] when `I::default()` does not encode.
    pub fn of<I: SimInput>(max_input_bytes: usize) -> Result<Self, RoomConfigError> {
        let default =
            simsync_net::encode(&I::default()).map_err(|_| RoomConfigError::InputDefault)?;
        let fingerprint = InputFingerprint::of_input::<I>(max_input_bytes);
        Ok(Self {
            name: fingerprint.name,
            max_bytes: fingerprint.max_encoded_bytes,
            default,
        })
    }

    /// The fingerprint clients must state.
    pub fn fingerprint(&self) -> InputFingerprint {
        InputFingerprint::new(self.name.clone(), self.max_bytes)
    }
}

/// A deterministic relay room: the relay of one networked session for `players` slots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayRoomConfig {
    /// Player slots (1 to [`MAX_PLAYERS`]).
    pub players: u8,
    /// Ticks per second (default 64).
    #[serde(default = "default_tick_rate")]
    pub tick_rate_hz: u16,
    /// The game's input.
    pub input: InputSpec,
    /// Slots taken at which the match starts (default: all); below `players` only with
    /// `snapshots` (the others join late).
    #[serde(default)]
    pub start_players: Option<u8>,
    /// Whether late joiners and players behind the history are served snapshots (asked of a
    /// connected client).
    #[serde(default)]
    pub snapshots: bool,
}

/// One body of an ownership room: its id, whether it is fixed, where it starts (metres), and —
/// for the physics host ([physics host](crate::rules#physics-host)) — its collider shape and
/// properties, the same as the participants give it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BodySpec {
    /// The body's id (unique in the room; the participants use the same ids).
    pub id: u64,
    /// A fixed body (ground, walls) is never owned (default `false`: dynamic).
    #[serde(default)]
    pub fixed: bool,
    /// Where it starts, in metres.
    pub position: [f32; 3],
    /// How it is turned at the start: a unit quaternion `[x, y, z, w]` (default: not turned).
    #[serde(default = "no_rotation")]
    pub rotation: [f32; 4],
    /// Its collider, for the physics host (default: none — the server only relays it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<ShapeSpec>,
    /// Its mass, material and damping, for the physics host (default
    /// [`BodyProperties::default`], Rapier's defaults).
    #[serde(default, skip_serializing_if = "BodyProperties::is_default")]
    pub properties: BodyProperties,
}

impl BodySpec {
    /// A body with no shape and default properties: `id`, dynamic unless `fixed`, at
    /// `position` (m), not turned.
    pub fn new(id: u64, fixed: bool, position: [f32; 3]) -> Self {
        Self {
            id,
            fixed,
            position,
            rotation: no_rotation(),
            shape: None,
            properties: BodyProperties::default(),
        }
    }

    /// The body with collider `shape`.
    #[must_use]
    pub fn with_shape(mut self, shape: ShapeSpec) -> Self {
        self.shape = Some(shape);
        self
    }
}

fn no_rotation() -> [f32; 4] {
    [0.0, 0.0, 0.0, 1.0]
}

/// Largest shape size (half extent, radius, half height), m.
pub const MAX_SIZE: f32 = 1e6;

/// A body's collider shape, in metres, in the body's frame. In JSON, `kind` says which:
/// `{"kind": "cuboid", "half_extents": [x, y, z]}`, `{"kind": "ball", "radius": r}`,
/// `{"kind": "capsule", "half_height": h, "radius": r}` (a capsule along the body's y axis,
/// Rapier's `Collider::capsule_y`). Every size is finite, > 0 and at most [`MAX_SIZE`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ShapeSpec {
    /// A box of half extents `[x, y, z]`, m.
    Cuboid {
        /// Half the box's size along x, y and z, m.
        half_extents: [f32; 3],
    },
    /// A ball of `radius`, m.
    Ball {
        /// Its radius, m.
        radius: f32,
    },
    /// A capsule along y: a cylinder of height `2 × half_height` capped by half balls of
    /// `radius`.
    Capsule {
        /// Half the cylinder's height, m.
        half_height: f32,
        /// Its radius, m.
        radius: f32,
    },
}

impl ShapeSpec {
    /// Whether every size is finite, > 0 and at most [`MAX_SIZE`].
    pub fn is_valid(&self) -> bool {
        let ok = |v: f32| v.is_finite() && v > 0.0 && v <= MAX_SIZE;
        match *self {
            ShapeSpec::Cuboid { half_extents } => half_extents.into_iter().all(ok),
            ShapeSpec::Ball { radius } => ok(radius),
            ShapeSpec::Capsule {
                half_height,
                radius,
            } => ok(half_height) && ok(radius),
        }
    }
}

/// A body's mass, material and damping for the physics host. Each field defaults to Rapier's
/// own default, so a participant that sets none of them matches a spec that gives none.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BodyProperties {
    /// Its mass, kg (finite, > 0); when given it replaces `density`. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mass: Option<f32>,
    /// Its collider's density, kg/m³ (finite, > 0; default 1, Rapier's).
    #[serde(default = "one")]
    pub density: f32,
    /// Friction coefficient (finite, ≥ 0; default 0.5, Rapier's).
    #[serde(default = "half")]
    pub friction: f32,
    /// Restitution coefficient (0 to 1; default 0).
    #[serde(default)]
    pub restitution: f32,
    /// Linear damping, 1/s (finite, ≥ 0; default 0).
    #[serde(default)]
    pub linear_damping: f32,
    /// Angular damping, 1/s (finite, ≥ 0; default 0).
    #[serde(default)]
    pub angular_damping: f32,
    /// Gravity scale (finite; default 1; 0: the body floats).
    #[serde(default = "one")]
    pub gravity_scale: f32,
}

fn one() -> f32 {
    1.0
}

fn half() -> f32 {
    0.5
}

impl Default for BodyProperties {
    fn default() -> Self {
        Self {
            mass: None,
            density: 1.0,
            friction: 0.5,
            restitution: 0.0,
            linear_damping: 0.0,
            angular_damping: 0.0,
            gravity_scale: 1.0,
        }
    }
}

impl BodyProperties {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The first field out of its bounds (see each field), by name.
    pub fn bad_field(&self) -> Option<&'static str> {
        let positive = |v: f32| v.is_finite() && v > 0.0;
        let non_negative = |v: f32| v.is_finite() && v >= 0.0;
        [
            ("mass", self.mass.is_none_or(positive)),
            ("density", positive(self.density)),
            ("friction", non_negative(self.friction)),
            ("restitution", (0.0..=1.0).contains(&self.restitution)),
            ("linear_damping", non_negative(self.linear_damping)),
            ("angular_damping", non_negative(self.angular_damping)),
            ("gravity_scale", self.gravity_scale.is_finite()),
        ]
        .into_iter()
        .find(|(_, ok)| !ok)
        .map(|(field, _)| field)
    }
}

/// The physics host's settings of an ownership room (ownership rules 21 and 22): which bodies
/// it takes besides orphans and the limits on owners' states. Defaults are the ownership
/// crate's ([`PhysicsHostConfig::default`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhysicsHostSpec {
    /// Also take an unowned body that moved this long in the server's world, ms (default:
    /// none, only orphans are taken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub take_unowned_after_ms: Option<u32>,
    /// Also take a volunteered body whose owner's interest centre is farther than this, m
    /// (finite, > 0; default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interest_radius: Option<f32>,
    /// Highest linear speed an owner's state may carry, m/s (finite, > 0; default 50).
    #[serde(default = "default_max_speed")]
    pub max_speed: f32,
    /// How far beyond its own motion an owner may move a body, m (finite, > 0; default 10).
    #[serde(default = "default_max_teleport")]
    pub max_teleport: f32,
    /// How long a refused owner may not bid for the body, ms (default 2000).
    #[serde(default = "default_penalty_ms")]
    pub penalty_ms: u32,
}

fn default_max_speed() -> f32 {
    StateLimits::default().max_speed
}

fn default_max_teleport() -> f32 {
    StateLimits::default().max_teleport
}

fn default_penalty_ms() -> u32 {
    u32::try_from(StateLimits::default().penalty.as_millis()).unwrap_or(u32::MAX)
}

impl Default for PhysicsHostSpec {
    fn default() -> Self {
        Self {
            take_unowned_after_ms: None,
            interest_radius: None,
            max_speed: default_max_speed(),
            max_teleport: default_max_teleport(),
            penalty_ms: default_penalty_ms(),
        }
    }
}

impl PhysicsHostSpec {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The ownership crate's config of the host, state limits on.
    pub fn config(&self) -> PhysicsHostConfig {
        PhysicsHostConfig {
            take_unowned_after: self
                .take_unowned_after_ms
                .map(|ms| Duration::from_millis(u64::from(ms))),
            interest_radius: self.interest_radius,
            limits: Some(StateLimits {
                max_speed: self.max_speed,
                max_teleport: self.max_teleport,
                penalty: Duration::from_millis(u64::from(self.penalty_ms)),
            }),
        }
    }

    fn validate(&self) -> Result<(), RoomConfigError> {
        let positive = |v: f32| v.is_finite() && v > 0.0;
        [
            ("interest_radius", self.interest_radius.is_none_or(positive)),
            ("max_speed", positive(self.max_speed)),
            ("max_teleport", positive(self.max_teleport)),
        ]
        .into_iter()
        .find(|(_, ok)| !ok)
        .map_or(Ok(()), |(field, _)| {
            Err(RoomConfigError::PhysicsHost(field))
        })
    }
}

/// An ownership room: the entity server of one scene of `participants`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnershipRoomConfig {
    /// Participant seats (1 to [`MAX_PARTICIPANTS`]); a token's slot is a seat.
    pub participants: u8,
    /// Ticks per second of the entity server (default 64).
    #[serde(default = "default_tick_rate")]
    pub tick_rate_hz: u16,
    /// The bodies (at most [`MAX_BODIES`]).
    pub bodies: Vec<BodySpec>,
    /// Whether the room's entity server hosts physics ([physics
    /// host](crate::rules#physics-host)): `Some(true)` needs a shape on every dynamic body,
    /// `Some(false)` never hosts, `None` (default) follows the server's `--physics-host`
    /// switch ([`Self::resolve_physics_host`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physics_host: Option<bool>,
    /// The physics host's settings (default [`PhysicsHostSpec::default`]).
    #[serde(default, skip_serializing_if = "PhysicsHostSpec::is_default")]
    pub host: PhysicsHostSpec,
}

impl OwnershipRoomConfig {
    /// A room of `participants` at 64 ticks a second with `bodies`, the physics host left to
    /// the server's switch, default host settings.
    pub fn new(participants: u8, bodies: Vec<BodySpec>) -> Self {
        Self {
            participants,
            tick_rate_hz: default_tick_rate(),
            bodies,
            physics_host: None,
            host: PhysicsHostSpec::default(),
        }
    }

    /// Whether some body has a shape and every dynamic body has one: what the server's
    /// `--physics-host` switch needs to host the room.
    pub fn shaped(&self) -> bool {
        self.bodies.iter().any(|b| b.shape.is_some())
            && self.bodies.iter().all(|b| b.fixed || b.shape.is_some())
    }

    /// Settles the room's switch with the server's (`server_hosts`): the room's own
    /// `physics_host` when it says, else `server_hosts && self.shaped()`.
    pub fn resolve_physics_host(&mut self, server_hosts: bool) {
        if self.physics_host.is_none() {
            self.physics_host = Some(server_hosts && self.shaped());
        }
    }

    /// Whether the room's entity server hosts physics (`physics_host` of `None` is off: a
    /// room is settled by [`Self::resolve_physics_host`] when it is made).
    pub fn hosts_physics(&self) -> bool {
        self.physics_host == Some(true)
    }
}

fn default_tick_rate() -> u16 {
    64
}

/// Why a room config was refused (the admin API answers 400 with it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoomConfigError {
    /// No slots, or more than the limit.
    #[error("slots must be 1 to {max}, not {given}")]
    Slots {
        /// Slots asked for.
        given: u8,
        /// The limit.
        max: u8,
    },
    /// A tick rate outside [`TICK_RATES_HZ`].
    #[error("tick_rate_hz must be 1 to 1000, not {0}")]
    TickRate(u16),
    /// An empty or too long input name.
    #[error("input.name must be 1 to 256 bytes")]
    InputName,
    /// An input size bound of 0 or above [`MAX_INPUT_BYTES`], or below the default input.
    #[error(
        "input.max_bytes must be 1 to 1024 and hold input.default ({default} bytes), not {given}"
    )]
    InputBytes {
        /// The bound given.
        given: u32,
        /// The default input's length.
        default: usize,
    },
    /// The game's default input does not encode.
    #[error("the input type's default does not encode")]
    InputDefault,
    /// `start_players` of 0, above `players`, or below it without snapshots.
    #[error("start_players must be 1 to players, and below players only with snapshots")]
    StartPlayers,
    /// More bodies than [`MAX_BODIES`].
    #[error("at most {MAX_BODIES} bodies, not {0}")]
    TooManyBodies(usize),
    /// Two bodies with one id.
    #[error("body id {0} is given twice")]
    DuplicateBody(u64),
    /// A body position that is not finite or beyond 1e6 m.
    #[error("body {0}'s position must be finite and within 1e6 m")]
    BodyPosition(u64),
    /// A body rotation that is not a unit quaternion.
    #[error("body {0}'s rotation must be a unit quaternion [x, y, z, w]")]
    BodyRotation(u64),
    /// A body shape with a size that is not finite, ≤ 0 or above [`MAX_SIZE`].
    #[error("body {0}'s shape sizes must be finite, > 0 and at most 1e6 m")]
    BodyShape(u64),
    /// A body property out of its bounds ([`BodyProperties`]).
    #[error("body {body}'s {field} is out of bounds")]
    BodyProperty {
        /// The body.
        body: u64,
        /// The property's field name.
        field: &'static str,
    },
    /// A room with `physics_host: true` and a dynamic body without a shape: the host cannot
    /// simulate it.
    #[error("the physics host needs a shape on every dynamic body; body {0} has none")]
    ShapeMissing(u64),
    /// A physics-host setting out of its bounds ([`PhysicsHostSpec`]), by field name.
    #[error("host.{0} must be a finite number > 0")]
    PhysicsHost(&'static str),
}

impl RoomConfig {
    /// A relay room for input type `I`: `players` slots at `tick_rate_hz`, inputs of at most
    /// `max_input_bytes` (what a matchmaker or a typed server builds with the game's type).
    ///
    /// # Errors
    ///
    /// As [`InputSpec::of`].
    pub fn relay_for<I: SimInput>(
        players: u8,
        tick_rate_hz: u16,
        max_input_bytes: usize,
    ) -> Result<Self, RoomConfigError> {
        Ok(RoomConfig::Relay(RelayRoomConfig {
            players,
            tick_rate_hz,
            input: InputSpec::of::<I>(max_input_bytes)?,
            start_players: None,
            snapshots: false,
        }))
    }

    /// `"relay"` or `"ownership"` (the metrics' `kind` label).
    pub fn kind_name(&self) -> &'static str {
        match self {
            RoomConfig::Relay(_) => "relay",
            RoomConfig::Ownership(_) => "ownership",
        }
    }

    /// Slots of the room: players or participant seats.
    pub fn slots(&self) -> u8 {
        match self {
            RoomConfig::Relay(relay) => relay.players,
            RoomConfig::Ownership(ownership) => ownership.participants,
        }
    }

    /// The room's tick rate, in Hz.
    pub fn tick_rate_hz(&self) -> u16 {
        match self {
            RoomConfig::Relay(relay) => relay.tick_rate_hz,
            RoomConfig::Ownership(ownership) => ownership.tick_rate_hz,
        }
    }

    /// Checks every bound above.
    ///
    /// # Errors
    ///
    /// The first [`RoomConfigError`] found.
    pub fn validate(&self) -> Result<(), RoomConfigError> {
        let max = match self {
            RoomConfig::Relay(_) => MAX_PLAYERS,
            RoomConfig::Ownership(_) => MAX_PARTICIPANTS,
        };
        if self.slots() == 0 || self.slots() > max {
            return Err(RoomConfigError::Slots {
                given: self.slots(),
                max,
            });
        }
        if !TICK_RATES_HZ.contains(&self.tick_rate_hz()) {
            return Err(RoomConfigError::TickRate(self.tick_rate_hz()));
        }
        match self {
            RoomConfig::Relay(relay) => relay.validate(),
            RoomConfig::Ownership(ownership) => ownership.validate(),
        }
    }
}

impl RelayRoomConfig {
    fn validate(&self) -> Result<(), RoomConfigError> {
        let input = &self.input;
        if input.name.is_empty() || input.name.len() > MAX_INPUT_NAME_BYTES {
            return Err(RoomConfigError::InputName);
        }
        let holds_default =
            usize::try_from(input.max_bytes).is_ok_and(|m| m >= input.default.len());
        if input.max_bytes == 0 || input.max_bytes > MAX_INPUT_BYTES || !holds_default {
            return Err(RoomConfigError::InputBytes {
                given: input.max_bytes,
                default: input.default.len(),
            });
        }
        match self.start_players {
            Some(0) => Err(RoomConfigError::StartPlayers),
            Some(n) if n > self.players => Err(RoomConfigError::StartPlayers),
            Some(n) if n < self.players && !self.snapshots => Err(RoomConfigError::StartPlayers),
            _ => Ok(()),
        }
    }
}

impl OwnershipRoomConfig {
    fn validate(&self) -> Result<(), RoomConfigError> {
        if self.bodies.len() > MAX_BODIES {
            return Err(RoomConfigError::TooManyBodies(self.bodies.len()));
        }
        let mut ids = std::collections::HashSet::with_capacity(self.bodies.len());
        for body in &self.bodies {
            if !ids.insert(body.id) {
                return Err(RoomConfigError::DuplicateBody(body.id));
            }
            if body
                .position
                .iter()
                .any(|c| !c.is_finite() || c.abs() > 1e6)
            {
                return Err(RoomConfigError::BodyPosition(body.id));
            }
            let length = body.rotation.iter().map(|c| c * c).sum::<f32>().sqrt();
            if !length.is_finite() || (length - 1.0).abs() > 1e-3 {
                return Err(RoomConfigError::BodyRotation(body.id));
            }
            body.validate_physics(self.hosts_physics())?;
        }
        self.host.validate()
    }
}

impl BodySpec {
    /// The shape's sizes and the properties' bounds; with the physics host on (`hosted`), a
    /// dynamic body needs a shape.
    fn validate_physics(&self, hosted: bool) -> Result<(), RoomConfigError> {
        match self.shape {
            Some(shape) if !shape.is_valid() => return Err(RoomConfigError::BodyShape(self.id)),
            None if hosted && !self.fixed => return Err(RoomConfigError::ShapeMissing(self.id)),
            _ => {}
        }
        match self.properties.bad_field() {
            Some(field) => Err(RoomConfigError::BodyProperty {
                body: self.id,
                field,
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay(players: u8) -> RoomConfig {
        RoomConfig::Relay(RelayRoomConfig {
            players,
            tick_rate_hz: 64,
            input: InputSpec {
                name: "game::Input".into(),
                max_bytes: 16,
                default: vec![0, 0],
            },
            start_players: None,
            snapshots: false,
        })
    }

    #[test]
    fn a_relay_room_reads_from_json_with_defaults() {
        let json = r#"{"kind":"relay","players":2,"input":{"name":"game::Input","max_bytes":16,"default":[0,0]}}"#;
        let config: RoomConfig = serde_json::from_str(json).unwrap();
        assert_eq!(config, relay(2));
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn unknown_fields_and_kinds_are_refused_when_read() {
        let typo = r#"{"kind":"relay","players":2,"playrs":3,"input":{"name":"a","max_bytes":1,"default":[]}}"#;
        assert!(serde_json::from_str::<RoomConfig>(typo).is_err());
        assert!(serde_json::from_str::<RoomConfig>(r#"{"kind":"arena"}"#).is_err());
    }

    #[test]
    fn slots_and_tick_rates_are_bounded() {
        assert_eq!(
            relay(0).validate(),
            Err(RoomConfigError::Slots { given: 0, max: 64 })
        );
        assert_eq!(
            relay(65).validate(),
            Err(RoomConfigError::Slots { given: 65, max: 64 })
        );
        let RoomConfig::Relay(mut r) = relay(2) else {
            unreachable!()
        };
        r.tick_rate_hz = 0;
        assert_eq!(
            RoomConfig::Relay(r).validate(),
            Err(RoomConfigError::TickRate(0))
        );
    }

    #[test]
    fn the_input_bound_must_hold_the_default_input() {
        let RoomConfig::Relay(mut r) = relay(2) else {
            unreachable!()
        };
        r.input.max_bytes = 1;
        assert_eq!(
            RoomConfig::Relay(r.clone()).validate(),
            Err(RoomConfigError::InputBytes {
                given: 1,
                default: 2
            })
        );
        r.input.max_bytes = 4_096;
        assert!(RoomConfig::Relay(r).validate().is_err());
    }

    #[test]
    fn fewer_start_players_need_snapshots() {
        let RoomConfig::Relay(mut r) = relay(3) else {
            unreachable!()
        };
        r.start_players = Some(2);
        assert_eq!(
            RoomConfig::Relay(r.clone()).validate(),
            Err(RoomConfigError::StartPlayers)
        );
        r.snapshots = true;
        assert_eq!(RoomConfig::Relay(r).validate(), Ok(()));
    }

    #[test]
    fn ownership_bodies_need_unique_ids_and_finite_positions() {
        let body = |id, x| BodySpec::new(id, false, [x, 0.0, 0.0]);
        let room = |bodies| RoomConfig::Ownership(OwnershipRoomConfig::new(3, bodies));
        assert_eq!(room(vec![body(1, 0.0), body(2, 1.0)]).validate(), Ok(()));
        assert_eq!(
            room(vec![body(1, 0.0), body(1, 1.0)]).validate(),
            Err(RoomConfigError::DuplicateBody(1))
        );
        assert_eq!(
            room(vec![body(4, f32::NAN)]).validate(),
            Err(RoomConfigError::BodyPosition(4))
        );
        let mut turned = body(5, 0.0);
        turned.rotation = [0.0, 0.0, 0.0, 2.0];
        assert_eq!(
            room(vec![turned]).validate(),
            Err(RoomConfigError::BodyRotation(5))
        );
    }

    fn cube(id: u64) -> BodySpec {
        BodySpec::new(id, false, [0.0, 1.0, 0.0]).with_shape(ShapeSpec::Cuboid {
            half_extents: [0.25, 0.25, 0.25],
        })
    }

    fn hosted(bodies: Vec<BodySpec>) -> OwnershipRoomConfig {
        OwnershipRoomConfig {
            physics_host: Some(true),
            ..OwnershipRoomConfig::new(2, bodies)
        }
    }

    #[test]
    fn an_ownership_room_without_shapes_reads_as_before() {
        let json = r#"{"kind":"ownership","participants":2,"bodies":[{"id":0,"fixed":true,"position":[0,-0.5,0]},{"id":1,"position":[1,0.25,0]}]}"#;
        let RoomConfig::Ownership(room) = serde_json::from_str(json).unwrap() else {
            panic!("an ownership room")
        };
        assert_eq!(room.physics_host, None);
        assert_eq!(room.host, PhysicsHostSpec::default());
        assert_eq!(room.bodies[1].shape, None);
        assert_eq!(room.bodies[1].properties, BodyProperties::default());
        assert!(!room.shaped());
        // Written back, it has none of the new fields.
        let written = serde_json::to_string(&RoomConfig::Ownership(room)).unwrap();
        assert!(
            !written.contains("shape") && !written.contains("properties"),
            "{written}"
        );
    }

    #[test]
    fn shapes_properties_and_the_host_read_from_json() {
        let json = r#"{"kind":"ownership","participants":2,"physics_host":true,
            "host":{"max_teleport":3,"penalty_ms":500},
            "bodies":[
              {"id":0,"fixed":true,"position":[0,-0.5,0],"shape":{"kind":"cuboid","half_extents":[20,0.5,20]}},
              {"id":1,"position":[0,1,0],"shape":{"kind":"ball","radius":0.3},
               "properties":{"mass":2.5,"friction":0.8,"restitution":0.2,"linear_damping":0.3,"angular_damping":0.8}},
              {"id":2,"position":[1,1,0],"shape":{"kind":"capsule","half_height":0.4,"radius":0.2}}]}"#;
        let config: RoomConfig = serde_json::from_str(json).unwrap();
        assert_eq!(config.validate(), Ok(()));
        let RoomConfig::Ownership(room) = &config else {
            panic!("an ownership room")
        };
        assert!(room.hosts_physics() && room.shaped());
        assert_eq!(room.bodies[1].shape, Some(ShapeSpec::Ball { radius: 0.3 }));
        assert_eq!(
            room.bodies[2].shape,
            Some(ShapeSpec::Capsule {
                half_height: 0.4,
                radius: 0.2
            })
        );
        let p = room.bodies[1].properties;
        assert_eq!(
            (p.mass, p.density, p.friction, p.restitution),
            (Some(2.5), 1.0, 0.8, 0.2)
        );
        assert_eq!(
            (p.linear_damping, p.angular_damping, p.gravity_scale),
            (0.3, 0.8, 1.0)
        );
        let limits = room.host.config().limits.unwrap();
        assert_eq!((limits.max_speed, limits.max_teleport), (50.0, 3.0));
        assert_eq!(limits.penalty, Duration::from_millis(500));
        // It writes back to the same room.
        let again: RoomConfig =
            serde_json::from_str(&serde_json::to_string(&config).unwrap()).unwrap();
        assert_eq!(again, config);
        let typo = r#"{"kind":"ownership","participants":1,"bodies":[{"id":1,"position":[0,0,0],"shape":{"kind":"ball","radius":1,"radios":2}}]}"#;
        assert!(serde_json::from_str::<RoomConfig>(typo).is_err());
    }

    #[test]
    fn shape_sizes_must_be_finite_and_positive() {
        for shape in [
            ShapeSpec::Ball { radius: 0.0 },
            ShapeSpec::Ball { radius: -1.0 },
            ShapeSpec::Cuboid {
                half_extents: [1.0, f32::NAN, 1.0],
            },
            ShapeSpec::Capsule {
                half_height: f32::INFINITY,
                radius: 0.2,
            },
            ShapeSpec::Ball { radius: 2e6 },
        ] {
            let room = hosted(vec![BodySpec::new(7, false, [0.0; 3]).with_shape(shape)]);
            assert_eq!(
                RoomConfig::Ownership(room).validate(),
                Err(RoomConfigError::BodyShape(7)),
                "{shape:?}"
            );
        }
    }

    #[test]
    fn body_properties_are_bounded() {
        type Edit = fn(&mut BodyProperties);
        let bad: [(&str, Edit); 7] = [
            ("mass", |p| p.mass = Some(0.0)),
            ("density", |p| p.density = -1.0),
            ("friction", |p| p.friction = f32::NAN),
            ("restitution", |p| p.restitution = 1.5),
            ("linear_damping", |p| p.linear_damping = -0.1),
            ("angular_damping", |p| p.angular_damping = f32::INFINITY),
            ("gravity_scale", |p| p.gravity_scale = f32::NAN),
        ];
        for (field, edit) in bad {
            let mut body = cube(3);
            edit(&mut body.properties);
            assert_eq!(
                RoomConfig::Ownership(hosted(vec![body])).validate(),
                Err(RoomConfigError::BodyProperty { body: 3, field })
            );
        }
    }

    #[test]
    fn a_hosted_room_needs_a_shape_on_every_dynamic_body() {
        let ground = BodySpec::new(0, true, [0.0, -0.5, 0.0]);
        let bare = BodySpec::new(2, false, [1.0, 0.0, 0.0]);
        assert_eq!(
            RoomConfig::Ownership(hosted(vec![ground, cube(1)])).validate(),
            Ok(()),
            "a fixed body may have no shape"
        );
        assert_eq!(
            RoomConfig::Ownership(hosted(vec![ground, cube(1), bare])).validate(),
            Err(RoomConfigError::ShapeMissing(2))
        );
        // Not hosted, the same bodies are a plain relayed room.
        let mut relayed = hosted(vec![ground, cube(1), bare]);
        relayed.physics_host = Some(false);
        assert_eq!(RoomConfig::Ownership(relayed).validate(), Ok(()));
    }

    #[test]
    fn the_host_settings_are_bounded() {
        for (field, edit) in [
            (
                "max_speed",
                (|h| h.max_speed = 0.0) as fn(&mut PhysicsHostSpec),
            ),
            ("max_teleport", |h| h.max_teleport = f32::NAN),
            ("interest_radius", |h| h.interest_radius = Some(-2.0)),
        ] {
            let mut room = hosted(vec![cube(1)]);
            edit(&mut room.host);
            assert_eq!(
                RoomConfig::Ownership(room).validate(),
                Err(RoomConfigError::PhysicsHost(field))
            );
        }
    }

    #[test]
    fn the_room_says_first_and_the_server_switch_hosts_only_shaped_rooms() {
        let shaped = OwnershipRoomConfig::new(2, vec![cube(1)]);
        let bare = OwnershipRoomConfig::new(2, vec![BodySpec::new(1, false, [0.0; 3])]);
        let settled = |mut room: OwnershipRoomConfig, server: bool| {
            room.resolve_physics_host(server);
            room.physics_host
        };
        assert_eq!(settled(shaped.clone(), true), Some(true));
        assert_eq!(settled(shaped.clone(), false), Some(false));
        assert_eq!(
            settled(bare.clone(), true),
            Some(false),
            "no shapes: relayed"
        );
        let off = OwnershipRoomConfig {
            physics_host: Some(false),
            ..shaped.clone()
        };
        assert_eq!(
            settled(off, true),
            Some(false),
            "the room's own switch wins"
        );
        let on = OwnershipRoomConfig {
            physics_host: Some(true),
            ..shaped
        };
        assert_eq!(settled(on, false), Some(true));
    }

    #[test]
    fn the_spec_of_an_input_type_matches_the_clients_fingerprint() {
        let spec = InputSpec::of::<u32>(64).unwrap();
        assert_eq!(spec.fingerprint(), InputFingerprint::of_input::<u32>(64));
        assert_eq!(spec.default, simsync_net::encode(&0u32).unwrap());
    }
}
