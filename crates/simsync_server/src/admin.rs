//! The admin API ([admin API](crate::rules#the-admin-api)): rooms created, listed, read and
//! ended over HTTP with the admin token. [`parse`] turns a request into an [`AdminCommand`]
//! or a typed [`AdminError`] (pure, on the HTTP thread); [`execute`] carries a command out on
//! the [`Rooms`] (on the main loop).

use serde_json::{Value, json};
use simsync_net::MatchEndReason;

use crate::room_config::RoomConfig;
use crate::rooms::{CreateRoomError, Rooms};
use crate::token::RoomId;

/// The largest request body read, in bytes.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// An HTTP request as the admin API reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminRequest {
    /// `GET`, `POST`, `DELETE`...
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// What an admin request asks.
#[derive(Debug, Clone, PartialEq)]
pub enum AdminCommand {
    /// `POST /rooms`: make a room (under `id`, or the next free one).
    Create {
        /// The id asked for.
        id: Option<RoomId>,
        /// The room.
        config: RoomConfig,
    },
    /// `GET /rooms`: every live room.
    List,
    /// `GET /rooms/{id}`: one room (live, or ended recently).
    Get(RoomId),
    /// `DELETE /rooms/{id}`: end a room; its clients are told the server ended it.
    End(RoomId),
}

/// Why an admin request failed: each has its HTTP status and a `kind` in the JSON body
/// (`{"error": {"kind": ..., "message": ...}}`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// No `Authorization: Bearer <admin token>`, or another token (401).
    #[error("missing or wrong admin token")]
    Unauthorized,
    /// A path the API does not have (404).
    #[error("no such path: {0}")]
    NoSuchPath(String),
    /// A method the path does not take (405).
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed {
        /// The method.
        method: String,
        /// The path.
        path: String,
    },
    /// A body that is not the JSON asked for, or a room id that is not a number (400).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// A room config that does not validate (400).
    #[error("bad room config: {0}")]
    BadConfig(String),
    /// No such room (404).
    #[error("room {0} is not on this server")]
    UnknownRoom(u64),
    /// The room id was used before (409).
    #[error("room {0} exists already")]
    RoomExists(u64),
    /// The server drains (503).
    #[error("the server is draining: no new rooms")]
    Draining,
    /// The server hosts as many rooms as it may (503).
    #[error("the server hosts as many rooms as it may")]
    Full,
    /// The main loop did not answer in time (503).
    #[error("the server's main loop did not answer")]
    Busy,
}

impl AdminError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            AdminError::Unauthorized => 401,
            AdminError::NoSuchPath(_) | AdminError::UnknownRoom(_) => 404,
            AdminError::MethodNotAllowed { .. } => 405,
            AdminError::BadRequest(_) | AdminError::BadConfig(_) => 400,
            AdminError::RoomExists(_) => 409,
            AdminError::Draining | AdminError::Full | AdminError::Busy => 503,
        }
    }

    /// The `kind` in the JSON body.
    pub fn kind(&self) -> &'static str {
        match self {
            AdminError::Unauthorized => "unauthorized",
            AdminError::NoSuchPath(_) => "no_such_path",
            AdminError::MethodNotAllowed { .. } => "method_not_allowed",
            AdminError::BadRequest(_) => "bad_request",
            AdminError::BadConfig(_) => "bad_config",
            AdminError::UnknownRoom(_) => "unknown_room",
            AdminError::RoomExists(_) => "room_exists",
            AdminError::Draining => "draining",
            AdminError::Full => "full",
            AdminError::Busy => "busy",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {"kind": self.kind(), "message": self.to_string()}})
    }
}

/// An answer: status and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminResponse {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: Value,
}

impl From<AdminError> for AdminResponse {
    fn from(error: AdminError) -> Self {
        Self {
            status: error.status(),
            body: error.body(),
        }
    }
}

/// Whether `path` belongs to the admin API (`/rooms`, `/rooms/...`).
pub fn is_admin_path(path: &str) -> bool {
    path == "/rooms" || path.starts_with("/rooms/")
}

/// Compares two byte strings in time that depends on their lengths only.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks an `Authorization` header: the `Bearer` scheme (in any case, as HTTP schemes are)
/// and the admin token, compared in constant time. The HTTP thread checks it as soon as a
/// request's head is read, before any body.
///
/// # Errors
///
/// [`AdminError::Unauthorized`] without the header, with another scheme or token, or when
/// `admin_token` is empty.
pub fn authorize(authorization: Option<&str>, admin_token: &str) -> Result<(), AdminError> {
    let presented = authorization.map(str::trim).and_then(|h| {
        let (scheme, token) = h.split_once(' ')?;
        scheme.eq_ignore_ascii_case("Bearer").then(|| token.trim())
    });
    match presented {
        Some(token)
            if !admin_token.is_empty() && same_secret(token.as_bytes(), admin_token.as_bytes()) =>
        {
            Ok(())
        }
        _ => Err(AdminError::Unauthorized),
    }
}

