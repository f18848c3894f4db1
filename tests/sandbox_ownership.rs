//! The sandbox's ownership mode (`sandbox ownership`) run in this process, stepwise as the
//! example runs it: an entity server and three participants over the seeded in-memory network.
//!
//! The mode is included by path from `examples/sandbox/ownership/`; the modules it names as
//! `crate::cli`, `crate::driver`, ... come from `sandbox_assets` (see `suite.rs`).

// Like `sandbox_view`, this uses the in-process run but not `run_in_process` or the UDP roles.
#[allow(dead_code, unused_imports)]
#[path = "../examples/sandbox/ownership/mod.rs"]
pub(crate) mod ownership;

use std::path::{Path, PathBuf};

use crate::cli::{Command, OwnershipArgs};
use ownership::in_process::{InProcessRun, Phase, finish};
use ownership::{Setup, load_script};

fn asset(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets")
        .join(relative)
}

/// `sandbox ownership` with the shipped scene and script, a short run and its default link
/// (80 ms RTT, 10 ms jitter, 2 % loss).
fn short_run_args() -> OwnershipArgs {
    let scene = asset("scenes/sandbox.ron");
    let trace = asset("traces/ownership_three.ron");
    let args = [
        "sandbox".to_string(),
        "ownership".to_string(),
        "--quiet".to_string(),
        "--ticks".to_string(),
        "240".to_string(),
        "--settle-seconds".to_string(),
        "1".to_string(),
        "--scene".to_string(),
        scene.display().to_string(),
        "--trace".to_string(),
        trace.display().to_string(),
    ];
    match Command::try_parse_from(args) {
        Ok(Command::Ownership(args)) => args,
        other => panic!("expected the ownership mode, got {other:?}"),
    }
}

/// One in-process run to its end, as `run_in_process` steps it (without its engine log), and
/// its summary as JSON (every counter, exact floats) and as the printed text. Neither holds the
/// run's wall-clock time, which `run_in_process` prints on a line of its own.
fn run_once(args: &OwnershipArgs) -> (serde_json::Value, String) {
    let setup = Setup::load(args.scene.as_deref(), args.participants)
        .unwrap_or_else(|f| panic!("scene: {}", f.message));
    let script =
        load_script(args.trace.as_deref()).unwrap_or_else(|f| panic!("script: {}", f.message));
    let mut run = InProcessRun::new(args, &setup.bodies, script.script, None)
        .unwrap_or_else(|f| panic!("apps: {}", f.message));
    let settled = loop {
        match run.advance() {
            Ok(Phase::Done(settled)) => break settled,
            Ok(_) => {}
            Err(f) => panic!("run: {}", f.message),
        }
    };
    let summary = finish(args, &mut run.peers, &setup.bodies, settled)
        .unwrap_or_else(|f| panic!("summary: {}", f.message));
    let json = serde_json::to_value(&summary).expect("the summary serializes");
    (json, summary.to_text())
}

/// Issue 14: two runs of the sandbox with the same scene, script and flags give identical
/// summaries. The runs share the process (and so nothing but their inputs), so anything that
/// differs between them (hash-map order, wall-clock time, thread scheduling leaking into the
/// simulation) shows up here.
#[test]
fn ownership_sandbox_runs_twice_to_identical_summaries() {
    let args = short_run_args();
    let (first, first_text) = run_once(&args);
    let (second, second_text) = run_once(&args);

    // Non-trivial: bodies changed owner and states were sent and relayed, so equal summaries
    // say something.
    let count = |key: &str| {
        first[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key}: {}", first[key]))
    };
    assert!(count("ownership_changes") > 0, "{first_text}");
    assert!(count("bids_granted") > 0, "{first_text}");
    assert!(count("state_updates_sent") > 0, "{first_text}");
    assert!(count("state_updates_relayed") > 0, "{first_text}");
    assert!(
        first["bytes_per_body"].as_f64().is_some_and(|b| b > 0.0),
        "{first_text}"
    );
    assert!(count("bodies_compared") > 0, "{first_text}");

    assert_eq!(
        first_text, second_text,
        "two runs with the same script printed different summaries"
    );
    assert_eq!(
        first, second,
        "two runs with the same script gave different summaries"
    );
}
