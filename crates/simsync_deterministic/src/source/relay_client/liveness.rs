//! The relay client's ends of a connection ([a dead server and a long
//! pause](crate::rules#a-dead-server-and-a-long-pause), [leaving](crate::rules#leaving-a-session)):
//! leaving with a goodbye, giving up a relay that went silent, and rejoining at once after a
//! pause of this process. Each decides from the client's clocks; closing the transport is left
//! to the input source ([`RelayClient::take_close_due`]).

use std::time::Duration;

use bevy::log::{error, info, warn};
use simsync_net::bevy_renet::RenetClient;

use super::{LEAVE_GRACE, RelayClient};
use crate::input::SimInput;

impl<I: SimInput> RelayClient<I> {
    /// The game leaves the session: a connected client says `Goodbye` (sent with this frame's
    /// packets) and waits up to [`LEAVE_GRACE`] for the relay to close the connection; one
    /// that is not connected closes it now. From then on nothing of the session is sent and
    /// the client never reconnects. A second call does nothing.
    pub(crate) fn leave(&mut self, renet: Option<&mut RenetClient>) {
        if self.stats.left {
            return;
        }
        self.stats.left = true;
        self.reconnect.stop();
        self.stats.reconnect = self.reconnect.phase();
        let renet = renet.filter(|client| client.is_connected());
        let said = self.protocol.leave(renet.is_some());
        self.flush(renet);
        if said {
            info!("session client: leaving the session; goodbye sent");
            self.leaving_since = Some(self.now);
        } else {
            info!("session client: leaving the session; not connected, closing");
            self.close_due = true;
        }
    }

    /// After the goodbye: done once the relay closed the connection; after [`LEAVE_GRACE`]
    /// without that, the client closes it itself.
    pub(super) fn watch_leave(&mut self, renet: Option<&RenetClient>) {
        let Some(since) = self.leaving_since else {
            return;
        };
        let closed = renet.is_none_or(|client| client.is_disconnected());
        if closed || self.now.saturating_sub(since) >= LEAVE_GRACE {
            self.leaving_since = None;
            self.close_due |= !closed;
        }
    }

    /// Gives the relay up once nothing was heard from it for the configured
    /// [`server_timeout`](crate::NetworkSessionConfig::server_timeout) — after the first
    /// message only (a connection that never answered is the transport's to time out), and
    /// not after the session's match ended, it left, or the relay refused it. The connection
    /// is closed and no reconnect is tried any more.
    pub(super) fn watch_server(&mut self) {
        let Some(heard) = self.protocol.last_heard() else {
            return;
        };
        if self.stats.server_gone.is_some()
            || self.stats.left
            || self.stats.match_end.is_some()
            || self.stats.rejected.is_some()
        {
            return;
        }
        let silent_for = self.now.saturating_sub(heard);
        if silent_for < self.config.server_timeout {
            return;
        }
        error!(
            "session client: nothing heard from the relay for {silent_for:?}: the server is \
             gone"
        );
        self.stats.server_gone = Some(silent_for);
        self.reconnect.stop();
        self.stats.reconnect = self.reconnect.phase();
        self.close_due = true;
    }

    /// A pause of this process of `wall_dt`: its time does not count as the relay's silence;
    /// at least [`rejoin_after_pause`](crate::NetworkSessionConfig::rejoin_after_pause) long,
    /// the relay has dropped this client, so a welcomed client with a reconnect policy closes
    /// its connection now and rejoins with its token at the next poll.
    pub(super) fn watch_pause(&mut self, wall_dt: Duration) {
        if wall_dt < self.config.rejoin_after_pause
            || self.stats.left
            || self.stats.server_gone.is_some()
        {
            return;
        }
        self.protocol.excuse_silence(self.now);
        let can_rejoin = self.stats.reconnect_token.is_some()
            && self.stats.rejected.is_none()
            && self.stats.match_end.is_none();
        if !can_rejoin || !self.reconnect.rejoin_soon(self.now) {
            return;
        }
        warn!(
            "session client: this process was paused for {wall_dt:?}; the relay dropped its \
             connection: rejoining now"
        );
        self.stats.reconnect = self.reconnect.phase();
        self.stats.rejoins_after_pause += 1;
        self.close_due = true;
    }