/// Reads a request: the admin token first (whatever the path under `/rooms`), then the route
/// and its body.
///
/// # Errors
///
/// The [`AdminError`] to answer with.
pub fn parse(request: &AdminRequest, admin_token: &str) -> Result<AdminCommand, AdminError> {
    authorize(request.authorization.as_deref(), admin_token)?;
    let method = request.method.to_ascii_uppercase();
    let not_allowed = || AdminError::MethodNotAllowed {
        method: method.clone(),
        path: request.path.clone(),
    };
    if request.path == "/rooms" {
        return match method.as_str() {
            "GET" => Ok(AdminCommand::List),
            "POST" => parse_create(&request.body),
            _ => Err(not_allowed()),
        };
    }
    let Some(id) = request.path.strip_prefix("/rooms/") else {
        return Err(AdminError::NoSuchPath(request.path.clone()));
    };
    let id = id
        .trim_end_matches('/')
        .parse::<u64>()
        .map(RoomId)
        .map_err(|_| AdminError::BadRequest(format!("`{id}` is not a room id (a number)")))?;
    match method.as_str() {
        "GET" => Ok(AdminCommand::Get(id)),
        "DELETE" => Ok(AdminCommand::End(id)),
        _ => Err(not_allowed()),
    }
}

/// A create body: a room config (JSON object with `kind`) and an optional `id`.
fn parse_create(body: &[u8]) -> Result<AdminCommand, AdminError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(AdminError::BadRequest(format!(
            "a body above {MAX_BODY_BYTES} bytes"
        )));
    }
    let mut value: Value = serde_json::from_slice(body)
        .map_err(|e| AdminError::BadRequest(format!("not JSON: {e}")))?;
    let object = value
        .as_object_mut()
        .ok_or_else(|| AdminError::BadRequest("the body must be a JSON object".into()))?;
    let id =
        match object.remove("id") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => Some(RoomId(n.as_u64().ok_or_else(|| {
                AdminError::BadRequest("id must be a non-negative integer".into())
            })?)),
            Some(_) => return Err(AdminError::BadRequest("id must be a number".into())),
        };
    let config: RoomConfig =
        serde_json::from_value(value).map_err(|e| AdminError::BadConfig(e.to_string()))?;
    config
        .validate()
        .map_err(|e| AdminError::BadConfig(e.to_string()))?;
    Ok(AdminCommand::Create { id, config })
}

