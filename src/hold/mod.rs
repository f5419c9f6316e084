//! The hold spool: messages floodgate accepted from the client but keeps instead of
//! relaying (`action = "hold"`), until an operator releases or deletes them or they expire.
//!
//! * [`format`](mod@format): the held file (pure: serialisation and parsing);
//! * [`spool`]: the directory (atomic writes, listing, claims, limits);
//! * [`pace`]: paced messages (`action = "pace"`) waiting for their automatic release;
//! * `settings`: `[hold]` compiled into [`HoldSettings`].

pub mod format;
pub mod pace;
mod settings;
pub mod spool;

pub use format::{FormatError, HeldMessage};
pub use spool::{HoldSettings, OnExpiry, Spool, SpoolError};
