//! Replays: a recorded session (local, and a networked client over the in-memory transport)
//! plays back with every recorded checksum matching; a tampered replay stops at the tick its
//! changed input first changes the checksum; a foreign game and a failing writer are reported.

use std::io::Write;
use std::sync::{Arc, Mutex};

use bevy::prelude::*;
use simsync::deterministic::{
    DesyncDumpWritten, DumpReason, ForeignPart, Replay, ReplayEnd, ReplayError, ReplayLimits,
    ReplayMismatch, ReplayPlayback, ReplayPlaybackFailed, ReplayRecorder, ReplayStatus,
    ReplayWriteFailed, ReplayWriter, SessionClock, SessionMode, TickChecksum, read_dump_file,
};
use simsync::prelude::*;
use simsync_net::LinkConditionerConfig;

use crate::common::{TestGame, app_with_game, run_until_verified, stats};
use crate::network::harness::{PeersExt, peers};

/// A `Write` into memory shared with the test.
#[derive(Clone, Default)]
pub(crate) struct SharedBytes(Arc<Mutex<Vec<u8>>>);

impl SharedBytes {
    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.0.lock().expect("not poisoned").clone()
    }
}

impl Write for SharedBytes {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Accepts `budget` bytes, then fails every write.
struct FailingWriter {
    budget: usize,
}

impl Write for FailingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.budget {
            return Err(std::io::Error::other("disk full"));
        }
        self.budget -= buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn game() -> TestGame {
    TestGame {
        boxes: 50,
        players: 2,
        projectiles: true,
        ..TestGame::default()
    }
}

/// Records a local predicted session (latency 3) to tick `ticks`; returns the replay's bytes
/// (finished when the App is dropped) and the session's verified checksums.
fn record_local(ticks: i32) -> (Vec<u8>, Vec<TickChecksum>) {
    record_local_with(ticks, |r| r)
}

/// [`record_local`] with the recorder configured by `configure`.
fn record_local_with(
    ticks: i32,
    configure: impl FnOnce(ReplayRecorder) -> ReplayRecorder,
) -> (Vec<u8>, Vec<TickChecksum>) {
    record_game(game(), ticks, configure)
}

/// Records a local predicted session of `game` (2 players, latency 3, scripted inputs) to tick
/// `ticks`; returns the replay's bytes and the session's verified checksums.
pub(crate) fn record_game<G: Plugin + Clone>(
    game: G,
    ticks: i32,
    configure: impl FnOnce(ReplayRecorder) -> ReplayRecorder,
) -> (Vec<u8>, Vec<TickChecksum>) {
    let out = SharedBytes::default();
    let recorder = configure(ReplayRecorder::to_writer(out.clone(), "memory"));
    let mut app = app_with_game(game, 2, 3, |plugin| {
        plugin
            .edit_config(|c| {
                c.mode = SessionMode::Predicted;
            })
            .replay(simsync::deterministic::ReplayMode::Record(recorder))
    });
    run_until_verified(&mut app, ticks);
    let history = stats(&app).checksum_history;
    assert_eq!(stats(&app).replay_frames_recorded, history.len() as u64);
    drop(app);
    (out.bytes(), history)
}

pub(crate) fn read(bytes: &[u8]) -> Replay<PackedInput> {
    Replay::from_bytes(bytes, &ReplayLimits::default()).expect("a valid replay")
}

/// Plays `playback` with `game` (16 ticks per update) until it stops.
pub(crate) fn play_with<G: Plugin + Clone>(game: G, playback: ReplayPlayback<PackedInput>) -> App {
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(game)
            .config(SessionConfig {
                clock: SessionClock::Stepped {
                    ticks_per_update: 16,
                },
                ..Default::default()
            })
            .replay(simsync::deterministic::ReplayMode::Play(playback)),
    );
    app.finish();
    app.cleanup();
    for _ in 0..10_000 {
        app.update();
        if !app
            .world()
            .resource::<ReplayPlayback<PackedInput>>()
            .is_playing()
        {
            break;
        }
    }
    app
}

fn play(replay: Replay<PackedInput>) -> App {
    play_with(game(), ReplayPlayback::new(replay))
}

pub(crate) fn status(app: &App) -> ReplayStatus {
    app.world()
        .resource::<ReplayPlayback<PackedInput>>()
        .status()
        .clone()
}

