//! [`OwnershipArbiter`]: the entity server's side of the ownership rules (1–5 and the server half
//! of 7), as plain data and methods that take the time as an argument.
//!
//! The arbiter answers three kinds of participant message — a bid, a release, a priority change —
//! and records owner state updates so it can expire silent owners. It never reads a clock, never
//! sends anything and never touches physics: every method returns what happened (a [`Grant`],
//! [`Released`], [`Expired`] list or a [`Refusal`]) and the caller broadcasts it (with the
//! final, stopped state of a release at rest), and so on.
//!
//! The caller must pass the bidder's [`ParticipantId`] as taken from the connection the message
//! arrived on, never an id written in the message ([ownership rule 4](crate::rules)).
//!
//! # Where High Fidelity's shipped code differs
//! The equal-priority lockout ([rule 3](crate::rules)) is measured from the *body's* last
//! ownership change, and a silent owner ([rule 5](crate::rules)) is cleared after 5 s (a
//! participant silent altogether after 2 s) while its bodies keep flying until someone takes
//! them over; the [rules](crate::rules) say where and why this differs from the shipped entity
//! server.
//!
//! # Cost
//! A bid is one lookup of the body's record index (a `BodyMap`: the body id indexes a `Vec`,
//! a hash lookup only for ids too large for it) into a dense `Vec` of records, a few comparisons and a counter increment: no allocation. `expire` and
//! `disconnect` scan every record once.

use core::time::Duration;

use bevy::prelude::*;
use serde::{Deserialize, Serialize};
use simsync_net::RefusalReason;

use crate::body::BodyKind;
use crate::body_map::BodyMap;
use crate::config::OwnershipConfig;
use crate::error::OwnershipError;
use crate::priority::{BodyId, ParticipantId, Priority};

/// The server's ownership record of one body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyRecord {
    /// The body.
    pub body: BodyId,
    /// Its kind; only dynamic bodies are ownable.
    pub kind: BodyKind,
    /// Locked bodies refuse every bid (ownership rule 1). The current owner, if any, keeps the
    /// body and may still update, release it or change its priority.
    pub locked: bool,
    /// The current simulation owner, `None` when unowned.
    pub owner: Option<ParticipantId>,
    /// The owner's priority; [`Priority::NONE`] when unowned. Never `volunteer_priority`
    /// (ownership rule 7).
    pub priority: Priority,
    /// When the owner last changed (a new owner, or owner cleared), in time since the caller's
    /// epoch; `None` if it never has. The equal-priority lockout (ownership rule 3) runs from
    /// here. A priority change by the same owner is not an ownership change.
    pub last_change: Option<Duration>,
    /// When the current owner was last heard from about this body (grant, priority change or
    /// state update), in time since the caller's epoch; the silence expiry (ownership rule 5)
    /// runs from here. Meaningless while unowned.
    pub last_update_from_owner: Duration,
}

impl BodyRecord {
    fn new(body: BodyId, kind: BodyKind) -> Self {
        Self {
            body,
            kind,
            locked: false,
            owner: None,
            priority: Priority::NONE,
            last_change: None,
            last_update_from_owner: Duration::ZERO,
        }
    }
}

/// A bid or priority change the server accepted. The caller answers the bidder and broadcasts
/// the new owner and priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The body.
    pub body: BodyId,
    /// Its owner now.
    pub owner: ParticipantId,
    /// The priority now held: the asked priority, except that VOLUNTEER is recorded as RECRUIT
    /// (ownership rule 7) and that a bid by the current owner never lowers its priority.
    pub priority: Priority,
    /// The owner before; equal to `Some(owner)` when the owner only changed its priority.
    pub previous_owner: Option<ParticipantId>,
}

impl Grant {
    /// Whether the body changed hands (as opposed to the owner adjusting its priority).
    #[inline]
    pub fn owner_changed(&self) -> bool {
        self.previous_owner != Some(self.owner)
    }
}

/// A message the server turned down, with the body's owner as the server knows it so the
/// sender can correct its own view (and stop bidding where it cannot win).
///
/// A protocol outcome, not an error: the entity server counts it and answers with its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The body.
    pub body: BodyId,
    /// Why.
    pub reason: RefusalReason,
    /// The body's owner at the time; `None` when unowned or unknown.
    pub owner: Option<ParticipantId>,
    /// The owner's priority at the time; [`Priority::NONE`] when unowned or unknown.
    pub priority: Priority,
}

