//! The proxy against a recording upstream: sessions, relay, identity, hostile clients, faults, logs.

#[path = "../common/mod.rs"]
mod common;
#[path = "../diff/mod.rs"]
mod diff;

mod faults;
mod hostile_caps;
mod log_queue;
mod message_keys_stall;
mod policy_e2e;
mod proxy_harness;
mod proxy_hostile;
mod proxy_identity;
mod proxy_lifecycle;
mod proxy_message;
mod proxy_relay;
mod proxy_security;
mod proxy_session;
mod proxy_upstream;
mod session_diff;
