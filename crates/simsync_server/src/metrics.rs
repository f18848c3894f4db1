//! The server's metrics ([operations](crate::rules#operations)), kept with the Prometheus
//! project's client (`prometheus-client`) and rendered for `/metrics` in OpenMetrics 1.0 or in
//! the Prometheus text format 0.0.4 ([`render`], [`to_prometheus_text`]).
//! [`ServerMetrics`] is updated by the main loop after each turn from what the rooms and the
//! transport counted; the HTTP thread reads the process's numbers ([`ProcessSample`]) and
//! renders the shared registry at each scrape ([`HttpMetrics`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use simsync_net::{RejectReason, RemoteErrorKind, RemoteErrors};

use crate::metrics_format::MetricsFormat;
use crate::process::ProcessSample;

use crate::room::{RoomState, RoomTotals, RoomTurn};
use crate::rooms::{REFUSAL_LABELS, Rooms};
use crate::token::RoomId;

/// A metric's labels.
type Labels = Vec<(&'static str, String)>;
/// A family of gauges by labels.
type Gauges = Family<Labels, Gauge>;
/// A family of counters by labels.
type Counters = Family<Labels, Counter>;
/// A family of histograms by labels.
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;
/// A gauge of seconds or other fractions.
type FloatGauge = Gauge<f64, AtomicU64>;

/// `release` when the server was built without debug assertions (cargo's release profile),
/// else `debug`: the `profile` label of `simsync_build_info`.
pub fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// Buckets of the turn and update histograms, in seconds: 50 µs to ~0.4 s.
fn duration_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 14))
}

/// Every metric name the server exports (without the `_total` the text formats add to
/// counters and the `_info` of `simsync_build`), for the docs and the tests.
pub const METRIC_NAMES: [&str; 28] = [
    "simsync_rooms",
    "simsync_clients",
    "simsync_packets",
    "simsync_bytes",
    "simsync_refused",
    "simsync_rate_limited",
    "simsync_desyncs",
    "simsync_unjudged_checksums",
    "simsync_rejoins",
    "simsync_snapshot_bytes",
    "simsync_resent_sets",
    "simsync_relay_tick_seconds",
    "simsync_room_tick_lag_ticks",
    "simsync_loop_turn_seconds",
    "simsync_room_update_seconds",
    "simsync_worker_busy_seconds",
    "simsync_worker_rooms",
    "simsync_build",
    "simsync_ops_connections",
    "simsync_ops_connections_accepted",
    "simsync_ops_connections_closed",
    "process_cpu_seconds",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_threads",
    "process_start_time_seconds",
];

/// The server's metrics and the registry that renders them.
#[derive(Debug)]
pub struct ServerMetrics {
    registry: Arc<Registry>,
    rooms: Family<Labels, Gauge>,
    clients: Family<Labels, Gauge>,
    packets: Family<Labels, Counter>,
    bytes: Family<Labels, Counter>,
    refused: Family<Labels, Counter>,
    rate_limited: Family<Labels, Counter>,
    desyncs: Counter,
    unjudged_checksums: Counter,
    rejoins: Counter,
    snapshot_bytes: Counter,
    resent_sets: Counter,
    relay_tick: Histogram,
    tick_lag: Family<Labels, Gauge>,
    loop_turn: Histogram,
    room_update: Histograms,
    worker_busy: Family<Labels, Counter<f64, AtomicU64>>,
    worker_rooms: Gauges,
    http: HttpMetrics,
    /// What was already added to the counters, to add only what is new.
    seen: Seen,
}

#[derive(Debug, Default)]
struct Seen {
    packets_in: u64,
    bytes_in: u64,
    packets_out: u64,
    bytes_out: u64,
    refused: [u64; REFUSAL_LABELS.len()],
    remote: [u64; RemoteErrorKind::ALL.len()],
    /// Payloads the workers' rooms could not take.
    bad_payloads: u64,
    /// Each worker's busy time already added.
    worker_busy: Vec<Duration>,
    rooms: HashMap<RoomId, RoomTotals>,
    /// Per room: its relay's refused hellos already added, in `RejectReason::LABELS` order.
    hellos: HashMap<RoomId, [u64; RejectReason::LABELS.len()]>,
}

