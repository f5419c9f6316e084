//! floodgate: an SMTP submission proxy that stops outgoing email floods.
//!
//! Data flows one way: bytes → SMTP dialogue → policy decision → store → relay. The floors
//! (a module imports only from lower ones) are drawn in ARCHITECTURE.md beside this crate and
//! checked by `tests/architecture.rs`.
//!
//! | module | owns |
//! |---|---|
//! | [`smtp`] | the wire protocol without I/O: framing, parsing, formatting |
//! | [`limit`] | the rate algorithms as pure functions, and limit strings |
//! | [`store`] | applying one decision atomically to the state of its keys |
//! | [`simulate`] | replaying events through one limit, without network |
//! | [`policy`] | the verdict asked for at every SMTP stage |
//! | [`proxy`] | the async session: client side, upstream side, the command loop |
//! | [`server`] | listeners, admission, signals, reload, shutdown |
//! | [`config`] | the TOML configuration as written and its primitives; imports nothing else of the crate |
//! | [`generation`] | the config with what each layer compiled from it, swapped whole on reload |
//! | [`tls`] | rustls configurations (crypto provider: ring) |
//! | [`report`] | the event log for measurement, `floodgate report`, alert delivery |
//! | [`hold`] | the hold spool's file format and the pacing of releases |
//! | [`outcomes`] | upstream's outcomes after queueing: queue ids, the index, log lines |
//! | [`logs`] | the log writer off the session's thread |
//! | [`lograte`] | warnings that can come once per event, told once per interval with a count |
//! | [`time`] | RFC 3339 in and out, and times given as a duration back from now |
//! | [`docs`] | man pages and shell completions generated from the command line |
//! | [`figures`] | numbers, byte sizes, durations and periods as people read them; imports nothing else of the crate |
//! | [`message_keys`] | keys read from the message itself: text fingerprint, link domains, Subject shape |
//! | [`metrics`] | the metrics registry and its exposition; a leaf, it imports nothing of the crate |
//! | [`admin`] | the admin API, the metrics endpoint and the client side of the admin verbs |

pub mod admin;
pub mod config;
pub mod demo;
pub mod docs;
pub mod figures;
pub mod generation;
pub mod hold;
pub mod limit;
pub mod lograte;
pub mod logs;
pub mod message_keys;
pub mod metrics;
pub mod outcomes;
pub mod policy;
pub mod proxy;
pub mod report;
pub mod server;
pub mod simulate;
pub mod smtp;
pub mod store;
pub mod time;
pub mod tls;
