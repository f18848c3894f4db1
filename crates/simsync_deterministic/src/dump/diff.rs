//! Comparing two desync dumps: [`diff_dumps`] names the first differing entity (slot and
//! generation), component type and field values — the root difference first: what already
//! differed at the earliest tick whose kept breakdowns differ — and the inputs of the tick.

use std::fmt;

use super::format::{DesyncDump, DumpError, DumpedInput, DumpedValue};
use crate::checksum::ComponentBreakdown;
use crate::tick::Tick;

/// Which side of a diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DumpSide {
    /// The first dump.
    A,
    /// The second dump.
    B,
}

/// One field whose values differ (`None`: the field exists on one side only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDifference {
    /// The field's path (`translation.x`).
    pub path: String,
    /// The first dump's value.
    pub a: Option<String>,
    /// The second dump's value.
    pub b: Option<String>,
}

/// The first difference between two dumps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Difference {
    /// A live simulation entity in one dump only (or with another generation in the other).
    EntityOnlyIn {
        /// The dump that has it.
        side: DumpSide,
        /// Its slot.
        slot: u32,
        /// Its generation.
        generation: u32,
    },
    /// A registered component of an entity present in both dumps differs (or is present on one
    /// side only).
    Component {
        /// The entity's slot.
        slot: u32,
        /// The entity's generation.
        generation: u32,
        /// The component's type name.
        type_name: String,
        /// The first dump's value (`None`: absent).
        a: Option<DumpedValue>,
        /// The second dump's value.
        b: Option<DumpedValue>,
        /// The fields that differ, in order (empty when a side has no fields: not reflected or
        /// absent).
        fields: Vec<FieldDifference>,
    },
    /// A registered resource differs (or is present on one side only).
    Resource {
        /// The resource's type name.
        type_name: String,
        /// The first dump's value.
        a: Option<DumpedValue>,
        /// The second dump's value.
        b: Option<DumpedValue>,
        /// The fields that differ.
        fields: Vec<FieldDifference>,
    },
}

/// The earliest tick at which two dumps' kept per-component breakdowns differ, and what
/// differs at it: where a divergence started, when the dumps are of a later tick.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RootDifference {
    /// The tick (a checksum tick kept in both dumps' breakdowns).
    pub tick: Tick,
    /// The slots whose components hash differently at `tick` (or live on one side only), in
    /// slot order.
    pub slots: Vec<u32>,
    /// The component types whose values hash differently at `tick`, in registration order.
    pub components: Vec<String>,
    /// The resource types that hash differently at `tick`, in registration order.
    pub resources: Vec<String>,
}

/// What [`diff_dumps`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpDiff {
    /// The ticks of the two dumps.
    pub ticks: (Tick, Tick),
    /// The first difference, the root first: a difference of a slot and a type named by
    /// [`root`](Self::root), then one of a slot or a type named there, then the others; within
    /// each, the largest change first (the largest absolute difference between a numeric
    /// field's two values; a change that cannot be measured so — an entity or value on one side
    /// only, a field that is not a number, a value without fields — counts as the largest),
    /// then entities in slot order, components in registration order, then resources. One
    /// wrong value spreads within the same step to every body its contacts couple it with, by
    /// rounding-sized amounts: the size puts the wrong value before the bystanders.
    /// `None`: the dumps hold the same state.
    pub first: Option<Difference>,
    /// Where the dumps' kept breakdowns first differ (`None`: no tick kept in both differs).
    pub root: Option<RootDifference>,
    /// How many entity, component and resource differences there are in all.
    pub differences: usize,
    /// The inputs of the tick in each dump.
    pub inputs: (Vec<DumpedInput>, Vec<DumpedInput>),
}

impl DumpDiff {
    /// Whether the dumps hold the same state.
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// Whether the inputs of the tick differ between the dumps (player or value; the status,
    /// predicted or confirmed, is not compared).
    pub fn inputs_differ(&self) -> bool {
        let values = |list: &[DumpedInput]| {
            list.iter()
                .map(|i| (i.player, i.value.clone()))
                .collect::<Vec<_>>()
        };
        values(&self.inputs.0) != values(&self.inputs.1)
    }
}