/// The `simsync_refused_total` reason of a hello a relay room refused: the reason's own label,
/// with the names the routing refusals use where they mean the same (`room_full`,
/// `draining`).
pub fn hello_refusal_label(reason_label: &'static str) -> &'static str {
    match reason_label {
        "server_full" => "room_full",
        "server_draining" => "draining",
        other => other,
    }
}

/// Adds `now - *seen` to `counter` and remembers `now`.
fn add_new(counter: &Counter, seen: &mut u64, now: u64) {
    if now > *seen {
        counter.inc_by(now - *seen);
    }
    *seen = now;
}

fn label(key: &'static str, value: impl Into<String>) -> Labels {
    vec![(key, value.into())]
}

/// The metric label of a transport error kind (connection requests and datagrams refused
/// before a room sees them).
pub fn remote_error_label(kind: RemoteErrorKind) -> &'static str {
    match kind {
        RemoteErrorKind::TooSmall => "too_small",
        RemoteErrorKind::Malformed => "malformed",
        RemoteErrorKind::WrongProtocol => "wrong_protocol",
        RemoteErrorKind::ExpiredToken => "expired_token",
        RemoteErrorKind::BadToken => "bad_token",
        RemoteErrorKind::UnknownSender => "unknown_sender",
        RemoteErrorKind::BadPayload => "bad_payload",
        RemoteErrorKind::SendFailed => "send_failed",
        RemoteErrorKind::ReplayedToken => "replayed_token",
        RemoteErrorKind::WrongServerAddress => "wrong_server_address",
    }
}

