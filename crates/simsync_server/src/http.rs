//! The operations and admin HTTP port ([operations](crate::rules#operations)): one event loop
//! (`mio`) reads every connection without blocking, and one admin worker carries admin
//! requests to the main loop. No connection can hold another up: a request head must arrive
//! within [`OpsLimits::head_timeout`] and a body within [`OpsLimits::body_timeout`]; the admin
//! token is checked as soon as the head is read, before any body; at most
//! [`OpsLimits::max_connections`] are open (a new one closes the oldest that has not sent its
//! request yet); `/healthz`, `/readyz` and `/metrics` are answered on the event loop from
//! shared atomics and the metrics registry, never queued behind an admin request. Every answer
//! closes its connection.

mod wire;

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, TrySendError, channel, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::admin::{self, AdminCommand, AdminError, AdminRequest, AdminResponse};
use crate::health::{Heartbeat, LIVENESS_TIMEOUT, Readiness};
pub use crate::metrics::{HttpMetrics, OPS_THREADS, OpsConnections};
pub use crate::metrics_format::MetricsFormat;
use wire::{Answer, Head, HeadParse, parse_head};

/// How long an admin request waits for the main loop's answer before answering 503.
pub const ADMIN_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a connection that was answered stays open to read what its client still sends
/// (so that closing it does not reset the answer away), at most.
const LINGER: Duration = Duration::from_secs(1);

/// An admin command for the main loop and where to send its answer.
pub type AdminTicket = (AdminCommand, Sender<Result<AdminResponse, AdminError>>);

/// The bounds of the operations port. [`Default`] gives the server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpsLimits {
    /// Most connections open at once (64). A new connection over it closes the oldest one
    /// that has not sent its whole request (counted `evicted`), or is closed at once when
    /// every open one is being answered.
    pub max_connections: usize,
    /// Time from a connection's accept to its whole request head (5 s); then it is closed
    /// (counted `timed_out`).
    pub head_timeout: Duration,
    /// Time from the head to the whole body of an admin request (10 s).
    pub body_timeout: Duration,
    /// Time to write an answer (5 s).
    pub write_timeout: Duration,
    /// Largest request head, in bytes (16 KiB): a longer one is answered `431`.
    pub max_head_bytes: usize,
    /// Admin requests waiting for the admin worker (8): more are answered `503 busy`.
    pub admin_queue: usize,
}

impl Default for OpsLimits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            head_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(5),
            max_head_bytes: 16 * 1024,
            admin_queue: 8,
        }
    }
}

/// What the HTTP threads read.
#[derive(Clone)]
pub struct OpsShared {
    /// The main loop's heartbeat.
    pub heartbeat: Heartbeat,
    /// Readiness flags.
    pub readiness: Readiness,
    /// The metrics: the registry, the process metrics and the port's own.
    pub metrics: HttpMetrics,
    /// The admin token.
    pub admin_token: String,
    /// Commands for the main loop.
    pub admin: Sender<AdminTicket>,
    /// The port's bounds.
    pub limits: OpsLimits,
}

/// The running HTTP threads.
pub struct OpsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    metrics: HttpMetrics,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for OpsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpsServer")
            .field("addr", &self.addr)
            .finish()
    }
}

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX);

impl OpsServer {
    /// Binds `addr` and serves on new threads; returns the server and the receiving end of
    /// the admin commands (for the main loop).
    ///
    /// # Errors
    ///
    /// The bind's error, as text.
    pub fn start(
        addr: SocketAddr,
        shared: impl FnOnce(Sender<AdminTicket>) -> OpsShared,
    ) -> Result<(Self, Receiver<AdminTicket>), String> {
        let text = |e: io::Error| e.to_string();
        let mut listener = TcpListener::bind(addr).map_err(text)?;
        let bound = listener.local_addr().map_err(text)?;
        let poll = Poll::new().map_err(text)?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(text)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(text)?);
        let (tx, rx) = channel();
        let shared = shared(tx);
        let (jobs, job_rx) = sync_channel(shared.limits.admin_queue.max(1));
        let (answer_tx, answers) = channel();
        let worker = AdminWorker {
            jobs: job_rx,
            answers: answer_tx,
            waker: Arc::clone(&waker),
            admin_token: shared.admin_token.clone(),
            admin: shared.admin.clone(),
        };
        std::thread::Builder::new()
            .name("simsync-http-admin".into())
            .spawn(move || worker.run())
            .map_err(text)?;
        let stop = Arc::new(AtomicBool::new(false));
        let metrics = shared.metrics.clone();
        let event_loop = EventLoop {
            poll,
            listener,
            conns: BTreeMap::new(),
            next_id: 0,
            shared,
            jobs,
            answers,
            stop: Arc::clone(&stop),
        };
        let thread = std::thread::Builder::new()
            .name("simsync-http".into())
            .spawn(move || event_loop.run())
            .map_err(text)?;
        let server = Self {
            addr: bound,
            stop,
            waker,
            metrics,
            thread: Some(thread),
        };
        Ok((server, rx))
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the port counted so far.
    pub fn connections(&self) -> OpsConnections {
        self.metrics.ops_connections()
    }

