//! The server's metrics ([operations](crate::rules#operations)), kept with the Prometheus
//! project's client (`prometheus-client`) and rendered in the text format for `/metrics`.
//! [`ServerMetrics`] is updated by the main loop after each turn from what the rooms and the
//! transport counted; the HTTP thread only renders the shared registry.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use simsync_net::{RemoteErrorKind, RemoteErrors};

use crate::room::{RoomState, RoomTotals, RoomTurn};
use crate::rooms::{REFUSAL_LABELS, Rooms};
use crate::token::RoomId;

/// A metric's labels.
type Labels = Vec<(&'static str, String)>;
/// A family of gauges by labels.
type Gauges = Family<Labels, Gauge>;
/// A family of counters by labels.
type Counters = Family<Labels, Counter>;

/// Every metric name the server exports (without the `_total` the text format adds to
/// counters), for the docs and the tests.
pub const METRIC_NAMES: [&str; 12] = [
    "simsync_rooms",
    "simsync_clients",
    "simsync_packets",
    "simsync_bytes",
    "simsync_refused",
    "simsync_rate_limited",
    "simsync_desyncs",
    "simsync_rejoins",
    "simsync_snapshot_bytes",
    "simsync_resent_sets",
    "simsync_relay_tick_seconds",
    "simsync_room_tick_lag_ticks",
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
    rejoins: Counter,
    snapshot_bytes: Counter,
    resent_sets: Counter,
    relay_tick: Histogram,
    tick_lag: Family<Labels, Gauge>,
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
    rooms: HashMap<RoomId, RoomTotals>,
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
        let rooms = Family::<Labels, Gauge>::default();
        let clients = Family::<Labels, Gauge>::default();
        let packets = Family::<Labels, Counter>::default();
        let bytes = Family::<Labels, Counter>::default();
        let refused = Family::<Labels, Counter>::default();
        let rate_limited = Family::<Labels, Counter>::default();
        let (desyncs, rejoins) = (Counter::default(), Counter::default());
        let (snapshot_bytes, resent_sets) = (Counter::default(), Counter::default());
        // 50 µs to ~100 ms.
        let relay_tick = Histogram::new(exponential_buckets(0.000_05, 2.0, 12));
        let tick_lag = Family::<Labels, Gauge>::default();
        register_all(
            &mut registry,
            [&rooms, &clients, &tick_lag],
            [&packets, &bytes, &refused, &rate_limited],
            [&desyncs, &rejoins, &snapshot_bytes, &resent_sets],
            &relay_tick,
        );
        for kind in ["relay", "ownership"] {
            drop(rate_limited.get_or_create(&label("kind", kind)));
        }
        Self {
            registry: Arc::new(registry),
            rooms,
            clients,
            packets,
            bytes,
            refused,
            rate_limited,
            desyncs,
            rejoins,
            snapshot_bytes,
            resent_sets,
            relay_tick,
            tick_lag,
            seen: Seen::default(),
        }
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
        }
        self.record_traffic(rooms, remote);
        self.record_rooms(rooms);
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
            if let Some(relay) = room.relay() {
                let lag = relay.acknowledged_through().map_or(0, |ack| {
                    i64::from(relay.stats().server_tick) - i64::from(ack)
                });
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
            self.tick_lag.remove(&label("room", id.0.to_string()));
        }
    }

    fn record_room_totals(&mut self, id: RoomId, kind: &'static str, now: RoomTotals) {
        let seen = self.seen.rooms.entry(id).or_default();
        add_new(&self.desyncs, &mut seen.desyncs, now.desyncs);
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
    }

    /// A relay update that ran ticks took `duration` (also recorded by [`Self::record`]).
    pub fn observe_relay_tick(&self, duration: Duration) {
        self.relay_tick.observe(duration.as_secs_f64());
    }
}

/// Registers every metric under its name and help text.
fn register_all(
    r: &mut Registry,
    [rooms, clients, tick_lag]: [&Gauges; 3],
    [packets, bytes, refused, rate_limited]: [&Counters; 4],
    [desyncs, rejoins, snapshot_bytes, resent_sets]: [&Counter; 4],
    relay_tick: &Histogram,
) {
    r.register("simsync_rooms", "Rooms by kind and state", rooms.clone());
    r.register(
        "simsync_clients",
        "Connections in rooms, by room kind",
        clients.clone(),
    );
    r.register(
        "simsync_packets",
        "Payloads by direction (in, out)",
        packets.clone(),
    );
    r.register(
        "simsync_bytes",
        "Payload bytes by direction (in, out)",
        bytes.clone(),
    );
    r.register(
        "simsync_refused",
        "Connections and datagrams refused, by reason",
        refused.clone(),
    );
    r.register(
        "simsync_rate_limited",
        "Messages dropped by a connection's rate limit, by room kind",
        rate_limited.clone(),
    );
    r.register(
        "simsync_desyncs",
        "Desync episodes judged by relay rooms (one per desynced player until it agrees again)",
        desyncs.clone(),
    );
    r.register(
        "simsync_rejoins",
        "Player slots taken again by a new connection",
        rejoins.clone(),
    );
    r.register(
        "simsync_snapshot_bytes",
        "Snapshot bytes forwarded to late joiners",
        snapshot_bytes.clone(),
    );
    r.register(
        "simsync_resent_sets",
        "Confirmed input sets resent by relay rooms",
        resent_sets.clone(),
    );
    r.register(
        "simsync_relay_tick_seconds",
        "Duration of a relay room's update that ran ticks",
        relay_tick.clone(),
    );
    r.register(
        "simsync_room_tick_lag_ticks",
        "Per relay room: ticks between its clock and what every connected player acknowledged",
        tick_lag.clone(),
    );
}

/// The registry in the text format (what `/metrics` answers).
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    if encode(&mut out, registry).is_err() {
        out.clear();
    }
    out
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
        let text = render(&metrics.registry());
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
    fn counters_add_only_what_is_new() {
        let counter = Counter::default();
        let mut seen = 0;
        add_new(&counter, &mut seen, 5);
        add_new(&counter, &mut seen, 5);
        add_new(&counter, &mut seen, 8);
        assert_eq!(counter.get(), 8);
    }
}
