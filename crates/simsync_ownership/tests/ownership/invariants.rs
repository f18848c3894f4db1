//! Property tests: random message sequences keep the arbiter's invariants and counters exact.

use core::time::Duration;

use crate::common::*;
use proptest::prelude::*;
use simsync_ownership::{
    BodyKind, BodyObservation, Grant, OwnershipArbiter, OwnershipConfig, ParticipantId, Priority,
    Refusal, RefusalReason,
};

const BODIES: u64 = 6;
const PARTICIPANTS: u16 = 4;

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Bid(u16, u64, u8),
    Release(u16, u64),
    ChangePriority(u16, u64, u8),
    Update(u16, u64),
    Expire,
    Disconnect(u16),
    Lock(u64, bool),
}

fn priority() -> impl Strategy<Value = u8> {
    prop_oneof![
        Just(0u8),
        Just(1),
        Just(2),
        Just(3),
        Just(126),
        Just(127),
        Just(128),
        Just(129),
        any::<u8>(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let who = 0..PARTICIPANTS;
    let body = 0..BODIES + 1; // one unknown body
    prop_oneof![
        3 => (0u64..400).prop_map(Op::Advance),
        6 => (who.clone(), body.clone(), priority()).prop_map(|(w, b, p)| Op::Bid(w, b, p)),
        2 => (who.clone(), body.clone()).prop_map(|(w, b)| Op::Release(w, b)),
        2 => (who.clone(), body.clone(), priority()).prop_map(|(w, b, p)| Op::ChangePriority(w, b, p)),
        3 => (who.clone(), body.clone()).prop_map(|(w, b)| Op::Update(w, b)),
        1 => Just(Op::Expire),
        1 => who.prop_map(Op::Disconnect),
        1 => (body, any::<bool>()).prop_map(|(b, l)| Op::Lock(b, l)),
    ]
}

type Owners = Vec<(Option<ParticipantId>, Priority)>;

fn owners(a: &OwnershipArbiter) -> Owners {
    (0..BODIES)
        .map(|i| {
            let r = a.record(b(i)).unwrap();
            (r.owner, r.priority)
        })
        .collect()
}

/// An arbiter with `BODIES` bodies: body 4 static, body 5 kinematic, the rest dynamic; body
/// `BODIES` is never registered.
fn arbiter_with_bodies() -> OwnershipArbiter {
    let mut a = OwnershipArbiter::default();
    for i in 0..BODIES {
        let kind = match i {
            4 => BodyKind::Static,
            5 => BodyKind::Kinematic,
            _ => BodyKind::Dynamic,
        };
        a.register_body(b(i), kind).unwrap();
    }
    a
}

/// The arbiter's counters as the test expects them from the ops applied so far.
#[derive(Default)]
struct Expected {
    refusals: [u64; RefusalReason::COUNT],
    grants: u64,
    changes: u64,
}

/// Every body's owner, priority and last change before an op, which the op's checks compare
/// against.
struct Before {
    owners: Owners,
    last_change: Vec<Option<Duration>>,
}

impl Before {
    fn of(a: &OwnershipArbiter) -> Self {
        Self {
            owners: owners(a),
            last_change: (0..BODIES)
                .map(|i| a.record(b(i)).unwrap().last_change)
                .collect(),
        }
    }
}

/// Applies `op` at `*now` (advancing `now` on `Op::Advance`), checking what that op promises
/// on its own; returns the refusal it got, if any.
fn apply_op(
    a: &mut OwnershipArbiter,
    config: &OwnershipConfig,
    op: Op,
    now: &mut Duration,
    before: &Before,
    expected: &mut Expected,
) -> Result<Option<Refusal>, TestCaseError> {
    let now_at = *now;
    let refusal = match op {
        Op::Advance(dt) => {
            *now += ms(dt);
            None
        }
        Op::Bid(w, body, pr) => match a.bid(p(w), b(body), Priority(pr), now_at) {
            Ok(g) => {
                expected.grants += 1;
                check_grant(config, &g, (w, body, pr), before, now_at)?;
                None
            }
            Err(r) => Some(r),
        },
        Op::Release(w, body) => a.release(p(w), b(body), now_at).err(),
        Op::ChangePriority(w, body, pr) => {
            a.change_priority(p(w), b(body), Priority(pr), now_at).err()
        }
        Op::Update(w, body) => a.owner_update(p(w), b(body), now_at).err(),
        Op::Expire => {
            a.expire(now_at);
            for r in a.records() {
                if r.owner.is_some() {
                    prop_assert!(
                        now_at.saturating_sub(r.last_update_from_owner)
                            < config.owner_silence_expiry
                    );
                }
            }
            None
        }
        Op::Disconnect(w) => {
            a.disconnect(p(w), now_at);
            prop_assert!(a.records().iter().all(|r| r.owner != Some(p(w))));
            None
        }
        Op::Lock(body, locked) => {
            let result = a.set_locked(b(body), locked);
            prop_assert_eq!(result.is_ok(), body < BODIES);
            None
        }
    };
    Ok(refusal)
}

/// Checks a grant to bid `(w, body, pr)` against the body's owner, priority and last change
/// before the bid.
fn check_grant(
    config: &OwnershipConfig,
    g: &Grant,
    (w, body, pr): (u16, u64, u8),
    before: &Before,
    now: Duration,
) -> Result<(), TestCaseError> {
    prop_assert_ne!(g.priority, config.volunteer_priority);
    let (old_owner, old_priority) = before.owners[body as usize];
    let asked = config.granted_priority(Priority(pr));
    if old_owner == Some(p(w)) {
        prop_assert_eq!(
            g.priority,
            asked.max(old_priority),
            "an owner's bid never lowers it"
        );
    } else {
        prop_assert_eq!(g.priority, asked);
    }
    if g.owner_changed() {
        // Rule 2 or 3: strictly higher, or equal past the lockout.
        let lockout_over = before.last_change[body as usize]
            .is_none_or(|at| now.saturating_sub(at) >= config.equal_priority_lockout);
        prop_assert!(Priority(pr) > old_priority || (Priority(pr) == old_priority && lockout_over));
    } else {
        prop_assert_eq!(old_owner, Some(p(w)));
    }
    Ok(())
}

/// Checks every record's owner and priority are consistent and in range, and the arbiter's
/// counters equal the expected ones.
fn check_records_and_counters(
    a: &OwnershipArbiter,
    config: &OwnershipConfig,
    expected: &Expected,
) -> Result<(), TestCaseError> {
    for r in a.records() {
        match r.owner {
            None => prop_assert_eq!(r.priority, Priority::NONE),
            Some(_) => {
                prop_assert!(r.kind.is_ownable(), "static/kinematic never owned");
                prop_assert!(
                    r.priority == config.yield_priority
                        || (r.priority >= config.recruit_priority
                            && r.priority <= config.max_bid_priority),
                    "owner priority {} out of range",
                    r.priority
                );
            }
        }
    }
    let stats = a.stats();
    prop_assert_eq!(stats.grants, expected.grants);
    prop_assert_eq!(stats.ownership_changes, expected.changes);
    for (i, reason) in RefusalReason::ALL.iter().enumerate() {
        prop_assert_eq!(
            a.refusals_by_reason().get(*reason),
            expected.refusals[i],
            "{:?}",
            reason
        );
    }
    prop_assert_eq!(
        a.refusals_by_reason().total(),
        expected.refusals.iter().sum::<u64>()
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_sequences_keep_invariants(ops in prop::collection::vec(op(), 1..200)) {
        let mut a = arbiter_with_bodies();
        let config = a.config().clone();
        let mut now = Duration::ZERO;
        let mut expected = Expected::default();

        for op in ops {
            let before = Before::of(&a);
            let refusal = apply_op(&mut a, &config, op, &mut now, &before, &mut expected)?;
            if let Some(r) = refusal {
                expected.refusals[RefusalReason::ALL.iter().position(|x| *x == r.reason).unwrap()] += 1;
                prop_assert_eq!(owners(&a), before.owners.clone(), "a refusal changes nothing");
            }
            let after = owners(&a);
            expected.changes += before.owners.iter().zip(&after).filter(|(x, y)| x.0 != y.0).count() as u64;
            check_records_and_counters(&a, &config, &expected)?;
        }
    }

    /// Participants wired to the server through random observations: nobody ever floods the
    /// server (at most one message per body per tick), and every body's owner is the same
    /// on the server and on every participant.
    #[test]
    fn participants_and_server_agree(
        steps in prop::collection::vec(
            prop::collection::vec((any::<bool>(), 0u8..8, any::<bool>()), 3 * 2),
            1..80,
        )
    ) {
        let mut s = Session::new(3, 2);
        let mut now = Duration::ZERO;
        for step in steps {
            now += ms(50);
            for c in 0..3u16 {
                let obs: Vec<BodyObservation> = (0..2u64)
                    .map(|body| {
                        let (active, event, interested) = step[usize::from(c) * 2 + body as usize];
                        BodyObservation {
                            active,
                            script_edited: event == 1,
                            touched_by_avatar: event == 2,
                            held: event == 3,
                            interested,
                            ..BodyObservation::at_rest(b(body))
                        }
                    })
                    .collect();
                let actions = s.clients[usize::from(c)].tick(now, obs);
                for body in 0..2u64 {
                    let sends = actions.iter().filter(|a| !matches!(a, simsync_ownership::Action::ZeroVelocity { .. } | simsync_ownership::Action::RefuseLocally { .. })
                        && action_body(a) == b(body)).count();
                    prop_assert!(sends <= 1, "client {} sent {} messages for body {}", c, sends, body);
                }
                s.deliver(c, &actions, now);
            }
            for (c, client) in s.clients.iter().enumerate() {
                for body in 0..2u64 {
                    prop_assert_eq!(client.owner(b(body)), s.server.owner(b(body)), "client {}", c);
                }
            }
        }
    }
}

fn action_body(a: &simsync_ownership::Action) -> simsync_ownership::BodyId {
    use simsync_ownership::Action::*;
    match *a {
        SendBid { body, .. }
        | SendPriorityChange { body, .. }
        | SendRelease { body }
        | ZeroVelocity { body }
        | RefuseLocally { body, .. } => body,
    }
}
