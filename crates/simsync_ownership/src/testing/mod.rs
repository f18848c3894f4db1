//! A test harness for a game's ownership scenes: an entity-server App and N participant Apps,
//! each with its own Rapier world, over `simsync_net`'s in-memory transport with its seeded link
//! conditioner ([`MemoryNetwork`](simsync_net::MemoryNetwork)), stepped by hand on a fixed tick
//! — no sockets, no sleeps, no wall clock ([`OwnershipPeers`]).
//!
//! The harness adds the infrastructure (`MinimalPlugins`, the net plugin on a fixed clock, the
//! [`OwnershipPlugin`](crate::OwnershipPlugin) of each role, the transport, and on participants
//! `TransformPlugin` and Rapier); the game adds its scene and systems with closures: [`scene`] on
//! every App (the server registers bodies from their `BodyNetId`, `RigidBody` and `Transform`
//! and ignores the rest, so one closure can spawn the same bodies everywhere), [`server`] on the
//! entity server, [`participant`] on each participant (with its index; also when it rejoins).
//! Then:
//! [`step`](OwnershipPeers::step) / [`run`](OwnershipPeers::run) for ticks, run until a
//! condition, until joined or until converged, [`assert_converged`](OwnershipPeers::assert_converged)
//! (every copy of every body within a tolerance, naming the first body that is not), link
//! changes mid-run ([`set_link`](OwnershipPeers::set_link), [`cut_link`](OwnershipPeers::cut_link),
//! [`restore_link`](OwnershipPeers::restore_link)), [`pause`](OwnershipPeers::pause) /
//! [`resume`](OwnershipPeers::resume) one participant, [`kill`](OwnershipPeers::kill) and
//! [`rejoin`](OwnershipPeers::rejoin) one, or [`join`](OwnershipPeers::join) one late.
//!
//! The network, the links, pauses, kills and rejoins are `simsync_net`'s
//! [`PeerNetwork`](simsync_net::testing::PeerNetwork), which `simsync::testing::RelayPeers`
//! stands on too: both harnesses give these methods the same names and meanings (here a resumed
//! participant first runs the updates it missed, as a stalled process catching up), and report
//! an unknown, killed or still running participant as [`PeersError::Network`] with the
//! network's [`PeerNetworkError`](simsync_net::testing::PeerNetworkError).
//!
//! Copies of a moving body lag its owner's by the link's latency (a relayed state is applied
//! as it was sent), so compare them once the bodies came to rest, or with a tolerance of the
//! speed times the round trip. A three-participant convergence test (a body pushed, slowed
//! down, released at rest; also run as a test in `tests/ownership/plugin/peers.rs`):
//!
//! ```no_run
//! use bevy::prelude::*;
//! use bevy_rapier3d::prelude::*;
//! use simsync_net::LinkConditionerConfig;
//! use simsync_ownership::prelude::*;
//! use simsync_ownership::testing::OwnershipPeers;
//!
//! let mut peers = OwnershipPeers::builder(3)
//!     .link(LinkConditionerConfig::PERFECT.with_latency(40, 5).with_loss(2.0))
//!     .scene(|app| {
//!         let body = (BodyNetId(BodyId(1)), Ownable, RigidBody::Dynamic, Collider::ball(0.5));
//!         let slowed = (GravityScale(0.0), Damping { linear_damping: 2.0, angular_damping: 2.0 });
//!         app.world_mut().spawn((body, slowed, Transform::default()));
//!     })
//!     .build()?;
//! peers.command(0, BodyId(1), |body| {
//!     body.insert(Velocity::linear(Vec3::X * 4.0)).poke();
//! })?;
//! peers.run(5 * 64);
//! peers.assert_converged(0.01);
//! # Ok::<(), simsync_ownership::testing::PeersError>(())
//! ```
//!
//! [`RelayLoad`] is the entity server's relay alone under load (fake participants without
//! physics, moving every body every tick), for benches of the relay path and for pinning the
//! bytes receivers get.
//!
//! [`scene`]: OwnershipPeersBuilder::scene
//! [`server`]: OwnershipPeersBuilder::server
//! [`participant`]: OwnershipPeersBuilder::participant

mod convergence;
mod peers;
mod relay_load;

pub use convergence::{Converged, Divergence, body_positions, compare_copies};
pub use peers::{OwnershipPeers, OwnershipPeersBuilder, PeersError};
pub use relay_load::{RelayLoad, relay_load_start, relay_load_state};

use core::time::Duration;

/// The harness's default tick: 1/64 s.
pub const DEFAULT_TICK: Duration = Duration::from_micros(15_625);

/// Default steps allowed for every participant to join ([`OwnershipPeersBuilder::build`]):
/// 10 s at 64 Hz.
pub const DEFAULT_JOIN_STEPS: u32 = 640;
