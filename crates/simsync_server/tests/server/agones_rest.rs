//! The Agones client pinned by the SDK sidecar's REST exchange as Agones documents it
//! (`agones_rest.json`: paths, methods, JSON bodies and answers).
//!
//! A fake sidecar on 127.0.0.1 is given the exchanges a test expects, in order. It checks each
//! request against the next one (method, path, `Content-Type: application/json` on a request
//! with a body, the body as JSON: the same fields with the same JSON types) and answers with
//! the recorded status and body; a request that differs is answered 400 and noted. No timing:
//! the calls are made one by one, or by the adapter's thread from its queue of commands.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;
use simsync_server::{AgonesAdapter, AgonesConfig, AgonesReport, AgonesSdk, Heartbeat};

/// The documented exchanges, by name.
fn documented(name: &str) -> Value {
    let all: Value =
        serde_json::from_str(include_str!("agones_rest.json")).expect("the recording is JSON");
    all["exchanges"][name].clone()
}

/// What the fake sidecar found: requests that differed from the recording, and how many of
/// the expected exchanges never came.
#[derive(Debug, Default)]
struct Findings {
    mismatches: Vec<String>,
    missing: usize,
}

/// The fake sidecar: answers `script` (exchange names) in order, then stops.
struct Sidecar {
    url: String,
    findings: Arc<Mutex<Findings>>,
    thread: Option<JoinHandle<()>>,
}

impl Sidecar {
    fn serve(script: &[&str]) -> Sidecar {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind the fake sidecar");
        let addr = server.server_addr().to_ip().expect("an IP address");
        let expected: Vec<(String, Value)> = script
            .iter()
            .map(|name| (name.to_string(), documented(name)))
            .collect();
        assert!(expected.iter().all(|(_, e)| e.is_object()), "{script:?}");
        let findings = Arc::new(Mutex::new(Findings {
            missing: expected.len(),
            ..Findings::default()
        }));
        let seen = Arc::clone(&findings);
        let thread = std::thread::spawn(move || {
            for (name, exchange) in expected {
                // A client that stops calling ends the script (a bound, not a timing).
                let Ok(Some(request)) = server.recv_timeout(Duration::from_secs(10)) else {
                    return;
                };
                let mut seen = seen.lock().unwrap();
                seen.missing -= 1;
                if let Err(mismatch) = answer(request, &exchange) {
                    seen.mismatches.push(format!("{name}: {mismatch}"));
                }
            }
        });
        Sidecar {
            url: format!("http://{addr}"),
            findings,
            thread: Some(thread),
        }
    }

    fn config(&self) -> AgonesConfig {
        AgonesConfig {
            url: self.url.clone(),
            // Long: the adapter's thread sends no health ping in these tests.
            health_interval: Duration::from_secs(60),
        }
    }

    /// Waits for the script to end; what it found.
    fn finish(mut self) -> Findings {
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the fake sidecar's thread");
        }
        std::mem::take(&mut *self.findings.lock().unwrap())
    }
}

/// Checks `request` against the recorded `exchange` and answers it: the recorded answer, or
/// 400 and what differs.
fn answer(mut request: tiny_http::Request, exchange: &Value) -> Result<(), String> {
    let expected = &exchange["request"];
    let mut body = String::new();
    let _ = request.as_reader().read_to_string(&mut body);
    let method = request.method().as_str().to_owned();
    let path = request.url().to_owned();
    let content_type = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Content-Type"))
        .map(|h| h.value.as_str().to_owned());
    let checked = check(expected, &method, &path, content_type.as_deref(), &body);
    let (status, reply) = match &checked {
        Ok(()) => (
            exchange["response"]["status"]
                .as_u64()
                .and_then(|status| u16::try_from(status).ok())
                .unwrap_or(500),
            exchange["response"]["body"].to_string(),
        ),
        Err(mismatch) => (400, serde_json::json!({ "message": mismatch }).to_string()),
    };
    let json = tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
    let _ = request.respond(
        tiny_http::Response::from_string(reply)
            .with_status_code(status)
            .with_header(json),
    );
    checked
}

