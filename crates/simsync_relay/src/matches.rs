//! Matches and rematches ([rules](crate::rules#matches-and-rematches)): what the server app
//! asks of the relay ([`RelayCommand`]), what it is told back ([`MatchChanged`],
//! [`RelayCommandFailed`]) and which steps a command takes from each phase ([`match_steps`]).
//! Pure data, no I/O.

use bevy::prelude::*;
use simsync_net::{MatchEndReason, MatchId, MatchPhase};

use crate::stats::RelayStats;

/// What the relay's app asks of its match (a Message on the relay's App, read by
/// [`DeterministicServerPlugin`](crate::DeterministicServerPlugin) before the relay's update;
/// or call [`RelayServer::command`](crate::RelayServer::command)). Connections and seats stay
/// as they are: a rematch keeps every connected player in its slot.
///
/// Each command either changes the match (written back as [`MatchChanged`]) or is refused
/// with a [`MatchCommandError`] (written as [`RelayCommandFailed`]); nothing changes then.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub enum RelayCommand {
    /// Ends the running match: the clock stops, every seated client is told `MatchEnded` with
    /// `reason`, and nothing more of the match is taken. The relay then waits for
    /// [`StartMatch`](Self::StartMatch) (a results screen, say).
    EndMatch {
        /// Why, as the clients will see it.
        reason: MatchEndReason,
    },
    /// Opens the next match after an ended one: a new [`MatchId`], the relay's per-match state
    /// and counters from zero, every seated player told `MatchOpened`; the match starts once
    /// every seated player set its session up anew and said it is ready.
    StartMatch,
    /// [`EndMatch`](Self::EndMatch) (if the match runs) then [`StartMatch`](Self::StartMatch),
    /// in one update.
    Rematch {
        /// Why the running match ends.
        reason: MatchEndReason,
    },
}

/// Why the relay refused a [`RelayCommand`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MatchCommandError {
    /// The match has not started: its lobby is open (players are joining or setting up; no
    /// match ran yet when this is the first one), so there is nothing to end and the next
    /// match is open already.
    #[error("{match_id} has not started: its players are joining or getting ready")]
    MatchNotStarted {
        /// The match in its lobby.
        match_id: MatchId,
    },
    /// `EndMatch` for a match that ended already; `StartMatch` opens the next one.
    #[error("{match_id} has ended already; StartMatch opens the next")]
    MatchAlreadyEnded {
        /// The ended match.
        match_id: MatchId,
    },
    /// `StartMatch` while the match runs; end it first (`EndMatch`), or use `Rematch`.
    #[error("{match_id} is running; end it first (EndMatch) or use Rematch")]
    MatchRunning {
        /// The running match.
        match_id: MatchId,
    },
}

/// The relay's match changed (a Message on the relay's App).
#[derive(Message, Debug, Clone, PartialEq)]
pub enum MatchChanged {
    /// The match started: every seated player was ready; the clock runs from tick 0.
    Started {
        /// The match.
        match_id: MatchId,
        /// Slots taken when it started.
        players: u8,
    },
    /// The match ended ([`RelayCommand::EndMatch`] or [`RelayCommand::Rematch`]).
    Ended {
        /// The match.
        match_id: MatchId,
        /// Why, as the clients were told.
        reason: MatchEndReason,
        /// The match's counters as it ended ([`RelayStats`] starts over when the next match
        /// opens).
        stats: Box<RelayStats>,
    },
    /// The next match's lobby opened ([`RelayCommand::StartMatch`] or
    /// [`RelayCommand::Rematch`]).
    Opened {
        /// The new match.
        match_id: MatchId,
    },
}

/// The relay refused a command (a Message on the relay's App); nothing changed.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct RelayCommandFailed {
    /// The command.
    pub command: RelayCommand,
    /// Why.
    pub error: MatchCommandError,
}

/// One step a command takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MatchStep {
    /// End the running match with this reason.
    End(MatchEndReason),
    /// Open the next match's lobby.
    Open,
}

/// The steps `command` takes from match `match_id` in `phase`, in order, or why it is refused:
/// `EndMatch` needs a running match, `StartMatch` an ended one, `Rematch` either (from a
/// running match it ends it first). From the lobby every command is refused
/// ([`MatchCommandError::MatchNotStarted`]): two rematches in one update leave the second
/// refused, since the first opened a lobby.
///
/// # Errors
/// The [`MatchCommandError`] of a command the phase does not allow.
pub(crate) fn match_steps(
    command: &RelayCommand,
    match_id: MatchId,
    phase: MatchPhase,
) -> Result<Vec<MatchStep>, MatchCommandError> {
    match (command, phase) {
        (_, MatchPhase::Lobby) => Err(MatchCommandError::MatchNotStarted { match_id }),
        (RelayCommand::EndMatch { reason }, MatchPhase::Running) => {
            Ok(vec![MatchStep::End(reason.clone())])
        }
        (RelayCommand::EndMatch { .. }, MatchPhase::Ended) => {
            Err(MatchCommandError::MatchAlreadyEnded { match_id })
        }
        (RelayCommand::StartMatch, MatchPhase::Running) => {
            Err(MatchCommandError::MatchRunning { match_id })
        }
        (RelayCommand::StartMatch | RelayCommand::Rematch { .. }, MatchPhase::Ended) => {
            Ok(vec![MatchStep::Open])
        }
        (RelayCommand::Rematch { reason }, MatchPhase::Running) => {
            Ok(vec![MatchStep::End(reason.clone()), MatchStep::Open])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: MatchId = MatchId::FIRST;

    fn end() -> RelayCommand {
        RelayCommand::EndMatch {
            reason: MatchEndReason::Completed,
        }
    }

    fn rematch() -> RelayCommand {
        RelayCommand::Rematch {
            reason: MatchEndReason::Abandoned,
        }
    }

    #[test]
    fn a_running_match_ends_or_is_replayed() {
        assert_eq!(
            match_steps(&end(), ONE, MatchPhase::Running),
            Ok(vec![MatchStep::End(MatchEndReason::Completed)])
        );
        assert_eq!(
            match_steps(&rematch(), ONE, MatchPhase::Running),
            Ok(vec![
                MatchStep::End(MatchEndReason::Abandoned),
                MatchStep::Open
            ])
        );
        assert_eq!(
            match_steps(&RelayCommand::StartMatch, ONE, MatchPhase::Running),
            Err(MatchCommandError::MatchRunning { match_id: ONE })
        );
    }

    #[test]
    fn an_ended_match_opens_the_next_and_cannot_end_again() {
        for command in [RelayCommand::StartMatch, rematch()] {
            assert_eq!(
                match_steps(&command, ONE, MatchPhase::Ended),
                Ok(vec![MatchStep::Open])
            );
        }
        assert_eq!(
            match_steps(&end(), ONE, MatchPhase::Ended),
            Err(MatchCommandError::MatchAlreadyEnded { match_id: ONE })
        );
    }

    #[test]
    fn nothing_is_done_from_a_lobby() {
        // Before the first match started (no clients, or clients still connecting), and after
        // a rematch in the same update: the lobby is open.
        for match_id in [ONE, MatchId(2)] {
            for command in [end(), RelayCommand::StartMatch, rematch()] {
                assert_eq!(
                    match_steps(&command, match_id, MatchPhase::Lobby),
                    Err(MatchCommandError::MatchNotStarted { match_id })
                );
            }
        }
        assert_eq!(
            MatchCommandError::MatchNotStarted { match_id: ONE }.to_string(),
            "match 1 has not started: its players are joining or getting ready"
        );
    }
}
