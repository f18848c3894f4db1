//! Grabbing bodies with the mouse, as rules on plain data: the cursor's ray from the camera,
//! the body it picks, the drag target while held, the throw on release; and
//! [`MouseGrabPlugin`], which plays them in a participant App of an ownership session.
//!
//! The rules (each a pure function with its tests in `tests/sandbox_grab.rs`):
//!
//! 1. **Ray**: a cursor position (logical pixels, origin top left) and the camera (its
//!    transform, vertical field of view and viewport size) give a ray from the camera's
//!    position through that pixel ([`cursor_ray`]); a cursor outside the viewport gives none.
//! 2. **Pick**: pressing the button picks the nearest body whose collider (cuboid, ball,
//!    capsule, ...) the ray enters within [`MAX_PICK_DISTANCE`] ([`pick`]); the picked body gets
//!    a GRAB bid (`grab()`, ownership rule 10). A miss bids for nothing.
//! 3. **Drag**: while the button is held, the target of the grabbed point is where the ray
//!    meets the plane through the grab point facing the camera (its normal the camera's
//!    forward); a ray parallel to the plane or meeting it behind the camera keeps the grab
//!    distance along the ray; the target is never farther than [`MAX_REACH`] from the camera
//!    ([`drag_target`]). The body is steered to it ([`steer_velocity`]), only while this
//!    participant owns it.
//! 4. **Throw**: on release the body's velocity becomes the drag target's velocity over the
//!    last [`THROW_SAMPLES`] ticks, at most [`MAX_THROW_SPEED`] ([`throw_velocity`]), and the
//!    grab is released (`release_grab()`; ownership stays until the body rests). When those
//!    ticks give no measure (all from one slow frame of the view: one cursor position) the body
//!    keeps the velocity it was steered with. A release without a grab does nothing.
//! 5. **Refused**: a refused GRAB bid for the held body (another owner at a higher priority, or
//!    an equal GRAB within the lockout) ends the grab: the body was never moved (steering needs
//!    ownership) and the refusal is kept in [`GrabStatus`] for the view to show.

use std::collections::VecDeque;

use bevy::prelude::*;
use bevy_rapier3d::prelude::{Collider, Velocity};
use simsync_ownership::{
    BidRefused, BodyNetId, Ownable, OwnershipClient, OwnershipEntityCommandsExt, ParticipantId,
    Priority, RefusalReason, SimulationOwner,
};

/// Farthest a click picks a body, m along the ray.
pub const MAX_PICK_DISTANCE: f32 = 200.0;
/// Farthest a dragged target may be from the camera, m.
pub const MAX_REACH: f32 = 60.0;
/// Drag target samples a throw is measured over, ticks.
pub const THROW_SAMPLES: usize = 6;
/// Fastest throw, m/s.
pub const MAX_THROW_SPEED: f32 = 15.0;
/// A held body is steered towards its target at this rate, 1/s ...
pub const DRAG_GAIN: f32 = 10.0;
/// ... up to this speed, m/s.
pub const MAX_DRAG_SPEED: f32 = 12.0;

/// A ray: an origin and a unit direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PointerRay {
    /// Where it starts (the camera), m.
    pub origin: Vec3,
    /// Its direction, unit length.
    pub direction: Vec3,
}

impl PointerRay {
    /// The point `distance` m along the ray.
    pub fn at(&self, distance: f32) -> Vec3 {
        self.origin + self.direction * distance
    }
}

/// What the ray needs of a perspective camera.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ViewCamera {
    /// The camera's transform (it looks along its local −Z).
    pub transform: Transform,
    /// Vertical field of view, radians.
    pub fov_y: f32,
    /// Viewport size, logical pixels.
    pub viewport: Vec2,
}

/// Rule 1: the ray from the camera through the cursor at `cursor` (logical pixels, origin top
/// left); `None` outside the viewport, for an empty viewport or a field of view outside
/// (0, π).
pub fn cursor_ray(cursor: Vec2, camera: &ViewCamera) -> Option<PointerRay> {
    let size = camera.viewport;
    let inside = cursor.x >= 0.0 && cursor.y >= 0.0 && cursor.x <= size.x && cursor.y <= size.y;
    let fov_ok = camera.fov_y > 0.0 && camera.fov_y < std::f32::consts::PI;
    if !inside || size.x <= 0.0 || size.y <= 0.0 || !fov_ok {
        return None;
    }
    let ndc = Vec2::new(cursor.x / size.x * 2.0 - 1.0, 1.0 - cursor.y / size.y * 2.0);
    let half_height = (camera.fov_y / 2.0).tan();
    let local = Vec3::new(
        ndc.x * half_height * size.x / size.y,
        ndc.y * half_height,
        -1.0,
    );
    let direction = (camera.transform.rotation * local).try_normalize()?;
    Some(PointerRay {
        origin: camera.transform.translation,
        direction,
    })
}

