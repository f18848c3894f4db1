//! A desync the relay detects between networked clients: every client dumps its verified world
//! at the desynced tick and the tick before it, sends the relay its per-component hash breakdown of the desynced tick, and the relay's
//! report (to the server App and to every client) names the component and the slot; the
//! dumps' diff names entity and component.

use bevy::prelude::*;
use simsync::deterministic::{DesyncDumpWritten, DesyncReport};
use simsync::deterministic::{Difference, DumpReason, diff_dumps};
use simsync::prelude::*;
use simsync_net::LinkConditionerConfig;
use simsync_net::prelude::*;

use super::harness::{Peers, PeersExt, peers_of, plugin};
use crate::deterministic::desync_dumps::{MarbleGame, dump_dir};

#[derive(Resource, Default)]
struct Seen {
    dumps: Vec<DesyncDumpWritten>,
    reports: Vec<DesyncReport>,
}

fn collect(
    mut seen: ResMut<Seen>,
    mut dumps: MessageReader<DesyncDumpWritten>,
    mut reports: MessageReader<DesyncReport>,
) {
    seen.dumps.extend(dumps.read().cloned());
    seen.reports.extend(reports.read().cloned());
}

fn collect_reports(mut seen: ResMut<Seen>, mut reports: MessageReader<DesyncReport>) {
    seen.reports.extend(reports.read().cloned());
}

/// Three clients, client `c` running `game(c)` with desync dumps into `dirs[c]`, over `link`
/// (seeded `seed`); they desync on purpose, so desync reports do not stop a run. Every App
/// keeps what it was told in [`Seen`].
fn desyncing<G: Plugin + Clone>(
    game: impl Fn(usize) -> G + Send + Sync + 'static,
    dirs: &[std::path::PathBuf],
    link: LinkConditionerConfig,
    seed: u64,
) -> Peers {
    let dirs = dirs.to_vec();
    let debug =
        move |c: usize| simsync::deterministic::DebugConfig::with_desync_dumps(dirs[c].clone());
    let mut peers = peers_of(3, move |c| plugin(game(c)).debugging(debug(c)))
        .link(link)
        .seed(seed)
        .tolerate_desyncs()
        .customize(|_, app| {
            app.init_resource::<Seen>().add_systems(Update, collect);
        })
        .build()
        .expect("peers");
    peers
        .relay_mut()
        .init_resource::<Seen>()
        .add_systems(Update, collect_reports);
    peers
}

#[test]
fn a_desync_between_networked_clients_is_dumped_and_named_by_component_and_slot() {
    let dirs: Vec<_> = (0..3).map(|i| dump_dir(&format!("net-{i}"))).collect();
    // Client 0's simulation nudges the marble in slot 1 at tick 30, in both worlds.
    let game = |c: usize| MarbleGame {
        plant_at: (c == 0).then_some(30),
        plant_in: None,
    };
    let link = LinkConditionerConfig::PERFECT
        .with_latency(20, 2)
        .with_loss(1.0);
    let mut peers = desyncing(game, &dirs, link, 5);
    peers.verify(150, 3_000);
    // The relay's report of the first desynced tick names the component and the slot.
    let server = peers.relay();
    let server_seen = server.world().resource::<Seen>();
    let first = server_seen
        .reports
        .first()
        .expect("a desync report on the relay");
    assert_eq!(first.tick, 30);
    assert_eq!(first.players, vec![0]);
    assert_eq!(first.components.len(), 1, "{first:?}");
    assert!(first.components[0].ends_with("Marble"), "{first:?}");
    assert_eq!(first.slots, vec![1]);
    let relay = server.world().resource::<simsync::relay::RelayStats>();
    assert!(relay.desync_reports >= 1);
    assert_eq!(relay.contradicting_breakdowns, vec![0; 3]);
    // Every client got the report and dumped the desynced tick and the tick before it.
    let mut files = Vec::new();
    let mut before = Vec::new();
    for c in 0..3 {
        let seen = peers.client(c).expect("running").world().resource::<Seen>();
        assert_eq!(
            seen.reports.first().map(|r| (r.tick, r.components.clone())),
            Some((first.tick, first.components.clone()))
        );
        let ticks: Vec<_> = seen.dumps.iter().map(|d| d.tick).collect();
        assert_eq!(
            ticks,
            vec![29, 30],
            "two dumps per client: {:?}",
            seen.dumps
        );
        for written in &seen.dumps {
            assert!(matches!(
                &written.reason,
                DumpReason::ServerDesync { tick: 30, players } if players == &vec![0]
            ));
        }
        let read = |w: &DesyncDumpWritten| {
            simsync::deterministic::read_dump_file(&w.path, 1 << 24).expect("valid dump")
        };
        before.push(read(&seen.dumps[0]));
        files.push(read(&seen.dumps[1]));
    }
    // The desynced tick's breakdown is in each dump of it.
    assert!(
        files
            .iter()
            .all(|f| f.breakdowns.last().is_some_and(|b| b.tick == 30))
    );
    // The tick before, every client agreed on; at the desynced tick the honest clients' dumps
    // agree and the planted one differs in slot 1's Marble, field y, and nothing else.
    for other in 1..3 {
        assert!(
            diff_dumps(&before[0], &before[other])
                .expect("same game")
                .is_empty()
        );
    }
    assert!(
        diff_dumps(&files[1], &files[2])
            .expect("same game")
            .is_empty()
    );
    let diff = diff_dumps(&files[0], &files[1]).expect("same game");
    assert_eq!(diff.differences, 1, "{diff}");
    assert_eq!(diff.root.as_ref().map(|r| r.tick), Some(30), "{diff}");
    let Some(Difference::Component {
        slot,
        type_name,
        fields,
        ..
    }) = &diff.first
    else {
        panic!("expected a component difference: {diff}");
    };
    assert_eq!(*slot, 1);
    assert!(type_name.ends_with("Marble"));
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].path, "y");
    // Startup plus ticks 1..=30: 31 climbs, and client 0's planted half unit.
    assert_eq!(fields[0].a.as_deref(), Some("31.5"));
    assert_eq!(fields[0].b.as_deref(), Some("31.0"));
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

