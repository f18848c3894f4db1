//! Cross-crate tests of the deterministic session, one module per behaviour.

mod change_detection;
pub(crate) mod desync_dumps;
mod determinism;
mod determinism_guard;
mod entity_lifecycle;
mod entity_offsets;
mod entity_offsets_user;
mod ergonomics;
mod failure_causes;
mod hierarchy;
mod hooks;
mod input_edges;
mod local_disconnect;
mod physics_setup;
mod presented_tick;
pub(crate) mod replays;
mod resource_lifecycle;
mod rollback_exactness;
mod silent_divergence;
pub(crate) mod sim_events;
mod sim_messages;
mod smoothing;
mod snapshot_mutations;
mod snapshots;
