//! The relay client's matches ([what survives a rematch](crate::rules#what-survives-a-rematch)):
//! which match the session plays, which of the relay's session messages it takes
//! ([`simsync_net::match_drop`]), the end of its match, and the hand-over of the connection to
//! the session rebuilt for the relay's next match.

use bevy::log::{debug, info};
use simsync_net::bevy_renet::RenetClient;
use simsync_net::{
    ClientHandshake, ClientMessage, ClientNetExt, MatchDrop, MatchEndReason, MatchId, MatchMessage,
    MatchPhase, RttEstimator, SessionClientMessage, SessionServerMessage, match_drop,
};

use super::{NextMatch, RelayClient};
use crate::input::{InputBuffer, SimInput};

impl<I: SimInput> RelayClient<I> {
    /// The session's match while it is played: named by the relay, not ended, the relay not
    /// moved on to a later one. Nothing of the session goes out otherwise.
    pub(super) fn playing(&self) -> Option<MatchId> {
        self.match_id.filter(|_| {
            self.stats.match_end.is_none() && self.next_match.is_none() && !self.stats.left
        })
    }

    /// The session's match as the match rule sees it: taken while played (also before its
    /// `Start`: confirmed sets may overtake it), ended otherwise.
    fn match_view(&self) -> Option<(MatchId, MatchPhase)> {
        let phase = match self.playing() {
            Some(_) => MatchPhase::Running,
            None => MatchPhase::Ended,
        };
        self.match_id.map(|id| (id, phase))
    }

    /// One session message of the relay, with the match it names: the messages that change
    /// the match are handled here, any other only for the session's match while it is played
    /// (else dropped and counted by reason).
    pub(super) fn on_match_message(
        &mut self,
        buffer: &mut InputBuffer<I>,
        session: MatchMessage<SessionServerMessage>,
    ) {
        let MatchMessage { match_id, message } = session;
        match message {
            SessionServerMessage::Start { .. } => self.on_start(match_id),
            SessionServerMessage::MatchOpened => self.on_match_opened(match_id),
            SessionServerMessage::MatchEnded { reason } => self.on_match_ended(match_id, reason),
            message => match match_drop(match_id, self.match_view()) {
                None => self.on_session_message(buffer, message),
                Some(drop) => self.drop_message(match_id, drop),
            },
        }
    }

    /// Counts a message of `match_id` dropped for `drop`.
    fn drop_message(&mut self, match_id: MatchId, drop: MatchDrop) {
        self.stats.match_drops.count(drop);
        debug!("session client: a message of {match_id} dropped: {drop:?}");
    }

    /// Whether a message of `match_id`, a later match than the session's (or any while it has
    /// none), is to be followed: `Some(true)` the session takes it as its own (it never
    /// started, so its worlds are at tick 0), `Some(false)` the session is to be rebuilt for
    /// it; `None` for an earlier match (counted as ended) or the session's own.
    fn later_match(&mut self, match_id: MatchId) -> Option<bool> {
        match self.match_id {
            Some(current) if match_id < current => {
                self.drop_message(match_id, MatchDrop::EndedMatch);
                None
            }
            Some(current) if match_id == current => None,
            _ => Some(!self.stats.started && self.next_match.is_none()),
        }
    }

    /// `Start` of match `match_id`: the session's match starts; a later match is taken (a
    /// session that never started) or followed by a rebuild that starts running.
    fn on_start(&mut self, match_id: MatchId) {
        match self.later_match(match_id) {
            Some(true) => {
                self.enter_match(match_id);
                self.stats.started = true;
            }
            Some(false) => self.follow(match_id, true),
            None if self.playing() == Some(match_id) => self.stats.started = true,
            None if self.match_id == Some(match_id) => {
                self.drop_message(match_id, MatchDrop::EndedMatch);
            }
            None => {}
        }
    }

    /// `MatchOpened` of match `match_id`: the relay's lobby. A session that never started takes
    /// it and says it is ready; one that played an earlier match is rebuilt for it (the rebuilt
    /// session says it is ready). Repeated for the session's own lobby, it says so again.
    fn on_match_opened(&mut self, match_id: MatchId) {
        match self.later_match(match_id) {
            Some(true) => {
                self.enter_match(match_id);
                self.ready_due = true;
            }
            Some(false) => self.follow(match_id, false),
            None if self.playing() == Some(match_id) && !self.stats.started => {
                self.ready_due = true;
            }
            None => {}
        }
    }

