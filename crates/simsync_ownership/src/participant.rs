//! [`ParticipantOwnership`]: a participant's side of the ownership rules (6–14), as a pure state
//! machine per body.
//!
//! Each simulation step the caller passes what it saw of each body it cares about (a
//! [`BodyObservation`]: moving or at rest, touched by the avatar, edited by a script, held, hit
//! by a body we own, still interesting) and the current time; [`ParticipantOwnership::tick`]
//! returns the [`Action`]s to take: messages to send to the entity server and velocities to
//! zero locally. The server's answers come back through [`ParticipantOwnership::on_grant`],
//! [`ParticipantOwnership::on_refused`] and [`ParticipantOwnership::on_owner_changed`], as
//! plain values (what a participant hears on the wire, not the server's result types); they
//! are the only way this participant's view of an owner changes ([ownership rule
//! 6](crate::rules)) — apart from bodies it creates moving
//! ([`ParticipantOwnership::created_moving`]).
//!
//! What the [rules](crate::rules) ask, and where each is applied:
//!
//! | rule | behaviour |
//! |---|---|
//! | 6 | a bid is *outstanding* until the server answers; ownership is never assumed; an unanswered bid, priority change or release is resent every `bid_resend_interval` (200 ms) while it can still succeed |
//! | 7 | a body active and unowned for `volunteer_delay` (0.5 s) gets a VOLUNTEER bid |
//! | 8, 9 | a script edit or an avatar collision gets a POKE bid |
//! | 10 | a held body gets a GRAB bid (or, when already ours, a priority change up to GRAB) |
//! | 11 | a body we own at priority N hitting an unowned body gets a bid at max(N − 1, VOLUNTEER) |
//! | 5 | a body moving and unowned that nobody took over for `orphan_stop_delay` (2 s) has its velocities zeroed, where it is |
//! | 12 | a body we own that comes to rest (and is not held) gets a release and its velocities zeroed |
//! | 13 | a body we own that is still moving but no longer interesting drops to YIELD |
//! | 14 | a moving, interesting body whose owner YIELDed gets a VOLUNTEER bid at once, no delay |
//!
//! A participant bids only where the bid can win as far as it knows: at or above the known
//! owner's priority (an equal bid may win once the lockout has passed, ownership rule 3, unless
//! it is a GRAB with `exclusive_grab` on), and never above `max_bid_priority` (a higher trigger
//! is clamped to it). A bid it does not send for that reason is refused on the spot
//! ([`Action::RefuseLocally`], at most once per `bid_resend_interval` and priority), so the game
//! learns why at once, without a round trip. After a refusal it waits
//! `bid_resend_interval` before bidding that priority again, and it takes the owner named in
//! the refusal as the truth.
//!
//! An owner raises its priority when a stronger trigger fires (a grab, ownership rule 10), but
//! never lowers it except to YIELD (ownership rule 13) or by releasing at rest (ownership
//! rule 12); the rules do not say when a grab's priority should end.
//!
//! # Where High Fidelity's shipped code differs
//! High Fidelity's shipped client sends its first VOLUNTEER bid as soon as a body is active and
//! unowned; [ownership rule 7](crate::rules) asks for a 0.5 s wait, which is what this state
//! machine does (`volunteer_delay`; set it to zero for the shipped behaviour).

use core::time::Duration;

use bevy::platform::collections::HashMap;
use bevy::prelude::*;
use serde::{Deserialize, Serialize};
use simsync_net::RefusalReason;

use crate::config::OwnershipConfig;
use crate::error::OwnershipError;
use crate::priority::{BodyId, ParticipantId, Priority};

/// What the participant saw of one body during the step being ticked.
///
/// One-tick events (`touched_by_avatar`, `script_edited`, `hit_by_owned`) are reported on the
/// tick they happen; states (`active`, `held`, `interested`) on every tick they hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Reflect, Serialize, Deserialize)]
pub struct BodyObservation {
    /// The body.
    pub body: BodyId,
    /// Moving (awake in the local physics simulation); `false` when at rest (sleeping).
    pub active: bool,
    /// Collided with this participant's avatar this tick (ownership rule 9).
    pub touched_by_avatar: bool,
    /// A local script changed its transform or velocity this tick (ownership rule 8).
    pub script_edited: bool,
    /// This participant holds it (ownership rule 10).
    pub held: bool,
    /// It was hit this tick by a body this participant owns; the highest priority among such
    /// hitters (ownership rule 11). See [`ParticipantOwnership::owned_priority`].
    pub hit_by_owned: Option<Priority>,
    /// This participant still wants to simulate it (it is near, visible, relevant). An owner
    /// that loses interest yields (ownership rule 13); an uninterested participant does not
    /// volunteer (ownership rules 7 and 14).
    pub interested: bool,
}