    /// Stops serving and joins the event loop (the admin worker ends by itself).
    pub fn stop(mut self) {
        self.signal_stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    fn signal_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
    }
}

impl Drop for OpsServer {
    fn drop(&mut self) {
        self.signal_stop();
    }
}

/// Where a connection is.
enum Phase {
    /// Reading the request head.
    Head,
    /// Reading an admin request's body of `len` bytes, which starts at `from` in the buffer.
    Body {
        request: AdminRequest,
        from: usize,
        len: usize,
    },
    /// With the admin worker.
    Admin,
    /// Writing the answer.
    Writing { out: Vec<u8>, at: usize },
    /// Answered: reading what the client still sends until it closes.
    Closing,
}

struct Conn {
    stream: TcpStream,
    phase: Phase,
    buf: Vec<u8>,
    deadline: Instant,
}

impl Conn {
    /// Whether a new connection may close it (it has not sent its whole request, or was
    /// answered).
    fn evictable(&self) -> bool {
        matches!(
            self.phase,
            Phase::Head | Phase::Body { .. } | Phase::Closing
        )
    }
}

/// What to do with a connection after it was read or written.
enum Step {
    /// Wait for the next event.
    Wait,
    /// Close it; `timed_out` counts it so.
    Close,
    /// Answer (`head_only` for `HEAD`).
    Answer(Answer, bool),
    /// An admin request's head is read and authorized; its body of `len` bytes comes next,
    /// from `from` in the buffer: `(request, from, len)`.
    Body(AdminRequest, usize, usize),
    /// A whole admin request, for the admin worker.
    Admin(AdminRequest),
}

struct EventLoop {
    poll: Poll,
    listener: TcpListener,
    /// Open connections by id; ids only grow, so the first is the oldest.
    conns: BTreeMap<usize, Conn>,
    next_id: usize,
    shared: OpsShared,
    jobs: SyncSender<(usize, AdminRequest)>,
    answers: Receiver<(usize, Answer)>,
    stop: Arc<AtomicBool>,
}