fn mismatches(app: &mut App) -> Vec<ReplayMismatch> {
    app.world_mut()
        .resource_mut::<Messages<ReplayMismatch>>()
        .drain()
        .collect()
}

#[test]
fn a_recorded_local_session_replays_with_every_checksum_matching() {
    let (bytes, recorded) = record_local(240);
    let replay = read(&bytes);
    assert_eq!(replay.end(), ReplayEnd::Complete);
    assert_eq!(replay.frames().len(), recorded.len());
    assert_eq!(replay.header().players, 2);
    assert!(
        replay
            .header()
            .registered_types
            .iter()
            .any(|t| t.ends_with("::Crate")),
        "{:?}",
        replay.header().registered_types
    );
    let mut app = play(replay);
    assert_eq!(
        status(&app),
        ReplayStatus::Finished {
            end: ReplayEnd::Complete
        }
    );
    let playback = app.world().resource::<ReplayPlayback<PackedInput>>();
    assert_eq!(playback.checksums_checked(), recorded.len() as u64);
    assert_eq!(stats(&app).checksum_history, recorded, "bit-exact");
    assert!(mismatches(&mut app).is_empty());
}

#[test]
fn a_recorded_network_client_replays_with_every_checksum_matching() {
    let link = LinkConditionerConfig::PERFECT
        .with_latency(30, 5)
        .with_loss(5.0);
    let mut h = peers(game(), link).build().expect("peers");
    let out = SharedBytes::default();
    let recorder = ReplayRecorder::to_writer(out.clone(), "memory");
    h.client_mut(1).expect("running").insert_resource(recorder);
    h.verify(200, 2_000);
    let recorded = h.stats_of(1).checksum_history;
    assert!(recorded.len() >= 200);
    let _ = h
        .client_mut(1)
        .expect("running")
        .world_mut()
        .resource_mut::<ReplayRecorder>()
        .finish();
    let replay = read(&out.bytes());
    assert_eq!(replay.end(), ReplayEnd::Complete);
    assert_eq!(replay.frames().len(), recorded.len());
    let app = play(replay);
    assert_eq!(
        status(&app),
        ReplayStatus::Finished {
            end: ReplayEnd::Complete
        }
    );
    assert_eq!(stats(&app).checksum_history, recorded, "bit-exact");
}

/// The recording of a 160-tick local session with player 0's input changed at tick `k`
/// (written back as a well-formed file and read again), and the recorded checksums.
fn tampered_at(k: i32) -> (Replay<PackedInput>, Vec<TickChecksum>) {
    let (bytes, recorded) = record_local(160);
    (tamper(&bytes, k), recorded)
}

/// The replay in `bytes` with player 0's input changed at tick `k`, written back as a
/// well-formed file and read again.
pub(crate) fn tamper(bytes: &[u8], k: i32) -> Replay<PackedInput> {
    let mut replay = read(bytes);
    // Player 0 pushes the other way from tick k on.
    let frame = replay
        .frames_mut()
        .iter_mut()
        .find(|f| f.tick == k)
        .expect("frame k");
    let mut input = PackedInput::default();
    input
        .set_axis(0, -frame.inputs[0].axis(0) - 0.5)
        .expect("slot");
    input.set_axis(1, 1.0).expect("slot");
    assert_ne!(frame.inputs[0], input);
    frame.inputs[0] = input;
    let mut writer = ReplayWriter::new(Vec::new(), "tampered");
    writer.header(replay.header()).expect("header");
    for frame in replay.frames() {
        writer.frame(frame).expect("frame");
    }
    writer.finish().expect("end");
    read(&writer.into_inner())
}

#[test]
fn a_tampered_replay_stops_at_the_tick_of_the_changed_input() {
    const K: i32 = 97;
    let (tampered, recorded) = tampered_at(K);
    let mut app = play(tampered);
    let expected = recorded.iter().find(|c| c.tick == K).expect("checksum K");
    let ReplayStatus::Mismatch(mismatch) = status(&app) else {
        panic!("{:?}", status(&app));
    };
    assert_eq!(mismatch.tick, K);
    assert_eq!(mismatch.expected, expected.checksum);
    assert_ne!(mismatch.found, expected.checksum);
    assert_eq!(mismatches(&mut app), vec![mismatch], "one message");
    assert_eq!(
        stats(&app).verified_tick,
        K,
        "verification stopped at the mismatch"
    );
    let history = stats(&app).checksum_history;
    assert_eq!(&history[..history.len() - 1], &recorded[..(K - 1) as usize]);
}

