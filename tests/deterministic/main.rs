//! Cross-crate tests of the deterministic session, one module per behaviour.

#[path = "../common/mod.rs"]
mod common;

mod change_detection;
mod determinism;
mod entity_lifecycle;
mod resource_lifecycle;
mod rollback_exactness;