/// Compares two dumps of the same game ([desync dumps](crate::rules#desync-dumps)).
///
/// Entities are matched by slot: a slot live in one dump only, or with different generations,
/// is an [`Difference::EntityOnlyIn`]; values are equal when their digests are equal, or —
/// for values without a digest — when their fields are (a type with neither on both sides
/// cannot be compared and is passed over).
///
/// # Errors
/// [`DumpError::ForeignGame`] when the dumps' registered types differ.
pub fn diff_dumps(a: &DesyncDump, b: &DesyncDump) -> Result<DumpDiff, DumpError> {
    let (fa, fb) = (&a.header.fingerprint, &b.header.fingerprint);
    if fa != fb {
        let names = |f: &super::format::GameFingerprint| {
            f.components
                .iter()
                .chain(&f.resources)
                .cloned()
                .collect::<Vec<_>>()
        };
        let (na, nb) = (names(fa), names(fb));
        let first_difference = (0..na.len().max(nb.len()))
            .find(|i| na.get(*i) != nb.get(*i))
            .map(|i| {
                format!(
                    "{} vs {}",
                    na.get(i).map_or("(none)", String::as_str),
                    nb.get(i).map_or("(none)", String::as_str)
                )
            })
            .unwrap_or_default();
        return Err(DumpError::ForeignGame { first_difference });
    }
    let mut all = Vec::new();
    entity_differences(a, b, &mut all);
    value_differences(
        &a.resources,
        &b.resources,
        &mut all,
        |type_name, a, b, fields| Difference::Resource {
            type_name,
            a,
            b,
            fields,
        },
    );
    let root = root_difference(&a.breakdowns, &b.breakdowns);
    // A stable sort: within a rank and a spread, slot and registration order stay.
    all.sort_by(|x, y| {
        let rank = |d| root.as_ref().map_or(0, |root| root_rank(d, root));
        rank(x)
            .cmp(&rank(y))
            .then_with(|| spread(y).total_cmp(&spread(x)))
    });
    Ok(DumpDiff {
        ticks: (a.header.tick, b.header.tick),
        differences: all.len(),
        first: all.into_iter().next(),
        root,
        inputs: (a.inputs.clone(), b.inputs.clone()),
    })
}

/// The earliest tick kept in both `a` and `b` whose breakdowns differ, and what differs there.
pub(crate) fn root_difference(
    a: &[ComponentBreakdown],
    b: &[ComponentBreakdown],
) -> Option<RootDifference> {
    let mut ticks: Vec<Tick> = a
        .iter()
        .map(|x| x.tick)
        .filter(|t| b.iter().any(|y| y.tick == *t))
        .collect();
    ticks.sort_unstable();
    ticks.into_iter().find_map(|tick| {
        let x = a.iter().find(|x| x.tick == tick)?;
        let y = b.iter().find(|y| y.tick == tick)?;
        let root = RootDifference {
            tick,
            slots: differing_keys(&x.slots, &y.slots),
            components: differing_keys(&x.components, &y.components),
            resources: differing_keys(&x.resources, &y.resources),
        };
        let differs =
            !(root.slots.is_empty() && root.components.is_empty() && root.resources.is_empty());
        differs.then_some(root)
    })
}

/// The keys whose hashes differ between `a` and `b` or that one side lacks, in `a`'s order
/// then `b`'s.
fn differing_keys<K: Clone + PartialEq>(a: &[(K, u64)], b: &[(K, u64)]) -> Vec<K> {
    let hash_of = |list: &[(K, u64)], key: &K| list.iter().find(|(k, _)| k == key).map(|(_, h)| *h);
    let mut out: Vec<K> = Vec::new();
    for (key, _) in a.iter().chain(b) {
        if hash_of(a, key) != hash_of(b, key) && !out.contains(key) {
            out.push(key.clone());
        }
    }
    out
}

/// 0: the difference is of a slot and a type that differ at the root tick; 1: of either; 2:
/// neither.
fn root_rank(difference: &Difference, root: &RootDifference) -> u8 {
    let slot_named = |slot: &u32| root.slots.contains(slot);
    let type_named = |list: &[String], name: &String| list.contains(name);
    match difference {
        Difference::EntityOnlyIn { slot, .. } => {
            if slot_named(slot) {
                0
            } else {
                2
            }
        }
        Difference::Component {
            slot, type_name, ..
        } => 2 - u8::from(slot_named(slot)) - u8::from(type_named(&root.components, type_name)),
        Difference::Resource { type_name, .. } => {
            if type_named(&root.resources, type_name) {
                0
            } else {
                2
            }
        }
    }
}

