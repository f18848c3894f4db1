//! The mouse grab of `sandbox_view join --ownership`: its rules on plain data (cursor ray,
//! pick, drag target, throw) and its plugin in participant Apps of an ownership session over
//! the in-memory transport, driven by injected mouse input ([`PointerInput`]: the cursor and
//! the left button, as the view writes them from the window).
//!
//! The rules are included by path from `examples/sandbox/grab_rules.rs`.

#[path = "../examples/sandbox/grab_rules.rs"]
pub(crate) mod grab_rules;

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync_ownership::prelude::*;
use simsync_ownership::testing::OwnershipPeers;
use simsync_ownership::{RefusalReason, SimulationOwner};

use grab_rules::*;

/// A camera at (0, 0.5, 10) looking at the origin's height along −Z, 45° vertical field of view,
/// 800 × 600 logical pixels.
fn camera() -> ViewCamera {
    ViewCamera {
        transform: Transform::from_xyz(0.0, 0.5, 10.0)
            .looking_at(Vec3::new(0.0, 0.5, 0.0), Vec3::Y),
        fov_y: std::f32::consts::FRAC_PI_4,
        viewport: Vec2::new(800.0, 600.0),
    }
}

const CENTRE: Vec2 = Vec2::new(400.0, 300.0);

fn ray_at(cursor: Vec2) -> PointerRay {
    cursor_ray(cursor, &camera()).expect("the cursor is inside the viewport")
}

#[test]
fn the_viewport_centre_looks_along_the_camera_forward() {
    let ray = ray_at(CENTRE);
    assert_eq!(ray.origin, Vec3::new(0.0, 0.5, 10.0));
    assert!(ray.direction.distance(Vec3::NEG_Z) < 1e-6, "{ray:?}");
}

#[test]
fn the_viewport_corner_is_half_the_field_of_view_off_axis() {
    let ray = ray_at(Vec2::new(800.0, 0.0));
    let half = (std::f32::consts::FRAC_PI_8).tan();
    let expected = Vec3::new(half * 800.0 / 600.0, half, -1.0).normalize();
    assert!(ray.direction.distance(expected) < 1e-6, "{ray:?}");
}

#[test]
fn a_cursor_outside_the_viewport_gives_no_ray() {
    assert_eq!(cursor_ray(Vec2::new(-1.0, 300.0), &camera()), None);
    assert_eq!(cursor_ray(Vec2::new(400.0, 601.0), &camera()), None);
    let empty = ViewCamera {
        viewport: Vec2::ZERO,
        ..camera()
    };
    assert_eq!(cursor_ray(Vec2::ZERO, &empty), None);
}

/// A cuboid at the origin, a ball behind it, a capsule to the right.
fn shapes() -> Vec<(u8, Transform, Collider)> {
    vec![
        (1, Transform::from_xyz(0.0, 0.5, -4.0), Collider::ball(0.5)),
        (
            2,
            Transform::from_xyz(0.0, 0.5, 0.0),
            Collider::cuboid(0.5, 0.5, 0.5),
        ),
        (
            3,
            Transform::from_xyz(3.0, 0.5, 0.0).with_rotation(Quat::from_rotation_z(1.0)),
            Collider::capsule_y(0.5, 0.3),
        ),
    ]
}

fn pick_in(shapes: &[(u8, Transform, Collider)], ray: PointerRay) -> Option<Hit<u8>> {
    pick(ray, shapes.iter().map(|(id, at, c)| (*id, at, c)))
}

#[test]
fn the_ray_picks_the_nearest_body_it_enters() {
    let all = shapes();
    let hit = pick_in(&all, ray_at(CENTRE)).expect("the cuboid is under the cursor");
    assert_eq!(hit.body, 2);
    assert!((hit.distance - 9.5).abs() < 1e-4, "front face: {hit:?}");
    assert!(hit.point.distance(Vec3::new(0.0, 0.5, 0.5)) < 1e-4);
    let behind: Vec<_> = all.iter().filter(|b| b.0 != 2).cloned().collect();
    let hit = pick_in(&behind, ray_at(CENTRE)).expect("then the ball behind it");
    assert_eq!(hit.body, 1);
    assert!((hit.distance - 13.5).abs() < 1e-4, "{hit:?}");
}

