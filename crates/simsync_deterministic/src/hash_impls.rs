//! More [`SimHash`] implementations, so that `#[derive(SimHash)]` covers the field types a game
//! usually has. Every value is hashed in a width that does not depend on the target (`usize`
//! and `isize` as 64 bits, `char` as its `u32` code point) and floats by their bits
//! ([checksums](crate::rules#checksums)).

use std::hash::Hasher;

use bevy::math::{DVec2, DVec3, IVec2, IVec3, UVec2, UVec3, Vec2, Vec4};

use crate::checksum::{SimHash, StateHasher};

impl SimHash for f64 {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        hasher.write_f64(*self);
    }
}

impl SimHash for usize {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        hasher.write_u64(*self as u64);
    }
}

impl SimHash for isize {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        hasher.write_i64(*self as i64);
    }
}

impl SimHash for u128 {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        hasher.write_u128(*self);
    }
}

impl SimHash for i128 {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        hasher.write_i128(*self);
    }
}

impl SimHash for char {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        hasher.write_u32(u32::from(*self));
    }
}

/// The same bytes as `String`'s `SimHash`.
impl SimHash for str {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        std::hash::Hash::hash(self, hasher);
    }
}

impl SimHash for () {
    fn sim_hash(&self, _hasher: &mut StateHasher) {}
}

impl<T: SimHash + ?Sized> SimHash for &T {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        (**self).sim_hash(hasher);
    }
}

impl<T: SimHash + ?Sized> SimHash for Box<T> {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        (**self).sim_hash(hasher);
    }
}

/// A slice: its length (64 bits), then every element in order.
impl<T: SimHash> SimHash for [T] {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        hasher.write_u64(self.len() as u64);
        for item in self {
            item.sim_hash(hasher);
        }
    }
}

impl<T: SimHash, const N: usize> SimHash for [T; N] {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.as_slice().sim_hash(hasher);
    }
}

impl<T: SimHash> SimHash for Vec<T> {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.as_slice().sim_hash(hasher);
    }
}

/// A deque, front to back, like a slice.
impl<T: SimHash> SimHash for std::collections::VecDeque<T> {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        hasher.write_u64(self.len() as u64);
        for item in self {
            item.sim_hash(hasher);
        }
    }
}

/// An ordered map in key order (hash maps have no defined order and are not hashed).
impl<K: SimHash, V: SimHash> SimHash for std::collections::BTreeMap<K, V> {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        hasher.write_u64(self.len() as u64);
        for (key, value) in self {
            key.sim_hash(hasher);
            value.sim_hash(hasher);
        }
    }
}

macro_rules! sim_hash_tuple {
    ($($name:ident $index:tt),+) => {
        impl<$($name: SimHash),+> SimHash for ($($name,)+) {
            fn sim_hash(&self, hasher: &mut StateHasher) {
                $(self.$index.sim_hash(hasher);)+
            }
        }
    };
}
sim_hash_tuple!(A 0);
sim_hash_tuple!(A 0, B 1);
sim_hash_tuple!(A 0, B 1, C 2);
sim_hash_tuple!(A 0, B 1, C 2, D 3);

macro_rules! sim_hash_vector {
    ($($t:ty),*) => {$(
        impl SimHash for $t {
            fn sim_hash(&self, hasher: &mut StateHasher) {
                for v in self.to_array() {
                    v.sim_hash(hasher);
                }
            }
        }
    )*};
}
sim_hash_vector!(Vec2, Vec4, DVec2, DVec3, IVec2, IVec3, UVec2, UVec3);

#[cfg(test)]
mod tests {
    use super::*;

    fn hash<T: SimHash + ?Sized>(value: &T) -> u64 {
        let mut hasher = StateHasher::default();
        value.sim_hash(&mut hasher);
        hasher.finish()
    }

    #[test]
    fn f64_hashes_by_bits() {
        assert_ne!(hash(&0.0f64), hash(&-0.0f64));
        assert_eq!(hash(&1.5f64), hash(&1.5f64));
        let mut by_hand = StateHasher::default();
        by_hand.write_u64(1.5f64.to_bits());
        assert_eq!(hash(&1.5f64), by_hand.finish());
    }

    #[test]
    fn usize_hashes_as_u64_on_every_target() {
        assert_eq!(hash(&7usize), hash(&7u64));
        assert_eq!(hash(&-7isize), hash(&-7i64));
    }

    #[test]
    fn sequences_hash_their_length_so_moving_an_element_changes_the_hash() {
        let a: (Vec<u8>, Vec<u8>) = (vec![1, 2], vec![3]);
        let b: (Vec<u8>, Vec<u8>) = (vec![1], vec![2, 3]);
        assert_ne!(hash(&a), hash(&b));
        assert_eq!(hash(&[1u8, 2]), hash(&vec![1u8, 2]));
    }

    #[test]
    fn str_and_string_hash_alike() {
        assert_eq!(hash("ball"), hash(&String::from("ball")));
        assert_ne!(hash("ball"), hash("bal"));
    }
}
