//! The hold spool's expiry: every message past the spool's `ttl` gets its `on_expiry`
//! (released or deleted), each a log event and a metric; paced messages are left to the
//! pacer.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::hold::spool::now_secs;
use crate::hold::{OnExpiry, Spool, SpoolError};

use super::release::{blocking, delete_one, release_one, HeldError, ReleaseBy};
use super::Shared;

/// Applies the spool's `on_expiry` to every message past its `ttl`, every `every` until
/// `stop` fires; the spool in force is read from `shared` at each round (reloads).
pub async fn expire_loop(
    shared: impl Fn() -> Arc<Shared> + Send + 'static,
    stop: CancellationToken,
) {
    loop {
        let sh = shared();
        let every = sh.hold.as_ref().map_or(Duration::from_secs(60), |s| {
            (s.settings().ttl / 4).clamp(Duration::from_millis(500), Duration::from_secs(60))
        });
        if let Some(spool) = sh.hold.clone() {
            expire_once(&sh, &spool).await;
            super::hold::refresh_gauges(&spool, &sh.metrics);
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// One round of expiry.
pub async fn expire_once(shared: &Arc<Shared>, spool: &Arc<Spool>) {
    let s = spool.clone();
    // Paced messages are released by the pacer, not expired.
    let expired = match blocking(move || s.expired(now_secs())).await.map(|v| {
        v.into_iter()
            .filter(|m| m.envelope.paced.is_none())
            .collect::<Vec<_>>()
    }) {
        Ok(e) => e,
        Err(e) => {
            warn!(error = %e, "hold spool: cannot look for expired messages");
            return;
        }
    };
    let by = ReleaseBy {
        by: "expiry".into(),
        reason: "ttl passed".into(),
        note: None,
        at: now_secs() as i64,
    };
    for m in expired {
        let m = &m.envelope;
        let done = match spool.settings().on_expiry {
            OnExpiry::Delete => delete_one(shared, spool, &m.id, &by).await,
            OnExpiry::Release => release_one(shared, spool, &m.id, &by).await,
        };
        match done {
            Ok(()) => {
                shared.metrics.hold.expired.inc();
                info!(id = %m.id, key = %m.key, action = spool.settings().on_expiry.as_str(),
                    "held message expired");
            }
            // Set aside (logged and counted) or taken by another request meanwhile.
            Err(
                HeldError::Busy(_)
                | HeldError::NotFound(_)
                | HeldError::Spool(SpoolError::Corrupt { .. }),
            ) => {}
            Err(e) => warn!(id = %m.id, error = %e, "held message expired but stays held"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_errors_read_as_the_spools() {
        for e in [
            SpoolError::NotFound("a-1".into()),
            SpoolError::Busy("a-1".into()),
            SpoolError::Full("3 messages".into()),
        ] {
            let text = e.to_string();
            let held = HeldError::from(e);
            assert_eq!(held.to_string(), text);
        }
        assert!(matches!(
            HeldError::from(SpoolError::NotFound("x".into())),
            HeldError::NotFound(id) if id == "x"
        ));
        assert!(matches!(
            HeldError::from(SpoolError::Busy("x".into())),
            HeldError::Busy(id) if id == "x"
        ));
    }
}
