//! The integration tests of simsync_net, one binary: the codec on the real messages, the
//! in-memory transport between Apps, and UDP on loopback.

#[path = "../samples/mod.rs"]
mod samples;

mod codec_messages;
mod memory_network;
mod udp_loopback;

/// A `StateBatch` payload for transport tests: `n` in its first four bytes, then `len - 4`
/// filler bytes (the payload is opaque to the transport).
fn numbered_batch(n: u32, len: usize) -> Vec<u8> {
    let mut bytes = n.to_le_bytes().to_vec();
    bytes.resize(len.max(4), 0xA5);
    bytes
}

/// The number [`numbered_batch`] wrote.
fn batch_number(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..4].try_into().expect("four bytes"))
}
