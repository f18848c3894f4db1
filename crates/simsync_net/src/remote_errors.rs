//! Transport errors caused by remote peers, counted and logged at most once per second per kind
//! ([wire rule 11](crate::rules)): [`RemoteErrorKind`], [`RemoteErrors`], and
//! [`screen_datagram`] and [`open_connect_token`], the checks a UDP server runs on every
//! datagram before netcode sees it.

use std::net::SocketAddr;
use std::time::Duration;

use bevy::reflect::Reflect;

/// The target of the throttled log lines: a log filter can hide them by it (the sandbox does
/// with `--quiet`).
pub const REMOTE_ERROR_LOG_TARGET: &str = "simsync_net::remote_errors";

/// The least time between two log lines of one kind ([wire rule 11](crate::rules)): one second.
pub const REMOTE_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// netcode's packet types (the low four bits of a packet's first byte) are 0 to 6.
const NETCODE_PACKET_TYPES: u8 = 7;
/// Bytes of a netcode connection request: prefix, version (13), protocol id (8), expiry (8),
/// nonce (24) and the encrypted private token (1,024).
pub const NETCODE_CONNECTION_REQUEST_BYTES: usize = 1 + 13 + 8 + 8 + 24 + 1_024;
/// netcode's smallest packet: prefix, one sequence byte and the 16-byte MAC.
const NETCODE_MIN_PACKET_BYTES: usize = 2 + 16;
/// The version string every netcode 1.02 connection request starts with.
const NETCODE_VERSION_INFO: &[u8; 13] = b"NETCODE 1.02\0";

/// A kind of transport error a remote peer causes ([wire rule 11](crate::rules)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Reflect)]
pub enum RemoteErrorKind {
    /// A datagram shorter than any netcode packet (18 bytes).
    TooSmall,
    /// A datagram that is no netcode packet: an unknown packet type, or a connection request
    /// of the wrong size or netcode version.
    Malformed,
    /// A connection request for another protocol id (another game or build).
    WrongProtocol,
    /// A connection request whose token has expired.
    ExpiredToken,
    /// A connection request whose token the server's key does not open: forged, damaged, or
    /// sealed for another server.
    BadToken,
    /// A packet other than a connection request from an address that is neither connected
    /// nor connecting (garbage, or a client the server has already dropped).
    UnknownSender,
    /// A connected client's payload that renet refused.
    BadPayload,
    /// A datagram to a peer that the socket could not send (the peer's address is gone).
    SendFailed,
    /// A connection request whose token was used before from another address: a copied
    /// token (netcode lets a token connect from one address only).
    ReplayedToken,
    /// A connection request whose token (opened with the server's key) does not name the
    /// server's public address: minted for another address of this server (a public address
    /// set wrong on the server or in the matchmaker) or for another server sharing the key.
    WrongServerAddress,
}

impl RemoteErrorKind {
    /// Every kind, in order.
    pub const ALL: [RemoteErrorKind; 10] = [
        Self::TooSmall,
        Self::Malformed,
        Self::WrongProtocol,
        Self::ExpiredToken,
        Self::BadToken,
        Self::UnknownSender,
        Self::BadPayload,
        Self::SendFailed,
        Self::ReplayedToken,
        Self::WrongServerAddress,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// A log line [`RemoteErrors`] allows: `count` errors of `kind` since the kind's last line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottledLine {
    /// The kind.
    pub kind: RemoteErrorKind,
    /// Errors of that kind since its last line (≥ 1).
    pub count: u64,
}

/// Errors caused by remote peers: counted per kind, and a log line allowed at most once per
/// [`REMOTE_ERROR_LOG_INTERVAL`] per kind, carrying the count since the kind's last line
/// ([wire rule 11](crate::rules)). Plain state on a caller-given clock (time since any fixed
/// start).
///
/// The first error of a kind is logged at once; later ones within the interval are only
/// counted, and [`flush`](Self::flush) (called every update) lets their count out once the
/// interval has passed. So a flood of any size makes at most one line per kind per second.
#[derive(Debug, Clone, Default, PartialEq, Eq, Reflect)]
pub struct RemoteErrors {
    counts: [u64; KINDS],
    unlogged: [u64; KINDS],
    last_logged: [Option<Duration>; KINDS],
    lines: u64,
}

/// How many [`RemoteErrorKind`]s there are.
const KINDS: usize = RemoteErrorKind::ALL.len();

impl RemoteErrors {
    /// Counts one error of `kind` at time `now`; returns the line to log, if one is due.
    pub fn record(&mut self, kind: RemoteErrorKind, now: Duration) -> Option<ThrottledLine> {
        let i = kind.index();
        self.counts[i] += 1;
        self.unlogged[i] += 1;
        self.line_due(i, now)
    }