#[test]
fn the_ray_picks_a_rotated_capsule() {
    let all = shapes();
    let towards = Vec3::new(3.0, 0.5, 0.0) - camera().transform.translation;
    let ray = PointerRay {
        origin: camera().transform.translation,
        direction: towards.normalize(),
    };
    assert_eq!(pick_in(&all, ray).map(|h| h.body), Some(3));
}

#[test]
fn a_miss_picks_nothing_and_bids_nothing() {
    let all = shapes();
    assert_eq!(pick_in(&all, ray_at(Vec2::new(5.0, 5.0))), None);
    let mut grab = MouseGrab::<u8>::default();
    let step = grab.step(
        1,
        true,
        Some(ray_at(Vec2::new(5.0, 5.0))),
        Vec3::NEG_Z,
        |ray| pick_in(&all, ray),
        |_| None,
    );
    assert_eq!(step, GrabStep::Miss);
    assert_eq!(grab.hold, None);
}

fn plane() -> DragPlane {
    DragPlane {
        point: Vec3::new(0.0, 0.5, 0.5),
        normal: Vec3::NEG_Z,
        distance: 9.5,
    }
}

#[test]
fn the_drag_target_is_where_the_ray_meets_the_plane_facing_the_camera() {
    let ray = ray_at(Vec2::new(600.0, 200.0));
    let target = drag_target(ray, &plane());
    assert!(
        (target - plane().point).dot(plane().normal).abs() < 1e-4,
        "{target}"
    );
    let along = (target - ray.origin).normalize();
    assert!(along.distance(ray.direction) < 1e-5, "on the ray");
    assert!(target.x > 2.0 && target.y > 1.5, "right and up: {target}");
}

#[test]
fn a_ray_parallel_to_the_plane_keeps_the_grab_distance() {
    let ray = PointerRay {
        origin: Vec3::new(0.0, 0.5, 10.0),
        direction: Vec3::X,
    };
    assert_eq!(drag_target(ray, &plane()), Vec3::new(9.5, 0.5, 10.0));
}

#[test]
fn the_drag_target_is_at_most_the_max_reach_from_the_camera() {
    let far = DragPlane {
        point: Vec3::new(0.0, 0.0, -500.0),
        ..plane()
    };
    let target = drag_target(ray_at(CENTRE), &far);
    assert!((target.distance(camera().transform.translation) - MAX_REACH).abs() < 1e-3);
}

#[test]
fn the_throw_is_the_targets_displacement_over_their_time() {
    let samples: Vec<_> = (0..4).map(|t| (t, Vec3::X * 0.1 * t as f32)).collect();
    let v = throw_velocity(&samples, TICK_SECONDS);
    assert!(v.distance(Vec3::X * 6.4) < 1e-4, "{v}");
}

#[test]
fn the_throw_counts_only_the_last_samples() {
    let mut samples: Vec<_> = (0..20).map(|t| (t, Vec3::Y * t as f32)).collect();
    let last = samples.len() as u32;
    samples.extend((last..last + THROW_SAMPLES as u32).map(|t| (t, Vec3::new(0.0, 19.0, 0.0))));
    assert_eq!(
        throw_velocity(&samples, TICK_SECONDS),
        Vec3::ZERO,
        "held still at the end"
    );
}

#[test]
fn the_throw_is_clamped_to_the_max_speed() {
    let v = throw_velocity(
        &[(0, Vec3::ZERO), (1, Vec3::new(0.0, 3.0, 4.0))],
        TICK_SECONDS,
    );
    assert!((v.length() - MAX_THROW_SPEED).abs() < 1e-4, "{v}");
    assert!(v.normalize().distance(Vec3::new(0.0, 0.6, 0.8)) < 1e-5);
}

#[test]
fn a_throw_needs_two_samples_on_two_ticks() {
    assert_eq!(throw_velocity(&[], TICK_SECONDS), Vec3::ZERO);
    assert_eq!(throw_velocity(&[(3, Vec3::ONE)], TICK_SECONDS), Vec3::ZERO);
    let same_tick = [(3, Vec3::ZERO), (3, Vec3::ONE)];
    assert_eq!(throw_velocity(&same_tick, TICK_SECONDS), Vec3::ZERO);
}

