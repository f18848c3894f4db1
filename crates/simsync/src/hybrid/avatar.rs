//! Players move props: each player's avatar as a kinematic collider in the App's own world (the
//! props' world, under simulation ownership), following the avatar's **predicted** pose
//! ([`AvatarOf`], [`AvatarCollider`], [`PlayerAvatarsPlugin`]), and props held and thrown by a
//! player ([`HeldProp`], [`PropGrabCommandsExt`]). See [the rule](super#players-move-props).

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use serde::{Deserialize, Serialize};
use simsync_deterministic::{
    DeterministicSet, LocalPlayers, PlayerIndex, SimHash, SimulationWorlds, StateHasher,
};
use simsync_ownership::{Held, ParticipantAvatar, Uninterested};

use super::pose::HybridError;
use super::source::{HybridStats, OwnedProp};
use super::{HybridConfig, HybridRefused};

/// Marks a player body of the simulation worlds (a [`RollbackBody`](super::RollbackBody)) as
/// player `.0`'s avatar: [`PlayerAvatarsPlugin`] gives it a kinematic twin in the App's world
/// ([`AvatarCollider`]) with the body's `Collider`, at its predicted pose. A rollback
/// component, hashed: spawn it with the body, at most one per player (a second one of the same
/// player is ignored: no twin, and counted in [`HybridStats::extra_avatars`]).
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AvatarOf(pub PlayerIndex);

impl SimHash for AvatarOf {
    fn sim_hash(&self, hasher: &mut StateHasher) {
        self.0.sim_hash(hasher);
    }
}

/// The App-world twin of player `player`'s avatar: a `KinematicPositionBased` collider moved
/// to the avatar's predicted pose every frame (spawned, and despawned, by
/// [`PlayerAvatarsPlugin`]). The twin of a player local to this App also carries
/// [`ParticipantAvatar`], so a prop it sets moving is bid for ([ownership rule
/// 9](crate::ownership::rules)).
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Reflect)]
#[reflect(Component)]
pub struct AvatarCollider {
    /// The player.
    pub player: PlayerIndex,
}

/// A prop held by player `player`'s avatar (App world, on the prop): the prop is grabbed
/// through ownership (`Held`, a GRAB bid, [ownership rule 10](crate::ownership::rules)) and
/// kept at `offset` metres from the avatar's predicted position: each frame its velocity is
/// set to reach that point in one tick ([`hold_velocity`]). Inserted by
/// [`PropGrabCommandsExt::grab_prop`], removed by [`PropGrabCommandsExt::throw_prop`]. Give
/// it for a player local to this App (a participant bids for its own players only). A hold
/// whose point is not finite is let go (`HeldProp` and `Held` removed) and refused
/// ([`HybridError::NotFinite`], counted in [`HybridStats::grabs_refused`]).
#[derive(Component, Debug, Clone, Copy, PartialEq, Reflect)]
#[reflect(Component)]
pub struct HeldProp {
    /// The player holding it.
    pub player: PlayerIndex,
    /// Where it is held, metres from the avatar's position (world axes).
    pub offset: Vec3,
}

/// Grabbing and throwing props (on a prop's `EntityCommands`, in the App's world). Each is
/// checked when the commands are applied; a refused one changes nothing, is counted in
/// [`HybridStats::grabs_refused`] and written as a [`HybridRefused`] message (never a panic,
/// whatever the entity).
pub trait PropGrabCommandsExt {
    /// Player `player` holds the prop at `offset` metres from its avatar ([`HeldProp`]) and
    /// grabs it through ownership (GRAB bid). Grabbing again for the same player moves the
    /// holding point.
    ///
    /// # Errors (as a [`HybridRefused`])
    /// [`HybridError::NotFinite`] for an offset that is not finite,
    /// [`HybridError::NoSuchEntity`], [`HybridError::NotAProp`] for an entity without
    /// [`OwnedProp`], [`HybridError::NotLocalPlayer`] for a player not in this App's
    /// `LocalPlayers`, [`HybridError::HeldByOther`] for a prop another player holds.
    fn grab_prop(&mut self, player: PlayerIndex, offset: Vec3) -> &mut Self;
    /// Lets go of the prop at `velocity` (m/s, no spin): the ownership grab ends, the owner
    /// keeps the prop until it comes to rest and releases it ([ownership rule
    /// 12](crate::ownership::rules)).
    ///
    /// # Errors (as a [`HybridRefused`])
    /// [`HybridError::NotFinite`] for a velocity that is not finite,
    /// [`HybridError::NoSuchEntity`], [`HybridError::NotAProp`], [`HybridError::NotHeld`] for a
    /// prop no player holds.
    fn throw_prop(&mut self, velocity: Vec3) -> &mut Self;
}

