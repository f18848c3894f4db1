//! What a load run reads from outside the clients: the server's `/metrics` text
//! ([`Metrics`], [`Histogram`] with its quantiles), a process's CPU time
//! ([`read_cpu_ticks`], [`read_thread_ticks`]), the kernel's UDP counters ([`UdpCounters`]),
//! and the spread of a measure over clients ([`Spread`]). Pure parsing, plus the `/proc` reads.

use std::collections::BTreeMap;
use std::io;

use serde::Serialize;

/// One sample of the Prometheus text format: a name, its labels and a value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name (with `_total`, `_bucket`... as written).
    pub name: String,
    /// The labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// The value (`+Inf` and `-Inf` read as infinities).
    pub value: f64,
}

/// Every sample of a `/metrics` answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// The samples, in the order written.
    pub samples: Vec<Sample>,
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        other => other.parse().ok(),
    }
}

/// `a="x",b="y"` as pairs (`\"` and `\\` unescaped); `None` if malformed.
fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut labels = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => value.push(chars.next()?.1),
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_string(), value));
        rest = after[end + 1..].trim_start_matches(',').trim();
    }
    Some(labels)
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = line.rfind('}')?;
            let labels = parse_labels(&line[open + 1..close])?;
            (&line[..open], labels, &line[close + 1..])
        }
        None => {
            let (name, rest) = line.split_once(char::is_whitespace)?;
            (name, Vec::new(), rest)
        }
    };
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Sample {
        name: name.trim().to_string(),
        labels,
        value,
    })
}

impl Metrics {
    /// Reads the Prometheus text format; comments and lines that do not parse are skipped.
    pub fn parse(text: &str) -> Self {
        Self {
            samples: text.lines().filter_map(parse_line).collect(),
        }
    }

    /// The value of `name` with every label of `labels` (others may be present), summed over
    /// the samples that match; 0 if none does.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|s| s.value)
            .sum()
    }

    /// The values of `name` by the value of its label `label` (samples without it skipped).
    pub fn by_label(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for sample in self.samples.iter().filter(|s| s.name == name) {
            if let Some((_, value)) = sample.labels.iter().find(|(k, _)| k == label) {
                *out.entry(value.clone()).or_insert(0.0) += sample.value;
            }
        }
        out
    }

    /// The histogram `name` (its `_bucket`, `_count` and `_sum` samples), if written.
    pub fn histogram(&self, name: &str) -> Option<Histogram> {
        let bucket_name = format!("{name}_bucket");
        let mut buckets: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|s| s.name == bucket_name)
            .filter_map(|s| {
                let (_, le) = s.labels.iter().find(|(k, _)| k == "le")?;
                Some((parse_value(le)?, s.value))
            })
            .collect();
        if buckets.is_empty() {
            return None;
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        // A labelled family writes one series per label set: the same bound's counts add up.
        buckets.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 += later.1;
            }
            same
        });
        Some(Histogram {
            buckets,
            count: self.sum(&format!("{name}_count"), &[]),
            sum: self.sum(&format!("{name}_sum"), &[]),
        })
    }
}

/// A Prometheus histogram: cumulative counts by upper bound, the count and the sum.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Histogram {
    /// `(upper bound, observations ≤ it)`, bounds increasing, the last `+Inf`.
    pub buckets: Vec<(f64, f64)>,
    /// Observations.
    pub count: f64,
    /// Their sum.
    pub sum: f64,
}