#[test]
fn a_release_without_a_grab_does_nothing() {
    let mut grab = MouseGrab::<u8>::default();
    let never = |_: PointerRay| -> Option<Hit<u8>> { panic!("no press, no pick") };
    assert_eq!(
        grab.step(1, false, None, Vec3::NEG_Z, never, |_| None),
        GrabStep::Idle
    );
    grab.was_pressed = true;
    assert_eq!(
        grab.step(2, false, None, Vec3::NEG_Z, never, |_| None),
        GrabStep::Idle
    );
}

#[test]
fn press_drag_release_grabs_steers_and_throws() {
    let all = shapes();
    let centre = |id: u8| all.iter().find(|b| b.0 == id).map(|b| b.1.translation);
    let mut grab = MouseGrab::<u8>::default();
    let pick_all = |ray| pick_in(&all, ray);
    let step = grab.step(1, true, Some(ray_at(CENTRE)), Vec3::NEG_Z, pick_all, centre);
    assert_eq!(step, GrabStep::Grab(2));
    let mut last = Vec3::ZERO;
    for tick in 2..=5 {
        let cursor = CENTRE + Vec2::X * 5.0 * (tick - 1) as f32;
        match grab.step(
            tick,
            true,
            Some(ray_at(cursor)),
            Vec3::NEG_Z,
            pick_all,
            centre,
        ) {
            GrabStep::Drag { body: 2, target } => {
                assert!(target.x > last.x, "moving right: {target}");
                assert!(
                    target.z.abs() < 1e-4,
                    "the centre stays in its plane: {target}"
                );
                last = target;
            }
            other => panic!("expected a drag of body 2, got {other:?}"),
        }
    }
    match grab.step(
        6,
        false,
        Some(ray_at(CENTRE)),
        Vec3::NEG_Z,
        pick_all,
        centre,
    ) {
        GrabStep::Throw { body: 2, velocity } => {
            let expected = last.x / (4.0 * TICK_SECONDS);
            assert!(expected < MAX_THROW_SPEED, "not clamped: {expected}");
            assert!(
                (velocity.x - expected).abs() < 1e-3,
                "{velocity} vs {expected}"
            );
        }
        other => panic!("expected a throw of body 2, got {other:?}"),
    }
    assert_eq!(grab.hold, None);
}

#[test]
fn only_the_owner_moves_a_body() {
    let (me, other) = (ParticipantId(1), ParticipantId(2));
    assert!(may_move(Some(me), Some(me)));
    assert!(!may_move(Some(other), Some(me)));
    assert!(!may_move(None, Some(me)));
    assert!(!may_move(None, None));
}

/// One floating box (body 1, no gravity, damped) at the height of the camera's gaze, and the
/// mouse grab on every participant.
fn session() -> OwnershipPeers {
    OwnershipPeers::builder(2)
        .scene(|app| {
            app.world_mut().spawn((
                (BodyNetId(BodyId(1)), Ownable, RigidBody::Dynamic),
                (Collider::cuboid(0.5, 0.5, 0.5), GravityScale(0.0)),
                Damping {
                    linear_damping: 2.0,
                    angular_damping: 2.0,
                },
                Transform::from_xyz(0.0, 0.5, 0.0),
            ));
        })
        .participant(|_, app| {
            app.add_plugins(MouseGrabPlugin);
        })
        .build()
        .expect("both participants join")
}

/// Injects the mouse into participant `index`: the cursor at `cursor`, the button `pressed`.
fn mouse(peers: &mut OwnershipPeers, index: usize, cursor: Vec2, pressed: bool) {
    let app = peers.participant_mut(index).expect("a participant");
    app.insert_resource(PointerInput {
        cursor: Some(cursor),
        grab_pressed: pressed,
        camera: camera(),
    });
}

fn status(peers: &OwnershipPeers, index: usize) -> GrabStatus {
    let app = peers.participant(index).expect("a participant");
    app.world().resource::<GrabStatus>().clone()
}

