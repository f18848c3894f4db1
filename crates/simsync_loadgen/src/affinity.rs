//! Where a load run's two processes run: the server on some cores, the driver (the fake
//! clients) on the others, so the driver's work does not take the server's cores and the
//! server's CPU per worker is its own.
//!
//! The rule ([`Placement::plan`]): cores named on the command line are used as given (each a
//! subset of the cores this process may use, never overlapping); otherwise, on a machine with
//! at least [`MIN_CORES_TO_SPLIT`] usable cores, the server takes the first half (rounded up)
//! and the driver the rest; with fewer, nothing is pinned and both share every core (a split
//! of two cores would leave the server one core for its main loop and every worker). Pure
//! parsing and planning; [`allowed_cpus`] reads `/proc/self/status` and the load example
//! applies a placement with `taskset` (util-linux).

use std::collections::BTreeSet;
use std::fmt;

use thiserror::Error;

/// The fewest usable cores on which [`Placement::plan`] splits the server from the driver.
pub const MIN_CORES_TO_SPLIT: usize = 4;

/// The highest core number a list may name (Linux's default `CONFIG_NR_CPUS` limit is 8192).
pub const MAX_CPU: usize = 8_191;

/// A set of cores, as `taskset -c` and `/proc/<pid>/status` (`Cpus_allowed_list`) write it:
/// `0-3,6,8-9`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuSet(BTreeSet<usize>);

/// Why a core list or a placement was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AffinityError {
    /// The text is not a core list (numbers and ranges `a-b`, `a <= b`, separated by commas).
    #[error("`{0}` is not a core list such as 0-3,6")]
    Malformed(String),
    /// A core number above [`MAX_CPU`].
    #[error("core {0} is above the highest core number {MAX_CPU}")]
    OutOfRange(usize),
    /// The list names no core.
    #[error("the core list is empty")]
    Empty,
    /// A named core this process may not use.
    #[error("{role} cores {wanted} are not all among the usable cores {allowed}")]
    NotAllowed {
        /// `server` or `driver`.
        role: &'static str,
        /// The cores asked for.
        wanted: CpuSet,
        /// The cores this process may use.
        allowed: CpuSet,
    },
    /// The server's and the driver's cores overlap.
    #[error("server cores {server} and driver cores {driver} overlap")]
    Overlap {
        /// The server's cores.
        server: CpuSet,
        /// The driver's cores.
        driver: CpuSet,
    },
}

impl CpuSet {
    /// Parses a core list (`0-3,6`; spaces around items allowed).
    ///
    /// # Errors
    /// [`AffinityError::Malformed`], [`AffinityError::OutOfRange`] (above [`MAX_CPU`]),
    /// [`AffinityError::Empty`].
    pub fn parse(text: &str) -> Result<Self, AffinityError> {
        let malformed = || AffinityError::Malformed(text.to_string());
        let number = |part: &str| part.trim().parse::<usize>().map_err(|_| malformed());
        let mut set = BTreeSet::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (low, high) = match item.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(item)?, number(item)?),
            };
            if low > high {
                return Err(malformed());
            }
            if high > MAX_CPU {
                return Err(AffinityError::OutOfRange(high));
            }
            set.extend(low..=high);
        }
        if set.is_empty() {
            return Err(AffinityError::Empty);
        }
        Ok(Self(set))
    }

    /// The cores, ascending.
    pub fn cores(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().copied()
    }

    /// How many cores.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No core.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn is_subset(&self, other: &Self) -> bool {
        self.0.is_subset(&other.0)
    }

    fn overlaps(&self, other: &Self) -> bool {
        !self.0.is_disjoint(&other.0)
    }
}

impl fmt::Display for CpuSet {
    /// The list with runs folded into ranges: `0-3,6`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for core in self.cores() {
            match runs.last_mut() {
                Some((_, high)) if *high + 1 == core => *high = core,
                _ => runs.push((core, core)),
            }
        }
        let text: Vec<String> = runs
            .into_iter()
            .map(|(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        f.write_str(&text.join(","))
    }
}

/// Where the server and the driver run; `None`: not pinned (every usable core).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The cores the run could use when it was planned (before the driver was pinned).
    pub usable: CpuSet,
    /// The server's cores.
    pub server: Option<CpuSet>,
    /// The driver's cores.
    pub driver: Option<CpuSet>,
}

