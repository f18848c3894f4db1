//! A zero-latency "network" joining participants to an arbiter, for tests.
#![allow(dead_code)]

use core::time::Duration;

use simsync_ownership::{
    Action, BodyId, BodyKind, OwnershipArbiter, OwnershipConfig, ParticipantId,
    ParticipantOwnership, Priority,
};

/// Milliseconds since the test's epoch.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Participant `i`'s id: `i + 1`, as the handshake numbers them (id 0 is the entity server's
/// physics host, `ParticipantId::ENTITY_SERVER`).
pub fn p(i: u16) -> ParticipantId {
    ParticipantId(i + 1)
}

/// Body `i`'s id.
pub fn b(i: u64) -> BodyId {
    BodyId(i)
}

/// An arbiter with the default config and dynamic bodies `0..n`.
pub fn arbiter_with(n: u64) -> OwnershipArbiter {
    let mut a = OwnershipArbiter::default();
    for i in 0..n {
        a.register_body(b(i), BodyKind::Dynamic).unwrap();
    }
    a
}

/// A participant with the default config.
pub fn participant(i: u16) -> ParticipantOwnership {
    ParticipantOwnership::new(p(i), OwnershipConfig::default()).unwrap()
}

/// An entity server and participants `0..n`, messages delivered at once and in order.
pub struct Session {
    pub server: OwnershipArbiter,
    pub clients: Vec<ParticipantOwnership>,
    /// Bodies whose velocities the server told everyone to zero (released at rest).
    pub zeroed: Vec<BodyId>,
}

impl Session {
    pub fn new(participants: u16, bodies: u64) -> Self {
        Self {
            server: arbiter_with(bodies),
            clients: (0..participants).map(participant).collect(),
            zeroed: Vec::new(),
        }
    }

    /// Delivers `actions` of client `from` to the server at `now` and the server's answers and
    /// broadcasts back to the clients.
    pub fn deliver(&mut self, from: u16, actions: &[Action], now: Duration) {
        let sender = p(from);
        for action in actions {
            match *action {
                Action::SendBid { body, priority } => {
                    match self.server.bid(sender, body, priority, now) {
                        Ok(grant) => {
                            self.broadcast(body, Some(grant.owner), grant.priority);
                            self.clients[usize::from(from)].on_grant(grant.body, grant.priority);
                        }
                        Err(refusal) => self.clients[usize::from(from)].on_refused(
                            refusal.body,
                            refusal.owner,
                            refusal.priority,
                            now,
                        ),
                    }
                }
                Action::SendPriorityChange { body, priority } => {
                    match self.server.change_priority(sender, body, priority, now) {
                        Ok(grant) => {
                            self.broadcast(body, Some(grant.owner), grant.priority);
                            self.clients[usize::from(from)].on_grant(grant.body, grant.priority);
                        }
                        Err(refusal) => self.clients[usize::from(from)].on_refused(
                            refusal.body,
                            refusal.owner,
                            refusal.priority,
                            now,
                        ),
                    }
                }
                Action::SendRelease { body } => match self.server.release(sender, body, now) {
                    Ok(_) => {
                        self.zeroed.push(body);
                        self.broadcast(body, None, Priority::NONE);
                    }
                    Err(refusal) => self.clients[usize::from(from)].on_refused(
                        refusal.body,
                        refusal.owner,
                        refusal.priority,
                        now,
                    ),
                },
                Action::ZeroVelocity { .. } | Action::RefuseLocally { .. } => {}
            }
        }
    }

    /// Runs the server's silence expiry at `now` and tells everyone the bodies are unowned
    /// (no zeroing: they keep moving until taken over, ownership rule 5).
    pub fn expire(&mut self, now: Duration) {
        for e in self.server.expire(now) {
            self.broadcast(e.body, None, Priority::NONE);
        }
    }

    fn broadcast(&mut self, body: BodyId, owner: Option<ParticipantId>, priority: Priority) {
        for c in &mut self.clients {
            c.on_owner_changed(body, owner, priority);
        }
    }
}
