//! A value's serde form as a tree with its struct, field and variant names ([`Node`]), made by
//! serializing the value with [`to_tree`].
//!
//! Rapier keeps the indices of its physics state in private fields, but derives `Serialize` for
//! them: serializing a loaded set into a tree is how [`rapier_check`](super::rapier_check) reads
//! every index a snapshot put there, by name, without copying Rapier's layout.

use serde::ser::{self, Serialize};

/// One serialized value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// `()`, a unit struct or `None`'s absence of payload.
    Unit,
    /// A `bool`.
    Bool(bool),
    /// An unsigned integer (any width up to 64 bits).
    Uint(u64),
    /// A signed integer (any width up to 64 bits).
    Int(i64),
    /// A 128-bit integer (user data; a signed one as its bits).
    Wide(u128),
    /// A float (`f32` widened).
    Float(f64),
    /// A string or a char.
    Str(String),
    /// A byte buffer (its length).
    Bytes(usize),
    /// `None`.
    None,
    /// `Some(value)`.
    Some(Box<Node>),
    /// A sequence, tuple or tuple struct.
    Seq(Vec<Node>),
    /// A map, as its entries in serialization order.
    Map(Vec<(Node, Node)>),
    /// A struct: its name and fields in order.
    Struct(&'static str, Vec<(&'static str, Node)>),
    /// An enum variant: the enum's and the variant's names, and its payload.
    Variant(&'static str, &'static str, Box<Node>),
}

impl Node {
    /// The field `name` of a struct (or of a struct variant's payload).
    pub fn field(&self, name: &str) -> Result<&Node, String> {
        match self {
            Node::Struct(_, fields) => fields
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v)
                .ok_or_else(|| format!("no field `{name}`")),
            Node::Variant(_, _, inner) => inner.field(name),
            other => Err(format!("`{name}` asked of a {}", other.kind())),
        }
    }

    /// The elements of a sequence (a one-field tuple struct's inner sequence too).
    pub fn seq(&self) -> Result<&[Node], String> {
        match self {
            Node::Seq(items) => Ok(items),
            Node::Struct(_, fields) if fields.len() == 1 => fields[0].1.seq(),
            other => Err(format!("a sequence expected, found a {}", other.kind())),
        }
    }

    /// An unsigned integer (a one-field newtype's too).
    pub fn uint(&self) -> Result<u64, String> {
        match self {
            Node::Uint(v) => Ok(*v),
            Node::Int(v) if *v >= 0 => Ok(*v as u64),
            Node::Struct(_, fields) if fields.len() == 1 => fields[0].1.uint(),
            other => Err(format!("an integer expected, found a {}", other.kind())),
        }
    }

    /// A `bool`.
    pub fn boolean(&self) -> Result<bool, String> {
        match self {
            Node::Bool(v) => Ok(*v),
            other => Err(format!("a bool expected, found a {}", other.kind())),
        }
    }

    /// An `Option`'s value.
    pub fn option(&self) -> Result<Option<&Node>, String> {
        match self {
            Node::None => Ok(None),
            Node::Some(inner) => Ok(Some(inner)),
            other => Err(format!("an option expected, found a {}", other.kind())),
        }
    }

    /// An enum value's variant name and payload.
    pub fn variant(&self) -> Result<(&'static str, &Node), String> {
        match self {
            Node::Variant(_, name, inner) => Ok((name, inner)),
            other => Err(format!("an enum expected, found a {}", other.kind())),
        }
    }

    /// Every float in this value (depth first).
    pub fn floats(&self, out: &mut impl FnMut(f64)) {
        match self {
            Node::Float(v) => out(*v),
            Node::Some(inner) | Node::Variant(_, _, inner) => inner.floats(out),
            Node::Seq(items) => items.iter().for_each(|n| n.floats(out)),
            Node::Map(entries) => entries.iter().for_each(|(k, v)| {
                k.floats(out);
                v.floats(out);
            }),
            Node::Struct(_, fields) => fields.iter().for_each(|(_, n)| n.floats(out)),
            _ => {}
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Node::Unit => "unit",
            Node::Bool(_) => "bool",
            Node::Uint(_) | Node::Int(_) | Node::Wide(_) => "integer",
            Node::Float(_) => "float",
            Node::Str(_) => "string",
            Node::Bytes(_) => "byte buffer",
            Node::None | Node::Some(_) => "option",
            Node::Seq(_) => "sequence",
            Node::Map(_) => "map",
            Node::Struct(name, _) => name,
            Node::Variant(name, _, _) => name,
        }
    }
}