/// Carries `command` out on `rooms`.
///
/// # Errors
///
/// An unknown room, a used id, a draining or full server.
pub fn execute(command: AdminCommand, rooms: &mut Rooms) -> Result<AdminResponse, AdminError> {
    let ok = |status: u16, body: Value| Ok(AdminResponse { status, body });
    match command {
        AdminCommand::Create { id, config } => {
            let id = rooms.create(id, config).map_err(|e| match e {
                CreateRoomError::Config(e) => AdminError::BadConfig(e.to_string()),
                CreateRoomError::Exists(id) => AdminError::RoomExists(id.0),
                CreateRoomError::Draining => AdminError::Draining,
                CreateRoomError::Full => AdminError::Full,
            })?;
            ok(201, json!(rooms.summary(id)))
        }
        AdminCommand::List => ok(200, json!(rooms.summaries())),
        AdminCommand::Get(id) => match rooms.summary(id) {
            Some(summary) => ok(200, json!(summary)),
            None => Err(AdminError::UnknownRoom(id.0)),
        },
        AdminCommand::End(id) => {
            rooms
                .end(id, MatchEndReason::EndedByOperator)
                .map_err(|_| AdminError::UnknownRoom(id.0))?;
            ok(200, json!(rooms.summary(id)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const TOKEN: &str = "s3cret";

    fn request(method: &str, path: &str, token: Option<&str>, body: &str) -> AdminRequest {
        AdminRequest {
            method: method.into(),
            path: path.into(),
            authorization: token.map(|t| format!("Bearer {t}")),
            body: body.as_bytes().to_vec(),
        }
    }

    const RELAY: &str = r#"{"kind":"relay","players":2,"input":{"name":"game::Input","max_bytes":8,"default":[0]}}"#;

    #[test]
    fn every_path_needs_the_admin_token() {
        for (method, path) in [
            ("GET", "/rooms"),
            ("POST", "/rooms"),
            ("DELETE", "/rooms/1"),
        ] {
            for token in [None, Some("wrong"), Some("s3cret-and-more")] {
                let error = parse(&request(method, path, token, RELAY), TOKEN).unwrap_err();
                assert_eq!(error, AdminError::Unauthorized);
                assert_eq!(error.status(), 401);
            }
        }
        // The scheme in any case (RFC 7235), the token exactly.
        assert_eq!(authorize(Some("bearer s3cret"), TOKEN), Ok(()));
        assert_eq!(authorize(Some("BEARER  s3cret "), TOKEN), Ok(()));
        assert_eq!(
            authorize(Some("Basic s3cret"), TOKEN),
            Err(AdminError::Unauthorized)
        );
        assert_eq!(
            authorize(Some("Bearer S3CRET"), TOKEN),
            Err(AdminError::Unauthorized)
        );
        // An empty admin token opens nothing.
        assert_eq!(
            parse(&request("GET", "/rooms", Some(""), ""), "").unwrap_err(),
            AdminError::Unauthorized
        );
    }

    #[test]
    fn routes_become_commands() {
        let ok = |method, path, body| parse(&request(method, path, Some(TOKEN), body), TOKEN);
        assert_eq!(ok("GET", "/rooms", ""), Ok(AdminCommand::List));
        assert_eq!(ok("GET", "/rooms/7", ""), Ok(AdminCommand::Get(RoomId(7))));
        assert_eq!(
            ok("DELETE", "/rooms/7/", ""),
            Ok(AdminCommand::End(RoomId(7)))
        );
        let with_id = RELAY.replacen('{', r#"{"id":12,"#, 1);
        assert!(matches!(
            ok("POST", "/rooms", &with_id),
            Ok(AdminCommand::Create {
                id: Some(RoomId(12)),
                ..
            })
        ));
    }

    #[test]
    fn bad_requests_are_typed() {
        let err = |method, path, body| {
            parse(&request(method, path, Some(TOKEN), body), TOKEN).unwrap_err()
        };
        assert_eq!(err("GET", "/rooms/abc", "").status(), 400);
        assert_eq!(err("PUT", "/rooms", "").status(), 405);
        assert_eq!(err("POST", "/rooms", "not json").kind(), "bad_request");
        assert_eq!(
            err("POST", "/rooms", r#"{"kind":"arena"}"#).kind(),
            "bad_config"
        );
        let zero_players = RELAY.replace(r#""players":2"#, r#""players":0"#);
        let error = err("POST", "/rooms", &zero_players);
        assert_eq!((error.status(), error.kind()), (400, "bad_config"));
        assert_eq!(
            err("POST", "/rooms", r#"{"id":"x","kind":"relay"}"#).status(),
            400
        );
    }

    #[test]
    fn commands_act_on_the_rooms_and_unknown_rooms_are_404() {
        let mut rooms = Rooms::new(Duration::from_secs(30));
        let AdminCommand::Create { id, config } =
            parse(&request("POST", "/rooms", Some(TOKEN), RELAY), TOKEN).unwrap()
        else {
            panic!("a create")
        };
        let made = execute(
            AdminCommand::Create {
                id,
                config: config.clone(),
            },
            &mut rooms,
        )
        .unwrap();
        assert_eq!(made.status, 201);
        assert_eq!(made.body["id"], 1);
        assert_eq!(made.body["kind"], "relay");
        assert_eq!(made.body["state"], "open");
        let again = execute(
            AdminCommand::Create {
                id: Some(RoomId(1)),
                config,
            },
            &mut rooms,
        );
        assert_eq!(again.unwrap_err(), AdminError::RoomExists(1));
        let list = execute(AdminCommand::List, &mut rooms).unwrap();
        assert_eq!(list.body.as_array().map(Vec::len), Some(1));
        assert_eq!(
            execute(AdminCommand::Get(RoomId(9)), &mut rooms).unwrap_err(),
            AdminError::UnknownRoom(9)
        );
        assert_eq!(
            execute(AdminCommand::End(RoomId(9)), &mut rooms)
                .unwrap_err()
                .status(),
            404
        );
        // An empty room ends at once.
        let ended = execute(AdminCommand::End(RoomId(1)), &mut rooms).unwrap();
        assert_eq!(ended.body["state"], "ended");
    }

    #[test]
    fn a_draining_server_makes_no_rooms() {
        let mut rooms = Rooms::new(Duration::from_secs(30));
        rooms.stop_accepting();
        let AdminCommand::Create { id, config } =
            parse(&request("POST", "/rooms", Some(TOKEN), RELAY), TOKEN).unwrap()
        else {
            panic!("a create")
        };
        let error = execute(AdminCommand::Create { id, config }, &mut rooms).unwrap_err();
        assert_eq!((error.status(), error.kind()), (503, "draining"));
    }
}
