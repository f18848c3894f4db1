//! Which match the client plays and which of the relay's session messages it takes
//! ([`simsync_net::match_drop`]): `Start`, `MatchOpened` and `MatchEnded` change the match; any
//! other message is taken only for the played match while it runs (else dropped and counted).
//! A later match than the played one is announced to the driver ([`NextMatch`]).

use simsync_net::{
    MatchDrop, MatchEndReason, MatchId, MatchMessage, MatchPhase, SessionServerMessage, match_drop,
};

use crate::events::{NextMatch, ProtocolEvent};
use crate::protocol::SessionProtocol;

impl SessionProtocol {
    /// The played match while it is played: named by the relay, not ended, the relay not moved
    /// on to a later one, the client not gone. Nothing of the session goes out otherwise.
    pub fn playing(&self) -> Option<MatchId> {
        self.match_id
            .filter(|_| self.match_end.is_none() && self.next_match.is_none() && !self.left)
    }

    /// The played match as the match rule sees it: taken while played (also before its
    /// `Start`: confirmed sets may overtake it), ended otherwise.
    fn match_view(&self) -> Option<(MatchId, MatchPhase)> {
        let phase = match self.playing() {
            Some(_) => MatchPhase::Running,
            None => MatchPhase::Ended,
        };
        self.match_id.map(|id| (id, phase))
    }

    /// One session message of the relay: the messages that change the match are handled here,
    /// any other only for the played match (else dropped and counted by reason).
    pub(crate) fn on_match_message(&mut self, session: MatchMessage<SessionServerMessage>) {
        let MatchMessage { match_id, message } = session;
        match message {
            SessionServerMessage::Start { .. } => self.on_start(match_id),
            SessionServerMessage::MatchOpened => self.on_match_opened(match_id),
            SessionServerMessage::MatchEnded { reason } => self.on_match_ended(match_id, reason),
            message => match match_drop(match_id, self.match_view()) {
                None => self.on_session_message(match_id, message),
                Some(drop) => self.stats.match_drops.count(drop),
            },
        }
    }

    /// Whether a message of `match_id`, a later match than the played one (or any while there
    /// is none), is to be followed: `Some(true)` the client takes it as its own (it never
    /// started), `Some(false)` the driver is to start over for it; `None` for an earlier match
    /// (counted as ended) or the played one.
    fn later_match(&mut self, match_id: MatchId) -> Option<bool> {
        match self.match_id {
            Some(current) if match_id < current => {
                self.stats.match_drops.count(MatchDrop::EndedMatch);
                None
            }
            Some(current) if match_id == current => None,
            _ => Some(!self.started && self.next_match.is_none()),
        }
    }

    /// `Start` of `match_id`: the played match starts; a later match is taken (a client that
    /// never started) or announced running.
    fn on_start(&mut self, match_id: MatchId) {
        match self.later_match(match_id) {
            Some(true) => {
                self.match_id = Some(match_id);
                self.start(match_id);
            }
            Some(false) => self.follow(match_id, true),
            None if self.playing() == Some(match_id) => self.start(match_id),
            None if self.match_id == Some(match_id) => {
                self.stats.match_drops.count(MatchDrop::EndedMatch);
            }
            None => {}
        }
    }

    /// The played match runs (said once).
    fn start(&mut self, match_id: MatchId) {
        if !self.started {
            self.started = true;
            self.events.push_back(ProtocolEvent::Started { match_id });
        }
    }

    /// `MatchOpened` of `match_id`: the relay's lobby. A client that never started takes it and
    /// says it is ready; one that played an earlier match announces it. Repeated for the played
    /// lobby, it says so again.
    fn on_match_opened(&mut self, match_id: MatchId) {
        match self.later_match(match_id) {
            Some(true) => {
                self.match_id = Some(match_id);
                self.ready_due = true;
            }
            Some(false) => self.follow(match_id, false),
            None if self.playing() == Some(match_id) && !self.started => self.ready_due = true,
            None => {}
        }
    }

    /// `MatchEnded` of `match_id`: the played match is over (also in the relay's first lobby,
    /// where the client was not told its match yet). Of another match, it is dropped and
    /// counted.
    fn on_match_ended(&mut self, match_id: MatchId, reason: MatchEndReason) {
        if self.match_id.is_none() && !self.started && self.next_match.is_none() {
            // A new player waits in the relay's first lobby without having been told its
            // match: the end (its room ends before the match started) names it.
            self.match_id = Some(match_id);
        }
        if self.match_id != Some(match_id) {
            let drop = match self.match_id {
                Some(current) if match_id < current => MatchDrop::EndedMatch,
                _ => MatchDrop::UnknownMatch,
            };
            self.stats.match_drops.count(drop);
            return;
        }
        if self.match_end.is_none() {
            self.match_end = Some(reason.clone());
            self.pending.clear();
            self.outbox.clear();
            self.events
                .push_back(ProtocolEvent::MatchEnded { match_id, reason });
        }
    }

