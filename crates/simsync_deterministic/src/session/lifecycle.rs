//! The session lifecycle: [`SessionState`], decided by the pure [`session_transitions`] from what
//! the session already knows ([`LifecycleView`]), kept in [`SessionLifecycle`] and announced as
//! [`SessionStateChanged`] Messages ([session lifecycle](crate::rules#session-lifecycle)).

use bevy::prelude::*;
use bevy_state::state::{FreelyMutableState, NextState, States};
use simsync_net::bevy_renet::RenetClient;
use simsync_net::{MatchEndReason, MatchId, RejectReason};

use crate::source::{DesyncDetected, ReconnectPhase};
use crate::stats::SessionStats;
use crate::tick::{PlayerIndex, Tick};

/// Where a session is in its life ([session lifecycle](crate::rules#session-lifecycle)).
///
/// A networked session starts in `Connecting`; a local one in `Running`. `Rejected`, `Ended`
/// and `Disconnected` are final for the session; `Reconnecting` goes back to `Running` once the
/// relay welcomes the client again. A new session in the same App leaves them: a restart, or a
/// networked session rebuilt for the relay's next match (`Ended` → `WaitingForPlayers` →
/// `Running`; [what survives a rematch](crate::rules#what-survives-a-rematch)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Reflect)]
pub enum SessionState {
    /// The relay client is connecting and saying hello.
    #[default]
    Connecting,
    /// Welcomed into a slot; the relay has not started the session yet.
    WaitingForPlayers,
    /// The session runs: ticks are verified.
    Running,
    /// The relay judged a tick's checksums and named this client's player; the session goes on
    /// simulating, but its state differs from the majority.
    Desynced,
    /// The verified world reached the end tick, the game ended or left the session, or the
    /// relay ended the session's match (also in its lobby).
    Ended,
    /// The connection to the relay was lost and the client is coming back by itself with its
    /// reconnect token: waiting out a backoff or connecting again
    /// ([reconnecting](crate::rules#reconnecting-after-a-lost-connection)).
    Reconnecting,
    /// The connection to the relay is lost for good: no reconnect policy or token, every
    /// attempt failed (reason [`SessionStateReason::ReconnectFailed`]), or nothing was heard
    /// from the relay for the client's server timeout ([`SessionStateReason::ServerGone`]).
    Disconnected,
    /// The relay refused this client in the handshake.
    Rejected,
}

/// A Bevy state: `State<SessionState>` follows [`SessionLifecycle`] (set through `NextState`
/// when the lifecycle changes, so `OnEnter`/`OnExit` schedules and `in_state` run conditions
/// work).
impl States for SessionState {}

impl FreelyMutableState for SessionState {}

impl SessionState {
    /// Whether no transition leaves this state.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Rejected | Self::Ended | Self::Disconnected)
    }
}

/// Why the session entered a state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStateReason {
    /// The relay welcomed this client into `slot`.
    Joined {
        /// This client's player slot.
        slot: PlayerIndex,
    },
    /// The relay started the session (every player joined).
    Started,
    /// The relay refused this client's hello.
    Rejected(RejectReason),
    /// The relay reported a desync naming this client's player (a report naming only other
    /// players changes no state).
    Desync(DesyncDetected),
    /// The renet client is disconnected (entering `Reconnecting`, or `Disconnected` when the
    /// client does not reconnect).
    ConnectionLost,
    /// Every reconnect attempt of the policy failed (`Disconnected`).
    ReconnectFailed {
        /// Attempts made.
        attempts: u32,
    },
    /// Nothing was heard from the relay for
    /// [`NetworkSessionConfig::server_timeout`](crate::NetworkSessionConfig::server_timeout):
    /// the client gave the server up, with no reconnect attempt left to try (`Disconnected`;
    /// [a dead server](crate::rules#a-dead-server-and-a-long-pause)).
    ServerGone {
        /// How long the relay was silent when the client gave it up.
        silent_for: std::time::Duration,
    },
    /// The game left the session with [`LeaveSession`]: the client said goodbye to the relay
    /// (`Ended`; [leaving](crate::rules#leaving-a-session)).
    Left,
    /// The relay welcomed the client back into `slot` on a new connection (`Reconnecting` →
    /// `Running`).
    Reconnected {
        /// This client's player slot.
        slot: PlayerIndex,
    },
    /// The verified world reached [`SessionEnd::at_tick`].
    EndTickReached {
        /// The verified tick.
        tick: Tick,
    },
    /// The game asked to end the session ([`SessionEnd::now`]).
    EndRequested,
    /// A new session started in the same App
    /// ([`restart_session`](crate::restart_session)).
    Restarted,
    /// The relay ended the session's match (`Ended`).
    MatchEnded {
        /// The match.
        match_id: MatchId,
        /// Why, as the relay's app said.
        reason: MatchEndReason,
    },
    /// An authoritative relay resynced this client from its snapshot (`Desynced` → `Running`):
    /// the verified tick it had reached and the authority's tick it loaded.
    Resynced {
        /// This client's verified tick before the resync.
        from_tick: Tick,
        /// The authority's verified tick loaded.
        to_tick: Tick,
    },
    /// The relay opened its next match and the session was rebuilt for it on the same
    /// connection (`WaitingForPlayers`; `Running` when the relay's match runs already)
    /// ([what survives a rematch](crate::rules#what-survives-a-rematch)).
    NextMatch {
        /// The relay's new match.
        match_id: MatchId,
    },
}

