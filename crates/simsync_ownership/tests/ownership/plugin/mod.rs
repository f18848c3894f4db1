//! Plugin-level tests of `OwnershipPlugin`: an entity server and three participants, each its
//! own App with its own Rapier world, over the in-memory transport, time driven by hand with
//! `NetClock::Fixed(1/64 s)` — on `simsync_ownership::testing::OwnershipPeers` (`harness`,
//! and `peers`, which tests the harness itself).

mod ageing;
mod bulk;
mod deltas;
mod diagnostics;
mod ending;
mod harness;
mod host;
mod hostile;
mod misuse;
mod orphans;
mod peers;
mod refusals;
mod relay_bytes;
mod reproducible;
mod respawn;
mod sessions;
mod silence;
mod traffic;
