//! The hold spool: messages floodgate accepted from the client but keeps instead of
//! relaying (`action = "hold"`), until an operator releases or deletes them or they expire.
//!
//! * [`format`](mod@format): the held file (pure: serialisation and parsing);
//! * [`read`]: reading a held file a part at a time (the envelope, the header section, the
//!   whole message), every length checked against the file's;
//! * [`index`]: the envelopes of held messages in memory, by id, key and user;
//! * [`spool`]: the directory (atomic writes, listing, claims, limits, damaged files set
//!   aside);
//! * [`dir`]: the checks of the directory's owner and mode at start;
//! * [`pace`]: paced messages (`action = "pace"`) waiting for their automatic release;
//! * [`postfix`]: held mail in Postfix's hold queue (the policy service and the milter);
//! * `settings`: `[hold]` compiled into [`HoldSettings`].

pub mod dir;
pub mod format;
pub mod index;
pub mod pace;
pub mod postfix;
pub mod read;
mod settings;
pub mod spool;

pub use format::{FormatError, HeldEnvelope, HeldHead, HeldMessage};
pub use spool::{HoldSettings, OnExpiry, Spool, SpoolError};