    /// `MatchEnded` of match `match_id`: the session's match is over (nothing more of it is
    /// sent or taken; the lifecycle shows `Ended` with the reason), also in the relay's first
    /// lobby, where the client has not been told its match yet. Of another match, it is
    /// dropped and counted.
    fn on_match_ended(&mut self, match_id: MatchId, reason: MatchEndReason) {
        if self.match_id.is_none() && !self.stats.started && self.next_match.is_none() {
            // A new player waits in the relay's first lobby without having been told its
            // match: the end (its room ends before the match started) names it.
            self.enter_match(match_id);
        }
        if self.match_id != Some(match_id) {
            let drop = match self.match_id {
                Some(current) if match_id < current => MatchDrop::EndedMatch,
                _ => MatchDrop::UnknownMatch,
            };
            self.drop_message(match_id, drop);
            return;
        }
        if self.stats.match_end.is_none() {
            info!("session client: the relay ended {match_id} ({reason})");
            self.stats.match_end = Some(reason);
            self.pending.clear();
            self.outbox.clear();
        }
    }

    /// The session plays match `match_id` from now on.
    fn enter_match(&mut self, match_id: MatchId) {
        self.match_id = Some(match_id);
        self.stats.match_id = Some(match_id);
    }

    /// The relay moved on to match `match_id`: the session is to be rebuilt for it (the latest
    /// announced wins); nothing more of the session's match goes out.
    fn follow(&mut self, match_id: MatchId, running: bool) {
        if self.next_match.is_some_and(|next| next.match_id > match_id) {
            return;
        }
        info!("session client: the relay moved on to {match_id}; the session starts over");
        self.next_match = Some(NextMatch { match_id, running });
        self.pending.clear();
        self.outbox.clear();
    }

    /// The relay's later match this session is to be rebuilt for, if any.
    pub(crate) fn next_match(&self) -> Option<NextMatch> {
        self.next_match
    }

    /// Sends `Ready` for the session's match when due (a session set up for the relay's
    /// lobby), on a connected client.
    pub(super) fn send_ready(&mut self, renet: Option<&mut RenetClient>) {
        let (true, Some(client), Some(match_id)) = (self.ready_due, renet, self.playing()) else {
            return;
        };
        let ready = ClientMessage::session(match_id, SessionClientMessage::Ready);
        match client.send_msg(&ready) {
            Ok(()) => {
                self.ready_due = false;
                info!("session client: ready for {match_id}");
            }
            Err(error) => debug!("session client: ready not sent: {error}"),
        }
    }

