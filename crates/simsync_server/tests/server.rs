//! Integration tests of the dedicated server (one binary).

#[path = "server/agones.rs"]
mod agones;
