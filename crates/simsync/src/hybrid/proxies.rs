//! The prop proxies of the players' worlds: a fixed pool of kinematic colliders that stand for
//! the props carried in the inputs ([the rule](super#the-rule)). [`PropProxy`] is one slot's
//! state, [`advance_proxies`] the pure rule that moves the pool one tick on.

use bevy::prelude::*;
use serde::{Deserialize, Serialize};
use simsync_deterministic::{SimHash, StateHasher, Tick};

use super::pose::{CarriedPose, is_fresh, rotation_of};

/// Micrometres per millimetre: a proxy's position is kept in µm so that moving it by a
/// velocity in mm/s for one tick loses at most 1 µm to the integer division.
const UM_PER_MM: i64 = 1000;

/// One proxy slot of the players' worlds (a rollback component, hashed): which prop it stands
/// for (`None`: parked, far from everything), its shape kind, position in µm, rotation,
/// velocity in mm/s and the last tick a carried pose set it. Integers only.
#[derive(Component, Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PropProxy {
    /// The slot index, `0..slots`.
    pub slot: u16,
    /// The prop this slot stands for, if any.
    pub prop: Option<u64>,
    /// Its shape kind.
    pub kind: u8,
    /// Position, micrometres.
    pub pos_um: [i64; 3],
    /// Rotation, as carried.
    pub rot: [i16; 4],
    /// Linear velocity, mm/s.
    pub vel_mm_s: [i32; 3],
    /// The last tick a carried pose set this slot.
    pub seen: Tick,
}

impl SimHash for PropProxy {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.slot.sim_hash(hasher);
        self.prop.unwrap_or(u64::MAX).sim_hash(hasher);
        self.prop.is_some().sim_hash(hasher);
        self.kind.sim_hash(hasher);
        for c in self.pos_um {
            c.sim_hash(hasher);
        }
        for c in self.rot {
            c.sim_hash(hasher);
        }
        for c in self.vel_mm_s {
            c.sim_hash(hasher);
        }
        self.seen.sim_hash(hasher);
    }
}

impl PropProxy {
    /// A parked slot.
    pub fn parked(slot: u16) -> Self {
        Self { slot, ..default() }
    }

    /// The prop's pose, or, parked, [`parked_transform`](Self::parked_transform).
    pub fn transform(&self) -> Transform {
        if self.prop.is_none() {
            return Self::parked_transform(self.slot);
        }
        Transform::from_translation(self.position()).with_rotation(rotation_of(self.rot))
    }

    /// Where slot `slot`'s collider waits while it stands for no prop or its prop is out of
    /// every body's reach: 1 km below the origin, 10 m apart from the other slots' spots
    /// (touching nothing).
    pub fn parked_transform(slot: u16) -> Transform {
        Transform::from_xyz(f32::from(slot) * 10.0, -1000.0, 0.0)
    }

    /// The prop's position, metres (the origin for a slot standing for none).
    pub fn position(&self) -> Vec3 {
        let [x, y, z] = self.pos_um.map(|c| (c as f64 / 1.0e6) as f32);
        Vec3::new(x, y, z)
    }
}

/// A body of the players' worlds a proxy may touch: its position and the radius of a sphere
/// around that position holding its collider (metres).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReachBody {
    /// The body's position, metres.
    pub center: Vec3,
    /// The radius of its bounding sphere around `center`, metres.
    pub radius: f32,
}

/// Whether a proxy at `center` with a bounding sphere of `radius` is within `reach` metres of
/// one of `bodies`: the gap between the two bounding spheres is at most `reach`
/// ([the rule](super#the-rule)). An infinite `reach` takes every proxy; a NaN
/// one none.
pub fn within_reach(center: Vec3, radius: f32, bodies: &[ReachBody], reach: f32) -> bool {
    bodies.iter().any(|body| {
        let limit = radius + body.radius + reach;
        limit == f32::INFINITY || center.distance_squared(body.center) <= limit * limit
    })
}

/// Where a proxy's collider goes this tick and whether it touches anything
/// ([the rule](super#the-rule)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    /// The collider's transform.
    pub transform: Transform,
    /// It collides (default collision groups) rather than touching nothing.
    pub solid: bool,
}

