//! Reconnect tokens: how a player who dropped proves it may take its slot again
//! ([wire rule 9](crate::rules)).
//!
//! A server that seats players gives each one a token in its [`Welcome`](crate::Welcome); a
//! later `Hello` that carries the slot and that token ([`Hello::with_reconnect_token`]) may take
//! the slot again once its player is disconnected. [`ReconnectTokens`] issues and checks them;
//! every seating issues the slot a new token, so a token seats one connection.
//!
//! [`Hello::with_reconnect_token`]: crate::Hello::with_reconnect_token

use std::hash::{BuildHasher, Hasher, RandomState};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::handshake::{ReconnectToken, RejectReason};
use crate::rng::SplitMix64;

/// The reconnect tokens of a server's player slots ([wire rule 9](crate::rules)).
///
/// Tokens are SipHash-2-4 ([`siphash24`]) of the slot and a count of tokens issued, keyed with
/// 128 bits drawn from the seed: a player who sees its own tokens learns nothing of the key, so
/// it cannot compute another slot's. Seed it with [`entropy_seed`] in a real server (the
/// default of the servers that use it) and with a fixed value in tests, which then see the same
/// tokens on every run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconnectTokens {
    key: (u64, u64),
    issued: u64,
    tokens: Vec<Option<u64>>,
}

impl ReconnectTokens {
    /// Tokens for `slots` player slots (none issued yet), keyed from `seed`.
    pub fn new(slots: usize, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        Self {
            key: (rng.next_u64(), rng.next_u64()),
            issued: 0,
            tokens: vec![None; slots],
        }
    }

    /// Draws a new token for `slot`, replacing the one it had (that one no longer seats
    /// anyone). `None` for a slot this table does not have.
    pub fn issue(&mut self, slot: u8) -> Option<u64> {
        let entry = self.tokens.get_mut(usize::from(slot))?;
        self.issued += 1;
        let token = siphash24(self.key, &[u64::from(slot), self.issued]);
        *entry = Some(token);
        Some(token)
    }

    /// The token `slot` holds now, if one was issued.
    pub fn current(&self, slot: u8) -> Option<u64> {
        self.tokens.get(usize::from(slot)).copied().flatten()
    }

    /// Whether `presented` is the token its slot holds now.
    ///
    /// # Errors
    ///
    /// [`RejectReason::BadReconnectToken`] for a slot this table does not have, a slot with no
    /// token issued, or another token.
    pub fn check(&self, presented: ReconnectToken) -> Result<(), RejectReason> {
        match self.current(presented.slot) {
            Some(token) if token == presented.token => Ok(()),
            _ => Err(RejectReason::BadReconnectToken {
                slot: presented.slot,
            }),
        }
    }
}

/// How a client whose connection was lost tries again by itself with its reconnect token
/// ([wire rule 9](crate::rules)): up to `attempts` new connections, the first `first_backoff`
/// after the loss, each later one twice as long after the one before, at most `max_backoff`.
/// [`Default`]: on, 5 attempts, 1 s doubling to at most 8 s (1 + 2 + 4 + 8 + 8 = 23 s of
/// waiting, plus each attempt's own connection timeout). `attempts = 0`: never.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bevy::reflect::Reflect)]
pub struct ReconnectPolicy {
    /// New connections tried after a loss, at most.
    pub attempts: u32,
    /// The wait before the first attempt.
    pub first_backoff: std::time::Duration,
    /// The longest wait between two attempts.
    pub max_backoff: std::time::Duration,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            attempts: 5,
            first_backoff: std::time::Duration::from_secs(1),
            max_backoff: std::time::Duration::from_secs(8),
        }
    }
}

impl ReconnectPolicy {
    /// Never reconnects.
    pub const OFF: Self = Self {
        attempts: 0,
        first_backoff: std::time::Duration::ZERO,
        max_backoff: std::time::Duration::ZERO,
    };

    /// The wait before attempt `attempt` (0 for the first), or `None` once `attempts` are
    /// used up: `first_backoff · 2^attempt`, at most `max_backoff` (saturating).
    pub fn backoff(&self, attempt: u32) -> Option<std::time::Duration> {
        if attempt >= self.attempts {
            return None;
        }
        let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
        Some(
            self.first_backoff
                .saturating_mul(factor)
                .min(self.max_backoff),
        )
    }
}

