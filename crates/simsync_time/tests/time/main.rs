//! Integration tests of `simsync_time`, one binary:
//!
//! - `virtual_time`: property tests of instants, tick rates and the event queue (time rules
//!   1–10 in `simsync_time::rules`);
//! - `frame`: frame phases and double-buffered state in running Apps (time rules 11–15);
//! - `clock`: the plugin's clock and event dispatch in running Apps (time rules 16–18).

mod clock;
mod frame;
mod virtual_time;