#[cfg(test)]
impl Node {
    /// The node at `path`: `.`-separated field names and sequence indices, entering enum
    /// payloads, `Some` and one-field newtypes on the way (an index into a newtype of a
    /// sequence indexes the sequence). For tests that break one value of a real tree.
    ///
    /// # Panics
    /// If the path does not exist.
    pub(crate) fn at_mut(&mut self, path: &str) -> &mut Node {
        fn enter(node: &mut Node) -> &mut Node {
            match node {
                Node::Variant(_, _, inner) | Node::Some(inner) => enter(inner),
                other => other,
            }
        }
        fn newtype<'a>(node: &'a mut Node, segment: &str) -> &'a mut Node {
            let wraps = matches!(node, Node::Struct(_, f) if f.len() == 1
                && f[0].0 == "0"
                && (segment != "0" || matches!(f[0].1, Node::Seq(_))));
            if !wraps {
                return node;
            }
            match node {
                Node::Struct(_, fields) => newtype(&mut fields[0].1, segment),
                other => other,
            }
        }
        let mut node = self;
        for segment in path.split('.').filter(|s| !s.is_empty()) {
            node = match newtype(enter(node), segment) {
                Node::Struct(_, fields) => {
                    let found = fields.iter_mut().find(|(n, _)| *n == segment);
                    &mut found.unwrap_or_else(|| panic!("no field {segment}")).1
                }
                Node::Seq(items) => &mut items[segment.parse::<usize>().expect("an index")],
                other => panic!("{segment} asked of a {}", other.kind()),
            };
        }
        node
    }
}

/// `value`'s serde form as a tree.
///
/// # Errors
/// The value's own serialization error, as text.
pub(crate) fn to_tree<T: Serialize + ?Sized>(value: &T) -> Result<Node, String> {
    value.serialize(TreeSerializer).map_err(|e| e.0)
}

/// The error of [`TreeSerializer`] (a value's own `Serialize` failure).
#[derive(Debug)]
pub(crate) struct TreeError(String);

impl std::fmt::Display for TreeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TreeError {}

impl ser::Error for TreeError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        TreeError(msg.to_string())
    }
}

/// Builds a [`Node`] from a value's `Serialize` calls.
struct TreeSerializer;

/// A sequence, tuple, tuple struct or tuple variant being built.
struct SeqBuilder {
    variant: Option<(&'static str, &'static str)>,
    items: Vec<Node>,
}

/// A map being built.
struct MapBuilder {
    entries: Vec<(Node, Node)>,
    key: Option<Node>,
}

/// A struct or struct variant being built.
struct StructBuilder {
    name: &'static str,
    variant: Option<&'static str>,
    fields: Vec<(&'static str, Node)>,
}

type R = Result<Node, TreeError>;

impl ser::Serializer for TreeSerializer {
    type Ok = Node;
    type Error = TreeError;
    type SerializeSeq = SeqBuilder;
    type SerializeTuple = SeqBuilder;
    type SerializeTupleStruct = SeqBuilder;
    type SerializeTupleVariant = SeqBuilder;
    type SerializeMap = MapBuilder;
    type SerializeStruct = StructBuilder;
    type SerializeStructVariant = StructBuilder;

    /// Binary, as the snapshot's bincode: types with two serde forms (bit flags) take the one
    /// the snapshot stores.
    fn is_human_readable(&self) -> bool {
        false
    }

