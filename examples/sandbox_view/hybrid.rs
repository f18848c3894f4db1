//! Hybrid mode of the view: the run of `sandbox hybrid` (relay, entity server and one App per
//! player, stepped once per frame in the headless sandbox's order),
//! drawn as peer 0 sees it: the props of its world coloured by owner (unowned grey, a colour
//! per participant, brighter while grabbed), the players of its predicted world in their
//! colours. Prints the same summary as `sandbox hybrid` when the run is done.

use bevy::prelude::*;
use bevy_rapier3d::prelude::Collider;
use simsync::hybrid::{HybridStats, VerifiedProps};
use simsync::prelude::SimulationWorlds;
use simsync_ownership::{BodyId, EntityServer, OwnershipClient, SimulationOwner};

use super::cli::HybridArgs;
use super::draw::{PLAYER_COLORS, shape};
use super::driver::Failure;
use super::game::PlayerBody;
use super::hud::{HudLines, RunFinished, ShotReady};
use super::hybrid::Setup;
use super::hybrid::run::HybridRun;
use super::hybrid::summary::{check, summarize};
use super::ownership::in_process::Phase;
use super::ownership_view::{UNOWNED_COLOR, copy_body, owner_color};

/// Ground and ramps.
const STATIC_COLOR: Color = Color::srgb(0.28, 0.3, 0.27);

/// The run and what the view needs of it (main-app non-send resource: an `App` is not `Send`).
struct HybridView {
    args: HybridArgs,
    setup: Setup,
    run: HybridRun,
}

/// A main-app entity showing peer 0's copy of prop `body`.
#[derive(Component, Debug, Clone, Copy)]
struct MirroredProp {
    body: BodyId,
    owner: SimulationOwner,
}

/// A main-app entity showing player `0` of peer 0's predicted world.
#[derive(Component, Debug, Clone, Copy)]
struct ShownPlayer(u8);

/// Adds the hybrid run of `args` to the main app.
///
/// # Errors
/// Exit code 2 for bad link settings; 1 if an App cannot be made.
pub fn add_hybrid(app: &mut App, args: &HybridArgs, setup: Setup) -> Result<(), Failure> {
    let run = HybridRun::new(args, &setup, None)?;
    app.insert_non_send(HybridView {
        args: args.clone(),
        setup,
        run,
    })
    .add_systems(First, step_run)
    .add_systems(Update, (mirror_props, show_players, hybrid_hud));
    Ok(())
}

/// Steps the run once per frame; at the end of the script the screenshot may be taken; once
/// done, prints the summary of `sandbox hybrid` and keeps the Apps running for the view.
fn step_run(world: &mut World) {
    let Some(mut view) = world.remove_non_send::<HybridView>() else {
        return;
    };
    let outcome = if world.contains_resource::<RunFinished>() {
        view.run.step().map(|()| view.run.phase)
    } else {
        view.run.advance()
    };
    match outcome {
        Ok(Phase::Settling(_)) if !world.contains_resource::<ShotReady>() => {
            world.insert_resource(ShotReady);
        }
        Ok(Phase::Done(settled)) if !world.contains_resource::<RunFinished>() => {
            let result =
                summarize(&view.args, &mut view.run, &view.setup, settled).and_then(|summary| {
                    println!("{}", summary.to_text());
                    check(&summary)
                });
            if let Err(failure) = &result {
                eprintln!("sandbox_view: {}", failure.message);
            }
            world.insert_resource(ShotReady);
            world.insert_resource(RunFinished { ok: result.is_ok() });
        }
        Ok(_) => {}
        Err(failure) => {
            eprintln!("sandbox_view: {}", failure.message);
            world.insert_resource(ShotReady);
            world.insert_resource(RunFinished { ok: false });
        }
    }
    world.insert_non_send(view);
}

/// Spawns one mesh per body of peer 0's world (once), then copies each prop's transform and
/// owner colour every frame.
fn mirror_props(
    mut commands: Commands,
    view: NonSend<HybridView>,
    mut mirrored: Query<(
        &mut MirroredProp,
        &mut Transform,
        &MeshMaterial3d<StandardMaterial>,
    )>,
    mut meshes: ResMut<Assets<Mesh>>,
    mut materials: ResMut<Assets<StandardMaterial>>,
) {
    let Ok(app) = view.run.peers.client(0) else {
        return;
    };
    let world = app.world();
    let Some(client) = world.get_resource::<OwnershipClient>() else {
        return;
    };
    if mirrored.is_empty() {
        for body in &view.setup.bodies {
            let Some(entity) = client.entity_of(body.id) else {
                // Ground and ramps: not registered with ownership, drawn where they stand.
                commands.spawn((
                    Mesh3d(meshes.add(shape(&body.collider).0)),
                    MeshMaterial3d(materials.add(StandardMaterial::from_color(STATIC_COLOR))),
                    body.transform,
                ));
                continue;
            };
            let (Some(collider), Some(transform)) = (
                world.get::<Collider>(entity),
                world.get::<Transform>(entity),
            ) else {
                continue;
            };
            commands.spawn((
                Mesh3d(meshes.add(shape(collider).0)),
                MeshMaterial3d(materials.add(StandardMaterial::from_color(UNOWNED_COLOR))),
                *transform,
                MirroredProp {
                    body: body.id,
                    owner: SimulationOwner::UNOWNED,
                },
            ));
        }
        return;
    }
    for (mut shown, mut transform, material) in &mut mirrored {
        let Some(owner) = copy_body(world, client, shown.body, &mut transform) else {
            continue;
        };
        if owner != shown.owner {
            shown.owner = owner;
            if let Some(mut m) = materials.get_mut(&material.0) {
                m.base_color = owner_color(owner.owner, owner.priority);
            }
        }
    }
}

