//! The allocation bound of the decoder ([wire rule 3](crate::rules)): a serde `Deserializer`
//! wrapper that claims every sequence and map element against [`crate::MAX_MESSAGE_BYTES`] of
//! memory before the collection can grow for it.
//!
//! Why a wrapper: bincode's serde path reports a sequence's announced length as its size hint
//! and serde's collections pre-allocate for up to 1 MiB of elements from that hint, so a few
//! bytes announcing a long list made the decoder allocate 1 MiB before finding out the bytes
//! were missing. The wrapper sits between bincode and every `Deserialize` impl — ours and the
//! game's, decoded through [`crate::decode`] — so it covers types this crate does not know.
//! A pre-pass that claims lengths would need to know each type's layout.
//!
//! What it does, for every sequence and map whose length comes from the bytes:
//!
//! - its size hint is `None`, so a collection starts empty and grows as elements arrive (every
//!   element has to be read from the bytes first);
//! - once element `k` (from 1) is read, and before the visitor stores it, it checks that the
//!   collection's buffer after growing for it stays within the limit: [`seq_bytes`] for a sequence (a `Vec` doubles its capacity,
//!   so `k` rounded up to a power of two, times the element size) and [`map_bytes`] for a map
//!   (a hash table's buckets and control bytes, or a B-tree node). Past the limit the decode
//!   fails ([`crate::NetError::Oversized`]).
//!
//! Tuples, structs, arrays and enum variants have a length fixed by their type and pass through
//! unchecked (their fields are checked when they are collections). Hash sets are sequences on
//! the wire and get the sequence rule, which does not count a hash table's spare buckets: a
//! `HashSet` of more than about 2,000 small elements in a game's input type can take up to
//! about twice the limit.

use std::cell::Cell;
use std::fmt;
use std::mem::{align_of, size_of};

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

/// Bytes of the buffer a `Vec` (or `VecDeque`, boxed slice) needs for `count` elements of
/// `element_bytes` each, counting growth by doubling (`None`: overflow). Zero-sized elements
/// count as one byte, so a list of them is bounded too.
pub(crate) fn seq_bytes(count: usize, element_bytes: usize) -> Option<usize> {
    count
        .checked_next_power_of_two()?
        .checked_mul(element_bytes.max(1))
}

/// Bytes of the largest buffer a map needs for `count` entries of `entry_bytes` each (`None`:
/// overflow): a hash table with up to twice the power of two above `count` buckets (at least 8;
/// its load factor is 7/8 and it doubles), each with one control byte, plus a 16-byte group;
/// this also covers a B-tree node (11 entries and 12 edges).
pub(crate) fn map_bytes(count: usize, entry_bytes: usize) -> Option<usize> {
    let buckets = count.checked_next_power_of_two()?.checked_mul(2)?.max(12);
    buckets
        .checked_mul(entry_bytes.checked_add(16)?)?
        .checked_add(16)
}

/// The limit and whether a decode went past it (read after a failed decode to tell an
/// oversized collection from other errors).
pub(crate) struct Budget {
    limit: usize,
    exceeded: Cell<bool>,
}

impl Budget {
    /// A budget of `limit` bytes per collection buffer.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            exceeded: Cell::new(false),
        }
    }

    /// Whether a collection went past the limit.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.get()
    }

    fn claim<E: de::Error>(&self, bytes: Option<usize>) -> Result<(), E> {
        if bytes.is_some_and(|bytes| bytes <= self.limit) {
            Ok(())
        } else {
            self.exceeded.set(true);
            Err(E::custom(format_args!(
                "a collection would take more than {} bytes of memory",
                self.limit
            )))
        }
    }
}

/// Deserializes a `T` through the bounded wrapper; the `DeserializeSeed` handed to bincode.
pub(crate) struct BoundedSeed<'a, S> {
    pub(crate) seed: S,
    pub(crate) budget: &'a Budget,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for BoundedSeed<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Bounded {
            inner: deserializer,
            budget: self.budget,
        })
    }
}

/// A `Deserializer` that hands every visitor a [`BoundedVisitor`].
struct Bounded<'a, D> {
    inner: D,
    budget: &'a Budget,
}

/// Whether a visitor's sequence has a length read from the bytes (checked) or fixed by the type.
#[derive(Clone, Copy)]
enum Length {
    FromBytes,
    Fixed,
}

/// A `Visitor` that wraps the sequences, maps, enums and nested deserializers it is given.
struct BoundedVisitor<'a, V> {
    inner: V,
    budget: &'a Budget,
    length: Length,
}

macro_rules! forward_deserialize {
    ($($method:ident),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            let visitor = self.visitor(visitor, Length::FromBytes);
            self.inner.$method(visitor)
        }
    )*};
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty)),* $(,)?) => {$(
        fn $method<E: de::Error>(self, value: $ty) -> Result<V::Value, E> {
            self.inner.$method(value)
        }
    )*};
}

