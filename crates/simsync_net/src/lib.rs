//! The simsync wire layer: what the networked deterministic session (relay server and clients)
//! and the ownership plugin (entity server and participants) send, how it is encoded, and how it
//! travels — over renet 2, in memory or over UDP.
//!
//! The parts, one per module:
//!
//! - **Messages** ([`messages`], [`session_proto`], [`ownership_proto`]): one enum per direction,
//!   [`ClientMessage`] and [`ServerMessage`], with the handshake ([`Hello`] → [`Welcome`] or
//!   `Rejected`, checked against [`PROTOCOL_VERSION`]), ping/pong, and the nested messages of
//!   each protocol: redundant input batches and confirmed input sets for the session; bids,
//!   grants, owner changes and compact [`PackedBodyState`] updates (44 bytes for small ids) for
//!   ownership. Inputs are opaque bytes, so this crate knows no game types.
//! - **Codec** ([`codec`]): [`encode`] / [`decode`] with bincode 2 (`standard()`, varints) and a
//!   64 KiB limit ([`MAX_MESSAGE_BYTES`]); bad bytes give a typed [`NetError`], never a panic,
//!   and [`DecodeStats`] counts rejects by kind.
//! - **Channels** ([`channels`]): the renet [`connection_config`] — reliable-ordered control,
//!   unreliable inputs, unreliable state ([`NetChannel`]).
//! - **Typed send/receive** ([`ClientNetExt`], [`ServerNetExt`]): encode, pick the channel,
//!   check for room, decode and count.
//! - **In-memory transport** ([`memory`], [`conditioner`]): a [`MemoryNetwork`] pumping renet
//!   packets between one server and N clients in one process through a seeded
//!   [`LinkConditioner`] per client and direction (latency, jitter, loss, duplication,
//!   reordering), on simulated time only, so multi-App tests are reproducible.
//! - **UDP transport** ([`udp`]): renet_netcode on any `SocketAddr`, unsecure or secure with
//!   connect tokens ([`generate_connect_token`]).
//! - **One interface** ([`ServerTransport`], [`ClientTransport`]) and **Bevy plugins**
//!   ([`NetServerPlugin`], [`NetClientPlugin`], [`NetClock`]): receive in `PreUpdate`, send in
//!   `PostUpdate`, in bevy_renet's `RenetReceive` / `RenetSend` sets, on bevy_renet's
//!   `RenetServer` / `RenetClient` resources.
//! - **Clock sync** ([`clock`]): [`RttEstimator`], [`input_delay_ticks`],
//!   [`target_lead_ticks`], [`speed_factor`] — pure functions.
//! - **Errors** ([`NetError`]): the one error type.
//!
//! ```
//! use bevy::prelude::*;
//! use simsync_net::prelude::*;
//!
//! let network = MemoryNetwork::perfect(7);
//! let mut server = App::new();
//! server
//!     .add_plugins(NetServerPlugin::default().with_clock(NetClock::fixed_hz(64)))
//!     .insert_net_server(network.server_transport()?);
//! let mut client = App::new();
//! client
//!     .add_plugins(NetClientPlugin::default().with_clock(NetClock::fixed_hz(64)))
//!     .insert_net_client(network.client_transport(1)?);
//! client
//!     .world_mut()
//!     .resource_mut::<RenetClient>()
//!     .send_msg(&ClientMessage::Hello(Hello::new(Protocols::SESSION, "ada")))?;
//! for _ in 0..3 {
//!     server.update();
//!     client.update();
//! }
//! let mut stats = DecodeStats::default();
//! let received = server.world_mut().resource_mut::<RenetServer>().receive_msgs(&mut stats);
//! assert!(matches!(received[0].message, Ok(ClientMessage::Hello(_))));
//! # Ok::<(), simsync_net::NetError>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod channels;
pub mod clock;
pub mod codec;
pub mod conditioner;
mod error;
mod io;
pub mod memory;
pub mod messages;
pub mod ownership_proto;
pub mod plugin;
pub mod session_proto;
pub mod transport;
pub mod udp;

pub use channels::{NetChannel, connection_config};
pub use clock::{
    ClockAdjustment, LeadControl, RttEstimator, estimated_server_tick, input_delay_ticks,
    millis_u32, speed_factor, target_lead_ticks,
};
pub use codec::{DecodeStats, MAX_MESSAGE_BYTES, decode, decode_counted, encode};
pub use conditioner::{LinkConditioner, LinkConditionerConfig, LinkStats};
pub use error::NetError;
pub use io::{ClientNetExt, FromClient, FromServer, ServerNetExt};
pub use memory::{Direction, MemoryClientTransport, MemoryNetwork, MemoryServerTransport};
pub use messages::{
    ClientMessage, Hello, PROTOCOL_VERSION, ParticipantId, Protocols, RejectReason, ServerMessage,
    Welcome, check_hello, decode_client_message, decode_server_message,
};
pub use ownership_proto::{
    BodyId, OwnerRecord, OwnershipClientMessage, OwnershipServerMessage, PackedBodyState,
    PackedRotation, RefusalReason,
};
pub use plugin::{
    NetAppExt, NetClientPlugin, NetClock, NetServerPlugin, NetTransportError, client_ready,
    server_ready,
};
pub use session_proto::{InputSet, SessionClientMessage, SessionServerMessage};
pub use transport::{ClientTransport, ServerTransport};
pub use udp::{
    NETCODE_PROTOCOL_ID, UdpAuth, UdpClientTransport, UdpServerConfig, UdpServerTransport,
    generate_connect_token, generate_private_key,
};

/// The crates this one builds on, re-exported so users need no extra dependencies (and get the
/// same versions).
pub use {bevy_renet, renet, renet_netcode};

/// The types most users need: `use simsync_net::prelude::*;`.
pub mod prelude {
    pub use crate::{
        BodyId, ClientMessage, ClientNetExt, ClientTransport, DecodeStats, Hello, InputSet,
        MemoryNetwork, NetAppExt, NetChannel, NetClientPlugin, NetClock, NetError, NetServerPlugin,
        OwnershipClientMessage, OwnershipServerMessage, PackedBodyState, ParticipantId, Protocols,
        RttEstimator, ServerMessage, ServerNetExt, ServerTransport, SessionClientMessage,
        SessionServerMessage, Welcome,
    };
    pub use bevy_renet::{RenetClient, RenetReceive, RenetSend, RenetServer};
    pub use renet::ClientId;
}
