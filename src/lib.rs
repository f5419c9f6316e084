//! floodgate: an SMTP submission proxy that stops outgoing email floods.

pub mod limit;
pub mod simulate;
pub mod store;
