//! Repeated acknowledgement packets held back ([wire rule 13](crate::rules)): [`AckRepeats`],
//! plain data, used by [`UdpServerTransport`](crate::UdpServerTransport) on every packet it
//! sends.
//!
//! renet acknowledges what a connection received in a packet of its own (an ack packet: a
//! packet number and the ranges of packet numbers received). It puts one among a connection's
//! outgoing packets at every update while any range waits for the peer's confirmation, so a
//! server that updates 250 times a second sends each client 250 ack packets a second, most of
//! them the same ranges again, whatever the client sent. Over UDP each is a datagram of its own:
//! encrypted, one system call, delivered.
//!
//! An ack packet whose ranges are the ones last sent to that connection is held back unless
//! [`ACK_REPEAT`] has passed since: the first acknowledgement of anything new still goes out at
//! the update that has it (so the client's round-trip estimate does not move), and a lost one
//! is repeated within [`ACK_REPEAT`] (well inside the reliable channels' 200 ms resend time) or
//! with the next new range, whichever comes first. Nothing else is held: payload packets, and
//! ack packets with new ranges, go out as before. renet keeps unconfirmed ranges until the
//! peer confirms an ack packet that carried them, so a held-back packet loses nothing.
//!
//! What it does change, on renet's side (see [wire rule 13](crate::rules)): the server's renet
//! counts a held packet as sent and never acknowledged, so its `packet_loss` and bytes sent
//! include them, and its round trip is measured on the packets that went out only; each held
//! packet's number is a gap in what the client receives, so the client's ack packets carry a
//! range per run of packets between gaps (renet keeps at most 64) until the server confirms
//! them, about a round trip.

use std::collections::HashMap;
use std::time::Duration;

use renet::ClientId;

/// The least time between two sends of the same acknowledgement ranges to one connection:
/// 50 ms, a quarter of the reliable channels' resend time
/// ([`CONTROL_RESEND_MS`](crate::CONTROL_RESEND_MS)).
pub const ACK_REPEAT: Duration = Duration::from_millis(50);

/// renet's type byte for an ack packet (renet 2's packet layout: the type, the packet number
/// as a QUIC variable-length integer, then the ranges).
const RENET_ACK: u8 = 4;

/// The ranges an ack packet carries (the bytes after its packet number), or `None` if `packet`
/// is not a renet ack packet with ranges.
fn ack_ranges(packet: &[u8]) -> Option<&[u8]> {
    let (&kind, rest) = packet.split_first()?;
    if kind != RENET_ACK {
        return None;
    }
    // A QUIC variable-length integer: its first byte's two high bits give its length, 1, 2, 4
    // or 8 bytes.
    let number_len = 1usize << (rest.first()? >> 6);
    rest.get(number_len..).filter(|ranges| !ranges.is_empty())
}

/// What a connection was last sent of its acknowledgements.
#[derive(Debug, Clone, Default)]
struct LastAck {
    ranges: Vec<u8>,
    at: Duration,
}

/// Per connection, the acknowledgement ranges last sent and when ([wire rule
/// 13](crate::rules)): [`send`](Self::send) says whether a packet goes out. Memory: one entry
/// per connection that was sent an ack packet, the size of its ranges (a few bytes; at most a
/// packet's); [`forget`](Self::forget) drops a connection's.
#[derive(Debug, Clone, Default)]
pub struct AckRepeats {
    last: HashMap<ClientId, LastAck>,
    held: u64,
}

impl AckRepeats {
    /// Whether `packet`, due to `client` at `now` (any monotonic clock), is sent: `false` only
    /// for an ack packet carrying the ranges last sent to `client` less than [`ACK_REPEAT`]
    /// ago (counted in [`held`](Self::held)). Every other packet is sent, and an ack packet
    /// that is sent becomes `client`'s last.
    pub fn send(&mut self, client: ClientId, packet: &[u8], now: Duration) -> bool {
        let Some(ranges) = ack_ranges(packet) else {
            return true;
        };
        let last = self.last.entry(client).or_default();
        // `ranges` is never empty, so a connection's first ack never equals its (empty) last.
        if last.ranges == ranges && now.saturating_sub(last.at) < ACK_REPEAT {
            self.held += 1;
            return false;
        }
        last.ranges.clear();
        last.ranges.extend_from_slice(ranges);
        last.at = now;
        true
    }

    /// Forgets `client` (its connection ended): its next ack packet is sent whatever it holds.
    pub fn forget(&mut self, client: ClientId) {
        self.last.remove(&client);
    }

    /// Ack packets held back so far.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Connections remembered.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether no connection is remembered.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection_config;
    use renet::{DefaultChannel, RenetClient, RenetServer};

    const MS: Duration = Duration::from_millis(1);

    /// An ack packet as renet lays it out: type, packet number, ranges.
    fn ack(number: &[u8], ranges: &[u8]) -> Vec<u8> {
        let mut p = vec![RENET_ACK];
        p.extend_from_slice(number);
        p.extend_from_slice(ranges);
        p
    }