impl PropGrabCommandsExt for EntityCommands<'_> {
    fn grab_prop(&mut self, player: PlayerIndex, offset: Vec3) -> &mut Self {
        let entity = self.id();
        self.commands().queue(move |world: &mut World| {
            let grabbed = grab(world, entity, player, offset);
            refuse_on_error(world, entity, grabbed);
        });
        self
    }

    fn throw_prop(&mut self, velocity: Vec3) -> &mut Self {
        let entity = self.id();
        self.commands().queue(move |world: &mut World| {
            let thrown = throw(world, entity, velocity);
            refuse_on_error(world, entity, thrown);
        });
        self
    }
}

/// The prop `entity` of `world`, checked for a grab or throw.
fn prop_mut(world: &mut World, entity: Entity) -> Result<EntityWorldMut<'_>, HybridError> {
    let prop = world
        .get_entity_mut(entity)
        .map_err(|_| HybridError::NoSuchEntity { entity })?;
    if !prop.contains::<OwnedProp>() {
        return Err(HybridError::NotAProp { entity });
    }
    Ok(prop)
}

fn grab(
    world: &mut World,
    entity: Entity,
    player: PlayerIndex,
    offset: Vec3,
) -> Result<(), HybridError> {
    if !offset.is_finite() {
        return Err(HybridError::NotFinite {
            what: "offset",
            value: offset,
        });
    }
    let local = world
        .get_resource::<LocalPlayers>()
        .is_none_or(|l| l.contains(player));
    let mut prop = prop_mut(world, entity)?;
    if !local {
        return Err(HybridError::NotLocalPlayer { player });
    }
    if let Some(held) = prop.get::<HeldProp>()
        && held.player != player
    {
        return Err(HybridError::HeldByOther {
            entity,
            holder: held.player,
        });
    }
    prop.insert((HeldProp { player, offset }, Held))
        .remove::<Uninterested>();
    Ok(())
}

fn throw(world: &mut World, entity: Entity, velocity: Vec3) -> Result<(), HybridError> {
    if !velocity.is_finite() {
        return Err(HybridError::NotFinite {
            what: "velocity",
            value: velocity,
        });
    }
    let mut prop = prop_mut(world, entity)?;
    if !prop.contains::<HeldProp>() {
        return Err(HybridError::NotHeld { entity });
    }
    prop.remove::<(HeldProp, Held)>()
        .insert(Velocity::linear(velocity));
    Ok(())
}

/// Counts and reports a refused grab or throw.
fn refuse_on_error(world: &mut World, entity: Entity, result: Result<(), HybridError>) {
    let Err(error) = result else {
        return;
    };
    warn!("prop {entity}: {error}");
    world.get_resource_or_init::<HybridStats>().grabs_refused += 1;
    if let Some(mut messages) = world.get_resource_mut::<Messages<HybridRefused>>() {
        messages.write(HybridRefused {
            entity: Some(entity),
            error,
        });
    }
}

/// One avatar of a simulation world, as [`avatar_poses`] finds it.
#[derive(Debug, Clone)]
pub struct AvatarPose {
    /// The player.
    pub player: PlayerIndex,
    /// The avatar's pose in that world.
    pub transform: Transform,
    /// Its collider (`None`: the body has none, and its twin gets a 0.5 m ball).
    pub collider: Option<Collider>,
}

