//! A participant's scripted actor: each tick it plays its part of the script on its own copy of
//! the bodies — walking, jumping, pushing, poking, grabbing and carrying.

use std::sync::Arc;

use bevy::prelude::*;
use bevy_rapier3d::prelude::Velocity;
use simsync_ownership::{
    Ownable, OwnershipEntityCommandsExt, OwnershipParticipant, ParticipantAvatar, SimulationOwner,
};

use super::DT;
use super::bodies::AvatarBody;
use super::script::{Actions, Script};
use crate::game::{GROUNDED_VERTICAL_SPEED, JUMP_SPEED, MAX_SPEED, MOVE_ACCEL, PUSH_LIFT};

/// Reach of a push, m (bodies whose centre is this close to the avatar's).
const PUSH_RADIUS: f32 = 2.0;
/// Velocity change of a push on a body at the avatar's centre (a quarter of it at the edge of
/// the reach), m/s.
const PUSH_SPEED: f32 = 3.0;
/// Reach of a poke or a grab, m.
const REACH: f32 = 3.0;
/// Velocity change of a poke, m/s.
const POKE_SPEED: f32 = 2.5;
/// A carried body is held this far in front of the avatar, m.
const HOLD_DISTANCE: f32 = 1.3;
/// ... and this high above its centre, m.
const HOLD_HEIGHT: f32 = 0.9;
/// A carried body is steered towards the hold point at this rate, 1/s, up to `HOLD_SPEED`.
const HOLD_GAIN: f32 = 8.0;
/// Top speed of a carried body, m/s.
const HOLD_SPEED: f32 = 6.0;

/// What a participant's script does (participant-App resource).
#[derive(Resource, Debug)]
pub struct Actor {
    /// Which participant of the trace it plays.
    index: u8,
    script: Arc<Script>,
    /// Scripted ticks run so far (0 until started).
    tick: u32,
    /// The script runs (set once everyone joined; cleared to stop inputs).
    pub running: bool,
    previous: Actions,
    /// Horizontal direction the avatar last moved in.
    facing: Vec3,
    /// The body being carried.
    grabbed: Option<Entity>,
}

impl Actor {
    /// An actor playing trace participant `index`, not running yet.
    pub fn new(index: u8, script: Arc<Script>) -> Self {
        Self {
            index,
            script,
            tick: 0,
            running: false,
            previous: Actions::default(),
            facing: Vec3::Z,
            grabbed: None,
        }
    }
}

type ActBodies<'a> = (
    Entity,
    &'a Transform,
    &'a mut Velocity,
    Option<&'a SimulationOwner>,
    Has<AvatarBody>,
    Has<ParticipantAvatar>,
);

/// The nearest body (not an avatar) within `reach` of `from`.
fn nearest(
    bodies: &Query<ActBodies<'static>, With<Ownable>>,
    from: Vec3,
    reach: f32,
) -> Option<Entity> {
    bodies
        .iter()
        .filter(|(.., avatar, _)| !avatar)
        .map(|(e, t, ..)| (e, t.translation.distance(from)))
        .filter(|(_, d)| *d <= reach)
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(e, _)| e)
}

/// `Update`: one tick of the participant's script (velocity changes are script edits, so every
/// body changed is poked — ownership rule 8).
pub fn act(
    mut actor: ResMut<Actor>,
    participant: Res<OwnershipParticipant>,
    mut bodies: Query<ActBodies<'static>, With<Ownable>>,
    mut commands: Commands,
) {
    if !actor.running {
        return;
    }
    actor.tick += 1;
    let input = actor.script.actions(actor.index, actor.tick);
    let previous = std::mem::replace(&mut actor.previous, input);
    let pressed = |now: bool, before: bool| now && !before;
    let Some((avatar, avatar_at)) = bodies
        .iter()
        .find(|(.., mine)| *mine)
        .map(|(e, t, ..)| (e, t.translation))
    else {
        return;
    };
    let dt = DT.as_secs_f32();
    // Movement and jump.
    let wish = Vec3::new(input.movement[0], 0.0, input.movement[1]).clamp_length_max(1.0);
    if wish != Vec3::ZERO {
        actor.facing = wish.normalize();
    }
    if let Ok((.., mut velocity, _, _, _)) = bodies.get_mut(avatar) {
        if wish != Vec3::ZERO {
            let horizontal = Vec3::new(velocity.linear.x, 0.0, velocity.linear.z);
            velocity.linear += (wish * MAX_SPEED - horizontal).clamp_length_max(MOVE_ACCEL * dt);
        }
        if pressed(input.jump, previous.jump) && velocity.linear.y.abs() < GROUNDED_VERTICAL_SPEED {
            velocity.linear.y += JUMP_SPEED;
        }
    }
    // Push: every body in reach, outwards.
    if pressed(input.push, previous.push) {
        for (entity, transform, mut velocity, _, is_avatar, _) in &mut bodies {
            let offset = transform.translation - avatar_at;
            let distance = offset.length();
            if is_avatar || distance > PUSH_RADIUS {
                continue;
            }
            let outward = offset.try_normalize().unwrap_or(Vec3::Y);
            let direction = (outward + Vec3::Y * PUSH_LIFT).normalize_or(Vec3::Y);
            velocity.linear += direction * PUSH_SPEED * (1.0 - 0.75 * distance / PUSH_RADIUS);
            commands.entity(entity).poke();
        }
    }
    // Poke: the nearest body, a shove away from the avatar.
    if pressed(input.poke, previous.poke)
        && let Some(target) = nearest(&bodies, avatar_at, REACH)
        && let Ok((_, transform, mut velocity, ..)) = bodies.get_mut(target)
    {
        let away = (transform.translation - avatar_at)
            .try_normalize()
            .unwrap_or(actor.facing);
        velocity.linear += (away + Vec3::Y * PUSH_LIFT).normalize_or(Vec3::Y) * POKE_SPEED;
        commands.entity(target).poke();
    }
    // Grab: take the nearest body on press, carry it while held, let go on release.
    if pressed(input.grab, previous.grab)
        && let Some(target) = nearest(&bodies, avatar_at, REACH)
    {
        commands.entity(target).grab();
        actor.grabbed = Some(target);
    }
    if !input.grab
        && let Some(held) = actor.grabbed.take()
    {
        commands.entity(held).release_grab();
    }
    if let Some(held) = actor.grabbed
        && let Ok((_, transform, mut velocity, owner, ..)) = bodies.get_mut(held)
        && owner.is_some_and(|o| o.owner.is_some() && o.owner == participant.me())
    {
        let hold = avatar_at + actor.facing * HOLD_DISTANCE + Vec3::Y * HOLD_HEIGHT;
        velocity.linear = ((hold - transform.translation) * HOLD_GAIN).clamp_length_max(HOLD_SPEED);
        velocity.angular *= 0.8;
    }
}

/// Stops a participant's script and lets go of what it carries.
pub fn stop_script(app: &mut App) {
    let world = app.world_mut();
    let held = {
        let mut actor = world.resource_mut::<Actor>();
        actor.running = false;
        actor.grabbed.take()
    };
    if let Some(held) = held {
        world.commands().entity(held).release_grab();
        world.flush();
    }
}