/// The session changed state: written once per transition, in order (a client welcomed and
/// started in one update writes two).
#[derive(Message, Debug, Clone, PartialEq, Eq)]
pub struct SessionStateChanged {
    /// The state left.
    pub from: SessionState,
    /// The state entered.
    pub to: SessionState,
    /// Why.
    pub reason: SessionStateReason,
}

/// The session's current state and the reason it was entered (main-app resource; `None` for
/// the initial state).
#[derive(Resource, Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionLifecycle {
    /// The current state.
    pub state: SessionState,
    /// Why the current state was entered.
    pub reason: Option<SessionStateReason>,
}

/// How the game ends the session (main-app resource): at a verified tick, or now. Either moves
/// the session to [`SessionState::Ended`].
#[derive(Resource, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionEnd {
    /// End once the verified world reaches this tick.
    pub at_tick: Option<Tick>,
    /// End at the next session update.
    pub now: bool,
}

/// The game leaves a networked session (write it as a Message): the client says `Goodbye` to
/// the relay, which closes the connection at once and counts the player as gone — not lost —,
/// sends nothing more of the session and never reconnects; the session is `Ended` with
/// [`SessionStateReason::Left`] ([leaving](crate::rules#leaving-a-session)). A relay whose
/// players all left this way ends the match `Completed`. Send it when the game is done with
/// the session (e.g. after the last verified tick it needs), then keep updating the App for a
/// few frames — until the renet client is disconnected, at most a second — so the goodbye
/// goes out. A local session or a replay has no relay: the message does nothing there.
#[derive(Message, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaveSession;

/// The renet client's connection, as the lifecycle sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    /// Connecting (or no renet client yet).
    Connecting,
    /// Connected.
    Connected,
    /// Disconnected.
    Disconnected,
}

/// What the session knows after an update, as the lifecycle reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleView {
    /// `None` for a local session.
    pub network: Option<NetworkView>,
    /// The verified world's tick.
    pub verified_tick: Tick,
    /// How the game ends the session.
    pub end: SessionEnd,
}

/// A networked session's view: the relay client's stats and the renet connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkView {
    /// The renet connection.
    pub connection: Connection,
    /// The slot, once welcomed.
    pub slot: Option<PlayerIndex>,
    /// Whether the relay started the session.
    pub started: bool,
    /// The relay's refusal, if any.
    pub rejected: Option<RejectReason>,
    /// The last desync the relay reported that named this client's player.
    pub desync_naming_self: Option<DesyncDetected>,
    /// Where the client is in coming back after a lost connection.
    pub reconnect: ReconnectPhase,
    /// The relay ended the session's match: which, and why.
    pub match_end: Option<(MatchId, MatchEndReason)>,
    /// The last resync `(from_tick, to_tick)` since the last desync naming this client.
    pub resynced: Option<(Tick, Tick)>,
    /// The game left the session ([`LeaveSession`]).
    pub left: bool,
    /// The client gave the relay up after this long without a message from it.
    pub server_gone: Option<std::time::Duration>,
}

