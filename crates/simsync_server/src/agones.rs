//! The Agones mode ([fleets](crate::rules#fleets)): a client of the Agones SDK sidecar's HTTP
//! API, which runs beside the game server in every GameServer pod, and an adapter that drives
//! it from a background thread.
//!
//! What the server says to the sidecar, in the order it says it:
//! - `POST /ready` once the UDP socket is bound ([`AgonesAdapter::ready`]; retried until the
//!   sidecar accepts it). Calling it again later (for example when an Allocated GameServer's
//!   last room ended) asks Agones to put the GameServer back in the Ready pool.
//! - `POST /health` every [`AgonesConfig::health_interval`], but only while the main loop's
//!   [`Heartbeat`] is alive within [`LIVENESS_TIMEOUT`]: a stalled loop stops the pings, and
//!   Agones, missing them, marks the GameServer Unhealthy and replaces it.
//! - The room and player counts as the beta Counters and Lists (`PATCH
//!   /v1beta1/counters/rooms`, `PATCH /v1beta1/counters/players`, `PATCH /v1beta1/lists/rooms`),
//!   each only when it changed ([`AgonesAdapter::report`]).
//! - `POST /shutdown` after the drain ([`AgonesAdapter::shutdown`]).
//!
//! [`AgonesSdk`] makes single blocking calls (also `GET /gameserver`, whose address and ports
//! the server uses as its public address when none is configured).
//!
//! The requests are those of Agones' SDK REST reference (the `sdk` and `beta` OpenAPI
//! definitions of the sidecar's gateway, Agones 1.4x): `Content-Type: application/json` and a
//! body of `{}` for ready, health and shutdown (the sidecar refuses a health ping without a
//! body); a counter update is `{"count": "N"}` with an optional `"capacity": "M"` (64-bit
//! integers are JSON strings in the protobuf JSON mapping the gateway speaks); a list update is
//! `{"values": [...]}`, which replaces the list's values (the gateway derives the update mask
//! from the fields present, so the capacity is left alone). The gateway answers with the
//! protobuf field names (`status`, `address`, `ports[].name`, `ports[].port`, `state`). The
//! integration tests replay that documented exchange against a fake sidecar that checks every
//! request; no real sidecar runs in the tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::{Heartbeat, LIVENESS_TIMEOUT};

/// The sidecar's HTTP address when nothing says otherwise (Agones' default HTTP port, 9358, on
/// the pod's loopback). Private: the config module exports the same default.
const DEFAULT_AGONES_URL: &str = "http://127.0.0.1:9358";

/// How often the adapter pings `/health` by default.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(2);

/// How long one call to the sidecar may take (connect, send, answer) before it fails.
pub const AGONES_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The environment variable in which Agones gives the sidecar's HTTP port to the game server's
/// container.
pub const AGONES_PORT_ENV: &str = "AGONES_SDK_HTTP_PORT";

/// Where the sidecar is and how often to ping it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgonesConfig {
    /// The sidecar's base URL, plain HTTP without a trailing slash (e.g.
    /// `http://127.0.0.1:9358`).
    pub url: String,
    /// The time between two health pings (Agones' `health.periodSeconds` should be at least
    /// twice this).
    pub health_interval: Duration,
}

impl Default for AgonesConfig {
    /// `http://127.0.0.1:9358` (the sidecar's default HTTP port on loopback), pinged every
    /// [`DEFAULT_HEALTH_INTERVAL`].
    fn default() -> Self {
        Self {
            url: DEFAULT_AGONES_URL.to_owned(),
            health_interval: DEFAULT_HEALTH_INTERVAL,
        }
    }
}

impl AgonesConfig {
    /// The config for `url` (the `--agones-url` flag) or, when it is `None`, for the port in
    /// [`AGONES_PORT_ENV`] on `127.0.0.1`, or else `http://127.0.0.1:9358`; health every
    /// [`DEFAULT_HEALTH_INTERVAL`].
    pub fn from_env(url: Option<String>) -> AgonesConfig {
        let port = std::env::var(AGONES_PORT_ENV).ok();
        AgonesConfig {
            url: sdk_url(url, port.as_deref()),
            ..AgonesConfig::default()
        }
    }
}

