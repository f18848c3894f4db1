//! Ownership changes collected during one entity-server update and broadcast once per body at
//! its end ([coalescing](crate::rules#coalescing)): [`PendingOwners`].

use bevy::platform::collections::HashMap;

use crate::priority::{BodyId, ParticipantId, Priority};

/// The latest owner of a body changed this update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PendingOwner {
    pub(crate) body: BodyId,
    pub(crate) owner: Option<ParticipantId>,
    pub(crate) priority: Priority,
    /// The owner the body last lost this update, if it was cleared (released, silent or
    /// disconnected): the body's zero-velocity state goes out under that owner's name if it
    /// ends the update unowned.
    pub(crate) cleared_from: Option<ParticipantId>,
}

/// Ownership changes of one update, in the order bodies first changed, keeping only each
/// body's latest record.
#[derive(Debug, Default)]
pub(crate) struct PendingOwners {
    order: Vec<BodyId>,
    latest: HashMap<BodyId, PendingOwner>,
}

impl PendingOwners {
    /// Records `body`'s new owner; returns whether it superseded an earlier change of this
    /// update (which will then never be sent).
    pub(crate) fn record(
        &mut self,
        body: BodyId,
        owner: Option<ParticipantId>,
        priority: Priority,
        cleared_from: Option<ParticipantId>,
    ) -> bool {
        match self.latest.get_mut(&body) {
            Some(pending) => {
                pending.owner = owner;
                pending.priority = priority;
                pending.cleared_from = cleared_from.or(pending.cleared_from);
                true
            }
            None => {
                self.order.push(body);
                self.latest.insert(
                    body,
                    PendingOwner {
                        body,
                        owner,
                        priority,
                        cleared_from,
                    },
                );
                false
            }
        }
    }

    /// Drops `body`'s record of this update, if any (the body was reset: what it recorded is
    /// about the old body). Returns whether there was one.
    pub(crate) fn forget(&mut self, body: BodyId) -> bool {
        let had = self.latest.remove(&body).is_some();
        if had {
            self.order.retain(|b| *b != body);
        }
        had
    }

    /// Whether no change waits to be broadcast.
    pub(crate) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Every body's latest record, in first-change order; empties the set.
    pub(crate) fn drain(&mut self) -> Vec<PendingOwner> {
        let latest = &mut self.latest;
        let drained = self
            .order
            .drain(..)
            .filter_map(|body| latest.remove(&body))
            .collect();
        latest.clear();
        drained
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_record_per_body_in_first_change_order() {
        let (a, b) = (BodyId(1), BodyId(2));
        let (p, q) = (ParticipantId(1), ParticipantId(2));
        let mut pending = PendingOwners::default();
        assert!(!pending.record(b, Some(p), Priority(128), None));
        assert!(!pending.record(a, Some(p), Priority(128), None));
        assert!(pending.record(b, None, Priority::NONE, Some(p)));
        assert!(pending.record(b, Some(q), Priority(127), None));
        let drained = pending.drain();
        assert_eq!(
            drained,
            vec![
                PendingOwner {
                    body: b,
                    owner: Some(q),
                    priority: Priority(127),
                    cleared_from: Some(p),
                },
                PendingOwner {
                    body: a,
                    owner: Some(p),
                    priority: Priority(128),
                    cleared_from: None,
                },
            ]
        );
        assert!(pending.drain().is_empty());
    }
}
