//! Holding (or pacing) a message floodgate takes: written with its envelope and client to
//! the hold spool, answered 250 once it is on disk; the spool's gauges, and the notice of a
//! spool that refused a message.

use std::sync::Arc;

use tracing::{info, warn};

use crate::hold::pace::{clock_ms, Paced};
use crate::hold::{HeldEnvelope, HeldMessage, Spool, SpoolError};
use crate::policy::{TakeOrder, TakenAnswer};
use crate::smtp::reply::Reply;

use super::envelope::Named;
use super::session::Shared;

/// Sets the hold spool's gauges from what it holds.
pub fn refresh_gauges(spool: &Spool, metrics: &crate::metrics::Metrics) {
    if let Ok((n, bytes)) = spool.usage() {
        metrics.hold.messages.set(n as i64);
        metrics.hold.bytes.set(bytes as i64);
    }
}

/// Writes the message of `envelope` and `body` to the hold spool, held or paced as `order`
/// says: `Ok` with the 250 the client gets once it is on disk; `Err` with the 451 it gets
/// instead, 4.3.1 when the spool is full (its limits, or its disk or quota), 4.3.0 when it
/// cannot be written otherwise (the client keeps the message and retries).
pub(super) async fn store(
    shared: &Shared,
    order: &TakeOrder,
    envelope: HeldEnvelope,
    body: Vec<u8>,
    who: &Named<'_>,
) -> Result<Reply, Reply> {
    let Some(spool) = shared.hold.clone() else {
        // The exchange keeps no order to hold without a hold spool.
        return Err(local_error(&shared.config().server.hostname));
    };
    let settings = spool.settings().clone();
    let held = HeldMessage::new(envelope, body);
    let paced = match &order.answer {
        TakenAnswer::Pace(rate) => Some(Paced {
            id: held.envelope.id.clone(),
            limit: order.limit.clone(),
            key: order.key.clone(),
            rate: *rate,
            weight: rate.weight(held.envelope.rcpts.len(), held.body.len()),
        }),
        _ => None,
    };
    let id = held.envelope.id.clone();
    let recipients = held.envelope.rcpts.len();
    match store_blocking(spool, held, shared.metrics.clone()).await {
        Ok(()) => {
            let stored = Stored {
                id: &id,
                recipients,
                size: who.size,
            };
            note_stored(shared, order, paced, &stored, who);
            Ok(Reply::new(250, format!("2.0.0 Ok: queued as {id}")))
        }
        Err(e) => Err(spool_refused(shared, &e, order, &settings, who)),
    }
}

/// Counts and logs a message on disk, held or paced (a paced one joins the pace book).
fn note_stored(
    shared: &Shared,
    order: &TakeOrder,
    paced: Option<Paced>,
    stored: &Stored<'_>,
    who: &Named<'_>,
) {
    let metrics = &shared.metrics;
    metrics.hold.held.inc();
    let (recipients, size, id) = (stored.recipients, stored.size, stored.id);
    if let Some(p) = paced {
        info!(
            client = %who.client,
            user = who.user,
            sender = who.sender,
            recipients,
            size,
            id = %id,
            limit = %order.limit,
            key = %order.key,
            rate = %p.rate,
            "message paced"
        );
        metrics.graded.paced.inc();
        shared.paced.add(p, clock_ms());
        metrics.graded.paced_waiting.set(shared.paced.len() as i64);
    } else {
        info!(
            client = %who.client,
            user = who.user,
            sender = who.sender,
            recipients,
            size,
            id = %id,
            limit = %order.limit,
            key = %order.key,
            "message held"
        );
    }
}

/// The spool did not take the message: counted, logged, the postmaster told (at most once
/// a minute); the client's answer, a 451, handed back.
fn spool_refused(
    shared: &Shared,
    e: &SpoolError,
    order: &TakeOrder,
    spool_settings: &crate::hold::HoldSettings,
    who: &Named<'_>,
) -> Reply {
    // Full (its limits, or its disk or quota) or unwritable: one count, and the
    // postmaster told (at most once a minute).
    shared.metrics.hold.refused.inc();
    warn!(client = %who.client, error = %e, full = e.is_full(), limit = %order.limit,
        key = %order.key, "message not held: deferred");
    let host = &shared.config().server.hostname;
    if FULL_NOTICES.due(crate::store::now_micros()) {
        shared
            .policy
            .notice(&spool_notice(e, order, spool_settings, host));
    }
    if e.is_full() {
        Reply::new(
            451,
            format!("4.3.1 {host} Insufficient system storage, try again later"),
        )
    } else {
        local_error(host)
    }
}

