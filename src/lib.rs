//! floodgate: an SMTP submission proxy that stops outgoing email floods.
//!
//! Data flows one way: bytes → commands → a decision → bytes.
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
//! | [`admin`] | metrics, the admin API and the client side of the admin verbs |

pub mod admin;
pub mod config;
pub mod generation;
pub mod hold;
pub mod limit;
pub mod logs;
pub mod outcomes;
pub mod policy;
pub mod proxy;
pub mod report;
pub mod server;
pub mod simulate;
pub mod smtp;
pub mod store;
pub mod tls;