    /// The lines due at time `now` for errors counted but not logged yet.
    pub fn flush(&mut self, now: Duration) -> Vec<ThrottledLine> {
        (0..self.counts.len())
            .filter_map(|i| self.line_due(i, now))
            .collect()
    }

    fn line_due(&mut self, i: usize, now: Duration) -> Option<ThrottledLine> {
        let due = self.unlogged[i] > 0
            && self.last_logged[i]
                .is_none_or(|last| now.saturating_sub(last) >= REMOTE_ERROR_LOG_INTERVAL);
        if !due {
            return None;
        }
        self.last_logged[i] = Some(now);
        self.lines += 1;
        let count = std::mem::take(&mut self.unlogged[i]);
        Some(ThrottledLine {
            kind: RemoteErrorKind::ALL[i],
            count,
        })
    }

    /// Errors of `kind` so far.
    pub fn count(&self, kind: RemoteErrorKind) -> u64 {
        self.counts[kind.index()]
    }

    /// Log lines allowed so far (every kind).
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Errors of every kind so far.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Logs `line` at WARN under [`REMOTE_ERROR_LOG_TARGET`], with its count.
pub(crate) fn log_line(line: ThrottledLine) {
    bevy::log::warn!(
        target: "simsync_net::remote_errors",
        "transport: {} {:?} error(s) caused by remote peers (logged at most once a second)",
        line.count,
        line.kind
    );
}

/// Whether netcode can take `datagram`, which came from an address that is `known` (a
/// connected or connecting client) or not, for a server of `protocol_id` whose clock reads
/// `now_secs` (Unix seconds) ([wire rule 11](crate::rules)). Only what netcode would refuse
/// anyway is refused: from a known address anything of netcode's size and types (netcode
/// decrypts and checks it); from an unknown one only a connection request of the right size,
/// version and protocol id whose token has not expired.
///
/// # Errors
///
/// The [`RemoteErrorKind`] of the refusal.
pub fn screen_datagram(
    datagram: &[u8],
    known: bool,
    protocol_id: u64,
    now_secs: u64,
) -> Result<(), RemoteErrorKind> {
    if datagram.len() < NETCODE_MIN_PACKET_BYTES {
        return Err(RemoteErrorKind::TooSmall);
    }
    let packet_type = datagram[0] & 0x0F;
    if packet_type >= NETCODE_PACKET_TYPES {
        return Err(RemoteErrorKind::Malformed);
    }
    if packet_type != 0 {
        return if known {
            Ok(())
        } else {
            Err(RemoteErrorKind::UnknownSender)
        };
    }
    if datagram.len() < NETCODE_CONNECTION_REQUEST_BYTES
        || datagram[1..14] != NETCODE_VERSION_INFO[..]
    {
        return Err(RemoteErrorKind::Malformed);
    }
    let word = |at: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&datagram[at..at + 8]);
        u64::from_le_bytes(bytes)
    };
    if word(14) != protocol_id {
        return Err(RemoteErrorKind::WrongProtocol);
    }
    if now_secs >= word(22) {
        return Err(RemoteErrorKind::ExpiredToken);
    }
    Ok(())
}

/// Bytes of a connect token's sealed private part (the MAC included).
const NETCODE_PRIVATE_TOKEN_BYTES: usize = 1_024;
/// Bytes of the MAC that ends the sealed private part.
const NETCODE_MAC_BYTES: usize = 16;

