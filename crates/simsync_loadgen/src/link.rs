//! [`LoadLink`]: one load client's connection — netcode's client and renet's over a
//! non-blocking UDP socket, run as `simsync_net::UdpClientTransport` runs them, with every
//! datagram and byte counted both ways ([`Traffic`]).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use renetcode::{ClientAuthentication, ConnectToken, NETCODE_MAX_PACKET_BYTES, NetcodeClient};
use serde::Serialize;
use simsync_net::renet::RenetClient;
use simsync_net::{connection_config, unix_time_now};

/// Bytes an IPv4 and UDP header add to every datagram (20 + 8): what a datagram costs on the
/// wire beyond its UDP payload (Ethernet framing not counted).
pub const IPV4_UDP_HEADER_BYTES: u64 = 28;

/// Datagrams and UDP payload bytes of one connection (or a sum of them), both ways.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Traffic {
    /// Datagrams sent to the server.
    pub datagrams_up: u64,
    /// UDP payload bytes sent to the server (netcode's packets).
    pub bytes_up: u64,
    /// Datagrams received from the server.
    pub datagrams_down: u64,
    /// UDP payload bytes received from the server.
    pub bytes_down: u64,
    /// Sends that failed (the socket refused, or netcode could not seal a packet).
    pub send_errors: u64,
}

impl Traffic {
    /// What was counted between `earlier` and `self` (saturating: never negative).
    pub fn since(&self, earlier: &Traffic) -> Traffic {
        Traffic {
            datagrams_up: self.datagrams_up.saturating_sub(earlier.datagrams_up),
            bytes_up: self.bytes_up.saturating_sub(earlier.bytes_up),
            datagrams_down: self.datagrams_down.saturating_sub(earlier.datagrams_down),
            bytes_down: self.bytes_down.saturating_sub(earlier.bytes_down),
            send_errors: self.send_errors.saturating_sub(earlier.send_errors),
        }
    }

    /// The sum of `self` and `other`.
    pub fn plus(&self, other: &Traffic) -> Traffic {
        Traffic {
            datagrams_up: self.datagrams_up + other.datagrams_up,
            bytes_up: self.bytes_up + other.bytes_up,
            datagrams_down: self.datagrams_down + other.datagrams_down,
            bytes_down: self.bytes_down + other.bytes_down,
            send_errors: self.send_errors + other.send_errors,
        }
    }

    /// Bytes sent with their IPv4 and UDP headers ([`IPV4_UDP_HEADER_BYTES`] a datagram).
    pub fn wire_bytes_up(&self) -> u64 {
        self.bytes_up + IPV4_UDP_HEADER_BYTES * self.datagrams_up
    }

    /// Bytes received with their IPv4 and UDP headers.
    pub fn wire_bytes_down(&self) -> u64 {
        self.bytes_down + IPV4_UDP_HEADER_BYTES * self.datagrams_down
    }
}

/// Why a [`LoadLink`] could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LoadLinkError {
    /// The UDP socket could not be bound or made non-blocking.
    #[error("udp socket: {0}")]
    Socket(#[from] io::Error),
    /// netcode refused the token (no server address, expired before it was made).
    #[error("netcode: {0}")]
    Netcode(String),
}

/// One connection of a load client to a secure server.
pub struct LoadLink {
    socket: UdpSocket,
    netcode: NetcodeClient,
    renet: RenetClient,
    buffer: Box<[u8; NETCODE_MAX_PACKET_BYTES]>,
    traffic: Traffic,
    lost: Option<String>,
}

impl std::fmt::Debug for LoadLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadLink")
            .field("client_id", &self.netcode.client_id())
            .field("traffic", &self.traffic)
            .field("lost", &self.lost)
            .finish_non_exhaustive()
    }
}

impl LoadLink {
    /// Starts connecting with `token` from a socket bound to `bind` (`127.0.0.1:0` for
    /// loopback).
    ///
    /// # Errors
    ///
    /// [`LoadLinkError`] when the socket cannot be bound or netcode refuses the token.
    pub fn connect(token: ConnectToken, bind: SocketAddr) -> Result<Self, LoadLinkError> {
        if token.server_addresses[0].is_none() {
            return Err(LoadLinkError::Netcode("no server address".into()));
        }
        let socket = UdpSocket::bind(bind)?;
        socket.set_nonblocking(true)?;
        let authentication = ClientAuthentication::Secure {
            connect_token: token,
        };
        let netcode = NetcodeClient::new(unix_time_now(), authentication)
            .map_err(|e| LoadLinkError::Netcode(e.to_string()))?;
        Ok(Self {
            socket,
            netcode,
            renet: RenetClient::new(connection_config()),
            buffer: Box::new([0; NETCODE_MAX_PACKET_BYTES]),
            traffic: Traffic::default(),
            lost: None,
        })
    }

