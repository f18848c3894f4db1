//! The root package's integration tests, as one test binary (each binary links Bevy, so one
//! per crate keeps a cold `cargo test` short). One module per behaviour area:
//!
//! - `deterministic`: the deterministic session in one process (rollback exactness, determinism,
//!   entity, resource and change-detection lifecycles);
//! - `network`: networked sessions over the in-memory transport with a link conditioner, and UDP;
//! - `frame_phases`: frame phases and virtual-time events inside the simulation worlds;
//! - `hybrid`: players under rollback and props under ownership in one App;
//! - `sandbox_assets`: the sandbox example's loaders, CLI rules and shipped assets;
//! - `sandbox_ownership`: the sandbox's ownership mode run in this process (reproducibility);
//! - `sandbox_hybrid`: the sandbox's hybrid mode (players rolled back, props owned) in this
//!   process;
//! - `sandbox_grab`: the mouse grab of the rendered ownership participant (rules, injected input);
//! - `load`: the load generator's clients against the dedicated server over UDP;
//! - `module_graph`: no module cycle inside any crate.

mod common;
mod deterministic;
mod frame_phases;
mod hybrid;
mod load;
mod module_graph;
mod network;
mod sandbox_assets;
mod sandbox_grab;
mod sandbox_hybrid;
mod sandbox_ownership;

// The sandbox's modules name each other `crate::cli`, `crate::error`, ... (the example's root
// modules); in this binary they live under `sandbox_assets`.
use sandbox_assets::{cli, driver, error, game, link, scene, trace};
// `sandbox_hybrid`'s mode names the ownership mode `crate::ownership`.
use sandbox_ownership::ownership;
