//! The pacer: releases paced messages (`action = "pace"`) from the hold spool at their
//! limit's rate, oldest first per key, through the release path. A release that fails
//! (upstream down, refusing) leaves the message held; its queue tries again after a backoff,
//! logged. Paced files are read back at start, so pacing outlives restarts.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::release::{release_one, HeldError, ReleaseBy};
use super::Shared;
use crate::hold::pace::{clock_ms, PaceBook, PaceRate, Paced};
use crate::hold::spool::now_secs;
use crate::hold::{Spool, SpoolError};

/// Queues every paced message of the spool in `book`, oldest first: at start, before any
/// session. Reads the files' envelopes only; a file that does not read is set aside by the
/// listing. Returns how many; unreadable pace rates are logged and left held.
pub fn load(spool: &Spool, book: &PaceBook) -> Result<usize, SpoolError> {
    let now = clock_ms();
    let mut n = 0;
    for h in spool.list()? {
        let m = &h.envelope;
        let Some(text) = &m.paced else { continue };
        match PaceRate::parse(text) {
            Ok(rate) => {
                book.add(
                    Paced {
                        id: m.id.clone(),
                        limit: m.limit.clone(),
                        key: m.key.clone(),
                        rate,
                        weight: rate
                            .weight(m.rcpts.len(), usize::try_from(h.size).unwrap_or(usize::MAX)),
                    },
                    now,
                );
                n += 1;
            }
            Err(e) => {
                warn!(id = %m.id, error = %e, "paced message with an unreadable rate: it stays held for an operator")
            }
        }
    }
    Ok(n)
}

/// The longest the pacer sleeps between two looks at its queues.
const MAX_SLEEP: Duration = Duration::from_millis(500);

/// Releases paced messages as their time comes, until `stop` fires; the spool and upstream
/// in force are read from `shared` at each round (reloads).
pub async fn pace_loop(
    shared: impl Fn() -> Arc<Shared> + Send + 'static,
    book: Arc<PaceBook>,
    stop: CancellationToken,
) {
    loop {
        let sh = shared();
        if let Some(spool) = sh.hold.clone() {
            for p in book.due(clock_ms()) {
                release_paced(&sh, &spool, &book, &p).await;
                if stop.is_cancelled() {
                    return;
                }
            }
        }
        sh.metrics.graded.paced_waiting.set(book.len() as i64);
        let wait = book
            .next_due()
            .map_or(MAX_SLEEP, |t| {
                Duration::from_millis(t.saturating_sub(clock_ms()))
            })
            .clamp(Duration::from_millis(10), MAX_SLEEP);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Releases one paced message and tells the book how it went.
async fn release_paced(sh: &Arc<Shared>, spool: &Arc<Spool>, book: &PaceBook, p: &Paced) {
    let by = ReleaseBy {
        by: "pace".into(),
        reason: format!("paced by limit {} at {}", p.limit, p.rate),
        note: None,
        at: now_secs() as i64,
    };
    match release_one(sh, spool, &p.id, &by).await {
        Ok(()) => {
            book.released(p, clock_ms());
            sh.metrics.graded.paced_released.inc();
            info!(id = %p.id, limit = %p.limit, key = %p.key, waiting = book.len(), "paced message released");
        }
        Err(HeldError::NotFound(_)) => {
            // Released or deleted by an operator meanwhile.
            book.gone(p);
            info!(id = %p.id, limit = %p.limit, key = %p.key, "paced message no longer held: dropped from its queue");
        }
        Err(e) => {
            let wait = book.failed(p, clock_ms());
            sh.metrics.graded.paced_retries.inc();
            warn!(id = %p.id, limit = %p.limit, key = %p.key, error = %e,
                retry_in_s = wait.as_secs(), "paced message not released: it stays held and is tried again");
        }
    }
}
