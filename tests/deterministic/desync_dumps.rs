//! Desync dumps: a divergence planted in the predicted world of a local session fails
//! `verify_predictions`, both worlds of the tick are dumped, and `diff_dumps` names the slot,
//! generation, component and field values; bad dump files come back as typed errors.

use std::path::{Path, PathBuf};

use bevy::prelude::*;
use simsync::deterministic::{
    DUMP_FORMAT_VERSION, DesyncDump, Difference, DumpError, DumpedWorld, diff_dumps,
};
use simsync::deterministic::{DesyncDumpWritten, WorldRole};
use simsync::prelude::*;

use crate::common;

/// A marble's position; every marble climbs one unit per tick.
#[derive(Component, Clone, Copy, Debug, PartialEq, Reflect)]
#[reflect(Component)]
pub struct Marble {
    pub x: f32,
    pub y: f32,
}

impl SimHash for Marble {
    fn sim_hash(&self, hasher: &mut simsync::deterministic::StateHasher) {
        self.x.sim_hash(hasher);
        self.y.sim_hash(hasher);
    }
}

/// Three marbles; at `plant_at` the marble in slot 1 is nudged up by 0.5 in the world
/// `plant_in` (`None`: both worlds).
#[derive(Clone)]
pub struct MarbleGame {
    pub plant_at: Option<Tick>,
    pub plant_in: Option<WorldRole>,
}

impl Plugin for MarbleGame {
    fn build(&self, app: &mut App) {
        let (plant_at, plant_in) = (self.plant_at, self.plant_in);
        app.register_type::<Marble>()
            .rollback_hashed_component::<Marble>()
            .add_systems(SimulationStartup, |mut sim: SimCommands| {
                for i in 0..3 {
                    sim.spawn(Marble {
                        x: i as f32,
                        y: 0.0,
                    })
                    .expect("slot");
                }
            })
            .add_systems(
                SimulationTick,
                (move |tick: Res<SimTick>,
                       role: Res<WorldRole>,
                       mut marbles: Query<&mut Marble>| {
                    for mut marble in &mut marbles {
                        marble.y += 1.0;
                        if Some(tick.0) == plant_at
                            && plant_in.is_none_or(|r| r == *role)
                            && marble.x == 1.0
                        {
                            marble.y += 0.5;
                        }
                    }
                })
                .in_set(SimulationSet::Game),
            );
    }
}

