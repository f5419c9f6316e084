//! The fault suite: a small fleet (two floodgates, one Redis, one real Postfix with
//! Dovecot SASL) under crashes, outages, reloads and a full spool, with books that must
//! balance (see `fleet.rs`).

#[path = "../common/mod.rs"]
mod common;

mod fleet;
mod ledger;
mod traffic;