/// A body the ray hit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit<T> {
    /// Which body (an entity, a body id, an index).
    pub body: T,
    /// Distance along the ray, m.
    pub distance: f32,
    /// Where the ray enters it.
    pub point: Vec3,
}

/// Rule 2: the nearest of `bodies` (each a key, its pose and its collider) the ray enters
/// within [`MAX_PICK_DISTANCE`]; `None` for a miss. A ray starting inside a body hits it at
/// distance 0.
pub fn pick<'a, T>(
    ray: PointerRay,
    bodies: impl IntoIterator<Item = (T, &'a Transform, &'a Collider)>,
) -> Option<Hit<T>> {
    bodies
        .into_iter()
        .filter_map(|(body, at, collider)| {
            let distance = collider.cast_ray(
                at.translation,
                at.rotation,
                ray.origin,
                ray.direction,
                MAX_PICK_DISTANCE,
                true,
            )?;
            Some(Hit {
                body,
                distance,
                point: ray.at(distance),
            })
        })
        .min_by(|a, b| a.distance.total_cmp(&b.distance))
}

/// The plane a held body is dragged in: through the grab point, facing the camera.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DragPlane {
    /// The grab point, m.
    pub point: Vec3,
    /// The plane's normal (the camera's forward), unit length.
    pub normal: Vec3,
    /// The grab point's distance from the camera along the ray at the grab, m.
    pub distance: f32,
}

/// Rule 3: the target of the grabbed point for `ray` (see the module docs).
pub fn drag_target(ray: PointerRay, plane: &DragPlane) -> Vec3 {
    let facing = ray.direction.dot(plane.normal);
    let along = if facing.abs() > 1e-4 {
        (plane.point - ray.origin).dot(plane.normal) / facing
    } else {
        f32::NAN
    };
    let distance = if along.is_finite() && along > 0.0 {
        along
    } else {
        plane.distance
    };
    ray.at(distance.min(MAX_REACH))
}

/// Rule 3: the velocity steering a body at `at` towards `target`: [`DRAG_GAIN`] per second of
/// the offset, at most [`MAX_DRAG_SPEED`].
pub fn steer_velocity(at: Vec3, target: Vec3) -> Vec3 {
    ((target - at) * DRAG_GAIN).clamp_length_max(MAX_DRAG_SPEED)
}

/// Rule 4: the velocity of a throw from drag targets `(tick, point)` in tick order, `dt` s a
/// tick: the displacement from the oldest to the newest of the last [`THROW_SAMPLES`] over their
/// time, at most [`MAX_THROW_SPEED`]. Zero for fewer than two samples, samples of one tick, or a
/// non-positive `dt`.
pub fn throw_velocity(samples: &[(u32, Vec3)], dt: f32) -> Vec3 {
    let recent = &samples[samples.len().saturating_sub(THROW_SAMPLES)..];
    let (Some(&(t0, first)), Some(&(t1, last))) = (recent.first(), recent.last()) else {
        return Vec3::ZERO;
    };
    let seconds = t1.saturating_sub(t0) as f32 * dt;
    if seconds <= 0.0 || !seconds.is_finite() {
        return Vec3::ZERO;
    }
    ((last - first) / seconds).clamp_length_max(MAX_THROW_SPEED)
}

/// Whether a participant may move a body: only the owner moves it (a refused or pending grab
/// never does).
pub fn may_move(owner: Option<ParticipantId>, me: Option<ParticipantId>) -> bool {
    owner.is_some() && owner == me
}

/// A body being held.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold<T> {
    /// The body.
    pub body: T,
    /// The drag plane of the grab.
    pub plane: DragPlane,
    /// The grab point relative to the body's centre at the grab (world axes), m.
    pub offset: Vec3,
    /// The last drag targets of the grabbed point, `(tick, point)`, oldest first.
    pub samples: VecDeque<(u32, Vec3)>,
}

