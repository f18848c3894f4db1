//! The integration tests of `simsync_ownership`, one binary:
//!
//! - [`rules`]: one test per ownership rule, on the pure arbiter and participant state machine;
//! - [`scenarios`]: races, edge times, refusals and their counters, on the same pure core;
//! - [`choices`]: refusals on the spot, the exclusive-grab option and orphans, on the pure core;
//! - [`invariants`]: property tests of random message sequences;
//! - [`plugin`]: `OwnershipPlugin` Apps (an entity server and participants) over the in-memory
//!   transport.
//!
//! [`common`] holds the pure-core scaffolding the first three share.

mod choices;
mod common;
mod invariants;
mod plugin;
mod rules;
mod scenarios;
