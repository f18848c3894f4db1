//! The worker threads ([workers](crate::rules#workers)): each owns a set of rooms
//! ([`RoomSet`]) and runs them; the main loop talks to it by two channels and never touches a
//! room itself.
//!
//! The protocol: the main loop sends a worker [`ToWorker`] messages in order — rooms made and
//! ended, the drain, and one [`ToWorker::Turn`] per main-loop turn carrying the turn's `dt`
//! and what the socket brought for the worker's rooms (connections admitted, payloads,
//! connections gone; [`TurnInput`]). The worker answers each batch of turns with one
//! [`Report`]: every room's numbers, the packets to send, the connections its rooms closed or
//! refused, and how long it was busy. A worker that falls behind finds several turns queued
//! and runs them as one (their `dt` summed), so it never delays the main loop or the other
//! workers, and the main loop never waits for a worker longer than its turn lasts
//! (`DedicatedServer::run`).

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use simsync_net::renet::ClientId;
use simsync_net::{ConnectionSink, MatchEndReason, PacketSent, RejectReason};

use crate::room::{RelayBuilder, RelaySeats, Room, RoomState, RoomSummary, RoomTotals, RoomTurn};
use crate::room_config::RoomConfig;
use crate::token::RoomId;

/// A read of one room run on its worker ([`ToWorker::Inspect`]); it sends its own answer.
pub(crate) type RoomVisit = Box<dyn FnOnce(Option<&Room>) + Send>;

/// What the main loop asks a worker, in order.
pub(crate) enum ToWorker {
    /// Make room `id` (its config validated by the main loop).
    Create {
        /// The room.
        id: RoomId,
        /// Its config.
        config: RoomConfig,
    },
    /// End room `id` with `reason` (nothing when the worker does not have it).
    End {
        /// The room.
        id: RoomId,
        /// Why.
        reason: MatchEndReason,
    },
    /// The server drains: rooms end as soon as they are empty.
    StopAccepting,
    /// Run `visit` on room `id` (`None`: the worker does not have it) between turns.
    Inspect {
        /// The room.
        id: RoomId,
        /// What to run on it; it sends its own answer.
        visit: RoomVisit,
    },
    /// One main-loop turn.
    Turn(TurnInput),
}

/// What the socket brought for one connection of a worker's rooms, in arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inbound {
    /// Connection `client` enters `room` in `slot` (its token's claims).
    Admit {
        /// The connection.
        client: ClientId,
        /// Its room.
        room: RoomId,
        /// Its slot.
        slot: u8,
    },
    /// A payload of `client` for `room`: `len` bytes of [`TurnInput::bytes`] from `start`.
    Payload {
        /// The connection.
        client: ClientId,
        /// Its room.
        room: RoomId,
        /// Where the payload starts in the turn's bytes.
        start: usize,
        /// Its length.
        len: usize,
    },
    /// Connection `client` of `room` is gone.
    Remove {
        /// The connection.
        client: ClientId,
        /// Its room.
        room: RoomId,
    },
}

/// One main-loop turn for a worker: `dt` and what arrived for its rooms.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct TurnInput {
    /// The main loop's turn number (the report says the last one it ran).
    pub seq: u64,
    /// The time the turn covers.
    pub dt: Duration,
    /// What arrived, in order.
    pub events: Vec<Inbound>,
    /// The payloads' bytes, one after another.
    pub bytes: Vec<u8>,
}

impl TurnInput {
    /// `next` appended to `self` (a worker that fell behind runs queued turns as one).
    fn merge(&mut self, next: TurnInput) {
        let offset = self.bytes.len();
        self.seq = next.seq;
        self.dt += next.dt;
        self.bytes.extend_from_slice(&next.bytes);
        self.events
            .extend(next.events.into_iter().map(|event| match event {
                Inbound::Payload {
                    client,
                    room,
                    start,
                    len,
                } => Inbound::Payload {
                    client,
                    room,
                    start: start + offset,
                    len,
                },
                other => other,
            }));
    }
}

/// One room's numbers after a worker's turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RoomReport {
    /// What its update measured.
    pub turn: RoomTurn,
    /// Its summary (the admin API's view).
    pub summary: RoomSummary,
    /// Its counters since it was made.
    pub totals: RoomTotals,
    /// A relay room's seating.
    pub seats: Option<RelaySeats>,
}