#[test]
fn a_cut_replay_plays_its_complete_frames_and_says_where_it_was_cut() {
    let (bytes, recorded) = record_local(120);
    // Cut inside the record after the frame of tick 80: find where the complete frames end.
    let full = read(&bytes);
    let mut cut = bytes.len() - 1;
    let replay = loop {
        let replay = read(&bytes[..cut]);
        if replay.last_tick() == 80 {
            break replay;
        }
        cut -= 1;
    };
    assert!(full.frames().len() > 80);
    let ReplayEnd::Cut { offset, last_tick } = replay.end() else {
        panic!("{:?}", replay.end());
    };
    assert_eq!(last_tick, 80);
    assert!(offset <= cut as u64);
    let app = play(replay);
    assert_eq!(
        status(&app),
        ReplayStatus::Finished {
            end: ReplayEnd::Cut { offset, last_tick }
        }
    );
    assert_eq!(stats(&app).checksum_history, recorded[..80].to_vec());
}

#[test]
fn a_replay_of_another_game_fails_before_any_tick() {
    let (bytes, _) = record_local(30);
    #[derive(Resource, Clone, PartialEq)]
    struct Extra(u32);
    #[derive(Clone)]
    struct Other;
    impl Plugin for Other {
        fn build(&self, app: &mut App) {
            app.add_plugins(game());
            app.insert_resource(Extra(1)).rollback_resource::<Extra>();
        }
    }
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(Other)
            .config(SessionConfig {
                clock: SessionClock::Stepped {
                    ticks_per_update: 16,
                },
                ..Default::default()
            })
            .replay(simsync::deterministic::ReplayMode::Play(
                ReplayPlayback::new(read(&bytes)),
            )),
    );
    app.finish();
    app.cleanup();
    app.update();
    let ReplayStatus::Failed(ReplayError::ForeignGame { part, expected, .. }) = status(&app) else {
        panic!("{:?}", status(&app));
    };
    assert_eq!(part, ForeignPart::RegisteredTypes);
    assert!(expected.contains("Extra"), "{expected}");
    let failed: Vec<_> = app
        .world_mut()
        .resource_mut::<Messages<ReplayPlaybackFailed>>()
        .drain()
        .collect();
    assert_eq!(failed.len(), 1);
    app.update();
    assert_eq!(stats(&app).verified_tick, 0, "no tick was played");
}

#[test]
fn a_replay_at_another_tick_rate_is_foreign() {
    let (bytes, _) = record_local(10);
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(game())
            .config(SessionConfig {
                tick_rate: TickRate::new(30).expect("valid"),
                clock: SessionClock::Stepped {
                    ticks_per_update: 4,
                },
                ..Default::default()
            })
            .replay(simsync::deterministic::ReplayMode::Play(
                ReplayPlayback::new(read(&bytes)),
            )),
    );
    app.update();
    assert_eq!(
        status(&app),
        ReplayStatus::Failed(ReplayError::ForeignGame {
            part: ForeignPart::TickRate,
            recorded: "64".into(),
            expected: "30".into(),
        })
    );
}

#[test]
fn a_seek_outside_the_recording_fails_the_playback() {
    let (bytes, _) = record_local(20);
    let app = play_with(game(), ReplayPlayback::new(read(&bytes)).with_seek(500));
    assert!(
        matches!(
            status(&app),
            ReplayStatus::Failed(ReplayError::SeekOutOfRange { tick: 500, .. })
        ),
        "{:?}",
        status(&app)
    );
}

#[test]
fn a_failing_writer_stops_the_recording_with_a_message_and_a_count() {
    let recorder = ReplayRecorder::to_writer(FailingWriter { budget: 6_000 }, "small disk");
    let mut app = app_with_game(game(), 2, 0, |plugin| {
        plugin.replay(simsync::deterministic::ReplayMode::Record(recorder))
    });
    let mut failures = Vec::new();
    for _ in 0..120 {
        app.update();
        failures.extend(
            app.world_mut()
                .resource_mut::<Messages<ReplayWriteFailed>>()
                .drain(),
        );
    }
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        matches!(&failures[0].error, ReplayError::Io { path, message }
            if path == "small disk" && message.contains("disk full")),
        "{failures:?}"
    );
    let s = stats(&app);
    assert_eq!(s.replay_write_errors, 1);
    assert!(
        s.replay_frames_recorded > 0 && s.replay_frames_recorded < 120,
        "{s:?}"
    );
    assert!(s.verified_tick >= 100, "the session goes on: {s:?}");
    let recorder = app.world().resource::<ReplayRecorder>();
    assert!(!recorder.is_recording());
    assert!(recorder.error().is_some());
}

