//! Tests of the sandbox example's asset loaders (scene, trace, ownership script), of the shipped
//! assets, and of its command-line parsing rules.
//!
//! The loaders and the parser live in `examples/sandbox/`; they are included here by path so
//! `cargo test` runs these tests without building the example's own test target.

#[allow(dead_code)]
#[path = "../examples/sandbox/cli.rs"]
pub(crate) mod cli;
// The ownership mode's `Failure` and log settings (for `sandbox_ownership`).
#[allow(dead_code)]
#[path = "../examples/sandbox/driver.rs"]
pub(crate) mod driver;
#[allow(dead_code)]
#[path = "../examples/sandbox/error.rs"]
pub(crate) mod error;
#[allow(dead_code)]
#[path = "../examples/sandbox/game.rs"]
pub(crate) mod game;
// How `join` reaches its server (for the ownership mode's UDP role).
#[allow(dead_code)]
#[path = "../examples/sandbox/link.rs"]
pub(crate) mod link;
#[allow(dead_code)]
#[path = "../examples/sandbox/scene.rs"]
pub(crate) mod scene;
#[path = "../examples/sandbox/setup_check.rs"]
mod setup_check;
// The local mode's summary, which `driver` builds.
#[allow(dead_code)]
#[path = "../examples/sandbox/summary.rs"]
mod summary;
#[allow(dead_code)]
#[path = "../examples/sandbox/trace.rs"]
pub(crate) mod trace;

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap::error::ErrorKind;
use cli::Command;

// The ownership-script loader is compiled once, inside the ownership mode `sandbox_ownership`
// includes (clippy's `duplicate_mod`).
use crate::sandbox_ownership::ownership::script as ownership_script;
use error::LoadError;
use scene::{Shape, load_scene, parse_scene};
use trace::{TraceInput, load_trace, parse_trace};

fn asset(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets")
        .join(relative)
}

const MINIMAL_SCENE: &str = r#"(
    ground: (center: (0.0, -0.5, 0.0), size: (20.0, 1.0, 20.0)),
    piles: [
        (origin: (0.0, 0.5, 0.0), count: (2, 1, 3), spacing: (1.0, 1.0, 1.0),
         shape: Box(size: (1.0, 1.0, 1.0))),
    ],
    players: [(spawn: (5.0, 0.5, 0.0), shape: Ball(radius: 0.5))],
)"#;

/// The minimal scene with `from` replaced by `to` (which must occur).
fn scene_with(from: &str, to: &str) -> String {
    assert!(
        MINIMAL_SCENE.contains(from),
        "{from} not in the minimal scene"
    );
    MINIMAL_SCENE.replacen(from, to, 1)
}

fn invalid(error: LoadError) -> (String, String) {
    match error {
        LoadError::Invalid { field, reason, .. } => (field, reason),
        other => panic!("expected a semantic error, got: {other}"),
    }
}

#[test]
fn shipped_scene_has_ramps_piles_and_players() {
    let scene = load_scene(&asset("scenes/sandbox.ron")).expect("the shipped scene loads");
    assert!(scene.ramps.len() >= 2);
    assert!(
        scene.pile_bodies() >= 200,
        "{} pile bodies",
        scene.pile_bodies()
    );
    assert!(scene.players.len() >= 2);
    assert!(
        scene
            .ramps
            .iter()
            .all(|r| r.rotation_deg.iter().any(|a| *a != 0.0))
    );
}

#[test]
fn shipped_trace_covers_1800_ticks_of_two_players() {
    let trace = load_trace(&asset("traces/two_players.ron")).expect("the shipped trace loads");
    assert_eq!(trace.players(), 2);
    assert!(trace.end_tick() > 1800, "ends at {}", trace.end_tick());
    for player in 0..2 {
        let mut changes = 0;
        let (mut jumps, mut pushes) = (0, 0);
        let mut previous = TraceInput::default();
        for tick in 1..=1800 {
            let input = trace.input(player, tick);
            changes += usize::from(input != previous);
            jumps += usize::from(input.jump && !previous.jump);
            pushes += usize::from(input.push && !previous.push);
            previous = input;
        }
        // A change every 10–60 ticks on average.
        assert!(
            (30..=180).contains(&changes),
            "player {player}: {changes} changes"
        );
        assert!(jumps >= 5, "player {player}: {jumps} jumps");
        assert!(pushes >= 5, "player {player}: {pushes} pushes");
    }
}