/// The transitions from `current` that `view` calls for, in order (empty when none). Rules, by
/// priority: a final state stays; a refusal → `Rejected`; the game left → `Ended` (`Left`);
/// the relay given up → `Disconnected` (`ServerGone`); failed reconnect attempts →
/// `Disconnected` (`ReconnectFailed`); a reconnect under way → `Reconnecting`
/// (`ConnectionLost`); a lost connection → `Disconnected`; `Reconnecting` → `Running` once
/// connected and welcomed again (`Reconnected`); the relay ended the match → `Ended`
/// (`MatchEnded`); an end request or the end tick reached → `Ended`; a desync naming this client →
/// `Desynced`; otherwise `Connecting` → `WaitingForPlayers` once welcomed, →
/// `Running` once started (both in one update when they arrive together).
pub fn session_transitions(
    current: SessionState,
    view: &LifecycleView,
) -> Vec<SessionStateChanged> {
    let mut out = Vec::new();
    if current.is_final() {
        return out;
    }
    if let Some(net) = &view.network {
        if let Some((to, reason)) = ending_transition(net) {
            push(&mut out, current, to, reason);
            return out;
        }
        if let Some((to, reason)) = connection_transition(current, net) {
            push(&mut out, current, to, reason);
            if to == SessionState::Disconnected || to == SessionState::Reconnecting {
                return out;
            }
        }
        if let Some((match_id, reason)) = &net.match_end {
            let reason = SessionStateReason::MatchEnded {
                match_id: *match_id,
                reason: reason.clone(),
            };
            push(&mut out, current, SessionState::Ended, reason);
            return out;
        }
    }
    if let Some(reason) = end_reason(&view.end, view.verified_tick) {
        push(&mut out, current, SessionState::Ended, reason);
        return out;
    }
    if let Some(net) = &view.network {
        progress_transitions(current, net, &mut out);
    }
    out
}

/// Appends the transition to `to`, from the last state `out` reached (`current` when empty).
fn push(
    out: &mut Vec<SessionStateChanged>,
    current: SessionState,
    to: SessionState,
    reason: SessionStateReason,
) {
    let from = out.last().map_or(current, |c| c.to);
    out.push(SessionStateChanged { from, to, reason });
}

/// The end the network calls for whatever the state: a refusal (`Rejected`), the game left
/// (`Ended`), the relay given up (`Disconnected`).
fn ending_transition(net: &NetworkView) -> Option<(SessionState, SessionStateReason)> {
    if let Some(reason) = &net.rejected {
        return Some((
            SessionState::Rejected,
            SessionStateReason::Rejected(reason.clone()),
        ));
    }
    if net.left {
        return Some((SessionState::Ended, SessionStateReason::Left));
    }
    net.server_gone.map(|silent_for| {
        (
            SessionState::Disconnected,
            SessionStateReason::ServerGone { silent_for },
        )
    })
}

/// The steps of a live connection, appended to `out`: welcomed (`WaitingForPlayers`), started
/// (`Running`), resynced back to `Running`, or a desync naming this client (`Desynced`).
fn progress_transitions(
    current: SessionState,
    net: &NetworkView,
    out: &mut Vec<SessionStateChanged>,
) {
    if current == SessionState::Connecting
        && let Some(slot) = net.slot
    {
        push(
            out,
            current,
            SessionState::WaitingForPlayers,
            SessionStateReason::Joined { slot },
        );
    }
    let now = out.last().map_or(current, |c| c.to);
    if now == SessionState::WaitingForPlayers && net.started {
        push(
            out,
            current,
            SessionState::Running,
            SessionStateReason::Started,
        );
    }
    let now = out.last().map_or(current, |c| c.to);
    if now == SessionState::Desynced
        && net.desync_naming_self.is_none()
        && let Some((from_tick, to_tick)) = net.resynced
    {
        let reason = SessionStateReason::Resynced { from_tick, to_tick };
        push(out, current, SessionState::Running, reason);
        return;
    }
    if now == SessionState::Running
        && let Some(desync) = &net.desync_naming_self
    {
        let reason = SessionStateReason::Desync(desync.clone());
        push(out, current, SessionState::Desynced, reason);
    }
}