/// What one tick of the mouse does.
#[derive(Debug, Clone, PartialEq)]
pub enum GrabStep<T> {
    /// Nothing (no button change, no grab).
    Idle,
    /// Pressed over nothing: no bid.
    Miss,
    /// Pressed over `body`: bid GRAB for it.
    Grab(T),
    /// Held: steer `body`'s centre to `target` (if owned).
    Drag {
        /// The body.
        body: T,
        /// Where its centre should go, m.
        target: Vec3,
    },
    /// Released: let go of `body`, with `velocity` (if owned).
    Throw {
        /// The body.
        body: T,
        /// Its throw velocity, m/s.
        velocity: Vec3,
    },
}

/// The grab state machine: rules 2–4 on the button's level each tick.
#[derive(Debug, Clone, PartialEq)]
pub struct MouseGrab<T> {
    /// The button's level at the last tick.
    pub was_pressed: bool,
    /// The body held, if any.
    pub hold: Option<Hold<T>>,
}

impl<T> Default for MouseGrab<T> {
    fn default() -> Self {
        Self {
            was_pressed: false,
            hold: None,
        }
    }
}

impl<T: Copy> MouseGrab<T> {
    /// One tick: `pressed` the button's level, `ray` the cursor's (none outside the window),
    /// `forward` the camera's forward, `pick` the rule-2 picking, `centre` a body's centre.
    pub fn step(
        &mut self,
        tick: u32,
        pressed: bool,
        ray: Option<PointerRay>,
        forward: Vec3,
        pick: impl FnOnce(PointerRay) -> Option<Hit<T>>,
        centre: impl Fn(T) -> Option<Vec3>,
    ) -> GrabStep<T> {
        let was = std::mem::replace(&mut self.was_pressed, pressed);
        match (&mut self.hold, pressed) {
            (None, true) if !was => {
                let Some(hit) = ray.and_then(pick) else {
                    return GrabStep::Miss;
                };
                let offset = centre(hit.body).map_or(Vec3::ZERO, |c| hit.point - c);
                self.hold = Some(Hold {
                    body: hit.body,
                    plane: DragPlane {
                        point: hit.point,
                        normal: forward.try_normalize().unwrap_or(Vec3::NEG_Z),
                        distance: hit.distance,
                    },
                    offset,
                    samples: VecDeque::from([(tick, hit.point)]),
                });
                GrabStep::Grab(hit.body)
            }
            (Some(hold), true) => {
                let Some(ray) = ray else {
                    let last = hold.samples.back().map_or(hold.plane.point, |s| s.1);
                    return GrabStep::Drag {
                        body: hold.body,
                        target: last - hold.offset,
                    };
                };
                let point = drag_target(ray, &hold.plane);
                hold.samples.push_back((tick, point));
                while hold.samples.len() > THROW_SAMPLES {
                    hold.samples.pop_front();
                }
                GrabStep::Drag {
                    body: hold.body,
                    target: point - hold.offset,
                }
            }
            (Some(_), false) => {
                let Some(hold) = self.hold.take() else {
                    return GrabStep::Idle;
                };
                let samples: Vec<_> = hold.samples.into_iter().collect();
                GrabStep::Throw {
                    body: hold.body,
                    velocity: throw_velocity(&samples, TICK_SECONDS),
                }
            }
            _ => GrabStep::Idle,
        }
    }

    /// Drops the grab without a throw (a refusal); the button must be pressed again.
    pub fn drop_hold(&mut self) -> Option<Hold<T>> {
        self.hold.take()
    }
}

/// Seconds a participant tick (1/64 s).
pub const TICK_SECONDS: f32 = 1.0 / 64.0;

/// The mouse as the participant App sees it (participant-App resource): the view writes it
/// from the window every frame; tests write it directly.
#[derive(Resource, Debug, Clone, Copy, PartialEq)]
pub struct PointerInput {
    /// The cursor, logical pixels from the top left; `None` outside the window.
    pub cursor: Option<Vec2>,
    /// Whether the grab button (the left mouse button) is held.
    pub grab_pressed: bool,
    /// The camera the cursor looks through.
    pub camera: ViewCamera,
}

/// A body the mouse never grabs (avatars).
#[derive(Component, Debug, Clone, Copy, Default)]
pub struct NotGrabbable;

/// A refusal of the held body's GRAB bid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrabRefusal {
    /// The body, by network id.
    pub body: BodyNetId,
    /// Its owner then.
    pub owner: Option<ParticipantId>,
    /// That owner's priority.
    pub priority: Priority,
    /// Why.
    pub reason: RefusalReason,
    /// The participant tick it arrived at.
    pub tick: u32,
}