/// A worker's answer to a batch of turns.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Report {
    /// The worker.
    pub worker: usize,
    /// The last turn it ran.
    pub seq: u64,
    /// How long it worked on the batch (rooms made, the turns run).
    pub busy: Duration,
    /// Every live room of the worker.
    pub rooms: Vec<RoomReport>,
    /// Rooms over (ended, every connection closed) and dropped: their last summaries.
    pub forgotten: Vec<RoomSummary>,
    /// Connections a room refused (it was ending, say), with why.
    pub refused: Vec<(ClientId, RejectReason)>,
    /// Connections the rooms closed (netcode tells their clients).
    pub disconnections: Vec<ClientId>,
    /// Payloads a room could not take (or for a room the worker no longer has).
    pub bad_payloads: u64,
    /// The packets to send: each connection and its packet's length in [`Self::bytes`].
    pub packets: Vec<(ClientId, usize)>,
    /// The packets' bytes, one after another.
    pub bytes: Vec<u8>,
}

/// The index of the worker with the fewest rooms (`loads[i]`: worker `i`'s live rooms); the
/// lowest index among equals. `0` for no worker.
pub(crate) fn least_loaded(loads: &[usize]) -> usize {
    loads
        .iter()
        .enumerate()
        .min_by_key(|(i, load)| (**load, *i))
        .map_or(0, |(i, _)| i)
}

/// The rooms of one worker, run on its thread.
pub(crate) struct RoomSet {
    index: usize,
    rooms: BTreeMap<RoomId, Room>,
    now: Duration,
    accepting: bool,
    empty_timeout: Duration,
    relay: RelayBuilder,
}

impl RoomSet {
    /// Worker `index`'s empty set; rooms with no connection for `empty_timeout` end.
    pub(crate) fn new(index: usize, empty_timeout: Duration, relay: RelayBuilder) -> Self {
        Self {
            index,
            rooms: BTreeMap::new(),
            now: Duration::ZERO,
            accepting: true,
            empty_timeout,
            relay,
        }
    }

    /// Carries out a message other than a turn.
    fn command(&mut self, message: ToWorker) {
        match message {
            ToWorker::Create { id, config } => {
                let room = Room::new(id, config, self.now, &self.relay);
                self.rooms.insert(id, room);
            }
            ToWorker::End { id, reason } => {
                if let Some(room) = self.rooms.get_mut(&id) {
                    room.end(reason, self.now);
                }
            }
            ToWorker::StopAccepting => self.accepting = false,
            ToWorker::Inspect { id, visit } => visit(self.rooms.get(&id)),
            ToWorker::Turn(_) => {}
        }
    }

    /// Runs one turn: the rooms' network clocks, what arrived, every room's update, then the
    /// rooms' ends and the packets out.
    pub(crate) fn turn(&mut self, input: TurnInput) -> Report {
        let mut report = Report {
            worker: self.index,
            seq: input.seq,
            ..Report::default()
        };
        for room in self.rooms.values_mut() {
            room.update_network(input.dt);
        }
        for event in &input.events {
            self.apply(event, &input.bytes, &mut report);
        }
        self.now += input.dt;
        let turns = self.step(input.dt);
        for room in self.rooms.values_mut() {
            report
                .disconnections
                .extend(room.server_mut().disconnections_id());
            let (packets, bytes) = (&mut report.packets, &mut report.bytes);
            room.server_mut().drain_packets(&mut |client, packet| {
                bytes.extend_from_slice(packet);
                packets.push((client, packet.len()));
                PacketSent::Sent
            });
        }
        report.forgotten = self.forget_ended();
        report.rooms = turns
            .into_iter()
            .filter_map(|(id, turn)| {
                let room = self.rooms.get(&id)?;
                Some(RoomReport {
                    turn,
                    summary: room.summary(self.now),
                    totals: room.totals(),
                    seats: room.relay_seats(),
                })
            })
            .collect();
        report
    }

    fn apply(&mut self, event: &Inbound, bytes: &[u8], report: &mut Report) {
        match *event {
            Inbound::Admit { client, room, slot } => {
                let admitted = match self.rooms.get_mut(&room) {
                    Some(room) => room.admit(client, slot),
                    None => Err(RejectReason::UnknownRoom { room: room.0 }),
                };
                if let Err(reason) = admitted {
                    report.refused.push((client, reason));
                }
            }
            Inbound::Payload {
                client,
                room,
                start,
                len,
            } => {
                let payload = bytes.get(start..start + len).unwrap_or_default();
                let taken = self
                    .rooms
                    .get_mut(&room)
                    .is_some_and(|room| room.receive(client, payload));
                if !taken {
                    report.bad_payloads += 1;
                }
            }
            Inbound::Remove { client, room } => {
                if let Some(room) = self.rooms.get_mut(&room) {
                    room.remove(client, self.now);
                }
            }
        }
    }

