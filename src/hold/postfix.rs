//! Held mail in Postfix's hold queue, for the front ends in Postfix's own path (the policy
//! service and the milter): the ledger of what floodgate told Postfix to hold, and the
//! messages themselves through Postfix's own commands.
//!
//! * [`line`]: the ledger file's lines (pure);
//! * [`ledger`]: the ledger: its file, appended to and compacted, indexed by queue id and by
//!   key.

pub mod ledger;
pub mod line;

pub use ledger::{Ledger, LedgerError};
pub use line::{Done, How, LedgerEntry};
