//! The load generator (`simsync_loadgen`): its fake clients against an in-process
//! `simsync_server::DedicatedServer` over UDP on 127.0.0.1, stepped frame by frame with the
//! server.

mod common;
mod smoke;
