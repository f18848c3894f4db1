//! The App's side of a hybrid session: which props this peer owns ([`OwnedProp`],
//! [`PropOwnedHere`]), which of them its next input carries ([`choose_carried`]) and the input
//! source that stamps them with the input's tick.

use std::sync::{Arc, Mutex};

use bevy::prelude::*;
use bevy_rapier3d::prelude::Velocity;
use simsync_deterministic::{LocalInputs, PlayerIndex, SimInput, Tick, TickInputSource};
use simsync_ownership::{BodyNetId, OwnershipClient, SimulationOwner};

use super::HybridConfig;
use super::pose::{HybridInput, PropPose, PropPoses};

/// Marks a prop: a body of the App's own world (not of the simulation worlds), simulated under
/// simulation ownership, matched across peers by its [`BodyNetId`]. Its `kind` picks the
/// proxy shape the players' worlds give it ([`HybridConfig::shapes`]). The other side of the
/// split is [`RollbackBody`](super::RollbackBody).
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component)]
pub struct OwnedProp {
    /// Index into the proxy shapes.
    pub kind: u8,
}

/// This peer simulates the prop now, so its inputs carry it. Kept in step with
/// [`SimulationOwner`] by the [`HybridPlugin`](super::HybridPlugin) when the App is an
/// ownership participant; an App without ownership (a test, a game with its own authority)
/// inserts and removes it itself.
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq, Reflect)]
#[reflect(Component)]
pub struct PropOwnedHere;

/// This peer's counters of the props it carries (main-app resource).
#[derive(Resource, Debug, Clone, Default, PartialEq, Eq, Reflect)]
#[reflect(Resource)]
pub struct HybridStats {
    /// Frames whose owned moving props did not all fit the input (the slowest were left out).
    pub frames_over_budget: u64,
    /// Props left out of an input for the bound, in total.
    pub props_left_out: u64,
    /// Props refused by quantization (a position or velocity out of range), in total.
    pub props_refused: u64,
}

/// What the input source reads: the poses chosen this frame and the game's latest inputs.
#[derive(Default)]
pub(crate) struct Outbox<I> {
    pub(crate) poses: Vec<PropPose>,
    pub(crate) game: Vec<I>,
}

/// The outbox shared between the App's systems and the session's input source.
#[derive(Resource)]
pub(crate) struct SharedOutbox<I>(pub(crate) Arc<Mutex<Outbox<I>>>);

/// Which owned props the next input carries: those moving faster than `rest_speed` (m/s),
/// fastest first, plus those that were carried moving last time and now rest (once, so every
/// world sees them stop); at most `max`. Returns the chosen poses and how many moving props
/// did not fit. `owned` is `(pose, speed)`; `was_moving` the props carried moving last time.
pub fn choose_carried(
    owned: &[(PropPose, f32)],
    was_moving: &[u64],
    rest_speed: f32,
    max: usize,
) -> (Vec<PropPose>, usize) {
    let mut moving: Vec<&(PropPose, f32)> = owned.iter().filter(|(_, s)| *s > rest_speed).collect();
    moving.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.id.cmp(&b.0.id)));
    let stopped = owned
        .iter()
        .filter(|(p, s)| *s <= rest_speed && was_moving.contains(&p.id));
    let mut chosen: Vec<PropPose> = Vec::new();
    let mut left_out = 0;
    for (pose, speed) in moving.into_iter().chain(stopped) {
        if chosen.len() == max {
            left_out += usize::from(*speed > rest_speed);
            continue;
        }
        let mut pose = *pose;
        if *speed <= rest_speed {
            pose.vel_mm_s = [0; 3];
        }
        chosen.push(pose);
    }
    (chosen, left_out)
}

/// Keeps [`PropOwnedHere`] in step with [`SimulationOwner`] on an ownership participant.
pub(crate) fn mark_owned_props(
    mut commands: Commands,
    client: Option<Res<OwnershipClient>>,
    props: Query<(Entity, &SimulationOwner, Has<PropOwnedHere>), With<OwnedProp>>,
) {
    let Some(me) = client.and_then(|c| c.me()) else {
        return;
    };
    for (entity, owner, marked) in &props {
        match (owner.is_owned_by(me), marked) {
            (true, false) => {
                commands.entity(entity).insert(PropOwnedHere);
            }
            (false, true) => {
                commands.entity(entity).remove::<PropOwnedHere>();
            }
            _ => {}
        }
    }
}

