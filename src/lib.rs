#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::too_many_lines))]

//! floodgate: an SMTP submission proxy that stops outgoing email floods.
//!
//! Data flows one way: bytes → SMTP dialogue → policy decision → store → relay. The map of
//! the modules (every one down to the second level, what it holds, its floor: a module
//! imports only from lower floors) and the walk of one RCPT through the code are in
//! ARCHITECTURE.md beside this crate; `tests/architecture.rs` checks the floors and that the
//! map names every module.

pub mod admin;
pub mod config;
pub mod demo;
pub mod docs;
pub mod eventlog;
pub mod exchange;
pub mod figures;
pub mod generation;
pub mod hold;
pub mod limit;
pub mod lograte;
pub mod logs;
pub mod message_keys;
pub mod metrics;
pub mod milter;
pub mod outcomes;
pub mod policy;
pub mod policy_service;
pub mod postfix;
pub mod proxy;
pub mod report;
pub mod server;
pub mod simulate;
pub mod smtp;
pub mod store;
pub mod time;
pub mod tls;
