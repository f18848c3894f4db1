//! What the protocol hands its driver: [`Transmit`]s to put on the connection, [`ProtocolEvent`]s
//! to act on, the [`ProtocolStats`] it counted and the [`ReceiveError`] of a message it could not
//! take.

use simsync_net::{
    DesyncJudge, DesyncReport, InputSet, MatchDrops, MatchEndReason, MatchId, NetChannel, NetError,
    PlayerIndex, ReconnectToken, RejectReason, SessionServerMessage, SnapshotChunk, Tick,
};

/// One encoded client message to put on the connection, on `channel` (the message's own channel,
/// [`simsync_net::ClientMessage::channel`]). A driver that cannot queue it (the channel is full,
/// the connection is not up) hands it back with
/// [`SessionProtocol::transmit_refused`](crate::SessionProtocol::transmit_refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The channel the message goes on.
    pub channel: NetChannel,
    /// The encoded [`simsync_net::ClientMessage`] (bincode, [`simsync_net::encode`]).
    pub bytes: Vec<u8>,
    /// What the message is.
    pub kind: TransmitKind,
}

/// What a [`Transmit`] carries: the protocol's reaction to a refused one depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransmitKind {
    /// The handshake's `Hello` (refused: said again at the next step).
    Hello,
    /// A ping of the round-trip measurement.
    Ping,
    /// The answer to a relay's ping.
    Pong,
    /// `Ready` for the match's lobby (refused: said again at the next step).
    Ready,
    /// The unconfirmed local inputs with the acknowledgement.
    Inputs,
    /// A verified tick's checksum.
    Checksum,
    /// `Goodbye`: the client leaves.
    Goodbye,
    /// Any other session message the driver queued
    /// ([`SessionProtocol::queue_session_message`](crate::SessionProtocol::queue_session_message)).
    Session,
}

/// The relay moved on to a later match than the one played (a rematch): the driver starts
/// its game over for it and calls
/// [`SessionProtocol::enter_next_match`](crate::SessionProtocol::enter_next_match).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextMatch {
    /// The relay's match.
    pub match_id: MatchId,
    /// Whether it runs already (a player that rejoined a running later match): the game
    /// starts running, else it waits in the lobby and the protocol says it is ready.
    pub running: bool,
}

/// The relay's last clock report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockReport {
    /// How early this client's inputs reach the relay, in ticks.
    pub input_lead_ticks: f32,
    /// The relay's tick when it sent the report.
    pub server_tick: Tick,
    /// The newest tick through which the relay judged every seated player's checksums.
    pub judged_through: Tick,
    /// `Desync` messages of the match the relay sent this client.
    pub desyncs_sent: u32,
    /// Checksum reports of the match the relay could not judge.
    pub unjudged_checksums: u32,
}

/// Something the driver acts on, in the order the relay's messages said it.
#[derive(Debug, Clone, PartialEq)]
pub enum ProtocolEvent {
    /// The relay welcomed this client: its player slot (`None` for a spectator), the relay's
    /// tick at the welcome (a client joining a running match plays no input up to it) and the
    /// token that takes the slot again after a drop.
    Joined {
        /// The player slot.
        slot: Option<PlayerIndex>,
        /// The relay's tick when it welcomed this client.
        server_tick: Tick,
        /// The slot's reconnect token, when the relay gives one.
        reconnect_token: Option<ReconnectToken>,
    },
    /// The relay refused this client (or its `Welcome` disagreed with the `Hello`): final.
    Refused(RejectReason),
    /// The match started (`Start` of the played match).
    Started {
        /// The match.
        match_id: MatchId,
    },
    /// Confirmed input sets of ticks `first_tick ..`, as sent (repeats included: the relay
    /// sends them with redundancy).
    ConfirmedInputs {
        /// The tick of `sets[0]`.
        first_tick: Tick,
        /// One set per tick.
        sets: Vec<InputSet>,
    },
    /// The relay's clock report arrived (also kept: [`SessionProtocol::clock`](crate::SessionProtocol::clock)).
    Clock(ClockReport),
    /// The relay asks this client for a snapshot of its verified world (only with
    /// [`ProtocolConfig::serves_snapshots`](crate::ProtocolConfig::serves_snapshots); otherwise
    /// the protocol answered it unavailable).
    SnapshotRequest {
        /// The request id to answer.
        request: u32,
        /// The oldest verified tick the snapshot may hold.
        min_tick: Tick,
        /// The largest snapshot the relay takes, bytes.
        max_bytes: u32,
    },
    /// A chunk of a snapshot the relay forwards to this client.
    SnapshotChunk(SnapshotChunk),
    /// The relay judged the checksums of `tick`: `players` start a desync episode.
    Desync {
        /// The judged tick.
        tick: Tick,
        /// The players whose checksums differ from the judge's.
        players: Vec<PlayerIndex>,
        /// What they differ from.
        judge: DesyncJudge,
    },
    /// The relay's breakdown of a desynced tick.
    DesyncReport(DesyncReport),
    /// Player `slot` left at the relay's tick `tick`.
    PlayerLeft {
        /// The player.
        slot: PlayerIndex,
        /// The relay's tick.
        tick: Tick,
    },
    /// Player `slot` came back at the relay's tick `tick`.
    PlayerRejoined {
        /// The player.
        slot: PlayerIndex,
        /// The relay's tick.
        tick: Tick,
    },
    /// The relay holds confirmed inputs from `oldest_available` on only.
    Behind {
        /// The oldest tick the relay holds.
        oldest_available: Tick,
    },
    /// The relay ended the played match: nothing more of it is sent or taken.
    MatchEnded {
        /// The match.
        match_id: MatchId,
        /// Why.
        reason: MatchEndReason,
    },
    /// The relay moved on to a later match (see [`NextMatch`]).
    NextMatch(NextMatch),
}