    /// Whether the connection is to be closed now (once per request): the caller disconnects
    /// the client transport.
    pub(crate) fn take_close_due(&mut self) -> bool {
        std::mem::take(&mut self.close_due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{NetworkSessionConfig, SessionConfig};

    const MS: Duration = Duration::from_millis(1);

    /// A message of the relay arrives at `at`.
    fn hear_at(c: &mut RelayClient<u32>, at: Duration) {
        let ping =
            simsync_net::encode(&simsync_net::ServerMessage::Ping { t: 0 }).expect("encodes");
        c.protocol.handle_message(at, &ping).expect("decodes");
    }

    fn client(server_timeout: Duration, rejoin_after_pause: Duration) -> RelayClient<u32> {
        let config = NetworkSessionConfig {
            server_timeout,
            rejoin_after_pause,
            ..NetworkSessionConfig::default()
        };
        RelayClient::new(config, &SessionConfig::default())
    }

    #[test]
    fn a_relay_silent_for_the_timeout_is_given_up_once() {
        let mut c = client(2_000 * MS, 15_000 * MS);
        // Never heard from: the transport's timeout decides, not this one.
        c.now = 10_000 * MS;
        c.watch_server();
        assert_eq!(c.stats.server_gone, None);
        hear_at(&mut c, 10_000 * MS);
        c.now = 11_999 * MS;
        c.watch_server();
        assert_eq!(c.stats.server_gone, None);
        c.now = 12_000 * MS;
        c.watch_server();
        assert_eq!(c.stats.server_gone, Some(2_000 * MS));
        assert!(c.take_close_due());
        assert!(!c.take_close_due(), "once");
        c.now = 20_000 * MS;
        c.watch_server();
        assert_eq!(
            c.stats.server_gone,
            Some(2_000 * MS),
            "kept, not measured again"
        );
    }

    #[test]
    fn a_long_pause_rejoins_at_once_and_does_not_count_as_the_relays_silence() {
        let mut c = client(2_000 * MS, 15_000 * MS);
        c.stats.reconnect_token = Some(simsync_net::ReconnectToken { slot: 1, token: 9 });
        hear_at(&mut c, Duration::ZERO);
        // A short pause: nothing.
        c.now = 14_000 * MS;
        c.watch_pause(14_000 * MS);
        assert!(!c.take_close_due());
        // Fifteen seconds: the old connection closes now and a rejoin is under way.
        c.now = 30_000 * MS;
        c.watch_pause(15_000 * MS);
        assert!(c.take_close_due());
        assert_eq!(c.stats.rejoins_after_pause, 1);
        assert!(c.stats.reconnect.is_reconnecting());
        assert_eq!(c.protocol.last_heard(), Some(30_000 * MS));
        c.watch_server();
        assert_eq!(c.stats.server_gone, None);
    }

    #[test]
    fn a_pause_without_a_token_or_after_leaving_does_not_rejoin() {
        let mut c = client(2_000 * MS, 1_000 * MS);
        c.watch_pause(5_000 * MS);
        assert!(!c.take_close_due(), "never welcomed: no token");
        c.stats.reconnect_token = Some(simsync_net::ReconnectToken { slot: 0, token: 1 });
        c.leave(None);
        assert!(c.stats.left);
        assert!(c.take_close_due(), "not connected: closed at once");
        c.watch_pause(5_000 * MS);
        assert!(!c.take_close_due());
        assert_eq!(c.stats.rejoins_after_pause, 0);
    }

    #[test]
    fn a_goodbye_waits_for_the_relay_to_close_then_closes_itself() {
        let mut c = client(2_000 * MS, 15_000 * MS);
        c.leaving_since = Some(Duration::ZERO);
        c.stats.left = true;
        let renet = RenetClient::new(simsync_net::connection_config());
        c.now = 999 * MS;
        c.watch_leave(Some(&renet));
        assert!(!c.take_close_due(), "still waiting for the relay");
        c.now = LEAVE_GRACE;
        c.watch_leave(Some(&renet));
        assert!(c.take_close_due());
        assert_eq!(c.leaving_since, None);
    }
}