/// The sidecar's base URL: `url` without trailing slashes when given, else the loopback URL of
/// `port_env` when it holds a port number, else [`DEFAULT_AGONES_URL`].
fn sdk_url(url: Option<String>, port_env: Option<&str>) -> String {
    if let Some(url) = url.filter(|u| !u.trim().is_empty()) {
        return url.trim().trim_end_matches('/').to_owned();
    }
    match port_env.and_then(|p| p.trim().parse::<u16>().ok()) {
        Some(port) => format!("http://127.0.0.1:{port}"),
        None => DEFAULT_AGONES_URL.to_owned(),
    }
}

/// Why a call to the sidecar failed. Nothing the sidecar answers makes the server panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgonesError {
    /// The sidecar answered with an HTTP status outside 2xx (e.g. 500 when a counter does not
    /// exist in the GameServer spec, or a count is above its capacity).
    #[error("the Agones sidecar answered {method} {path} with HTTP {status}")]
    Status {
        /// The HTTP method of the call.
        method: &'static str,
        /// The path of the call (e.g. `/health`).
        path: String,
        /// The HTTP status code.
        status: u16,
    },
    /// The sidecar could not be reached or the connection broke (refused, timed out, bad URL).
    #[error("could not reach the Agones sidecar for {method} {path}: {message}")]
    Transport {
        /// The HTTP method of the call.
        method: &'static str,
        /// The path of the call.
        path: String,
        /// The HTTP client's error, as text.
        message: String,
    },
    /// The sidecar answered 2xx with a body that is not the documented JSON.
    #[error("the Agones sidecar's answer to {method} {path} is not the expected JSON: {message}")]
    BadAnswer {
        /// The HTTP method of the call.
        method: &'static str,
        /// The path of the call.
        path: String,
        /// What is wrong with the body.
        message: String,
    },
}

/// An HTTP method the adapter uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Post,
    Patch,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Patch => "PATCH",
        }
    }
}

/// One call to the sidecar as plain data: method, path (from the base URL) and JSON body
/// (empty for `GET`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct SidecarCall {
    method: Method,
    path: String,
    body: String,
}

impl SidecarCall {
    fn post(path: &str) -> Self {
        Self {
            method: Method::Post,
            path: path.to_owned(),
            body: "{}".to_owned(),
        }
    }

    fn ready() -> Self {
        Self::post("/ready")
    }

    fn health() -> Self {
        Self::post("/health")
    }

    fn shutdown() -> Self {
        Self::post("/shutdown")
    }

    fn game_server() -> Self {
        Self {
            method: Method::Get,
            path: "/gameserver".to_owned(),
            body: String::new(),
        }
    }

    /// `PATCH /v1beta1/counters/{key}` setting the count (and the capacity when given), each
    /// an int64 as its protobuf JSON form: a decimal string.
    fn counter(key: &str, count: u64, capacity: Option<u64>) -> Self {
        let mut body = serde_json::Map::new();
        body.insert("count".to_owned(), count.to_string().into());
        if let Some(capacity) = capacity {
            body.insert("capacity".to_owned(), capacity.to_string().into());
        }
        Self {
            method: Method::Patch,
            path: format!("/v1beta1/counters/{}", path_segment(key)),
            body: serde_json::Value::Object(body).to_string(),
        }
    }

    /// `PATCH /v1beta1/lists/{key}` replacing the list's values.
    fn list(key: &str, values: &[String]) -> Self {
        Self {
            method: Method::Patch,
            path: format!("/v1beta1/lists/{}", path_segment(key)),
            body: serde_json::json!({ "values": values }).to_string(),
        }
    }
}

/// `key` as one URL path segment: unreserved characters as they are, the rest percent-encoded.
fn path_segment(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// What `GET /gameserver` says of this GameServer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GameServerInfo {
    /// `status.address`: the address of the node the GameServer runs on, as clients reach it
    /// (`None` when empty, e.g. before the pod is scheduled).
    pub address: Option<String>,
    /// `status.ports`: each port's name and the host port Agones gave it (the port clients
    /// connect to, not the container port).
    pub ports: Vec<(String, u16)>,
    /// `status.state`: `Scheduled`, `RequestReady`, `Ready`, `Allocated`, `Shutdown`, ...
    /// (`None` when empty).
    pub state: Option<String>,
}

