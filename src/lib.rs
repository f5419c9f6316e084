//! floodgate: an SMTP submission proxy that stops outgoing email floods.
pub mod smtp;