    fn serialize_bool(self, v: bool) -> R {
        Ok(Node::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> R {
        Ok(Node::Int(v.into()))
    }
    fn serialize_i16(self, v: i16) -> R {
        Ok(Node::Int(v.into()))
    }
    fn serialize_i32(self, v: i32) -> R {
        Ok(Node::Int(v.into()))
    }
    fn serialize_i64(self, v: i64) -> R {
        Ok(Node::Int(v))
    }
    fn serialize_i128(self, v: i128) -> R {
        Ok(Node::Wide(v as u128))
    }
    fn serialize_u8(self, v: u8) -> R {
        Ok(Node::Uint(v.into()))
    }
    fn serialize_u16(self, v: u16) -> R {
        Ok(Node::Uint(v.into()))
    }
    fn serialize_u32(self, v: u32) -> R {
        Ok(Node::Uint(v.into()))
    }
    fn serialize_u64(self, v: u64) -> R {
        Ok(Node::Uint(v))
    }
    fn serialize_u128(self, v: u128) -> R {
        Ok(Node::Wide(v))
    }
    fn serialize_f32(self, v: f32) -> R {
        Ok(Node::Float(v.into()))
    }
    fn serialize_f64(self, v: f64) -> R {
        Ok(Node::Float(v))
    }
    fn serialize_char(self, v: char) -> R {
        Ok(Node::Str(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> R {
        Ok(Node::Str(v.to_string()))
    }
    fn serialize_bytes(self, v: &[u8]) -> R {
        Ok(Node::Bytes(v.len()))
    }
    fn serialize_none(self) -> R {
        Ok(Node::None)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> R {
        Ok(Node::Some(Box::new(value.serialize(self)?)))
    }
    fn serialize_unit(self) -> R {
        Ok(Node::Unit)
    }
    fn serialize_unit_struct(self, _: &'static str) -> R {
        Ok(Node::Unit)
    }
    fn serialize_unit_variant(self, name: &'static str, _: u32, variant: &'static str) -> R {
        Ok(Node::Variant(name, variant, Box::new(Node::Unit)))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, name: &'static str, value: &T) -> R {
        Ok(Node::Struct(name, vec![("0", value.serialize(self)?)]))
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> R {
        Ok(Node::Variant(
            name,
            variant,
            Box::new(value.serialize(self)?),
        ))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<SeqBuilder, TreeError> {
        Ok(SeqBuilder {
            variant: None,
            items: Vec::with_capacity(len.unwrap_or(0).min(1 << 16)),
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<SeqBuilder, TreeError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<SeqBuilder, TreeError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<SeqBuilder, TreeError> {
        let mut builder = self.serialize_seq(Some(len))?;
        builder.variant = Some((name, variant));
        Ok(builder)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<MapBuilder, TreeError> {
        Ok(MapBuilder {
            entries: Vec::new(),
            key: None,
        })
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<StructBuilder, TreeError> {
        Ok(StructBuilder {
            name,
            variant: None,
            fields: Vec::with_capacity(len),
        })
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<StructBuilder, TreeError> {
        Ok(StructBuilder {
            name,
            variant: Some(variant),
            fields: Vec::with_capacity(len),
        })
    }
}

impl SeqBuilder {
    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), TreeError> {
        self.items.push(value.serialize(TreeSerializer)?);
        Ok(())
    }
    fn finish(self) -> R {
        let seq = Node::Seq(self.items);
        Ok(match self.variant {
            Some((name, variant)) => Node::Variant(name, variant, Box::new(seq)),
            None => seq,
        })
    }
}

macro_rules! seq_impl {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for SeqBuilder {
            type Ok = Node;
            type Error = TreeError;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), TreeError> {
                self.push(value)
            }
            fn end(self) -> R {
                self.finish()
            }
        }
    )*};
}

seq_impl!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for MapBuilder {
    type Ok = Node;
    type Error = TreeError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), TreeError> {
        self.key = Some(key.serialize(TreeSerializer)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), TreeError> {
        let key = self
            .key
            .take()
            .ok_or_else(|| TreeError("a map value without a key".into()))?;
        self.entries.push((key, value.serialize(TreeSerializer)?));
        Ok(())
    }
    fn end(self) -> R {
        Ok(Node::Map(self.entries))
    }
}

impl StructBuilder {
    fn push<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), TreeError> {
        self.fields.push((key, value.serialize(TreeSerializer)?));
        Ok(())
    }
    fn finish(self) -> R {
        let node = Node::Struct(self.name, self.fields);
        Ok(match self.variant {
            Some(variant) => Node::Variant(self.name, variant, Box::new(node)),
            None => node,
        })
    }
}

impl ser::SerializeStruct for StructBuilder {
    type Ok = Node;
    type Error = TreeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), TreeError> {
        self.push(key, value)
    }
    fn end(self) -> R {
        self.finish()
    }
}

impl ser::SerializeStructVariant for StructBuilder {
    type Ok = Node;
    type Error = TreeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), TreeError> {
        self.push(key, value)
    }
    fn end(self) -> R {
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    #[derive(Serialize)]
    struct Inner {
        index: u32,
        generation: u32,
    }

    #[derive(Serialize)]
    enum Entry {
        Free { next_free: Option<u32> },
        Occupied { generation: u32, value: Inner },
    }

    #[derive(Serialize)]
    struct Arena {
        items: Vec<Entry>,
        len: usize,
    }

    #[test]
    fn fields_variants_and_sequences_are_read_by_name() {
        let arena = Arena {
            items: vec![
                Entry::Free { next_free: None },
                Entry::Occupied {
                    generation: 3,
                    value: Inner {
                        index: 7,
                        generation: 2,
                    },
                },
            ],
            len: 1,
        };
        let tree = to_tree(&arena).unwrap();
        assert_eq!(tree.field("len").unwrap().uint(), Ok(1));
        let items = tree.field("items").unwrap().seq().unwrap();
        assert_eq!(items.len(), 2);
        let (name, free) = items[0].variant().unwrap();
        assert_eq!(name, "Free");
        assert_eq!(free.field("next_free").unwrap().option(), Ok(None));
        let (name, occupied) = items[1].variant().unwrap();
        assert_eq!(name, "Occupied");
        assert_eq!(occupied.field("generation").unwrap().uint(), Ok(3));
        let value = occupied.field("value").unwrap();
        assert_eq!(value.field("index").unwrap().uint(), Ok(7));
        assert!(value.field("missing").is_err());
        assert!(tree.field("len").unwrap().seq().is_err());
    }
}
