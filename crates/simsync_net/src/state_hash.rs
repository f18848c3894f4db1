//! [`StateHasher`]: the one fixed 64-bit FNV-1a hasher of the suite — the deterministic
//! session's checksums and the snapshot frame's hashes. No random keys: the same bytes give the
//! same hash in every process and on every peer.

use std::hash::Hasher;

/// FNV-1a, 64 bits: the fixed hasher of checksums and snapshot frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateHasher(u64);

impl Default for StateHasher {
    #[inline]
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl StateHasher {
    /// Hashes a string (its length, then its bytes).
    #[inline]
    pub fn write_str(&mut self, s: &str) {
        self.write_u64(s.len() as u64);
        self.write(s.as_bytes());
    }

    /// Hashes an `f32` by its bits (so `-0.0` and `0.0`, and NaN payloads, differ).
    #[inline]
    pub fn write_f32(&mut self, value: f32) {
        self.write_u32(value.to_bits());
    }

    /// Hashes an `f64` by its bits (so `-0.0` and `0.0`, and NaN payloads, differ).
    #[inline]
    pub fn write_f64(&mut self, value: f64) {
        self.write_u64(value.to_bits());
    }
}

impl Hasher for StateHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_reference_vectors() {
        // Reference values of FNV-1a 64 for "" and "a".
        assert_eq!(StateHasher::default().finish(), 0xcbf2_9ce4_8422_2325);
        let mut h = StateHasher::default();
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
    }
}