/// The owner released a body (ownership rule 12). The caller broadcasts "no owner" with zero
/// velocities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// The body, now unowned.
    pub body: BodyId,
    /// Who owned it.
    pub previous_owner: ParticipantId,
    /// At which priority.
    pub previous_priority: Priority,
}

/// Why an owner was cleared by the server rather than by its own release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Reflect, Serialize, Deserialize)]
pub enum ExpiryCause {
    /// No update from the owner for `owner_silence_expiry` (ownership rule 5).
    Silent,
    /// The owner's connection closed; treated as silence without the wait (ownership rule 5).
    Disconnected,
    /// Nothing at all came from the owner's connection for `participant_silence_timeout`: the
    /// participant counts as gone, as if its connection had closed (ownership rule 5).
    ParticipantSilent,
    /// The server refused the owner's state update as physically impossible (too fast, or a
    /// teleport: [ownership rule 22](crate::rules#rule-22--impossible-states)) and took the body
    /// from it.
    Implausible,
}

/// An owner the server cleared (ownership rule 5). The caller broadcasts "no owner" without a
/// state: the body is an orphan and keeps moving on every participant until someone takes it
/// over or it is stopped after `orphan_stop_delay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expired {
    /// The body, now unowned.
    pub body: BodyId,
    /// Who owned it.
    pub previous_owner: ParticipantId,
    /// At which priority.
    pub previous_priority: Priority,
    /// Why it was cleared.
    pub cause: ExpiryCause,
}

/// Refusals counted per [`RefusalReason`].
///
/// Prints by reason name, only the reasons that were counted: `Debug` as a map
/// (`{"lower_priority": 3, "not_owner": 1}`), `Display` as `lower_priority 3, not_owner 1`
/// (`none` when empty), and it serializes as that map ([`by_name`](Self::by_name)).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct RefusalCounts([u64; RefusalReason::COUNT]);

impl core::fmt::Debug for RefusalCounts {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_map().entries(self.counted()).finish()
    }
}

impl core::fmt::Display for RefusalCounts {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut any = false;
        for (name, n) in self.counted() {
            if any {
                f.write_str(", ")?;
            }
            write!(f, "{name} {n}")?;
            any = true;
        }
        if !any {
            f.write_str("none")?;
        }
        Ok(())
    }
}

impl Serialize for RefusalCounts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.counted())
    }
}

impl core::ops::AddAssign for RefusalCounts {
    fn add_assign(&mut self, other: Self) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }
}

impl core::ops::Add for RefusalCounts {
    type Output = Self;

    fn add(mut self, other: Self) -> Self {
        self += other;
        self
    }
}

impl RefusalCounts {
    /// Refusals for `reason` so far.
    #[inline]
    pub fn get(&self, reason: RefusalReason) -> u64 {
        self.0[reason as usize]
    }

    /// Refusals for every reason together.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// `(reason, count)` for every reason, in [`RefusalReason::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (RefusalReason, u64)> + '_ {
        RefusalReason::ALL.iter().map(|r| (*r, self.get(*r)))
    }

    /// Counts one refusal for `reason`.
    #[inline]
    pub fn add(&mut self, reason: RefusalReason) {
        self.0[reason as usize] += 1;
    }

    /// The reasons counted at least once, by [name](RefusalReason::name), in
    /// [`RefusalReason::ALL`] order.
    pub fn counted(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.iter()
            .filter(|(_, n)| *n > 0)
            .map(|(reason, n)| (reason.name(), n))
    }

    /// The reasons counted at least once, by [name](RefusalReason::name): what summaries and
    /// JSON print.
    pub fn by_name(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.counted().collect()
    }
}

