//! The App's side of a hybrid session: which props this peer owns ([`OwnedProp`],
//! [`PropOwnedHere`]), which of them its next input carries ([`choose_carried`]) and the input
//! source that stamps them with the input's tick.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bevy::prelude::*;
use bevy_rapier3d::prelude::Velocity;
use simsync_deterministic::{LocalInputs, PlayerIndex, SimInput, Tick, TickInputSource};
use simsync_ownership::{BodyNetId, OwnershipClient, SimulationOwner};

use super::HybridConfig;
use super::pose::{HybridInput, MAX_PROPS_PER_INPUT, PropPose, PropPoses};

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
    /// Props taken off an input so that it fits the session's input size cap
    /// (`SessionConfig::max_input_bytes`; the relay drops a longer input whole, the game's
    /// part with it), in total.
    pub props_over_bytes: u64,
    /// Grabs and throws refused ([`PropGrabCommandsExt`](super::PropGrabCommandsExt)), and
    /// holds let go because their holding point was not finite ([`HeldProp`](super::HeldProp)),
    /// in total; each also a [`HybridRefused`](super::HybridRefused) message.
    pub grabs_refused: u64,
    /// Avatars of the predicted world without a twin now: a second [`AvatarOf`](super::AvatarOf)
    /// of one player (the one of the lowest entity index is the player's avatar). Not a total:
    /// the count of the last frame, 0 when each player has one avatar.
    pub extra_avatars: usize,
}

/// What the input source reads: the poses chosen this frame and the game's latest inputs.
#[derive(Default)]
pub(crate) struct Outbox<I> {
    pub(crate) poses: Vec<PropPose>,
    /// The tick the poses are for: the first tick the session polled since they were chosen
    /// (a frame that polls several ticks, catching up, carries them moved on from it).
    pub(crate) stamp: Option<Tick>,
    pub(crate) game: Vec<I>,
    /// Props the input source took off inputs to fit the input size cap, not yet counted in
    /// [`HybridStats::props_over_bytes`].
    pub(crate) over_bytes: u64,
}

/// The outbox shared between the App's systems and the session's input source.
#[derive(Resource)]
pub(crate) struct SharedOutbox<I>(pub(crate) Arc<Mutex<Outbox<I>>>);

/// One owned prop as [`choose_carried`] weighs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OwnedPose {
    /// Its pose now.
    pub pose: PropPose,
    /// Its speed, m/s.
    pub speed: f32,
    /// Frames since an input last carried it (`u32::MAX`: never).
    pub waited: u32,
}

