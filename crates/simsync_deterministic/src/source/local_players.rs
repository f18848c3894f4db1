//! [`LocalPlayers`]: which players this app controls.

use bevy::prelude::*;

use crate::tick::PlayerIndex;

/// The players whose inputs this app feeds (main-app resource, see
/// [local players](crate::rules#local-players)), in player order: write their inputs to
/// [`LocalInputs`](crate::LocalInputs).
///
/// - Local session: every player of the session (`0..players`): all of them are fed by this
///   app's [`LocalInputs`](crate::LocalInputs). (`LocalSessionConfig::known_players` is another
///   matter: which players the prediction may read before confirmation.)
/// - Networked session: empty until the relay server's `Welcome`, then the one slot it
///   assigned. This is the way to learn the slot; `SessionStats::network`'s `slot` says the
///   same, one update later and wrapped in two `Option`s.
///
/// Kept up to date by the session update (changed only when it changes).
#[derive(Resource, Reflect, Debug, Clone, Default, PartialEq, Eq)]
#[reflect(Resource, Debug, Default, PartialEq, Clone)]
pub struct LocalPlayers {
    players: Vec<PlayerIndex>,
}

impl LocalPlayers {
    /// The given players, sorted and without duplicates.
    pub fn new(players: impl IntoIterator<Item = PlayerIndex>) -> Self {
        let mut players: Vec<PlayerIndex> = players.into_iter().collect();
        players.sort_unstable();
        players.dedup();
        Self { players }
    }

    /// The players, ascending.
    pub fn as_slice(&self) -> &[PlayerIndex] {
        &self.players
    }

    /// The players, ascending.
    pub fn iter(&self) -> impl Iterator<Item = PlayerIndex> + '_ {
        self.players.iter().copied()
    }

    /// The `n`-th local player (`0`: the first, the only one of a networked client), or `None`
    /// when this app controls fewer (e.g. a client not welcomed yet).
    pub fn get(&self, n: usize) -> Option<PlayerIndex> {
        self.players.get(n).copied()
    }

    /// Whether this app controls `player`.
    pub fn contains(&self, player: PlayerIndex) -> bool {
        self.players.contains(&player)
    }

    /// How many players this app controls.
    pub fn len(&self) -> usize {
        self.players.len()
    }

    /// Whether this app controls no player (yet).
    pub fn is_empty(&self) -> bool {
        self.players.is_empty()
    }

    /// Whether these are exactly `players` (ascending).
    pub(crate) fn is(&self, players: impl IntoIterator<Item = PlayerIndex>) -> bool {
        self.players.iter().copied().eq(players)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn players_are_sorted_deduplicated_and_indexed_by_local_number() {
        let local = LocalPlayers::new([3, 1, 3]);
        assert_eq!(local.as_slice(), &[1, 3]);
        assert_eq!(local.get(0), Some(1));
        assert_eq!(local.get(1), Some(3));
        assert_eq!(local.get(2), None);
        assert!(local.contains(3) && !local.contains(2));
        assert_eq!(local.len(), 2);
        assert!(!local.is(0..0) && local.is([1, 3]));
        assert!(LocalPlayers::default().is_empty());
        assert!(LocalPlayers::default().is(0..0));
    }
}