    /// The relay moved on to `match_id` (the latest announced wins): announced to the driver;
    /// nothing more of the played match goes out.
    fn follow(&mut self, match_id: MatchId, running: bool) {
        if self.next_match.is_some_and(|next| next.match_id > match_id) {
            return;
        }
        let next = NextMatch { match_id, running };
        self.next_match = Some(next);
        self.pending.clear();
        self.outbox.clear();
        self.events.push_back(ProtocolEvent::NextMatch(next));
    }

    /// The relay's later match announced, if any.
    pub fn next_match(&self) -> Option<NextMatch> {
        self.next_match
    }

    /// The driver started over for `next` (see [`ProtocolEvent::NextMatch`]): the connection,
    /// the handshake (slot, reconnect token), the round-trip estimate and the counters stay;
    /// everything of the old match — unconfirmed inputs, the last send, the checksum count, the
    /// clock report, queued messages — starts over. In the lobby the client says it is ready; a
    /// match running already is taken as started.
    pub fn enter_next_match(&mut self, next: NextMatch) {
        self.match_id = Some(next.match_id);
        self.next_match = None;
        self.match_end = None;
        self.started = next.running;
        self.ready_due = !next.running;
        self.pending.clear();
        self.outbox.clear();
        self.last_sent = None;
        self.checksums_seen = 0;
        self.clock = None;
    }
}

#[cfg(test)]
mod tests {
    use simsync_net::{ClientMessage, InputSet, ServerMessage, SessionClientMessage};

    use super::*;
    use crate::protocol::tests::{joined, server_bytes};
    use crate::{ProtocolEvent, TransmitKind};

    fn message(match_id: u32, message: SessionServerMessage) -> Vec<u8> {
        server_bytes(&ServerMessage::session(MatchId(match_id), message))
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
            sets: vec![InputSet {
                inputs: vec![vec![9]; 2],
                replaced: 0,
                disconnected: 0,
            }],
        }
    }

    fn confirmed(events: &[ProtocolEvent]) -> usize {
        events
            .iter()
            .filter(|e| matches!(e, ProtocolEvent::ConfirmedInputs { .. }))
            .count()
    }

    #[test]
    fn a_new_client_takes_the_first_match_it_is_told_of() {
        let (mut p, now) = joined();
        p.handle_message(now, &message(1, sets(1)))
            .expect("decodes");
        assert_eq!(p.stats().match_drops.unknown_match, 1, "no match named yet");
        p.handle_message(now, &message(1, start()))
            .expect("decodes");
        p.handle_message(now, &message(1, sets(1)))
            .expect("decodes");
        let events: Vec<_> = p.events().collect();
        assert_eq!(
            events[0],
            ProtocolEvent::Started {
                match_id: MatchId(1)
            }
        );
        assert_eq!(confirmed(&events), 1);
        assert_eq!(p.playing(), Some(MatchId(1)));
    }

    #[test]
    fn after_its_match_ended_nothing_of_it_is_taken_and_the_next_is_announced() {
        let (mut p, now) = joined();
        p.handle_message(now, &message(1, start()))
            .expect("decodes");
        let ended = SessionServerMessage::MatchEnded {
            reason: MatchEndReason::Completed,
        };
        p.handle_message(now, &message(1, ended)).expect("decodes");
        assert_eq!(p.playing(), None);
        p.handle_message(now, &message(1, sets(1)))
            .expect("decodes");
        assert_eq!(p.stats().match_drops.ended_match, 1);
        p.handle_message(now, &message(2, SessionServerMessage::MatchOpened))
            .expect("decodes");
        let next = NextMatch {
            match_id: MatchId(2),
            running: false,
        };
        let events: Vec<_> = p.events().collect();
        assert_eq!(events.last(), Some(&ProtocolEvent::NextMatch(next)));
        assert_eq!(confirmed(&events), 0);
        // Until the driver starts over, neither match's messages are taken.
        p.handle_message(now, &message(2, sets(1)))
            .expect("decodes");
        assert_eq!(p.events().count(), 0);
        p.enter_next_match(next);
        assert_eq!(p.playing(), Some(MatchId(2)));
        p.step(now, true);
        let ready = p.transmits().find(|t| t.kind == TransmitKind::Ready);
        let ready = ready.expect("ready for the next match's lobby");
        assert_eq!(
            simsync_net::decode::<ClientMessage>(&ready.bytes).expect("decodes"),
            ClientMessage::session(MatchId(2), SessionClientMessage::Ready)
        );
    }

    #[test]
    fn a_start_of_a_later_match_after_playing_announces_it_running_and_the_latest_wins() {
        let (mut p, now) = joined();
        p.handle_message(now, &message(1, start()))
            .expect("decodes");
        p.handle_message(now, &message(3, start()))
            .expect("decodes");
        let three = NextMatch {
            match_id: MatchId(3),
            running: true,
        };
        assert_eq!(p.next_match(), Some(three));
        p.handle_message(now, &message(2, SessionServerMessage::MatchOpened))
            .expect("decodes");
        assert_eq!(p.next_match(), Some(three), "an older announcement");
    }
}
