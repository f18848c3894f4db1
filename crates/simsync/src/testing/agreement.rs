//! Whether several clients agree: their verified checksum histories compared tick by tick, and
//! two per-component breakdowns compared entry by entry. Pure functions over plain data.

use std::collections::BTreeMap;
use std::fmt;

use simsync_deterministic::{ComponentBreakdown, Tick, TickChecksum};

/// What [`compare_histories`] found when every client agreed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agreement {
    /// Ticks held by at least two clients (each compared across every client holding it).
    pub ticks_compared: usize,
    /// The first and last of those ticks (`None` when no tick was held by two clients).
    pub range: Option<(Tick, Tick)>,
}

/// The first verified tick at which two clients recorded different checksums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// The first tick (lowest) whose checksums differ.
    pub tick: Tick,
    /// Every client's checksum of that tick, by client index (`None`: the client holds no
    /// checksum of it — killed, joined later, or not a checksum tick for it).
    pub checksums: Vec<Option<u64>>,
    /// What differs, from the breakdowns of the first two differing clients when both were
    /// kept ([`RelayPeersBuilder::breakdowns`](super::RelayPeersBuilder::breakdowns)).
    pub breakdown: Option<Box<BreakdownDifference>>,
    /// Ticks compared before that one (which agreed).
    pub ticks_agreed: usize,
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "clients disagree at verified tick {}:", self.tick)?;
        for (client, checksum) in self.checksums.iter().enumerate() {
            match checksum {
                Some(c) => write!(f, " client {client} = {c:016x};")?,
                None => write!(f, " client {client} = (none);")?,
            }
        }
        write!(f, " {} earlier ticks agreed", self.ticks_agreed)?;
        match &self.breakdown {
            Some(diff) => write!(f, "; {diff}"),
            None => write!(f, "; no breakdown of that tick was kept"),
        }
    }
}

/// What differs between two per-component breakdowns of the same tick: registered component
/// types (by type name), simulation entities (by slot) and registered resources (by type name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BreakdownDifference {
    /// The two clients compared.
    pub clients: (usize, usize),
    /// Component types whose hashes differ, in registration order.
    pub components: Vec<String>,
    /// Slots of simulation entities that differ or exist in one breakdown only, ascending.
    pub slots: Vec<u32>,
    /// Resource types whose hashes differ, in registration order.
    pub resources: Vec<String>,
}

impl fmt::Display for BreakdownDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b) = self.clients;
        write!(f, "clients {a} and {b} differ in ")?;
        if self.components.is_empty() && self.slots.is_empty() && self.resources.is_empty() {
            return write!(
                f,
                "nothing registered (state outside the rollback registry)"
            );
        }
        write!(f, "components {:?}, ", self.components)?;
        let first: Vec<u32> = self.slots.iter().copied().take(8).collect();
        write!(f, "entity slots {first:?}")?;
        if self.slots.len() > first.len() {
            write!(f, " (+{} more)", self.slots.len() - first.len())?;
        }
        write!(f, ", resources {:?}", self.resources)
    }
}

/// Compares the verified checksum histories of every client (index = client): every tick held
/// by two or more clients must carry the same checksum everywhere it is held.
///
/// # Errors
/// The lowest tick where two held checksums differ, with every client's checksum of it (the
/// breakdown is left `None`; the harness fills it in).
pub fn compare_histories(histories: &[&[TickChecksum]]) -> Result<Agreement, Disagreement> {
    let mut by_tick: BTreeMap<Tick, Vec<Option<u64>>> = BTreeMap::new();
    for (client, history) in histories.iter().enumerate() {
        for entry in history.iter() {
            let row = by_tick
                .entry(entry.tick)
                .or_insert_with(|| vec![None; histories.len()]);
            row[client] = Some(entry.checksum);
        }
    }
    let mut agreed = 0usize;
    let mut range = None;
    for (tick, row) in by_tick {
        let mut held = row.iter().flatten();
        let Some(first) = held.next() else { continue };
        let mut count = 1;
        for other in held {
            count += 1;
            if other != first {
                return Err(Disagreement {
                    tick,
                    checksums: row,
                    breakdown: None,
                    ticks_agreed: agreed,
                });
            }
        }
        if count >= 2 {
            agreed += 1;
            range = Some(range.map_or((tick, tick), |(lo, _)| (lo, tick)));
        }
    }
    Ok(Agreement {
        ticks_compared: agreed,
        range,
    })
}

/// The first two clients whose checksums of a disagreement differ.
pub fn differing_pair(checksums: &[Option<u64>]) -> Option<(usize, usize)> {
    let held: Vec<(usize, u64)> = checksums
        .iter()
        .enumerate()
        .filter_map(|(client, c)| c.map(|c| (client, c)))
        .collect();
    let (first, value) = *held.first()?;
    let (second, _) = held.iter().find(|(_, c)| *c != value)?;
    Some((first, *second))
}