impl Default for ServerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerMetrics {
    /// Every metric registered, at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let mut this = Self::at_zero();
        this.register_rooms(&mut registry);
        this.register_relay(&mut registry);
        this.register_loop(&mut registry);
        this.http.register(&mut registry);
        let registry = Arc::new(registry);
        this.http.registry = Arc::clone(&registry);
        this.registry = registry;
        this.create_label_series();
        this
    }

    /// Every metric at zero, registered nowhere yet (the registry is a placeholder).
    fn at_zero() -> Self {
        Self {
            registry: Arc::new(Registry::default()),
            rooms: Gauges::default(),
            clients: Gauges::default(),
            packets: Counters::default(),
            bytes: Counters::default(),
            refused: Counters::default(),
            rate_limited: Counters::default(),
            desyncs: Counter::default(),
            unjudged_checksums: Counter::default(),
            rejoins: Counter::default(),
            snapshot_bytes: Counter::default(),
            resent_sets: Counter::default(),
            // 50 µs to ~100 ms.
            relay_tick: Histogram::new(exponential_buckets(0.000_05, 2.0, 12)),
            tick_lag: Gauges::default(),
            loop_turn: duration_buckets(),
            room_update: Histograms::new_with_constructor(duration_buckets),
            worker_busy: Family::default(),
            worker_rooms: Gauges::default(),
            http: HttpMetrics::at_zero(),
            seen: Seen::default(),
        }
    }

    /// Registers the rooms, connections and traffic metrics in `r`.
    fn register_rooms(&self, r: &mut Registry) {
        r.register(
            "simsync_rooms",
            "Rooms by kind and state",
            self.rooms.clone(),
        );
        r.register(
            "simsync_clients",
            "Connections in rooms, by room kind",
            self.clients.clone(),
        );
        r.register(
            "simsync_packets",
            "Payloads by direction (in, out)",
            self.packets.clone(),
        );
        r.register(
            "simsync_bytes",
            "Payload bytes by direction (in, out)",
            self.bytes.clone(),
        );
        r.register(
            "simsync_refused",
            "Connections and datagrams refused, by reason",
            self.refused.clone(),
        );
        r.register(
            "simsync_rate_limited",
            "Messages dropped by a connection's rate limit, by room kind",
            self.rate_limited.clone(),
        );
    }

    /// Registers the relay rooms' metrics in `r`.
    fn register_relay(&self, r: &mut Registry) {
        r.register(
            "simsync_desyncs",
            "Desync episodes judged by relay rooms (one per desynced player until it agrees again)",
            self.desyncs.clone(),
        );
        r.register(
            "simsync_rejoins",
            "Player slots taken again by a new connection",
            self.rejoins.clone(),
        );
        r.register(
            "simsync_snapshot_bytes",
            "Snapshot bytes forwarded to late joiners",
            self.snapshot_bytes.clone(),
        );
        r.register(
            "simsync_resent_sets",
            "Confirmed input sets resent by relay rooms",
            self.resent_sets.clone(),
        );
        r.register(
            "simsync_relay_tick_seconds",
            "Duration of a relay room's update that ran ticks",
            self.relay_tick.clone(),
        );
        r.register(
            "simsync_room_tick_lag_ticks",
            "Per relay room: ticks between its clock and what every connected player acknowledged",
            self.tick_lag.clone(),
        );
        r.register(
            "simsync_unjudged_checksums",
            "Checksum reports relay rooms could not judge: they came after their tick was judged \
             and its verdict was gone or had no judge",
            self.unjudged_checksums.clone(),
        );
    }

    /// Registers the main loop's timings and the build's info in `r`.
    fn register_loop(&self, r: &mut Registry) {
        r.register(
            "simsync_loop_turn_seconds",
            "Work of one main-loop turn (socket, admin commands, routing, packets out, metrics), \
             waiting for the workers and sleep excluded",
            self.loop_turn.clone(),
        );
        r.register(
            "simsync_room_update_seconds",
            "One room's update in its worker's turn, by room kind (relay, ownership); an ownership \
             room's turns without an update (nothing due) are not observed",
            self.room_update.clone(),
        );
        r.register(
            "simsync_worker_busy_seconds",
            "Time each worker thread spent running its rooms (by worker); divided by the wall \
             time, how busy the worker is",
            self.worker_busy.clone(),
        );
        r.register(
            "simsync_worker_rooms",
            "Live rooms on each worker thread",
            self.worker_rooms.clone(),
        );
        r.register(
            "simsync_build",
            "The server's build: its version and profile (release, or debug: a debug build is \
             several times slower)",
            Info::new(vec![
                ("version", env!("CARGO_PKG_VERSION").to_string()),
                ("profile", build_profile().to_string()),
            ]),
        );
    }

    /// Creates the labelled series that must show at zero before anything is counted: every
    /// refusal reason of a hello and of a participant, and each room kind's rate limits and
    /// update durations.
    fn create_label_series(&self) {
        for reason in RejectReason::LABELS {
            drop(
                self.refused
                    .get_or_create(&label("reason", hello_refusal_label(reason))),
            );
        }
        drop(
            self.refused
                .get_or_create(&label("reason", "participant_refused")),
        );
        for kind in ["relay", "ownership"] {
            drop(self.rate_limited.get_or_create(&label("kind", kind)));
            drop(self.room_update.get_or_create(&label("kind", kind)));
        }
    }

    /// The HTTP threads' handle: the registry to render, the process metrics to read at each
    /// scrape and the operations port's own.
    pub fn http(&self) -> HttpMetrics {
        self.http.clone()
    }

    /// One main-loop turn's work took `duration` (`simsync_loop_turn_seconds`).
    pub fn observe_turn(&self, duration: Duration) {
        self.loop_turn.observe(duration.as_secs_f64());
    }

    /// The registry, for the HTTP thread ([`render`]).
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// Records one loop turn: the rooms' turns, then every gauge and counter from `rooms`
    /// and the transport's `remote` errors.
    pub fn record(&mut self, rooms: &Rooms, turns: &[(RoomId, RoomTurn)], remote: &RemoteErrors) {
        for (_, turn) in turns {
            if let Some(tick) = turn.relay_tick {
                self.relay_tick.observe(tick.as_secs_f64());
            }
            if !turn.kind.is_empty() && !turn.skipped {
                self.room_update
                    .get_or_create(&label("kind", turn.kind))
                    .observe(turn.update.as_secs_f64());
            }
        }
        self.record_traffic(rooms, remote);
        self.record_rooms(rooms);
        self.record_workers(rooms);
    }

    fn record_workers(&mut self, rooms: &Rooms) {
        let loads = rooms.workers();
        self.seen.worker_busy.resize(loads.len(), Duration::ZERO);
        for (index, (load, seen)) in loads.iter().zip(&mut self.seen.worker_busy).enumerate() {
            let labels = label("worker", index.to_string());
            let new = load.busy.saturating_sub(*seen);
            self.worker_busy
                .get_or_create(&labels)
                .inc_by(new.as_secs_f64());
            *seen = load.busy.max(*seen);
            self.worker_rooms
                .get_or_create(&labels)
                .set(load.rooms as i64);
        }
    }

    fn record_traffic(&mut self, rooms: &Rooms, remote: &RemoteErrors) {
        let counters = rooms.counters();
        let seen = &mut self.seen;
        add_new(
            &self.packets.get_or_create(&label("direction", "in")),
            &mut seen.packets_in,
            counters.packets_in,
        );
        add_new(
            &self.packets.get_or_create(&label("direction", "out")),
            &mut seen.packets_out,
            counters.packets_out,
        );
        add_new(
            &self.bytes.get_or_create(&label("direction", "in")),
            &mut seen.bytes_in,
            counters.bytes_in,
        );
        add_new(
            &self.bytes.get_or_create(&label("direction", "out")),
            &mut seen.bytes_out,
            counters.bytes_out,
        );
        for (i, reason) in REFUSAL_LABELS.iter().enumerate() {
            let counter = self.refused.get_or_create(&label("reason", *reason));
            add_new(&counter, &mut seen.refused[i], counters.refused[i]);
        }
        add_new(
            &self.refused.get_or_create(&label("reason", "bad_payload")),
            &mut seen.bad_payloads,
            counters.bad_payloads,
        );
        for (i, kind) in RemoteErrorKind::ALL.into_iter().enumerate() {
            let counter = self
                .refused
                .get_or_create(&label("reason", remote_error_label(kind)));
            add_new(&counter, &mut seen.remote[i], remote.count(kind));
        }
    }

    fn record_rooms(&mut self, rooms: &Rooms) {
        let mut by_kind_state: HashMap<(&'static str, RoomState), i64> = HashMap::new();
        let mut clients: HashMap<&'static str, i64> = HashMap::new();
        let mut live = Vec::new();
        for room in rooms.rooms() {
            let kind = room.config().kind_name();
            *by_kind_state.entry((kind, room.state())).or_default() += 1;
            *clients.entry(kind).or_default() += room.clients().len() as i64;
            live.push(room.id());
            self.record_room_totals(room.id(), kind, room.totals());
            if kind == "relay" {
                let lag = room.summary().relay.as_ref().map_or(0, |r| r.tick_lag);
                self.tick_lag
                    .get_or_create(&label("room", room.id().0.to_string()))
                    .set(lag);
            }
        }
        for kind in ["relay", "ownership"] {
            for state in RoomState::ALL {
                let count = by_kind_state.get(&(kind, state)).copied().unwrap_or(0);
                let labels = vec![
                    ("kind", kind.to_string()),
                    ("state", state.name().to_string()),
                ];
                self.rooms.get_or_create(&labels).set(count);
            }
            self.clients
                .get_or_create(&label("kind", kind))
                .set(clients.get(kind).copied().unwrap_or(0));
        }
        let gone: Vec<RoomId> = self
            .seen
            .rooms
            .keys()
            .filter(|id| !live.contains(id))
            .copied()
            .collect();
        for id in gone {
            self.seen.rooms.remove(&id);
            self.seen.hellos.remove(&id);
            self.tick_lag.remove(&label("room", id.0.to_string()));
        }
    }

    fn record_room_totals(&mut self, id: RoomId, kind: &'static str, now: RoomTotals) {
        let seen = self.seen.rooms.entry(id).or_default();
        add_new(&self.desyncs, &mut seen.desyncs, now.desyncs);
        add_new(
            &self.unjudged_checksums,
            &mut seen.unjudged_checksums,
            now.unjudged_checksums,
        );
        add_new(&self.rejoins, &mut seen.rejoins, now.rejoins);
        add_new(
            &self.snapshot_bytes,
            &mut seen.snapshot_bytes,
            now.snapshot_bytes,
        );
        add_new(&self.resent_sets, &mut seen.resent_sets, now.resent_sets);
        add_new(
            &self.rate_limited.get_or_create(&label("kind", kind)),
            &mut seen.rate_limited,
            now.rate_limited,
        );
        add_new(
            &self
                .refused
                .get_or_create(&label("reason", "participant_refused")),
            &mut seen.refused_participants,
            now.refused_participants,
        );
        let hellos = self.seen.hellos.entry(id).or_default();
        for (i, (reason, count)) in now.refused_hellos.iter().enumerate() {
            let counter = self
                .refused
                .get_or_create(&label("reason", hello_refusal_label(reason)));
            add_new(&counter, &mut hellos[i], count);
        }
    }

    /// A relay update that ran ticks took `duration` (also recorded by [`Self::record`]).
    pub fn observe_relay_tick(&self, duration: Duration) {
        self.relay_tick.observe(duration.as_secs_f64());
    }
}

