//! The async session: client side (TLS, STARTTLS), upstream side (connect, greeting,
//! STARTTLS, XCLIENT / PROXY v2), and the command loop that relays one command at a time,
//! in order, as a thin executor of [`crate::exchange`]: `stage` asks and hears through the
//! exchange, `taken` answers a message floodgate takes, `relay` relays one.

mod auth;
mod bdat;
pub mod client;
mod commands;
mod data;
mod deadline;
mod envelope;
pub mod held_expiry;
mod hold;
pub mod identity;
pub mod names;
pub mod notify;
pub mod pacer;
mod received;
mod relay;
pub mod release;
mod reroute;
pub mod session;
mod stage;
pub mod stream;
mod taken;
pub mod upstream;

pub use hold::refresh_gauges as refresh_hold_gauges;
pub use session::{ListenerInfo, Session, Shared};
pub use stream::Stream;
pub use upstream::{UpstreamError, UpstreamSettings};