/// Draws the players of peer 0's predicted world, one sphere each in its player's colour.
fn show_players(
    mut commands: Commands,
    view: NonSend<HybridView>,
    mut shown: Query<(&ShownPlayer, &mut Transform)>,
    mut meshes: ResMut<Assets<Mesh>>,
    mut materials: ResMut<Assets<StandardMaterial>>,
) {
    let Ok(app) = view.run.peers.client(0) else {
        return;
    };
    let Some(worlds) = app.world().get_resource::<SimulationWorlds>() else {
        return;
    };
    let players: Vec<(u8, Transform, Option<&Collider>)> = worlds
        .predicted()
        .iter_entities()
        .filter_map(|e| {
            let body = e.get::<PlayerBody>()?;
            Some((body.player, *e.get::<Transform>()?, e.get::<Collider>()))
        })
        .collect();
    if shown.is_empty() {
        for (player, transform, collider) in players {
            let mesh = collider.map_or(Sphere::new(0.5).into(), |c| shape(c).0);
            let color = PLAYER_COLORS[usize::from(player) % PLAYER_COLORS.len()];
            commands.spawn((
                Mesh3d(meshes.add(mesh)),
                MeshMaterial3d(materials.add(StandardMaterial::from_color(color))),
                transform,
                ShownPlayer(player),
            ));
        }
        return;
    }
    for (ShownPlayer(player), mut transform) in &mut shown {
        if let Some((_, t, _)) = players.iter().find(|(p, ..)| p == player) {
            *transform = *t;
        }
    }
}

/// The HUD's lines from peer 0's session and participant, and the entity server.
fn hybrid_hud(
    view: NonSend<HybridView>,
    finished: Option<Res<RunFinished>>,
    mut lines: ResMut<HudLines>,
) {
    if finished.is_some() {
        return;
    }
    let run = &view.run;
    let (Ok(stats), Ok(app)) = (run.peers.players().stats(0), run.peers.client(0)) else {
        return;
    };
    let carried = app
        .world()
        .get_resource::<VerifiedProps>()
        .map_or(0, |v| v.carried);
    let left_out = app
        .world()
        .get_resource::<HybridStats>()
        .map_or(0, |h| h.props_left_out);
    let players: Vec<String> = app
        .world()
        .get_resource::<SimulationWorlds>()
        .map(|worlds| {
            worlds
                .predicted()
                .iter_entities()
                .filter_map(|e| Some((e.get::<PlayerBody>()?.player, e.get::<Transform>()?)))
                .map(|(p, t)| format!("{p} ({:.1}, {:.1})", t.translation.x, t.translation.z))
                .collect()
        })
        .unwrap_or_default();
    let Some(server) = run
        .peers
        .entity_server()
        .and_then(|s| s.world().get_resource::<EntityServer>())
    else {
        return;
    };
    let p = run
        .peers
        .ownership_client(0)
        .map(|c| *c.stats())
        .unwrap_or_default();
    let phase = match run.phase {
        Phase::Joining(n) => format!("joining ({n} steps)"),
        Phase::Script(t) => format!("frame {t}, trace until tick {}", view.args.ticks),
        Phase::Settling(n) => format!("settling ({n} ticks)"),
        Phase::Done(n) => format!("done (settled {n} ticks)"),
    };
    lines.0 = format!(
        "simsync sandbox (hybrid, {players} players rolled back, {props} props owned; peer 0)\n\
         {phase}\n\
         players: verified tick {verified}  predicted {predicted}  rollbacks {rollbacks}\n\
         players at {at}\n\
         props: carried by verified ticks {carried} ({left_out} left out)  owned now {owned}\n\
         props: ownership changes {changes}  peer 0 bids {bids}, granted {grants}\n\
         colours: players theirs; props grey unowned, one per participant, brighter while grabbed",
        players = view.setup.players,
        props = view.setup.kinds.len(),
        verified = stats.verified_tick,
        predicted = stats.predicted_tick,
        rollbacks = stats.rollbacks,
        at = players.join(", "),
        owned = run.props_owned(),
        changes = server.arbiter().stats().ownership_changes,
        bids = p.bids_sent,
        grants = p.grants_received,
    );
}