/// The 451 of a message that cannot be held now.
fn local_error(host: &str) -> Reply {
    Reply::new(
        451,
        format!("4.3.0 {host} Local error in processing, try again later"),
    )
}

/// A message the hold spool took: its id, and its counts for the log and the tally.
struct Stored<'a> {
    /// Its id in the spool.
    id: &'a str,
    /// Its recipients.
    recipients: usize,
    /// Its size as the client sent it.
    size: u64,
}

/// How often the spool's refusals are told to the alerts, at most (per node).
const FULL_NOTICE_EVERY_US: i64 = 60_000_000;

/// When the last spool notice of this node went out.
static FULL_NOTICES: NoticeClock = NoticeClock(std::sync::atomic::AtomicI64::new(i64::MIN));

/// A per-node clock that lets one notice through per [`FULL_NOTICE_EVERY_US`].
struct NoticeClock(std::sync::atomic::AtomicI64);

impl NoticeClock {
    /// Whether a notice is due at `now_us` (and, if so, marks it sent).
    fn due(&self, now_us: i64) -> bool {
        use std::sync::atomic::Ordering;
        let last = self.0.load(Ordering::Relaxed);
        now_us.saturating_sub(last) >= FULL_NOTICE_EVERY_US
            && self
                .0
                .compare_exchange(last, now_us, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// The alert of a message the spool refused: `{"event": "floodgate.spool_full"` (or
/// `floodgate.spool_failed` when it could not be written for another reason), `"host"`,
/// `"dir"`, `"max_messages"`, `"max_bytes"`, `"error"`, and the `"limit"` and `"key"` of the
/// message deferred (451) instead of held}.
pub fn spool_notice(
    e: &SpoolError,
    order: &TakeOrder,
    settings: &crate::hold::HoldSettings,
    host: &str,
) -> serde_json::Value {
    serde_json::json!({
        "event": if e.is_full() { "floodgate.spool_full" } else { "floodgate.spool_failed" },
        "host": host,
        "dir": settings.dir.display().to_string(),
        "max_messages": settings.max_messages,
        "max_bytes": settings.max_bytes,
        "error": e.to_string(),
        "limit": order.limit,
        "key": order.key,
    })
}

/// Stores `held` in the spool off the event loop, and updates the spool's gauges.
async fn store_blocking(
    spool: Arc<Spool>,
    held: HeldMessage,
    metrics: Arc<crate::metrics::Metrics>,
) -> Result<(), SpoolError> {
    tokio::task::spawn_blocking(move || {
        let stored = spool.store(&held);
        refresh_gauges(&spool, &metrics);
        stored
    })
    .await
    .unwrap_or_else(|e| {
        Err(SpoolError::Io {
            path: "hold spool".into(),
            source: std::io::Error::other(e.to_string()),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spool_notice_a_minute() {
        let clock = NoticeClock(std::sync::atomic::AtomicI64::new(i64::MIN));
        assert!(clock.due(1_000_000));
        assert!(!clock.due(1_000_001));
        assert!(!clock.due(60_999_999));
        assert!(clock.due(61_000_000));
    }

    #[test]
    fn the_spool_notice_names_the_spool_and_the_deferred_message() {
        let settings = crate::hold::HoldSettings {
            dir: "/var/lib/floodgate/hold".into(),
            max_bytes: 1 << 30,
            max_messages: 2,
            ttl: std::time::Duration::from_secs(3600),
            on_expiry: Default::default(),
        };
        let order = TakeOrder {
            limit: "per-user".into(),
            key: "alice".into(),
            answer: TakenAnswer::Hold,
        };
        let full = SpoolError::Full("2 messages (max_messages 2)".into());
        let v = spool_notice(&full, &order, &settings, "mx");
        assert_eq!(v["event"], "floodgate.spool_full");
        assert_eq!(v["dir"], "/var/lib/floodgate/hold");
        assert_eq!(v["max_messages"], 2);
        assert_eq!(
            (v["limit"].as_str(), v["key"].as_str()),
            (Some("per-user"), Some("alice"))
        );
    }
}
