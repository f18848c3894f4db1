//! Matches of a relay session ([wire rule 12](crate::rules)): one connection plays match after
//! match, and every session message names the match it belongs to ([`MatchMessage`]), so a
//! message of an ended match that arrives late is never taken for the next one. The receiver
//! decides with [`match_drop`] and counts what it drops by reason ([`MatchDrops`]). Pure data,
//! no I/O.

use core::fmt;

use bevy::reflect::Reflect;
use serde::{Deserialize, Serialize};

/// The id of one match of a relay session: the first match is [`MatchId::FIRST`], every
/// rematch takes the next id ([`MatchId::next`]). Ids are never reused while the relay runs.
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
    Serialize,
    Deserialize,
    Reflect,
)]
pub struct MatchId(pub u32);

impl MatchId {
    /// The relay's first match.
    pub const FIRST: MatchId = MatchId(1);

    /// The id of the match after this one (saturating at `u32::MAX`: four billion rematches).
    #[must_use]
    pub const fn next(self) -> MatchId {
        MatchId(self.0.saturating_add(1))
    }
}

impl fmt::Display for MatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "match {}", self.0)
    }
}

/// A session message and the match it belongs to: the form every
/// [`SessionClientMessage`](crate::SessionClientMessage) and
/// [`SessionServerMessage`](crate::SessionServerMessage) travels in (one varint more per
/// message).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchMessage<M> {
    /// The match the message belongs to.
    pub match_id: MatchId,
    /// The message.
    pub message: M,
}

/// Longest text of a [`MatchEndReason::Other`] the relay sends, in bytes (a longer one is cut
/// at a character boundary).
pub const MAX_MATCH_END_TEXT_BYTES: usize = 120;

/// Why a match ended, as the server's app said when it ended it (sent to every seated client
/// in `SessionServerMessage::MatchEnded`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Reflect)]
pub enum MatchEndReason {
    /// The match was played to its end.
    Completed,
    /// The match was abandoned before its end.
    Abandoned,
    /// The server app's own reason (at most [`MAX_MATCH_END_TEXT_BYTES`] bytes).
    Other(String),
    /// The server shut down (it drained: its rooms were given until its drain timeout to
    /// finish).
    ServerShutdown,
    /// The room was ended by its operator (a dedicated server's `DELETE /rooms/{id}`).
    EndedByOperator,
}

impl MatchEndReason {
    /// The reason with an `Other` text cut to [`MAX_MATCH_END_TEXT_BYTES`] at a character
    /// boundary.
    #[must_use]
    pub fn bounded(self) -> Self {
        match self {
            MatchEndReason::Other(text) if text.len() > MAX_MATCH_END_TEXT_BYTES => {
                let mut end = MAX_MATCH_END_TEXT_BYTES;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                MatchEndReason::Other(text[..end].to_string())
            }
            other => other,
        }
    }
}

impl fmt::Display for MatchEndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatchEndReason::Completed => f.write_str("completed"),
            MatchEndReason::Abandoned => f.write_str("abandoned"),
            MatchEndReason::Other(text) => write!(f, "{text}"),
            MatchEndReason::ServerShutdown => f.write_str("server shut down"),
            MatchEndReason::EndedByOperator => f.write_str("ended by the operator"),
        }
    }
}

/// Where a match is, as its receiver sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, Reflect)]
pub enum MatchPhase {
    /// The match's players are joining or getting ready; it has not started.
    #[default]
    Lobby,
    /// The match runs.
    Running,
    /// The match ended; nothing of it is taken any more.
    Ended,
}

/// Why a session message was dropped for its match ([`match_drop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchDrop {
    /// The message belongs to a match that ended: an earlier match than the receiver's, or
    /// the receiver's own match after it ended (a message that arrived late).
    EndedMatch,
    /// The message belongs to the receiver's match, which has not started (its lobby).
    NotStarted,
    /// The message belongs to a match the receiver has not entered: a later one, or any
    /// while the receiver knows none.
    UnknownMatch,
}

/// Session messages dropped because of the match they belong to, by [`MatchDrop`] reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
pub struct MatchDrops {
    /// Messages of an ended match ([`MatchDrop::EndedMatch`]).
    pub ended_match: u64,
    /// Messages of a match that has not started ([`MatchDrop::NotStarted`]).
    pub not_started: u64,
    /// Messages of a match the receiver has not entered ([`MatchDrop::UnknownMatch`]).
    pub unknown_match: u64,
}