impl EventLoop {
    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let timeout = self
                .conns
                .values()
                .map(|c| c.deadline.saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            if let Err(error) = self.poll.poll(&mut events, Some(timeout)) {
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!("http: the event loop failed: {error}");
                break;
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept_all(),
                    WAKER => {}
                    Token(id) => self.advance(id),
                }
            }
            self.take_answers();
            self.expire(Instant::now());
            self.shared.metrics.set_ops_open(self.conns.len());
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => {
                    tracing::debug!("http: accept failed: {error}");
                    break;
                }
            }
        }
    }

    /// Takes a new connection, closing the oldest evictable one when at the cap.
    fn admit(&mut self, mut stream: TcpStream) {
        self.shared.metrics.ops_accepted();
        if self.conns.len() >= self.shared.limits.max_connections.max(1) {
            let oldest = self
                .conns
                .iter()
                .find(|(_, c)| c.evictable())
                .map(|(id, _)| *id);
            self.shared.metrics.ops_closed("evicted");
            match oldest {
                Some(id) => self.close(id),
                None => return,
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let interest = Interest::READABLE | Interest::WRITABLE;
        if self
            .poll
            .registry()
            .register(&mut stream, Token(id), interest)
            .is_err()
        {
            return;
        }
        let deadline = Instant::now() + self.shared.limits.head_timeout;
        self.conns.insert(
            id,
            Conn {
                stream,
                phase: Phase::Head,
                buf: Vec::new(),
                deadline,
            },
        );
        self.advance(id);
    }

    /// Reads or writes what `id` is ready for, then acts on it.
    fn advance(&mut self, id: usize) {
        let limits = self.shared.limits;
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        let step = match conn.phase {
            Phase::Head => read_head(conn, &limits, &self.shared),
            Phase::Body { .. } => read_body(conn),
            Phase::Admin => Step::Wait,
            Phase::Writing { .. } => write_answer(conn),
            Phase::Closing => drain(conn),
        };
        self.apply(id, step);
    }

    fn apply(&mut self, id: usize, step: Step) {
        let limits = self.shared.limits;
        match step {
            Step::Wait => {}
            Step::Close => self.close(id),
            Step::Answer(answer, head_only) => self.answer(id, &answer, head_only),
            Step::Body(request, from, len) => {
                if let Some(conn) = self.conns.get_mut(&id) {
                    conn.phase = Phase::Body { request, from, len };
                    conn.deadline = Instant::now() + limits.body_timeout;
                    let step = read_body(conn);
                    self.apply(id, step);
                }
            }
            Step::Admin(request) => match self.jobs.try_send((id, request)) {
                Ok(()) => {
                    if let Some(conn) = self.conns.get_mut(&id) {
                        conn.phase = Phase::Admin;
                        conn.deadline =
                            Instant::now() + ADMIN_ANSWER_TIMEOUT + limits.write_timeout;
                    }
                }
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    let busy = AdminResponse::from(AdminError::Busy);
                    self.answer(id, &Answer::json(busy.status, &busy.body), false);
                }
            },
        }
    }

    fn answer(&mut self, id: usize, answer: &Answer, head_only: bool) {
        let limits = self.shared.limits;
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.phase = Phase::Writing {
                out: answer.encode(head_only),
                at: 0,
            };
            conn.deadline = Instant::now() + limits.write_timeout;
            let step = write_answer(conn);
            self.apply(id, step);
        }
    }

    fn take_answers(&mut self) {
        while let Ok((id, answer)) = self.answers.try_recv() {
            if self
                .conns
                .get(&id)
                .is_some_and(|c| matches!(c.phase, Phase::Admin))
            {
                self.answer(id, &answer, false);
            }
        }
    }

    /// Closes every connection past its deadline.
    fn expire(&mut self, now: Instant) {
        let due: Vec<(usize, bool)> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(id, c)| (*id, !matches!(c.phase, Phase::Closing)))
            .collect();
        for (id, timed_out) in due {
            if timed_out {
                self.shared.metrics.ops_closed("timed_out");
            }
            self.close(id);
        }
    }

    fn close(&mut self, id: usize) {
        if let Some(mut conn) = self.conns.remove(&id) {
            let _ = self.poll.registry().deregister(&mut conn.stream);
        }
    }
}

