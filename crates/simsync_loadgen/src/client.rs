//! What both load clients share: where a client is ([`ClientPhase`]), its connection with its
//! own clock and the frame around its protocol ([`ClientLink`]: the link read at the start, a
//! lost connection ending the client, renet's packets sent at the end), the steps every owner
//! calls ([`LoadClient`]), and when a repeated message is due ([`is_due`]).

use std::net::SocketAddr;
use std::time::Duration;

use renetcode::ConnectToken;
use serde::Serialize;
use simsync_net::renet::RenetClient;

use crate::link::{LoadLink, LoadLinkError, Traffic};

/// Where a load client is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "why")]
pub enum ClientPhase {
    /// netcode's handshake, or the `Hello` not answered yet.
    Connecting,
    /// Welcomed; a relay client waits for its match to start.
    Joined,
    /// Playing: a relay client's match runs, a participant sends states.
    Running,
    /// The server ended the match or the room (the reason as the server said).
    Ended(String),
    /// The server refused the client (the reason).
    Refused(String),
    /// The connection was lost (netcode's or renet's reason).
    Lost(String),
}

impl ClientPhase {
    /// A short name for counting: `connecting`, `joined`, `running`, `ended`, `refused`,
    /// `lost`.
    pub fn name(&self) -> &'static str {
        match self {
            ClientPhase::Connecting => "connecting",
            ClientPhase::Joined => "joined",
            ClientPhase::Running => "running",
            ClientPhase::Ended(_) => "ended",
            ClientPhase::Refused(_) => "refused",
            ClientPhase::Lost(_) => "lost",
        }
    }

    /// Whether the client is done (ended, refused or lost): it sends nothing any more.
    pub fn is_over(&self) -> bool {
        matches!(
            self,
            ClientPhase::Ended(_) | ClientPhase::Refused(_) | ClientPhase::Lost(_)
        )
    }

    /// The connection was lost for `why`: the client is [`ClientPhase::Lost`], unless it was
    /// over already (an end or a refusal keeps the server's reason, a first loss its own).
    pub fn lose(&mut self, why: &str) {
        if !self.is_over() {
            *self = ClientPhase::Lost(why.to_string());
        }
    }
}

/// Whether a message repeated every `interval` is due at `now`, last sent at `last` (`None`:
/// never sent, so due). Times are the client's own, from its first frame.
pub fn is_due(last: Option<Duration>, now: Duration, interval: Duration) -> bool {
    last.is_none_or(|at| now.saturating_sub(at) >= interval)
}

/// A load client's connection, its clock (the sum of the frames' steps) and its phase.
///
/// A client's frame is [`begin_frame`](Self::begin_frame) (the clock advances, the link reads
/// every datagram waiting; `false` once the connection is lost, and the phase says why), then
/// its protocol's part, then [`end_frame`](Self::end_frame) (renet's packets sent).
#[derive(Debug)]
pub struct ClientLink {
    link: LoadLink,
    phase: ClientPhase,
    now: Duration,
}

impl ClientLink {
    /// Starts connecting with `token` from a socket bound to `bind`, in
    /// [`ClientPhase::Connecting`] at time zero.
    ///
    /// # Errors
    ///
    /// [`LoadLinkError`] as [`LoadLink::connect`].
    pub fn connect(token: ConnectToken, bind: SocketAddr) -> Result<Self, LoadLinkError> {
        Ok(Self {
            link: LoadLink::connect(token, bind)?,
            phase: ClientPhase::Connecting,
            now: Duration::ZERO,
        })
    }

    /// Starts a frame of `dt`: the clock advances and the link updates (reads what waits).
    /// Returns `false` when the connection is lost — the phase is then
    /// [`lose`](ClientPhase::lose)'s — and the frame should stop there.
    pub fn begin_frame(&mut self, dt: Duration) -> bool {
        self.now += dt;
        self.link.update(dt);
        match self.link.lost() {
            Some(why) => {
                self.phase.lose(why);
                false
            }
            None => true,
        }
    }

    /// Ends a frame: sends renet's queued packets.
    pub fn end_frame(&mut self) {
        self.link.flush();
    }

    /// The client's time: the sum of its frames' steps.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Where the client is.
    pub fn phase(&self) -> &ClientPhase {
        &self.phase
    }

    /// Moves the client to `phase` (what the server said).
    pub fn set_phase(&mut self, phase: ClientPhase) {
        self.phase = phase;
    }

    /// Whether the client is [`ClientPhase::Running`].
    pub fn is_running(&self) -> bool {
        self.phase == ClientPhase::Running
    }

    /// Whether the connection is up and the client not over: it may send.
    pub fn is_up(&self) -> bool {
        self.link.is_connected() && !self.phase.is_over()
    }

    /// Whether netcode and renet are connected (whatever the phase).
    pub fn is_connected(&self) -> bool {
        self.link.is_connected()
    }

    /// renet's connection, to send and receive messages.
    pub fn renet(&mut self) -> &mut RenetClient {
        self.link.renet()
    }

    /// The client id of the token.
    pub fn client_id(&self) -> u64 {
        self.link.client_id()
    }

    /// The datagrams and bytes counted so far.
    pub fn traffic(&self) -> Traffic {
        self.link.traffic()
    }