/// Whether a request is the `expected` one.
fn check(
    expected: &Value,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> Result<(), String> {
    let want_method = expected["method"].as_str().unwrap_or("");
    let want_path = expected["path"].as_str().unwrap_or("");
    if (method, path) != (want_method, want_path) {
        return Err(format!(
            "{method} {path} instead of {want_method} {want_path}"
        ));
    }
    let want = &expected["body"];
    if want.is_null() {
        if body.is_empty() {
            return Ok(());
        }
        return Err(format!("a body {body:?} where none is sent"));
    }
    if content_type != Some("application/json") {
        return Err(format!(
            "Content-Type {content_type:?}, not application/json"
        ));
    }
    match serde_json::from_str::<Value>(body) {
        Ok(got) if got == *want => Ok(()),
        Ok(got) => Err(format!("body {got} instead of {want}")),
        Err(e) => Err(format!("body {body:?} is not JSON: {e}")),
    }
}

#[test]
fn each_sdk_call_is_the_documented_request_and_reads_the_documented_answer() {
    let sidecar = Sidecar::serve(&[
        "ready",
        "gameserver",
        "counter rooms 3 of 16",
        "list rooms 12 40",
        "health",
        "shutdown",
    ]);
    let sdk = AgonesSdk::new(&sidecar.config());
    sdk.ready().unwrap();
    let info = sdk.game_server().unwrap();
    assert_eq!(info.state.as_deref(), Some("Scheduled"));
    assert_eq!(info.address.as_deref(), Some("203.0.113.7"));
    assert_eq!(info.ports, vec![("game".to_owned(), 7412)]);
    assert_eq!(
        info.public_addr("game"),
        Some("203.0.113.7:7412".parse().unwrap())
    );
    sdk.set_counter("rooms", 3, Some(16)).unwrap();
    sdk.set_list("rooms", &["12".to_owned(), "40".to_owned()])
        .unwrap();
    sdk.health().unwrap();
    sdk.shutdown().unwrap();
    let found = sidecar.finish();
    assert!(found.mismatches.is_empty(), "{:?}", found.mismatches);
    assert_eq!(found.missing, 0);
}

#[test]
fn the_adapter_says_ready_reports_its_load_and_shuts_down_as_documented() {
    let sidecar = Sidecar::serve(&[
        "ready",
        "counter rooms 2",
        "counter players 5",
        "list rooms 4 7",
        "shutdown",
    ]);
    let adapter = AgonesAdapter::spawn(sidecar.config(), Heartbeat::new());
    adapter.ready();
    adapter.report(AgonesReport {
        rooms: 2,
        clients: 5,
        room_ids: vec!["7".into(), "4".into()],
    });
    let stats = adapter.shutdown();
    let found = sidecar.finish();
    assert!(found.mismatches.is_empty(), "{:?}", found.mismatches);
    assert_eq!(found.missing, 0);
    assert_eq!((stats.calls, stats.failures), (5, 0));
}

#[test]
fn the_fake_sidecar_refuses_a_request_that_differs_from_the_recording() {
    // The client before this recording pinned it: a counter's count as a JSON number.
    let number = serde_json::json!({ "count": 2 }).to_string();
    let expected = &documented("counter rooms 2")["request"];
    let path = "/v1beta1/counters/rooms";
    let json = Some("application/json");
    assert!(check(expected, "PATCH", path, json, &number).is_err());
    assert!(check(expected, "PATCH", path, json, r#"{"count": "2"}"#).is_ok());
    assert!(check(expected, "POST", path, json, r#"{"count": "2"}"#).is_err());
    assert!(check(expected, "PATCH", path, None, r#"{"count": "2"}"#).is_err());
    let get = &documented("gameserver")["request"];
    assert!(check(get, "GET", "/gameserver", None, "").is_ok());
}