/// What the arbiter has done since it was created.
///
/// `ownership_changes` counts every change of a body's owner: a grant to a new owner
/// (`grants` minus owner re-bids), a release, an expiry or a disconnect clear.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArbiterStats {
    /// Bids granted, including bodies registered already owned by their creator (ownership
    /// rule 6) and bids by the current owner (which only change its priority).
    pub grants: u64,
    /// Times a body's owner changed (to another participant or to none).
    pub ownership_changes: u64,
    /// Accepted `change_priority` calls (ownership rule 4).
    pub priority_changes: u64,
    /// Accepted releases (ownership rules 4, 12).
    pub releases: u64,
    /// Owners cleared for silence (ownership rule 5).
    pub expiries: u64,
    /// Owners cleared because they disconnected.
    pub disconnect_clears: u64,
    /// Owners cleared because their participant went silent (nothing heard from it at all for
    /// `participant_silence_timeout`).
    pub participant_silence_clears: u64,
    /// Accepted owner state updates.
    pub owner_updates: u64,
    /// Bodies the entity server's physics host took ([`OwnershipArbiter::host_take`],
    /// ownership rule 21).
    pub host_takes: u64,
    /// Owners cleared because their state update was impossible ([`OwnershipArbiter::revoke`],
    /// ownership rule 22).
    pub revocations: u64,
    /// Refused messages, per reason.
    pub refusals: RefusalCounts,
}

/// The entity server's ownership table: one [`BodyRecord`] per registered body, the
/// [`OwnershipConfig`] it applies, and [`ArbiterStats`].
///
/// Plain data: clone it to snapshot it. Every time argument is a [`Duration`] since an epoch of
/// the caller's choosing, and must not go backwards between calls (a `now` earlier than a
/// body's last change counts as "within the lockout").
#[derive(Debug, Clone)]
pub struct OwnershipArbiter {
    config: OwnershipConfig,
    index: BodyMap<usize>,
    records: Vec<BodyRecord>,
    stats: ArbiterStats,
}

impl Default for OwnershipArbiter {
    /// An empty arbiter with the default config.
    fn default() -> Self {
        Self {
            config: OwnershipConfig::default(),
            index: BodyMap::default(),
            records: Vec::new(),
            stats: ArbiterStats::default(),
        }
    }
}

impl OwnershipArbiter {
    /// An empty arbiter applying `config`.
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if `config.validate()` fails.
    pub fn new(config: OwnershipConfig) -> Result<Self, OwnershipError> {
        config.validate()?;
        Ok(Self {
            config,
            ..Self::default()
        })
    }

    /// The config in force.
    pub fn config(&self) -> &OwnershipConfig {
        &self.config
    }

    /// Counters since creation.
    pub fn stats(&self) -> &ArbiterStats {
        &self.stats
    }

    /// Refusals since creation, per reason.
    pub fn refusals_by_reason(&self) -> &RefusalCounts {
        &self.stats.refusals
    }

    /// Registered bodies.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no body is registered.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The record of `body`, if registered.
    pub fn record(&self, body: BodyId) -> Option<&BodyRecord> {
        self.slot(body).map(|i| &self.records[i])
    }

    /// Every record, in registration order (changed by `unregister_body`).
    pub fn records(&self) -> &[BodyRecord] {
        &self.records
    }

    /// The owner of `body` and its priority; `None` if unowned or unknown.
    pub fn owner(&self, body: BodyId) -> Option<(ParticipantId, Priority)> {
        self.record(body)
            .and_then(|r| r.owner.map(|owner| (owner, r.priority)))
    }

    /// Adds an unowned, unlocked body.
    ///
    /// # Errors
    /// [`OwnershipError::BodyAlreadyRegistered`] if `body` is already known.
    pub fn register_body(&mut self, body: BodyId, kind: BodyKind) -> Result<(), OwnershipError> {
        self.insert(BodyRecord::new(body, kind))
    }

    /// Adds a dynamic body already owned by the participant that created it, at `priority`
    /// (VOLUNTEER recorded as RECRUIT): the exception of ownership rule 6, where a participant
    /// that creates a moving body assumes it owns it. Counts as a grant and an ownership change
    /// at `now` (so the equal-priority lockout applies from `now`), and the silence expiry runs
    /// from `now`.
    ///
    /// # Errors
    /// [`OwnershipError::BodyAlreadyRegistered`] if `body` is already known;
    /// [`OwnershipError::PriorityOutOfRange`] if `priority` is below `yield_priority` or above
    /// `max_bid_priority`.
    pub fn register_owned_body(
        &mut self,
        body: BodyId,
        creator: ParticipantId,
        priority: Priority,
        now: Duration,
    ) -> Result<Grant, OwnershipError> {
        if priority < self.config.yield_priority || priority > self.config.max_bid_priority {
            return Err(OwnershipError::PriorityOutOfRange {
                priority,
                min: self.config.yield_priority,
                max: self.config.max_bid_priority,
            });
        }
        let granted = self.config.granted_priority(priority);
        self.insert(BodyRecord {
            owner: Some(creator),
            priority: granted,
            last_change: Some(now),
            last_update_from_owner: now,
            ..BodyRecord::new(body, BodyKind::Dynamic)
        })?;
        self.stats.grants += 1;
        self.stats.ownership_changes += 1;
        Ok(Grant {
            body,
            owner: creator,
            priority: granted,
            previous_owner: None,
        })
    }