#[test]
fn minimal_scene_parses_with_defaults() {
    let scene = parse_scene(MINIMAL_SCENE, Path::new("mini.ron")).unwrap();
    assert_eq!(scene.pile_bodies(), 6);
    assert!(scene.ramps.is_empty());
    assert_eq!(scene.piles[0].density, 1.0);
    assert_eq!(scene.ground.friction, 0.5);
    let positions: Vec<_> = scene.piles[0].positions().collect();
    assert_eq!(positions.len(), 6);
    assert_eq!(positions[0], [0.0, 0.5, 0.0]);
    assert_eq!(positions[1], [1.0, 0.5, 0.0]);
    assert_eq!(positions[5], [1.0, 0.5, 2.0]);
    assert!(matches!(scene.players[0].shape, Shape::Ball { radius } if radius == 0.5));
}

#[test]
fn missing_file_names_the_file() {
    let path = asset("scenes/does_not_exist.ron");
    let error = load_scene(&path).unwrap_err();
    assert!(matches!(error, LoadError::Io { .. }));
    let text = error.to_string();
    assert!(text.contains("does_not_exist.ron"), "{text}");
    let error = load_trace(&asset("traces/nope.ron")).unwrap_err();
    assert!(error.to_string().contains("nope.ron"));
}

#[test]
fn malformed_ron_reports_file_line_and_column() {
    let text = scene_with("size: (20.0, 1.0, 20.0)", "size: (20.0, 1.0 20.0)");
    let error = parse_scene(&text, Path::new("broken.ron")).unwrap_err();
    let LoadError::Parse { line, column, .. } = &error else {
        panic!("expected a parse error, got {error}");
    };
    assert_eq!(*line, 2);
    assert!(*column > 30, "column {column}");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("broken.ron:2:{column}: ")),
        "{message}"
    );
}

#[test]
fn unknown_field_and_wrong_type_are_parse_errors() {
    let text = scene_with("ground: (", "ground: (colour: 3, ");
    let error = parse_scene(&text, Path::new("x.ron")).unwrap_err();
    assert!(matches!(error, LoadError::Parse { line: 2, .. }), "{error}");
    let text = scene_with("count: (2, 1, 3)", "count: (2, -1, 3)");
    let error = parse_scene(&text, Path::new("x.ron")).unwrap_err();
    assert!(matches!(error, LoadError::Parse { line: 4, .. }), "{error}");
}

#[test]
fn zero_size_pile_is_rejected() {
    let text = scene_with("count: (2, 1, 3)", "count: (2, 0, 3)");
    let (field, reason) = invalid(parse_scene(&text, Path::new("s.ron")).unwrap_err());
    assert_eq!(field, "piles[0].count");
    assert!(reason.contains("at least one"), "{reason}");
}

#[test]
fn negative_or_zero_sizes_are_rejected() {
    let text = scene_with("Box(size: (1.0, 1.0, 1.0))", "Box(size: (1.0, -1.0, 1.0))");
    let (field, _) = invalid(parse_scene(&text, Path::new("s.ron")).unwrap_err());
    assert_eq!(field, "piles[0].shape.size");
    let text = scene_with("Ball(radius: 0.5)", "Ball(radius: 0.0)");
    let (field, _) = invalid(parse_scene(&text, Path::new("s.ron")).unwrap_err());
    assert_eq!(field, "players[0].shape.radius");
    let text = scene_with("size: (20.0, 1.0, 20.0)", "size: (20.0, 0.0, 20.0)");
    let (field, _) = invalid(parse_scene(&text, Path::new("s.ron")).unwrap_err());
    assert_eq!(field, "ground.size");
}

#[test]
fn overlapping_pile_spacing_is_rejected() {
    let text = scene_with("spacing: (1.0, 1.0, 1.0)", "spacing: (1.0, 1.0, 0.5)");
    let error = parse_scene(&text, Path::new("s.ron")).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("s.ron: invalid scene: `piles[0].spacing`")
    );
}