    /// Closes the connection (netcode's disconnect packet).
    pub fn close(&mut self) {
        self.link.close();
    }
}

/// The steps an owner calls on a load client of either kind: [`frame`](Self::frame) with the
/// time since the last one, [`phase`](Self::phase), [`close`](Self::close). Both are a protocol
/// over a [`ClientLink`].
pub trait LoadClient {
    /// The client's connection, clock and phase.
    fn link(&self) -> &ClientLink;

    /// The same, to change.
    fn link_mut(&mut self) -> &mut ClientLink;

    /// One step of `dt`: receive, answer and send what is due, flush.
    fn frame(&mut self, dt: Duration);

    /// Where the client is.
    fn phase(&self) -> &ClientPhase {
        self.link().phase()
    }

    /// Its id (its token's).
    fn client_id(&self) -> u64 {
        self.link().client_id()
    }

    /// Closes the connection (netcode's disconnect packet).
    fn close(&mut self) {
        self.link_mut().close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_have_names_and_only_the_last_three_are_over() {
        let phases = [
            ClientPhase::Connecting,
            ClientPhase::Joined,
            ClientPhase::Running,
            ClientPhase::Ended("x".into()),
            ClientPhase::Refused("y".into()),
            ClientPhase::Lost("z".into()),
        ];
        let names: Vec<&str> = phases.iter().map(ClientPhase::name).collect();
        assert_eq!(
            names,
            [
                "connecting",
                "joined",
                "running",
                "ended",
                "refused",
                "lost"
            ]
        );
        let over: Vec<bool> = phases.iter().map(ClientPhase::is_over).collect();
        assert_eq!(over, [false, false, false, true, true, true]);
        assert_eq!(
            serde_json::to_string(&ClientPhase::Lost("timeout".into())).unwrap(),
            r#"{"state":"lost","why":"timeout"}"#
        );
    }

    #[test]
    fn a_loss_ends_a_live_client_but_keeps_an_earlier_end() {
        let lost = |mut phase: ClientPhase| {
            phase.lose("netcode: timed out");
            phase
        };
        let timed_out = ClientPhase::Lost("netcode: timed out".into());
        assert_eq!(lost(ClientPhase::Connecting), timed_out);
        assert_eq!(lost(ClientPhase::Joined), timed_out);
        assert_eq!(lost(ClientPhase::Running), timed_out);
        let ended = ClientPhase::Ended("room ended".into());
        assert_eq!(lost(ended.clone()), ended);
        let refused = ClientPhase::Refused("Full".into());
        assert_eq!(lost(refused.clone()), refused);
        let first = ClientPhase::Lost("renet: first".into());
        assert_eq!(lost(first.clone()), first);
    }

    #[test]
    fn a_repeat_is_due_first_and_then_each_interval() {
        let second = Duration::from_secs(1);
        let ms = Duration::from_millis;
        assert!(is_due(None, Duration::ZERO, second));
        assert!(!is_due(Some(ms(500)), ms(1_499), second));
        assert!(is_due(Some(ms(500)), ms(1_500), second));
        assert!(is_due(Some(ms(500)), ms(9_000), second));
        assert!(
            !is_due(Some(ms(2_000)), ms(1_000), second),
            "a time before the last send is not due"
        );
    }

    fn unanswered_token(timeout_seconds: i32) -> ConnectToken {
        // Port 9 (discard) on loopback: nothing answers netcode there.
        simsync_net::generate_connect_token(
            &[1; 32],
            simsync_net::NETCODE_PROTOCOL_ID,
            7,
            vec!["127.0.0.1:9".parse().unwrap()],
            60,
            timeout_seconds,
            None,
        )
        .unwrap()
    }

    #[test]
    fn a_link_starts_connecting_at_time_zero_and_counts_its_frames_time() {
        let bind = "127.0.0.1:0".parse().unwrap();
        let mut link = ClientLink::connect(unanswered_token(5), bind).unwrap();
        assert_eq!(
            (link.phase(), link.now()),
            (&ClientPhase::Connecting, Duration::ZERO)
        );
        assert_eq!(link.client_id(), 7);
        assert!(link.begin_frame(Duration::from_millis(250)));
        assert!(link.begin_frame(Duration::from_millis(250)));
        assert_eq!(link.now(), Duration::from_millis(500));
        assert!(!link.is_up() && !link.is_running(), "nothing answered");
        assert!(
            link.traffic().datagrams_up >= 1,
            "the connection request went out"
        );
    }

    #[test]
    fn a_link_whose_server_never_answers_is_lost_and_says_why() {
        let bind = "127.0.0.1:0".parse().unwrap();
        let mut link = ClientLink::connect(unanswered_token(1), bind).unwrap();
        assert!(link.begin_frame(Duration::from_millis(100)));
        // netcode's clock is the frames' steps: 2 s without an answer exceed the 1 s timeout.
        let mut frames = 0;
        while link.begin_frame(Duration::from_millis(100)) {
            frames += 1;
            assert!(frames < 100, "still not lost after {frames} frames");
        }
        let ClientPhase::Lost(why) = link.phase() else {
            panic!("{:?}", link.phase())
        };
        assert!(why.starts_with("netcode: "), "{why}");
        assert!(
            !link.begin_frame(Duration::from_millis(100)),
            "a loss stays"
        );
    }
}
