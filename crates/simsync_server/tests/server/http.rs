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

/// Sends `request` on a new connection and reads the whole answer (the server closes every
/// connection after its answer); `None` if the connection fails or no answer came in 10 s.
fn raw(addr: std::net::SocketAddr, request: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// A probe on a connection of its own: its status line, or `None`.
fn probe(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    let answer = raw(addr, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n"))?;
    answer.lines().next().map(str::to_string)
}

#[test]
fn a_request_holding_back_its_body_holds_up_no_probe_and_is_refused_before_its_body_without_the_token()
 {
    use std::io::{Read, Write};
    let mut server = server();
    let addr = server.ops_addr().unwrap();
    let held = thread::spawn(move || {
        // With the token: the server waits for the 1,025 bytes that never come.
        let mut slow = std::net::TcpStream::connect(addr).unwrap();
        let head = format!(
            "POST /rooms HTTP/1.1\r\nAuthorization: Bearer {ADMIN}\r\nContent-Length: 1025\r\n\r\n"
        );
        slow.write_all(head.as_bytes()).unwrap();
        // Without it: refused at once, the body never read.
        let mut anonymous = std::net::TcpStream::connect(addr).unwrap();
        anonymous
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        anonymous
            .write_all(b"POST /rooms HTTP/1.1\r\nContent-Length: 1025\r\n\r\n")
            .unwrap();
        let mut refused = String::new();
        let _ = anonymous.read_to_string(&mut refused);
        let probes = [
            probe(addr, "/healthz"),
            probe(addr, "/readyz"),
            probe(addr, "/metrics"),
        ];
        (slow, refused, probes)
    });
    while !held.is_finished() {
        server.turn(FRAME).unwrap();
        thread::sleep(Duration::from_millis(2));
    }
    let (slow, refused, probes) = held.join().unwrap();
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(refused.contains("\"unauthorized\""), "{refused}");
    for status in probes {
        assert_eq!(status.as_deref(), Some("HTTP/1.1 200 OK"));
    }
    // The slow request is still open, waiting for its body.
    assert!(server.ops_connections().unwrap().open >= 1);
    drop(slow);
}

#[test]
fn a_thousand_idle_connections_leave_probes_answered_on_a_bounded_port() {
    let mut server = server();
    let addr = server.ops_addr().unwrap();
    let idle = thread::spawn(move || {
        let idle: Vec<_> = (0..1_000)
            .filter_map(|_| std::net::TcpStream::connect(addr).ok())
            .collect();
        let probes = [probe(addr, "/healthz"), probe(addr, "/metrics")];
        (idle, probes)
    });
    while !idle.is_finished() {
        server.turn(FRAME).unwrap();
        thread::sleep(Duration::from_millis(2));
    }
    let (idle, probes) = idle.join().unwrap();
    assert_eq!(idle.len(), 1_000);
    for status in probes {
        assert_eq!(status.as_deref(), Some("HTTP/1.1 200 OK"));
    }
    let port = server.ops_connections().unwrap();
    let cap = simsync_server::OpsLimits::default().max_connections as u64;
    assert!(port.open <= cap, "{port:?}");
    assert!(port.accepted >= 1_002, "{port:?}");
    // Every connection over the cap closed an older idle one (the two probes were answered).
    assert!(port.evicted >= port.accepted - cap - 2, "{port:?}");
    drop(idle);
}

#[test]
fn a_connection_that_sends_no_head_is_closed_at_the_head_timeout() {
    use std::io::Read;
    let mut server = server_with(|c| c.ops_limits.head_timeout = Duration::from_millis(200));
    let addr = server.ops_addr().unwrap();
    let silent = thread::spawn(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).map(|_| rest.len())
    });
    while !silent.is_finished() {
        server.turn(FRAME).unwrap();
        thread::sleep(Duration::from_millis(2));
    }
    // Closed by the server (end of stream, nothing sent), not by the client's read timeout.
    assert_eq!(silent.join().unwrap().ok(), Some(0));
    server.turn(FRAME).unwrap();
    let port = server.ops_connections().unwrap();
    assert_eq!((port.timed_out, port.open), (1, 0), "{port:?}");
}

