//! Networked deterministic sessions: a relay server and clients as separate Apps in one
//! process, over the in-memory transport with a seeded link conditioner (and once over UDP).

mod authority;
mod clock_sync;
mod config_check;
mod departures;
mod desync_report;
mod diagnostics;
mod disconnects;
mod flood;
mod frame_rate;
pub(crate) mod harness;
mod hostile_peers;
mod inputs;
mod late_checksums;
mod late_join;
mod lifecycle;
mod local_players;
mod long_links;
mod peers;
mod readme_agreement;
mod reconnect;
mod rejoin;
mod rematch;
mod robustness;
mod sessions;
mod sim_events;
mod udp;
