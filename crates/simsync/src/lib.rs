//! `simsync`: one shared simulation across several machines, for Bevy. This facade names the
//! parts; each is also usable alone, and each states its rules in its own `rules` module. The
//! whole system is described in the repository's `docs/architecture.md`.
//!
//! - [`time`]: [`VirtualTimePlugin`] — virtual time (ticks + priority), tick rate, event queue,
//!   frame phases with double-buffered state.
//! - [`deterministic`]: [`DeterministicPlugin`] — verified and predicted worlds, rollback of ECS
//!   and Rapier state, inputs, checksums, the client of a networked session.
//! - [`relay`]: [`DeterministicServerPlugin`](relay::DeterministicServerPlugin) — the relay
//!   server of a networked deterministic session (it never simulates).
//! - [`ownership`]: [`OwnershipPlugin`] — distributed physics by simulation ownership (entity
//!   server, participants, bids, state updates).
//! - [`hybrid`]: players under rollback and props under ownership in one App, with a
//!   rollback whose cost does not grow with the props.
//! - [`net`]: the wire — messages, codec, renet channels, in-memory and UDP transports.
//! - [`testing`]: a game's netcode tests — a relay and N clients in one process
//!   ([`testing::RelayPeers`]), stepped together and compared checksum by checksum.
//!
//! [`SimSyncPlugins`] adds the plugins that need no game-specific configuration; the
//! deterministic session is added with its game plugin and input type:
//!
//! ```no_run
//! use bevy::prelude::*;
//! use simsync::prelude::*;
//!
//! #[derive(Clone)]
//! struct MyGame;
//! impl Plugin for MyGame {
//!     fn build(&self, _app: &mut App) {}
//! }
//!
//! App::new()
//!     .add_plugins((MinimalPlugins, SimSyncPlugins))
//!     .add_plugins(DeterministicPlugin::<PackedInput>::new(MyGame).config(SessionConfig {
//!         rollback_window: 60,
//!         ..default()
//!     }))
//!     .run();
//! ```
#![warn(missing_docs)]

pub use simsync_deterministic as deterministic;
pub use simsync_net as net;
pub use simsync_ownership as ownership;
pub use simsync_relay as relay;
pub use simsync_time as time;

pub use simsync_deterministic::DeterministicPlugin;
pub use simsync_deterministic::{
    PresentedSimEntity, SessionDiagnosticsPlugin, VisualSmoothingConfig, VisualSmoothingPlugin,
};
pub use simsync_ownership::OwnershipDiagnosticsPlugin;
pub use simsync_ownership::OwnershipPlugin;
pub use simsync_time::VirtualTimePlugin;

pub mod authority;
pub mod hybrid;
pub mod testing;

use bevy::app::{PluginGroup, PluginGroupBuilder};

/// The simsync plugins that need no game-specific configuration: [`VirtualTimePlugin`].
pub struct SimSyncPlugins;

impl PluginGroup for SimSyncPlugins {
    fn build(self) -> PluginGroupBuilder {
        PluginGroupBuilder::start::<Self>().add(VirtualTimePlugin::default())
    }
}

/// Everything a game needs from every simsync plugin.
pub mod prelude {
    pub use crate::SimSyncPlugins;
    pub use simsync_deterministic::prelude::*;
    pub use simsync_ownership::prelude::*;
    pub use simsync_time::prelude::*;
}