/// A seed no one outside the process can predict: the wall clock in nanoseconds and the
/// process id, hashed with the standard library's randomly keyed hasher (keys from the
/// operating system's random source).
pub fn entropy_seed() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// SipHash-2-4 (Aumasson and Bernstein, 2012) of `words` (each as 8 little-endian bytes) with
/// the 128-bit `key` (k0, k1): a keyed pseudo-random function, so outputs do not reveal the
/// key.
pub fn siphash24(key: (u64, u64), words: &[u64]) -> u64 {
    let mut v = [
        key.0 ^ 0x736f_6d65_7073_6575,
        key.1 ^ 0x646f_7261_6e64_6f6d,
        key.0 ^ 0x6c79_6765_6e65_7261,
        key.1 ^ 0x7465_6462_7974_6573,
    ];
    let length_byte = ((words.len() * 8) as u64 & 0xff) << 56;
    for &m in words.iter().chain(std::iter::once(&length_byte)) {
        v[3] ^= m;
        sip_round(&mut v);
        sip_round(&mut v);
        v[0] ^= m;
    }
    v[2] ^= 0xff;
    for _ in 0..4 {
        sip_round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of the SipHash paper's test vectors: bytes 00..0f.
    const PAPER_KEY: (u64, u64) = (0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);

    #[test]
    fn siphash_matches_the_reference_vectors() {
        // Appendix A of the SipHash paper / the reference vectors.h: the empty message, and the
        // 8- and 16-byte messages 00 01 02 ...
        assert_eq!(siphash24(PAPER_KEY, &[]), 0x726f_db47_dd0e_0e31);
        assert_eq!(
            siphash24(PAPER_KEY, &[0x0706_0504_0302_0100]),
            0x93f5_f579_9a93_2462
        );
        assert_eq!(
            siphash24(PAPER_KEY, &[0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908]),
            0x3f2a_cc7f_57c2_9bdb
        );
    }

    #[test]
    fn an_issued_token_is_checked_for_its_slot_only() {
        let mut tokens = ReconnectTokens::new(3, 42);
        let one = tokens.issue(1).expect("slot 1");
        assert_eq!(tokens.current(1), Some(one));
        assert_eq!(
            tokens.check(ReconnectToken {
                slot: 1,
                token: one
            }),
            Ok(())
        );
        let bad = |slot| Err(RejectReason::BadReconnectToken { slot });
        assert_eq!(
            tokens.check(ReconnectToken {
                slot: 1,
                token: one ^ 1
            }),
            bad(1)
        );
        // Slot 0 has no token yet, and slot 3 does not exist.
        assert_eq!(
            tokens.check(ReconnectToken {
                slot: 0,
                token: one
            }),
            bad(0)
        );
        assert_eq!(tokens.check(ReconnectToken { slot: 3, token: 0 }), bad(3));
        assert_eq!(tokens.issue(3), None);
        assert_eq!(tokens.check(ReconnectToken { slot: 0, token: 0 }), bad(0));
    }

    #[test]
    fn a_new_token_replaces_the_old_one_and_slots_differ() {
        let mut tokens = ReconnectTokens::new(2, 42);
        let first = tokens.issue(0).expect("slot 0");
        let other = tokens.issue(1).expect("slot 1");
        let second = tokens.issue(0).expect("slot 0");
        assert_ne!(first, second);
        assert_ne!(first, other);
        assert_eq!(
            tokens.check(ReconnectToken {
                slot: 0,
                token: first
            }),
            Err(RejectReason::BadReconnectToken { slot: 0 })
        );
        assert_eq!(
            tokens.check(ReconnectToken {
                slot: 0,
                token: second
            }),
            Ok(())
        );
    }

    #[test]
    fn reconnect_backoff_doubles_up_to_its_cap_and_stops_after_the_attempts() {
        use std::time::Duration;
        let policy = ReconnectPolicy::default();
        let waits: Vec<_> = (0..6).map(|a| policy.backoff(a)).collect();
        let s = |n| Some(Duration::from_secs(n));
        assert_eq!(waits, [s(1), s(2), s(4), s(8), s(8), None]);
        assert_eq!(ReconnectPolicy::OFF.backoff(0), None);
        let huge = ReconnectPolicy {
            attempts: u32::MAX,
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::MAX,
        };
        assert_eq!(
            huge.backoff(40),
            Some(Duration::from_secs(u64::from(u32::MAX)))
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_tokens_and_another_seed_others() {
        let draw = |seed| {
            let mut tokens = ReconnectTokens::new(4, seed);
            (0..4).map(|s| tokens.issue(s)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        // Entropy seeds differ between calls (the hasher's keys and the clock move on).
        assert_ne!(entropy_seed(), entropy_seed());
    }
}