/// How far apart the two sides of `difference` are: the largest absolute difference of a
/// field whose two values are both numbers. [`f64::INFINITY`] when it cannot be measured (an
/// entity, value or field on one side only, a differing field that is not a number, a value
/// without fields): a change that is not numeric is never a small numeric spread.
fn spread(difference: &Difference) -> f64 {
    let fields = match difference {
        Difference::EntityOnlyIn { .. } => return f64::INFINITY,
        Difference::Component { a, b, fields, .. } | Difference::Resource { a, b, fields, .. } => {
            if a.is_none() || b.is_none() || fields.is_empty() {
                return f64::INFINITY;
            }
            fields
        }
    };
    fields
        .iter()
        .map(|field| {
            let number = |side: &Option<String>| side.as_deref()?.trim().parse::<f64>().ok();
            match (number(&field.a), number(&field.b)) {
                (Some(x), Some(y)) if (x - y).is_finite() => (x - y).abs(),
                _ => f64::INFINITY,
            }
        })
        .fold(0.0, f64::max)
}

fn entity_differences(a: &DesyncDump, b: &DesyncDump, out: &mut Vec<Difference>) {
    let mut slots: Vec<u32> = a
        .entities
        .iter()
        .chain(&b.entities)
        .map(|e| e.slot)
        .collect();
    slots.sort_unstable();
    slots.dedup();
    for slot in slots {
        match (a.entity(slot), b.entity(slot)) {
            (Some(ea), Some(eb)) if ea.generation == eb.generation => {
                value_differences(
                    &ea.components,
                    &eb.components,
                    out,
                    |type_name, a, b, fields| Difference::Component {
                        slot,
                        generation: ea.generation,
                        type_name,
                        a,
                        b,
                        fields,
                    },
                );
            }
            (ea, eb) => {
                for (side, e) in [(DumpSide::A, ea), (DumpSide::B, eb)] {
                    if let Some(e) = e {
                        out.push(Difference::EntityOnlyIn {
                            side,
                            slot,
                            generation: e.generation,
                        });
                    }
                }
            }
        }
    }
}

fn value_differences(
    a: &[DumpedValue],
    b: &[DumpedValue],
    out: &mut Vec<Difference>,
    make: impl Fn(String, Option<DumpedValue>, Option<DumpedValue>, Vec<FieldDifference>) -> Difference,
) {
    // Both sides list types in registration order; walk the union in the order of `a`, then
    // the types only `b` has.
    let mut names: Vec<&str> = a.iter().map(|v| v.type_name.as_str()).collect();
    for v in b {
        if !names.contains(&v.type_name.as_str()) {
            names.push(&v.type_name);
        }
    }
    for name in names {
        let va = a.iter().find(|v| v.type_name == name);
        let vb = b.iter().find(|v| v.type_name == name);
        if values_equal(va, vb) {
            continue;
        }
        let fields = match (
            va.and_then(|v| v.fields.as_ref()),
            vb.and_then(|v| v.fields.as_ref()),
        ) {
            (Some(fa), Some(fb)) => field_differences(fa, fb),
            _ => Vec::new(),
        };
        out.push(make(name.to_string(), va.cloned(), vb.cloned(), fields));
    }
}

fn values_equal(a: Option<&DumpedValue>, b: Option<&DumpedValue>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => match (a.hash, b.hash) {
            (Some(ha), Some(hb)) => ha == hb,
            // Neither digest nor fields on either side: the type cannot be compared (it is
            // named by the prediction check's `UncheckedState` instead).
            (None, None) if a.fields.is_none() && b.fields.is_none() => true,
            _ => a.fields.is_some() && a.fields == b.fields,
        },
        _ => false,
    }
}

fn field_differences(
    a: &[super::format::DumpedField],
    b: &[super::format::DumpedField],
) -> Vec<FieldDifference> {
    let mut out = Vec::new();
    for fa in a {
        let vb = b.iter().find(|f| f.path == fa.path).map(|f| &f.value);
        if vb != Some(&fa.value) {
            out.push(FieldDifference {
                path: fa.path.clone(),
                a: Some(fa.value.clone()),
                b: vb.cloned(),
            });
        }
    }
    for fb in b {
        if !a.iter().any(|f| f.path == fb.path) {
            out.push(FieldDifference {
                path: fb.path.clone(),
                a: None,
                b: Some(fb.value.clone()),
            });
        }
    }
    out
}

