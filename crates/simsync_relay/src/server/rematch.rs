//! The relay's matches ([matches and rematches](crate::rules#matches-and-rematches)): ending
//! the running match, opening the next one on the same connections with every seated player in
//! its slot, and starting it once every seated player is ready. Which command does what from
//! which phase is the pure `crate::matches::match_steps`; this is its I/O.

use bevy::prelude::*;
use simsync_net::bevy_renet::RenetServer;
use simsync_net::renet::ClientId;
use simsync_net::{MatchEndReason, MatchId, MatchPhase, match_drop};

use super::{RelayEvent, RelayServer, ServerMessage, ServerNetExt, SessionServerMessage};
use crate::episodes::DesyncEpisodes;
use crate::matches::{MatchChanged, MatchCommandError, MatchStep, RelayCommand, match_steps};

impl RelayServer {
    /// Applies `command` to the current match ([matches](crate::rules#matches-and-rematches)):
    /// ends it, opens the next, or both; the connections and every player's slot stay. Returns
    /// the current match after the command (the ended one after `EndMatch`, the new one after
    /// `StartMatch` and `Rematch`). The changes are also reported to the app as
    /// [`MatchChanged`] by the plugin.
    ///
    /// # Errors
    /// The [`MatchCommandError`] of a command the match's phase does not allow (`EndMatch` or
    /// `Rematch` before the match started — no clients yet, clients still connecting, or a
    /// second rematch in the same update —, `EndMatch` twice, `StartMatch` while the match
    /// runs); nothing changes then.
    pub fn command(
        &mut self,
        server: &mut RenetServer,
        command: &RelayCommand,
    ) -> Result<MatchId, MatchCommandError> {
        for step in match_steps(command, self.match_id, self.phase)? {
            match step {
                MatchStep::End(reason) => self.end_match(server, reason),
                MatchStep::Open => self.open_next_match(server),
            }
        }
        Ok(self.match_id)
    }

    /// Ends the running match: the clock stops, snapshot transfers end, every seated client is
    /// told `MatchEnded`, and nothing more of the match is taken.
    pub(super) fn end_match(&mut self, server: &mut RenetServer, reason: MatchEndReason) {
        let reason = reason.bounded();
        self.phase = MatchPhase::Ended;
        self.stats.phase = MatchPhase::Ended;
        self.end_reason = Some(reason.clone());
        self.transfers.clear();
        info!(
            "relay: {} ended at server tick {} ({reason})",
            self.match_id, self.server_tick
        );
        let ended = SessionServerMessage::MatchEnded {
            reason: reason.clone(),
        };
        self.send_to_seated(server, &ServerMessage::session(self.match_id, ended));
        self.events.push(RelayEvent::Match(MatchChanged::Ended {
            match_id: self.match_id,
            reason,
            stats: Box::new(self.stats.clone()),
        }));
    }

    /// Opens the next match: a new id, the per-match state and counters from zero, every seated
    /// player not ready until it says so; every seated client is told `MatchOpened`.
    fn open_next_match(&mut self, server: &mut RenetServer) {
        self.match_id = self.match_id.next();
        self.reset_for_match();
        info!(
            "relay: {} opens; it starts once every seated player is ready",
            self.match_id
        );
        let opened = ServerMessage::session(self.match_id, SessionServerMessage::MatchOpened);
        self.send_to_seated(server, &opened);
        self.events.push(RelayEvent::Match(MatchChanged::Opened {
            match_id: self.match_id,
        }));
        self.try_start(server);
    }