/// Chooses the owned props the next input carries and hands them, with the game's inputs,
/// to the session's input source.
#[allow(clippy::type_complexity)]
pub(crate) fn gather_owned_props<I: SimInput>(
    config: Res<HybridConfig>,
    outbox: Res<SharedOutbox<I>>,
    game: Option<Res<LocalInputs<I>>>,
    mut stats: ResMut<HybridStats>,
    mut was_moving: Local<Vec<u64>>,
    props: Query<
        (&BodyNetId, &OwnedProp, &GlobalTransform, Option<&Velocity>),
        With<PropOwnedHere>,
    >,
) {
    let mut owned = Vec::new();
    for (id, prop, transform, velocity) in &props {
        let (_, rotation, translation) = transform.to_scale_rotation_translation();
        let linvel = velocity.map_or(Vec3::ZERO, |v| v.linear);
        match PropPose::quantize(id.0.0, prop.kind, translation, rotation, linvel) {
            Ok(pose) => owned.push((pose, linvel.length())),
            Err(_) => stats.props_refused += 1,
        }
    }
    owned.sort_by_key(|(pose, _)| pose.id);
    let max = config.max_props_per_input;
    let (chosen, left_out) = choose_carried(&owned, &was_moving, config.rest_speed, max);
    if left_out > 0 {
        stats.frames_over_budget += 1;
        stats.props_left_out += left_out as u64;
    }
    *was_moving = chosen
        .iter()
        .filter(|p| p.vel_mm_s != [0; 3])
        .map(|p| p.id)
        .collect();
    let Ok(mut outbox) = outbox.0.lock() else {
        return;
    };
    outbox.poses = chosen;
    if let Some(game) = game {
        outbox.game = (0..=PlayerIndex::MAX)
            .map_while(|p| game.get(p).cloned())
            .collect();
    }
}

/// The session's input source of a hybrid App: the game's input of `(player, tick)` (the
/// scripted one, else the latest [`LocalInputs<I>`] the game wrote) with this frame's chosen
/// props stamped `tick`.
pub(crate) fn input_source<I: SimInput>(
    outbox: Arc<Mutex<Outbox<I>>>,
    scripted: Option<super::ScriptedInput<I>>,
    max: usize,
) -> TickInputSource<HybridInput<I>> {
    TickInputSource::new(move |player: PlayerIndex, tick: Tick| {
        let Ok(outbox) = outbox.lock() else {
            return HybridInput::default();
        };
        let input = match &scripted {
            Some(f) => f(player, tick),
            None => outbox
                .game
                .get(usize::from(player))
                .cloned()
                .unwrap_or_default(),
        };
        // `choose_carried` keeps to `max` and ids are unique per entity: `new` cannot refuse.
        let props = PropPoses::new(tick, outbox.poses.clone(), max).unwrap_or_default();
        HybridInput { input, props }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pose(id: u64, vx: i32) -> (PropPose, f32) {
        let pose = PropPose {
            id,
            vel_mm_s: [vx, 0, 0],
            ..default()
        };
        (pose, vx.unsigned_abs() as f32 / 1000.0)
    }

    #[test]
    fn the_fastest_moving_props_are_carried_first() {
        let owned = [pose(1, 500), pose(2, 3000), pose(3, 0), pose(4, 1500)];
        let (chosen, left_out) = choose_carried(&owned, &[], 0.01, 2);
        let ids: Vec<_> = chosen.iter().map(|p| p.id).collect();
        assert_eq!((ids, left_out), (vec![2, 4], 1));
    }

    #[test]
    fn a_prop_that_came_to_rest_is_carried_once_with_no_velocity() {
        let owned = [pose(1, 5), pose(2, 0)];
        let (chosen, _) = choose_carried(&owned, &[1], 0.01, 4);
        assert_eq!(chosen.len(), 1);
        assert_eq!((chosen[0].id, chosen[0].vel_mm_s), (1, [0; 3]));
        let (again, _) = choose_carried(&owned, &[], 0.01, 4);
        assert!(again.is_empty());
    }
}