impl MatchDrops {
    /// Counts one message dropped for `reason`.
    pub fn count(&mut self, reason: MatchDrop) {
        match reason {
            MatchDrop::EndedMatch => self.ended_match += 1,
            MatchDrop::NotStarted => self.not_started += 1,
            MatchDrop::UnknownMatch => self.unknown_match += 1,
        }
    }

    /// Every message dropped, whatever the reason.
    pub fn total(&self) -> u64 {
        self.ended_match + self.not_started + self.unknown_match
    }
}

/// Why a receiver whose current match is `receiver` (its id and phase; `None` while it knows
/// none) drops a session message of match `message`, or `None` when it takes it: it takes
/// only messages of its own match while that match runs. An earlier match, or its own match
/// once ended, is [`MatchDrop::EndedMatch`]; its own match in the lobby is
/// [`MatchDrop::NotStarted`]; a later match, or any while it knows none, is
/// [`MatchDrop::UnknownMatch`]. Messages that open or end a match are the receiver's to
/// handle before this rule (they change its current match).
pub fn match_drop(message: MatchId, receiver: Option<(MatchId, MatchPhase)>) -> Option<MatchDrop> {
    let Some((current, phase)) = receiver else {
        return Some(MatchDrop::UnknownMatch);
    };
    match message.cmp(&current) {
        core::cmp::Ordering::Less => Some(MatchDrop::EndedMatch),
        core::cmp::Ordering::Greater => Some(MatchDrop::UnknownMatch),
        core::cmp::Ordering::Equal => match phase {
            MatchPhase::Running => None,
            MatchPhase::Lobby => Some(MatchDrop::NotStarted),
            MatchPhase::Ended => Some(MatchDrop::EndedMatch),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_receivers_running_match_is_taken() {
        let two = MatchId(2);
        let running = Some((two, MatchPhase::Running));
        assert_eq!(match_drop(two, running), None);
        assert_eq!(
            match_drop(MatchId::FIRST, running),
            Some(MatchDrop::EndedMatch)
        );
        assert_eq!(
            match_drop(MatchId(3), running),
            Some(MatchDrop::UnknownMatch)
        );
        assert_eq!(
            match_drop(two, Some((two, MatchPhase::Lobby))),
            Some(MatchDrop::NotStarted)
        );
        assert_eq!(
            match_drop(two, Some((two, MatchPhase::Ended))),
            Some(MatchDrop::EndedMatch)
        );
        assert_eq!(
            match_drop(MatchId::FIRST, None),
            Some(MatchDrop::UnknownMatch)
        );
    }

    #[test]
    fn drops_are_counted_by_reason() {
        let mut drops = MatchDrops::default();
        for reason in [
            MatchDrop::EndedMatch,
            MatchDrop::EndedMatch,
            MatchDrop::NotStarted,
            MatchDrop::UnknownMatch,
        ] {
            drops.count(reason);
        }
        assert_eq!(
            drops,
            MatchDrops {
                ended_match: 2,
                not_started: 1,
                unknown_match: 1
            }
        );
        assert_eq!(drops.total(), 4);
    }

    #[test]
    fn ids_follow_each_other_and_read_as_matches() {
        assert_eq!(MatchId::FIRST.next(), MatchId(2));
        assert_eq!(MatchId(u32::MAX).next(), MatchId(u32::MAX));
        assert_eq!(MatchId(7).to_string(), "match 7");
        assert!(MatchId(2) > MatchId::FIRST);
    }

    #[test]
    fn an_end_reason_text_is_cut_at_a_character_boundary() {
        let long = "é".repeat(100);
        let MatchEndReason::Other(cut) = MatchEndReason::Other(long).bounded() else {
            panic!("still Other");
        };
        assert_eq!(cut.len(), MAX_MATCH_END_TEXT_BYTES);
        assert_eq!(
            MatchEndReason::Other("short".into()).bounded(),
            MatchEndReason::Other("short".into())
        );
        assert_eq!(MatchEndReason::Completed.to_string(), "completed");
    }
}
