//! What the client sends of its simulation: its local inputs, repeated until confirmed
//! (redundancy) with the acknowledgement of the confirmed sets, at most one `Inputs` message
//! per tick of its clock; and its verified checksums, every `checksum_every`-th one.

use std::time::Duration;

use simsync_net::{ClientMessage, SessionClientMessage, Tick};

use crate::events::TransmitKind;
use crate::protocol::{InputAck, MAX_PENDING_INPUTS, SessionProtocol};

impl SessionProtocol {
    /// Adds this client's encoded input for `tick` (ticks in increasing order) to the inputs
    /// sent until the relay confirms them. Nothing is kept before the client is seated in a
    /// slot or after it left.
    pub fn add_local_input(&mut self, tick: Tick, bytes: Vec<u8>) {
        if self.slot().is_none() || self.left {
            return;
        }
        self.pending.push_back((tick, bytes));
    }

    /// Drops the unconfirmed inputs of `tick` and before (a snapshot of `tick` was loaded: the
    /// session goes on from the next one).
    pub fn drop_inputs_through(&mut self, tick: Tick) {
        self.pending.retain(|(t, _)| *t > tick);
    }

    /// Queues an `Inputs` message when one is due at `now` (see [`Self::input_message_due`]):
    /// the unconfirmed inputs — those the relay confirmed for this client are dropped, keeping
    /// the last [`input_redundancy`](crate::ProtocolConfig::input_redundancy), and at most
    /// [`MAX_PENDING_INPUTS`] — with `ack.ack_tick`. A started client with nothing pending still
    /// sends the acknowledgement (from `ack.sampled_through + 1`). Returns whether it queued
    /// one; nothing goes out before the slot is known or while no match is played.
    pub fn send_inputs(&mut self, now: Duration, ack: InputAck) -> bool {
        if self.slot().is_none() {
            return false;
        }
        let keep = self.config.input_redundancy.max(1) as usize;
        while self.pending.len() > keep
            && self
                .pending
                .front()
                .is_some_and(|(t, _)| *t <= ack.own_confirmed_through)
        {
            self.pending.pop_front();
        }
        while self.pending.len() > MAX_PENDING_INPUTS {
            self.pending.pop_front();
        }
        let first_tick = match self.pending.front() {
            Some((tick, _)) => *tick,
            None if self.started => ack.sampled_through + 1,
            None => return false,
        };
        if !self.input_message_due(now, ack.sampled_through) {
            return false;
        }
        let Some(match_id) = self.playing() else {
            return false;
        };
        let message = ClientMessage::session(
            match_id,
            SessionClientMessage::Inputs {
                first_tick,
                inputs: self.pending.iter().map(|(_, b)| b.clone()).collect(),
                ack_tick: ack.ack_tick,
            },
        );
        let Some(bytes) = self.queue(&message, TransmitKind::Inputs) else {
            return false;
        };
        self.last_sent = Some((now, ack.sampled_through));
        self.stats.input_messages_sent += 1;
        self.stats.input_bytes_sent += bytes as u64;
        true
    }

    /// Whether an `Inputs` message is due at `now` with local input sampled through
    /// `sampled_through`: when a tick was sampled since the last one, or two ticks' time passed
    /// without a message (a stalled or rejoining client still acknowledges what it received;
    /// two, so a slowed clock never sends twice for one tick). At most one message per tick,
    /// at any frame rate.
    pub fn input_message_due(&self, now: Duration, sampled_through: Tick) -> bool {
        let idle = 2 * Duration::from_secs(1) / self.config.tick_rate_hz.max(1);
        self.last_sent
            .is_none_or(|(at, through)| sampled_through > through || now.saturating_sub(at) >= idle)
    }

    /// Reports the checksum of a verified tick: every
    /// [`checksum_every`](crate::ProtocolConfig::checksum_every)-th call queues a `Checksum`
    /// message for the played match. Returns whether this one was queued.
    pub fn send_checksum(&mut self, tick: Tick, checksum: u64) -> bool {
        self.checksums_seen += 1;
        if !self
            .checksums_seen
            .is_multiple_of(self.config.checksum_every.max(1))
        {
            return false;
        }
        let Some(match_id) = self.playing() else {
            return false;
        };
        let message =
            ClientMessage::session(match_id, SessionClientMessage::Checksum { tick, checksum });
        let queued = self.queue(&message, TransmitKind::Checksum).is_some();
        self.stats.checksums_sent += u64::from(queued);
        queued
    }
}

#[cfg(test)]
mod tests {
    use simsync_net::{MatchId, ServerMessage, SessionServerMessage};