    /// Removes a body (it was despawned) and returns its last record.
    ///
    /// # Errors
    /// [`OwnershipError::UnknownBody`] if `body` is not registered.
    pub fn unregister_body(&mut self, body: BodyId) -> Result<BodyRecord, OwnershipError> {
        let i = self
            .index
            .remove(body)
            .ok_or(OwnershipError::UnknownBody { body })?;
        let removed = self.records.swap_remove(i);
        if let Some(moved) = self.records.get(i) {
            self.index.insert(moved.body, i);
        }
        Ok(removed)
    }

    /// A participant respawned `body` under its id ([respawns](crate::rules#respawns)): the body
    /// starts again unowned, its equal-priority lockout running from `now`. Accepted from the
    /// body's owner, or from anyone while it is unowned — or held by the physics host, which
    /// holds a body for nobody in particular (rule 21) — and unlocked; returns the owner it
    /// had. Counts as an ownership change when it had one.
    ///
    /// # Errors
    /// [`RefusalReason::UnknownBody`]; [`RefusalReason::NotOwnable`] for a static or kinematic
    /// body; [`RefusalReason::NotOwner`] if another participant owns it;
    /// [`RefusalReason::Locked`] if it is unowned and locked (ownership rule 1).
    pub fn respawn(
        &mut self,
        from: ParticipantId,
        body: BodyId,
        now: Duration,
    ) -> Result<Option<ParticipantId>, Refusal> {
        let Some(i) = self.slot(body) else {
            return Err(self.refuse_unknown(body));
        };
        let record = &self.records[i];
        let participant = record.owner.filter(|o| *o != ParticipantId::ENTITY_SERVER);
        let refused = if !record.kind.is_ownable() {
            Some(RefusalReason::NotOwnable)
        } else if participant.is_some_and(|o| o != from) {
            Some(RefusalReason::NotOwner)
        } else if participant.is_none() && record.locked {
            Some(RefusalReason::Locked)
        } else {
            None
        };
        if let Some(reason) = refused {
            return Err(self.refuse(i, reason));
        }
        let record = &mut self.records[i];
        let previous = record.owner.take();
        record.priority = Priority::NONE;
        record.last_change = Some(now);
        if previous.is_some() {
            self.stats.ownership_changes += 1;
        }
        Ok(previous)
    }

    /// Locks or unlocks `body` against bids (ownership rule 1). Locking does not clear the
    /// current owner.
    ///
    /// # Errors
    /// [`OwnershipError::UnknownBody`] if `body` is not registered.
    pub fn set_locked(&mut self, body: BodyId, locked: bool) -> Result<(), OwnershipError> {
        let i = self
            .slot(body)
            .ok_or(OwnershipError::UnknownBody { body })?;
        self.records[i].locked = locked;
        Ok(())
    }