impl BodyObservation {
    /// A body at rest, interesting, with nothing happening to it.
    pub const fn at_rest(body: BodyId) -> Self {
        Self {
            body,
            active: false,
            touched_by_avatar: false,
            script_edited: false,
            held: false,
            hit_by_owned: None,
            interested: true,
        }
    }

    /// A moving, interesting body with nothing else happening to it.
    pub const fn moving(body: BodyId) -> Self {
        Self {
            active: true,
            ..Self::at_rest(body)
        }
    }
}

/// Something the caller must do after a [`ParticipantOwnership::tick`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Send a bid for `body` at `priority` to the entity server, with the body's current state
    /// (ownership rules 6–11, 14).
    SendBid {
        /// The body.
        body: BodyId,
        /// The priority asked for.
        priority: Priority,
    },
    /// As the owner, ask the server to change our priority on `body` (ownership rules 4, 10,
    /// 13).
    SendPriorityChange {
        /// The body.
        body: BodyId,
        /// The new priority.
        priority: Priority,
    },
    /// As the owner, ask the server to clear our ownership of `body`, with zero velocities
    /// (ownership rule 12).
    SendRelease {
        /// The body.
        body: BodyId,
    },
    /// Set the body's linear and angular velocities to zero locally: a body released at rest
    /// (ownership rule 12), or one moving and unowned that nobody took over for
    /// `orphan_stop_delay` (ownership rule 5).
    ZeroVelocity {
        /// The body.
        body: BodyId,
    },
    /// A bid this participant did not send because it cannot win against the owner it knows
    /// of (ownership rule 6): report it to the game at once, as the server would have.
    RefuseLocally {
        /// The body.
        body: BodyId,
        /// The priority the trigger asked for.
        priority: Priority,
        /// Why it cannot win: `LowerPriority` (below the known owner's priority) or
        /// `HeldExclusively` (an equal GRAB with `exclusive_grab` on).
        reason: RefusalReason,
    },
}

/// A request sent to the server and not answered yet (ownership rule 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Reflect, Serialize, Deserialize)]
pub enum PendingRequest {
    /// A bid at this priority.
    Bid(Priority),
    /// As the owner, a change to this priority.
    PriorityChange(Priority),
    /// As the owner, a release.
    Release,
}

