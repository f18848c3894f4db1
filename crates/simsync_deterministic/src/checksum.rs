//! Checksums of simulation state.
//!
//! A checksum is a 64-bit FNV-1a hash over the registered state of a simulation world in a
//! defined order: simulation entities by slot (with their generation), then for each entity
//! every registered component that has a hash function, in registration order, then every
//! registered resource that has one. Floats are hashed by their bits. Hash-map order and raw
//! entity bits are never used, so unrelated non-simulation entities never change a checksum.
//! The hasher is fixed (no random keys): the same build on the same target gives the same
//! checksum in every process.

use std::hash::Hasher;

use bevy::prelude::*;
use bevy_rapier3d::prelude::Velocity;
use serde::{Deserialize, Serialize};

pub use simsync_net::StateHasher;

use crate::tick::Tick;

/// A value that can be part of a checksum. Floats must be hashed by their bits.
///
/// Derive it: `#[derive(SimHash)]` hashes every field in declaration order, with
/// `#[sim_hash(skip)]` to leave one out ([checksums](crate::rules#checksums)).
pub trait SimHash {
    /// Feeds the value into `hasher`.
    fn sim_hash(&self, hasher: &mut StateHasher);
}

macro_rules! sim_hash_via_hash {
    ($($t:ty),*) => {$(
        impl SimHash for $t {
            fn sim_hash(&self, hasher: &mut StateHasher) {
                std::hash::Hash::hash(self, hasher);
            }
        }
    )*};
}
sim_hash_via_hash!(u8, u16, u32, u64, i8, i16, i32, i64, bool, String);

impl SimHash for f32 {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        hasher.write_f32(*self);
    }
}

impl SimHash for Vec3 {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        for v in self.to_array() {
            hasher.write_f32(v);
        }
    }
}

impl SimHash for Quat {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        for v in self.to_array() {
            hasher.write_f32(v);
        }
    }
}

impl SimHash for Transform {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.translation.sim_hash(hasher);
        self.rotation.sim_hash(hasher);
        self.scale.sim_hash(hasher);
    }
}

impl SimHash for Velocity {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.linear.sim_hash(hasher);
        self.angular.sim_hash(hasher);
    }
}

impl SimHash for crate::SimTick {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.0.sim_hash(hasher);
    }
}

impl<T: SimHash> SimHash for Option<T> {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        match self {
            Some(v) => {
                hasher.write_u8(1);
                v.sim_hash(hasher);
            }
            None => hasher.write_u8(0),
        }
    }
}

/// One recorded checksum of a verified tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Reflect)]
pub struct TickChecksum {
    /// The verified tick.
    pub tick: crate::tick::Tick,
    /// The checksum of the verified world after that tick.
    pub checksum: u64,
}

impl std::fmt::Display for TickChecksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tick {}: {:016x}", self.tick, self.checksum)
    }
}

/// A per-component hash breakdown of one verified tick: what a client sends the relay on a
/// desync, and what a dump keeps of the recent verified ticks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct ComponentBreakdown {
    /// The tick.
    pub tick: Tick,
    /// Per registered component type (in registration order): its name and the hash of its
    /// values on every simulation entity (absence included).
    pub components: Vec<(String, u64)>,
    /// Per live simulation entity: its slot and the hash of all its registered components.
    pub slots: Vec<(u32, u64)>,
    /// Per registered resource type: its name and the hash of its value (absence included).
    pub resources: Vec<(String, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_hash_by_bits() {
        let mut a = StateHasher::default();
        0.0f32.sim_hash(&mut a);
        let mut b = StateHasher::default();
        (-0.0f32).sim_hash(&mut b);
        assert_ne!(a.finish(), b.finish());
    }

    #[test]
    fn transform_hash_sees_every_field() {
        let base = Transform::from_xyz(1.0, 2.0, 3.0);
        let hash = |t: &Transform| {
            let mut h = StateHasher::default();
            t.sim_hash(&mut h);
            h.finish()
        };
        let mut moved = base;
        moved.scale.z = 1.5;
        assert_ne!(hash(&base), hash(&moved));
        assert_eq!(hash(&base), hash(&base.clone()));
    }
}