/// What differs between breakdowns `a` (of client `clients.0`) and `b` (of `clients.1`).
pub fn breakdown_difference(
    clients: (usize, usize),
    a: &ComponentBreakdown,
    b: &ComponentBreakdown,
) -> BreakdownDifference {
    BreakdownDifference {
        clients,
        components: differing_names(&a.components, &b.components),
        slots: differing_slots(&a.slots, &b.slots),
        resources: differing_names(&a.resources, &b.resources),
    }
}

/// Names whose hashes differ or that one side lacks, in `a`'s order then `b`'s extras.
fn differing_names(a: &[(String, u64)], b: &[(String, u64)]) -> Vec<String> {
    let theirs: BTreeMap<&str, u64> = b.iter().map(|(n, h)| (n.as_str(), *h)).collect();
    let mine: BTreeMap<&str, u64> = a.iter().map(|(n, h)| (n.as_str(), *h)).collect();
    let mut out: Vec<String> = a
        .iter()
        .filter(|(n, h)| theirs.get(n.as_str()) != Some(h))
        .map(|(n, _)| n.clone())
        .collect();
    out.extend(
        b.iter()
            .filter(|(n, _)| !mine.contains_key(n.as_str()))
            .map(|(n, _)| n.clone()),
    );
    out
}

/// Slots whose hashes differ or that one side lacks, ascending.
fn differing_slots(a: &[(u32, u64)], b: &[(u32, u64)]) -> Vec<u32> {
    let mine: BTreeMap<u32, u64> = a.iter().copied().collect();
    let theirs: BTreeMap<u32, u64> = b.iter().copied().collect();
    let mut slots: Vec<u32> = mine
        .iter()
        .filter(|(slot, h)| theirs.get(slot) != Some(h))
        .map(|(slot, _)| *slot)
        .chain(theirs.keys().filter(|s| !mine.contains_key(s)).copied())
        .collect();
    slots.sort_unstable();
    slots
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(entries: &[(Tick, u64)]) -> Vec<TickChecksum> {
        entries
            .iter()
            .map(|&(tick, checksum)| TickChecksum { tick, checksum })
            .collect()
    }

    #[test]
    fn equal_histories_agree_on_their_common_ticks() {
        let a = history(&[(1, 10), (2, 20), (3, 30)]);
        let b = history(&[(2, 20), (3, 30), (4, 40)]);
        let agreement = compare_histories(&[&a, &b]).expect("agree");
        assert_eq!(agreement.ticks_compared, 2);
        assert_eq!(agreement.range, Some((2, 3)));
    }

    #[test]
    fn the_first_differing_tick_is_named_with_every_checksum() {
        let a = history(&[(1, 10), (2, 20), (3, 31), (4, 41)]);
        let b = history(&[(1, 10), (2, 20), (3, 30), (4, 40)]);
        let c = history(&[(4, 40)]);
        let d = compare_histories(&[&a, &b, &c]).expect_err("differ");
        assert_eq!(d.tick, 3);
        assert_eq!(d.checksums, vec![Some(31), Some(30), None]);
        assert_eq!(d.ticks_agreed, 2);
        assert_eq!(differing_pair(&d.checksums), Some((0, 1)));
        let text = d.to_string();
        assert!(
            text.starts_with("clients disagree at verified tick 3:"),
            "{text}"
        );
        assert!(text.contains("client 2 = (none)"), "{text}");
    }

    #[test]
    fn a_tick_only_one_client_holds_is_not_compared() {
        let a = history(&[(1, 10)]);
        let b = history(&[(2, 99)]);
        let agreement = compare_histories(&[&a, &b]).expect("nothing in common");
        assert_eq!(agreement.ticks_compared, 0);
        assert_eq!(agreement.range, None);
    }

    #[test]
    fn breakdowns_name_the_differing_components_slots_and_resources() {
        let a = ComponentBreakdown {
            tick: 5,
            components: vec![("Transform".into(), 1), ("Velocity".into(), 2)],
            slots: vec![(0, 7), (1, 8), (2, 9)],
            resources: vec![("Score".into(), 3)],
        };
        let b = ComponentBreakdown {
            tick: 5,
            components: vec![("Transform".into(), 1), ("Velocity".into(), 5)],
            slots: vec![(0, 7), (1, 6), (3, 1)],
            resources: vec![("Score".into(), 4), ("Extra".into(), 0)],
        };
        let diff = breakdown_difference((0, 1), &a, &b);
        assert_eq!(diff.components, vec!["Velocity".to_string()]);
        assert_eq!(diff.slots, vec![1, 2, 3]);
        assert_eq!(
            diff.resources,
            vec!["Score".to_string(), "Extra".to_string()]
        );
        let text = diff.to_string();
        assert!(text.contains("components [\"Velocity\"]"), "{text}");
        assert!(text.contains("entity slots [1, 2, 3]"), "{text}");
    }

    #[test]
    fn equal_breakdowns_say_the_state_is_outside_the_registry() {
        let a = ComponentBreakdown::default();
        let text = breakdown_difference((0, 2), &a, &a).to_string();
        assert!(text.contains("outside the rollback registry"), "{text}");
    }
}
