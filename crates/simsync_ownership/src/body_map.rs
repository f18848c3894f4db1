//! [`BodyMap`]: a map from [`BodyId`] to a value that looks a body up by indexing a `Vec`
//! with its id, for the tables the relay reads once per body state and receiver (the entity
//! server's per-body tables, each receiver's records, the delta baselines); and [`BodySet`],
//! a set of ids kept as bits and taken in increasing order (each receiver's bodies due).
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
        // The relay's common case, one look-up: a value in the dense part.
        if let Some(i) = self.dense_index(body)
            && self.dense[i].is_some()
        {
            return self.dense[i].as_mut().expect("checked just above");
        }
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

    /// Every value, to change (in no particular order).
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.dense
            .iter_mut()
            .filter_map(Option::as_mut)
            .chain(self.sparse.values_mut())
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

/// Ids a [`BodySet`] keeps as bits: below 2¹⁶ (at most 8 KB of bits).
pub(crate) const SET_DENSE_IDS: u64 = 1 << 16;

/// Larger ids a [`BodySet`] lists before it first deduplicates them (then at each power of
/// two).
const SET_SPARSE_COMPACT: usize = 1 << 16;

/// A set of body ids, taken in increasing order: an id below [`SET_DENSE_IDS`] is one bit, a
/// larger one an entry of a list sorted and deduplicated when taken. What a relay queue keeps
/// of the bodies due: inserting is setting a bit, taking them in order needs no sort.
///
/// Memory: the bits up to the largest id below [`SET_DENSE_IDS`] ever inserted (at most
/// 8 KB), and the list of larger ids: at most `SET_SPARSE_COMPACT` or twice the most distinct
/// ones held at once since it was last taken, whichever is more.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodySet {
    words: Vec<u64>,
    /// The words that may have bits set: `lo..hi` (none when `lo >= hi`).
    lo: usize,
    hi: usize,
    /// Ids from [`SET_DENSE_IDS`] up, unsorted, maybe repeated.
    sparse: Vec<BodyId>,
}

impl BodySet {
    /// The word and bit of `body`, if it is kept as a bit.
    fn bit(body: BodyId) -> Option<(usize, u64)> {
        (body.0 < SET_DENSE_IDS).then(|| ((body.0 / 64) as usize, 1 << (body.0 % 64)))
    }

    /// Adds `body` (already there: nothing changes).
    pub(crate) fn insert(&mut self, body: BodyId) {
        let Some((word, bit)) = Self::bit(body) else {
            self.sparse.push(body);
            let len = self.sparse.len();
            if len >= SET_SPARSE_COMPACT && len.is_power_of_two() {
                self.sparse.sort_unstable();
                self.sparse.dedup();
            }
            return;
        };
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= bit;
        if self.lo >= self.hi {
            (self.lo, self.hi) = (word, word + 1);
        } else {
            self.lo = self.lo.min(word);
            self.hi = self.hi.max(word + 1);
        }
    }

    /// Removes `body`.
    pub(crate) fn remove(&mut self, body: BodyId) {
        match Self::bit(body) {
            Some((word, bit)) => {
                if let Some(w) = self.words.get_mut(word) {
                    *w &= !bit;
                }
            }
            None => self.sparse.retain(|b| *b != body),
        }
    }

    /// Removes `bodies` (any order).
    pub(crate) fn remove_all(&mut self, bodies: &[BodyId]) {
        let mut large: Vec<BodyId> = Vec::new();
        for &body in bodies {
            match Self::bit(body) {
                Some(_) => self.remove(body),
                None => large.push(body),
            }
        }
        if !large.is_empty() {
            large.sort_unstable();
            self.sparse.retain(|b| large.binary_search(b).is_err());
        }
    }