/// Whether the private connect token of `request`, a connection request that passed
/// [`screen_datagram`], opens with `key` (the server's private key; all zeros for an unsecure
/// server, as netcode uses) for `protocol_id` ([wire rule 11](crate::rules)). netcode seals it
/// with XChaCha20-Poly1305 over the version, protocol id and expiry; this opens a copy the same
/// way (with the `chacha20poly1305` crate, as renetcode does), so a request netcode would refuse
/// for its token never reaches netcode, which would log an error for each one. It does not
/// read what the token says (client id, server addresses): netcode does.
///
/// # Errors
///
/// [`RemoteErrorKind::Malformed`] for a datagram of the wrong size, [`RemoteErrorKind::BadToken`]
/// when the token does not open.
pub fn open_connect_token(
    request: &[u8],
    protocol_id: u64,
    key: &[u8; 32],
) -> Result<(), RemoteErrorKind> {
    open_sealed(request, protocol_id, key).map(|_| ())
}

/// [`open_connect_token`], then the server addresses the opened token names (1 to 32).
///
/// # Errors
///
/// As [`open_connect_token`], and [`RemoteErrorKind::Malformed`] when the opened token's
/// address list does not read ([`token_server_addresses`]).
pub fn open_connect_token_addresses(
    request: &[u8],
    protocol_id: u64,
    key: &[u8; 32],
) -> Result<Vec<SocketAddr>, RemoteErrorKind> {
    token_server_addresses(&open_sealed(request, protocol_id, key)?)
}

/// The private connect token of `request`, opened with `key` ([`open_connect_token`]).
fn open_sealed(
    request: &[u8],
    protocol_id: u64,
    key: &[u8; 32],
) -> Result<Vec<u8>, RemoteErrorKind> {
    use chacha20poly1305::{AeadInPlace, Key, KeyInit, Tag, XChaCha20Poly1305, XNonce};
    if request.len() != NETCODE_CONNECTION_REQUEST_BYTES {
        return Err(RemoteErrorKind::Malformed);
    }
    let mut aad = [0u8; 13 + 8 + 8];
    aad[..13].copy_from_slice(NETCODE_VERSION_INFO);
    aad[13..21].copy_from_slice(&protocol_id.to_le_bytes());
    aad[21..29].copy_from_slice(&request[22..30]);
    let nonce = XNonce::from_slice(&request[30..54]);
    let mut sealed = [0u8; NETCODE_PRIVATE_TOKEN_BYTES];
    sealed.copy_from_slice(&request[54..]);
    let (data, tag) = sealed.split_at_mut(NETCODE_PRIVATE_TOKEN_BYTES - NETCODE_MAC_BYTES);
    let tag = Tag::clone_from_slice(tag);
    XChaCha20Poly1305::new(Key::from_slice(key))
        .decrypt_in_place_detached(nonce, &aad, data, &tag)
        .map_err(|_| RemoteErrorKind::BadToken)?;
    Ok(data.to_vec())
}

