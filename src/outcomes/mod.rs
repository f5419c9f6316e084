//! Upstream's outcomes after queueing: the queue id in upstream's answer
//! ([`queue_id`]), the index of queued messages ([`index`], kept in the event log by
//! [`journal`]), the smart host's log lines ([`logline`]) and the task that follows the
//! log ([`follow`]), with its settings ([`settings`], `[outcomes]` compiled). Every
//! reported outcome — from the log or from `floodgate outcome` — goes through [`report`].

pub mod follow;
pub mod index;
pub mod journal;
pub mod logline;
pub mod queue_id;
pub mod settings;

pub use settings::{compile, OutcomesSettings};

use std::sync::atomic::{AtomicU64, Ordering};

use crate::policy::charge::{outcome_charge, OutcomeCharge};
use crate::policy::model::Counted;
use crate::policy::RatePolicy;
use crate::store::{now_micros, Decision, StoreError};

use index::Noted;
use logline::{Format, Kind, Line};

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
    /// Outcomes counted before (retries).
    pub duplicates: AtomicU64,
    /// Outcomes charged to limits.
    pub charged: AtomicU64,
    /// Outcomes with nothing to charge (deliveries, more recipients than the message had).
    pub uncharged: AtomicU64,
}

impl Stats {
    /// The counters as `(name, value)`.
    pub fn snapshot(&self) -> [(&'static str, u64); 7] {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("lines", g(&self.lines)),
            ("other_lines", g(&self.other_lines)),
            ("unknown_lines", g(&self.unknown_lines)),
            ("unknown_queue_ids", g(&self.unknown_queue_ids)),
            ("duplicates", g(&self.duplicates)),
            ("charged", g(&self.charged)),
            ("uncharged", g(&self.uncharged)),
        ]
    }
}

/// Reports one outcome of `recipient` (or its `original` address) of the message upstream
/// queued as `queue_id`: bounces and deferrals are charged to the keys that sent it, once
/// per recipient and kind.
pub async fn report(
    policy: &RatePolicy,
    queue_id: &str,
    recipient: &str,
    original: Option<&str>,
    kind: Kind,
) -> Result<Noted, StoreError> {
    let index = policy.queue_index();
    let stats = index.stats();
    let noted = index.note(queue_id, recipient, original, kind);
    let counter = match &noted {
        Noted::UnknownQueueId => &stats.unknown_queue_ids,
        Noted::Duplicate => &stats.duplicates,
        Noted::TooMany | Noted::Nothing => &stats.uncharged,
        Noted::Charge(_) => &stats.charged,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    if matches!(noted, Noted::Nothing | Noted::Charge(_)) {
        if let Some(o) = policy.observer() {
            o.outcome(queue_id, recipient, kind, now_micros());
        }
    }
    let Noted::Charge(keys) = &noted else {
        return Ok(noted);
    };
    let counted = match kind {
        Kind::Bounced => Counted::BouncedRecipients,
        Kind::Deferred => Counted::DeferredRecipients,
        Kind::Sent => return Ok(noted),
    };
    let model = policy.current();
    let store = policy.store();
    let mut d = Decision::default();
    for (limit, key) in keys {
        match outcome_charge(&model, limit, key, counted) {
            Some(OutcomeCharge::Rate(req)) => d.limits.push(req),
            Some(OutcomeCharge::Ratio(c)) => {
                store.ratio(&c.key, c.window, c.add).await?;
            }
            None => {}
        }
    }
    if !d.limits.is_empty() {
        store.decide(&d).await?;
    }
    Ok(noted)
}

/// Reads one line of the smart host's log in `format` and reports its outcome, if any.
pub async fn line(policy: &RatePolicy, format: Format, text: &str) {
    let stats = policy.queue_index().stats();
    stats.lines.fetch_add(1, Ordering::Relaxed);
    match format.line(text) {
        Line::Outcome(o) => {
            if let Err(e) = report(policy, o.queue_id, o.recipient, o.original, o.kind).await {
                tracing::warn!(error = %e, queue_id = o.queue_id, "outcome not charged");
            }
        }
        Line::Other => {
            stats.other_lines.fetch_add(1, Ordering::Relaxed);
        }
        Line::Unknown => {
            stats.unknown_lines.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                line = text,
                "smart host log line of an unknown shape skipped"
            );
        }
    }
}