impl<'a, D> Bounded<'a, D> {
    fn visitor<V>(&self, inner: V, length: Length) -> BoundedVisitor<'a, V> {
        BoundedVisitor {
            inner,
            budget: self.budget,
            length,
        }
    }
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Bounded<'_, D> {
    type Error = D::Error;

    forward_deserialize!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.visitor(visitor, Length::Fixed);
        self.inner.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.visitor(visitor, Length::Fixed);
        self.inner.deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.visitor(visitor, Length::Fixed);
        self.inner.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.visitor(visitor, Length::Fixed);
        self.inner.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.visitor(visitor, Length::Fixed);
        self.inner.deserialize_struct(name, fields, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = self.visitor(visitor, Length::Fixed);
        self.inner.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for BoundedVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(formatter)
    }

    forward_visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
        visit_str(&str),
        visit_borrowed_str(&'de str),
        visit_string(String),
        visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]),
        visit_byte_buf(Vec<u8>),
    );

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Bounded {
            inner: deserializer,
            budget: self.budget,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Bounded {
            inner: deserializer,
            budget: self.budget,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(BoundedSeq {
            inner: seq,
            budget: self.budget,
            length: self.length,
            count: 0,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(BoundedMap {
            inner: map,
            budget: self.budget,
            count: 0,
            key_bytes: 0,
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(BoundedEnum {
            inner: data,
            budget: self.budget,
        })
    }
}

/// A sequence whose elements are claimed ([`seq_bytes`]) as they are read, before the visitor
/// stores them.
struct BoundedSeq<'a, A> {
    inner: A,
    budget: &'a Budget,
    length: Length,
    count: usize,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for BoundedSeq<'_, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        let seed = BoundedSeed {
            seed,
            budget: self.budget,
        };
        let element = self.inner.next_element_seed(seed)?;
        if element.is_some() {
            self.count = self.count.saturating_add(1);
            if let Length::FromBytes = self.length {
                // Before the visitor stores the element (and its collection grows for it).
                self.budget
                    .claim(seq_bytes(self.count, size_of::<T::Value>()))?;
            }
        }
        Ok(element)
    }

    fn size_hint(&self) -> Option<usize> {
        match self.length {
            Length::FromBytes => None,
            Length::Fixed => self.inner.size_hint(),
        }
    }
}

/// A map whose entries are claimed ([`map_bytes`]) before their values are read (a key is only
/// asked for when an entry follows).
struct BoundedMap<'a, A> {
    inner: A,
    budget: &'a Budget,
    count: usize,
    /// Size of the last key's type, plus its alignment as room for padding.
    key_bytes: usize,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for BoundedMap<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.key_bytes = size_of::<K::Value>() + align_of::<K::Value>();
        let seed = BoundedSeed {
            seed,
            budget: self.budget,
        };
        self.inner.next_key_seed(seed)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.count = self.count.saturating_add(1);
        let entry_bytes = self.key_bytes + size_of::<V::Value>() + align_of::<V::Value>();
        self.budget.claim(map_bytes(self.count, entry_bytes))?;
        self.inner.next_value_seed(BoundedSeed {
            seed,
            budget: self.budget,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        None
    }
}

/// An enum whose variant's content is read through the wrapper.
struct BoundedEnum<'a, A> {
    inner: A,
    budget: &'a Budget,
}

impl<'a, 'de, A: EnumAccess<'de>> EnumAccess<'de> for BoundedEnum<'a, A> {
    type Error = A::Error;
    type Variant = BoundedEnum<'a, A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let seed = BoundedSeed {
            seed,
            budget: self.budget,
        };
        let (value, variant) = self.inner.variant_seed(seed)?;
        let variant = BoundedEnum {
            inner: variant,
            budget: self.budget,
        };
        Ok((value, variant))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for BoundedEnum<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        self.inner.newtype_variant_seed(BoundedSeed {
            seed,
            budget: self.budget,
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        let visitor = BoundedVisitor {
            inner: visitor,
            budget: self.budget,
            length: Length::Fixed,
        };
        self.inner.tuple_variant(len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let visitor = BoundedVisitor {
            inner: visitor,
            budget: self.budget,
            length: Length::Fixed,
        };
        self.inner.struct_variant(fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_bytes_counts_growth_to_a_power_of_two() {
        assert_eq!(seq_bytes(1, 24), Some(24));
        assert_eq!(seq_bytes(3, 24), Some(96));
        assert_eq!(seq_bytes(2049, 24), Some(4096 * 24));
        assert_eq!(seq_bytes(65_536, 1), Some(65_536));
        // Zero-sized elements count one byte each.
        assert_eq!(seq_bytes(10, 0), Some(16));
        assert_eq!(seq_bytes(usize::MAX, 1), None);
        assert_eq!(seq_bytes(1 << 40, 1 << 40), None);
    }

    #[test]
    fn map_bytes_counts_spare_buckets_and_control_bytes() {
        // 1 entry: 12 buckets of (8 + 16) bytes plus a 16-byte group.
        assert_eq!(map_bytes(1, 8), Some(12 * 24 + 16));
        assert_eq!(map_bytes(100, 8), Some(256 * 24 + 16));
        assert_eq!(map_bytes(usize::MAX, 8), None);
    }
}
