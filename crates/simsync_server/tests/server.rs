//! Integration tests of the dedicated server (one binary).
