//! Connect tokens for rooms ([tokens](crate::rules#connect-tokens)): what a token's user data
//! says ([`TokenClaims`]: the room and the slot), and [`TokenMinter`], which seals tokens with
//! the server's private key — what a matchmaker calls, and what `simsync-server token` runs.

use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use simsync_net::renet_netcode::{ConnectToken, NETCODE_KEY_BYTES, NETCODE_USER_DATA_BYTES};
use simsync_net::{NETCODE_PROTOCOL_ID, generate_connect_token};

/// A room's id on one server: chosen by whoever creates the room (the admin API, the config
/// file) or given by the server; never reused while the server runs.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    bevy::reflect::Reflect,
)]
#[serde(transparent)]
pub struct RoomId(pub u64);

impl fmt::Display for RoomId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "room {}", self.0)
    }
}

/// What a connect token's user data says: the room the client may enter and its slot there
/// (a player slot of a relay room, a participant seat of an ownership room). Sealed in the
/// token with the server's key, so a client cannot change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TokenClaims {
    /// The room.
    pub room: RoomId,
    /// The slot in it.
    pub slot: u8,
}

/// The first bytes of a room token's user data: `"SSRM"` and the layout version.
const CLAIMS_MAGIC: [u8; 5] = *b"SSRM\x01";

/// Why a token's user data names no room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClaimsError {
    /// The user data does not start with the room layout's magic (a token minted for another
    /// kind of server, or with no user data).
    #[error("the token's user data names no room (minted for another server?)")]
    NotARoomToken,
}

impl TokenClaims {
    /// The 256 bytes of user data that carry these claims: magic (5 bytes), room id (8, little
    /// endian), slot (1), zeros.
    pub fn to_user_data(self) -> [u8; NETCODE_USER_DATA_BYTES] {
        let mut data = [0u8; NETCODE_USER_DATA_BYTES];
        data[..5].copy_from_slice(&CLAIMS_MAGIC);
        data[5..13].copy_from_slice(&self.room.0.to_le_bytes());
        data[13] = self.slot;
        data
    }

    /// The claims of a token's user data.
    ///
    /// # Errors
    ///
    /// [`ClaimsError::NotARoomToken`] when the data does not carry the layout's magic.
    pub fn from_user_data(data: &[u8; NETCODE_USER_DATA_BYTES]) -> Result<Self, ClaimsError> {
        if data[..5] != CLAIMS_MAGIC {
            return Err(ClaimsError::NotARoomToken);
        }
        let mut room = [0u8; 8];
        room.copy_from_slice(&data[5..13]);
        Ok(Self {
            room: RoomId(u64::from_le_bytes(room)),
            slot: data[13],
        })
    }
}

/// Why a token could not be minted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// No server address, or more than netcode's 32.
    #[error("a token needs 1 to 32 server addresses, not {0}")]
    Addresses(usize),
    /// The key is not 64 hexadecimal digits (32 bytes).
    #[error("the private key must be 64 hexadecimal digits (32 bytes)")]
    BadKey,
    /// netcode refused to seal the token.
    #[error("netcode could not seal the token: {0}")]
    Netcode(String),
}

/// Mints connect tokens for a server's rooms with its private key (the matchmaker's side of
/// [tokens](crate::rules#connect-tokens)). The key never leaves the minter and the server.
#[derive(Clone)]
pub struct TokenMinter {
    key: [u8; NETCODE_KEY_BYTES],
    protocol_id: u64,
    servers: Vec<SocketAddr>,
    expire_seconds: u64,
    timeout_seconds: i32,
}

impl fmt::Debug for TokenMinter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenMinter")
            .field("servers", &self.servers)
            .field("expire_seconds", &self.expire_seconds)
            .field("timeout_seconds", &self.timeout_seconds)
            .finish_non_exhaustive()
    }
}

impl TokenMinter {
    /// A minter for the server at `servers` (its public addresses, as clients reach them)
    /// sealing with `key`: tokens expire after 300 s and time a silent connection out after
    /// 15 s, for [`NETCODE_PROTOCOL_ID`].
    ///
    /// # Errors
    ///
    /// [`TokenError::Addresses`] without an address or with more than 32.
    pub fn new(key: [u8; NETCODE_KEY_BYTES], servers: Vec<SocketAddr>) -> Result<Self, TokenError> {
        if servers.is_empty() || servers.len() > 32 {
            return Err(TokenError::Addresses(servers.len()));
        }
        Ok(Self {
            key,
            protocol_id: NETCODE_PROTOCOL_ID,
            servers,
            expire_seconds: simsync_net::DEFAULT_TOKEN_EXPIRE_SECONDS,
            timeout_seconds: simsync_net::DEFAULT_TOKEN_TIMEOUT_SECONDS,
        })
    }