    /// Decides a bid by `from` (the id of the connection it arrived on) for `body` at
    /// `priority`, received at `now`.
    ///
    /// Checked in this order:
    /// 1. unknown body → [`RefusalReason::UnknownBody`];
    /// 2. static or kinematic body → [`RefusalReason::NotOwnable`];
    /// 3. locked body → [`RefusalReason::Locked`] (ownership rule 1);
    /// 4. `priority` above `max_bid_priority` → [`RefusalReason::PriorityTooHigh`], below
    ///    `volunteer_priority` → [`RefusalReason::PriorityTooLow`];
    /// 5. `from` already owns the body → granted, keeping the higher of its current and the
    ///    asked priority (a late resend must not lower it; to lower, see
    ///    [`Self::change_priority`]);
    /// 6. higher than the owner's priority → granted (ownership rule 2);
    /// 7. lower → [`RefusalReason::LowerPriority`];
    /// 8. equal at `grab_priority` or more with `exclusive_grab` on →
    ///    [`RefusalReason::HeldExclusively`] (the exclusive-grab option of ownership rule 3);
    /// 9. equal, less than `equal_priority_lockout` after the body's last ownership change →
    ///    [`RefusalReason::LockedOutEqualPriority`], otherwise granted (ownership rule 3).
    ///
    /// A granted VOLUNTEER is recorded as RECRUIT (ownership rule 7). A grant to a new owner
    /// starts its silence timer (ownership rule 5) and the body's lockout at `now`.
    ///
    /// # Errors
    /// A [`Refusal`] with the reason above and the body's current owner; counted per reason.
    pub fn bid(
        &mut self,
        from: ParticipantId,
        body: BodyId,
        priority: Priority,
        now: Duration,
    ) -> Result<Grant, Refusal> {
        let Some(i) = self.slot(body) else {
            return Err(self.refuse_unknown(body));
        };
        let config = &self.config;
        let record = &self.records[i];
        let refusal = if !record.kind.is_ownable() {
            Some(RefusalReason::NotOwnable)
        } else if record.locked {
            Some(RefusalReason::Locked)
        } else if priority > config.max_bid_priority {
            Some(RefusalReason::PriorityTooHigh)
        } else if priority < config.volunteer_priority {
            Some(RefusalReason::PriorityTooLow)
        } else if record.owner == Some(from) || priority > record.priority {
            None
        } else if priority < record.priority {
            Some(RefusalReason::LowerPriority)
        } else if config.exclusive_grab && priority >= config.grab_priority {
            // Equal priority at GRAB, held by someone else (an unowned body was granted above).
            Some(RefusalReason::HeldExclusively)
        } else if record
            .last_change
            .is_some_and(|at| now.saturating_sub(at) < config.equal_priority_lockout)
        {
            Some(RefusalReason::LockedOutEqualPriority)
        } else {
            None
        };
        if let Some(reason) = refusal {
            return Err(self.refuse(i, reason));
        }
        let record = &mut self.records[i];
        let previous_owner = record.owner;
        let mut granted = self.config.granted_priority(priority);
        if previous_owner == Some(from) {
            // The owner's bid can raise its priority, never lower it: a late resend of an
            // earlier, weaker bid must not undo a raise (lowering is `change_priority`).
            granted = granted.max(record.priority);
        } else {
            record.last_change = Some(now);
            self.stats.ownership_changes += 1;
        }
        self.stats.grants += 1;
        Ok(self.grant(i, from, granted, now, previous_owner))
    }

    /// The owner `from` gives `body` up (ownership rules 4 and 12): the body becomes unowned at
    /// [`Priority::NONE`], which is an ownership change at `now`. Allowed on locked bodies.
    ///
    /// # Errors
    /// [`RefusalReason::UnknownBody`], or [`RefusalReason::NotOwner`] if `from` is not the
    /// current owner (ownership rule 4); counted.
    pub fn release(
        &mut self,
        from: ParticipantId,
        body: BodyId,
        now: Duration,
    ) -> Result<Released, Refusal> {
        let i = self.owned_slot(from, body)?;
        let record = &mut self.records[i];
        let released = Released {
            body,
            previous_owner: from,
            previous_priority: record.priority,
        };
        record.owner = None;
        record.priority = Priority::NONE;
        record.last_change = Some(now);
        self.stats.releases += 1;
        self.stats.ownership_changes += 1;
        Ok(released)
    }

    /// The owner `from` changes its priority on `body` to `priority` (ownership rule 4): down to
    /// YIELD when it loses interest (ownership rule 13), up to GRAB when it grabs (ownership
    /// rule 10). VOLUNTEER is recorded as RECRUIT (ownership rule 7). Not an ownership change:
    /// the lockout clock keeps running from the last change of owner. Counts as hearing from
    /// the owner (ownership rule 5).
    ///
    /// # Errors
    /// [`RefusalReason::UnknownBody`]; [`RefusalReason::NotOwner`] if `from` is not the current
    /// owner (ownership rule 4); [`RefusalReason::PriorityTooHigh`] above `max_bid_priority`;
    /// [`RefusalReason::PriorityTooLow`] below `yield_priority` (use [`Self::release`]).
    /// Counted.
    pub fn change_priority(
        &mut self,
        from: ParticipantId,
        body: BodyId,
        priority: Priority,
        now: Duration,
    ) -> Result<Grant, Refusal> {
        let i = self.owned_slot(from, body)?;
        if priority > self.config.max_bid_priority {
            return Err(self.refuse(i, RefusalReason::PriorityTooHigh));
        }
        if priority < self.config.yield_priority {
            return Err(self.refuse(i, RefusalReason::PriorityTooLow));
        }
        let granted = self.config.granted_priority(priority);
        self.stats.priority_changes += 1;
        Ok(self.grant(i, from, granted, now, Some(from)))
    }

