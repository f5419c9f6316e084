//! Charging upstream's outcomes after queueing: every reported outcome — from the smart
//! host's log ([`follow()`]) or from `floodgate outcome` — goes through [`report`], which
//! charges bounces and deferrals to the keys that sent the message.

use std::sync::atomic::Ordering;

use super::charge::{outcome_charge, OutcomeCharge};
use super::model::Counted;
use super::RatePolicy;
use crate::outcomes::follow::{self, FollowSettings, Running};
use crate::outcomes::index::Noted;
use crate::outcomes::logline::{Format, Kind, Line};
use crate::store::{now_micros, Decision, StoreError};

/// Reports one outcome of `recipient` (or its `original` address) of the message upstream
/// queued as `queue_id`: bounces and deferrals are charged to the keys that sent it, once
/// per recipient and kind, and only for a recipient upstream accepted in that transaction
/// (see [`crate::outcomes::index`]).
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
        Noted::NotRecipient => &stats.not_recipients,
        Noted::Duplicate => &stats.duplicates,
        Noted::Nothing => &stats.uncharged,
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

/// Starts following the smart host's log (`s.path`) on the current tokio runtime: every
/// line's outcome is reported to `policy`.
pub fn follow(policy: RatePolicy, s: FollowSettings) -> std::io::Result<Running> {
    let format = s.format;
    let (running, mut rx) = follow::start(&s)?;
    tokio::spawn(async move {
        while let Some(lines) = rx.recv().await {
            for l in lines {
                line(&policy, format, &l).await;
            }
        }
    });
    Ok(running)
}