    /// This client, new for the session rebuilt for `next`, takes over `old`'s connection: the
    /// handshake (slot, reconnect token), the `Hello` and the reconnect policy's state, the
    /// round-trip estimate and the client's clock (pings in flight stay valid). Everything of
    /// the old match — inputs, confirmed sets, the lead, the stall watch, snapshot transfers,
    /// counters — starts over. In the relay's lobby it says it is ready; a match running
    /// already (a rejoin) is taken as started, with `old`'s input floor.
    pub(crate) fn take_connection(&mut self, old: &mut RelayClient<I>, next: NextMatch) {
        self.handshake =
            std::mem::replace(&mut old.handshake, ClientHandshake::new(old.hello.clone()));
        self.hello = old.hello.clone();
        self.reconnect = std::mem::take(&mut old.reconnect);
        self.reconnect_due = std::mem::take(&mut old.reconnect_due);
        self.rtt = std::mem::replace(&mut old.rtt, RttEstimator::new());
        self.now = old.now;
        self.last_ping = old.last_ping;
        self.stats.slot = old.stats.slot;
        self.stats.reconnect_token = old.stats.reconnect_token;
        self.stats.rtt_ms = old.stats.rtt_ms;
        self.stats.jitter_ms = old.stats.jitter_ms;
        self.stats.reconnect = old.stats.reconnect;
        self.enter_match(next.match_id);
        self.stats.started = next.running;
        self.ready_due = !next.running;
        if next.running {
            self.input_floor = old.input_floor;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{NetworkSessionConfig, SessionConfig};

    fn client() -> RelayClient<u32> {
        RelayClient::new(NetworkSessionConfig::default(), &SessionConfig::default())
    }

    fn message(match_id: u32, message: SessionServerMessage) -> MatchMessage<SessionServerMessage> {
        MatchMessage {
            match_id: MatchId(match_id),
            message,
        }
    }

    fn start() -> SessionServerMessage {
        SessionServerMessage::Start {
            tick: 0,
            players: 2,
            tick_rate_hz: 64,
        }
    }

    fn sets(first_tick: i32) -> SessionServerMessage {
        SessionServerMessage::ConfirmedInputs {
            first_tick,
            sets: vec![simsync_net::InputSet {
                inputs: vec![simsync_net::encode(&9u32).expect("encodes"); 2],
                replaced: 0,
                disconnected: 0,
            }],
        }
    }

    #[test]
    fn a_new_session_takes_the_first_match_it_is_told_of() {
        let mut client = client();
        let mut buffer = InputBuffer::<u32>::new(2, 64).expect("buffer");
        // Nothing is taken before the relay names a match.
        client.on_match_message(&mut buffer, message(1, sets(1)));
        assert_eq!(client.stats.match_drops.unknown_match, 1);
        assert_eq!(buffer.max_verifiable_tick(), 0);
        client.on_match_message(&mut buffer, message(1, start()));
        assert_eq!(client.stats.match_id, Some(MatchId(1)));
        assert!(client.stats.started);
        assert_eq!(client.playing(), Some(MatchId(1)));
        client.on_match_message(&mut buffer, message(1, sets(1)));
        assert_eq!(buffer.max_verifiable_tick(), 1);
        assert_eq!(client.next_match(), None);
    }

    #[test]
    fn after_its_match_ended_nothing_of_it_is_taken_and_the_next_match_is_followed() {
        let mut client = client();
        let mut buffer = InputBuffer::<u32>::new(2, 64).expect("buffer");
        client.on_match_message(&mut buffer, message(1, start()));
        let ended = SessionServerMessage::MatchEnded {
            reason: MatchEndReason::Completed,
        };
        client.on_match_message(&mut buffer, message(1, ended));
        assert_eq!(client.stats.match_end, Some(MatchEndReason::Completed));
        assert_eq!(client.playing(), None);
        // A set of the ended match arriving late is dropped, not confirmed.
        client.on_match_message(&mut buffer, message(1, sets(1)));
        assert_eq!(buffer.max_verifiable_tick(), 0);
        assert_eq!(client.stats.match_drops.ended_match, 1);
        client.on_match_message(&mut buffer, message(2, SessionServerMessage::MatchOpened));
        assert_eq!(
            client.next_match(),
            Some(NextMatch {
                match_id: MatchId(2),
                running: false
            })
        );
        // Until the rebuild, neither match's messages are taken.
        client.on_match_message(&mut buffer, message(2, sets(1)));
        client.on_match_message(&mut buffer, message(1, sets(2)));
        assert_eq!(buffer.max_verifiable_tick(), 0);
        assert_eq!(client.stats.match_drops.ended_match, 2);
        assert_eq!(client.stats.match_drops.unknown_match, 1);
    }

    #[test]
    fn the_rebuilt_session_keeps_the_connection_and_says_it_is_ready() {
        let mut old = client();
        let mut buffer = InputBuffer::<u32>::new(2, 64).expect("buffer");
        old.stats.slot = Some(1);
        old.stats.rtt_ms = 80.0;
        old.stats.late_inputs = 5;
        old.now = std::time::Duration::from_secs(30);
        old.on_match_message(&mut buffer, message(1, start()));
        old.on_match_message(&mut buffer, message(2, SessionServerMessage::MatchOpened));
        let next = old.next_match().expect("a rematch");
        let mut new = client();
        new.take_connection(&mut old, next);
        assert_eq!(new.stats.slot, Some(1));
        assert_eq!(new.stats.rtt_ms, 80.0);
        assert_eq!(new.stats.late_inputs, 0, "counters start over");
        assert_eq!(new.now, std::time::Duration::from_secs(30));
        assert_eq!(new.playing(), Some(MatchId(2)));
        assert!(!new.stats.started);
        assert!(new.ready_due);
        // The lobby's `Start` starts it; a repeated `MatchOpened` asks for `Ready` again.
        let mut buffer = InputBuffer::<u32>::new(2, 64).expect("buffer");
        new.ready_due = false;
        new.on_match_message(&mut buffer, message(2, SessionServerMessage::MatchOpened));
        assert!(new.ready_due);
        new.on_match_message(&mut buffer, message(1, start()));
        assert!(!new.stats.started, "the old match's start is dropped");
        assert_eq!(new.stats.match_drops.ended_match, 1);
        new.on_match_message(&mut buffer, message(2, start()));
        assert!(new.stats.started);
    }

    #[test]
    fn a_start_of_a_later_match_after_playing_rebuilds_into_a_running_match() {
        let mut client = client();
        let mut buffer = InputBuffer::<u32>::new(2, 64).expect("buffer");
        client.on_match_message(&mut buffer, message(1, start()));
        client.on_match_message(&mut buffer, message(3, start()));
        assert_eq!(
            client.next_match(),
            Some(NextMatch {
                match_id: MatchId(3),
                running: true
            })
        );
        // An older announcement does not move it back.
        client.on_match_message(&mut buffer, message(2, SessionServerMessage::MatchOpened));
        assert_eq!(client.next_match().map(|n| n.match_id), Some(MatchId(3)));
    }
}
