//! The mouse of `join --ownership`: [`PointerInput`] from the window (cursor, left button) and
//! the camera, for the participant App's [`MouseGrabPlugin`](super::grab_rules::MouseGrabPlugin);
//! the grab drawn (target, line to the body) and described for the HUD.

use bevy::input::InputSystems;
use bevy::prelude::*;
use bevy::window::PrimaryWindow;

use super::grab_rules::{GrabStatus, PointerInput, ViewCamera};

/// Ticks a refused body flashes for (1/64 s each).
pub const REFUSAL_FLASH_TICKS: u32 = 48;
/// The colour of a refused grab's flash.
pub const REFUSED_COLOR: Color = Color::srgb(1.0, 0.1, 0.1);

/// Writes [`PointerInput`] (main-app resource) in `PreUpdate`, after Bevy's input systems, in
/// [`PointerSet`].
pub struct PointerPlugin;

/// Where [`PointerInput`] is written: systems reading it run after.
#[derive(SystemSet, Debug, Clone, PartialEq, Eq, Hash)]
pub struct PointerSet;

impl Plugin for PointerPlugin {
    fn build(&self, app: &mut App) {
        app.add_systems(
            PreUpdate,
            feed_pointer.in_set(PointerSet).after(InputSystems),
        );
    }
}

/// The cursor, the left button and the 3D camera, as the participant App's rules see them.
fn feed_pointer(
    mut commands: Commands,
    window: Option<Single<&Window, With<PrimaryWindow>>>,
    camera: Option<Single<(&Projection, &GlobalTransform), With<Camera3d>>>,
    buttons: Res<ButtonInput<MouseButton>>,
) {
    let (Some(window), Some(camera)) = (window, camera) else {
        return;
    };
    let (projection, at) = *camera;
    let fov_y = match projection {
        Projection::Perspective(p) => p.fov,
        _ => return,
    };
    commands.insert_resource(PointerInput {
        cursor: window.cursor_position(),
        grab_pressed: buttons.pressed(MouseButton::Left),
        camera: ViewCamera {
            transform: at.compute_transform(),
            fov_y,
            viewport: Vec2::new(window.width(), window.height()),
        },
    });
}

/// Whether a body refused at `refused_tick` still flashes at `tick`.
pub fn flashing(refused_tick: u32, tick: u32) -> bool {
    tick.saturating_sub(refused_tick) < REFUSAL_FLASH_TICKS
}

/// The HUD's lines about the mouse.
pub fn grab_lines(status: &GrabStatus) -> String {
    let held = match status.held {
        Some((_, id)) if status.owned => format!("holding body {} (owned, GRAB)", id.0.0),
        Some((_, id)) => format!(
            "grabbing body {} (GRAB bid, waiting for the server)",
            id.0.0
        ),
        None => "nothing held".to_string(),
    };
    let refused = match status.last_refusal {
        Some(r) if flashing(r.tick, status.tick) => format!(
            "\nGRAB REFUSED: body {} owned by participant {} at priority {}: {}",
            r.body.0.0,
            r.owner.map_or("-".to_string(), |p| p.0.to_string()),
            r.priority,
            r.reason
        ),
        _ => String::new(),
    };
    format!(
        "mouse: {held}; grabs {} misses {} throws {} (last {:.1} m/s) refused {}{refused}",
        status.grabs, status.misses, status.throws, status.last_throw_speed, status.refusals,
    )
}

/// The held body's drag target and a line from the body to it.
pub fn draw_grab(gizmos: &mut Gizmos, status: &GrabStatus, body_at: Option<Vec3>) {
    let (Some(target), Some(at)) = (status.target, body_at) else {
        return;
    };
    let colour = if status.owned {
        Color::WHITE
    } else {
        Color::srgb(1.0, 0.8, 0.2)
    };
    gizmos.sphere(Isometry3d::from_translation(target), 0.15, colour);
    gizmos.line(at, target, colour);
}
