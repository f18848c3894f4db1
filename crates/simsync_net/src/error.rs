//! The one error type of this crate.
//!
//! Every fallible operation in `simsync_net` returns [`NetError`]. Nothing in this crate panics
//! on bad input: malformed bytes, bad configuration values and transport failures all come back
//! as one of its variants.

use std::net::SocketAddr;

use renet::ClientId;

/// Everything that can go wrong in the wire layer: encoding and decoding messages, building
/// link conditioners and transports, and moving packets.
///
/// The decode variants ([`Truncated`](Self::Truncated), [`Oversized`](Self::Oversized),
/// [`TrailingBytes`](Self::TrailingBytes), [`Malformed`](Self::Malformed),
/// [`VersionMismatch`](Self::VersionMismatch)) are what [`crate::decode`] returns for bad bytes;
/// [`crate::DecodeStats`] counts them by kind.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A value could not be encoded (a serde `Serialize` impl failed; never happens for this
    /// crate's own message types).
    #[error("failed to encode message: {0}")]
    Encode(String),
    /// An encoded message would be larger than the codec limit
    /// ([`crate::MAX_MESSAGE_BYTES`]), so it was not produced.
    #[error("encoded message is {size} bytes, above the limit of {limit} bytes")]
    MessageTooLarge {
        /// Size the message would have had, in bytes.
        size: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The bytes ended before the message did.
    #[error("message is truncated: bytes ended before the message did")]
    Truncated,
    /// The bytes are longer than the codec limit, or announce a length (of a string or a list)
    /// that would take the decoder past it.
    #[error("message exceeds the size limit of {limit} bytes")]
    Oversized {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A whole message was decoded but bytes were left over after it.
    #[error("{trailing} trailing bytes after a {consumed}-byte message")]
    TrailingBytes {
        /// Bytes the message used.
        consumed: usize,
        /// Bytes left over after it.
        trailing: usize,
    },
    /// The bytes are not a valid encoding of the expected type (bad enum tag, bad varint,
    /// invalid UTF-8, ...). The string is the decoder's description.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The peer speaks another protocol version (seen in its `Hello` or `Welcome`).
    #[error("protocol version mismatch: we speak {ours}, the peer speaks {theirs}")]
    VersionMismatch {
        /// [`crate::PROTOCOL_VERSION`] of this build.
        ours: u16,
        /// The version the peer announced.
        theirs: u16,
    },
    /// A reliable channel has no room for the message; sending it would make renet drop the
    /// connection, so it was not sent.
    #[error("channel {channel} has no room for a {bytes}-byte message")]
    ChannelFull {
        /// Channel id (see [`crate::NetChannel`]).
        channel: u8,
        /// Size of the message that did not fit, in bytes.
        bytes: usize,
    },
    /// The server has no connection with this client id.
    #[error("no connection with client id {0}")]
    UnknownClient(ClientId),
    /// The endpoint is not connected (yet, or any more).
    #[error("not connected")]
    NotConnected,
    /// A link-conditioner setting is out of range (a percentage outside 0..=100 or not finite).
    #[error("invalid link conditioner setting {field} = {value}")]
    InvalidLinkConfig {
        /// Name of the field.
        field: &'static str,
        /// The rejected value.
        value: f64,
    },
    /// Another client of the same in-memory network already uses this id.
    #[error("client id {0} is already in use on this in-memory network")]
    ClientIdInUse(ClientId),
    /// An in-memory network already has a server transport attached.
    #[error("this in-memory network already has a server transport")]
    ServerAlreadyAttached,
    /// A UDP server was asked for more clients than netcode supports.
    #[error("max_clients = {requested} is above netcode's limit of {max}")]
    TooManyClients {
        /// Requested maximum.
        requested: usize,
        /// netcode's limit.
        max: usize,
    },
    /// A connect token is unusable (no server address, expiry before creation, ...).
    #[error("invalid connect token: {0}")]
    InvalidConnectToken(&'static str),
    /// A socket operation failed.
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
    /// netcode (UDP transport protocol) reported an error.
    #[error("netcode error: {0}")]
    Netcode(#[from] renet_netcode::NetcodeError),
    /// The netcode transport reported an error while updating or sending.
    #[error("netcode transport error: {0}")]
    Transport(#[from] renet_netcode::NetcodeTransportError),
    /// Generating a connect token failed.
    #[error("connect token generation failed: {0}")]
    TokenGeneration(#[from] renet_netcode::TokenGenerationError),
    /// A UDP client never connected: what it can tell of why (a server refuses a connection
    /// request without a word).
    #[error("{0}")]
    ConnectFailed(#[from] ConnectFailure),
}

impl NetError {
    /// Whether this error is one that [`crate::decode`] returns for bad bytes (as opposed to an
    /// encode, configuration or transport error).
    pub fn is_decode_error(&self) -> bool {
        matches!(
            self,
            Self::Truncated
                | Self::Oversized { .. }
                | Self::TrailingBytes { .. }
                | Self::Malformed(_)
                | Self::VersionMismatch { .. }
        )
    }
}

/// Why a UDP client never connected, as far as the client can tell: a server ignores a
/// connection request it refuses (an expired, replayed or foreign token) without a word, so
/// the client names the possible causes once netcode gives up
/// ([`UdpClientTransport::connect_failure`](crate::UdpClientTransport::connect_failure)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConnectFailure {
    /// The connect token expired before the connection was made (the client reads the expiry
    /// in the token itself).
    #[error(
        "the connect token expired (at Unix time {expired_at} s) before the server took it: ask for a new token"
    )]
    TokenExpired {
        /// When it expired, in Unix seconds.
        expired_at: u64,
    },
    /// No server of the token answered within the token's timeout.
    #[error(
        "no answer from {server} within {timeout_secs} s: the token may have been used already from another address (the server counts `replayed_token`), be for another server, key or address (`bad_token`, `wrong_server_address`: a server's public address set wrong), or the server is down or unreachable"
    )]
    NoAnswer {
        /// The (first) server address of the token.
        server: SocketAddr,
        /// The token's timeout, in seconds.
        timeout_secs: i32,
    },
}