impl PendingRequest {
    fn action(self, body: BodyId) -> Action {
        match self {
            PendingRequest::Bid(priority) => Action::SendBid { body, priority },
            PendingRequest::PriorityChange(priority) => {
                Action::SendPriorityChange { body, priority }
            }
            PendingRequest::Release => Action::SendRelease { body },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outstanding {
    request: PendingRequest,
    /// When it was last sent, since the caller's epoch.
    sent_at: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct TrackedBody {
    /// The owner as last told by the server (or assumed for a body we created moving).
    owner: Option<ParticipantId>,
    /// Its priority as last told; `NONE` when unowned.
    priority: Priority,
    outstanding: Option<Outstanding>,
    /// The last refused bid's priority and when the refusal arrived.
    refused: Option<(Priority, Duration)>,
    /// Since when the body has been seen active and unowned (ownership rule 7).
    active_unowned_since: Option<Duration>,
}

/// One participant's ownership state: for each body it cares about, the owner as last told by
/// the server, an outstanding request if any, and the timers of rules 6 and 7.
///
/// Plain data: clone it to snapshot it. Times are [`Duration`]s since an epoch of the caller's
/// choosing and must not go backwards between calls.
#[derive(Debug, Clone)]
pub struct ParticipantOwnership {
    me: ParticipantId,
    config: OwnershipConfig,
    bodies: HashMap<BodyId, TrackedBody>,
}

impl ParticipantOwnership {
    /// The state of participant `me` (its id as assigned by the server), applying `config`
    /// (the server's).
    ///
    /// # Errors
    /// [`OwnershipError::InvalidConfig`] if `config.validate()` fails.
    pub fn new(me: ParticipantId, config: OwnershipConfig) -> Result<Self, OwnershipError> {
        config.validate()?;
        Ok(Self {
            me,
            config,
            bodies: HashMap::default(),
        })
    }

    /// This participant's id.
    pub fn me(&self) -> ParticipantId {
        self.me
    }

    /// The config in force.
    pub fn config(&self) -> &OwnershipConfig {
        &self.config
    }

    /// The owner of `body` and its priority, as last told by the server; `None` if unowned or
    /// never heard of.
    pub fn owner(&self, body: BodyId) -> Option<(ParticipantId, Priority)> {
        let t = self.bodies.get(&body)?;
        t.owner.map(|o| (o, t.priority))
    }

    /// Our priority on `body` if the server has told us we own it (or we created it moving);
    /// the `N` to report in [`BodyObservation::hit_by_owned`] for bodies it hits (ownership
    /// rule 11).
    pub fn owned_priority(&self, body: BodyId) -> Option<Priority> {
        match self.owner(body) {
            Some((owner, priority)) if owner == self.me => Some(priority),
            _ => None,
        }
    }

    /// The request about `body` sent and not answered yet, if any (ownership rule 6).
    pub fn pending(&self, body: BodyId) -> Option<PendingRequest> {
        self.bodies
            .get(&body)
            .and_then(|t| t.outstanding.map(|o| o.request))
    }

    /// Stops tracking `body` (despawned, or out of this participant's world).
    pub fn forget(&mut self, body: BodyId) {
        self.bodies.remove(&body);
    }

    /// This participant created `body` moving and assumes it owns it at `priority` (clamped to
    /// `yield_priority..=max_bid_priority`, VOLUNTEER recorded as RECRUIT) without waiting for
    /// the server: the one exception of ownership rule 6. The server side is
    /// [`OwnershipArbiter::register_owned_body`](crate::OwnershipArbiter::register_owned_body).
    pub fn created_moving(&mut self, body: BodyId, priority: Priority) {
        let priority = self.config.granted_priority(
            priority.clamp(self.config.yield_priority, self.config.max_bid_priority),
        );
        self.bodies.insert(
            body,
            TrackedBody {
                owner: Some(self.me),
                priority,
                ..TrackedBody::default()
            },
        );
    }

    /// The server granted one of our requests (a bid or a priority change): we own `body` at
    /// `priority` (the granted one, which may differ from the asked one), and the outstanding
    /// request is answered.
    pub fn on_grant(&mut self, body: BodyId, priority: Priority) {
        let t = self.bodies.entry(body).or_default();
        t.outstanding = None;
        t.refused = None;
        set_owner(t, self.me, Some(self.me), priority, &self.config);
    }

    /// The server refused one of our requests about `body` at `now`. The outstanding request is
    /// answered; `owner` at `priority` (`None` and [`Priority::NONE`] when unowned) replaces our
    /// view — the owner as the refusal names it, or our own view when the refusal does not say;
    /// a refused bid's priority is not bid again for `bid_resend_interval`.
    pub fn on_refused(
        &mut self,
        body: BodyId,
        owner: Option<ParticipantId>,
        priority: Priority,
        now: Duration,
    ) {
        let t = self.bodies.entry(body).or_default();
        if let Some(o) = t.outstanding.take() {
            let asked = match o.request {
                PendingRequest::Bid(p) | PendingRequest::PriorityChange(p) => p,
                PendingRequest::Release => Priority::NONE,
            };
            t.refused = Some((asked, now));
        }
        set_owner(t, self.me, owner, priority, &self.config);
    }

    /// The server announced that `body` is now owned by `owner` at `priority` (`None` and
    /// [`Priority::NONE`] when cleared: a release, expiry or disconnect). Answers our
    /// outstanding bid if we are the new owner, our release if we no longer own it, and our
    /// priority change if the priority now matches it.
    pub fn on_owner_changed(
        &mut self,
        body: BodyId,
        owner: Option<ParticipantId>,
        priority: Priority,
    ) {
        let t = self.bodies.entry(body).or_default();
        set_owner(t, self.me, owner, priority, &self.config);
    }

    /// Applies the ownership rules to this step's `observations` at `now` and returns the
    /// actions to take, in observation order. Bodies not observed are left as they are (their
    /// outstanding requests are not resent).
    pub fn tick(
        &mut self,
        now: Duration,
        observations: impl IntoIterator<Item = BodyObservation>,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        for obs in observations {
            let t = self.bodies.entry(obs.body).or_default();
            if t.owner == Some(self.me) {
                tick_owned(t, &obs, now, &self.config, &mut actions);
            } else {
                tick_not_owned(t, &obs, now, &self.config, &mut actions);
            }
            resend_if_due(t, obs.body, now, &self.config, &mut actions);
        }
        actions
    }
}

/// Records the owner as the server states it and settles what that answers.
fn set_owner(
    t: &mut TrackedBody,
    me: ParticipantId,
    owner: Option<ParticipantId>,
    priority: Priority,
    config: &OwnershipConfig,
) {
    t.owner = owner;
    t.priority = if owner.is_some() {
        priority
    } else {
        Priority::NONE
    };
    if owner.is_some() {
        t.active_unowned_since = None;
    }
    let answered = match t.outstanding.map(|o| o.request) {
        None => false,
        Some(PendingRequest::Bid(_)) => owner == Some(me),
        Some(PendingRequest::Release) => owner != Some(me),
        Some(PendingRequest::PriorityChange(p)) => {
            owner != Some(me) || config.granted_priority(p) == priority
        }
    };
    if answered {
        t.outstanding = None;
    }
}

/// Rules 10, 12 and 13 for a body we own.
fn tick_owned(
    t: &mut TrackedBody,
    obs: &BodyObservation,
    now: Duration,
    config: &OwnershipConfig,
    actions: &mut Vec<Action>,
) {
    t.active_unowned_since = None;
    let body = obs.body;
    if let Some(Outstanding {
        request: PendingRequest::Bid(_),
        ..
    }) = t.outstanding
    {
        t.outstanding = None;
    }
    // Rule 12: at rest (and not held) → release and zero, once; resends come from
    // `resend_if_due`.
    if !obs.active && !obs.held {
        if !matches!(
            t.outstanding.map(|o| o.request),
            Some(PendingRequest::Release)
        ) {
            send(t, PendingRequest::Release, body, now, actions);
            actions.push(Action::ZeroVelocity { body });
        }
        return;
    }
    let trigger = event_trigger(obs, config);
    let wanted = match trigger {
        // Rule 10 (and 8, 9 for an owner): raise, never lower.
        Some(p) if p > t.priority => Some(p),
        Some(_) => None,
        // Rule 13: still moving, no longer wanted → YIELD.
        None if !obs.interested && t.priority > config.yield_priority => {
            Some(config.yield_priority)
        }
        None => None,
    };
    match (wanted, t.outstanding.map(|o| o.request)) {
        (Some(p), Some(PendingRequest::PriorityChange(q))) if p == q => {}
        (Some(p), _) => send(t, PendingRequest::PriorityChange(p), body, now, actions),
        // Moving again after asking to release, or the reason for a change went away: stop
        // resending (what was sent may still be answered).
        (None, Some(_)) => t.outstanding = None,
        (None, None) => {}
    }
}

/// Rules 6, 7, 8, 9, 10, 11 and 14 for a body we do not own.
fn tick_not_owned(
    t: &mut TrackedBody,
    obs: &BodyObservation,
    now: Duration,
    config: &OwnershipConfig,
    actions: &mut Vec<Action>,
) {
    let body = obs.body;
    drop_owner_requests(t);
    track_active_unowned(t, obs, now);
    if stop_if_orphaned(t, now, config) {
        actions.push(Action::ZeroVelocity { body });
        return;
    }
    drop_hopeless_bid(t);
    let Some(p) = wanted_bid(t, obs, now, config) else {
        return;
    };
    bid_or_refuse(t, body, p, now, config, actions);
}

/// Clears a release or priority change still outstanding for a body no longer ours.
fn drop_owner_requests(t: &mut TrackedBody) {
    if !matches!(
        t.outstanding.map(|o| o.request),
        None | Some(PendingRequest::Bid(_))
    ) {
        // A release or priority change for a body no longer ours: nothing left to ask.
        t.outstanding = None;
    }
}

/// Runs rule 7's timer: set while the body is seen moving and unowned, cleared otherwise.
fn track_active_unowned(t: &mut TrackedBody, obs: &BodyObservation, now: Duration) {
    if obs.active && t.owner.is_none() {
        t.active_unowned_since.get_or_insert(now);
    } else {
        t.active_unowned_since = None;
    }
}

/// Rule 5's orphans: whether a body moving and unowned that nobody took over (rules 7, 14) for
/// `orphan_stop_delay` is to be stopped where it is here, unless our own bid for it is in
/// flight; resets the timer when it is.
fn stop_if_orphaned(t: &mut TrackedBody, now: Duration, config: &OwnershipConfig) -> bool {
    let orphaned = t.owner.is_none()
        && t.outstanding.is_none()
        && t.active_unowned_since
            .is_some_and(|since| now.saturating_sub(since) >= config.orphan_stop_delay);
    if orphaned {
        t.active_unowned_since = None;
    }
    orphaned
}

/// Drops an outstanding bid below a known owner's priority: it can no longer win.
fn drop_hopeless_bid(t: &mut TrackedBody) {
    if let Some(Outstanding {
        request: PendingRequest::Bid(q),
        ..
    }) = t.outstanding
        && t.owner.is_some()
        && t.priority > q
    {
        t.outstanding = None;
    }
}

/// The bid this tick asks for, clamped to `max_bid_priority`: the highest of the event
/// trigger (rules 8, 9, 10), the knock-on (rule 11) and a volunteer bid (rules 7, 14).
fn wanted_bid(
    t: &TrackedBody,
    obs: &BodyObservation,
    now: Duration,
    config: &OwnershipConfig,
) -> Option<Priority> {
    let hosted = t.owner == Some(ParticipantId::ENTITY_SERVER);
    let volunteer = obs.interested && obs.active && {
        match t.owner {
            // Rule 21: the entity server's physics host simulates it for everyone; it is taken
            // back by an event (rules 8–10) or a knock-on (rule 11), not by volunteering.
            Some(_) if hosted => false,
            // Rule 14: the owner yielded; no delay.
            Some(_) => t.priority <= config.yield_priority,
            // Rule 7: active and unowned for the volunteer delay.
            None => t
                .active_unowned_since
                .is_some_and(|since| now.saturating_sub(since) >= config.volunteer_delay),
        }
    };
    // Rule 11: hit by a body we own at N → max(N − 1, VOLUNTEER), unowned bodies (and the
    // physics host's, rule 21) only.
    let knock_on = obs
        .hit_by_owned
        .filter(|_| t.owner.is_none() || hosted)
        .map(|n| n.saturating_sub(1).max(config.volunteer_priority));
    [
        event_trigger(obs, config),
        knock_on,
        volunteer.then_some(config.volunteer_priority),
    ]
    .into_iter()
    .flatten()
    .max()
    .map(|p| p.min(config.max_bid_priority))
}

/// Sends a bid at `p` unless one at least as high is outstanding or a refusal is being backed
/// off; refuses it locally instead when it cannot win (rule 6).
fn bid_or_refuse(
    t: &mut TrackedBody,
    body: BodyId,
    p: Priority,
    now: Duration,
    config: &OwnershipConfig,
    actions: &mut Vec<Action>,
) {
    let backing_off = t
        .refused
        .is_some_and(|(q, at)| q >= p && now.saturating_sub(at) < config.bid_resend_interval);
    if let Some(reason) = cannot_win(t, p, config) {
        // Rule 6: not sent; refused here, once per resend interval.
        if !backing_off {
            t.refused = Some((p, now));
            actions.push(Action::RefuseLocally {
                body,
                priority: p,
                reason,
            });
        }
        return;
    }
    let covered = matches!(
        t.outstanding,
        Some(Outstanding { request: PendingRequest::Bid(q), .. }) if q >= p
    );
    if !covered && !backing_off {
        send(t, PendingRequest::Bid(p), body, now, actions);
    }
}

/// Why a bid at `p` cannot win against the owner this participant knows of, if it cannot: below
/// the owner's priority (ownership rule 2), or an equal GRAB with the exclusive-grab option on
/// (ownership rule 3). An equal bid otherwise may win once the lockout has passed, so it is
/// sent.
fn cannot_win(t: &TrackedBody, p: Priority, config: &OwnershipConfig) -> Option<RefusalReason> {
    t.owner?;
    if p < t.priority {
        Some(RefusalReason::LowerPriority)
    } else if config.exclusive_grab && p == t.priority && p >= config.grab_priority {
        Some(RefusalReason::HeldExclusively)
    } else {
        None
    }
}

/// The priority this tick's grab, script edit or avatar collision asks for (rules 8, 9, 10).
fn event_trigger(obs: &BodyObservation, config: &OwnershipConfig) -> Option<Priority> {
    if obs.held {
        Some(config.grab_priority)
    } else if obs.script_edited || obs.touched_by_avatar {
        Some(config.poke_priority)
    } else {
        None
    }
    .map(|p| p.min(config.max_bid_priority))
}

fn send(
    t: &mut TrackedBody,
    request: PendingRequest,
    body: BodyId,
    now: Duration,
    actions: &mut Vec<Action>,
) {
    actions.push(request.action(body));
    t.outstanding = Some(Outstanding {
        request,
        sent_at: now,
    });
}

/// Rule 6: an outstanding request unanswered for `bid_resend_interval` is sent again.
fn resend_if_due(
    t: &mut TrackedBody,
    body: BodyId,
    now: Duration,
    config: &OwnershipConfig,
    actions: &mut Vec<Action>,
) {
    if let Some(o) = &mut t.outstanding
        && now.saturating_sub(o.sent_at) >= config.bid_resend_interval
    {
        o.sent_at = now;
        actions.push(o.request.action(body));
    }
}