/// A fresh directory for one test's dumps.
pub fn dump_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("simsync-dumps-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[derive(Resource, Default)]
struct Written(Vec<DesyncDumpWritten>);

fn collect(mut written: ResMut<Written>, mut reader: MessageReader<DesyncDumpWritten>) {
    written.0.extend(reader.read().cloned());
}

fn read(path: &Path) -> DesyncDump {
    simsync::deterministic::read_dump_file(path, 1 << 24).expect("a valid dump")
}

fn planted_run(dir: &Path) -> (App, Vec<DesyncDumpWritten>) {
    let mut app = common::app_with_game(
        MarbleGame {
            plant_at: Some(40),
            plant_in: Some(WorldRole::Predicted),
        },
        1,
        4,
        |p| {
            p.edit_config(|c| {
                c.verify_predictions = true;
            })
            .debugging(simsync::deterministic::DebugConfig::with_desync_dumps(dir))
        },
    );
    app.init_resource::<Written>().add_systems(Update, collect);
    common::run_until_verified(&mut app, 60);
    let written = app.world().resource::<Written>().0.clone();
    (app, written)
}

#[test]
fn a_planted_prediction_divergence_is_dumped_and_the_diff_names_entity_component_and_values() {
    let dir = dump_dir("planted");
    let (mut app, written) = planted_run(&dir);
    assert_eq!(
        written.len(),
        2,
        "the predicted and the verified world of the first mismatch: {written:?}"
    );
    assert!(written.iter().all(|w| w.tick == 40), "{written:?}");
    let predicted = written
        .iter()
        .find(|w| w.world == DumpedWorld::Predicted)
        .expect("predicted dump");
    let verified = written
        .iter()
        .find(|w| w.world == DumpedWorld::Verified)
        .expect("verified dump");
    let (a, b) = (read(&predicted.path), read(&verified.path));
    assert_eq!((a.header.tick, b.header.tick), (40, 40));
    assert_eq!(a.entities.len(), 3);
    assert_eq!(a.inputs.len(), 1, "every player's input of the tick");
    // The generation of the marble in slot 1, from the verified world itself.
    let generation = {
        let mut worlds = app.world_mut().resource_mut::<SimulationWorlds>();
        let world = worlds.verified_mut();
        let mut q = world.query::<(Entity, &Marble)>();
        q.iter(world)
            .find(|(_, m)| m.x == 1.0)
            .map(|(e, _)| e.generation().to_bits())
            .expect("marble 1")
    };
    let diff = diff_dumps(&a, &b).expect("same game");
    assert_eq!(
        diff.differences, 1,
        "only the planted value differs: {diff}"
    );
    let Some(Difference::Component {
        slot,
        generation: found_generation,
        type_name,
        fields,
        ..
    }) = &diff.first
    else {
        panic!("expected a component difference, got {diff}");
    };
    assert_eq!(*slot, 1);
    assert_eq!(*found_generation, generation);
    assert!(type_name.ends_with("Marble"), "{type_name}");
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_eq!(fields[0].path, "y");
    // Startup plus ticks 1..=40: 41 climbs, and the planted half unit.
    assert_eq!(fields[0].a.as_deref(), Some("41.5"));
    assert_eq!(fields[0].b.as_deref(), Some("41.0"));
    assert!(!diff.inputs_differ());
    let text = diff.to_string();
    assert!(
        text.contains("slot 1") && text.contains("Marble") && text.contains("41.5"),
        "{text}"
    );
    // Only the first mismatch is dumped.
    common::run_until_verified(&mut app, 90);
    assert_eq!(app.world().resource::<Written>().0.len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dump_of_the_same_state_diffs_empty() {
    let dir = dump_dir("same");
    let (_, written) = planted_run(&dir);
    let a = read(&written[0].path);
    let diff = diff_dumps(&a, &a).expect("same game");
    assert!(diff.is_empty());
    assert_eq!(diff.differences, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

fn sample_dump(name: &str) -> (DesyncDump, Vec<u8>) {
    let dir = dump_dir(name);
    let (_, written) = planted_run(&dir);
    let bytes = std::fs::read(&written[0].path).expect("file");
    let _ = std::fs::remove_dir_all(&dir);
    (DesyncDump::decode(&bytes, 1 << 24).expect("valid"), bytes)
}

#[test]
fn a_truncated_dump_is_a_typed_error_at_every_offset() {
    let (_, bytes) = sample_dump("truncated");
    for len in 0..bytes.len() {
        let error = DesyncDump::decode(&bytes[..len], 1 << 24).expect_err("truncated");
        assert!(
            matches!(error, DumpError::Truncated { .. }),
            "at {len}: {error}"
        );
    }
}

#[test]
fn a_flipped_byte_anywhere_is_a_typed_error() {
    let (_, bytes) = sample_dump("flipped");
    for i in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= 0x41;
        let error = DesyncDump::decode(&bad, 1 << 24).expect_err("flipped");
        match i {
            0..8 => assert!(matches!(error, DumpError::NotADump { .. }), "{i}: {error}"),
            8..10 => assert!(
                matches!(error, DumpError::WrongVersion { .. }),
                "{i}: {error}"
            ),
            _ => assert!(
                matches!(
                    error,
                    DumpError::Corrupt { .. }
                        | DumpError::Truncated { .. }
                        | DumpError::TooLarge { .. }
                ),
                "{i}: {error}"
            ),
        }
    }
}

#[test]
fn a_body_that_hashes_right_but_does_not_decode_is_corrupt_at_the_body() {
    let (_, bytes) = sample_dump("garbage");
    let mut body = bytes[26..].to_vec();
    body.truncate(body.len() / 2);
    body.extend_from_slice(&[0xFF; 9]);
    let mut file = bytes[..10].to_vec();
    file.extend_from_slice(&(body.len() as u64).to_le_bytes());
    use std::hash::Hasher;
    let mut h = StateHasher::default();
    h.write(&body);
    file.extend_from_slice(&h.finish().to_le_bytes());
    file.extend_from_slice(&body);
    let error = DesyncDump::decode(&file, 1 << 24).expect_err("garbage body");
    assert!(
        matches!(error, DumpError::Corrupt { offset: 26, .. }),
        "{error}"
    );
}

#[test]
fn wrong_version_foreign_game_and_oversized_dumps_are_refused() {
    let (dump, bytes) = sample_dump("refused");
    let mut other = bytes.clone();
    other[8..10].copy_from_slice(&(DUMP_FORMAT_VERSION + 1).to_le_bytes());
    assert_eq!(
        DesyncDump::decode(&other, 1 << 24),
        Err(DumpError::WrongVersion {
            found: DUMP_FORMAT_VERSION + 1,
            expected: DUMP_FORMAT_VERSION
        })
    );
    assert!(matches!(
        DesyncDump::decode(&bytes, 100),
        Err(DumpError::TooLarge { limit: 100, .. })
    ));
    let mut foreign = dump.clone();
    foreign.header.fingerprint.components[0] = "other_game::Ship".into();
    let error = diff_dumps(&dump, &foreign).expect_err("foreign");
    assert!(
        matches!(&error, DumpError::ForeignGame { first_difference } if first_difference.contains("other_game::Ship")),
        "{error}"
    );
}
