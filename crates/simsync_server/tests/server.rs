//! Integration tests of the dedicated server (one test binary): rooms over real UDP on
//! 127.0.0.1, refusals, the HTTP port, the drain, the Agones adapter against a local recorder
//! and against the sidecar's documented REST exchange; rooms on several worker threads.

#[path = "server/agones.rs"]
mod agones;
#[path = "server/agones_rest.rs"]
mod agones_rest;
#[path = "server/common.rs"]
mod common;
#[path = "server/drain.rs"]
mod drain;
#[path = "server/http.rs"]
mod http;
#[path = "server/ownership_room.rs"]
mod ownership_room;
#[path = "server/physics_host.rs"]
mod physics_host;
#[path = "server/refusals.rs"]
mod refusals;
#[path = "server/room_ends.rs"]
mod room_ends;
#[path = "server/rooms_udp.rs"]
mod rooms_udp;
#[path = "server/workers.rs"]
mod workers;
