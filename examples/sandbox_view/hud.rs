//! The HUD: the session's numbers, from `SessionStats` and the `simsync/session/*`
//! diagnostics; and the screenshot-and-exit of `--screenshot`.

use std::path::PathBuf;
use std::time::Duration;

use bevy::diagnostic::DiagnosticsStore;
use bevy::prelude::*;
use bevy::render::view::screenshot::{Screenshot, save_to_disk};
use bevy::time::Real;
use simsync::deterministic::diagnostics::{BYTES_IN_PER_SECOND, BYTES_OUT_PER_SECOND};
use simsync::ownership::diagnostics::CounterRate;
use simsync::prelude::SessionStats;

/// The HUD, and the screenshot of `--screenshot`.
pub struct HudPlugin {
    /// The tick the verified world stops at (`--ticks`).
    pub stop_tick: i32,
    /// Where to save the screenshot once the verified world reached `stop_tick`.
    pub screenshot: Option<PathBuf>,
}

/// Screenshot state: where, and the frame it was requested at.
#[derive(Resource)]
struct ScreenshotPlan {
    stop_tick: i32,
    path: Option<PathBuf>,
    requested_at: Option<u32>,
}

/// Rollbacks per second and frame-time statistics.
#[derive(Resource)]
struct HudState {
    rollbacks: CounterRate,
    frames: u32,
    frame_time_sum: Duration,
    frame_time_max: Duration,
}

#[derive(Component)]
struct HudText;

impl Plugin for HudPlugin {
    fn build(&self, app: &mut App) {
        app.insert_resource(ScreenshotPlan {
            stop_tick: self.stop_tick,
            path: self.screenshot.clone(),
            requested_at: None,
        })
        .insert_resource(HudState {
            rollbacks: CounterRate::new(Duration::from_secs(1)),
            frames: 0,
            frame_time_sum: Duration::ZERO,
            frame_time_max: Duration::ZERO,
        })
        .add_systems(Startup, spawn_hud)
        .add_systems(Update, (update_hud, screenshot_and_exit).chain());
    }
}

fn spawn_hud(mut commands: Commands) {
    commands.spawn((
        HudText,
        Text::new("simsync"),
        TextFont::from_font_size(18.0),
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

/// The HUD's lines for `stats` (plain function, also printed on exit).
fn hud_lines(stats: &SessionStats, rollbacks_per_second: f64, bytes: (f64, f64)) -> String {
    let net = stats.network.as_ref();
    format!(
        "tick {local}  verified {verified}  predicted {predicted}\n\
         prediction depth {depth} ticks (max {max})\n\
         rollbacks {rollbacks} ({rps:.1}/s)  re-simulated ticks {resim}\n\
         RTT {rtt}  input delay {delay}\n\
         bytes/s up {up:.0}  down {down:.0}\n\
         ownership changes -  (local mode)\n\
         checksum {checksum}",
        local = stats.local_tick,
        verified = stats.verified_tick,
        predicted = stats.predicted_tick,
        depth = stats.predicted_tick - stats.verified_tick,
        max = stats.max_prediction_depth,
        rollbacks = stats.rollbacks,
        rps = rollbacks_per_second,
        resim = stats.resimulated_ticks,
        rtt = net.map_or("- (local)".to_string(), |n| format!("{:.1} ms", n.rtt_ms)),
        delay = net.map_or("-".to_string(), |n| format!(
            "{} ticks",
            n.input_delay_ticks
        )),
        up = bytes.1,
        down = bytes.0,
        checksum = stats
            .last_checksum
            .map_or("-".to_string(), |c| format!("{c:?}")),
    )
}

fn update_hud(
    stats: Option<Res<SessionStats>>,
    diagnostics: Res<DiagnosticsStore>,
    time: Res<Time<Real>>,
    mut state: ResMut<HudState>,
    mut text: Query<&mut Text, With<HudText>>,
) {
    let Some(stats) = stats else {
        return;
    };
    let dt = time.delta();
    state.frames += 1;
    if state.frames > 30 {
        state.frame_time_sum += dt;
        state.frame_time_max = state.frame_time_max.max(dt);
    }
    let per_second = state.rollbacks.update(stats.rollbacks, dt);
    let value = |path| diagnostics.get_measurement(path).map_or(0.0, |m| m.value);
    let bytes = (value(&BYTES_IN_PER_SECOND), value(&BYTES_OUT_PER_SECOND));
    for mut text in &mut text {
        text.0 = hud_lines(&stats, per_second, bytes);
    }
}

/// With `--screenshot`: once the verified world reached the stop tick, request a screenshot,
/// print the HUD's numbers and frame times, and exit a few frames later (the capture is
/// written asynchronously).
fn screenshot_and_exit(
    mut commands: Commands,
    mut plan: ResMut<ScreenshotPlan>,
    stats: Option<Res<SessionStats>>,
    state: Res<HudState>,
    text: Query<&Text, With<HudText>>,
    mut exit: MessageWriter<AppExit>,
) {
    let (Some(path), Some(stats)) = (plan.path.clone(), stats) else {
        return;
    };
    match plan.requested_at {
        None if stats.verified_tick >= plan.stop_tick => {
            commands
                .spawn(Screenshot::primary_window())
                .observe(save_to_disk(path.clone()));
            plan.requested_at = Some(state.frames);
            for text in &text {
                println!("sandbox_view HUD at the stop tick:\n{}", text.0);
            }
            let measured = state.frames.saturating_sub(30).max(1);
            println!(
                "sandbox_view: frames {}, mean frame time {:.2} ms, max {:.2} ms",
                state.frames,
                state.frame_time_sum.as_secs_f64() * 1000.0 / f64::from(measured),
                state.frame_time_max.as_secs_f64() * 1000.0
            );
            println!(
                "sandbox_view: verified {} rollbacks {} resimulated {} last checksum {:?}",
                stats.verified_tick, stats.rollbacks, stats.resimulated_ticks, stats.last_checksum
            );
        }
        Some(at) if state.frames >= at + 20 && path.exists() => {
            println!("sandbox_view: screenshot saved to {}", path.display());
            exit.write(AppExit::Success);
        }
        Some(at) if state.frames >= at + 600 => {
            eprintln!("sandbox_view: no screenshot after 600 frames");
            exit.write(AppExit::from_code(1));
        }
        _ => {}
    }
}
