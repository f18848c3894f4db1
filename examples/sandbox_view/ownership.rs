//! Ownership mode of the view: the run of `sandbox ownership` (entity server and participants,
//! headless Apps stepped once per frame in the headless sandbox's order), drawn as participant
//! 0 sees it: each body coloured by its owner (unowned grey, a colour per participant, brighter
//! while grabbed). Prints the same summary as `sandbox ownership` when the run is done.

use std::time::Duration;

use bevy::prelude::*;
use bevy::time::Real;
use bevy_rapier3d::prelude::Collider;
use simsync::ownership::CounterRate;
use simsync_ownership::{
    BodyId, EntityServer, OwnershipClient, ParticipantId, Priority, SimulationOwner, StateTraffic,
};

use super::cli::OwnershipArgs;
use super::draw::{PLAYER_COLORS, shape};
use super::driver::Failure;
use super::hud::{HudLines, RunFinished, ShotReady};
use super::ownership::in_process::{InProcessRun, Phase, check, finish};
use super::ownership::{LoadedScript, Setup};

/// Unowned bodies.
pub const UNOWNED_COLOR: Color = Color::srgb(0.5, 0.5, 0.52);

/// The colour of a body owned by `owner` (participant ids start at 1), brighter at `GRAB`.
pub fn owner_color(owner: Option<ParticipantId>, priority: Priority) -> Color {
    let Some(owner) = owner else {
        return UNOWNED_COLOR;
    };
    let base = PLAYER_COLORS[usize::from(owner.0.saturating_sub(1)) % PLAYER_COLORS.len()];
    if priority >= Priority::GRAB {
        base.mix(&Color::WHITE, 0.45)
    } else {
        base
    }
}

/// The run and what the view needs of it (main-app non-send resource: an `App` is not `Send`).
struct OwnershipView {
    args: OwnershipArgs,
    setup: Setup,
    run: InProcessRun,
}

/// A main-app entity showing participant 0's copy of `body`.
#[derive(Component, Debug, Clone, Copy)]
struct MirroredBody {
    body: BodyId,
    owner: SimulationOwner,
}

/// Per-second rates for the HUD.
#[derive(Resource)]
struct Rates {
    relayed: CounterRate,
}

/// Adds the ownership run of `args` to the main app.
///
/// # Errors
/// Exit code 2 for bad link settings; 1 if a transport cannot be made.
pub fn add_ownership(
    app: &mut App,
    args: &OwnershipArgs,
    setup: Setup,
    script: LoadedScript,
) -> Result<(), Failure> {
    let run = InProcessRun::new(args, &setup.bodies, script.script, None)?;
    app.insert_non_send(OwnershipView {
        args: args.clone(),
        setup,
        run,
    })
    .insert_resource(Rates {
        relayed: CounterRate::new(Duration::from_secs(1)),
    })
    .add_systems(First, step_run)
    .add_systems(Update, (mirror_bodies, ownership_hud));
    Ok(())
}