#[test]
fn a_click_bids_grab_and_a_drag_moves_the_body_on_every_copy() {
    let mut peers = session();
    let me = peers.id_of(0);
    mouse(&mut peers, 0, CENTRE, true);
    peers
        .run_until(64, |p| {
            p.server_owner(BodyId(1)) == me.map(|me| (me, Priority::GRAB))
        })
        .expect("the click's GRAB bid is granted");
    assert_eq!(status(&peers, 0).grabs, 1);
    for step in 1..=16 {
        mouse(&mut peers, 0, CENTRE + Vec2::X * 10.0 * step as f32, true);
        peers.step();
    }
    let mine = peers.body_position(0, BodyId(1)).expect("a copy");
    assert!(mine.x > 1.0, "dragged right: {mine}");
    peers.run(32);
    let theirs = peers.body_position(1, BodyId(1)).expect("a copy");
    assert!(
        theirs.x > 1.0,
        "the other participant sees it moved: {theirs}"
    );
    mouse(&mut peers, 0, CENTRE + Vec2::X * 200.0, false);
    peers.step();
    let after = status(&peers, 0);
    assert_eq!((after.throws, after.held), (1, None));
    let entity = peers.entity(0, BodyId(1)).expect("an entity");
    let app = peers.participant(0).expect("a participant");
    assert!(!app.world().entity(entity).contains::<Held>(), "let go");
}

#[test]
fn a_click_over_nothing_bids_nothing() {
    let mut peers = session();
    mouse(&mut peers, 0, Vec2::new(5.0, 5.0), true);
    peers.run(16);
    assert_eq!(status(&peers, 0).misses, 1);
    assert_eq!(peers.stats(0).map(|s| s.bids_sent), Some(0));
    assert_eq!(peers.server_owner(BodyId(1)), None);
}

#[test]
fn a_refused_grab_is_shown_and_never_moves_the_body() {
    let mut peers = session();
    let holder = peers.id_of(1).expect("joined");
    peers
        .command(1, BodyId(1), |body| {
            body.grab();
        })
        .expect("participant 1 has the body");
    peers
        .run_until(64, |p| {
            p.owner_on(0, BodyId(1))
                .and_then(|o: SimulationOwner| o.owner)
                == Some(holder)
        })
        .expect("participant 0 hears that participant 1 holds it");
    let before = peers.body_position(0, BodyId(1)).expect("a copy");
    for step in 1..=24 {
        mouse(&mut peers, 0, CENTRE + Vec2::X * 10.0 * step as f32, true);
        peers.step();
    }
    let shown = status(&peers, 0);
    let refusal = shown.last_refusal.expect("the grab was refused");
    assert_eq!(shown.refusals, 1);
    assert_eq!(
        (refusal.owner, refusal.priority),
        (Some(holder), Priority::GRAB)
    );
    assert_eq!(refusal.reason, RefusalReason::LockedOutEqualPriority);
    assert_eq!(shown.held, None);
    let after = peers.body_position(0, BodyId(1)).expect("a copy");
    assert!(
        after.distance(before) < 1e-3,
        "not moved: {before} -> {after}"
    );
    assert_eq!(
        peers.server_owner(BodyId(1)),
        Some((holder, Priority::GRAB))
    );
}

#[test]
fn a_cursor_leaving_the_window_keeps_the_last_target() {
    let all = shapes();
    let centre = |id: u8| all.iter().find(|b| b.0 == id).map(|b| b.1.translation);
    let mut grab = MouseGrab::<u8>::default();
    let pick_all = |ray| pick_in(&all, ray);
    grab.step(1, true, Some(ray_at(CENTRE)), Vec3::NEG_Z, pick_all, centre);
    let moved = CENTRE + Vec2::new(40.0, -30.0);
    let GrabStep::Drag { target, .. } =
        grab.step(2, true, Some(ray_at(moved)), Vec3::NEG_Z, pick_all, centre)
    else {
        panic!("expected a drag");
    };
    let outside = grab.step(3, true, None, Vec3::NEG_Z, pick_all, centre);
    assert_eq!(outside, GrabStep::Drag { body: 2, target });
}

#[test]
fn a_body_marked_not_grabbable_is_never_picked() {
    let mut peers = session();
    let entity = peers.entity(0, BodyId(1)).expect("an entity");
    let app = peers.participant_mut(0).expect("a participant");
    app.world_mut().entity_mut(entity).insert(NotGrabbable);
    mouse(&mut peers, 0, CENTRE, true);
    peers.run(16);
    assert_eq!((status(&peers, 0).grabs, status(&peers, 0).misses), (0, 1));
    assert_eq!(peers.stats(0).map(|s| s.bids_sent), Some(0));
}
