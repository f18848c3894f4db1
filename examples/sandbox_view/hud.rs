//! The HUD (lines the mode writes into [`HudLines`]), frame-time statistics, and the
//! screenshot-and-exit of `--screenshot`.

use std::path::PathBuf;
use std::time::Duration;

use bevy::prelude::*;
use bevy::render::view::screenshot::{Screenshot, save_to_disk};
use bevy::time::Real;
use bevy::window::PrimaryWindow;

/// Frames left out of the frame-time statistics (start-up: shader compilation, first uploads).
const WARM_UP_FRAMES: u32 = 30;
/// Frames to wait for the screenshot file before giving up.
const SCREENSHOT_TIMEOUT_FRAMES: u32 = 600;

/// The HUD's text, written by the mode every frame.
#[derive(Resource, Default, Debug, Clone)]
pub struct HudLines(pub String);

/// Inserted by the mode once the screenshot may be taken (local, network: the run finished;
/// ownership: the script ended, bodies still carried).
#[derive(Resource, Debug, Clone, Copy)]
pub struct ShotReady;

/// Inserted by the mode once the simulation started (the deterministic modes: the verified
/// world passed tick 0), for `--start-screenshot`.
#[derive(Resource, Debug, Clone, Copy)]
pub struct StartShotReady;

/// Inserted by the mode once the run finished and its summary was printed; `ok` is false when
/// a check failed (the exit code is then 1).
#[derive(Resource, Debug, Clone, Copy)]
pub struct RunFinished {
    /// Whether every check of the run passed.
    pub ok: bool,
}

/// The HUD, frame times and `--screenshot`.
pub struct HudPlugin {
    /// Where to save the screenshot (then exit once the run finished); `None`: keep running.
    pub screenshot: Option<PathBuf>,
    /// Where to save a screenshot once the simulation started ([`StartShotReady`]).
    pub start_screenshot: Option<PathBuf>,
}

/// `--start-screenshot`: where, the frame [`StartShotReady`] came at, and whether the
/// screenshot was requested.
#[derive(Resource)]
struct StartShotPlan {
    path: Option<PathBuf>,
    ready_at: Option<u32>,
    requested: bool,
}

/// Frames between [`StartShotReady`] and the start screenshot: the bodies spawned with the
/// simulation are drawn by then.
const START_SHOT_DELAY_FRAMES: u32 = 2;

/// Screenshot state: where, and the frame it was requested at.
#[derive(Resource)]
struct ScreenshotPlan {
    path: Option<PathBuf>,
    requested_at: Option<u32>,
}

/// Frame-time statistics (after the warm-up frames).
#[derive(Resource, Default, Debug, Clone, Copy, PartialEq)]
pub struct FrameTimes {
    /// Frames rendered.
    pub frames: u32,
    /// Sum of the measured frame times.
    pub sum: Duration,
    /// Longest measured frame time.
    pub max: Duration,
}

impl FrameTimes {
    /// Adds one frame of `dt`.
    pub fn add(&mut self, dt: Duration) {
        self.frames += 1;
        if self.frames > WARM_UP_FRAMES {
            self.sum += dt;
            self.max = self.max.max(dt);
        }
    }

    /// Mean measured frame time in milliseconds (0 before any frame was measured).
    pub fn mean_ms(&self) -> f64 {
        let measured = self.frames.saturating_sub(WARM_UP_FRAMES);
        if measured == 0 {
            return 0.0;
        }
        self.sum.as_secs_f64() * 1000.0 / f64::from(measured)
    }

    /// One line for stdout.
    pub fn summary_line(&self) -> String {
        format!(
            "sandbox_view: frames {}, mean frame time {:.2} ms, max {:.2} ms (first {} frames not \
             counted)",
            self.frames,
            self.mean_ms(),
            self.max.as_secs_f64() * 1000.0,
            WARM_UP_FRAMES
        )
    }
}

#[derive(Component)]
struct HudText;

impl Plugin for HudPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(ScreenshotPlan {
            path: self.screenshot.clone(),
            requested_at: None,
        })
        .insert_resource(StartShotPlan {
            path: self.start_screenshot.clone(),
            ready_at: None,
            requested: false,
        })
        .init_resource::<HudLines>()
        .init_resource::<FrameTimes>()
        .add_systems(Startup, spawn_hud)
        .add_systems(PostUpdate, show_hud)
        .add_systems(Last, (start_screenshot, screenshot_and_exit));
    }
}

