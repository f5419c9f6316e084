//! floodgate: an SMTP submission proxy that stops outgoing email floods.
//!
//! Data flows one way: bytes → commands → a decision → bytes.
//!
//! | module | owns |
//! |---|---|
//! | [`smtp`] | the wire protocol without I/O: framing, parsing, formatting |
//! | [`policy`] | the verdict asked for at every SMTP stage |
//! | [`proxy`] | the async session: client side, upstream side, the command loop |
//! | [`server`] | listeners, admission, signals, reload, shutdown |
//! | [`config`] | the TOML configuration model and its validation |
//! | [`tls`] | rustls configurations (crypto provider: ring) |

pub mod config;
pub mod policy;
pub mod proxy;
pub mod server;
pub mod smtp;
pub mod tls;