fn side_text(value: &Option<String>) -> &str {
    value.as_deref().unwrap_or("(absent)")
}

impl fmt::Display for DumpDiff {
    /// The first difference and the inputs, for humans.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (ta, tb) = self.ticks;
        let Some(first) = &self.first else {
            return writeln!(f, "no difference (ticks {ta} and {tb})");
        };
        writeln!(
            f,
            "{} difference(s) between tick {ta} (a) and tick {tb} (b); the first:",
            self.differences
        )?;
        if let Some(root) = &self.root {
            writeln!(
                f,
                "  (the kept hashes first differ at tick {}: slots {:?}, components {:?}, \
                 resources {:?}; differences there come first)",
                root.tick, root.slots, root.components, root.resources
            )?;
        }
        write!(f, "{first}")?;
        let inputs = if self.inputs_differ() {
            "differ"
        } else {
            "equal"
        };
        writeln!(f, "  inputs of the tick ({inputs}):")?;
        for (side, list) in [("a", &self.inputs.0), ("b", &self.inputs.1)] {
            for input in list {
                writeln!(
                    f,
                    "    {side} player {} ({}): {}",
                    input.player, input.status, input.value
                )?;
            }
        }
        Ok(())
    }
}

/// One difference as the diff prints it (two-space indented lines).
impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Difference::EntityOnlyIn {
                side,
                slot,
                generation,
            } => writeln!(
                f,
                "  entity slot {slot} generation {generation} exists only in {side:?}"
            ),
            Difference::Component {
                slot,
                generation,
                type_name,
                a,
                b,
                fields,
            } => {
                writeln!(
                    f,
                    "  entity slot {slot} generation {generation}, component {type_name}"
                )?;
                write_values(f, a, b, fields)
            }
            Difference::Resource {
                type_name,
                a,
                b,
                fields,
            } => {
                writeln!(f, "  resource {type_name}")?;
                write_values(f, a, b, fields)
            }
        }
    }
}