/// The registry in `format` (what `/metrics` answers).
pub fn render(registry: &Registry, format: MetricsFormat) -> String {
    let mut out = String::new();
    if encode(&mut out, registry).is_err() {
        out.clear();
    }
    match format {
        MetricsFormat::OpenMetrics => out,
        MetricsFormat::PrometheusText => to_prometheus_text(&out),
    }
}

/// OpenMetrics 1.0 text (as `prometheus-client` writes it) in the Prometheus text format
/// 0.0.4: a counter family is named by its samples (`x_total`), an info family becomes the
/// gauge `x_info`, `unknown` becomes `untyped`; `# UNIT` and `# EOF` lines go. Samples are
/// the same in both formats.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').map_or("", |(_, text)| text));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "histogram" | "summary" => (name.to_string(), kind),
                _ => (name.to_string(), "untyped"),
            };
            if let Some(text) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// What the HTTP threads update and read: the shared registry, the process's numbers (read
/// from `/proc` at each scrape) and the operations port's connections. Cloning shares them.
#[derive(Debug, Clone)]
pub struct HttpMetrics {
    registry: Arc<Registry>,
    cpu_seconds: Counter<f64, AtomicU64>,
    resident_bytes: Gauge,
    virtual_bytes: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    threads: Gauge,
    start_time: FloatGauge,
    ops_open: Gauge,
    ops_accepted: Counter,
    ops_closed: Counters,
}

