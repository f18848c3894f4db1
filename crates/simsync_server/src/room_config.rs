//! What a room is made of ([rooms](crate::rules#rooms)): [`RoomConfig`], given to the admin
//! API as JSON or listed in the server's config file, and checked by
//! [`RoomConfig::validate`] before a room is made.

use serde::{Deserialize, Serialize};
use simsync_net::{InputFingerprint, SimInput};

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

/// One body of an ownership room: its id, whether it is fixed, and where it starts (metres).
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
}

fn no_rotation() -> [f32; 4] {
    [0.0, 0.0, 0.0, 1.0]
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
        }
        Ok(())
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
        let body = |id, x| BodySpec {
            id,
            fixed: false,
            position: [x, 0.0, 0.0],
            rotation: no_rotation(),
        };
        let room = |bodies| {
            RoomConfig::Ownership(OwnershipRoomConfig {
                participants: 3,
                tick_rate_hz: 64,
                bodies,
            })
        };
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

    #[test]
    fn the_spec_of_an_input_type_matches_the_clients_fingerprint() {
        let spec = InputSpec::of::<u32>(64).unwrap();
        assert_eq!(spec.fingerprint(), InputFingerprint::of_input::<u32>(64));
        assert_eq!(spec.default, simsync_net::encode(&0u32).unwrap());
    }
}