    /// The client id of the token.
    pub fn client_id(&self) -> u64 {
        self.netcode.client_id()
    }

    /// renet's connection, to send and receive messages.
    pub fn renet(&mut self) -> &mut RenetClient {
        &mut self.renet
    }

    /// Whether netcode and renet are connected.
    pub fn is_connected(&self) -> bool {
        self.lost.is_none() && self.renet.is_connected()
    }

    /// Why the connection was lost, once it was.
    pub fn lost(&self) -> Option<&str> {
        self.lost.as_deref()
    }

    /// The datagrams and bytes counted so far.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    /// Advances renet's and netcode's clocks by `dt` and reads every datagram waiting: call
    /// before reading messages. A lost connection stays lost.
    pub fn update(&mut self, dt: Duration) {
        if self.lost.is_some() {
            return;
        }
        self.renet.update(dt);
        if let Some(reason) = self.netcode.disconnect_reason() {
            self.renet.disconnect_due_to_transport();
            self.lost = Some(format!("netcode: {reason}"));
            return;
        }
        if let Some(reason) = self.renet.disconnect_reason() {
            self.close();
            self.lost = Some(format!("renet: {reason}"));
            return;
        }
        if self.netcode.is_connected() {
            self.renet.set_connected();
        } else if self.netcode.is_connecting() {
            self.renet.set_connecting();
        }
        self.receive();
        if let Some((packet, addr)) = self.netcode.update(dt) {
            self.traffic.datagrams_up += 1;
            self.traffic.bytes_up += packet.len() as u64;
            if self.socket.send_to(packet, addr).is_err() {
                self.traffic.send_errors += 1;
            }
        }
    }

    fn receive(&mut self) {
        let server = self.netcode.server_addr();
        loop {
            let len = match self.socket.recv_from(&mut self.buffer[..]) {
                Ok((len, from)) if from == server => len,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => continue,
                Err(_) => break,
            };
            self.traffic.datagrams_down += 1;
            self.traffic.bytes_down += len as u64;
            if let Some(payload) = self.netcode.process_packet(&mut self.buffer[..len]) {
                self.renet.process_packet(payload);
            }
        }
    }

    /// Sends renet's queued packets: call after queuing messages.
    pub fn flush(&mut self) {
        if self.lost.is_some() || self.netcode.disconnect_reason().is_some() {
            return;
        }
        for packet in self.renet.get_packets_to_send() {
            match self.netcode.generate_payload_packet(&packet) {
                Ok((addr, payload)) => {
                    self.traffic.datagrams_up += 1;
                    self.traffic.bytes_up += payload.len() as u64;
                    if self.socket.send_to(payload, addr).is_err() {
                        self.traffic.send_errors += 1;
                    }
                }
                Err(_) => self.traffic.send_errors += 1,
            }
        }
    }

    /// Sends netcode's disconnect packet at once (the server frees the slot).
    pub fn close(&mut self) {
        if self.netcode.is_disconnected() {
            return;
        }
        if let Ok((addr, packet)) = self.netcode.disconnect() {
            let _ = self.socket.send_to(packet, addr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_subtracts_adds_and_counts_headers() {
        let later = Traffic {
            datagrams_up: 10,
            bytes_up: 1_000,
            datagrams_down: 4,
            bytes_down: 400,
            send_errors: 1,
        };
        let earlier = Traffic {
            datagrams_up: 4,
            bytes_up: 300,
            datagrams_down: 5,
            bytes_down: 100,
            send_errors: 0,
        };
        let delta = later.since(&earlier);
        assert_eq!(delta.datagrams_up, 6);
        assert_eq!(delta.bytes_up, 700);
        assert_eq!(delta.datagrams_down, 0, "never negative");
        assert_eq!(delta.bytes_down, 300);
        assert_eq!(delta.wire_bytes_up(), 700 + 6 * 28);
        assert_eq!(earlier.plus(&delta).bytes_up, 1_000);
        assert_eq!(later.wire_bytes_down(), 400 + 4 * 28);
    }

    #[test]
    fn a_token_without_a_server_address_is_refused() {
        let mut token = simsync_net::generate_connect_token(
            &[1; 32],
            simsync_net::NETCODE_PROTOCOL_ID,
            7,
            vec!["127.0.0.1:9".parse().unwrap()],
            60,
            5,
            None,
        )
        .unwrap();
        token.server_addresses[0] = None;
        let error = LoadLink::connect(token, "127.0.0.1:0".parse().unwrap()).unwrap_err();
        assert!(matches!(error, LoadLinkError::Netcode(_)), "{error}");
    }
}
