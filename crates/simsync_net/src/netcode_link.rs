//! The client's netcode connection on its UDP socket: renetcode's `NetcodeClient` driven by
//! our own receive and send loop (in place of renet_netcode's client transport), so that a
//! connection the server closed is reported once, by [`UdpClientTransport`](crate::UdpClientTransport),
//! and never logged by renetcode as a failed update (which renet_netcode's loop does whenever
//! the server's disconnect packet arrives — also after this client's own goodbye).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use renet::{ClientId, RenetClient};
use renet_netcode::{ClientAuthentication, NetcodeDisconnectReason, NetcodeTransportError};
use renetcode::{NETCODE_MAX_PACKET_BYTES, NetcodeClient, NetcodeError};

/// A netcode client and its socket.
#[derive(Debug)]
pub(crate) struct NetcodeLink {
    socket: UdpSocket,
    netcode: NetcodeClient,
    buffer: Box<[u8; NETCODE_MAX_PACKET_BYTES]>,
}

impl NetcodeLink {
    /// Starts connecting with `authentication` from `socket` (made non-blocking) at
    /// `current_time` (Unix time).
    ///
    /// # Errors
    /// The socket's error, or netcode's refusal of the authentication.
    pub(crate) fn new(
        current_time: Duration,
        authentication: ClientAuthentication,
        socket: UdpSocket,
    ) -> Result<Self, NetcodeError> {
        socket.set_nonblocking(true)?;
        Ok(Self {
            socket,
            netcode: NetcodeClient::new(current_time, authentication)?,
            buffer: Box::new([0; NETCODE_MAX_PACKET_BYTES]),
        })
    }

    /// The socket's local address.
    pub(crate) fn addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The client id (from the token, or as given).
    pub(crate) fn client_id(&self) -> ClientId {
        self.netcode.client_id()
    }

    /// Why netcode is disconnected, if it is.
    pub(crate) fn disconnect_reason(&self) -> Option<NetcodeDisconnectReason> {
        self.netcode.disconnect_reason()
    }

    /// Sends netcode's disconnect packet at once (nothing when disconnected already). A failed
    /// send is not retried: the server times the connection out instead.
    pub(crate) fn disconnect(&mut self) {
        if self.netcode.is_disconnected() {
            return;
        }
        if let Ok((addr, packet)) = self.netcode.disconnect() {
            let _ = self.socket.send_to(packet, addr);
        }
    }

    /// Sends `client`'s queued packets.
    ///
    /// # Errors
    /// Netcode is disconnected (with the reason), or the socket or the encryption failed.
    pub(crate) fn send_packets(
        &mut self,
        client: &mut RenetClient,
    ) -> Result<(), NetcodeTransportError> {
        if let Some(reason) = self.netcode.disconnect_reason() {
            return Err(NetcodeError::Disconnected(reason).into());
        }
        for packet in client.get_packets_to_send() {
            let (addr, payload) = self.netcode.generate_payload_packet(&packet)?;
            self.socket.send_to(payload, addr)?;
        }
        Ok(())
    }

    /// Advances netcode by `dt`, hands `client` every payload received and updates its
    /// connection state. Once netcode is disconnected — also by a disconnect packet of the
    /// server read in this call — `client` is disconnected and the reason returned; netcode's
    /// own update then does not run (it would only log the same disconnection as an error).
    ///
    /// # Errors
    /// Netcode is disconnected (with the reason), renet closed the connection (netcode's
    /// disconnect packet is sent), or the socket failed.
    pub(crate) fn update(
        &mut self,
        dt: Duration,
        client: &mut RenetClient,
    ) -> Result<(), NetcodeTransportError> {
        if let Some(reason) = self.netcode.disconnect_reason() {
            client.disconnect_due_to_transport();
            return Err(NetcodeError::Disconnected(reason).into());
        }
        if let Some(error) = client.disconnect_reason() {
            let (addr, packet) = self.netcode.disconnect()?;
            self.socket.send_to(packet, addr)?;
            return Err(error.into());
        }
        if self.netcode.is_connected() {
            client.set_connected();
        } else if self.netcode.is_connecting() {
            client.set_connecting();
        }
        self.receive(client)?;
        if let Some(reason) = self.netcode.disconnect_reason() {
            client.disconnect_due_to_transport();
            return Err(NetcodeError::Disconnected(reason).into());
        }
        if let Some((packet, addr)) = self.netcode.update(dt) {
            self.socket.send_to(packet, addr)?;
        }
        Ok(())
    }

    /// Reads every datagram waiting on the socket from the server, handing payloads to
    /// `client` (datagrams from other addresses are dropped).
    fn receive(&mut self, client: &mut RenetClient) -> Result<(), NetcodeTransportError> {
        loop {
            let len = match self.socket.recv_from(&mut self.buffer[..]) {
                Ok((len, from)) if from == self.netcode.server_addr() => len,
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
                {
                    return Ok(());
                }
                Err(e) => return Err(NetcodeTransportError::IO(e)),
            };
            if let Some(payload) = self.netcode.process_packet(&mut self.buffer[..len]) {
                client.process_packet(payload);
            }
        }
    }
}
