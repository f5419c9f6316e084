//! floodgate: an SMTP submission proxy that stops outgoing email floods.
//!
//! Data flows one way: bytes → commands → a decision → bytes. See DESIGN.md for the parts.

pub mod config;
pub mod tls;
