//! Players move props with the real `OwnershipPlugin` (`simsync::testing::HybridPeers`): each
//! client App runs the players' session and is an ownership participant whose props are Rapier
//! bodies of its own world, touched by the avatars' twins.

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync::deterministic::VerifiedTickHookAppExt;
use simsync::hybrid::{OwnedProp, PropGrabCommandsExt, VerifiedProps, hybrid_session};
use simsync::ownership::{
    BodyId, BodyNetId, Ownable, OwnershipEntityCommandsExt, ParticipantId, Priority,
};
use simsync::prelude::*;
use simsync::testing::HybridPeers;
use simsync_net::LinkConditionerConfig;

use super::arena::{Arena, Input, avatar_start, config};
use super::{Trace, trace};

const PROP: BodyId = BodyId(1);

/// `players` clients, each with the arena, a ground and one 0.3 m ball prop at `prop` in its
/// own world (slowed by `damping`, 1/s), the scripted `input`, and a [`Trace`] of the players'
/// verified states.
fn peers(
    players: u8,
    link: LinkConditionerConfig,
    (prop, damping): (Vec3, f32),
    input: fn(u8, i32) -> PackedInput,
) -> HybridPeers<PackedInput> {
    HybridPeers::builder(players, config(), move |_| {
        hybrid_session::<PackedInput, _>(Arena { players }, config())
    })
    .link(link)
    .seed(7)
    .scripted(input)
    .scene(move |app| {
        app.world_mut().spawn((
            RigidBody::Fixed,
            Collider::cuboid(40.0, 0.5, 40.0),
            Transform::from_xyz(0.0, -0.5, 0.0),
        ));
        app.world_mut().spawn((
            BodyNetId(PROP),
            Ownable,
            OwnedProp { kind: 0 },
            RigidBody::Dynamic,
            Collider::ball(0.3),
            Damping {
                linear_damping: damping,
                angular_damping: damping,
            },
            Transform::from_translation(prop),
            Velocity::zero(),
        ));
    })
    .customize(|_, app| {
        app.add_verified_tick_hook::<Input>(Trace::default())
            .expect("session plugin added");
    })
    .build()
    .expect("harness")
}

fn idle(_player: u8, _tick: i32) -> PackedInput {
    PackedInput::default()
}

/// Steps until the entity server shows `PROP` unowned after an owner other than `not` held
/// it, at most `limit` frames; every owner seen, in order.
fn run_until_released(
    peers: &mut HybridPeers<PackedInput>,
    not: Option<ParticipantId>,
    limit: u32,
) -> Vec<ParticipantId> {
    let mut owners: Vec<ParticipantId> = Vec::new();
    for _ in 0..limit {
        peers.run_frames(1).expect("frame");
        match peers.server_owner(PROP) {
            Some((owner, _)) if owners.last() != Some(&owner) => owners.push(owner),
            None if owners.iter().any(|o| Some(*o) != not) => return owners,
            _ => {}
        }
    }
    panic!("prop not released within {limit} frames; owners {owners:?}");
}

/// Every running client's count of carried poses its verified ticks applied.
fn carried(peers: &HybridPeers<PackedInput>, clients: &[usize]) -> Vec<u64> {
    clients
        .iter()
        .map(|&c| {
            let app = peers.client(c).expect("client");
            app.world().resource::<VerifiedProps>().carried
        })
        .collect()
}

#[test]
fn a_prop_pushed_by_a_players_avatar_moves_on_every_peer() {
    // Player 0 rolls its avatar into a prop 0.4 m beside it, then brakes.
    fn push(player: u8, tick: i32) -> PackedInput {
        let mut input = PackedInput::default();
        let z = match tick {
            _ if player != 0 => 0.0,
            0..40 => 1.0,
            40..80 => -1.0,
            _ => 0.0,
        };
        input.set_axis(1, z).expect("slot");
        input
    }
    let start = avatar_start(0) + Vec3::new(0.0, -0.3, 1.3);
    let link = LinkConditionerConfig::PERFECT.with_latency(30, 5);
    let mut peers = peers(2, link, (start, 3.0), push);
    let a = peers.participant_id(0).expect("joined");
    let owners = run_until_released(&mut peers, None, 900);
    assert_eq!(
        owners,
        vec![a],
        "player 0's participant bid, owned and released it"
    );
    peers.run_frames(8).expect("frames");
    let converged = peers
        .prop_convergence(0.01)
        .expect("copies within 1 cm at rest");
    let mut moved = Vec::new();
    for client in 0..2 {
        let at = peers.prop_position(client, PROP).expect("prop");
        assert!(
            (at - start).length() > 0.3,
            "client {client}: the prop moved from {start} to {at}"
        );
        moved.push((at - start).length());
    }
    let carried = carried(&peers, &[0, 1]);
    assert!(
        carried.iter().all(|&c| c > 0),
        "the owner's inputs carried the prop to both players' worlds: {carried:?}"
    );
    // Only the owner sent the prop's states; the other client received them.
    let stats = |c: usize| *peers.ownership_client(c).expect("participant").stats();
    let (owner, other) = (stats(0), stats(1));
    assert!(owner.state_updates_sent > 0, "{owner:?}");
    assert_eq!(
        other.state_updates_sent, 0,
        "the other client never owned the prop"
    );
    assert!(other.state_batches_received > 0, "{other:?}");
    let per_update = owner.state_update_bytes as f64 / owner.state_updates_sent as f64;
    let agreement = peers.assert_all_agree();
    assert!(agreement.ticks_compared >= 100, "{agreement:?}");
    eprintln!(
        "pushed {moved:?} m: {} verified ticks compared, copies {:?} apart at rest, poses carried by \
         verified ticks {carried:?}, {} prop states sent by the owner, {per_update:.1} B each",
        agreement.ticks_compared, converged.widest, owner.state_updates_sent
    );
}

