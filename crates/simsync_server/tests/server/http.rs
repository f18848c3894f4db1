//! The HTTP port for real: probes, metrics and the admin API with its typed errors, answered
//! while the main loop turns (the requests run on another thread).

use std::thread;
use std::time::Duration;

use serde_json::Value;
use simsync_server::{DedicatedServer, METRIC_NAMES};

use crate::common::*;

/// Status and body of one request.
type Answer = (u16, String);

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into()
}

fn call(method: &str, url: &str, token: Option<&str>, body: Option<&str>) -> Answer {
    let agent = agent();
    let auth = token.map(|t| format!("Bearer {t}"));
    let result = match (method, body) {
        ("GET", _) => {
            let mut req = agent.get(url);
            if let Some(auth) = &auth {
                req = req.header("Authorization", auth);
            }
            req.call()
        }
        ("DELETE", _) => {
            let mut req = agent.delete(url);
            if let Some(auth) = &auth {
                req = req.header("Authorization", auth);
            }
            req.call()
        }
        (_, body) => {
            let mut req = agent.post(url);
            if let Some(auth) = &auth {
                req = req.header("Authorization", auth);
            }
            req.send(body.unwrap_or(""))
        }
    };
    let mut response = result.expect("the request reaches the server");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, text)
}

/// Runs `requests` on a thread while the server's loop turns; returns their answers.
fn while_turning(
    server: &mut DedicatedServer,
    requests: impl FnOnce(String) -> Vec<Answer> + Send + 'static,
) -> Vec<Answer> {
    let base = format!("http://{}", server.ops_addr().unwrap());
    let worker = thread::spawn(move || requests(base));
    while !worker.is_finished() {
        server.turn(FRAME).unwrap();
        thread::sleep(Duration::from_millis(2));
    }
    worker.join().unwrap()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

const ROOM: &str = r#"{"id":3,"kind":"relay","players":2,"input":{"name":"game::Input","max_bytes":8,"default":[0]}}"#;

#[test]
fn probes_and_metrics_answer_from_the_http_thread() {
    let mut server = server();
    let answers = while_turning(&mut server, |base| {
        vec![
            call("GET", &format!("{base}/healthz"), None, None),
            call("GET", &format!("{base}/readyz"), None, None),
            call("GET", &format!("{base}/metrics"), None, None),
            call("GET", &format!("{base}/nothing"), None, None),
        ]
    });
    assert_eq!(answers[0], (200, "ok\n".to_string()));
    assert_eq!(answers[1], (200, "ready\n".to_string()));
    assert_eq!(answers[2].0, 200);
    for name in METRIC_NAMES
        .iter()
        .filter(|n| **n != "simsync_room_tick_lag_ticks")
    {
        assert!(answers[2].1.contains(name), "{name} not in /metrics");
    }
    assert_eq!(answers[3].0, 404);
}

#[test]
fn healthz_fails_when_the_main_loop_stops_turning_and_readyz_when_draining() {
    let mut server = server();
    server.turn(FRAME).unwrap();
    let base = format!("http://{}", server.ops_addr().unwrap());
    // No turn for 2.2 s: the HTTP thread still answers, and says the loop stalled.
    thread::sleep(Duration::from_millis(2_200));
    let (status, body) = call("GET", &format!("{base}/healthz"), None, None);
    assert_eq!(status, 503);
    assert!(body.starts_with("main loop stalled for"), "{body}");
    server.turn(FRAME).unwrap();
    assert_eq!(call("GET", &format!("{base}/healthz"), None, None).0, 200);
    server.drain_signal().raise();
    server.rooms_mut().create(None, relay_room(1)).unwrap();
    server.turn(FRAME).unwrap();
    assert_eq!(
        call("GET", &format!("{base}/readyz"), None, None),
        (503, "not ready: draining\n".to_string())
    );
}

#[test]
fn the_admin_api_makes_lists_reads_and_ends_rooms_with_typed_errors() {
    let mut server = server();
    let answers = while_turning(&mut server, |base| {
        let rooms = format!("{base}/rooms");
        vec![
            call("GET", &rooms, None, None),
            call("POST", &rooms, Some("wrong"), Some(ROOM)),
            call("POST", &rooms, Some(ADMIN), Some("{not json")),
            call(
                "POST",
                &rooms,
                Some(ADMIN),
                Some(&ROOM.replace("\"players\":2", "\"players\":0")),
            ),
            call("POST", &rooms, Some(ADMIN), Some(ROOM)),
            call("POST", &rooms, Some(ADMIN), Some(ROOM)),
            call("GET", &rooms, Some(ADMIN), None),
            call("GET", &format!("{rooms}/3"), Some(ADMIN), None),
            call("GET", &format!("{rooms}/42"), Some(ADMIN), None),
            call("DELETE", &format!("{rooms}/3"), Some(ADMIN), None),
            call("DELETE", &format!("{rooms}/42"), Some(ADMIN), None),
        ]
    });
    let kind = |a: &Answer| {
        json(&a.1)["error"]["kind"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(
        (answers[0].0, kind(&answers[0]).as_str()),
        (401, "unauthorized")
    );
    assert_eq!(
        (answers[1].0, kind(&answers[1]).as_str()),
        (401, "unauthorized")
    );
    assert_eq!(
        (answers[2].0, kind(&answers[2]).as_str()),
        (400, "bad_request")
    );
    assert_eq!(
        (answers[3].0, kind(&answers[3]).as_str()),
        (400, "bad_config")
    );
    assert_eq!(answers[4].0, 201);
    assert_eq!(json(&answers[4].1)["id"], 3);
    assert_eq!(json(&answers[4].1)["state"], "open");
    assert_eq!(
        (answers[5].0, kind(&answers[5]).as_str()),
        (409, "room_exists")
    );
    assert_eq!(answers[6].0, 200);
    assert_eq!(json(&answers[6].1).as_array().map(Vec::len), Some(1));
    assert_eq!(json(&answers[7].1)["slots"], 2);
    assert_eq!(
        (answers[8].0, kind(&answers[8]).as_str()),
        (404, "unknown_room")
    );
    assert_eq!(answers[9].0, 200);
    assert_eq!(json(&answers[9].1)["state"], "ended");
    assert_eq!(json(&answers[9].1)["end_reason"], "ended by the operator");
    assert_eq!(
        (answers[10].0, kind(&answers[10]).as_str()),
        (404, "unknown_room")
    );
}
