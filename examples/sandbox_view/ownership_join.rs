//! `join --ownership`: one participant of an ownership room over UDP (`sandbox serve
//! --ownership`, or a dedicated server's ownership room with `--token`), rendered, with the
//! mouse: click a body to grab it (GRAB bid), drag it, release to throw it. Bodies are coloured
//! by owner (as in the ownership mode); a refused grab flashes the body red and names its owner
//! on the HUD.
//!
//! The participant App (its own Rapier world) is stepped in real time, 64 ticks per second of
//! wall time (at most [`MAX_STEPS_PER_FRAME`] a frame, all with the frame's mouse), as `sandbox join --ownership` paces it.
//! With `--trace` the participant also plays its part of that script; without, only the mouse
//! moves bodies. After `--ticks` ticks (and `--settle-seconds`) it prints the same counters as
//! the headless `join`, leaves and keeps the window open (with `--screenshot`: exits).

use std::time::Duration;

use bevy::prelude::*;
use bevy::time::Real;
use simsync_net::prelude::RenetClient;
use simsync_ownership::{BodyId, OwnershipClient, SimulationOwner, StateTraffic};

use super::cli::JoinArgs;
use super::draw::shape;
use super::driver::Failure;
use super::grab::{PointerPlugin, PointerSet, REFUSED_COLOR, draw_grab, flashing, grab_lines};
use super::grab_rules::{GrabStatus, MouseGrabPlugin, NotGrabbable, PointerInput};
use super::hud::{HudLines, RunFinished, ShotReady};
use super::ownership::actors::stop_script;
use super::ownership::bodies::AvatarBody;
use super::ownership::udp::{connect_participant, finish_participant, has_ended, start_script};
use super::ownership::{DT, JOIN_STEPS, NetBody, Setup, settle_ticks};
use super::ownership_view::{copy_body, owner_color};

/// Most participant ticks stepped in one frame: a second's worth, so a slow frame (a software
/// renderer, a busy machine) is caught up on and the session keeps real time; a longer stall
/// drops the rest of the backlog.
pub const MAX_STEPS_PER_FRAME: u32 = 64;

/// Where the participant's session is; each holds the ticks stepped in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinPhase {
    /// Waiting for the entity server's welcome (at most `JOIN_STEPS`).
    Joining(u32),
    /// Playing: mouse (and script with `--trace`) for `--ticks` ticks.
    Playing(u32),
    /// The script stopped; `--settle-seconds` more before leaving.
    Settling(u32),
    /// Left (or failed); the participant is no longer stepped.
    Done,
}

/// The participant and what the view needs of it (main-app non-send resource).
struct JoinRun {
    args: JoinArgs,
    app: App,
    server: std::net::SocketAddr,
    bodies: Vec<NetBody>,
    phase: JoinPhase,
    scripted: bool,
    /// Wall time not yet stepped.
    backlog: Duration,
}

/// A main-app entity showing this participant's copy of `body`.
#[derive(Component, Debug, Clone, Copy)]
struct ShownBody {
    body: BodyId,
    owner: SimulationOwner,
    flashing: bool,
}

/// Adds `join --ownership` (`args`) to the main app: connects, then steps and draws the
/// participant.
///
/// # Errors
/// Exit code 2 for bad files, a bad `--participant-index` or a socket that cannot be opened.
pub fn add_ownership_join(app: &mut App, args: &JoinArgs) -> Result<(), Failure> {
    let setup = Setup::load(args.scene.as_deref(), args.participants)?;
    let participant = connect_participant(args, None)?;
    let mut participant_app = participant.app;
    participant_app.add_plugins(MouseGrabPlugin);
    let world = participant_app.world_mut();
    let avatars: Vec<Entity> = world
        .query_filtered::<Entity, With<AvatarBody>>()
        .iter(world)
        .collect();
    for avatar in avatars {
        world.entity_mut(avatar).insert(NotGrabbable);
    }
    app.insert_non_send(JoinRun {
        args: args.clone(),
        app: participant_app,
        server: participant.server,
        bodies: setup.bodies,
        phase: JoinPhase::Joining(0),
        scripted: args.trace.is_some(),
        backlog: Duration::ZERO,
    })
    .add_plugins(PointerPlugin)
    .add_systems(PreUpdate, step_join.after(PointerSet))
    .add_systems(Update, (show_bodies, join_hud));
    Ok(())
}

/// The app exits (the window closed, a rendering error) before the session's end: leave it
/// cleanly, so the entity server frees this participant's bodies at once instead of after its
/// silence timeout.
impl Drop for JoinRun {
    fn drop(&mut self) {
        if self.phase == JoinPhase::Done {
            return;
        }
        self.phase = JoinPhase::Done;
        if let Err(failure) = finish_participant(&self.args, &mut self.app) {
            eprintln!("sandbox_view: {}", failure.message);
        }
    }
}

/// Steps the participant for the wall time passed (64 Hz), with the window's mouse.
fn step_join(world: &mut World) {
    let Some(mut run) = world.remove_non_send::<JoinRun>() else {
        return;
    };
    let dt = world.resource::<Time<Real>>().delta();
    run.backlog = (run.backlog + dt).min(DT * MAX_STEPS_PER_FRAME);
    if let Some(pointer) = world.get_resource::<PointerInput>().copied() {
        run.app.insert_resource(pointer);
    }
    while run.backlog >= DT && run.phase != JoinPhase::Done {
        run.backlog -= DT;
        if let Some(end) = advance(&mut run) {
            world.insert_resource(ShotReady);
            world.insert_resource(RunFinished { ok: end.is_ok() });
            if let Err(failure) = end {
                eprintln!("sandbox_view: {}", failure.message);
            }
        }
        if run.phase == JoinPhase::Settling(1) {
            world.insert_resource(ShotReady);
        }
    }
    world.insert_non_send(run);
}