    /// Whether no id is held.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.sparse.is_empty()
            && self.words[self.lo.min(self.hi)..self.hi]
                .iter()
                .all(|w| *w == 0)
    }

    /// Moves every id held onto the end of `out`, in increasing order, each once; the set is
    /// left empty (its memory kept).
    pub(crate) fn take_sorted(&mut self, out: &mut Vec<BodyId>) {
        for word in self.lo..self.hi {
            let mut bits = std::mem::take(&mut self.words[word]);
            while bits != 0 {
                out.push(BodyId(word as u64 * 64 + u64::from(bits.trailing_zeros())));
                bits &= bits - 1;
            }
        }
        (self.lo, self.hi) = (0, 0);
        self.sparse.sort_unstable();
        self.sparse.dedup();
        out.append(&mut self.sparse);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(set: &mut BodySet) -> Vec<u64> {
        let mut out = Vec::new();
        set.take_sorted(&mut out);
        out.into_iter().map(|b| b.0).collect()
    }

    #[test]
    fn a_set_gives_its_ids_in_increasing_order_each_once_and_is_then_empty() {
        let mut set = BodySet::default();
        assert!(set.is_empty());
        for id in [
            200,
            5,
            u64::MAX,
            63,
            64,
            5,
            SET_DENSE_IDS,
            0,
            1 << 40,
            SET_DENSE_IDS - 1,
            1 << 40,
        ] {
            set.insert(BodyId(id));
        }
        assert!(!set.is_empty());
        let expected = vec![
            0,
            5,
            63,
            64,
            200,
            SET_DENSE_IDS - 1,
            SET_DENSE_IDS,
            1 << 40,
            u64::MAX,
        ];
        assert_eq!(taken(&mut set), expected);
        assert!(set.is_empty());
        assert_eq!(taken(&mut set), Vec::<u64>::new());
        // Taken again after new inserts: only those.
        set.insert(BodyId(7));
        set.insert(BodyId(3));
        assert_eq!(taken(&mut set), vec![3, 7]);
    }

    #[test]
    fn removing_from_a_set_drops_exactly_those_ids() {
        let mut set = BodySet::default();
        for id in [1, 2, 3, 70, SET_DENSE_IDS + 1, SET_DENSE_IDS + 2, u64::MAX] {
            set.insert(BodyId(id));
        }
        set.remove(BodyId(2));
        set.remove(BodyId(SET_DENSE_IDS + 1));
        // Ids not held, inside and outside the bits kept: nothing happens.
        set.remove(BodyId(9_000));
        set.remove(BodyId(5));
        set.remove_all(&[BodyId(u64::MAX), BodyId(70), BodyId(1 << 50)]);
        assert_eq!(taken(&mut set), vec![1, 3, SET_DENSE_IDS + 2]);
        set.insert(BodyId(4));
        set.remove(BodyId(4));
        assert!(set.is_empty());
    }

    #[test]
    fn a_set_matches_a_sorted_deduplicated_list_and_its_memory_stays_bounded() {
        let mut set = BodySet::default();
        let mut reference = std::collections::BTreeSet::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for round in 0..50 {
            for _ in 0..500 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Small, near the edge of the bits, and huge ids.
                let id = match x % 4 {
                    0 => x % 300,
                    1 => SET_DENSE_IDS - 50 + x % 100,
                    2 => x >> 3,
                    _ => x % 20,
                };
                set.insert(BodyId(id));
                reference.insert(id);
                if x.is_multiple_of(11) {
                    let gone = (x >> 8) % 300;
                    set.remove(BodyId(gone));
                    reference.remove(&gone);
                }
            }
            if round % 3 == 0 {
                let all: Vec<u64> = std::mem::take(&mut reference).into_iter().collect();
                assert_eq!(taken(&mut set), all, "round {round}");
            }
        }
        assert!(set.words.len() <= (SET_DENSE_IDS / 64) as usize);
        // A flood of one large id is deduplicated as it grows.
        for _ in 0..(3 * SET_SPARSE_COMPACT) {
            set.insert(BodyId(u64::MAX));
        }
        assert!(
            set.sparse.len() <= 2 * SET_SPARSE_COMPACT,
            "{}",
            set.sparse.len()
        );
    }

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
    fn values_mut_reaches_every_value_dense_and_sparse_once() {
        let mut map = BodyMap::default();
        for id in [1, 2, 300, 1 << 40] {
            map.insert(BodyId(id), id);
        }
        for v in map.values_mut() {
            *v += 1;
        }
        for id in [1, 2, 300, 1 << 40] {
            assert_eq!(map.get(BodyId(id)), Some(&(id + 1)));
        }
        assert_eq!(map.values_mut().count(), 4);
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