    use super::*;
    use crate::protocol::tests::{MS, joined, server_bytes};

    fn started() -> (SessionProtocol, Duration) {
        let (mut p, now) = joined();
        let start = SessionServerMessage::Start {
            tick: 0,
            players: 2,
            tick_rate_hz: 64,
        };
        let bytes = server_bytes(&ServerMessage::session(MatchId(1), start));
        p.handle_message(now, &bytes).expect("decodes");
        p.events().for_each(drop);
        (p, now)
    }

    fn ack(ack_tick: Tick, own: Tick, sampled: Tick) -> InputAck {
        InputAck {
            ack_tick,
            own_confirmed_through: own,
            sampled_through: sampled,
        }
    }

    /// The `Inputs` message queued: (first tick, inputs, ack tick).
    fn sent(p: &mut SessionProtocol) -> Option<(Tick, Vec<Vec<u8>>, Tick)> {
        let transmit = p.transmits().find(|t| t.kind == TransmitKind::Inputs)?;
        match simsync_net::decode::<ClientMessage>(&transmit.bytes).ok()? {
            ClientMessage::Session(m) => match m.message {
                SessionClientMessage::Inputs {
                    first_tick,
                    inputs,
                    ack_tick,
                } => Some((first_tick, inputs, ack_tick)),
                _ => None,
            },
            _ => None,
        }
    }

    #[test]
    fn unconfirmed_inputs_are_repeated_keeping_the_redundancy() {
        let (mut p, now) = started();
        for tick in 1..=6 {
            p.add_local_input(tick, vec![tick as u8]);
        }
        assert!(p.send_inputs(now, ack(0, 0, 6)));
        let (first, inputs, ack_tick) = sent(&mut p).expect("inputs");
        assert_eq!((first, inputs.len(), ack_tick), (1, 6, 0));
        // The relay confirmed this client through 5: the last 3 are still repeated.
        p.add_local_input(7, vec![7]);
        assert!(p.send_inputs(now + 16 * MS, ack(5, 5, 7)));
        let (first, inputs, ack_tick) = sent(&mut p).expect("inputs");
        assert_eq!(first, 5);
        assert_eq!(inputs, vec![vec![5], vec![6], vec![7]]);
        assert_eq!(ack_tick, 5);
        assert_eq!(p.stats().input_messages_sent, 2);
    }

    #[test]
    fn at_most_one_message_per_tick_and_an_idle_client_still_acknowledges() {
        let (mut p, now) = started();
        p.add_local_input(1, vec![1]);
        assert!(p.send_inputs(now, ack(0, 0, 1)));
        assert!(!p.send_inputs(now + MS, ack(0, 0, 1)), "no new tick");
        // Two ticks' time at 64 Hz: 31.25 ms.
        assert!(!p.send_inputs(now + 31 * MS, ack(0, 0, 1)));
        assert!(p.send_inputs(now + 32 * MS, ack(1, 1, 1)));
        p.transmits().for_each(drop);
        // Everything confirmed and trimmed to the redundancy: the ack still goes out.
        let mut q = started().0;
        q.last_sent = None;
        assert!(q.send_inputs(now, ack(9, 9, 9)));
        let (first, inputs, ack_tick) = sent(&mut q).expect("an acknowledgement");
        assert_eq!((first, inputs.len(), ack_tick), (10, 0, 9));
    }

    #[test]
    fn nothing_is_sent_before_the_match_or_kept_before_the_slot() {
        let (mut p, now) = joined();
        p.add_local_input(1, vec![1]);
        assert!(!p.send_inputs(now, ack(0, 0, 1)), "no match named");
        let mut fresh = SessionProtocol::new(crate::ProtocolConfig::new(
            crate::protocol::tests::hello(),
            64,
        ));
        fresh.add_local_input(1, vec![1]);
        assert_eq!(fresh.pending_inputs().count(), 0, "not seated");
    }

    #[test]
    fn every_nth_checksum_goes_out() {
        let (mut p, _) = started();
        p.config.checksum_every = 3;
        let queued: Vec<bool> = (1..=7).map(|t| p.send_checksum(t, 40 + t as u64)).collect();
        assert_eq!(queued, [false, false, true, false, false, true, false]);
        assert_eq!(p.stats().checksums_sent, 2);
        let sums: Vec<ClientMessage> = p
            .transmits()
            .map(|t| simsync_net::decode(&t.bytes).expect("decodes"))
            .collect();
        assert_eq!(
            sums[0],
            ClientMessage::session(
                MatchId(1),
                SessionClientMessage::Checksum {
                    tick: 3,
                    checksum: 43
                }
            )
        );
    }
}
