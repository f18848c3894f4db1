//! The simsync wire: what the networked deterministic session and the ownership plugin send, how
//! it is encoded and how it travels — over renet 2, in memory or over UDP ([wire rules](rules)).
//!
//! - **Messages**: [`ClientMessage`] / [`ServerMessage`], one enum per direction, nesting the
//!   session ([`SessionClientMessage`]...) and ownership ([`OwnershipClientMessage`]...) ones;
//!   the session's shared types: [`Tick`], [`PlayerIndex`], the input bounds [`SimInput`], the
//!   relay's [`DesyncReport`]; every session message names its match ([`MatchMessage`],
//!   [`MatchId`], [`match_drop`]).
//! - **Snapshots**: the container of an encoded snapshot ([`SnapshotFrame`]: frame,
//!   [`SnapshotHeader`], body; [`SnapshotError`]) and its transfer in chunks
//!   ([`SnapshotChunk`], [`SnapshotAssembly`]).
//! - **Handshake**: [`Hello`] → [`Welcome`] or `Rejected`, by [`ServerHandshake`] and
//!   [`ClientHandshake`], checking the session config ([`InputFingerprint`]).
//! - **Codec**: [`encode`], [`decode`] (bincode 2, 64 KiB per message and per allocation, typed
//!   [`NetError`], [`DecodeStats`]).
//! - **Channels**: [`NetChannel`], [`connection_config`]; typed I/O by [`ClientNetExt`] and
//!   [`ServerNetExt`].
//! - **Transports**: [`MemoryNetwork`] (seeded [`LinkConditioner`]), UDP ([`UdpServerTransport`]);
//!   [`ServerTransport`] / [`ClientTransport`] driven by [`NetServerPlugin`] / [`NetClientPlugin`].
//! - **Clocks**: [`RttEstimator`], [`input_delay_ticks`], [`LeadControl`], [`TickAccumulator`].
//! - **Rate limits**: [`RateLimiter`] of [`TokenBucket`]s per connection, by [`RateLimit`].
//! - **Remote errors**: counted per kind and logged at most once a second ([`RemoteErrors`]).
//! - **Test networks**: [`testing::PeerNetwork`], a server App and client Apps on one
//!   [`MemoryNetwork`], stepped together, each client's link, pause and life set by its index
//!   (what `RelayPeers` and `OwnershipPeers` stand on).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod ack_repeats;
mod bounded;
mod channels;
mod clock;
mod codec;
mod conditioner;
mod error;
mod handshake;
mod ids;
mod io;
mod matches;
mod memory;
mod messages;
mod netcode_link;
// Its docs still link its own module page, which is private now.
#[allow(rustdoc::private_intra_doc_links)]
mod ownership_proto;
mod plugin;
mod rate;
mod rejoin;
mod remote_errors;
mod rng;
mod session_proto;
mod snapshot_chunks;
mod snapshot_frame;
mod state_hash;
pub mod testing;
mod transport;
mod udp;

/// The wire rules of simsync, in prose: messages, codec, channels, handshake, transports and
/// clocks.
#[doc = include_str!("rules.md")]
pub mod rules {}