impl Histogram {
    /// The observations made between `earlier` and `self` (same buckets).
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let before = |bound: f64| {
            earlier
                .buckets
                .iter()
                .find(|(b, _)| *b == bound)
                .map_or(0.0, |(_, c)| *c)
        };
        Histogram {
            buckets: self
                .buckets
                .iter()
                .map(|(bound, count)| (*bound, (count - before(*bound)).max(0.0)))
                .collect(),
            count: (self.count - earlier.count).max(0.0),
            sum: (self.sum - earlier.sum).max(0.0),
        }
    }

    /// The `q` quantile (0 to 1) as Prometheus' `histogram_quantile` estimates it: linear
    /// within the bucket it falls in (from 0 for the first); in the `+Inf` bucket, the last
    /// finite bound. `None` without observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last()?.1;
        if total <= 0.0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total;
        let mut lower = (0.0, 0.0);
        for (bound, count) in &self.buckets {
            if *count >= rank {
                if bound.is_infinite() {
                    return Some(lower.0);
                }
                let width = count - lower.1;
                let within = if width > 0.0 {
                    (rank - lower.1) / width
                } else {
                    1.0
                };
                return Some(lower.0 + (bound - lower.0) * within);
            }
            lower = (*bound, *count);
        }
        Some(lower.0)
    }

    /// The mean observation, if any.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// The share of observations above `bound` (a bucket bound), if any.
    pub fn share_above(&self, bound: f64) -> Option<f64> {
        let total = self.buckets.last()?.1;
        let at_most = self.buckets.iter().find(|(b, _)| *b >= bound)?.1;
        (total > 0.0).then(|| (total - at_most) / total)
    }
}

/// The CPU time (user + system, in clock ticks) of a `/proc/<pid>/stat` line: its 14th and
/// 15th fields, counted after the command name's closing parenthesis.
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state): utime is field 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The command name of a `/proc/<pid>/stat` line (between the parentheses).
pub fn parse_stat_name(stat: &str) -> Option<&str> {
    Some(&stat[stat.find('(')? + 1..stat.rfind(')')?])
}

/// Process `pid`'s CPU time so far (every thread, user + system), in clock ticks.
///
/// # Errors
///
/// When `/proc/<pid>/stat` cannot be read or parsed.
pub fn read_cpu_ticks(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat_ticks(&stat).ok_or_else(|| io::Error::other("unreadable /proc stat"))
}

/// Each thread of process `pid`: its id, name and CPU time so far in clock ticks.
///
/// # Errors
///
/// When `/proc/<pid>/task` cannot be listed.
pub fn read_thread_ticks(pid: u32) -> io::Result<Vec<(u32, String, u64)>> {
    let mut threads = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let entry = entry?;
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let (Some(name), Some(ticks)) = (parse_stat_name(&stat), parse_stat_ticks(&stat)) {
            threads.push((tid, name.to_string(), ticks));
        }
    }
    threads.sort_unstable();
    Ok(threads)
}

/// The whole machine's CPU time so far, in clock ticks, from the `cpu` line of `/proc/stat`:
/// `(busy, all)` — busy is everything but idle and iowait.
pub fn parse_machine_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let all: u64 = values.iter().sum();
    let idle = values.get(3)? + values.get(4).copied().unwrap_or(0);
    Some((all - idle, all))
}

/// [`parse_machine_ticks`] of `/proc/stat`.
///
/// # Errors
///
/// When `/proc/stat` cannot be read or parsed.
pub fn read_machine_ticks() -> io::Result<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat")?;
    parse_machine_ticks(&text).ok_or_else(|| io::Error::other("no cpu line in /proc/stat"))
}

/// The kernel's UDP counters (`Udp:` of `/proc/net/snmp`; for the whole network namespace).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UdpCounters {
    /// Datagrams delivered to sockets.
    pub in_datagrams: u64,
    /// Datagrams dropped before a socket read them (receive errors).
    pub in_errors: u64,
    /// Of those, dropped because a socket's receive buffer was full.
    pub rcvbuf_errors: u64,
    /// Datagrams not sent because a send buffer was full.
    pub sndbuf_errors: u64,
}

impl UdpCounters {
    /// Reads the `Udp:` header and value lines of `/proc/net/snmp`'s text.
    pub fn parse(snmp: &str) -> Option<Self> {
        let mut lines = snmp.lines().filter(|l| l.starts_with("Udp:"));
        let names: Vec<&str> = lines.next()?.split_whitespace().collect();
        let values: Vec<&str> = lines.next()?.split_whitespace().collect();
        let get = |name: &str| -> Option<u64> {
            let i = names.iter().position(|n| *n == name)?;
            values.get(i)?.parse().ok()
        };
        Some(Self {
            in_datagrams: get("InDatagrams")?,
            in_errors: get("InErrors")?,
            rcvbuf_errors: get("RcvbufErrors")?,
            sndbuf_errors: get("SndbufErrors")?,
        })
    }

