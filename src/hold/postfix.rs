//! Held mail in Postfix's hold queue, for the front ends in Postfix's own path (the policy
//! service and the milter): the ledger of what floodgate told Postfix to hold, and the
//! messages themselves through Postfix's own commands.
//!
//! * [`line`](mod@line): the ledger file's lines (pure);
//! * [`ledger`]: the ledger: its file, appended to and compacted, indexed by queue id and by
//!   key;
//! * [`command`]: running one of Postfix's commands off the async workers, with a time
//!   limit;
//! * [`hold_queue`]: the hold queue: the ledger joined with `postqueue -j`, shown with
//!   `postcat -q`, released and deleted with `postsuper`;
//! * `settings`: `[postfix]` compiled into [`PostfixSettings`].

pub mod command;
pub mod hold_queue;
pub mod ledger;
pub mod line;
mod settings;

pub use command::CommandError;
pub use hold_queue::{HeldInPostfix, PostfixError, PostfixHold};
pub use ledger::{Ledger, LedgerError};
pub use line::{Done, How, LedgerEntry};
pub use settings::PostfixSettings;