#[test]
fn scene_without_players_is_rejected() {
    let text = scene_with(
        "players: [(spawn: (5.0, 0.5, 0.0), shape: Ball(radius: 0.5))]",
        "players: []",
    );
    let (field, _) = invalid(parse_scene(&text, Path::new("s.ron")).unwrap_err());
    assert_eq!(field, "players");
}

const MINIMAL_TRACE: &str = r#"(
    players: 2,
    segments: [
        (player: 0, start: 1, ticks: 10, move: (1.0, 0.0)),
        (player: 0, start: 11, ticks: 2, move: (1.0, 0.0), jump: true),
        (player: 1, start: 5, ticks: 3, push: true),
        (player: 0, start: 20, ticks: 5, move: (-0.5, 0.25)),
    ],
)"#;

#[test]
fn trace_lookup_by_player_and_tick() {
    let trace = parse_trace(MINIMAL_TRACE, Path::new("t.ron")).unwrap();
    assert_eq!(trace.players(), 2);
    assert_eq!(trace.end_tick(), 25);
    assert_eq!(trace.segments(), 4);
    let walk = TraceInput {
        movement: [1.0, 0.0],
        ..TraceInput::default()
    };
    assert_eq!(trace.input(0, 1), walk);
    assert_eq!(trace.input(0, 10), walk);
    assert!(trace.input(0, 11).jump);
    assert!(trace.input(0, 12).jump);
    // A gap, then a segment, then past the end: default input.
    assert_eq!(trace.input(0, 13), TraceInput::default());
    assert_eq!(trace.input(0, 24).movement, [-0.5, 0.25]);
    assert_eq!(trace.input(0, 25), TraceInput::default());
    assert_eq!(trace.input(0, 100_000), TraceInput::default());
    assert_eq!(trace.input(0, 0), TraceInput::default());
    assert_eq!(trace.input(0, -5), TraceInput::default());
    assert!(trace.input(1, 5).push && trace.input(1, 7).push && !trace.input(1, 8).push);
    // Players the trace does not know send default input.
    assert_eq!(trace.input(2, 5), TraceInput::default());
}

#[test]
fn segment_for_unknown_player_is_rejected() {
    let text = MINIMAL_TRACE.replace("(player: 1, start: 5", "(player: 2, start: 5");
    let error = parse_trace(&text, Path::new("t.ron")).unwrap_err();
    let message = error.to_string();
    let (field, reason) = invalid(error);
    assert_eq!(field, "segments[2].player");
    assert!(reason.contains("unknown player"), "{reason}");
    assert!(message.starts_with("t.ron: invalid trace:"), "{message}");
}

#[test]
fn overlapping_segments_are_rejected() {
    let text = MINIMAL_TRACE.replace("(player: 0, start: 20", "(player: 0, start: 12");
    let (field, reason) = invalid(parse_trace(&text, Path::new("t.ron")).unwrap_err());
    assert_eq!(field, "segments[3]");
    assert!(reason.contains("overlaps segments[1]"), "{reason}");
}

#[test]
fn zero_tick_segment_and_axis_out_of_range_are_rejected() {
    let text = MINIMAL_TRACE.replace("start: 5, ticks: 3", "start: 5, ticks: 0");
    let (field, _) = invalid(parse_trace(&text, Path::new("t.ron")).unwrap_err());
    assert_eq!(field, "segments[2].ticks");
    let text = MINIMAL_TRACE.replace("move: (-0.5, 0.25)", "move: (-1.5, 0.25)");
    let (field, _) = invalid(parse_trace(&text, Path::new("t.ron")).unwrap_err());
    assert_eq!(field, "segments[3].move");
    let text = MINIMAL_TRACE.replace("players: 2", "players: 0");
    let (field, _) = invalid(parse_trace(&text, Path::new("t.ron")).unwrap_err());
    assert_eq!(field, "players");
}

#[test]
fn malformed_trace_reports_position() {
    let text = MINIMAL_TRACE.replace("jump: true", "jump: yes");
    let error = parse_trace(&text, Path::new("t.ron")).unwrap_err();
    assert!(matches!(error, LoadError::Parse { line: 5, .. }), "{error}");
    let error = parse_trace("(players: 1, segments: [", Path::new("t.ron")).unwrap_err();
    assert!(matches!(error, LoadError::Parse { .. }), "{error}");
}

