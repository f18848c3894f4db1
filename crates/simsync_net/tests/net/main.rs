//! The integration tests of simsync_net, one binary: the codec on the real messages, the
//! in-memory transport between Apps, and UDP on loopback.

mod codec_messages;
mod memory_network;
mod udp_loopback;
