//! Plugin-level tests of `OwnershipPlugin`: an entity server and three participants, each its
//! own App with its own Rapier world, over the in-memory transport, time driven by hand with
//! `NetClock::Fixed(1/64 s)`.

mod bulk;
mod deltas;
mod diagnostics;
mod harness;
mod hostile;
mod misuse;
mod orphans;
mod refusals;
mod reproducible;
mod respawn;
mod sessions;
mod traffic;