/// Places slot `state` for this tick: a slot standing for a prop within reach of a body
/// (`near`) is at the prop's pose, else at its parked spot; it is solid only when it is near
/// and was already at the same prop's pose before this tick (`was_placed`), since a collider
/// that jumps there this tick (from its parked spot, or from another prop) would hit with the
/// jump's velocity.
pub fn place(state: &PropProxy, near: bool, was_placed: bool) -> Placement {
    let near = near && state.prop.is_some();
    Placement {
        transform: if near {
            state.transform()
        } else {
            PropProxy::parked_transform(state.slot)
        },
        solid: near && was_placed,
    }
}

/// What one [`advance_proxies`] step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyStep {
    /// Carried poses applied.
    pub applied: u32,
    /// Carried poses dropped because every slot already took a pose this tick.
    pub no_slot: u32,
    /// Carried poses ignored as stale (stamped more than `max_stale` ticks before the tick) or
    /// from the future.
    pub stale: u32,
}

/// Moves the pool on to `tick` ([the rule](super#the-rule)), at `hz` ticks per second:
///
/// 1. every slot standing for a prop moves by its velocity for one tick;
/// 2. each carried pose (already resolved, [`carried_poses`](super::carried_poses)) stamped
///    `s` with `tick - max_stale <= s <= tick` sets its prop's slot to the pose moved on by its
///    velocity for `tick - s` ticks (0 for a confirmed input of this tick); the slot is the
///    one standing for the prop, else the lowest parked slot, else the slot seen longest ago
///    (lowest index on a tie) that no pose set this tick.
///
/// `slots` must be in slot order. Integer arithmetic only: the same inputs give the same pool
/// on every peer.
pub fn advance_proxies(
    slots: &mut [PropProxy],
    carried: &[CarriedPose],
    tick: Tick,
    hz: u32,
    max_stale: Tick,
) -> ProxyStep {
    let hz = i64::from(hz.max(1));
    for slot in slots.iter_mut().filter(|s| s.prop.is_some()) {
        for (p, v) in slot.pos_um.iter_mut().zip(slot.vel_mm_s) {
            *p = p.saturating_add(i64::from(v) * UM_PER_MM / hz);
        }
    }
    let mut step = ProxyStep::default();
    let mut set_now: Vec<usize> = Vec::new();
    for c in carried {
        let age = tick.saturating_sub(c.stamp);
        if !is_fresh(age, max_stale) {
            step.stale += 1;
            continue;
        }
        let Some(index) = slot_for(slots, c.pose.id, &set_now) else {
            step.no_slot += 1;
            continue;
        };
        let slot = &mut slots[index];
        slot.prop = Some(c.pose.id);
        slot.kind = c.pose.kind;
        slot.rot = c.pose.rot;
        slot.vel_mm_s = c.pose.vel_mm_s;
        for axis in 0..3 {
            let v = i64::from(c.pose.vel_mm_s[axis]);
            let moved = (v * UM_PER_MM).saturating_mul(i64::from(age)) / hz;
            slot.pos_um[axis] = (i64::from(c.pose.pos_mm[axis]) * UM_PER_MM).saturating_add(moved);
        }
        slot.seen = tick;
        set_now.push(index);
        step.applied += 1;
    }
    step
}

