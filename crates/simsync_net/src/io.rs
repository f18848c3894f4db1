//! Typed send and receive on renet's server and client: encode with the codec, pick the
//! message's channel, check for room, decode everything received with counters.

use renet::{ClientId, RenetClient, RenetServer};

use crate::channels::NetChannel;
use crate::codec::{self, DecodeStats};
use crate::error::NetError;
use crate::messages::{ClientMessage, ServerMessage, decode_client_message, decode_server_message};

/// A message received by a client, or the reason its bytes were rejected.
#[derive(Debug)]
pub struct FromServer {
    /// The channel it came on.
    pub channel: NetChannel,
    /// The message, or the decode error.
    pub message: Result<ServerMessage, NetError>,
}

/// A message received by the server, or the reason its bytes were rejected.
#[derive(Debug)]
pub struct FromClient {
    /// The connection it came from (the sender's identity: never trust an id inside a message).
    pub client_id: ClientId,
    /// The channel it came on.
    pub channel: NetChannel,
    /// The message, or the decode error.
    pub message: Result<ClientMessage, NetError>,
}

/// Typed messages on a [`RenetClient`] (works through `ResMut<bevy_renet::RenetClient>` too).
pub trait ClientNetExt {
    /// Encodes `message` and queues it on [its channel](ClientMessage::channel).
    ///
    /// # Errors
    ///
    /// As [`send_msg_on`](Self::send_msg_on).
    fn send_msg(&mut self, message: &ClientMessage) -> Result<(), NetError>;

    /// Encodes `message` and queues it on `channel` (to override the default channel). Messages
    /// queued while connecting are sent once connected.
    ///
    /// # Errors
    ///
    /// - The errors of [`codec::encode`].
    /// - [`NetError::NotConnected`] if the client is disconnected.
    /// - [`NetError::ChannelFull`] if the channel's memory is used up (renet would disconnect
    ///   on a reliable channel, or drop the message on an unreliable one).
    fn send_msg_on(&mut self, channel: NetChannel, message: &ClientMessage)
    -> Result<(), NetError>;

    /// Takes every message received, channel by channel in id order, each decoded with
    /// [`decode_server_message`](crate::decode_server_message) and counted in `stats`.
    fn receive_msgs(&mut self, stats: &mut DecodeStats) -> Vec<FromServer>;
}

impl ClientNetExt for RenetClient {
    fn send_msg(&mut self, message: &ClientMessage) -> Result<(), NetError> {
        self.send_msg_on(message.channel(), message)
    }

    fn send_msg_on(
        &mut self,
        channel: NetChannel,
        message: &ClientMessage,
    ) -> Result<(), NetError> {
        let bytes = codec::encode(message)?;
        if self.is_disconnected() {
            return Err(NetError::NotConnected);
        }
        if !self.can_send_message(channel, bytes.len()) {
            return Err(NetError::ChannelFull {
                channel: channel.id(),
                bytes: bytes.len(),
            });
        }
        self.send_message(channel, bytes);
        Ok(())
    }

    fn receive_msgs(&mut self, stats: &mut DecodeStats) -> Vec<FromServer> {
        let mut received = Vec::new();
        for channel in NetChannel::ALL {
            while let Some(bytes) = self.receive_message(channel) {
                let message = decode_server_message(&bytes);
                stats.record(&message);
                received.push(FromServer { channel, message });
            }
        }
        received
    }
}

/// Typed messages on a [`RenetServer`] (works through `ResMut<bevy_renet::RenetServer>` too).
pub trait ServerNetExt {
    /// Encodes `message` and queues it for `client_id` on [its channel](ServerMessage::channel).
    ///
    /// # Errors
    ///
    /// As [`send_msg_on`](Self::send_msg_on).
    fn send_msg(&mut self, client_id: ClientId, message: &ServerMessage) -> Result<(), NetError>;

    /// Encodes `message` and queues it for `client_id` on `channel`.
    ///
    /// # Errors
    ///
    /// - The errors of [`codec::encode`].
    /// - [`NetError::UnknownClient`] if `client_id` is not connected.
    /// - [`NetError::ChannelFull`] if the channel's memory is used up for that client.
    fn send_msg_on(
        &mut self,
        client_id: ClientId,
        channel: NetChannel,
        message: &ServerMessage,
    ) -> Result<(), NetError>;

    /// Encodes `message` once and queues it for every connected client except `except`.
    ///
    /// # Errors
    ///
    /// The errors of [`codec::encode`] (nothing sent), or the first [`NetError::ChannelFull`]
    /// (the message is still queued for every client that had room).
    fn broadcast_msg_except(
        &mut self,
        except: Option<ClientId>,
        message: &ServerMessage,
    ) -> Result<(), NetError>;

    /// [`broadcast_msg_except`](Self::broadcast_msg_except) with no exception.
    ///
    /// # Errors
    ///
    /// As [`broadcast_msg_except`](Self::broadcast_msg_except).
    fn broadcast_msg(&mut self, message: &ServerMessage) -> Result<(), NetError> {
        self.broadcast_msg_except(None, message)
    }

    /// Takes every message received from every client (clients in ascending id order, then
    /// channels in id order), each decoded with
    /// [`decode_client_message`](crate::decode_client_message) and counted in `stats`.
    fn receive_msgs(&mut self, stats: &mut DecodeStats) -> Vec<FromClient>;
}

impl ServerNetExt for RenetServer {
    fn send_msg(&mut self, client_id: ClientId, message: &ServerMessage) -> Result<(), NetError> {
        self.send_msg_on(client_id, message.channel(), message)
    }

    fn send_msg_on(
        &mut self,
        client_id: ClientId,
        channel: NetChannel,
        message: &ServerMessage,
    ) -> Result<(), NetError> {
        let bytes = codec::encode(message)?;
        if !self.is_connected(client_id) {
            return Err(NetError::UnknownClient(client_id));
        }
        if !self.can_send_message(client_id, channel, bytes.len()) {
            return Err(NetError::ChannelFull {
                channel: channel.id(),
                bytes: bytes.len(),
            });
        }
        self.send_message(client_id, channel, bytes);
        Ok(())
    }

    fn broadcast_msg_except(
        &mut self,
        except: Option<ClientId>,
        message: &ServerMessage,
    ) -> Result<(), NetError> {
        let bytes = bytes_of(codec::encode(message)?);
        let channel = message.channel();
        let mut clients = self.clients_id();
        clients.sort_unstable();
        let mut first_error = None;
        for client_id in clients {
            if Some(client_id) == except {
                continue;
            }
            if self.can_send_message(client_id, channel, bytes.len()) {
                self.send_message(client_id, channel, bytes.clone());
            } else if first_error.is_none() {
                first_error = Some(NetError::ChannelFull {
                    channel: channel.id(),
                    bytes: bytes.len(),
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn receive_msgs(&mut self, stats: &mut DecodeStats) -> Vec<FromClient> {
        let mut clients = self.clients_id();
        clients.sort_unstable();
        let mut received = Vec::new();
        for client_id in clients {
            for channel in NetChannel::ALL {
                while let Some(bytes) = self.receive_message(client_id, channel) {
                    let message = decode_client_message(&bytes);
                    stats.record(&message);
                    received.push(FromClient {
                        client_id,
                        channel,
                        message,
                    });
                }
            }
        }
        received
    }
}

fn bytes_of(bytes: Vec<u8>) -> renet::Bytes {
    renet::Bytes::from(bytes)
}
