//! Integration tests of the load generator (one test binary): its fake clients against an
//! in-process `simsync_server::DedicatedServer` over UDP on 127.0.0.1, stepped frame by frame
//! with the server.

#[path = "load/common.rs"]
mod common;
#[path = "load/smoke.rs"]
mod smoke;