// --- A hostile breakdown sender, and a second desync episode -----------------------------------

/// Three marbles climbing one unit per tick; at each `(tick, dy)` of `plants` the marble in
/// slot 1 moves by `dy` (both worlds).
#[derive(Clone)]
struct EpisodesGame {
    plants: Vec<(i32, f32)>,
}

impl Plugin for EpisodesGame {
    fn build(&self, app: &mut App) {
        use crate::deterministic::desync_dumps::Marble;
        let plants = self.plants.clone();
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
                (move |tick: Res<SimTick>, mut marbles: Query<&mut Marble>| {
                    for mut marble in &mut marbles {
                        marble.y += 1.0;
                        for (at, dy) in &plants {
                            if *at == tick.0 && marble.x == 1.0 {
                                marble.y += dy;
                            }
                        }
                    }
                })
                .in_set(SimulationSet::Game),
            );
    }
}

/// A `ComponentHashes` message of `tick` with `entries` component entries.
fn breakdown(tick: i32, entries: usize) -> simsync_net::ClientMessage {
    simsync_net::ClientMessage::session(
        simsync_net::MatchId::FIRST,
        simsync_net::SessionClientMessage::ComponentHashes {
            tick,
            components: (0..entries).map(|i| (format!("game::C{i}"), 7)).collect(),
            resources: Vec::new(),
            slots: vec![(1, 9)],
        },
    )
}

#[test]
fn hostile_breakdowns_are_counted_rejections_and_only_the_first_desync_gets_a_breakdown() {
    let dirs: Vec<_> = (0..3).map(|i| dump_dir(&format!("hostile-{i}"))).collect();
    // Client 0 diverges in two episodes: ticks 30..=39 and from tick 90 on.
    let game = |c: usize| EpisodesGame {
        plants: match c {
            0 => vec![(30, 0.5), (40, -0.5), (90, 0.5)],
            _ => Vec::new(),
        },
    };
    let link = LinkConditionerConfig::PERFECT.with_latency(20, 2);
    let mut peers = desyncing(game, &dirs, link, 7);
    // Client 2 simulates honestly but, once playing, sends the relay a malformed message, an
    // oversized breakdown, one of a tick never desynced and a flood of them.
    let flood = 40;
    peers.verify(5, 3_000);
    peers.send_raw(2, NetChannel::Control, vec![0xff; 48]);
    let oversized = breakdown(30, simsync_net::MAX_BREAKDOWN_ENTRIES + 1);
    peers.send(2, NetChannel::Control, &oversized);
    for _ in 0..=flood {
        peers.send(2, NetChannel::Control, &breakdown(12_345, 2));
    }
    // The honest peers kept playing.
    peers.verify(200, 3_000);
    let relay = peers.relay_stats();
    // Every hostile message is a counted rejection: the malformed one as a rejected message,
    // the breakdowns as refused (or, past the control channel's rate, rate limited).
    assert!(relay.rejected_messages >= 1, "{relay:?}");
    let refused = relay.refused_breakdowns[2] + relay.rate_limited[2].control;
    assert!(refused >= flood + 2, "refused {refused}: {relay:?}");
    assert!(relay.refused_breakdowns[2] >= 2, "{relay:?}");
    assert_eq!(relay.refused_breakdowns[0], 0);
    assert_eq!(relay.refused_breakdowns[1], 0);
    assert_eq!(relay.contradicting_breakdowns, vec![0; 3]);
    // Both episodes were detected (10 ticks, then every tick from 90), but the breakdowns were
    // sent for the first only: one report, of tick 30, naming the component and the slot.
    assert!(relay.desyncs_named[0] > 10 + 50, "{relay:?}");
    assert_eq!(relay.desyncs_named[1], 0);
    assert_eq!(relay.desync_reports, 1, "{relay:?}");
    let reports = &peers.relay().world().resource::<Seen>().reports;
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].tick, 30);
    assert_eq!(reports[0].players, vec![0]);
    assert_eq!(reports[0].components.len(), 1, "{:?}", reports[0]);
    assert!(
        reports[0].components[0].ends_with("Marble"),
        "{:?}",
        reports[0]
    );
    assert_eq!(reports[0].slots, vec![1]);
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