/// What the mouse did (participant-App resource; the view shows it).
#[derive(Resource, Debug, Clone, Default, PartialEq)]
pub struct GrabStatus {
    /// The body held now, by entity and network id.
    pub held: Option<(Entity, BodyNetId)>,
    /// Whether this participant owns the held body (it moves only then).
    pub owned: bool,
    /// Where the held body's centre is dragged to, m.
    pub target: Option<Vec3>,
    /// Participant ticks stepped.
    pub tick: u32,
    /// Presses that picked a body (GRAB bids).
    pub grabs: u64,
    /// Presses over nothing.
    pub misses: u64,
    /// Releases of a held body.
    pub throws: u64,
    /// Speed of the last throw, m/s (0 if not owned then).
    pub last_throw_speed: f32,
    /// Grabs refused.
    pub refusals: u64,
    /// The last refusal.
    pub last_refusal: Option<GrabRefusal>,
}

/// Plays the rules in a participant App of an ownership session (`Update`): needs
/// [`PointerInput`] (nothing happens without it) and the participant's Rapier bodies.
pub struct MouseGrabPlugin;

impl Plugin for MouseGrabPlugin {
    fn build(&self, app: &mut App) {
        app.init_resource::<GrabStatus>()
            .insert_resource(GrabState(MouseGrab::default()))
            .add_systems(Update, (grab_refused, mouse_grab).chain());
    }
}

/// The state machine of [`MouseGrabPlugin`].
#[derive(Resource, Debug, Default)]
struct GrabState(MouseGrab<Entity>);

type Grabbable<'a> = (
    Entity,
    &'a Transform,
    &'a Collider,
    &'a mut Velocity,
    Option<&'a SimulationOwner>,
    Option<&'a BodyNetId>,
);

/// Rules 2–4 for this tick.
fn mouse_grab(
    input: Option<Res<PointerInput>>,
    client: Res<OwnershipClient>,
    mut state: ResMut<GrabState>,
    mut status: ResMut<GrabStatus>,
    mut bodies: Query<Grabbable<'static>, (With<Ownable>, Without<NotGrabbable>)>,
    mut commands: Commands,
) {
    status.tick += 1;
    let Some(input) = input else {
        return;
    };
    let ray = input.cursor.and_then(|c| cursor_ray(c, &input.camera));
    let forward = input.camera.transform.forward().as_vec3();
    let step = state.0.step(
        status.tick,
        input.grab_pressed,
        ray,
        forward,
        |ray| pick(ray, bodies.iter().map(|(e, at, shape, ..)| (e, at, shape))),
        |e| bodies.get(e).ok().map(|b| b.1.translation),
    );
    let me = client.me();
    let owns = |owner: Option<&SimulationOwner>| may_move(owner.and_then(|o| o.owner), me);
    match step {
        GrabStep::Grab(entity) => {
            commands.entity(entity).grab();
            status.grabs += 1;
            let id = bodies.get(entity).ok().and_then(|b| b.5.copied());
            status.held = id.map(|id| (entity, id));
        }
        GrabStep::Miss => status.misses += 1,
        GrabStep::Drag { body, target } => {
            status.target = Some(target);
            if let Ok((_, at, _, mut velocity, owner, _)) = bodies.get_mut(body) {
                status.owned = owns(owner);
                if status.owned {
                    velocity.linear = steer_velocity(at.translation, target);
                    velocity.angular *= 0.8;
                }
            }
        }
        GrabStep::Throw { body, velocity: v } => {
            commands.entity(body).release_grab();
            status.throws += 1;
            status.last_throw_speed = 0.0;
            if let Ok((.., mut velocity, owner, _)) = bodies.get_mut(body)
                && owns(owner)
            {
                // No measure (one frame's samples): the body keeps its steered velocity.
                if v != Vec3::ZERO {
                    velocity.linear = v;
                }
                status.last_throw_speed = velocity.linear.length();
            }
            status.held = None;
            status.owned = false;
            status.target = None;
        }
        GrabStep::Idle => {}
    }
}

/// Rule 5: a refusal of the held body ends the grab.
fn grab_refused(
    mut refused: MessageReader<BidRefused>,
    mut state: ResMut<GrabState>,
    mut status: ResMut<GrabStatus>,
    mut commands: Commands,
) {
    for refusal in refused.read() {
        let Some((entity, id)) = status.held else {
            continue;
        };
        if refusal.entity != entity || status.owned {
            continue;
        }
        state.0.drop_hold();
        commands.entity(entity).release_grab();
        status.refusals += 1;
        status.last_refusal = Some(GrabRefusal {
            body: id,
            owner: refusal.owner,
            priority: refusal.priority,
            reason: refusal.reason,
            tick: status.tick,
        });
        status.held = None;
        status.target = None;
    }
}
