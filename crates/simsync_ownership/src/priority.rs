//! Who bids, for what, and how hard: [`Priority`], [`ParticipantId`] and [`BodyId`].
//!
//! A priority is one byte. Larger wins ([ownership rule 2](crate::rules)); equal priorities are
//! settled by the entity server's lockout ([ownership rule 3](crate::rules)). The named levels
//! below are the defaults of the [rules](crate::rules); a session may move them through [`OwnershipConfig`](crate::OwnershipConfig), so the
//! arbiter and the participant state machine read the levels from the config, never from these
//! constants directly.

use core::fmt;

use bevy::prelude::*;
use serde::{Deserialize, Serialize};

/// How strongly a participant wants to simulate a body; larger wins (ownership rule 2).
///
/// `Priority(0)` ([`Priority::NONE`]) is the priority of an unowned body; no bid is ever made at
/// it. The named levels are the defaults of the [ownership rules](crate::rules).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Reflect,
    Serialize,
    Deserialize,
)]
#[reflect(Debug, Default, PartialEq, Hash, Clone)]
pub struct Priority(pub u8);

impl Priority {
    /// No owner (0). The priority an unowned body carries; any bid beats it.
    pub const NONE: Priority = Priority(0);
    /// 1: the owner no longer wants the body; others may bid [`Priority::VOLUNTEER`] at once
    /// (ownership rules 13 and 14).
    pub const YIELD: Priority = Priority(1);
    /// 2: bid for a body that has been active and unowned for the volunteer delay (ownership
    /// rule 7). The server never grants it as such: it becomes [`Priority::RECRUIT`].
    pub const VOLUNTEER: Priority = Priority(2);
    /// 3: what a granted [`Priority::VOLUNTEER`] bid becomes (ownership rule 7).
    pub const RECRUIT: Priority = Priority(3);
    /// 127: a script changed the body, or the body hit the participant's avatar (ownership rules
    /// 8 and 9).
    pub const POKE: Priority = Priority(127);
    /// 128: the participant holds the body (ownership rule 10). Beats [`Priority::POKE`], so a
    /// held "sword" stays with the one holding it.
    pub const GRAB: Priority = Priority(128);

    /// The raw byte.
    #[inline]
    pub const fn get(self) -> u8 {
        self.0
    }

    /// One level lower, stopping at [`Priority::NONE`]; the `N − 1` of ownership rule 11.
    #[inline]
    pub const fn saturating_sub(self, levels: u8) -> Priority {
        Priority(self.0.saturating_sub(levels))
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<u8> for Priority {
    fn from(value: u8) -> Self {
        Priority(value)
    }
}

impl From<Priority> for u8 {
    fn from(value: Priority) -> Self {
        value.0
    }
}

/// A participant's id: the wire type of `simsync_net` (two bytes keep an ownership record, id +
/// priority, at three bytes on the wire). The entity server assigns it when a
/// connection joins and always takes a bidder's id from the connection, never from the message.
pub use simsync_net::ParticipantId;

/// The stable network id of a body, the same on every participant and on the entity server,
/// and independent of any Bevy `Entity`: the wire type of `simsync_net`.
pub use simsync_net::BodyId;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_levels_match_the_rules_defaults() {
        assert_eq!(Priority::YIELD.get(), 1);
        assert_eq!(Priority::VOLUNTEER.get(), 2);
        assert_eq!(Priority::RECRUIT.get(), 3);
        assert_eq!(Priority::POKE.get(), 127);
        assert_eq!(Priority::GRAB.get(), 128);
        assert!(Priority::GRAB > Priority::POKE);
        assert_eq!(Priority::YIELD.saturating_sub(1), Priority::NONE);
        assert_eq!(Priority::NONE.saturating_sub(1), Priority::NONE);
    }
}