/// One tick of the session; `Some` once it ended (ok, or why not).
fn advance(run: &mut JoinRun) -> Option<Result<(), Failure>> {
    let ticks = run.args.run.ticks;
    let settle = settle_ticks(run.args.settle_seconds);
    run.phase = match run.phase {
        JoinPhase::Joining(_) if joined(&run.app) => {
            if run.scripted {
                start_script(&mut run.app);
            }
            JoinPhase::Playing(0)
        }
        JoinPhase::Joining(n) if n >= JOIN_STEPS => {
            run.phase = JoinPhase::Done;
            return Some(Err(Failure::run(format!(
                "no answer from the entity server at {} in 10 s",
                run.server
            ))));
        }
        JoinPhase::Joining(n) => JoinPhase::Joining(n + 1),
        JoinPhase::Playing(t) if t >= ticks || has_ended(&run.app) => {
            stop_script(&mut run.app);
            JoinPhase::Settling(0)
        }
        JoinPhase::Playing(t) => JoinPhase::Playing(t + 1),
        JoinPhase::Settling(n) if n >= settle || has_ended(&run.app) => {
            run.phase = JoinPhase::Done;
            return Some(finish_participant(&run.args, &mut run.app));
        }
        JoinPhase::Settling(n) => JoinPhase::Settling(n + 1),
        JoinPhase::Done => return None,
    };
    run.app.update();
    None
}

fn joined(app: &App) -> bool {
    app.world().resource::<OwnershipClient>().me().is_some()
}

/// Spawns one mesh per body (once), then copies each body's transform and owner colour
/// every frame (a refused body flashes red), and draws the grab.
fn show_bodies(
    mut commands: Commands,
    run: NonSend<JoinRun>,
    mut shown: Query<(
        &mut ShownBody,
        &mut Transform,
        &MeshMaterial3d<StandardMaterial>,
    )>,
    mut meshes: ResMut<Assets<Mesh>>,
    mut materials: ResMut<Assets<StandardMaterial>>,
    mut gizmos: Gizmos,
) {
    let world = run.app.world();
    let client = world.resource::<OwnershipClient>();
    let status = world.get_resource::<GrabStatus>();
    if shown.is_empty() {
        for body in &run.bodies {
            let (mesh, _) = shape(&body.collider);
            commands.spawn((
                Mesh3d(meshes.add(mesh)),
                MeshMaterial3d(materials.add(StandardMaterial::from_color(owner_color(
                    None,
                    Default::default(),
                )))),
                body.transform,
                ShownBody {
                    body: body.id,
                    owner: SimulationOwner::UNOWNED,
                    flashing: false,
                },
            ));
        }
        return;
    }
    let refused = status
        .and_then(|s| s.last_refusal.filter(|r| flashing(r.tick, s.tick)))
        .map(|r| r.body.0);
    let mut held_at = None;
    for (mut body, mut transform, material) in &mut shown {
        let Some(owner) = copy_body(world, client, body.body, &mut transform) else {
            continue;
        };
        if status
            .and_then(|s| s.held)
            .is_some_and(|(e, _)| Some(e) == client.entity_of(body.body))
        {
            held_at = Some(transform.translation);
        }
        let flash = refused == Some(body.body);
        if owner != body.owner || flash != body.flashing {
            body.owner = owner;
            body.flashing = flash;
            if let Some(mut m) = materials.get_mut(&material.0) {
                m.base_color = if flash {
                    REFUSED_COLOR
                } else {
                    owner_color(owner.owner, owner.priority)
                };
            }
        }
    }
    if let Some(status) = status {
        draw_grab(&mut gizmos, status, held_at);
    }
}

/// The HUD: the session, its counters and the mouse.
fn join_hud(run: NonSend<JoinRun>, mut lines: ResMut<HudLines>) {
    let world = run.app.world();
    let client = world.resource::<OwnershipClient>();
    let p = client.stats();
    let traffic = world
        .get_resource::<StateTraffic>()
        .copied()
        .unwrap_or_default();
    let rtt = world
        .get_resource::<RenetClient>()
        .map_or(0.0, |c| c.rtt() * 1000.0);
    let phase = match run.phase {
        JoinPhase::Joining(n) => format!("joining {} ({n} ticks)", run.server),
        JoinPhase::Playing(t) => format!("playing tick {t}/{}", run.args.run.ticks),
        JoinPhase::Settling(n) => format!("settling ({n} ticks)"),
        JoinPhase::Done => "left the session".to_string(),
    };
    let mouse = world
        .get_resource::<GrabStatus>()
        .map(grab_lines)
        .unwrap_or_default();
    lines.0 = format!(
        "simsync sandbox (join --ownership, script participant {index}, participant id {me})\n\
         {phase}  RTT {rtt:.0} ms\n\
         bids sent {bids} granted {granted} refused {refused}  relayed states applied {relays}\n\
         state bytes/s up {up:.0} down {down:.0}\n\
         {mouse}\n\
         click a body: grab (GRAB bid); drag; release: throw\n\
         colours: grey unowned, one per participant, brighter while grabbed, red: grab refused",
        index = run.args.participant_index,
        me = client.me().map_or("-".to_string(), |id| id.0.to_string()),
        bids = p.bids_sent,
        granted = p.grants_received,
        refused = p.refusals_received,
        relays = p.relays_applied,
        up = traffic.bytes_up_per_second,
        down = traffic.bytes_down_per_second,
    );
}