/// The transition a lost, coming-back or restored connection calls for, if any.
fn connection_transition(
    current: SessionState,
    net: &NetworkView,
) -> Option<(SessionState, SessionStateReason)> {
    match net.reconnect {
        ReconnectPhase::Failed { attempts } => {
            return Some((
                SessionState::Disconnected,
                SessionStateReason::ReconnectFailed { attempts },
            ));
        }
        phase if phase.is_reconnecting() => {
            return (current != SessionState::Reconnecting).then_some((
                SessionState::Reconnecting,
                SessionStateReason::ConnectionLost,
            ));
        }
        _ => {}
    }
    if net.connection == Connection::Disconnected {
        return Some((
            SessionState::Disconnected,
            SessionStateReason::ConnectionLost,
        ));
    }
    let back = current == SessionState::Reconnecting && net.connection == Connection::Connected;
    let to = if net.started {
        SessionState::Running
    } else {
        SessionState::WaitingForPlayers
    };
    match net.slot {
        Some(slot) if back => Some((to, SessionStateReason::Reconnected { slot })),
        _ => None,
    }
}

fn end_reason(end: &SessionEnd, verified_tick: Tick) -> Option<SessionStateReason> {
    if end.now {
        return Some(SessionStateReason::EndRequested);
    }
    end.at_tick
        .filter(|&at| verified_tick >= at)
        .map(|_| SessionStateReason::EndTickReached {
            tick: verified_tick,
        })
}

/// The view of the session after its update, from its stats and the renet client.
fn view(stats: &SessionStats, renet: Option<&RenetClient>, end: SessionEnd) -> LifecycleView {
    let network = stats.network.as_ref().map(|net| NetworkView {
        connection: match renet {
            Some(client) if client.is_disconnected() => Connection::Disconnected,
            Some(client) if client.is_connected() => Connection::Connected,
            _ => Connection::Connecting,
        },
        slot: net.slot,
        started: net.started,
        rejected: net.rejected.clone(),
        desync_naming_self: net.last_desync.clone().filter(|_| net.resynced.is_none()),
        resynced: net.resynced,
        reconnect: net.reconnect,
        match_end: net.match_id.zip(net.match_end.clone()),
        left: net.left,
        server_gone: net.server_gone,
    });
    LifecycleView {
        network,
        verified_tick: stats.verified_tick,
        end,
    }
}