#[test]
fn shipped_ownership_script_covers_three_participants() {
    let script = ownership_script::load_script(&asset("traces/ownership_three.ron"))
        .expect("the shipped ownership script loads");
    assert_eq!(script.participants, 3);
    assert!(script.segments > 0 && script.end_tick > 0);
}

#[test]
fn shipped_push_trace_stands_still_then_walks_player_1_into_the_crate_stack_and_pushes() {
    let trace = load_trace(&asset("traces/push_pile.ron")).expect("the push trace loads");
    assert_eq!(trace.players(), 2);
    assert!(trace.end_tick() <= 480, "ends at {}", trace.end_tick());
    let (mut pushes, mut jumps, mut previous) = (0, 0, TraceInput::default());
    for tick in 1..=480 {
        let input = trace.input(1, tick);
        if tick <= 160 {
            // Standing still while the other window takes its start screenshot.
            assert_eq!(input, TraceInput::default(), "tick {tick}");
        }
        pushes += usize::from(input.push && !previous.push);
        jumps += usize::from(input.jump && !previous.jump);
        previous = input;
        // Player 0 (the window the check shoots) stands still.
        assert_eq!(trace.input(0, tick), TraceInput::default());
    }
    assert!(pushes >= 12, "{pushes} pushes");
    assert_eq!(jumps, 1);
    // One heading from the spawn (3, 0) north-east (+x, -z) into the crate stack, kept to the
    // end: an input the relay replaces with the previous one does not change the path.
    let heading = trace.input(1, 161).movement;
    assert!(heading[0] > 0.0 && heading[1] < -0.8, "{heading:?}");
    assert!((161..trace.end_tick() as i32).all(|t| trace.input(1, t).movement == heading));
}

#[test]
fn a_held_key_wins_over_the_script_and_neither_means_standing_still() {
    use simsync::prelude::PackedInput;
    let scripted = game::encode(&TraceInput {
        movement: [0.5, 1.0],
        jump: false,
        push: true,
    });
    let mut keys = PackedInput::default();
    keys.set_axis(0, -1.0).expect("axis 0");
    // Keys held: the keyboard's input, also when it is the neutral one (W and S together).
    assert_eq!(game::keyboard_over_trace(Some(keys), Some(scripted)), keys);
    assert_eq!(
        game::keyboard_over_trace(Some(PackedInput::default()), Some(scripted)),
        PackedInput::default()
    );
    // No key: the script's; no script either: standing still.
    assert_eq!(game::keyboard_over_trace(None, Some(scripted)), scripted);
    assert_eq!(
        game::keyboard_over_trace(None, None),
        PackedInput::default()
    );
    assert_ne!(scripted, PackedInput::default());
}

// --- The command line. ---

/// Parses `args` (split at spaces) as the sandbox's command line.
fn parse(args: &str) -> Result<Command, clap::Error> {
    Command::try_parse_from(std::iter::once("sandbox").chain(args.split_whitespace()))
}

#[test]
fn no_subcommand_is_the_network_mode_with_its_flags() {
    let Ok(Command::Network(args)) = parse("") else {
        panic!("no arguments must run the network mode");
    };
    assert_eq!(
        (args.run.ticks, args.session.players, args.link.rtt_ms),
        (1800, 2, 80)
    );
    assert!(args.session.scene.is_none() && args.session.trace.is_none());
    assert!(!args.run.quiet && args.run.summary_json.is_none());
    let Ok(Command::Network(args)) = parse("--ticks 600 --rtt-ms 40 --quiet") else {
        panic!("top-level flags are the network mode's");
    };
    assert_eq!(
        (args.run.ticks, args.link.rtt_ms, args.run.quiet),
        (600, 40, true)
    );
    let Ok(Command::Network(args)) = parse("network --ticks 600") else {
        panic!("`network` names the default mode");
    };
    assert_eq!(args.run.ticks, 600);
}