/// The slot a pose of `prop` goes to (see [`advance_proxies`]).
fn slot_for(slots: &[PropProxy], prop: u64, set_now: &[usize]) -> Option<usize> {
    if let Some(i) = slots.iter().position(|s| s.prop == Some(prop)) {
        return Some(i);
    }
    if let Some(i) = slots.iter().position(|s| s.prop.is_none()) {
        return Some(i);
    }
    slots
        .iter()
        .enumerate()
        .filter(|(i, _)| !set_now.contains(i))
        .min_by_key(|(_, s)| s.seen)
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hybrid::pose::{PropPose, PropPoses, carried_poses};

    fn carried(id: u64, stamp: Tick, x_mm: i32, vx: i32) -> CarriedPose {
        CarriedPose {
            player: 0,
            stamp,
            pose: PropPose {
                id,
                kind: 1,
                pos_mm: [x_mm, 500, 0],
                rot: [0, 0, 0, 32767],
                vel_mm_s: [vx, 0, 0],
            },
        }
    }

    fn pool(n: u16) -> Vec<PropProxy> {
        (0..n).map(PropProxy::parked).collect()
    }

    #[test]
    fn a_pose_is_fresh_from_its_own_tick_to_max_stale_ticks_later() {
        assert!(is_fresh(0, 32));
        assert!(is_fresh(32, 32));
        assert!(!is_fresh(33, 32));
        assert!(!is_fresh(-1, 32));
    }

    #[test]
    fn a_pose_of_this_tick_is_taken_as_is() {
        let mut slots = pool(2);
        let step = advance_proxies(&mut slots, &[carried(7, 10, 1500, 0)], 10, 64, 32);
        assert_eq!(step.applied, 1);
        assert_eq!(slots[0].prop, Some(7));
        assert_eq!(slots[0].pos_um, [1_500_000, 500_000, 0]);
        assert_eq!(slots[0].transform().translation, Vec3::new(1.5, 0.5, 0.0));
        assert_eq!(slots[1].prop, None);
    }

    #[test]
    fn an_uncarried_prop_moves_on_by_its_velocity() {
        let mut slots = pool(1);
        advance_proxies(&mut slots, &[carried(7, 10, 0, 6400)], 10, 64, 32);
        for tick in 11..=14 {
            advance_proxies(&mut slots, &[], tick, 64, 32);
        }
        // 6.4 m/s for 4 ticks at 64 Hz: 0.4 m.
        assert_eq!(slots[0].pos_um[0], 400_000);
        assert_eq!(slots[0].seen, 10);
    }

    #[test]
    fn a_stale_pose_is_moved_on_from_its_stamp_and_a_too_old_one_ignored() {
        let mut slots = pool(1);
        let step = advance_proxies(&mut slots, &[carried(7, 8, 0, 6400)], 10, 64, 32);
        assert_eq!((step.applied, slots[0].pos_um[0]), (1, 200_000));
        let old = advance_proxies(&mut slots, &[carried(7, 1, 0, 0)], 50, 64, 32);
        let future = advance_proxies(&mut slots, &[carried(7, 60, 0, 0)], 51, 64, 32);
        assert_eq!((old.stale, future.stale), (1, 1));
    }

    #[test]
    fn a_full_pool_evicts_the_slot_seen_longest_ago() {
        let mut slots = pool(2);
        advance_proxies(&mut slots, &[carried(1, 5, 0, 0)], 5, 64, 32);
        advance_proxies(&mut slots, &[carried(2, 6, 0, 0)], 6, 64, 32);
        advance_proxies(&mut slots, &[carried(3, 7, 0, 0)], 7, 64, 32);
        let props: Vec<_> = slots.iter().map(|s| s.prop).collect();
        assert_eq!(props, vec![Some(3), Some(2)]);
        // Three new props in one tick for two slots: the third has none left.
        let step = advance_proxies(
            &mut slots,
            &[
                carried(4, 8, 0, 0),
                carried(5, 8, 0, 0),
                carried(6, 8, 0, 0),
            ],
            8,
            64,
            32,
        );
        assert_eq!((step.applied, step.no_slot), (2, 1));
    }

    fn body(x: f32, radius: f32) -> ReachBody {
        ReachBody {
            center: Vec3::new(x, 0.0, 0.0),
            radius,
        }
    }

    #[test]
    fn reach_is_the_gap_between_the_bounding_spheres() {
        let bodies = [body(10.0, 0.5), body(0.0, 0.6)];
        // 0.25 + 0.6 + 1.0 = 1.85 m from the second body's center.
        assert!(within_reach(Vec3::new(1.85, 0.0, 0.0), 0.25, &bodies, 1.0));
        assert!(!within_reach(Vec3::new(1.86, 0.0, 0.0), 0.25, &bodies, 1.0));
        assert!(within_reach(Vec3::new(8.5, 0.0, 0.0), 0.25, &bodies, 1.0));
        assert!(!within_reach(
            Vec3::new(5.0, 0.0, 0.0),
            0.25,
            &[],
            f32::INFINITY
        ));
        assert!(within_reach(Vec3::splat(1e9), 0.25, &bodies, f32::INFINITY));
        assert!(!within_reach(Vec3::ZERO, 0.25, &bodies, f32::NAN));
    }

    #[test]
    fn a_proxy_out_of_reach_waits_parked_and_touches_nothing() {
        let mut slots = pool(1);
        advance_proxies(&mut slots, &[carried(7, 10, 1500, 0)], 10, 64, 32);
        let far = place(&slots[0], false, true);
        assert_eq!(far.transform, PropProxy::parked_transform(0));
        assert!(!far.solid);
        let parked = place(&PropProxy::parked(0), true, true);
        assert_eq!((parked.transform, parked.solid), (far.transform, false));
    }

    #[test]
    fn a_proxy_in_reach_is_solid_from_its_second_tick_at_the_pose() {
        let mut slots = pool(1);
        advance_proxies(&mut slots, &[carried(7, 10, 1500, 0)], 10, 64, 32);
        let arriving = place(&slots[0], true, false);
        assert_eq!(arriving.transform.translation, Vec3::new(1.5, 0.5, 0.0));
        assert!(!arriving.solid);
        let staying = place(&slots[0], true, true);
        assert_eq!(staying.transform, arriving.transform);
        assert!(staying.solid);
    }

    #[test]
    fn a_parked_slot_touches_nothing_near_the_origin() {
        let t = PropProxy::parked(3).transform();
        assert_eq!(t.translation, Vec3::new(30.0, -1000.0, 0.0));
    }

    #[test]
    fn extreme_values_saturate_instead_of_overflowing() {
        // A hostile pose: the fastest velocity, stamped as long ago as a huge `max_stale`
        // allows, then moved on for ticks; and a stamp no tick can subtract.
        let mut slots = pool(2);
        let fast = CarriedPose {
            pose: PropPose {
                vel_mm_s: [i32::MAX, i32::MIN, 0],
                ..carried(1, 0, 0, 0).pose
            },
            ..carried(1, 0, 0, 0)
        };
        let step = advance_proxies(&mut slots, &[fast], Tick::MAX, 1, Tick::MAX);
        assert_eq!(step.applied, 1);
        assert_eq!(slots[0].pos_um[..2], [i64::MAX, i64::MIN + 500_000]);
        advance_proxies(&mut slots, &[], Tick::MAX, 1, Tick::MAX);
        assert_eq!(slots[0].pos_um[0], i64::MAX);
        let oldest = carried(2, Tick::MIN, 0, 0);
        let step = advance_proxies(&mut slots, &[oldest], 100, 64, 32);
        assert_eq!((step.applied, step.stale), (0, 1));
        assert!(slots[0].transform().translation.is_finite());
    }

    #[test]
    fn a_player_flooding_the_pool_leaves_the_others_their_share() {
        // Player 0 carries 20 new props a tick, player 1 its 4; a pool of 8 proxies: the poses
        // are taken in turns, so player 1's 4 all find a proxy.
        let poses = |ids: std::ops::Range<u64>| {
            let poses = ids.map(|id| carried(id, 9, 0, 0).pose).collect();
            PropPoses::new(9, poses, 32).unwrap()
        };
        let (flood, honest) = (poses(100..120), poses(1..5));
        let resolved = carried_poses(9, 32, [(0, &flood), (1, &honest)]);
        let mut slots = pool(8);
        let step = advance_proxies(&mut slots, &resolved.poses, 9, 64, 32);
        assert_eq!((step.applied, step.no_slot), (8, 16));
        let mut held: Vec<_> = slots
            .iter()
            .filter_map(|s| s.prop)
            .filter(|&p| p < 100)
            .collect();
        held.sort_unstable();
        assert_eq!(held, vec![1, 2, 3, 4]);
    }
}