/// The HUD's font size for a window `height` pixels high: 18 at 720 (the default window),
/// scaled with the height from 9 (360 and less) to 36, so a small window keeps its view clear.
pub fn hud_font_size(height: f32) -> f32 {
    (18.0 * height / 720.0).clamp(9.0, 36.0)
}

fn spawn_hud(mut commands: Commands, windows: Query<&Window, With<PrimaryWindow>>) {
    let height = windows.iter().next().map_or(720.0, Window::height);
    commands.spawn((
        HudText,
        Text::new("simsync"),
        TextFont::from_font_size(hud_font_size(height)),
        TextColor(Color::WHITE),
        BackgroundColor(Color::srgba(0.0, 0.0, 0.0, 0.6)),
        Node {
            position_type: PositionType::Absolute,
            top: px(8),
            left: px(8),
            padding: UiRect::all(px(8)),
            ..default()
        },
    ));
}

fn show_hud(
    lines: Res<HudLines>,
    time: Res<Time<Real>>,
    mut frames: ResMut<FrameTimes>,
    mut text: Query<&mut Text, With<HudText>>,
) {
    frames.add(time.delta());
    if lines.is_changed() {
        for mut text in &mut text {
            text.0.clone_from(&lines.0);
        }
    }
}

/// With `--start-screenshot`: [`START_SHOT_DELAY_FRAMES`] frames after the mode said the
/// simulation started ([`StartShotReady`]), requests a screenshot of the window (once).
fn start_screenshot(
    mut commands: Commands,
    mut plan: ResMut<StartShotPlan>,
    ready: Option<Res<StartShotReady>>,
    frames: Res<FrameTimes>,
) {
    if plan.requested || ready.is_none() {
        return;
    }
    let Some(path) = plan.path.clone() else {
        return;
    };
    let ready_at = *plan.ready_at.get_or_insert(frames.frames);
    if frames.frames < ready_at + START_SHOT_DELAY_FRAMES {
        return;
    }
    println!("sandbox_view: start screenshot to {}", path.display());
    commands
        .spawn(Screenshot::primary_window())
        .observe(save_to_disk(path));
    plan.requested = true;
}

/// With `--screenshot`: once the mode says so ([`ShotReady`]), request a screenshot and print
/// the HUD's lines and frame times; exit once the file is written and the run finished.
fn screenshot_and_exit(
    mut commands: Commands,
    mut plan: ResMut<ScreenshotPlan>,
    ready: Option<Res<ShotReady>>,
    finished: Option<Res<RunFinished>>,
    frames: Res<FrameTimes>,
    lines: Res<HudLines>,
    mut exit: MessageWriter<AppExit>,
) {
    let Some(path) = plan.path.clone() else {
        return;
    };
    match plan.requested_at {
        None if ready.is_some() => {
            commands
                .spawn(Screenshot::primary_window())
                .observe(save_to_disk(path));
            plan.requested_at = Some(frames.frames);
            println!("sandbox_view HUD at the screenshot:\n{}", lines.0);
            println!("{}", frames.summary_line());
        }
        Some(at) if frames.frames >= at + 20 && path.exists() => {
            if let Some(finished) = finished {
                println!("sandbox_view: screenshot saved to {}", path.display());
                println!("{}", frames.summary_line());
                exit.write(if finished.ok {
                    AppExit::Success
                } else {
                    AppExit::from_code(1)
                });
            }
        }
        Some(at) if frames.frames >= at + SCREENSHOT_TIMEOUT_FRAMES && !path.exists() => {
            eprintln!("sandbox_view: no screenshot after {SCREENSHOT_TIMEOUT_FRAMES} frames");
            exit.write(AppExit::from_code(1));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hud_font_follows_the_window_height_within_bounds() {
        assert_eq!(hud_font_size(720.0), 18.0);
        assert_eq!(hud_font_size(450.0), 11.25);
        assert_eq!(hud_font_size(200.0), 9.0);
        assert_eq!(hud_font_size(2160.0), 36.0);
    }

    #[test]
    fn frame_times_leave_out_the_warm_up_frames() {
        let mut times = FrameTimes::default();
        for _ in 0..WARM_UP_FRAMES {
            times.add(Duration::from_millis(500));
        }
        assert_eq!(times.mean_ms(), 0.0);
        times.add(Duration::from_millis(10));
        times.add(Duration::from_millis(30));
        assert_eq!(times.mean_ms(), 20.0);
        assert_eq!(times.max, Duration::from_millis(30));
    }
}