#[test]
fn each_mode_accepts_only_its_own_flags() {
    for args in [
        "local --rtt-ms 5",
        "local --server",
        "network --input-latency-ticks 3",
        "ownership --players 2",
        "ownership --no-verify-predictions",
        "serve --bind 127.0.0.1:0 --trace t.ron",
        "--participants 3",
        "--mode local",
    ] {
        let error = parse(args).expect_err(args);
        assert_eq!(error.kind(), ErrorKind::UnknownArgument, "{args}");
        assert_eq!(error.exit_code(), 2, "{args}");
    }
}

#[test]
fn contradictory_or_missing_flags_exit_with_code_2() {
    for args in [
        "--mode local --server --bind 127.0.0.1:0",
        "--ticks 5 local",
        "serve --bind 127.0.0.1:0 --ownership --players 3",
        "serve --bind 127.0.0.1:0 --participants 3",
        "serve --bind 127.0.0.1:0 --settle-seconds 1",
        "join --connect 127.0.0.1:5000 --participant-index 1",
        "join --connect 127.0.0.1:5000 --ownership --no-verify-predictions",
        "join --connect 127.0.0.1:5000 --ownership --players 2",
        "serve",
        "join --ownership",
        "ownership --settle-seconds NaN",
        "local --players 0",
    ] {
        let error = parse(args).expect_err(args);
        assert_eq!(error.exit_code(), 2, "{args}: {error}");
    }
}

#[test]
fn serve_and_join_run_the_session_or_with_ownership_the_entity_server() {
    let Ok(Command::Serve(serve)) = parse("serve --bind 127.0.0.1:5000 --players 3") else {
        panic!("serve parses");
    };
    assert!(!serve.ownership);
    assert_eq!(serve.players, 3);
    let Ok(Command::Join(join)) =
        parse("join --connect 127.0.0.1:5000 --ownership --participants 2 --participant-index 1")
    else {
        panic!("join --ownership parses");
    };
    assert!(join.ownership);
    assert_eq!((join.participants, join.participant_index), (2, 1));
    assert_eq!(join.rejoin, None);
}

#[test]
fn serve_and_join_play_one_match_unless_told_more() {
    let Ok(Command::Serve(serve)) = parse("serve --bind 127.0.0.1:5000") else {
        panic!("serve parses");
    };
    assert_eq!(serve.matches, 1);
    let Ok(Command::Serve(serve)) = parse("serve --bind 127.0.0.1:5000 --matches 2") else {
        panic!("serve --matches parses");
    };
    assert_eq!(serve.matches, 2);
    let Ok(Command::Join(join)) = parse("join --connect 127.0.0.1:5000 --matches 3") else {
        panic!("join --matches parses");
    };
    assert_eq!(join.matches, 3);
    for args in [
        "serve --bind 127.0.0.1:5000 --matches 0",
        "join --connect 127.0.0.1:5000 --matches 0",
        "join --connect 127.0.0.1:5000 --ownership --matches 2",
    ] {
        let error = parse(args).expect_err(args);
        assert_eq!(error.exit_code(), 2, "{args}: {error}");
    }
}

#[test]
fn join_takes_a_token_file_or_an_address_and_a_script() {
    let Ok(Command::Join(join)) =
        parse("join --token tokens/slot1.token --trace assets/traces/push_pile.ron --ticks 512")
    else {
        panic!("join --token --trace parses");
    };
    assert_eq!(join.token, Some(PathBuf::from("tokens/slot1.token")));
    assert_eq!(join.connect, None);
    assert_eq!(
        join.trace,
        Some(PathBuf::from("assets/traces/push_pile.ron"))
    );
    assert_eq!((join.run.ticks, join.players, join.matches), (512, 2, 1));
    let Ok(Command::Join(join)) = parse("join --connect 192.168.1.20:5000") else {
        panic!("join --connect parses");
    };
    assert_eq!(join.connect, Some("192.168.1.20:5000".parse().unwrap()));
    assert_eq!((join.token, join.trace), (None, None));
    let error = parse("join --ticks 320").expect_err("neither --connect nor --token");
    assert_eq!(error.exit_code(), 2, "{error}");
}

