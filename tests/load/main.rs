//! Bounded load and soak runs (many sessions, memory and file descriptors over time).

#[path = "../common/mod.rs"]
mod common;
#[path = "../loadkit/mod.rs"]
mod loadkit;

mod load_sessions;
mod soak;
