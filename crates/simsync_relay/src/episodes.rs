//! Desync episodes: the relay reports a player's desync once when it starts, not once per
//! judged tick ([rule](crate::rules#desyncs-are-reported-once-per-episode)). Pure data, no I/O.

use crate::checksums::Judgement;

/// Which players are in a desync episode (one flag per slot).
///
/// A player's episode starts at the first judged tick that names it and lasts until a judged
/// tick where its checksum agrees with the judge's — the authority's, or the majority's shared
/// with at least one other player ([`Judgement::agreeing`]) — or until a new connection takes
/// its slot ([`Self::end`]). A tick it did not report, or one without a judge (no authority's
/// checksum and no majority), neither starts nor ends anything for it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct DesyncEpisodes {
    open: Vec<bool>,
}

impl DesyncEpisodes {
    /// No episode open, for `players` slots.
    pub(crate) fn new(players: usize) -> Self {
        Self {
            open: vec![false; players],
        }
    }

    /// Folds the judgement of one tick in (judgements in the order they are made): every agreeing
    /// player's episode ends, then every named player not in an episode starts one. Returns the
    /// players whose episode starts at this tick, in slot order (empty: nothing to report). A
    /// slot beyond the session's players is ignored.
    pub(crate) fn judge(&mut self, judgement: &Judgement) -> Vec<u8> {
        for slot in &judgement.agreeing {
            if let Some(open) = self.open.get_mut(usize::from(*slot)) {
                *open = false;
            }
        }
        judgement
            .players
            .iter()
            .copied()
            .filter(|slot| {
                self.open
                    .get_mut(usize::from(*slot))
                    .is_some_and(|open| !std::mem::replace(open, true))
            })
            .collect()
    }

    /// Ends `slot`'s episode, if any (a new connection took the slot: its next disagreement is
    /// a new episode). An unknown slot is ignored.
    pub(crate) fn end(&mut self, slot: usize) {
        if let Some(open) = self.open.get_mut(slot) {
            *open = false;
        }
    }

    /// Whether `slot` is in a desync episode.
    #[cfg(test)]
    fn is_open(&self, slot: usize) -> bool {
        self.open.get(slot).copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(tick: i32, players: &[u8], agreeing: &[u8]) -> Judgement {
        Judgement {
            tick,
            players: players.to_vec(),
            agreeing: agreeing.to_vec(),
            judge: simsync_net::DesyncJudge::Majority,
        }
    }

    #[test]
    fn a_player_named_every_tick_starts_one_episode() {
        let mut episodes = DesyncEpisodes::new(3);
        let started: Vec<Vec<u8>> = (1..=200)
            .map(|tick| episodes.judge(&judged(tick, &[2], &[0, 1])))
            .collect();
        assert_eq!(started[0], vec![2]);
        assert!(started[1..].iter().all(Vec::is_empty), "{started:?}");
        assert!(episodes.is_open(2));
        assert!(!episodes.is_open(0));
    }

    #[test]
    fn an_episode_ends_when_the_player_agrees_again_and_the_next_disagreement_starts_another() {
        let mut episodes = DesyncEpisodes::new(3);
        assert_eq!(episodes.judge(&judged(10, &[1], &[0, 2])), vec![1]);
        assert!(episodes.judge(&judged(11, &[1], &[0, 2])).is_empty());
        // Player 1 agrees at tick 12: its episode ends.
        assert!(episodes.judge(&judged(12, &[], &[0, 1, 2])).is_empty());
        assert!(!episodes.is_open(1));
        assert_eq!(episodes.judge(&judged(13, &[1], &[0, 2])), vec![1]);
    }

    #[test]
    fn a_tick_the_player_did_not_report_or_a_tie_does_not_end_its_episode() {
        let mut episodes = DesyncEpisodes::new(3);
        assert_eq!(episodes.judge(&judged(1, &[2], &[0, 1])), vec![2]);
        // Player 2 did not report tick 2 (timeout): the others agree among themselves.
        assert!(episodes.judge(&judged(2, &[], &[0, 1])).is_empty());
        // A three-way split names everyone: only 0 and 1 start episodes.
        assert_eq!(episodes.judge(&judged(3, &[0, 1, 2], &[])), vec![0, 1]);
        assert!(episodes.is_open(2));
    }

    #[test]
    fn two_players_named_together_start_their_episodes_in_one_report() {
        let mut episodes = DesyncEpisodes::new(2);
        assert_eq!(episodes.judge(&judged(5, &[0, 1], &[])), vec![0, 1]);
        assert!(episodes.judge(&judged(6, &[0, 1], &[])).is_empty());
    }

    #[test]
    fn a_new_connection_in_the_slot_ends_the_episode_and_unknown_slots_are_ignored() {
        let mut episodes = DesyncEpisodes::new(2);
        assert_eq!(episodes.judge(&judged(5, &[1, 7], &[9])), vec![1]);
        episodes.end(1);
        episodes.end(9);
        assert!(!episodes.is_open(1));
        assert!(!episodes.is_open(9));
        assert_eq!(episodes.judge(&judged(6, &[1], &[0])), vec![1]);
    }
}
