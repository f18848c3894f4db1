//! The relay client's matches ([what survives a rematch](crate::rules#what-survives-a-rematch)):
//! which match the session plays and which of the relay's session messages it takes is the
//! relay protocol's rule ([`simsync_relay_client::SessionProtocol::playing`],
//! [`simsync_net::match_drop`]); here the relay's next match is handed to the session rebuilt
//! for it, with the connection.

use simsync_relay_client::SessionProtocol;

use super::{NextMatch, RelayClient};
use crate::input::SimInput;

impl<I: SimInput> RelayClient<I> {
    /// The relay's later match this session is to be rebuilt for, if any.
    pub(crate) fn next_match(&self) -> Option<NextMatch> {
        self.protocol.next_match()
    }

    /// This client, new for the session rebuilt for `next`, takes over `old`'s connection: the
    /// relay protocol (handshake, slot, reconnect token, `Hello`, round-trip estimate; it
    /// enters `next`), the reconnect policy's state and the client's clock (pings in flight
    /// stay valid). Everything of the old match — inputs, confirmed sets, the lead, the stall
    /// watch, snapshot transfers, counters — starts over. In the relay's lobby it says it is
    /// ready; a match running already (a rejoin) is taken as started, with `old`'s input floor.
    pub(crate) fn take_connection(&mut self, old: &mut RelayClient<I>, next: NextMatch) {
        let placeholder = SessionProtocol::new(old.protocol.config().clone());
        self.protocol = std::mem::replace(&mut old.protocol, placeholder);
        self.protocol.enter_next_match(next);
        self.base = self.protocol.stats().clone();
        self.reconnect = std::mem::take(&mut old.reconnect);
        self.reconnect_due = std::mem::take(&mut old.reconnect_due);
        self.now = old.now;
        self.stats.slot = old.stats.slot;
        self.stats.reconnect_token = old.stats.reconnect_token;
        self.stats.reconnect = old.stats.reconnect;
        if next.running {
            self.input_floor = old.input_floor;
        }
        self.sync_stats();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use simsync_net::{MatchId, ServerMessage, SessionServerMessage};

    use super::*;
    use crate::config::{NetworkSessionConfig, SessionConfig};
    use crate::input::InputBuffer;
    use crate::source::relay_client::tests::{hear, join};

    fn client() -> RelayClient<u32> {
        RelayClient::new(NetworkSessionConfig::default(), &SessionConfig::default())
    }

    fn message(match_id: u32, message: SessionServerMessage) -> ServerMessage {
        ServerMessage::session(MatchId(match_id), message)
    }

    fn start() -> SessionServerMessage {
        SessionServerMessage::Start {
            tick: 0,
            players: 2,
            tick_rate_hz: 64,
        }
    }

    #[test]
    fn the_rebuilt_session_keeps_the_connection_and_says_it_is_ready() {
        let mut old = client();
        let mut buffer = InputBuffer::<u32>::new(2, 64).expect("buffer");
        join(&mut old, &mut buffer, 1, 0);
        old.stats.late_inputs = 5;
        old.now = Duration::from_secs(30);
        hear(&mut old, &mut buffer, message(1, start()));
        hear(
            &mut old,
            &mut buffer,
            message(1, SessionServerMessage::MatchOpened),
        );
        assert_eq!(old.stats.match_drops.ended_match, 0);
        hear(
            &mut old,
            &mut buffer,
            message(2, SessionServerMessage::MatchOpened),
        );
        let next = old.next_match().expect("a rematch");
        assert_eq!(next.match_id, MatchId(2));
        let mut new = client();
        new.take_connection(&mut old, next);
        assert_eq!(new.stats.slot, Some(1));
        assert_eq!(new.stats.late_inputs, 0, "counters start over");
        assert_eq!(new.now, Duration::from_secs(30));
        assert_eq!(new.protocol.playing(), Some(MatchId(2)));
        assert_eq!(new.stats.match_id, Some(MatchId(2)));
        assert!(!new.stats.started);
        // The old match's start is dropped (counted on the new session); the lobby's starts it.
        let mut buffer = InputBuffer::<u32>::new(2, 64).expect("buffer");
        hear(&mut new, &mut buffer, message(1, start()));
        assert!(!new.stats.started);
        assert_eq!(new.stats.match_drops.ended_match, 1);
        hear(&mut new, &mut buffer, message(2, start()));
        assert!(new.stats.started);
    }
}