    /// Every room's update; ends the rooms played out or empty for too long (at once while
    /// draining) and closes ending rooms after their grace.
    fn step(&mut self, dt: Duration) -> Vec<(RoomId, RoomTurn)> {
        let now = self.now;
        let timeout = if self.accepting {
            self.empty_timeout
        } else {
            Duration::ZERO
        };
        let mut turns = Vec::with_capacity(self.rooms.len());
        for room in self.rooms.values_mut() {
            let started = Instant::now();
            let mut turn = room.step(dt);
            turn.kind = room.config().kind_name();
            turn.update = started.elapsed();
            turns.push((room.id(), turn));
            if let Some(reason) = room.played_out() {
                tracing::info!(room = room.id().0, %reason, "room ends: its match ended and its players left");
                room.end(reason, now);
            }
            if room.empty_for(now).is_some_and(|empty| empty >= timeout)
                && room.state() != RoomState::Ending
            {
                room.end(MatchEndReason::Abandoned, now);
            }
            room.close_if_due(now);
        }
        turns
    }

    /// Drops the rooms over (ended, no connection left); returns their last summaries.
    fn forget_ended(&mut self) -> Vec<RoomSummary> {
        let over: Vec<RoomId> = self
            .rooms
            .values()
            .filter(|r| r.state() == RoomState::Ended && r.clients().is_empty())
            .map(Room::id)
            .collect();
        over.into_iter()
            .filter_map(|id| self.rooms.remove(&id))
            .map(|room| {
                tracing::info!(room = room.id().0, worker = self.index, "room ended");
                room.summary(self.now)
            })
            .collect()
    }
}

/// The main loop's end of a worker thread.
pub(crate) struct WorkerHandle {
    /// Its message channel.
    pub to: Sender<ToWorker>,
    /// Its thread.
    pub thread: JoinHandle<()>,
}

/// The name of worker `index`'s thread, `sim-worker-<index>`: at most 15 bytes for every
/// index up to [`MAX_WORKERS`](crate::config::MAX_WORKERS), so Linux keeps it whole (a thread's
/// name in `/proc/<pid>/task/<tid>/comm` and `top -H` is cut at 15 bytes).
pub fn thread_name(index: usize) -> String {
    format!("sim-worker-{index}")
}

/// Starts worker `index` on its own thread: it owns a [`RoomSet`] and answers on `reports`.
pub(crate) fn spawn(
    index: usize,
    empty_timeout: Duration,
    relay: RelayBuilder,
    reports: Sender<Report>,
) -> std::io::Result<WorkerHandle> {
    let (to, from_main) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(thread_name(index))
        .spawn(move || {
            run(
                RoomSet::new(index, empty_timeout, relay),
                &from_main,
                &reports,
            )
        })?;
    Ok(WorkerHandle { to, thread })
}

