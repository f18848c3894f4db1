//! The client side of simsync's relay protocol, sans IO: a [`SessionProtocol`] takes the
//! relay's messages as bytes and gives the messages to send as bytes ([`Transmit`]) and what
//! happened as [`ProtocolEvent`]s. It reads no clock (every call is given `now`), owns no
//! socket and knows no renet and no Bevy: a driver moves the bytes over its connection and the
//! simulation acts on the events. The networked session of `simsync_deterministic` drives it
//! over renet, and the load generator (`simsync_loadgen`) drives the same state machine
//! without a simulation.
//!
//! What it does:
//! - **handshake**: the `Hello` once the connection is up (said again when the driver could
//!   not queue it, and with the slot's reconnect token on a new connection,
//!   [`SessionProtocol::restart_handshake`]); `Welcome` → [`ProtocolEvent::Joined`],
//!   `Rejected` or a `Welcome` that disagrees with the `Hello` → [`ProtocolEvent::Refused`];
//! - **round trips**: a ping every [`ProtocolConfig::ping_interval`], the relay's pings
//!   answered, the round-trip time and jitter from the pongs;
//! - **matches**: every session message names its match; only the played match's messages are
//!   taken while it is played (the rest is counted, [`ProtocolStats::match_drops`]); `Start`,
//!   `MatchOpened` (answered `Ready`) and `MatchEnded` move the match; a later match is
//!   announced ([`ProtocolEvent::NextMatch`]) for the driver to start over
//!   ([`SessionProtocol::enter_next_match`]);
//! - **inputs**: the local inputs the driver adds are sent until the relay confirms them, at
//!   least the last [`ProtocolConfig::input_redundancy`] in every `Inputs` message, with the
//!   acknowledgement of the confirmed sets ([`InputAck`]) — at most one message per tick, and
//!   one every two ticks' time while idle;
//! - **confirmed sets, the clock report, desyncs, presence, falling behind and snapshot
//!   chunks** are handed over as events; a snapshot request is answered unavailable unless the
//!   driver serves snapshots ([`ProtocolConfig::serves_snapshots`]);
//! - **checksums**: every [`ProtocolConfig::checksum_every`]-th verified tick reported.
//!
//! Bad bytes never panic: a message that does not decode is a [`ReceiveError`], counted in
//! [`ProtocolStats::rejected_messages`], and the protocol goes on.
//!
//! A driver's loop, per frame:
//! 1. feed every message received: [`SessionProtocol::handle_message`];
//! 2. [`SessionProtocol::step`] with the connection's state;
//! 3. add the local inputs of the new ticks ([`SessionProtocol::add_local_input`]) and
//!    [`SessionProtocol::send_inputs`]; report verified checksums
//!    ([`SessionProtocol::send_checksum`]);
//! 4. act on [`SessionProtocol::events`]; put every [`SessionProtocol::poll_transmit`] on its
//!    channel, handing back what does not fit ([`SessionProtocol::transmit_refused`]).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod events;
mod inputs;
mod matches;
mod protocol;

pub use events::{
    ClockReport, NextMatch, ProtocolEvent, ProtocolStats, ReceiveError, Transmit, TransmitKind,
};
pub use protocol::{InputAck, MAX_PENDING_INPUTS, ProtocolConfig, SessionProtocol};