    /// Forgets everything of the match that ended — clock, confirmed sets, inputs, checksum
    /// and breakdown votes, desync episodes and reports, snapshot transfers, the counters
    /// ([`RelayStats::for_next_match`](crate::RelayStats::for_next_match)) — and puts every
    /// slot in the lobby: its connection, reconnect token, rate limits and round-trip time
    /// stay; it is not ready.
    fn reset_for_match(&mut self) {
        self.phase = MatchPhase::Lobby;
        self.end_reason = None;
        self.stats = self.stats.for_next_match(self.match_id);
        self.server_tick = 0;
        self.confirmed.clear();
        self.confirmed_tick = 0;
        self.checksums = Default::default();
        self.restart_authority();
        self.breakdowns = Default::default();
        self.disagreement_run = false;
        self.episodes = DesyncEpisodes::new(self.slots.len());
        self.reports.clear();
        self.transfers.clear();
        self.served.clear();
        for slot in &mut self.slots {
            slot.inputs.clear();
            slot.settled.clear();
            slot.last_input.clone_from(&self.config.default_input);
            slot.ack = 0;
            slot.clock_sent = None;
            slot.desyncs_sent = 0;
            slot.sent_through = 0;
            slot.resend_next = None;
            slot.resend_after = self.now;
            slot.last_heard = self.now;
            slot.silent = false;
            slot.ready = false;
            slot.departure = None;
        }
    }

    /// Starts the match in the lobby once `start_players` slots are taken and every seated
    /// player is ready.
    pub(super) fn try_start(&mut self, server: &mut RenetServer) {
        if self.phase != MatchPhase::Lobby {
            return;
        }
        let seated = self.slots.iter().filter(|s| s.client.is_some());
        let (count, all_ready) =
            seated.fold((0usize, true), |(n, ready), s| (n + 1, ready && s.ready));
        if count >= usize::from(self.config.start_players) && all_ready {
            self.start(server);
        }
    }

    /// A client says its session is set up for match `match_id`: its seated player is ready
    /// when that is the match in the lobby (the match starts once every seated player is). A
    /// `Ready` for the running match is a repeat, ignored; any other is dropped and counted by
    /// the match rule.
    pub(super) fn on_ready(
        &mut self,
        server: &mut RenetServer,
        client: ClientId,
        match_id: MatchId,
    ) {
        let Some(slot) = self.by_client.get(&client).map(|s| usize::from(*s)) else {
            self.stats.ignored_messages += 1;
            return;
        };
        match match_drop(match_id, Some((self.match_id, self.phase))) {
            Some(simsync_net::MatchDrop::NotStarted) => {
                if !self.slots[slot].ready {
                    info!("relay: player {slot} is ready for {match_id}");
                }
                self.slots[slot].ready = true;
                self.stats.ready[slot] = true;
                self.try_start(server);
            }
            None => {}
            Some(drop) => self.stats.match_drops.count(drop),
        }
    }

    /// The welcomed `client` takes `slot` while no match runs. A new player (no reconnect
    /// token) is ready at once: its session was never used. A player coming back with its
    /// token may have played an earlier match: it is told where the relay is — `MatchOpened`
    /// in the lobby (it sets its session up and says it is ready), `MatchEnded` after a match.
    pub(super) fn seat_between_matches(
        &mut self,
        server: &mut RenetServer,
        client: ClientId,
        slot: u8,
        with_token: bool,
    ) {
        let index = usize::from(slot);
        let s = &mut self.slots[index];
        if let Some(old) = s.client.replace(client) {
            // The slot's silent connection: the token's new one takes its place.
            self.by_client.remove(&old);
            server.disconnect(old);
        }
        s.ready = !with_token;
        s.silent = false;
        s.departure = None;
        s.last_heard = self.now;
        self.stats.ready[index] = !with_token;
        self.by_client.insert(client, slot);
        if !with_token {
            return;
        }
        let message = match (self.phase, &self.end_reason) {
            (MatchPhase::Ended, Some(reason)) => SessionServerMessage::MatchEnded {
                reason: reason.clone(),
            },
            _ => SessionServerMessage::MatchOpened,
        };
        if let Err(error) = server.send_msg(client, &ServerMessage::session(self.match_id, message))
        {
            warn!("relay: match state not sent to player {slot}: {error}");
        }
    }

    /// Sends `message` to every seated client.
    fn send_to_seated(&mut self, server: &mut RenetServer, message: &ServerMessage) {
        for (slot, client) in self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.client.map(|c| (i, c)))
        {
            if let Err(error) = server.send_msg(client, message) {
                warn!("relay: {message:?} not sent to player {slot}: {error}");
            }
        }
    }
}
