//! The integration tests of simsync_net, one binary: the codec on the real messages, the
//! in-memory transport between Apps, and UDP on loopback.

#[path = "../samples/mod.rs"]
mod samples;

mod codec_messages;
mod memory_network;
mod udp_loopback;
