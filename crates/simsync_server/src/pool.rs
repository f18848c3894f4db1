//! The main loop's end of the worker threads ([workers](crate::rules#workers)): [`Pool`]
//! starts them, gathers what each turn brought for each one, sends the turns and receives the
//! reports. It holds no room; [`Rooms`](crate::Rooms) decides which worker a room runs on and
//! reads the reports.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::room::RelayBuilder;
use crate::worker::{Inbound, Report, ToWorker, TurnInput, WorkerHandle, spawn};

/// A worker thread stopped (a room's code panicked on it): its rooms are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("worker thread {0} stopped: its rooms are gone")]
pub struct WorkerStopped(pub usize);

/// The longest the main loop blocks on the reports at once before it checks that every
/// worker still runs.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// One worker, as the main loop sees it.
struct Worker {
    handle: WorkerHandle,
    /// What arrived for its rooms since the last turn sent.
    input: TurnInput,
    /// The last turn it reported.
    reported: u64,
    /// Its busy time since it started.
    busy: Duration,
}

/// The worker threads.
pub(crate) struct Pool {
    size: usize,
    workers: Vec<Worker>,
    reports: Receiver<Report>,
    report_to: Sender<Report>,
    /// The last turn sent.
    seq: u64,
}

impl Pool {
    /// `size` workers (at least one), started by [`Self::start`].
    pub(crate) fn new(size: usize) -> Self {
        let (report_to, reports) = std::sync::mpsc::channel();
        Self {
            size: size.max(1),
            workers: Vec::new(),
            reports,
            report_to,
            seq: 0,
        }
    }

    /// The number of workers.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Whether the threads run.
    pub(crate) fn started(&self) -> bool {
        !self.workers.is_empty()
    }

    /// Starts the threads (once).
    ///
    /// # Errors
    ///
    /// The OS's, when a thread cannot be made.
    pub(crate) fn start(
        &mut self,
        empty_timeout: Duration,
        relay: &RelayBuilder,
    ) -> std::io::Result<()> {
        while self.workers.len() < self.size {
            let index = self.workers.len();
            let handle = spawn(index, empty_timeout, relay.clone(), self.report_to.clone())?;
            self.workers.push(Worker {
                handle,
                input: TurnInput::default(),
                reported: self.seq,
                busy: Duration::ZERO,
            });
        }
        Ok(())
    }

    /// Sends `message` to worker `index` (started). A stopped worker is found by
    /// [`Self::next_report`].
    pub(crate) fn send(&self, index: usize, message: ToWorker) {
        if let Some(worker) = self.workers.get(index) {
            let _ = worker.handle.to.send(message);
        }
    }

    /// Sends `message` to every worker.
    pub(crate) fn broadcast(&self, message: impl Fn() -> ToWorker) {
        for index in 0..self.workers.len() {
            self.send(index, message());
        }
    }

    /// Adds what arrived for worker `index` to its next turn; a payload's bytes are copied.
    pub(crate) fn push(&mut self, index: usize, event: Inbound, payload: &[u8]) {
        let Some(worker) = self.workers.get_mut(index) else {
            return;
        };
        let input = &mut worker.input;
        let event = match event {
            Inbound::Payload { client, room, .. } => Inbound::Payload {
                client,
                room,
                start: input.bytes.len(),
                len: payload.len(),
            },
            other => other,
        };
        input.bytes.extend_from_slice(payload);
        input.events.push(event);
    }

    /// Sends every worker its turn over `dt` with what arrived for it.
    pub(crate) fn dispatch(&mut self, dt: Duration) {
        self.seq += 1;
        for worker in &mut self.workers {
            let mut input = std::mem::take(&mut worker.input);
            input.seq = self.seq;
            input.dt = dt;
            let _ = worker.handle.to.send(ToWorker::Turn(input));
        }
    }

    /// Whether every worker reported the last turn sent.
    pub(crate) fn caught_up(&self) -> bool {
        self.workers.iter().all(|w| w.reported >= self.seq)
    }

    /// The next report: one already there, else one waited for until `until` (`None`: until
    /// every worker reported the last turn). `None` once every worker caught up or `until`
    /// passed.
    ///
    /// # Errors
    ///
    /// [`WorkerStopped`] when a worker's thread ended.
    pub(crate) fn next_report(
        &mut self,
        until: Option<Instant>,
    ) -> Result<Option<Report>, WorkerStopped> {
        if let Ok(report) = self.reports.try_recv() {
            return Ok(Some(self.note(report)));
        }
        while !self.caught_up() {
            let wait = match until {
                Some(until) => until.saturating_duration_since(Instant::now()),
                None => CHECK_EVERY,
            };
            if wait.is_zero() {
                return Ok(None);
            }
            match self.reports.recv_timeout(wait.min(CHECK_EVERY)) {
                Ok(report) => return Ok(Some(self.note(report))),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    if let Some(index) = self
                        .workers
                        .iter()
                        .position(|w| w.handle.thread.is_finished())
                    {
                        return Err(WorkerStopped(index));
                    }
                }
            }
        }
        Ok(None)
    }

    fn note(&mut self, report: Report) -> Report {
        if let Some(worker) = self.workers.get_mut(report.worker) {
            worker.reported = worker.reported.max(report.seq);
            worker.busy += report.busy;
        }
        report
    }

    /// Each worker's busy time since it started.
    pub(crate) fn busy(&self) -> Vec<Duration> {
        self.workers.iter().map(|w| w.busy).collect()
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("size", &self.size)
            .field("started", &self.started())
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}