/// The server addresses in an opened private connect token, as netcode lays it out: client
/// id (8 bytes), timeout (4), the number of addresses (4, at most 32), then each address as a
/// type byte (1: IPv4 and 4 bytes, 2: IPv6 and 16 bytes) and its port (2, little-endian).
///
/// # Errors
///
/// [`RemoteErrorKind::Malformed`] for a list that is empty, longer than 32, of an unknown
/// address type, or cut short.
pub fn token_server_addresses(private: &[u8]) -> Result<Vec<SocketAddr>, RemoteErrorKind> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let bad = RemoteErrorKind::Malformed;
    let mut at = 12;
    let mut take = move |n: usize| {
        let bytes = private.get(at..at + n).ok_or(bad)?;
        at += n;
        Ok::<&[u8], RemoteErrorKind>(bytes)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad)?) as usize;
    if count == 0 || count > 32 {
        return Err(bad);
    }
    let mut addresses = Vec::with_capacity(count);
    for _ in 0..count {
        let ip = match take(1)?[0] {
            1 => IpAddr::V4(Ipv4Addr::from(
                <[u8; 4]>::try_from(take(4)?).map_err(|_| bad)?,
            )),
            2 => IpAddr::V6(Ipv6Addr::from(
                <[u8; 16]>::try_from(take(16)?).map_err(|_| bad)?,
            )),
            _ => return Err(bad),
        };
        let port = u16::from_le_bytes(take(2)?.try_into().map_err(|_| bad)?);
        addresses.push(SocketAddr::new(ip, port));
    }
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_flood_makes_one_line_at_once_and_one_per_second_after() {
        let mut errors = RemoteErrors::default();
        let kind = RemoteErrorKind::UnknownSender;
        let lines: Vec<_> = (0..2_000)
            .filter_map(|_| errors.record(kind, secs(10)))
            .collect();
        assert_eq!(lines, [ThrottledLine { kind, count: 1 }]);
        assert_eq!(errors.count(kind), 2_000);
        // Within the second: nothing more; once it has passed, the rest in one line.
        assert!(
            errors
                .flush(secs(10) + Duration::from_millis(999))
                .is_empty()
        );
        assert_eq!(
            errors.flush(secs(11)),
            [ThrottledLine { kind, count: 1_999 }]
        );
        assert!(errors.flush(secs(30)).is_empty());
        assert_eq!((errors.total(), errors.lines()), (2_000, 2));
    }

    #[test]
    fn each_kind_is_throttled_on_its_own() {
        let mut errors = RemoteErrors::default();
        assert!(errors.record(RemoteErrorKind::TooSmall, secs(1)).is_some());
        assert!(errors.record(RemoteErrorKind::Malformed, secs(1)).is_some());
        assert!(errors.record(RemoteErrorKind::TooSmall, secs(1)).is_none());
        // A second later the next error of a kind is logged at once, with the one held back.
        assert_eq!(
            errors.record(RemoteErrorKind::TooSmall, secs(2)),
            Some(ThrottledLine {
                kind: RemoteErrorKind::TooSmall,
                count: 2
            })
        );
        assert_eq!(errors.count(RemoteErrorKind::TooSmall), 3);
        assert_eq!(errors.count(RemoteErrorKind::SendFailed), 0);
        // A clock going backwards logs nothing early.
        assert!(errors.record(RemoteErrorKind::TooSmall, secs(0)).is_none());
    }

    fn request(protocol_id: u64, expire: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; NETCODE_CONNECTION_REQUEST_BYTES];
        bytes[1..14].copy_from_slice(NETCODE_VERSION_INFO);
        bytes[14..22].copy_from_slice(&protocol_id.to_le_bytes());
        bytes[22..30].copy_from_slice(&expire.to_le_bytes());
        bytes
    }

    #[test]
    fn only_what_netcode_would_refuse_is_screened_out() {
        use RemoteErrorKind::*;
        let payload = |len| {
            let mut bytes = vec![0xAB; len];
            bytes[0] = 0x15; // payload (5), one sequence byte
            bytes
        };
        assert_eq!(screen_datagram(&[0x15; 17], true, 7, 100), Err(TooSmall));
        assert_eq!(screen_datagram(&payload(40), true, 7, 100), Ok(()));
        assert_eq!(
            screen_datagram(&payload(40), false, 7, 100),
            Err(UnknownSender)
        );
        assert_eq!(screen_datagram(&[0x0F; 40], true, 7, 100), Err(Malformed));
        assert_eq!(screen_datagram(&request(7, 200), false, 7, 100), Ok(()));
        assert_eq!(screen_datagram(&request(7, 200), true, 7, 100), Ok(()));
        assert_eq!(
            screen_datagram(&request(7, 200)[..500], false, 7, 100),
            Err(Malformed)
        );
        let mut old = request(7, 200);
        old[1] = b'X';
        assert_eq!(screen_datagram(&old, false, 7, 100), Err(Malformed));
        assert_eq!(
            screen_datagram(&request(8, 200), false, 7, 100),
            Err(WrongProtocol)
        );
        assert_eq!(
            screen_datagram(&request(7, 100), false, 7, 100),
            Err(ExpiredToken)
        );
    }

    /// A connection request carrying a token sealed as netcode seals it: `data` with `key`.
    fn sealed_request(protocol_id: u64, expire: u64, key: &[u8; 32], data: u8) -> Vec<u8> {
        use chacha20poly1305::{AeadInPlace, Key, KeyInit, XChaCha20Poly1305, XNonce};
        let mut bytes = request(protocol_id, expire);
        bytes[30..54].copy_from_slice(&[9u8; 24]);
        let mut aad = [0u8; 29];
        aad[..13].copy_from_slice(NETCODE_VERSION_INFO);
        aad[13..21].copy_from_slice(&protocol_id.to_le_bytes());
        aad[21..29].copy_from_slice(&expire.to_le_bytes());
        let mut plain = vec![data; NETCODE_PRIVATE_TOKEN_BYTES - NETCODE_MAC_BYTES];
        let tag = XChaCha20Poly1305::new(Key::from_slice(key))
            .encrypt_in_place_detached(XNonce::from_slice(&[9u8; 24]), &aad, &mut plain)
            .expect("seals");
        bytes[54..54 + plain.len()].copy_from_slice(&plain);
        bytes[54 + plain.len()..].copy_from_slice(&tag);
        bytes
    }

    #[test]
    fn a_token_opens_only_with_its_key_protocol_and_expiry_untouched() {
        use RemoteErrorKind::*;
        let key = [5u8; 32];
        let good = sealed_request(7, 200, &key, 3);
        assert_eq!(screen_datagram(&good, false, 7, 100), Ok(()));
        assert_eq!(open_connect_token(&good, 7, &key), Ok(()));
        // Another server's key, or an unsecure server's zero key.
        assert_eq!(open_connect_token(&good, 7, &[6u8; 32]), Err(BadToken));
        assert_eq!(open_connect_token(&good, 7, &[0u8; 32]), Err(BadToken));
        // Sealed for another protocol id: the additional data differs.
        assert_eq!(open_connect_token(&good, 8, &key), Err(BadToken));
        // One flipped bit anywhere in the sealed part, the nonce or the expiry.
        for at in [22, 30, 53, 54, 600, NETCODE_CONNECTION_REQUEST_BYTES - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            assert_eq!(
                open_connect_token(&bad, 7, &key),
                Err(BadToken),
                "byte {at}"
            );
        }
        // A request of zeros (what a flood of well-formed requests looks like), wrong sizes.
        assert_eq!(open_connect_token(&request(7, 200), 7, &key), Err(BadToken));
        assert_eq!(open_connect_token(&good[..1_077], 7, &key), Err(Malformed));
        // What a token names is read once opened (the test seals bytes of 3: no address list).
        assert_eq!(open_connect_token_addresses(&good, 7, &key), Err(Malformed));
        // An unsecure server opens tokens sealed with the zero key.
        let unsecure = sealed_request(7, 200, &[0u8; 32], 1);
        assert_eq!(open_connect_token(&unsecure, 7, &[0u8; 32]), Ok(()));
    }

    #[test]
    fn a_token_names_its_server_addresses_as_netcode_wrote_them() {
        let addrs: Vec<SocketAddr> = vec![
            "203.0.113.10:7777".parse().unwrap(),
            "[2001:db8::1]:7000".parse().unwrap(),
        ];
        let token = renetcode::ConnectToken::generate(
            std::time::Duration::from_secs(1_000),
            7,
            300,
            42,
            15,
            addrs.clone(),
            None,
            &[5u8; 32],
        )
        .unwrap();
        // The request a client sends: prefix, version, protocol, expiry, nonce, sealed token.
        let mut request = vec![0u8];
        request.extend_from_slice(&token.version_info);
        request.extend_from_slice(&token.protocol_id.to_le_bytes());
        request.extend_from_slice(&token.expire_timestamp.to_le_bytes());
        request.extend_from_slice(&token.xnonce);
        request.extend_from_slice(&token.private_data);
        assert_eq!(request.len(), NETCODE_CONNECTION_REQUEST_BYTES);
        assert_eq!(
            open_connect_token_addresses(&request, 7, &[5u8; 32]),
            Ok(addrs)
        );
        assert_eq!(
            open_connect_token_addresses(&request, 7, &[6u8; 32]),
            Err(RemoteErrorKind::BadToken)
        );
        // Cut short, an unknown address type, no address.
        let mut private = vec![0u8; 12];
        private.extend_from_slice(&1u32.to_le_bytes());
        assert_eq!(
            token_server_addresses(&private),
            Err(RemoteErrorKind::Malformed)
        );
        private.push(9);
        assert_eq!(
            token_server_addresses(&private),
            Err(RemoteErrorKind::Malformed)
        );
        let mut none = vec![0u8; 12];
        none.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            token_server_addresses(&none),
            Err(RemoteErrorKind::Malformed)
        );
    }
}
