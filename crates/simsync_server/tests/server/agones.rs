//! The Agones adapter against a recorder that plays the SDK sidecar.
//!
//! No Kubernetes cluster (and so no real Agones sidecar) runs where these tests run: a small
//! HTTP server on 127.0.0.1 records every call (method, path, body, time) and answers as the
//! sidecar's REST gateway does (`{}`, or a GameServer's JSON for `GET /gameserver`), or 500
//! when told to fail. The tests check what the adapter sends, when, and that it survives a
//! failing sidecar.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, sleep};
use std::time::{Duration, Instant};

use simsync_server::{
    AgonesAdapter, AgonesConfig, AgonesError, AgonesReport, AgonesSdk, Heartbeat, LIVENESS_TIMEOUT,
};

/// What `GET /gameserver` answers: the shape of the sidecar's JSON (protobuf field names,
/// unset fields present).
const GAME_SERVER_JSON: &str = r#"{"object_meta":{"name":"simsync-abcde","namespace":"default"},
"spec":{"health":{"disabled":false,"period_seconds":5,"failure_threshold":3,"initial_delay_seconds":5}},
"status":{"state":"Scheduled","address":"198.51.100.20","addresses":[],
"ports":[{"name":"game","port":7412}],"players":null,"counters":{},"lists":{}}}"#;

/// One call the recorder received.
#[derive(Debug, Clone)]
struct Call {
    method: String,
    path: String,
    body: String,
    at: Instant,
    status: u16,
}

impl Call {
    fn is(&self, method: &str, path: &str) -> bool {
        self.method == method && self.path == path
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// The sidecar stand-in: a tiny_http server on its own thread.
struct Recorder {
    url: String,
    calls: Arc<Mutex<Vec<Call>>>,
    fail: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Recorder {
    fn start() -> Recorder {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind the recorder");
        let addr = server.server_addr().to_ip().expect("an IP address");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let fail = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, f, s) = (Arc::clone(&calls), Arc::clone(&fail), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok(Some(request)) = server.recv_timeout(Duration::from_millis(20)) {
                    answer(request, &c, f.load(Ordering::Relaxed));
                }
            }
        });
        Recorder {
            url: format!("http://{addr}"),
            calls,
            fail,
            stop,
            thread: Some(thread),
        }
    }