#[test]
fn probes_take_get_and_head_only_and_the_bearer_scheme_in_any_case() {
    let mut server = server();
    let addr = server.ops_addr().unwrap();
    let answers = while_turning(&mut server, move |_| {
        let post = raw(addr, "POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        let head = raw(addr, "HEAD /healthz HTTP/1.1\r\n\r\n");
        let lower = raw(
            addr,
            &format!("GET /rooms HTTP/1.1\r\nauthorization: bearer {ADMIN}\r\n\r\n"),
        );
        [post, head, lower]
            .into_iter()
            .map(|a| (0, a.unwrap_or_default()))
            .collect()
    });
    let (post, head, lower) = (&answers[0].1, &answers[1].1, &answers[2].1);
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    assert!(post.contains("Allow: GET, HEAD\r\n"), "{post}");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("Content-Length: 3\r\n"), "{head}");
    assert!(
        head.ends_with("\r\n\r\n"),
        "a HEAD answer has no body: {head}"
    );
    assert!(lower.starts_with("HTTP/1.1 200 OK"), "{lower}");
    assert!(lower.ends_with("[]"), "{lower}");
}

/// `/metrics` with `accept` (if any): its content type and body.
fn metrics_as(addr: std::net::SocketAddr, accept: Option<&str>) -> (String, String) {
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let answer = raw(addr, &format!("GET /metrics HTTP/1.1\r\n{accept}\r\n")).unwrap_or_default();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or(("", ""));
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .unwrap_or("")
        .to_string();
    (content_type, body.to_string())
}

#[test]
fn metrics_are_prometheus_text_or_openmetrics_by_accept_and_every_family_has_help() {
    use openmetrics_parser::{OpenMetricsType, PrometheusType};
    let mut server = server();
    server.rooms_mut().create(None, relay_room(2)).unwrap();
    // Some families get their first series when a room turns (a family without samples is
    // dropped by the text parser): both scrapes come after the first turns.
    for _ in 0..3 {
        server.turn(FRAME).unwrap();
    }
    let addr = server.ops_addr().unwrap();
    let answers = while_turning(&mut server, move |_| {
        let (text_type, text) = metrics_as(addr, None);
        let (open_type, open) =
            metrics_as(addr, Some("application/openmetrics-text; version=1.0.0"));
        vec![(0, text_type), (0, text), (0, open_type), (0, open)]
    });
    let (text_type, text) = (&answers[0].1, &answers[1].1);
    let (open_type, open) = (&answers[2].1, &answers[3].1);
    assert!(
        text_type.starts_with("text/plain; version=0.0.4"),
        "{text_type}"
    );
    assert!(
        open_type.starts_with("application/openmetrics-text"),
        "{open_type}"
    );
    let text = openmetrics_parser::prometheus::parse_prometheus(text)
        .unwrap_or_else(|e| panic!("{e:?} in\n{text}"));
    for family in text.families.values() {
        assert!(
            !family.help.is_empty(),
            "{} has no help",
            family.family_name
        );
        assert_ne!(
            family.family_type,
            PrometheusType::Unknown,
            "{}",
            family.family_name
        );
        if family.family_type == PrometheusType::Counter {
            assert!(
                family.family_name.ends_with("_total"),
                "{}",
                family.family_name
            );
        }
    }
    let open = openmetrics_parser::openmetrics::parse_openmetrics(open)
        .unwrap_or_else(|e| panic!("{e:?} in\n{open}"));
    for family in open.families.values() {
        assert!(
            !family.help.is_empty(),
            "{} has no help",
            family.family_name
        );
        assert_ne!(
            family.family_type,
            OpenMetricsType::Unknown,
            "{}",
            family.family_name
        );
    }
    // The same families in both, every exported name among them.
    assert_eq!(text.families.len(), open.families.len());
    for name in METRIC_NAMES {
        assert!(
            open.families.contains_key(name),
            "{name} not in {:?}",
            open.families.keys()
        );
    }
}
