//! Rate-limit algorithms and limit strings, as pure functions over small
//! per-key records. No I/O, no SMTP.
//!
//! * [`spec`]: Exim `ratelimit` strings (`100 / 1d / per_rcpt / strict / key`).
//! * [`acl`] and [`per`]: Exim's ACLs and the `per_*` options each allows.
//! * [`ewma`]: Exim's EWMA rate, bit for bit.
//! * [`unique`]: Exim's Bloom filter and an exact set for `unique=` / per_addr.
//! * [`gcra`]: a token bucket (GCRA) with an exact retry-after.
//! * [`bucket`]: an Rspamd-compatible leaky bucket with dynamic multipliers.
//! * [`rate`]: Rspamd-style rate and burst strings.
//! * [`cache`]: Exim's per-connection / per-message / per-command caches.

pub mod acl;
pub mod bucket;
pub mod cache;
pub mod ewma;
pub mod gcra;
pub mod number;
pub mod per;
pub mod rate;
pub mod spec;
pub mod unique;

pub use cache::SessionCache;
pub use spec::{LimitSpec, SpecError};
