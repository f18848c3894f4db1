//! Test helpers for a game's own netcode tests, headless and in one process.
//!
//! - [`RelayPeers`]: a relay server and N clients of a deterministic game over the in-memory
//!   transport with a seeded link conditioner. Each client App runs the plugin the game's
//!   closure returns; [`run_until_verified`](RelayPeers::run_until_verified) steps them all
//!   until every client verified a tick (stopping at the first desync, prediction mismatch,
//!   stall or refusal a session reports), [`assert_all_agree`](RelayPeers::assert_all_agree)
//!   compares every verified checksum the clients share and names the first differing tick and
//!   what differs ([`Disagreement`]); [`agreement_of`](RelayPeers::agreement_of) checks one
//!   client (a late joiner, a rejoined one) against the others. Tests of desync detection
//!   itself build with [`tolerate_desyncs`](RelayPeersBuilder::tolerate_desyncs). Links change
//!   mid-run ([`set_link`](RelayPeers::set_link), [`cut_link`](RelayPeers::cut_link),
//!   [`restore_link`](RelayPeers::restore_link)), a client can be paused
//!   ([`pause`](RelayPeers::pause)), killed and rejoined with its reconnect token
//!   ([`kill`](RelayPeers::kill), [`rejoin`](RelayPeers::rejoin)), or join late
//!   ([`join`](RelayPeers::join)). The network, the links, pauses, kills and rejoins are
//!   `simsync_net`'s [`PeerNetwork`](crate::net::testing::PeerNetwork), which
//!   `simsync_ownership`'s `OwnershipPeers` stands on too: both harnesses give these methods
//!   the same names and meanings (here a resumed client goes on from where it froze), and
//!   report an unknown, killed or still running client as [`PeersError::Network`] with the
//!   network's [`PeerNetworkError`](crate::net::testing::PeerNetworkError).
//!
//! The harness checks more than agreement by default ([`HarnessChecks`]): every client's
//! session compares its predicted ticks with its verified ones (`verify_predictions`),
//! checksums every verified tick, and is rolled back at least [`DEFAULT_FORCED_ROLLBACK`]
//! ticks and re-simulated every [`DEFAULT_FORCED_ROLLBACK_EVERY`] updates
//! ([`ForcedRollbackPlugin`], in the spirit of GGRS's `SyncTestSession`). So a game whose simulation reads state a rollback does not restore (an
//! unregistered resource, a `Local`, the wall clock) fails `run_until_verified` with a
//! prediction mismatch naming the first difference, even on a perfect link and even when every
//! client makes the same mistake. [`checks`](RelayPeersBuilder::checks) with
//! [`HarnessChecks::OFF`] runs the sessions exactly as the game configured them (then only
//! checksum ticks, every `checksum_interval` verified ticks, 60 by default, are compared).
//!
//! [`rematch`](RelayPeers::rematch) ends the match and steps until every client plays the
//! next one; `run_until_verified` always steps at least once and counts a client still in an
//! earlier match than the relay's as having verified nothing. An authoritative room is tested
//! the same way, with the relay given through [`relay`](RelayPeersBuilder::relay)
//! (`DeterministicServerPlugin::new::<I>(players, hz).authority(LockstepAuthority::factory(..),
//! Resync::On)`, see [`crate::authority`]). Seats are the harness's players: 0
//! players, or more clients than seats, is a typed error ([`PeersError::NoPlayers`],
//! [`PeersError::NoFreeSeat`]), as is a run with every client paused or killed
//! ([`PeersError::NoClientRunning`]).
//! - [`HybridPeers`]: clients of a hybrid game ([`crate::hybrid`]), each one App with the
//!   players' session (a `RelayPeers` client, over the relay) and an ownership participant (its
//!   props in the App's world, over a second in-memory network to an entity server, the
//!   [`side server`](RelayPeersBuilder::side_server) of the players' harness). Players are
//!   compared by their verified checksums ([`assert_all_agree`](HybridPeers::assert_all_agree)),
//!   props by their copies' positions ([`prop_convergence`](HybridPeers::prop_convergence)).
//! - The one-App helpers of the deterministic crate, re-exported:
//!   [`run_until_verified`](fn@run_until_verified), [`RunLimits`], [`RunUntilError`].
//!
//! A two-player agreement test of a game (here an empty one, with scripted inputs):
//!
//! ```no_run
//! use bevy::prelude::*;
//! use simsync::prelude::*;
//! use simsync::testing::RelayPeers;
//!
//! #[derive(Clone)]
//! struct MyGame;
//! impl Plugin for MyGame {
//!     fn build(&self, _app: &mut App) {}
//! }
//!
//! let mut peers = RelayPeers::builder(2, |_client| DeterministicPlugin::<PackedInput>::new(MyGame))
//!     .inputs(|player, tick| PackedInput { buttons: (tick as u16) ^ u16::from(player), axes: [0; 2] })
//!     .build()
//!     .unwrap();
//! peers.run_until_verified(300).unwrap();
//! peers.assert_all_agree();
//! ```

mod agreement;
mod checks;
mod hybrid;
mod peers;

pub use agreement::{
    Agreement, BreakdownDifference, Disagreement, breakdown_difference, compare_histories,
    differing_pair,
};
pub use checks::{
    DEFAULT_FORCED_ROLLBACK, DEFAULT_FORCED_ROLLBACK_EVERY, ForcedRollbackPlugin, HarnessChecks,
    held_back_ticks_to_verify, is_forced_rollback_update,
};
pub use hybrid::{HybridPeers, HybridPeersBuilder, HybridPeersError};
pub use peers::{ClientIndex, DEFAULT_KEPT_BREAKDOWNS, PeersError, RelayPeers, RelayPeersBuilder};
pub use simsync_deterministic::testing::{
    RunLimits, RunUntilError, SessionWatch, run_until_verified, run_until_verified_with,
};