impl HttpMetrics {
    /// Every metric at zero, registered nowhere yet (the registry is a placeholder, set by
    /// [`ServerMetrics::new`] once every metric is in).
    fn at_zero() -> Self {
        Self {
            registry: Arc::new(Registry::default()),
            cpu_seconds: Counter::default(),
            resident_bytes: Gauge::default(),
            virtual_bytes: Gauge::default(),
            open_fds: Gauge::default(),
            max_fds: Gauge::default(),
            threads: Gauge::default(),
            start_time: FloatGauge::default(),
            ops_open: Gauge::default(),
            ops_accepted: Counter::default(),
            ops_closed: Counters::default(),
        }
    }

    /// Registers the process and operations-port metrics in `registry`.
    fn register(&self, registry: &mut Registry) {
        self.register_process(registry);
        self.register_ops(registry);
    }

    /// Registers the process's metrics (read from `/proc` at each scrape) in `r`.
    fn register_process(&self, r: &mut Registry) {
        r.register(
            "process_cpu_seconds",
            "User and system CPU time of the process, in seconds",
            self.cpu_seconds.clone(),
        );
        r.register(
            "process_resident_memory_bytes",
            "Resident memory of the process, in bytes",
            self.resident_bytes.clone(),
        );
        r.register(
            "process_virtual_memory_bytes",
            "Virtual memory of the process, in bytes",
            self.virtual_bytes.clone(),
        );
        r.register(
            "process_open_fds",
            "Open file descriptors of the process (sockets included)",
            self.open_fds.clone(),
        );
        r.register(
            "process_max_fds",
            "The process's limit of open file descriptors",
            self.max_fds.clone(),
        );
        r.register(
            "process_threads",
            "Threads of the process",
            self.threads.clone(),
        );
        r.register(
            "process_start_time_seconds",
            "When the process started, in seconds since the Unix epoch",
            self.start_time.clone(),
        );
    }

