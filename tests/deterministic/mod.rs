//! Cross-crate tests of the deterministic session, one module per behaviour.

mod change_detection;
mod determinism;
mod entity_lifecycle;
mod hierarchy;
mod resource_lifecycle;
mod rollback_exactness;
mod silent_divergence;