    /// Records that the owner `from` sent a state update for `body` at `now`, which restarts
    /// its silence timer (ownership rule 5). The caller relays the update only on `Ok`.
    ///
    /// # Errors
    /// [`RefusalReason::UnknownBody`], or [`RefusalReason::NotOwner`] if `from` is not the
    /// current owner (only the owner's updates are relayed); counted.
    pub fn owner_update(
        &mut self,
        from: ParticipantId,
        body: BodyId,
        now: Duration,
    ) -> Result<(), Refusal> {
        let i = self.owned_slot(from, body)?;
        self.records[i].last_update_from_owner = now;
        self.stats.owner_updates += 1;
        Ok(())
    }

    /// The entity server's physics host takes `body` ([ownership rule
    /// 21](crate::rules#rule-21--the-physics-host)): it becomes owned by
    /// [`ParticipantId::ENTITY_SERVER`] at `yield_priority`, the lowest a holder can have, so
    /// any participant's bid wins it back. Taken when the body is dynamic, not locked, and
    /// unowned — or, for the far-owner option, owned by a participant at `take_from_at_most`
    /// or less (pass [`Priority::NONE`] to take only unowned bodies). An ownership change at
    /// `now`, counted in `host_takes`; the previous owner, if any, is in the grant.
    ///
    /// Returns `None` (nothing counted: the host's own choice, not a participant's request)
    /// when the body is unknown, not ownable, locked, already the host's, or owned above
    /// `take_from_at_most`.
    pub fn host_take(
        &mut self,
        body: BodyId,
        take_from_at_most: Priority,
        now: Duration,
    ) -> Option<Grant> {
        let i = self.slot(body)?;
        let record = &self.records[i];
        let host = ParticipantId::ENTITY_SERVER;
        let takeable = match record.owner {
            None => true,
            Some(owner) => owner != host && record.priority <= take_from_at_most,
        };
        if !record.kind.is_ownable() || record.locked || !takeable {
            return None;
        }
        let previous_owner = record.owner;
        let priority = self.config.yield_priority;
        self.records[i].last_change = Some(now);
        self.stats.ownership_changes += 1;
        self.stats.host_takes += 1;
        Some(self.grant(i, host, priority, now, previous_owner))
    }

    /// Clears the owner of `body` because the server refused its state update as impossible
    /// ([ownership rule 22](crate::rules#rule-22--impossible-states)): an ownership change at
    /// `now`, cause [`ExpiryCause::Implausible`], counted in `revocations`. `None` when the body
    /// is unknown or unowned.
    pub fn revoke(&mut self, body: BodyId, now: Duration) -> Option<Expired> {
        let i = self.slot(body)?;
        let record = &mut self.records[i];
        let previous_owner = record.owner?;
        let expired = Expired {
            body,
            previous_owner,
            previous_priority: record.priority,
            cause: ExpiryCause::Implausible,
        };
        record.owner = None;
        record.priority = Priority::NONE;
        record.last_change = Some(now);
        self.stats.revocations += 1;
        self.stats.ownership_changes += 1;
        Some(expired)
    }

    /// Clears every owner not heard from for at least `owner_silence_expiry` before `now`
    /// (ownership rule 5): 5 s of silence expires, 4.9 s does not. Each cleared body is an
    /// ownership change at `now`. Returns the cleared bodies, in record order; the caller
    /// broadcasts them unowned (they keep moving: orphans).
    pub fn expire(&mut self, now: Duration) -> Vec<Expired> {
        let limit = self.config.owner_silence_expiry;
        self.clear_where(now, ExpiryCause::Silent, |r| {
            now.saturating_sub(r.last_update_from_owner) >= limit
        })
    }

    /// Clears everything `participant` owned, as if it had gone silent (ownership rule 5, no
    /// wait). Each cleared body is an ownership change at `now`. Returns the cleared bodies, in
    /// record order; the caller broadcasts them unowned (they keep moving: orphans).
    pub fn disconnect(&mut self, participant: ParticipantId, now: Duration) -> Vec<Expired> {
        self.clear_where(now, ExpiryCause::Disconnected, |r| {
            r.owner == Some(participant)
        })
    }

