//! The renet channels of every simsync connection ([`NetChannel`], [`connection_config`]).

use std::time::Duration;

use renet::{ChannelConfig, ConnectionConfig, SendType};
use serde::{Deserialize, Serialize};

/// Time after which an unacknowledged reliable message is sent again, in ms.
pub const CONTROL_RESEND_MS: u64 = 200;
/// Send-queue (and receive-queue) memory of the control channel, in bytes.
pub const CONTROL_MEMORY_BYTES: usize = 1024 * 1024;
/// Send-queue (and receive-queue) memory of the inputs channel, in bytes.
pub const INPUTS_MEMORY_BYTES: usize = 256 * 1024;
/// Send-queue (and receive-queue) memory of the state channel, in bytes.
pub const STATE_MEMORY_BYTES: usize = 1024 * 1024;
/// Send-queue (and receive-queue) memory of the snapshot channel, in bytes (2 MiB: 128 chunks
/// of [`crate::SNAPSHOT_CHUNK_BYTES`] in flight).
pub const SNAPSHOT_MEMORY_BYTES: usize = 2 * 1024 * 1024;
/// Bytes renet may put on the wire per connection per `update` (renet's default, 60,000 bytes:
/// 28.8 Mbit/s at 60 updates per second).
pub const BYTES_PER_UPDATE: u64 = 60_000;
/// Largest unreliable message that still fits one renet packet (renet's slice size), in bytes.
pub const UNRELIABLE_MESSAGE_BUDGET: usize = 1_200;

/// The channels of a simsync connection, the same in both directions; `u8::from(channel)` is the
/// renet channel id ([channel rules](crate::rules)).
///
/// | id | [`NetChannel`] | delivery | carries | send-queue memory |
/// |---|---|---|---|---|
/// | 0 | [`Control`](NetChannel::Control) | reliable, ordered, resent after [`CONTROL_RESEND_MS`] ms | handshake, session start, checksums, ownership bids/grants/changes | [`CONTROL_MEMORY_BYTES`] (1 MiB) |
/// | 1 | [`Inputs`](NetChannel::Inputs) | unreliable | redundant input batches, confirmed input sets, clock info, ping/pong | [`INPUTS_MEMORY_BYTES`] (256 KiB) |
/// | 2 | [`State`](NetChannel::State) | unreliable | physics state updates and their relay | [`STATE_MEMORY_BYTES`] (1 MiB) |
/// | 3 | [`Snapshot`](NetChannel::Snapshot) | reliable, ordered, resent after [`CONTROL_RESEND_MS`] ms | world snapshot chunks (late join, rejoin) | [`SNAPSHOT_MEMORY_BYTES`] (2 MiB) |
///
/// The order of the list is renet's priority order when it fills a packet: control first, then
/// inputs, then state, then snapshot chunks (a transfer never delays inputs), sharing [`BYTES_PER_UPDATE`] bytes per `update`.
///
/// What renet does with these (renet 2.0): a reliable channel whose unacknowledged messages
/// exceed its memory *disconnects* the connection, so [`crate::ClientNetExt`] and
/// [`crate::ServerNetExt`] check for room first and return [`crate::NetError::ChannelFull`]
/// instead; an unreliable channel over its memory drops the new message. Unreliable messages are
/// neither deduplicated nor reordered by renet: a packet the network duplicates delivers its
/// messages twice, so unreliable payloads carry their own tick or sequence number. Messages above
/// renet's slice size (1,200 bytes) are split into slices; an unreliable sliced message is lost
/// if any slice is, so keep unreliable messages below [`UNRELIABLE_MESSAGE_BUDGET`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NetChannel {
    /// Channel 0: reliable, ordered.
    Control,
    /// Channel 1: unreliable; for redundant inputs and timing.
    Inputs,
    /// Channel 2: unreliable; for physics state.
    State,
    /// Channel 3: reliable, ordered; for world snapshot chunks (added in protocol version 3).
    Snapshot,
}

impl NetChannel {
    /// All channels, in id (and renet priority) order.
    pub const ALL: [NetChannel; 4] = [
        NetChannel::Control,
        NetChannel::Inputs,
        NetChannel::State,
        NetChannel::Snapshot,
    ];

    /// The renet channel id (0, 1, 2 or 3).
    pub const fn id(self) -> u8 {
        match self {
            NetChannel::Control => 0,
            NetChannel::Inputs => 1,
            NetChannel::State => 2,
            NetChannel::Snapshot => 3,
        }
    }

    /// The channel with renet id `id`, or `None` for an id this crate does not configure.
    pub const fn from_id(id: u8) -> Option<Self> {
        match id {
            0 => Some(NetChannel::Control),
            1 => Some(NetChannel::Inputs),
            2 => Some(NetChannel::State),
            3 => Some(NetChannel::Snapshot),
            _ => None,
        }
    }

    /// Whether renet delivers every message of this channel (in order).
    pub const fn is_reliable(self) -> bool {
        matches!(self, NetChannel::Control | NetChannel::Snapshot)
    }

    /// The renet configuration of this channel.
    pub fn config(self) -> ChannelConfig {
        let (max_memory_usage_bytes, send_type) = match self {
            NetChannel::Control => (
                CONTROL_MEMORY_BYTES,
                SendType::ReliableOrdered {
                    resend_time: Duration::from_millis(CONTROL_RESEND_MS),
                },
            ),
            NetChannel::Inputs => (INPUTS_MEMORY_BYTES, SendType::Unreliable),
            NetChannel::State => (STATE_MEMORY_BYTES, SendType::Unreliable),
            NetChannel::Snapshot => (
                SNAPSHOT_MEMORY_BYTES,
                SendType::ReliableOrdered {
                    resend_time: Duration::from_millis(CONTROL_RESEND_MS),
                },
            ),
        };
        ChannelConfig {
            channel_id: self.id(),
            max_memory_usage_bytes,
            send_type,
        }
    }
}

impl From<NetChannel> for u8 {
    fn from(channel: NetChannel) -> Self {
        channel.id()
    }
}

/// The renet [`ConnectionConfig`] of every simsync server and client: the four
/// [`NetChannel`]s in both directions and [`BYTES_PER_UPDATE`]. Server and client must use the
/// same configuration.
pub fn connection_config() -> ConnectionConfig {
    let channels: Vec<ChannelConfig> = NetChannel::ALL.iter().map(|c| c.config()).collect();
    ConnectionConfig {
        available_bytes_per_tick: BYTES_PER_UPDATE,
        server_channels_config: channels.clone(),
        client_channels_config: channels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_ids_round_trip_and_the_config_has_the_four_channels() {
        for channel in NetChannel::ALL {
            assert_eq!(NetChannel::from_id(channel.id()), Some(channel));
            assert_eq!(u8::from(channel), channel.id());
        }
        assert_eq!(NetChannel::from_id(4), None);
        let config = connection_config();
        assert_eq!(config.server_channels_config.len(), 4);
        assert!(NetChannel::Snapshot.is_reliable());
        assert_eq!(
            config.client_channels_config[3].max_memory_usage_bytes,
            SNAPSHOT_MEMORY_BYTES
        );
        assert!(matches!(
            config.client_channels_config[0].send_type,
            SendType::ReliableOrdered { resend_time } if resend_time == Duration::from_millis(200)
        ));
        assert!(matches!(
            config.client_channels_config[1].send_type,
            SendType::Unreliable
        ));
        assert_eq!(config.client_channels_config[2].channel_id, 2);
        assert_eq!(config.available_bytes_per_tick, 60_000);
    }
}
