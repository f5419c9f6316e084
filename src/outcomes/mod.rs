//! Upstream's outcomes after queueing: the queue id in upstream's answer
//! ([`queue_id`]), the index of queued messages ([`index`], kept in the event log by
//! [`journal`]), the smart host's log lines ([`logline`]) and the thread that follows the
//! log ([`follow`]), with its settings ([`settings`], `[outcomes]` compiled). Charging an
//! outcome to the limits is the policy's (`policy::outcomes`): this module knows nothing of
//! limits.
//!
//! # Which log can be trusted
//!
//! A line of the followed log charges the sender of a message, so the log must be written by
//! the smart host alone. [`logline`] reads each line by position, as the smart host writes
//! it, so text a remote server sends (its reply, logged inside Postfix's parentheses or after
//! Exim's `:`) never reads as a result, and [`index`] charges only a recipient the message
//! was accepted for, once per kind. What remains is who can write a whole line:
//!
//! * Postfix's own `maillog_file` (Postfix 3.4 and later, written by `postlogd` for Postfix's
//!   programs only) and Exim's main log file: only the smart host. Recommended.
//! * A syslog file: any local user can write to syslog under any program name
//!   (`logger -t postfix/smtp`), so the exact check of the program name does not tell such a
//!   line from Postfix's. A local user who knows a queue id and its recipients can charge
//!   that message's sender with a bounce or deferral per recipient (each once). Follow a
//!   syslog file only where no untrusted user has a local account.

pub mod follow;
pub mod index;
pub mod journal;
pub mod logline;
pub mod queue_id;
pub mod settings;

pub use settings::{compile, OutcomesSettings};

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the outcomes seen (log lines and admin reports).
#[derive(Debug, Default)]
pub struct Stats {
    /// Log lines read.
    pub lines: AtomicU64,
    /// Lines that are not delivery results.
    pub other_lines: AtomicU64,
    /// Lines that looked like delivery results but could not be read.
    pub unknown_lines: AtomicU64,
    /// Outcomes of queue ids floodgate did not relay (or no longer remembers).
    pub unknown_queue_ids: AtomicU64,
    /// Outcomes of an address the queued message was not accepted for (not counted).
    pub not_recipients: AtomicU64,
    /// Outcomes counted before (retries).
    pub duplicates: AtomicU64,
    /// Outcomes charged to limits.
    pub charged: AtomicU64,
    /// Outcomes with nothing to charge (deliveries, messages without keys to charge).
    pub uncharged: AtomicU64,
}

impl Stats {
    /// The counters as `(name, value)`.
    pub fn snapshot(&self) -> [(&'static str, u64); 8] {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("lines", g(&self.lines)),
            ("other_lines", g(&self.other_lines)),
            ("unknown_lines", g(&self.unknown_lines)),
            ("unknown_queue_ids", g(&self.unknown_queue_ids)),
            ("not_recipients", g(&self.not_recipients)),
            ("duplicates", g(&self.duplicates)),
            ("charged", g(&self.charged)),
            ("uncharged", g(&self.uncharged)),
        ]
    }
}