pub use ack_repeats::{ACK_REPEAT, AckRepeats};
pub use channels::{
    BYTES_PER_UPDATE, CONTROL_MEMORY_BYTES, CONTROL_RESEND_MS, INPUTS_MEMORY_BYTES, NetChannel,
    SNAPSHOT_MEMORY_BYTES, STATE_MEMORY_BYTES, UNRELIABLE_MESSAGE_BUDGET, connection_config,
};
pub use clock::{
    ClockAdjustment, DEFAULT_INPUT_DELAY_START_MS, LEAD_JITTER_MARGIN, LEAD_SAFETY_TICKS,
    LeadControl, MAX_RTT_SAMPLE_MS, RTT_ALPHA, RTT_BETA, RTT_OUTLIER_DEVIATIONS,
    RTT_OUTLIER_MARGIN_MS, RTT_OUTLIER_REPEATS, RttEstimator, TickAccumulator,
    estimated_server_tick, input_delay_ticks, millis_u32, speed_factor, target_lead_ticks,
};
pub use codec::{
    DecodeStats, FileConfig, MAX_MESSAGE_BYTES, WireConfig, decode, decode_bounded_from_reader,
    decode_counted, decode_with_limit, encode, encode_unlimited, max_decoded_len, wire_config,
};
pub use conditioner::{LinkConditioner, LinkConditionerConfig, LinkStats, MAX_IN_FLIGHT};
pub use error::{ConnectFailure, NetError};
pub use handshake::{
    ClientHandshake, HandshakeStats, Hello, InputFingerprint, JoinStatus, PROTOCOL_VERSION,
    Protocols, ReconnectToken, RejectCounts, RejectReason, ServerHandshake, Welcome, check_hello,
};
pub use ids::ParticipantId;
pub use io::{ClientNetExt, FromClient, FromServer, ServerNetExt};
pub use matches::{
    MAX_MATCH_END_TEXT_BYTES, MatchDrop, MatchDrops, MatchEndReason, MatchId, MatchMessage,
    MatchPhase, match_drop,
};
pub use memory::{Direction, MemoryClientTransport, MemoryNetwork, MemoryServerTransport};
pub use messages::{
    ClientMessage, ServerMessage, decode_client_message, decode_client_message_counted,
    decode_server_message, decode_server_message_counted, peek_handshake_version,
};
// Everything public of the ownership messages (a glob, so the file can change without this list).
pub use ownership_proto::*;
pub use plugin::{
    NetAppExt, NetClientPlugin, NetClock, NetServerPlugin, NetTransportError, client_ready,
    server_ready, single_threaded_schedules, task_pools_without_local_tick,
};
pub use rate::{RateLimit, RateLimiter, TokenBucket};
pub use rejoin::{ReconnectPolicy, ReconnectTokens, entropy_seed, siphash24};
pub use remote_errors::{
    NETCODE_CONNECTION_REQUEST_BYTES, REMOTE_ERROR_LOG_INTERVAL, REMOTE_ERROR_LOG_TARGET,
    RemoteErrorKind, RemoteErrors, ThrottledLine, open_connect_token, open_connect_token_addresses,
    screen_datagram, token_server_addresses,
};
pub use rng::{SplitMix64, derive_seed};
pub use session_proto::{
    DEFAULT_MAX_INPUT_BYTES, DesyncJudge, DesyncReport, InputBytes, InputSet,
    MAX_BREAKDOWN_ENTRIES, MAX_BREAKDOWN_NAME_BYTES, MAX_BREAKDOWN_SLOTS, PlayerIndex,
    SessionClientMessage, SessionServerMessage, SimInput, Tick,
};
pub use snapshot_chunks::{
    AssembledSnapshot, ChunkError, ChunkRejections, DEFAULT_MAX_SNAPSHOT_BYTES,
    SNAPSHOT_CHUNK_BYTES, SnapshotAssembly, SnapshotChunk, split_snapshot,
};
pub use snapshot_frame::{
    DECODE_MEMORY_PER_BYTE, DEFAULT_MAX_DECODED_SNAPSHOT_BYTES, FRAME_BYTES, LZ4_MAX_EXPANSION,
    LZ4_SLACK_BYTES, MAX_SNAPSHOT_HEADER_BYTES, SNAPSHOT_FORMAT_VERSION, SNAPSHOT_MAGIC,
    SnapshotError, SnapshotFrame, SnapshotHeader,
};
pub use state_hash::StateHasher;
pub use transport::{ClientTransport, ServerTransport};
pub use udp::{
    ConnectionSink, DEFAULT_TOKEN_EXPIRE_SECONDS, DEFAULT_TOKEN_TIMEOUT_SECONDS,
    NETCODE_MAX_CLIENTS, NETCODE_PROTOCOL_ID, PacketSent, UdpAuth, UdpClientTransport,
    UdpServerConfig, UdpServerTransport, generate_connect_token, generate_private_key,
    unix_time_now,
};

/// The crates this one builds on, re-exported so users need no extra dependencies (and get the
/// same versions).
pub use {bevy_renet, renet, renet_netcode};

/// The types most users need: `use simsync_net::prelude::*;`.
pub mod prelude {
    pub use crate::{
        BodyId, ClientMessage, ClientNetExt, ClientTransport, DecodeStats, Hello, InputSet,
        MatchId, MemoryNetwork, NetAppExt, NetChannel, NetClientPlugin, NetClock, NetError,
        NetServerPlugin, OwnershipClientMessage, OwnershipServerMessage, PackedBodyState,
        ParticipantId, Protocols, RttEstimator, ServerMessage, ServerNetExt, ServerTransport,
        SessionClientMessage, SessionServerMessage, Welcome,
    };
    pub use bevy_renet::{RenetClient, RenetReceive, RenetSend, RenetServer};
    pub use renet::ClientId;
}
