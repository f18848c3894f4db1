//! [`BodyMap`]: a map from [`BodyId`] to a value that looks a body up by indexing a `Vec`
//! with its id, for the tables the relay reads once per body state and receiver (the entity
//! server's per-body tables, each receiver's records, the delta baselines).
//!
//! Body ids are chosen by the game and are usually small and dense (a scene numbers its
//! bodies from 1), so the id itself is the index: no hashing on the relay's path. Ids too large
//! for the dense part are kept in a hash map beside it, so a scene with sparse or huge ids
//! works the same, only slower.
//!
//! # Memory bound
//! The dense part covers ids `0..len` and grows to take an id only while that keeps it at most
//! [`DENSE_MIN`] entries or twice the values held plus two (counting the new one): its length
//! is at most `max(DENSE_MIN, 2 × (the most values ever held + 1))`, whatever ids are
//! inserted. Entries are `Option<T>`.

use bevy::platform::collections::HashMap;

use crate::priority::BodyId;

/// Length the dense part may always grow to.
pub(crate) const DENSE_MIN: usize = 256;

/// A map from [`BodyId`] to `T`: ids below the dense part's length index a `Vec`, the others
/// a hash map ([module docs](self)).
#[derive(Debug, Clone)]
pub(crate) struct BodyMap<T> {
    dense: Vec<Option<T>>,
    sparse: HashMap<BodyId, T>,
    len: usize,
}

impl<T> Default for BodyMap<T> {
    fn default() -> Self {
        Self {
            dense: Vec::new(),
            sparse: HashMap::default(),
            len: 0,
        }
    }
}

impl<T> BodyMap<T> {
    /// `body`'s index in the dense part, if it lies there.
    fn dense_index(&self, body: BodyId) -> Option<usize> {
        usize::try_from(body.0)
            .ok()
            .filter(|&i| i < self.dense.len())
    }

    /// `body`'s value.
    pub(crate) fn get(&self, body: BodyId) -> Option<&T> {
        match self.dense_index(body) {
            Some(i) => self.dense[i].as_ref(),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get(&body),
        }
    }

    /// `body`'s value, to change.
    pub(crate) fn get_mut(&mut self, body: BodyId) -> Option<&mut T> {
        match self.dense_index(body) {
            Some(i) => self.dense[i].as_mut(),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get_mut(&body),
        }
    }

    /// Whether `body` has a value.
    pub(crate) fn contains_key(&self, body: BodyId) -> bool {
        self.get(body).is_some()
    }

    /// Values held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether no value is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Grows the dense part to take `body` if the [memory bound](self) allows; moves the
    /// sparse values it then covers into it.
    fn grow_for(&mut self, body: BodyId) {
        let Ok(i) = usize::try_from(body.0) else {
            return;
        };
        if i < self.dense.len() || i >= DENSE_MIN.max(2 * (self.len + 1)) {
            return;
        }
        let new_len = (i + 1)
            .max(self.dense.len() * 2)
            .min(DENSE_MIN.max(2 * (self.len + 1)));
        self.dense.resize_with(new_len, || None);
        if self.sparse.is_empty() {
            return;
        }
        let covered: Vec<BodyId> = self
            .sparse
            .keys()
            .copied()
            .filter(|b| usize::try_from(b.0).is_ok_and(|j| j < new_len))
            .collect();
        for b in covered {
            if let Some(value) = self.sparse.remove(&b) {
                self.dense[b.0 as usize] = Some(value);
            }
        }
    }

    /// Sets `body`'s value; returns the one it replaces.
    pub(crate) fn insert(&mut self, body: BodyId, value: T) -> Option<T> {
        self.grow_for(body);
        let old = match self.dense_index(body) {
            Some(i) => self.dense[i].replace(value),
            None => self.sparse.insert(body, value),
        };
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// `body`'s value, made by `make` if it has none.
    pub(crate) fn get_or_insert_with(&mut self, body: BodyId, make: impl FnOnce() -> T) -> &mut T {
        if !self.contains_key(body) {
            self.insert(body, make());
        }
        self.get_mut(body).expect("inserted just above")
    }

    /// Removes `body`'s value and returns it.
    pub(crate) fn remove(&mut self, body: BodyId) -> Option<T> {
        let old = match self.dense_index(body) {
            Some(i) => self.dense[i].take(),
            None => self.sparse.remove(&body),
        };
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// Removes every value (keeps the memory).
    pub(crate) fn clear(&mut self) {
        if self.len > 0 {
            self.dense.iter_mut().for_each(|v| *v = None);
            self.sparse.clear();
            self.len = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_ids_live_in_the_dense_part_and_behave_as_a_map() {
        let mut map = BodyMap::default();
        assert_eq!(map.insert(BodyId(3), "a"), None);
        assert_eq!(map.insert(BodyId(0), "b"), None);
        assert_eq!(map.insert(BodyId(3), "c"), Some("a"));
        assert_eq!(map.len(), 2);
        assert!(map.sparse.is_empty());
        assert_eq!(map.get(BodyId(3)), Some(&"c"));
        assert_eq!(map.get(BodyId(1)), None);
        assert_eq!(map.get(BodyId(1 << 40)), None);
        *map.get_mut(BodyId(0)).unwrap() = "d";
        assert_eq!(map.remove(BodyId(0)), Some("d"));
        assert_eq!(map.remove(BodyId(0)), None);
        assert_eq!(map.len(), 1);
        assert!(!map.contains_key(BodyId(0)));
        map.clear();
        assert!(map.is_empty());
        assert_eq!(map.get(BodyId(3)), None);
    }

    #[test]
    fn huge_or_sparse_ids_go_to_the_hash_map_and_the_dense_part_stays_bounded() {
        let mut map = BodyMap::default();
        // One value per 100,000 ids: the dense part may not cover them.
        for k in 0..100u64 {
            map.insert(BodyId(k * 100_000 + 7), k);
        }
        map.insert(BodyId(u64::MAX), 1_000);
        assert_eq!(map.len(), 101);
        assert!(map.dense.len() <= DENSE_MIN, "{}", map.dense.len());
        for k in 0..100u64 {
            assert_eq!(map.get(BodyId(k * 100_000 + 7)), Some(&k));
        }
        assert_eq!(map.get(BodyId(u64::MAX)), Some(&1_000));
        assert_eq!(map.remove(BodyId(u64::MAX)), Some(1_000));
        assert_eq!(map.len(), 100);
    }

    #[test]
    fn growing_the_dense_part_moves_the_values_it_covers_out_of_the_hash_map() {
        let mut map = BodyMap::default();
        let far = BodyId(DENSE_MIN as u64 + 10);
        map.insert(far, 1);
        assert_eq!(map.sparse.len(), 1);
        // Ids past DENSE_MIN once twice the values held cover them: the dense part grows
        // past `far`'s id.
        for id in 0..=(DENSE_MIN as u64 + 4) {
            map.insert(BodyId(id), 0);
        }
        assert!(map.dense.len() > far.0 as usize);
        assert!(map.sparse.is_empty());
        assert_eq!(map.get(far), Some(&1));
        assert_eq!(map.len(), DENSE_MIN + 6);
        *map.get_or_insert_with(far, || 5) += 1;
        assert_eq!(map.get(far), Some(&2));
        assert_eq!(*map.get_or_insert_with(BodyId(1 << 50), || 5), 5);
    }
}