#[test]
fn host_takes_the_public_address_its_tokens_name() {
    let Ok(Command::Host(host)) = parse("host") else {
        panic!("host parses");
    };
    assert_eq!(host.bind, "127.0.0.1:7000".parse().unwrap());
    assert_eq!(host.public_addr, None);
    let Ok(Command::Host(host)) = parse("host --bind 0.0.0.0:7000 --public-addr 192.168.1.20:7000")
    else {
        panic!("host --public-addr parses");
    };
    assert_eq!(host.public_addr, Some("192.168.1.20:7000".parse().unwrap()));
    let error = parse("host --public-addr nowhere").expect_err("not an address");
    assert_eq!(error.exit_code(), 2, "{error}");
}

#[test]
fn join_rejoin_takes_a_slot_and_a_decimal_token() {
    let Ok(Command::Join(join)) =
        parse("join --connect 127.0.0.1:5000 --rejoin 1:18446744073709551615")
    else {
        panic!("join --rejoin parses");
    };
    assert_eq!(
        join.rejoin,
        Some(cli::RejoinArg {
            slot: 1,
            token: u64::MAX
        })
    );
    for bad in ["1-42", "256:1", "1:-1", "1:0x10", ":5"] {
        let line = format!("join --connect 127.0.0.1:5000 --rejoin {bad}");
        let error = parse(&line).expect_err(bad);
        assert_eq!(error.kind(), ErrorKind::ValueValidation, "{bad}");
    }
    let error = parse("join --connect 127.0.0.1:5000 --ownership --rejoin 0:1")
        .expect_err("an ownership join has no slot");
    assert_eq!(error.kind(), ErrorKind::ArgumentConflict);
}

#[test]
fn record_and_replay_take_a_file_and_snapshots_need_a_recording() {
    let Ok(Command::Local(local)) = parse("local --record run.replay --snapshot-every 300") else {
        panic!("local --record parses");
    };
    assert_eq!(
        local.session.record.as_deref(),
        Some(std::path::Path::new("run.replay"))
    );
    assert_eq!(local.session.snapshot_every, 300);
    let Ok(Command::Replay(replay)) = parse("replay run.replay --seek 900") else {
        panic!("replay parses");
    };
    assert_eq!(replay.file, std::path::PathBuf::from("run.replay"));
    assert_eq!(replay.seek, Some(900));
    assert_eq!(replay.ticks_per_update, 64);
    let error = parse("local --snapshot-every 10").expect_err("no recording");
    assert_eq!(error.kind(), ErrorKind::MissingRequiredArgument);
    let error = parse("replay").expect_err("no file");
    assert_eq!(error.kind(), ErrorKind::MissingRequiredArgument);
    let error = parse("join --connect 127.0.0.1:5000 --ownership --record x")
        .expect_err("an ownership join records no session");
    assert_eq!(error.kind(), ErrorKind::ArgumentConflict);
}

#[test]
fn join_dumps_into_dump_dir_else_with_a_planted_desync_into_desync_dumps() {
    let dump_dir = |line: &str| match parse(line) {
        Ok(Command::Join(join)) => join.dump_dir(),
        other => panic!("{line}: {other:?}"),
    };
    let join = "join --connect 127.0.0.1:5000";
    assert_eq!(dump_dir(join), None);
    assert_eq!(
        dump_dir(&format!("{join} --plant-desync 120")),
        Some(PathBuf::from(cli::DEFAULT_DUMP_DIR))
    );
    assert_eq!(
        dump_dir(&format!("{join} --dump-dir honest")),
        Some(PathBuf::from("honest"))
    );
    assert_eq!(
        dump_dir(&format!("{join} --plant-desync 120 --dump-dir liar")),
        Some(PathBuf::from("liar"))
    );
    let error = parse(&format!("{join} --ownership --dump-dir d"))
        .expect_err("an ownership join has no desync dumps");
    assert_eq!(error.kind(), ErrorKind::ArgumentConflict);
}

