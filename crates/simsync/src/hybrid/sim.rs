//! The players' worlds' side of a hybrid session: [`HybridGame`] wraps the game's plugin with
//! the proxy pool and the system that applies the carried props before each tick.

use std::marker::PhantomData;

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use serde::{Deserialize, Serialize};
use simsync_deterministic::prelude::*;
use simsync_deterministic::{SimHash, StateHasher};

use super::HybridConfig;
use super::pose::{HybridInput, carried_poses};
use super::proxies::{PropProxy, ReachBody, advance_proxies, place, within_reach};

/// Marks a player body in the simulation worlds: rolled back, hashed, part of every snapshot
/// (spawn it with `SimCommands` like any simulation entity). The other side of the split is
/// [`OwnedProp`](super::OwnedProp), a body of the App's own world under simulation ownership.
/// A player body that is a player's avatar, and so moves props, also carries
/// [`AvatarOf`](super::AvatarOf).
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackBody;

impl SimHash for RollbackBody {
    fn sim_hash(&self, _hasher: &mut StateHasher) {}
}

/// The sets of the hybrid session in `SimulationTick`.
#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
pub enum HybridSimSet {
    /// The carried props are applied to the proxies (in [`SimulationSet::Prepare`], so before
    /// every game system and physics).
    ApplyProps,
}

/// The game's plugin wrapped for a hybrid session: builds `game` and adds the proxy pool
/// (`config.proxy_slots` kinematic colliders, [`PropProxy`] each, spawned at the setup tick)
/// and the system that moves it on each tick from the tick's inputs
/// ([the rule](super#the-rule)). Made by [`hybrid_session`](super::hybrid_session).
#[derive(Clone)]
pub struct HybridGame<G, I> {
    pub(crate) game: G,
    pub(crate) config: HybridConfig,
    pub(crate) input: PhantomData<fn() -> I>,
}

impl<G: Plugin + Clone, I: SimInput> Plugin for HybridGame<G, I> {
    fn build(&self, app: &mut App) {
        app.insert_resource(self.config.clone())
            .rollback_hashed_component_serde::<PropProxy>()
            .rollback_hashed_component_serde::<RollbackBody>()
            .rollback_hashed_component_serde::<super::AvatarOf>()
            .configure_sets(
                SimulationTick,
                HybridSimSet::ApplyProps.in_set(SimulationSet::Prepare),
            )
            .add_systems(SimulationStartup, spawn_proxies)
            .add_systems(
                SimulationTick,
                apply_carried_props::<I>.in_set(HybridSimSet::ApplyProps),
            );
        self.game.build(app);
    }
}

fn spawn_proxies(mut sim: SimCommands, config: Res<HybridConfig>) {
    for slot in 0..config.proxy_slots {
        let proxy = PropProxy::parked(slot);
        let spawned = sim.spawn((
            RigidBody::KinematicPositionBased,
            config.shape(0),
            proxy.transform(),
            SOLID_NOT,
            SoftCcd {
                prediction: PROXY_CONTACT_LOOKAHEAD_M,
            },
            proxy,
        ));
        if let Err(error) = spawned {
            // The capacity of simulation entities is the game's: the session reports it too.
            error!("hybrid session: proxy slot {slot} not spawned: {error}");
            return;
        }
    }
}

/// How far along its move (metres) a proxy's contacts are looked for before it moves (Rapier's
/// soft CCD): a proxy that reaches a player within one tick pushes it with its velocity that
/// tick, as a prop moving into the player would, instead of only pushing out of an overlap
/// afterwards. 0.5 m covers a prop at 32 m/s at 64 Hz.
const PROXY_CONTACT_LOOKAHEAD_M: f32 = 0.5;

/// The components of a proxy the pool writes.
type ProxyParts<'a> = (
    Entity,
    &'a mut PropProxy,
    &'a mut Transform,
    &'a mut CollisionGroups,
    &'a mut Collider,
);

/// The collision groups of a parked proxy, and of one on the tick it takes a prop: it touches
/// nothing.
const SOLID_NOT: CollisionGroups = CollisionGroups::new(Group::NONE, Group::NONE);

/// Moves the proxy pool on to the tick being simulated ([`advance_proxies`] on the tick's
/// carried poses) and writes each slot's pose and, on a new kind, shape, where [`place`] puts
/// it: at its prop's pose within [`HybridConfig::reach`] of a dynamic body of the players'
/// world, else at its parked spot. The proxies are position-based kinematic bodies (Rapier
/// gives them the velocity of their move, which is what a player touching one feels); a
/// proxy out of reach, or arriving at its prop's pose this tick (a jump Rapier would read as a
/// huge velocity), touches nothing for that tick. A component is written only when its value
/// changes, so a proxy out of reach, or at rest, costs Rapier nothing.
fn apply_carried_props<I: SimInput>(
    inputs: Res<PlayerInputs<HybridInput<I>>>,
    config: Res<HybridConfig>,
    bodies: Query<(&RigidBody, &Transform, Option<&Collider>), Without<PropProxy>>,
    mut proxies: Query<ProxyParts>,
) {
    let mut slots: Vec<(Entity, PropProxy)> = proxies
        .iter()
        .map(|(entity, proxy, ..)| (entity, proxy.clone()))
        .collect();
    slots.sort_by_key(|(_, proxy)| proxy.slot);
    let (entities, mut states): (Vec<Entity>, Vec<PropProxy>) = slots.into_iter().unzip();
    let props = inputs.iter().map(|(p, input)| (p, &input.props));
    let carried = carried_poses(inputs.tick(), config.max_stale_ticks, props);
    advance_proxies(
        &mut states,
        &carried.poses,
        inputs.tick(),
        config.tick_hz,
        config.max_stale_ticks,
    );
    let reach_bodies = dynamic_bodies(&bodies);
    for (entity, state) in entities.into_iter().zip(states) {
        let Ok((_, mut proxy, mut transform, mut groups, mut collider)) = proxies.get_mut(entity)
        else {
            continue;
        };
        let radius = bounding_radius(&config.shape(state.kind));
        let near = within_reach(state.position(), radius, &reach_bodies, config.reach);
        let was_placed =
            proxy.prop == state.prop && *transform != PropProxy::parked_transform(state.slot);
        let placement = place(&state, near, was_placed);
        if *transform != placement.transform {
            *transform = placement.transform;
        }
        let wanted = if placement.solid {
            CollisionGroups::default()
        } else {
            SOLID_NOT
        };
        if *groups != wanted {
            *groups = wanted;
        }
        if *proxy == state {
            continue;
        }
        if proxy.kind != state.kind {
            *collider = config.shape(state.kind);
        }
        *proxy = state;
    }
}

/// The dynamic bodies of the players' world (not the proxies) as reach bodies: each one's
/// `Transform` translation and the bounding radius of the collider on its entity (0 without).
fn dynamic_bodies(
    bodies: &Query<(&RigidBody, &Transform, Option<&Collider>), Without<PropProxy>>,
) -> Vec<ReachBody> {
    bodies
        .iter()
        .filter(|(body, ..)| matches!(body, RigidBody::Dynamic))
        .map(|(_, transform, collider)| ReachBody {
            center: transform.translation,
            radius: collider.map_or(0.0, bounding_radius),
        })
        .collect()
}

/// The radius of a sphere around a collider's origin that holds it, metres.
fn bounding_radius(collider: &Collider) -> f32 {
    let sphere = collider.raw.compute_local_bounding_sphere();
    sphere.center().length() + sphere.radius()
}