    /// Clears everything `participant` owned because nothing at all was heard from it for
    /// `participant_silence_timeout` (ownership rule 5): the same as [`disconnect`](Self::disconnect),
    /// with the cause [`ExpiryCause::ParticipantSilent`].
    pub fn participant_silent(
        &mut self,
        participant: ParticipantId,
        now: Duration,
    ) -> Vec<Expired> {
        self.clear_where(now, ExpiryCause::ParticipantSilent, |r| {
            r.owner == Some(participant)
        })
    }

    fn clear_where(
        &mut self,
        now: Duration,
        cause: ExpiryCause,
        mut clear: impl FnMut(&BodyRecord) -> bool,
    ) -> Vec<Expired> {
        let mut cleared = Vec::new();
        for record in &mut self.records {
            let Some(owner) = record.owner else { continue };
            if !clear(record) {
                continue;
            }
            cleared.push(Expired {
                body: record.body,
                previous_owner: owner,
                previous_priority: record.priority,
                cause,
            });
            record.owner = None;
            record.priority = Priority::NONE;
            record.last_change = Some(now);
        }
        let n = cleared.len() as u64;
        match cause {
            ExpiryCause::Silent => self.stats.expiries += n,
            ExpiryCause::Disconnected => self.stats.disconnect_clears += n,
            ExpiryCause::ParticipantSilent => self.stats.participant_silence_clears += n,
            ExpiryCause::Implausible => self.stats.revocations += n,
        }
        self.stats.ownership_changes += n;
        cleared
    }

    /// Records `from` as the owner of record `i` at `granted`, heard from at `now`, and returns
    /// the grant to answer with.
    fn grant(
        &mut self,
        i: usize,
        from: ParticipantId,
        granted: Priority,
        now: Duration,
        previous_owner: Option<ParticipantId>,
    ) -> Grant {
        let record = &mut self.records[i];
        record.owner = Some(from);
        record.priority = granted;
        record.last_update_from_owner = now;
        Grant {
            body: record.body,
            owner: from,
            priority: granted,
            previous_owner,
        }
    }

    #[inline]
    fn slot(&self, body: BodyId) -> Option<usize> {
        self.index.get(body).copied()
    }

    fn insert(&mut self, record: BodyRecord) -> Result<(), OwnershipError> {
        let body = record.body;
        if self.index.contains_key(body) {
            return Err(OwnershipError::BodyAlreadyRegistered { body });
        }
        self.index.insert(body, self.records.len());
        self.records.push(record);
        Ok(())
    }

    /// The slot of `body` if `from` owns it, else the counted refusal.
    #[inline]
    fn owned_slot(&mut self, from: ParticipantId, body: BodyId) -> Result<usize, Refusal> {
        match self.slot(body) {
            None => Err(self.refuse_unknown(body)),
            Some(i) if self.records[i].owner == Some(from) => Ok(i),
            Some(i) => Err(self.refuse(i, RefusalReason::NotOwner)),
        }
    }

    #[cold]
    fn refuse_unknown(&mut self, body: BodyId) -> Refusal {
        self.stats.refusals.add(RefusalReason::UnknownBody);
        Refusal {
            body,
            reason: RefusalReason::UnknownBody,
            owner: None,
            priority: Priority::NONE,
        }
    }