#[test]
fn seeking_from_a_snapshot_reaches_the_same_checksums_as_a_full_replay() {
    let (bytes, recorded) = record_local_with(200, |r| r.with_snapshot_every(50));
    let replay = read(&bytes);
    let ticks: Vec<_> = replay.snapshots().iter().map(|s| s.tick).collect();
    assert!(ticks.len() >= 3, "{ticks:?}");
    let snapshot = replay.snapshot_at_or_before(130).expect("a snapshot").tick;
    assert!(snapshot > 0 && snapshot <= 130);
    let full = play(replay.clone());
    let seeked = play_with(game(), ReplayPlayback::new(replay).with_seek(130));
    let playback = seeked.world().resource::<ReplayPlayback<PackedInput>>();
    assert_eq!(playback.start_tick(), snapshot);
    assert_eq!(
        status(&seeked),
        ReplayStatus::Finished {
            end: ReplayEnd::Complete
        }
    );
    let after: Vec<_> = stats(&full)
        .checksum_history
        .into_iter()
        .filter(|c| c.tick > snapshot)
        .collect();
    assert_eq!(stats(&seeked).checksum_history, after);
    assert_eq!(
        stats(&seeked).ticks_verified,
        (recorded.len() as i32 - snapshot) as u64,
        "only the ticks after the snapshot were simulated"
    );
}

#[test]
fn a_recording_started_mid_session_plays_from_its_initial_snapshot() {
    let out = SharedBytes::default();
    let mut app = app_with_game(game(), 2, 2, |plugin| {
        plugin.edit_config(|c| {
            c.mode = SessionMode::Predicted;
        })
    });
    run_until_verified(&mut app, 60);
    let start = stats(&app).verified_tick;
    app.insert_resource(
        ReplayRecorder::to_writer(out.clone(), "memory").with_initial_snapshot(true),
    );
    run_until_verified(&mut app, 150);
    let recorded: Vec<_> = stats(&app)
        .checksum_history
        .into_iter()
        .filter(|c| c.tick > start)
        .collect();
    drop(app);
    let replay = read(&out.bytes());
    assert_eq!(replay.header().start_tick, start);
    assert_eq!(replay.start_tick(), Ok(start));
    let app = play(replay);
    assert_eq!(
        status(&app),
        ReplayStatus::Finished {
            end: ReplayEnd::Complete
        }
    );
    assert_eq!(stats(&app).checksum_history, recorded);
}

#[test]
fn a_replay_mismatch_writes_a_dump_of_the_verified_world_at_its_tick() {
    const K: i32 = 97;
    let (tampered, _) = tampered_at(K);
    let dir = std::env::temp_dir().join(format!("simsync-replay-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut app = App::new();
    app.add_plugins(MinimalPlugins).add_plugins(
        DeterministicPlugin::<PackedInput>::new(game())
            .config(SessionConfig {
                clock: SessionClock::Stepped {
                    ticks_per_update: 16,
                },
                ..Default::default()
            })
            .replay(simsync::deterministic::ReplayMode::Play(
                ReplayPlayback::new(tampered),
            ))
            .debugging(simsync::deterministic::DebugConfig {
                desync_dumps: Some(simsync::deterministic::DesyncDumpConfig::new(&dir)),
                ..Default::default()
            }),
    );
    app.finish();
    app.cleanup();
    let mut written = Vec::new();
    for _ in 0..200 {
        app.update();
        written.extend(
            app.world_mut()
                .resource_mut::<Messages<DesyncDumpWritten>>()
                .drain(),
        );
    }
    let ReplayStatus::Mismatch(mismatch) = status(&app) else {
        panic!("{:?}", status(&app));
    };
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(written[0].tick, K);
    let dump = read_dump_file(&written[0].path, 64 << 20).expect("the dump reads back");
    assert_eq!(dump.header.tick, K);
    assert_eq!(
        dump.header.reason,
        DumpReason::ReplayMismatch {
            recorded: mismatch.expected,
            replayed: mismatch.found,
        }
    );
    assert_eq!(
        dump.inputs.len(),
        2,
        "the inputs of the tick are in the dump"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