impl GameServerInfo {
    /// The address clients reach: [`address`](Self::address) as an IP address and the port
    /// named `port_name` (or the first port when none has that name). `None` without an
    /// address or a port, or when the address is a host name rather than an IP address.
    pub fn public_addr(&self, port_name: &str) -> Option<std::net::SocketAddr> {
        let ip: std::net::IpAddr = self.address.as_deref()?.parse().ok()?;
        let port = self
            .ports
            .iter()
            .find(|(name, _)| name == port_name)
            .or_else(|| self.ports.first())?
            .1;
        Some(std::net::SocketAddr::new(ip, port))
    }
}

#[derive(Deserialize)]
struct GameServerJson {
    #[serde(default)]
    status: Option<StatusJson>,
}

#[derive(Deserialize, Default)]
struct StatusJson {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    ports: Option<Vec<PortJson>>,
}

#[derive(Deserialize)]
struct PortJson {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    port: serde_json::Value,
}

/// Parses the sidecar's `GET /gameserver` JSON. Missing or null fields are empty; a body that
/// is not a JSON object, or a port that is not a number in 0..=65535, is an error (the text).
fn parse_game_server(body: &str) -> Result<GameServerInfo, String> {
    let value: serde_json::Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
    if !value.is_object() {
        return Err(format!("a GameServer is a JSON object, not {value}"));
    }
    let json: GameServerJson = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let status = json.status.unwrap_or_default();
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let mut ports = Vec::new();
    for port in status.ports.unwrap_or_default() {
        let number = match &port.port {
            serde_json::Value::Number(n) => n.as_u64(),
            serde_json::Value::String(s) => s.parse::<u64>().ok(),
            _ => None,
        };
        let number = number
            .and_then(|n| u16::try_from(n).ok())
            .ok_or_else(|| format!("port {} is not a port number", port.port))?;
        ports.push((port.name.unwrap_or_default(), number));
    }
    Ok(GameServerInfo {
        address: non_empty(status.address),
        ports,
        state: non_empty(status.state),
    })
}

/// A blocking client of the sidecar: each method is one HTTP call, answered or failed within
/// [`AGONES_REQUEST_TIMEOUT`]. Proxy environment variables are ignored (the sidecar is on
/// loopback).
#[derive(Debug, Clone)]
pub struct AgonesSdk {
    agent: ureq::Agent,
    base: String,
}

impl AgonesSdk {
    /// A client of the sidecar at `config.url`.
    pub fn new(config: &AgonesConfig) -> Self {
        let agent_config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(AGONES_REQUEST_TIMEOUT))
            .proxy(None)
            .build();
        Self {
            agent: ureq::Agent::new_with_config(agent_config),
            base: config.url.trim_end_matches('/').to_owned(),
        }
    }

    /// `POST /ready`: the server takes players (Agones moves the GameServer to Ready).
    ///
    /// # Errors
    ///
    /// [`AgonesError::Transport`] or [`AgonesError::Status`].
    pub fn ready(&self) -> Result<(), AgonesError> {
        self.send(&SidecarCall::ready()).map(drop)
    }

    /// `POST /health`: one health ping.
    ///
    /// # Errors
    ///
    /// As [`Self::ready`].
    pub fn health(&self) -> Result<(), AgonesError> {
        self.send(&SidecarCall::health()).map(drop)
    }

    /// `POST /shutdown`: the server is done (Agones shuts the GameServer down).
    ///
    /// # Errors
    ///
    /// As [`Self::ready`].
    pub fn shutdown(&self) -> Result<(), AgonesError> {
        self.send(&SidecarCall::shutdown()).map(drop)
    }

    /// `GET /gameserver`: the GameServer's address, ports and state.
    ///
    /// # Errors
    ///
    /// As [`Self::ready`], and [`AgonesError::BadAnswer`] when the body is not the
    /// GameServer JSON.
    pub fn game_server(&self) -> Result<GameServerInfo, AgonesError> {
        let call = SidecarCall::game_server();
        let body = self.send(&call)?;
        parse_game_server(&body).map_err(|message| AgonesError::BadAnswer {
            method: call.method.as_str(),
            path: call.path,
            message,
        })
    }

    /// `PATCH /v1beta1/counters/{key}`: sets the counter's count, and its capacity when given.
    /// The counter must be declared in the GameServer spec, and the count must not exceed the
    /// capacity (the sidecar refuses both).
    ///
    /// # Errors
    ///
    /// As [`Self::ready`].
    pub fn set_counter(
        &self,
        key: &str,
        count: u64,
        capacity: Option<u64>,
    ) -> Result<(), AgonesError> {
        self.send(&SidecarCall::counter(key, count, capacity))
            .map(drop)
    }

    /// `PATCH /v1beta1/lists/{key}`: replaces the list's values with `values`. The list must
    /// be declared in the GameServer spec; Agones keeps at most its capacity (≤ 1000) values.
    ///
    /// # Errors
    ///
    /// As [`Self::ready`].
    pub fn set_list(&self, key: &str, values: &[String]) -> Result<(), AgonesError> {
        self.send(&SidecarCall::list(key, values)).map(drop)
    }

    /// Makes `call`; the body of a 2xx answer.
    fn send(&self, call: &SidecarCall) -> Result<String, AgonesError> {
        let url = format!("{}{}", self.base, call.path);
        let method = call.method.as_str();
        let transport = |e: ureq::Error| AgonesError::Transport {
            method,
            path: call.path.clone(),
            message: e.to_string(),
        };
        let json = "application/json";
        let mut response = match call.method {
            Method::Get => self.agent.get(&url).call(),
            Method::Post => self
                .agent
                .post(&url)
                .content_type(json)
                .send(call.body.as_str()),
            Method::Patch => self
                .agent
                .patch(&url)
                .content_type(json)
                .send(call.body.as_str()),
        }
        .map_err(transport)?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(AgonesError::Status {
                method,
                path: call.path.clone(),
                status,
            });
        }
        response.body_mut().read_to_string().map_err(transport)
    }
}