    #[test]
    fn the_same_ranges_again_within_the_repeat_time_are_held_and_then_sent() {
        let mut acks = AckRepeats::default();
        assert!(acks.send(1, &ack(&[7], &[20, 5, 0]), Duration::ZERO));
        // A later packet number, the same ranges: held for 50 ms.
        assert!(!acks.send(1, &ack(&[8], &[20, 5, 0]), 4 * MS));
        assert!(!acks.send(1, &ack(&[9], &[20, 5, 0]), 49 * MS));
        assert_eq!(acks.held(), 2);
        assert!(acks.send(1, &ack(&[10], &[20, 5, 0]), 50 * MS));
        // The repeat time starts again from the one sent.
        assert!(!acks.send(1, &ack(&[11], &[20, 5, 0]), 99 * MS));
        assert!(acks.send(1, &ack(&[12], &[20, 5, 0]), 100 * MS));
        assert_eq!(acks.held(), 3);
    }

    #[test]
    fn new_ranges_go_at_once_and_other_connections_are_apart() {
        let mut acks = AckRepeats::default();
        assert!(acks.send(1, &ack(&[7], &[20, 5, 0]), Duration::ZERO));
        assert!(acks.send(1, &ack(&[8], &[21, 6, 0]), MS));
        assert!(!acks.send(1, &ack(&[9], &[21, 6, 0]), 2 * MS));
        // Another connection's same ranges are its own first.
        assert!(acks.send(2, &ack(&[3], &[21, 6, 0]), 2 * MS));
        assert_eq!((acks.held(), acks.len()), (1, 2));
        // A connection forgotten is sent its next ack whatever it holds.
        acks.forget(1);
        assert!(acks.send(1, &ack(&[10], &[21, 6, 0]), 3 * MS));
    }

    #[test]
    fn payload_packets_and_malformed_ones_are_always_sent() {
        let mut acks = AckRepeats::default();
        for packet in [
            vec![0, 7, 1, 0, 1, 3, 9, 9, 9],
            vec![1, 7, 2, 0, 1, 1, 5],
            vec![],
            vec![RENET_ACK],
            vec![RENET_ACK, 0xC0, 1, 2],
            // A number and no ranges.
            vec![RENET_ACK, 5],
        ] {
            assert!(acks.send(1, &packet, Duration::ZERO));
            assert!(acks.send(1, &packet, MS), "{packet:?}");
        }
        assert_eq!((acks.held(), acks.len()), (0, 0));
    }

    #[test]
    fn packet_numbers_of_every_length_are_skipped() {
        let mut acks = AckRepeats::default();
        // 1-, 2-, 4- and 8-byte numbers before the same ranges.
        assert!(acks.send(1, &ack(&[0x3F], &[9, 1, 0]), Duration::ZERO));
        assert!(!acks.send(1, &ack(&[0x40, 0x80], &[9, 1, 0]), MS));
        assert!(!acks.send(1, &ack(&[0x80, 0, 1, 0], &[9, 1, 0]), MS));
        assert!(!acks.send(1, &ack(&[0xC0, 0, 0, 0, 0, 1, 0, 0], &[9, 1, 0]), MS));
        assert!(acks.send(1, &ack(&[0xC0, 0, 0, 0, 0, 1, 0, 1], &[9, 2, 0]), MS));
        assert_eq!(acks.held(), 3);
    }

    /// A renet server and client connected in memory, `n` client packets delivered.
    fn exchange(server: &mut RenetServer, client: &mut RenetClient, n: usize) {
        for _ in 0..n {
            client.send_message(DefaultChannel::Unreliable, vec![1u8; 8]);
            for packet in client.get_packets_to_send() {
                server.process_packet_from(&packet, 1).expect("delivered");
            }
        }
    }

    /// The packets renet wants to send the client now.
    fn due(server: &mut RenetServer) -> Vec<Vec<u8>> {
        server
            .get_packets_to_send(1)
            .expect("connected")
            .into_iter()
            .map(|p| p.to_vec())
            .collect()
    }

    #[test]
    fn renets_own_repeated_ack_packets_are_recognised_and_held() {
        // Guards the layout read above against a renet upgrade.
        let mut server = RenetServer::new(connection_config());
        let mut client = RenetClient::new(connection_config());
        server.add_connection(1);
        client.set_connected();
        exchange(&mut server, &mut client, 3);
        let mut acks = AckRepeats::default();
        let first = due(&mut server);
        assert_eq!(first.len(), 1, "one ack packet and nothing else");
        assert!(ack_ranges(&first[0]).is_some());
        assert!(acks.send(1, &first[0], Duration::ZERO));
        // Nothing new arrived: renet repeats the same ranges under a new packet number.
        server.update(4 * MS);
        let again = due(&mut server);
        assert_eq!(again.len(), 1);
        assert_ne!(again[0], first[0], "a new packet number");
        assert!(!acks.send(1, &again[0], 4 * MS));
        // A new client packet: new ranges, sent at once.
        exchange(&mut server, &mut client, 1);
        server.update(4 * MS);
        let fresh = due(&mut server);
        assert!(acks.send(1, &fresh[0], 8 * MS));
        // A payload packet is never held, and the ack beside it is judged on its own.
        server.send_message(1, DefaultChannel::Unreliable, vec![2u8; 8]);
        server.update(4 * MS);
        let both = due(&mut server);
        assert_eq!(both.len(), 2);
        let sent: Vec<bool> = both.iter().map(|p| acks.send(1, p, 12 * MS)).collect();
        assert_eq!(sent, vec![true, false]);
        assert_eq!(acks.held(), 2);
    }
}