// --- The sandbox's planted desync ---------------------------------------------------------------

/// A small sandbox scene: a 2×1×2 pile beside player 0, player 1 further away.
const PLANTED_SCENE: &str = r#"(
    ground: (center: (0.0, -0.5, 0.0), size: (20.0, 1.0, 20.0)),
    piles: [
        (origin: (1.5, 0.5, 0.0), count: (2, 1, 2), spacing: (1.0, 1.0, 1.0),
         shape: Box(size: (1.0, 1.0, 1.0))),
    ],
    players: [
        (spawn: (0.0, 0.5, 0.0), shape: Ball(radius: 0.5)),
        (spawn: (6.0, 0.5, 0.0), shape: Ball(radius: 0.5)),
    ],
)"#;

#[test]
fn a_desync_planted_at_tick_120_is_dumped_at_tick_120_and_diff_names_player_0s_body_first() {
    use crate::sandbox_assets::{game::SandboxGame, scene::parse_scene};
    let dirs: Vec<_> = (0..2).map(|i| dump_dir(&format!("planted-{i}"))).collect();
    let scene = parse_scene(PLANTED_SCENE, std::path::Path::new("planted.ron")).expect("scene");
    let game = SandboxGame::new(std::sync::Arc::new(scene), 2);
    // The sandbox's `network --plant-desync 120`: client 0's simulation adds 0.5 m/s upwards to
    // player 0's body at the end of tick 120 (after the step); a checksum every tick.
    let client_dirs = dirs.clone();
    let mut peers = peers_of(2, move |c| {
        let game = match c {
            0 => game.clone().with_planted_desync(120),
            _ => game.clone(),
        };
        plugin(game).debugging(simsync::deterministic::DebugConfig::with_desync_dumps(
            client_dirs[c].clone(),
        ))
    })
    .link(LinkConditionerConfig::PERFECT.with_latency(20, 2))
    .seed(3)
    .tolerate_desyncs()
    .customize(|_, app| {
        app.init_resource::<Seen>().add_systems(Update, collect);
    })
    .build()
    .expect("peers");
    peers.verify(170, 3_000);
    let mut dumps = Vec::new();
    for c in 0..2 {
        let seen = peers.client(c).expect("running").world().resource::<Seen>();
        let ticks: Vec<_> = seen.dumps.iter().map(|d| d.tick).collect();
        assert_eq!(ticks, vec![119, 120], "client {c}: {:?}", seen.dumps);
        let read = |w: &DesyncDumpWritten| {
            simsync::deterministic::read_dump_file(&w.path, 1 << 24).expect("valid dump")
        };
        dumps.push((read(&seen.dumps[0]), read(&seen.dumps[1])));
    }
    // Tick 119 was the same on both clients; at tick 120 player 0's body differs first.
    let before = diff_dumps(&dumps[0].0, &dumps[1].0).expect("same game");
    assert!(before.is_empty(), "{before}");
    let diff = diff_dumps(&dumps[0].1, &dumps[1].1).expect("same game");
    let player_0 = dumps[0]
        .1
        .entities
        .iter()
        .filter(|e| {
            e.components
                .iter()
                .any(|v| v.type_name.ends_with("PlayerBody"))
        })
        .map(|e| e.slot)
        .min()
        .expect("player bodies are dumped");
    let Some(Difference::Component { slot, .. }) = &diff.first else {
        panic!("expected a component difference: {diff}");
    };
    assert_eq!(*slot, player_0, "{diff}");
    assert!(
        (1..=5).contains(&diff.differences),
        "a handful of differences: {diff}"
    );
    println!("planted desync: {diff}");
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}