impl Placement {
    /// The placement of a run on a process allowed `allowed`, with the cores asked for on the
    /// command line (the module's rule).
    ///
    /// # Errors
    /// [`AffinityError::NotAllowed`] when an asked core is not usable, [`AffinityError::Overlap`]
    /// when the two lists share a core.
    pub fn plan(
        allowed: &CpuSet,
        server: Option<CpuSet>,
        driver: Option<CpuSet>,
    ) -> Result<Self, AffinityError> {
        for (role, wanted) in [("server", &server), ("driver", &driver)] {
            if let Some(wanted) = wanted.as_ref().filter(|w| !w.is_subset(allowed)) {
                return Err(AffinityError::NotAllowed {
                    role,
                    wanted: wanted.clone(),
                    allowed: allowed.clone(),
                });
            }
        }
        if let (Some(s), Some(d)) = (&server, &driver)
            && s.overlaps(d)
        {
            return Err(AffinityError::Overlap {
                server: s.clone(),
                driver: d.clone(),
            });
        }
        let usable = allowed.clone();
        if server.is_some() || driver.is_some() {
            return Ok(Self {
                usable,
                server,
                driver,
            });
        }
        if allowed.len() < MIN_CORES_TO_SPLIT {
            return Ok(Self {
                usable,
                server: None,
                driver: None,
            });
        }
        let first = allowed.len().div_ceil(2);
        let half =
            |skip: usize, take: usize| CpuSet(allowed.cores().skip(skip).take(take).collect());
        Ok(Self {
            usable,
            server: Some(half(0, first)),
            driver: Some(half(first, allowed.len())),
        })
    }

    /// Whether either process is pinned.
    pub fn is_split(&self) -> bool {
        self.server.is_some() || self.driver.is_some()
    }
}

/// The cores this process may use, from `Cpus_allowed_list` in `/proc/self/status`.
///
/// # Errors
/// The file cannot be read (not Linux) or has no parsable list.
pub fn allowed_cpus() -> Result<CpuSet, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .ok_or("no Cpus_allowed_list in /proc/self/status")?;
    CpuSet::parse(line).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> CpuSet {
        CpuSet::parse(text).unwrap()
    }

    #[test]
    fn a_core_list_parses_numbers_and_ranges_and_prints_folded() {
        let s = set(" 0-3, 6,8-9 ,3 ");
        assert_eq!(s.cores().collect::<Vec<_>>(), vec![0, 1, 2, 3, 6, 8, 9]);
        assert_eq!(s.to_string(), "0-3,6,8-9");
        assert_eq!(set("5").to_string(), "5");
    }

    #[test]
    fn bad_core_lists_are_refused_by_kind() {
        assert_eq!(CpuSet::parse(""), Err(AffinityError::Empty));
        assert_eq!(CpuSet::parse(" , "), Err(AffinityError::Empty));
        for bad in ["a", "3-1", "1-", "-2", "1-2-3", "1;2"] {
            assert_eq!(
                CpuSet::parse(bad),
                Err(AffinityError::Malformed(bad.to_string())),
                "{bad}"
            );
        }
        assert_eq!(
            CpuSet::parse("0-9000"),
            Err(AffinityError::OutOfRange(9000))
        );
    }

    #[test]
    fn fewer_than_four_cores_pin_nothing() {
        let p = Placement::plan(&set("0-2"), None, None).unwrap();
        assert_eq!((p.server, p.driver), (None, None));
        assert!(!Placement::plan(&set("0-1"), None, None).unwrap().is_split());
    }

    #[test]
    fn four_or_more_cores_give_the_server_the_first_half_rounded_up() {
        let p = Placement::plan(&set("0-3"), None, None).unwrap();
        assert_eq!(p.server, Some(set("0-1")));
        assert_eq!(p.driver, Some(set("2-3")));
        let p = Placement::plan(&set("2,4-8"), None, None).unwrap();
        assert_eq!(p.server, Some(set("2,4-5")));
        assert_eq!(p.driver, Some(set("6-8")));
        let p = Placement::plan(&set("0-4"), None, None).unwrap();
        assert_eq!((p.server.unwrap().len(), p.driver.unwrap().len()), (3, 2));
    }

    #[test]
    fn asked_cores_are_used_as_given_even_on_a_small_machine() {
        let p = Placement::plan(&set("0-1"), Some(set("1")), None).unwrap();
        assert_eq!((p.server, p.driver), (Some(set("1")), None));
        let p = Placement::plan(&set("0-7"), Some(set("0-5")), Some(set("6-7"))).unwrap();
        assert_eq!(p.driver, Some(set("6-7")));
    }

    #[test]
    fn asked_cores_outside_the_usable_ones_or_shared_are_refused() {
        assert!(matches!(
            Placement::plan(&set("0-3"), None, Some(set("3-4"))),
            Err(AffinityError::NotAllowed { role: "driver", .. })
        ));
        assert!(matches!(
            Placement::plan(&set("0-3"), Some(set("0-2")), Some(set("2-3"))),
            Err(AffinityError::Overlap { .. })
        ));
    }

    #[test]
    fn this_process_has_usable_cores() {
        let allowed = allowed_cpus().unwrap();
        assert!(!allowed.is_empty());
        assert!(allowed.len() >= std::thread::available_parallelism().unwrap().get());
    }
}