    fn config(&self, health_interval: Duration) -> AgonesConfig {
        AgonesConfig {
            url: self.url.clone(),
            health_interval,
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn count(&self, method: &str, path: &str) -> usize {
        self.calls().iter().filter(|c| c.is(method, path)).count()
    }

    fn fail(&self, fail: bool) {
        self.fail.store(fail, Ordering::Relaxed);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn answer(mut request: tiny_http::Request, calls: &Mutex<Vec<Call>>, fail: bool) {
    let at = Instant::now();
    let mut body = String::new();
    let _ = request.as_reader().read_to_string(&mut body);
    let method = request.method().as_str().to_owned();
    let path = request.url().to_owned();
    let (status, reply) = if fail {
        (500, r#"{"error":"recorder told to fail"}"#)
    } else if method == "GET" && path == "/gameserver" {
        (200, GAME_SERVER_JSON)
    } else {
        (200, "{}")
    };
    calls.lock().unwrap().push(Call {
        method,
        path,
        body,
        at,
        status,
    });
    let _ = request.respond(tiny_http::Response::from_string(reply).with_status_code(status));
}

/// A thread that beats `heart` every 20 ms until the returned flag is set.
fn keep_beating(heart: &Heartbeat) -> (Arc<AtomicBool>, JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (heart, flag) = (heart.clone(), Arc::clone(&stop));
    let thread = std::thread::spawn(move || {
        while !flag.load(Ordering::Relaxed) {
            heart.beat();
            sleep(Duration::from_millis(20));
        }
    });
    (stop, thread)
}

#[test]
fn ready_comes_first_health_follows_the_interval_and_shutdown_comes_last() {
    let sidecar = Recorder::start();
    let heart = Heartbeat::new();
    let (stop_beating, beater) = keep_beating(&heart);
    let adapter = AgonesAdapter::spawn(sidecar.config(Duration::from_millis(100)), heart);
    sleep(Duration::from_millis(150));
    assert!(
        sidecar.calls().is_empty(),
        "nothing before ready: {:?}",
        sidecar.calls()
    );

    let start = Instant::now();
    adapter.ready();
    sleep(Duration::from_millis(1_200));
    let stats = adapter.shutdown();
    stop_beating.store(true, Ordering::Relaxed);
    beater.join().unwrap();

    let calls = sidecar.calls();
    assert!(calls[0].is("POST", "/ready"), "first call: {:?}", calls[0]);
    assert_eq!(calls[0].json(), serde_json::json!({}));
    assert!(
        calls.last().unwrap().is("POST", "/shutdown"),
        "last: {:?}",
        calls.last()
    );
    assert_eq!(sidecar.count("POST", "/ready"), 1);
    assert_eq!(sidecar.count("POST", "/shutdown"), 1);
    let health: Vec<&Call> = calls.iter().filter(|c| c.is("POST", "/health")).collect();
    // About one ping per 100 ms over ~1.2 s (the first at the first tick after ready).
    assert!(
        (9..=14).contains(&health.len()),
        "{} health pings",
        health.len()
    );
    assert!(health.iter().all(|c| c.body == "{}" && c.at >= start));
    let span = health.last().unwrap().at - health[0].at;
    let mean_gap = span / u32::try_from(health.len() - 1).unwrap();
    assert!(
        (Duration::from_millis(80)..=Duration::from_millis(130)).contains(&mean_gap),
        "mean gap {mean_gap:?}"
    );
    assert_eq!(stats.calls, calls.len() as u64);
    assert_eq!(stats.failures, 0);
    assert_eq!(stats.health_sent, health.len() as u64);
}

#[test]
fn health_stops_when_the_main_loop_stops_beating_and_resumes_with_it() {
    let sidecar = Recorder::start();
    let heart = Heartbeat::new();
    let adapter = AgonesAdapter::spawn(sidecar.config(Duration::from_millis(100)), heart.clone());
    adapter.ready();
    for _ in 0..20 {
        heart.beat();
        sleep(Duration::from_millis(20));
    }
    heart.beat();
    let last_beat = Instant::now();
    // The loop is stalled: pings go on until LIVENESS_TIMEOUT after the last beat, then stop.
    sleep(LIVENESS_TIMEOUT + Duration::from_millis(700));
    let health_at: Vec<Instant> = sidecar
        .calls()
        .iter()
        .filter(|c| c.is("POST", "/health"))
        .map(|c| c.at)
        .collect();
    let cutoff = last_beat + LIVENESS_TIMEOUT + Duration::from_millis(150);
    assert!(
        health_at.iter().all(|at| *at <= cutoff),
        "a ping {:?} after the last beat (timeout {LIVENESS_TIMEOUT:?})",
        health_at
            .iter()
            .map(|at| at.duration_since(last_beat))
            .max()
    );
    // Pings ran while it was alive: the first 0.4 s of beats and the 2 s grace after them.
    let alive_pings = health_at.len();
    assert!(
        (18..=28).contains(&alive_pings),
        "{alive_pings} pings while alive"
    );
    let silent_from = Instant::now();
    sleep(Duration::from_millis(300));
    assert_eq!(
        sidecar.count("POST", "/health"),
        alive_pings,
        "no ping while stalled"
    );

    // The loop turns again: so do the pings.
    heart.beat();
    sleep(Duration::from_millis(350));
    let stats = adapter.shutdown();
    let resumed = sidecar
        .calls()
        .iter()
        .filter(|c| c.is("POST", "/health") && c.at > silent_from)
        .count();
    assert!(
        (2..=5).contains(&resumed),
        "{resumed} pings after the loop came back"
    );
    assert_eq!(stats.health_sent, (alive_pings + resumed) as u64);
    assert_eq!(stats.failures, 0);
}

#[test]
fn a_report_becomes_two_counters_and_a_list_and_a_repeat_sends_nothing() {
    let sidecar = Recorder::start();
    let heart = Heartbeat::new();
    // A long interval: no health ping gets in the way of the counting below.
    let adapter = AgonesAdapter::spawn(sidecar.config(Duration::from_secs(30)), heart);
    adapter.ready();
    adapter.report(AgonesReport {
        rooms: 2,
        clients: 3,
        room_ids: vec!["7".into(), "4".into()],
    });
    sleep(Duration::from_millis(300));
    let beta = |calls: &[Call]| -> Vec<Call> {
        calls
            .iter()
            .filter(|c| c.path.starts_with("/v1beta1/"))
            .cloned()
            .collect()
    };
    let sent = beta(&sidecar.calls());
    let summary: Vec<(&str, &str, serde_json::Value)> = sent
        .iter()
        .map(|c| (c.method.as_str(), c.path.as_str(), c.json()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "PATCH",
                "/v1beta1/counters/rooms",
                serde_json::json!({"count": "2"})
            ),
            (
                "PATCH",
                "/v1beta1/counters/players",
                serde_json::json!({"count": "3"})
            ),
            (
                "PATCH",
                "/v1beta1/lists/rooms",
                serde_json::json!({"values": ["4", "7"]})
            ),
        ]
    );

    // The same load again (ids in another order): nothing new.
    adapter.report(AgonesReport {
        rooms: 2,
        clients: 3,
        room_ids: vec!["4".into(), "7".into()],
    });
    sleep(Duration::from_millis(200));
    assert_eq!(beta(&sidecar.calls()).len(), 3);

    // One more client: only the players counter.
    adapter.report(AgonesReport {
        rooms: 2,
        clients: 4,
        room_ids: vec!["4".into(), "7".into()],
    });
    sleep(Duration::from_millis(200));
    let after = beta(&sidecar.calls());
    assert_eq!(after.len(), 4);
    assert!(after[3].is("PATCH", "/v1beta1/counters/players"));
    assert_eq!(after[3].json(), serde_json::json!({"count": "4"}));
    let stats = adapter.stats();
    assert_eq!(
        (stats.calls, stats.failures),
        (5, 0),
        "ready + 4 report parts"
    );

    // Dropped without shutdown: the thread stops, Agones is not told.
    drop(adapter);
    assert_eq!(sidecar.count("POST", "/shutdown"), 0);
}

#[test]
fn a_failing_sidecar_is_counted_retried_and_survived() {
    let sidecar = Recorder::start();
    sidecar.fail(true);
    let heart = Heartbeat::new();
    let (stop_beating, beater) = keep_beating(&heart);
    let adapter = AgonesAdapter::spawn(sidecar.config(Duration::from_millis(100)), heart);
    adapter.ready();
    adapter.report(AgonesReport {
        rooms: 1,
        clients: 2,
        room_ids: vec!["1".into()],
    });
    sleep(Duration::from_millis(450));
    let failing = adapter.stats();
    assert!(failing.failures >= 6, "{failing:?}");
    // (A call may be under way: counted as made, not yet as failed.)
    assert!(
        failing.calls <= failing.failures + 1,
        "every call failed: {failing:?}"
    );
    assert_eq!(failing.health_sent, 0);
    assert!(sidecar.count("POST", "/ready") >= 3, "ready is retried");
    assert!(sidecar.calls().iter().all(|c| c.status == 500));

    sidecar.fail(false);
    sleep(Duration::from_millis(350));
    let stats = adapter.shutdown();
    stop_beating.store(true, Ordering::Relaxed);
    beater.join().unwrap();
    let calls = sidecar.calls();
    let ok: Vec<&Call> = calls.iter().filter(|c| c.status == 200).collect();
    let ready_ok = ok.iter().filter(|c| c.is("POST", "/ready")).count();
    assert_eq!(ready_ok, 1, "ready is sent until accepted, then no more");
    assert!(
        calls
            .iter()
            .rev()
            .take_while(|c| !c.is("POST", "/ready"))
            .all(|c| c.status == 200)
    );
    for path in [
        "/v1beta1/counters/rooms",
        "/v1beta1/counters/players",
        "/v1beta1/lists/rooms",
    ] {
        assert_eq!(
            ok.iter().filter(|c| c.is("PATCH", path)).count(),
            1,
            "{path} accepted once"
        );
    }
    assert!(calls.last().unwrap().is("POST", "/shutdown"));
    assert!(stats.health_sent >= 2, "{stats:?}");
    // Every call reached the recorder: the failures are exactly its 500s.
    assert_eq!(stats.calls, calls.len() as u64);
    assert_eq!(
        stats.failures,
        calls.iter().filter(|c| c.status == 500).count() as u64
    );
    assert_eq!(
        stats.health_sent,
        ok.iter().filter(|c| c.is("POST", "/health")).count() as u64
    );
}

#[test]
fn the_sdk_reads_the_game_server_and_names_each_failure() {
    let sidecar = Recorder::start();
    let sdk = AgonesSdk::new(&sidecar.config(Duration::from_secs(2)));
    let info = sdk.game_server().unwrap();
    assert_eq!(info.address.as_deref(), Some("198.51.100.20"));
    assert_eq!(info.ports, vec![("game".to_owned(), 7412)]);
    assert_eq!(info.state.as_deref(), Some("Scheduled"));
    assert_eq!(
        info.public_addr("game"),
        Some("198.51.100.20:7412".parse().unwrap())
    );

    sdk.set_counter("players", 5, Some(64)).unwrap();
    sdk.set_list("rooms", &["a".to_owned()]).unwrap();
    let calls = sidecar.calls();
    assert_eq!(
        calls[1].json(),
        serde_json::json!({"count": "5", "capacity": "64"})
    );
    assert!(calls[2].is("PATCH", "/v1beta1/lists/rooms"));

    sidecar.fail(true);
    assert_eq!(
        sdk.health(),
        Err(AgonesError::Status {
            method: "POST",
            path: "/health".to_owned(),
            status: 500
        })
    );
    assert!(matches!(
        sdk.game_server(),
        Err(AgonesError::Status { status: 500, .. })
    ));

    // Nobody listening: a transport error, not a panic.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let nobody = AgonesSdk::new(&AgonesConfig {
        url: format!("http://{closed}"),
        health_interval: Duration::from_secs(2),
    });
    assert!(matches!(
        nobody.ready(),
        Err(AgonesError::Transport { method: "POST", .. })
    ));
}