/// Steps the run once per frame; at the end of the script the screenshot may be taken (bodies
/// still carried); once done, prints the summary of `sandbox ownership` and keeps the Apps
/// running for the view.
fn step_run(world: &mut World) {
    let Some(mut view) = world.remove_non_send::<OwnershipView>() else {
        return;
    };
    if world.contains_resource::<RunFinished>() {
        view.run.peers.step();
    } else {
        match view.run.advance() {
            Ok(Phase::Settling(_)) if !world.contains_resource::<ShotReady>() => {
                world.insert_resource(ShotReady);
            }
            Ok(Phase::Done(settled)) => {
                let result = finish(&view.args, &mut view.run.peers, &view.setup.bodies, settled)
                    .and_then(|summary| {
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
    }
    world.insert_non_send(view);
}

/// Bodies (avatars not counted) owned by each participant, first participant first, as
/// participant 0 sees them.
fn owned_per_participant(view: &OwnershipView) -> Vec<usize> {
    let mut owned = vec![0; usize::from(view.args.participants)];
    let Some(me) = view.run.peers.participant(0) else {
        return owned;
    };
    let world = me.world();
    let Some(client) = world.get_resource::<OwnershipClient>() else {
        return owned;
    };
    for body in &view.setup.bodies {
        let owner = client
            .entity_of(body.id)
            .and_then(|e| world.get::<SimulationOwner>(e))
            .and_then(|o| o.owner);
        if let Some(n) = owner.and_then(|p| owned.get_mut(usize::from(p.0.saturating_sub(1)))) {
            *n += 1;
        }
    }
    owned
}

/// Spawns one mesh per body of participant 0 (once), then copies its transform and owner
/// colour every frame.
fn mirror_bodies(
    mut commands: Commands,
    view: NonSend<OwnershipView>,
    mut mirrored: Query<(
        &mut MirroredBody,
        &mut Transform,
        &MeshMaterial3d<StandardMaterial>,
    )>,
    mut meshes: ResMut<Assets<Mesh>>,
    mut materials: ResMut<Assets<StandardMaterial>>,
) {
    let Some(participant) = view.run.peers.participant(0) else {
        return;
    };
    let world = participant.world();
    let Some(client) = world.get_resource::<OwnershipClient>() else {
        return;
    };
    if mirrored.is_empty() {
        for body in &view.setup.bodies {
            let Some(entity) = client.entity_of(body.id) else {
                continue;
            };
            let (Some(collider), Some(transform)) = (
                world.get::<Collider>(entity),
                world.get::<Transform>(entity),
            ) else {
                continue;
            };
            let (mesh, _) = shape(collider);
            commands.spawn((
                Mesh3d(meshes.add(mesh)),
                MeshMaterial3d(materials.add(StandardMaterial::from_color(UNOWNED_COLOR))),
                *transform,
                MirroredBody {
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

/// Copies body `body`'s transform in a participant's `world` into `transform` and returns its
/// owner (unowned when it has none); `None` when the participant has no entity for it.
pub fn copy_body(
    world: &World,
    client: &OwnershipClient,
    body: BodyId,
    transform: &mut Transform,
) -> Option<SimulationOwner> {
    let entity = client.entity_of(body)?;
    if let Some(t) = world.get::<Transform>(entity) {
        *transform = *t;
    }
    Some(
        world
            .get::<SimulationOwner>(entity)
            .copied()
            .unwrap_or(SimulationOwner::UNOWNED),
    )
}

/// The HUD's lines from the server's and participant 0's counters.
fn ownership_hud(
    view: NonSend<OwnershipView>,
    time: Res<Time<Real>>,
    finished: Option<Res<RunFinished>>,
    mut rates: ResMut<Rates>,
    mut lines: ResMut<HudLines>,
) {
    if finished.is_some() {
        return;
    }
    let peers = &view.run.peers;
    let server = peers.server().world().resource::<EntityServer>();
    let arbiter = server.arbiter();
    let owned = arbiter
        .records()
        .iter()
        .filter(|r| r.owner.is_some())
        .count();
    let Some(me) = peers.participant(0) else {
        return;
    };
    let client = me.world().resource::<OwnershipClient>();
    let p = client.stats();
    let dt = time.delta();
    let relayed = rates
        .relayed
        .update(server.stats().state_updates_relayed, dt);
    let traffic = me
        .world()
        .get_resource::<StateTraffic>()
        .copied()
        .unwrap_or_default();
    let phase = match view.run.phase {
        Phase::Joining(n) => format!("joining ({n} steps)"),
        Phase::Script(t) => format!("script tick {t}/{}", view.args.run.ticks),
        Phase::Settling(n) => format!("settling ({n} ticks)"),
        Phase::Done(n) => format!("done (settled {n} ticks)"),
    };
    lines.0 = format!(
        "simsync sandbox (ownership, {participants} participants, view of participant {me})\n\
         {phase}\n\
         ownership changes {changes}  owned bodies {owned} (per participant {per})\n\
         bids sent {bids} (all participants {all_bids})  granted {granted}  refused {refused}\n\
         state updates relayed {relayed_total} ({relayed:.0}/s)\n\
         state bytes/s up {up:.0} down {down:.0}, {per_body:.1} B/body, upload budget {budget:.0} %\n\
         colours: grey unowned, one per participant, brighter while grabbed",
        participants = view.args.participants,
        me = client.me().map_or("-".to_string(), |id| id.0.to_string()),
        changes = arbiter.stats().ownership_changes,
        per = owned_per_participant(&view)
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(" / "),
        bids = p.bids_sent,
        all_bids = (0..peers.len())
            .filter_map(|i| peers.stats(i))
            .map(|s| s.bids_sent)
            .sum::<u64>(),
        granted = server.stats().bids_granted,
        refused = server.stats().bids_refused.total(),
        relayed_total = server.stats().state_updates_relayed,
        up = traffic.bytes_up_per_second,
        down = traffic.bytes_down_per_second,
        per_body = traffic.bytes_per_body,
        budget = traffic.budget_use * 100.0,
    );
}