#[test]
fn a_thrown_prop_hits_another_players_avatar_alike_on_every_peer() {
    // Player 0's client grabs the prop beside its avatar, holds it up, throws it at player 1.
    let start = avatar_start(0) + Vec3::new(1.0, -0.3, 0.0);
    let link = LinkConditionerConfig::PERFECT.with_latency(40, 5);
    let mut peers = peers(2, link, (start, 1.0), idle);
    let a = peers.participant_id(0).expect("joined");
    peers.run_frames(20).expect("frames");
    peers
        .command(0, PROP, |prop| {
            prop.grab_prop(0, Vec3::new(1.0, 0.5, 0.0));
        })
        .expect("grab");
    peers.run_frames(40).expect("frames");
    assert_eq!(peers.server_owner(PROP), Some((a, Priority::GRAB)));
    let held = peers.prop_position(0, PROP).expect("prop");
    let hold = avatar_start(0) + Vec3::new(1.0, 0.5, 0.0);
    assert!(held.distance(hold) < 0.05, "held at {held}, not {hold}");
    peers
        .command(0, PROP, |prop| {
            prop.throw_prop(Vec3::new(10.0, 1.0, 0.0));
        })
        .expect("throw");
    let thrown_at = peers.players().verified_ticks()[0].expect("running");
    let end = thrown_at + 100;
    peers.run_until_verified(end).expect("run");
    let agreement = peers.assert_all_agree();
    let b_start = avatar_start(1);
    let first = trace(peers.players(), 0);
    let hit = first
        .verified
        .iter()
        .find(|(_, p)| (p[1] - b_start).length() > 0.01)
        .map(|(t, _)| *t)
        .expect("the prop hit player 1's avatar");
    let after = first.at(end);
    assert!(
        after[1].x - b_start.x > 0.1,
        "player 1's avatar was pushed along the throw: {after:?}"
    );
    for client in 0..2 {
        let trace = trace(peers.players(), client);
        assert_eq!(trace.at(hit), first.at(hit), "client {client} at the hit");
        assert_eq!(trace.at(end), after, "client {client} at {end}");
    }
    let rolled_across = trace(peers.players(), 1)
        .rollbacks
        .iter()
        .any(|&(to, predicted)| to < hit && predicted >= hit);
    assert!(
        rolled_across,
        "client 1 rolled back across the hit at {hit}"
    );
    eprintln!(
        "thrown at verified tick {thrown_at}, hit at {hit}; player 1 moved {:.3} m; {} ticks \
         compared",
        (after[1] - b_start).length(),
        agreement.ticks_compared
    );
}

#[test]
fn a_prop_whose_owner_leaves_mid_flight_lands_alike_on_every_remaining_peer() {
    let start = avatar_start(0) + Vec3::new(0.0, -0.3, 2.0);
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 3);
    let mut peers = peers(3, link, (start, 3.0), idle);
    let a = peers.participant_id(0).expect("joined");
    peers
        .command(0, PROP, |prop| {
            prop.insert(Velocity::linear(Vec3::new(0.0, 3.0, 5.0)))
                .poke();
        })
        .expect("throw");
    // Mid-flight, owned by player 0's participant: it leaves.
    let mut frames = 0;
    while peers.server_owner(PROP).map(|(o, _)| o) != Some(a) {
        peers.run_frames(1).expect("frame");
        frames += 1;
        assert!(frames < 64, "player 0's participant never owned the prop");
    }
    peers.run_frames(10).expect("frames");
    let left_at = peers.prop_position(1, PROP).expect("prop");
    assert!((left_at - start).length() > 0.3, "in flight: {left_at}");
    let killed_at = peers.players().verified_ticks()[1].expect("running");
    peers.kill(0).expect("kill");
    let owners = run_until_released(&mut peers, Some(a), 1200);
    let (b, c) = (peers.participant_id(1), peers.participant_id(2));
    assert!(
        owners.iter().any(|o| Some(*o) == b || Some(*o) == c),
        "a remaining participant took the prop over: {owners:?}"
    );
    peers.run_frames(8).expect("frames");
    let converged = peers
        .prop_convergence(0.01)
        .expect("the remaining copies within 1 cm");
    assert_eq!(converged.participants, 2);
    let landed = peers.prop_position(1, PROP).expect("prop");
    assert!((landed - left_at).length() > 0.1, "{left_at} -> {landed}");
    peers.run_until_verified(killed_at + 200).expect("run");
    let agreement = peers.assert_all_agree();
    assert!(agreement.ticks_compared >= 200, "{agreement:?}");
    eprintln!(
        "owner left at verified tick {killed_at}; owners {owners:?}; copies {:?} apart; {} \
         ticks compared",
        converged.widest, agreement.ticks_compared
    );
}