    /// Reads `/proc/net/snmp`.
    ///
    /// # Errors
    ///
    /// When it cannot be read or has no UDP counters.
    pub fn read() -> io::Result<Self> {
        let text = std::fs::read_to_string("/proc/net/snmp")?;
        Self::parse(&text).ok_or_else(|| io::Error::other("no Udp: lines in /proc/net/snmp"))
    }

    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &UdpCounters) -> UdpCounters {
        UdpCounters {
            in_datagrams: self.in_datagrams.saturating_sub(earlier.in_datagrams),
            in_errors: self.in_errors.saturating_sub(earlier.in_errors),
            rcvbuf_errors: self.rcvbuf_errors.saturating_sub(earlier.rcvbuf_errors),
            sndbuf_errors: self.sndbuf_errors.saturating_sub(earlier.sndbuf_errors),
        }
    }
}

/// The spread of one measure over many clients.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// The smallest value.
    pub min: f64,
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The mean.
    pub mean: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (NaNs ignored), `None` when there is none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut sorted: Vec<f64> = values.into_iter().filter(|v| !v.is_nan()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Self {
            min: sorted[0],
            median,
            mean: sorted.iter().sum::<f64>() / n as f64,
            max: sorted[n - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP simsync_refused Connections refused.
# TYPE simsync_refused counter
simsync_refused_total{reason="unknown_room"} 2
simsync_refused_total{reason="room_full"} 0
simsync_desyncs_total 0
simsync_clients{kind="relay"} 12
simsync_relay_tick_seconds_sum 0.05
simsync_relay_tick_seconds_count 100
simsync_relay_tick_seconds_bucket{le="0.0001"} 40
simsync_relay_tick_seconds_bucket{le="0.0002"} 90
simsync_relay_tick_seconds_bucket{le="0.0004"} 99
simsync_relay_tick_seconds_bucket{le="+Inf"} 100
weird_label{a="x\"y",b="z"} 1.5e3
not a sample
"#;

    #[test]
    fn samples_labels_and_sums_are_read() {
        let m = Metrics::parse(TEXT);
        assert_eq!(m.sum("simsync_refused_total", &[]), 2.0);
        assert_eq!(
            m.sum("simsync_refused_total", &[("reason", "unknown_room")]),
            2.0
        );
        assert_eq!(m.sum("simsync_clients", &[("kind", "relay")]), 12.0);
        assert_eq!(m.sum("simsync_clients", &[("kind", "ownership")]), 0.0);
        let refused = m.by_label("simsync_refused_total", "reason");
        assert_eq!(refused.get("room_full"), Some(&0.0));
        let weird = m.samples.iter().find(|s| s.name == "weird_label").unwrap();
        assert_eq!(weird.labels[0], ("a".to_string(), "x\"y".to_string()));
        assert_eq!(weird.labels[1].1, "z");
        assert_eq!(weird.value, 1500.0);
    }

    #[test]
    fn histogram_quantiles_interpolate_within_their_bucket() {
        let h = Metrics::parse(TEXT)
            .histogram("simsync_relay_tick_seconds")
            .unwrap();
        assert_eq!(h.count, 100.0);
        assert_eq!(h.buckets.len(), 4);
        // Rank 50 falls in (0.0001, 0.0002]: 10 of its 50 observations in.
        assert!((h.quantile(0.5).unwrap() - 0.00012).abs() < 1e-12);
        // Rank 99 is the top of (0.0002, 0.0004].
        assert!((h.quantile(0.99).unwrap() - 0.0004).abs() < 1e-12);
        // Rank 100 is in the +Inf bucket: the last finite bound.
        assert_eq!(h.quantile(1.0), Some(0.0004));
        assert_eq!(h.mean(), Some(0.0005));
        assert_eq!(h.share_above(0.0002), Some(0.1));
    }

    #[test]
    fn a_labelled_histogram_adds_its_series_bound_by_bound() {
        let text = "\
u_seconds_bucket{kind=\"relay\",le=\"0.001\"} 2
u_seconds_bucket{kind=\"relay\",le=\"+Inf\"} 3
u_seconds_bucket{kind=\"ownership\",le=\"0.001\"} 5
u_seconds_bucket{kind=\"ownership\",le=\"+Inf\"} 9
u_seconds_count{kind=\"relay\"} 3
u_seconds_count{kind=\"ownership\"} 9
u_seconds_sum{kind=\"relay\"} 0.01
u_seconds_sum{kind=\"ownership\"} 0.02
";
        let h = Metrics::parse(text).histogram("u_seconds").unwrap();
        assert_eq!(h.buckets, vec![(0.001, 7.0), (f64::INFINITY, 12.0)]);
        assert_eq!(h.count, 12.0);
        assert!((h.sum - 0.03).abs() < 1e-12);
    }

    #[test]
    fn a_histogram_delta_counts_only_the_new_observations() {
        let earlier = Histogram {
            buckets: vec![(0.001, 10.0), (0.002, 10.0), (f64::INFINITY, 10.0)],
            count: 10.0,
            sum: 0.005,
        };
        let later = Histogram {
            buckets: vec![(0.001, 10.0), (0.002, 30.0), (f64::INFINITY, 30.0)],
            count: 30.0,
            sum: 0.035,
        };
        let delta = later.since(&earlier);
        assert_eq!(delta.buckets[0].1, 0.0);
        assert_eq!(delta.buckets[1].1, 20.0);
        assert!((delta.quantile(0.5).unwrap() - 0.0015).abs() < 1e-12);
        assert!((delta.mean().unwrap() - 0.0015).abs() < 1e-12);
        assert_eq!(
            Histogram {
                buckets: vec![],
                count: 0.0,
                sum: 0.0
            }
            .quantile(0.5),
            None
        );
    }

    #[test]
    fn proc_stat_lines_give_cpu_ticks_and_names() {
        let line = "4242 (simsync server) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    1234 567 0 0 20 0 3 0 99 0 0";
        assert_eq!(parse_stat_ticks(line), Some(1234 + 567));
        assert_eq!(parse_stat_name(line), Some("simsync server"));
        assert_eq!(parse_stat_ticks("garbage"), None);
        let me = read_cpu_ticks(std::process::id());
        assert!(me.is_ok(), "{me:?}");
        assert!(!read_thread_ticks(std::process::id()).unwrap().is_empty());
    }

    #[test]
    fn the_machine_cpu_line_gives_busy_and_all_ticks() {
        let stat = "cpu  100 5 30 800 20 0 7 0 0 0\ncpu0 50 2 15 400 10 0 3 0 0 0\n";
        assert_eq!(parse_machine_ticks(stat), Some((142, 962)));
        assert_eq!(parse_machine_ticks("intr 1 2"), None);
        assert!(read_machine_ticks().is_ok());
    }

    #[test]
    fn udp_counters_are_read_by_name() {
        let snmp = "Ip: Forwarding\nIp: 1\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    Udp: 100 1 7 90 5 2\n";
        let c = UdpCounters::parse(snmp).unwrap();
        assert_eq!(
            c,
            UdpCounters {
                in_datagrams: 100,
                in_errors: 7,
                rcvbuf_errors: 5,
                sndbuf_errors: 2
            }
        );
        let earlier = UdpCounters {
            in_datagrams: 40,
            ..c
        };
        assert_eq!(c.since(&earlier).in_datagrams, 60);
        assert_eq!(c.since(&earlier).rcvbuf_errors, 0);
    }

    #[test]
    fn spreads_have_min_median_mean_and_max() {
        let s = Spread::of([3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.min, s.median, s.mean, s.max), (1.0, 2.5, 4.0, 10.0));
        assert_eq!(Spread::of([5.0, f64::NAN]).unwrap().median, 5.0);
        assert_eq!(Spread::of(Vec::<f64>::new()), None);
    }
}