/// What the server tells Agones about its load: the totals behind the counters `rooms` and
/// `players` and the list `rooms`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgonesReport {
    /// Rooms running (counter `rooms`).
    pub rooms: u64,
    /// Clients connected, all rooms together (counter `players`).
    pub clients: u64,
    /// The running rooms' ids (list `rooms`; order does not matter, duplicates are dropped).
    pub room_ids: Vec<String>,
}

impl AgonesReport {
    /// The same report with its room ids sorted and without duplicates (the form compared and
    /// sent).
    fn normalized(mut self) -> Self {
        self.room_ids.sort();
        self.room_ids.dedup();
        self
    }
}

/// The counter and list names the adapter writes (they must be declared in the GameServer
/// spec: see `deploy/agones/fleet.yaml`).
pub const ROOMS_COUNTER: &str = "rooms";
/// The counter of connected clients.
pub const PLAYERS_COUNTER: &str = "players";
/// The list of running room ids.
pub const ROOMS_LIST: &str = "rooms";

/// One part of a report as the sidecar last accepted it, or about to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ReportPart {
    Rooms(u64),
    Players(u64),
    RoomIds(Vec<String>),
}

impl ReportPart {
    fn call(&self) -> SidecarCall {
        match self {
            ReportPart::Rooms(n) => SidecarCall::counter(ROOMS_COUNTER, *n, None),
            ReportPart::Players(n) => SidecarCall::counter(PLAYERS_COUNTER, *n, None),
            ReportPart::RoomIds(ids) => SidecarCall::list(ROOMS_LIST, ids),
        }
    }
}

/// What the sidecar has accepted so far, part by part (`None`: never sent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Reported {
    rooms: Option<u64>,
    players: Option<u64>,
    room_ids: Option<Vec<String>>,
}

impl Reported {
    /// The parts of `next` (normalized) that differ from what was accepted: what to send.
    fn changes(&self, next: &AgonesReport) -> Vec<ReportPart> {
        let mut parts = Vec::new();
        if self.rooms != Some(next.rooms) {
            parts.push(ReportPart::Rooms(next.rooms));
        }
        if self.players != Some(next.clients) {
            parts.push(ReportPart::Players(next.clients));
        }
        if self.room_ids.as_ref() != Some(&next.room_ids) {
            parts.push(ReportPart::RoomIds(next.room_ids.clone()));
        }
        parts
    }

