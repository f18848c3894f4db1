//! The operations and admin HTTP port ([operations](crate::rules#operations)), served by
//! `tiny_http` on its own thread. `/healthz`, `/readyz` and `/metrics` are answered there from
//! shared atomics and the metrics registry (a stalled main loop never stalls a probe, and
//! `/healthz` reports the stall); admin requests are checked there ([`admin::parse`]) and
//! carried out by the main loop, which is sent each command with a channel for its answer.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;

use crate::admin::{self, AdminCommand, AdminError, AdminRequest, AdminResponse};
use crate::health::{Heartbeat, LIVENESS_TIMEOUT, Readiness};
use crate::metrics::render;

/// How long an admin request waits for the main loop's answer before answering 503.
pub const ADMIN_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// An admin command for the main loop and where to send its answer.
pub type AdminTicket = (AdminCommand, Sender<Result<AdminResponse, AdminError>>);

/// What the HTTP thread reads.
#[derive(Clone)]
pub struct OpsShared {
    /// The main loop's heartbeat.
    pub heartbeat: Heartbeat,
    /// Readiness flags.
    pub readiness: Readiness,
    /// The metrics.
    pub registry: Arc<Registry>,
    /// The admin token.
    pub admin_token: String,
    /// Commands for the main loop.
    pub admin: Sender<AdminTicket>,
}

/// The running HTTP thread.
pub struct OpsServer {
    server: Arc<tiny_http::Server>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for OpsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpsServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl OpsServer {
    /// Binds `addr` and serves on a new thread; returns the server and the receiving end of
    /// the admin commands (for the main loop).
    ///
    /// # Errors
    ///
    /// The bind's error, as text.
    pub fn start(
        addr: SocketAddr,
        shared: impl FnOnce(Sender<AdminTicket>) -> OpsShared,
    ) -> Result<(Self, Receiver<AdminTicket>), String> {
        let server = tiny_http::Server::http(addr).map_err(|e| e.to_string())?;
        let bound = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| "the HTTP server is not on an IP address".to_string())?;
        let server = Arc::new(server);
        let (tx, rx) = channel();
        let shared = shared(tx);
        let serving = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("simsync-http".into())
            .spawn(move || {
                for request in serving.incoming_requests() {
                    handle(request, &shared);
                }
            })
            .map_err(|e| e.to_string())?;
        Ok((
            Self {
                server,
                addr: bound,
                thread: Some(thread),
            },
            rx,
        ))
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and joins the thread.
    pub fn stop(mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for OpsServer {
    fn drop(&mut self) {
        self.server.unblock();
    }
}

/// Answers one request.
fn handle(mut request: tiny_http::Request, shared: &OpsShared) {
    let path = request.url().split('?').next().unwrap_or("").to_string();
    let method = request.method().as_str().to_string();
    let (status, content_type, body) = match (method.as_str(), path.as_str()) {
        ("GET", "/healthz") => healthz(&shared.heartbeat),
        ("GET", "/readyz") => match shared.readiness.check() {
            Ok(()) => (200, "text/plain", "ready\n".to_string()),
            Err(reason) => (503, "text/plain", format!("not ready: {reason}\n")),
        },
        ("GET", "/metrics") => (
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            render(&shared.registry),
        ),
        _ if admin::is_admin_path(&path) => {
            let answer = admin_answer(&mut request, method, path, shared);
            (answer.status, "application/json", answer.body.to_string())
        }
        _ => {
            let error = AdminError::NoSuchPath(path);
            (404, "application/json", error.body().to_string())
        }
    };
    let header = tiny_http::Header::from_bytes("Content-Type", content_type)
        .expect("a static header is valid");
    let response = tiny_http::Response::from_string(body)
        .with_status_code(status)
        .with_header(header);
    if let Err(error) = request.respond(response) {
        tracing::debug!("http: answer not sent: {error}");
    }
}

fn healthz(heartbeat: &Heartbeat) -> (u16, &'static str, String) {
    let since = heartbeat.since_last(Instant::now());
    if since <= LIVENESS_TIMEOUT {
        (200, "text/plain", "ok\n".to_string())
    } else {
        (
            503,
            "text/plain",
            format!("main loop stalled for {} ms\n", since.as_millis()),
        )
    }
}

fn admin_answer(
    request: &mut tiny_http::Request,
    method: String,
    path: String,
    shared: &OpsShared,
) -> AdminResponse {
    let authorization = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str().to_string());
    let mut body = Vec::new();
    let limit = u64::try_from(admin::MAX_BODY_BYTES + 1).unwrap_or(u64::MAX);
    if request
        .as_reader()
        .take(limit)
        .read_to_end(&mut body)
        .is_err()
    {
        return AdminError::BadRequest("the body could not be read".into()).into();
    }
    let parsed = admin::parse(
        &AdminRequest {
            method,
            path,
            authorization,
            body,
        },
        &shared.admin_token,
    );
    let command = match parsed {
        Ok(command) => command,
        Err(error) => return error.into(),
    };
    let (tx, rx) = channel();
    if shared.admin.send((command, tx)).is_err() {
        return AdminError::Busy.into();
    }
    match rx.recv_timeout(ADMIN_ANSWER_TIMEOUT) {
        Ok(Ok(answer)) => answer,
        Ok(Err(error)) => error.into(),
        Err(_) => AdminError::Busy.into(),
    }
}