/// Runs after the session update: applies [`session_transitions`] to [`SessionLifecycle`],
/// writes a [`SessionStateChanged`] per transition and sets the Bevy state to the last one.
pub(crate) fn update_lifecycle(
    stats: Res<SessionStats>,
    renet: Option<Res<RenetClient>>,
    end: Res<SessionEnd>,
    mut lifecycle: ResMut<SessionLifecycle>,
    mut changed: MessageWriter<SessionStateChanged>,
    next: Option<ResMut<NextState<SessionState>>>,
) {
    let view = view(&stats, renet.as_deref(), *end);
    let transitions = session_transitions(lifecycle.state, &view);
    if let (Some(last), Some(mut next)) = (transitions.last(), next) {
        next.set(last.to);
    }
    for transition in transitions {
        info!(
            "session: {:?} → {:?} ({:?})",
            transition.from, transition.to, transition.reason
        );
        lifecycle.state = transition.to;
        lifecycle.reason = Some(transition.reason.clone());
        changed.write(transition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(connection: Connection) -> NetworkView {
        NetworkView {
            connection,
            slot: None,
            started: false,
            rejected: None,
            desync_naming_self: None,
            reconnect: ReconnectPhase::Idle,
            match_end: None,
            resynced: None,
            left: false,
            server_gone: None,
        }
    }

    fn networked(net: NetworkView) -> LifecycleView {
        LifecycleView {
            network: Some(net),
            verified_tick: 0,
            end: SessionEnd::default(),
        }
    }

    fn states(transitions: &[SessionStateChanged]) -> Vec<(SessionState, SessionState)> {
        transitions.iter().map(|t| (t.from, t.to)).collect()
    }

    use SessionState::*;

    #[test]
    fn a_client_connects_waits_and_runs() {
        let mut n = net(Connection::Connected);
        assert!(session_transitions(Connecting, &networked(n.clone())).is_empty());
        n.slot = Some(1);
        let t = session_transitions(Connecting, &networked(n.clone()));
        assert_eq!(states(&t), vec![(Connecting, WaitingForPlayers)]);
        assert_eq!(t[0].reason, SessionStateReason::Joined { slot: 1 });
        n.started = true;
        let t = session_transitions(WaitingForPlayers, &networked(n.clone()));
        assert_eq!(states(&t), vec![(WaitingForPlayers, Running)]);
        assert!(session_transitions(Running, &networked(n)).is_empty());
    }

    #[test]
    fn welcome_and_start_in_one_update_are_two_transitions() {
        let mut n = net(Connection::Connected);
        n.slot = Some(0);
        n.started = true;
        let t = session_transitions(Connecting, &networked(n));
        assert_eq!(
            states(&t),
            vec![
                (Connecting, WaitingForPlayers),
                (WaitingForPlayers, Running)
            ]
        );
    }

    #[test]
    fn a_refusal_is_final_and_carries_the_reason() {
        let mut n = net(Connection::Connected);
        n.rejected = Some(RejectReason::ServerFull);
        let t = session_transitions(Connecting, &networked(n.clone()));
        assert_eq!(states(&t), vec![(Connecting, Rejected)]);
        assert_eq!(
            t[0].reason,
            SessionStateReason::Rejected(RejectReason::ServerFull)
        );
        n.connection = Connection::Disconnected;
        assert!(session_transitions(Rejected, &networked(n)).is_empty());
    }

    #[test]
    fn a_lost_connection_disconnects_from_any_live_state() {
        for from in [Connecting, WaitingForPlayers, Running, Desynced] {
            let t = session_transitions(from, &networked(net(Connection::Disconnected)));
            assert_eq!(states(&t), vec![(from, Disconnected)]);
        }
    }

    #[test]
    fn a_reconnect_shows_as_reconnecting_then_running_or_fails_for_good() {
        let mut n = net(Connection::Disconnected);
        n.slot = Some(1);
        n.started = true;
        n.reconnect = ReconnectPhase::Waiting { attempt: 1, of: 5 };
        let t = session_transitions(Running, &networked(n.clone()));
        assert_eq!(states(&t), vec![(Running, Reconnecting)]);
        assert_eq!(t[0].reason, SessionStateReason::ConnectionLost);
        // Waiting or connecting again: no new transition.
        assert!(session_transitions(Reconnecting, &networked(n.clone())).is_empty());
        n.connection = Connection::Connecting;
        n.reconnect = ReconnectPhase::Connecting { attempt: 2, of: 5 };
        assert!(session_transitions(Reconnecting, &networked(n.clone())).is_empty());
        // Welcomed on the new connection: running again.
        n.connection = Connection::Connected;
        n.reconnect = ReconnectPhase::Idle;
        let t = session_transitions(Reconnecting, &networked(n.clone()));
        assert_eq!(states(&t), vec![(Reconnecting, Running)]);
        assert_eq!(t[0].reason, SessionStateReason::Reconnected { slot: 1 });
        // Every attempt failed: final, with the count.
        n.connection = Connection::Disconnected;
        n.reconnect = ReconnectPhase::Failed { attempts: 5 };
        let t = session_transitions(Reconnecting, &networked(n.clone()));
        assert_eq!(states(&t), vec![(Reconnecting, Disconnected)]);
        assert_eq!(
            t[0].reason,
            SessionStateReason::ReconnectFailed { attempts: 5 }
        );
        assert!(session_transitions(Disconnected, &networked(n)).is_empty());
    }

    #[test]
    fn only_a_desync_naming_this_client_desyncs_it() {
        let mut n = net(Connection::Connected);
        n.slot = Some(0);
        n.started = true;
        assert!(session_transitions(Running, &networked(n.clone())).is_empty());
        let desync = DesyncDetected {
            tick: 9,
            players: vec![0],
            judge: simsync_net::DesyncJudge::Authority,
        };
        n.desync_naming_self = Some(desync.clone());
        let t = session_transitions(Running, &networked(n.clone()));
        assert_eq!(states(&t), vec![(Running, Desynced)]);
        assert_eq!(t[0].reason, SessionStateReason::Desync(desync));
        assert!(session_transitions(Desynced, &networked(n)).is_empty());
    }

    #[test]
    fn the_view_keeps_this_clients_desync_until_a_resync() {
        let mut stats = SessionStats::default();
        // Another player desynced: not this client's desync.
        let mut net = crate::source::RelayClientStats {
            slot: Some(1),
            started: true,
            others_desynced: 1,
            ..Default::default()
        };
        stats.network = Some(net.clone());
        let seen = view(&stats, None, SessionEnd::default()).network.unwrap();
        assert_eq!(seen.desync_naming_self, None);
        assert_eq!(seen.connection, Connection::Connecting);
        net.desyncs = 1;
        net.last_desync = Some(DesyncDetected {
            tick: 6,
            players: vec![1],
            judge: simsync_net::DesyncJudge::Majority,
        });
        stats.network = Some(net.clone());
        let seen = view(&stats, None, SessionEnd::default()).network.unwrap();
        assert_eq!(seen.desync_naming_self.map(|d| d.tick), Some(6));
        net.resynced = Some((8, 12));
        stats.network = Some(net);
        let seen = view(&stats, None, SessionEnd::default()).network.unwrap();
        assert_eq!(seen.desync_naming_self, None);
        assert!(
            view(&SessionStats::default(), None, SessionEnd::default())
                .network
                .is_none()
        );
    }

    #[test]
    fn the_relay_ending_the_match_ends_a_live_session_with_its_reason() {
        let mut n = net(Connection::Connected);
        n.slot = Some(1);
        n.started = true;
        n.match_end = Some((MatchId(2), MatchEndReason::Abandoned));
        for from in [WaitingForPlayers, Running, Desynced] {
            let t = session_transitions(from, &networked(n.clone()));
            assert_eq!(states(&t), vec![(from, Ended)]);
            assert_eq!(
                t[0].reason,
                SessionStateReason::MatchEnded {
                    match_id: MatchId(2),
                    reason: MatchEndReason::Abandoned,
                }
            );
        }
        // Ended already (the game's end tick): no second transition.
        assert!(session_transitions(Ended, &networked(n.clone())).is_empty());
        // A lost connection still says so first.
        n.connection = Connection::Disconnected;
        let t = session_transitions(Running, &networked(n));
        assert_eq!(states(&t), vec![(Running, Disconnected)]);
    }

    #[test]
    fn leaving_ends_the_session_and_its_closed_connection_is_no_loss() {
        let mut n = net(Connection::Disconnected);
        n.slot = Some(0);
        n.started = true;
        n.left = true;
        for from in [WaitingForPlayers, Running, Desynced, Reconnecting] {
            let t = session_transitions(from, &networked(n.clone()));
            assert_eq!(states(&t), vec![(from, Ended)]);
            assert_eq!(t[0].reason, SessionStateReason::Left);
        }
        assert!(session_transitions(Ended, &networked(n)).is_empty());
    }

    #[test]
    fn a_relay_given_up_disconnects_with_server_gone_even_while_reconnecting() {
        let silent_for = std::time::Duration::from_secs(20);
        let mut n = net(Connection::Connecting);
        n.slot = Some(1);
        n.started = true;
        n.server_gone = Some(silent_for);
        for from in [WaitingForPlayers, Running, Reconnecting] {
            let t = session_transitions(from, &networked(n.clone()));
            assert_eq!(states(&t), vec![(from, Disconnected)]);
            assert_eq!(t[0].reason, SessionStateReason::ServerGone { silent_for });
        }
    }

    #[test]
    fn a_local_session_ends_at_the_end_tick_or_on_request() {
        let mut view = LifecycleView {
            network: None,
            verified_tick: 9,
            end: SessionEnd {
                at_tick: Some(10),
                now: false,
            },
        };
        assert!(session_transitions(Running, &view).is_empty());
        view.verified_tick = 10;
        let t = session_transitions(Running, &view);
        assert_eq!(states(&t), vec![(Running, Ended)]);
        assert_eq!(t[0].reason, SessionStateReason::EndTickReached { tick: 10 });
        assert!(session_transitions(Ended, &view).is_empty());
        view.end = SessionEnd {
            at_tick: None,
            now: true,
        };
        let t = session_transitions(Running, &view);
        assert_eq!(t[0].reason, SessionStateReason::EndRequested);
    }

    #[test]
    fn a_resync_after_a_desync_naming_this_client_returns_it_to_running() {
        let mut n = net(Connection::Connected);
        n.slot = Some(0);
        n.started = true;
        n.resynced = Some((90, 120));
        let view = LifecycleView {
            network: Some(n),
            verified_tick: 120,
            end: SessionEnd::default(),
        };
        let seen = session_transitions(SessionState::Desynced, &view);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].to, SessionState::Running);
        assert_eq!(
            seen[0].reason,
            SessionStateReason::Resynced {
                from_tick: 90,
                to_tick: 120
            }
        );
        // Running stays Running: the resync is not a desync.
        assert!(session_transitions(SessionState::Running, &view).is_empty());
    }
}