impl ProtocolEvent {
    /// The event that reports a session message of the played match: each message its own
    /// event, its fields unchanged. `None` for `Start`, `MatchOpened` and `MatchEnded`: they
    /// change the match and are the match rule's (`crate::matches`), never reported as they
    /// come.
    pub(crate) fn of_session_message(message: SessionServerMessage) -> Option<Self> {
        use SessionServerMessage as M;
        Some(match message {
            M::Start { .. } | M::MatchEnded { .. } | M::MatchOpened => return None,
            M::ConfirmedInputs { first_tick, sets } => Self::ConfirmedInputs { first_tick, sets },
            M::SnapshotRequest {
                request,
                min_tick,
                max_bytes,
            } => Self::SnapshotRequest {
                request,
                min_tick,
                max_bytes,
            },
            M::SnapshotChunk(chunk) => Self::SnapshotChunk(chunk),
            M::Clock {
                input_lead_ticks,
                server_tick,
                judged_through,
                desyncs_sent,
                unjudged_checksums,
            } => Self::Clock(ClockReport {
                input_lead_ticks,
                server_tick,
                judged_through,
                desyncs_sent,
                unjudged_checksums,
            }),
            M::Desync {
                tick,
                players,
                judge,
            } => Self::Desync {
                tick,
                players,
                judge,
            },
            M::PlayerLeft { slot, tick } => Self::PlayerLeft { slot, tick },
            M::PlayerRejoined { slot, tick } => Self::PlayerRejoined { slot, tick },
            M::Behind { oldest_available } => Self::Behind { oldest_available },
            M::DesyncReport {
                tick,
                players,
                components,
                slots,
            } => Self::DesyncReport(DesyncReport {
                tick,
                players,
                components,
                slots,
            }),
        })
    }
}

/// What the protocol counted since it was made (a rematch keeps them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProtocolStats {
    /// Messages that did not decode ([`ReceiveError`]).
    pub rejected_messages: u64,
    /// Session messages dropped for the match they name.
    pub match_drops: MatchDrops,
    /// `Inputs` messages queued.
    pub input_messages_sent: u64,
    /// Encoded bytes of the `Inputs` messages queued.
    pub input_bytes_sent: u64,
    /// `Checksum` messages queued.
    pub checksums_sent: u64,
    /// Pings queued.
    pub pings_sent: u64,
    /// Pongs received for them (the round trips measured).
    pub pongs: u64,
    /// The sum of the round trips measured, ms (with `pongs`: the mean).
    pub rtt_ms_sum: u64,
    /// The longest round trip measured, ms.
    pub rtt_ms_max: u32,
    /// The relay's pings answered.
    pub pings_answered: u64,
    /// The relay's clock reports received.
    pub clock_reports: u64,
    /// Transmits the driver handed back ([`SessionProtocol::transmit_refused`](crate::SessionProtocol::transmit_refused)).
    pub transmits_refused: u64,
}

/// Why a message from the relay was not taken (counted in
/// [`ProtocolStats::rejected_messages`]; the protocol goes on).
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    /// The bytes are not a server message of this protocol version, or break the codec's limits.
    #[error("the relay's message does not decode: {0}")]
    Decode(#[from] NetError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_messages_that_change_the_match_are_not_reported_as_they_come() {
        let start = SessionServerMessage::Start {
            tick: 0,
            players: 2,
            tick_rate_hz: 64,
        };
        let ended = SessionServerMessage::MatchEnded {
            reason: MatchEndReason::Completed,
        };
        for message in [start, ended, SessionServerMessage::MatchOpened] {
            assert_eq!(ProtocolEvent::of_session_message(message), None);
        }
    }

    #[test]
    fn every_other_session_message_is_reported_with_its_fields() {
        let cases = [
            (
                SessionServerMessage::Desync {
                    tick: 90,
                    players: vec![1],
                    judge: DesyncJudge::Authority,
                },
                ProtocolEvent::Desync {
                    tick: 90,
                    players: vec![1],
                    judge: DesyncJudge::Authority,
                },
            ),
            (
                SessionServerMessage::DesyncReport {
                    tick: 90,
                    players: vec![0, 1],
                    components: vec!["Position".into()],
                    slots: vec![7],
                },
                ProtocolEvent::DesyncReport(DesyncReport {
                    tick: 90,
                    players: vec![0, 1],
                    components: vec!["Position".into()],
                    slots: vec![7],
                }),
            ),
            (
                SessionServerMessage::SnapshotRequest {
                    request: 4,
                    min_tick: 60,
                    max_bytes: 1_000,
                },
                ProtocolEvent::SnapshotRequest {
                    request: 4,
                    min_tick: 60,
                    max_bytes: 1_000,
                },
            ),
            (
                SessionServerMessage::PlayerLeft { slot: 1, tick: 33 },
                ProtocolEvent::PlayerLeft { slot: 1, tick: 33 },
            ),
            (
                SessionServerMessage::PlayerRejoined { slot: 1, tick: 80 },
                ProtocolEvent::PlayerRejoined { slot: 1, tick: 80 },
            ),
            (
                SessionServerMessage::Behind {
                    oldest_available: 12,
                },
                ProtocolEvent::Behind {
                    oldest_available: 12,
                },
            ),
        ];
        for (message, event) in cases {
            assert_eq!(ProtocolEvent::of_session_message(message), Some(event));
        }
    }
}