/// Reads from `stream` into `buf` until nothing is waiting, `buf` holds `cap` bytes, or the
/// peer closed; `Ok(true)` when it closed.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, cap: usize) -> io::Result<bool> {
    let mut chunk = [0u8; 4096];
    while buf.len() < cap {
        let room = (cap - buf.len()).min(chunk.len());
        match stream.read(&mut chunk[..room]) {
            Ok(0) => return Ok(true),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

fn read_head(conn: &mut Conn, limits: &OpsLimits, shared: &OpsShared) -> Step {
    let Ok(closed) = fill(&mut conn.stream, &mut conn.buf, limits.max_head_bytes) else {
        return Step::Close;
    };
    match parse_head(&conn.buf) {
        HeadParse::Done(head) => route(&head, shared),
        HeadParse::Bad(why) => Step::Answer(Answer::text(400, format!("{why}\n")), false),
        HeadParse::Partial if conn.buf.len() >= limits.max_head_bytes => {
            Step::Answer(Answer::text(431, "the request head is too long\n"), false)
        }
        HeadParse::Partial if closed => Step::Close,
        HeadParse::Partial => Step::Wait,
    }
}

fn read_body(conn: &mut Conn) -> Step {
    let Phase::Body { from, len, .. } = &conn.phase else {
        return Step::Wait;
    };
    let end = from + len;
    let Ok(closed) = fill(&mut conn.stream, &mut conn.buf, end) else {
        return Step::Close;
    };
    if conn.buf.len() < end {
        return if closed { Step::Close } else { Step::Wait };
    }
    let Phase::Body {
        mut request, from, ..
    } = std::mem::replace(&mut conn.phase, Phase::Admin)
    else {
        return Step::Close;
    };
    request.body = conn.buf[from..end].to_vec();
    Step::Admin(request)
}

fn write_answer(conn: &mut Conn) -> Step {
    let Phase::Writing { out, at } = &mut conn.phase else {
        return Step::Wait;
    };
    while *at < out.len() {
        match conn.stream.write(&out[*at..]) {
            Ok(0) => return Step::Close,
            Ok(n) => *at += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Step::Close,
        }
    }
    let _ = conn.stream.flush();
    let _ = conn.stream.shutdown(Shutdown::Write);
    conn.phase = Phase::Closing;
    conn.deadline = Instant::now() + LINGER;
    conn.buf = Vec::new();
    drain(conn)
}

/// Reads and drops what an answered client still sends; closes at its end.
fn drain(conn: &mut Conn) -> Step {
    let mut chunk = [0u8; 4096];
    loop {
        match conn.stream.read(&mut chunk) {
            Ok(0) => return Step::Close,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Step::Close,
        }
    }
}

/// What a complete head asks for: a probe answered at once, an admin request refused at once
/// (token, length) or waiting for its body, or `404`.
fn route(head: &Head, shared: &OpsShared) -> Step {
    let method = head.method.to_ascii_uppercase();
    let head_only = method == "HEAD";
    if matches!(head.path.as_str(), "/healthz" | "/readyz" | "/metrics") {
        if method != "GET" && !head_only {
            let mut answer = Answer::text(
                405,
                format!("{method} is not allowed on {}: GET or HEAD\n", head.path),
            );
            answer.headers.push(("Allow", "GET, HEAD".into()));
            return Step::Answer(answer, false);
        }
        return Step::Answer(probe(head, shared), head_only);
    }
    if !admin::is_admin_path(&head.path) {
        let error = AdminError::NoSuchPath(head.path.clone());
        return Step::Answer(Answer::json(404, &error.body()), false);
    }
    let refuse = |error: AdminError| {
        let response = AdminResponse::from(error);
        Step::Answer(Answer::json(response.status, &response.body), false)
    };
    if let Err(error) = admin::authorize(head.authorization.as_deref(), &shared.admin_token) {
        return refuse(error);
    }
    if head.transfer_encoded {
        return refuse(AdminError::BadRequest(
            "send the body with a Content-Length, not a Transfer-Encoding".into(),
        ));
    }
    let len = head.content_length.unwrap_or(0);
    if len > admin::MAX_BODY_BYTES {
        return refuse(AdminError::BadRequest(format!(
            "a body above {} bytes",
            admin::MAX_BODY_BYTES
        )));
    }
    let request = AdminRequest {
        method,
        path: head.path.clone(),
        authorization: head.authorization.clone(),
        body: Vec::new(),
    };
    Step::Body(request, head.len, len)
}

/// `/healthz`, `/readyz` or `/metrics`.
fn probe(head: &Head, shared: &OpsShared) -> Answer {
    match head.path.as_str() {
        "/healthz" => {
            let since = shared.heartbeat.since_last(Instant::now());
            if since <= LIVENESS_TIMEOUT {
                Answer::text(200, "ok\n")
            } else {
                Answer::text(
                    503,
                    format!("main loop stalled for {} ms\n", since.as_millis()),
                )
            }
        }
        "/readyz" => match shared.readiness.check() {
            Ok(()) => Answer::text(200, "ready\n"),
            Err(reason) => Answer::text(503, format!("not ready: {reason}\n")),
        },
        _ => {
            let format = MetricsFormat::negotiate(head.accept.as_deref());
            Answer {
                status: 200,
                content_type: format.content_type(),
                headers: vec![("Vary", "Accept".into())],
                body: shared.metrics.scrape(format).into_bytes(),
            }
        }
    }
}

/// The admin worker: each whole admin request parsed, sent to the main loop and answered
/// (within [`ADMIN_ANSWER_TIMEOUT`]), the answer handed back to the event loop.
struct AdminWorker {
    jobs: Receiver<(usize, AdminRequest)>,
    answers: Sender<(usize, Answer)>,
    waker: Arc<Waker>,
    admin_token: String,
    admin: Sender<AdminTicket>,
}

impl AdminWorker {
    fn run(self) {
        for (id, request) in self.jobs.iter() {
            let response = self.answer(&request);
            if self
                .answers
                .send((id, Answer::json(response.status, &response.body)))
                .is_err()
            {
                break;
            }
            let _ = self.waker.wake();
        }
    }

    fn answer(&self, request: &AdminRequest) -> AdminResponse {
        let command = match admin::parse(request, &self.admin_token) {
            Ok(command) => command,
            Err(error) => return error.into(),
        };
        let (tx, rx) = channel();
        if self.admin.send((command, tx)).is_err() {
            return AdminError::Busy.into();
        }
        match rx.recv_timeout(ADMIN_ANSWER_TIMEOUT) {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => error.into(),
            Err(_) => AdminError::Busy.into(),
        }
    }
}