    /// Registers the operations port's metrics in `r`, its closing reasons' series at zero.
    fn register_ops(&self, r: &mut Registry) {
        r.register(
            "simsync_ops_connections",
            "Open connections of the operations HTTP port",
            self.ops_open.clone(),
        );
        r.register(
            "simsync_ops_connections_accepted",
            "Connections the operations HTTP port accepted",
            self.ops_accepted.clone(),
        );
        r.register(
            "simsync_ops_connections_closed",
            "Connections the operations HTTP port closed early, by reason (evicted for a new one over the cap, timed_out)",
            self.ops_closed.clone(),
        );
        for reason in ["evicted", "timed_out"] {
            drop(self.ops_closed.get_or_create(&label("reason", reason)));
        }
    }

    /// Reads the process's numbers (where there is a `/proc`), then renders every metric in
    /// `format`.
    pub fn scrape(&self, format: MetricsFormat) -> String {
        if let Some(sample) = ProcessSample::read() {
            self.set_process(&sample);
        }
        render(&self.registry, format)
    }

    fn set_process(&self, sample: &ProcessSample) {
        let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let more = sample.cpu_seconds - self.cpu_seconds.get();
        if more > 0.0 {
            self.cpu_seconds.inc_by(more);
        }
        self.resident_bytes.set(as_i64(sample.resident_bytes));
        self.virtual_bytes.set(as_i64(sample.virtual_bytes));
        self.open_fds.set(as_i64(sample.open_fds));
        self.max_fds.set(sample.max_fds.map_or(-1, as_i64));
        self.threads.set(as_i64(sample.threads));
        self.start_time.set(sample.start_time_seconds);
    }

