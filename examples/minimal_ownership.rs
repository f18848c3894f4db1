//! The smallest simulation-ownership app: an entity server and two participants, each its own
//! Bevy App with its own Rapier world, over the in-memory transport in this process. The first
//! participant grabs box 1 and lets go; the second pokes box 2. Each participant prints the
//! ownership changes it hears of (priority 128 is GRAB, 127 POKE).
//!
//! ```text
//! cargo run --ignore-rust-version --example minimal_ownership
//! ```

use std::time::Duration;

use bevy::prelude::*;
use bevy_rapier3d::prelude::*;
use simsync::net::{
    MemoryNetwork, NetAppExt, NetClientPlugin, NetClock, NetError, NetServerPlugin,
};
use simsync::ownership::prelude::*;

/// One step of simulated time: every App (network clock and physics) steps the same 1/64 s.
const DT: Duration = Duration::from_micros(15_625);
const STEPS: u32 = 400;
/// The ground (fixed, id 0) and three boxes resting on it: `(id, kind, centre, half extents)`.
#[rustfmt::skip]
const BODIES: [(u64, RigidBody, Vec3, Vec3); 4] = [
    (0, RigidBody::Fixed, Vec3::new(0.0, -0.5, 0.0), Vec3::new(10.0, 0.5, 10.0)),
    (1, RigidBody::Dynamic, Vec3::new(-2.0, 0.25, 0.0), Vec3::splat(0.25)),
    (2, RigidBody::Dynamic, Vec3::new(0.0, 0.25, 0.0), Vec3::splat(0.25)),
    (3, RigidBody::Dynamic, Vec3::new(2.0, 0.25, 0.0), Vec3::splat(0.25)),
];

#[derive(Clone, Copy)]
enum Act {
    Grab,
    Release,
    /// Change the body's velocity (m/s): a script edit, so the participant bids POKE.
    Poke(Vec3),
}

/// A participant's script: `(step, body id, act)`.
#[derive(Resource)]
struct Script(Vec<(u32, u64, Act)>);

fn server_app(network: &MemoryNetwork) -> Result<App, NetError> {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins)
        .add_plugins(NetServerPlugin::default().with_clock(NetClock::Fixed(DT)))
        .add_plugins(OwnershipPlugin::entity_server())
        .insert_net_server(network.server_transport()?);
    // The server knows each body's id, kind and transform; it has no physics.
    for (id, kind, at, _) in BODIES {
        let at = Transform::from_translation(at);
        app.world_mut().spawn((BodyNetId(BodyId(id)), kind, at));
    }
    Ok(app)
}

fn participant_app(network: &MemoryNetwork, client: u64, script: Script) -> Result<App, NetError> {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, TransformPlugin))
        .add_plugins(RapierPhysicsPlugin::<NoUserData>::default())
        // Physics in step with the network clock, so the rules' timings match the motion.
        .insert_resource(TimestepMode::Fixed {
            dt: DT.as_secs_f32(),
            substeps: 1,
        })
        .add_plugins(NetClientPlugin::default().with_clock(NetClock::Fixed(DT)))
        .add_plugins(OwnershipPlugin::participant())
        .insert_resource(script)
        .add_systems(Update, (act, print_changes))
        .insert_net_client(network.client_transport(client)?);
    for (id, kind, at, half) in BODIES {
        let at = Transform::from_translation(at);
        let mut body = app.world_mut().spawn((BodyNetId(BodyId(id)), kind, at));
        body.insert(Collider::cuboid(half.x, half.y, half.z));
        if kind == RigidBody::Dynamic {
            body.insert(Ownable);
        }
    }
    Ok(app)
}

/// `Update`: the script's acts for this step.
fn act(
    mut step: Local<u32>,
    script: Res<Script>,
    participant: Res<OwnershipClient>,
    mut velocities: Query<&mut Velocity>,
    mut commands: Commands,
) {
    *step += 1;
    for &(_, id, act) in script.0.iter().filter(|(at, ..)| *at == *step) {
        let Some(body) = participant.entity_of(BodyId(id)) else {
            continue;
        };
        if let Act::Poke(change) = act
            && let Ok(mut velocity) = velocities.get_mut(body)
        {
            velocity.linear += change;
        }
        let mut body = commands.entity(body);
        match act {
            Act::Grab => body.grab(),
            Act::Release => body.release_grab(),
            Act::Poke(_) => body.poke(),
        };
    }
}

/// `Update`: prints what the entity server decided, as this participant heard it.
fn print_changes(
    mut step: Local<u32>,
    participant: Res<OwnershipClient>,
    mut changes: MessageReader<OwnershipChanged>,
    mut refusals: MessageReader<BidRefused>,
) {
    *step += 1;
    let (step, me) = (
        *step,
        participant.me().map_or("?".into(), |id| id.to_string()),
    );
    for change in changes.read() {
        let (body, priority) = (change.body, change.priority);
        match change.owner {
            Some(owner) => {
                println!("step {step:3}  {me}: {body} owned by {owner} at priority {priority}")
            }
            None => println!("step {step:3}  {me}: {body} released"),
        }
    }
    for refused in refusals.read() {
        let (body, reason) = (refused.body, refused.reason);
        println!("step {step:3}  {me}: bid for {body} refused ({reason:?})");
    }
}

fn main() -> Result<(), NetError> {
    let network = MemoryNetwork::perfect(1);
    let mut server = server_app(&network)?;
    let grabber = Script(vec![(20, 1, Act::Grab), (120, 1, Act::Release)]);
    let poker = Script(vec![(40, 2, Act::Poke(Vec3::new(0.0, 3.0, 1.0)))]);
    let mut participants = [
        participant_app(&network, 1, grabber)?,
        participant_app(&network, 2, poker)?,
    ];
    for _ in 0..STEPS {
        server.update();
        participants.iter_mut().for_each(App::update);
    }
    let stats = *server.world().resource::<EntityServer>().stats();
    println!(
        "entity server: {} bids granted, {} releases, {} state updates relayed",
        stats.bids_granted, stats.releases_granted, stats.state_updates_relayed
    );
    Ok(())
}