    /// Tokens expire `seconds` after they are minted (a client must connect before).
    pub fn expire_seconds(mut self, seconds: u64) -> Self {
        self.expire_seconds = seconds;
        self
    }

    /// A connection silent for `seconds` is dropped (netcode's timeout, written in the token).
    pub fn timeout_seconds(mut self, seconds: i32) -> Self {
        self.timeout_seconds = seconds;
        self
    }

    /// A token for `client_id` (unique per connection the matchmaker allows; the server's
    /// clients are known by it) to enter `claims.room` in `claims.slot`.
    ///
    /// # Errors
    ///
    /// [`TokenError::Netcode`] when netcode cannot seal it.
    pub fn mint(&self, client_id: u64, claims: TokenClaims) -> Result<ConnectToken, TokenError> {
        generate_connect_token(
            &self.key,
            self.protocol_id,
            client_id,
            self.servers.clone(),
            self.expire_seconds,
            self.timeout_seconds,
            Some(&claims.to_user_data()),
        )
        .map_err(|e| TokenError::Netcode(e.to_string()))
    }

    /// [`Self::mint`], written in netcode's binary form (2,048 bytes; what a client reads with
    /// `ConnectToken::read`).
    ///
    /// # Errors
    ///
    /// As [`Self::mint`].
    pub fn mint_bytes(&self, client_id: u64, claims: TokenClaims) -> Result<Vec<u8>, TokenError> {
        let token = self.mint(client_id, claims)?;
        let mut bytes = Vec::with_capacity(2048);
        token
            .write(&mut bytes)
            .map_err(|e| TokenError::Netcode(e.to_string()))?;
        Ok(bytes)
    }
}

/// A private key from 64 hexadecimal digits (what `simsync-server keygen` prints and the
/// config's `private_key` holds).
///
/// # Errors
///
/// [`TokenError::BadKey`] for anything else.
pub fn parse_key(hex: &str) -> Result<[u8; NETCODE_KEY_BYTES], TokenError> {
    let hex = hex.trim();
    if hex.len() != 2 * NETCODE_KEY_BYTES || !hex.is_ascii() {
        return Err(TokenError::BadKey);
    }
    let mut key = [0u8; NETCODE_KEY_BYTES];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| TokenError::BadKey)?;
    }
    Ok(key)
}

/// A key as 64 lowercase hexadecimal digits.
pub fn key_to_hex(key: &[u8; NETCODE_KEY_BYTES]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_round_trip_through_user_data() {
        let claims = TokenClaims {
            room: RoomId(0x0102_0304_0506_0708),
            slot: 3,
        };
        let data = claims.to_user_data();
        assert_eq!(&data[..4], b"SSRM");
        assert_eq!(TokenClaims::from_user_data(&data), Ok(claims));
    }

    #[test]
    fn user_data_without_the_magic_names_no_room() {
        assert_eq!(
            TokenClaims::from_user_data(&[0; NETCODE_USER_DATA_BYTES]),
            Err(ClaimsError::NotARoomToken)
        );
    }

    #[test]
    fn a_minted_token_carries_its_claims_and_reads_back() {
        let minter = TokenMinter::new([7; 32], vec!["127.0.0.1:5000".parse().unwrap()]).unwrap();
        let claims = TokenClaims {
            room: RoomId(9),
            slot: 1,
        };
        let bytes = minter.mint_bytes(42, claims).unwrap();
        let token = ConnectToken::read(&mut bytes.as_slice()).unwrap();
        assert_eq!(token.client_id, 42);
        assert_eq!(
            token.server_addresses[0],
            Some("127.0.0.1:5000".parse().unwrap())
        );
    }

    #[test]
    fn a_minter_needs_one_to_32_addresses() {
        assert_eq!(
            TokenMinter::new([0; 32], vec![]).unwrap_err(),
            TokenError::Addresses(0)
        );
        let many = vec!["127.0.0.1:1".parse().unwrap(); 33];
        assert_eq!(
            TokenMinter::new([0; 32], many).unwrap_err(),
            TokenError::Addresses(33)
        );
    }

    #[test]
    fn keys_parse_from_64_hex_digits_only() {
        let key = [0xab; 32];
        assert_eq!(parse_key(&key_to_hex(&key)), Ok(key));
        assert_eq!(parse_key("abcd"), Err(TokenError::BadKey));
        assert_eq!(parse_key(&"zz".repeat(32)), Err(TokenError::BadKey));
    }
}