    /// The port has `open` connections.
    pub(crate) fn set_ops_open(&self, open: usize) {
        self.ops_open.set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// The port accepted a connection.
    pub(crate) fn ops_accepted(&self) {
        self.ops_accepted.inc();
    }

    /// The port closed a connection early for `reason` (`evicted`, `timed_out`).
    pub(crate) fn ops_closed(&self, reason: &'static str) {
        self.ops_closed
            .get_or_create(&label("reason", reason))
            .inc();
    }

    /// What the port counted so far.
    pub fn ops_connections(&self) -> OpsConnections {
        let closed = |reason| {
            self.ops_closed
                .get_or_create(&label("reason", reason))
                .get()
        };
        OpsConnections {
            open: u64::try_from(self.ops_open.get()).unwrap_or(0),
            accepted: self.ops_accepted.get(),
            evicted: closed("evicted"),
            timed_out: closed("timed_out"),
            threads: OPS_THREADS,
        }
    }
}

/// The threads the operations port runs, whatever the number of connections: the event loop
/// and the admin worker.
pub const OPS_THREADS: usize = 2;

/// What the operations port counted so far ([`DedicatedServer::ops_connections`](crate::DedicatedServer::ops_connections)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpsConnections {
    /// Connections open now.
    pub open: u64,
    /// Connections accepted since the start.
    pub accepted: u64,
    /// Connections closed for a new one (the connection cap).
    pub evicted: u64,
    /// Connections closed for a head, body or answer that took too long.
    pub timed_out: u64,
    /// The port's threads ([`OPS_THREADS`]).
    pub threads: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_name_is_rendered_with_its_labels() {
        let mut metrics = ServerMetrics::new();
        let mut rooms = Rooms::new(Duration::from_secs(30));
        let config = crate::RoomConfig::relay_for::<u8>(2, 64, 8).unwrap();
        rooms.create(Some(RoomId(5)), config).unwrap();
        metrics.record(&rooms, &[], &RemoteErrors::default());
        metrics.observe_relay_tick(Duration::from_micros(300));
        let text = render(&metrics.registry(), MetricsFormat::OpenMetrics);
        for name in METRIC_NAMES {
            assert!(text.contains(name), "{name} missing from\n{text}");
        }
        assert!(
            text.contains(r#"simsync_rooms{kind="relay",state="open"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"simsync_room_tick_lag_ticks{room="5"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"simsync_refused_total{reason="replayed_token"} 0"#),
            "{text}"
        );
        assert!(
            text.contains("simsync_relay_tick_seconds_count 1"),
            "{text}"
        );
    }

    #[test]
    fn the_prometheus_text_names_counter_and_info_families_by_their_samples() {
        let open = "# HELP a_requests Requests.\n# TYPE a_requests counter\na_requests_total{x=\"1\"} 3\n\
# HELP a_build The build.\n# TYPE a_build info\na_build_info{version=\"1\"} 1\n\
# HELP a_wait_seconds Waits.\n# TYPE a_wait_seconds histogram\n# UNIT a_wait_seconds seconds\na_wait_seconds_count 2\n\
# HELP a_thing Things.\n# TYPE a_thing unknown\na_thing 1\n# EOF\n";
        let text = to_prometheus_text(open);
        assert_eq!(
            text,
            "# HELP a_requests_total Requests.\n# TYPE a_requests_total counter\na_requests_total{x=\"1\"} 3\n\
# HELP a_build_info The build.\n# TYPE a_build_info gauge\na_build_info{version=\"1\"} 1\n\
# HELP a_wait_seconds Waits.\n# TYPE a_wait_seconds histogram\na_wait_seconds_count 2\n\
# HELP a_thing Things.\n# TYPE a_thing untyped\na_thing 1\n"
        );
    }

    #[test]
    fn process_numbers_and_the_loop_turn_reach_the_metrics() {
        let metrics = ServerMetrics::new();
        let http = metrics.http();
        http.set_process(&ProcessSample {
            cpu_seconds: 2.5,
            resident_bytes: 4096,
            threads: 3,
            open_fds: 9,
            max_fds: None,
            start_time_seconds: 1_700_000_000.5,
            ..ProcessSample::default()
        });
        // CPU time only grows: a lower reading adds nothing.
        http.set_process(&ProcessSample {
            cpu_seconds: 2.0,
            ..ProcessSample::default()
        });
        metrics.observe_turn(Duration::from_micros(120));
        let text = render(&metrics.registry(), MetricsFormat::PrometheusText);
        for line in [
            "process_cpu_seconds_total 2.5",
            "process_max_fds -1",
            "simsync_loop_turn_seconds_count 1",
            "simsync_build_info{version=",
            &format!("profile=\"{}\"", build_profile()),
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert!(!text.contains("# EOF"), "{text}");
    }

    #[test]
    fn counters_add_only_what_is_new() {
        let counter = Counter::default();
        let mut seen = 0;
        add_new(&counter, &mut seen, 5);
        add_new(&counter, &mut seen, 5);
        add_new(&counter, &mut seen, 8);
        assert_eq!(counter.get(), 8);
    }
}