    /// Records that the sidecar accepted `part`.
    fn accept(&mut self, part: ReportPart) {
        match part {
            ReportPart::Rooms(n) => self.rooms = Some(n),
            ReportPart::Players(n) => self.players = Some(n),
            ReportPart::RoomIds(ids) => self.room_ids = Some(ids),
        }
    }
}

/// What the adapter's thread has done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AgonesStats {
    /// HTTP calls made to the sidecar (answered or not).
    pub calls: u64,
    /// Calls that failed (no answer, or a status outside 2xx); each was logged and is retried.
    pub failures: u64,
    /// Health pings the sidecar accepted.
    pub health_sent: u64,
}

#[derive(Debug, Default)]
struct SharedStats {
    calls: AtomicU64,
    failures: AtomicU64,
    health_sent: AtomicU64,
}

impl SharedStats {
    fn snapshot(&self) -> AgonesStats {
        AgonesStats {
            calls: self.calls.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            health_sent: self.health_sent.load(Ordering::Relaxed),
        }
    }
}

/// What the main loop asks of the adapter's thread.
#[derive(Debug)]
enum Command {
    Ready,
    Report(AgonesReport),
    Shutdown,
    Stop,
}

/// How many times the thread tries `POST /shutdown` before giving up.
const SHUTDOWN_ATTEMPTS: u32 = 3;

/// The Agones mode's background thread and the handle the main loop drives it with: the loop
/// never waits on the sidecar. Dropping the adapter without [`shutdown`](Self::shutdown) stops
/// the thread without telling Agones.
#[derive(Debug)]
pub struct AgonesAdapter {
    commands: Sender<Command>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<SharedStats>,
}

impl AgonesAdapter {
    /// Starts the thread for the sidecar at `config.url`. It sends nothing until
    /// [`ready`](Self::ready); from then on it pings `/health` every
    /// `config.health_interval` while `heartbeat` is alive within [`LIVENESS_TIMEOUT`].
    pub fn spawn(config: AgonesConfig, heartbeat: Heartbeat) -> AgonesAdapter {
        let (commands, inbox) = mpsc::channel();
        let stats = Arc::new(SharedStats::default());
        let worker = Worker {
            sdk: AgonesSdk::new(&config),
            heartbeat,
            interval: config.health_interval.max(Duration::from_millis(1)),
            stats: Arc::clone(&stats),
            ready_requested: false,
            ready_pending: false,
            next_health: Instant::now(),
            report: None,
            reported: Reported::default(),
        };
        let thread = std::thread::Builder::new()
            .name("simsync-agones".to_owned())
            .spawn(move || worker.run(&inbox))
            .map_err(|e| tracing::warn!(error = %e, "could not start the Agones thread"))
            .ok();
        AgonesAdapter {
            commands,
            thread,
            stats,
        }
    }

    /// The server is bound and takes players: `POST /ready`, retried every health interval
    /// until the sidecar accepts it. Health pings start with it.
    pub fn ready(&self) {
        self.command(Command::Ready);
    }

    /// The server's current load. Sent as the counters `rooms` and `players` and the list
    /// `rooms`, each part only when it differs from what the sidecar last accepted (a failed
    /// part is retried at the next health tick); calling it every loop turn is cheap.
    pub fn report(&self, report: AgonesReport) {
        self.command(Command::Report(report));
    }

    /// What the thread has done so far.
    pub fn stats(&self) -> AgonesStats {
        self.stats.snapshot()
    }

    /// After the drain: sends the last report if it was not accepted yet, then `POST
    /// /shutdown` (up to 3 attempts), stops the thread and waits for it. The final stats.
    pub fn shutdown(mut self) -> AgonesStats {
        self.command(Command::Shutdown);
        self.join();
        self.stats.snapshot()
    }

    fn command(&self, command: Command) {
        if self.commands.send(command).is_err() {
            tracing::warn!("the Agones thread has stopped; the command is lost");
        }
    }

    fn join(&mut self) {
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!("the Agones thread panicked");
        }
    }
}

impl Drop for AgonesAdapter {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.commands.send(Command::Stop);
            self.join();
        }
    }
}