/// Which owned props the next input carries: those moving faster than `rest_speed` (m/s),
/// the one waiting longest since it was last carried first, then the fastest (so every moving
/// prop is carried in turn when more move than fit), plus those that were carried moving last
/// time and now rest (once, so every world sees them stop); at most `max`. Returns the chosen
/// poses and how many moving props did not fit. `was_moving` lists the props carried moving
/// last time.
pub fn choose_carried(
    owned: &[OwnedPose],
    was_moving: &[u64],
    rest_speed: f32,
    max: usize,
) -> (Vec<PropPose>, usize) {
    let mut moving: Vec<&OwnedPose> = owned.iter().filter(|o| o.speed > rest_speed).collect();
    let order = |a: &&OwnedPose, b: &&OwnedPose| {
        b.waited
            .cmp(&a.waited)
            .then(b.speed.total_cmp(&a.speed))
            .then(a.pose.id.cmp(&b.pose.id))
    };
    // Only the first `max` in order are sent (the rest are only counted): select them
    // (linear), then order those few, instead of sorting every moving prop each frame.
    if moving.len() > max && max > 0 {
        moving.select_nth_unstable_by(max - 1, order);
        moving[..max].sort_by(order);
    } else {
        moving.sort_by(order);
    }
    let mut stopped: Vec<&OwnedPose> = owned
        .iter()
        .filter(|o| o.speed <= rest_speed && was_moving.contains(&o.pose.id))
        .collect();
    stopped.sort_by_key(|o| o.pose.id);
    let mut chosen: Vec<PropPose> = Vec::new();
    let mut left_out = 0;
    for OwnedPose { pose, speed, .. } in moving.into_iter().chain(stopped) {
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

/// What [`gather_owned_props`] remembers between frames.
#[derive(Default)]
pub(crate) struct CarryMemory {
    /// The props the last input carried moving.
    was_moving: Vec<u64>,
    /// The frame each prop was last carried.
    last_carried: HashMap<u64, u64>,
    /// Frames gathered so far.
    frame: u64,
}

/// Chooses the owned props the next input carries and hands them, with the game's inputs,
/// to the session's input source.
#[allow(clippy::type_complexity)]
pub(crate) fn gather_owned_props<I: SimInput>(
    config: Res<HybridConfig>,
    outbox: Res<SharedOutbox<I>>,
    game: Option<Res<LocalInputs<I>>>,
    mut stats: ResMut<HybridStats>,
    mut memory: Local<CarryMemory>,
    props: Query<(&BodyNetId, &OwnedProp, &Transform, Option<&Velocity>), With<PropOwnedHere>>,
) {
    let CarryMemory {
        was_moving,
        last_carried,
        frame,
    } = &mut *memory;
    *frame += 1;
    let owned = owned_poses(
        props.iter(),
        &config,
        (was_moving, last_carried, *frame),
        &mut stats,
    );
    // `PropPoses::new` refuses more than the cap: choosing more would lose them all.
    let max = config.max_props_per_input.min(MAX_PROPS_PER_INPUT);
    let (chosen, left_out) = choose_carried(&owned, was_moving, config.rest_speed, max);
    if *frame % 1024 == 0 {
        last_carried.retain(|_, f| *frame - *f < 1 << 20);
    }
    for pose in &chosen {
        last_carried.insert(pose.id, *frame);
    }
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
    stats.props_over_bytes += std::mem::take(&mut outbox.over_bytes);
    outbox.poses = chosen;
    outbox.stamp = None;
    if let Some(game) = game {
        outbox.game = (0..=PlayerIndex::MAX)
            .map_while(|p| game.get(p).cloned())
            .collect();
    }
}

/// The moving owned props as quantized poses with how long each waited since it was last
/// carried (`u32::MAX`: never); a prop at rest is left out once it was carried at rest, a prop
/// whose pose cannot be quantized is counted in [`HybridStats::props_refused`].
#[allow(clippy::type_complexity)]
fn owned_poses<'a>(
    props: impl Iterator<
        Item = (
            &'a BodyNetId,
            &'a OwnedProp,
            &'a Transform,
            Option<&'a Velocity>,
        ),
    >,
    config: &HybridConfig,
    (was_moving, last_carried, frame): (&[u64], &HashMap<u64, u64>, u64),
    stats: &mut HybridStats,
) -> Vec<OwnedPose> {
    let mut owned = Vec::new();
    for (id, prop, transform, velocity) in props {
        let linvel = velocity.map_or(Vec3::ZERO, |v| v.linear);
        if linvel.length() <= config.rest_speed && !was_moving.contains(&id.0.0) {
            // Resting and already carried at rest (or never moved): not carried.
            continue;
        }
        let pose = PropPose::quantize(
            id.0.0,
            prop.kind,
            transform.translation,
            transform.rotation,
            linvel,
        );
        match pose {
            Ok(pose) => owned.push(OwnedPose {
                pose,
                speed: linvel.length(),
                waited: last_carried
                    .get(&pose.id)
                    .map_or(u32::MAX, |f| u32::try_from(frame - f).unwrap_or(u32::MAX)),
            }),
            Err(_) => stats.props_refused += 1,
        }
    }
    owned
}

/// The session's input source of a hybrid App: the game's input of `(player, tick)` (the
/// scripted one, else the latest [`LocalInputs<I>`] the game wrote) with this frame's chosen
/// props, stamped with the first tick polled since they were chosen: the input of that tick
/// carries them as they are, a later tick polled in the same frame (catching up) carries them
/// with the older stamp, and the worlds move them on by their velocity
/// ([the rule](super#the-rule)). `(max, max_bytes)`: at most `max` props (capped at
/// [`MAX_PROPS_PER_INPUT`]), and the last ones taken off while the encoded input is longer
/// than `max_bytes` (counted in [`HybridStats::props_over_bytes`]): the relay would drop the
/// whole input.
pub(crate) fn input_source<I: SimInput>(
    outbox: Arc<Mutex<Outbox<I>>>,
    scripted: Option<super::ScriptedInput<I>>,
    (max, max_bytes): (usize, usize),
) -> TickInputSource<HybridInput<I>> {
    TickInputSource::new(move |player: PlayerIndex, tick: Tick| {
        let Ok(mut outbox) = outbox.lock() else {
            return HybridInput::default();
        };
        let stamp = (*outbox.stamp.get_or_insert(tick)).min(tick);
        let input = match &scripted {
            Some(f) => f(player, tick),
            None => outbox
                .game
                .get(usize::from(player))
                .cloned()
                .unwrap_or_default(),
        };
        let mut poses = outbox.poses.clone();
        poses.truncate(max.min(MAX_PROPS_PER_INPUT));
        loop {
            // Within the bound, and ids are unique per entity: `new` cannot refuse.
            let props = PropPoses::new(stamp, poses.clone(), max).unwrap_or_default();
            let input = HybridInput {
                input: input.clone(),
                props,
            };
            if poses.is_empty() || encoded_len(&input) <= max_bytes {
                return input;
            }
            poses.pop();
            outbox.over_bytes += 1;
        }
    })
}

/// The length of `value` on the wire (bincode's standard configuration, as the session
/// encodes inputs); `usize::MAX` if it cannot be encoded.
fn encoded_len<T: serde::Serialize>(value: &T) -> usize {
    simsync_net::encode_unlimited(value).map_or(usize::MAX, |bytes| bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pose(id: u64, vx: i32) -> OwnedPose {
        let pose = PropPose {
            id,
            vel_mm_s: [vx, 0, 0],
            ..default()
        };
        OwnedPose {
            pose,
            speed: vx.unsigned_abs() as f32 / 1000.0,
            waited: 1,
        }
    }

    #[test]
    fn the_fastest_moving_props_are_carried_first() {
        let owned = [pose(1, 500), pose(2, 3000), pose(3, 0), pose(4, 1500)];
        let (chosen, left_out) = choose_carried(&owned, &[], 0.01, 2);
        let ids: Vec<_> = chosen.iter().map(|p| p.id).collect();
        assert_eq!((ids, left_out), (vec![2, 4], 1));
    }

    #[test]
    fn the_prop_waiting_longest_goes_first() {
        let mut owned = [pose(1, 500), pose(2, 3000), pose(3, 100)];
        owned[2].waited = 9;
        owned[0].waited = u32::MAX;
        let (chosen, left_out) = choose_carried(&owned, &[], 0.01, 2);
        let ids: Vec<_> = chosen.iter().map(|p| p.id).collect();
        assert_eq!((ids, left_out), (vec![1, 3], 1));
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

    #[test]
    fn the_choice_is_the_same_whatever_order_the_props_come_in() {
        // 60 moving props, ties on waited and speed included, and 3 that came to rest.
        let mut owned: Vec<OwnedPose> = (0..63u64)
            .map(|id| {
                let mut p = pose(
                    id,
                    if id < 60 {
                        100 + (id % 7) as i32 * 100
                    } else {
                        0
                    },
                );
                p.waited = (id % 5) as u32;
                p
            })
            .collect();
        let was_moving = [60, 61, 62];
        let (first, left_out) = choose_carried(&owned, &was_moving, 0.01, 6);
        // The order by integer keys: longest wait (4: ids 4, 9, ..), then fastest (the
        // highest id % 7), then the lowest id.
        let mut by_hand: Vec<u64> = (0..60).collect();
        by_hand.sort_by_key(|&id| (std::cmp::Reverse(id % 5), std::cmp::Reverse(id % 7), id));
        let expected = by_hand[..6].to_vec();
        let ids: Vec<u64> = first.iter().map(|p| p.id).collect();
        assert_eq!((ids.clone(), left_out), (expected, 54));
        owned.reverse();
        owned.rotate_left(17);
        let (again, _) = choose_carried(&owned, &was_moving, 0.01, 6);
        assert_eq!(again.iter().map(|p| p.id).collect::<Vec<_>>(), ids);
    }

    /// An App with the gathering system alone, owning `n` props moving at 2 m/s, 50 m out.
    fn gathering(config: HybridConfig, n: u64) -> (App, Arc<Mutex<Outbox<u16>>>) {
        let outbox = Arc::new(Mutex::new(Outbox::<u16>::default()));
        let mut app = App::new();
        app.insert_resource(config)
            .insert_resource(SharedOutbox(outbox.clone()))
            .init_resource::<HybridStats>()
            .add_systems(Update, gather_owned_props::<u16>);
        for id in 0..n {
            app.world_mut().spawn((
                BodyNetId(simsync_ownership::BodyId(1_000_000 + id)),
                OwnedProp::default(),
                Transform::from_xyz(50.0 + id as f32, 1.0, -50.0),
                Velocity::linear(Vec3::new(2.0, 0.0, 0.0)),
                PropOwnedHere,
            ));
        }
        (app, outbox)
    }

    #[test]
    fn a_configured_count_past_the_cap_carries_the_cap() {
        // Before: 40 chosen for a configured 100, refused by `PropPoses::new`, and the input
        // carried none of them.
        let config = HybridConfig {
            max_props_per_input: 100,
            ..default()
        };
        let (mut app, outbox) = gathering(config, 40);
        app.update();
        let source = input_source(outbox, None, (100, usize::MAX));
        let input = (source.0)(0, 7);
        assert_eq!(input.props.poses().len(), MAX_PROPS_PER_INPUT);
        let stats = app.world().resource::<HybridStats>();
        assert_eq!((stats.props_left_out, stats.frames_over_budget), (8, 1));
    }

    #[test]
    fn an_input_is_cut_to_the_size_cap_and_the_props_taken_off_counted() {
        let (mut app, outbox) = gathering(HybridConfig::default(), 6);
        app.update();
        let source = input_source(outbox.clone(), None, (6, 100));
        let input = (source.0)(0, 7);
        let len = encoded_len(&input);
        let kept = input.props.poses().len();
        assert!(len <= 100 && kept < 6, "{kept} props in {len} bytes");
        let mut one_more = input.clone();
        let next = outbox.lock().unwrap().poses[kept];
        let poses = [input.props.poses(), &[next]].concat();
        one_more.props = PropPoses::new(7, poses, 6).unwrap();
        assert!(encoded_len(&one_more) > 100, "the cut kept all that fit");
        app.update();
        let stats = app.world().resource::<HybridStats>();
        assert_eq!(stats.props_over_bytes, (6 - kept) as u64);
    }
}