#[test]
fn help_mentions_rust_log_and_no_build_machine_path() {
    let mut command = cli::Cli::command();
    command.build();
    let mut helps = vec![command.render_long_help().to_string()];
    for mode in ["local", "network", "ownership", "serve", "join"] {
        let sub = command.find_subcommand_mut(mode).expect(mode);
        helps.push(sub.render_long_help().to_string());
    }
    for help in helps {
        assert!(help.contains("RUST_LOG"), "{help}");
        assert!(!help.contains(env!("CARGO_MANIFEST_DIR")), "{help}");
    }
}

#[test]
fn flags_of_earlier_versions_get_a_hint() {
    let args = |line: &str| -> Vec<std::ffi::OsString> {
        line.split_whitespace().map(Into::into).collect()
    };
    for line in [
        "sandbox --mode local",
        "sandbox --mode=ownership",
        "sandbox --client",
    ] {
        assert!(cli::legacy_hint(&args(line)).is_some(), "{line}");
    }
    assert!(cli::legacy_hint(&args("sandbox local --ticks 5")).is_none());
}

#[test]
fn default_assets_are_found_at_run_time() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let places = cli::AssetPlaces {
        manifest_dir: Some(manifest.to_path_buf()),
        ..cli::AssetPlaces::default()
    };
    for default in [
        cli::DEFAULT_SCENE,
        cli::DEFAULT_SESSION_TRACE,
        cli::DEFAULT_OWNERSHIP_TRACE,
    ] {
        let found = cli::default_asset(default, &places).expect(default);
        assert!(found.ends_with(default), "{}", found.display());
    }
    assert!(cli::default_asset("assets/nope.ron", &places).is_none());
    let error = cli::asset_path(None, "assets/nope.ron", "--scene").unwrap_err();
    assert!(
        error.contains("assets/nope.ron")
            && error.contains("--scene PATH")
            && error.contains(cli::ASSETS_ENV),
        "{error}"
    );
    let given = Path::new("elsewhere.ron");
    assert_eq!(
        cli::asset_path(Some(given), "assets/nope.ron", "--scene"),
        Ok(given.to_path_buf())
    );
}

#[test]
fn assets_are_found_from_any_directory() {
    // Whatever the current directory (the test runs from the repository root, where the
    // relative candidate is found first), each place alone names the repository's file.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found_by = |places: cli::AssetPlaces, relative: &str| {
        let wanted = root.join(relative);
        wanted.is_file() && cli::asset_candidates(relative, &places).contains(&wanted)
    };
    // An executable in the repository's target/release/examples/, with no cargo environment.
    let from_exe = cli::AssetPlaces {
        exe: Some(root.join("target/release/examples/sandbox")),
        ..cli::AssetPlaces::default()
    };
    assert!(found_by(from_exe, cli::DEFAULT_SCENE));
    // The environment variable names the assets/ directory itself.
    let from_env = cli::AssetPlaces {
        assets_dir: Some(root.join("assets")),
        ..cli::AssetPlaces::default()
    };
    assert!(found_by(from_env, cli::DEFAULT_SESSION_TRACE));
    // The checkout the executable was built from.
    let built = cli::AssetPlaces {
        built_from: Some(root.to_path_buf()),
        ..cli::AssetPlaces::default()
    };
    assert!(found_by(built, cli::DEFAULT_OWNERSHIP_TRACE));
}

#[test]
fn assets_are_looked_for_in_a_fixed_order_without_repeats() {
    let places = cli::AssetPlaces {
        assets_dir: Some(PathBuf::from("/shipped/assets")),
        manifest_dir: Some(PathBuf::from("/repo")),
        exe: Some(PathBuf::from("/repo/target/release/examples/sandbox")),
        built_from: Some(PathBuf::from("/repo")),
    };
    let found: Vec<String> = cli::asset_candidates("assets/scenes/a.ron", &places)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(
        found,
        [
            "/shipped/assets/scenes/a.ron",
            "assets/scenes/a.ron",
            "/repo/assets/scenes/a.ron",
            "/repo/target/release/examples/assets/scenes/a.ron",
            "/repo/target/release/assets/scenes/a.ron",
            "/repo/target/assets/scenes/a.ron",
        ]
    );
}

#[test]
fn an_admin_token_file_is_trimmed_and_never_empty() {
    assert_eq!(
        cli::admin_token_from("  s3cret\n"),
        Ok("s3cret".to_string())
    );
    assert!(cli::admin_token_from(" \n").is_err());
}

