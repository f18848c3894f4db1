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
use simsync_ownership::{OwnershipEntityCommandsExt, ParticipantAvatar};

use super::HybridConfig;

/// Marks a player body of the simulation worlds (a [`RollbackBody`](super::RollbackBody)) as
/// player `.0`'s avatar: [`PlayerAvatarsPlugin`] gives it a kinematic twin in the App's world
/// ([`AvatarCollider`]) with the body's `Collider`, at its predicted pose. A rollback
/// component, hashed: spawn it with the body, at most one per player (a second one of the same
/// player is ignored).
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
/// it for a player local to this App (a participant bids for its own players only).
#[derive(Component, Debug, Clone, Copy, PartialEq, Reflect)]
#[reflect(Component)]
pub struct HeldProp {
    /// The player holding it.
    pub player: PlayerIndex,
    /// Where it is held, metres from the avatar's position (world axes).
    pub offset: Vec3,
}

/// Grabbing and throwing props (on a prop's `EntityCommands`, in the App's world).
pub trait PropGrabCommandsExt {
    /// Player `player` holds the prop at `offset` metres from its avatar ([`HeldProp`]) and
    /// grabs it through ownership (GRAB bid).
    fn grab_prop(&mut self, player: PlayerIndex, offset: Vec3) -> &mut Self;
    /// Lets go of the prop at `velocity` (m/s, no spin): the ownership grab ends, the owner
    /// keeps the prop until it comes to rest and releases it ([ownership rule
    /// 12](crate::ownership::rules)).
    fn throw_prop(&mut self, velocity: Vec3) -> &mut Self;
}

impl PropGrabCommandsExt for EntityCommands<'_> {
    fn grab_prop(&mut self, player: PlayerIndex, offset: Vec3) -> &mut Self {
        self.insert(HeldProp { player, offset }).grab()
    }

    fn throw_prop(&mut self, velocity: Vec3) -> &mut Self {
        self.remove::<HeldProp>()
            .release_grab()
            .insert(Velocity::linear(velocity))
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
        app.register_type::<AvatarCollider>()
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
) {
    let Some(worlds) = worlds else {
        return;
    };
    let avatars = avatar_poses(worlds.predicted());
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
    config: Option<Res<HybridConfig>>,
    twins: Query<(&AvatarCollider, &Transform), Without<HeldProp>>,
    mut held: Query<(&HeldProp, &Transform, &mut Velocity)>,
) {
    let hz = config.map_or(64, |c| c.tick_hz);
    for (hold, transform, mut velocity) in &mut held {
        let Some((_, avatar)) = twins.iter().find(|(t, _)| t.player == hold.player) else {
            continue;
        };
        let target = avatar.translation + hold.offset;
        *velocity = Velocity::linear(hold_velocity(transform.translation, target, hz));
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
    }
}