/// A worker's loop: waits for a message, takes every message queued behind it (turns merged
/// into one), runs the turn and reports. Ends when the main loop's end is gone.
fn run(mut set: RoomSet, from_main: &Receiver<ToWorker>, reports: &Sender<Report>) {
    while let Ok(first) = from_main.recv() {
        let started = Instant::now();
        let mut turn: Option<TurnInput> = None;
        let mut next = Some(first);
        while let Some(message) = next {
            match message {
                ToWorker::Turn(input) => match &mut turn {
                    Some(turn) => turn.merge(input),
                    None => turn = Some(input),
                },
                other => set.command(other),
            }
            next = from_main.try_recv().ok();
        }
        let Some(turn) = turn else { continue };
        let mut report = set.turn(turn);
        report.busy = started.elapsed();
        if reports.send(report).is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_worker_thread_name_fits_linux_s_15_bytes_and_names_its_worker() {
        let last = crate::config::MAX_WORKERS - 1;
        assert_eq!(thread_name(last), format!("sim-worker-{last}"));
        assert!(thread_name(last).len() <= 15);
        assert_ne!(thread_name(1), thread_name(10));
    }

    #[test]
    fn a_room_goes_to_the_worker_with_the_fewest_rooms_the_first_among_equals() {
        assert_eq!(least_loaded(&[]), 0);
        assert_eq!(least_loaded(&[0, 0]), 0);
        assert_eq!(least_loaded(&[1, 0]), 1);
        assert_eq!(least_loaded(&[2, 1, 1]), 1);
        assert_eq!(least_loaded(&[3, 4, 2, 2]), 2);
    }

    #[test]
    fn merged_turns_sum_their_time_and_keep_each_payload_s_bytes() {
        let client = 7;
        let room = RoomId(1);
        let mut a = TurnInput {
            seq: 1,
            dt: Duration::from_millis(4),
            events: vec![Inbound::Payload {
                client,
                room,
                start: 0,
                len: 2,
            }],
            bytes: vec![1, 2],
        };
        a.merge(TurnInput {
            seq: 2,
            dt: Duration::from_millis(5),
            events: vec![Inbound::Payload {
                client,
                room,
                start: 0,
                len: 3,
            }],
            bytes: vec![3, 4, 5],
        });
        assert_eq!((a.seq, a.dt), (2, Duration::from_millis(9)));
        let Inbound::Payload { start, len, .. } = a.events[1] else {
            panic!("a payload")
        };
        assert_eq!(&a.bytes[start..start + len], &[3, 4, 5]);
    }

    fn relay_room() -> RoomConfig {
        RoomConfig::relay_for::<u8>(2, 64, 8).unwrap()
    }

    fn turn(seq: u64, events: Vec<Inbound>) -> ToWorker {
        ToWorker::Turn(TurnInput {
            seq,
            dt: Duration::from_millis(16),
            events,
            bytes: Vec::new(),
        })
    }

    #[test]
    fn a_worker_behind_runs_its_queued_turns_as_one_and_reports_once() {
        let (to, from_main) = std::sync::mpsc::channel();
        let (reports, from_worker) = std::sync::mpsc::channel();
        let id = RoomId(4);
        to.send(ToWorker::Create {
            id,
            config: relay_room(),
        })
        .unwrap();
        for seq in 1..=3 {
            to.send(turn(seq, Vec::new())).unwrap();
        }
        drop(to);
        // Run here: every message is queued before the worker reads the first.
        let relay: RelayBuilder = std::sync::Arc::new(crate::room::fingerprint_relay);
        run(
            RoomSet::new(0, Duration::from_secs(30), relay),
            &from_main,
            &reports,
        );
        let report = from_worker.recv().unwrap();
        assert_eq!(report.seq, 3);
        assert_eq!(report.rooms.len(), 1);
        assert!((report.rooms[0].summary.age_seconds - 0.048).abs() < 1e-9);
        assert!(
            from_worker.try_recv().is_err(),
            "one report for the three turns"
        );
    }

    #[test]
    fn a_worker_runs_its_rooms_and_reports_each_turn() {
        let (reports, from_worker) = std::sync::mpsc::channel();
        let relay: RelayBuilder = std::sync::Arc::new(crate::room::fingerprint_relay);
        let worker = spawn(3, Duration::from_secs(30), relay, reports).unwrap();
        let (a, b) = (RoomId(1), RoomId(2));
        for id in [a, b] {
            let config = relay_room();
            worker.to.send(ToWorker::Create { id, config }).unwrap();
        }
        let admit = Inbound::Admit {
            client: 9,
            room: a,
            slot: 1,
        };
        let out_of_range = Inbound::Admit {
            client: 10,
            room: b,
            slot: 5,
        };
        worker.to.send(turn(1, vec![admit, out_of_range])).unwrap();
        let report = from_worker.recv().unwrap();
        assert_eq!((report.worker, report.seq), (3, 1));
        let ids: Vec<RoomId> = report.rooms.iter().map(|r| r.summary.id).collect();
        assert_eq!(ids, vec![a, b]);
        assert_eq!(report.rooms[0].summary.clients, 1);
        assert_eq!(
            report.refused,
            vec![(
                10,
                RejectReason::SlotOutOfRange {
                    slot: 5,
                    players: 2
                }
            )]
        );
        // Room b, empty, is ended by the main loop: it is over at once and forgotten.
        let reason = MatchEndReason::EndedByOperator;
        worker.to.send(ToWorker::End { id: b, reason }).unwrap();
        worker.to.send(turn(2, Vec::new())).unwrap();
        let report = from_worker.recv().unwrap();
        assert_eq!(report.seq, 2);
        assert_eq!(report.rooms.len(), 1);
        assert_eq!(report.forgotten.len(), 1);
        assert_eq!(report.forgotten[0].state, RoomState::Ended);
        // A payload for a room the worker no longer has is counted, not lost silently.
        let stray = Inbound::Payload {
            client: 10,
            room: b,
            start: 0,
            len: 0,
        };
        worker.to.send(turn(3, vec![stray])).unwrap();
        assert_eq!(from_worker.recv().unwrap().bad_payloads, 1);
        drop(worker.to);
        worker.thread.join().unwrap();
    }
}