fn write_values(
    f: &mut fmt::Formatter<'_>,
    a: &Option<DumpedValue>,
    b: &Option<DumpedValue>,
    fields: &[FieldDifference],
) -> fmt::Result {
    let hash = |v: &Option<DumpedValue>| match v {
        None => "absent".to_string(),
        Some(DumpedValue { hash: Some(h), .. }) => format!("#{h:016x}"),
        Some(_) => "unchecked".to_string(),
    };
    writeln!(f, "    a {}  b {}", hash(a), hash(b))?;
    if fields.is_empty() && a.is_some() && b.is_some() {
        writeln!(f, "    (no field values: the type is not reflected)")?;
    }
    for field in fields {
        writeln!(
            f,
            "    {}: a = {}  b = {}",
            field.path,
            side_text(&field.a),
            side_text(&field.b)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::format::{DumpHeader, DumpReason, DumpedEntity, DumpedWorld, GameFingerprint};

    fn value(type_name: &str, hash: u64) -> DumpedValue {
        DumpedValue {
            type_name: type_name.into(),
            hash: Some(hash),
            fields: None,
        }
    }

    /// Slots 0 and 3, each with a Transform and a Velocity of the given hashes.
    fn dump(
        slot0: (u64, u64),
        slot3: (u64, u64),
        breakdowns: Vec<ComponentBreakdown>,
    ) -> DesyncDump {
        let entity = |slot, (t, v)| DumpedEntity {
            slot,
            generation: 0,
            components: vec![value("Transform", t), value("Velocity", v)],
        };
        DesyncDump {
            header: DumpHeader {
                tick: 12,
                world: DumpedWorld::Verified,
                reason: DumpReason::Requested,
                fingerprint: GameFingerprint::default(),
                checksum: 0,
                writer: None,
            },
            entities: vec![entity(0, slot0), entity(3, slot3)],
            resources: Vec::new(),
            inputs: Vec::new(),
            breakdowns,
        }
    }

    fn breakdown(tick: Tick, slot3: u64, velocity: u64) -> ComponentBreakdown {
        ComponentBreakdown {
            tick,
            components: vec![("Transform".into(), 1), ("Velocity".into(), velocity)],
            slots: vec![(0, 1), (3, slot3)],
            resources: Vec::new(),
        }
    }

    #[test]
    fn the_difference_at_the_earliest_differing_kept_tick_comes_first() {
        // By tick 12 slot 0's Transform differs too, but at tick 10 only slot 3's Velocity did.
        let a = dump(
            (1, 1),
            (1, 1),
            vec![breakdown(9, 5, 5), breakdown(10, 5, 5)],
        );
        let b = dump(
            (2, 1),
            (2, 2),
            vec![breakdown(9, 5, 5), breakdown(10, 6, 7)],
        );
        let diff = diff_dumps(&a, &b).expect("same game");
        assert_eq!(diff.differences, 3);
        let root = diff.root.as_ref().expect("the breakdowns differ");
        assert_eq!(root.tick, 10);
        assert_eq!(root.slots, vec![3]);
        assert_eq!(root.components, vec!["Velocity".to_string()]);
        let Some(Difference::Component {
            slot, type_name, ..
        }) = &diff.first
        else {
            panic!("{diff}");
        };
        assert_eq!((*slot, type_name.as_str()), (3, "Velocity"));
        assert!(
            diff.to_string().contains("first differ at tick 10"),
            "{diff}"
        );
    }

    /// Slot `slot` with a reflected `Velocity` whose field `y` is `y` (hashed by its text).
    fn moving(slot: u32, y: &str) -> DumpedEntity {
        DumpedEntity {
            slot,
            generation: 0,
            components: vec![DumpedValue {
                type_name: "Velocity".into(),
                hash: Some(y.bytes().map(u64::from).sum()),
                fields: Some(vec![crate::dump::format::DumpedField {
                    path: "y".into(),
                    value: y.into(),
                }]),
            }],
        }
    }

    #[test]
    fn at_the_root_tick_the_largest_change_comes_before_bystanders_spread() {
        // At tick 10 slot 7 was pushed by 0.5 and, in the same step, slots 1 and 4 moved by
        // rounding-sized amounts: every one of them differs at the root tick.
        let mut a = dump((1, 1), (1, 1), vec![breakdown(10, 5, 5)]);
        let mut b = dump((1, 1), (1, 1), vec![breakdown(10, 6, 7)]);
        a.entities = vec![moving(1, "0.25"), moving(4, "-3.0"), moving(7, "1.5")];
        b.entities = vec![
            moving(1, "0.25000003"),
            moving(4, "-3.0000002"),
            moving(7, "1.0"),
        ];
        for (x, y) in [(&mut a, 1), (&mut b, 2)] {
            x.breakdowns[0].slots = vec![(1, y), (4, y), (7, y)];
        }
        let diff = diff_dumps(&a, &b).expect("same game");
        assert_eq!(diff.differences, 3);
        assert_eq!(
            diff.root.as_ref().map(|r| r.slots.clone()),
            Some(vec![1, 4, 7])
        );
        let Some(Difference::Component { slot, fields, .. }) = &diff.first else {
            panic!("{diff}");
        };
        assert_eq!(*slot, 7, "{diff}");
        assert_eq!(fields[0].a.as_deref(), Some("1.5"));
        // A change that is not a number counts as the largest: before slot 1's 0.5.
        b.entities = vec![moving(1, "0.75"), moving(4, "-3.0000002"), moving(7, "NaN")];
        let diff = diff_dumps(&a, &b).expect("same game");
        assert!(
            matches!(&diff.first, Some(Difference::Component { slot: 7, .. })),
            "{diff}"
        );
        // Changes of the same size keep slot order.
        b.entities = vec![moving(1, "0.75"), moving(4, "-2.5"), moving(7, "1.5")];
        let diff = diff_dumps(&a, &b).expect("same game");
        assert_eq!(diff.differences, 2);
        assert!(
            matches!(&diff.first, Some(Difference::Component { slot: 1, .. })),
            "{diff}"
        );
    }

    #[test]
    fn without_differing_breakdowns_the_first_difference_is_in_slot_order() {
        let a = dump((1, 1), (1, 1), vec![breakdown(9, 5, 5)]);
        let b = dump((2, 1), (2, 2), vec![breakdown(9, 5, 5)]);
        let diff = diff_dumps(&a, &b).expect("same game");
        assert_eq!(diff.root, None);
        let Some(Difference::Component {
            slot, type_name, ..
        }) = &diff.first
        else {
            panic!("{diff}");
        };
        assert_eq!((*slot, type_name.as_str()), (0, "Transform"));
    }
}
