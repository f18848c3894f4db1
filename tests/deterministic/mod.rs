//! Cross-crate tests of the deterministic session, one module per behaviour.

mod change_detection;
mod determinism;
mod determinism_guard;
mod entity_lifecycle;
mod ergonomics;
mod resource_lifecycle;
mod rollback_exactness;