/// Every avatar of `world` (a simulation world): the bodies with [`AvatarOf`] and a
/// `Transform`, one per player (of several, the lowest entity index), in player order.
pub fn avatar_poses(world: &World) -> Vec<AvatarPose> {
    let mut found: Vec<(Entity, AvatarPose)> = world
        .iter_entities()
        .filter_map(|entity| {
            let (of, transform) = (entity.get::<AvatarOf>()?, entity.get::<Transform>()?);
            let pose = AvatarPose {
                player: of.0,
                transform: *transform,
                collider: entity.get::<Collider>().cloned(),
            };
            Some((entity.id(), pose))
        })
        .collect();
    found.sort_by_key(|(entity, a)| (a.player, entity.index()));
    found.dedup_by_key(|(_, a)| a.player);
    found.into_iter().map(|(_, a)| a).collect()
}

/// How many bodies of `world` are an avatar ([`AvatarOf`] and a `Transform`), however many per
/// player.
fn avatar_count(world: &World) -> usize {
    world
        .iter_entities()
        .filter(|e| e.contains::<AvatarOf>() && e.contains::<Transform>())
        .count()
}

/// The velocity (m/s) that takes a body from `position` to `target` in one tick at `hz` ticks
/// per second (`hz` 0 is taken as 1).
pub fn hold_velocity(position: Vec3, target: Vec3, hz: u32) -> Vec3 {
    (target - position) * hz.max(1) as f32
}

/// The App's side of players moving props (add it to a hybrid App that is an ownership
/// participant, after the session plugin): in `PreUpdate`, after
/// [`DeterministicSet::SessionUpdate`], every frame
///
/// 1. each avatar of the predicted world ([`AvatarOf`]) gets its [`AvatarCollider`] twin,
///    moved to its predicted pose; the twins of this App's [`LocalPlayers`] carry
///    [`ParticipantAvatar`]; a twin whose avatar is gone is despawned;
/// 2. each [`HeldProp`] is given the velocity that takes it to its holding point in one tick.
///
/// Nothing without a session ([`SimulationWorlds`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct PlayerAvatarsPlugin;

impl Plugin for PlayerAvatarsPlugin {
    fn build(&self, app: &mut App) {
        app.add_message::<HybridRefused>()
            .init_resource::<HybridStats>()
            .register_type::<AvatarCollider>()
            .register_type::<HeldProp>()
            .add_systems(
                PreUpdate,
                (follow_avatars, hold_props)
                    .chain()
                    .after(DeterministicSet::SessionUpdate),
            );
    }
}

/// Twins' parts the follower writes.
type Twin<'a> = (
    Entity,
    &'a AvatarCollider,
    &'a mut Transform,
    Has<ParticipantAvatar>,
);

/// Step 1 of [`PlayerAvatarsPlugin`].
fn follow_avatars(
    mut commands: Commands,
    worlds: Option<Res<SimulationWorlds>>,
    local: Option<Res<LocalPlayers>>,
    mut twins: Query<Twin>,
    mut stats: ResMut<HybridStats>,
) {
    let Some(worlds) = worlds else {
        return;
    };
    let avatars = avatar_poses(worlds.predicted());
    let extra = avatar_count(worlds.predicted()) - avatars.len();
    if stats.extra_avatars != extra {
        stats.extra_avatars = extra;
    }
    let is_local = |p: PlayerIndex| local.as_ref().is_some_and(|l| l.contains(p));
    for (entity, twin, mut transform, marked) in &mut twins {
        let Some(avatar) = avatars.iter().find(|a| a.player == twin.player) else {
            commands.entity(entity).despawn();
            continue;
        };
        if *transform != avatar.transform {
            *transform = avatar.transform;
        }
        match (is_local(twin.player), marked) {
            (true, false) => {
                commands.entity(entity).insert(ParticipantAvatar);
            }
            (false, true) => {
                commands.entity(entity).remove::<ParticipantAvatar>();
            }
            _ => {}
        }
    }
    for avatar in &avatars {
        if twins.iter().any(|(_, t, ..)| t.player == avatar.player) {
            continue;
        }
        let collider = avatar
            .collider
            .clone()
            .unwrap_or_else(|| Collider::ball(0.5));
        let mut twin = commands.spawn((
            AvatarCollider {
                player: avatar.player,
            },
            RigidBody::KinematicPositionBased,
            collider,
            avatar.transform,
        ));
        if is_local(avatar.player) {
            twin.insert(ParticipantAvatar);
        }
    }
}