/// The adapter's thread: its state and its loop.
struct Worker {
    sdk: AgonesSdk,
    heartbeat: Heartbeat,
    interval: Duration,
    stats: Arc<SharedStats>,
    /// `ready` was asked for at least once (health pings run from then on).
    ready_requested: bool,
    /// `ready` was asked for and the sidecar has not accepted it yet.
    ready_pending: bool,
    next_health: Instant,
    /// The newest report (normalized).
    report: Option<AgonesReport>,
    reported: Reported,
}

impl Worker {
    fn run(mut self, inbox: &Receiver<Command>) {
        loop {
            let now = Instant::now();
            let tick = now >= self.next_health;
            if tick {
                self.next_health += self.interval;
                if self.next_health <= now {
                    self.next_health = now + self.interval;
                }
            }
            self.send_ready();
            if tick {
                self.send_health(now);
            }
            self.send_report();
            let wait = self.next_health.saturating_duration_since(Instant::now());
            match inbox.recv_timeout(wait) {
                Ok(Command::Ready) => {
                    self.ready_requested = true;
                    self.ready_pending = true;
                }
                Ok(Command::Report(report)) => self.report = Some(report.normalized()),
                Ok(Command::Shutdown) => return self.shut_down(),
                Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Makes one call through `f`, counting it and logging a failure.
    fn counted<T>(
        &self,
        what: &str,
        f: impl FnOnce(&AgonesSdk) -> Result<T, AgonesError>,
    ) -> Option<T> {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        match f(&self.sdk) {
            Ok(value) => Some(value),
            Err(error) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "Agones {what} failed; retried next time");
                None
            }
        }
    }

    fn send_ready(&mut self) {
        if self.ready_pending && self.counted("ready", AgonesSdk::ready).is_some() {
            self.ready_pending = false;
        }
    }

    fn send_health(&self, now: Instant) {
        if !self.ready_requested || !self.heartbeat.alive(now, LIVENESS_TIMEOUT) {
            return;
        }
        if self.counted("health", AgonesSdk::health).is_some() {
            self.stats.health_sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sends the parts of the newest report the sidecar has not accepted; stops at the first
    /// failure (the rest wait for the next tick).
    fn send_report(&mut self) {
        let Some(report) = &self.report else { return };
        for part in self.reported.changes(report) {
            let call = part.call();
            if self.counted("report", |sdk| sdk.send(&call)).is_none() {
                return;
            }
            self.reported.accept(part);
        }
    }

    fn shut_down(mut self) {
        self.send_report();
        for attempt in 1..=SHUTDOWN_ATTEMPTS {
            if self.counted("shutdown", AgonesSdk::shutdown).is_some() {
                return;
            }
            if attempt < SHUTDOWN_ATTEMPTS {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_comes_from_the_flag_then_the_pod_port_then_the_default() {
        assert_eq!(
            sdk_url(Some("http://10.0.0.1:9000/".into()), Some("9358")),
            "http://10.0.0.1:9000"
        );
        assert_eq!(sdk_url(None, Some("59358")), "http://127.0.0.1:59358");
        assert_eq!(
            sdk_url(Some("  ".into()), Some(" 1234 ")),
            "http://127.0.0.1:1234"
        );
        assert_eq!(sdk_url(None, Some("not a port")), DEFAULT_AGONES_URL);
        assert_eq!(sdk_url(None, Some("70000")), DEFAULT_AGONES_URL);
        assert_eq!(sdk_url(None, None), "http://127.0.0.1:9358");
        let config = AgonesConfig::default();
        assert_eq!(config.url, "http://127.0.0.1:9358");
        assert_eq!(config.health_interval, Duration::from_secs(2));
    }

    #[test]
    fn lifecycle_calls_post_an_empty_json_object() {
        for (call, path) in [
            (SidecarCall::ready(), "/ready"),
            (SidecarCall::health(), "/health"),
            (SidecarCall::shutdown(), "/shutdown"),
        ] {
            assert_eq!(call.method, Method::Post);
            assert_eq!(call.path, path);
            assert_eq!(call.body, "{}");
        }
        let get = SidecarCall::game_server();
        assert_eq!(
            (get.method, get.path.as_str(), get.body.as_str()),
            (Method::Get, "/gameserver", "")
        );
    }

    #[test]
    fn counter_and_list_bodies_match_the_beta_gateway() {
        let c = SidecarCall::counter("rooms", 3, None);
        assert_eq!(c.method, Method::Patch);
        assert_eq!(c.path, "/v1beta1/counters/rooms");
        assert_eq!(c.body, r#"{"count":"3"}"#);
        let c = SidecarCall::counter("players", 7, Some(64));
        assert_eq!(c.body, r#"{"capacity":"64","count":"7"}"#);
        let l = SidecarCall::list("rooms", &["1".to_owned(), "a\"b".to_owned()]);
        assert_eq!(l.method, Method::Patch);
        assert_eq!(l.path, "/v1beta1/lists/rooms");
        assert_eq!(l.body, r#"{"values":["1","a\"b"]}"#);
        assert_eq!(SidecarCall::list("rooms", &[]).body, r#"{"values":[]}"#);
        assert_eq!(path_segment("my key/1"), "my%20key%2F1");
    }

    #[test]
    fn the_game_server_json_gives_address_ports_and_state() {
        let body = r#"{"object_meta":{"name":"simsync-x"},"spec":{},"status":{"state":"Ready",
            "address":"203.0.113.7","ports":[{"name":"game","port":7312},{"name":"other","port":"7400"}],
            "players":null,"counters":{}}}"#;
        let info = parse_game_server(body).unwrap();
        assert_eq!(info.address.as_deref(), Some("203.0.113.7"));
        assert_eq!(
            info.ports,
            vec![("game".to_owned(), 7312), ("other".to_owned(), 7400)]
        );
        assert_eq!(info.state.as_deref(), Some("Ready"));
        assert_eq!(
            info.public_addr("game"),
            Some("203.0.113.7:7312".parse().unwrap())
        );
        assert_eq!(
            info.public_addr("other"),
            Some("203.0.113.7:7400".parse().unwrap())
        );
        assert_eq!(
            info.public_addr("missing"),
            Some("203.0.113.7:7312".parse().unwrap())
        );
    }

    #[test]
    fn an_empty_or_odd_game_server_json_is_empty_or_an_error_never_a_panic() {
        let empty =
            parse_game_server(r#"{"status":{"state":"","address":"","ports":null}}"#).unwrap();
        assert_eq!(empty, GameServerInfo::default());
        assert_eq!(empty.public_addr("game"), None);
        assert_eq!(parse_game_server("{}").unwrap(), GameServerInfo::default());
        assert!(parse_game_server("[]").is_err());
        assert!(parse_game_server("not json").is_err());
        let err =
            parse_game_server(r#"{"status":{"ports":[{"name":"g","port":70000}]}}"#).unwrap_err();
        assert!(err.contains("70000"), "{err}");
        assert!(parse_game_server(r#"{"status":{"ports":[{"name":"g"}]}}"#).is_err());
        let host = GameServerInfo {
            address: Some("node.example".into()),
            ports: vec![("game".into(), 7000)],
            state: None,
        };
        assert_eq!(host.public_addr("game"), None);
    }

    #[test]
    fn a_report_sends_only_its_changed_parts() {
        let mut reported = Reported::default();
        let first = AgonesReport {
            rooms: 2,
            clients: 5,
            room_ids: vec!["9".into(), "3".into(), "9".into()],
        }
        .normalized();
        assert_eq!(first.room_ids, vec!["3".to_owned(), "9".to_owned()]);
        let parts = reported.changes(&first);
        assert_eq!(
            parts,
            vec![
                ReportPart::Rooms(2),
                ReportPart::Players(5),
                ReportPart::RoomIds(vec!["3".into(), "9".into()])
            ]
        );
        for part in parts {
            reported.accept(part);
        }
        assert!(reported.changes(&first).is_empty());
        let more_players = AgonesReport {
            clients: 6,
            ..first.clone()
        };
        assert_eq!(
            reported.changes(&more_players),
            vec![ReportPart::Players(6)]
        );
        // Only accepted parts count: a failed part is still pending.
        reported.accept(ReportPart::Rooms(3));
        assert_eq!(reported.changes(&first), vec![ReportPart::Rooms(2)]);
        assert_eq!(
            ReportPart::RoomIds(vec!["3".into()]).call(),
            SidecarCall::list("rooms", &["3".to_owned()])
        );
        assert_eq!(
            ReportPart::Players(4).call().path,
            "/v1beta1/counters/players"
        );
    }
}