// --- Registration errors at session start stop a run (exit 2) -----------------------------------

/// A component registered for rollback without a snapshot serializer (no serde registration,
/// not reflected).
#[derive(bevy::prelude::Component, Clone)]
struct Opaque(#[allow(dead_code)] u32);

/// A game that spawns one entity holding [`Opaque`].
#[derive(Clone)]
struct OpaqueGame;

impl bevy::prelude::Plugin for OpaqueGame {
    fn build(&self, app: &mut bevy::prelude::App) {
        use simsync::prelude::*;
        app.rollback_component::<Opaque>().add_systems(
            SimulationStartup,
            |mut sim: SimCommands| {
                sim.spawn(Opaque(7)).expect("slot");
            },
        );
    }
}

/// Updates `app` up to 20 times; the setup failure message, if one came.
fn setup_failure_within_20_updates(app: &mut bevy::prelude::App) -> Option<String> {
    for _ in 0..20 {
        app.update();
        if let Some(message) = setup_check::failure(app) {
            return Some(message);
        }
    }
    None
}

#[test]
fn a_type_without_snapshot_serializer_stops_the_run_with_a_message_naming_it() {
    use simsync::deterministic::SnapshotLimits;
    let mut app =
        crate::common::app_with_game(OpaqueGame, 1, 0, |p| p.snapshots(SnapshotLimits::default()));
    setup_check::watch(&mut app);
    let message = setup_failure_within_20_updates(&mut app).expect("the run stops");
    assert!(message.contains("Opaque"), "{message}");
    assert!(
        message.contains("cannot be saved in snapshots"),
        "{message}"
    );
}

#[test]
fn a_game_whose_types_all_serialize_runs_without_a_setup_failure() {
    use simsync::deterministic::SnapshotLimits;
    let game = crate::common::TestGame {
        boxes: 2,
        players: 1,
        ..crate::common::TestGame::default()
    };
    let mut app =
        crate::common::app_with_game(game, 1, 0, |p| p.snapshots(SnapshotLimits::default()));
    setup_check::watch(&mut app);
    assert_eq!(setup_failure_within_20_updates(&mut app), None);
    let stats = app.world().resource::<simsync::prelude::SessionStats>();
    assert!(
        stats.verified_tick >= 10,
        "the session ran: {}",
        stats.verified_tick
    );
    assert_eq!(stats.rollback_setup_errors, 0);
}

/// A recorded run of the sandbox's own game (the shipped scene, 262 bodies) replays with every
/// checksum matching, and the same recording with one input changed stops at that tick.
#[test]
fn a_recorded_sandbox_run_replays_bit_exactly_and_a_tampered_one_stops_at_its_tick() {
    use crate::deterministic::replays::{play_with, read, record_game, status, tamper};
    use simsync::deterministic::{ReplayEnd, ReplayPlayback, ReplayStatus};

    const TICKS: i32 = 150;
    const K: i32 = 90;
    let scene = std::sync::Arc::new(load_scene(&asset("scenes/sandbox.ron")).expect("scene"));
    let sandbox = game::SandboxGame::new(scene, 2);
    let (bytes, recorded) = record_game(sandbox.clone(), TICKS, |r| r);
    assert!(recorded.len() >= TICKS as usize, "{}", recorded.len());

    let app = play_with(sandbox.clone(), ReplayPlayback::new(read(&bytes)));
    assert_eq!(
        status(&app),
        ReplayStatus::Finished {
            end: ReplayEnd::Complete
        }
    );
    let replayed = &app
        .world()
        .resource::<simsync::prelude::SessionStats>()
        .checksum_history;
    assert_eq!(replayed, &recorded, "bit-exact");

    let app = play_with(sandbox, ReplayPlayback::new(tamper(&bytes, K)));
    let ReplayStatus::Mismatch(mismatch) = status(&app) else {
        panic!("{:?}", status(&app));
    };
    assert_eq!(mismatch.tick, K);
    let expected = recorded.iter().find(|c| c.tick == K).expect("checksum K");
    assert_eq!(mismatch.expected, expected.checksum);
    assert_ne!(mismatch.found, expected.checksum);
}