/// Step 2 of [`PlayerAvatarsPlugin`].
fn hold_props(
    mut commands: Commands,
    config: Option<Res<HybridConfig>>,
    twins: Query<(&AvatarCollider, &Transform), Without<HeldProp>>,
    mut held: Query<(Entity, &HeldProp, &Transform, &mut Velocity)>,
) {
    let hz = config.map_or(64, |c| c.tick_hz);
    for (entity, hold, transform, mut velocity) in &mut held {
        let Some((_, avatar)) = twins.iter().find(|(t, _)| t.player == hold.player) else {
            continue;
        };
        let target = avatar.translation + hold.offset;
        let linear = hold_velocity(transform.translation, target, hz);
        if !linear.is_finite() {
            // A `HeldProp` inserted by hand with a bad offset, or a prop or twin gone
            // non-finite: let go rather than give Rapier a non-finite velocity.
            let error = HybridError::NotFinite {
                what: "offset",
                value: hold.offset,
            };
            commands.entity(entity).queue(move |prop: EntityWorldMut| {
                let entity = prop.id();
                let world = prop.into_world_mut();
                if let Ok(mut prop) = world.get_entity_mut(entity) {
                    prop.remove::<(HeldProp, Held)>();
                }
                refuse_on_error(world, entity, Err(error));
            });
            continue;
        }
        *velocity = Velocity::linear(linear);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_prop_reaches_its_point_in_one_tick() {
        let v = hold_velocity(Vec3::new(1.0, 0.5, 0.0), Vec3::new(1.5, 0.5, -0.25), 64);
        assert_eq!(v, Vec3::new(32.0, 0.0, -16.0));
        assert_eq!(hold_velocity(Vec3::ZERO, Vec3::X, 0), Vec3::X);
    }

    #[test]
    fn avatars_are_found_once_per_player_in_player_order() {
        let mut world = World::new();
        world.spawn((AvatarOf(1), Transform::from_xyz(1.0, 0.0, 0.0)));
        world.spawn((
            AvatarOf(0),
            Transform::from_xyz(0.0, 0.0, 0.0),
            Collider::ball(0.6),
        ));
        world.spawn((AvatarOf(1), Transform::from_xyz(9.0, 0.0, 0.0)));
        world.spawn(Transform::from_xyz(5.0, 0.0, 0.0));
        let found = avatar_poses(&world);
        let players: Vec<_> = found.iter().map(|a| a.player).collect();
        assert_eq!(players, vec![0, 1]);
        assert!(found[0].collider.is_some() && found[1].collider.is_none());
        assert_eq!(found[1].transform.translation.x, 1.0);
        assert_eq!(
            avatar_count(&world) - found.len(),
            1,
            "one extra avatar counted"
        );
    }

    /// What a grab or throw queued on `entity` did: the refusal, if any.
    fn apply(app: &mut App, f: impl FnOnce(&mut EntityCommands)) -> Vec<HybridError> {
        let world = app.world_mut();
        let entity = world.resource::<Target>().0;
        f(&mut world.commands().entity(entity));
        world.flush();
        let mut messages = world.resource_mut::<Messages<HybridRefused>>();
        messages.drain().map(|m| m.error).collect()
    }

    #[derive(Resource)]
    struct Target(Entity);

    fn target(app: &mut App, entity: Entity) {
        app.insert_resource(Target(entity));
    }

    #[test]
    fn a_grab_or_throw_that_cannot_be_is_refused_and_counted() {
        let mut app = App::new();
        app.add_plugins(PlayerAvatarsPlugin)
            .insert_resource(LocalPlayers::new([0, 1]));
        let world = app.world_mut();
        let prop = world.spawn((OwnedProp::default(), Velocity::zero())).id();
        let plain = world.spawn(Transform::default()).id();
        let gone = world.spawn(OwnedProp::default()).id();
        world.despawn(gone);
        let nan = Vec3::new(f32::NAN, 0.0, 0.0);
        target(&mut app, prop);
        assert!(matches!(
            apply(&mut app, |p| {
                p.throw_prop(Vec3::X);
            })[..],
            [HybridError::NotHeld { .. }]
        ));
        assert!(matches!(
            apply(&mut app, |p| {
                p.grab_prop(0, nan);
            })[..],
            [HybridError::NotFinite { what: "offset", .. }]
        ));
        assert!(matches!(
            apply(&mut app, |p| {
                p.grab_prop(7, Vec3::Y);
            })[..],
            [HybridError::NotLocalPlayer { player: 7 }]
        ));
        assert!(
            apply(&mut app, |p| {
                p.grab_prop(0, Vec3::Y);
            })
            .is_empty()
        );
        assert!(matches!(
            apply(&mut app, |p| {
                p.grab_prop(1, Vec3::Y);
            })[..],
            [HybridError::HeldByOther { holder: 0, .. }]
        ));
        assert!(matches!(
            apply(&mut app, |p| {
                p.throw_prop(Vec3::INFINITY);
            })[..],
            [HybridError::NotFinite {
                what: "velocity",
                ..
            }]
        ));
        for entity in [plain, gone] {
            target(&mut app, entity);
            let refused = apply(&mut app, |p| {
                p.grab_prop(0, Vec3::Y);
            });
            assert!(
                matches!(
                    refused[..],
                    [HybridError::NotAProp { .. } | HybridError::NoSuchEntity { .. }]
                ),
                "{refused:?}"
            );
        }
        // Nothing refused changed the prop: still held by player 0 at its first point.
        let world = app.world();
        let held = world.get::<HeldProp>(prop).copied();
        assert_eq!(
            held,
            Some(HeldProp {
                player: 0,
                offset: Vec3::Y
            })
        );
        assert!(world.get::<Held>(prop).is_some() && world.get::<HeldProp>(plain).is_none());
        assert_eq!(world.get::<Velocity>(prop), Some(&Velocity::zero()));
        assert_eq!(world.resource::<HybridStats>().grabs_refused, 7);
    }

    #[test]
    fn a_throw_lets_go_at_its_velocity() {
        let mut app = App::new();
        app.add_plugins(PlayerAvatarsPlugin);
        let prop = app
            .world_mut()
            .spawn((OwnedProp::default(), Velocity::zero()))
            .id();
        target(&mut app, prop);
        let grab = apply(&mut app, |p| {
            p.grab_prop(3, Vec3::Y);
        });
        let throw = apply(&mut app, |p| {
            p.throw_prop(Vec3::new(4.0, 1.0, 0.0));
        });
        assert!(grab.is_empty() && throw.is_empty());
        let world = app.world();
        assert!(world.get::<HeldProp>(prop).is_none() && world.get::<Held>(prop).is_none());
        assert_eq!(
            world.get::<Velocity>(prop).unwrap().linear,
            Vec3::new(4.0, 1.0, 0.0)
        );
    }

    #[test]
    fn a_hold_that_cannot_be_reached_lets_go_instead_of_a_non_finite_velocity() {
        let mut app = App::new();
        app.add_plugins(PlayerAvatarsPlugin);
        let world = app.world_mut();
        world.spawn((
            AvatarCollider { player: 0 },
            Transform::from_xyz(1.0, 0.0, 0.0),
        ));
        let bad = HeldProp {
            player: 0,
            offset: Vec3::new(f32::INFINITY, 0.0, 0.0),
        };
        let prop = world
            .spawn((
                OwnedProp::default(),
                bad,
                Held,
                Transform::default(),
                Velocity::zero(),
            ))
            .id();
        app.update();
        app.update();
        let world = app.world();
        assert_eq!(world.get::<Velocity>(prop), Some(&Velocity::zero()));
        assert!(world.get::<HeldProp>(prop).is_none() && world.get::<Held>(prop).is_none());
        assert_eq!(world.resource::<HybridStats>().grabs_refused, 1);
    }
}