    #[inline]
    fn refuse(&mut self, i: usize, reason: RefusalReason) -> Refusal {
        self.stats.refusals.add(reason);
        let record = &self.records[i];
        Refusal {
            body: record.body,
            reason,
            owner: record.owner,
            priority: record.priority,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_counts_print_by_reason_name() {
        let mut counts = RefusalCounts::default();
        assert_eq!(counts.to_string(), "none");
        assert_eq!(format!("{counts:?}"), "{}");
        counts.add(RefusalReason::NotOwner);
        counts.add(RefusalReason::LowerPriority);
        counts.add(RefusalReason::LowerPriority);
        assert_eq!(counts.to_string(), "lower_priority 2, not_owner 1");
        assert_eq!(
            format!("{counts:?}"),
            r#"{"lower_priority": 2, "not_owner": 1}"#
        );
        let both = counts + counts;
        assert_eq!(both.get(RefusalReason::LowerPriority), 4);
        assert_eq!(
            both.by_name().into_iter().collect::<Vec<_>>(),
            vec![("lower_priority", 4), ("not_owner", 2)]
        );
    }

    fn arbiter_with(body: BodyId) -> OwnershipArbiter {
        let mut arbiter = OwnershipArbiter::default();
        arbiter.register_body(body, BodyKind::Dynamic).unwrap();
        arbiter
    }

    #[test]
    fn the_host_takes_an_unowned_body_at_yield_and_any_bid_wins_it_back() {
        let body = BodyId(4);
        let mut arbiter = arbiter_with(body);
        let grant = arbiter
            .host_take(body, Priority::NONE, Duration::ZERO)
            .unwrap();
        assert_eq!(grant.owner, ParticipantId::ENTITY_SERVER);
        assert_eq!(grant.priority, Priority::YIELD);
        assert_eq!(grant.previous_owner, None);
        assert!(
            arbiter
                .host_take(body, Priority::GRAB, Duration::ZERO)
                .is_none()
        );
        let won = arbiter
            .bid(
                ParticipantId(3),
                body,
                Priority::VOLUNTEER,
                Duration::from_millis(1),
            )
            .unwrap();
        assert_eq!(
            (won.owner, won.priority),
            (ParticipantId(3), Priority::RECRUIT)
        );
        assert_eq!(arbiter.stats().host_takes, 1);
        assert_eq!(arbiter.stats().ownership_changes, 2);
    }

    #[test]
    fn the_host_takes_from_an_owner_only_at_or_below_the_given_priority() {
        let body = BodyId(4);
        let mut arbiter = arbiter_with(body);
        arbiter
            .bid(ParticipantId(1), body, Priority::POKE, Duration::ZERO)
            .unwrap();
        assert!(
            arbiter
                .host_take(body, Priority::NONE, Duration::ZERO)
                .is_none()
        );
        assert!(
            arbiter
                .host_take(body, Priority::RECRUIT, Duration::ZERO)
                .is_none()
        );
        let taken = arbiter
            .host_take(body, Priority::POKE, Duration::ZERO)
            .unwrap();
        assert_eq!(taken.previous_owner, Some(ParticipantId(1)));
        assert_eq!(
            arbiter.owner(body),
            Some((ParticipantId::ENTITY_SERVER, Priority::YIELD))
        );
        arbiter.set_locked(body, true).unwrap();
        arbiter.revoke(body, Duration::ZERO).unwrap();
        assert!(
            arbiter
                .host_take(body, Priority::GRAB, Duration::ZERO)
                .is_none(),
            "locked"
        );
        assert!(
            arbiter
                .host_take(BodyId(99), Priority::GRAB, Duration::ZERO)
                .is_none()
        );
        assert_eq!(
            arbiter.stats().refusals.total(),
            0,
            "the host's choices are not refusals"
        );
    }

    #[test]
    fn anyone_may_respawn_a_body_the_host_holds() {
        let body = BodyId(4);
        let mut arbiter = arbiter_with(body);
        arbiter
            .host_take(body, Priority::NONE, Duration::ZERO)
            .unwrap();
        let previous = arbiter.respawn(ParticipantId(5), body, Duration::from_millis(3));
        assert_eq!(previous, Ok(Some(ParticipantId::ENTITY_SERVER)));
        assert_eq!(arbiter.owner(body), None);
    }

    #[test]
    fn a_revoked_owner_loses_the_body_with_the_implausible_cause() {
        let body = BodyId(4);
        let mut arbiter = arbiter_with(body);
        assert!(arbiter.revoke(body, Duration::ZERO).is_none(), "unowned");
        arbiter
            .bid(ParticipantId(2), body, Priority::GRAB, Duration::ZERO)
            .unwrap();
        let expired = arbiter.revoke(body, Duration::from_millis(5)).unwrap();
        assert_eq!(expired.previous_owner, ParticipantId(2));
        assert_eq!(expired.previous_priority, Priority::GRAB);
        assert_eq!(expired.cause, ExpiryCause::Implausible);
        assert_eq!(arbiter.owner(body), None);
        assert_eq!(
            arbiter.record(body).unwrap().last_change,
            Some(Duration::from_millis(5))
        );
        assert_eq!(arbiter.stats().revocations, 1);
    }
}
